package core

import (
	"errors"
	"strings"
	"testing"
	"time"

	"monolock.dev/go/monolock/internal/wire"
)

const (
	ms    = time.Millisecond
	us    = time.Microsecond
	lease = 2000 * ms
	t0    = 10_000 * ms
)

var (
	waiting = wire.Frame{Kind: wire.Waiting}
)

func acq(token uint64) wire.Frame { return wire.Frame{Kind: wire.Acquired, Token: token} }

func acquiredBytes(token uint64) []byte {
	return []byte{0x12, byte(token >> 56), byte(token >> 48), byte(token >> 40), byte(token >> 32),
		byte(token >> 24), byte(token >> 16), byte(token >> 8), byte(token)}
}

func eq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

// The schedule (crates/monolock-client/src/schedule.rs tests).

func TestBaseIntervalWithoutRTTIsAQuarterLease(t *testing.T) {
	s := NewSchedule(lease)
	eq(t, "interval", s.Interval(), 500*ms)
	_, ok := s.SRTT()
	eq(t, "has srtt", ok, false)
}

func TestRTTShortensTheIntervalByTwiceTheSRTT(t *testing.T) {
	s := NewSchedule(lease)
	s.ObserveRTT(50 * ms)
	eq(t, "interval", s.Interval(), 400*ms)
	s.ObserveRTT(100 * ms) // EWMA alpha 0.2: 0.8*50 + 0.2*100 = 60
	srtt, _ := s.SRTT()
	eq(t, "srtt", srtt, 60*ms)
	eq(t, "interval", s.Interval(), 380*ms)
}

func TestIntervalNeverDropsBelowTheFloor(t *testing.T) {
	s := NewSchedule(lease) // base 500ms, floor min(100ms, 125ms)
	s.ObserveRTT(210 * ms)
	eq(t, "interval", s.Interval(), 100*ms)
	s = NewSchedule(200 * ms) // base 50ms, floor 12.5ms
	s.ObserveRTT(20 * ms)
	eq(t, "interval", s.Interval(), 12_500*us)
	s = NewSchedule(1 * ms)
	eq(t, "tiny lease interval", s.Interval(), 250*us)
}

func TestIntervalsAreSendToSend(t *testing.T) {
	s := NewSchedule(lease)
	s.ObserveRTT(50 * ms)
	eq(t, "next send", s.NextSend(t0, t0+50*ms), t0+400*ms)
	// A reply later than the interval releases the next heartbeat at once.
	eq(t, "next send after a late reply", s.NextSend(t0, t0+700*ms), t0+700*ms)
}

func TestSlowRoundTripsSendOnEveryReply(t *testing.T) {
	s := NewSchedule(400 * ms) // base 100ms; srtt 50ms makes 2*srtt == base
	s.ObserveRTT(50 * ms)
	eq(t, "next send", s.NextSend(t0, t0+50*ms), t0+50*ms)
	s = NewSchedule(400 * ms)
	s.ObserveRTT(49 * ms)
	eq(t, "interval", s.Interval(), 25*ms) // floor = min(100, 25)
	eq(t, "next send", s.NextSend(t0, t0+10*ms), t0+25*ms)
}

func TestDeadlineIsFourFifthsOfTheLeaseAfterTheConfirmedSend(t *testing.T) {
	s := NewSchedule(lease)
	eq(t, "deadline", s.Deadline(t0), t0+1600*ms)
	s = NewSchedule(1 * ms)
	eq(t, "deadline", s.Deadline(t0), t0+800*us)
}

// Reply matching (crates/monolock-client/src/exchange.rs tests).

func frame(t *testing.T, ex *Exchange, f wire.Frame, at time.Duration) Event {
	t.Helper()
	ev, err := ex.OnFrame(f, at)
	if err != nil {
		t.Fatalf("%v at %v: %v", f, at, err)
	}
	return ev
}

func violation(t *testing.T, ex *Exchange, f wire.Frame, at time.Duration, says string) {
	t.Helper()
	_, err := ex.OnFrame(f, at)
	var pe *ProtocolError
	if !errors.As(err, &pe) || !strings.Contains(pe.Error(), says) {
		t.Fatalf("%v: error %v, want a protocol error saying %q", f, err, says)
	}
}

func TestAcquireReplyGrantsAndIsAnRTTSample(t *testing.T) {
	ex := NewExchange(lease, t0)
	eq(t, "deadline", ex.Deadline(), t0+1600*ms)
	_, ok := ex.NextHeartbeat()
	eq(t, "heartbeat due while the ACQUIRE is in flight", ok, false)
	eq(t, "event", frame(t, &ex, acq(7), t0+20*ms), EventGranted)
	srtt, _ := ex.Schedule().SRTT()
	eq(t, "srtt", srtt, 20*ms)
	eq(t, "standing", ex.Standing(), Granted)
	eq(t, "token", ex.Token(), uint64(7))
	// base 500 - 2*20 = 460, measured from the ACQUIRE's send.
	next, _ := ex.NextHeartbeat()
	eq(t, "next heartbeat", next, t0+460*ms)
	eq(t, "deadline", ex.Deadline(), t0+1600*ms)
}

func TestHeartbeatReplyMovesTheDeadlineToItsSendInstant(t *testing.T) {
	ex := NewExchange(lease, t0)
	frame(t, &ex, acq(7), t0+10*ms)
	ex.HeartbeatSent(t0 + 480*ms)
	_, ok := ex.NextHeartbeat()
	eq(t, "heartbeat due while one is in flight", ok, false)
	eq(t, "event", frame(t, &ex, acq(7), t0+500*ms), EventConfirmed)
	eq(t, "deadline", ex.Deadline(), t0+480*ms+1600*ms)
}

func TestPushWhileAHeartbeatIsInFlightConfirmsNothing(t *testing.T) {
	ex := NewExchange(lease, t0)
	eq(t, "event", frame(t, &ex, waiting, t0+10*ms), EventQueued)
	ex.HeartbeatSent(t0 + 480*ms)
	// The first ACQUIRED is the push, even with a heartbeat in flight.
	eq(t, "event", frame(t, &ex, acq(9), t0+490*ms), EventGranted)
	eq(t, "deadline (a push confirms nothing)", ex.Deadline(), t0+1600*ms)
	_, ok := ex.NextHeartbeat()
	eq(t, "heartbeat still in flight", ok, false)
	// The heartbeat's own reply follows.
	eq(t, "event", frame(t, &ex, acq(9), t0+500*ms), EventConfirmed)
	eq(t, "deadline", ex.Deadline(), t0+480*ms+1600*ms)
}

func TestWaitingReplyToAHeartbeatThenPush(t *testing.T) {
	ex := NewExchange(lease, t0)
	frame(t, &ex, waiting, t0+10*ms)
	ex.HeartbeatSent(t0 + 480*ms)
	eq(t, "event", frame(t, &ex, waiting, t0+490*ms), EventConfirmed)
	eq(t, "deadline", ex.Deadline(), t0+480*ms+1600*ms)
	eq(t, "event", frame(t, &ex, acq(3), t0+600*ms), EventGranted)
	// A second unsolicited ACQUIRED has nothing to answer.
	violation(t, &ex, acq(3), t0+610*ms, "no request in flight")
}

func TestViolations(t *testing.T) {
	ex := NewExchange(lease, t0)
	frame(t, &ex, acq(5), t0)
	violation(t, &ex, acq(5), t0, "no request in flight")
	ex.HeartbeatSent(t0 + 400*ms)
	violation(t, &ex, acq(6), t0+401*ms, "token 6, but this session was granted token 5")
	violation(t, &ex, waiting, t0+401*ms, "WAITING arrived after the lock was granted")
	// A waiter's WAITING with nothing in flight answers nothing.
	ex = NewExchange(lease, t0)
	frame(t, &ex, waiting, t0)
	violation(t, &ex, waiting, t0, "no request in flight")
}

func TestErrorFramesEndTheSessionInAnyState(t *testing.T) {
	for _, before := range [][]wire.Frame{nil, {waiting}, {acq(1)}} {
		ex := NewExchange(lease, t0)
		for _, f := range before {
			frame(t, &ex, f, t0)
		}
		eq(t, "event", frame(t, &ex, wire.Frame{Kind: wire.Error, Code: 1, Reason: "bye"}, t0), EventClosed)
	}
}

// The claim machine (clients/python/tests/test_core.py ClaimMachine).

func TestSplitAndCoalescedFrames(t *testing.T) {
	c := NewClaim(lease, t0)
	c.Receive(append([]byte{0x11}, acquiredBytes(4)[:3]...), t0+ms)
	eq(t, "status", c.Status(), StatusWaiting)
	c.Receive(acquiredBytes(4)[3:], t0+2*ms)
	eq(t, "status", c.Status(), StatusHeld)
	eq(t, "token", c.Token(), uint64(4))
	eq(t, "deadline (the push confirmed nothing)", c.Deadline(), t0+1600*ms)
	// Byte by byte.
	c = NewClaim(lease, t0)
	for _, b := range acquiredBytes(1 << 62) {
		c.Receive([]byte{b}, t0+ms)
	}
	eq(t, "status", c.Status(), StatusHeld)
	eq(t, "token", c.Token(), uint64(1<<62))
}

func TestTheHeartbeatTimerAndTheDeadline(t *testing.T) {
	c := NewClaim(lease, t0)
	c.Receive(acquiredBytes(4), t0+10*ms)
	wake, _ := c.NextWake()
	eq(t, "next wake", wake, t0+480*ms)
	eq(t, "due early", c.HeartbeatDue(t0+479*ms), false)
	eq(t, "due on time", c.HeartbeatDue(t0+480*ms), true)
	c.HeartbeatSent(t0 + 480*ms)
	wake, _ = c.NextWake()
	eq(t, "next wake while in flight: only the deadline", wake, t0+1600*ms)
	c.Check(t0 + 1600*ms - 1)
	eq(t, "status a nanosecond before the deadline", c.Status(), StatusHeld)
	c.Check(t0 + 1600*ms)
	eq(t, "status at the deadline", c.Status(), StatusLost)
	eq(t, "reason", c.Loss().Reason, ReasonExpired)
	_, ok := c.NextWake()
	eq(t, "wakes once lost", ok, false)
	eq(t, "due once lost", c.HeartbeatDue(t0+2000*ms), false)
}

func TestAReplyReadAfterTheDeadlineBringsNothingBack(t *testing.T) {
	c := NewClaim(lease, t0)
	c.Receive(acquiredBytes(4), t0+1600*ms)
	eq(t, "status", c.Status(), StatusLost)
	eq(t, "reason", c.Loss().Reason, ReasonExpired)
}

func TestHeartbeatsKeepTheClaimAliveOnSchedule(t *testing.T) {
	c := NewClaim(lease, t0)
	c.Receive(acquiredBytes(4), t0+10*ms)
	now := t0 + 10*ms
	for i := 0; i < 20; i++ {
		wake, _ := c.NextWake()
		now = wake
		if !c.HeartbeatDue(now) {
			t.Fatalf("round %d: no heartbeat due at the wake-up %v", i, now)
		}
		c.HeartbeatSent(now)
		c.Receive(acquiredBytes(4), now+10*ms)
		eq(t, "deadline", c.Deadline(), now+1600*ms)
	}
	eq(t, "status", c.Status(), StatusHeld)
}

func TestErrorAndViolationReasons(t *testing.T) {
	cases := []struct {
		data   string
		reason Reason
		code   uint8
		says   string
	}{
		{"\x13\x02\x05force", ReasonForced, 2, ""},
		{"\x13\x01\x00", ReasonShutdown, 1, ""},
		{"\x13\x18\x00", ReasonServerError, 0x18, ""},
		{"\x7f", ReasonProtocol, 0, "0x7f"},
		{"\x15\x03\x03", ReasonProtocol, 0, "speaks TLS"},
		{"\x16\x03\x03", ReasonProtocol, 0, "speaks TLS"},
		{"HTTP/1.1 400 Bad Request\r\n", ReasonProtocol, 0, "HTTP server answered"},
	}
	for _, tc := range cases {
		c := NewClaim(lease, t0)
		c.Receive([]byte(tc.data), t0+ms)
		eq(t, "status", c.Status(), StatusLost)
		loss := c.Loss()
		eq(t, "reason of "+tc.data, loss.Reason, tc.reason)
		eq(t, "code of "+tc.data, loss.Code, tc.code)
		if tc.says != "" && (loss.Err == nil || !strings.Contains(loss.Err.Error(), tc.says)) {
			t.Errorf("%q: cause %v, want it to say %q", tc.data, loss.Err, tc.says)
		}
	}
	c := NewClaim(lease, t0)
	c.Receive(append(acquiredBytes(1), "\x13\x02\x03bye"...), t0)
	eq(t, "reason after a grant", c.Loss().Reason, ReasonForced)
	eq(t, "detail", c.Loss().Detail, "bye")
}

func TestTheFirstReasonWins(t *testing.T) {
	c := NewClaim(lease, t0)
	c.Receive(append(acquiredBytes(1), 0x13, 0x01, 0x00), t0)
	c.Closed(nil)
	eq(t, "reason", c.Loss().Reason, ReasonShutdown)
	eq(t, "lose again", c.Lose(Loss{Reason: ReasonExpired}), false)
}
