//! How a holder learns that its lock is gone, against the real server.

mod common;

use std::time::Duration;

use common::{Proxy, TestServer, eventually, within};
use monolock_client::{Enqueued, Error, ErrorCode, LossReason};
use tokio::time::Instant;

const LEASE: Duration = Duration::from_secs(2);

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_reports_closed_by_administrator(protocol) {
    let server = TestServer::start().await;
    let name = "forced";
    let guard = server.client().with_protocol(protocol).acquire(name, LEASE).await.unwrap();
    let forced = server.handle.force_release(name).expect("held");
    assert_eq!(forced.token, guard.token());
    match within("the loss", guard.lost()).await {
        LossReason::Server { code, .. } => {
            assert_eq!(code, ErrorCode::CLOSED_BY_ADMIN);
            // 0x02 is below 0x10: a server condition, the client is fine.
            assert!(code.is_temporary());
        }
        other => panic!("expected ERROR 0x02, got {other:?}"),
    }
    assert!(!guard.is_held());
    let err = guard.release().await.unwrap_err();
    assert_eq!(err.server_code(), Some(ErrorCode::CLOSED_BY_ADMIN));
    assert!(err.is_temporary());
}
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_tasks_can_await_the_same_loss(protocol) {
    let server = TestServer::start().await;
    let name = "watched";
    let guard = std::sync::Arc::new(server.client().with_protocol(protocol).acquire(name, LEASE).await.unwrap());
    let watchers: Vec<_> = (0..3)
        .map(|_| {
            let guard = guard.clone();
            tokio::spawn(async move { guard.lost().await })
        })
        .collect();
    server.handle.force_release(name).expect("held");
    for watcher in watchers {
        let reason = within("the loss", watcher).await.unwrap();
        assert!(
            matches!(reason, LossReason::Server { code, .. } if code == ErrorCode::CLOSED_BY_ADMIN)
        );
    }
}
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_shutdown_reports_shutting_down_to_holders_and_waiters(protocol) {
    let server = TestServer::start().await;
    let name = "shutdown";
    let guard = server.client().with_protocol(protocol).acquire(name, LEASE).await.unwrap();
    let Enqueued::Waiting(waiter) = server.client().with_protocol(protocol).enqueue(name, LEASE).await.unwrap() else {
        panic!("should wait");
    };
    let waiting = tokio::spawn(waiter.granted());
    server.stop().await;
    match within("the loss", guard.lost()).await {
        LossReason::Server { code, .. } => {
            assert_eq!(code, ErrorCode::SHUTTING_DOWN);
            assert!(code.is_temporary());
        }
        other => panic!("expected ERROR 0x01, got {other:?}"),
    }
    let err = within("the waiter's error", waiting)
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(err, Error::Lost(LossReason::Server { code, .. }) if code == ErrorCode::SHUTTING_DOWN)
    );
    assert!(err.is_temporary());
}
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_is_abandoned_before_it_could_expire_the_lease(protocol) {
    let server = TestServer::start().await;
    let proxy = Proxy::start(server.addr).await;
    let name = "silent";
    let lease = LEASE;
    let guard = proxy.client().with_protocol(protocol).acquire(name, lease).await.unwrap();
    // Once a heartbeat has been confirmed (the deadline moved on from the
    // ACQUIRE's), let one more reply through and then cut the line: the
    // last frame the server saw is the one that reply confirmed.
    let first_deadline = guard.deadline();
    eventually("a confirmed heartbeat", || {
        guard.deadline() > first_deadline
    })
    .await;
    assert!(guard.is_held());
    proxy.go_silent_after_next_reply();
    let reason = within("the loss", guard.lost()).await;
    let lost_at = Instant::now();
    assert!(
        matches!(reason, LossReason::HeartbeatTimeout { lease: l } if l == lease),
        "{reason:?}"
    );
    assert!(!guard.is_held());
    // `S`, the send instant of the last confirmed frame, bounded from
    // outside the client: the client sent that frame just before the proxy
    // read it at `forwarded` (loopback), and the server received it after.
    // So the server cannot expire the session before `forwarded + lease`,
    // and the client, giving up at `S + 0.8 x lease`, must do so close to
    // `forwarded + 0.8 x lease`: at most 0.05 x lease before it (the
    // frame's delivery on loopback), at most 0.1 x lease after it (timer
    // and scheduling lateness).
    let forwarded = proxy
        .last_forwarded_upstream()
        .expect("the proxy forwarded the client's frames");
    let silent_for = lost_at - forwarded;
    assert!(
        silent_for < lease * 9 / 10,
        "gave up {silent_for:?} after the server last heard of the lock: too late"
    );
    assert!(
        silent_for >= lease * 3 / 4,
        "gave up {silent_for:?} after the server last heard of the lock: too early"
    );
    // The deadline the client worked out is no later than 0.8 x lease
    // after the frame reached the proxy: a larger factor fails here.
    let deadline_after = guard.deadline().saturating_duration_since(forwarded);
    assert!(
        deadline_after <= lease * 4 / 5,
        "the client's deadline is {deadline_after:?} after the server last heard of the lock"
    );
    // The server still shows the session as holder: the client gave up
    // first, as the contract demands.
    assert!(server.lock(name).is_some());
    // It expires it within about a lease after the last heartbeat it saw.
    eventually("the server to expire the session", || {
        server.lock(name).is_none()
    })
    .await;
}
}

for_each_protocol! {
#[test]
fn is_held_reads_false_after_a_pause_past_the_deadline(protocol) {
    // One thread for everything: while it sleeps, no timer and no task of
    // the client (or the server) can run, exactly like a paused process.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let server = TestServer::start().await;
        let lease = Duration::from_millis(250);
        let guard = server.client().with_protocol(protocol).acquire("paused", lease).await.unwrap();
        assert!(guard.is_held());
        let deadline = guard.deadline();
        std::thread::sleep(lease);
        assert!(std::time::Instant::now() > deadline.into_std());
        // Checked before yielding to any timer.
        assert!(!guard.is_held());
        assert!(matches!(
            guard.loss(),
            Some(LossReason::HeartbeatTimeout { .. })
        ));
        assert!(matches!(
            guard.lost().await,
            LossReason::HeartbeatTimeout { .. }
        ));
        assert!(matches!(
            guard.release().await,
            Err(Error::LockLost(lost)) if matches!(lost.reason(), LossReason::HeartbeatTimeout { .. })
        ));
    });
}
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_removed_by_an_administrator_gets_an_error(protocol) {
    let server = TestServer::start().await;
    let name = "kicked";
    let _holder = server.client().with_protocol(protocol).acquire(name, LEASE).await.unwrap();
    let Enqueued::Waiting(waiter) = server.client().with_protocol(protocol).enqueue(name, LEASE).await.unwrap() else {
        panic!("should wait");
    };
    let waiting = tokio::spawn(waiter.granted());
    let addr = server.lock(name).unwrap().waiters[0].remote_addr;
    server.handle.kick_waiter(name, addr).expect("queued");
    let err = within("the waiter's error", waiting)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.server_code(), Some(ErrorCode::CLOSED_BY_ADMIN));
}
}
