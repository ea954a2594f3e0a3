package main

// The commands of the extension "values and observers": set_value,
// observe, next_state, unobserve, holder, elect, next_election_event and
// resign (clients/conformance/DRIVER.md).

import (
	"context"
	"strconv"
	"sync"
	"time"

	"monolock.dev/go/monolock"
)

// initialWait bounds the wait for an observation's INITIAL state, which
// the server writes right after OBSERVING.
const initialWait = 30 * time.Second

func (d *driver) runExt(cmd command) (reply, error) {
	if d.client == nil && cmd.Cmd != "next_state" && cmd.Cmd != "unobserve" &&
		cmd.Cmd != "next_election_event" && cmd.Cmd != "resign" {
		return nil, fail("other", "no client: send open first")
	}
	switch cmd.Cmd {
	case "set_value":
		lock, err := d.lock(cmd.Handle)
		if err != nil {
			return nil, err
		}
		if cmd.Value == nil {
			return nil, fail("other", "set_value needs a value")
		}
		return nil, lock.SetValue(context.Background(), *cmd.Value)
	case "observe":
		return d.observe(cmd)
	case "next_state":
		obs, ok := d.watches[cmd.Handle]
		if !ok {
			return nil, fail("unknown_handle", "no observation handle %q", cmd.Handle)
		}
		return nextState(obs, time.Duration(cmd.TimeoutMS)*time.Millisecond)
	case "unobserve":
		obs, ok := d.watches[cmd.Handle]
		if !ok {
			return nil, fail("unknown_handle", "no observation handle %q", cmd.Handle)
		}
		delete(d.watches, cmd.Handle)
		obs.Stop()
		return nil, nil
	case "holder":
		st, err := d.client.Holder(context.Background(), cmd.Name)
		if err != nil {
			return nil, err
		}
		return reply{"state": stateObject(st)}, nil
	case "elect":
		return nil, d.elect(cmd)
	case "next_election_event":
		e, ok := d.elections[cmd.Handle]
		if !ok {
			return nil, fail("unknown_handle", "no election handle %q", cmd.Handle)
		}
		return e.next(time.Duration(cmd.TimeoutMS) * time.Millisecond)
	case "resign":
		e, ok := d.elections[cmd.Handle]
		if !ok {
			return nil, fail("unknown_handle", "no election handle %q", cmd.Handle)
		}
		// The handle stays: the events queued before stay readable.
		return nil, e.resign()
	}
	return nil, fail("other", "unknown command %q", cmd.Cmd)
}

// stateObject is a state as the driver protocol writes it.
func stateObject(st monolock.LockState) map[string]interface{} {
	var reason interface{}
	if st.Reason != "" {
		reason = string(st.Reason)
	}
	return map[string]interface{}{
		"held": st.Held, "token": strconv.FormatUint(st.Token, 10), "value": st.Value,
		"event": string(st.Event), "initial": st.Initial, "coalesced": st.Coalesced, "reason": reason,
	}
}

func (d *driver) observe(cmd command) (reply, error) {
	obs, err := d.client.Observe(context.Background(), cmd.Name)
	if err != nil {
		return nil, err
	}
	r, err := nextState(obs, initialWait)
	if err != nil || r["timeout"] == true {
		obs.Stop()
		if err == nil {
			err = fail("other", "no initial state within %v", initialWait)
		}
		return nil, err
	}
	if old, ok := d.watches[cmd.Handle]; ok {
		old.Stop()
	}
	d.watches[cmd.Handle] = obs
	return r, nil
}

// nextState is the next state of obs, a timeout, or the error that ended
// the observation.
func nextState(obs *monolock.Observation, timeout time.Duration) (reply, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case st, ok := <-obs.States():
		if ok {
			return reply{"state": stateObject(st)}, nil
		}
		if err := obs.Err(); err != nil {
			// The end of the session ended the observation: a loss,
			// whatever the session's reason.
			f := classify(err)
			f.kind = "lost"
			return nil, f
		}
		return nil, fail("other", "the observation of %q was stopped", obs.Name())
	case <-timer.C:
		return reply{"timeout": true}, nil
	}
}

// election is one running election helper and the events of its
// callbacks, queued in the order they fired.
type election struct {
	cancel context.CancelFunc
	ended  chan struct{}
	err    error // Run's, once ended is closed

	mu     sync.Mutex
	events []map[string]interface{}
	wake   chan struct{}
}

func (e *election) add(event map[string]interface{}) {
	e.mu.Lock()
	e.events = append(e.events, event)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (d *driver) elect(cmd command) error {
	value := ""
	if cmd.Value != nil {
		value = *cmd.Value
	}
	e := &election{ended: make(chan struct{}), wake: make(chan struct{}, 1)}
	elector, err := monolock.NewLeaderElector(d.client, monolock.LeaderElectionConfig{
		Name:  cmd.Name,
		Lease: time.Duration(cmd.LeaseMS * 1e6),
		Value: value,
		Callbacks: monolock.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context, token uint64) {
				e.add(map[string]interface{}{"kind": "started_leading", "token": strconv.FormatUint(token, 10)})
			},
			OnStoppedLeading: func() {
				e.add(map[string]interface{}{"kind": "stopped_leading"})
			},
			OnNewLeader: func(st monolock.LockState) {
				e.add(map[string]interface{}{"kind": "new_leader", "token": strconv.FormatUint(st.Token, 10), "value": st.Value})
			},
		},
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() {
		e.err = elector.Run(ctx)
		close(e.ended)
	}()
	if old, ok := d.elections[cmd.Handle]; ok {
		_ = old.resign()
	}
	d.elections[cmd.Handle] = e
	return nil
}

// next is the next event, a timeout, or the error that ended the
// election once its events are all taken.
func (e *election) next(timeout time.Duration) (reply, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		e.mu.Lock()
		if len(e.events) > 0 {
			event := e.events[0]
			e.events = e.events[1:]
			e.mu.Unlock()
			return reply{"event": event}, nil
		}
		e.mu.Unlock()
		select {
		case <-e.wake:
		case <-e.ended:
			e.mu.Lock()
			pending := len(e.events) > 0
			e.mu.Unlock()
			if pending {
				continue
			}
			if e.err != nil {
				return nil, e.err
			}
			// Resigned: no event will come.
			return reply{"timeout": true}, nil
		case <-timer.C:
			return reply{"timeout": true}, nil
		}
	}
}

// resign stops the election and returns once it let go: the lock
// released and on_stopped_leading called if it was leading.
func (e *election) resign() error {
	e.cancel()
	<-e.ended
	return e.err
}
