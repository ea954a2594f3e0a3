"""The blocking client: `Client`, and the `Lock` it hands out."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from types import TracebackType
from typing import Callable, Optional, Tuple, Type

from . import _frames
from ._address import Address
from ._claim import Claim, Status
from ._connect import Endpoints, connect, first_reply_error
from ._reactor import READ_CHUNK, Reactor, Session, shared_reactor, shutdown_socket
from ._timeouts import bound_ns
from .errors import LockLost, LossReason, NotAcquired

#: The lease when none is given, in seconds.
DEFAULT_LEASE = 10.0


class Lock:
    """A held lock. **The lock is the connection**: while it lives, a
    background thread heartbeats it; `release()` (or leaving the
    `with` block, or the object being garbage-collected) closes the
    connection, and the server hands the lock to the next waiter at once.

    Hand `token` to everything the lock guards (the fencing token), and
    stop the guarded work when `is_held()` turns False or `lost_event` is set.
    """

    __slots__ = ("_session", "_name", "_token", "_address", "__weakref__")

    def __init__(self, session: Session, name: str, token: int, address: Address) -> None:
        self._session = session
        self._name = name
        self._token = token
        self._address = address

    @property
    def name(self) -> str:
        """The lock's name."""
        return self._name

    @property
    def token(self) -> int:
        """The fencing token of this grant: strictly greater than every
        token issued before it by the same server process."""
        return self._token

    @property
    def lease(self) -> float:
        """The session's lease in seconds (as sent: whole milliseconds)."""
        return self._session.claim.lease_ms / 1000

    @property
    def address(self) -> str:
        """The server that granted the lock."""
        return str(self._address)

    @property
    def deadline(self) -> float:
        """`S + 0.8 x lease` on `time.monotonic()`: the instant at which the
        claim is given up unless a heartbeat sent after S is confirmed."""
        with self._session.cond:
            return self._session.claim.deadline() / 1e9

    def is_held(self) -> bool:
        """Whether the lock is still held, judged against the clock now:
        False once the claim was lost, and False as soon as the monotonic
        clock passes the deadline, even if no thread has run since (a
        process resumed from a pause reads False before it can act)."""
        return self._session.status() is Status.HELD and not self._session.released

    def check(self) -> None:
        """Raises LockLost when the lock is not held (see `is_held`)."""
        if self._session.status() is Status.HELD and not self._session.released:
            return
        raise (self._session.claim.loss or LockLost.released()).with_traceback(None)

    @property
    def loss(self) -> Optional[LockLost]:
        """Why the lock was lost, or None while it is held (or after a
        plain release)."""
        self._session.status()
        return self._session.claim.loss

    @property
    def lost_event(self) -> threading.Event:
        """A `threading.Event` set the moment the lock is lost (never by a
        plain release): wait on it from any thread."""
        return self._session.lost_event

    def wait_lost(self, timeout: Optional[float] = None) -> Optional[LockLost]:
        """Blocks until the lock is lost (returns why) or `timeout` seconds
        pass (returns None)."""
        timeout_ns = bound_ns(timeout, "timeout")
        until = None if timeout_ns is None else time.monotonic_ns() + timeout_ns
        status, _ = self._session.wait_until(lambda _: False, until)
        return self._session.claim.loss if status is Status.LOST else None

    def release(self) -> None:
        """Closes the connection: the server hands the lock on at once.
        Idempotent.

        Raises LockLost when the lock had been lost before the release:
        the guarded work may have run without the lock.
        """
        loss = self._session.release(wait=True)
        if loss is not None:
            raise loss.with_traceback(None)

    def __enter__(self) -> Lock:
        """Raises LockLost when the lock is no longer held (released, or
        lost): a `with` block never runs its body without the lock."""
        if not self.is_held():
            raise _not_enterable(self._name, self._session.claim.loss)
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        loss = self._session.release(wait=True)
        if loss is not None and exc is None:
            raise loss.with_traceback(None)

    def __del__(self) -> None:
        session = getattr(self, "_session", None)
        if session is not None and not session.released:
            try:
                session.release(wait=False)
            except Exception:  # at interpreter exit; the kernel closes the socket
                pass

    def __repr__(self) -> str:
        return f"<monolock.Lock name={self._name!r} token={self._token} held={self.is_held()}>"


def _not_enterable(name: str, loss: Optional[LockLost]) -> LockLost:
    """The error of a `with` (or `async with`) on a lock that is no longer
    held: its loss, or the release, said plainly."""
    if loss is None:
        return LockLost(
            LossReason.RELEASED,
            f"cannot enter a with-block on lock {name!r}: it was released; "
            "take it again with client.lock()",
        )
    entered = LockLost(
        loss.reason,
        f"cannot enter a with-block on lock {name!r}: it was lost ({loss}); "
        "take it again with client.lock()",
        code=loss.code,
        detail=loss.detail,
    )
    entered.__cause__ = loss
    return entered


class Client(Endpoints):
    """A monolock client: where the servers are and how to reach them.

    `address` is `"host:port"`, several comma-separated (`"a:7070,b:7070"`)
    or a list; None reads `$MONOLOCK_ADDRESS`, else `127.0.0.1:7070`. Several
    addresses are tried in order when one refuses or does not answer within
    `connect_timeout`; a claim is never moved once its ACQUIRE is sent.
    `ssl_context` turns on TLS (with a client certificate loaded into it:
    mTLS); `server_hostname` overrides the name the server certificate is
    checked against (default: the address's host).

    Each lock opens its own connection, because on monolock **the
    connection is the claim**. A Client holds no connection itself and can
    be shared by threads.
    """

    #: Where claims are driven (the benchmark and tests swap it; None:
    #: the process's shared reactor).
    _reactor_factory: Optional[Callable[[], Reactor]] = None

    def lock(self, name: str, lease: float = DEFAULT_LEASE, *, wait: Optional[float] = None) -> Lock:
        """Waits for the lock `name` in its FIFO queue and returns it once
        the server grants it (promotion is pushed: no polling). Use the
        result in a `with` block, or call `release()`.

        `lease` (seconds) is the failure detector, not a work deadline: the
        lock heartbeats about four times per lease and may be held for
        hours. `wait` bounds the time in the queue, in seconds (None or
        `float("inf")`: no bound): when it runs out the place is given up
        and NotAcquired is raised.

        Raises InvalidArgument (before connecting), ConnectError,
        NotAcquired, or LockLost when the place in the queue ends first
        (for example `code` 0x18: the ACL refuses this lock).
        """
        lock = self._acquire(name, lease, wait, give_up_when_queued=False)
        assert lock is not None
        return lock

    def try_lock(self, name: str, lease: float = DEFAULT_LEASE) -> Optional[Lock]:
        """Takes the lock if it is free; None if someone holds it (the
        connection is closed at once and leaves no trace in the queue).

        Raises as `lock` does.
        """
        return self._acquire(name, lease, None, give_up_when_queued=True)

    def _acquire(
        self, name: str, lease: float, wait: Optional[float], give_up_when_queued: bool
    ) -> Optional[Lock]:
        raw_name = _frames.encode_name(name)
        lease_ms = _frames.lease_ms(lease)
        wait_ns = bound_ns(wait, "wait")
        start = time.monotonic_ns()
        claim, sock, address = self._first_reply(name, raw_name, lease_ms)
        # From here on the connection is a claim: whatever ends this call
        # without handing a Lock over, an exception included, ends it.
        session: Optional[Session] = None
        try:
            if claim.status is Status.LOST:
                loss = claim.loss or LockLost.connection()
                raise first_reply_error(address, loss) or loss
            if claim.status is Status.WAITING and give_up_when_queued:
                shutdown_socket(sock)
                sock.close()
                return None
            # Read before the reactor thread shares the claim: from `add` on
            # it may end the claim at any moment (a queued claim that ends
            # before its grant has no token).
            first_status = claim.status
            session = Session(claim, sock, (self._reactor_factory or shared_reactor)())
            session.reactor.add(session)
            if first_status is Status.WAITING:
                until = None if wait_ns is None else start + wait_ns
                status, timed_out = session.wait_until(lambda s: s is Status.HELD, until)
                if timed_out:
                    raise NotAcquired(name, wait if wait is not None else 0.0)
                if status is not Status.HELD:
                    raise claim.loss or LockLost.connection()
            token = claim.token
            assert token is not None
            return Lock(session, name, token, address)
        except BaseException:
            if session is None:
                sock.close()
            else:
                session.release(wait=False)
            raise

    def _first_reply(
        self, name: str, raw_name: bytes, lease_ms: int
    ) -> Tuple[Claim, socket.socket, Address]:
        """Connects, sends the ACQUIRE and reads the server's first reply in
        the caller's thread (an uncontended lock needs no hand-off to the
        reactor thread to be granted); the socket is left non-blocking."""
        frame = _frames.acquire(raw_name, lease_ms)
        sock, address = connect(self)
        claim = Claim(name, lease_ms, time.monotonic_ns())
        try:
            sock.sendall(frame)
            while claim.status is Status.UNANSWERED:
                now = time.monotonic_ns()
                claim.check(now)
                if claim.loss is not None:
                    break
                sock.settimeout((claim.deadline() - now) / 1e9)
                data = sock.recv(READ_CHUNK)
                if not data:
                    claim.closed(None)
                    break
                claim.receive(data, time.monotonic_ns())
            sock.setblocking(False)
        except socket.timeout:
            claim.check(time.monotonic_ns())
            claim.lose(LockLost.expired(lease_ms, unanswered=True))
        except (OSError, ssl.SSLError) as err:
            claim.closed(err)
        except BaseException:  # KeyboardInterrupt while waiting: nothing stays open
            sock.close()
            raise
        return claim, sock, address
