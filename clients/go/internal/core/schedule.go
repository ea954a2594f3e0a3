// Package core is the client contract of docs/protocol.md as pure logic:
// the heartbeat schedule, reply matching and the state of one claim, fed
// bytes and instants and answering what to do. No sockets, no clock, no
// goroutines, so every rule is tested on exact instants.
//
// Instants are time.Duration values on one monotonic clock (the session
// measures them from a fixed epoch with time.Since); only differences
// between them matter.
//
// The port of crates/monolock-client/src/schedule.rs and exchange.rs,
// integer for integer.
package core

import "time"

// MaxFloor is the largest floor between two heartbeats.
const MaxFloor = 100 * time.Millisecond

// srttWeight: a new round-trip sample weighs 1/srttWeight in the smoothed
// RTT (alpha 0.2), in integer nanoseconds so that it is exact.
const srttWeight = 5

// Schedule is the heartbeat timing of one connection:
//
//   - base = lease / 4
//   - srtt = EWMA of round trips, alpha 0.2 (the ACQUIRE's round trip counts)
//   - interval = clamp(base - 2*srtt, floor, base), floor = min(100ms, base/4)
//   - send-to-send, at most one heartbeat in flight; when 2*srtt >= base the
//     next heartbeat goes as soon as the previous reply arrives
//   - deadline = S + 0.8 x lease, S = the send instant of the latest
//     request whose reply has arrived
type Schedule struct {
	lease   time.Duration
	base    time.Duration
	floor   time.Duration
	srtt    time.Duration
	hasSRTT bool
}

// NewSchedule is the schedule for a positive lease.
func NewSchedule(lease time.Duration) Schedule {
	base := lease / 4
	floor := base / 4
	if floor > MaxFloor {
		floor = MaxFloor
	}
	return Schedule{lease: lease, base: base, floor: floor}
}

// ObserveRTT folds one round trip into the smoothed RTT; the first sample
// is taken as it is.
func (s *Schedule) ObserveRTT(sample time.Duration) {
	if !s.hasSRTT {
		s.srtt, s.hasSRTT = sample, true
		return
	}
	s.srtt = (s.srtt*(srttWeight-1) + sample) / srttWeight
}

// SRTT is the smoothed round trip, and whether any reply has arrived.
func (s *Schedule) SRTT() (time.Duration, bool) { return s.srtt, s.hasSRTT }

// Interval is the send-to-send interval: clamp(base - 2*srtt, floor, base).
func (s *Schedule) Interval() time.Duration {
	interval := s.base - 2*s.srtt
	if interval < s.floor {
		interval = s.floor
	}
	if interval > s.base {
		interval = s.base
	}
	return interval
}

// NextSend is when the next heartbeat goes out, given the send instant of
// the request just answered and the instant its reply arrived (whose RTT
// sample is already observed).
func (s *Schedule) NextSend(lastSend, replyAt time.Duration) time.Duration {
	if 2*s.srtt >= s.base {
		return replyAt
	}
	next := lastSend + s.Interval()
	if next < replyAt {
		return replyAt
	}
	return next
}

// Deadline is the client's deadline: confirmedSend + 0.8 x lease.
func (s *Schedule) Deadline(confirmedSend time.Duration) time.Duration {
	return confirmedSend + s.lease*4/5
}
