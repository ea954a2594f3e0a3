package monolock_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"monolock.dev/go/monolock"
)

// peer accepts connections on a loopback port and hands each, numbered
// from 0, to handle.
func peer(t *testing.T, handle func(i int, conn net.Conn)) string {
	ln := must(net.Listen("tcp", "127.0.0.1:0"))
	t.Cleanup(func() { ln.Close() })
	go func() {
		for i := 0; ; i++ {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func(conn net.Conn, i int) {
				defer conn.Close()
				handle(i, conn)
			}(conn, i)
		}
	}()
	return ln.Addr().String()
}

// openedFeatures is a server's answer to OPEN and HELLO: OPENED
// (max_claims 8), then FEATURES granting values and observers.
func openedFeatures() []byte {
	opened := append([]byte{0x30}, make([]byte, 12)...)
	binary.BigEndian.PutUint32(opened[9:], 8)
	return append(opened, 0x39, 0, 0, 0, 1, 0, 0, 0, 8)
}

// answerOpen reads OPEN and HELLO and answers them with openedFeatures.
func answerOpen(conn net.Conn) bool {
	if _, err := io.ReadFull(conn, make([]byte, 6+5)); err != nil {
		return false
	}
	_, err := conn.Write(openedFeatures())
	return err == nil
}

// sessionsOpen is the number of protocol v2 sessions the server has open.
func (s *server) sessionsOpen() int {
	list, _ := s.request("GET", "/api/sessions")["sessions"].([]interface{})
	return len(list)
}

// socketsOpen counts this process's open sockets.
func socketsOpen(t *testing.T) int {
	entries := must(os.ReadDir("/proc/self/fd"))
	n := 0
	for _, entry := range entries {
		if link, err := os.Readlink("/proc/self/fd/" + entry.Name()); err == nil && strings.HasPrefix(link, "socket:") {
			n++
		}
	}
	return n
}

func TestAThousandLocksHeldUseOneSession(t *testing.T) {
	srv := startServer(t)
	client := newClient(t, srv.addr)
	ctx := context.Background()
	sockets := socketsOpen(t)
	count := 1000
	if v1Pass() {
		// Protocol v1 is a connection per lock: a few show that the
		// forced protocol is the one spoken.
		count = 20
	}
	locks := make([]*monolock.Lock, 0, count)
	for i := 0; i < count; i++ {
		locks = append(locks, must(client.Lock(ctx, fmt.Sprintf("go/many/%d", i), 10*time.Second)))
	}
	opened := socketsOpen(t) - sockets
	if v1Pass() {
		if srv.sessionsOpen() != 0 || opened < count {
			t.Fatalf("protocol v1 forced: %d v2 sessions, %d new sockets for %d locks", srv.sessionsOpen(), opened, count)
		}
	} else {
		if n := srv.sessionsOpen(); n != 1 || opened > 2 {
			t.Fatalf("%d locks held: %d sessions on the server, %d new sockets here", count, n, opened)
		}
		if held := srv.request("GET", "/api/sessions")["sessions"].([]interface{})[0].(map[string]interface{})["held"]; held != float64(count) {
			t.Fatalf("the session holds %v claims, want %d", held, count)
		}
	}
	for _, lock := range locks {
		if !lock.Held() {
			t.Fatalf("%s is not held", lock.Name())
		}
		noErr(t, lock.Release())
	}
	eventually(t, "every lock to be free", func() bool {
		return srv.lock("go/many/0") == nil && srv.lock(fmt.Sprintf("go/many/%d", count-1)) == nil
	})
}

func TestTheServersClaimBoundSendsClaimsToAnotherSession(t *testing.T) {
	srv := startServer(t, "--max-claims-per-session", "100")
	client := newClient(t, srv.addr)
	var locks []*monolock.Lock
	for i := 0; i < 250; i++ {
		locks = append(locks, must(client.Lock(context.Background(), fmt.Sprintf("go/bound/%d", i), 10*time.Second)))
	}
	want := 3
	if v1Pass() {
		want = 0
	}
	if n := srv.sessionsOpen(); n != want {
		t.Fatalf("250 claims, at most 100 a session: %d sessions, want %d", n, want)
	}
	for _, lock := range locks {
		noErr(t, lock.Release())
	}
}

// After Release returns, the lock is free for anyone at the first try.
func TestReleaseThenTryLockNeverFindsTheLockBusy(t *testing.T) {
	srv := shared(t)
	mine, other := newClient(t, srv.addr), newClient(t, srv.addr)
	ctx := context.Background()
	end := time.Now().Add(2 * time.Minute)
	for i := 0; i < 1000 && time.Now().Before(end); i++ {
		lock := must(mine.Lock(ctx, "go/then-try", 5*time.Second))
		noErr(t, lock.Release())
		next, err := other.TryLock(ctx, "go/then-try", 5*time.Second)
		if err != nil {
			t.Fatalf("cycle %d: TryLock right after Release: %v", i, err)
		}
		noErr(t, next.Release())
		// And from the same client.
		again, err := mine.TryLock(ctx, "go/then-try", 5*time.Second)
		if err != nil {
			t.Fatalf("cycle %d: TryLock by the same client: %v", i, err)
		}
		noErr(t, again.Release())
	}
}

// A REVOKED ends one claim; the session and its other claims live on.
func TestAForceReleaseEndsOneClaimOnly(t *testing.T) {
	srv := startServer(t)
	client := newClient(t, srv.addr)
	ctx := context.Background()
	kept := must(client.Lock(ctx, "go/kept", time.Second))
	forced := must(client.Lock(ctx, "go/forced-one", 5*time.Second))
	srv.forceRelease("go/forced-one")
	select {
	case <-forced.Done():
	case <-time.After(patience):
		t.Fatal("the forced lock did not end")
	}
	var lost *monolock.LostError
	if !errors.As(forced.Err(), &lost) || lost.Reason != monolock.ReasonForced {
		t.Fatalf("forced: %v", forced.Err())
	}
	if !kept.Held() || kept.Err() != nil || srv.holderToken("go/kept") != kept.Token() {
		t.Fatalf("the other lock: held %t, err %v", kept.Held(), kept.Err())
	}
	// It still heartbeats: held past two leases.
	deadline := time.Now().Add(2 * kept.Lease())
	for time.Now().Before(deadline) {
		select {
		case <-kept.Done():
			t.Fatalf("the other lock ended: %v", kept.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	noErr(t, kept.Release())
}

// The end of a session ends every claim on it, each reporting why.
func TestTheEndOfASessionEndsAllItsClaims(t *testing.T) {
	var conns sync.Map
	addr := peer(t, func(i int, conn net.Conn) {
		conns.Store(i, conn)
		if !answerOpen(conn) {
			return
		}
		for token := uint64(1); ; token++ {
			head := make([]byte, 7)
			if _, err := io.ReadFull(conn, head); err != nil {
				return
			}
			if _, err := io.ReadFull(conn, make([]byte, head[6])); err != nil {
				return
			}
			reply := binary.BigEndian.AppendUint64(append([]byte{0x31}, head[1:5]...), token)
			if _, err := conn.Write(reply); err != nil {
				return
			}
		}
	})
	client := must(monolock.NewClient(addr))
	a := must(client.Lock(context.Background(), "a", 10*time.Second))
	b := must(client.Lock(context.Background(), "b", 10*time.Second))
	if a.Token() != 1 || b.Token() != 2 {
		t.Fatalf("tokens %d and %d", a.Token(), b.Token())
	}
	conn, ok := conns.Load(0)
	if !ok {
		t.Fatal("no connection")
	}
	if _, ok := conns.Load(1); ok {
		t.Fatal("two claims opened two connections")
	}
	conn.(net.Conn).Close()
	for _, lock := range []*monolock.Lock{a, b} {
		select {
		case <-lock.Done():
		case <-time.After(patience):
			t.Fatalf("%s did not end with its session", lock.Name())
		}
		var lost *monolock.LostError
		if !errors.As(lock.Err(), &lost) || lost.Reason != monolock.ReasonConnection {
			t.Fatalf("%s: %v", lock.Name(), lock.Err())
		}
		if !strings.HasPrefix(lost.Error(), fmt.Sprintf("lock %q lost (connection): ", lock.Name())) {
			t.Fatalf("the loss message does not start with the lock: %v", lost)
		}
	}
}

// A server that answers OPEN with ERROR 0x10 speaks v1: the client falls
// back for that address and remembers it.
func TestAServerWithoutV2IsSpokenToInV1(t *testing.T) {
	var opens, acquires atomic.Int32
	addr := peer(t, func(i int, conn net.Conn) {
		head := make([]byte, 2)
		if _, err := io.ReadFull(conn, head); err != nil {
			return
		}
		if head[1] == 0x02 {
			opens.Add(1)
			// The rest of the OPEN and the HELLO written with it, read
			// before the close (unread input would reset the connection).
			_, _ = io.ReadFull(conn, make([]byte, 4+5))
			_, _ = conn.Write([]byte{0x13, 0x10, 0x00})
			return
		}
		acquires.Add(1)
		rest := make([]byte, 6)
		if _, err := io.ReadFull(conn, rest); err != nil {
			return
		}
		if _, err := io.ReadFull(conn, make([]byte, int(rest[4])<<8|int(rest[5]))); err != nil {
			return
		}
		_, _ = conn.Write(binary.BigEndian.AppendUint64([]byte{0x12}, uint64(i)))
		// The release: the client half-closes, the server closes.
		_, _ = io.Copy(io.Discard, conn)
	})
	client := must(monolock.NewClient(addr))
	for i := 0; i < 3; i++ {
		lock := must(client.Lock(context.Background(), "old", 5*time.Second))
		noErr(t, lock.Release())
	}
	if opens.Load() != 1 || acquires.Load() != 3 {
		t.Fatalf("%d OPENs and %d v1 ACQUIREs, want 1 and 3", opens.Load(), acquires.Load())
	}
}

// A release the server never confirms returns after the I/O timeout,
// reported as unconfirmed, with the connection closed.
func TestAnUnconfirmedReleaseReturnsAfterTheIOTimeout(t *testing.T) {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	addr := peer(t, func(i int, conn net.Conn) {
		head := make([]byte, 2)
		if _, err := io.ReadFull(conn, head); err != nil {
			return
		}
		if head[1] == 0x02 {
			_, _ = io.ReadFull(conn, make([]byte, 4+5))
			_, _ = conn.Write(openedFeatures())
			acquire := make([]byte, 7)
			_, _ = io.ReadFull(conn, acquire)
			_, _ = io.ReadFull(conn, make([]byte, acquire[6]))
			_, _ = conn.Write(binary.BigEndian.AppendUint64(append([]byte{0x31}, acquire[1:5]...), 1))
		} else {
			rest := make([]byte, 6)
			_, _ = io.ReadFull(conn, rest)
			_, _ = io.ReadFull(conn, make([]byte, int(rest[4])<<8|int(rest[5])))
			_, _ = conn.Write(binary.BigEndian.AppendUint64([]byte{0x12}, 1))
		}
		// Never a RELEASED, never an EOF: the connection stays open until
		// the test ends.
		_, _ = io.Copy(io.Discard, conn)
		<-stop
	})
	for _, opts := range [][]monolock.Option{nil, {monolock.WithProtocolV1()}} {
		client := must(monolock.NewClient(addr, append(opts, monolock.WithIOTimeout(300*time.Millisecond))...))
		lock := must(client.Lock(context.Background(), "stuck", 10*time.Second))
		start := time.Now()
		err := lock.Release()
		took := time.Since(start)
		var lost *monolock.LostError
		if !errors.As(err, &lost) || lost.Reason != monolock.ReasonConnection || took < 300*time.Millisecond || took > patience {
			t.Fatalf("an unconfirmed release after %v: %v", took, err)
		}
		contains(t, err, `lock "stuck" lost (connection): `, "not confirm", "300ms")
		if lock.Held() {
			t.Fatal("held after the release")
		}
	}
}

// A v2 peer that answers with random bytes, after OPENED or instead of
// it: every claim ends with an error, none panics, none hangs.
func TestRandomBytesOnASessionNeverPanic(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	replies := make([][]byte, 60)
	for i := range replies {
		replies[i] = make([]byte, 1+rng.Intn(40))
		rng.Read(replies[i])
		if i%2 == 0 {
			replies[i] = append(openedFeatures(), replies[i]...)
		}
	}
	addr := peer(t, func(i int, conn net.Conn) {
		if _, err := io.ReadFull(conn, make([]byte, 6+5)); err != nil {
			return
		}
		_, _ = conn.Write(replies[i%len(replies)])
		_, _ = io.Copy(io.Discard, conn)
	})
	client := must(monolock.NewClient(addr, monolock.WithIOTimeout(100*time.Millisecond)))
	for i := range replies {
		lock, err := client.Lock(context.Background(), "peer", monolock.MinLease)
		if err == nil {
			select {
			case <-lock.Done():
			case <-time.After(patience):
				t.Fatalf("reply %d (%x): the claim did not end", i, replies[i])
			}
			err = lock.Release()
		}
		if err == nil {
			t.Fatalf("reply %d (%x): no error", i, replies[i])
		}
	}
}

// A TryLock whose ctx ends before the server's BUSY leaves at the BUSY:
// no RELEASE to wait for, and the session lives on.
func TestATryGivenUpBeforeItsBusyKeepsTheSession(t *testing.T) {
	var connections atomic.Int32
	addr := peer(t, func(i int, conn net.Conn) {
		connections.Add(1)
		if !answerOpen(conn) {
			return
		}
		for {
			head := make([]byte, 7)
			if _, err := io.ReadFull(conn, head); err != nil {
				return
			}
			if _, err := io.ReadFull(conn, make([]byte, head[6])); err != nil {
				return
			}
			time.Sleep(300 * time.Millisecond) // a slow server: the BUSY comes late
			if _, err := conn.Write(append([]byte{0x33}, head[1:5]...)); err != nil {
				return
			}
		}
	})
	client := must(monolock.NewClient(addr))
	for i := 0; i < 2; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		start := time.Now()
		_, err := client.TryLock(ctx, "slow", 5*time.Second)
		cancel()
		if !errors.Is(err, monolock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("try %d: %v", i, err)
		}
		if took := time.Since(start); took > 4*time.Second {
			t.Fatalf("try %d returned after %v: it waited for a RELEASED that never comes", i, took)
		}
	}
	if n := connections.Load(); n != 1 {
		t.Fatalf("%d connections, want the one session kept", n)
	}
}

// A session the server closes as idle (ERROR 0x03) before it answered a
// claim: the claim never existed there and goes to a new session.
func TestAClaimOnASessionClosedAsIdleGoesToANewSession(t *testing.T) {
	var connections atomic.Int32
	addr := peer(t, func(i int, conn net.Conn) {
		connections.Add(1)
		if !answerOpen(conn) {
			return
		}
		head := make([]byte, 7)
		if _, err := io.ReadFull(conn, head); err != nil {
			return
		}
		if _, err := io.ReadFull(conn, make([]byte, head[6])); err != nil {
			return
		}
		if i == 0 {
			_, _ = conn.Write([]byte{0x13, 0x03, 0x00})
			return
		}
		_, _ = conn.Write(binary.BigEndian.AppendUint64(append([]byte{0x31}, head[1:5]...), 7))
		_, _ = io.Copy(io.Discard, conn)
	})
	client := must(monolock.NewClient(addr))
	lock := must(client.Lock(context.Background(), "again", 5*time.Second))
	if lock.Token() != 7 || connections.Load() != 2 {
		t.Fatalf("token %d after %d connections", lock.Token(), connections.Load())
	}
}
