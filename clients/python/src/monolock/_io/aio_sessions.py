"""The asyncio client's protocol v2 sessions: a pool per event loop,
each session an `asyncio.Protocol` over the same sans-I/O core as the sync
client (`_core/session.py`), following the same pool rules
(`_core/pool.py`).

Bytes go from `data_received` straight into the core; what the core
queues leaves in one `transport.write` per step (the transport buffers:
nothing blocks the loop); one `call_at` timer per session fires at the
next PING, the deadline or the end of its idle time. No thread is used.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

from .._core import pool as rules
from .._core.address import Address
from .._core.claim import Status
from .._core.pool import (
    PLAIN_ADDRESSES,
    V1_ADDRESSES,
    DialFailed,
    NoExtension,
    PoolKey,
    V1Only,
    pool_key,
)
from .._core.session import (
    ClaimState,
    CStatus,
    SessionCore,
    SState,
    owner_view,
    release_unconfirmed,
    session_closed_unconfirmed,
)
from ..errors import ConnectError, LockLost
from .aio_v1 import resolve as _resolve
from .connect import Endpoints
from .reactor import current_pid


class AsyncSession(asyncio.Protocol):
    """One v2 session on an event loop."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        pool: AsyncPool,
        key: PoolKey,
        address: Address,
        lease_ms: int,
    ) -> None:
        # Weakly: the pool that holds this session is looked up by its loop,
        # and must not keep that loop alive.
        self._loop = weakref.ref(loop)
        self.pool = pool
        self.key = key
        self.address = address
        self.pid = current_pid()
        self.hello = not PLAIN_ADDRESSES.is_v1(key, time.monotonic_ns())
        self.core = SessionCore(lease_ms, time.monotonic_ns(), self.hello)
        self.transport: Optional[asyncio.Transport] = None
        self.closed = False
        self.full = False
        self._waiters: List["asyncio.Future[None]"] = []
        self._timer: Optional[asyncio.TimerHandle] = None
        self._timer_at = 0

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop()
        if loop is None:
            raise RuntimeError("the session's event loop is gone")
        return loop

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        # S: the OPEN's send
        self.core = SessionCore(self.core.lease_ms, time.monotonic_ns(), self.hello)
        self.settle()

    def data_received(self, data: bytes) -> None:
        self.core.receive(data, time.monotonic_ns())
        self.settle()

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost reports it

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.core.closed(exc)
        self.settle()

    # the session

    def settle(self) -> None:
        """After the core changed: signal ended claims, wake waiters, send
        what it queued, and close or reschedule."""
        core = self.core
        if core.changed:
            for claim in core.changed:
                if not isinstance(claim, ClaimState):
                    continue  # watches and lookups: their owners wait on the session
                if isinstance(claim.watch, AsyncV2Claim):
                    claim.watch.on_change()
                if not claim.live and claim.status is not CStatus.REFUSED:
                    self.full = False  # a claim ended: room again
            core.changed.clear()
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            _resolve(waiter)
        if core.state is SState.CLOSED:
            self.close()
            return
        if core.outbox and self.transport is not None:
            self.transport.write(bytes(core.outbox))
            core.outbox.clear()
        self._reschedule()

    def check(self) -> None:
        if self.core.state is not SState.CLOSED:
            self.core.check(time.monotonic_ns())
            if self.core.is_closed():
                self.settle()

    def fail(self, loss: LockLost) -> None:
        """Ends the session for `loss` (see `SessionCore.fail`)."""
        self.core.fail(loss)
        self.settle()

    def close(self) -> None:
        """Ends the connection (from the loop's thread)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.pool.forget(self)
        if self.closed:
            return
        self.closed = True
        if self.core.state is not SState.CLOSED:
            self.core.fail(LockLost.connection())
            self.settle()
        if self.transport is not None:
            self.transport.close()

    def _reschedule(self) -> None:
        wake = rules.next_wake(self.core)
        if self._timer is not None:
            if wake is not None and self._timer_at <= wake:
                return  # fires early, then looks again: no new timer per frame
            self._timer.cancel()
            self._timer = None
        if wake is not None:
            delay = max(wake - time.monotonic_ns(), 0) / 1e9
            self._timer_at = wake
            self._timer = self.loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self.closed:
            return
        now = time.monotonic_ns()
        core = self.core
        core.ping_due(now)
        if rules.idle_over(core, now):
            self.close()
            return
        self.settle()

    async def changed(self, limit: Optional[int]) -> None:
        """Returns on the session's next change or at the instant `limit`."""
        future = self.loop.create_future()
        self._waiters.append(future)
        timer = None
        if limit is not None:
            timer = self.loop.call_later(max(limit - time.monotonic_ns(), 0) / 1e9, _resolve, future)
        try:
            await future
        finally:
            if timer is not None:
                timer.cancel()


class AsyncV2Claim:
    """A claim on a session: what an `AsyncLock` holds with v2."""

    __slots__ = ("session", "claim", "lost_event", "released", "io_timeout", "_waiters", "__weakref__")

    def __init__(self, session: AsyncSession, claim: ClaimState, io_timeout: float) -> None:
        self.session = session
        self.claim = claim
        self.lost_event = asyncio.Event()
        claim.watch = self
        self.released = False
        self.io_timeout = io_timeout
        #: Tasks waiting for this claim's next change: only they wake.
        self._waiters: List["asyncio.Future[None]"] = []

    def on_change(self) -> None:
        """The server changed this claim: wake its waiters, signal a loss."""
        if self.claim.status is CStatus.LOST and not self.released:
            self.lost_event.set()  # an unconfirmed release is no loss to signal
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            _resolve(waiter)

    async def _changed(self, limit: Optional[int]) -> None:
        """Returns on this claim's next change (a session's end changes
        every claim) or at the instant `limit`."""
        future = self.session.loop.create_future()
        self._waiters.append(future)
        timer = None
        if limit is not None:
            delay = max(limit - time.monotonic_ns(), 0) / 1e9
            timer = self.session.loop.call_later(delay, _resolve, future)
        try:
            await future
        finally:
            if timer is not None:
                timer.cancel()

    @property
    def lease_ms(self) -> int:
        return self.session.core.lease_ms

    def deadline_ns(self) -> int:
        return self.session.core.deadline()

    @property
    def loss(self) -> Optional[LockLost]:
        return self.claim.loss

    def status(self) -> Status:
        if self.claim.live:
            self.session.check()
        return owner_view(self.claim, self.released)

    async def wait_until(
        self, ready: Callable[[Status], bool], until: Optional[int]
    ) -> Tuple[Status, bool]:
        while True:
            status = self.status()
            if status is Status.LOST or ready(status):
                return status, False
            limit = None
            if until is not None:
                if time.monotonic_ns() >= until:
                    return status, True
                if until < self.session.core.deadline():
                    limit = until
            # The deadline needs no timer here: the session's own timer ends
            # the session at it, which changes every claim.
            await self._changed(limit)

    def release(self) -> Optional[LockLost]:
        """Sends RELEASE without waiting for the confirmation."""
        if current_pid() != self.session.pid:
            self.released = True
            return None
        self.status()
        if not self.released:
            self.released = True
            self.session.core.release(self.claim, time.monotonic_ns())
            self.session.settle()
        return self.claim.loss

    async def release_confirmed(self) -> Optional[LockLost]:
        """Sends RELEASE and returns once RELEASED is read (or the session
        ended), within `io_timeout`; past it the session is closed and the
        release reported unconfirmed (a loss, `connection`)."""
        loss = self.release()
        if loss is not None or current_pid() != self.session.pid:
            return loss
        until = time.monotonic_ns() + int(self.io_timeout * 1e9)
        while self.claim.live:
            if time.monotonic_ns() >= until:
                # Closing the session releases the lock too, unconfirmed.
                self.session.fail(session_closed_unconfirmed())
                return release_unconfirmed(self.io_timeout).for_lock(self.claim.name)
            await self._changed(until)
        return self.claim.loss

    async def proclaim(self, raw_value: bytes) -> Optional[LockLost]:
        """Sends PROCLAIM of the claim's new value and returns once the
        server answered it (or the claim ended): None when PROCLAIMED was
        read, else why the claim is no longer held."""
        claim = self.claim
        self.status()
        target = 0 if self.released else self.session.core.proclaim(claim, raw_value, time.monotonic_ns())
        if target == 0:
            return claim.loss or LockLost.released().for_lock(claim.name)
        self.session.settle()
        while claim.proclaims_done < target and claim.live:
            self.session.check()
            if not claim.live:
                break
            # The session's own timer ends it at its deadline, which wakes us.
            await self.session.changed(None)
        if claim.status is not CStatus.HELD or self.released:
            return claim.loss or LockLost.released().for_lock(claim.name)
        claim.value = raw_value.decode("utf-8")
        return None

    def release_from_gc(self) -> None:
        """From `__del__`: the release is made on the loop's thread."""
        if self.released or current_pid() != self.session.pid:
            return
        try:
            loop = self.session.loop
            if loop.is_closed():
                return
            loop.call_soon_threadsafe(self.release)
        except RuntimeError:
            pass  # the loop is gone


class AsyncPool:
    """One event loop's sessions, by server and lease."""

    def __init__(self) -> None:
        self.pid = current_pid()
        self.sessions: Dict[PoolKey, List[AsyncSession]] = {}
        self.opening: Dict[Tuple[PoolKey, int], "asyncio.Future[None]"] = {}
        #: Lives while the pool has sessions: `asyncio.run` (and any runner
        #: that cancels what is left) ends it as the loop shuts down, and it
        #: closes every session then, instead of leaving the sockets to GC.
        self._keeper: Optional["asyncio.Task[None]"] = None
        self._empty: Optional["asyncio.Future[None]"] = None

    def add(self, session: AsyncSession) -> None:
        self.sessions.setdefault(session.key, []).append(session)
        if self._keeper is None:
            loop = session.loop
            self._empty = loop.create_future()
            self._keeper = loop.create_task(self._keep(self._empty), name="monolock-sessions")

    async def _keep(self, empty: "asyncio.Future[None]") -> None:
        try:
            await empty
        finally:
            for sessions in list(self.sessions.values()):
                for session in list(sessions):
                    session.close()

    def forget(self, session: AsyncSession) -> None:
        sessions = self.sessions.get(session.key)
        if sessions is not None and session in sessions:
            sessions.remove(session)
            if not sessions:
                del self.sessions[session.key]
        if not self.sessions and self._empty is not None:
            _resolve(self._empty)
            self._keeper = self._empty = None

    async def session(
        self,
        endpoints: Endpoints,
        address: Address,
        lease_ms: int,
        extension: bool = False,
        watch: bool = False,
    ) -> AsyncSession:
        """As the sync pool's `session`."""
        key = pool_key(endpoints, address)
        while True:
            sessions = self.sessions.setdefault(key, [])
            if watch:
                found = rules.with_watch_room(sessions)
            else:
                found = rules.with_room(sessions, lease_ms, extension)
            if found is not None:
                return found
            opening = self.opening.get((key, lease_ms))
            if opening is not None:
                await asyncio.shield(opening)
                continue
            evicted = rules.to_evict(sessions, address)
            if evicted is not None:
                evicted.close()
            opening = self.opening[(key, lease_ms)] = asyncio.get_running_loop().create_future()
            try:
                session = await self._open(endpoints, address, key, lease_ms)
                self.add(session)
                return session
            finally:
                del self.opening[(key, lease_ms)]
                _resolve(opening)

    async def _open(
        self, endpoints: Endpoints, address: Address, key: PoolKey, lease_ms: int
    ) -> AsyncSession:
        loop = asyncio.get_running_loop()
        session = AsyncSession(loop, self, key, address, lease_ms)
        tls: Any = {}
        if endpoints._ssl_context is not None:
            tls = {"ssl": endpoints._ssl_context, "server_hostname": endpoints._hostname(address)}
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: session, address.host, address.port, **tls),
                endpoints._connect_timeout,
            )
        except (OSError, ssl.SSLError, asyncio.TimeoutError) as err:
            if session.transport is not None:
                session.transport.abort()
            raise DialFailed(str(err)) from err
        except BaseException:
            if session.transport is not None:
                session.transport.abort()
            raise
        # A server answers at once: silence past the connect timeout is a
        # peer that is no monolock server (or one that cannot serve).
        answer_by = time.monotonic_ns() + int(endpoints._connect_timeout * 1e9)
        try:
            while session.core.state is SState.OPENING:
                session.check()
                if session.core.is_closed():
                    break
                if time.monotonic_ns() >= answer_by:
                    session.close()
                    raise ConnectError(
                        f"{address} did not answer within {endpoints._connect_timeout:g} s",
                        [str(address)],
                    )
                await session.changed(min(session.core.deadline(), answer_by))
        except BaseException:
            session.close()
            raise
        core = session.core
        if core.state is not SState.OPEN:
            session.close()
            if core.v1_only:
                V1_ADDRESSES.remember(key, time.monotonic_ns())
                raise V1Only()
            if core.no_extension:
                PLAIN_ADDRESSES.remember(key, time.monotonic_ns())
                raise NoExtension()
            raise core.loss or LockLost.connection()
        return session


_pools: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncPool]" = weakref.WeakKeyDictionary()


def pool() -> AsyncPool:
    """The running loop's pool (a new one in a forked child)."""
    loop = asyncio.get_running_loop()
    found = _pools.get(loop)
    if found is None or found.pid != current_pid():
        found = _pools[loop] = AsyncPool()
    return found
