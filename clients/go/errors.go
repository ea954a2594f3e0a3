package monolock

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"monolock.dev/go/monolock/internal/core"
	"monolock.dev/go/monolock/internal/wire"
)

// ErrNotAcquired is returned by TryLock when someone else holds the lock
// (the claim leaves no trace in the queue). A
// Lock whose ctx ended before the grant returns an error for which both
// errors.Is(err, ErrNotAcquired) and errors.Is(err, ctx.Err()) hold.
var ErrNotAcquired = errors.New("monolock: lock not acquired: it is held by someone else")

// ErrInvalidArgument matches (with errors.Is) every error about a bad lock
// name, lease or address. These are reported before any connection is
// made, and the same call fails the same way every time.
var ErrInvalidArgument = errors.New("monolock: invalid argument")

// ErrReleased is what Lock.Err returns after a Release of a lock that was
// still held: it ended because this process let it go.
var ErrReleased = errors.New("monolock: the lock was released")

// ErrUnsupported matches (with errors.Is) the error of a lock value, a
// SetValue, an observation or a holder lookup asked of a server that lacks
// the protocol extension "values and observers" (it is older than this
// client), or of a client forced to protocol v1 (WithProtocolV1), which
// has no values or observers. It is not temporary: upgrade the server.
// Plain locks work on such a server as before.
var ErrUnsupported = errors.New("monolock: unsupported by the server")

// unsupportedError says which address (or forced protocol v1) lacks the
// extension; errors.Is(err, ErrUnsupported).
type unsupportedError struct{ msg string }

func (e *unsupportedError) Error() string        { return "monolock: " + e.msg }
func (e *unsupportedError) Is(target error) bool { return target == ErrUnsupported }

// unsupportedAt is the error for an address whose server lacks the
// extension.
func unsupportedAt(addr string) error {
	return &unsupportedError{msg: addr + " does not support lock values and observers (the server is older than this client): upgrade the server"}
}

// errV1HasNoValues is the error under WithProtocolV1.
var errV1HasNoValues error = &unsupportedError{msg: "protocol version 1 has no lock values or observers"}

// invalidArgument names what is wrong; errors.Is(err, ErrInvalidArgument).
type invalidArgument struct{ msg string }

func (e *invalidArgument) Error() string        { return "monolock: " + e.msg }
func (e *invalidArgument) Is(target error) bool { return target == ErrInvalidArgument }

func invalid(format string, args ...interface{}) error {
	return &invalidArgument{msg: fmt.Sprintf(format, args...)}
}

// notAcquired is a wait that ctx ended before the grant.
type notAcquired struct {
	name  string
	cause error
}

func (e *notAcquired) Error() string {
	return fmt.Sprintf("monolock: lock %q not acquired: %v", e.name, e.cause)
}
func (e *notAcquired) Is(target error) bool { return target == ErrNotAcquired }
func (e *notAcquired) Unwrap() error        { return e.cause }

// Reason is why a lock (or a place in its queue) was lost. Its String is
// the name used across monolock's clients: "expired", "forced",
// "shutdown", "server_error", "connection", "protocol".
type Reason uint8

// The reasons a claim ends (the values of internal/core's, checked by a test).
const (
	// ReasonExpired: no reply confirmed the session within 0.8 x the
	// lease. The client gave the claim up before the server could hand the
	// lock on.
	ReasonExpired Reason = iota + 1
	// ReasonForced: the server ended the claim by administrator action
	// (force-release, or a waiter removed: v2 REVOKED 0x08, v1 ERROR 0x02).
	ReasonForced
	// ReasonShutdown: the server is shutting down (ERROR 0x01).
	ReasonShutdown
	// ReasonServerError: another code, such as the ACL's refusal of this
	// identity for this lock (v2 REFUSED 0x24, v1 ERROR 0x18).
	// LostError.Code has it.
	ReasonServerError
	// ReasonConnection: the connection closed or failed without an ERROR
	// frame (EOF, reset, I/O error), or a release went unconfirmed.
	ReasonConnection
	// ReasonProtocol: the server sent something a monolock server never
	// sends at that point; the connection was closed. (An address that is
	// not a monolock server at all is a *ConnectError, never a loss.)
	ReasonProtocol
)

// String is the reason's name in every monolock client's vocabulary.
func (r Reason) String() string { return core.Reason(r).String() }

// LostError says why a lock ended (or why a place in its queue ended
// before the grant). Lock.Err returns one once the lock is lost, and Lock,
// TryLock and Release return one when the claim ended under them.
//
//	var lost *monolock.LostError
//	if errors.As(err, &lost) && lost.Reason == monolock.ReasonForced { ... }
type LostError struct {
	// Name is the lock's name.
	Name string
	// Reason says why.
	Reason Reason
	// Code is the server's ERROR code, 0 when it sent none.
	Code uint8
	// Detail is the server's ERROR reason text (for humans; may be empty).
	Detail string
	// Lease is the session's lease.
	Lease time.Duration
	// Err is the cause, when there is one: the I/O error of a failed
	// connection, or what broke the protocol.
	Err error
	// Observation is true when an observation of the lock (Client.Observe,
	// Client.Holder) ended, not a claim: the session carrying it ended, or
	// the server refused it.
	Observation bool
}

func newLostError(name string, lease time.Duration, loss core.Loss) *LostError {
	return &LostError{
		Name:   name,
		Reason: Reason(loss.Reason),
		Code:   loss.Code,
		Detail: loss.Detail,
		Lease:  lease,
		Err:    loss.Err,
	}
}

func (e *LostError) Error() string {
	var why string
	switch {
	case e.Reason == ReasonExpired:
		why = fmt.Sprintf("no heartbeat was confirmed within 0.8 x the lease of %v", e.Lease)
	case e.Code != 0 && wire.IsClaimCode(e.Code):
		why = "the server ended the claim with " + wire.DescribeClaimCode(e.Code, e.Detail)
	case e.Code != 0:
		why = "the server ended the session with " + wire.DescribeCode(e.Code, e.Detail)
	case e.Reason == ReasonProtocol:
		why = "protocol violation by the server: " + errText(e.Err)
	case e.Err != nil:
		why = "the connection failed: " + e.Err.Error()
	default:
		why = "the server closed the connection"
	}
	if e.Observation {
		if e.Code != 0 && wire.IsClaimCode(e.Code) {
			why = "the server refused it with " + wire.DescribeClaimCode(e.Code, e.Detail)
		}
		return fmt.Sprintf("observation of lock %q ended (%s): %s", e.Name, e.Reason, why)
	}
	// The message starts with the lock, as in every monolock client:
	// lock "NAME" lost (REASON): DETAIL.
	return fmt.Sprintf("lock %q lost (%s): %s", e.Name, e.Reason, why)
}

// Unwrap is the cause (see Err).
func (e *LostError) Unwrap() error { return e.Err }

func errText(err error) string {
	if err == nil {
		return "unknown"
	}
	return err.Error()
}

// ConnectError is returned when no server address could be reached. It
// names every address tried, in order, with its failure. errors.Is and
// errors.As see the last failure (errors.Is(err, syscall.ECONNREFUSED)).
type ConnectError struct {
	Attempts []ConnectAttempt
}

// ConnectAttempt is one address tried and why it failed.
type ConnectAttempt struct {
	Addr string
	Err  error
}

func (e *ConnectError) Error() string {
	parts := make([]string, len(e.Attempts))
	for i, a := range e.Attempts {
		parts[i] = a.Addr + ": " + errText(a.Err)
	}
	return "monolock: could not connect to " + strings.Join(parts, "; ")
}

// Unwrap is the last attempt's failure.
func (e *ConnectError) Unwrap() error {
	if len(e.Attempts) == 0 {
		return nil
	}
	return e.Attempts[len(e.Attempts)-1].Err
}

// TLSError is a TLS handshake that failed on something other than the
// network: an untrusted or mismatched server certificate, a server that
// refused the client certificate (or its absence), a peer that does not
// speak TLS. It sits inside a ConnectError; the same handshake fails the
// same way again.
type TLSError struct {
	Addr string
	Err  error
}

func (e *TLSError) Error() string {
	return "TLS handshake with " + e.Addr + " failed: " + errText(e.Err)
}

// Unwrap is the crypto/tls or crypto/x509 error.
func (e *TLSError) Unwrap() error { return e.Err }

// IsTemporary reports whether trying again (a new claim, at the back of the
// queue) may succeed: server conditions (codes below 0x10, unknown ones
// included), connections lost, refused or timed out, a server shutting
// down, expired heartbeats, a lock that was busy. False for what fails the
// same way every time: invalid arguments, ErrUnsupported, TLS failures (certificate
// verification, TLS to a plain port), an address that is not a monolock
// server (an HTTP port, a TLS port without TLS), client-error codes (0x10
// and up, such as the ACL's refusal) and protocol violations.
func IsTemporary(err error) bool {
	var lost *LostError
	var tlsErr *TLSError
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrInvalidArgument), errors.Is(err, ErrUnsupported):
		return false
	case errors.As(err, &lost):
		if lost.Reason == ReasonProtocol {
			return false
		}
		return lost.Code == 0 || lost.Code < wire.ClientErrorCodes
	case errors.As(err, &tlsErr):
		return false
	case errors.Is(err, ErrNotAcquired):
		return true
	}
	var connect *ConnectError
	if !errors.As(err, &connect) {
		return false
	}
	var answer *answerFailure
	if last := connect.Unwrap(); last != nil && errors.As(last, &answer) {
		return answer.temporary
	}
	return true
}
