//! The scoped and retrying forms, against the real server.

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    },
    time::Duration,
};

use common::{Proxy, TestServer, eventually, within};
use monolock_client::{ErrorCode, LossReason, RetryPolicy};
use tokio::{sync::oneshot, time::Instant};

const LEASE: Duration = Duration::from_secs(2);

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_locked_runs_the_work_under_the_token_and_releases(protocol) {
    let server = TestServer::start().await;
    let name = "scoped";
    let handle = server.handle.clone();
    let outcome = server
        .client()
        .with_protocol(protocol)
        .run_locked(name, LEASE, move |lock| async move {
            assert!(lock.is_held());
            assert_eq!(lock.name().as_str(), "scoped");
            // The server agrees on who holds the lock.
            handle.lock("scoped").map(|l| l.holder.token) == Some(lock.token())
        })
        .await
        .unwrap();
    assert!(outcome.output);
    assert!(outcome.held_throughout());
    eventually("the release", || server.lock(name).is_none()).await;
}
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_locked_stops_the_work_when_the_lock_is_force_released(protocol) {
    let server = TestServer::start().await;
    let name = "scoped-forced";
    let (started_tx, started_rx) = oneshot::channel();
    let client = server.client().with_protocol(protocol);
    let run = tokio::spawn(async move {
        client
            .run_locked(name, LEASE, |lock| async move {
                let _ = started_tx.send(());
                lock.cancelled().await;
                Ok::<_, String>("stopped cleanly")
            })
            .await
    });
    within("the work to start", started_rx).await.unwrap();
    server.handle.force_release(name).expect("held");
    let outcome = within("the work to stop", run).await.unwrap().unwrap();
    // The work returned Ok, and the loss is reported anyway.
    assert_eq!(outcome.output, Ok("stopped cleanly"));
    assert!(matches!(
        outcome.loss,
        Some(LossReason::Server { code, .. }) if code == ErrorCode::CLOSED_BY_ADMIN
    ));
}
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_run_locked_drops_the_work_then_releases(protocol) {
    let server = TestServer::start().await;
    let name = "scoped-dropped";
    let (started_tx, started_rx) = oneshot::channel();
    let (dropped_tx, dropped_rx) = oneshot::channel::<()>();
    let client = server.client().with_protocol(protocol);
    let run = tokio::spawn(async move {
        client
            .run_locked(name, LEASE, |lock| async move {
                // Sent when the work is dropped, whether it ran or not.
                let _dropped = dropped_tx;
                let _ = started_tx.send(lock.token());
                std::future::pending::<()>().await;
            })
            .await
    });
    let token = within("the work to start", started_rx).await.unwrap();
    assert_eq!(server.lock(name).map(|l| l.holder.token), Some(token));
    run.abort();
    // The work is gone first, and the lock is released with it.
    assert!(within("the work to be dropped", dropped_rx).await.is_err());
    eventually("the release", || server.lock(name).is_none()).await;
}
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_locked_work_may_borrow_local_state_and_use_the_default_lease(protocol) {
    let server = TestServer::start().await;
    let name = "scoped-borrowed";
    let client = server.client().with_protocol(protocol).with_default_lease(Duration::from_secs(3));
    // Neither `Send` nor `'static`: a borrow of a local `RefCell`.
    let seen = std::cell::RefCell::new(Vec::new());
    let outcome = client
        .run_locked(name, None, |lock| {
            let seen = &seen;
            let server = &server;
            async move {
                seen.borrow_mut().push(lock.token());
                server.lock(name).map(|l| l.holder.lease.as_millis())
            }
        })
        .await
        .unwrap();
    assert!(outcome.held_throughout());
    assert_eq!(seen.into_inner(), vec![outcome.token]);
    assert_eq!(outcome.output, Some(3_000), "the client's default lease");
    eventually("the release", || server.lock(name).is_none()).await;
}
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_retrying_reconnects_at_once_after_a_shutdown(protocol) {
    let old = TestServer::start().await;
    let new = TestServer::start().await;
    let proxy = Proxy::start(old.addr).await;
    let name = "failover";
    let _holder = old.client().with_protocol(protocol).acquire(name, LEASE).await.unwrap();
    let client = proxy.client().with_protocol(protocol);
    let retrying = tokio::spawn(async move {
        let guard = client.acquire_retrying(name, LEASE).await;
        (Instant::now(), guard)
    });
    old.wait_for_waiters(name, 1).await;

    // The address now leads to the standby; the old server shuts down.
    proxy.set_upstream(new.addr);
    let shutdown_at = Instant::now();
    old.stop().await;
    let (granted_at, guard) = within("the re-acquire", retrying).await.unwrap();
    let guard = guard.unwrap();
    let took = granted_at - shutdown_at;
    assert!(
        took < Duration::from_millis(90),
        "no backoff after 0x01: took {took:?}"
    );
    assert_eq!(new.lock(name).unwrap().holder.token, guard.token());
}
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_locked_retrying_never_reruns_the_work(protocol) {
    let server = TestServer::start().await;
    let name = "once";
    let runs = Arc::new(AtomicU32::new(0));
    let client = server
        .client()
        .with_protocol(protocol)
        .with_retry_policy(RetryPolicy::new().with_initial_backoff(Duration::from_millis(10)));
    let outcome = client
        .run_locked_retrying(name, LEASE, {
            let runs = runs.clone();
            let handle = server.handle.clone();
            move |lock| async move {
                runs.fetch_add(1, Ordering::SeqCst);
                handle.force_release("once").expect("held");
                lock.cancelled().await;
            }
        })
        .await
        .unwrap();
    assert!(outcome.loss.is_some());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
}
