"""Observations and holder lookups of the asyncio client, on the event
loop's v2 sessions (`aio_sessions.py`): the session's protocol reads the
pushes into the watch's queue (`_core/watch.py`) and wakes the tasks
waiting on the session. No thread is involved.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any, AsyncIterator, Awaitable, Callable, Optional, Type

from .._core.timeouts import bound_ns
from .._core.watch import LockState, LookupState, WatchState, WStatus, lock_state
from ..errors import LockLost
from .aio_sessions import AsyncSession
from .reactor import current_pid
from .watches import RETRY, TOO_MANY_WATCHES


async def wait_for(session: AsyncSession, done: Callable[[], bool], until: Optional[int] = None) -> bool:
    """Waits until `done()`, the session's end, or the instant `until`;
    the deadline is judged at every look. True when `done()` held."""
    while True:
        session.check()
        if done():
            return True
        if session.core.is_closed():
            return False
        now = time.monotonic_ns()
        if until is not None and now >= until:
            return False
        # The session's own timer ends it at its deadline, which wakes us.
        await session.changed(until)


class AsyncObservation:
    """A lock observed, for asyncio: `async for state in
    aclient.observe(name)`. The watch is registered at the first
    `__anext__` (or `async with`); stop it with `aclose()` or an `async
    with` block (breaking out of `async for` stops it once the object is
    collected). States and the end of the iteration are those of
    `monolock.Observation`."""

    __slots__ = ("_start", "_session", "_watch", "_closed", "__weakref__")

    def __init__(self, start: Callable[[], Awaitable[Any]]) -> None:
        self._start: Optional[Callable[[], Awaitable[Any]]] = start
        self._session: Optional[AsyncSession] = None
        self._watch: Optional[WatchState] = None
        self._closed = False

    async def start(self) -> AsyncObservation:
        """Registers the watch (once) and returns self; raises as
        `Client.observe` does."""
        if self._start is not None:
            start, self._start = self._start, None
            try:
                session, watch = await start()
            except BaseException:
                self._closed = True
                raise
            self._session, self._watch = session, watch
            if self._closed:  # closed while it was being registered
                self._closed = False
                self.close()
        return self

    @property
    def name(self) -> Optional[str]:
        """The lock observed (None before the watch is registered)."""
        return None if self._watch is None else self._watch.name

    async def get(self, timeout: Optional[float] = None) -> Optional[LockState]:
        """The next state, waiting at most `timeout` seconds: None when the
        time ran out or the observation was closed. Raises LockLost when
        it ended with its session."""
        timeout_ns = bound_ns(timeout, "timeout")
        await self.start()
        session, watch = self._session, self._watch
        if session is None or watch is None:
            return None  # closed before the watch was registered
        until = None if timeout_ns is None else time.monotonic_ns() + timeout_ns
        await wait_for(session, lambda: bool(watch.states) or not watch.live or self._closed, until)
        if self._closed:
            return None
        if watch.states:
            return watch.states.popleft()
        if watch.status is WStatus.LOST:
            assert watch.loss is not None
            raise watch.loss.with_traceback(None)
        return None

    def __aiter__(self) -> AsyncIterator[LockState]:
        return self

    async def __anext__(self) -> LockState:
        state = await self.get()
        if state is None:
            raise StopAsyncIteration
        return state

    def close(self) -> None:
        """Stops the observation (writes UNOBSERVE; returns at once)."""
        if self._closed:
            return
        self._closed = True
        self._start = None
        session, watch = self._session, self._watch
        if session is None or watch is None or current_pid() != session.pid:
            return
        session.core.unobserve(watch, time.monotonic_ns())
        session.settle()

    async def aclose(self) -> None:
        """`close()`, for `contextlib.aclosing` and the like."""
        self.close()

    async def __aenter__(self) -> AsyncObservation:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    def __del__(self) -> None:
        session = getattr(self, "_session", None)
        if session is None or getattr(self, "_closed", True) or current_pid() != session.pid:
            return
        try:
            loop = session.loop
            if not loop.is_closed():
                loop.call_soon_threadsafe(self.close)
        except RuntimeError:
            pass  # the loop is gone

    def __repr__(self) -> str:
        return f"<monolock.AsyncObservation name={self.name!r} closed={self._closed}>"


async def observe_on(session: AsyncSession, name: str, raw_name: bytes) -> object:
    """Registers a watch of `name` on `session` and waits for OBSERVING:
    (session, watch), or RETRY; raises the refusal or the session's end."""
    if session.core.is_closed():
        return RETRY
    watch = session.core.observe(name, raw_name, time.monotonic_ns())
    try:
        session.settle()
        await wait_for(session, lambda: watch.status is not WStatus.PENDING)
    except BaseException:
        session.core.unobserve(watch, time.monotonic_ns())  # cancelled: no watch is left
        session.settle()
        raise
    if watch.status in (WStatus.OBSERVING, WStatus.UNOBSERVING):
        return session, watch
    if watch.status is WStatus.REFUSED and watch.code == TOO_MANY_WATCHES:
        return RETRY
    assert watch.loss is not None
    raise watch.loss


async def lookup_on(session: AsyncSession, name: str, raw_name: bytes) -> object:
    """One LOOKUP of `name` on `session`: its LockState, or RETRY."""
    if session.core.is_closed():
        return RETRY
    found: LookupState = session.core.lookup(name, raw_name, time.monotonic_ns())
    session.settle()
    await wait_for(session, lambda: found.done)
    if found.state is not None:
        return lock_state(found.state)
    raise found.loss or LockLost.connection().for_lookup(name)
