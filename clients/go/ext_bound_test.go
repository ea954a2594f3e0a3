package monolock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"monolock.dev/go/monolock"
)

// The server's bound on watches per session is the bound: a watch past
// it is refused (0x0b) and reported, the watches in use go on, and one
// stopped makes room.
func TestAWatchPastTheSessionsBoundIsRefused(t *testing.T) {
	srv := startServer(t, "--max-watches-per-session", "2")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := v2Client(t, srv.addr)
	first := must(client.Observe(ctx, "go/ext/bound/1"))
	second := must(client.Observe(ctx, "go/ext/bound/2"))
	nextState(t, first)
	nextState(t, second)
	_, err := client.Observe(ctx, "go/ext/bound/3")
	var lost *monolock.LostError
	if !errors.As(err, &lost) || lost.Reason != monolock.ReasonServerError || lost.Code != 0x0b || !lost.Observation {
		t.Fatalf("a third watch on a session bound to 2: %v", err)
	}
	contains(t, err, `observation of lock "go/ext/bound/3" ended (server_error): the server refused it with 0x0b (too many watches on this session)`)
	holder := v2Client(t, srv.addr)
	for i, obs := range []*monolock.Observation{first, second} {
		name := []string{"go/ext/bound/1", "go/ext/bound/2"}[i]
		lock := must(holder.Lock(ctx, name, 5*time.Second))
		expectState(t, nextState(t, obs), monolock.StateGranted, lock.Token(), "")
		noErr(t, lock.Release())
	}
	first.Stop()
	third := must(client.Observe(ctx, "go/ext/bound/3"))
	expectState(t, nextState(t, third), monolock.StateFree, 0, "")
}
