package monolock

import (
	"context"
	"errors"
	"fmt"

	"monolock.dev/go/monolock/internal/core"
	"monolock.dev/go/monolock/internal/wire"
)

// The extension "values and observers" on a protocol v2 session: PROCLAIM
// for a claim's value, watches (OBSERVE, STATE pushes, UNOBSERVE) and
// LOOKUP. Watch ids live in a space of their own, apart from claim ids;
// every watch and lookup ends with its session.

// errNoValues is a session whose HELLO was answered with ERROR 0x13: the
// server lacks the extension, and plain claims go to a session without
// HELLO.
var errNoValues = errors.New("the server lacks values and observers")

// v2Watch is one watch of a session.
type v2Watch struct {
	id   uint32
	name string
	obs  *Observation

	// Guarded by the session's mu.
	seen       bool  // OBSERVING was read
	refusedErr error // the OBSERVE was refused
	endErr     error // the session ended before OBSERVING
	answered   chan struct{}
	isAnswered bool
}

func (w *v2Watch) answerLocked() {
	if !w.isAnswered {
		w.isAnswered = true
		close(w.answered)
	}
}

// proclaimWait is a PROCLAIM waiting for its reply.
type proclaimWait struct {
	claim *v2Claim
	value string
	err   error
	done  chan struct{}
}

// lookupWait is a LOOKUP waiting for its reply.
type lookupWait struct {
	name  string
	state LockState
	err   error
	done  chan struct{}
}

// sessionFor returns a pooled session at ep fit for u, opening one when
// none has room. It learns and remembers whether the address has the
// extension; a use that needs it where the server lacks it is
// ErrUnsupported. Errors otherwise as session's.
func (c *Client) sessionFor(ctx context.Context, ep endpoint, leaseMS uint32, name string, u use) (*v2Session, error) {
	for round := 0; ; round++ {
		if u.needsValues() && (c.pool.isNoValues(ep.addr) || c.pool.isV1(ep.addr)) {
			return nil, unsupportedAt(ep.addr)
		}
		s, err := c.session(ctx, ep, leaseMS, name, u)
		switch {
		case errors.Is(err, errNoValues):
			c.pool.rememberNoValues(ep.addr)
			if round < 8 {
				continue // to the answer above, or to a plain session
			}
			return nil, &attemptFailed{err: err}
		case errors.Is(err, errFallBack):
			c.pool.rememberV1(ep.addr)
			if u.needsValues() {
				return nil, unsupportedAt(ep.addr)
			}
			return nil, err
		case err != nil:
			return nil, err
		}
		if u.needsValues() {
			s.mu.Lock()
			granted := s.core.HasValues()
			s.mu.Unlock()
			if !granted {
				// FEATURES without the bit: the server declines it, as
				// one without the extension does.
				c.pool.rememberNoValues(ep.addr)
				s.unreserveAs(u)
				return nil, unsupportedAt(ep.addr)
			}
		}
		return s, nil
	}
}

// observe writes an OBSERVE on the reserved room; nil when the session
// ended first.
func (s *v2Session) observe(name string) *v2Watch {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		return nil
	}
	for {
		s.nextWatch++
		if !s.core.KnowsWatch(s.nextWatch) && s.watches[s.nextWatch] == nil {
			break
		}
	}
	w := &v2Watch{id: s.nextWatch, name: name, answered: make(chan struct{})}
	w.obs = newObservation(name, func() {})
	w.obs.unobserve = func() { s.stopWatch(w) }
	s.watches[w.id] = w
	s.core.ObserveSent(w.id, now())
	deadline := s.core.Deadline()
	s.mu.Unlock()
	// A failed write ends the session, and the watch with it.
	_ = s.writeLocked(wire.AppendObserve(make([]byte, 0, 6+len(name)), w.id, name), deadline)
	return w
}

// stopWatch lets the watch go: UNOBSERVE now if it is in use, or as soon
// as OBSERVING says it is. The UNOBSERVED is matched by the session; the
// caller does not wait for it.
func (s *v2Session) stopWatch(w *v2Watch) {
	s.mu.Lock()
	if s.dead || s.watches[w.id] != w {
		s.mu.Unlock()
		return
	}
	step := s.core.Unobserve(w.id)
	s.mu.Unlock()
	if step == core.ReleaseWrite {
		s.sendUnobserve(w.id)
	}
}

// sendUnobserve writes the UNOBSERVE of a watch whose owner stopped it,
// if it is still in use and not already on its way out.
func (s *v2Session) sendUnobserve(id uint32) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	if status, ok := s.core.WatchStatus(id); s.dead || !ok || status != core.WatchActive {
		s.mu.Unlock()
		return
	}
	s.core.UnobserveSent(id, now())
	deadline := s.core.Deadline()
	s.mu.Unlock()
	_ = s.writeLocked(wire.AppendUnobserve(make([]byte, 0, 5), id), deadline)
}

// lookup writes a LOOKUP on the reserved room; nil when the session
// ended first.
func (s *v2Session) lookup(name string) *lookupWait {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		return nil
	}
	l := &lookupWait{name: name, done: make(chan struct{})}
	s.lookupQ = append(s.lookupQ, l)
	s.core.LookupSent(now())
	deadline := s.core.Deadline()
	s.mu.Unlock()
	_ = s.writeLocked(wire.AppendLookup(make([]byte, 0, 2+len(name)), name), deadline)
	return l
}

// dispatchExtLocked hands one event of the extension to its waiter; true
// when a watch stopped before its OBSERVING is to be unobserved now.
func (s *v2Session) dispatchExtLocked(ev core.ClaimEvent) (unobserve bool) {
	switch ev.Kind {
	case core.EventProclaimed, core.EventProclaimRefused:
		if len(s.proclaims) == 0 {
			return false
		}
		p := s.proclaims[0]
		s.proclaims = s.proclaims[1:]
		cl := p.claim
		switch {
		case ev.Kind == core.EventProclaimed:
			cl.val = p.value
		case cl.ended && cl.status == core.StatusLost:
			p.err = cl.endErr // a REVOKED crossed the PROCLAIM
		default:
			p.err = fmt.Errorf("monolock: lock %q: the server refused the value: %s", cl.name,
				wire.DescribeClaimCode(ev.Code, ev.Reason))
		}
		close(p.done)
	case core.EventObserving:
		w := s.watches[ev.Watch]
		if w == nil {
			return false
		}
		w.seen = true
		w.answerLocked()
		return ev.Unobserve
	case core.EventState:
		if w := s.watches[ev.Watch]; w != nil {
			w.obs.push(lockState(ev.State))
		}
	case core.EventUnobserved, core.EventWatchRefused:
		w := s.watches[ev.Watch]
		if w == nil {
			return false
		}
		delete(s.watches, ev.Watch)
		s.watchLoad--
		if ev.Kind == core.EventWatchRefused && !w.seen {
			// The ACL, or a bound on watches (0x0b for the session,
			// 0x0c for the server): reported, not moved to another
			// session, so that the bound the operator set holds.
			w.refusedErr = &LostError{Name: w.name, Reason: ReasonServerError, Code: ev.Code,
				Detail: ev.Reason, Lease: s.core.Lease(), Observation: true}
		}
		w.answerLocked()
		w.obs.end(nil)
	case core.EventLockState, core.EventLookupRefused:
		if len(s.lookupQ) == 0 {
			return false
		}
		l := s.lookupQ[0]
		s.lookupQ = s.lookupQ[1:]
		s.lookups--
		if ev.Kind == core.EventLockState {
			l.state = lockState(ev.State)
		} else {
			l.err = &LostError{Name: l.name, Reason: ReasonServerError, Code: ev.Code, Detail: ev.Reason,
				Lease: s.core.Lease(), Observation: true}
		}
		close(l.done)
	}
	return false
}

// endExtLocked ends every watch, PROCLAIM and LOOKUP with the session.
func (s *v2Session) endExtLocked(loss core.Loss) {
	lease := s.core.Lease()
	for id, w := range s.watches {
		err := newLostError(w.name, lease, loss)
		err.Observation = true
		if !w.seen {
			w.endErr = err
		}
		w.answerLocked()
		w.obs.end(err)
		delete(s.watches, id)
	}
	for _, p := range s.proclaims {
		p.err = p.claim.endErr
		if p.err == nil || p.err == ErrReleased {
			p.err = newLostError(p.claim.name, p.claim.lease, loss)
		}
		close(p.done)
	}
	s.proclaims = nil
	for _, l := range s.lookupQ {
		err := newLostError(l.name, lease, loss)
		err.Observation = true
		l.err = err
		close(l.done)
	}
	s.lookupQ = nil
}

// setValue replaces the claim's value (PROCLAIM) and returns once the
// server has it (PROCLAIMED).
func (c *v2Claim) setValue(ctx context.Context, value string) error {
	s := c.s
	s.wmu.Lock()
	s.mu.Lock()
	c.checkLocked()
	if c.ended {
		err := c.endErr
		s.mu.Unlock()
		s.wmu.Unlock()
		return err
	}
	if !s.core.HasValues() {
		s.mu.Unlock()
		s.wmu.Unlock()
		return unsupportedAt(s.ep.addr)
	}
	p := &proclaimWait{claim: c, value: value, done: make(chan struct{})}
	s.proclaims = append(s.proclaims, p)
	s.core.ProclaimSent(c.id, now())
	deadline := s.core.Deadline()
	s.mu.Unlock()
	_ = s.writeLocked(wire.AppendProclaim(make([]byte, 0, 7+len(value)), c.id, value), deadline)
	s.wmu.Unlock()
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		// The reply is still matched when it comes.
		return ctx.Err()
	}
}

// value is the value the server has for the claim.
func (c *v2Claim) value() string {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.val
}
