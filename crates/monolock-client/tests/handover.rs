//! Handing a lock over between clients, against the real server (over
//! TCP, or over in-memory pipes on tokio's paused clock where the subject
//! is the passage of leases).

mod common;

use std::time::Duration;

use common::{TestServer, eventually, within};
use monolock_client::{Enqueued, LockGuard, Protocol, Waiter};
use monolock_testkit::peer::PipeConnector;
use tokio::time::Instant;

const LEASE: Duration = Duration::from_secs(2);

/// The longest a promotion may take on loopback.
const PROMPT: Duration = Duration::from_millis(50);

async fn hold(server: &TestServer, name: &str, protocol: Protocol) -> LockGuard {
    match server
        .client()
        .with_protocol(protocol)
        .enqueue(name, LEASE)
        .await
        .expect("enqueue")
    {
        Enqueued::Acquired(guard) => guard,
        Enqueued::Waiting(_) => panic!("{name} should be free"),
    }
}

async fn wait(server: &TestServer, name: &str, protocol: Protocol) -> Waiter {
    match server
        .client()
        .with_protocol(protocol)
        .enqueue(name, LEASE)
        .await
        .expect("enqueue")
    {
        Enqueued::Waiting(waiter) => waiter,
        Enqueued::Acquired(_) => panic!("{name} should be held"),
    }
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_granted_in_fifo_order_with_increasing_tokens(protocol) {
    let server = TestServer::start().await;
    let name = "fifo";
    let first = hold(&server, name, protocol).await;
    let waiters = [
        wait(&server, name, protocol).await,
        wait(&server, name, protocol).await,
        wait(&server, name, protocol).await,
    ];
    server.wait_for_waiters(name, 3).await;
    let mut pending: Vec<_> = waiters
        .into_iter()
        .map(|w| tokio::spawn(w.granted()))
        .collect();

    let mut holder = first;
    let mut index = 0;
    while !pending.is_empty() {
        let next = pending.remove(0);
        // Nobody behind the holder has the lock yet.
        for later in &pending {
            assert!(!later.is_finished(), "waiter granted out of order");
        }
        let previous = holder.token();
        assert!(holder.is_held());
        holder.release().await.expect("release");
        holder = within("promotion", next).await.unwrap().expect("granted");
        assert!(holder.token() > previous, "tokens strictly increase");
        assert_eq!(server.lock(name).unwrap().holder.token, holder.token());
        assert_eq!(server.waiters(name), pending.len());
        index += 1;
    }
    assert_eq!(index, 3);
    drop(holder);
    eventually("the lock to be free", || server.lock(name).is_none()).await;
}
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_guard_promotes_the_next_waiter_at_once(protocol) {
    let server = TestServer::start().await;
    let name = "drop-promotes";
    let holder = hold(&server, name, protocol).await;
    let waiter = wait(&server, name, protocol).await;
    let granted = tokio::spawn(async move {
        let guard = waiter.granted().await.expect("granted");
        (Instant::now(), guard)
    });
    let dropped_at = Instant::now();
    drop(holder);
    let (granted_at, guard) = within("promotion", granted).await.unwrap();
    let took = granted_at - dropped_at;
    assert!(took < PROMPT, "promotion took {took:?}");
    assert!(guard.is_held());
}
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_pending_acquire_gives_up_its_place(protocol) {
    let server = TestServer::start().await;
    let name = "drop-pending";
    let holder = hold(&server, name, protocol).await;
    // A plain `acquire` future, pending in the queue.
    let client = server.client().with_protocol(protocol);
    let pending = tokio::spawn(async move { client.acquire(name, LEASE).await });
    server.wait_for_waiters(name, 1).await;
    let behind = wait(&server, name, protocol).await;
    server.wait_for_waiters(name, 2).await;

    pending.abort(); // drops the pending future
    let _ = pending.await;
    eventually("the dropped claim to leave the queue", || {
        server.waiters(name) == 1
    })
    .await;

    let granted = tokio::spawn(behind.granted());
    let dropped_at = Instant::now();
    drop(holder);
    let guard = within("promotion", granted)
        .await
        .unwrap()
        .expect("granted");
    assert!(dropped_at.elapsed() < PROMPT);
    assert_eq!(server.lock(name).unwrap().holder.token, guard.token());
}
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_acquire_on_a_held_lock_is_busy_and_leaves_no_trace(protocol) {
    let server = TestServer::start().await;
    let name = "try";
    let holder = hold(&server, name, protocol).await;
    let busy = server.client().with_protocol(protocol).try_acquire(name, LEASE).await.expect("try");
    assert!(busy.is_none());
    eventually("the busy claim to leave the queue", || {
        server.waiters(name) == 0
    })
    .await;

    let later = wait(&server, name, protocol).await;
    let granted = tokio::spawn(later.granted());
    let dropped_at = Instant::now();
    drop(holder);
    let guard = within("promotion", granted)
        .await
        .unwrap()
        .expect("granted");
    assert!(dropped_at.elapsed() < PROMPT);
    assert!(guard.is_held());

    // And on a free lock it is an ordinary grant.
    drop(guard);
    eventually("the lock to be free", || server.lock(name).is_none()).await;
    let guard = server.client().with_protocol(protocol).try_acquire(name, LEASE).await.expect("try");
    assert!(guard.is_some_and(|g| g.is_held()));
}
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_timeout_gives_up_its_place_after_the_wait(protocol) {
    let server = TestServer::start().await;
    let name = "timeout";
    let _holder = hold(&server, name, protocol).await;
    let started = Instant::now();
    let got = server
        .client()
        .with_protocol(protocol)
        .acquire_timeout(name, LEASE, Duration::from_millis(300))
        .await
        .expect("no error");
    assert!(got.is_none());
    assert!(started.elapsed() >= Duration::from_millis(300));
    eventually("the claim to leave the queue", || server.waiters(name) == 0).await;
}
}

for_each_protocol! {
/// The subject is the passage of leases: the real client and the real
/// session code over in-memory pipes on tokio's paused clock, so 22
/// heartbeat intervals pass in no real time and no scheduler stall on a
/// loaded machine can pass for silence.
#[tokio::test(start_paused = true)]
async fn a_lock_stays_held_across_many_heartbeat_intervals(protocol) {
    let server = TestServer::start().await;
    let client = PipeConnector::client(&server.handle).with_protocol(protocol);
    let name = "long-hold";
    // lease 1s: a heartbeat every <= 250ms; 5.5s is 22 intervals and 5.5
    // leases (the client gives up after 0.8 x lease of silence).
    let lease = Duration::from_secs(1);
    let guard = client.acquire(name, lease).await.expect("acquire");
    let token = guard.token();
    let until = Instant::now() + Duration::from_millis(5_500);
    let mut checks = 0;
    while Instant::now() < until {
        tokio::select! {
            reason = guard.lost() => panic!("lost the lock: {reason}"),
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
        assert!(guard.is_held());
        checks += 1;
    }
    assert!(checks >= 20, "only {checks} checks in 5.5s");
    assert_eq!(server.lock(name).unwrap().holder.token, token);
    assert!(
        client.try_acquire(name, lease).await.unwrap().is_none(),
        "the server still sees the holder"
    );
    guard.release().await.expect("release");
}
}

for_each_protocol! {
/// Paused clock over in-memory pipes, as above: five leases of waiting
/// pass in no real time.
#[tokio::test(start_paused = true)]
async fn waiters_heartbeat_while_they_wait(protocol) {
    let server = TestServer::start().await;
    let client = PipeConnector::client(&server.handle).with_protocol(protocol);
    let name = "patient";
    let lease = Duration::from_millis(500);
    let holder = client.acquire(name, lease).await.expect("acquire");
    let Enqueued::Waiting(waiter) = client.enqueue(name, lease).await.unwrap() else {
        panic!("should wait");
    };
    let granted = tokio::spawn(waiter.granted());
    // Five leases: a silent waiter would have been dropped long before.
    let started = Instant::now();
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(server.waiters(name), 1);
    drop(holder);
    let guard = within("promotion", granted)
        .await
        .unwrap()
        .expect("granted");
    assert!(guard.is_held());
    assert!(started.elapsed() >= Duration::from_millis(2_500));
}
}
