"""The sync client's driver: one daemon thread with one selector that reads
and heartbeats every claim of the process.

Why one shared thread and not one thread per held lock: both were built
on this class and measured in one run (clients/python/bench/threads.py,
table in docs/client-python.md): a lock cycle p50 of 187 us against 302 us
(a thread per lock starts and ends a thread each time), and per held lock
4.8 KB against 23.8 KB of memory and about a third of the CPU (500 locks
heartbeating: 4.7 % against 13.3 %). Claims never wait on each other in the
loop: reads and writes are non-blocking, and a heartbeat is one byte.

Callers talk to the thread through a queue and a wake-up socket; they
never touch the selector.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import os
import selectors
import socket
import ssl
import threading
import time
from typing import Callable, Deque, List, Optional, Tuple

from ._claim import Claim, Status
from ._frames import HEARTBEAT
from ._schedule import MS
from .errors import LockLost

#: Bytes read from a socket at a time. Frames are at most 258 bytes.
READ_CHUNK = 4096
#: When a one-byte heartbeat cannot be written at once (a full send buffer:
#: the server is not reading), try again this much later. The deadline
#: still bounds the claim.
WRITE_RETRY_NS = 5 * MS

_WOULD_BLOCK = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


def half_close(sock: socket.socket) -> bool:
    """Shuts the write side down: a v1 server reads the EOF, releases the
    claim in its table, and then closes (its EOF confirms the release).
    False when the socket is already gone."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_WR)
    except OSError:
        return False
    return True


def leave_queue(sock: socket.socket, timeout: float) -> None:
    """Leaves a v1 queue the way a release does (half-close, then read
    until the server's EOF, at most `timeout` seconds), then closes: once
    this returns the server has dropped the claim (or the bound ran out)."""
    try:
        sock.settimeout(timeout)
        if half_close(sock):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                if not sock.recv(READ_CHUNK):
                    break
    except (OSError, ssl.SSLError, ValueError):
        pass  # closed, reset or timed out: the connection ends here anyway
    finally:
        shutdown_socket(sock)
        sock.close()


def shutdown_socket(sock: socket.socket) -> None:
    """Sends FIN now (the server hands the lock on at once) without closing
    the descriptor, which the reactor thread may be polling. The plain
    socket method is used on TLS sockets too: it does not touch the TLS
    state that the reactor thread owns."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


class Session:
    """A claim, its socket, and what its owner waits on. The condition
    guards the claim; the reactor thread and the owner's thread share it."""

    __slots__ = (
        "claim",
        "sock",
        "reactor",
        "cond",
        "lost_event",
        "closed_event",
        "released",
        "wake_at",
        "io_timeout",
        "__weakref__",
    )

    def __init__(self, claim: Claim, sock: socket.socket, reactor: Reactor) -> None:
        self.claim = claim
        self.sock = sock
        self.reactor = reactor
        self.cond = threading.Condition(threading.Lock())
        #: Set exactly when the claim is lost.
        self.lost_event = threading.Event()
        #: Set once the reactor has closed the socket.
        self.closed_event = threading.Event()
        #: The owner released the claim (a release is not a loss).
        self.released = False
        #: The instant of this session's live heap entry, if any.
        self.wake_at: Optional[int] = None
        #: How long a release waits for the server's EOF, in seconds.
        self.io_timeout = 5.0

    @property
    def lease_ms(self) -> int:
        return self.claim.lease_ms

    def deadline_ns(self) -> int:
        with self.cond:
            return self.claim.deadline()

    @property
    def loss(self) -> Optional[LockLost]:
        return self.claim.loss

    def release_from_gc(self) -> None:
        """From `__del__`: shuts the socket down on the spot."""
        self.release(wait=False)

    def status(self) -> Status:
        """The status after checking the deadline against the clock now."""
        with self.cond:
            ended = self._check_locked(time.monotonic_ns())
            status = self.claim.status
        if ended:
            self._drop()
        return status

    def _check_locked(self, now: int) -> bool:
        if self.released:
            return False  # a released claim is over, not lost
        was_lost = self.claim.status is Status.LOST
        self.claim.check(now)
        return self._settle_locked(was_lost)

    def _settle_locked(self, was_lost: bool) -> bool:
        """After the claim changed: wake waiters; True if it just ended."""
        self.cond.notify_all()
        if not was_lost and self.claim.status is Status.LOST:
            self.lost_event.set()
            return True
        return False

    def _drop(self) -> None:
        """From an owner's thread: end the connection now and let the
        reactor close the descriptor."""
        shutdown_socket(self.sock)
        self.reactor.remove(self)

    def release(self, wait: bool) -> Optional[LockLost]:
        """Ends the claim; returns the loss that ended it before, if one
        did. With `wait`, the release is confirmed: v1 has no release frame,
        so the write side is shut down and the reactor reads until the
        server's EOF (the server releases before it closes), at most
        `io_timeout`; past it the connection is closed and the release
        reported as unconfirmed (a loss, `connection`). Without `wait` (a
        garbage-collected lock, a failed acquire), the connection is shut
        down on the spot."""
        with self.cond:
            ended = self._check_locked(time.monotonic_ns())
            first = not self.released
            self.released = True
            loss = self.claim.loss
        if ended or loss is not None or not wait:
            if first or ended:
                self._drop()
            if wait:
                self.closed_event.wait(self.io_timeout)
            return loss
        if not first:
            self.closed_event.wait(self.io_timeout)
            return None
        if half_close(self.sock) and self.closed_event.wait(self.io_timeout):
            return None
        self._drop()
        return LockLost.connection(
            TimeoutError(f"the server did not confirm the release within {self.io_timeout}s")
        ).for_lock(self.claim.name)

    def wait_until(
        self, ready: Callable[[Status], bool], until: Optional[int]
    ) -> Tuple[Status, bool]:
        """Waits until `ready(status)`, the loss, or the instant `until`
        (monotonic ns). Returns the status and whether `until` passed."""
        ended = False
        try:
            with self.cond:
                while True:
                    now = time.monotonic_ns()
                    ended = self._check_locked(now) or ended
                    status = self.claim.status
                    if status is Status.LOST or ready(status):
                        return status, False
                    limit = self.claim.deadline()
                    if until is not None:
                        if now >= until:
                            return status, True
                        limit = min(limit, until)
                    self.cond.wait(max(limit - now, 0) / 1e9)
        finally:
            if ended:
                self._drop()


_Heap = List[Tuple[int, int, Session]]


class Reactor:
    """A selector loop over sessions on one daemon thread.

    `dedicated` reactors serve one session and end their thread when it
    ends (the thread-per-lock design, kept for the measurement)."""

    def __init__(self, dedicated: bool = False) -> None:
        self.dedicated = dedicated
        self.pid = os.getpid()
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._commands: Deque[Tuple[bool, Session]] = collections.deque()
        self._heap: _Heap = []
        self._seq = itertools.count()
        self._sessions = 0
        self._served = False
        self._thread = threading.Thread(target=self._run, name="monolock-reactor", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive() and self.pid == os.getpid()

    def join(self, timeout: float) -> bool:
        """Waits for the thread to end; True if it has."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def add(self, session: Session) -> None:
        """Starts reading and heartbeating `session` (its socket is
        non-blocking and its ACQUIRE is sent)."""
        self._command(True, session)

    def remove(self, session: Session) -> None:
        """Stops serving `session` and closes its socket."""
        self._command(False, session)

    def _command(self, add: bool, session: Session) -> None:
        self._commands.append((add, session))
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # a full wake-up buffer already wakes the loop

    # Everything below runs on the reactor thread only.

    def _run(self) -> None:
        while True:
            timeout = self._take_commands()
            if timeout is None:
                break
            for key, _ in self._sel.select(None if timeout < 0 else timeout):
                if key.data is None:
                    self._drain_wake()
                else:
                    self._guarded(self._readable, key.data)
            self._timers(time.monotonic_ns())
        self._sel.close()
        self._wake_r.close()
        self._wake_w.close()

    def _take_commands(self) -> Optional[float]:
        """Applies queued adds and removes. The select timeout in seconds
        (negative: none), or None when a dedicated reactor is done."""
        while self._commands:
            add, session = self._commands.popleft()
            if add:
                # A dedicated reactor has had its session, served or not.
                self._served = True
                if session.closed_event.is_set():
                    continue
                # A session released before this add still has to read the
                # server's EOF (the confirmation of its release): served
                # until then; one given up on the spot has a remove queued.
                self._sel.register(session.sock, selectors.EVENT_READ, session)
                self._sessions += 1
                self._schedule(session)
                # The reply may already be buffered (TLS reads ahead).
                self._readable(session)
            else:
                self._close(session)
        if self.dedicated and self._served and self._sessions == 0:
            return None
        while self._heap and self._heap[0][2].wake_at != self._heap[0][0]:
            heapq.heappop(self._heap)
        if not self._heap:
            return -1.0
        return max(self._heap[0][0] - time.monotonic_ns(), 0) / 1e9

    def _guarded(self, step: Callable[[Session], None], session: Session) -> None:
        """Runs one session's step; a bug in it ends that claim (reported as
        lost), never the thread that serves every other claim."""
        try:
            step(session)
        except Exception as err:  # noqa: BLE001 - reported as the claim's loss
            with session.cond:
                was_lost = session.claim.status is Status.LOST
                session.claim.closed(err)
                session._settle_locked(was_lost)
            self._close(session)

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def _schedule(self, session: Session) -> None:
        with session.cond:
            wake = session.claim.next_wake()
        if wake is not None and wake != session.wake_at:
            session.wake_at = wake
            heapq.heappush(self._heap, (wake, next(self._seq), session))
        elif wake is None:
            session.wake_at = None

    def _readable(self, session: Session) -> None:
        if session.closed_event.is_set():
            return
        chunks: List[bytes] = []
        cause: Optional[BaseException] = None
        eof = False
        try:
            while True:
                data = session.sock.recv(READ_CHUNK)
                if not data:
                    eof = True
                    break
                chunks.append(data)
        except _WOULD_BLOCK:
            pass
        except (OSError, ssl.SSLError) as err:
            cause = err
        if session.released:
            if eof or cause is not None:
                self._close(session)
            return
        now = time.monotonic_ns()
        with session.cond:
            was_lost = session.claim.status is Status.LOST
            if chunks:
                session.claim.receive(b"".join(chunks), now)
            if eof or cause is not None:
                session.claim.closed(cause)
            ended = session._settle_locked(was_lost)
        if ended or session.claim.status is Status.LOST:
            self._close(session)
        else:
            self._schedule(session)

    def _timers(self, now: int) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now:
            wake, _, session = heapq.heappop(heap)
            if session.wake_at != wake or session.closed_event.is_set():
                continue
            session.wake_at = None
            self._guarded(lambda s: self._tick(s, now), session)

    def _tick(self, session: Session, now: int) -> None:
        if session.released:
            return
        with session.cond:
            was_lost = session.claim.status is Status.LOST
            due = session.claim.heartbeat_due(now)
            ended = session._settle_locked(was_lost)
        if ended or session.claim.status is Status.LOST:
            self._close(session)
            return
        if due:
            sent_at = time.monotonic_ns()
            try:
                written = session.sock.send(HEARTBEAT)
            except _WOULD_BLOCK:
                written = 0
            except (OSError, ssl.SSLError) as err:
                with session.cond:
                    session.claim.closed(err)
                    session._settle_locked(False)
                self._close(session)
                return
            if written:
                with session.cond:
                    session.claim.heartbeat_sent(sent_at)
            else:
                session.wake_at = sent_at + WRITE_RETRY_NS
                heapq.heappush(self._heap, (session.wake_at, next(self._seq), session))
                return
        self._schedule(session)

    def _close(self, session: Session) -> None:
        if session.closed_event.is_set():
            return
        session.wake_at = None
        try:
            self._sel.unregister(session.sock)
            self._sessions -= 1
        except (KeyError, ValueError):
            pass
        shutdown_socket(session.sock)
        session.sock.close()
        session.closed_event.set()
        with session.cond:
            session.cond.notify_all()


_shared: Optional[Reactor] = None
_shared_lock = threading.Lock()


def shared_reactor() -> Reactor:
    """The process's reactor, started on first use (and again in a forked
    child, where the parent's thread does not exist)."""
    global _shared
    reactor = _shared
    if reactor is not None and reactor.alive():
        return reactor
    with _shared_lock:
        if _shared is None or not _shared.alive():
            _shared = Reactor()
        return _shared


def dedicated_reactor() -> Reactor:
    """A reactor with a thread of its own for one session."""
    return Reactor(dedicated=True)
