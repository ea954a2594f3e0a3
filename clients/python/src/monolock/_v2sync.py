"""The sync client's protocol v2 driver: a pool of sessions per server
address and one daemon thread that reads and heartbeats all of them.

- A session per (address, lease) in use, opened on first use in the
  caller's thread, kept while it carries claims and for `KEEP_IDLE` after
  (below the server's `--idle-timeout` default of 60 s), at most
  `MAX_SESSIONS_PER_ADDRESS` per address; a full session (its
  `max_claims`, or REFUSED 0x09) sends the next claim to another one.
- A request is one `send` from the caller's thread (under the session's
  write lock, so the bytes leave in the order the core queued them).
- Replies are read in batches (every byte the socket has, then every
  whole frame in them). An owner waiting for the reply to its own request
  reads it itself where epoll is available (the socket is one-shot there:
  disarmed for the reactor while the owner reads, re-armed after), so an
  uncontended lock cycle needs no hand-off between threads; pushes, and
  replies no owner is reading, are the reactor thread's, which wakes the
  owners waiting on the session's condition.
- On TLS one SSL object must not be used by two threads at once: every
  read and write on it is made by the holder of the session's read lock
  (an owner reading its reply, or the reactor); a write that finds it
  held is left to the holder, which sends it as it lets go.
- A session is never shared across a fork: the pool belongs to the
  process that made it; a child starts an empty one.

Design and figures: docs/client-python.md, "Protocol v2 sessions".
"""

from __future__ import annotations

import collections
import heapq
import itertools
import os
import select
import selectors
import socket
import ssl
import threading
import time
from typing import Callable, Deque, Dict, List, Optional, Tuple

from ._address import Address
from ._claim import Status
from ._connect import Endpoints, dial
from ._reactor import READ_CHUNK, shutdown_socket
from ._schedule import MS
from ._session import IDLE_CLOSED, ClaimState, CStatus, SessionCore, SState
from .errors import LockLost, LossReason

_pid = os.getpid()


def current_pid() -> int:
    """This process's id, kept up to date across forks without a system
    call per look (the claim paths check it on every request)."""
    return _pid


#: How long a session without claims is kept open for the next claim.
KEEP_IDLE_NS = 10_000 * MS
#: The most sessions one process keeps open to one address.
MAX_SESSIONS_PER_ADDRESS = 16

_WOULD_BLOCK = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)

_STATUS = {
    CStatus.PENDING: Status.UNANSWERED,
    CStatus.WAITING: Status.WAITING,
    CStatus.HELD: Status.HELD,
}


def owner_view(claim: ClaimState, released: bool) -> Status:
    """A claim's status as its `Lock` reads it. A claim its owner released
    is over, not lost: it reads HELD, and `Lock` adds that it was released
    (as a v1 claim reads after its close)."""
    if released and claim.status in (CStatus.RELEASING, CStatus.RELEASED):
        return Status.HELD
    return _STATUS.get(claim.status, Status.LOST)

#: What makes two sessions interchangeable: the server and how it is reached.
PoolKey = Tuple[str, int, Optional[ssl.SSLContext], Optional[str]]


def pool_key(endpoints: Endpoints, address: Address) -> PoolKey:
    return (address.host, address.port, endpoints._ssl_context, endpoints._server_hostname)


class V1Only(Exception):
    """The address answered the OPEN with ERROR 0x10: it speaks v1 only."""


class DialFailed(Exception):
    """The address could not be reached (the cause is chained)."""


class SyncSession:
    """A session's socket, its core, and what the threads share: the
    condition guards the core; the write lock orders the bytes sent."""

    __slots__ = (
        "core",
        "sock",
        "address",
        "key",
        "tls",
        "pid",
        "cond",
        "write_lock",
        "unsent",
        "reactor",
        "wake_at",
        "closed",
        "full",
        "read_lock",
        "direct",
        "gen",
    )

    def __init__(self, core: SessionCore, sock: socket.socket, address: Address, key: PoolKey) -> None:
        self.core = core
        self.sock = sock
        self.address = address
        self.key = key
        self.tls = isinstance(sock, ssl.SSLSocket)
        self.pid = current_pid()
        self.cond = threading.Condition(threading.Lock())
        self.write_lock = threading.Lock()
        self.unsent = bytearray()
        self.reactor: Optional[SessionReactor] = None
        self.wake_at: Optional[int] = None
        self.closed = False
        #: The server refused a claim for `max_claims`: none more until one ends.
        self.full = False
        #: Held by whichever thread reads the socket and feeds the core:
        #: the reactor, or an owner reading its reply itself.
        self.read_lock = threading.Lock()
        #: Owners may read their replies themselves (a plain socket, and a
        #: reactor that re-arms it only after each read: epoll one-shot).
        self.direct = False
        #: Counts the changes that woke waiters (read under `cond`).
        self.gen = 0

    # any thread, with `cond` held

    def settle_locked(self) -> bool:
        """Signals the claims that were lost, and wakes the threads waiting
        on the session; True when the session has ended."""
        core = self.core
        if core.changed:
            for claim in core.changed:
                if claim.status is CStatus.LOST and isinstance(claim.watch, V2Claim):
                    claim.watch.lost_event.set()
                if not claim.live and claim.status is not CStatus.REFUSED:
                    self.full = False  # a claim ended: room again
            core.changed.clear()
            self.gen += 1
            self.cond.notify_all()
        return core.state is SState.CLOSED

    # any thread

    def submit(self, reader: bool = False) -> None:
        """Sends what the core queued, at once from this thread; on a TLS
        socket only as its reader (`reader`: this thread holds the part),
        else through the reactor thread."""
        if self.tls and not reader:
            reactor = self.reactor
            if reactor is not None:
                reactor.command("flush", self)
        else:
            self.flush(locked=reader)

    def flush(self, locked: bool = False) -> None:
        """Writes the core's outbox (and anything left unsent), in order.

        On TLS every operation on the SSL object is made by the holder of
        `read_lock` (one SSL object must not be used by two threads at
        once): `locked` says this thread holds it; otherwise the flush is
        tried, and left to the holder, which flushes as it gives the part
        back, when another thread has it."""
        if self.tls and not locked:
            if not self.read_lock.acquire(blocking=False):
                return
            try:
                self.flush(locked=True)
            finally:
                self.read_lock.release()
            return
        failure: Optional[BaseException] = None
        with self.write_lock:
            with self.cond:
                if self.core.outbox:
                    self.unsent += self.core.outbox
                    self.core.outbox.clear()
            if not self.unsent or self.closed:
                return
            try:
                written = self.sock.send(self.unsent)
            except _WOULD_BLOCK:
                written = 0
            except (OSError, ssl.SSLError, ValueError) as err:
                written = 0
                failure = err
            del self.unsent[:written]
            more = bool(self.unsent)
        if failure is not None:
            self.fail(LockLost.connection(failure))
        elif more and self.reactor is not None:
            self.reactor.command("write", self)

    def read_now(self) -> None:
        """Reads every byte the socket has and feeds the core (the caller
        holds `read_lock`); sends what the core queued; ends the session on
        EOF or failure."""
        if self.closed:
            return
        chunks: List[bytes] = []
        cause: Optional[BaseException] = None
        eof = False
        try:
            while True:
                data = self.sock.recv(READ_CHUNK)
                if not data:
                    eof = True
                    break
                chunks.append(data)
                if len(data) < READ_CHUNK and not self.tls:
                    break  # drained; TLS reads until it would block (records buffer)
        except _WOULD_BLOCK:
            pass
        except (OSError, ssl.SSLError, ValueError) as err:
            cause = err
        now = time.monotonic_ns()
        with self.cond:
            if chunks:
                self.core.receive(b"".join(chunks) if len(chunks) > 1 else chunks[0], now)
            if eof or cause is not None:
                self.core.closed(cause)
            ended = self.settle_locked()
            queued = bool(self.core.outbox)
        if ended:
            self.close()
        elif queued:  # a RELEASE the core queued itself (a give-up crossed a reply)
            self.flush(locked=True)

    def take_reader(self) -> bool:
        """Makes this thread the session's reader before it sends a request
        whose reply it will read itself: the reactor's readiness for the
        socket is disarmed first, so that the reply wakes this thread only.
        False when direct reads are off or another thread reads."""
        if not self.direct or not self.read_lock.acquire(blocking=False):
            return False
        if self.reactor is not None:
            self.reactor.disarm(self)
        return True

    def give_reader(self) -> None:
        """Ends `take_reader`: pushes that come next are the reactor's. On
        TLS, first sends what others queued meanwhile (they left it to the
        holder), and hands what is queued after to the reactor."""
        if self.tls:
            self.flush(locked=True)
        self.read_lock.release()
        reactor = self.reactor
        if reactor is not None:
            reactor.arm(self)
            if self.tls and (self.core.outbox or self.unsent) and not self.closed:
                reactor.command("flush", self)

    def read_direct(self, until: int, held: bool = False) -> bool:
        """An owner waiting for a reply reads it itself, with no hand-off to
        the reactor thread, if no other thread is reading (`held`: it took
        the reader's part already): waits for the socket to be readable
        until the instant `until`, then reads. False when another thread is
        the reader (wait for its notification)."""
        if not held and not self.take_reader():
            return False
        try:
            poller = select.poll()
            poller.register(self.sock, select.POLLIN)
            timeout_ms = max((until - time.monotonic_ns()) // 1_000_000, 0)
            pending = self.tls and self.sock.pending() > 0  # type: ignore[attr-defined]
            if (pending or poller.poll(min(timeout_ms, 1_000))) and not self.closed:
                self.read_now()
        except (OSError, ValueError):
            pass  # the reactor closed the socket meanwhile: the caller looks again
        finally:
            self.give_reader()
        return True

    def fail(self, loss: LockLost) -> None:
        """Ends the session now: every claim on it is lost (or, being
        released, released), each signalled; the reactor closes the socket."""
        with self.cond:
            self.core.fail(loss)
            self.settle_locked()
        self.close()

    def close(self) -> None:
        """From any thread: FIN now (every claim on the session ends at the
        server at once); the reactor thread closes the descriptor."""
        with self.write_lock:
            # Under the write lock, as the reactor closes the descriptor: a
            # closed descriptor's number may already be another socket's.
            if not self.closed:
                shutdown_socket(self.sock)
        reactor = self.reactor
        if reactor is not None:
            reactor.command("close", self)
        POOL.forget(self)

    def check(self) -> None:
        """Judges the deadline against the clock now."""
        with self.cond:
            self.core.check(time.monotonic_ns())
            ended = self.settle_locked()
        if ended:
            self.close()


class V2Claim:
    """A claim on a session: what a `Lock` holds when the session speaks v2."""

    __slots__ = ("session", "claim", "lost_event", "released", "io_timeout", "__weakref__")

    def __init__(self, session: SyncSession, claim: ClaimState, io_timeout: float) -> None:
        self.session = session
        self.claim = claim
        self.lost_event = threading.Event()
        claim.watch = self
        self.released = False
        self.io_timeout = io_timeout

    @property
    def lease_ms(self) -> int:
        return self.session.core.lease_ms

    def deadline_ns(self) -> int:
        with self.session.cond:
            return self.session.core.deadline()

    @property
    def loss(self) -> Optional[LockLost]:
        return self.claim.loss

    def status(self) -> Status:
        """The status after checking the deadline against the clock now."""
        if self.claim.live and current_pid() == self.session.pid:
            self.session.check()
        return owner_view(self.claim, self.released)

    def wait_until(
        self, ready: Callable[[Status], bool], until: Optional[int], reader: bool = False
    ) -> Tuple[Status, bool]:
        """Waits until `ready(status)`, the loss, or the instant `until`
        (monotonic ns). Returns the status and whether `until` passed.
        `reader`: this thread took the session's reader part (and gives it
        back here)."""
        session = self.session
        ended = False
        try:
            while True:
                with session.cond:
                    now = time.monotonic_ns()
                    session.core.check(now)
                    ended = session.settle_locked() or ended
                    status = owner_view(self.claim, self.released)
                    if status is Status.LOST or ready(status):
                        return status, False
                    limit = session.core.deadline()
                    if until is not None:
                        if now >= until:
                            return status, True
                        limit = min(limit, until)
                    gen = session.gen
                    # The reply to this claim's request is due: read it here
                    # rather than wait for the reactor thread to be scheduled.
                    direct = session.direct and self.claim.status is CStatus.PENDING
                    if not direct and not reader:
                        session.cond.wait(max(limit - now, 0) / 1e9)
                        continue
                held, reader = reader, False
                if session.read_direct(limit, held):
                    continue
                with session.cond:  # another thread reads: wait for what it feeds
                    while session.gen == gen and time.monotonic_ns() < limit:
                        session.cond.wait(max(limit - time.monotonic_ns(), 0) / 1e9)
        finally:
            if reader:
                session.give_reader()
            if ended:
                session.close()

    def release(self, wait: bool) -> Optional[LockLost]:
        """Sends RELEASE; with `wait`, returns once RELEASED is read (or the
        session has ended), within `io_timeout`: past it the session is
        closed, which releases every claim on it. Returns the loss that
        ended the claim first, if one did."""
        session = self.session
        if current_pid() != session.pid:
            self.released = True  # the parent's claim: never touched here
            return None
        reader = wait and session.take_reader()
        try:
            with session.cond:
                now = time.monotonic_ns()
                session.core.check(now)
                ended = session.settle_locked()
                if not self.released:
                    self.released = True
                    session.core.release(self.claim, now)
            if ended:
                session.close()
            session.submit(reader)
            timed_out = False
            until = time.monotonic_ns() + int(self.io_timeout * 1e9)
            while wait:
                with session.cond:
                    left = until - time.monotonic_ns()
                    if not self.claim.live or left <= 0:
                        timed_out = self.claim.live
                        break
                    gen = session.gen
                    if not session.direct and not reader:
                        session.cond.wait(left / 1e9)
                        continue
                held, reader = reader, False
                if session.read_direct(until, held):
                    continue
                with session.cond:
                    while session.gen == gen and time.monotonic_ns() < until:
                        session.cond.wait(max(until - time.monotonic_ns(), 0) / 1e9)
        finally:
            if reader:
                session.give_reader()
        if timed_out:
            session.fail(
                LockLost.connection(TimeoutError(f"no reply to a RELEASE within {self.io_timeout}s"))
            )
        return self.claim.loss

    def release_from_gc(self) -> None:
        """From `__del__`, on any thread, perhaps one holding this session's
        lock: only queues the release for the reactor thread."""
        if self.released or current_pid() != self.session.pid:
            return
        reactor = self.session.reactor
        if reactor is not None:
            reactor.command("release", self.session, self)


class _Epoll:
    """Readiness by epoll, each session's socket one-shot: after an event
    it stays disarmed until `arm`, so an owner thread can read its reply
    itself while the reactor thread leaves that socket alone."""

    oneshot = True

    def __init__(self, wake: socket.socket) -> None:
        self._epoll = select.epoll()
        self._wake = wake.fileno()
        self._epoll.register(self._wake, select.EPOLLIN)
        self._sessions: Dict[int, SyncSession] = {}

    def add(self, session: SyncSession) -> None:
        fd = session.sock.fileno()
        self._sessions[fd] = session
        self._epoll.register(fd, select.EPOLLIN | select.EPOLLONESHOT)

    def arm(self, session: SyncSession) -> None:
        """From any thread (epoll is the kernel's, and thread-safe)."""
        events = select.EPOLLIN | select.EPOLLONESHOT | (select.EPOLLOUT if session.unsent else 0)
        try:
            fd = session.sock.fileno()
            if fd >= 0 and not session.closed:
                self._epoll.modify(fd, events)
        except (OSError, ValueError):
            pass  # closed meanwhile

    def disarm(self, session: SyncSession) -> None:
        """From any thread: no event for this socket until `arm`."""
        try:
            fd = session.sock.fileno()
            if fd >= 0 and not session.closed:
                self._epoll.modify(fd, 0)
        except (OSError, ValueError):
            pass  # closed meanwhile

    def remove(self, session: SyncSession) -> None:
        fd = session.sock.fileno()
        if self._sessions.get(fd) is session:
            del self._sessions[fd]
            try:
                self._epoll.unregister(fd)
            except (OSError, ValueError):
                pass

    def poll(self, timeout: Optional[float]) -> List[Tuple[Optional[SyncSession], bool, bool]]:
        ready: List[Tuple[Optional[SyncSession], bool, bool]] = []
        for fd, events in self._epoll.poll(-1 if timeout is None else timeout):
            if fd == self._wake:
                ready.append((None, True, False))
            elif fd in self._sessions:
                readable = bool(events & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR))
                ready.append((self._sessions[fd], readable, bool(events & select.EPOLLOUT)))
        return ready


class _Selector:
    """Readiness by `selectors` where epoll is missing: level-triggered,
    so only the reactor thread reads (no direct reads by owners)."""

    oneshot = False

    def __init__(self, wake: socket.socket) -> None:
        self._sel = selectors.DefaultSelector()
        self._sel.register(wake, selectors.EVENT_READ, None)

    def add(self, session: SyncSession) -> None:
        self._sel.register(session.sock, selectors.EVENT_READ, session)

    def arm(self, session: SyncSession) -> None:
        """Reactor thread only."""
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if session.unsent else 0)
        try:
            if not session.closed:
                self._sel.modify(session.sock, events, session)
        except (KeyError, ValueError, OSError):
            pass

    def remove(self, session: SyncSession) -> None:
        try:
            self._sel.unregister(session.sock)
        except (KeyError, ValueError):
            pass

    def poll(self, timeout: Optional[float]) -> List[Tuple[Optional[SyncSession], bool, bool]]:
        return [
            (key.data, bool(events & selectors.EVENT_READ), bool(events & selectors.EVENT_WRITE))
            for key, events in self._sel.select(timeout)
        ]


class SessionReactor:
    """An event loop over sessions on one daemon thread: reads (unless an
    owner is reading its own reply), heartbeats, idle time, and what other
    threads hand it through a command queue."""

    def __init__(self) -> None:
        self.pid = current_pid()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._poller = _Epoll(self._wake_r) if hasattr(select, "epoll") else _Selector(self._wake_r)
        self._commands: Deque[Tuple[str, SyncSession, Optional[V2Claim]]] = collections.deque()
        self._heap: List[Tuple[int, int, SyncSession]] = []
        self._seq = itertools.count()
        self._thread = threading.Thread(target=self._run, name="monolock-sessions", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive() and self.pid == current_pid()

    def command(self, what: str, session: SyncSession, claim: Optional[V2Claim] = None) -> None:
        """Queues work for the reactor thread (a deque append and a one-byte
        write: safe from any thread, from `__del__` too)."""
        self._commands.append((what, session, claim))
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass  # a full wake-up buffer already wakes the loop

    def arm(self, session: SyncSession) -> None:
        """After an owner's direct read: the reactor watches the socket
        again (one-shot readiness only; a no-op for the selector)."""
        if self._poller.oneshot:
            self._poller.arm(session)

    def disarm(self, session: SyncSession) -> None:
        """Before an owner's direct read (one-shot readiness only)."""
        if isinstance(self._poller, _Epoll):
            self._poller.disarm(session)

    # Everything below runs on the reactor thread only.

    def _run(self) -> None:
        while True:
            self._take_commands()
            while self._heap and self._heap[0][2].wake_at != self._heap[0][0]:
                heapq.heappop(self._heap)
            timeout = None
            if self._heap:
                timeout = max(self._heap[0][0] - time.monotonic_ns(), 0) / 1e9
            for session, readable, writable in self._poller.poll(timeout):
                if session is None:
                    self._drain_wake()
                    continue
                if writable:
                    self._guarded(SyncSession.flush, session)
                if readable:
                    self._guarded(self._readable, session)
                elif self._poller.oneshot:
                    self._poller.arm(session)
                elif writable:
                    self._poller.arm(session)
            self._timers(time.monotonic_ns())

    def _take_commands(self) -> None:
        while self._commands:
            what, session, claim = self._commands.popleft()
            if what == "add":
                if session.closed:
                    continue
                session.direct = self._poller.oneshot
                self._poller.add(session)
                self._schedule(session)
                self._guarded(self._readable, session)  # TLS may have read ahead
            elif what == "close":
                self._close(session)
            elif what == "release" and claim is not None:
                self._guarded(lambda s: claim.release(wait=False), session)
            elif not session.closed:  # flush, write
                self._guarded(SyncSession.flush, session)
                self._poller.arm(session)

    def _guarded(self, step: Callable[[SyncSession], object], session: SyncSession) -> None:
        """Runs one session's step; a failure in it ends that session
        (its claims reported lost), never the thread that serves the rest."""
        try:
            step(session)
        except Exception as err:  # noqa: BLE001 - reported as the claims' loss
            with session.cond:
                session.core.fail(LockLost.connection(err))
                session.settle_locked()
            self._close(session)

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass

    def _schedule(self, session: SyncSession) -> None:
        with session.cond:
            wake = session.core.next_wake()
            idle = session.core.idle_since
            base = session.core.schedule.base
        if wake is not None:
            # Owners that read their replies themselves move the next PING
            # without telling this thread: look again within lease/4 anyway.
            wake = min(wake, time.monotonic_ns() + base)
        if idle is not None:
            idle_end = idle + KEEP_IDLE_NS
            wake = idle_end if wake is None else min(wake, idle_end)
        if wake is not None and wake != session.wake_at:
            session.wake_at = wake
            heapq.heappush(self._heap, (wake, next(self._seq), session))

    def _readable(self, session: SyncSession) -> None:
        if session.closed:
            return
        if not session.read_lock.acquire(blocking=False):
            return  # an owner reads its reply; it re-arms the socket after
        try:
            session.read_now()
        finally:
            session.read_lock.release()
        if not session.closed:
            self._poller.arm(session)
            self._schedule(session)

    def _timers(self, now: int) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now:
            wake, _, session = heapq.heappop(heap)
            if session.wake_at != wake or session.closed:
                continue
            session.wake_at = None
            self._guarded(lambda s: self._tick(s, now), session)

    def _tick(self, session: SyncSession, now: int) -> None:
        with session.cond:
            core = session.core
            if core.idle_since is not None and now >= core.idle_since + KEEP_IDLE_NS:
                # Under the lock that every new claim takes: a claim queued
                # from now on finds the session ended, and goes on another.
                core.fail(LockLost.connection())
            pinged = core.ping_due(now)
            ended = session.settle_locked()
        if ended:
            self._close(session)
            return
        if pinged:
            session.flush()
            self._poller.arm(session)
        self._schedule(session)

    def _close(self, session: SyncSession) -> None:
        POOL.forget(session)
        if session.closed:
            return
        with session.write_lock:
            session.closed = True
        session.wake_at = None
        with session.cond:
            if session.core.state is not SState.CLOSED:
                # Kept idle past its time, or an owner's doubt: no claim is lost
                # that was not already reported.
                session.core.fail(LockLost.connection())
            session.settle_locked()
        self._poller.remove(session)
        with session.write_lock:
            shutdown_socket(session.sock)  # wakes an owner polling it
        if session.tls:
            # The SSL object is freed by the close: not while its reader uses it.
            with session.read_lock:
                session.sock.close()
        else:
            with session.write_lock:
                session.sock.close()


class SessionPool:
    """The process's sessions, by server and lease, and the addresses that
    answered the OPEN with ERROR 0x10 (v1 only)."""

    def __init__(self) -> None:
        self.pid = current_pid()
        self.lock = threading.Lock()
        self.sessions: Dict[PoolKey, List[SyncSession]] = {}
        self.opening: Dict[Tuple[PoolKey, int], threading.Event] = {}
        self.v1_only: Dict[PoolKey, bool] = {}
        self.reactor: Optional[SessionReactor] = None

    def is_v1(self, key: PoolKey) -> bool:
        return key in self.v1_only

    def forget_v1(self, key: PoolKey) -> None:
        """The address failed to connect: the next attempt tries v2 anew
        (the server behind it may have been upgraded)."""
        self.v1_only.pop(key, None)

    def forget(self, session: SyncSession) -> None:
        with self.lock:
            sessions = self.sessions.get(session.key)
            if sessions is not None and session in sessions:
                sessions.remove(session)
                if not sessions:
                    del self.sessions[session.key]

    def session(self, endpoints: Endpoints, address: Address, lease_ms: int) -> SyncSession:
        """A session to `address` with this lease that has room for one more
        claim: an open one, or a new one. Raises V1Only, DialFailed,
        ConnectError (the wrong port), LockLost (the OPEN's loss)."""
        key = pool_key(endpoints, address)
        while True:
            with self.lock:
                sessions = self.sessions.setdefault(key, [])
                for session in sessions:
                    if (
                        session.core.lease_ms == lease_ms
                        and not session.closed
                        and not session.full
                        and session.core.has_room()
                    ):
                        return session
                opening = self.opening.get((key, lease_ms))
                evicted: Optional[SyncSession] = None
                if opening is None:
                    if len(sessions) >= MAX_SESSIONS_PER_ADDRESS:
                        idle = [s for s in sessions if s.core.in_use() == 0]
                        if not idle:
                            raise sessions_full(address)
                        evicted = idle[0]
                        sessions.remove(evicted)
                    opening = self.opening[(key, lease_ms)] = threading.Event()
                    mine = True
                else:
                    mine = False
            if evicted is not None:
                evicted.close()
            if not mine:
                opening.wait(endpoints._connect_timeout + lease_ms / 1000)
                continue
            try:
                session = self._open(endpoints, address, key, lease_ms)
                with self.lock:
                    self.sessions.setdefault(key, []).append(session)
                return session
            finally:
                with self.lock:
                    del self.opening[(key, lease_ms)]
                opening.set()

    def _open(self, endpoints: Endpoints, address: Address, key: PoolKey, lease_ms: int) -> SyncSession:
        """Dials, sends OPEN and reads OPENED in the caller's thread."""
        try:
            sock = dial(endpoints, address)
        except (OSError, ssl.SSLError) as err:
            raise DialFailed(str(err)) from err
        sent = time.monotonic_ns()
        core = SessionCore(lease_ms, sent)
        # A server answers at once: silence past the connect timeout is a
        # peer that is no monolock server (or one that cannot serve).
        answer_by = sent + int(endpoints._connect_timeout * 1e9)
        try:
            sock.sendall(bytes(core.outbox))
            core.outbox.clear()
            while core.state is SState.OPENING:
                now = time.monotonic_ns()
                core.check(now)
                if core.is_closed():
                    break
                sock.settimeout(max(min(core.deadline(), answer_by) - now, 0) / 1e9)
                data = sock.recv(READ_CHUNK)
                if not data:
                    core.closed(None)
                    break
                core.receive(data, time.monotonic_ns())
            sock.setblocking(False)
        except socket.timeout:
            core.check(time.monotonic_ns())
            waited = (min(core.deadline(), answer_by) - sent) / 1e9
            core.fail(LockLost.expired(lease_ms, True, "OPEN", within=round(waited, 1)))
        except (OSError, ssl.SSLError) as err:
            core.closed(err)
        except BaseException:
            sock.close()
            raise
        if core.state is not SState.OPEN:
            sock.close()
            if core.v1_only:
                self.v1_only[key] = True
                raise V1Only()
            loss = core.loss or LockLost.connection()
            raise loss
        session = SyncSession(core, sock, address, key)
        session.reactor = self._reactor()
        session.reactor.command("add", session)
        return session

    def _reactor(self) -> SessionReactor:
        with self.lock:
            if self.reactor is None or not self.reactor.alive():
                self.reactor = SessionReactor()
            return self.reactor


POOL = SessionPool()


def _after_fork_in_child() -> None:
    """A child never shares its parent's sessions: it starts an empty pool
    (the parent's descriptors are closed here without a shutdown, which
    would end the parent's sessions)."""
    global POOL, _pid
    _pid = os.getpid()
    old = POOL
    POOL = SessionPool()
    for sessions in old.sessions.values():
        for session in sessions:
            session.closed = True
            try:
                socket.socket.close(session.sock)
            except OSError:
                pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def sessions_full(address: Address) -> LockLost:
    """No session to `address` can take one more claim, and no more may open."""
    return LockLost(
        LossReason.SERVER_ERROR,
        f"{MAX_SESSIONS_PER_ADDRESS} sessions to {address} are full "
        "(each carries the server's max_claims): release some locks first",
        code=0x09,
    )


def never_seen(claim: ClaimState) -> bool:
    """The claim ended before the server could have acted on it: its
    session had ended before the ACQUIRE was queued, or was closed as idle
    (ERROR 0x03: it had no claim, so it never read this ACQUIRE). It may go
    on a new session."""
    if claim.status is not CStatus.LOST or claim.token is not None:
        return False
    return claim.unsent or (claim.loss is not None and claim.loss.code == IDLE_CLOSED)

