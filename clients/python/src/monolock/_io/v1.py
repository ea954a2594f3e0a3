"""A protocol v1 connection of the sync client: one claim, its socket, and
what its owner waits on, served by the reactor thread (`reactor.py`) and
driven by the v1 core (`_core/claim.py`).

The first reply is read in the caller's thread (`first_reply`): an
uncontended lock needs no hand-off to the reactor thread to be granted.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from typing import Callable, Optional, Tuple

from .._core import frames
from .._core.acquire import Request
from .._core.address import Address
from .._core.claim import Claim, Status, release_unconfirmed
from .._core.schedule import MS
from ..errors import LockLost
from .connect import Endpoints, connect, read_first_reply
from .reactor import READ_CHUNK, WOULD_BLOCK, Channel, Reactor, read_available, shutdown_socket

#: When a one-byte heartbeat cannot be written at once (a full send buffer:
#: the server is not reading), try again this much later. The deadline
#: still bounds the claim.
WRITE_RETRY_NS = 5 * MS


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


def first_reply(
    endpoints: Endpoints, request: Request, addresses: Optional[Tuple[Address, ...]]
) -> Tuple[Claim, socket.socket, Address]:
    """Connects, sends the ACQUIRE and reads the server's first reply in
    the caller's thread; the socket is left non-blocking."""
    sock, address = connect(endpoints, addresses)
    sent = time.monotonic_ns()
    claim = Claim(request.name, request.lease_ms, sent)
    read_first_reply(sock, request.v1_frame(), claim, sent, endpoints._connect_timeout)
    return claim, sock, address


class Session(Channel):
    """A claim, its socket, and what its owner waits on. The condition
    guards the claim; the reactor thread and the owner's thread share it."""

    #: A heartbeat is one byte, never left waiting: see `retry_at`.
    unsent = b""

    __slots__ = (
        "claim",
        "sock",
        "reactor",
        "cond",
        "lost_event",
        "closed_event",
        "closed",
        "released",
        "wake_at",
        "retry_at",
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
        #: Set once the reactor has closed the socket (`closed` for the poller).
        self.closed_event = threading.Event()
        self.closed = False
        #: The owner released the claim (a release is not a loss).
        self.released = False
        self.wake_at: Optional[int] = None
        #: A heartbeat the send buffer did not take goes again then.
        self.retry_at: Optional[int] = None
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
        return release_unconfirmed(self.io_timeout).for_lock(self.claim.name)

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

    # Channel: the reactor thread only

    def readable(self) -> bool:
        chunks, eof, cause = read_available(self.sock, short_read_drains=False)
        if self.released:
            # Only the server's EOF is awaited now: it confirms the release.
            if eof or cause is not None:
                self.reactor.close_now(self)
            return True
        now = time.monotonic_ns()
        with self.cond:
            was_lost = self.claim.status is Status.LOST
            if chunks:
                self.claim.receive(b"".join(chunks), now)
            if eof or cause is not None:
                self.claim.closed(cause)
            self._settle_locked(was_lost)
        if self.claim.status is Status.LOST:
            self.reactor.close_now(self)
        return True

    def next_wake(self, now: int) -> Optional[int]:
        if self.released:
            return None  # only the server's EOF is awaited now
        if self.retry_at is not None:
            return self.retry_at
        with self.cond:
            return self.claim.next_wake()

    def tick(self, now: int) -> None:
        self.retry_at = None
        if self.released:
            return
        with self.cond:
            was_lost = self.claim.status is Status.LOST
            due = self.claim.heartbeat_due(now)
            self._settle_locked(was_lost)
        if self.claim.status is Status.LOST:
            self.reactor.close_now(self)
            return
        if not due:
            return
        sent_at = time.monotonic_ns()
        try:
            written = self.sock.send(frames.HEARTBEAT)
        except WOULD_BLOCK:
            written = 0
        except (OSError, ssl.SSLError) as err:
            self.failed(err)
            self.reactor.close_now(self)
            return
        if written:
            with self.cond:
                self.claim.heartbeat_sent(sent_at)
        else:
            self.retry_at = sent_at + WRITE_RETRY_NS

    def failed(self, err: Exception) -> None:
        with self.cond:
            was_lost = self.claim.status is Status.LOST
            self.claim.closed(err)
            self._settle_locked(was_lost)

    def begin_close(self) -> bool:
        return not self.closed

    def finish_close(self) -> None:
        shutdown_socket(self.sock)
        self.sock.close()
        self.closed = True
        self.closed_event.set()
        with self.cond:
            self.cond.notify_all()
