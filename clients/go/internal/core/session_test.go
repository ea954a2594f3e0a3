package core

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"monolock.dev/go/monolock/internal/wire"
)

// Server frames of protocol v2, as bytes.

func opened(maxClaims uint32) []byte {
	b := []byte{wire.TypeOpened}
	b = binary.BigEndian.AppendUint64(b, 1)
	return binary.BigEndian.AppendUint32(b, maxClaims)
}

func claimFrame(kind byte, claim uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{kind}, claim)
}

func tokenFrame(kind byte, claim uint32, token uint64) []byte {
	return binary.BigEndian.AppendUint64(claimFrame(kind, claim), token)
}

func codeFrame(kind byte, claim uint32, code uint8, reason string) []byte {
	return append(append(claimFrame(kind, claim), code, byte(len(reason))), reason...)
}

func errorFrame(code uint8, reason string) []byte {
	return append([]byte{wire.TypeError, code, byte(len(reason))}, reason...)
}

// openedSession is a session whose OPEN went out at t0, answered at t0+at.
func openedSession(t *testing.T, at int) *Session {
	t.Helper()
	s := NewSession(lease, t0)
	events := s.Receive(opened(8), t0+ms*time.Duration(at))
	if len(events) != 1 || events[0].Kind != EventOpened || !s.Opened() || s.MaxClaims() != 8 {
		t.Fatalf("OPENED: %+v, opened %t", events, s.Opened())
	}
	return s
}

func one(t *testing.T, s *Session, data []byte, at time.Duration) ClaimEvent {
	t.Helper()
	events := s.Receive(data, at)
	if s.Ended() || len(events) != 1 {
		t.Fatalf("% x at %v: events %+v, ended %t (%+v)", data, at, events, s.Ended(), s.Loss())
	}
	return events[0]
}

func none(t *testing.T, s *Session, data []byte, at time.Duration) {
	t.Helper()
	if events := s.Receive(data, at); s.Ended() || len(events) != 0 {
		t.Fatalf("% x at %v: events %+v, ended %t (%+v)", data, at, events, s.Ended(), s.Loss())
	}
}

func TestV2EveryReplyConfirmsItsSendInstantAndAPushConfirmsNothing(t *testing.T) {
	s := openedSession(t, 10)
	eq(t, "deadline", s.Deadline(), t0+1600*ms)
	s.AcquireSent(1, wire.ModeWait, t0+100*ms)
	_, ok := s.NextPing()
	eq(t, "ping due while a frame is in flight", ok, false)
	ev := one(t, s, claimFrame(wire.TypeWaiting2, 1), t0+110*ms)
	eq(t, "event", ev, ClaimEvent{Kind: EventWaiting, Claim: 1})
	eq(t, "deadline", s.Deadline(), t0+100*ms+1600*ms)
	// srtt 10ms (two samples of 10ms): 500 - 20 = 480, from the latest
	// confirmed send.
	next, _ := s.NextPing()
	eq(t, "next ping", next, t0+580*ms)
	eq(t, "ping due a nanosecond early", s.PingDue(t0+580*ms-1), false)
	eq(t, "ping due on time", s.PingDue(t0+580*ms), true)
	s.PingSent(t0 + 580*ms)
	ev = one(t, s, tokenFrame(wire.TypeGranted, 1, 9), t0+585*ms)
	eq(t, "event", ev, ClaimEvent{Kind: EventHeld, Claim: 1, Token: 9})
	eq(t, "deadline (a push confirms nothing)", s.Deadline(), t0+1700*ms)
	none(t, s, []byte{wire.TypePong}, t0+590*ms)
	eq(t, "deadline", s.Deadline(), t0+580*ms+1600*ms)
	status, _ := s.Status(1)
	eq(t, "status", status, ClaimHeld)
}

func TestV2TheDeadlineEndsEveryClaimAtItsInstant(t *testing.T) {
	s := openedSession(t, 10)
	s.AcquireSent(1, wire.ModeWait, t0+100*ms)
	s.AcquireSent(2, wire.ModeWait, t0+100*ms)
	one(t, s, tokenFrame(wire.TypeAcquired2, 1, 5), t0+110*ms)
	one(t, s, claimFrame(wire.TypeWaiting2, 2), t0+110*ms)
	wake, _ := s.NextWake()
	eq(t, "next wake: the ping", wake, t0+100*ms+480*ms)
	s.PingSent(wake)
	wake, _ = s.NextWake()
	eq(t, "next wake while the ping is in flight: the deadline", wake, t0+1700*ms)
	s.Check(t0 + 1700*ms - 1)
	eq(t, "ended a nanosecond before the deadline", s.Ended(), false)
	s.Check(t0 + 1700*ms)
	eq(t, "ended at the deadline", s.Ended(), true)
	eq(t, "reason", s.Loss().Reason, ReasonExpired)
	_, ok := s.NextWake()
	eq(t, "wakes once ended", ok, false)
}

func TestV2AReplyReadAtTheDeadlineBringsNothingBack(t *testing.T) {
	s := openedSession(t, 10)
	s.PingSent(t0 + 500*ms)
	if events := s.Receive([]byte{wire.TypePong}, t0+1600*ms); len(events) != 0 || !s.Ended() {
		t.Fatalf("events %+v, ended %t", events, s.Ended())
	}
	eq(t, "reason", s.Loss().Reason, ReasonExpired)
}

func TestV2ReleaseIsConfirmedByReleasedAndFreesTheId(t *testing.T) {
	s := openedSession(t, 1)
	s.AcquireSent(4, wire.ModeTry, t0)
	eq(t, "event", one(t, s, tokenFrame(wire.TypeAcquired2, 4, 2), t0), ClaimEvent{Kind: EventHeld, Claim: 4, Token: 2})
	eq(t, "release step", s.Release(4), ReleaseWrite)
	s.ReleaseSent(4, t0+5*ms)
	eq(t, "release step once on its way", s.Release(4), ReleaseNothing)
	eq(t, "event", one(t, s, claimFrame(wire.TypeReleased, 4), t0+6*ms), ClaimEvent{Kind: EventReleased, Claim: 4})
	eq(t, "claims", s.Claims(), 0)
	eq(t, "release step of a free id", s.Release(4), ReleaseNothing)
}

func TestV2AReleaseAskedBeforeTheReplyGoesOutAfterIt(t *testing.T) {
	s := openedSession(t, 1)
	s.AcquireSent(1, wire.ModeWait, t0)
	s.AcquireSent(2, wire.ModeTry, t0)
	eq(t, "release step while asked", s.Release(1), ReleaseNothing)
	eq(t, "release step while asked", s.Release(2), ReleaseNothing)
	eq(t, "event", one(t, s, claimFrame(wire.TypeWaiting2, 1), t0), ClaimEvent{Kind: EventWaiting, Claim: 1, Release: true})
	eq(t, "event", one(t, s, claimFrame(wire.TypeBusy, 2), t0), ClaimEvent{Kind: EventBusy, Claim: 2})
	eq(t, "a busy id is free", s.Knows(2), false)
}

func TestV2AGrantMayCrossAReleaseAndARevokeComesFirst(t *testing.T) {
	s := openedSession(t, 1)
	s.AcquireSent(1, wire.ModeWait, t0)
	s.AcquireSent(2, wire.ModeWait, t0)
	one(t, s, claimFrame(wire.TypeWaiting2, 1), t0)
	one(t, s, tokenFrame(wire.TypeAcquired2, 2, 5), t0)
	s.ReleaseSent(1, t0)
	s.ReleaseSent(2, t0)
	none(t, s, tokenFrame(wire.TypeGranted, 1, 6), t0)
	ev := one(t, s, codeFrame(wire.TypeRevoked, 2, 0x08, "force-release"), t0)
	eq(t, "event", ev, ClaimEvent{Kind: EventRevoked, Claim: 2, Code: 0x08, Reason: "force-release"})
	eq(t, "event", one(t, s, claimFrame(wire.TypeReleased, 1), t0), ClaimEvent{Kind: EventReleased, Claim: 1})
	none(t, s, codeFrame(wire.TypeRefused, 2, wire.CodeUnknownClaim, "unknown claim id: 2"), t0)
	eq(t, "claims", s.Claims(), 0)
}

func TestV2ARefusedAcquireFreesTheIdAndTheSessionLivesOn(t *testing.T) {
	s := openedSession(t, 1)
	s.AcquireSent(3, wire.ModeWait, t0)
	ev := one(t, s, codeFrame(wire.TypeRefused, 3, wire.CodeTooManyClaims, "at most 8"), t0+ms)
	eq(t, "event", ev, ClaimEvent{Kind: EventRefused, Claim: 3, Code: 0x09, Reason: "at most 8"})
	eq(t, "knows", s.Knows(3), false)
	eq(t, "deadline (a refusal confirms its ACQUIRE)", s.Deadline(), t0+1600*ms)
}

func TestV2SplitAndCoalescedFrames(t *testing.T) {
	s := NewSession(lease, t0)
	s.AcquireSent(7, wire.ModeWait, t0)
	all := append(append(opened(16), claimFrame(wire.TypeWaiting2, 7)...), tokenFrame(wire.TypeGranted, 7, 1<<62)...)
	var events []ClaimEvent
	for _, b := range all {
		events = append(events, s.Receive([]byte{b}, t0+ms)...)
	}
	if len(events) != 3 || events[2] != (ClaimEvent{Kind: EventHeld, Claim: 7, Token: 1 << 62}) {
		t.Fatalf("byte by byte: %+v", events)
	}
	s = NewSession(lease, t0)
	s.AcquireSent(7, wire.ModeWait, t0)
	if events := s.Receive(all, t0+ms); len(events) != 3 || s.MaxClaims() != 16 {
		t.Fatalf("in one read: %+v", events)
	}
}

func TestV2AnIdleSessionEndsKeepIdleAfterItsLastClaim(t *testing.T) {
	s := NewSession(lease, t0)
	_, ok := s.IdleEnd()
	eq(t, "idle before OPENED", ok, false)
	one(t, s, opened(8), t0+ms)
	end, _ := s.IdleEnd()
	eq(t, "idle end after OPENED", end, t0+ms+KeepIdle)
	s.AcquireSent(1, wire.ModeWait, t0+2*ms)
	_, ok = s.IdleEnd()
	eq(t, "idle with a claim", ok, false)
	one(t, s, tokenFrame(wire.TypeAcquired2, 1, 1), t0+3*ms)
	s.ReleaseSent(1, t0+10*ms)
	one(t, s, claimFrame(wire.TypeReleased, 1), t0+12*ms)
	end, _ = s.IdleEnd()
	eq(t, "idle end after the release", end, t0+12*ms+KeepIdle)
	wake, _ := s.NextWake()
	next, _ := s.NextPing()
	eq(t, "next wake: the ping comes before the idle end", wake, next)
}

func TestV2ErrorEndsTheSessionWithItsCode(t *testing.T) {
	s := NewSession(lease, t0)
	if events := s.Receive(errorFrame(wire.CodeUnsupportedVersion, "v1 only"), t0+ms); len(events) != 0 {
		t.Fatalf("events %+v", events)
	}
	eq(t, "ended", s.Ended(), true)
	eq(t, "opened", s.Opened(), false)
	eq(t, "code", s.Loss().Code, uint8(0x10))
	s = openedSession(t, 1)
	s.AcquireSent(1, wire.ModeWait, t0)
	s.Receive(errorFrame(wire.CodeShuttingDown, ""), t0+ms)
	eq(t, "reason", s.Loss().Reason, ReasonShutdown)
	s = openedSession(t, 1)
	s.Receive(errorFrame(wire.CodeIdleClosed, ""), t0+ms)
	eq(t, "reason", s.Loss().Reason, ReasonServerError)
}

func TestV2Violations(t *testing.T) {
	cases := []struct {
		what  string
		setup func(s *Session)
		data  []byte
		says  string
	}{
		{"PONG answering the OPEN", nil, []byte{wire.TypePong}, "does not answer"},
		{"a reply with nothing in flight", func(s *Session) { s.Receive(opened(1), t0) }, []byte{wire.TypePong}, "no request in flight"},
		{"another claim's reply", func(s *Session) { s.Receive(opened(1), t0); s.AcquireSent(1, wire.ModeWait, t0) },
			claimFrame(wire.TypeWaiting2, 2), "does not answer"},
		{"BUSY for a waiting ACQUIRE", func(s *Session) { s.Receive(opened(1), t0); s.AcquireSent(1, wire.ModeWait, t0) },
			claimFrame(wire.TypeBusy, 1), "does not answer the ACQUIRE"},
		{"WAITING for a try ACQUIRE", func(s *Session) { s.Receive(opened(1), t0); s.AcquireSent(1, wire.ModeTry, t0) },
			claimFrame(wire.TypeWaiting2, 1), "does not answer the ACQUIRE"},
		{"GRANTED for an unknown claim", func(s *Session) { s.Receive(opened(1), t0) },
			tokenFrame(wire.TypeGranted, 3, 1), "names no waiting claim"},
		{"a second grant", func(s *Session) {
			s.Receive(opened(1), t0)
			s.AcquireSent(1, wire.ModeWait, t0)
			s.Receive(tokenFrame(wire.TypeAcquired2, 1, 1), t0)
		}, tokenFrame(wire.TypeGranted, 1, 1), "names no waiting claim"},
		{"REVOKED for a free id", func(s *Session) { s.Receive(opened(1), t0) },
			codeFrame(wire.TypeRevoked, 1, 8, ""), "names no claim in use"},
		{"a v1 frame", func(s *Session) { s.Receive(opened(1), t0) }, []byte{wire.TypeWaiting}, "unexpected message type 0x11"},
		{"an HTTP answer", nil, []byte("HTTP/1.1 400 Bad Request\r\n"), "an HTTP server answered"},
	}
	for _, c := range cases {
		s := NewSession(lease, t0)
		if c.setup != nil {
			c.setup(s)
		}
		s.Receive(c.data, t0+ms)
		if !s.Ended() || s.Loss().Reason != ReasonProtocol || !strings.Contains(errorText(s.Loss().Err), c.says) {
			t.Fatalf("%s: ended %t, loss %+v, want a protocol loss saying %q", c.what, s.Ended(), s.Loss(), c.says)
		}
		if events := s.Receive(claimFrame(wire.TypeReleased, 1), t0+2*ms); len(events) != 0 {
			t.Fatalf("%s: events after the end: %+v", c.what, events)
		}
	}
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
