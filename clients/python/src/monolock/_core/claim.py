"""One connection = one claim, as a sans-I/O machine: bytes and instants
in; status, deadline, the next wake-up and "send a heartbeat now" out.

The sync and asyncio drivers own the socket and the clock and feed this
class; neither holds protocol logic of its own. Not thread-safe: a driver
serialises access.
"""

from __future__ import annotations

import enum
from typing import List, Optional

from . import frames
from .exchange import Event, Exchange
from .frames import ServerError
from .schedule import MS
from ..errors import LockLost, ProtocolError


class Status(enum.Enum):
    """Where a claim is, as its owner sees it."""

    UNANSWERED = "unanswered"
    WAITING = "waiting"
    HELD = "held"
    LOST = "lost"


class Claim:
    """The state of one claim, from the ACQUIRE's send instant on."""

    __slots__ = ("name", "lease_ms", "status", "token", "loss", "history", "_exchange", "_buf")

    def __init__(self, name: str, lease_ms: int, acquire_sent: int) -> None:
        self.name = name
        self.lease_ms = lease_ms
        self.status = Status.UNANSWERED
        self.token: Optional[int] = None
        self.loss: Optional[LockLost] = None
        #: Every status the claim took after UNANSWERED, in order: what its
        #: owner is told, step by step, when one read holds several frames.
        #: At most three (WAITING, HELD, LOST), never cleared.
        self.history: List[Status] = []
        self._exchange = Exchange(lease_ms * MS, acquire_sent)
        self._buf = bytearray()

    def deadline(self) -> int:
        """`S + 0.8 x lease`, in `time.monotonic_ns()` nanoseconds."""
        return self._exchange.deadline()

    def lose(self, loss: LockLost) -> bool:
        """Ends the claim for `loss` unless it already ended (the first
        reason wins). True when this call ended it."""
        if self.status is Status.LOST:
            return False
        self.status = Status.LOST
        self.loss = loss.for_lock(self.name)
        self.history.append(Status.LOST)
        return True

    def awaiting_reply(self) -> bool:
        """The ACQUIRE is unanswered and nothing ended the claim yet."""
        return self.status is Status.UNANSWERED

    def unanswered(self, within: float) -> None:
        """No reply came within `within` seconds: the claim is lost (unless
        something ended it first), and the peer perhaps no monolock server."""
        self.lose(LockLost.expired(self.lease_ms, unanswered=True, within=within))

    def check(self, now: int) -> None:
        """The pessimist's check: past the deadline the claim is lost,
        whatever timer has not fired yet."""
        if self.status is not Status.LOST and now >= self.deadline():
            self.lose(LockLost.expired(self.lease_ms, self.status is Status.UNANSWERED))

    def receive(self, data: bytes, now: int) -> None:
        """Applies the bytes read at `now`: every whole frame among them."""
        self.check(now)
        if self.status is Status.LOST:
            return
        if self.status is Status.UNANSWERED and not self._buf and data:
            foreign = frames.wrong_port(data[0])
            if foreign is not None:
                self.lose(LockLost.protocol(foreign))
                return
        self._buf += data
        used = 0
        try:
            while self.status is not Status.LOST:
                decoded = frames.decode(self._buf, used)
                if decoded is None:
                    break
                frame, length = decoded
                used += length
                event = self._exchange.on_frame(frame, now)
                if event is Event.QUEUED:
                    self.status = Status.WAITING
                    self.history.append(Status.WAITING)
                elif event is Event.GRANTED:
                    self.status = Status.HELD
                    self.token = self._exchange.token
                    self.history.append(Status.HELD)
                elif event is Event.CLOSED:
                    assert isinstance(frame, ServerError)
                    self.lose(LockLost.server(frame.code, frame.reason))
        except ProtocolError as err:
            self.lose(LockLost.protocol(err))
        del self._buf[:used]

    def closed(self, cause: Optional[BaseException] = None) -> None:
        """The connection ended (EOF when `cause` is None, else a failure)."""
        self.lose(LockLost.connection(cause))

    def heartbeat_due(self, now: int) -> bool:
        """True when a heartbeat should go out now (checks the deadline first)."""
        self.check(now)
        if self.status is Status.LOST:
            return False
        due = self._exchange.next_heartbeat()
        return due is not None and due <= now

    def next_heartbeat(self) -> Optional[int]:
        """When the next heartbeat is due; None while a request is in
        flight (the ACQUIRE's, before the first reply), or once lost."""
        if self.status is Status.LOST:
            return None
        return self._exchange.next_heartbeat()

    def heartbeat_sent(self, at: int) -> None:
        """Records a heartbeat whose send started at `at`."""
        self._exchange.heartbeat_sent(at)

    def next_wake(self) -> Optional[int]:
        """When the driver must look at this claim again without input:
        the next heartbeat or the deadline, whichever is first; None once
        the claim has ended."""
        if self.status is Status.LOST:
            return None
        deadline = self.deadline()
        due = self._exchange.next_heartbeat()
        return deadline if due is None else min(due, deadline)


def release_unconfirmed(io_timeout: float) -> LockLost:
    """The loss of a v1 release whose EOF did not come within `io_timeout`
    seconds (the connection is closed, which releases the claim too)."""
    return LockLost.connection(
        TimeoutError(
            f"the server did not confirm the release within {io_timeout:g}s; "
            "the connection was closed"
        )
    )
