"""The wire format of protocol v1 (docs/protocol.md), as bytes in and out.

No I/O here: the drivers read bytes and hand them to `decode`, which takes
whole frames only (one read may hold half a frame or three).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Optional, Tuple, Union

from ..errors import InvalidArgument, ProtocolError

VERSION = 1
ACQUIRE = 0x01
HEARTBEAT_BYTE = 0x02
WAITING = 0x11
ACQUIRED = 0x12
ERROR = 0x13

#: The longest lock name, in UTF-8 bytes (a protocol constant).
MAX_NAME_BYTES = 255
#: The longest lease the wire can carry, in milliseconds (`u32`).
MAX_LEASE_MS = 0xFFFF_FFFF

#: The whole HEARTBEAT frame.
HEARTBEAT = bytes([HEARTBEAT_BYTE])

#: What the first byte of a reply says about a peer that is not a monolock
#: protocol server (a monolock server's first byte is always 0x11, 0x12 or
#: 0x13): a TLS record (0x15 alert, 0x16 handshake), or HTTP's `H`.
_WRONG_PORT = {
    0x15: "expects TLS: the server speaks TLS on this port; pass ssl_context",
    0x16: "expects TLS: the server speaks TLS on this port; pass ssl_context",
    ord("H"): "is not a monolock server: an HTTP server answered "
    "(the admin or ops port? give the server's --listen address)",
}

_ACQUIRE_HEAD = struct.Struct(">BBIH")
_TOKEN = struct.Struct(">Q")


@dataclass(frozen=True)
class Waiting:
    """WAITING: the session is queued."""


@dataclass(frozen=True)
class Acquired:
    """ACQUIRED: the lock is held under `token`."""

    token: int


@dataclass(frozen=True)
class ServerError:
    """ERROR: the server ends the session."""

    code: int
    reason: str


Frame = Union[Waiting, Acquired, ServerError]


def encode_name(name: str) -> bytes:
    """The name's UTF-8 bytes, checked as the server checks them."""
    if not isinstance(name, str):
        raise InvalidArgument(f"lock name must be a str, not {type(name).__name__}")
    try:
        raw = name.encode("utf-8")
    except UnicodeEncodeError as err:
        raise InvalidArgument(f"lock name {name!r} is not valid UTF-8") from err
    if not raw:
        raise InvalidArgument("lock name is empty")
    if len(raw) > MAX_NAME_BYTES:
        raise InvalidArgument(
            f"lock name is {len(raw)} bytes long: at most {MAX_NAME_BYTES} UTF-8 bytes"
        )
    return raw


#: The shortest lease, in milliseconds: below it the holder's deadline
#: (0.8 x lease) is shorter than ordinary scheduling stalls.
MIN_LEASE_MS = 100
#: The longest lease, in milliseconds (1 hour): above it a partitioned
#: holder blocks everyone for longer than any operator would accept.
MAX_CLIENT_LEASE_MS = 3_600_000

_UNIT = "(leases are in seconds)"


def lease_ms(lease: float) -> int:
    """The lease in whole milliseconds, checked against the bounds every
    monolock client shares: at least 100 ms, at most 1 hour, a whole number
    of milliseconds (4.35 is 4350 ms: the float's last bits do not count)."""
    if isinstance(lease, bool) or not isinstance(lease, (int, float)):
        raise InvalidArgument(f"lease must be a number of seconds, not {type(lease).__name__}")
    if lease != lease or lease in (float("inf"), float("-inf")):
        raise InvalidArgument(f"lease must be a finite number of seconds, not {lease}")
    if lease * 1000 < MIN_LEASE_MS:
        raise InvalidArgument(f"lease {lease} s is below the minimum of 100 ms {_UNIT}")
    if lease * 1000 > MAX_CLIENT_LEASE_MS:
        raise InvalidArgument(f"lease {lease} s is above the maximum of 1 hour {_UNIT}")
    ms = round(lease * 1000)
    if abs(lease * 1000 - ms) > 1e-6:
        raise InvalidArgument(f"lease {lease} s is not a whole number of milliseconds {_UNIT}")
    return ms


def wrong_port(first_byte: int) -> Optional[ProtocolError]:
    """The error for a connection whose very first byte from the peer is
    `first_byte`, when that byte shows a peer of another protocol."""
    says = _WRONG_PORT.get(first_byte)
    return None if says is None else ProtocolError(says, wrong_port=True)


def acquire(name: bytes, lease: int) -> bytes:
    """An ACQUIRE frame for a checked name and lease."""
    return _ACQUIRE_HEAD.pack(ACQUIRE, VERSION, lease, len(name)) + name


def decode(buf: Union[bytes, bytearray], offset: int = 0) -> Optional[Tuple[Frame, int]]:
    """The frame at `offset` and its length, or None while it is incomplete.

    Raises ProtocolError on a byte that starts no v1 server frame.
    """
    if len(buf) <= offset:
        return None
    kind = buf[offset]
    if kind == WAITING:
        return Waiting(), 1
    if kind == ACQUIRED:
        if len(buf) < offset + 9:
            return None
        (token,) = _TOKEN.unpack_from(buf, offset + 1)
        return Acquired(token), 9
    if kind == ERROR:
        if len(buf) < offset + 3:
            return None
        code, length = buf[offset + 1], buf[offset + 2]
        if len(buf) < offset + 3 + length:
            return None
        reason = bytes(buf[offset + 3 : offset + 3 + length]).decode("utf-8", "replace")
        return ServerError(code, reason), 3 + length
    raise ProtocolError(f"unexpected message type 0x{kind:02x} from server")
