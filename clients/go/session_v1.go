package monolock

import (
	"context"
	"errors"
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
}

// startV1 starts the session's goroutine, which sends the ACQUIRE at once.
func startV1(conn, raw net.Conn, name string, lease time.Duration, leaseMS uint32) *v1Session {
	s := &v1Session{
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

func (s *v1Session) release() error {
	s.mu.Lock()
	if s.releaseDone {
		result := s.releaseErr
		s.mu.Unlock()
		<-s.exitedCh
		return result
	}
	s.releaseDone = true
	s.checkLocked()
	var result error
	if s.ended {
		result = s.endErr
	} else {
		s.endLocked()
	}
	s.releaseErr = result
	s.mu.Unlock()
	// The close is the release: TLS sends its close_notify, then the FIN.
	_ = s.conn.Close()
	<-s.exitedCh
	return result
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
