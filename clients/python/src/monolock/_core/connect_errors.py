"""The errors of a failed connect, decided from what the attempts met:
which address failed how, whether a retry may help, and the connect
error hidden in a claim that ended before its first reply. No I/O here:
the drivers hand in what they saw.
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, List, Optional

from ..errors import ConnectError, LockLost, ProtocolError
from .address import Address

if TYPE_CHECKING:
    from .._io.connect import Endpoints


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
