package monolock

import (
	"context"
	"time"

	"monolock.dev/go/monolock/internal/core"
)

// epoch is the origin of the instants the core computes with: time.Since
// reads the monotonic clock, so wall-clock steps never move a deadline.
var epoch = time.Now()

// now is the current instant on the monotonic clock.
func now() time.Duration { return time.Since(epoch) }

// instant converts a core instant back to a time.Time that carries the
// monotonic reading (for deadlines on sockets and for Lock.Deadline).
func instant(d time.Duration) time.Time { return epoch.Add(d) }

// session is one claim on a server as a Lock sees it. Protocol v1 keeps one
// connection per claim (v1Session, session_v1.go); a protocol v2 session,
// several claims over one connection, implements the same methods and the
// Lock above it stays as it is.
type session interface {
	// answered is closed at the first reply (queued or granted) or when
	// the claim ends before it.
	answered() <-chan struct{}
	// granted is closed at the grant.
	granted() <-chan struct{}
	// done is closed when the claim ends: lost or released.
	done() <-chan struct{}
	// state is the status after checking the deadline against the clock,
	// the token once held, and the *LostError once lost.
	state() (core.Status, uint64, error)
	// err is nil while the claim lives, then a *LostError or ErrReleased.
	err() error
	// deadline is S + 0.8 x lease.
	deadline() time.Duration
	// context is a child of parent cancelled when the claim ends.
	context(parent context.Context) context.Context
	// release ends the claim and waits for its goroutine to stop: nil, or
	// the *LostError if the claim had been lost before. Every later call
	// returns the same.
	release() error
	// value is the claim's value as the server has it.
	value() string
	// setValue replaces the value and returns once the server has it.
	setValue(ctx context.Context, value string) error
}

// detached keeps a context's values and drops its cancellation and
// deadline: the ctx that bounded the wait for a lock must not end the
// lock's own context (a Go 1.19 form of context.WithoutCancel). Its Done
// is nil, so context.WithCancel on it starts no goroutine.
type detached struct{ parent context.Context }

func (detached) Deadline() (time.Time, bool)         { return time.Time{}, false }
func (detached) Done() <-chan struct{}               { return nil }
func (detached) Err() error                          { return nil }
func (d detached) Value(key interface{}) interface{} { return d.parent.Value(key) }
func (d detached) String() string                    { return "monolock.detached" }
