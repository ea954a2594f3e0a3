package monolock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"monolock.dev/go/monolock/internal/core"
	"monolock.dev/go/monolock/internal/wire"
)

// v1Memory is how long an address that answered OPEN with ERROR 0x10 is
// spoken to in protocol v1 before v2 is tried again (sooner if it fails to
// connect: it may have been upgraded).
const v1Memory = 5 * time.Minute

// poolKey names the sessions a claim may share: one server address and
// one lease (the TLS settings are the Client's own, and so is the pool).
type poolKey struct {
	addr    string
	leaseMS uint32
}

// pool is a Client's protocol v2 sessions, and the addresses found to
// speak only v1.
type pool struct {
	mu       sync.Mutex
	sessions map[poolKey][]*v2Session
	v1Until  map[string]time.Time
}

func newPool() *pool {
	return &pool{sessions: map[poolKey][]*v2Session{}, v1Until: map[string]time.Time{}}
}

func (p *pool) isV1(addr string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	until, ok := p.v1Until[addr]
	if ok && time.Now().After(until) {
		delete(p.v1Until, addr)
		return false
	}
	return ok
}

func (p *pool) rememberV1(addr string) {
	p.mu.Lock()
	p.v1Until[addr] = time.Now().Add(v1Memory)
	p.mu.Unlock()
}

func (p *pool) forgetV1(addr string) {
	p.mu.Lock()
	delete(p.v1Until, addr)
	p.mu.Unlock()
}

// reserve returns a live session with room for one more claim (reserving
// it), or a new session, not yet open, that the caller must open.
func (p *pool) reserve(key poolKey) (s *v2Session, fresh bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.sessions[key] {
		if s.tryReserve() {
			return s, false
		}
	}
	s = &v2Session{key: key, pool: p, load: 1, ready: make(chan struct{}), claims: map[uint32]*v2Claim{}}
	p.sessions[key] = append(p.sessions[key], s)
	return s, true
}

func (p *pool) remove(s *v2Session) {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.sessions[s.key]
	for i, other := range list {
		if other == s {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(p.sessions, s.key)
	} else {
		p.sessions[s.key] = list
	}
}

// connections is the number of v2 sessions open or opening.
func (p *pool) connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, list := range p.sessions {
		n += len(list)
	}
	return n
}

// errFallBack is an OPEN answered with ERROR 0x10: the address speaks v1.
var errFallBack = errors.New("the server speaks protocol v1 only")

// v2Session is one protocol v2 connection carrying many claims, and the
// one goroutine that reads it.
//
// The goroutine is the connection's permanent reader (GRANTED and REVOKED
// are pushed). It feeds what it reads to the core's session machine and
// uses the socket's read deadline as its only timer: each read waits at
// most until the session's next wake-up (the next PING, the idle end or
// the deadline). Claims write their ACQUIRE and RELEASE from their own
// goroutines.
//
// wmu orders writes: a frame is recorded in the core and written under
// it, so the core's FIFO of frames in flight is the order on the wire. mu
// guards the rest; nothing blocks while holding it. Lock order: the pool's
// mu, then mu; wmu before mu.
type v2Session struct {
	key    poolKey
	pool   *pool
	ep     endpoint
	client *Client
	conn   net.Conn
	raw    net.Conn

	wmu sync.Mutex

	mu     sync.Mutex
	core   *core.Session
	claims map[uint32]*v2Claim
	nextID uint32
	// load counts the claims reserved on this session and not yet freed,
	// sent or not.
	load int
	// full: the server refused a claim with 0x09; no new claim until one
	// ends.
	full    bool
	dead    bool
	openErr error // why it never opened
	// abandoned: its opener's ctx ended before it opened.
	abandoned bool
	ready     chan struct{}
}

// tryReserve takes room for one claim on a live session.
func (s *v2Session) tryReserve() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead || s.full {
		return false
	}
	if s.core != nil && s.core.Opened() && s.load >= int(s.core.MaxClaims()) {
		return false
	}
	s.load++
	return true
}

func (s *v2Session) unreserve() {
	s.mu.Lock()
	s.load--
	s.mu.Unlock()
}

// open connects the fresh session: dial, TLS, OPEN and its OPENED, all
// within the connect timeout. On failure the session is dead and out of
// the pool, and every claim waiting for it gets the same error.
func (s *v2Session) open(ctx context.Context, c *Client, ep endpoint, leaseMS uint32) error {
	s.client, s.ep = c, ep
	conn, raw, err := c.dialOne(ctx, ep)
	if err != nil {
		if ctx.Err() != nil {
			s.abandon()
		}
		s.failOpen(err)
		return err
	}
	s.conn, s.raw = conn, raw
	openBy := time.Now().Add(c.connectTimeout)
	s.mu.Lock()
	s.core = core.NewSession(time.Duration(leaseMS)*time.Millisecond, now())
	s.mu.Unlock()
	go s.run(wire.AppendOpen(nil, leaseMS), openBy)
	select {
	case <-s.ready:
	case <-ctx.Done():
		s.abandon()
		s.close(core.Loss{Reason: core.ReasonConnection, Err: ctx.Err()})
		<-s.ready
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.openErr
}

// abandon records that the caller who opened the session gave up (its
// ctx ended): the claims waiting for it try another session.
func (s *v2Session) abandon() {
	s.mu.Lock()
	s.abandoned = true
	s.mu.Unlock()
}

func (s *v2Session) failOpen(err error) {
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		return
	}
	s.dead, s.openErr = true, err
	close(s.ready)
	s.mu.Unlock()
	s.pool.remove(s)
}

// run is the session's goroutine.
func (s *v2Session) run(open []byte, openBy time.Time) {
	if err := s.write(open, func(time.Duration) {}); err != nil {
		return
	}
	buf := make([]byte, readChunk)
	for {
		s.mu.Lock()
		if s.dead {
			s.mu.Unlock()
			return
		}
		t := now()
		due := s.core.PingDue(t) // checks the deadline first
		if s.core.Ended() {
			s.endLocked()
			s.mu.Unlock()
			return
		}
		if idleEnd, ok := s.core.IdleEnd(); ok && s.load == 0 && t >= idleEnd {
			s.mu.Unlock()
			s.close(core.Loss{Reason: core.ReasonConnection, Err: errors.New("closed after idling")})
			return
		}
		wake, _ := s.core.NextWake()
		readBy := instant(wake)
		if !s.core.Opened() {
			if time.Now().After(openBy) {
				s.mu.Unlock()
				s.close(core.Loss{Reason: core.ReasonConnection, Err: errNoAnswer})
				return
			}
			readBy = openBy
		}
		s.mu.Unlock()

		if due {
			s.ping()
		}
		if err := s.conn.SetReadDeadline(readBy); err != nil {
			s.close(core.Loss{Reason: core.ReasonConnection, Err: err})
			return
		}
		n, err := s.conn.Read(buf)
		t = now()
		s.mu.Lock()
		if s.dead {
			s.mu.Unlock()
			return
		}
		var release []uint32
		if n > 0 {
			release = s.dispatchLocked(s.core.Receive(buf[:n], t))
		}
		if err != nil && !isTimeout(err) && !s.core.Ended() {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			s.core.Closed(err)
		}
		if s.core.Ended() {
			s.endLocked()
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		for _, id := range release {
			go s.sendRelease(id)
		}
	}
}

var errNoAnswer = errors.New("no answer")

// ping writes a PING unless another frame is being written (its reply
// confirms the session as well).
func (s *v2Session) ping() {
	if !s.wmu.TryLock() {
		return
	}
	defer s.wmu.Unlock()
	s.mu.Lock()
	if s.dead || !s.core.PingDue(now()) {
		s.mu.Unlock()
		return
	}
	s.core.PingSent(now())
	deadline := s.core.Deadline()
	s.mu.Unlock()
	s.writeLocked(wire.Ping, deadline)
}

// write records a frame in the core (record runs under mu with the send
// instant) and writes it; a failed write ends the session.
func (s *v2Session) write(frame []byte, record func(at time.Duration)) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	if s.dead {
		err := s.endErrLocked()
		s.mu.Unlock()
		return err
	}
	record(now())
	deadline := s.core.Deadline()
	s.mu.Unlock()
	return s.writeLocked(frame, deadline)
}

func (s *v2Session) writeLocked(frame []byte, deadline time.Duration) error {
	err := s.conn.SetWriteDeadline(instant(deadline))
	if err == nil {
		_, err = s.conn.Write(frame)
	}
	if err != nil {
		s.mu.Lock()
		s.core.Check(now())
		s.core.Closed(err)
		s.endLocked()
		err = s.endErrLocked()
		s.mu.Unlock()
	}
	return err
}

func (s *v2Session) endErrLocked() error {
	if s.openErr != nil {
		return s.openErr
	}
	return errors.New("the session ended")
}

// close ends the session for loss (unless it already ended) and closes
// its connection.
func (s *v2Session) close(loss core.Loss) {
	s.mu.Lock()
	s.core.Lose(loss)
	s.endLocked()
	s.mu.Unlock()
}

// endLocked ends the session once: every claim still in use is lost with
// the session's loss, the socket is closed at once, and the session
// leaves the pool.
func (s *v2Session) endLocked() {
	if s.dead {
		return
	}
	s.dead = true
	loss := s.core.Loss()
	_ = s.raw.Close()
	if !s.core.Opened() {
		s.openErr = s.notOpened(loss)
		close(s.ready)
	}
	for id, cl := range s.claims {
		cl.loseLocked(loss, true)
		delete(s.claims, id)
	}
	go s.pool.remove(s)
}

// notOpened is why the session never opened, as the connect error it is:
// whatever answered is not a monolock server speaking this protocol.
func (s *v2Session) notOpened(loss core.Loss) error {
	if loss.Code == wire.CodeUnsupportedVersion {
		return errFallBack
	}
	return s.client.answerError(s.ep, loss)
}

// dispatchLocked hands each event to its claim; it returns the ids whose
// owner let go before the reply, to be released now.
func (s *v2Session) dispatchLocked(events []core.ClaimEvent) (release []uint32) {
	for _, ev := range events {
		if ev.Kind == core.EventOpened {
			close(s.ready)
			continue
		}
		cl := s.claims[ev.Claim]
		if cl == nil {
			continue
		}
		switch ev.Kind {
		case core.EventHeld:
			cl.token = ev.Token
			cl.status, cl.seen = core.StatusHeld, true
		case core.EventWaiting:
			cl.status, cl.seen = core.StatusWaiting, true
		case core.EventBusy:
			cl.busy = true
			s.freeLocked(cl)
			cl.endLocked(nil)
			cl.confirmedLocked()
		case core.EventRefused:
			s.freeLocked(cl)
			if ev.Code == wire.CodeTooManyClaims {
				s.full = true
				cl.refusedFull = true
				cl.endLocked(nil)
				cl.confirmedLocked()
			} else {
				cl.loseLocked(core.Loss{Reason: core.ReasonServerError, Code: ev.Code, Detail: ev.Reason}, false)
			}
		case core.EventReleased:
			s.freeLocked(cl)
			cl.confirmedLocked()
		case core.EventRevoked:
			s.freeLocked(cl)
			cl.loseLocked(core.Loss{Reason: core.ReasonForced, Code: ev.Code, Detail: ev.Reason}, false)
		}
		if ev.Release {
			release = append(release, ev.Claim)
		}
		cl.publishLocked()
	}
	return release
}

// freeLocked forgets a claim whose id the server freed.
func (s *v2Session) freeLocked(cl *v2Claim) {
	delete(s.claims, cl.id)
	s.load--
	s.full = false
}

// sendRelease writes the RELEASE of a claim whose owner let go.
func (s *v2Session) sendRelease(id uint32) {
	_ = s.write(wire.AppendRelease(make([]byte, 0, 5), id), func(at time.Duration) {
		s.core.ReleaseSent(id, at)
	})
}

// acquire sends an ACQUIRE on the reserved room and returns the claim.
func (s *v2Session) acquire(name string, lease time.Duration, mode wire.Mode) (*v2Claim, error) {
	cl := &v2Claim{
		s:          s,
		name:       name,
		lease:      lease,
		answeredCh: make(chan struct{}),
		grantedCh:  make(chan struct{}),
		doneCh:     make(chan struct{}),
		releasedCh: make(chan struct{}),

		releaseFinished: make(chan struct{}),
	}
	s.wmu.Lock()
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		s.wmu.Unlock()
		return nil, s.endErrLocked()
	}
	for {
		s.nextID++
		if !s.core.Knows(s.nextID) && s.claims[s.nextID] == nil {
			break
		}
	}
	cl.id = s.nextID
	s.claims[cl.id] = cl
	s.core.AcquireSent(cl.id, mode, now())
	frame := wire.AppendAcquireV2(make([]byte, 0, 7+len(name)), cl.id, mode, name)
	deadline := s.core.Deadline()
	s.mu.Unlock()
	// A failed write ends the session, and the claim with it: its owner
	// reads that from the claim.
	_ = s.writeLocked(frame, deadline)
	s.wmu.Unlock()
	return cl, nil
}

// v2Claim is one claim of a v2 session as a Lock sees it.
type v2Claim struct {
	s     *v2Session
	id    uint32
	name  string
	lease time.Duration

	// Guarded by s.mu.
	status      core.Status
	token       uint64
	seen        bool // the server answered WAITING or ACQUIRED
	busy        bool // a try that found the lock held
	refusedFull bool // refused with 0x09: try another session
	ended       bool
	endErr      error
	released    bool  // nothing more will be heard of the claim
	unconfirmed error // the session ended before the RELEASED
	isAnswered  bool
	isGranted   bool
	releaseDone bool
	releaseErr  error // written before releaseFinished closes
	cancels     []context.CancelFunc

	releaseFinished chan struct{}
	answeredCh      chan struct{}
	grantedCh       chan struct{}
	doneCh          chan struct{}
	releasedCh      chan struct{}
}

func (c *v2Claim) answered() <-chan struct{} { return c.answeredCh }
func (c *v2Claim) granted() <-chan struct{}  { return c.grantedCh }
func (c *v2Claim) done() <-chan struct{}     { return c.doneCh }

func (c *v2Claim) publishLocked() {
	switch c.status {
	case core.StatusWaiting:
		c.answerLocked()
	case core.StatusHeld:
		c.answerLocked()
		if !c.isGranted {
			c.isGranted = true
			close(c.grantedCh)
		}
	}
}

func (c *v2Claim) answerLocked() {
	if !c.isAnswered {
		c.isAnswered = true
		close(c.answeredCh)
	}
}

// endLocked ends the claim for its owner once: err is its *LostError, or
// nil for a release (or a try that found the lock busy).
func (c *v2Claim) endLocked(err error) {
	if c.ended {
		return
	}
	c.ended = true
	if err == nil {
		err = ErrReleased
	} else {
		c.status = core.StatusLost
	}
	c.endErr = err
	c.answerLocked()
	close(c.doneCh)
	for _, cancel := range c.cancels {
		cancel()
	}
	c.cancels = nil
}

// loseLocked ends the claim for loss. After its owner let go, only the
// session's end matters: it means the RELEASE was never confirmed (a
// REVOKED meanwhile took the lock from the claim all the same).
func (c *v2Claim) loseLocked(loss core.Loss, sessionEnded bool) {
	lost := newLostError(c.name, c.lease, loss)
	if c.ended && c.status != core.StatusLost {
		if sessionEnded && !c.released {
			c.unconfirmed = lost
		}
	} else {
		c.endLocked(lost)
	}
	c.confirmedLocked()
}

// confirmedLocked: nothing more will be heard of the claim (RELEASED,
// REVOKED, refused, the session's end).
func (c *v2Claim) confirmedLocked() {
	if !c.released {
		c.released = true
		close(c.releasedCh)
	}
}

// checkLocked is the pessimist's check: past the session's deadline every
// claim is lost now, whatever the goroutine has not seen yet.
func (c *v2Claim) checkLocked() {
	s := c.s
	if s.dead || c.ended {
		return
	}
	s.core.Check(now())
	if s.core.Ended() {
		s.endLocked()
	}
}

func (c *v2Claim) state() (core.Status, uint64, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.checkLocked()
	if c.ended {
		return core.StatusLost, 0, c.endErr
	}
	return c.status, c.token, nil
}

func (c *v2Claim) err() error {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.checkLocked()
	return c.endErr
}

func (c *v2Claim) deadline() time.Duration {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.s.core.Deadline()
}

func (c *v2Claim) context(parent context.Context) context.Context {
	ctx, cancel := context.WithCancel(parent)
	c.s.mu.Lock()
	c.checkLocked()
	if c.ended {
		c.s.mu.Unlock()
		cancel()
		return ctx
	}
	c.cancels = append(c.cancels, cancel)
	c.s.mu.Unlock()
	return ctx
}

// release lets the claim go and waits for the server's RELEASED, at most
// the I/O timeout; past it the session is closed (the server then
// releases every claim of it) and the release reported as unconfirmed.
func (c *v2Claim) release() error {
	s := c.s
	s.mu.Lock()
	if c.releaseDone {
		s.mu.Unlock()
		<-c.releaseFinished
		return c.releaseErr
	}
	c.releaseDone = true
	defer close(c.releaseFinished)
	c.checkLocked()
	if c.ended {
		if c.status == core.StatusLost {
			c.releaseErr = c.endErr
		}
		s.mu.Unlock()
		return c.releaseErr
	}
	c.endLocked(nil)
	step := s.core.Release(c.id)
	s.mu.Unlock()
	if step == core.ReleaseWrite {
		s.sendRelease(c.id)
	}
	timer := time.NewTimer(s.client.ioTimeout)
	defer timer.Stop()
	select {
	case <-c.releasedCh:
	case <-timer.C:
		err := fmt.Errorf("RELEASE not confirmed within %v; the session was closed", s.client.ioTimeout)
		s.close(core.Loss{Reason: core.ReasonConnection, Err: err})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c.releaseErr = c.unconfirmed
	return c.releaseErr
}
