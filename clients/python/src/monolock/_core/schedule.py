"""The heartbeat schedule of the client contract (docs/protocol.md,
"Heartbeats: the client's schedule"), as pure arithmetic on instants in
integer nanoseconds of `time.monotonic_ns()`: no I/O, no timers, so every
rule is tested on exact numbers.

- `base = lease / 4`
- `srtt` = EWMA of round trips, alpha 0.2 (the ACQUIRE round trip counts)
- `interval = clamp(base - 2*srtt, floor, base)`, `floor = min(100ms, base/4)`
- send-to-send, at most one heartbeat in flight; when `2*srtt >= base`
  the next heartbeat goes as soon as the previous reply arrives
- `deadline = S + 0.8 x lease`, `S` = send instant of the latest request
  whose reply has arrived

The port of `crates/monolock-client/src/schedule.rs`, integer for integer.
"""

from __future__ import annotations

from typing import Optional

MS = 1_000_000
#: The largest floor between two heartbeats.
MAX_FLOOR = 100 * MS
#: A new round-trip sample weighs 1/SRTT_WEIGHT in the smoothed RTT.
SRTT_WEIGHT = 5


class Schedule:
    """Heartbeat timing for one connection."""

    __slots__ = ("lease", "base", "floor", "srtt")

    def __init__(self, lease_ns: int) -> None:
        self.lease = lease_ns
        self.base = lease_ns // 4
        self.floor = min(MAX_FLOOR, self.base // 4)
        self.srtt: Optional[int] = None

    def observe_rtt(self, sample: int) -> None:
        """Folds one round trip into the smoothed RTT; the first sample is
        taken as it is."""
        if self.srtt is None:
            self.srtt = sample
        else:
            self.srtt = (self.srtt * (SRTT_WEIGHT - 1) + sample) // SRTT_WEIGHT

    def interval(self) -> int:
        """The send-to-send interval: `clamp(base - 2*srtt, floor, base)`."""
        correction = 2 * (self.srtt or 0)
        return min(max(self.base - correction, self.floor), self.base)

    def next_send(self, last_send: int, reply_at: int) -> int:
        """When the next heartbeat goes out, given the send instant of the
        request just answered and the arrival of its reply (whose RTT sample
        is already observed)."""
        if 2 * (self.srtt or 0) >= self.base:
            return reply_at
        return max(last_send + self.interval(), reply_at)

    def deadline(self, confirmed_send: int) -> int:
        """The client's deadline: `confirmed_send + 0.8 x lease`."""
        return confirmed_send + self.lease * 4 // 5
