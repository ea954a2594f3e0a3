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
	// noValuesUntil: addresses whose server answered HELLO with ERROR
	// 0x13 (it lacks values and observers), remembered as v1Until is.
	noValuesUntil map[string]time.Time
}

func newPool() *pool {
	return &pool{sessions: map[poolKey][]*v2Session{}, v1Until: map[string]time.Time{},
		noValuesUntil: map[string]time.Time{}}
}

func (p *pool) isNoValues(addr string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.isNoValuesLocked(addr)
}

func (p *pool) isNoValuesLocked(addr string) bool {
	until, ok := p.noValuesUntil[addr]
	if ok && time.Now().After(until) {
		delete(p.noValuesUntil, addr)
		return false
	}
	return ok
}

func (p *pool) rememberNoValues(addr string) {
	p.mu.Lock()
	p.noValuesUntil[addr] = time.Now().Add(v1Memory)
	p.mu.Unlock()
}

func (p *pool) forgetNoValues(addr string) {
	p.mu.Lock()
	delete(p.noValuesUntil, addr)
	p.mu.Unlock()
}

// use is what a reservation on a session is for.
type use uint8

const (
	// useClaim: a claim without a value.
	useClaim use = iota
	// useValueClaim: a claim with a value (ACQUIRE_VALUE).
	useValueClaim
	// useWatch: an observation.
	useWatch
	// useLookup: one LOOKUP.
	useLookup
)

// needsValues: the session must have been granted values and observers.
func (u use) needsValues() bool { return u != useClaim }

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

// reserve returns a live session with room for one more use (reserving
// it), or a new session, not yet open, that the caller must open. A new
// session asks for values and observers (HELLO) unless the address is
// known to lack them.
func (p *pool) reserve(key poolKey, u use) (s *v2Session, fresh bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.sessions[key] {
		if s.tryReserve(u) {
			return s, false
		}
	}
	s = &v2Session{key: key, pool: p, ready: make(chan struct{}), claims: map[uint32]*v2Claim{},
		watches: map[uint32]*v2Watch{}, hello: !p.isNoValuesLocked(key.addr)}
	s.countLocked(u, 1)
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
	// sent or not; watchLoad the watches, lookups the LOOKUPs not yet
	// answered.
	load      int
	watchLoad int
	lookups   int
	// full: the server refused a claim with 0x09; no new claim until one
	// ends.
	full    bool
	dead    bool
	openErr error // why it never opened
	// abandoned: its opener's ctx ended before it opened.
	abandoned bool
	// hello: the session asks for values and observers when it opens.
	hello bool
	// isReady: OPENED (and FEATURES, after a HELLO) read; ready is closed
	// then, or when the session ended before.
	isReady bool
	ready   chan struct{}

	// The extension (session_ext.go): watches by id, and the PROCLAIMs
	// and LOOKUPs in flight, in the order written (their replies come in
	// that order).
	watches   map[uint32]*v2Watch
	nextWatch uint32
	proclaims []*proclaimWait
	lookupQ   []*lookupWait
}

// tryReserve takes room for one use on a live session.
func (s *v2Session) tryReserve(u use) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return false
	}
	ready := s.core != nil && s.isReady
	if u.needsValues() && (!s.hello || (ready && !s.core.HasValues())) {
		return false
	}
	switch u {
	case useClaim, useValueClaim:
		if s.full || (ready && s.load >= int(s.core.MaxClaims())) {
			return false
		}
	}
	s.countLocked(u, 1)
	return true
}

// countLocked adds delta to the counter of u.
func (s *v2Session) countLocked(u use, delta int) {
	switch u {
	case useClaim, useValueClaim:
		s.load += delta
	case useWatch:
		s.watchLoad += delta
	case useLookup:
		s.lookups += delta
	}
}

// inUseLocked: a claim, a watch or a lookup keeps the session open.
func (s *v2Session) inUseLocked() bool {
	return s.load > 0 || s.watchLoad > 0 || s.lookups > 0
}

func (s *v2Session) unreserve() { s.unreserveAs(useClaim) }

func (s *v2Session) unreserveAs(u use) {
	s.mu.Lock()
	s.countLocked(u, -1)
	s.mu.Unlock()
}

// markReadyLocked: the session may carry claims (and, if granted, values
// and watches).
func (s *v2Session) markReadyLocked() {
	if !s.isReady {
		s.isReady = true
		close(s.ready)
	}
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
	first := wire.AppendOpen(make([]byte, 0, 11), leaseMS)
	if s.hello {
		// In one write with the OPEN: FEATURES comes with the OPENED.
		s.core.HelloSent(wire.FeatureValues, now())
		first = wire.AppendHello(first, wire.FeatureValues)
	}
	s.mu.Unlock()
	go s.run(first, openBy)
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
		if idleEnd, ok := s.core.IdleEnd(); ok && !s.inUseLocked() && t >= idleEnd {
			s.mu.Unlock()
			s.close(core.Loss{Reason: core.ReasonConnection, Err: errors.New("closed after idling")})
			return
		}
		wake, _ := s.core.NextWake()
		readBy := instant(wake)
		if !s.isReady {
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
		var release, unobserve []uint32
		if n > 0 {
			release, unobserve = s.dispatchLocked(s.core.Receive(buf[:n], t))
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
		for _, id := range unobserve {
			go s.sendUnobserve(id)
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
	if !s.isReady {
		s.openErr = s.notOpened(loss)
		close(s.ready)
	}
	for id, cl := range s.claims {
		cl.loseLocked(loss, true)
		delete(s.claims, id)
	}
	s.endExtLocked(loss)
	go s.pool.remove(s)
}

// notOpened is why the session never opened, as the connect error it is:
// whatever answered is not a monolock server speaking this protocol.
func (s *v2Session) notOpened(loss core.Loss) error {
	if loss.Code == wire.CodeUnsupportedVersion {
		return errFallBack
	}
	if s.core.Unsupported() {
		return errNoValues
	}
	return s.client.answerError(s.ep, loss)
}

// dispatchLocked hands each event to its claim or watch; it returns the
// claim ids whose owner let go before the reply, to be released now, and
// the watch ids likewise stopped, to be unobserved now.
func (s *v2Session) dispatchLocked(events []core.ClaimEvent) (release, unobserve []uint32) {
	for _, ev := range events {
		switch ev.Kind {
		case core.EventOpened:
			if !s.hello {
				s.markReadyLocked()
			}
			continue
		case core.EventFeatures:
			s.markReadyLocked()
			continue
		case core.EventUnsupported:
			continue // the session ends: endLocked says why
		}
		if ev.Kind >= core.EventProclaimed {
			if s.dispatchExtLocked(ev) {
				unobserve = append(unobserve, ev.Watch)
			}
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
	return release, unobserve
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

// acquire sends an ACQUIRE (ACQUIRE_VALUE for a value) on the reserved
// room and returns the claim.
func (s *v2Session) acquire(name string, lease time.Duration, mode wire.Mode, value string) (*v2Claim, error) {
	cl := &v2Claim{
		s:          s,
		name:       name,
		lease:      lease,
		val:        value,
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
	var frame []byte
	if value == "" {
		frame = wire.AppendAcquireV2(make([]byte, 0, 7+len(name)), cl.id, mode, name)
	} else {
		frame = wire.AppendAcquireValue(make([]byte, 0, 9+len(name)+len(value)), cl.id, mode, name, value)
	}
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
	val         string // the value the server has (the last PROCLAIMED)
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
