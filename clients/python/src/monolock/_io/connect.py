"""How a client reaches its servers: the settings both clients share, and
the blocking dial (the errors of a failed connect are
`_core/connect_errors.py`).

Addresses are tried in order; the first that connects (and completes the
TLS handshake) wins. Only this step falls through to the next address:
once the ACQUIRE is sent the claim lives on that one connection.
"""

from __future__ import annotations

import socket
import ssl
import time
from typing import TYPE_CHECKING, Optional, Tuple

from .._core import address as _address
from .._core.address import Address, Addresses
from .._core.connect_errors import Failures
from .reactor import READ_CHUNK

if TYPE_CHECKING:
    from typing import Protocol

    class Awaiting(Protocol):
        """A core waiting for the reply to its first request (`Claim`,
        `SessionCore`)."""

        def awaiting_reply(self) -> bool: ...

        def unanswered(self, within: float) -> None: ...

        def check(self, now: int) -> None: ...

        def deadline(self) -> int: ...

        def receive(self, data: bytes, now: int) -> None: ...

        def closed(self, cause: Optional[BaseException] = None) -> None: ...

#: How long dialing one server (TCP and TLS handshake) may take, in seconds.
DEFAULT_CONNECT_TIMEOUT = 5.0


class Endpoints:
    """Where the servers are and how to reach them (see `Client`)."""

    def __init__(
        self,
        address: Addresses = None,
        *,
        ssl_context: Optional[ssl.SSLContext] = None,
        server_hostname: Optional[str] = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        force_v1: bool = False,
    ) -> None:
        self._addresses = _address.parse(address)
        self._force_v1 = bool(force_v1)
        self._ssl_context = ssl_context
        self._server_hostname = server_hostname
        self._connect_timeout = connect_timeout

    @property
    def addresses(self) -> Tuple[str, ...]:
        """The server addresses, in the order they are tried."""
        return tuple(str(a) for a in self._addresses)

    def _hostname(self, address: Address) -> str:
        """The name the server certificate is checked against."""
        return self._server_hostname if self._server_hostname is not None else address.host

    def __repr__(self) -> str:
        return f"<monolock.{type(self).__name__} {','.join(self.addresses)}>"


def dial(endpoints: Endpoints, address: Address) -> socket.socket:
    """Connects to one address (blocking; TCP and the TLS handshake).
    Raises OSError or ssl.SSLError."""
    timeout = endpoints._connect_timeout
    sock = socket.create_connection((address.host, address.port), timeout=timeout)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if endpoints._ssl_context is not None:
            sock = endpoints._ssl_context.wrap_socket(
                sock, server_hostname=endpoints._hostname(address), do_handshake_on_connect=False
            )
            sock.settimeout(timeout)
            sock.do_handshake()
    except BaseException:
        sock.close()
        raise
    return sock


def connect(
    endpoints: Endpoints, addresses: Optional[Tuple[Address, ...]] = None
) -> Tuple[socket.socket, Address]:
    """Dials the addresses (by default all of them) in order (blocking).
    Raises ConnectError."""
    failures = Failures(endpoints)
    for address in endpoints._addresses if addresses is None else addresses:
        try:
            return dial(endpoints, address), address
        except (OSError, ssl.SSLError) as err:
            failures.add(address, err)
    raise failures.error()


def read_first_reply(
    sock: socket.socket, request: bytes, core: Awaiting, sent: int, timeout: float
) -> None:
    """Sends the first request and feeds the core what comes back, in the
    caller's thread (an uncontended lock needs no hand-off to another
    thread), until its first reply, its end, its deadline, or `timeout`
    seconds: a server answers at once, so silence that long is a peer that
    is no monolock server (or one that cannot serve). The socket is left
    non-blocking; it is closed only when the wait is interrupted. `sent`:
    the instant the core took as the request's send."""
    answer_by = sent + int(timeout * 1e9)
    try:
        sock.sendall(request)
        while core.awaiting_reply():
            now = time.monotonic_ns()
            core.check(now)
            if not core.awaiting_reply():
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
        core.unanswered(round((min(core.deadline(), answer_by) - sent) / 1e9, 1))
    except (OSError, ssl.SSLError) as err:
        core.closed(err)
    except BaseException:  # KeyboardInterrupt while waiting: nothing stays open
        sock.close()
        raise
