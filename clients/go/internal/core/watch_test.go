package core

import (
	"encoding/binary"
	"strings"
	"testing"

	"monolock.dev/go/monolock/internal/wire"
)

func features(bits, maxWatches uint32) []byte {
	b := binary.BigEndian.AppendUint32([]byte{wire.TypeFeatures}, bits)
	return binary.BigEndian.AppendUint32(b, maxWatches)
}

func stateFrame(watch uint32, event wire.StateEvent, flags uint8, token uint64, value string) []byte {
	b := binary.BigEndian.AppendUint32([]byte{wire.TypeState}, watch)
	b = append(b, byte(event), flags)
	b = binary.BigEndian.AppendUint64(b, token)
	b = binary.BigEndian.AppendUint64(b, 1796300000000)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(len(value)))
	return append(b, value...)
}

// helloSession is a session that wrote OPEN and HELLO at t0 and read
// OPENED and FEATURES at t0.
func helloSession(t *testing.T) *Session {
	t.Helper()
	s := NewSession(lease, t0)
	s.HelloSent(wire.FeatureValues, t0)
	if s.Ready() {
		t.Fatal("ready before FEATURES")
	}
	events := s.Receive(append(opened(8), features(1, 4)...), t0)
	if len(events) != 2 || events[1].Kind != EventFeatures || !s.Ready() || !s.HasValues() || s.MaxWatches() != 4 {
		t.Fatalf("OPENED, FEATURES: %+v, ready %t", events, s.Ready())
	}
	return s
}

// watching is helloSession with watch 1 in use.
func watching(t *testing.T) *Session {
	s := helloSession(t)
	s.ObserveSent(1, t0)
	if ev := one(t, s, claimFrame(wire.TypeObserving, 1), t0); ev.Kind != EventObserving || ev.Watch != 1 {
		t.Fatalf("OBSERVING: %+v", ev)
	}
	return s
}

func TestHelloAnsweredWithUnknownTypeIsUnsupportedNotALoss(t *testing.T) {
	s := NewSession(lease, t0)
	s.HelloSent(wire.FeatureValues, t0)
	events := s.Receive(append(opened(8), errorFrame(0x13, "unknown message type")...), t0)
	if len(events) != 2 || events[1].Kind != EventUnsupported || !s.Unsupported() || !s.Ended() {
		t.Fatalf("events %+v, unsupported %t, ended %t", events, s.Unsupported(), s.Ended())
	}
	// The same ERROR for another frame is an ordinary end of session.
	s = helloSession(t)
	s.LookupSent(t0)
	if events := s.Receive(errorFrame(0x13, ""), t0); len(events) != 0 || s.Unsupported() || !s.Ended() {
		t.Fatalf("events %+v, unsupported %t", events, s.Unsupported())
	}
}

func TestAStateGoingBackToAnOlderTokenIsAViolation(t *testing.T) {
	s := watching(t)
	one(t, s, stateFrame(1, wire.StateHeld, wire.FlagInitial, 10, "a"), t0)
	one(t, s, stateFrame(1, wire.StateReleased, 0, 10, ""), t0)
	one(t, s, stateFrame(1, wire.StateGranted, 0, 12, "b"), t0)
	s.Receive(stateFrame(1, wire.StateGranted, 0, 11, "c"), t0)
	if !s.Ended() || s.Loss().Reason != ReasonProtocol || !strings.Contains(s.Loss().Err.Error(), "older holder") {
		t.Fatalf("ended %t, %+v", s.Ended(), s.Loss())
	}
	if ids := s.LiveWatches(); len(ids) != 1 || ids[0] != 1 {
		t.Fatalf("live watches %v", ids)
	}
}

func TestAStateForAWatchNotInUseIsAViolation(t *testing.T) {
	// Before its OBSERVING, and for an id never asked.
	for _, frame := range [][]byte{stateFrame(1, wire.StateFree, wire.FlagInitial, 0, ""), stateFrame(2, wire.StateFree, 0, 0, "")} {
		s := helloSession(t)
		s.ObserveSent(1, t0)
		s.Receive(frame, t0)
		if !s.Ended() || s.Loss().Reason != ReasonProtocol {
			t.Fatalf("% x: ended %t, %+v", frame, s.Ended(), s.Loss())
		}
	}
}

func TestAWatchStoppedBeforeItsReplyIsUnobservedAtTheReply(t *testing.T) {
	s := helloSession(t)
	s.ObserveSent(1, t0)
	if s.Unobserve(1) != ReleaseNothing {
		t.Fatal("UNOBSERVE before OBSERVING")
	}
	ev := one(t, s, claimFrame(wire.TypeObserving, 1), t0)
	if !ev.Unobserve {
		t.Fatalf("OBSERVING: %+v", ev)
	}
	s.UnobserveSent(1, t0+ms)
	// Its pushes before UNOBSERVED tell nothing; UNOBSERVED frees the id.
	none(t, s, stateFrame(1, wire.StateFree, wire.FlagInitial, 0, ""), t0+ms)
	if ev := one(t, s, claimFrame(wire.TypeUnobserved, 1), t0+2*ms); ev.Kind != EventUnobserved || s.KnowsWatch(1) {
		t.Fatalf("UNOBSERVED: %+v", ev)
	}
}

func TestAWatchKeepsTheSessionFromIdling(t *testing.T) {
	s := watching(t)
	if _, ok := s.IdleEnd(); ok {
		t.Fatal("a session with a watch idles")
	}
	if s.Unobserve(1) != ReleaseWrite {
		t.Fatal("no UNOBSERVE for a watch in use")
	}
	s.UnobserveSent(1, t0+ms)
	one(t, s, claimFrame(wire.TypeUnobserved, 1), t0+2*ms)
	if end, ok := s.IdleEnd(); !ok || end != t0+2*ms+KeepIdle {
		t.Fatalf("idle end %v %t", end, ok)
	}
}

func TestRepliesOfTheExtensionAreMatchedInOrder(t *testing.T) {
	s := helloSession(t)
	s.AcquireSent(1, wire.ModeWait, t0)
	s.ProclaimSent(1, t0)
	s.LookupSent(t0)
	if ev := one(t, s, tokenFrame(wire.TypeAcquired2, 1, 5), t0); ev.Kind != EventHeld {
		t.Fatalf("ACQUIRED: %+v", ev)
	}
	if ev := one(t, s, claimFrame(wire.TypeProclaimed, 1), t0); ev.Kind != EventProclaimed || ev.Claim != 1 {
		t.Fatalf("PROCLAIMED: %+v", ev)
	}
	// A LOOKUP is answered by LOCK_STATE, or REFUSED naming id 0.
	state := stateFrame(0, wire.StateHeld, 0, 5, "v")[4:]
	state[0] = wire.TypeLockState
	if ev := one(t, s, state, t0); ev.Kind != EventLockState || ev.State.Token != 5 || ev.State.Value != "v" {
		t.Fatalf("LOCK_STATE: %+v", ev)
	}
	s.LookupSent(t0 + ms)
	if ev := one(t, s, codeFrame(wire.TypeRefused, 0, 0x24, "acl"), t0+ms); ev.Kind != EventLookupRefused || ev.Code != 0x24 {
		t.Fatalf("REFUSED: %+v", ev)
	}
	if s.Deadline() != t0+ms+lease*4/5 {
		t.Fatalf("the lookup's reply confirmed nothing: deadline %v", s.Deadline())
	}
	// A PROCLAIMED with a PING in flight answers nothing.
	s.PingSent(t0 + 2*ms)
	s.Receive(claimFrame(wire.TypeProclaimed, 1), t0+2*ms)
	if !s.Ended() || s.Loss().Reason != ReasonProtocol {
		t.Fatalf("ended %t, %+v", s.Ended(), s.Loss())
	}
}
