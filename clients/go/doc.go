// Package monolock is the Go client of monolock, a lock server for fleets:
// many processes on many machines agree that exactly one of them runs the
// nightly import, the deploy, the compaction.
//
// Lock queues in strict FIFO order and returns once the server pushes the
// grant; Release returns once the server has released, and the next
// waiter gets the lock at once. The session is the claim's life: a process
// that crashes releases at once too (its kernel closes the socket).
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
// The client speaks monolock protocol v2 (docs/protocol.md) by default:
// the locks of one Client share a few connections, a session per server
// address and lease. It falls back to protocol v1 (a connection per lock)
// for a server that does not speak v2, and WithProtocolV1 forces v1.
//
// Leader election, the other half of what a lock is for, is built in: a
// claim may carry a value (WithValue, Lock.SetValue: the leader's
// address, say), Client.Observe streams a lock's holder and every change
// on a channel, in token order, Client.Holder asks once, and
// RunLeaderElection has the shape of client-go's leader election. These
// need the server's protocol extension "values and observers"; against
// an older server they fail with ErrUnsupported while plain locks work
// as before.
//
// It uses the standard library only. Its protocol logic is pure and
// tested on exact instants (internal/core); a goroutine per session (per
// lock on v1) drives it.
package monolock
