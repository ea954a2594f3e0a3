package core

import (
	"fmt"
	"sort"
	"time"

	"monolock.dev/go/monolock/internal/wire"
)

// The extension "values and observers" of a v2 session (docs/protocol.md,
// "Writing a client of the extension: checklist"): HELLO and its answer,
// PROCLAIM, and watches, whose ids live in a space apart from claim ids.

// extension is what HELLO learnt.
type extension struct {
	// asked: HELLO was written; answered: FEATURES was read.
	asked, answered bool
	// unsupported: OPENED, then ERROR 0x13 answering the HELLO.
	unsupported bool
	features    uint32
	maxWatches  uint32
}

// WatchStatus is where one watch id of a session stands.
type WatchStatus uint8

// The statuses of a watch id.
const (
	// WatchAsking: OBSERVE sent, no reply yet.
	WatchAsking WatchStatus = iota + 1
	// WatchActive: OBSERVING read; STATE pushes arrive.
	WatchActive
	// WatchUnobserving: UNOBSERVE sent, UNOBSERVED not read yet.
	WatchUnobserving
)

type watchState struct {
	status WatchStatus
	// unobserve: the owner stopped the watch while its OBSERVE was
	// unanswered; an UNOBSERVE goes out once OBSERVING says it is in use.
	unobserve bool
	// lastToken of the pushes so far (valid once pushed).
	lastToken uint64
	pushed    bool
}

// HelloSent records a HELLO asking for features, written at `at` right
// after the OPEN (in the same write).
func (s *Session) HelloSent(features uint32, at time.Duration) {
	s.ext.asked = true
	s.inFlight = append(s.inFlight, sentFrame{kind: sentHello, at: at})
}

// Ready is whether the session may carry claims: OPENED read, and
// FEATURES too when HELLO was written.
func (s *Session) Ready() bool {
	return s.opened && (!s.ext.asked || s.ext.answered) && !s.ended
}

// HasValues is whether the server granted values and observers.
func (s *Session) HasValues() bool { return s.ext.features&wire.FeatureValues != 0 }

// MaxWatches is the server's bound on watches in use (valid once
// FEATURES was read).
func (s *Session) MaxWatches() uint32 { return s.ext.maxWatches }

// Unsupported is whether the server answered HELLO with ERROR 0x13: it
// lacks the extension (and the session is over).
func (s *Session) Unsupported() bool { return s.ext.unsupported }

// helloRefused: an ERROR 0x13 read after OPENED with the HELLO the oldest
// frame in flight.
func (s *Session) helloRefused(frame wire.Frame2) bool {
	return frame.Code == wire.CodeUnknownType && s.opened && len(s.inFlight) > 0 &&
		s.inFlight[0].kind == sentHello
}

// ProclaimSent records a PROCLAIM of a claim in use, written at `at`.
func (s *Session) ProclaimSent(claim uint32, at time.Duration) {
	s.inFlight = append(s.inFlight, sentFrame{kind: sentProclaim, claim: claim, at: at})
}

// ObserveSent records an OBSERVE of a free watch id, written at `at`.
func (s *Session) ObserveSent(watch uint32, at time.Duration) {
	s.watches[watch] = &watchState{status: WatchAsking}
	s.inFlight = append(s.inFlight, sentFrame{kind: sentObserve, watch: watch, at: at})
}

// Unobserve records that the owner of the watch stopped it: whether to
// write an UNOBSERVE now.
func (s *Session) Unobserve(watch uint32) ReleaseStep {
	w, ok := s.watches[watch]
	if !ok {
		return ReleaseNothing
	}
	switch w.status {
	case WatchAsking:
		w.unobserve = true
	case WatchActive:
		return ReleaseWrite
	}
	return ReleaseNothing
}

// UnobserveSent records an UNOBSERVE of the watch written at `at`.
func (s *Session) UnobserveSent(watch uint32, at time.Duration) {
	if w, ok := s.watches[watch]; ok {
		w.status = WatchUnobserving
	}
	s.inFlight = append(s.inFlight, sentFrame{kind: sentUnobserve, watch: watch, at: at})
}

// LookupSent records a LOOKUP written at `at`.
func (s *Session) LookupSent(at time.Duration) {
	s.inFlight = append(s.inFlight, sentFrame{kind: sentLookup, at: at})
}

// KnowsWatch is whether the watch id is asked for or in use.
func (s *Session) KnowsWatch(watch uint32) bool { _, ok := s.watches[watch]; return ok }

// WatchStatus is where the watch id stands; false when it is free.
func (s *Session) WatchStatus(watch uint32) (WatchStatus, bool) {
	w, ok := s.watches[watch]
	if !ok {
		return 0, false
	}
	return w.status, true
}

// LiveWatches is every watch id in use (OBSERVING read, UNOBSERVED not
// yet), in ascending order: the watches the end of the session ends.
func (s *Session) LiveWatches() []uint32 {
	ids := make([]uint32, 0, len(s.watches))
	for id, w := range s.watches {
		if w.status != WatchAsking {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

func (s *Session) freeWatch(watch uint32, now time.Duration) {
	delete(s.watches, watch)
	s.maybeIdle(now)
}

// onState checks a STATE push: for a watch in use (or being
// unobserved, then it tells nothing), never going back to an older token.
func (s *Session) onState(frame wire.Frame2) (ClaimEvent, bool, error) {
	w, ok := s.watches[frame.Watch]
	if !ok || w.status == WatchAsking {
		return ClaimEvent{}, false, unexpected(frame, "names no watch in use")
	}
	if w.pushed && frame.State.Token < w.lastToken {
		return ClaimEvent{}, false, &ProtocolError{msg: fmt.Sprintf(
			"%v goes back from token %d: a watch never names an older holder after a newer one", frame, w.lastToken)}
	}
	w.lastToken, w.pushed = frame.State.Token, true
	if w.status == WatchUnobserving {
		return ClaimEvent{}, false, nil
	}
	return ClaimEvent{Kind: EventState, Watch: frame.Watch, State: frame.State}, true, nil
}

// onExtReply matches a reply with the extension's frame in flight.
func (s *Session) onExtReply(sent sentFrame, frame wire.Frame2, now time.Duration) (ClaimEvent, bool, error) {
	w := s.watches[sent.watch]
	switch {
	case sent.kind == sentHello && frame.Kind == wire.Features && s.opened:
		s.ext.answered = true
		s.ext.features, s.ext.maxWatches = frame.Features, frame.MaxWatches
		return ClaimEvent{Kind: EventFeatures, Features: frame.Features, MaxWatches: frame.MaxWatches}, true, nil
	case sent.kind == sentProclaim && frame.Kind == wire.Proclaimed && frame.Claim == sent.claim:
		return ClaimEvent{Kind: EventProclaimed, Claim: frame.Claim}, true, nil
	case sent.kind == sentProclaim && frame.Kind == wire.Refused && frame.Claim == sent.claim:
		// REFUSED 0x20 after a REVOKED crossed the PROCLAIM: the claim
		// was already gone, and its owner told so (Gone).
		gone := frame.Code == wire.CodeUnknownClaim && !s.Knows(frame.Claim)
		return ClaimEvent{Kind: EventProclaimRefused, Claim: frame.Claim, Code: frame.Code, Reason: frame.Reason, Gone: gone}, true, nil
	case sent.kind == sentObserve && frame.Kind == wire.Observing && frame.Watch == sent.watch &&
		w != nil && w.status == WatchAsking:
		w.status = WatchActive
		return ClaimEvent{Kind: EventObserving, Watch: frame.Watch, Unobserve: w.unobserve}, true, nil
	case sent.kind == sentUnobserve && frame.Kind == wire.Unobserved && frame.Watch == sent.watch &&
		w != nil && w.status == WatchUnobserving:
		s.freeWatch(frame.Watch, now)
		return ClaimEvent{Kind: EventUnobserved, Watch: frame.Watch}, true, nil
	case (sent.kind == sentObserve || sent.kind == sentUnobserve) && frame.Kind == wire.Refused &&
		frame.Claim == sent.watch && w != nil:
		s.freeWatch(sent.watch, now)
		return ClaimEvent{Kind: EventWatchRefused, Watch: sent.watch, Code: frame.Code, Reason: frame.Reason}, true, nil
	case sent.kind == sentLookup && frame.Kind == wire.LockState:
		return ClaimEvent{Kind: EventLockState, State: frame.State}, true, nil
	case sent.kind == sentLookup && frame.Kind == wire.Refused && frame.Claim == 0:
		return ClaimEvent{Kind: EventLookupRefused, Code: frame.Code, Reason: frame.Reason}, true, nil
	}
	return ClaimEvent{}, false, unexpected(frame, "does not answer the oldest request in flight")
}
