package monolock_test

// Values and observers (docs/protocol.md, "Version 2 extension: values
// and observers") against the real server, and against a fake server
// that predates the extension. These tests speak protocol v2 in both
// runs (the extension needs it); forced v1 has a test of its own.

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"monolock.dev/go/monolock"
)

// v2Client is a client on the default protocol, v2, in either run.
func v2Client(t testing.TB, addrs string, opts ...monolock.Option) *monolock.Client {
	t.Helper()
	return must(monolock.NewClient(addrs, opts...))
}

// nextState is the observation's next state, failing the test if none
// comes within patience or the stream ends.
func nextState(t *testing.T, obs *monolock.Observation) monolock.LockState {
	t.Helper()
	select {
	case st, ok := <-obs.States():
		if !ok {
			t.Fatalf("the observation of %q ended: %v", obs.Name(), obs.Err())
		}
		return st
	case <-time.After(patience):
		t.Fatalf("no state of %q within %v", obs.Name(), patience)
	}
	return monolock.LockState{}
}

func expectState(t *testing.T, st monolock.LockState, event monolock.StateEvent, token uint64, value string) {
	t.Helper()
	if st.Event != event || st.Token != token || st.Value != value || st.Held != (event == monolock.StateHeld ||
		event == monolock.StateGranted || event == monolock.StateValue) {
		t.Fatalf("state %v, want %s token %d value %q", st, event, token, value)
	}
}

func TestAValueIsSeenThroughTheHolderLookupOfAnotherClient(t *testing.T) {
	srv := shared(t)
	ctx := context.Background()
	holder, other := v2Client(t, srv.addr), v2Client(t, srv.addr)
	lock := must(holder.Lock(ctx, "go/ext/holder", 5*time.Second, monolock.WithValue("10.0.0.7:9000")))
	if lock.Value() != "10.0.0.7:9000" {
		t.Fatalf("the lock's value is %q", lock.Value())
	}
	st := must(other.Holder(ctx, "go/ext/holder"))
	expectState(t, st, monolock.StateHeld, lock.Token(), "10.0.0.7:9000")
	if st.Initial || st.Coalesced || st.Since.IsZero() || time.Since(st.Since) > time.Hour {
		t.Fatalf("a lookup's state: %+v", st)
	}
	noErr(t, lock.Release())
	st = must(other.Holder(ctx, "go/ext/holder"))
	if st.Held || st.Event != monolock.StateFree || st.Value != "" {
		t.Fatalf("after the release: %v", st)
	}
}

func TestSetValueIsSeenByAnObserver(t *testing.T) {
	srv := shared(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holder, follower := v2Client(t, srv.addr), v2Client(t, srv.addr)
	lock := must(holder.Lock(ctx, "go/ext/proclaim", 5*time.Second, monolock.WithValue("old")))
	defer lock.Release()
	obs := must(follower.Observe(ctx, "go/ext/proclaim"))
	st := nextState(t, obs)
	expectState(t, st, monolock.StateHeld, lock.Token(), "old")
	if !st.Initial {
		t.Fatalf("the first state is not initial: %v", st)
	}
	noErr(t, lock.SetValue(ctx, "new"))
	if lock.Value() != "new" {
		t.Fatalf("the lock's value is %q after SetValue", lock.Value())
	}
	expectState(t, nextState(t, obs), monolock.StateValue, lock.Token(), "new")
	// A lookup after SetValue returned carries the new value.
	expectState(t, must(follower.Holder(ctx, "go/ext/proclaim")), monolock.StateHeld, lock.Token(), "new")
	// On a lock no longer held: the loss, or ErrReleased.
	noErr(t, lock.Release())
	if err := lock.SetValue(ctx, "late"); !errors.Is(err, monolock.ErrReleased) {
		t.Fatalf("SetValue after Release: %v", err)
	}
}

func TestAnObserverSeesEveryHandOnInTokenOrder(t *testing.T) {
	srv := shared(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const name = "go/ext/order"
	follower := v2Client(t, srv.addr)
	first := must(v2Client(t, srv.addr).Lock(ctx, name, 5*time.Second, monolock.WithValue("holder-0")))
	obs := must(follower.Observe(ctx, name))
	expectState(t, nextState(t, obs), monolock.StateHeld, first.Token(), "holder-0")
	// Two waiters queue behind, one at a time, so that the order is known.
	granted := make([]chan *monolock.Lock, 2)
	for i := range granted {
		granted[i] = make(chan *monolock.Lock, 1)
		go func(i int) {
			lock, err := v2Client(t, srv.addr).Lock(ctx, name, 5*time.Second, monolock.WithValue([]string{"holder-1", "holder-2"}[i]))
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				close(granted[i])
				return
			}
			granted[i] <- lock
		}(i)
		eventually(t, "the waiter to queue", func() bool { return srv.waiters(name) == i+1 })
	}
	previous := first
	for i, next := range granted {
		noErr(t, previous.Release())
		lock, ok := <-next
		if !ok {
			t.FailNow()
		}
		released := nextState(t, obs)
		expectState(t, released, monolock.StateReleased, previous.Token(), "")
		if released.Reason != monolock.ReleaseByHolder {
			t.Fatalf("released for %q", released.Reason)
		}
		grant := nextState(t, obs)
		expectState(t, grant, monolock.StateGranted, lock.Token(), []string{"holder-1", "holder-2"}[i])
		if grant.Token <= released.Token {
			t.Fatalf("token %d granted after %d", grant.Token, released.Token)
		}
		previous = lock
	}
	noErr(t, previous.Release())
	expectState(t, nextState(t, obs), monolock.StateReleased, previous.Token(), "")
}

func TestAnObservationEndsWithAnErrorWhenTheServerIsKilled(t *testing.T) {
	srv := startServer(t)
	obs := must(v2Client(t, srv.addr).Observe(context.Background(), "go/ext/killed"))
	expectState(t, nextState(t, obs), monolock.StateFree, 0, "")
	srv.signal(syscall.SIGKILL)
	select {
	case st, ok := <-obs.States():
		if ok {
			t.Fatalf("a state after the kill: %v", st)
		}
	case <-time.After(patience):
		t.Fatal("the observation did not end with the server")
	}
	var lost *monolock.LostError
	if err := obs.Err(); !errors.As(err, &lost) || lost.Reason != monolock.ReasonConnection || !lost.Observation {
		t.Fatalf("the observation ended with %v", err)
	}
	if !strings.HasPrefix(lost.Error(), `observation of lock "go/ext/killed" ended (connection): `) {
		t.Fatalf("message %q", lost.Error())
	}
}

func TestCancellingTheContextEndsTheObservationCleanly(t *testing.T) {
	srv := shared(t)
	client := v2Client(t, srv.addr)
	ctx, cancel := context.WithCancel(context.Background())
	obs := must(client.Observe(ctx, "go/ext/cancel"))
	nextState(t, obs)
	cancel()
	select {
	case <-obs.Done():
	case <-time.After(patience):
		t.Fatal("the observation did not end with its ctx")
	}
	if _, ok := <-obs.States(); ok || obs.Err() != nil {
		t.Fatalf("after the cancel: open %t, err %v", ok, obs.Err())
	}
	// The session lives on (the UNOBSERVED was matched): a lookup and a
	// second observation of the same lock work on it.
	expectState(t, must(client.Holder(context.Background(), "go/ext/cancel")), monolock.StateFree, 0, "")
	again := must(client.Observe(context.Background(), "go/ext/cancel"))
	expectState(t, nextState(t, again), monolock.StateFree, 0, "")
	again.Stop()
	if n := srv.sessionsOpen(); n < 1 {
		t.Fatalf("%d sessions", n)
	}
}

// electionEvent is one callback of an elector.
type electionEvent struct {
	kind  string // started, stopped, leader
	token uint64
	value string
}

// elector runs one candidate in the background, its callbacks recorded.
type elector struct {
	events chan electionEvent
	cancel context.CancelFunc
	done   chan error
}

func startElector(t *testing.T, client *monolock.Client, name, value string) *elector {
	e := &elector{events: make(chan electionEvent, 64), done: make(chan error, 1)}
	var leading atomic.Bool
	callbacks := monolock.LeaderCallbacks{
		OnStartedLeading: func(ctx context.Context, token uint64) {
			if !leading.CompareAndSwap(false, true) {
				t.Errorf("%s: started leading while leading", value)
			}
			e.events <- electionEvent{kind: "started", token: token}
			<-ctx.Done() // leads until leadership ends
		},
		OnStoppedLeading: func() {
			if !leading.CompareAndSwap(true, false) {
				t.Errorf("%s: stopped leading without leading", value)
			}
			e.events <- electionEvent{kind: "stopped"}
		},
		OnNewLeader: func(st monolock.LockState) {
			e.events <- electionEvent{kind: "leader", token: st.Token, value: st.Value}
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() {
		e.done <- monolock.RunLeaderElection(ctx, client, monolock.LeaderElectionConfig{
			Name: name, Lease: 2 * time.Second, Value: value, Callbacks: callbacks})
	}()
	t.Cleanup(func() { cancel(); <-e.done })
	return e
}

// expect takes the elector's next events, in any order, and returns
// them by kind.
func (e *elector) expect(t *testing.T, kinds ...string) map[string]electionEvent {
	t.Helper()
	got := map[string]electionEvent{}
	for range kinds {
		select {
		case ev := <-e.events:
			got[ev.kind] = ev
		case <-time.After(patience):
			t.Fatalf("waiting for %v: only %v", kinds, got)
		}
	}
	for _, kind := range kinds {
		if _, ok := got[kind]; !ok {
			t.Fatalf("events %v, want %v", got, kinds)
		}
	}
	return got
}

// stop stops the elector and waits for Run to return.
func (e *elector) stop(t *testing.T) {
	e.cancel()
	select {
	case err := <-e.done:
		if err != nil {
			t.Fatalf("the election ended with %v", err)
		}
		e.done <- nil // for the cleanup
	case <-time.After(patience):
		t.Fatal("the election did not stop")
	}
}

func TestTheLeaderElectionFailsOverWhenTheLeaderStops(t *testing.T) {
	srv := shared(t)
	const name = "go/ext/elect-stop"
	a := startElector(t, v2Client(t, srv.addr), name, "a:1")
	first := a.expect(t, "started", "leader")
	if first["leader"].token != first["started"].token || first["leader"].value != "a:1" {
		t.Fatalf("the first leader: %+v", first)
	}
	var followers []*elector
	for i, value := range []string{"b:2", "c:3"} {
		f := startElector(t, v2Client(t, srv.addr), name, value)
		if ev := f.expect(t, "leader")["leader"]; ev.token != first["started"].token || ev.value != "a:1" {
			t.Fatalf("%s sees %+v", value, ev)
		}
		eventually(t, "the candidate to queue", func() bool { return srv.waiters(name) == i+1 })
		followers = append(followers, f)
	}
	a.stop(t)
	a.expect(t, "stopped")
	second := followers[0].expect(t, "started", "leader")
	if second["started"].token <= first["started"].token || second["leader"].token != second["started"].token ||
		second["leader"].value != "b:2" {
		t.Fatalf("the second leader: %+v after %+v", second, first)
	}
	if ev := followers[1].expect(t, "leader")["leader"]; ev.token != second["started"].token || ev.value != "b:2" {
		t.Fatalf("c sees %+v", ev)
	}
}

// closingDialer dials as usual and can close every connection it made.
type closingDialer struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (d *closingDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		d.mu.Lock()
		d.conns = append(d.conns, conn)
		d.mu.Unlock()
	}
	return conn, err
}

func (d *closingDialer) closeAll() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, conn := range d.conns {
		conn.Close()
	}
	n := len(d.conns)
	d.conns = nil
	return n
}

func TestTheLeaderElectionFailsOverWhenTheLeadersConnectionCloses(t *testing.T) {
	srv := shared(t)
	const name = "go/ext/elect-close"
	dialer := &closingDialer{}
	a := startElector(t, v2Client(t, srv.addr, monolock.WithDialContext(dialer.dial)), name, "a:1")
	first := a.expect(t, "started", "leader")
	b := startElector(t, v2Client(t, srv.addr), name, "b:2")
	b.expect(t, "leader")
	eventually(t, "b to queue", func() bool { return srv.waiters(name) == 1 })
	if n := dialer.closeAll(); n != 1 {
		t.Fatalf("the leader had %d connections, want its lock and its watch on one session", n)
	}
	a.expect(t, "stopped")
	second := b.expect(t, "started", "leader")
	if second["started"].token <= first["started"].token || second["leader"].value != "b:2" {
		t.Fatalf("the second leader: %+v after %+v", second, first)
	}
	// a campaigns again, and observes again: it is told of b.
	if ev := a.expect(t, "leader")["leader"]; ev.token != second["started"].token || ev.value != "b:2" {
		t.Fatalf("a sees %+v", ev)
	}
}

// olderServer is a fake v2 server that predates the extension: OPEN
// answered OPENED; a HELLO answered ERROR 0x13, then the close; claims
// of a plain session answered ACQUIRED and RELEASED. It counts HELLOs.
func olderServer(t *testing.T) (addr string, hellos *atomic.Int32) {
	hellos = new(atomic.Int32)
	addr = peer(t, func(i int, conn net.Conn) {
		if _, err := io.ReadFull(conn, make([]byte, 6)); err != nil {
			return
		}
		opened := append([]byte{0x30}, make([]byte, 12)...)
		opened[8], opened[12] = byte(i+1), 8
		if _, err := conn.Write(opened); err != nil {
			return
		}
		for token := uint64(1); ; token++ {
			kind := make([]byte, 1)
			if _, err := io.ReadFull(conn, kind); err != nil {
				return
			}
			var reply []byte
			switch kind[0] {
			case 0x21: // ACQUIRE
				head := make([]byte, 6)
				if _, err := io.ReadFull(conn, head); err != nil {
					return
				}
				if _, err := io.ReadFull(conn, make([]byte, head[5])); err != nil {
					return
				}
				reply = append(append([]byte{0x31}, head[:4]...), 0, 0, 0, 0, 0, 0, 0, byte(token))
			case 0x22: // RELEASE
				id := make([]byte, 4)
				if _, err := io.ReadFull(conn, id); err != nil {
					return
				}
				reply = append([]byte{0x34}, id...)
			case 0x23:
				reply = []byte{0x35}
			default: // HELLO, or any frame of the extension
				if kind[0] == 0x24 {
					hellos.Add(1)
					_, _ = io.ReadFull(conn, make([]byte, 4))
				}
				_, _ = conn.Write([]byte{0x13, 0x13, 0x00})
				return
			}
			if _, err := conn.Write(reply); err != nil {
				return
			}
		}
	})
	return addr, hellos
}

func expectUnsupported(t *testing.T, err error, says string) {
	t.Helper()
	if !errors.Is(err, monolock.ErrUnsupported) || monolock.IsTemporary(err) {
		t.Fatalf("%v: want ErrUnsupported, not temporary", err)
	}
	contains(t, err, says)
}

func TestAnOlderServerMakesValuesAndObserversUnsupported(t *testing.T) {
	addr, hellos := olderServer(t)
	client := v2Client(t, addr)
	ctx := context.Background()
	says := addr + " does not support lock values and observers (the server is older than this client): upgrade the server"
	_, err := client.Lock(ctx, "go/ext/old", 5*time.Second, monolock.WithValue("v"))
	expectUnsupported(t, err, says)
	_, err = client.Observe(ctx, "go/ext/old")
	expectUnsupported(t, err, says)
	_, err = client.Holder(ctx, "go/ext/old")
	expectUnsupported(t, err, says)
	// A plain lock works as before, on a session without HELLO.
	lock := must(client.Lock(ctx, "go/ext/old", 5*time.Second))
	if lock.Token() == 0 || !lock.Held() {
		t.Fatalf("a plain lock: %v", lock)
	}
	expectUnsupported(t, lock.SetValue(ctx, "v"), says)
	noErr(t, lock.Release())
	if n := hellos.Load(); n != 1 {
		t.Fatalf("%d HELLOs: the answer is remembered for the address", n)
	}
	// A new client learns it on its first plain lock, which still works.
	fresh := v2Client(t, addr)
	noErr(t, must(fresh.Lock(ctx, "go/ext/old", 5*time.Second)).Release())
	_, err = fresh.Observe(ctx, "go/ext/old")
	expectUnsupported(t, err, says)
	if n := hellos.Load(); n != 2 {
		t.Fatalf("%d HELLOs, want one per client", n)
	}
}

func TestForcedV1MakesValuesAndObserversUnsupportedBeforeConnecting(t *testing.T) {
	addr, accepted := countingListener(t)
	client := v2Client(t, addr, monolock.WithProtocolV1())
	ctx := context.Background()
	const says = "protocol version 1 has no lock values or observers"
	_, err := client.Lock(ctx, "go/ext/v1", 5*time.Second, monolock.WithValue("v"))
	expectUnsupported(t, err, says)
	_, err = client.TryLock(ctx, "go/ext/v1", 5*time.Second, monolock.WithValue("v"))
	expectUnsupported(t, err, says)
	_, err = client.Observe(ctx, "go/ext/v1")
	expectUnsupported(t, err, says)
	_, err = client.Holder(ctx, "go/ext/v1")
	expectUnsupported(t, err, says)
	err = monolock.RunLeaderElection(ctx, client, monolock.LeaderElectionConfig{Name: "go/ext/v1", Lease: time.Second})
	expectUnsupported(t, err, says)
	if n := accepted(); n != 0 {
		t.Fatalf("%d connections", n)
	}
}

func TestAValueOverTheBoundIsRefusedBeforeConnecting(t *testing.T) {
	addr, accepted := countingListener(t)
	client := v2Client(t, addr)
	ctx := context.Background()
	long := strings.Repeat("é", 512) + "x" // 1,025 bytes, 513 characters
	_, err := client.Lock(ctx, "go/ext/long", 5*time.Second, monolock.WithValue(long))
	if !errors.Is(err, monolock.ErrInvalidArgument) || monolock.IsTemporary(err) {
		t.Fatalf("a value of 1,025 bytes: %v", err)
	}
	contains(t, err, "value of 1025 bytes is above the maximum of 1024 bytes")
	_, err = monolock.NewLeaderElector(client, monolock.LeaderElectionConfig{Name: "go/ext/long", Lease: time.Second, Value: long})
	contains(t, err, "value of 1025 bytes is above the maximum of 1024 bytes")
	_, err = client.Lock(ctx, "go/ext/long", 5*time.Second, monolock.WithValue("bad\xff"))
	if !errors.Is(err, monolock.ErrInvalidArgument) {
		t.Fatalf("a value that is not UTF-8: %v", err)
	}
	if n := accepted(); n != 0 {
		t.Fatalf("%d connections", n)
	}
}

func TestTheLeaderReplacesItsValueWhileLeading(t *testing.T) {
	srv := shared(t)
	const name = "go/ext/elect-value"
	client := v2Client(t, srv.addr)
	started := make(chan uint64, 1)
	elector := must(monolock.NewLeaderElector(client, monolock.LeaderElectionConfig{
		Name: name, Lease: 2 * time.Second, Value: "a:1",
		Callbacks: monolock.LeaderCallbacks{OnStartedLeading: func(ctx context.Context, token uint64) {
			started <- token
			<-ctx.Done()
		}},
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- elector.Run(ctx) }()
	defer func() { cancel(); <-done }()
	var token uint64
	select {
	case token = <-started:
	case <-time.After(patience):
		t.Fatal("the only candidate did not lead")
	}
	if !elector.IsLeader() {
		t.Fatal("leading, but IsLeader is false")
	}
	watching, stopWatching := context.WithCancel(context.Background())
	defer stopWatching()
	obs := must(v2Client(t, srv.addr).Observe(watching, name))
	expectState(t, nextState(t, obs), monolock.StateHeld, token, "a:1")
	noErr(t, elector.SetValue(ctx, "a:2"))
	expectState(t, nextState(t, obs), monolock.StateValue, token, "a:2")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	done <- nil
	// Stopping released the lock.
	expectState(t, nextState(t, obs), monolock.StateReleased, token, "")
	if elector.IsLeader() {
		t.Fatal("IsLeader after the election stopped")
	}
}
