"""How a client reaches its servers: the settings both clients share, the
blocking dial, and the errors of a failed connect.

Addresses are tried in order; the first that connects (and completes the
TLS handshake) wins. Only this step falls through to the next address:
once the ACQUIRE is sent the claim lives on that one connection.
"""

from __future__ import annotations

import socket
import ssl
from typing import List, Optional, Tuple

from . import _address
from ._address import Address, Addresses
from .errors import ConnectError, LockLost, ProtocolError

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


class Failures:
    """The failed attempts of one connect, for the error naming them all."""

    def __init__(self, endpoints: Endpoints) -> None:
        self._endpoints = endpoints
        self._lines: List[str] = []
        self._last: Optional[BaseException] = None

    def add(self, address: Address, err: BaseException) -> None:
        if isinstance(err, ConnectError):
            line = str(err)
        elif isinstance(err, ssl.SSLError) and err.reason == "WRONG_VERSION_NUMBER":
            # The first bytes back were no TLS record: a plain monolock
            # port (its ERROR frame) or another protocol's.
            line = (
                f"{address} does not speak TLS: it answered the TLS handshake in plain text "
                f"(drop ssl_context, or check the port): {err}"
            )
        else:
            line = f"{address}: {err or type(err).__name__}"
        self._lines.append(line)
        self._last = err

    def error(self) -> ConnectError:
        last = self._last
        # The last failure decides, as it ended the attempt: a TLS failure
        # (a certificate that fails verification, a plain port) fails the
        # same way every time; refused, unreachable and timeouts may heal.
        if isinstance(last, ConnectError):
            temporary = last.is_temporary
        else:
            temporary = not isinstance(last, ssl.SSLError)
        error = ConnectError(
            "could not connect: " + "; ".join(self._lines),
            self._endpoints.addresses,
            temporary=temporary,
        )
        error.__cause__ = last.__cause__ if isinstance(last, ConnectError) else last
        return error


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


def first_reply_error(address: Address, loss: LockLost) -> Optional[ConnectError]:
    """The connect error hidden in a claim that ended before its first
    reply, if there is one:

    - a TLS alert: the server refused the handshake (TLS 1.3 clients learn
      it on their first read, e.g. an mTLS server that wants a client
      certificate);
    - first bytes of another protocol (HTTP, TLS): the address is not a
      monolock protocol port, which no retry mends.
    """
    cause = loss.__cause__
    if isinstance(cause, ssl.SSLError):
        error = ConnectError(
            f"could not connect to {address}: the server refused the TLS handshake: {cause}",
            [str(address)],
            temporary=False,
        )
    elif isinstance(cause, ProtocolError) and cause.wrong_port:
        error = ConnectError(f"{address} {cause}", [str(address)], temporary=False)
    elif loss.unanswered is not None:
        # Nothing came back at all: a silent peer, or a server too busy to
        # answer; either may change, so a retry may succeed.
        return ConnectError(
            f"{address} did not answer within {loss.unanswered:g} s", [str(address)]
        )
    else:
        return None
    error.__cause__ = cause
    return error
