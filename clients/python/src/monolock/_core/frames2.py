"""The wire format of protocol v2 (docs/protocol.md, "Protocol version 2"
and "Version 2 extension: values and observers"), as bytes in and out.

No I/O here. `decode` takes whole frames only and returns plain tuples
`(kind, claim, token, code, reason)`: the reader's hot path builds no
objects beyond them. The extension's STATE and LOCK_STATE carry a
`WireState` in the last place instead of a reason.
"""

from __future__ import annotations

import struct
from typing import Optional, Tuple, Union

from ..errors import InvalidArgument, ProtocolError

VERSION = 2

# client to server
OPEN = 0x01
ACQUIRE = 0x21
RELEASE = 0x22
PING = 0x23
# the extension (values and observers), client to server
HELLO = 0x24
ACQUIRE_VALUE = 0x25
PROCLAIM = 0x26
OBSERVE = 0x27
UNOBSERVE = 0x28
LOOKUP = 0x29

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
# the extension, server to client: replies (0x39..0x3d) and the STATE push
FEATURES = 0x39
PROCLAIMED = 0x3A
OBSERVING = 0x3B
UNOBSERVED = 0x3C
LOCK_STATE = 0x3D
STATE = 0x3E

#: The HELLO feature bit of values and observers.
FEATURE_VALUES = 0x0000_0001
#: The longest value, in UTF-8 bytes (a protocol constant).
MAX_VALUE_BYTES = 1024

#: The state's events, as on the wire.
EVENT_FREE = 0x00
EVENT_HELD = 0x01
EVENT_GRANTED = 0x02
EVENT_VALUE = 0x03
EVENT_RELEASED = 0x04
EVENT_NAMES = {
    EVENT_FREE: "free",
    EVENT_HELD: "held",
    EVENT_GRANTED: "granted",
    EVENT_VALUE: "value",
    EVENT_RELEASED: "released",
}
#: The state's flags.
FLAG_INITIAL = 0x01
FLAG_COALESCED = 0x02
#: RELEASED reasons, as on the wire.
REASON_NAMES = {0x01: "released", 0x02: "expired", 0x03: "forced", 0x04: "ended_by_server"}

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
_HELLO = struct.Struct(">BI")
_FEATURES = struct.Struct(">II")
_U16 = struct.Struct(">H")
_ID_U16 = struct.Struct(">BIH")
_OBSERVE = struct.Struct(">BIB")
#: event, flags, token, since_ms, reason, value_len
_STATE = struct.Struct(">BBQQBH")


class WireState:
    """The state of a lock as STATE and LOCK_STATE carry it (the `state`
    of docs/protocol.md), its fields as on the wire."""

    __slots__ = ("event", "flags", "token", "since_ms", "reason", "value")

    def __init__(
        self, event: int, flags: int, token: int, since_ms: int, reason: int, value: str
    ) -> None:
        self.event = event
        self.flags = flags
        self.token = token
        self.since_ms = since_ms
        self.reason = reason
        self.value = value

    def __repr__(self) -> str:
        return (
            f"WireState({EVENT_NAMES.get(self.event, self.event)}, flags={self.flags}, "
            f"token={self.token}, since_ms={self.since_ms}, reason={self.reason}, value={self.value!r})"
        )

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


def hello(features: int = FEATURE_VALUES) -> bytes:
    """HELLO asking for `features` (the first frame after OPEN)."""
    return _HELLO.pack(HELLO, features)


def encode_value(value: object) -> bytes:
    """A value's UTF-8 bytes, checked as the protocol bounds it (raises
    InvalidArgument, before anything connects)."""
    if not isinstance(value, str):
        raise InvalidArgument(f"value must be a str, not {type(value).__name__}")
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise InvalidArgument(f"value {value[:40]!r} is not valid UTF-8") from err
    if len(raw) > MAX_VALUE_BYTES:
        raise InvalidArgument(
            f"value of {len(raw)} bytes is above the maximum of {MAX_VALUE_BYTES} bytes"
        )
    return raw


def acquire_value(claim: int, mode: int, name: bytes, value: bytes) -> bytes:
    """ACQUIRE_VALUE of a checked name and value under `claim`."""
    return _ACQUIRE.pack(ACQUIRE_VALUE, claim, mode, len(name)) + name + _U16.pack(len(value)) + value


def proclaim(claim: int, value: bytes) -> bytes:
    """PROCLAIM: `claim`'s value is now `value` (checked)."""
    return _ID_U16.pack(PROCLAIM, claim, len(value)) + value


def observe(watch: int, name: bytes) -> bytes:
    """OBSERVE of a checked name under `watch`."""
    return _OBSERVE.pack(OBSERVE, watch, len(name)) + name


def unobserve(watch: int) -> bytes:
    """UNOBSERVE of `watch`."""
    return _RELEASE.pack(UNOBSERVE, watch)


def lookup(name: bytes) -> bytes:
    """LOOKUP of a checked name."""
    return bytes([LOOKUP, len(name)]) + name


def _state(buf: Union[bytes, bytearray], at: int, have: int) -> Optional[Tuple[WireState, int]]:
    """The state at `at` and its length, or None while incomplete."""
    if have < _STATE.size:
        return None
    event, flags, token, since_ms, reason, length = _STATE.unpack_from(buf, at)
    if have < _STATE.size + length:
        return None
    start = at + _STATE.size
    try:
        value = bytes(buf[start : start + length]).decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError("a state's value is not valid UTF-8") from None
    if event not in EVENT_NAMES:
        raise ProtocolError(f"unknown state event 0x{event:02x}")
    return WireState(event, flags, token, since_ms, reason, value), _STATE.size + length


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
    if kind in (PROCLAIMED, OBSERVING, UNOBSERVED):
        if have < 5:
            return None
        return (kind, _CLAIM.unpack_from(buf, offset + 1)[0], 0, 0, ""), 5
    if kind == STATE:
        if have < 5:
            return None
        state = _state(buf, offset + 5, have - 5)
        if state is None:
            return None
        watch = _CLAIM.unpack_from(buf, offset + 1)[0]
        return (kind, watch, state[0].token, 0, state[0]), 5 + state[1]  # type: ignore[return-value]
    if kind == LOCK_STATE:
        state = _state(buf, offset + 1, have - 1)
        if state is None:
            return None
        return (kind, 0, state[0].token, 0, state[0]), 1 + state[1]  # type: ignore[return-value]
    if kind == FEATURES:
        if have < 9:
            return None
        features, max_watches = _FEATURES.unpack_from(buf, offset + 1)
        return (kind, 0, features, max_watches, ""), 9
    if kind == ERROR:
        if have < 3:
            return None
        length = buf[offset + 2]
        if have < 3 + length:
            return None
        reason = bytes(buf[offset + 3 : offset + 3 + length]).decode("utf-8", "replace")
        return (kind, 0, 0, buf[offset + 1], reason), 3 + length
    raise ProtocolError(f"unexpected message type 0x{kind:02x} from server")
