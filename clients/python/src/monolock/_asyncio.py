"""The asyncio client: `AsyncClient`, and the `AsyncLock` it hands out.

Claims ride on v2 sessions, each an `asyncio.Protocol` on the caller's
event loop (`_io/aio_sessions.py`), or on their own v1 connection
(`_io/aio_v1.py`). Nothing blocks the loop, and no thread is involved.
Every decision is the sync client's, made once in the core (`_core`).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from types import TracebackType
from typing import Any, Callable, Generator, Optional, Tuple, Type, Union

from ._core import frames, frames2
from ._core.acquire import (
    DEFAULT_LEASE,
    RETRY,
    Answer,
    ClaimOn,
    OpenSession,
    Request,
    Step,
    UseV1,
    drive_async,
    first_answer,
    route,
    settled,
)
from ._core.address import Address
from ._core.claim import Claim, Status
from ._core.connect_errors import Failures, first_reply_error
from ._core.held import HeldLock
from ._core.watch import LockState
from ._io import aio_sessions, aio_watches
from ._io.aio_sessions import AsyncSession, AsyncV2Claim
from ._io.aio_v1 import Driver
from ._io.aio_watches import AsyncObservation
from ._io.connect import Endpoints
from ._io.watches import RETRY as WATCH_RETRY
from .errors import ConnectError, LockLost, Unsupported

#: The lease of a session opened for observations and lookups, in seconds.
WATCH_LEASE = DEFAULT_LEASE


#: What an `AsyncLock` holds: its own v1 connection, or a v2 session's claim.
AsyncHandle = Union[Driver, AsyncV2Claim]


class AsyncLock(HeldLock):
    """A held lock, for asyncio: the same contract and attributes as
    `monolock.Lock`; `await lost()` resolves on loss."""

    __slots__ = ("__weakref__", "_unsupported")

    _handle: AsyncHandle

    def __init__(
        self,
        handle: AsyncHandle,
        name: str,
        token: int,
        address: Address,
        unsupported: Optional[Unsupported] = None,
    ) -> None:
        super().__init__(handle, name, token, address)
        self._unsupported = unsupported

    @property
    def value(self) -> str:
        """The lock's value as the server has it ("" for none)."""
        handle = self._handle
        return handle.claim.value if isinstance(handle, AsyncV2Claim) else ""

    async def set_value(self, value: str) -> None:
        """Replaces the lock's value and returns once the server has it;
        raises as `Lock.set_value` does."""
        raw = frames2.encode_value(value)
        handle = self._handle
        if not isinstance(handle, AsyncV2Claim):
            raise (self._unsupported or Unsupported.forced_v1()).with_traceback(None)
        if not handle.session.core.extended:
            raise Unsupported.server(str(self._address))
        loss = await handle.proclaim(raw)
        if loss is not None:
            raise loss.with_traceback(None)

    @property
    def lost_event(self) -> asyncio.Event:
        """An `asyncio.Event` set the moment the lock is lost."""
        return self._handle.lost_event

    async def lost(self) -> LockLost:
        """Resolves when the lock is lost, with why. Many tasks may await it."""
        while True:
            await self._handle.wait_until(lambda _: False, None)
            loss = self._handle.loss
            if loss is not None:
                return loss
            await self._handle.lost_event.wait()  # released: only a loss resolves this

    async def release(self) -> None:
        """Releases the lock and returns once the server has confirmed it
        (within the client's `connect_timeout`; past it the connection is
        closed, which releases the lock too, and the release is reported
        unconfirmed). Raises LockLost when the lock had been lost before
        the release was confirmed, or (reason `connection`) when the
        confirmation did not come in time."""
        loss = await self._handle.release_confirmed()
        if loss is not None:
            raise loss.with_traceback(None)

    async def __aenter__(self) -> AsyncLock:
        """Raises LockLost when the lock is no longer held (released, or
        lost): an `async with` block never runs its body without the lock."""
        self._check_enterable()
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if exc is None:
            loss = await self._handle.release_confirmed()
        else:
            # A failing or cancelled block does not wait: the RELEASE is
            # sent at once and the exception goes on.
            loss = self._handle.release()
        if loss is not None and exc is None:
            raise loss.with_traceback(None)

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

    def lock(
        self,
        name: str,
        lease: float = DEFAULT_LEASE,
        *,
        wait: Optional[float] = None,
        value: Optional[str] = None,
    ) -> _Acquiring:
        """Waits for the lock in its FIFO queue: `lock = await
        client.lock(...)` or `async with client.lock(...) as lock:`. Raises
        as `Client.lock` does (`value` as there). Cancelling the wait gives
        the place up."""
        request = Request(name, lease, wait, try_only=False, value=value)
        return _Acquiring(lambda: self._acquire(request))

    async def try_lock(
        self, name: str, lease: float = DEFAULT_LEASE, *, value: Optional[str] = None
    ) -> Optional[AsyncLock]:
        """Takes the lock if it is free; None if someone holds it (nothing
        is left queued)."""
        return await self._acquire(Request(name, lease, None, try_only=True, value=value))

    def observe(self, name: str) -> AsyncObservation:
        """Observes the lock `name` without claiming it: `async for state
        in aclient.observe(name)`, or `async with aclient.observe(name) as
        states:` (which stops it on exit). Raises as `Client.observe` does
        (InvalidArgument at once; the others when the watch is
        registered, at the first state)."""
        raw_name = frames.encode_name(name)

        async def start() -> Any:
            if self._force_v1:
                raise Unsupported.forced_v1()
            return await self._on_extension_session(
                lambda s: aio_watches.observe_on(s, name, raw_name)
            )

        return AsyncObservation(start)

    async def holder(self, name: str) -> LockState:
        """Who holds the lock `name` now, asked once (see `Client.holder`)."""
        raw_name = frames.encode_name(name)
        if self._force_v1:
            raise Unsupported.forced_v1()
        state: LockState = await self._on_extension_session(
            lambda s: aio_watches.lookup_on(s, name, raw_name)
        )
        return state

    async def _on_extension_session(self, on: Callable[[AsyncSession], Any]) -> Any:
        start = time.monotonic_ns()
        lease_ms = frames.lease_ms(WATCH_LEASE)
        sessions = aio_sessions.pool()

        async def perform(step: Step) -> Any:
            if isinstance(step, OpenSession):
                return await sessions.session(self, step.address, lease_ms, watch=True)
            assert isinstance(step, ClaimOn)
            result = await on(step.session)
            return RETRY if result is WATCH_RETRY else result

        return await drive_async(route(self, start, extension=True), perform)

    async def _acquire(self, request: Request) -> Optional[AsyncLock]:
        start = time.monotonic_ns()
        if self._force_v1:
            if request.extension:
                raise Unsupported.forced_v1()
            return await self._acquire_v1(request, start, None)
        sessions = aio_sessions.pool()

        async def perform(step: Step) -> Any:
            if isinstance(step, UseV1):
                return await self._acquire_v1(request, start, (step.address,))
            if isinstance(step, OpenSession):
                return await sessions.session(
                    self, step.address, request.lease_ms, extension=request.extension
                )
            assert isinstance(step, ClaimOn)
            return await self._acquire_v2(step.session, request, start)

        return await drive_async(route(self, start, request.extension), perform)

    async def _acquire_v2(self, session: AsyncSession, request: Request, start: int) -> object:
        """One claim on `session`: the lock, None (a try found it busy), or
        RETRY (the session could not take it: full, or closed as idle)."""
        claim = session.core.acquire(
            request.name, request.raw_name, request.mode, time.monotonic_ns(), request.value
        )
        handle = AsyncV2Claim(session, claim, self._connect_timeout)
        # From here on the claim exists: whatever ends this call without
        # handing a lock over, a cancellation included, releases it.
        try:
            session.settle()
            status, _ = await handle.wait_until(lambda s: s is not Status.UNANSWERED, None)
            answer = first_answer(claim, status)
            if answer is Answer.BUSY:
                return None
            if answer is Answer.FULL:
                session.full = True
                return RETRY
            if answer is Answer.QUEUED:
                status = await _granted(handle, request, start)
            if not settled(claim, status):
                return RETRY
            token = claim.token
            assert token is not None
            return AsyncLock(handle, request.name, token, session.address)
        except BaseException:
            handle.release()
            raise

    async def _acquire_v1(
        self, request: Request, start: int, addresses: Optional[Tuple[Address, ...]]
    ) -> Optional[AsyncLock]:
        """One claim on its own connection (protocol v1)."""
        driver, address = await self._connect(addresses)
        # From here on the connection is a claim: whatever ends this call
        # without handing a lock over, a cancellation included, ends it.
        try:
            sent = time.monotonic_ns()
            driver.io_timeout = self._connect_timeout
            driver.start(Claim(request.name, request.lease_ms, sent), request.v1_frame())
            # A server answers at once: silence past the connect timeout is
            # a peer that is no monolock server (or one that cannot serve).
            answer_by = sent + int(self._connect_timeout * 1e9)
            status, silent = await driver.wait_until(lambda s: s is not Status.UNANSWERED, answer_by)
            if silent:
                raise ConnectError(
                    f"{address} did not answer within {self._connect_timeout:g} s", [str(address)]
                )
            if status is Status.WAITING and request.try_only:
                # Leaves no trace in the queue by the time it returns.
                await driver.release_confirmed()
                return None
            if status is Status.WAITING:
                status = await _granted(driver, request, start)
        except BaseException:
            driver.release()
            raise
        claim = driver.claim
        assert claim is not None
        if status is Status.HELD and claim.token is not None:
            unsupported = Unsupported.forced_v1() if self._force_v1 else Unsupported.server(str(address))
            return AsyncLock(driver, request.name, claim.token, address, unsupported)
        driver.release()
        if status is Status.LOST:
            loss = claim.loss or LockLost.connection()
            raise first_reply_error(address, loss) or loss
        return None

    async def _connect(self, addresses: Optional[Tuple[Address, ...]]) -> Tuple[Driver, Address]:
        loop = asyncio.get_running_loop()
        failures = Failures(self)
        for address in self._addresses if addresses is None else addresses:
            driver = Driver(loop)
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


async def _granted(handle: AsyncHandle, request: Request, start: int) -> Status:
    """Waits in the queue for the grant (or the claim's end) within the
    request's bound; past it raises NotAcquired."""
    until = request.queue_until(start)
    status, timed_out = await handle.wait_until(lambda s: s is Status.HELD, until)
    if timed_out:
        raise request.not_granted()
    return status
