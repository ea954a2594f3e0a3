package monolock_test

import (
	"context"
	"errors"
	"io"
	"math/rand"
	"net"
	"testing"
	"time"

	"monolock.dev/go/monolock"
)

// scriptedPeer accepts connections on a loopback port; each reads the
// 8-byte head of an ACQUIRE and its name, then answers with reply(i), the
// i-th connection's bytes, and keeps the connection open until the client
// closes it.
func scriptedPeer(t *testing.T, reply func(i int) []byte) string {
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
				head := make([]byte, 8)
				if _, err := io.ReadFull(conn, head); err != nil {
					return
				}
				if _, err := io.ReadFull(conn, make([]byte, int(head[6])<<8|int(head[7]))); err != nil {
					return
				}
				if _, err := conn.Write(reply(i)); err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, conn)
			}(conn, i)
		}
	}()
	return ln.Addr().String()
}

func acquiredFrame(token uint64) []byte {
	return []byte{0x12, byte(token >> 56), byte(token >> 48), byte(token >> 40), byte(token >> 32),
		byte(token >> 24), byte(token >> 16), byte(token >> 8), byte(token)}
}

func TestProtocolViolationsEndTheClaim(t *testing.T) {
	cases := []struct {
		what  string
		bytes []byte
		says  string
	}{
		{"an unsolicited ACQUIRED", append(acquiredFrame(5), acquiredFrame(5)...), "no request in flight"},
		{"WAITING after the grant", append(acquiredFrame(5), 0x11), "WAITING arrived after the lock was granted"},
		{"an unknown type byte", append(acquiredFrame(5), 0x7f), "unexpected message type 0x7f"},
	}
	for _, c := range cases {
		addr := scriptedPeer(t, func(int) []byte { return c.bytes })
		lock, err := newClient(t, addr, monolock.WithProtocolV1()).Lock(context.Background(), "peer", time.Minute)
		if err == nil {
			<-lock.Done()
			err = lock.Err()
		}
		var lost *monolock.LostError
		if !errors.As(err, &lost) || lost.Reason != monolock.ReasonProtocol || monolock.IsTemporary(err) {
			t.Fatalf("%s: %v", c.what, err)
		}
		contains(t, err, c.says)
	}
}

func TestASilentPeerIsAConnectErrorAtTheDeadline(t *testing.T) {
	addr := scriptedPeer(t, func(int) []byte { return nil })
	const lease = 300 * time.Millisecond
	for _, opts := range [][]monolock.Option{nil, {monolock.WithProtocolV1()}} {
		start := time.Now()
		_, err := newClient(t, addr, opts...).Lock(context.Background(), "peer", lease)
		took := time.Since(start)
		var connect *monolock.ConnectError
		if !errors.As(err, &connect) || !monolock.IsTemporary(err) {
			t.Fatalf("an unanswered first frame: %v", err)
		}
		contains(t, err, addr+" did not answer within 0.8 x the lease")
		if took < lease*4/5 {
			t.Fatalf("gave up after %v, before 0.8 x the lease", took)
		}
	}
}

func TestASilentPortIsAConnectErrorAfterTheConnectTimeout(t *testing.T) {
	// It reads everything and never answers, nor closes while the test runs.
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	addr := peer(t, func(_ int, conn net.Conn) {
		_, _ = io.Copy(io.Discard, conn)
		<-stop
	})
	for _, opts := range [][]monolock.Option{nil, {monolock.WithProtocolV1()}} {
		opts = append(opts, monolock.WithConnectTimeout(200*time.Millisecond))
		start := time.Now()
		_, err := newClient(t, addr, opts...).Lock(context.Background(), "peer", 10*time.Second)
		// Nothing to confirm with a server that never answered: no wait
		// for the I/O timeout (5 s) after the connect timeout.
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("a silent port reported after %v", took)
		}
		var connect *monolock.ConnectError
		if !errors.As(err, &connect) || !monolock.IsTemporary(err) {
			t.Fatalf("a port that never answers: %v", err)
		}
		contains(t, err, addr+" did not answer within 200 ms")
	}
}

func TestRandomBytesNeverPanicAndAlwaysEndTheClaim(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	replies := make([][]byte, 300)
	for i := range replies {
		replies[i] = make([]byte, rng.Intn(40))
		rng.Read(replies[i])
		if i%3 == 0 && len(replies[i]) > 0 {
			replies[i] = append(acquiredFrame(uint64(i)), replies[i]...) // garbage after a grant
		}
	}
	addr := scriptedPeer(t, func(i int) []byte { return replies[i] })
	client := newClient(t, addr, monolock.WithProtocolV1())
	for i := range replies {
		// A short lease: a reply that is only a prefix is given up quickly.
		lock, err := client.Lock(context.Background(), "peer", monolock.MinLease)
		if err == nil {
			select {
			case <-lock.Done():
			case <-time.After(patience):
				t.Fatalf("reply %d (%x): the claim did not end", i, replies[i])
			}
			err = lock.Release()
		}
		var lost *monolock.LostError
		var connect *monolock.ConnectError
		if !errors.As(err, &lost) && !errors.As(err, &connect) {
			t.Fatalf("reply %d (%x): %v", i, replies[i], err)
		}
	}
}
