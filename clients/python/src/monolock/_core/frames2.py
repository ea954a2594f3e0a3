"""The wire format of protocol v2 (docs/protocol.md, "Protocol version 2"),
as bytes in and out.

No I/O here. `decode` takes whole frames only and returns plain tuples
`(kind, claim, token, code, reason)`: the reader's hot path builds no
objects beyond them.
"""

from __future__ import annotations

import struct
from typing import Optional, Tuple, Union

from ..errors import ProtocolError

VERSION = 2

# client to server
OPEN = 0x01
ACQUIRE = 0x21
RELEASE = 0x22
PING = 0x23

# server to client: replies (0x30..0x36), pushes, and the session's end
OPENED = 0x30
ACQUIRED = 0x31
WAITING = 0x32
BUSY = 0x33
RELEASED = 0x34
PONG = 0x35
REFUSED = 0x36
GRANTED = 0x37
REVOKED = 0x38
ERROR = 0x13

#: ACQUIRE modes.
MODE_WAIT = 0x00
MODE_TRY = 0x01

#: The whole PING frame.
PING_FRAME = bytes([PING])

_OPEN = struct.Struct(">BBI")
_ACQUIRE = struct.Struct(">BIBB")
_RELEASE = struct.Struct(">BI")
_CLAIM = struct.Struct(">I")
_CLAIM_TOKEN = struct.Struct(">IQ")
_OPENED = struct.Struct(">QI")

#: (kind, claim id, token or session id, code or max_claims, reason)
Frame = Tuple[int, int, int, int, str]


def open_frame(lease_ms: int) -> bytes:
    """OPEN with the session's lease in milliseconds."""
    return _OPEN.pack(OPEN, VERSION, lease_ms)


def acquire(claim: int, mode: int, name: bytes) -> bytes:
    """ACQUIRE of a checked name (1..255 bytes) under `claim`."""
    return _ACQUIRE.pack(ACQUIRE, claim, mode, len(name)) + name


def release(claim: int) -> bytes:
    """RELEASE of `claim`."""
    return _RELEASE.pack(RELEASE, claim)


def decode(buf: Union[bytes, bytearray], offset: int = 0) -> Optional[Tuple[Frame, int]]:
    """The frame at `offset` and its length, or None while it is incomplete.

    Raises ProtocolError on a byte that starts no v2 server frame.
    """
    have = len(buf) - offset
    if have <= 0:
        return None
    kind = buf[offset]
    if kind in (WAITING, BUSY, RELEASED):
        if have < 5:
            return None
        return (kind, _CLAIM.unpack_from(buf, offset + 1)[0], 0, 0, ""), 5
    if kind in (ACQUIRED, GRANTED):
        if have < 13:
            return None
        claim, token = _CLAIM_TOKEN.unpack_from(buf, offset + 1)
        return (kind, claim, token, 0, ""), 13
    if kind == PONG:
        return (kind, 0, 0, 0, ""), 1
    if kind in (REFUSED, REVOKED):
        if have < 7:
            return None
        length = buf[offset + 6]
        if have < 7 + length:
            return None
        claim = _CLAIM.unpack_from(buf, offset + 1)[0]
        reason = bytes(buf[offset + 7 : offset + 7 + length]).decode("utf-8", "replace")
        return (kind, claim, 0, buf[offset + 5], reason), 7 + length
    if kind == OPENED:
        if have < 13:
            return None
        session, max_claims = _OPENED.unpack_from(buf, offset + 1)
        return (kind, 0, session, max_claims, ""), 13
    if kind == ERROR:
        if have < 3:
            return None
        length = buf[offset + 2]
        if have < 3 + length:
            return None
        reason = bytes(buf[offset + 3 : offset + 3 + length]).decode("utf-8", "replace")
        return (kind, 0, 0, buf[offset + 1], reason), 3 + length
    raise ProtocolError(f"unexpected message type 0x{kind:02x} from server")
