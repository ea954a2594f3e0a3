"""Observations and holder lookups of the sync client, on the v2 sessions
of the process's pool (`pool.py`), served by the reactor thread like the
claims beside them: the reactor reads the pushes into the watch's queue
(`_core/watch.py`) and wakes the threads waiting on the session.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Callable, Iterator, Optional, Type

from .._core.frames2 import WireState
from .._core.timeouts import bound_ns
from .._core.watch import LockState, LookupState, WatchState, WStatus, lock_state
from ..errors import LockLost
from .reactor import current_pid
from .sessions import SyncSession

#: The watch's own REFUSED code when the session has its `max_watches`.
TOO_MANY_WATCHES = 0x0B


def wait_for(session: SyncSession, done: Callable[[], bool], until: Optional[int] = None) -> bool:
    """Waits on the session until `done()` (checked under its condition),
    the session's end, or the instant `until`: the deadline is judged at
    every look. True when `done()` held."""
    while True:
        with session.cond:
            now = time.monotonic_ns()
            session.core.check(now)
            ended = session.settle_locked()
            if done():
                result = True
                break
            if ended or (until is not None and now >= until):
                result = False
                break
            limit = session.core.deadline()
            if until is not None:
                limit = min(limit, until)
            session.cond.wait(max(limit - now, 0) / 1e9)
    if ended:
        session.close()
    return result


class Observation:
    """A lock observed: iterate it for its states, in order: first the
    state when the server registered the watch (`initial`), then one per
    change the server pushes (granted, value, released), never an older
    holder after a newer one.

    Use it in a `with` block, or call `close()`: either stops the
    observation (UNOBSERVE); breaking out of a `for` loop over
    `client.observe(name)` stops it too, once the object is collected.
    Iteration ends with LockLost (`observation of lock "NAME" ended
    (REASON): ...`) when the session carrying it ends (the server is
    gone, shut down, or silent past the deadline).
    """

    __slots__ = ("_session", "_watch", "_closed", "__weakref__")

    def __init__(self, session: SyncSession, watch: WatchState) -> None:
        self._session = session
        self._watch = watch
        self._closed = False

    @property
    def name(self) -> str:
        """The lock observed."""
        return self._watch.name

    def get(self, timeout: Optional[float] = None) -> Optional[LockState]:
        """The next state, waiting at most `timeout` seconds (None: no
        bound): None when the time ran out, or the observation was closed.
        Raises LockLost when the observation ended with its session,
        InvalidArgument for a negative or NaN timeout."""
        timeout_ns = bound_ns(timeout, "timeout")
        until = None if timeout_ns is None else time.monotonic_ns() + timeout_ns
        watch = self._watch
        session = self._session
        wait_for(session, lambda: bool(watch.states) or not watch.live or self._closed, until)
        with session.cond:
            if self._closed:
                return None
            if watch.states:
                return watch.states.popleft()
            if watch.status is WStatus.LOST:
                assert watch.loss is not None
                raise watch.loss.with_traceback(None)
        return None

    def __iter__(self) -> Iterator[LockState]:
        return self

    def __next__(self) -> LockState:
        state = self.get()
        if state is None:
            raise StopIteration
        return state

    def close(self) -> None:
        """Stops the observation (writes UNOBSERVE; returns at once).
        Idempotent."""
        session = self._session
        if current_pid() != session.pid:
            self._closed = True
            return
        with session.cond:
            if self._closed:
                return
            self._closed = True
            session.core.unobserve(self._watch, time.monotonic_ns())
            session.cond.notify_all()
        session.submit()

    def __enter__(self) -> Observation:
        return self

    def __exit__(
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
        reactor = session.reactor
        if reactor is not None:
            try:
                reactor.call(session, self.close)
            except Exception:  # at interpreter exit
                pass

    def __repr__(self) -> str:
        return f"<monolock.Observation name={self.name!r} closed={self._closed}>"


#: `observe_on` and `lookup_on`'s answer when the session could not take
#: the request: another session is tried.
RETRY = object()


def observe_on(session: SyncSession, name: str, raw_name: bytes) -> object:
    """Registers a watch of `name` on `session` and waits for OBSERVING
    (the initial state follows it in the same read, as a rule). Returns
    the Observation, or RETRY; raises the refusal or the session's end."""
    with session.cond:
        if session.core.is_closed():
            return RETRY
        watch = session.core.observe(name, raw_name, time.monotonic_ns())
    session.submit()
    observation = Observation(session, watch)
    wait_for(session, lambda: watch.status is not WStatus.PENDING)
    with session.cond:
        status = watch.status
    if status in (WStatus.OBSERVING, WStatus.UNOBSERVING):
        return observation
    observation._closed = True
    if status is WStatus.REFUSED and watch.code == TOO_MANY_WATCHES:
        return RETRY
    assert watch.loss is not None
    raise watch.loss


def lookup_on(session: SyncSession, name: str, raw_name: bytes) -> object:
    """One LOOKUP of `name` on `session`: its LockState, or RETRY; raises
    the refusal or the session's end."""
    with session.cond:
        if session.core.is_closed():
            return RETRY
        found: LookupState = session.core.lookup(name, raw_name, time.monotonic_ns())
    session.submit()
    wait_for(session, lambda: found.done)
    if found.state is not None:
        return holder_state(found.state)
    raise found.loss or LockLost.connection().for_lookup(name)


def holder_state(wire: WireState) -> LockState:
    """LOCK_STATE as the caller of `holder()` reads it."""
    return lock_state(wire)
