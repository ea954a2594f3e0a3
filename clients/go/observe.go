package monolock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"monolock.dev/go/monolock/internal/wire"
)

// DefaultObserveLease is the lease of a session opened only to observe a
// lock or look its holder up (a session already open at the address
// with the same lease carries them too).
const DefaultObserveLease = 10 * time.Second

// maxQueuedStates bounds the states an Observation keeps for a reader
// that does not keep up: past it they collapse into the latest state,
// flagged Coalesced, so a slow reader costs bounded memory and never
// holds up the session's other claims and watches.
const maxQueuedStates = 256

// StateEvent is what a LockState reports: a state (StateFree, StateHeld)
// or a change (StateGranted, StateValue, StateReleased).
type StateEvent string

// The events of a LockState, as every monolock client names them.
const (
	// StateFree: nobody holds the lock.
	StateFree StateEvent = "free"
	// StateHeld: held under Token since Since, with Value.
	StateHeld StateEvent = "held"
	// StateGranted: the lock was just granted under Token, with Value.
	StateGranted StateEvent = "granted"
	// StateValue: the holder of Token replaced its value with Value.
	StateValue StateEvent = "value"
	// StateReleased: the claim holding Token ended (Reason says how); the
	// lock is free until the next StateGranted.
	StateReleased StateEvent = "released"
)

// ReleaseReason is how the claim of a StateReleased ended.
type ReleaseReason string

// The reasons of a StateReleased ("" for every other event).
const (
	// ReleaseByHolder: its holder released it, or closed its connection.
	ReleaseByHolder ReleaseReason = "released"
	// ReleaseExpired: its session was silent for a lease.
	ReleaseExpired ReleaseReason = "expired"
	// ReleaseForced: an administrator force-released it.
	ReleaseForced ReleaseReason = "forced"
	// ReleaseEndedByServer: the server ended its session: an io-timeout
	// or a protocol error (the kept claim released a lease later), or its
	// shutdown.
	ReleaseEndedByServer ReleaseReason = "ended_by_server"
)

// LockState is the state of a lock as the server pushed it to an
// observer (Client.Observe) or answered a lookup (Client.Holder).
//
// It is advisory: the holder it names may already have lost the lock, and
// any state is old by the time it is read. Use Value to find the holder
// (to forward a request to it, to page it), never as a permission: the
// holder's writes are still fenced by its token.
type LockState struct {
	// Held is true for StateHeld, StateGranted and StateValue.
	Held bool
	// Token is the holder's fencing token; for StateReleased the token
	// whose claim ended; for StateFree the last holder's token if the
	// server still knows it, else 0.
	Token uint64
	// Value is the holder's value ("" when not held, or when the holder
	// set none).
	Value string
	// Since is when the lock was granted (held) or became free, by the
	// server's wall clock; zero when unknown. For display only.
	Since time.Time
	// Event is the state or change reported.
	Event StateEvent
	// Initial is true for the first state of an observation: the lock's
	// state when the server registered it.
	Initial bool
	// Coalesced is true when changes were dropped for a slow reader (by
	// the server, or by this client for a reader of States that fell
	// behind): this state is the lock's state, and changes before it
	// were missed.
	Coalesced bool
	// Reason is how the claim ended, for StateReleased; else "".
	Reason ReleaseReason
}

func (s LockState) String() string {
	text := fmt.Sprintf("%s token %d", s.Event, s.Token)
	if s.Value != "" {
		text += fmt.Sprintf(" value %q", s.Value)
	}
	if s.Reason != "" {
		text += " (" + string(s.Reason) + ")"
	}
	if s.Initial {
		text += " initial"
	}
	if s.Coalesced {
		text += " coalesced"
	}
	return text
}

// lockState is the public form of a state from the wire.
func lockState(st wire.State) LockState {
	out := LockState{
		Held:      st.Held(),
		Token:     st.Token,
		Value:     st.Value,
		Event:     StateEvent(st.Event.String()),
		Initial:   st.Flags&wire.FlagInitial != 0,
		Coalesced: st.Flags&wire.FlagCoalesced != 0,
		Reason:    ReleaseReason(st.Reason.String()),
	}
	if st.SinceMS != 0 && st.SinceMS < 1<<62 {
		out.Since = time.UnixMilli(int64(st.SinceMS))
	}
	return out
}

// Observation is a watch on one lock: the states the server pushes, in
// token order (never an older holder after a newer one), on States. Stop
// it by cancelling the ctx given to Observe (or with Stop).
type Observation struct {
	name   string
	cancel context.CancelFunc
	states chan LockState
	wake   chan struct{}
	// unobserve writes the UNOBSERVE (once, from the pump).
	unobserve func()

	mu     sync.Mutex
	queue  []LockState
	ended  bool
	err    error
	closed chan struct{} // states is closed and err final
}

// Name is the observed lock's name.
func (o *Observation) Name() string { return o.name }

// States is the stream of states: first the lock's state when the
// observation began (Initial), then one per change. It is closed when the
// observation ends: Err then says why.
//
//	for st := range obs.States() { ... }
//	if err := obs.Err(); err != nil { ... }
func (o *Observation) States() <-chan LockState { return o.states }

// Err is nil while the observation runs and after the caller stopped it
// (its ctx cancelled, or Stop); once the session carrying it ended it is
// a *LostError (Observation true) with the session's loss reason
// (ReasonConnection when the server went away, ReasonShutdown,
// ReasonExpired, ReasonProtocol, ReasonServerError), whose message reads
// `observation of lock "NAME" ended (REASON): DETAIL`.
//
// States still queued are delivered on States before it closes.
func (o *Observation) Err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// Stop ends the observation as cancelling its ctx does, and waits until
// States is closed. The server is told (UNOBSERVE) without waiting for
// its answer.
func (o *Observation) Stop() {
	o.cancel()
	<-o.closed
}

// Done is closed once States is closed and Err is final.
func (o *Observation) Done() <-chan struct{} { return o.closed }

func newObservation(name string, cancel context.CancelFunc) *Observation {
	return &Observation{
		name:   name,
		cancel: cancel,
		states: make(chan LockState),
		wake:   make(chan struct{}, 1),
		closed: make(chan struct{}),
	}
}

// push queues a state for the reader; never blocks (it runs on the
// session's reading goroutine).
func (o *Observation) push(st LockState) {
	o.mu.Lock()
	if o.ended {
		o.mu.Unlock()
		return
	}
	if len(o.queue) >= maxQueuedStates {
		// The reader fell behind: the latest state stands for all.
		st.Coalesced = true
		st.Initial = false
		if st.Held {
			st.Event, st.Reason = StateHeld, ""
		} else {
			st.Event, st.Reason, st.Value = StateFree, "", ""
		}
		o.queue = append(o.queue[:0], st)
	} else {
		o.queue = append(o.queue, st)
	}
	o.mu.Unlock()
	o.signal()
}

// end ends the observation with err (nil: stopped by the caller); the
// first end wins.
func (o *Observation) end(err error) {
	o.mu.Lock()
	if !o.ended {
		o.ended, o.err = true, err
	}
	o.mu.Unlock()
	o.signal()
}

func (o *Observation) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// pump hands the queued states to the reader until the observation ends
// (then States closes once the queue is empty) or ctx ends (then the
// server is told, and States closes at once).
func (o *Observation) pump(ctx context.Context) {
	defer close(o.closed)
	defer close(o.states)
	for {
		o.mu.Lock()
		if len(o.queue) > 0 {
			st := o.queue[0]
			o.queue = o.queue[1:]
			o.mu.Unlock()
			select {
			case o.states <- st:
				continue
			case <-ctx.Done():
				o.stopped()
				return
			}
		}
		ended := o.ended
		o.mu.Unlock()
		if ended {
			return
		}
		select {
		case <-o.wake:
		case <-ctx.Done():
			o.stopped()
			return
		}
	}
}

// stopped: the caller ended the observation.
func (o *Observation) stopped() {
	o.mu.Lock()
	if !o.ended {
		o.ended = true
		o.queue = nil
	}
	o.mu.Unlock()
	o.unobserve()
}

// Observe watches the lock name without claiming it. It returns once the
// server registered the watch; the lock's state at that moment is the
// first on States (Initial), followed by every change: granted (with the
// new holder's token and value), value replaced, released (with how),
// in token order. A reader that falls behind is given the latest state,
// flagged Coalesced, never an unbounded buffer.
//
// Cancelling ctx (or Stop) ends the observation cleanly: States closes and
// Err is nil. Read States until it closes, or cancel ctx: a goroutine
// hands the states over until one or the other. When the session carrying it ends (the server killed, shut
// down, unreachable), States closes after the states already received and
// Err is the *LostError.
//
// Watches share the Client's pooled sessions with its locks (on sessions
// of DefaultObserveLease when none is open). Errors: ErrInvalidArgument
// for a bad name (before connecting); ErrUnsupported under WithProtocolV1
// or from a server without the extension; *ConnectError as for Lock; a
// *LostError (Observation true, ReasonServerError) when the server
// refused the watch: its ACL (observing needs the permission to acquire,
// code 0x24), or its bound on watches per session (0x0b, the server's
// --max-watches-per-session, 1,024 by default) or in all (0x0c).
func (c *Client) Observe(ctx context.Context, name string) (*Observation, error) {
	return c.observe(ctx, name, DefaultObserveLease)
}

func (c *Client) observe(ctx context.Context, name string, lease time.Duration) (*Observation, error) {
	if why := wire.CheckName(name); why != "" {
		return nil, invalid("%s", why)
	}
	if c.forceV1 {
		return nil, errV1HasNoValues
	}
	var obs *Observation
	err := c.onEndpoints(ctx, name, func(ep endpoint) error {
		var err error
		obs, err = c.observeAt(ctx, ep, name, uint32(lease/time.Millisecond))
		return err
	})
	return obs, err
}

// Holder asks once who holds the lock name now: a LockState with Event
// StateFree or StateHeld (Token, Value and Since of the holder). A lock
// held by a session the server ended, until its release, is held.
//
// Errors as for Observe.
func (c *Client) Holder(ctx context.Context, name string) (LockState, error) {
	if why := wire.CheckName(name); why != "" {
		return LockState{}, invalid("%s", why)
	}
	if c.forceV1 {
		return LockState{}, errV1HasNoValues
	}
	var st LockState
	err := c.onEndpoints(ctx, name, func(ep endpoint) error {
		var err error
		st, err = c.lookupAt(ctx, ep, name, uint32(DefaultObserveLease/time.Millisecond))
		return err
	})
	return st, err
}

// onEndpoints runs one request at each address in turn until one could
// be used: an *attemptFailed moves on to the next address.
func (c *Client) onEndpoints(ctx context.Context, name string, at func(ep endpoint) error) error {
	if ctx.Err() != nil {
		return &notAcquired{name: name, cause: ctx.Err()}
	}
	var attempts []ConnectAttempt
	for _, ep := range c.endpoints {
		err := at(ep)
		var failed *attemptFailed
		if !errors.As(err, &failed) {
			return err
		}
		attempts = append(attempts, ConnectAttempt{Addr: ep.addr, Err: failed.err})
		c.pool.forgetV1(ep.addr)
		c.pool.forgetNoValues(ep.addr)
		if ctx.Err() != nil || failed.stop {
			break
		}
	}
	if ctx.Err() != nil {
		return &notAcquired{name: name, cause: ctx.Err()}
	}
	return &ConnectError{Attempts: attempts}
}

// observeAt registers the watch on a session at one address.
func (c *Client) observeAt(ctx context.Context, ep endpoint, name string, leaseMS uint32) (*Observation, error) {
	for round := 0; ; round++ {
		s, err := c.sessionFor(ctx, ep, leaseMS, name, useWatch)
		if err == errRetry && round < 8 {
			continue
		}
		if err != nil {
			return nil, err
		}
		w := s.observe(name)
		if w == nil {
			s.unreserveAs(useWatch)
			if round < 8 {
				continue
			}
			return nil, &attemptFailed{err: errors.New("every session ended before the watch was written")}
		}
		select {
		case <-w.answered:
		case <-ctx.Done():
			s.stopWatch(w)
			return nil, &notAcquired{name: name, cause: ctx.Err()}
		}
		s.mu.Lock()
		refused, seen := w.refusedErr, w.seen
		idleClosed := !seen && s.dead && s.core.Loss().Code == wire.CodeIdleClosed
		endErr := w.endErr
		s.mu.Unlock()
		switch {
		case idleClosed && round < 8:
			continue
		case refused != nil:
			return nil, refused
		case !seen:
			return nil, endErr
		}
		obsCtx, cancel := context.WithCancel(ctx)
		obs := w.obs
		obs.cancel = cancel
		go obs.pump(obsCtx)
		return obs, nil
	}
}

// lookupAt asks LOOKUP on a session at one address.
func (c *Client) lookupAt(ctx context.Context, ep endpoint, name string, leaseMS uint32) (LockState, error) {
	for round := 0; ; round++ {
		s, err := c.sessionFor(ctx, ep, leaseMS, name, useLookup)
		if err == errRetry && round < 8 {
			continue
		}
		if err != nil {
			return LockState{}, err
		}
		l := s.lookup(name)
		if l == nil {
			s.unreserveAs(useLookup)
			if round < 8 {
				continue
			}
			return LockState{}, &attemptFailed{err: errors.New("every session ended before the lookup was written")}
		}
		select {
		case <-l.done:
		case <-ctx.Done():
			// The reply is still matched when it comes; nobody reads it.
			return LockState{}, &notAcquired{name: name, cause: ctx.Err()}
		}
		s.mu.Lock()
		idleClosed := l.err != nil && s.dead && s.core.Loss().Code == wire.CodeIdleClosed
		s.mu.Unlock()
		if idleClosed && round < 8 {
			continue
		}
		return l.state, l.err
	}
}
