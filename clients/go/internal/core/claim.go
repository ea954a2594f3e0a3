package core

import (
	"errors"
	"fmt"
	"time"

	"monolock.dev/go/monolock/internal/wire"
)

// Status is where a claim is, as its owner sees it.
type Status uint8

// The statuses of a claim.
const (
	StatusUnanswered Status = iota
	StatusWaiting
	StatusHeld
	StatusLost
)

// Reason is why a claim ended. The public package mirrors these values.
type Reason uint8

// The reasons a claim ends.
const (
	// ReasonExpired: no reply confirmed the session within 0.8 x lease.
	ReasonExpired Reason = iota + 1
	// ReasonForced: ERROR 0x02, an administrator force-released the lock.
	ReasonForced
	// ReasonShutdown: ERROR 0x01, the server is shutting down.
	ReasonShutdown
	// ReasonServerError: any other ERROR code (0x18: the ACL refuses).
	ReasonServerError
	// ReasonConnection: the connection closed or failed without an ERROR.
	ReasonConnection
	// ReasonProtocol: the server broke protocol v1.
	ReasonProtocol
)

// String is the reason's name, the one every monolock client and the
// conformance driver protocol use: "expired", "forced", "shutdown",
// "server_error", "connection", "protocol".
func (r Reason) String() string {
	switch r {
	case ReasonExpired:
		return "expired"
	case ReasonForced:
		return "forced"
	case ReasonShutdown:
		return "shutdown"
	case ReasonServerError:
		return "server_error"
	case ReasonConnection:
		return "connection"
	case ReasonProtocol:
		return "protocol"
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Loss says why a claim ended.
type Loss struct {
	Reason Reason
	// Code and Detail of the server's ERROR frame; Code 0 when there was none.
	Code   uint8
	Detail string
	// Err is the cause: the I/O error or the *ProtocolError.
	Err error
}

// ServerLoss is the loss for an ERROR frame.
func ServerLoss(code uint8, detail string) Loss {
	reason := ReasonServerError
	switch code {
	case wire.CodeShuttingDown:
		reason = ReasonShutdown
	case wire.CodeClosedByAdmin:
		reason = ReasonForced
	}
	return Loss{Reason: reason, Code: code, Detail: detail}
}

// ProtocolLoss is the loss for bytes that break protocol v1. The first
// bytes of a TLS record or of an HTTP response name what is on the other
// end instead.
func ProtocolLoss(err error) Loss {
	var unknown *wire.UnknownTypeError
	if errors.As(err, &unknown) {
		switch unknown.Byte {
		case 0x15, 0x16:
			err = &ProtocolError{msg: "the server speaks TLS: connect with TLS (monolock.WithTLS)", Peer: PeerTLS}
		case 'H':
			err = &ProtocolError{msg: "an HTTP server answered: this is not the lock protocol's port (the admin or ops port?)", Peer: PeerHTTP}
		}
	}
	return Loss{Reason: ReasonProtocol, Err: err}
}

// Claim is one claim (one connection) as a machine: bytes and instants in;
// status, deadline, the next wake-up and "send a heartbeat now" out. Not
// safe for concurrent use: the session serialises access.
type Claim struct {
	status   Status
	loss     Loss
	exchange Exchange
	buf      []byte
	answered bool
}

// Answered is whether the server answered the ACQUIRE (WAITING or
// ACQUIRED), even if the claim ended since.
func (c *Claim) Answered() bool { return c.answered }

// NewClaim is the claim whose ACQUIRE was sent at acquireSent.
func NewClaim(lease, acquireSent time.Duration) *Claim {
	return &Claim{exchange: NewExchange(lease, acquireSent)}
}

// Status is where the claim is (without looking at the clock: see Check).
func (c *Claim) Status() Status { return c.status }

// Token is the token of the grant (valid once held).
func (c *Claim) Token() uint64 { return c.exchange.Token() }

// Loss is why the claim ended (valid once lost).
func (c *Claim) Loss() Loss { return c.loss }

// Deadline is S + 0.8 x lease.
func (c *Claim) Deadline() time.Duration { return c.exchange.Deadline() }

// Lose ends the claim for loss unless it already ended (the first reason
// wins); true when this call ended it.
func (c *Claim) Lose(loss Loss) bool {
	if c.status == StatusLost {
		return false
	}
	c.status, c.loss = StatusLost, loss
	c.buf = nil
	return true
}

// Check is the pessimist's check: past the deadline the claim is lost,
// whatever timer has not fired yet.
func (c *Claim) Check(now time.Duration) {
	if c.status != StatusLost && now >= c.Deadline() {
		c.Lose(Loss{Reason: ReasonExpired})
	}
}

// Receive applies the bytes read at now: every whole frame among them.
func (c *Claim) Receive(data []byte, now time.Duration) {
	c.Check(now)
	if c.status == StatusLost {
		return
	}
	c.buf = append(c.buf, data...)
	used := 0
	for c.status != StatusLost {
		frame, n, err := wire.Decode(c.buf[used:])
		if err != nil {
			c.Lose(ProtocolLoss(err))
			return
		}
		if n == 0 {
			break
		}
		used += n
		event, err := c.exchange.OnFrame(frame, now)
		if err != nil {
			c.Lose(ProtocolLoss(err))
			return
		}
		switch event {
		case EventQueued:
			c.status, c.answered = StatusWaiting, true
		case EventGranted:
			c.status, c.answered = StatusHeld, true
		case EventClosed:
			c.Lose(ServerLoss(frame.Code, frame.Reason))
		}
	}
	if c.status == StatusLost {
		return
	}
	rest := copy(c.buf, c.buf[used:])
	c.buf = c.buf[:rest]
}

// Closed records that the connection ended: EOF when err is nil, else a
// failure.
func (c *Claim) Closed(err error) {
	c.Lose(Loss{Reason: ReasonConnection, Err: err})
}

// HeartbeatDue is true when a heartbeat should go out now (it checks the
// deadline first).
func (c *Claim) HeartbeatDue(now time.Duration) bool {
	c.Check(now)
	if c.status == StatusLost {
		return false
	}
	due, ok := c.exchange.NextHeartbeat()
	return ok && due <= now
}

// HeartbeatSent records a heartbeat whose send started at `at`.
func (c *Claim) HeartbeatSent(at time.Duration) { c.exchange.HeartbeatSent(at) }

// NextWake is when the session must look at this claim again without
// input: the next heartbeat or the deadline, whichever is first; false once
// the claim has ended.
func (c *Claim) NextWake() (time.Duration, bool) {
	if c.status == StatusLost {
		return 0, false
	}
	deadline := c.Deadline()
	if due, ok := c.exchange.NextHeartbeat(); ok && due < deadline {
		return due, true
	}
	return deadline, true
}

// NextHeartbeat is when the next heartbeat is due: false while a request
// is in flight or once the claim has ended.
func (c *Claim) NextHeartbeat() (time.Duration, bool) {
	if c.status == StatusLost {
		return 0, false
	}
	return c.exchange.NextHeartbeat()
}
