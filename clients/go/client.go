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

// DefaultConnectTimeout bounds dialing one server address, the TLS
// handshake included.
const DefaultConnectTimeout = 5 * time.Second

// Client knows where the monolock servers are and how to reach them. It
// holds no connection itself: each lock opens its own, because on monolock
// the connection is the claim. A Client is safe for concurrent use and
// cheap to share.
type Client struct {
	endpoints      []endpoint
	connectTimeout time.Duration
	dial           func(ctx context.Context, network, addr string) (net.Conn, error)
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

// WithConnectTimeout bounds dialing one address, TLS handshake included
// (default DefaultConnectTimeout). When it runs out the next address is
// tried.
func WithConnectTimeout(d time.Duration) Option {
	return func(o *options) { o.connectTimeout = d }
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
	o := options{connectTimeout: DefaultConnectTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if o.connectTimeout <= 0 {
		return nil, invalid("connect timeout %v must be positive", o.connectTimeout)
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
	return &Client{endpoints: endpoints, connectTimeout: o.connectTimeout, dial: o.dial}, nil
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
// lease is the failure detector, not a work deadline: the lock heartbeats
// about four times per lease and may be held for hours. A shorter lease
// hands the lock on sooner after a crash or a partition, at the cost of
// more heartbeats. It is sent in whole milliseconds, from 1ms to about 49
// days.
//
// ctx bounds the whole wait, connecting included. When it ends first, the
// place in the queue is given up (the connection is closed) and the error
// matches both ErrNotAcquired and ctx.Err(). ctx does not bound the lock
// once granted; the lock's Context keeps ctx's values.
//
// Always Release the lock (defer lock.Release()): until then it
// heartbeats and stays held.
//
// Errors: ErrInvalidArgument (before connecting), *ConnectError naming
// every address tried (a *TLSError inside for a failed handshake), the
// ErrNotAcquired wrapper above, or *LostError when the server refused or
// ended the claim before the grant (Code 0x18: the ACL refuses this lock;
// ReasonProtocol when the address is a TLS or HTTP port).
func (c *Client) Lock(ctx context.Context, name string, lease time.Duration) (*Lock, error) {
	return c.acquire(ctx, name, lease, false)
}

// TryLock takes the lock if it is free and returns ErrNotAcquired (itself,
// so err == ErrNotAcquired holds) if someone holds it: the connection is
// closed at once and leaves no trace in the queue. ctx bounds connecting.
// Other errors as for Lock.
func (c *Client) TryLock(ctx context.Context, name string, lease time.Duration) (*Lock, error) {
	return c.acquire(ctx, name, lease, true)
}

// Do waits for the lock as Lock does, runs fn while holding it, and
// releases it. fn's ctx is cancelled when the lock is lost or when ctx
// ends, whichever comes first: hand it to every call the lock guards.
//
// Do returns fn's error; if fn succeeded but the lock was lost before it
// returned, the *LostError (the work may have run unprotected). A fn that
// failed with context.Canceled because the lock was lost gets the
// *LostError instead. Errors before fn runs are Lock's.
func (c *Client) Do(ctx context.Context, name string, lease time.Duration, fn func(ctx context.Context, lock *Lock) error) error {
	lock, err := c.Lock(ctx, name, lease)
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

// checkArgs checks a name and a lease as the server would, before any
// connection: the lease in whole milliseconds.
func checkArgs(name string, lease time.Duration) (uint32, error) {
	if why := wire.CheckName(name); why != "" {
		return 0, invalid("%s", why)
	}
	ms := lease / time.Millisecond
	if ms < 1 || ms > wire.MaxLeaseMS {
		return 0, invalid("lease %v is out of range: it must be between 1ms and %v", lease,
			time.Duration(wire.MaxLeaseMS)*time.Millisecond)
	}
	return uint32(ms), nil
}

func (c *Client) acquire(ctx context.Context, name string, lease time.Duration, try bool) (*Lock, error) {
	leaseMS, err := checkArgs(name, lease)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, &notAcquired{name: name, cause: ctx.Err()}
	}
	conn, raw, ep, err := c.connect(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, &notAcquired{name: name, cause: ctx.Err()}
		}
		return nil, err
	}
	s := startV1(conn, raw, name, time.Duration(leaseMS)*time.Millisecond, leaseMS)
	select {
	case <-s.answered():
	case <-ctx.Done():
		_ = s.release()
		return nil, &notAcquired{name: name, cause: ctx.Err()}
	}
	status, token, lost := s.state()
	if status == core.StatusWaiting {
		if try {
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
