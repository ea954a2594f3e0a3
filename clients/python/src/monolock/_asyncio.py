"""The asyncio client: `AsyncClient`, and the `AsyncLock` it hands out.

Each claim is an `asyncio.Protocol` on the caller's event loop: bytes go
straight from `data_received` into the claim machine, and one `call_at`
timer per claim fires at the next heartbeat or the deadline. Nothing
blocks the loop, and no thread is involved.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from types import TracebackType
from typing import Any, Callable, Generator, List, Optional, Tuple, Type, Union

from . import _frames, _frames2, _v2async, _v2sync
from ._address import Address
from ._claim import Claim, Status
from ._connect import Endpoints, Failures, first_reply_error
from ._session import TOO_MANY_CLAIMS, CStatus
from ._sync import _RETRY, DEFAULT_LEASE, _not_enterable
from ._timeouts import bound_ns
from .errors import ConnectError, LockLost, NotAcquired


def _resolve(future: "asyncio.Future[None]") -> None:
    if not future.done():
        future.set_result(None)


class _Driver(asyncio.Protocol):
    """The permanent reader and heartbeat timer of one connection."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: Optional[asyncio.Transport] = None
        self.claim: Optional[Claim] = None
        self.released = False
        self.lost_event = asyncio.Event()
        #: Futures of tasks waiting for a change, resolved on each one.
        self._waiters: List["asyncio.Future[None]"] = []
        self._timer: Optional[asyncio.TimerHandle] = None
        #: Resolved once the connection is closed (the server's EOF read).
        self._closed: "asyncio.Future[None]" = loop.create_future()
        #: How long a release waits for the server's EOF, in seconds.
        self.io_timeout = 5.0

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        claim = self.claim
        if claim is None or self.released:
            return
        was_lost = claim.status is Status.LOST
        claim.receive(data, time.monotonic_ns())
        self._after(was_lost)

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost reports it

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._cancel_timer()
        _resolve(self._closed)
        claim = self.claim
        if claim is None or self.released:
            return
        was_lost = claim.status is Status.LOST
        claim.closed(exc)
        self._after(was_lost)

    # the claim

    def start(self, claim: Claim, acquire: bytes) -> None:
        """Sends the ACQUIRE (its send instant is the claim's)."""
        assert self.transport is not None
        self.claim = claim
        self.transport.write(acquire)
        self._reschedule()

    def status(self) -> Status:
        """The status after checking the deadline against the clock now."""
        claim = self.claim
        assert claim is not None
        if self.released:
            return claim.status  # a released claim is over, not lost
        was_lost = claim.status is Status.LOST
        claim.check(time.monotonic_ns())
        if not was_lost and claim.status is Status.LOST:
            self._after(False)
        return claim.status

    def _after(self, was_lost: bool) -> None:
        """After the claim changed: wake waiters; close on loss."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            _resolve(waiter)
        claim = self.claim
        assert claim is not None
        if claim.status is Status.LOST:
            self._cancel_timer()
            if not was_lost:
                self.lost_event.set()
                self.close()
        else:
            self._reschedule()

    def _reschedule(self) -> None:
        self._cancel_timer()
        assert self.claim is not None
        wake = self.claim.next_wake()
        if wake is not None:
            delay = max(wake - time.monotonic_ns(), 0) / 1e9
            self._timer = self.loop.call_later(delay, self._on_timer)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        claim = self.claim
        if claim is None or self.released or self.transport is None:
            return
        was_lost = claim.status is Status.LOST
        now = time.monotonic_ns()
        if claim.heartbeat_due(now):
            # The transport buffers: a write never blocks the loop.
            self.transport.write(_frames.HEARTBEAT)
            claim.heartbeat_sent(now)
        self._after(was_lost)

    async def wait_until(self, ready: Callable[[Status], bool], until: Optional[int]) -> Tuple[Status, bool]:
        """Waits until `ready(status)`, the loss, or the instant `until`
        (monotonic ns). Returns the status and whether `until` passed."""
        claim = self.claim
        assert claim is not None
        while True:
            status = self.status()
            if status is Status.LOST or ready(status):
                return status, False
            now = time.monotonic_ns()
            limit = claim.deadline()
            if until is not None:
                if now >= until:
                    return status, True
                limit = min(limit, until)
            # A plain future and a timer rather than `asyncio.wait_for`, whose
            # cancellation races differ between Python versions: cancelling
            # the caller must always give the place up.
            changed = self.loop.create_future()
            self._waiters.append(changed)
            timer = self.loop.call_later(max(limit - now, 0) / 1e9, _resolve, changed)
            try:
                await changed
            finally:
                timer.cancel()

    def close(self) -> None:
        """Ends the connection now: FIN at once, from any thread."""
        transport = self.transport
        if transport is None:
            return
        try:
            on_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            transport.close()
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        try:
            if self.loop.is_closed():
                return
            self.loop.call_soon_threadsafe(transport.close)
        except RuntimeError:
            pass  # the loop is gone; the socket is shut down already

    @property
    def lease_ms(self) -> int:
        assert self.claim is not None
        return self.claim.lease_ms

    def deadline_ns(self) -> int:
        assert self.claim is not None
        return self.claim.deadline()

    @property
    def loss(self) -> Optional[LockLost]:
        return None if self.claim is None else self.claim.loss

    async def release_confirmed(self) -> Optional[LockLost]:
        """v1 has no release frame: shuts the write side down and waits for
        the server's EOF (the server releases before it closes), at most
        `io_timeout`; past it the connection is closed and the release
        reported as unconfirmed (a loss, `connection`)."""
        loss = None
        if self.claim is not None:
            self.status()
            loss = self.claim.loss
        transport = self.transport
        if self.released or loss is not None or transport is None:
            return self.release()
        self.released = True
        self._cancel_timer()
        try:
            if transport.can_write_eof():
                transport.write_eof()
            else:
                # TLS transports cannot half-close: the socket itself can,
                # and the server's EOF still reaches the protocol.
                sock = transport.get_extra_info("socket")
                if sock is None:
                    transport.close()
                else:
                    sock.shutdown(socket.SHUT_WR)
            await asyncio.wait_for(asyncio.shield(self._closed), self.io_timeout)
        except asyncio.TimeoutError:
            self.close()
            assert self.claim is not None
            return LockLost.connection(
                TimeoutError(f"the server did not confirm the release within {self.io_timeout}s")
            ).for_lock(self.claim.name)
        except (OSError, RuntimeError):
            self.close()  # the transport failed: the connection is over anyway
        return None

    def release_from_gc(self) -> None:
        self.released = True
        self.close()

    def release(self) -> Optional[LockLost]:
        """Closes the connection; returns the loss that ended the claim
        before, if one did. Idempotent."""
        if self.claim is not None:
            self.status()
        loss = self.claim.loss if self.claim is not None else None
        if not self.released:
            self.released = True
            self._cancel_timer()
            self.close()
        return loss


#: What an `AsyncLock` holds: its own v1 connection, or a v2 session's claim.
AsyncHandle = Union[_Driver, "_v2async.AsyncV2Claim"]


class AsyncLock:
    """A held lock, for asyncio: the same contract and attributes as
    `monolock.Lock`; `await lost()` resolves on loss."""

    __slots__ = ("_driver", "_name", "_token", "_address", "__weakref__")

    def __init__(self, driver: "AsyncHandle", name: str, token: int, address: Address) -> None:
        self._driver = driver
        self._name = name
        self._token = token
        self._address = address

    @property
    def name(self) -> str:
        """The lock's name."""
        return self._name

    @property
    def token(self) -> int:
        """The fencing token of this grant."""
        return self._token

    @property
    def lease(self) -> float:
        """The session's lease in seconds (as sent: whole milliseconds)."""
        return self._driver.lease_ms / 1000

    @property
    def address(self) -> str:
        """The server that granted the lock."""
        return str(self._address)

    @property
    def deadline(self) -> float:
        """`S + 0.8 x lease` on `time.monotonic()`."""
        return self._driver.deadline_ns() / 1e9

    def is_held(self) -> bool:
        """Whether the lock is still held, judged against the clock now."""
        return self._driver.status() is Status.HELD and not self._driver.released

    def check(self) -> None:
        """Raises LockLost when the lock is not held."""
        if not self.is_held():
            raise (self._driver.loss or LockLost.released()).with_traceback(None)

    @property
    def loss(self) -> Optional[LockLost]:
        """Why the lock was lost, or None while it is held."""
        self._driver.status()
        return self._driver.loss

    @property
    def lost_event(self) -> asyncio.Event:
        """An `asyncio.Event` set the moment the lock is lost."""
        return self._driver.lost_event

    async def lost(self) -> LockLost:
        """Resolves when the lock is lost, with why. Many tasks may await it."""
        while True:
            await self._driver.wait_until(lambda _: False, None)
            loss = self._driver.loss
            if loss is not None:
                return loss
            await self._driver.lost_event.wait()  # released: only a loss resolves this

    async def release(self) -> None:
        """Releases the lock and returns once the server has confirmed it
        (within the client's `connect_timeout`; past it the session is
        closed, which releases the lock too). Raises LockLost when the lock
        had been lost before the release."""
        loss = await self._driver.release_confirmed()
        if loss is not None:
            raise loss.with_traceback(None)

    async def __aenter__(self) -> AsyncLock:
        """Raises LockLost when the lock is no longer held (released, or
        lost): an `async with` block never runs its body without the lock."""
        if not self.is_held():
            raise _not_enterable(self._name, self._driver.loss)
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if exc is None:
            loss = await self._driver.release_confirmed()
        else:
            # A failing or cancelled block does not wait: the RELEASE is
            # sent at once and the exception goes on.
            loss = self._driver.release()
        if loss is not None and exc is None:
            raise loss.with_traceback(None)

    def __del__(self) -> None:
        driver = getattr(self, "_driver", None)
        if driver is not None and not driver.released:
            try:
                driver.release_from_gc()
            except Exception:  # at interpreter exit; the kernel closes the socket
                pass

    def __repr__(self) -> str:
        return f"<monolock.AsyncLock name={self._name!r} token={self._token}>"


class _Acquiring:
    """What `AsyncClient.lock` returns: await it for the lock, or use it
    directly in `async with`."""

    def __init__(self, acquire: Callable[[], Any]) -> None:
        self._acquire = acquire
        self._lock: Optional[AsyncLock] = None

    def __await__(self) -> Generator[Any, None, AsyncLock]:
        return self._acquire().__await__()  # type: ignore[no-any-return]

    async def __aenter__(self) -> AsyncLock:
        self._lock = await self._acquire()
        assert self._lock is not None
        return self._lock

    async def __aexit__(self, *exc_info: Any) -> None:
        assert self._lock is not None
        await self._lock.__aexit__(*exc_info)


class AsyncClient(Endpoints):
    """The asyncio sibling of `monolock.Client`: the same arguments, the
    same rules; locks live on the event loop that acquired them."""

    def lock(self, name: str, lease: float = DEFAULT_LEASE, *, wait: Optional[float] = None) -> _Acquiring:
        """Waits for the lock in its FIFO queue: `lock = await
        client.lock(...)` or `async with client.lock(...) as lock:`. Raises
        as `Client.lock` does. Cancelling the wait gives the place up."""
        raw_name = _frames.encode_name(name)
        lease_ms = _frames.lease_ms(lease)
        wait_ns = bound_ns(wait, "wait")
        return _Acquiring(lambda: self._acquire(name, raw_name, lease_ms, wait, wait_ns, False))

    async def try_lock(self, name: str, lease: float = DEFAULT_LEASE) -> Optional[AsyncLock]:
        """Takes the lock if it is free; None if someone holds it (nothing
        is left queued)."""
        raw_name = _frames.encode_name(name)
        lease_ms = _frames.lease_ms(lease)
        return await self._acquire(name, raw_name, lease_ms, None, None, True)

    async def _acquire(
        self,
        name: str,
        raw_name: bytes,
        lease_ms: int,
        wait: Optional[float],
        wait_ns: Optional[int],
        give_up_when_queued: bool,
    ) -> Optional[AsyncLock]:
        start = time.monotonic_ns()
        args = (name, raw_name, lease_ms, wait, wait_ns, start, give_up_when_queued)
        if self._force_v1:
            return await self._acquire_v1(*args, None)
        failures = Failures(self)
        pool = _v2async.pool()
        for address in self._addresses:
            key = _v2sync.pool_key(self, address)
            if _v2sync.POOL.is_v1(key):
                try:
                    return await self._acquire_v1(*args, (address,))
                except ConnectError as err:
                    _v2sync.POOL.forget_v1(key)
                    failures.add(address, err.__cause__ or err)
                    continue
            # As in the sync client: a claim the server never saw, or refused
            # for the session's claim bound, goes again on another session.
            for _ in range(_v2sync.MAX_SESSIONS_PER_ADDRESS + 2):
                try:
                    session = await pool.session(self, address, lease_ms)
                except _v2sync.DialFailed as err:
                    failures.add(address, err.__cause__ or err)
                    break
                except _v2sync.V1Only:
                    return await self._acquire_v1(*args, (address,))
                except LockLost as loss:
                    error = first_reply_error(address, loss)
                    if error is None:
                        raise
                    raise error  # its cause is the TLS alert, or what answered
                result = await self._acquire_v2(
                    session, name, raw_name, wait, wait_ns, start, give_up_when_queued
                )
                if result is not _RETRY:
                    return result  # type: ignore[return-value]
            else:
                raise _v2sync.sessions_full(address)
        raise failures.error()

    async def _acquire_v2(
        self,
        session: _v2async.AsyncSession,
        name: str,
        raw_name: bytes,
        wait: Optional[float],
        wait_ns: Optional[int],
        start: int,
        give_up_when_queued: bool,
    ) -> object:
        """One claim on `session`: the lock, None (a try found it busy), or
        _RETRY (the session could not take it: full, or closed as idle)."""
        mode = _frames2.MODE_TRY if give_up_when_queued else _frames2.MODE_WAIT
        claim = session.core.acquire(name, raw_name, mode, time.monotonic_ns())
        handle = _v2async.AsyncV2Claim(session, claim, self._connect_timeout)
        # From here on the claim exists: whatever ends this call without
        # handing a lock over, a cancellation included, releases it.
        try:
            session.settle()
            status, _ = await handle.wait_until(lambda s: s is not Status.UNANSWERED, None)
            if claim.status is CStatus.BUSY:
                return None
            if claim.status is CStatus.REFUSED:
                refused = claim.refused or LockLost.connection()
                if refused.code == TOO_MANY_CLAIMS:
                    session.full = True
                    return _RETRY
                raise refused
            if status is Status.WAITING:
                until = None if wait_ns is None else start + wait_ns
                status, timed_out = await handle.wait_until(lambda s: s is Status.HELD, until)
                if timed_out:
                    raise NotAcquired(name, wait if wait is not None else 0.0)
            if status is not Status.HELD:
                if _v2sync.never_seen(claim):
                    return _RETRY
                raise claim.loss or LockLost.connection()
            token = claim.token
            assert token is not None
            return AsyncLock(handle, name, token, session.address)
        except BaseException:
            handle.release()
            raise

    async def _acquire_v1(
        self,
        name: str,
        raw_name: bytes,
        lease_ms: int,
        wait: Optional[float],
        wait_ns: Optional[int],
        start: int,
        give_up_when_queued: bool,
        addresses: Optional[Tuple[Address, ...]],
    ) -> Optional[AsyncLock]:
        """One claim on its own connection (protocol v1)."""
        frame = _frames.acquire(raw_name, lease_ms)
        driver, address = await self._connect(addresses)
        # From here on the connection is a claim: whatever ends this call
        # without handing a lock over, a cancellation included, ends it.
        try:
            sent = time.monotonic_ns()
            driver.io_timeout = self._connect_timeout
            driver.start(Claim(name, lease_ms, sent), frame)
            # A server answers at once: silence past the connect timeout is
            # a peer that is no monolock server (or one that cannot serve).
            answer_by = sent + int(self._connect_timeout * 1e9)
            status, silent = await driver.wait_until(lambda s: s is not Status.UNANSWERED, answer_by)
            if silent:
                raise ConnectError(
                    f"{address} did not answer within {self._connect_timeout:g} s", [str(address)]
                )
            if status is Status.WAITING and give_up_when_queued:
                # Leaves no trace in the queue by the time it returns.
                await driver.release_confirmed()
                return None
            if status is Status.WAITING and not give_up_when_queued:
                until = None if wait_ns is None else start + wait_ns
                status, timed_out = await driver.wait_until(lambda s: s is Status.HELD, until)
                if timed_out:
                    raise NotAcquired(name, wait if wait is not None else 0.0)
        except BaseException:
            driver.release()
            raise
        claim = driver.claim
        assert claim is not None
        if status is Status.HELD and claim.token is not None:
            return AsyncLock(driver, name, claim.token, address)
        driver.release()
        if status is Status.LOST:
            loss = claim.loss or LockLost.connection()
            raise first_reply_error(address, loss) or loss
        return None

    async def _connect(self, addresses: Optional[Tuple[Address, ...]]) -> Tuple[_Driver, Address]:
        loop = asyncio.get_running_loop()
        failures = Failures(self)
        for address in self._addresses if addresses is None else addresses:
            driver = _Driver(loop)
            tls: Any = {}
            if self._ssl_context is not None:
                tls = {"ssl": self._ssl_context, "server_hostname": self._hostname(address)}
            try:
                await asyncio.wait_for(
                    loop.create_connection(lambda: driver, address.host, address.port, **tls),
                    self._connect_timeout,
                )
            except (OSError, ssl.SSLError, asyncio.TimeoutError) as err:
                if driver.transport is not None:
                    driver.transport.abort()
                failures.add(address, err)
                continue
            except BaseException:
                # Cancelled as the connection completed: nothing stays open.
                if driver.transport is not None:
                    driver.transport.abort()
                raise
            return driver, address
        raise failures.error()
