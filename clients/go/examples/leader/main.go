// Command leader runs a job on exactly one process of a fleet at a time:
// each instance waits for the lock "leader" (FIFO), leads while it holds
// it, and stands in line again when it loses it. Start two or three
// instances against one server and kill the leader: the next in line
// takes over at once, with a larger fencing token.
//
//	go run ./examples/leader -addr 127.0.0.1:7070 -name reports/leader
//
// The work gets lock.Context(), so everything it does stops by itself the
// moment the lock is lost, and lock.Token() to fence what it writes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"monolock.dev/go/monolock"
)

func main() {
	addr := flag.String("addr", "", "server address(es), comma-separated (default $MONOLOCK_ADDRESS, else 127.0.0.1:7070)")
	name := flag.String("name", "leader", "the lock's name")
	lease := flag.Duration("lease", 5*time.Second, "the lease: how soon a crashed or partitioned leader is replaced")
	terms := flag.Int("terms", 0, "stop after leading this many terms (0: never)")
	term := flag.Duration("term", 0, "give leadership up after this long (0: hold it until lost or stopped)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	client, err := monolock.NewClient(*addr)
	if err != nil {
		log.Fatal(err)
	}
	for led := 0; *terms == 0 || led < *terms; led++ {
		if err := leadOnce(ctx, client, *name, *lease, *term); err != nil {
			if ctx.Err() != nil {
				return // stopped by a signal
			}
			log.Printf("%v", err)
			if !monolock.IsTemporary(err) {
				os.Exit(1)
			}
			// A lost lock or an unreachable server: stand in line again
			// after a short pause (a new claim, at the back of the queue).
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
				return
			}
		}
	}
}

// leadOnce waits for the lock, leads until the term ends, the lock is lost
// or ctx is cancelled, and lets the lock go.
func leadOnce(ctx context.Context, client *monolock.Client, name string, lease, term time.Duration) error {
	lock, err := client.Lock(ctx, name, lease)
	if err != nil {
		return err
	}
	fmt.Printf("leading %s with token %d\n", name, lock.Token())
	err = lead(lock.Context(), lock.Token(), term)
	if released := lock.Release(); released != nil {
		// Lost before the release: say why (forced, expired, shutdown, ...).
		return released
	}
	if errors.Is(err, context.Canceled) {
		return ctx.Err()
	}
	fmt.Printf("stepped down from %s\n", name)
	return err
}

// lead is the leader's work: here, a tick a second until ctx ends (the
// lock was lost or released) or the term is over. Real work hands ctx to
// every call (database/sql's ExecContext, http.NewRequestWithContext) and
// token to every write it fences.
func lead(ctx context.Context, token uint64, term time.Duration) error {
	var over <-chan time.Time
	if term > 0 {
		timer := time.NewTimer(term)
		defer timer.Stop()
		over = timer.C
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-over:
			return nil
		case <-tick.C:
			fmt.Printf("token %d: working\n", token)
		}
	}
}
