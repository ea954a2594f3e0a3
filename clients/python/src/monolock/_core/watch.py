"""Watches and lookups of a v2 session (docs/protocol.md, "Version 2
extension: values and observers"), as plain state the session core
(`session.py`) changes, and the `LockState` their owners are handed.

A watch's owner reads states from `WatchState.states`, filled as STATE
pushes are read. That queue is bounded as the server's is: when an owner
does not keep up, what it has not read is replaced by one state, the lock's
state at that moment, flagged `coalesced` (changes were missed, the state
is current).
"""

from __future__ import annotations

import collections
import datetime
import enum
from dataclasses import dataclass
from typing import Deque, Optional

from ..errors import LockLost
from . import frames2
from .frames2 import WireState

#: The most states a watch keeps for its owner before it coalesces them.
MAX_QUEUED_STATES = 256


@dataclass(frozen=True)
class LockState:
    """A lock's state as an observation or `holder()` reports it.

    - `held`: someone holds the lock (events `held`, `granted`, `value`).
    - `token`: the holder's fencing token; for `released` the token whose
      claim ended; for `free` the last holder's if the server knows it,
      else 0.
    - `value`: the holder's value ("" when not held, or none was given).
    - `since`: when the lock was granted (held) or became free, on the
      server's wall clock (UTC), or None when unknown. For display only.
    - `event`: `"free"`, `"held"` (states), `"granted"`, `"value"`,
      `"released"` (changes), as the server pushed it.
    - `initial`: the first state of an observation.
    - `coalesced`: changes were missed (a slow reader); this is the state
      now.
    - `reason`: for `released`, why the claim ended: `"released"`,
      `"expired"`, `"forced"` or `"ended_by_server"`; else None.

    A state is advisory: the holder it names may already have lost the
    lock. Use the value to find the holder, and keep fencing with tokens.
    """

    held: bool
    token: int
    value: str
    since: Optional[datetime.datetime]
    event: str
    initial: bool = False
    coalesced: bool = False
    reason: Optional[str] = None


def lock_state(wire: WireState) -> LockState:
    """The owner's view of a state read from the wire."""
    event = wire.event
    held = event in (frames2.EVENT_HELD, frames2.EVENT_GRANTED, frames2.EVENT_VALUE)
    since = None
    if wire.since_ms:
        since = datetime.datetime.fromtimestamp(wire.since_ms / 1000, tz=datetime.timezone.utc)
    reason = None
    if event == frames2.EVENT_RELEASED:
        reason = frames2.REASON_NAMES.get(wire.reason, f"0x{wire.reason:02x}")
    return LockState(
        held=held,
        token=wire.token,
        value=wire.value if held else "",
        since=since,
        event=frames2.EVENT_NAMES[event],
        initial=bool(wire.flags & frames2.FLAG_INITIAL),
        coalesced=bool(wire.flags & frames2.FLAG_COALESCED),
        reason=reason,
    )


def as_current(state: LockState) -> LockState:
    """A state (or change) as the state it leaves the lock in, flagged
    coalesced: what an owner is told in place of changes it missed."""
    return LockState(
        held=state.held,
        token=state.token,
        value=state.value,
        since=state.since,
        event="held" if state.held else "free",
        initial=False,
        coalesced=True,
        reason=None,
    )


class WStatus(enum.Enum):
    """Where one watch stands."""

    #: OBSERVE sent, no reply yet.
    PENDING = "pending"
    OBSERVING = "observing"
    #: UNOBSERVE sent, UNOBSERVED not read yet.
    UNOBSERVING = "unobserving"
    #: Ended: UNOBSERVED read.
    UNOBSERVED = "unobserved"
    #: Ended: REFUSED (`code` holds the code, `loss` the error).
    REFUSED = "refused"
    #: Ended with the session (`loss` says why).
    LOST = "lost"


_LIVE = (WStatus.PENDING, WStatus.OBSERVING, WStatus.UNOBSERVING)


class WatchState:
    """One watch of a session (its owner holds it, never the other way round:
    an owner dropped unclosed is collected, and unobserves)."""

    __slots__ = (
        "id",
        "name",
        "status",
        "last_token",
        "states",
        "stop_wanted",
        "unsent",
        "code",
        "loss",
    )

    def __init__(self, watch_id: int, name: str) -> None:
        self.id = watch_id
        self.name = name
        self.status = WStatus.PENDING
        #: The highest token pushed so far: a STATE below it breaks the
        #: protocol's promise of token order.
        self.last_token = 0
        #: States read and not yet taken by the owner, oldest first.
        self.states: Deque[LockState] = collections.deque()
        #: Unobserve as soon as the OBSERVE's reply arrives.
        self.stop_wanted = False
        #: The session had ended before this OBSERVE was queued: never sent.
        self.unsent = False
        self.code: Optional[int] = None
        self.loss: Optional[LockLost] = None

    @property
    def live(self) -> bool:
        return self.status in _LIVE

    def push(self, wire: WireState) -> LockState:
        """A STATE for the owner; past `MAX_QUEUED_STATES` unread, the
        unread ones give way to the state now, flagged coalesced."""
        state = lock_state(wire)
        if len(self.states) >= MAX_QUEUED_STATES:
            self.states.clear()
            state = as_current(state)
        self.states.append(state)
        return state

    def end(self, status: WStatus, loss: Optional[LockLost]) -> None:
        self.status = status
        self.loss = None if loss is None else loss.for_observation(self.name)


class LookupState:
    """One LOOKUP: its answer, once read (`state`, or `loss` with the
    REFUSED code in `code`, or the session's end)."""

    __slots__ = ("name", "state", "code", "loss")

    def __init__(self, name: str) -> None:
        self.name = name
        self.state: Optional[WireState] = None
        self.code: Optional[int] = None
        self.loss: Optional[LockLost] = None

    @property
    def done(self) -> bool:
        return self.state is not None or self.loss is not None

    def fail(self, loss: LockLost) -> None:
        self.loss = loss.for_lookup(self.name) if self.code is None else loss
