//! Protocol v2 over mTLS: the connection's identity is checked per claim,
//! and a session's claims and pushes pass through TLS as over TCP.

mod common;

use std::{sync::Arc, time::Instant};

use common::TestServer;
use monolock_proto::{
    ErrorCode, LockName,
    v2::{self, Mode, ServerFrame},
};
use monolock_server::{Authorizer, ServerConfig};
use monolock_testkit::{
    pki::{Ca, TlsDir, client_config, connect_tls},
    v2::RawV2,
};

/// Allows `spiffe://test/worker` on `jobs/...` only.
struct WorkerJobs;

impl Authorizer for WorkerJobs {
    fn allows(&self, identity: &str, lock: &LockName) -> bool {
        identity == "spiffe://test/worker" && lock.as_str().starts_with("jobs/")
    }
}

#[tokio::test]
async fn claims_over_mtls_are_authorized_by_the_connection_identity() {
    let ca = Ca::new("v2 test CA");
    let tls = TlsDir::new(&ca.server(), Some(&ca));
    let server = TestServer::start_with(
        ServerConfig::default()
            .with_tls(tls.server_tls(true))
            .with_authorizer(Arc::new(WorkerJobs)),
    )
    .await;
    let worker = ca.client_uri("spiffe://test/worker");
    let stream = connect_tls(server.addr, client_config(&[&ca], Some(&worker)))
        .await
        .expect("mTLS handshake");
    let mut a = RawV2::over(stream);
    a.open_session(30_000).await;
    assert!(matches!(
        a.acquire(1, Mode::Wait, "jobs/1").await,
        ServerFrame::Acquired { claim: 1, .. }
    ));
    assert!(matches!(
        a.acquire(2, Mode::Wait, "other").await,
        ServerFrame::Refused {
            claim: 2,
            code: ErrorCode::CLAIM_NOT_AUTHORIZED,
            ..
        }
    ));
    assert_eq!(
        server
            .handle
            .lock("jobs/1")
            .map(|l| l.holder.identity.to_string()),
        Some("spiffe://test/worker".to_owned())
    );
    // Cycles with the RELEASE and the next ACQUIRE in one write.
    let started = Instant::now();
    for _ in 0..200 {
        let mut bytes = v2::release_frame(1).to_vec();
        v2::ClientFrame::Acquire {
            claim: 1,
            mode: Mode::Wait,
            name: LockName::new("jobs/1").expect("name"),
        }
        .encode(&mut bytes);
        a.send_raw(&bytes).await;
        assert_eq!(a.recv().await, ServerFrame::Released { claim: 1 });
        assert!(matches!(
            a.recv().await,
            ServerFrame::Acquired { claim: 1, .. }
        ));
    }
    eprintln!("200 v2 cycles over mTLS in {:?}", started.elapsed());
    server.stop().await;
}
