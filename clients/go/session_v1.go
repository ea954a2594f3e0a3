package monolock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"monolock.dev/go/monolock/internal/core"
	"monolock.dev/go/monolock/internal/wire"
)

// readChunk is the read buffer of a session. Frames are at most 258 bytes.
const readChunk = 512

// v1Session is one protocol v1 claim: one connection, and the one
// goroutine that owns its reads and writes.
//
// The goroutine is the connection's permanent reader (promotion is pushed).
// It sends the ACQUIRE, feeds what it reads to the core's claim machine,
// and uses the socket's read deadline as its only timer: each read waits
// at most until the claim's next wake-up (the next heartbeat or the
// deadline). So a held lock costs one goroutine parked in the network
// poller, and no timer goroutine. It ends when the claim ends.
//
// The claim machine is not safe for concurrent use: mu serialises the
// goroutine and the Lock's methods (Held reads the clock against the
// deadline itself). Nothing blocks while holding mu.
type v1Session struct {
	name  string
	lease time.Duration
	conn  net.Conn // the stream (TLS or plain)
	raw   net.Conn // the socket beneath it, closed at once on a loss

	mu          sync.Mutex
	claim       *core.Claim
	ended       bool // done is closed
	releaseDone bool
	releaseErr  error
	endErr      error // *LostError or ErrReleased, once ended
	cancels     []context.CancelFunc

	answeredCh chan struct{}
	grantedCh  chan struct{}
	doneCh     chan struct{}
	exitedCh   chan struct{}
	isAnswered bool
	isGranted  bool
	// draining: the owner let go; the goroutine reads until the server's
	// EOF, which confirms the release (drained: it came).
	draining  bool
	drained   bool
	ioTimeout time.Duration
	// noValues is the ErrUnsupported of SetValue: protocol v1 has none.
	noValues error
}

func (s *v1Session) value() string { return "" }

func (s *v1Session) setValue(context.Context, string) error { return s.noValues }

// startV1 starts the session's goroutine, which sends the ACQUIRE at once.
func startV1(conn, raw net.Conn, name string, lease time.Duration, leaseMS uint32, ioTimeout time.Duration) *v1Session {
	s := &v1Session{
		ioTimeout:  ioTimeout,
		name:       name,
		lease:      lease,
		conn:       conn,
		raw:        raw,
		claim:      core.NewClaim(lease, now()),
		answeredCh: make(chan struct{}),
		grantedCh:  make(chan struct{}),
		doneCh:     make(chan struct{}),
		exitedCh:   make(chan struct{}),
	}
	go s.run(wire.AppendAcquire(make([]byte, 0, 8+len(name)), name, leaseMS), s.claim.Deadline())
	return s
}

func (s *v1Session) answered() <-chan struct{} { return s.answeredCh }
func (s *v1Session) granted() <-chan struct{}  { return s.grantedCh }
func (s *v1Session) done() <-chan struct{}     { return s.doneCh }

func (s *v1Session) run(acquire []byte, deadline time.Duration) {
	defer close(s.exitedCh)
	if err := s.write(acquire, deadline); err != nil {
		s.failed(err)
		return
	}
	buf := make([]byte, readChunk)
	for {
		s.mu.Lock()
		if s.draining {
			s.mu.Unlock()
			s.drain(buf)
			return
		}
		if s.ended {
			s.mu.Unlock()
			return
		}
		t := now()
		due := s.claim.HeartbeatDue(t) // checks the deadline first
		if s.claim.Status() == core.StatusLost {
			s.endLocked()
			s.mu.Unlock()
			return
		}
		if due {
			s.claim.HeartbeatSent(t)
		}
		wake, _ := s.claim.NextWake()
		deadline := s.claim.Deadline()
		s.mu.Unlock()

		if due {
			if err := s.write(wire.Heartbeat, deadline); err != nil {
				if s.isDraining() {
					// The release shut the write side down meanwhile.
					s.drain(buf)
					return
				}
				s.failed(err)
				return
			}
		}
		if err := s.conn.SetReadDeadline(instant(wake)); err != nil {
			s.failed(err)
			return
		}
		n, err := s.conn.Read(buf)
		t = now()
		s.mu.Lock()
		if s.draining {
			s.mu.Unlock()
			if err == nil {
				s.drain(buf)
			} else {
				s.drainEnded(err)
			}
			return
		}
		if s.ended {
			s.mu.Unlock()
			return
		}
		if n > 0 {
			s.claim.Receive(buf[:n], t)
		}
		if err != nil && !isTimeout(err) && s.claim.Status() != core.StatusLost {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			s.claim.Closed(err)
		}
		s.publishLocked()
		s.mu.Unlock()
	}
}

// write sends one frame, giving up at the claim's deadline.
func (s *v1Session) write(frame []byte, deadline time.Duration) error {
	if err := s.conn.SetWriteDeadline(instant(deadline)); err != nil {
		return err
	}
	_, err := s.conn.Write(frame)
	return err
}

// failed ends the claim for a failed write: past the deadline that is the
// expiry, otherwise the connection's failure.
func (s *v1Session) failed(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	s.claim.Check(now())
	s.claim.Closed(err)
	s.publishLocked()
}

// publishLocked opens the channels the claim's status has reached.
func (s *v1Session) publishLocked() {
	switch s.claim.Status() {
	case core.StatusWaiting:
		s.answerLocked()
	case core.StatusHeld:
		s.answerLocked()
		if !s.isGranted {
			s.isGranted = true
			close(s.grantedCh)
		}
	case core.StatusLost:
		s.endLocked()
	}
}

func (s *v1Session) answerLocked() {
	if !s.isAnswered {
		s.isAnswered = true
		close(s.answeredCh)
	}
}

// endLocked ends the session once: lost if the claim is, else released.
// A lost claim's socket is closed right here, so that the server sees the
// close at once.
func (s *v1Session) endLocked() {
	if s.ended {
		return
	}
	s.ended = true
	if s.claim.Status() == core.StatusLost {
		s.endErr = newLostError(s.name, s.lease, s.claim.Loss())
		_ = s.raw.Close()
	} else {
		s.endErr = ErrReleased
	}
	s.answerLocked()
	close(s.doneCh)
	for _, cancel := range s.cancels {
		cancel()
	}
	s.cancels = nil
}

// checkLocked is the pessimist's check: past the deadline the claim is
// lost now, whatever the goroutine has not seen yet.
func (s *v1Session) checkLocked() {
	if s.ended {
		return
	}
	s.claim.Check(now())
	if s.claim.Status() == core.StatusLost {
		s.endLocked()
	}
}

func (s *v1Session) state() (core.Status, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkLocked()
	if s.ended {
		return core.StatusLost, 0, s.endErr
	}
	return s.claim.Status(), s.claim.Token(), nil
}

func (s *v1Session) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkLocked()
	return s.endErr
}

func (s *v1Session) deadline() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claim.Deadline()
}

func (s *v1Session) context(parent context.Context) context.Context {
	ctx, cancel := context.WithCancel(parent)
	s.mu.Lock()
	s.checkLocked()
	if s.ended {
		s.mu.Unlock()
		cancel()
		return ctx
	}
	s.cancels = append(s.cancels, cancel)
	s.mu.Unlock()
	return ctx
}

// release ends the claim. Protocol v1 has no release frame: the client
// shuts down its write side and reads until the server's EOF, which the
// server sends only once its lock table has released the claim. Bounded
// by the I/O timeout; past it the connection is closed and the release
// reported as unconfirmed. It returns nil, the *LostError if the claim
// had been lost before, or that of an unconfirmed release. Every later
// call returns the same.
func (s *v1Session) release() error {
	s.mu.Lock()
	if s.releaseDone {
		s.mu.Unlock()
		<-s.exitedCh
		return s.releaseErr
	}
	s.releaseDone = true
	s.checkLocked()
	if s.ended {
		s.releaseErr = s.endErr
		s.mu.Unlock()
		_ = s.conn.Close()
		<-s.exitedCh
		return s.releaseErr
	}
	s.endLocked()
	s.draining = true
	s.mu.Unlock()
	closeWrite(s.conn, s.raw)
	timer := time.NewTimer(s.ioTimeout)
	defer timer.Stop()
	select {
	case <-s.exitedCh:
	case <-timer.C:
		_ = s.raw.Close()
		<-s.exitedCh
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.drained {
		s.releaseErr = newLostError(s.name, s.lease, core.Loss{Reason: core.ReasonConnection,
			Err: fmt.Errorf("the server did not confirm the release (its EOF) within %v; the connection was closed", s.ioTimeout)})
	}
	return s.releaseErr
}

// abort gives the claim up without waiting for the server, which never
// answered: there is nothing to confirm.
func (s *v1Session) abort() {
	s.mu.Lock()
	if !s.releaseDone {
		s.releaseDone = true
		s.endLocked()
	}
	s.mu.Unlock()
	_ = s.raw.Close()
	<-s.exitedCh
}

// drain reads until the server's EOF after a release (the bytes are
// replies to heartbeats, or a grant that crossed the release).
func (s *v1Session) drain(buf []byte) {
	_ = s.conn.SetReadDeadline(time.Time{})
	for {
		if _, err := s.conn.Read(buf); err != nil {
			s.drainEnded(err)
			return
		}
	}
}

func (s *v1Session) drainEnded(err error) {
	s.mu.Lock()
	s.drained = errors.Is(err, io.EOF)
	s.mu.Unlock()
	_ = s.conn.Close()
}

// closeWrite shuts down the write side: TLS close_notify first, then the
// TCP FIN.
func closeWrite(conn, raw net.Conn) {
	if tc, ok := conn.(*tls.Conn); ok {
		_ = tc.CloseWrite()
	}
	if tcp, ok := raw.(interface{ CloseWrite() error }); ok {
		if tcp.CloseWrite() == nil {
			return
		}
	}
	// A connection that cannot half-close (a test double): closing it is
	// all that is left, and it cannot confirm.
	_ = raw.Close()
}

func (s *v1Session) isDraining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

func (s *v1Session) hasReplied() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claim.Answered()
}

// loss is why the claim ended (valid once lost).
func (s *v1Session) loss() core.Loss {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claim.Loss()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
