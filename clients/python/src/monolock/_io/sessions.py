"""A protocol v2 session of the sync client: its socket, its core
(`_core/session.py`), and what the threads share, served by the reactor
thread (`reactor.py`) as one of its channels.

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

Design and figures: docs/client-python.md, "Protocol v2 sessions".
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time
from typing import TYPE_CHECKING, Optional

from .._core import pool as rules
from .._core.address import Address
from .._core.pool import PoolKey
from .._core.session import ClaimState, CStatus, SessionCore, SState
from ..errors import LockLost
from .reactor import (
    WOULD_BLOCK,
    Channel,
    Reactor,
    current_pid,
    read_available,
    shutdown_socket,
)

if TYPE_CHECKING:
    from typing import Protocol

    class Pool(Protocol):
        def forget(self, session: SyncSession) -> None: ...


class ClaimWatch:
    """What a claim's owner hangs on it (`ClaimState.watch`): the event
    that the session sets when the claim is lost, unless its owner had
    released it."""

    __slots__ = ()

    lost_event: threading.Event
    released: bool


class SyncSession(Channel):
    """A session's socket, its core, and what the threads share: the
    condition guards the core; the write lock orders the bytes sent."""

    __slots__ = (
        "core",
        "sock",
        "address",
        "key",
        "pool",
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

    def __init__(
        self, core: SessionCore, sock: socket.socket, address: Address, key: PoolKey, pool: Pool
    ) -> None:
        self.core = core
        self.sock = sock
        self.address = address
        self.key = key
        #: The pool that lends this session out (it forgets it on close).
        self.pool = pool
        self.tls = isinstance(sock, ssl.SSLSocket)
        self.pid = current_pid()
        self.cond = threading.Condition(threading.Lock())
        self.write_lock = threading.Lock()
        self.unsent = bytearray()
        self.reactor: Optional[Reactor] = None
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
                if not isinstance(claim, ClaimState):
                    continue  # watches and lookups: their owners wait on `cond`
                watch = claim.watch
                if claim.status is CStatus.LOST and isinstance(watch, ClaimWatch):
                    if not watch.released:  # an unconfirmed release is no loss to signal
                        watch.lost_event.set()
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
                reactor.flush(self)
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
            except WOULD_BLOCK:
                written = 0
            except (OSError, ssl.SSLError, ValueError) as err:
                written = 0
                failure = err
            del self.unsent[:written]
            more = bool(self.unsent)
        if failure is not None:
            self.fail(LockLost.connection(failure))
        elif more and self.reactor is not None:
            self.reactor.flush(self)

    def read_now(self) -> None:
        """Reads every byte the socket has and feeds the core (the caller
        holds `read_lock`); sends what the core queued; ends the session on
        EOF or failure."""
        if self.closed:
            return
        chunks, eof, cause = read_available(self.sock, short_read_drains=not self.tls)
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
                reactor.flush(self)

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

    def await_change(self, gen: int, until: int, held: bool) -> None:
        """Waits for the session's next change after `gen` (read under
        `cond`), or the instant `until`: reads the socket itself if no
        other thread does (`held`: this thread took the reader's part
        already, and gives it back here), else waits for what the reader
        feeds the core."""
        if self.read_direct(until, held):
            return
        with self.cond:
            while self.gen == gen and time.monotonic_ns() < until:
                self.cond.wait(max(until - time.monotonic_ns(), 0) / 1e9)

    def fail(self, loss: LockLost) -> None:
        """Ends the session now: every claim on it is lost (see
        `SessionCore.fail`), each signalled unless its owner released it;
        the reactor closes the socket."""
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
            reactor.remove(self)
        self.pool.forget(self)

    def check(self) -> None:
        """Judges the deadline against the clock now."""
        with self.cond:
            self.core.check(time.monotonic_ns())
            ended = self.settle_locked()
        if ended:
            self.close()


    # Channel: the reactor thread only

    def attach(self, direct_reads: bool) -> None:
        self.direct = direct_reads

    def readable(self) -> bool:
        if not self.read_lock.acquire(blocking=False):
            return False  # an owner reads its reply; it re-arms the socket after
        try:
            self.read_now()
        finally:
            self.read_lock.release()
        return True

    def writable(self) -> None:
        self.flush()

    def next_wake(self, now: int) -> Optional[int]:
        with self.cond:
            wake = rules.next_wake(self.core)
            pinging = self.core.next_wake() is not None
            base = self.core.schedule.base
        if wake is not None and pinging:
            # Owners that read their replies themselves move the next PING
            # without telling this thread: look again within lease/4 anyway.
            wake = min(wake, now + base)
        return wake

    def tick(self, now: int) -> None:
        with self.cond:
            core = self.core
            if rules.idle_over(core, now):
                # Under the lock that every new claim takes: a claim queued
                # from now on finds the session ended, and goes on another.
                core.fail(LockLost.connection())
            pinged = core.ping_due(now)
            ended = self.settle_locked()
        reactor = self.reactor
        assert reactor is not None
        if ended:
            reactor.close_now(self)
        elif pinged:
            self.flush()
            reactor.watch(self)

    def failed(self, err: Exception) -> None:
        with self.cond:
            self.core.fail(LockLost.connection(err))
            self.settle_locked()

    def begin_close(self) -> bool:
        self.pool.forget(self)
        if self.closed:
            return False
        with self.write_lock:
            # Under the write lock: a closed descriptor's number may already
            # be another socket's.
            self.closed = True
        with self.cond:
            if self.core.state is not SState.CLOSED:
                # Kept idle past its time, or an owner's doubt: no claim is lost
                # that was not already reported.
                self.core.fail(LockLost.connection())
            self.settle_locked()
        return True

    def finish_close(self) -> None:
        with self.write_lock:
            shutdown_socket(self.sock)  # wakes an owner polling it
        if self.tls:
            # The SSL object is freed by the close: not while its reader uses it.
            with self.read_lock:
                self.sock.close()
        else:
            with self.write_lock:
                self.sock.close()
