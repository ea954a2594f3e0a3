//! The blocking facade and address lists, against the real server.

mod common;

use std::{net::TcpListener, time::Duration};

use common::{TestServer, eventually};
use monolock_client::{Client, Error, blocking};

const LEASE: Duration = Duration::from_secs(2);

/// An address that refuses connections: a port bound, then closed.
fn refusing_addr() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    drop(listener);
    addr
}

for_each_protocol! {
#[test]
fn the_blocking_guard_holds_heartbeats_and_releases_on_drop(protocol) {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let server = runtime.block_on(TestServer::start());
    let client = blocking::Client::new(server.addr.to_string())
        .expect("client")
        .with_protocol(protocol)
        .with_default_lease(Duration::from_millis(500));
    let guard = client.acquire("blocking", None).expect("acquired");
    assert!(guard.is_held());
    assert_eq!(
        server.lock("blocking").map(|l| l.holder.token),
        Some(guard.token())
    );
    // Busy for this client's second claim.
    assert!(
        client
            .try_acquire("blocking", None)
            .expect("answered")
            .is_none()
    );
    // Heartbeats run while this thread blocks: several leases of the
    // server's clock pass and the claim stands (the server would have
    // handed it on after one silent lease).
    let first = server.lock("blocking").map(|l| l.holder.token);
    std::thread::sleep(Duration::from_millis(1_500));
    assert!(guard.is_held());
    assert_eq!(server.lock("blocking").map(|l| l.holder.token), first);
    drop(guard);
    runtime.block_on(eventually("the release on drop", || {
        server.lock("blocking").is_none()
    }));
    let again = client.acquire("blocking", LEASE).expect("acquired again");
    again.release().expect("released");
    runtime.block_on(eventually("the release", || {
        server.lock("blocking").is_none()
    }));
    // The scoped form: work on this thread, borrowing freely.
    let mut seen = Vec::new();
    let outcome = client
        .run_locked("blocking", LEASE, |guard| {
            seen.push(server.lock("blocking").map(|l| l.holder.token));
            guard.token()
        })
        .expect("ran");
    assert!(outcome.held_throughout());
    assert_eq!(seen, vec![Some(outcome.output)]);
    runtime.block_on(eventually("the release after the work", || {
        server.lock("blocking").is_none()
    }));
    // A watcher thread blocks until the loss and learns why.
    let guard = client.acquire("blocking", LEASE).expect("acquired");
    let watcher = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| guard.wait_lost());
        runtime.block_on(eventually("the grant", || {
            server.lock("blocking").is_some()
        }));
        server.handle.force_release("blocking").expect("held");
        watcher.join().expect("watcher")
    });
    let reason = watcher.expect("not in a runtime");
    assert!(reason.is_temporary(), "{reason}");
    assert!(reason.to_string().contains("0x02"), "{reason}");
    assert!(!guard.is_held());
}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_blocking_client_refuses_to_block_a_runtime_thread() {
    let server = TestServer::start().await;
    let client = tokio::task::spawn_blocking({
        let addr = server.addr.to_string();
        move || blocking::Client::new(addr).expect("client")
    })
    .await
    .expect("built");
    let err = client.acquire("inside", LEASE).unwrap_err();
    assert!(matches!(err, Error::BlockingInAsyncContext), "{err:?}");
    assert!(server.lock("inside").is_none());
    // The runtime must be dropped off the async threads too.
    tokio::task::spawn_blocking(move || drop(client))
        .await
        .expect("dropped");
}

for_each_protocol! {
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_list_skips_a_server_that_is_down(protocol) {
    let server = TestServer::start().await;
    let down = refusing_addr();
    let client = Client::new(format!("{down},{}", server.addr)).with_protocol(protocol);
    let guard = client.acquire("listed", LEASE).await.expect("acquired");
    assert_eq!(
        server.lock("listed").map(|l| l.holder.token),
        Some(guard.token())
    );
    drop(guard);
    // Every address down: the last one's error, temporary.
    let client = Client::new(format!("{down},{}", refusing_addr())).with_protocol(protocol);
    let err = client.acquire("listed", LEASE).await.unwrap_err();
    assert!(err.is_temporary(), "{err}");
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
}
}
