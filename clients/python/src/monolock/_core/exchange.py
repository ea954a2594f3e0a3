"""Reply matching for one connection (docs/protocol.md, "Matching
replies"), as a pure state machine fed frames and instants.

Every ACQUIRE and HEARTBEAT gets exactly one reply, in order, and a
promotion adds exactly one unsolicited ACQUIRED. The client keeps at most
one request in flight, so a reply always answers that request, except for
the one push: while WAITING, the first ACQUIRED is the push (a heartbeat in
flight stays in flight; its own ACQUIRED follows). A push confirms nothing.
Anything else is a protocol violation.

The port of `crates/monolock-client/src/exchange.rs`.
"""

from __future__ import annotations

import enum
from typing import Optional

from .frames import Acquired, Frame, ServerError, Waiting
from .schedule import Schedule
from ..errors import ProtocolError


class Standing(enum.Enum):
    """Where the claim stands."""

    UNANSWERED = "unanswered"
    WAITING = "waiting"
    HELD = "held"


class Event(enum.Enum):
    """What a frame from the server meant."""

    QUEUED = "queued"
    GRANTED = "granted"
    CONFIRMED = "confirmed"
    CLOSED = "closed"


class Exchange:
    """Matching state and timing for one connection; instants are
    nanoseconds of `time.monotonic_ns()`."""

    __slots__ = ("schedule", "standing", "token", "_in_flight", "_confirmed_send", "_next_heartbeat")

    def __init__(self, lease_ns: int, acquire_sent: int) -> None:
        self.schedule = Schedule(lease_ns)
        self.standing = Standing.UNANSWERED
        self.token: Optional[int] = None
        #: Send instant of the request in flight.
        self._in_flight: Optional[int] = acquire_sent
        #: `S`: send instant of the latest request whose reply arrived
        #: (before the first reply: the ACQUIRE's).
        self._confirmed_send = acquire_sent
        self._next_heartbeat: Optional[int] = None

    def deadline(self) -> int:
        """The instant at which the claim is abandoned without a confirmation."""
        return self.schedule.deadline(self._confirmed_send)

    def next_heartbeat(self) -> Optional[int]:
        """When the next heartbeat is due; None while a request is in flight."""
        if self._in_flight is not None:
            return None
        return self._next_heartbeat

    def heartbeat_sent(self, at: int) -> None:
        """Records a heartbeat sent at `at`."""
        assert self._in_flight is None, "one request in flight at most"
        self._in_flight = at
        self._next_heartbeat = None

    def on_frame(self, frame: Frame, now: int) -> Event:
        """Interprets one frame that arrived at `now`.

        Raises ProtocolError when the frame cannot be the next one a v1
        server sends; the caller closes the connection.
        """
        if isinstance(frame, ServerError):
            return Event.CLOSED
        if isinstance(frame, Waiting):
            if self.standing is Standing.HELD:
                raise ProtocolError("WAITING arrived after the lock was granted")
            self._confirm(now, frame)
            if self.standing is Standing.UNANSWERED:
                self.standing = Standing.WAITING
                return Event.QUEUED
            return Event.CONFIRMED
        assert isinstance(frame, Acquired)
        if self.standing is Standing.UNANSWERED:
            self._confirm(now, frame)
            self.standing = Standing.HELD
            self.token = frame.token
            return Event.GRANTED
        if self.standing is Standing.WAITING:
            # The push: confirms nothing; a heartbeat in flight stays so.
            self.standing = Standing.HELD
            self.token = frame.token
            return Event.GRANTED
        if frame.token != self.token:
            raise ProtocolError(
                f"ACQUIRED carried token {frame.token}, "
                f"but this session was granted token {self.token}"
            )
        self._confirm(now, frame)
        return Event.CONFIRMED

    def _confirm(self, now: int, frame: Frame) -> None:
        """Takes the request in flight as answered at `now`."""
        sent_at = self._in_flight
        if sent_at is None:
            raise ProtocolError(f"{frame} arrived with no request in flight")
        self._in_flight = None
        self.schedule.observe_rtt(max(now - sent_at, 0))
        self._confirmed_send = sent_at
        self._next_heartbeat = self.schedule.next_send(sent_at, now)
