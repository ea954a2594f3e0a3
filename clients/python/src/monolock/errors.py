"""The errors of the client, and why a claim ends."""

from __future__ import annotations

import enum
from typing import Optional, Sequence

#: ERROR codes below this are server conditions (retrying may succeed);
#: from it up, client errors (the same request fails the same way).
CLIENT_ERROR_CODES = 0x10

#: The server is shutting down.
SHUTTING_DOWN = 0x01
#: An administrator force-released the lock or removed the waiter.
CLOSED_BY_ADMIN = 0x02
#: The ACL refuses this identity for this lock.
NOT_AUTHORIZED = 0x18

_CODE_NAMES = {
    0x01: "server shutting down",
    0x02: "closed by administrator",
    0x03: "idle session closed",
    0x08: "claim ended by an administrator",
    0x09: "too many claims on this session",
    0x0B: "too many watches on this session",
    0x0C: "server watch limit reached",
    0x10: "unsupported protocol version",
    0x11: "first message must be ACQUIRE",
    0x12: "duplicate ACQUIRE",
    0x13: "unknown message type",
    0x14: "empty lock name",
    0x15: "lock name too long",
    0x16: "lock name is not valid UTF-8",
    0x17: "lease must be positive",
    0x18: "not authorized for lock",
    0x19: "frame out of state",
    0x20: "unknown claim id",
    0x21: "claim id already in use",
    0x22: "empty lock name",
    0x23: "lock name is not valid UTF-8",
    0x24: "not authorized for lock",
    0x25: "unknown ACQUIRE mode",
    0x26: "value longer than 1,024 bytes",
    0x27: "value is not valid UTF-8",
}

#: Protocol v2 claim codes (REFUSED, REVOKED) that mean what a v1 ERROR
#: code means: `LockLost.code` carries the v1 code, so that a caller
#: branches the same way whichever version the session speaks.
V2_CLAIM_CODES = {0x08: CLOSED_BY_ADMIN, 0x22: 0x14, 0x23: 0x16, 0x24: NOT_AUTHORIZED}


def describe_code(code: int, detail: str = "") -> str:
    """`0x02 (closed by administrator): detail`."""
    text = f"0x{code:02x}"
    name = _CODE_NAMES.get(code)
    if name:
        text += f" ({name})"
    if detail:
        text += f": {detail}"
    return text


class Error(Exception):
    """Base class of every error this package raises."""

    @property
    def is_temporary(self) -> bool:
        """True when trying again later (a new claim, at the back of the
        queue) may succeed."""
        return False


class InvalidArgument(Error, ValueError):
    """A bad lock name, lease, wait or address: raised before connecting."""


class ConnectError(Error, ConnectionError):
    """The server could not be reached (refused, unreachable, timed out,
    TLS handshake failed), or what answered is not a monolock protocol
    port (an HTTP port, a TLS port dialled without `ssl_context`).
    `addresses` lists every address tried, in order; the last failure is
    chained as `__cause__`."""

    def __init__(self, message: str, addresses: Sequence[str], *, temporary: bool = True) -> None:
        # `temporary`: refused, unreachable, timed out; not the wrong port,
        # a TLS mismatch or a certificate that fails verification.
        super().__init__(message)
        self.addresses = tuple(addresses)
        self._temporary = temporary

    @property
    def is_temporary(self) -> bool:
        """False when the same address fails the same way every time (the
        wrong port)."""
        return self._temporary


class Unsupported(Error):
    """The server (or the protocol version forced) has no lock values and
    observers: a lock with a value, `set_value`, an observation or a
    holder lookup cannot be served there. Never temporary: the same
    server answers the same way until it is upgraded. Plain locks still
    work there."""

    @classmethod
    def server(cls, address: str) -> Unsupported:
        return cls(
            f"{address} does not support lock values and observers "
            "(the server is older than this client): upgrade the server"
        )

    @classmethod
    def forced_v1(cls) -> Unsupported:
        return cls(
            "protocol version 1 has no lock values or observers "
            "(the client was made with force_v1=True)"
        )


class ProtocolError(Error):
    """The server sent something a protocol v1 server never sends.

    `wrong_port` is True when the very first bytes show that the peer is
    not a monolock protocol server at all (it answered like HTTP, or with
    a TLS record)."""

    def __init__(self, message: str, *, wrong_port: bool = False) -> None:
        super().__init__(message)
        self.wrong_port = wrong_port


class NotAcquired(Error, TimeoutError):
    """`wait=` ran out before the lock was granted; the place in the queue
    was given up."""

    def __init__(self, name: str, wait: float) -> None:
        super().__init__(f"lock {name!r} was not acquired within {wait}s")
        self.name = name
        self.wait = wait

    @property
    def is_temporary(self) -> bool:
        return True


class LossReason(enum.Enum):
    """Why a claim (the lock, or a place in its queue) ended.

    The values are the vocabulary every monolock client shares (and the
    conformance suite checks): `expired`, `forced`, `shutdown`,
    `connection`, `protocol`, `server_error`. `CONNECTION_LOST` and
    `PROTOCOL_VIOLATION` are deprecated aliases of `CONNECTION` and
    `PROTOCOL` (the same members), and `LossReason("connection_lost")` /
    `LossReason("protocol_violation")` still find them.
    """

    #: No reply confirmed the session within 0.8 x lease: the client gave
    #: the claim up before the server could hand the lock on.
    EXPIRED = "expired"
    #: ERROR 0x02: an administrator force-released the lock (or removed the waiter).
    FORCED = "forced"
    #: ERROR 0x01: the server is shutting down.
    SHUTDOWN = "shutdown"
    #: Another ERROR code (for example 0x18: the ACL refuses this lock).
    SERVER_ERROR = "server_error"
    #: The connection closed or failed without an ERROR frame.
    CONNECTION = "connection"
    #: The server broke the protocol; the connection was closed.
    PROTOCOL = "protocol"
    #: This process released the lock (raised by `check()` after `release()`).
    RELEASED = "released"
    #: Deprecated alias of CONNECTION (the value was "connection_lost").
    CONNECTION_LOST = "connection"
    #: Deprecated alias of PROTOCOL (the value was "protocol_violation").
    PROTOCOL_VIOLATION = "protocol"

    @classmethod
    def _missing_(cls, value: object) -> Optional[LossReason]:
        """The values of the deprecated names still find their members."""
        return _OLD_VALUES.get(value) if isinstance(value, str) else None


_OLD_VALUES = {
    "connection_lost": LossReason.CONNECTION,
    "protocol_violation": LossReason.PROTOCOL,
}


class LockLost(Error):
    """The claim ended: the lock is no longer held (or, raised by
    `Client.lock`, the place in the queue was lost before the grant).

    `reason` says why; `code` and `detail` carry the server's ERROR frame
    when there was one; `name` is the lock's. Its message names the lock
    as every monolock client does: `lock "NAME" lost (REASON): DETAIL`.
    """

    def __init__(
        self,
        reason: LossReason,
        message: str,
        code: Optional[int] = None,
        detail: str = "",
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.code = code
        self.detail = detail
        #: The lock's name, once the loss is a lock's (see `for_lock`).
        self.name: Optional[str] = None
        #: Seconds the claim waited for a first reply that never came (a
        #: silent peer), else None.
        self.unanswered: Optional[float] = None
        self._what = message

    @property
    def is_temporary(self) -> bool:
        if self.reason is LossReason.PROTOCOL:
            return False
        if self.code is not None:
            return self.code < CLIENT_ERROR_CODES
        return True

    def for_lock(self, name: str) -> LockLost:
        """This loss as the lock `name`'s: a copy whose message names it
        (one session's loss ends many locks, each told with its name)."""
        if self.name == name:
            return self
        named = LockLost(
            self.reason, f'lock "{name}" lost ({self.reason.value}): {self._what}', self.code, self.detail
        )
        named.name = name
        named.unanswered = self.unanswered
        named._what = self._what
        named.__cause__ = self.__cause__
        return named

    def for_observation(self, name: str) -> LockLost:
        """This loss as the end of an observation of `name`:
        `observation of lock "NAME" ended (REASON): DETAIL`."""
        ended = LockLost(
            self.reason,
            f'observation of lock "{name}" ended ({self.reason.value}): {self._what}',
            self.code,
            self.detail,
        )
        ended.name = name
        ended._what = self._what
        ended.__cause__ = self.__cause__
        return ended

    def for_lookup(self, name: str) -> LockLost:
        """This loss as the failure of a holder lookup of `name`."""
        failed = LockLost(
            self.reason,
            f'lookup of lock "{name}" failed ({self.reason.value}): {self._what}',
            self.code,
            self.detail,
        )
        failed.name = name
        failed._what = self._what
        failed.__cause__ = self.__cause__
        return failed

    @classmethod
    def expired(
        cls,
        lease_ms: int,
        unanswered: bool = False,
        first: str = "ACQUIRE",
        within: Optional[float] = None,
    ) -> LockLost:
        if unanswered:
            waited = within if within is not None else lease_ms * 0.8 / 1000
            lost = cls(LossReason.EXPIRED, f"no reply to the {first} within {waited:g} s")
            lost.unanswered = waited
            return lost
        return cls(
            LossReason.EXPIRED,
            f"no heartbeat was confirmed within 0.8 x the lease of {lease_ms / 1000}s",
        )

    @classmethod
    def server(cls, code: int, detail: str) -> LockLost:
        reason = {
            SHUTTING_DOWN: LossReason.SHUTDOWN,
            CLOSED_BY_ADMIN: LossReason.FORCED,
        }.get(code, LossReason.SERVER_ERROR)
        return cls(
            reason,
            "the server ended the session with " + describe_code(code, detail),
            code=code,
            detail=detail,
        )

    @classmethod
    def claim(cls, code: int, detail: str) -> LockLost:
        """A v2 claim ended or refused by the server (REVOKED, REFUSED):
        reported under the v1 code of the same meaning."""
        v1 = V2_CLAIM_CODES.get(code, code)
        reason = LossReason.FORCED if v1 == CLOSED_BY_ADMIN else LossReason.SERVER_ERROR
        return cls(
            reason,
            "the server ended the claim with " + describe_code(code, detail),
            code=v1,
            detail=detail,
        )

    @classmethod
    def refused(cls, what: str, code: int, detail: str) -> LockLost:
        """An observation or a lookup (`what`, naming its lock) the server
        refused (REFUSED): reported under the v1 code of the same meaning,
        as a claim's refusal is."""
        claim = cls.claim(code, detail)
        return cls(claim.reason, f"{what} refused: " + describe_code(code, detail), claim.code, detail)

    @classmethod
    def connection(cls, cause: Optional[BaseException] = None) -> LockLost:
        if cause is None:
            return cls(LossReason.CONNECTION, "the server closed the connection")
        lost = cls(LossReason.CONNECTION, f"the connection failed: {cause}")
        lost.__cause__ = cause
        return lost

    @classmethod
    def released(cls) -> LockLost:
        return cls(LossReason.RELEASED, "the lock was released")

    @classmethod
    def protocol(cls, cause: ProtocolError) -> LockLost:
        lost = cls(LossReason.PROTOCOL, f"protocol violation by the server: {cause}")
        lost.__cause__ = cause
        return lost
