package monolock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"monolock.dev/go/monolock/internal/core"
	"monolock.dev/go/monolock/internal/wire"
)

// Lock is a held lock, a claim on a session: while the Lock lives its
// session heartbeats in the background; Release lets it go and the server
// hands the lock to the next waiter at once. A process that dies releases
// it too, since its kernel closes the socket.
//
// Hand Token to everything the lock guards (the fencing token), hand
// Context to every call made under the lock, and stop the guarded work
// when Done is closed. A Lock is safe for concurrent use.
type Lock struct {
	s      session
	name   string
	token  uint64
	lease  time.Duration
	addr   string
	values context.Context

	ctxOnce sync.Once
	ctx     context.Context
}

// Token is the fencing token of this grant: strictly greater than every
// token issued before it by the same server process. Write it next to what
// the lock protects and refuse writes that carry a smaller one.
func (l *Lock) Token() uint64 { return l.token }

// Name is the lock's name.
func (l *Lock) Name() string { return l.name }

// Lease is the session's lease, as sent (whole milliseconds).
func (l *Lock) Lease() time.Duration { return l.lease }

// Addr is the server address that granted the lock.
func (l *Lock) Addr() string { return l.addr }

// Held reports whether the lock is still held, judged against the
// monotonic clock now: false once the lock was lost or released, and false
// as soon as the clock passes Deadline even if the background goroutine
// has not run since (a process resumed from a pause never trusts a stale
// "held").
//
// Once Held returns false the claim is given up for good and Held never
// returns true again. Stop touching the guarded resource and lock anew (a
// new claim, at the back of the queue).
func (l *Lock) Held() bool {
	status, _, _ := l.s.state()
	return status == core.StatusHeld
}

// Deadline is the instant at which the client gives the lock up unless a
// heartbeat is confirmed before: S + 0.8 x lease, where S is the send
// instant of the latest confirmed ACQUIRE or HEARTBEAT. The server cannot
// expire the session before S + lease, so the client always learns of the
// loss first. The time carries a monotonic clock reading.
func (l *Lock) Deadline() time.Time { return instant(l.s.deadline()) }

// Done is closed the moment the lock ends: lost (Err says why) or
// released. It never closes while the lock is held.
func (l *Lock) Done() <-chan struct{} { return l.s.done() }

// Err is nil while the lock is held; then a *LostError saying why it was
// lost (expired deadline, forced by an administrator, server shutting
// down, connection lost), or ErrReleased after Release. It checks the
// deadline against the clock, as Held does.
func (l *Lock) Err() error { return l.s.err() }

// Context is a context cancelled the moment the lock ends (lost or
// released): hand it to database calls and requests made under the lock so
// that they stop by themselves. It carries the values of the ctx given to
// Lock, not its deadline or cancellation. Every call returns the same
// context. Err on the lock says why it ended.
func (l *Lock) Context() context.Context {
	l.ctxOnce.Do(func() { l.ctx = l.s.context(detached{l.values}) })
	return l.ctx
}

// Release lets the lock go and returns once the server has confirmed it
// (protocol v2: its RELEASED; v1: the EOF that follows the client's
// half-close), so that a TryLock by anyone succeeds right after. Done and
// Context end at once. The wait is bounded by the I/O timeout
// (WithIOTimeout); past it the connection is closed and the release
// reported as unconfirmed (a *LostError, ReasonConnection): the lock is
// gone for the caller all the same.
//
// It returns nil, or the *LostError if the lock had been lost before the
// release (so the caller learns that its work may have run without the
// lock). Release is idempotent: later calls return what the first did.
func (l *Lock) Release() error { return l.s.release() }

// Value is the claim's value as the server has it (WithValue, then the
// latest SetValue the server confirmed); "" for none.
func (l *Lock) Value() string { return l.s.value() }

// SetValue replaces the claim's value (the protocol's PROCLAIM, as etcd's
// election Proclaim) and returns once the server has it: every state an
// observer reads after that carries it. The value is checked as
// WithValue's (ErrInvalidArgument past 1,024 bytes, before writing).
//
// Errors: the *LostError of a lost lock (ErrReleased after Release);
// ErrUnsupported on protocol v1 or from a server without the extension;
// ctx.Err() when ctx ends first (the server may still take the value).
func (l *Lock) SetValue(ctx context.Context, value string) error {
	if why := wire.CheckValue(value); why != "" {
		return invalid("%s", why)
	}
	return l.s.setValue(ctx, value)
}

func (l *Lock) String() string {
	return fmt.Sprintf("monolock.Lock{name: %q, token: %d, held: %t}", l.name, l.token, l.Held())
}
