package monolock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"monolock.dev/go/monolock"
)

// v1PassEnv is set in the second run of the tests, which forces protocol
// v1 on every client (WithProtocolV1): every real-server test runs on v2,
// then on v1.
const v1PassEnv = "MONOLOCK_GO_TEST_PROTOCOL_V1"

// v1Pass is whether this run forces protocol v1.
func v1Pass() bool { return os.Getenv(v1PassEnv) != "" }

func TestMain(m *testing.M) {
	if os.Getenv(pausedChildEnv) != "" {
		pausedChild()
		return
	}
	code := m.Run()
	if sharedServer != nil {
		sharedServer.stop()
	}
	if code == 0 && !v1Pass() {
		fmt.Println("=== the same tests again with protocol v1 forced (WithProtocolV1)")
		again := exec.Command(os.Args[0], os.Args[1:]...)
		again.Env = append(os.Environ(), v1PassEnv+"=1")
		again.Stdout, again.Stderr = os.Stdout, os.Stderr
		if err := again.Run(); err != nil {
			fmt.Println("the protocol v1 run failed:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// protocolOptions is the options of the run: WithProtocolV1 in the v1 run.
func protocolOptions() []monolock.Option {
	if v1Pass() {
		return []monolock.Option{monolock.WithProtocolV1()}
	}
	return nil
}

func newClient(t testing.TB, addrs string, opts ...monolock.Option) *monolock.Client {
	t.Helper()
	return must(monolock.NewClient(addrs, append(protocolOptions(), opts...)...))
}

func TestLockReleaseAndTokensStrictlyIncrease(t *testing.T) {
	srv := shared(t)
	client := newClient(t, srv.addr)
	ctx := context.Background()
	var last uint64
	for i := 0; i < 3; i++ {
		lock := must(client.Lock(ctx, "go/tokens", 5*time.Second))
		if !lock.Held() || lock.Err() != nil {
			t.Fatalf("a fresh lock: held %t, err %v", lock.Held(), lock.Err())
		}
		if lock.Name() != "go/tokens" || lock.Lease() != 5*time.Second || lock.Addr() != srv.addr {
			t.Fatalf("lock fields: %v %v %v", lock.Name(), lock.Lease(), lock.Addr())
		}
		if got := srv.holderToken("go/tokens"); got != lock.Token() {
			t.Fatalf("the server says token %d, the lock %d", got, lock.Token())
		}
		if lock.Token() <= last {
			t.Fatalf("token %d after %d", lock.Token(), last)
		}
		last = lock.Token()
		if err := lock.Release(); err != nil {
			t.Fatalf("release: %v", err)
		}
		if lock.Held() || !errors.Is(lock.Err(), monolock.ErrReleased) || lock.Context().Err() == nil {
			t.Fatalf("after release: held %t, err %v, ctx %v", lock.Held(), lock.Err(), lock.Context().Err())
		}
		select {
		case <-lock.Done():
		default:
			t.Fatal("Done is open after Release")
		}
		if err := lock.Release(); err != nil {
			t.Fatalf("a second release: %v", err)
		}
		eventually(t, "the server to forget the lock", func() bool { return srv.lock("go/tokens") == nil })
	}
}

func TestFIFOOrderOfFiveWaiters(t *testing.T) {
	srv := shared(t)
	client := newClient(t, srv.addr)
	ctx := context.Background()
	holder := must(client.Lock(ctx, "go/fifo", 5*time.Second))
	order := make(chan int, 5)
	var wg sync.WaitGroup
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			lock, err := client.Lock(ctx, "go/fifo", 5*time.Second)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				order <- -1
				return
			}
			order <- i
			if err := lock.Release(); err != nil {
				t.Errorf("waiter %d release: %v", i, err)
			}
		}(i)
		// Queue them one at a time, so that the arrival order is known.
		eventually(t, fmt.Sprintf("waiter %d to queue", i), func() bool { return srv.waiters("go/fifo") == i+1 })
	}
	if err := holder.Release(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(order)
	want := 0
	for i := range order {
		if i != want {
			t.Fatalf("waiter %d got the lock when waiter %d was due", i, want)
		}
		want++
	}
}

func TestTryLockWhenBusyLeavesNoTraceInTheQueue(t *testing.T) {
	srv := shared(t)
	client := newClient(t, srv.addr)
	ctx := context.Background()
	holder := must(client.Lock(ctx, "go/try", 5*time.Second))
	defer holder.Release()
	lock, err := client.TryLock(ctx, "go/try", 5*time.Second)
	if err != monolock.ErrNotAcquired || lock != nil {
		t.Fatalf("TryLock on a busy lock: %v, %v", lock, err)
	}
	if !monolock.IsTemporary(err) {
		t.Fatal("a busy lock is temporary")
	}
	// The server sees the close a moment later.
	eventually(t, "the TryLock to leave the queue", func() bool { return srv.waiters("go/try") == 0 })
	free := must(client.TryLock(ctx, "go/try-free", 5*time.Second))
	if !free.Held() {
		t.Fatal("TryLock of a free lock is not held")
	}
	noErr(t, free.Release())
}

func TestContextBoundsTheWaitAndLeavesTheQueue(t *testing.T) {
	srv := shared(t)
	client := newClient(t, srv.addr)
	holder := must(client.Lock(context.Background(), "go/bounded", 5*time.Second))
	defer holder.Release()

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	lock, err := client.Lock(ctx, "go/bounded", 5*time.Second)
	waited := time.Since(start)
	if lock != nil || !errors.Is(err, monolock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a bounded wait on a busy lock: %v, %v", lock, err)
	}
	contains(t, err, `"go/bounded"`, "not acquired", "deadline exceeded")
	if waited < 300*time.Millisecond {
		t.Fatalf("gave up after %v, before the context ended", waited)
	}
	eventually(t, "the waiter to leave the queue", func() bool { return srv.waiters("go/bounded") == 0 })

	// Cancelled while waiting, from another goroutine.
	ctx, cancel = context.WithCancel(context.Background())
	result := make(chan error, 1)
	go func() {
		_, err := client.Lock(ctx, "go/bounded", 5*time.Second)
		result <- err
	}()
	eventually(t, "the waiter to queue", func() bool { return srv.waiters("go/bounded") == 1 })
	cancel()
	if err := <-result; !errors.Is(err, context.Canceled) || !errors.Is(err, monolock.ErrNotAcquired) {
		t.Fatalf("a cancelled wait: %v", err)
	}
	eventually(t, "the cancelled waiter to leave the queue", func() bool { return srv.waiters("go/bounded") == 0 })
	if !holder.Held() {
		t.Fatal("the holder lost its lock")
	}
}

func TestForceReleaseReachesDoneContextAndErr(t *testing.T) {
	srv := shared(t)
	client := newClient(t, srv.addr)
	lock := must(client.Lock(context.Background(), "go/forced", 5*time.Second))
	ctx := lock.Context()
	srv.forceRelease("go/forced")
	select {
	case <-lock.Done():
	case <-time.After(patience):
		t.Fatal("Done did not close after a force-release")
	}
	select {
	case <-ctx.Done():
	case <-time.After(patience):
		t.Fatal("the lock's context was not cancelled")
	}
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("context error %v", ctx.Err())
	}
	var lost *monolock.LostError
	code, says := uint8(0x08), "0x08 (claim ended by an administrator)"
	if v1Pass() {
		code, says = 0x02, "0x02 (closed by administrator)"
	}
	if !errors.As(lock.Err(), &lost) || lost.Reason != monolock.ReasonForced || lost.Code != code {
		t.Fatalf("Err() = %v", lock.Err())
	}
	contains(t, lost, says)
	if !strings.HasPrefix(lost.Error(), `lock "go/forced" lost (forced): `) {
		t.Fatalf("the loss message does not start with the lock: %v", lost)
	}
	if lock.Held() || !monolock.IsTemporary(lost) {
		t.Fatal("a forced lock: not held, temporary")
	}
	// A context asked for after the loss is born cancelled.
	late := must(client.Lock(context.Background(), "go/forced-late", 5*time.Second))
	srv.forceRelease("go/forced-late")
	<-late.Done()
	if late.Context().Err() == nil {
		t.Fatal("a context taken after the loss is alive")
	}
	// Release reports the loss: the work may have run without the lock.
	if err := lock.Release(); !errors.As(err, &lost) || lost.Reason != monolock.ReasonForced {
		t.Fatalf("release of a lost lock: %v", err)
	}
	_ = late.Release()
}

func TestTheLocksContextKeepsValuesNotTheWaitBound(t *testing.T) {
	srv := shared(t)
	client := newClient(t, srv.addr)
	type key struct{}
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), key{}, "trace-7"), patience)
	lock := must(client.Lock(ctx, "go/values", 5*time.Second))
	cancel()
	if got := lock.Context().Value(key{}); got != "trace-7" {
		t.Fatalf("value %v", got)
	}
	if _, ok := lock.Context().Deadline(); ok || lock.Context().Err() != nil || !lock.Held() {
		t.Fatal("the wait's context ended the lock's")
	}
	noErr(t, lock.Release())
}

func TestDoRunsUnderTheLockAndReportsALoss(t *testing.T) {
	srv := shared(t)
	client := newClient(t, srv.addr)
	var token uint64
	err := client.Do(context.Background(), "go/do", 5*time.Second, func(ctx context.Context, lock *monolock.Lock) error {
		token = lock.Token()
		if srv.holderToken("go/do") != token {
			return errors.New("not the holder")
		}
		return nil
	})
	if err != nil || token == 0 {
		t.Fatalf("Do: %v", err)
	}
	eventually(t, "Do to release", func() bool { return srv.lock("go/do") == nil })
	err = client.Do(context.Background(), "go/do", 5*time.Second, func(ctx context.Context, lock *monolock.Lock) error {
		srv.forceRelease("go/do")
		<-ctx.Done()
		return ctx.Err()
	})
	var lost *monolock.LostError
	if !errors.As(err, &lost) || lost.Reason != monolock.ReasonForced {
		t.Fatalf("Do with a forced loss: %v", err)
	}
	boom := errors.New("boom")
	if err := client.Do(context.Background(), "go/do", 5*time.Second, func(context.Context, *monolock.Lock) error {
		return boom
	}); err != boom {
		t.Fatalf("Do returned %v, want fn's error", err)
	}
}

// countingListener accepts connections and counts them.
func countingListener(t *testing.T) (string, func() int) {
	ln := must(net.Listen("tcp", "127.0.0.1:0"))
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	n := 0
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			n++
			mu.Unlock()
			conn.Close()
		}
	}()
	return ln.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return n }
}

func TestBadNamesAndLeasesAreRejectedBeforeConnecting(t *testing.T) {
	addr, accepted := countingListener(t)
	client := newClient(t, addr)
	ctx := context.Background()
	cases := []struct {
		name  string
		lease time.Duration
		says  string
	}{
		{"", time.Second, "empty"},
		{strings.Repeat("a", 256), time.Second, "256 bytes long: at most 255"},
		{strings.Repeat("é", 128), time.Second, "256 bytes long"},
		{"bad\xffutf8", time.Second, "not valid UTF-8"},
		{"ok", 0, "lease 0s is below the minimum of 100 ms (leases are in nanoseconds, a time.Duration"},
		{"ok", 10, "lease 10ns is below the minimum of 100 ms"},
		{"ok", 99 * time.Millisecond, "below the minimum of 100 ms"},
		{"ok", -time.Second, "below the minimum"},
		{"ok", 1500 * time.Microsecond, "lease 1.5ms is below the minimum"},
		{"ok", 1500*time.Millisecond + time.Microsecond, "lease 1.500001s is not a whole number of milliseconds (leases are in"},
		{"ok", time.Hour + time.Millisecond, "lease 1h0m0.001s is above the maximum of 1 hour (leases are in nanoseconds, a time.Duration"},
		{"ok", 10000 * time.Second, "above the maximum of 1 hour"},
	}
	for _, c := range cases {
		for _, try := range []bool{false, true} {
			var err error
			if try {
				_, err = client.TryLock(ctx, c.name, c.lease)
			} else {
				_, err = client.Lock(ctx, c.name, c.lease)
			}
			if !errors.Is(err, monolock.ErrInvalidArgument) || monolock.IsTemporary(err) {
				t.Fatalf("%q, %v: %v", c.name, c.lease, err)
			}
			contains(t, err, c.says)
		}
	}
	// 255 bytes: valid, sent (the listener closes it at once).
	if _, err := client.Lock(ctx, strings.Repeat("é", 127)+"a", time.Second); errors.Is(err, monolock.ErrInvalidArgument) {
		t.Fatal(err)
	}
	if accepted() != 1 {
		t.Fatalf("%d connections for invalid arguments, want only the valid one's", accepted())
	}
}

func TestAddressesAreCheckedAndListed(t *testing.T) {
	for _, bad := range []string{"a", "a:0", "a:x", ":1", "::1:2", "a:70000", " , "} {
		if _, err := monolock.NewClient(bad); !errors.Is(err, monolock.ErrInvalidArgument) {
			t.Errorf("NewClient(%q): %v", bad, err)
		}
	}
	for _, schemed := range []string{"http://127.0.0.1:7070", "tcp://a:1", "a:1,monolock://b:2"} {
		_, err := monolock.NewClient(schemed)
		if !errors.Is(err, monolock.ErrInvalidArgument) {
			t.Fatalf("NewClient(%q): %v", schemed, err)
		}
		contains(t, err, "write host:port, without a scheme")
	}
	_, err := monolock.NewClient("http://127.0.0.1:7070")
	contains(t, err, `address "http://127.0.0.1:7070": write host:port, without a scheme`)
	client := newClient(t, "a:1, [::1]:2 ,b:3")
	if got := strings.Join(client.Addrs(), ","); got != "a:1,[::1]:2,b:3" {
		t.Fatalf("Addrs() = %s", got)
	}
	t.Setenv(monolock.AddressEnv, "10.1.1.1:7070,10.1.1.2:7070")
	if got := strings.Join(newClient(t, "").Addrs(), ","); got != "10.1.1.1:7070,10.1.1.2:7070" {
		t.Fatalf("from the environment: %s", got)
	}
	t.Setenv(monolock.AddressEnv, "")
	if got := strings.Join(newClient(t, "").Addrs(), ","); got != monolock.DefaultAddress {
		t.Fatalf("the default: %s", got)
	}
	if _, err := monolock.NewClient("a:1", monolock.WithConnectTimeout(0)); !errors.Is(err, monolock.ErrInvalidArgument) {
		t.Fatalf("a zero connect timeout: %v", err)
	}
}

// deadAddr is a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	ln := must(net.Listen("tcp", "127.0.0.1:0"))
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestADeadAddressIsNamedInTheError(t *testing.T) {
	dead1, dead2 := deadAddr(t), deadAddr(t)
	client := newClient(t, dead1+","+dead2)
	_, err := client.Lock(context.Background(), "go/dead", time.Second)
	var connect *monolock.ConnectError
	if !errors.As(err, &connect) || len(connect.Attempts) != 2 || !monolock.IsTemporary(err) {
		t.Fatalf("every address down: %v", err)
	}
	contains(t, err, "could not connect to", dead1, dead2, "connection refused")
}

func TestTheFirstServerDownTheSecondServes(t *testing.T) {
	srv := shared(t)
	t.Setenv(monolock.AddressEnv, deadAddr(t)+","+srv.addr)
	client := newClient(t, "")
	lock := must(client.Lock(context.Background(), "go/second", time.Second))
	if lock.Addr() != srv.addr || srv.holderToken("go/second") != lock.Token() {
		t.Fatalf("held at %s", lock.Addr())
	}
	noErr(t, lock.Release())
}

func TestAServerThatDoesNotAnswerIsSkippedAfterTheConnectTimeout(t *testing.T) {
	srv := shared(t)
	// A dialer that hangs until its context ends stands in for a host that
	// does not answer (no packet leaves the machine: 192.0.2.1 is never
	// dialed).
	hang := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == "192.0.2.1:7070" {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	client := newClient(t, "192.0.2.1:7070,"+srv.addr,
		monolock.WithConnectTimeout(200*time.Millisecond), monolock.WithDialContext(hang))
	lock := must(client.Lock(context.Background(), "go/skip", time.Second))
	noErr(t, lock.Release())
	client = newClient(t, "192.0.2.1:7070", monolock.WithConnectTimeout(100*time.Millisecond), monolock.WithDialContext(hang))
	_, err := client.Lock(context.Background(), "go/skip", time.Second)
	contains(t, err, "192.0.2.1:7070", "timed out after 100ms")
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

func TestNoGoroutineOrDescriptorLeaksAfterManyCycles(t *testing.T) {
	srv := shared(t)
	client := newClient(t, srv.addr)
	ctx := context.Background()
	// Warm up: the runtime's own goroutines (the network poller) start once.
	noErr(t, must(client.Lock(ctx, "go/leak", time.Second)).Release())
	baseline, fds := runtime.NumGoroutine(), openFDs(t)
	holder := must(client.Lock(ctx, "go/leak-busy", time.Second))
	for i := 0; i < 500; i++ {
		lock := must(client.Lock(ctx, "go/leak", time.Second))
		if err := lock.Release(); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			if _, err := client.TryLock(ctx, "go/leak-busy", time.Second); err != monolock.ErrNotAcquired {
				t.Fatal(err)
			}
			short, cancel := context.WithTimeout(ctx, time.Millisecond)
			if _, err := client.Lock(short, "go/leak-busy", time.Second); !errors.Is(err, monolock.ErrNotAcquired) {
				t.Fatal(err)
			}
			cancel()
		}
	}
	noErr(t, holder.Release())
	// Release waits for the session's goroutine to close its exit channel;
	// the goroutine itself may still be unwinding when Release returns
	// (under -race, often), so its exit is waited for, not assumed. A
	// leak never exits.
	end := time.Now().Add(patience)
	for n := runtime.NumGoroutine(); n > baseline; n = runtime.NumGoroutine() {
		if time.Now().After(end) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after the cycles, %d before:\n%s", n, baseline, buf[:runtime.Stack(buf, true)])
		}
		runtime.Gosched()
	}
	if n := openFDs(t); n > fds {
		t.Fatalf("%d descriptors after the cycles, %d before", n, fds)
	}
}

func TestAWaiterRemovedByAnAdministratorIsToldWhy(t *testing.T) {
	srv := shared(t)
	client := newClient(t, srv.addr)
	holder := must(client.Lock(context.Background(), "go/removed", 5*time.Second))
	defer holder.Release()
	result := make(chan error, 1)
	go func() {
		_, err := client.Lock(context.Background(), "go/removed", 5*time.Second)
		result <- err
	}()
	eventually(t, "the waiter to queue", func() bool { return srv.waiters("go/removed") == 1 })
	waiter := srv.lock("go/removed")["waiters"].([]interface{})[0].(map[string]interface{})
	if srv.request("DELETE", "/api/locks/"+url.PathEscape("go/removed")+"/waiters/"+waiter["remote_addr"].(string)) == nil {
		t.Fatal("the admin API did not find the waiter")
	}
	err := <-result
	var lost *monolock.LostError
	if !errors.As(err, &lost) || lost.Reason != monolock.ReasonForced || !monolock.IsTemporary(err) {
		t.Fatalf("a removed waiter: %v", err)
	}
	if !holder.Held() {
		t.Fatal("removing the waiter touched the holder")
	}
}
