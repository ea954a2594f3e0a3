//! Who is closed first when the server runs out of descriptors: a
//! connection that never sent a whole first frame, then an idle version 2
//! session, and never a session that has just been opened.

mod common;

use std::time::Duration;

use common::{TestServer, eventually};
use monolock_proto::{ErrorCode, v2::Mode, v2::ServerFrame};
use monolock_server::ServerConfig;
use monolock_testkit::v2::RawV2;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

const LEASE: u32 = 30_000;

/// Reads one ERROR frame from a connection that sent no whole frame.
async fn expect_error_frame(stream: &mut TcpStream) -> (ErrorCode, String) {
    let mut buf = Vec::new();
    loop {
        if let Some((frame, _)) = monolock_proto::decode_response(&buf).expect("valid frame") {
            match frame {
                monolock_proto::ServerFrame::Error { code, reason } => return (code, reason),
                other => panic!("expected ERROR, got {other:?}"),
            }
        }
        let mut chunk = [0u8; 256];
        let n = tokio::time::timeout(common::PATIENCE, stream.read(&mut chunk))
            .await
            .expect("an ERROR within patience")
            .expect("read");
        assert!(n > 0, "closed without a frame");
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[tokio::test]
async fn connections_without_a_first_frame_go_before_idle_sessions() {
    // io-timeout long enough that nothing here times out by itself.
    let server =
        TestServer::start_with(ServerConfig::default().with_io_timeout(Duration::from_secs(30)))
            .await;
    let (mut idle, _) = RawV2::open(server.addr, LEASE).await;
    let mut silent = TcpStream::connect(server.addr).await.expect("connect");
    let mut half = TcpStream::connect(server.addr).await.expect("connect");
    // Half a version 1 ACQUIRE: a first frame begun, not whole.
    half.write_all(&[0x01, 0x01, 0, 0]).await.expect("send");
    eventually("both connections are pending", || {
        server.handle.pending_connections() == 2
    })
    .await;

    assert_eq!(server.handle.shed_for_descriptors(), 2);
    for stream in [&mut silent, &mut half] {
        let (code, reason) = expect_error_frame(stream).await;
        assert_eq!(code, ErrorCode::TOO_MANY_CONNECTIONS);
        assert!(reason.contains("out of descriptors"), "{reason}");
    }
    // The idle session was not touched by that step.
    assert_eq!(idle.ping().await, ServerFrame::Pong);
    assert_eq!(server.handle.pending_connections(), 0);
    server.stop().await;
}

/// The shedding race: one descriptor short, a session that sends OPEN and
/// its ACQUIRE a moment later was closed as idle (ERROR 0x03) every time.
/// A session is not idle before one io-timeout has passed since OPENED.
#[tokio::test]
async fn a_session_just_opened_is_not_shed_as_idle() {
    let server = TestServer::start().await;
    let (mut fresh, _) = RawV2::open(server.addr, LEASE).await;
    assert_eq!(server.handle.shed_for_descriptors(), 0);
    assert!(matches!(
        fresh.acquire(1, Mode::Wait, "right-after-open").await,
        ServerFrame::Acquired { claim: 1, .. }
    ));
    server.stop().await;
}

/// Once no connection is pending and an idle session has been open for
/// an io-timeout, it is the one closed (ERROR 0x03); a session with a
/// claim never is.
#[tokio::test]
async fn an_idle_session_older_than_io_timeout_is_shed() {
    let server =
        TestServer::start_with(ServerConfig::default().with_io_timeout(Duration::from_millis(200)))
            .await;
    let (mut idle, _) = RawV2::open(server.addr, LEASE).await;
    let (mut busy, _) = RawV2::open(server.addr, LEASE).await;
    busy.acquire(1, Mode::Wait, "keep").await;
    // Each try is a real shedding step; the first that finds the idle
    // session old enough closes it.
    eventually("the idle session is shed", || {
        server.handle.shed_for_descriptors() == 1
    })
    .await;
    assert_eq!(idle.expect_error().await, ErrorCode::IDLE_SESSION);
    assert_eq!(busy.ping().await, ServerFrame::Pong);
    server.stop().await;
}
