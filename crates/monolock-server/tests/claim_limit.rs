//! `--max-claims`: the claims of every session, held and waiting, of both
//! protocol versions, are bounded. One more is refused with code 0x0a
//! (REFUSED in version 2, where the session lives on; ERROR in version 1),
//! and a claim that ends makes room again.

mod common;

use common::{Peer, TestServer, eventually};
use monolock_proto::{ErrorCode, v2::Mode, v2::ServerFrame};
use monolock_server::ServerConfig;
use monolock_testkit::v2::RawV2;

const LEASE: u32 = 30_000;

#[tokio::test]
async fn claims_over_the_server_limit_are_refused_and_sessions_live_on() {
    let server = TestServer::start_with(ServerConfig::default().with_max_claims(3)).await;
    let (mut v1_holder, _) = server.hold("one", LEASE).await;
    let (mut session, _) = RawV2::open(server.addr, LEASE).await;
    assert!(matches!(
        session.acquire(1, Mode::Wait, "two").await,
        ServerFrame::Acquired { claim: 1, .. }
    ));
    // A waiting claim counts as well.
    let (mut other, _) = RawV2::open(server.addr, LEASE).await;
    assert_eq!(
        other.acquire(7, Mode::Wait, "two").await,
        ServerFrame::Waiting { claim: 7 }
    );
    assert_eq!(server.handle.claims(), 3);

    match session.acquire(2, Mode::Wait, "three").await {
        ServerFrame::Refused {
            claim,
            code,
            reason,
        } => {
            assert_eq!(claim, 2);
            assert_eq!(code, ErrorCode::SERVER_CLAIM_LIMIT);
            assert!(reason.contains("--max-claims 3"), "{reason}");
        }
        other => panic!("expected REFUSED 0x0a, got {other:?}"),
    }
    assert_eq!(
        session.ping().await,
        ServerFrame::Pong,
        "the session lives on"
    );

    let mut v1 = Peer::connect(server.addr).await;
    v1.send(&common::acquire_bytes(1, LEASE, b"three")).await;
    let (code, reason) = v1.expect_error_then_close().await;
    assert_eq!(code, ErrorCode::SERVER_CLAIM_LIMIT.0);
    assert!(reason.contains("claim limit"), "{reason}");

    // A claim that ends makes room.
    drop(v1_holder.stream);
    eventually("the v1 claim ended", || server.handle.claims() == 2).await;
    assert!(matches!(
        session.acquire(2, Mode::Try, "three").await,
        ServerFrame::Acquired { claim: 2, .. }
    ));
    assert_eq!(session.release(2).await, ServerFrame::Released { claim: 2 });
    eventually("the released claim ended", || server.handle.claims() == 2).await;
    // A try that finds the lock busy holds no place afterwards.
    assert_eq!(
        session.acquire(3, Mode::Try, "two").await,
        ServerFrame::Busy { claim: 3 }
    );
    assert_eq!(server.handle.claims(), 2);
    v1_holder = Peer::connect(server.addr).await;
    v1_holder
        .send(&common::acquire_bytes(1, LEASE, b"again"))
        .await;
    assert!(matches!(
        v1_holder.recv().await,
        monolock_proto::ServerFrame::Acquired { .. }
    ));
    server.stop_and_drop((v1_holder, session, other)).await;
}
