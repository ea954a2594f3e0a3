"""The blocking client: `Client`, and the `Lock` it hands out."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from types import TracebackType
from typing import Callable, List, Optional, Tuple, Type

from . import _address, _frames
from ._address import Address, Addresses
from ._claim import Claim, Status
from ._reactor import Reactor, Session, shared_reactor
from .errors import ConnectError, LockLost, NotAcquired

#: How long dialing one server (TCP and TLS handshake) may take, in seconds.
DEFAULT_CONNECT_TIMEOUT = 5.0
#: The lease when none is given, in seconds.
DEFAULT_LEASE = 10.0


def connect(
    addresses: Tuple[Address, ...],
    ssl_context: Optional[ssl.SSLContext],
    server_hostname: Optional[str],
    timeout: float,
) -> Tuple[socket.socket, Address]:
    """Dials the addresses in order; the first that connects (and completes
    the TLS handshake) wins. Raises ConnectError naming every address tried."""
    failures: List[str] = []
    last: Optional[BaseException] = None
    for address in addresses:
        try:
            sock = socket.create_connection((address.host, address.port), timeout=timeout)
        except OSError as err:
            failures.append(f"{address}: {err}")
            last = err
            continue
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ssl_context is not None:
                sock = ssl_context.wrap_socket(
                    sock,
                    server_hostname=_address.server_hostname(address, server_hostname),
                    do_handshake_on_connect=False,
                )
                sock.settimeout(timeout)
                sock.do_handshake()
        except (OSError, ssl.SSLError) as err:
            sock.close()
            failures.append(f"{address}: {err}")
            last = err
            continue
        return sock, address
    raise ConnectError(
        "could not connect to " + "; ".join(failures), [str(a) for a in addresses]
    ) from last


def refused_handshake(address: Address, loss: LockLost) -> Optional[ConnectError]:
    """A TLS alert before the first reply is the server refusing the
    handshake (TLS 1.3 clients learn it on their first read, e.g. an mTLS
    server that wants a client certificate): a failed connect, not a lost claim."""
    cause = loss.__cause__
    if isinstance(cause, ssl.SSLError):
        error = ConnectError(
            f"could not connect to {address}: the server refused the TLS handshake: {cause}",
            [str(address)],
        )
        error.__cause__ = cause
        return error
    return None


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
        raise self._session.claim.loss or LockLost.connection()

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
        until = None if timeout is None else time.monotonic_ns() + int(timeout * 1e9)
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
            raise loss

    def __enter__(self) -> Lock:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        loss = self._session.release(wait=True)
        if loss is not None and exc is None:
            raise loss

    def __del__(self) -> None:
        session = getattr(self, "_session", None)
        if session is not None and not session.released:
            try:
                session.release(wait=False)
            except Exception:  # at interpreter exit; the kernel closes the socket
                pass

    def __repr__(self) -> str:
        return f"<monolock.Lock name={self._name!r} token={self._token} held={self.is_held()}>"


class Client:
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

    def __init__(
        self,
        address: Addresses = None,
        *,
        ssl_context: Optional[ssl.SSLContext] = None,
        server_hostname: Optional[str] = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        self._addresses = _address.parse(address)
        self._ssl_context = ssl_context
        self._server_hostname = server_hostname
        self._connect_timeout = connect_timeout
        self._reactor_factory: Callable[[], Reactor] = shared_reactor

    @property
    def addresses(self) -> Tuple[str, ...]:
        """The server addresses, in the order they are tried."""
        return tuple(str(a) for a in self._addresses)

    def lock(self, name: str, lease: float = DEFAULT_LEASE, *, wait: Optional[float] = None) -> Lock:
        """Waits for the lock `name` in its FIFO queue and returns it once
        the server grants it (promotion is pushed: no polling). Use the
        result in a `with` block, or call `release()`.

        `lease` (seconds) is the failure detector, not a work deadline: the
        lock heartbeats about four times per lease and may be held for
        hours. `wait` bounds the time in the queue: when it runs out the
        place is given up and NotAcquired is raised.

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
        start = time.monotonic_ns()
        session, address = self._start(name, raw_name, lease_ms)
        try:
            status, _ = session.wait_until(lambda s: s is not Status.UNANSWERED, None)
            if status is Status.WAITING and not give_up_when_queued:
                until = None if wait is None else start + int(wait * 1e9)
                status, timed_out = session.wait_until(lambda s: s is Status.HELD, until)
                if timed_out:
                    raise NotAcquired(name, wait if wait is not None else 0.0)
        except BaseException:
            session.release(wait=False)
            raise
        if status is Status.HELD:
            token = session.claim.token
            assert token is not None
            return Lock(session, name, token, address)
        session.release(wait=False)
        if status is Status.LOST:
            loss = session.claim.loss or LockLost.connection()
            refused = refused_handshake(address, loss)
            raise refused if refused is not None else loss
        return None

    def _start(self, name: str, raw_name: bytes, lease_ms: int) -> Tuple[Session, Address]:
        sock, address = connect(
            self._addresses, self._ssl_context, self._server_hostname, self._connect_timeout
        )
        frame = _frames.acquire(raw_name, lease_ms)
        sent_at = time.monotonic_ns()
        try:
            sock.sendall(frame)
            sock.setblocking(False)
        except (OSError, ssl.SSLError) as err:
            sock.close()
            raise LockLost.connection(err) from err
        session = Session(Claim(name, lease_ms, sent_at), sock, self._reactor_factory())
        session.reactor.add(session)
        return session, address

    def __repr__(self) -> str:
        return f"<monolock.Client {','.join(self.addresses)}>"
