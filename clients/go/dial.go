package monolock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"monolock.dev/go/monolock/internal/core"
	"monolock.dev/go/monolock/internal/wire"
)

// connect dials the addresses in order until one answers (TCP, and the
// TLS handshake when on). Only this step falls through to the next
// address: once the ACQUIRE is sent the claim lives on that connection.
// A TLS failure other than the network's stops at once, since the same
// handshake fails the same way on a standby.
func (c *Client) connect(ctx context.Context) (conn, raw net.Conn, ep endpoint, err error) {
	var attempts []ConnectAttempt
	for _, ep := range c.endpoints {
		conn, raw, err := c.dialOne(ctx, ep)
		if err == nil {
			return conn, raw, ep, nil
		}
		attempts = append(attempts, ConnectAttempt{Addr: ep.addr, Err: err})
		var tlsErr *TLSError
		if ctx.Err() != nil || errors.As(err, &tlsErr) {
			break
		}
	}
	return nil, nil, endpoint{}, &ConnectError{Attempts: attempts}
}

// dialOne opens one connection within the connect timeout.
func (c *Client) dialOne(ctx context.Context, ep endpoint) (net.Conn, net.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, c.connectTimeout)
	defer cancel()
	raw, err := c.dial(dctx, "tcp", ep.addr)
	if err != nil {
		return nil, nil, c.timedOut(ctx, dctx, err)
	}
	if tcp, ok := raw.(*net.TCPConn); ok {
		// Frames are a few bytes and must not wait (Go's default, made sure).
		_ = tcp.SetNoDelay(true)
	}
	if ep.tls == nil {
		return raw, raw, nil
	}
	conn := tls.Client(raw, ep.tls)
	if err := conn.HandshakeContext(dctx); err != nil {
		_ = raw.Close()
		if isNetworkFailure(err) || dctx.Err() != nil {
			return nil, nil, c.timedOut(ctx, dctx, err)
		}
		var header tls.RecordHeaderError
		if errors.As(err, &header) {
			err = fmt.Errorf("%s does not speak TLS (a plain monolock port?): %w", ep.addr, err)
		}
		return nil, nil, &TLSError{Addr: ep.addr, Err: err}
	}
	return conn, raw, nil
}

// timedOut names the connect timeout when it, and not the caller's ctx,
// ended the attempt.
func (c *Client) timedOut(ctx, dctx context.Context, err error) error {
	if ctx.Err() == nil && errors.Is(dctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("connecting timed out after %v: %w", c.connectTimeout, err)
	}
	return err
}

// isNetworkFailure: the handshake failed because the connection did, not
// because of what TLS decided.
func isNetworkFailure(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || isTimeout(err)
}

// answerError is the connect error for a connection that ended before the
// server's first answer: what is at the address is not a monolock server
// speaking this protocol, or it said nothing in time.
func (c *Client) answerError(ep endpoint, loss core.Loss) error {
	var op *net.OpError
	var peer *core.ProtocolError
	switch {
	case loss.Err == errNoAnswer:
		return &answerFailure{msg: fmt.Sprintf("%s did not answer within %s", ep.addr, spoken(c.connectTimeout)), temporary: true}
	case loss.Reason == core.ReasonExpired:
		return &answerFailure{msg: fmt.Sprintf("%s did not answer within 0.8 x the lease", ep.addr), temporary: true}
	case ep.tls != nil && errors.As(loss.Err, &op) && op.Op == "remote error":
		return &TLSError{Addr: ep.addr, Err: fmt.Errorf("the server refused the handshake: %w", op)}
	case loss.Code != 0:
		return &answerFailure{
			msg:       fmt.Sprintf("%s refused the session: %s", ep.addr, wire.DescribeCode(loss.Code, loss.Detail)),
			temporary: loss.Code < wire.ClientErrorCodes,
		}
	case errors.As(loss.Err, &peer) && peer.Peer == core.PeerTLS:
		return &answerFailure{msg: fmt.Sprintf("%s expects TLS: connect with monolock.WithTLS", ep.addr)}
	case errors.As(loss.Err, &peer) && peer.Peer == core.PeerHTTP:
		return &answerFailure{msg: fmt.Sprintf("%s is not a monolock server: an HTTP server answered (the admin or ops port?)", ep.addr)}
	case loss.Reason == core.ReasonProtocol:
		return &answerFailure{msg: fmt.Sprintf("%s is not a monolock server: %v", ep.addr, loss.Err)}
	case loss.Err != nil:
		return &answerFailure{msg: fmt.Sprintf("%s failed before answering: %v", ep.addr, loss.Err), temporary: true, err: loss.Err}
	}
	return &answerFailure{
		msg:       fmt.Sprintf("%s closed the connection without answering (a TLS port, or not a monolock server?)", ep.addr),
		temporary: true,
	}
}

// spoken writes a bound as the messages of every monolock client do:
// "5 s", "200 ms", else Go's own form.
func spoken(d time.Duration) string {
	switch {
	case d%time.Second == 0:
		return fmt.Sprintf("%d s", d/time.Second)
	case d%time.Millisecond == 0:
		return fmt.Sprintf("%d ms", d/time.Millisecond)
	}
	return d.String()
}

// answerFailure is what answered at an address instead of a monolock
// server, inside a ConnectError.
type answerFailure struct {
	msg       string
	temporary bool
	err       error
}

func (e *answerFailure) Error() string   { return e.msg }
func (e *answerFailure) Unwrap() error   { return e.err }
func (e *answerFailure) Temporary() bool { return e.temporary }
