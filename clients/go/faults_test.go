package monolock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"monolock.dev/go/monolock"
)

// pausedChildEnv makes the test binary a child that holds a lock and
// answers each line of its input with Held().
const pausedChildEnv = "MONOLOCK_GO_PAUSED_CHILD"

func pausedChild() {
	client, err := monolock.NewClient(os.Getenv(pausedChildEnv), protocolOptions()...)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	lock, err := client.Lock(context.Background(), "go/paused", 500*time.Millisecond)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("held", lock.Held())
	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		fmt.Println("held", lock.Held())
	}
	os.Exit(0)
}

func TestAClientPausedPastItsDeadlineReadsNotHeldOnResuming(t *testing.T) {
	srv := shared(t)
	// A child process holds the lock; it is SIGSTOPped (every goroutine
	// frozen, as in a long GC pause or a suspended VM) for a whole lease.
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), pausedChildEnv+"="+srv.addr)
	stdin := must(child.StdinPipe())
	stdout := must(child.StdoutPipe())
	noErr(t, child.Start())
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	lines := bufio.NewScanner(stdout)
	read := func() string {
		if !lines.Scan() {
			t.Fatalf("the child said nothing: %v", lines.Err())
		}
		return lines.Text()
	}
	if got := read(); got != "held true" {
		t.Fatalf("child: %q", got)
	}
	noErr(t, child.Process.Signal(syscall.SIGSTOP))
	time.Sleep(500 * time.Millisecond) // the fault itself: a pause of a whole 0.5 s lease
	noErr(t, child.Process.Signal(syscall.SIGCONT))
	_, err := fmt.Fprintln(stdin, "?")
	noErr(t, err)
	if got := read(); got != "held false" {
		t.Fatalf("after a pause longer than the lease the child says %q", got)
	}
}

// confirmedAfter waits for a confirmed heartbeat (the lock's deadline
// moves on) and returns the instants of the last look that saw the old
// deadline and of the first that saw the new one. The confirmed
// heartbeat was sent before the latter: a bound on S that does not trust
// the client's own arithmetic.
func confirmedAfter(t *testing.T, lock *monolock.Lock) (seenOld, seenNew time.Time) {
	seenOld = time.Now()
	first := lock.Deadline()
	end := seenOld.Add(patience)
	for {
		before := time.Now()
		if !lock.Deadline().Equal(first) {
			return seenOld, time.Now()
		}
		seenOld = before
		if before.After(end) {
			t.Fatal("no heartbeat was confirmed")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestAStoppedServerIsAbandonedBeforeItsLeaseCouldExpire(t *testing.T) {
	srv := startServer(t)
	const lease = 1500 * time.Millisecond
	client := newClient(t, srv.addr)
	lock := must(client.Lock(context.Background(), "go/silent", lease))
	work := lock.Context()
	// Stop the server right after a heartbeat is confirmed: then S is
	// known up to a round trip without asking the client.
	seenOld, seenNew := confirmedAfter(t, lock)
	srv.signal(syscall.SIGSTOP)
	var lostAt time.Time
	select {
	case <-lock.Done():
		lostAt = time.Now()
	case <-time.After(patience):
		t.Fatal("the lock was not given up")
	}
	srv.signal(syscall.SIGCONT)
	var lost *monolock.LostError
	if !errors.As(lock.Err(), &lost) || lost.Reason != monolock.ReasonExpired || lock.Held() || work.Err() == nil {
		t.Fatalf("after the server stopped: err %v, held %t, context %v", lock.Err(), lock.Held(), work.Err())
	}
	contains(t, lost, "no heartbeat was confirmed within 0.8 x the lease of 1.5s")
	// The loss came between S + 0.8 x lease and S + lease: after the
	// client's deadline, before the server could expire the session.
	if d := lostAt.Sub(seenOld); d >= lease {
		t.Fatalf("gave up %v after the last look before the confirmation: too late", d)
	}
	lastConfirmedSend := lock.Deadline().Add(-lease * 4 / 5)
	if lastConfirmedSend.After(seenNew) {
		t.Fatalf("the client's S is %v after the confirmation was seen", lastConfirmedSend.Sub(seenNew))
	}
	if d := lostAt.Sub(lastConfirmedSend); d >= lease || d < lease*4/5-time.Millisecond {
		t.Fatalf("gave up %v after S; want within [0.8, 1) x lease", d)
	}
	eventually(t, "the server to forget the session", func() bool { return srv.lock("go/silent") == nil })
}

func TestServerShutdownReportsTheShutdownReason(t *testing.T) {
	srv := startServer(t)
	client := newClient(t, srv.addr)
	holder := must(client.Lock(context.Background(), "go/bye", 5*time.Second))
	waiter := make(chan error, 1)
	go func() {
		_, err := client.Lock(context.Background(), "go/bye", 5*time.Second)
		waiter <- err
	}()
	eventually(t, "the waiter to queue", func() bool { return srv.waiters("go/bye") == 1 })
	srv.signal(syscall.SIGTERM)
	select {
	case <-holder.Done():
	case <-time.After(patience):
		t.Fatal("the holder was not told of the shutdown")
	}
	var lost *monolock.LostError
	if !errors.As(holder.Err(), &lost) || lost.Reason != monolock.ReasonShutdown || lost.Code != 0x01 ||
		!monolock.IsTemporary(lost) {
		t.Fatalf("holder: %v", holder.Err())
	}
	contains(t, lost, "shutdown", "0x01 (server shutting down)")
	err := <-waiter
	if !errors.As(err, &lost) || lost.Reason != monolock.ReasonShutdown {
		t.Fatalf("waiter: %v", err)
	}
	srv.waitExit()
}

func TestAConnectionClosedUnderTheLockIsTheConnectionReason(t *testing.T) {
	srv := startServer(t)
	lock := must(newClient(t, srv.addr).Lock(context.Background(), "go/killed", 5*time.Second))
	srv.stop() // SIGKILL: the kernel closes the socket, no ERROR frame
	select {
	case <-lock.Done():
	case <-time.After(patience):
		t.Fatal("the loss of the connection was not noticed")
	}
	var lost *monolock.LostError
	if !errors.As(lock.Err(), &lost) || lost.Reason != monolock.ReasonConnection || lost.Code != 0 {
		t.Fatalf("Err() = %v", lock.Err())
	}
}

func TestHeartbeatsKeepHolderAndWaiterAliveForManyLeases(t *testing.T) {
	srv := shared(t)
	const lease = 200 * time.Millisecond
	client := newClient(t, srv.addr)
	holder := must(client.Lock(context.Background(), "go/alive", lease))
	granted := make(chan *monolock.Lock, 1)
	go func() {
		lock, err := client.Lock(context.Background(), "go/alive", lease)
		if err != nil {
			t.Error(err)
		}
		granted <- lock
	}()
	eventually(t, "the waiter to queue", func() bool { return srv.waiters("go/alive") == 1 })
	// Ten confirmed heartbeats: about two and a half leases.
	for i := 0; i < 10; i++ {
		confirmedAfter(t, holder)
	}
	if !holder.Held() || srv.holderToken("go/alive") != holder.Token() || srv.waiters("go/alive") != 1 {
		t.Fatalf("after many leases: held %t, err %v, waiters %d", holder.Held(), holder.Err(), srv.waiters("go/alive"))
	}
	noErr(t, holder.Release())
	next := <-granted
	if next == nil || !next.Held() {
		t.Fatal("the waiter, kept alive by its heartbeats, was not granted")
	}
	for i := 0; i < 3; i++ {
		confirmedAfter(t, next) // a pushed grant's session keeps heartbeating
	}
	noErr(t, next.Release())
}
