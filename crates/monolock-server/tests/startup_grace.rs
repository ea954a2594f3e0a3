//! The startup grace: the server accepts and queues in FIFO order, answers
//! WAITING, and grants nothing until the grace has passed; `/readyz` and
//! `/api/info` say whether it is running.

mod common;
#[path = "common/http.rs"]
mod http;

use std::{sync::Arc, time::Duration};

use common::Peer;
use monolock_proto::ServerFrame;
use monolock_server::{Metrics, ServerConfig, admin::EffectiveConfig};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    time::Instant,
};

/// Long enough that the checks made during the grace finish inside it on a
/// busy machine.
const GRACE: Duration = Duration::from_millis(4000);

async fn expect_push<S: AsyncRead + AsyncWrite + Unpin>(peer: &mut Peer<S>) -> u64 {
    match peer.recv().await {
        ServerFrame::Acquired { token } => token,
        other => panic!("expected a pushed ACQUIRED, got {other:?}"),
    }
}

#[tokio::test]
async fn nothing_is_granted_before_the_grace_and_queues_keep_arrival_order() {
    let started = Instant::now();
    let server =
        common::TestServer::start_with(ServerConfig::default().with_startup_grace(GRACE)).await;
    let ops = http::HttpServer::ops(server.handle.clone(), Arc::new(Metrics::new())).await;
    let admin = http::HttpServer::admin(server.handle.clone(), EffectiveConfig::default()).await;

    // Three sessions on one lock and one on another, in this order; every
    // one is answered WAITING, even on a lock nobody holds.
    let mut first = server.wait_in_line("a", 60_000).await;
    let mut second = server.wait_in_line("a", 60_000).await;
    let mut third = server.wait_in_line("a", 60_000).await;
    let mut other = server.wait_in_line("b", 60_000).await;
    assert_eq!(first.heartbeat().await, ServerFrame::Waiting);
    assert_eq!(server.handle.counts().waiters, 4);

    let (status, body) = ops.get("/readyz").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("startup grace: "), "{body}");
    let info = admin.get_json("/api/info", 200).await;
    assert_eq!(info["startup_grace"]["running"], true, "{info}");
    assert_eq!(info["startup_grace"]["grace_ms"], 4000, "{info}");
    assert_eq!(info["startup_grace"]["held"], 4, "{info}");

    // The grace ends: the first of each lock is pushed the lock.
    let token_a = expect_push(&mut first).await;
    let token_b = expect_push(&mut other).await;
    assert!(
        started.elapsed() >= GRACE,
        "granted after {:?}",
        started.elapsed()
    );
    assert!(token_a < token_b, "handed to the table in arrival order");
    assert_eq!(second.heartbeat().await, ServerFrame::Waiting);
    let (status, body) = ops.get("/readyz").await;
    assert_eq!((status, body.as_str()), (200, "ok"));
    let info = admin.get_json("/api/info", 200).await;
    assert_eq!(info["startup_grace"]["running"], false, "{info}");
    assert_eq!(info["startup_grace"]["held"], 0, "{info}");
    let lock = admin.get_json("/api/locks/a", 200).await;
    assert_eq!(lock["waiters"].as_array().map(Vec::len), Some(2), "{lock}");

    // FIFO from there on: second, then third.
    drop(first);
    let token_second = expect_push(&mut second).await;
    drop(second);
    let token_third = expect_push(&mut third).await;
    assert!(token_b < token_second && token_second < token_third);
    drop(third);
    drop(other);
    ops.stop().await;
    admin.stop().await;
    server.stop().await;
}

/// A session that falls silent during the grace is dropped when its lease
/// runs out and never gets the lock; one that leaves is simply gone. The
/// subject is the grace and the leases: sessions over in-memory pipes to
/// the real session code, on tokio's paused clock (the listener is bound
/// but unused), so the grace passes in no real time and exactly.
#[tokio::test(start_paused = true)]
async fn sessions_that_end_during_the_grace_are_never_granted() {
    let started = Instant::now();
    let server =
        common::TestServer::start_with(ServerConfig::default().with_startup_grace(GRACE)).await;
    let mut silent = Peer::pipe(&server.handle, 1);
    assert_eq!(silent.acquire("a", 200).await, ServerFrame::Waiting);
    let mut gone = Peer::pipe(&server.handle, 2);
    assert_eq!(gone.acquire("a", 60_000).await, ServerFrame::Waiting);
    let mut live = Peer::pipe(&server.handle, 3);
    assert_eq!(live.acquire("a", 60_000).await, ServerFrame::Waiting);
    drop(gone);
    silent.expect_eof().await;
    assert!(
        started.elapsed() < GRACE,
        "the silent session outlived the grace"
    );
    common::eventually("both left", || server.handle.counts().waiters == 1).await;
    let token = expect_push(&mut live).await;
    assert!(
        started.elapsed() >= GRACE,
        "granted after {:?}",
        started.elapsed()
    );
    assert!(token > 0);
    assert_eq!(server.handle.counts().waiters, 0);
    server.stop_and_drop(live).await;
}

/// Shutdown during the grace ends every held session with ERROR 0x01.
#[tokio::test]
async fn shutdown_during_the_grace_tells_every_held_session() {
    let server = common::TestServer::start_with(
        ServerConfig::default().with_startup_grace(Duration::from_secs(3600)),
    )
    .await;
    let mut held = server.wait_in_line("a", 60_000).await;
    server.handle.shutdown();
    let (code, _) = held.expect_error_then_close().await;
    assert_eq!(code, 0x01);
    server.stop_and_drop(held).await;
}

/// Without a grace (the default) the first ACQUIRE is granted at once and
/// `/api/info` says there is none.
#[tokio::test]
async fn without_a_grace_nothing_changes() {
    let server = common::TestServer::start().await;
    let admin = http::HttpServer::admin(server.handle.clone(), EffectiveConfig::default()).await;
    let (peer, _token) = server.hold("a", 60_000).await;
    let info = admin.get_json("/api/info", 200).await;
    assert_eq!(info["startup_grace"]["running"], false, "{info}");
    assert_eq!(info["startup_grace"]["grace_ms"], 0, "{info}");
    assert_eq!(info["token_floor"], serde_json::Value::Null, "{info}");
    admin.stop().await;
    server.stop_and_drop(peer).await;
}
