package core

import (
	"fmt"
	"time"

	"monolock.dev/go/monolock/internal/wire"
)

// Standing is where the claim stands with the server.
type Standing uint8

// The standings of a claim.
const (
	// Unanswered: ACQUIRE sent, no reply yet.
	Unanswered Standing = iota
	// Queued behind the holder.
	Queued
	// Granted under a token.
	Granted
)

// Event is what a frame from the server meant.
type Event uint8

// The events of a frame.
const (
	// EventQueued: the reply to the ACQUIRE, queued.
	EventQueued Event = iota + 1
	// EventGranted: the lock was granted (the ACQUIRE's reply, or the push).
	EventGranted
	// EventConfirmed: a heartbeat reply that moved only the deadline.
	EventConfirmed
	// EventClosed: the server ended the session with an ERROR.
	EventClosed
)

// ProtocolError is something a protocol v1 server never sends.
type ProtocolError struct {
	msg string
	// Peer names what answered instead of a monolock server, if the
	// bytes tell: PeerTLS or PeerHTTP.
	Peer Peer
}

// Peer is what is on the other end of a connection, when its first bytes
// show it is not a monolock server.
type Peer uint8

// The peers told apart by their first bytes.
const (
	PeerUnknown Peer = iota
	PeerTLS
	PeerHTTP
)

func (e *ProtocolError) Error() string { return e.msg }

// Exchange matches replies to requests for one connection.
//
// Every ACQUIRE and HEARTBEAT gets exactly one reply, in order, and a
// promotion adds exactly one unsolicited ACQUIRED. At most one request is
// in flight, so a reply always answers that request, except for the one
// push: while queued, the first ACQUIRED is the push (a heartbeat in
// flight stays in flight; its own ACQUIRED follows). A push confirms
// nothing. Anything else is a protocol violation.
type Exchange struct {
	schedule Schedule
	standing Standing
	token    uint64
	inFlight bool
	sentAt   time.Duration // send instant of the request in flight
	// confirmedSend is S: the send instant of the latest request whose
	// reply arrived (before the first reply: the ACQUIRE's).
	confirmedSend time.Duration
	nextHeartbeat time.Duration
	hasNext       bool
}

// NewExchange is the state right after the ACQUIRE went out at acquireSent.
func NewExchange(lease, acquireSent time.Duration) Exchange {
	return Exchange{
		schedule:      NewSchedule(lease),
		inFlight:      true,
		sentAt:        acquireSent,
		confirmedSend: acquireSent,
	}
}

// Standing is where the claim stands.
func (e *Exchange) Standing() Standing { return e.standing }

// Token is the token of the grant (valid once Granted).
func (e *Exchange) Token() uint64 { return e.token }

// Schedule is the heartbeat schedule.
func (e *Exchange) Schedule() *Schedule { return &e.schedule }

// Deadline is the instant at which the claim is abandoned without a
// confirmation.
func (e *Exchange) Deadline() time.Duration { return e.schedule.Deadline(e.confirmedSend) }

// NextHeartbeat is when the next heartbeat is due; false while a request is
// in flight.
func (e *Exchange) NextHeartbeat() (time.Duration, bool) {
	if e.inFlight {
		return 0, false
	}
	return e.nextHeartbeat, e.hasNext
}

// HeartbeatSent records a heartbeat sent at `at`.
func (e *Exchange) HeartbeatSent(at time.Duration) {
	if e.inFlight {
		panic("monolock: one request in flight at most")
	}
	e.inFlight, e.sentAt = true, at
	e.hasNext = false
}

// OnFrame interprets one frame that arrived at now. The error is a
// *ProtocolError when the frame cannot be the next one a v1 server sends;
// the caller closes the connection.
func (e *Exchange) OnFrame(frame wire.Frame, now time.Duration) (Event, error) {
	switch frame.Kind {
	case wire.Error:
		return EventClosed, nil
	case wire.Waiting:
		if e.standing == Granted {
			return 0, &ProtocolError{msg: "WAITING arrived after the lock was granted"}
		}
		if err := e.confirm(now, frame); err != nil {
			return 0, err
		}
		if e.standing == Unanswered {
			e.standing = Queued
			return EventQueued, nil
		}
		return EventConfirmed, nil
	case wire.Acquired:
		switch e.standing {
		case Unanswered:
			if err := e.confirm(now, frame); err != nil {
				return 0, err
			}
			e.standing, e.token = Granted, frame.Token
			return EventGranted, nil
		case Queued:
			// The push: confirms nothing; a heartbeat in flight stays so.
			e.standing, e.token = Granted, frame.Token
			return EventGranted, nil
		}
		if frame.Token != e.token {
			return 0, &ProtocolError{msg: fmt.Sprintf(
				"ACQUIRED carried token %d, but this session was granted token %d", frame.Token, e.token)}
		}
		if err := e.confirm(now, frame); err != nil {
			return 0, err
		}
		return EventConfirmed, nil
	}
	return 0, &ProtocolError{msg: "undecodable frame"}
}

// confirm takes the request in flight as answered at now.
func (e *Exchange) confirm(now time.Duration, frame wire.Frame) error {
	if !e.inFlight {
		return &ProtocolError{msg: frame.String() + " arrived with no request in flight"}
	}
	e.inFlight = false
	rtt := now - e.sentAt
	if rtt < 0 {
		rtt = 0
	}
	e.schedule.ObserveRTT(rtt)
	e.confirmedSend = e.sentAt
	e.nextHeartbeat, e.hasNext = e.schedule.NextSend(e.sentAt, now), true
	return nil
}
