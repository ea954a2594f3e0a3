//! The ops endpoint: metrics that move with the events, health that turns
//! 503 with shutdown.

mod common;
#[path = "common/http.rs"]
mod http;

use std::sync::Arc;

use common::{TestServer, acquire_bytes};
use http::{Exposition, HttpServer};
use monolock_proto::{ErrorCode, LockName, ServerFrame, msg};
use monolock_server::{Authorizer, Metrics, ReleaseReason, ServerConfig};
use tokio::net::TcpStream;

struct DenyForbidden;

impl Authorizer for DenyForbidden {
    fn allows(&self, _identity: &str, lock: &LockName) -> bool {
        lock.as_str() != "forbidden"
    }
}

async fn start() -> (TestServer, Arc<Metrics>, HttpServer) {
    let metrics = Arc::new(Metrics::new());
    let server = TestServer::start_with(
        ServerConfig::default()
            .with_observer(metrics.clone())
            .with_authorizer(Arc::new(DenyForbidden)),
    )
    .await;
    let ops = HttpServer::ops(server.handle.clone(), metrics.clone()).await;
    (server, metrics, ops)
}

fn release(reason: &str) -> String {
    format!("monolock_releases_total{{reason=\"{reason}\"}}")
}

fn protocol_error(code: &str) -> String {
    format!("monolock_protocol_errors_total{{code=\"{code}\"}}")
}

/// The change of every series between two scrapes, for the series named.
fn moved(before: &Exposition, after: &Exposition, series: &str) -> f64 {
    after.value(series) - before.value(series)
}

#[tokio::test]
async fn every_metric_exists_from_startup() {
    let (server, _metrics, ops) = start().await;
    let (status, body) = ops.get("/metrics").await;
    assert_eq!(status, 200);
    let scrape = Exposition::parse(&body);
    for (name, kind) in [
        ("monolock_connections_active", "gauge"),
        ("monolock_locks_held", "gauge"),
        ("monolock_waiters", "gauge"),
        ("monolock_acquires_total", "counter"),
        ("monolock_acl_denials_total", "counter"),
        ("monolock_releases_total", "counter"),
        ("monolock_protocol_errors_total", "counter"),
        ("monolock_connections_accepted_total", "counter"),
        ("monolock_accept_errors_total", "counter"),
        ("monolock_tls_handshake_errors_total", "counter"),
        ("monolock_heartbeats_total", "counter"),
        ("monolock_wait_seconds", "summary"),
        ("monolock_hold_seconds", "summary"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_open_fds", "gauge"),
        ("process_cpu_seconds_total", "counter"),
    ] {
        assert_eq!(
            scrape.types.get(name).map(String::as_str),
            Some(kind),
            "{name}"
        );
    }
    for reason in ReleaseReason::ALL {
        assert_eq!(scrape.value(&release(reason.as_str())), 0.0);
    }
    for code in ErrorCode::ALL {
        assert_eq!(scrape.value(&protocol_error(&code.to_string())), 0.0);
    }
    for summary in ["monolock_wait_seconds", "monolock_hold_seconds"] {
        assert_eq!(scrape.value(&format!("{summary}_count")), 0.0);
        assert_eq!(scrape.value(&format!("{summary}_sum")), 0.0);
        for q in ["0.5", "0.9", "0.99"] {
            assert!(
                scrape
                    .value(&format!("{summary}{{quantile=\"{q}\"}}"))
                    .is_nan()
            );
        }
    }
    assert!(scrape.value("process_resident_memory_bytes") > 0.0);
    assert!(scrape.value("process_open_fds") > 0.0);
    assert!(scrape.value("process_cpu_seconds_total") >= 0.0);
    ops.stop().await;
    server.stop().await;
}

#[tokio::test]
async fn counters_move_with_the_events() {
    let (server, _metrics, ops) = start().await;
    let base = ops.scrape().await;

    // A grant, heartbeats, a waiter: gauges and counters.
    let (mut holder, token) = server.hold("job", 30_000).await;
    let mut waiter = server.wait_in_line("job", 30_000).await;
    holder.send(&[msg::HEARTBEAT; 3]).await;
    for _ in 0..3 {
        assert_eq!(holder.recv().await, ServerFrame::Acquired { token });
    }
    assert_eq!(waiter.heartbeat().await, ServerFrame::Waiting);
    let now = ops.scrape().await;
    assert_eq!(moved(&base, &now, "monolock_acquires_total"), 1.0);
    assert_eq!(
        moved(&base, &now, "monolock_connections_accepted_total"),
        2.0
    );
    assert_eq!(moved(&base, &now, "monolock_heartbeats_total"), 4.0);
    assert_eq!(now.value("monolock_connections_active"), 2.0);
    assert_eq!(now.value("monolock_locks_held"), 1.0);
    assert_eq!(now.value("monolock_waiters"), 1.0);

    // Graceful release and promotion: a second grant, a hold and a wait.
    drop(holder);
    assert!(matches!(waiter.recv().await, ServerFrame::Acquired { .. }));
    let now = ops.scrape().await;
    assert_eq!(moved(&base, &now, &release("graceful")), 1.0);
    assert_eq!(moved(&base, &now, "monolock_acquires_total"), 2.0);
    assert_eq!(now.value("monolock_waiters"), 0.0);
    assert_eq!(moved(&base, &now, "monolock_hold_seconds_count"), 1.0);
    assert_eq!(moved(&base, &now, "monolock_wait_seconds_count"), 2.0);
    assert!(now.value("monolock_wait_seconds_sum") > 0.0);
    assert!(now.value("monolock_hold_seconds{quantile=\"0.5\"}") > 0.0);

    // Force release: reason force and ERROR 0x02.
    server.handle.force_release("job").expect("held");
    assert_eq!(waiter.expect_error_then_close().await.0, 0x02);
    // A protocol error by a holder: reason protocol_error and code 0x13,
    // the release coming when its (short) lease runs out.
    let (mut bad, _) = server.hold("bad", 200).await;
    bad.send(&[0x7f]).await;
    assert_eq!(bad.expect_error_then_close().await.0, 0x13);
    common::eventually("the bad holder's lease ran out", || {
        server.handle.lock("bad").is_none()
    })
    .await;
    // First-frame errors: 0x11 and 0x15, no release.
    let mut first = server.connect().await;
    first.send(&[msg::HEARTBEAT]).await;
    assert_eq!(first.expect_error_then_close().await.0, 0x11);
    let mut long = server.connect().await;
    long.send(&acquire_bytes(1, 1000, &[b'x'; 300])).await;
    assert_eq!(long.expect_error_then_close().await.0, 0x15);
    // An ACL denial: 0x18.
    let (mut denied, reply) = server.acquire("forbidden", 30_000).await;
    assert!(matches!(reply, ServerFrame::Error { code, .. } if code.0 == 0x18));
    denied.expect_eof().await;
    // An expiry.
    let (mut silent, _) = server.hold("silent", 30).await;
    silent.expect_eof().await;

    let now = ops.scrape().await;
    assert_eq!(moved(&base, &now, &release("force")), 1.0);
    assert_eq!(moved(&base, &now, &release("protocol_error")), 1.0);
    assert_eq!(moved(&base, &now, &release("expired")), 1.0);
    assert_eq!(moved(&base, &now, &protocol_error("0x02")), 1.0);
    assert_eq!(moved(&base, &now, &protocol_error("0x13")), 1.0);
    assert_eq!(moved(&base, &now, &protocol_error("0x11")), 1.0);
    assert_eq!(moved(&base, &now, &protocol_error("0x15")), 1.0);
    assert_eq!(moved(&base, &now, &protocol_error("0x18")), 1.0);
    assert_eq!(moved(&base, &now, "monolock_acl_denials_total"), 1.0);
    assert_eq!(moved(&base, &now, "monolock_acquires_total"), 4.0);
    assert_eq!(
        moved(&base, &now, "monolock_connections_accepted_total"),
        7.0
    );
    assert_eq!(moved(&base, &now, &release("shutdown")), 0.0);
    assert_eq!(now.value("monolock_locks_held"), 0.0);
    common::eventually("connections closed", || server.handle.connections() == 0).await;
    assert_eq!(ops.scrape().await.value("monolock_connections_active"), 0.0);

    // Shutdown: reason shutdown and ERROR 0x01, seen by a scrape after the
    // protocol listener is gone.
    let (_last, _) = server.hold("last", 30_000).await;
    server
        .stop_and_drop((waiter, bad, first, long, denied, silent, _last))
        .await;
    let now = ops.scrape().await;
    assert_eq!(moved(&base, &now, &release("shutdown")), 1.0);
    assert_eq!(moved(&base, &now, &protocol_error("0x01")), 1.0);
    ops.stop().await;
}

#[tokio::test]
async fn health_turns_503_at_shutdown_while_the_protocol_port_is_closed() {
    let (server, _metrics, ops) = start().await;
    for path in ["/healthz", "/readyz"] {
        assert_eq!(ops.get(path).await, (200, "ok".to_owned()));
    }
    let addr = server.addr;
    let handle = server.handle.clone();
    let (holder, _) = server.hold("held", 30_000).await;

    handle.shutdown();
    // 503 from the first moment, even before the sessions are closed.
    assert_eq!(ops.get("/healthz").await.0, 503);
    server.stop_and_drop(holder).await;
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "protocol port closed"
    );
    for path in ["/healthz", "/readyz"] {
        let (status, body) = ops.get(path).await;
        assert_eq!(status, 503, "{path}");
        assert_eq!(body, "shutting down");
    }
    // Scrapes still work during the grace period.
    assert_eq!(ops.scrape().await.value("monolock_connections_active"), 0.0);
    ops.stop().await;
}
