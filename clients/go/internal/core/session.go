package core

import (
	"fmt"
	"time"

	"monolock.dev/go/monolock/internal/wire"
)

// KeepIdle is how long a protocol v2 session with no claim stays open
// for the next one before the client closes it (the server closes idle
// sessions itself after its --idle-timeout, 60 s by default).
const KeepIdle = 20 * time.Second

// ClaimStatus is where one claim id of a v2 session stands.
type ClaimStatus uint8

// The statuses of a claim id.
const (
	// ClaimAsking: ACQUIRE sent, no reply yet.
	ClaimAsking ClaimStatus = iota + 1
	ClaimWaiting
	ClaimHeld
	// ClaimReleasing: RELEASE sent, RELEASED not read yet.
	ClaimReleasing
)

type claimState struct {
	status ClaimStatus
	mode   wire.Mode
	// release: the owner let go while the ACQUIRE was unanswered; a
	// RELEASE goes out once its reply says the id is in use.
	release bool
}

type sentKind uint8

const (
	sentOpen sentKind = iota + 1
	sentAcquire
	sentRelease
	sentPing
	sentHello
	sentProclaim
	sentObserve
	sentUnobserve
	sentLookup
)

type sentFrame struct {
	kind  sentKind
	claim uint32
	watch uint32
	at    time.Duration
}

// EventKind is what a frame from a v2 server meant for one claim.
type EventKind uint8

// The events of a v2 session.
const (
	// EventOpened: OPENED, the reply to OPEN (MaxClaims has the bound).
	EventOpened EventKind = iota + 1
	// EventHeld: the claim holds the lock (ACQUIRED, or GRANTED pushed).
	EventHeld
	// EventWaiting: the claim is queued.
	EventWaiting
	// EventBusy: a try-only ACQUIRE found the lock held; the id is free.
	EventBusy
	// EventRefused: the ACQUIRE was refused (Code); the id is free.
	EventRefused
	// EventReleased: RELEASED, the lock is handed on; the id is free.
	EventReleased
	// EventRevoked: an administrator ended the claim (Code); the id is free.
	EventRevoked

	// The events of the extension "values and observers" (watch.go).

	// EventFeatures: FEATURES, the reply to HELLO (Features, MaxWatches).
	EventFeatures
	// EventUnsupported: OPENED, then ERROR 0x13 answering HELLO: the
	// server lacks the extension. The session is over; nothing else is
	// reported (nothing else was written).
	EventUnsupported
	// EventProclaimed: PROCLAIMED, the server has the claim's new value.
	EventProclaimed
	// EventProclaimRefused: the PROCLAIM was refused (Code).
	EventProclaimRefused
	// EventObserving: OBSERVING, the watch is in use; its INITIAL state
	// follows.
	EventObserving
	// EventState: a STATE pushed to a watch in use (State).
	EventState
	// EventUnobserved: UNOBSERVED, the watch id is free.
	EventUnobserved
	// EventWatchRefused: an OBSERVE or UNOBSERVE was refused (Code); the
	// watch id is free.
	EventWatchRefused
	// EventLockState: LOCK_STATE, the reply to LOOKUP (State).
	EventLockState
	// EventLookupRefused: the LOOKUP was refused (Code).
	EventLookupRefused
)

// ClaimEvent is one event of a v2 session for its driver.
type ClaimEvent struct {
	Kind  EventKind
	Claim uint32
	Token uint64
	// Release: the owner let go while the ACQUIRE was unanswered and the
	// id is now in use: write a RELEASE for it now.
	Release bool
	Code    uint8
	Reason  string

	// Watch of the watch events; Unobserve: the owner stopped the watch
	// while its OBSERVE was unanswered and the id is now in use: write an
	// UNOBSERVE for it now.
	Watch     uint32
	Unobserve bool
	// Gone: an EventProclaimRefused whose claim had already ended (a
	// REVOKED crossed the PROCLAIM): nothing new for its owner.
	Gone bool
	// State of EventState and EventLockState.
	State wire.State
	// Features and MaxWatches of EventFeatures.
	Features   uint32
	MaxWatches uint32
}

// ReleaseStep is what Session.Release asks of the driver.
type ReleaseStep uint8

// The release steps.
const (
	// ReleaseNothing: nothing to write now (the ACQUIRE is unanswered and
	// its reply will say, or the id is already free or on its way out).
	ReleaseNothing ReleaseStep = iota
	// ReleaseWrite: write a RELEASE now.
	ReleaseWrite
)

// Session is one protocol v2 session (docs/protocol.md, "Writing a
// version 2 client: checklist") as a machine: the frames sent and the
// bytes read, each with its instant, in; claim events, the session's
// deadline, the next PING and its end out. No I/O and no clock of its
// own. Not safe for concurrent use.
//
//   - Every frame sent gets exactly one reply, in order: a FIFO of the
//     frames in flight, each reply checked against the oldest (type and
//     claim id). GRANTED and REVOKED are pushes and answer nothing.
//   - S is the send instant of the latest frame whose reply has arrived
//     (before the first reply: the OPEN's); every claim is given up at
//     S + 0.8 x lease. A push moves nothing.
//   - PING on the version 1 schedule, only when nothing is in flight: any
//     reply confirms the session, so a busy session never pings.
type Session struct {
	schedule      Schedule
	inFlight      []sentFrame
	claims        map[uint32]*claimState
	watches       map[uint32]*watchState
	ext           extension
	confirmedSend time.Duration
	repliedAt     time.Duration
	opened        bool
	maxClaims     uint32
	// idleSince: when the session last had no claim (valid while it has none).
	idleSince time.Duration
	ended     bool
	loss      Loss
	buf       []byte
}

// NewSession is the session whose OPEN was sent at openSent.
func NewSession(lease, openSent time.Duration) *Session {
	return &Session{
		schedule:      NewSchedule(lease),
		inFlight:      []sentFrame{{kind: sentOpen, at: openSent}},
		claims:        map[uint32]*claimState{},
		watches:       map[uint32]*watchState{},
		confirmedSend: openSent,
		repliedAt:     openSent,
		idleSince:     openSent,
	}
}

// Lease is the session's lease.
func (s *Session) Lease() time.Duration { return s.schedule.lease }

// Opened is whether OPENED has been read.
func (s *Session) Opened() bool { return s.opened }

// MaxClaims is the server's bound on claims in use (valid once opened).
func (s *Session) MaxClaims() uint32 { return s.maxClaims }

// Ended is whether the session is over; Loss says why.
func (s *Session) Ended() bool { return s.ended }

// Loss is why the session ended (valid once ended): every claim still in
// use ended with it.
func (s *Session) Loss() Loss { return s.loss }

// Deadline is S + 0.8 x lease.
func (s *Session) Deadline() time.Duration { return s.schedule.Deadline(s.confirmedSend) }

// Claims is the number of claim ids asked for or in use.
func (s *Session) Claims() int { return len(s.claims) }

// Knows is whether the id is asked for or in use.
func (s *Session) Knows(claim uint32) bool { _, ok := s.claims[claim]; return ok }

// Status is where the id stands; false when it is free.
func (s *Session) Status(claim uint32) (ClaimStatus, bool) {
	c, ok := s.claims[claim]
	if !ok {
		return 0, false
	}
	return c.status, true
}

// Lose ends the session unless it already ended (the first reason wins);
// true when this call ended it.
func (s *Session) Lose(loss Loss) bool {
	if s.ended {
		return false
	}
	s.ended, s.loss = true, loss
	s.buf = nil
	return true
}

// Closed records that the connection ended: EOF when err is nil.
func (s *Session) Closed(err error) { s.Lose(Loss{Reason: ReasonConnection, Err: err}) }

// Check is the pessimist's check: past the deadline the session (every
// claim) is lost, whatever timer has not fired yet.
func (s *Session) Check(now time.Duration) {
	if !s.ended && now >= s.Deadline() {
		s.Lose(Loss{Reason: ReasonExpired})
	}
}

// AcquireSent records an ACQUIRE of a free id written at `at`.
func (s *Session) AcquireSent(claim uint32, mode wire.Mode, at time.Duration) {
	s.claims[claim] = &claimState{status: ClaimAsking, mode: mode}
	s.inFlight = append(s.inFlight, sentFrame{kind: sentAcquire, claim: claim, at: at})
}

// Release records that the owner of the id let go: whether to write a
// RELEASE now.
func (s *Session) Release(claim uint32) ReleaseStep {
	c, ok := s.claims[claim]
	if !ok {
		return ReleaseNothing
	}
	switch c.status {
	case ClaimAsking:
		c.release = true
	case ClaimWaiting, ClaimHeld:
		return ReleaseWrite
	}
	return ReleaseNothing
}

// ReleaseSent records a RELEASE of the id written at `at`.
func (s *Session) ReleaseSent(claim uint32, at time.Duration) {
	if c, ok := s.claims[claim]; ok {
		c.status = ClaimReleasing
	}
	s.inFlight = append(s.inFlight, sentFrame{kind: sentRelease, claim: claim, at: at})
}

// PingSent records a PING written at `at`.
func (s *Session) PingSent(at time.Duration) {
	s.inFlight = append(s.inFlight, sentFrame{kind: sentPing, at: at})
}

// NextPing is when the next PING is due: false while any frame is in
// flight (its reply will confirm the session) or once ended.
func (s *Session) NextPing() (time.Duration, bool) {
	if s.ended || len(s.inFlight) > 0 {
		return 0, false
	}
	return s.schedule.NextSend(s.confirmedSend, s.repliedAt), true
}

// PingDue is true when a PING should go out now (it checks the deadline
// first).
func (s *Session) PingDue(now time.Duration) bool {
	s.Check(now)
	next, ok := s.NextPing()
	return ok && next <= now
}

// IdleEnd is when the client closes the session for want of claims:
// false while it has a claim or is not open yet.
func (s *Session) IdleEnd() (time.Duration, bool) {
	if s.ended || !s.opened || len(s.claims) > 0 || len(s.watches) > 0 || len(s.inFlight) > 0 {
		return 0, false
	}
	return s.idleSince + KeepIdle, true
}

// NextWake is when the driver must look at the session again without
// input: the next PING, the idle end or the deadline, whichever is first;
// false once ended.
func (s *Session) NextWake() (time.Duration, bool) {
	if s.ended {
		return 0, false
	}
	wake := s.Deadline()
	if next, ok := s.NextPing(); ok && next < wake {
		wake = next
	}
	if idle, ok := s.IdleEnd(); ok && idle < wake {
		wake = idle
	}
	return wake, true
}

// Receive applies the bytes read at now: every whole frame among them, in
// order. A frame no v2 server sends at that point ends the session with
// ReasonProtocol; ERROR ends it with the server's code.
func (s *Session) Receive(data []byte, now time.Duration) []ClaimEvent {
	s.Check(now)
	if s.ended {
		return nil
	}
	s.buf = append(s.buf, data...)
	used := 0
	var events []ClaimEvent
	for !s.ended {
		frame, n, err := wire.Decode2(s.buf[used:])
		if err != nil {
			s.Lose(ProtocolLoss(err))
			return events
		}
		if n == 0 {
			break
		}
		used += n
		event, ok, err := s.onFrame(frame, now)
		if err != nil {
			s.Lose(ProtocolLoss(err))
			return events
		}
		if ok {
			events = append(events, event)
		}
	}
	if !s.ended {
		rest := copy(s.buf, s.buf[used:])
		s.buf = s.buf[:rest]
	}
	return events
}

func unexpected(frame wire.Frame2, why string) error {
	return &ProtocolError{msg: fmt.Sprintf("%v %s", frame, why)}
}

func (s *Session) free(claim uint32, now time.Duration) {
	delete(s.claims, claim)
	s.maybeIdle(now)
}

// maybeIdle starts the idle time when the session has nothing in use.
func (s *Session) maybeIdle(now time.Duration) {
	if len(s.claims) == 0 && len(s.watches) == 0 {
		s.idleSince = now
	}
}

func (s *Session) onFrame(frame wire.Frame2, now time.Duration) (ClaimEvent, bool, error) {
	switch frame.Kind {
	case wire.Error2:
		if s.helloRefused(frame) {
			s.ext.unsupported = true
			s.Lose(ServerLoss(frame.Code, frame.Reason))
			return ClaimEvent{Kind: EventUnsupported}, true, nil
		}
		s.Lose(ServerLoss(frame.Code, frame.Reason))
		return ClaimEvent{}, false, nil
	case wire.State2:
		return s.onState(frame)
	case wire.Granted:
		c, ok := s.claims[frame.Claim]
		switch {
		case ok && c.status == ClaimWaiting:
			c.status = ClaimHeld
			return ClaimEvent{Kind: EventHeld, Claim: frame.Claim, Token: frame.Token}, true, nil
		case ok && c.status == ClaimReleasing:
			// Granted while its RELEASE is on the way: RELEASED follows.
			return ClaimEvent{}, false, nil
		}
		return ClaimEvent{}, false, unexpected(frame, "names no waiting claim")
	case wire.Revoked:
		c, ok := s.claims[frame.Claim]
		if !ok || c.status == ClaimAsking {
			return ClaimEvent{}, false, unexpected(frame, "names no claim in use")
		}
		s.free(frame.Claim, now)
		return ClaimEvent{Kind: EventRevoked, Claim: frame.Claim, Code: frame.Code, Reason: frame.Reason}, true, nil
	}
	return s.onReply(frame, now)
}

// onReply matches a reply with the oldest frame in flight.
func (s *Session) onReply(frame wire.Frame2, now time.Duration) (ClaimEvent, bool, error) {
	if len(s.inFlight) == 0 {
		return ClaimEvent{}, false, unexpected(frame, "arrived with no request in flight")
	}
	sent := s.inFlight[0]
	c := s.claims[frame.Claim]
	var event ClaimEvent
	ok := true
	switch {
	case sent.kind == sentOpen && frame.Kind == wire.Opened:
		s.opened, s.maxClaims = true, frame.MaxClaims
		s.idleSince = now
		event = ClaimEvent{Kind: EventOpened}
	case sent.kind == sentPing && frame.Kind == wire.Pong:
		ok = false
	case sent.kind == sentAcquire && sent.claim == frame.Claim && c != nil && c.status == ClaimAsking:
		switch {
		case frame.Kind == wire.Acquired2:
			c.status = ClaimHeld
			event = ClaimEvent{Kind: EventHeld, Claim: frame.Claim, Token: frame.Token, Release: c.release}
		case frame.Kind == wire.Waiting2 && c.mode == wire.ModeWait:
			c.status = ClaimWaiting
			event = ClaimEvent{Kind: EventWaiting, Claim: frame.Claim, Release: c.release}
		case frame.Kind == wire.Busy && c.mode == wire.ModeTry:
			s.free(frame.Claim, now)
			event = ClaimEvent{Kind: EventBusy, Claim: frame.Claim}
		case frame.Kind == wire.Refused:
			s.free(frame.Claim, now)
			event = ClaimEvent{Kind: EventRefused, Claim: frame.Claim, Code: frame.Code, Reason: frame.Reason}
		default:
			return ClaimEvent{}, false, unexpected(frame, "does not answer the ACQUIRE in flight")
		}
	case sent.kind == sentRelease && sent.claim == frame.Claim && frame.Kind == wire.Released &&
		c != nil && c.status == ClaimReleasing:
		s.free(frame.Claim, now)
		event = ClaimEvent{Kind: EventReleased, Claim: frame.Claim}
	case sent.kind == sentRelease && sent.claim == frame.Claim && frame.Kind == wire.Refused &&
		frame.Code == wire.CodeUnknownClaim && c == nil:
		// The RELEASE crossed a REVOKED: the claim was already gone.
		ok = false
	case sent.kind >= sentHello:
		var err error
		event, ok, err = s.onExtReply(sent, frame, now)
		if err != nil {
			return ClaimEvent{}, false, err
		}
	default:
		return ClaimEvent{}, false, unexpected(frame, "does not answer the oldest request in flight")
	}
	s.inFlight = s.inFlight[1:]
	rtt := now - sent.at
	if rtt < 0 {
		rtt = 0
	}
	s.schedule.ObserveRTT(rtt)
	if sent.at > s.confirmedSend {
		s.confirmedSend = sent.at
	}
	s.repliedAt = now
	return event, ok, nil
}
