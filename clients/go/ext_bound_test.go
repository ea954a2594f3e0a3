package monolock_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"monolock.dev/go/monolock"
)

// watchesPerSession is the admin API's count of watches on each open
// session that has any, smallest first.
func (s *server) watchesPerSession() []int {
	s.t.Helper()
	sessions, _ := s.request("GET", "/api/sessions")["sessions"].([]interface{})
	var counts []int
	for _, session := range sessions {
		watches, ok := session.(map[string]interface{})["watches"].(float64)
		if !ok {
			s.t.Fatalf("admin API: a session without a number of watches: %v", session)
		}
		if watches > 0 {
			counts = append(counts, int(watches))
		}
	}
	sort.Ints(counts)
	return counts
}

// A watch past the server's bound per session goes to another session,
// as a claim past it does; the server's bound in all is reported, the
// watches in use go on, and one stopped makes room.
func TestAWatchPastTheSessionsBoundGoesToAnotherSession(t *testing.T) {
	srv := startServer(t, "--max-watches-per-session", "2", "--max-watches", "3")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := v2Client(t, srv.addr)
	names := []string{"go/ext/bound/1", "go/ext/bound/2", "go/ext/bound/3", "go/ext/bound/4"}
	var observations []*monolock.Observation
	for _, name := range names[:3] {
		obs, err := client.Observe(ctx, name)
		if err != nil {
			t.Fatalf("watch %q on sessions bound to 2 watches: %v", name, err)
		}
		expectState(t, nextState(t, obs), monolock.StateFree, 0, "")
		observations = append(observations, obs)
	}
	if counts := srv.watchesPerSession(); fmt.Sprint(counts) != "[1 2]" {
		t.Fatalf("three watches on sessions bound to 2: the admin API counts %v per session, want [1 2]", counts)
	}
	_, err := client.Observe(ctx, names[3])
	var lost *monolock.LostError
	if !errors.As(err, &lost) || lost.Reason != monolock.ReasonServerError || lost.Code != 0x0c || !lost.Observation {
		t.Fatalf("a fourth watch on a server bound to 3: %v", err)
	}
	// A server condition (docs/protocol.md): a watch may end and make room.
	if !monolock.IsTemporary(err) {
		t.Fatalf("the server's bound on watches is a server condition, temporary: %v", err)
	}
	contains(t, err, `observation of lock "go/ext/bound/4" ended (server_error): the server refused it with 0x0c (server watch limit reached)`)
	holder := v2Client(t, srv.addr)
	for i, obs := range observations {
		lock := must(holder.Lock(ctx, names[i], 5*time.Second))
		expectState(t, nextState(t, obs), monolock.StateGranted, lock.Token(), "")
		noErr(t, lock.Release())
	}
	observations[0].Stop()
	eventually(t, "the stopped watch gone", func() bool { return fmt.Sprint(srv.watchesPerSession()) == "[1 1]" })
	fourth := must(client.Observe(ctx, names[3]))
	expectState(t, nextState(t, fourth), monolock.StateFree, 0, "")
}
