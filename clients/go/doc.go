// Package monolock is the Go client of monolock, a lock server for fleets:
// many processes on many machines agree that exactly one of them runs the
// nightly import, the deploy, the compaction.
//
// The connection is the claim. Lock opens a connection, queues in strict
// FIFO order and returns once the server pushes the grant; Release closes
// the connection and the next waiter gets the lock at once. A process that
// crashes releases at once too (its kernel closes the socket).
//
//	client, err := monolock.NewClient("") // $MONOLOCK_ADDRESS, else 127.0.0.1:7070
//	if err != nil { ... }
//	lock, err := client.Lock(ctx, "deploy", 10*time.Second)
//	if err != nil { ... }
//	defer lock.Release()
//	// lock.Context() is cancelled the moment the lock is lost.
//	err = deploy(lock.Context(), lock.Token())
//
// Every grant carries a fencing token that only ever grows (Lock.Token):
// hand it to what the lock guards, and have that refuse a write whose
// token is lower than the highest it has seen. Loss is first-class: Done
// closes, Context is cancelled and Err says why, always before the server
// can hand the lock on, because the client gives its claim up at
// S + 0.8 x lease (S: the send instant of the latest confirmed request)
// while the server cannot expire it before S + lease.
//
// The client speaks monolock protocol v1 (docs/protocol.md) with the
// standard library only. Its protocol logic is pure and tested on exact
// instants (internal/core); a goroutine per lock drives it.
package monolock
