package monolock_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"errors"
	"log"
	"os"
	"time"

	"monolock.dev/go/monolock"
)

// The lock's context ends every call made under it the moment the lock is
// lost; the token fences the write.
func ExampleClient_Lock() {
	client, err := monolock.NewClient("127.0.0.1:7070")
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // bounds the wait only
	defer cancel()
	lock, err := client.Lock(ctx, "nightly/import", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release()

	var db *sql.DB // opened elsewhere
	_, err = db.ExecContext(lock.Context(),
		`UPDATE jobs SET state = 'done', fence = $1 WHERE id = $2 AND fence <= $1`,
		int64(lock.Token()), 42)
	if err != nil {
		log.Print(err, lock.Err()) // lock.Err() says why, if the lock was lost
	}
}

func ExampleClient_TryLock() {
	client, _ := monolock.NewClient("") // $MONOLOCK_ADDRESS, else 127.0.0.1:7070
	lock, err := client.TryLock(context.Background(), "compaction", 5*time.Second)
	if err == monolock.ErrNotAcquired {
		return // someone else is compacting
	}
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release()
}

func ExampleLock_Done() {
	client, _ := monolock.NewClient("")
	lock, err := client.Lock(context.Background(), "deploy", 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release()
	select {
	case <-lock.Done():
		var lost *monolock.LostError
		if errors.As(lock.Err(), &lost) {
			log.Printf("lost the lock (%s): stopping", lost.Reason)
		}
	case <-time.After(time.Minute): // the work
	}
}

func ExampleWithTLS() {
	pem, err := os.ReadFile("/etc/monolock/ca.pem")
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	// For mTLS, the identity the server's ACL and audit log see.
	cert, err := tls.LoadX509KeyPair("/etc/monolock/worker.pem", "/etc/monolock/worker.key")
	if err != nil {
		log.Fatal(err)
	}
	client, err := monolock.NewClient("locks.internal:7070,locks-standby.internal:7070",
		monolock.WithTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}}))
	if err != nil {
		log.Fatal(err)
	}
	_ = client
}

func ExampleClient_Do() {
	client, _ := monolock.NewClient("")
	err := client.Do(context.Background(), "reports/daily", 5*time.Second,
		func(ctx context.Context, lock *monolock.Lock) error {
			return buildReport(ctx, lock.Token())
		})
	var lost *monolock.LostError
	if errors.As(err, &lost) {
		log.Printf("the lock was lost during the work (%s): it may have run unprotected", lost.Reason)
	}
}

func buildReport(ctx context.Context, fence uint64) error { return ctx.Err() }

// A value on the claim tells followers where the holder is; SetValue
// replaces it while holding.
func ExampleWithValue() {
	client, err := monolock.NewClient("127.0.0.1:7070")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lock, err := client.Lock(ctx, "db/primary", 10*time.Second, monolock.WithValue("10.0.0.7:5432"))
	if err != nil {
		log.Fatal(err) // errors.Is(err, monolock.ErrUnsupported) from a server older than the client
	}
	defer lock.Release()
	// Moved to another port: every observer is told once SetValue returns.
	if err := lock.SetValue(ctx, "10.0.0.7:5433"); err != nil {
		log.Print(err)
	}
}

// Followers find the leader through its value; the stream ends when ctx
// is cancelled (Err nil) or when the session ends (Err says why).
func ExampleClient_Observe() {
	client, err := monolock.NewClient("127.0.0.1:7070")
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // unobserves
	obs, err := client.Observe(ctx, "db/primary")
	if err != nil {
		log.Fatal(err)
	}
	for st := range obs.States() {
		if st.Held {
			log.Printf("forward writes to %s (leader token %d)", st.Value, st.Token)
		} else {
			log.Print("no leader now")
		}
	}
	if err := obs.Err(); err != nil {
		log.Print(err) // observation of lock "db/primary" ended (connection): ...
	}
}

// One question, one answer: who holds the lock now.
func ExampleClient_Holder() {
	client, err := monolock.NewClient("127.0.0.1:7070")
	if err != nil {
		log.Fatal(err)
	}
	st, err := client.Holder(context.Background(), "db/primary")
	if err != nil {
		log.Fatal(err)
	}
	if st.Held {
		log.Printf("held by %q under token %d since %v", st.Value, st.Token, st.Since)
	}
}

// The shape of client-go's leader election: the ctx handed to
// OnStartedLeading ends the moment leadership is lost.
func ExampleRunLeaderElection() {
	client, err := monolock.NewClient("127.0.0.1:7070")
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background()) // stop() resigns
	defer stop()
	err = monolock.RunLeaderElection(ctx, client, monolock.LeaderElectionConfig{
		Name:  "reports/leader",
		Lease: 10 * time.Second,
		Value: "10.0.0.7:9000", // what followers read to reach this leader
		Callbacks: monolock.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context, token uint64) {
				runReports(ctx, token) // returns when ctx ends
			},
			OnStoppedLeading: func() { log.Print("no longer leading") },
			OnNewLeader: func(leader monolock.LockState) {
				log.Printf("leader is %s (token %d)", leader.Value, leader.Token)
			},
		},
	})
	if err != nil {
		log.Fatal(err) // ErrUnsupported, an ACL refusal: what retrying cannot cure
	}
}

func runReports(ctx context.Context, fence uint64) { <-ctx.Done() }
