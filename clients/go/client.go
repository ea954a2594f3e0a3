package monolock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"monolock.dev/go/monolock/internal/core"
	"monolock.dev/go/monolock/internal/wire"
)

// DefaultConnectTimeout bounds connecting to one server address: the
// dial, the TLS handshake and the server's first answer.
const DefaultConnectTimeout = 5 * time.Second

// DefaultIOTimeout bounds the wait for the server to confirm a release.
const DefaultIOTimeout = 5 * time.Second

// The lease bounds. A lease is a failure detector, not a work deadline
// (holders hold for hours by heartbeating): below MinLease the client's
// deadline of 0.8 x lease is shorter than ordinary scheduling stalls, and
// above MaxLease a partitioned holder blocks everyone for longer than any
// operator would accept.
const (
	MinLease = 100 * time.Millisecond
	MaxLease = time.Hour
)

// Client knows where the monolock servers are and how to reach them, and
// keeps its protocol v2 sessions: the locks taken through one Client
// share connections, one session per server address and lease carrying up
// to the server's bound of claims (1,024 by default). A Client is safe
// for concurrent use; share one per process. An unused session is closed
// after about 20 s.
type Client struct {
	endpoints      []endpoint
	connectTimeout time.Duration
	ioTimeout      time.Duration
	forceV1        bool
	dial           func(ctx context.Context, network, addr string) (net.Conn, error)
	pool           *pool
}

// endpoint is one server address and, with TLS, its configuration (the
// server name defaults to the address's host).
type endpoint struct {
	addr string
	host string
	tls  *tls.Config
}

type options struct {
	tls            *tls.Config
	connectTimeout time.Duration
	ioTimeout      time.Duration
	forceV1        bool
	dial           func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Option configures a Client.
type Option func(*options)

// WithTLS turns TLS on. The server certificate is checked against
// config.RootCAs (the system roots when nil) and the address's host (an
// IP address is checked against the certificate's IP addresses), unless
// config.ServerName is set. For mutual TLS put the client certificate in
// config.Certificates: the server's ACL and audit log see its identity.
// The config is cloned; later changes to it have no effect.
func WithTLS(config *tls.Config) Option {
	return func(o *options) { o.tls = config }
}

// WithConnectTimeout bounds connecting to one address: the dial, the TLS
// handshake and the server's first answer (default DefaultConnectTimeout).
// When it runs out the next address is tried.
func WithConnectTimeout(d time.Duration) Option {
	return func(o *options) { o.connectTimeout = d }
}

// WithIOTimeout bounds the wait for the server to confirm a release
// (default DefaultIOTimeout). Past it the connection is closed and
// Release reports the release as unconfirmed.
func WithIOTimeout(d time.Duration) Option {
	return func(o *options) { o.ioTimeout = d }
}

// WithProtocolV1 makes the client speak protocol v1 only: one connection
// per lock, as monolock servers before protocol v2 require. Without it
// the client speaks v2 and falls back to v1 by itself, per address, when
// a server answers that it does not speak v2 (ERROR 0x10); the fallback
// is remembered for 5 minutes or until the address fails to connect.
func WithProtocolV1() Option {
	return func(o *options) { o.forceV1 = true }
}

// WithDialContext replaces the dialer (a proxy, a Unix socket, a test
// double). It is called with network "tcp" and one address at a time. TLS,
// when on, runs over the connection it returns.
func WithDialContext(dial func(ctx context.Context, network, addr string) (net.Conn, error)) Option {
	return func(o *options) { o.dial = dial }
}

// NewClient makes a client for the servers at addrs: "host:port", or
// several separated by commas ("a:7070,b:7070", a primary and its
// standbys), tried in order whenever a lock connects. An empty addrs reads
// $MONOLOCK_ADDRESS, and without it DefaultAddress. Nothing is dialed here.
//
// The error matches ErrInvalidArgument when an address or an option is
// malformed.
func NewClient(addrs string, opts ...Option) (*Client, error) {
	o := options{connectTimeout: DefaultConnectTimeout, ioTimeout: DefaultIOTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if o.connectTimeout <= 0 {
		return nil, invalid("connect timeout %v must be positive", o.connectTimeout)
	}
	if o.ioTimeout <= 0 {
		return nil, invalid("I/O timeout %v must be positive", o.ioTimeout)
	}
	endpoints, err := parseAddrs(addrs)
	if err != nil {
		return nil, err
	}
	if o.dial == nil {
		o.dial = (&net.Dialer{}).DialContext
	}
	if o.tls != nil {
		for i := range endpoints {
			config := o.tls.Clone()
			if config.ServerName == "" {
				config.ServerName = endpoints[i].host
			}
			endpoints[i].tls = config
		}
	}
	return &Client{endpoints: endpoints, connectTimeout: o.connectTimeout, ioTimeout: o.ioTimeout,
		forceV1: o.forceV1, dial: o.dial, pool: newPool()}, nil
}

// Addrs is the server addresses, in the order they are tried.
func (c *Client) Addrs() []string {
	out := make([]string, len(c.endpoints))
	for i, ep := range c.endpoints {
		out[i] = ep.addr
	}
	return out
}

// Lock waits for the lock name in its FIFO queue and returns it once the
// server grants it (the grant is pushed: no polling, no retry loop).
//
// lease is the failure detector, not a work deadline: the session
// heartbeats about four times per lease and the lock may be held for
// hours. A shorter lease hands the lock on sooner after a crash or a
// partition, at the cost of more heartbeats. It is a time.Duration from
// MinLease (100ms) to MaxLease (1h), in whole milliseconds.
//
// ctx bounds the whole wait, connecting included. When it ends first, the
// place in the queue is given up (and the server has confirmed it when
// Lock returns) and the error matches both ErrNotAcquired and ctx.Err().
// ctx does not bound the lock once granted; the lock's Context keeps
// ctx's values.
//
// Always Release the lock (defer lock.Release()): until then it
// heartbeats and stays held.
//
// Errors: ErrInvalidArgument (before connecting); *ConnectError naming
// every address tried, also when what answered is not a monolock server
// (an HTTP port, a TLS port without WithTLS, a port that never answers),
// with a *TLSError inside for a failed handshake; the ErrNotAcquired
// wrapper above; or *LostError when the server refused or ended the claim
// before the grant (ReasonServerError with Code 0x24, or 0x18 in protocol
// v1: the ACL refuses this lock).
//
// Options: WithValue gives the claim a value (the holder's address, say)
// that observers (Observe) and lookups (Holder) see with the holder.
func (c *Client) Lock(ctx context.Context, name string, lease time.Duration, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, name, lease, false, opts)
}

// TryLock takes the lock if it is free and returns ErrNotAcquired (itself,
// so err == ErrNotAcquired holds) if someone holds it, leaving no trace in
// the queue. ctx bounds connecting. Other errors as for Lock.
func (c *Client) TryLock(ctx context.Context, name string, lease time.Duration, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, name, lease, true, opts)
}

// LockOption configures one Lock, TryLock or Do.
type LockOption func(*lockOptions)

type lockOptions struct {
	value string
}

// WithValue gives the claim a value: UTF-8 text of at most 1,024 bytes
// (for example the holder's "host:port", or a JSON object), shown with the
// holder to observers (Client.Observe), lookups (Client.Holder), and in
// `monolock locks`, the admin API and the audit log; gone when the claim
// ends. Lock.SetValue replaces it while holding. An empty value is none.
//
// A longer value, or one that is not UTF-8, is ErrInvalidArgument before
// connecting; a non-empty value is ErrUnsupported under WithProtocolV1 or
// from a server without the extension "values and observers".
func WithValue(value string) LockOption {
	return func(o *lockOptions) { o.value = value }
}

// Do waits for the lock as Lock does, runs fn while holding it, and
// releases it. fn's ctx is cancelled when the lock is lost or when ctx
// ends, whichever comes first: hand it to every call the lock guards.
//
// Do returns fn's error; if fn succeeded but the lock was lost before it
// returned, the *LostError (the work may have run unprotected). A fn that
// failed with context.Canceled because the lock was lost gets the
// *LostError instead. Errors before fn runs are Lock's.
func (c *Client) Do(ctx context.Context, name string, lease time.Duration, fn func(ctx context.Context, lock *Lock) error, opts ...LockOption) error {
	lock, err := c.Lock(ctx, name, lease, opts...)
	if err != nil {
		return err
	}
	work := lock.s.context(ctx)
	err = fn(work, lock)
	released := lock.Release()
	if released != nil && (err == nil || (errors.Is(err, context.Canceled) && ctx.Err() == nil)) {
		return released
	}
	return err
}

// checkArgs checks a name and a lease before any connection: the name as
// the server would, the lease against the client's bounds.
func checkArgs(name string, lease time.Duration) (uint32, error) {
	if why := wire.CheckName(name); why != "" {
		return 0, invalid("%s", why)
	}
	const unit = "(leases are in nanoseconds, a time.Duration: write 10*time.Second, not 10)"
	switch {
	case lease < MinLease:
		return 0, invalid("lease %v is below the minimum of 100 ms %s", lease, unit)
	case lease > MaxLease:
		return 0, invalid("lease %v is above the maximum of 1 hour %s", lease, unit)
	case lease%time.Millisecond != 0:
		return 0, invalid("lease %v is not a whole number of milliseconds %s", lease, unit)
	}
	return uint32(lease / time.Millisecond), nil
}

// errRetry: the session the claim waited for was given up by the caller
// who opened it; the claim tries another.
var errRetry = errors.New("the session was abandoned before it opened")

// attemptFailed is an address that could not be used: it goes into the
// ConnectError, and the next address is tried unless stop.
type attemptFailed struct {
	err  error
	stop bool
}

func (e *attemptFailed) Error() string { return e.err.Error() }

func (c *Client) acquire(ctx context.Context, name string, lease time.Duration, try bool, opts []LockOption) (*Lock, error) {
	leaseMS, err := checkArgs(name, lease)
	if err != nil {
		return nil, err
	}
	var o lockOptions
	for _, opt := range opts {
		opt(&o)
	}
	if why := wire.CheckValue(o.value); why != "" {
		return nil, invalid("%s", why)
	}
	if o.value != "" && c.forceV1 {
		return nil, errV1HasNoValues
	}
	if ctx.Err() != nil {
		return nil, &notAcquired{name: name, cause: ctx.Err()}
	}
	var attempts []ConnectAttempt
	for _, ep := range c.endpoints {
		lock, err := c.acquireAt(ctx, ep, name, leaseMS, try, o.value)
		var failed *attemptFailed
		if !errors.As(err, &failed) {
			return lock, err
		}
		attempts = append(attempts, ConnectAttempt{Addr: ep.addr, Err: failed.err})
		c.pool.forgetV1(ep.addr)
		c.pool.forgetNoValues(ep.addr)
		if ctx.Err() != nil || failed.stop {
			break
		}
	}
	if ctx.Err() != nil {
		return nil, &notAcquired{name: name, cause: ctx.Err()}
	}
	return nil, &ConnectError{Attempts: attempts}
}

// acquireAt claims the lock at one address: on a pooled v2 session, or on
// its own v1 connection when the client or the address speaks v1.
func (c *Client) acquireAt(ctx context.Context, ep endpoint, name string, leaseMS uint32, try bool, value string) (*Lock, error) {
	if c.forceV1 || c.pool.isV1(ep.addr) {
		if value != "" {
			return nil, unsupportedAt(ep.addr)
		}
		return c.acquireV1(ctx, ep, name, leaseMS, try)
	}
	u := useClaim
	if value != "" {
		u = useValueClaim
	}
	lease := time.Duration(leaseMS) * time.Millisecond
	mode := wire.ModeWait
	if try {
		mode = wire.ModeTry
	}
	// A session that ends under a fresh claim, or a claim refused for the
	// session's bound (0x09), sends the claim to another session; the
	// bound on rounds only guards against a server that refuses forever.
	var claim *v2Claim
	for round := 0; ; round++ {
		s, err := c.sessionFor(ctx, ep, leaseMS, name, u)
		if err == errRetry {
			if round < 8 {
				continue
			}
			return nil, &attemptFailed{err: err}
		}
		if errors.Is(err, errFallBack) {
			return c.acquireV1(ctx, ep, name, leaseMS, try)
		}
		if err != nil {
			return nil, err
		}
		claim, err = s.acquire(name, lease, mode, value)
		if err != nil {
			s.unreserve()
			if round < 8 {
				continue
			}
			return nil, &attemptFailed{err: err}
		}
		select {
		case <-claim.answered():
		case <-ctx.Done():
			_ = claim.release()
			return nil, &notAcquired{name: name, cause: ctx.Err()}
		}
		s.mu.Lock()
		busy, full := claim.busy, claim.refusedFull
		// A session the server closed as idle (ERROR 0x03, also when it
		// runs out of descriptors) before it saw the claim: the claim
		// never existed there and goes to a new session.
		idleClosed := !claim.seen && s.dead && s.core.Loss().Code == wire.CodeIdleClosed
		s.mu.Unlock()
		switch {
		case busy:
			return nil, ErrNotAcquired
		case (full || idleClosed) && round < 8:
			continue
		}
		break
	}
	status, token, lost := claim.state()
	if status == core.StatusWaiting {
		select {
		case <-claim.granted():
		case <-claim.done():
		case <-ctx.Done():
			_ = claim.release()
			return nil, &notAcquired{name: name, cause: ctx.Err()}
		}
		status, token, lost = claim.state()
	}
	if status != core.StatusHeld {
		_ = claim.release()
		if lost == nil {
			lost = fmt.Errorf("monolock: lock %q: the claim ended before the grant", name)
		}
		return nil, lost
	}
	return &Lock{s: claim, name: name, token: token, lease: lease, addr: ep.addr, values: ctx}, nil
}

// session returns a pooled session at ep with room for one claim,
// opening one when none has room. The error is errFallBack, the caller's
// ctx ending (as ErrNotAcquired), or an *attemptFailed.
func (c *Client) session(ctx context.Context, ep endpoint, leaseMS uint32, name string, u use) (*v2Session, error) {
	s, fresh := c.pool.reserve(poolKey{addr: ep.addr, leaseMS: leaseMS}, u)
	var err error
	if fresh {
		err = s.open(ctx, c, ep, leaseMS)
	} else {
		select {
		case <-s.ready:
		case <-ctx.Done():
			s.unreserveAs(u)
			return nil, &notAcquired{name: name, cause: ctx.Err()}
		}
		s.mu.Lock()
		err = s.openErr
		abandoned := s.abandoned
		s.mu.Unlock()
		if abandoned && ctx.Err() == nil {
			return nil, errRetry
		}
	}
	switch {
	case err == nil:
		return s, nil
	case errors.Is(err, errFallBack), errors.Is(err, errNoValues):
		return nil, err
	case ctx.Err() != nil:
		return nil, &notAcquired{name: name, cause: ctx.Err()}
	}
	var tlsErr *TLSError
	return nil, &attemptFailed{err: err, stop: errors.As(err, &tlsErr)}
}

// acquireV1 claims the lock on its own protocol v1 connection.
func (c *Client) acquireV1(ctx context.Context, ep endpoint, name string, leaseMS uint32, try bool) (*Lock, error) {
	conn, raw, err := c.dialOne(ctx, ep)
	if err != nil {
		if ctx.Err() != nil {
			return nil, &notAcquired{name: name, cause: ctx.Err()}
		}
		var tlsErr *TLSError
		return nil, &attemptFailed{err: err, stop: errors.As(err, &tlsErr)}
	}
	s := startV1(conn, raw, name, time.Duration(leaseMS)*time.Millisecond, leaseMS, c.ioTimeout)
	s.noValues = unsupportedAt(ep.addr)
	if c.forceV1 {
		s.noValues = errV1HasNoValues
	}
	silent := time.NewTimer(c.connectTimeout)
	defer silent.Stop()
	select {
	case <-s.answered():
	case <-silent.C:
		s.abort()
		return nil, &attemptFailed{err: c.answerError(ep, core.Loss{Reason: core.ReasonConnection, Err: errNoAnswer})}
	case <-ctx.Done():
		_ = s.release()
		return nil, &notAcquired{name: name, cause: ctx.Err()}
	}
	status, token, lost := s.state()
	if status == core.StatusLost && !s.hasReplied() {
		_ = s.release()
		if loss := s.loss(); loss.Code == 0 {
			return nil, &attemptFailed{err: c.answerError(ep, loss)}
		}
	}
	if status == core.StatusWaiting {
		if try {
			// Leaves the queue as a release does: confirmed by the
			// server's EOF, so no trace of it remains when TryLock returns.
			_ = s.release()
			return nil, ErrNotAcquired
		}
		select {
		case <-s.granted():
		case <-s.done():
		case <-ctx.Done():
			_ = s.release()
			return nil, &notAcquired{name: name, cause: ctx.Err()}
		}
		status, token, lost = s.state()
	}
	if status != core.StatusHeld {
		_ = s.release()
		if lost == nil {
			lost = fmt.Errorf("monolock: lock %q: the claim ended before the grant", name)
		}
		return nil, refusedHandshake(ep, lost)
	}
	return &Lock{s: s, name: name, token: token, lease: s.lease, addr: ep.addr, values: ctx}, nil
}

// refusedHandshake turns a TLS alert read before the first reply into the
// failed connect it is: under TLS 1.3 the client finishes its side of the
// handshake before the server checks the client certificate, and a server
// that refuses it (or its absence) answers the first read with an alert.
func refusedHandshake(ep endpoint, err error) error {
	var lost *LostError
	var op *net.OpError
	if ep.tls != nil && errors.As(err, &lost) && lost.Reason == ReasonConnection &&
		errors.As(lost.Err, &op) && op.Op == "remote error" {
		return &ConnectError{Attempts: []ConnectAttempt{{
			Addr: ep.addr,
			Err:  &TLSError{Addr: ep.addr, Err: fmt.Errorf("the server refused the handshake: %w", op)},
		}}}
	}
	return err
}
