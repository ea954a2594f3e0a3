"""Leader election on a lock with a value, in the shape of client-go's
`leaderelection` and Curator's `LeaderLatch`: every candidate campaigns
(waits in the lock's FIFO queue, its value attached), the one granted the
lock leads until it loses it or stops, and every candidate observes the
lock to learn who leads now.

- `on_started_leading(token)`: this candidate was granted the lock; hand
  `token` to everything it writes (fencing), and stop leading work when
  `on_stopped_leading` comes (or `elector.lock.lost_event` is set).
- `on_stopped_leading()`: leadership ended, for any reason (lost, or
  stopped). Always called before the next `on_started_leading`.
- `on_new_leader(state)`: the lock's holder changed to a new token (this
  candidate included), with its value; nothing for a free lock.

Callbacks of one elector never run at the same time; they should return
promptly (heartbeats go on without them, on the client's own thread or
event loop). After losing the lock a candidate campaigns again, unless
stopped. What an observer is told is advisory: the leader's writes are
still fenced by its token.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import TYPE_CHECKING, Any, Callable, Optional

from ._core import frames, frames2
from ._core.acquire import DEFAULT_LEASE, Request
from ._core.watch import LockState
from .errors import ConnectError, Error, LockLost, NotAcquired


class Abandoned(Exception):
    """A campaign's wait in the queue was given up (the elector stopped)."""

if TYPE_CHECKING:
    from ._asyncio import AsyncClient, AsyncLock
    from ._sync import Client, Lock

#: After a failed campaign or observation that may heal (the server
#: unreachable, restarting), the next try comes this much later, doubling
#: up to `MAX_RETRY_DELAY`, in seconds.
FIRST_RETRY_DELAY = 0.1
MAX_RETRY_DELAY = 5.0

StartedLeading = Callable[[int], Any]
StoppedLeading = Callable[[], Any]
NewLeader = Callable[[LockState], Any]


def _temporary(err: Error) -> bool:
    return err.is_temporary or isinstance(err, (ConnectError, NotAcquired))


def _release_quietly(lock: Lock) -> None:
    try:
        lock.release()
    except LockLost:
        pass  # lost meanwhile, or unconfirmed: it is gone either way


class _Candidate:
    """What both electors share: the arguments, checked before anything
    connects, and which holder was told last."""

    def __init__(
        self,
        name: str,
        lease: float,
        value: str,
        on_started_leading: Optional[StartedLeading],
        on_stopped_leading: Optional[StoppedLeading],
        on_new_leader: Optional[NewLeader],
    ) -> None:
        frames.encode_name(name)
        frames.lease_ms(lease)
        frames2.encode_value(value)
        self.name = name
        self.lease = lease
        self._value = value
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._on_new_leader = on_new_leader
        #: The token of the holder last told to `on_new_leader`.
        self._told_token: Optional[int] = None

    @property
    def value(self) -> str:
        """This candidate's value (sent with every campaign)."""
        return self._value

    def _new_leader(self, state: LockState) -> bool:
        """True when `state` names a holder not told yet."""
        if not state.held or state.token == self._told_token:
            return False
        self._told_token = state.token
        return True


class LeaderElector(_Candidate):
    """A candidate in the election of the lock `name`, for the blocking
    client: `run()` campaigns and observes until `stop()`.

    ```
    elector = monolock.LeaderElector(
        client, "leader", lease=10.0, value="10.0.0.7:9000",
        on_started_leading=lambda token: ..., on_stopped_leading=lambda: ...,
        on_new_leader=lambda state: print("leader is", state.value),
    )
    threading.Thread(target=elector.run).start()
    ...
    elector.stop()            # resigns: releases the lock if held
    ```
    """

    def __init__(
        self,
        client: Client,
        name: str,
        lease: float = DEFAULT_LEASE,
        value: str = "",
        *,
        on_started_leading: Optional[StartedLeading] = None,
        on_stopped_leading: Optional[StoppedLeading] = None,
        on_new_leader: Optional[NewLeader] = None,
    ) -> None:
        """Raises InvalidArgument for a bad name, lease or value."""
        super().__init__(name, lease, value, on_started_leading, on_stopped_leading, on_new_leader)
        self._client = client
        #: Set once `run()` has registered its observation (it campaigns then).
        self.ready = threading.Event()
        self._stop = threading.Event()
        self._done = threading.Event()
        self._callbacks = threading.RLock()
        self._in_callback = threading.local()
        self._run_thread: Optional[threading.Thread] = None
        self._lock: Optional[Lock] = None

    @property
    def lock(self) -> Optional[Lock]:
        """The lock while this candidate leads (its `lost_event` is set the
        moment leadership is lost), else None."""
        return self._lock

    @property
    def leading(self) -> bool:
        """This candidate leads now (judged against the clock now)."""
        lock = self._lock
        return lock is not None and lock.is_held()

    def set_value(self, value: str) -> None:
        """Replaces this candidate's value: at once on the lock if it
        leads (returns once the server has it), and for its next
        campaigns."""
        frames2.encode_value(value)
        self._value = value
        lock = self._lock
        if lock is not None:
            lock.set_value(value)

    def run(self) -> None:
        """Campaigns and observes until `stop()`; returns once stopped.

        Raises what the first observation meets (Unsupported: a server
        without values and observers, or `force_v1=True`; ConnectError:
        no server answers), then only what cannot heal (an ACL refusal, a
        callback's own exception); a lost session, a server restarting
        and the like are retried, with a backoff up to 5 s."""
        if self._run_thread is not None:
            raise RuntimeError("LeaderElector.run() was already called")
        self._run_thread = threading.current_thread()
        try:
            observation = self._client.observe(self.name)
            self.ready.set()
            watcher = threading.Thread(
                target=self._watch, args=(observation,), name="monolock-elector-watch", daemon=True
            )
            watcher.start()
            try:
                self._campaign()
            finally:
                observation.close()
                self._stop.set()
                watcher.join()
        finally:
            self._done.set()

    def stop(self) -> None:
        """Stops: the campaign gives its place up, a held lock is released
        (`on_stopped_leading` is called), the observation ends. Returns
        once `run()` has, unless called from a callback. Idempotent."""
        self._stop.set()
        if self._run_thread is None or getattr(self._in_callback, "active", False):
            return
        if threading.current_thread() is not self._run_thread:
            self._done.wait()

    #: `stop()` as etcd's election API names it.
    resign = stop

    def _call(self, callback: Optional[Callable[..., Any]], *args: Any) -> None:
        if callback is None:
            return
        with self._callbacks:
            self._in_callback.active = True
            try:
                callback(*args)
            finally:
                self._in_callback.active = False

    def _campaign(self) -> None:
        delay = FIRST_RETRY_DELAY
        while not self._stop.is_set():
            request = Request(self.name, self.lease, None, try_only=False, value=self._value or None)
            request.abandoned = self._stop.is_set
            try:
                lock = self._client._acquire(request)
            except Error as err:
                if not _temporary(err):
                    raise
                self._stop.wait(delay)
                delay = min(delay * 2, MAX_RETRY_DELAY)
                continue
            except Abandoned:
                return
            delay = FIRST_RETRY_DELAY
            assert lock is not None
            if self._stop.is_set():  # granted as it stopped: it never led
                _release_quietly(lock)
                return
            self._lead(lock)

    def _lead(self, lock: Lock) -> None:
        self._lock = lock
        try:
            self._call(self._on_started, lock.token)
            # The loss is seen at once; a stop within a check interval.
            while not lock.lost_event.wait(0.05) and not self._stop.is_set():
                pass
        finally:
            # Stopped, or a callback raised: resign (nothing if it was lost).
            if not lock.lost_event.is_set():
                _release_quietly(lock)
            self._lock = None
            self._call(self._on_stopped)

    def _watch(self, observation: Any) -> None:
        delay = FIRST_RETRY_DELAY
        while not self._stop.is_set():
            try:
                if observation is None:
                    observation = self._client.observe(self.name)
                    delay = FIRST_RETRY_DELAY
                for state in observation:
                    if self._new_leader(state):
                        self._call(self._on_new_leader, state)
                    if self._stop.is_set():
                        break
            except Error:
                pass  # the session ended: observe again
            if observation is not None:
                observation.close()
                observation = None
            self._stop.wait(delay)
            delay = min(delay * 2, MAX_RETRY_DELAY)


Callback = Callable[..., Any]


async def _maybe_await(result: Any) -> None:
    if inspect.isawaitable(result):
        await result


class AsyncLeaderElector(_Candidate):
    """A candidate in the election of the lock `name`, for asyncio:
    `await elector.run()` campaigns and observes until `stop()` (or the
    task is cancelled). Callbacks may be plain functions or coroutine
    functions (awaited, one at a time)."""

    def __init__(
        self,
        client: AsyncClient,
        name: str,
        lease: float = DEFAULT_LEASE,
        value: str = "",
        *,
        on_started_leading: Optional[Callback] = None,
        on_stopped_leading: Optional[Callback] = None,
        on_new_leader: Optional[Callback] = None,
    ) -> None:
        super().__init__(name, lease, value, on_started_leading, on_stopped_leading, on_new_leader)
        self._client = client
        self._stopping: Optional[asyncio.Event] = None
        self._stopped_early = False
        self._finished: Optional[asyncio.Event] = None
        self._callbacks: Optional[asyncio.Lock] = None
        self._lock: Optional[AsyncLock] = None

    @property
    def lock(self) -> Optional[AsyncLock]:
        """The lock while this candidate leads, else None."""
        return self._lock

    @property
    def leading(self) -> bool:
        lock = self._lock
        return lock is not None and lock.is_held()

    async def set_value(self, value: str) -> None:
        """Replaces this candidate's value (on the lock at once if it leads)."""
        frames2.encode_value(value)
        self._value = value
        lock = self._lock
        if lock is not None:
            await lock.set_value(value)

    def stop(self) -> None:
        """Stops (from the loop's thread): the campaign gives its place up,
        a held lock is released, the observation ends; `run()` returns
        soon after (await `resign()` to wait for it)."""
        self._stopped_early = True
        if self._stopping is not None:
            self._stopping.set()

    async def resign(self) -> None:
        """`stop()`, then waits until `run()` has returned (and with it
        `on_stopped_leading`, if this candidate led)."""
        self.stop()
        if self._finished is not None:
            await self._finished.wait()

    async def run(self) -> None:
        """Campaigns and observes until stopped (or cancelled: a held
        lock is released then too); raises as `LeaderElector.run` does."""
        if self._stopping is not None:
            raise RuntimeError("AsyncLeaderElector.run() was already called")
        self._stopping = asyncio.Event()
        self._finished = asyncio.Event()
        self._callbacks = asyncio.Lock()
        if self._stopped_early:
            self._stopping.set()
        try:
            observation = await self._client.observe(self.name).start()
            watcher = asyncio.ensure_future(self._watch(observation))
            try:
                await self._campaign()
            finally:
                observation.close()
                self._stopping.set()
                watcher.cancel()
                await asyncio.gather(watcher, return_exceptions=True)
        finally:
            self._finished.set()

    async def _call(self, callback: Optional[Callback], *args: Any) -> None:
        if callback is None:
            return
        assert self._callbacks is not None
        async with self._callbacks:
            await _maybe_await(callback(*args))

    async def _until_stopped(self, work: "asyncio.Future[Any]") -> bool:
        """Waits for `work` or the stop; True when stopped first (`work`
        is then cancelled)."""
        assert self._stopping is not None
        stopped = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({work, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if work.done():
            return False
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)
        return True

    async def _campaign(self) -> None:
        assert self._stopping is not None
        delay = FIRST_RETRY_DELAY
        while not self._stopping.is_set():
            campaign: "asyncio.Future[Any]" = asyncio.ensure_future(
                self._client.lock(self.name, self.lease, value=self._value or None)
            )
            if await self._until_stopped(campaign):
                return
            try:
                lock = campaign.result()
            except Error as err:
                if not _temporary(err):
                    raise
                await self._pause(delay)
                delay = min(delay * 2, MAX_RETRY_DELAY)
                continue
            delay = FIRST_RETRY_DELAY
            if self._stopping.is_set():  # granted as it stopped: it never led
                try:
                    await lock.release()
                except LockLost:
                    pass
                return
            await self._lead(lock)

    async def _pause(self, delay: float) -> None:
        assert self._stopping is not None
        try:
            await asyncio.wait_for(self._stopping.wait(), delay)
        except asyncio.TimeoutError:
            pass

    async def _lead(self, lock: AsyncLock) -> None:
        self._lock = lock
        try:
            await self._call(self._on_started, lock.token)
            lost = asyncio.ensure_future(lock.lost())
            await self._until_stopped(lost)
        finally:
            # Stopped, cancelled, or a callback raised: resign (nothing if
            # it was lost). A cancelled task sends RELEASE without waiting.
            if not lock.lost_event.is_set():
                try:
                    await lock.release()
                except (LockLost, asyncio.CancelledError):
                    lock._handle.release()
            self._lock = None
            await self._call(self._on_stopped)

    async def _watch(self, observation: Any) -> None:
        assert self._stopping is not None
        delay = FIRST_RETRY_DELAY
        while not self._stopping.is_set():
            try:
                if observation is None:
                    observation = await self._client.observe(self.name).start()
                    delay = FIRST_RETRY_DELAY
                async for state in observation:
                    if self._new_leader(state):
                        await self._call(self._on_new_leader, state)
            except Error:
                pass  # the session ended: observe again
            if observation is not None:
                observation.close()
                observation = None
            await self._pause(delay)
            delay = min(delay * 2, MAX_RETRY_DELAY)

