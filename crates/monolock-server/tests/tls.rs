//! TLS and mTLS on the protocol port: the three modes, refused clients,
//! the handshake budget, and the client identity.

mod common;
#[path = "common/http.rs"]
mod http;
#[path = "common/pki.rs"]
mod pki;
#[path = "common/wire.rs"]
mod wire;

use std::{sync::Arc, time::Duration};

use common::{PATIENCE, Peer, TestServer};
use monolock_proto::{ServerFrame, decode_response};
use monolock_server::{Metrics, ServerConfig, identity_of_certificate};
use pki::{Ca, TlsDir, client_config, connect_tls};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    time::{Instant, timeout},
};

const LEASE_MS: u32 = 30_000;

/// Acquires `name` over `peer` and returns the token.
async fn hold<S>(peer: &mut Peer<S>, name: &str) -> u64
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    peer.send(&wire::acquire(name, LEASE_MS)).await;
    match peer.recv().await {
        ServerFrame::Acquired { token } => token,
        other => panic!("expected ACQUIRED, got {other:?}"),
    }
}

/// True if the server refuses to talk: the connection ends without a
/// single protocol frame (a TLS alert is all a plaintext client gets).
async fn refused<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut stream: S) -> bool {
    // The ACQUIRE may not even be writable: the server has closed.
    let _ = stream.write_all(&wire::acquire("never", LEASE_MS)).await;
    let mut received = Vec::new();
    let read_all = async {
        let mut buf = [0u8; 512];
        while let Ok(n @ 1..) = stream.read(&mut buf).await {
            received.extend_from_slice(&buf[..n]);
        }
    };
    timeout(PATIENCE, read_all)
        .await
        .expect("server closes in time");
    !matches!(decode_response(&received), Ok(Some(_)))
}

fn tls_errors(metrics: &Metrics, server: &TestServer) -> f64 {
    http::Exposition::parse(&metrics.render(&server.handle))
        .value("monolock_tls_handshake_errors_total")
}

#[tokio::test]
async fn plaintext_tls_and_mtls_sessions_work_alike() {
    let ca = Ca::new("server CA");
    let clients = Ca::new("client CA");
    let files = TlsDir::new(&ca.server(), Some(&clients));

    // Plaintext: a bare TCP stream, no identity.
    let plain = TestServer::start().await;
    let mut plain_peer = plain.connect().await;
    let token = hold(&mut plain_peer, "job").await;
    assert_eq!(
        plain_peer.heartbeat().await,
        ServerFrame::Acquired { token }
    );
    assert_eq!(
        &*plain.handle.lock("job").expect("held").holder.identity,
        ""
    );

    // TLS: the client verifies the server; still no client identity.
    let tls =
        TestServer::start_with(ServerConfig::default().with_tls(files.server_tls(false))).await;
    let stream = connect_tls(tls.addr, client_config(&[&ca], None))
        .await
        .expect("TLS handshake");
    let mut tls_peer = Peer::new(stream);
    let token = hold(&mut tls_peer, "job").await;
    assert_eq!(tls_peer.heartbeat().await, ServerFrame::Acquired { token });
    assert_eq!(&*tls.handle.lock("job").expect("held").holder.identity, "");
    // A waiter over TLS gets its promotion pushed like any other.
    let stream = connect_tls(tls.addr, client_config(&[&ca], None))
        .await
        .expect("TLS handshake");
    let mut waiter = Peer::new(stream);
    waiter.send(&wire::acquire("job", LEASE_MS)).await;
    assert_eq!(waiter.recv().await, ServerFrame::Waiting);
    drop(tls_peer);
    assert!(matches!(waiter.recv().await, ServerFrame::Acquired { token: t } if t > token));

    // mTLS: the identity comes from the client certificate.
    let mtls =
        TestServer::start_with(ServerConfig::default().with_tls(files.server_tls(true))).await;
    let leaf = clients.client_uri("spiffe://prod/worker/1");
    let stream = connect_tls(mtls.addr, client_config(&[&ca], Some(&leaf)))
        .await
        .expect("mTLS handshake");
    let mut peer = Peer::new(stream);
    let token = hold(&mut peer, "job").await;
    assert_eq!(peer.heartbeat().await, ServerFrame::Acquired { token });
    assert_eq!(
        &*mtls.handle.lock("job").expect("held").holder.identity,
        "spiffe://prod/worker/1"
    );

    plain.stop_and_drop(plain_peer).await;
    tls.stop_and_drop(waiter).await;
    mtls.stop_and_drop(peer).await;
}

#[tokio::test]
async fn mtls_refuses_clients_without_a_valid_certificate_and_counts_them() {
    let ca = Ca::new("server CA");
    let clients = Ca::new("client CA");
    let strangers = Ca::new("someone else's CA");
    let files = TlsDir::new(&ca.server(), Some(&clients));
    let metrics = Arc::new(Metrics::new());
    let server = TestServer::start_with(
        ServerConfig::default()
            .with_tls(files.server_tls(true))
            .with_observer(metrics.clone()),
    )
    .await;

    // A holder that is already in: refused clients must not disturb it.
    let good = clients.client_uri("spiffe://prod/worker/1");
    let mut holder = Peer::new(
        connect_tls(server.addr, client_config(&[&ca], Some(&good)))
            .await
            .expect("mTLS handshake"),
    );
    let token = hold(&mut holder, "job").await;

    // No certificate at all. With TLS 1.3 the client may finish its side
    // of the handshake before the server refuses, so accept either a failed
    // connect or a connection that closes without a protocol byte.
    match connect_tls(server.addr, client_config(&[&ca], None)).await {
        Err(_) => {}
        Ok(stream) => assert!(
            refused(stream).await,
            "a client without certificate was served"
        ),
    }
    common::eventually("first refusal counted", || {
        tls_errors(&metrics, &server) == 1.0
    })
    .await;

    // A certificate from a CA the server does not trust.
    let stranger = strangers.client_uri("spiffe://prod/worker/1");
    match connect_tls(server.addr, client_config(&[&ca], Some(&stranger))).await {
        Err(_) => {}
        Ok(stream) => assert!(refused(stream).await, "an untrusted certificate was served"),
    }
    common::eventually("second refusal counted", || {
        tls_errors(&metrics, &server) == 2.0
    })
    .await;

    // Plaintext protocol bytes on the TLS port.
    let tcp = TcpStream::connect(server.addr).await.expect("connect");
    assert!(refused(tcp).await, "plaintext was served on the TLS port");
    common::eventually("third refusal counted", || {
        tls_errors(&metrics, &server) == 3.0
    })
    .await;

    assert_eq!(holder.heartbeat().await, ServerFrame::Acquired { token });
    assert_eq!(server.handle.counts().locks, 1);
    server.stop_and_drop(holder).await;
}

#[tokio::test]
async fn the_handshake_is_bounded_by_io_timeout_from_accept() {
    let ca = Ca::new("server CA");
    let files = TlsDir::new(&ca.server(), None);
    let metrics = Arc::new(Metrics::new());
    let io_timeout = Duration::from_secs(1);
    let server = TestServer::start_with(
        ServerConfig::default()
            .with_io_timeout(io_timeout)
            .with_tls(files.server_tls(false))
            .with_observer(metrics.clone()),
    )
    .await;

    // A client that connects and never starts the handshake is closed after
    // io-timeout, not before, and counted.
    let started = Instant::now();
    let mut silent = TcpStream::connect(server.addr).await.expect("connect");
    let mut buf = [0u8; 16];
    let read = timeout(PATIENCE, silent.read(&mut buf))
        .await
        .expect("closed in time");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert!(
        started.elapsed() >= io_timeout,
        "closed early: {:?}",
        started.elapsed()
    );
    common::eventually("late handshake counted", || {
        tls_errors(&metrics, &server) == 1.0
    })
    .await;

    // The same budget covers the handshake and the first ACQUIRE together:
    // a client that shakes hands and then stays silent is closed at
    // io-timeout from accept, without an ERROR.
    let started = Instant::now();
    let stream = connect_tls(server.addr, client_config(&[&ca], None))
        .await
        .expect("TLS handshake");
    let mut peer = Peer::new(stream);
    peer.expect_eof().await;
    assert!(started.elapsed() >= io_timeout);
    assert_eq!(
        tls_errors(&metrics, &server),
        1.0,
        "a completed handshake is no error"
    );
    server.stop_and_drop(peer).await;
}

#[tokio::test]
async fn identity_is_first_uri_san_then_first_dns_san_then_cn() {
    let ca = Ca::new("server CA");
    let clients = Ca::new("client CA");
    let files = TlsDir::new(&ca.server(), Some(&clients));
    let server =
        TestServer::start_with(ServerConfig::default().with_tls(files.server_tls(true))).await;

    let cases = [
        (
            "uri",
            clients.client(
                &["spiffe://prod/worker/7", "spiffe://prod/other"],
                &["worker7.prod.internal"],
                Some("worker-7"),
            ),
            "spiffe://prod/worker/7",
        ),
        (
            "dns",
            clients.client(
                &[],
                &["worker8.prod.internal", "alias.internal"],
                Some("worker-8"),
            ),
            "worker8.prod.internal",
        ),
        ("cn", clients.client(&[], &[], Some("worker-9")), "worker-9"),
    ];
    let mut peers = Vec::new();
    for (lock, leaf, expected) in &cases {
        // Straight from the certificate...
        assert_eq!(identity_of_certificate(&leaf.der), *expected);
        // ...and as the server sees the session.
        let stream = connect_tls(server.addr, client_config(&[&ca], Some(leaf)))
            .await
            .expect("mTLS handshake");
        let mut peer = Peer::new(stream);
        hold(&mut peer, lock).await;
        let holder = server.handle.lock(lock).expect("held").holder;
        assert_eq!(&*holder.identity, *expected, "{lock}");
        peers.push(peer);
    }
    // A certificate with neither SAN nor CN has an empty identity.
    assert_eq!(
        identity_of_certificate(&clients.client(&[], &[], None).der),
        ""
    );
    server.stop_and_drop(peers).await;
}

#[tokio::test]
async fn heartbeat_replies_cross_tls_records_unharmed() {
    // Many one-byte heartbeats in one TLS record, answered in order.
    let ca = Ca::new("server CA");
    let files = TlsDir::new(&ca.server(), None);
    let server =
        TestServer::start_with(ServerConfig::default().with_tls(files.server_tls(false))).await;
    let stream = connect_tls(server.addr, client_config(&[&ca], None))
        .await
        .expect("TLS handshake");
    let mut peer = Peer::new(stream);
    let token = hold(&mut peer, "burst").await;
    peer.send(&wire::heartbeat().repeat(50)).await;
    for _ in 0..50 {
        assert_eq!(peer.recv().await, ServerFrame::Acquired { token });
    }
    server.stop_and_drop(peer).await;
}
