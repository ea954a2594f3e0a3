package monolock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
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
