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
