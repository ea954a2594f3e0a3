//! Regression tests at the server's edges: absurd settings and transports
//! that buffer.

mod common;

use std::{net::SocketAddr, time::Duration};

use common::{Peer, TestServer, acquire_bytes};
use monolock_proto::ServerFrame;
use monolock_server::ServerConfig;
use tokio::io::BufWriter;

const LEASE_MS: u32 = 10_000;

/// An io-timeout no `Instant` can hold past now (`Duration::MAX`): every
/// path that adds it to an instant (the first ACQUIRE, writes, the ERROR
/// at shutdown) goes on working instead of panicking the connection.
#[tokio::test]
async fn a_huge_io_timeout_never_panics_a_connection() {
    let server =
        TestServer::start_with(ServerConfig::default().with_io_timeout(Duration::MAX)).await;
    let (mut holder, token) = server.hold("huge", LEASE_MS).await;
    assert_eq!(holder.heartbeat().await, ServerFrame::Acquired { token });
    let mut waiter = server.wait_in_line("huge", LEASE_MS).await;
    assert_eq!(waiter.heartbeat().await, ServerFrame::Waiting);
    // A bad first frame is answered, not dropped by a panic.
    let mut bad = server.connect().await;
    bad.send(&acquire_bytes(9, LEASE_MS, b"huge")).await;
    assert_eq!(bad.expect_error_then_close().await.0, 0x10);
    drop(bad);

    let handle = server.handle.clone();
    let stopping = tokio::spawn(server.stop());
    // Each peer closes once it has read the goodbye, so the server's
    // error drain ends on its EOF.
    for mut peer in [holder, waiter] {
        assert_eq!(peer.expect_error_then_close().await.0, 0x01);
    }
    stopping.await.expect("stopped");
    assert_eq!(handle.connections(), 0);
}

/// A transport that keeps what is written until it is flushed (as rustls
/// does with what it encrypts): the WAITING reply and the pushed ACQUIRED
/// reach the client without waiting for another write.
#[tokio::test]
async fn replies_and_pushes_are_flushed() {
    let server = TestServer::start().await;
    let (holder, _) = server.hold("flush", LEASE_MS).await;
    let (client, server_side) = tokio::io::duplex(1024);
    let handle = server.handle.clone();
    let addr = SocketAddr::from(([127, 0, 0, 1], 9));
    let session = tokio::spawn(async move {
        handle
            .serve_stream(BufWriter::new(server_side), addr, "")
            .await;
    });
    let mut waiter = Peer::new(client);
    waiter.send(&acquire_bytes(1, LEASE_MS, b"flush")).await;
    assert_eq!(waiter.recv().await, ServerFrame::Waiting);
    drop(holder);
    assert!(matches!(waiter.recv().await, ServerFrame::Acquired { .. }));
    drop(waiter);
    session.await.expect("session ends");
    server.stop().await;
}
