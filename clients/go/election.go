package monolock

import (
	"context"
	"sync"
	"time"

	"monolock.dev/go/monolock/internal/wire"
)

// LeaderCallbacks are the calls a LeaderElector makes, in the shape of
// client-go's leaderelection.LeaderCallbacks. Each may be nil.
type LeaderCallbacks struct {
	// OnStartedLeading is called, in a goroutine of its own, when this
	// candidate is granted the lock, with the grant's fencing token (hand
	// it to every write the leader makes). ctx is cancelled the moment
	// leadership ends (the lock lost, or the election stopped); the lock
	// is released only after OnStartedLeading returned, so return soon
	// after ctx ends.
	OnStartedLeading func(ctx context.Context, token uint64)
	// OnStoppedLeading is called when leadership ends, for any reason,
	// after OnStartedLeading returned. Never twice in a row, and never
	// without an OnStartedLeading before it.
	OnStoppedLeading func()
	// OnNewLeader is called whenever the observed holder changes to a new
	// token, this candidate included, with the holder's state (its token
	// and value: the leader's address, say). Not for a free lock. It runs
	// on the election's observing goroutine, one call at a time.
	OnNewLeader func(state LockState)
}

// LeaderElectionConfig configures a LeaderElector.
type LeaderElectionConfig struct {
	// Name is the lock the candidates campaign for.
	Name string
	// Lease is the lock's lease (MinLease to MaxLease, whole
	// milliseconds): how soon a crashed or partitioned leader is replaced.
	Lease time.Duration
	// Value is this candidate's value, shown to every observer while it
	// leads (its "host:port", say); at most 1,024 bytes of UTF-8.
	Value string
	// Callbacks are called as leadership moves.
	Callbacks LeaderCallbacks
}

// LeaderElector campaigns for one lock on behalf of one candidate (the
// shape of client-go's leaderelection.LeaderElector and Curator's
// LeaderLatch): it waits for the lock in its FIFO queue, leads while it
// holds it, campaigns again when it loses it, and observes the lock to
// tell every candidate who leads. Unlike a lease-polling election, the
// grant is pushed the moment the previous leader releases or crashes,
// the leader learns of its loss before anyone else is granted, and every
// leader's writes carry a fencing token.
type LeaderElector struct {
	client *Client
	config LeaderElectionConfig

	mu    sync.Mutex
	value string
	lock  *Lock // while leading
}

// NewLeaderElector checks config (ErrInvalidArgument for a bad name,
// lease or value) and makes the elector; Run campaigns.
func NewLeaderElector(client *Client, config LeaderElectionConfig) (*LeaderElector, error) {
	if _, err := checkArgs(config.Name, config.Lease); err != nil {
		return nil, err
	}
	if why := wire.CheckValue(config.Value); why != "" {
		return nil, invalid("%s", why)
	}
	if client.forceV1 {
		return nil, errV1HasNoValues
	}
	return &LeaderElector{client: client, config: config, value: config.Value}, nil
}

// RunLeaderElection campaigns until ctx ends, as NewLeaderElector(client,
// config) then Run(ctx) do.
func RunLeaderElection(ctx context.Context, client *Client, config LeaderElectionConfig) error {
	e, err := NewLeaderElector(client, config)
	if err != nil {
		return err
	}
	return e.Run(ctx)
}

// IsLeader is whether this candidate holds the lock now (Lock.Held).
func (e *LeaderElector) IsLeader() bool {
	e.mu.Lock()
	lock := e.lock
	e.mu.Unlock()
	return lock != nil && lock.Held()
}

// SetValue replaces this candidate's value: at once if it leads (every
// observer is told), and for its later campaigns.
func (e *LeaderElector) SetValue(ctx context.Context, value string) error {
	if why := wire.CheckValue(value); why != "" {
		return invalid("%s", why)
	}
	e.mu.Lock()
	e.value = value
	lock := e.lock
	e.mu.Unlock()
	if lock == nil {
		return nil
	}
	return lock.SetValue(ctx, value)
}

// Run campaigns until ctx ends: it leads whenever it holds the lock and
// campaigns again after a loss; connection failures are retried with a
// backoff. When ctx ends it releases the lock if it leads (after
// OnStartedLeading returned, then OnStoppedLeading is called), stops
// observing, and returns nil.
//
// Errors that trying again cannot cure end it early: ErrUnsupported (the
// server lacks values and observers, or WithProtocolV1), an ACL refusal
// (a *LostError that is not temporary).
func (e *LeaderElector) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	obs, err := e.client.observe(ctx, e.config.Name, e.config.Lease)
	if err != nil && ctx.Err() == nil && !IsTemporary(err) {
		return err
	}
	watching := make(chan error, 1)
	go func() {
		err := e.follow(ctx, obs)
		if err != nil {
			cancel() // the campaign stops too
		}
		watching <- err
	}()
	err = e.campaign(ctx)
	cancel()
	if watchErr := <-watching; err == nil {
		err = watchErr
	}
	return err
}

// campaign takes the lock, leads, and campaigns again, until ctx ends
// or an error that trying again cannot cure.
func (e *LeaderElector) campaign(ctx context.Context) error {
	pause := newBackoff(e.config.Lease)
	for ctx.Err() == nil {
		e.mu.Lock()
		value := e.value
		e.mu.Unlock()
		lock, err := e.client.Lock(ctx, e.config.Name, e.config.Lease, WithValue(value))
		switch {
		case ctx.Err() != nil:
			if lock != nil {
				_ = lock.Release()
			}
			return nil
		case err != nil && !IsTemporary(err):
			return err
		case err != nil:
			pause.wait(ctx)
			continue
		}
		pause.reset()
		e.lead(ctx, lock)
	}
	return nil
}

// lead runs OnStartedLeading until the lock is lost or ctx ends, then
// releases the lock and calls OnStoppedLeading.
func (e *LeaderElector) lead(ctx context.Context, lock *Lock) {
	leading, stop := context.WithCancel(lock.Context())
	e.mu.Lock()
	e.lock = lock
	e.mu.Unlock()
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		if on := e.config.Callbacks.OnStartedLeading; on != nil {
			on(leading, lock.Token())
		}
	}()
	select {
	case <-lock.Done():
	case <-ctx.Done():
	}
	stop()
	<-returned
	e.mu.Lock()
	e.lock = nil
	e.mu.Unlock()
	_ = lock.Release()
	if on := e.config.Callbacks.OnStoppedLeading; on != nil {
		on()
	}
}

// follow tells OnNewLeader of every new holder, observing again (with a
// backoff) whenever an observation ends before ctx.
func (e *LeaderElector) follow(ctx context.Context, obs *Observation) error {
	var last uint64
	seen := false
	pause := newBackoff(e.config.Lease)
	for {
		if obs != nil {
			for st := range obs.States() {
				pause.reset()
				if ctx.Err() != nil {
					// Stopped: the candidate's own release, or a
					// successor, is no news for it any more.
					continue
				}
				if st.Held && (!seen || st.Token != last) {
					last, seen = st.Token, true
					if on := e.config.Callbacks.OnNewLeader; on != nil {
						on(st)
					}
				}
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		pause.wait(ctx)
		var err error
		obs, err = e.client.observe(ctx, e.config.Name, e.config.Lease)
		if err != nil && ctx.Err() == nil && !IsTemporary(err) {
			return err
		}
	}
}

// backoff spaces out attempts after failures: 50 ms, doubling, at most a
// quarter of the lease (and 5 s).
type backoff struct {
	next, max time.Duration
}

func newBackoff(lease time.Duration) *backoff {
	max := lease / 4
	if max > 5*time.Second {
		max = 5 * time.Second
	}
	b := &backoff{max: max}
	b.reset()
	return b
}

func (b *backoff) reset() {
	b.next = 50 * time.Millisecond
	if b.next > b.max {
		b.next = b.max
	}
}

// wait waits the next pause, or until ctx ends.
func (b *backoff) wait(ctx context.Context) {
	timer := time.NewTimer(b.next)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
	if b.next *= 2; b.next > b.max {
		b.next = b.max
	}
}
