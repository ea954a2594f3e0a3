//! Protocol v2 claims on the operations side, over real sockets: the
//! audit log, the live event stream, `/api/locks`, `/api/sessions`, a
//! force-release and a kick that end one claim only, and the metrics by
//! protocol (docs/operations.md, "Protocol v2 on the operations side").

mod common;
#[path = "common/http.rs"]
mod http;
#[path = "common/sse.rs"]
mod sse;

use std::{collections::BTreeSet, sync::Arc};

use common::{TestServer, eventually};
use http::{Exposition, HttpServer};
use monolock_proto::LockName;
use monolock_proto::{
    ErrorCode,
    v2::{Mode, ServerFrame},
};
use monolock_server::{
    AuditLog, AuditTarget, Authorizer, EventHub, Metrics, Observers, ServerConfig,
    admin::{AdminOptions, EffectiveConfig},
};
use monolock_testkit::v2::RawV2;
use serde_json::Value;
use sse::SseClient;

const LEASE: u32 = 30_000;

fn keys(value: &Value) -> BTreeSet<&str> {
    value
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect()
}

/// The three fields a v2 claim adds, or none of them for v1.
fn assert_claim(value: &Value, expected: Option<(u64, u32)>) {
    match expected {
        Some((session, claim)) => {
            assert_eq!(value["protocol"], 2, "{value}");
            assert_eq!(value["session"], session, "{value}");
            assert_eq!(value["claim"], claim, "{value}");
        }
        None => {
            for key in ["protocol", "session", "claim"] {
                assert!(value.get(key).is_none(), "{key} on a v1 record: {value}");
            }
        }
    }
}

/// Denies any lock whose name starts with `forbidden`.
struct DenyForbidden;

impl Authorizer for DenyForbidden {
    fn allows(&self, _identity: &str, lock: &LockName) -> bool {
        !lock.as_str().starts_with("forbidden")
    }
}

/// The next event named `name` about `lock`, skipping others.
async fn next_about(events: &mut SseClient, name: &str, lock: &str) -> Value {
    loop {
        let event = events.next_event().await;
        let data = event.json();
        if event.name.as_deref() == Some(name) && data["lock"] == lock {
            return data;
        }
    }
}

#[tokio::test]
async fn a_v2_claim_is_named_by_session_and_claim_everywhere_and_ends_alone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("audit.jsonl");
    let audit = Arc::new(AuditLog::open(AuditTarget::File(path.clone())).expect("audit"));
    let hub = Arc::new(EventHub::new().expect("hub"));
    let metrics = Arc::new(Metrics::new());
    let server = TestServer::start_with(
        ServerConfig::default()
            .with_observer(Arc::new(Observers(vec![
                audit.clone(),
                hub.clone(),
                metrics.clone(),
            ])))
            .with_authorizer(Arc::new(DenyForbidden)),
    )
    .await;
    let effective = EffectiveConfig {
        listen: server.addr.to_string(),
        ..EffectiveConfig::default()
    };
    let admin = HttpServer::admin_with(
        AdminOptions::new(server.handle.clone(), effective).with_events(hub.clone()),
    )
    .await;
    let mut events = SseClient::open_path(admin.addr, "/api/events", None).await;
    assert_eq!(events.next_event().await.name.as_deref(), Some("snapshot"));

    // A v1 holder, a v2 holder (session a, claim 3) and two claims of one
    // v2 session b queued on the same lock from the same address.
    let (v1, _) = server.hold("v1/lock", LEASE).await;
    let (mut a, opened_a) = RawV2::open(server.addr, LEASE).await;
    let (mut b, opened_b) = RawV2::open(server.addr, LEASE).await;
    let (sa, sb) = (opened_a.session, opened_b.session);
    assert!(matches!(
        a.acquire(3, Mode::Wait, "shared").await,
        ServerFrame::Acquired { claim: 3, .. }
    ));
    for claim in [9, 10] {
        assert_eq!(
            b.acquire(claim, Mode::Wait, "shared").await,
            ServerFrame::Waiting { claim }
        );
    }

    assert!(matches!(
        b.acquire(11, Mode::Wait, "forbidden/x").await,
        ServerFrame::Refused {
            claim: 11,
            code: ErrorCode::CLAIM_NOT_AUTHORIZED,
            ..
        }
    ));

    let granted = next_about(&mut events, "granted", "v1/lock").await;
    assert_claim(&granted, None);
    let granted = next_about(&mut events, "granted", "shared").await;
    assert_claim(&granted, Some((sa, 3)));
    let queued = next_about(&mut events, "queued", "shared").await;
    assert_claim(&queued, Some((sb, 9)));

    // /api/locks: v2 holders and waiters carry the three fields, v1 none.
    let list = admin.get_json("/api/locks", 200).await;
    let locks = list["locks"].as_array().expect("locks");
    let v1_lock = locks.iter().find(|l| l["name"] == "v1/lock").expect("v1");
    assert_eq!(
        keys(&v1_lock["holder"]),
        BTreeSet::from([
            "identity",
            "remote_addr",
            "since",
            "lease_ms",
            "token",
            "value"
        ])
    );
    let shared = admin.get_json("/api/locks/shared", 200).await;
    assert_claim(&shared["holder"], Some((sa, 3)));
    let waiters = shared["waiters"].as_array().expect("waiters");
    assert_eq!(waiters.len(), 2);
    assert_claim(&waiters[0], Some((sb, 9)));
    assert_claim(&waiters[1], Some((sb, 10)));
    let b_addr = waiters[1]["remote_addr"].as_str().expect("addr").to_owned();
    assert_eq!(waiters[0]["remote_addr"], b_addr.as_str());

    // /api/sessions: both sessions, with their claims counted.
    let sessions = admin.get_json("/api/sessions", 200).await;
    let sessions = sessions["sessions"].as_array().expect("sessions");
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    assert_eq!(
        keys(&sessions[0]),
        BTreeSet::from([
            "session",
            "remote_addr",
            "identity",
            "lease_ms",
            "opened_at",
            "held",
            "waiting",
            "claims",
            "watches"
        ])
    );
    let by_id = |id: u64| {
        sessions
            .iter()
            .find(|s| s["session"] == id)
            .unwrap_or_else(|| panic!("session {id} in {sessions:?}"))
    };
    assert_eq!(
        (by_id(sa)["held"].clone(), by_id(sa)["waiting"].clone()),
        (1.into(), 0.into())
    );
    assert_eq!(
        (by_id(sb)["held"].clone(), by_id(sb)["waiting"].clone()),
        (0.into(), 2.into())
    );
    // Each claim listed with its lock, state and value.
    let claims: Vec<(u64, String)> = by_id(sb)["claims"]
        .as_array()
        .expect("claims")
        .iter()
        .map(|c| {
            assert_eq!(c["state"], "waiting");
            assert_eq!(c["value"], "");
            (c["claim"].as_u64().expect("id"), c["lock"].to_string())
        })
        .collect();
    assert_eq!(
        claims,
        [(9, "\"shared\"".to_owned()), (10, "\"shared\"".to_owned())]
    );
    assert_eq!(by_id(sb)["remote_addr"], b_addr.as_str());
    assert_eq!(by_id(sb)["lease_ms"], LEASE);
    let info = admin.get_json("/api/info", 200).await;
    assert_eq!(info["v2_sessions"], 2, "{info}");
    assert_eq!(info["sessions"], 4, "claims count as sessions: {info}");

    // A kick naming claim 10 ends that claim only: claim 9 keeps its place.
    let (status, body) = admin
        .delete(&format!("/api/locks/shared/waiters/{b_addr}?claim=10"))
        .await;
    assert_eq!(status, 200, "{body}");
    let kicked: Value = serde_json::from_str(&body).expect("JSON");
    assert_claim(&kicked, Some((sb, 10)));
    match b.recv().await {
        ServerFrame::Revoked {
            claim: 10, code, ..
        } => assert_eq!(code, ErrorCode::CLAIM_REVOKED),
        other => panic!("expected REVOKED for claim 10, got {other:?}"),
    }
    assert_eq!(b.ping().await, ServerFrame::Pong);
    let shared = admin.get_json("/api/locks/shared", 200).await;
    let left: Vec<&Value> = shared["waiters"]
        .as_array()
        .expect("waiters")
        .iter()
        .collect();
    assert_eq!(left.len(), 1);
    assert_claim(left[0], Some((sb, 9)));
    let (status, body) = admin
        .delete(&format!("/api/locks/shared/waiters/{b_addr}?claim=10"))
        .await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("claim 10"), "{body}");

    // A force-release of claim 3 ends that claim only; claim 9 is pushed
    // the lock and session a lives on.
    let (status, body) = admin.post("/api/locks/shared/release").await;
    assert_eq!(status, 200, "{body}");
    let released: Value = serde_json::from_str(&body).expect("JSON");
    assert_claim(&released, Some((sa, 3)));
    assert!(matches!(
        a.recv().await,
        ServerFrame::Revoked { claim: 3, .. }
    ));
    assert!(matches!(
        b.recv().await,
        ServerFrame::Granted { claim: 9, .. }
    ));
    assert_eq!(a.ping().await, ServerFrame::Pong);
    assert_eq!(server.handle.sessions_v2(), 2);

    // Metrics by protocol.
    let scrape = Exposition::parse(&metrics.render(&server.handle));
    assert_eq!(scrape.value("monolock_grants_total{protocol=\"1\"}"), 1.0);
    assert_eq!(scrape.value("monolock_grants_total{protocol=\"2\"}"), 2.0);
    assert_eq!(scrape.value("monolock_acquires_total"), 3.0);
    assert_eq!(
        scrape.value("monolock_sessions_opened_total{protocol=\"1\"}"),
        1.0
    );
    assert_eq!(
        scrape.value("monolock_sessions_opened_total{protocol=\"2\"}"),
        2.0
    );
    assert_eq!(
        scrape.value("monolock_releases_by_protocol_total{protocol=\"2\",reason=\"force\"}"),
        1.0
    );
    assert_eq!(
        scrape.value("monolock_releases_by_protocol_total{protocol=\"1\",reason=\"force\"}"),
        0.0
    );
    assert_eq!(
        scrape.value("monolock_releases_total{reason=\"force\"}"),
        1.0
    );
    assert_eq!(scrape.value("monolock_v2_claims_held"), 1.0);
    assert_eq!(scrape.value("monolock_v2_claims_waiting"), 0.0);
    assert_eq!(scrape.value("monolock_v2_sessions_active"), 2.0);

    // b's session ends: its claim is released, and the gauges follow.
    drop(b);
    eventually("b's claim released", || {
        server.handle.lock("shared").is_none()
    })
    .await;
    // A claim that leaves its queue with its session counts out too.
    let (mut c, _) = RawV2::open(server.addr, LEASE).await;
    assert_eq!(
        c.acquire(1, Mode::Wait, "v1/lock").await,
        ServerFrame::Waiting { claim: 1 }
    );
    let scrape = Exposition::parse(&metrics.render(&server.handle));
    assert_eq!(scrape.value("monolock_v2_claims_waiting"), 1.0);
    drop(c);
    eventually("c's claim left the queue", || {
        server.waiters("v1/lock") == 0
    })
    .await;
    let scrape = Exposition::parse(&metrics.render(&server.handle));
    assert_eq!(scrape.value("monolock_v2_claims_waiting"), 0.0);
    assert_eq!(scrape.value("monolock_v2_claims_held"), 0.0);
    assert_eq!(
        scrape.value("monolock_releases_by_protocol_total{protocol=\"2\",reason=\"graceful\"}"),
        1.0
    );

    admin.stop().await;
    server.stop_and_drop((v1, a)).await;
    audit.close().await;

    // The audit log: the same fields on every line of a v2 claim, none on
    // a v1 line.
    let lines: Vec<Value> = std::fs::read_to_string(&path)
        .expect("audit file")
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|err| panic!("{err}: {line}")))
        .collect();
    let find = |event: &str, lock: &str| -> Vec<&Value> {
        lines
            .iter()
            .filter(|l| l["event"] == event && l["lock"] == lock)
            .collect()
    };
    let v1_granted = find("granted", "v1/lock");
    assert_eq!(
        keys(v1_granted[0]),
        BTreeSet::from([
            "time",
            "event",
            "lock",
            "identity",
            "remote_addr",
            "token",
            "wait_ms",
            "lease_ms"
        ])
    );
    let granted = find("granted", "shared");
    assert_eq!(granted.len(), 2, "{lines:?}");
    assert_claim(granted[0], Some((sa, 3)));
    assert_claim(granted[1], Some((sb, 9)));
    assert_claim(find("kick_waiter", "shared")[0], Some((sb, 10)));
    assert_claim(find("denied", "forbidden/x")[0], Some((sb, 11)));
    assert_claim(find("force_release", "shared")[0], Some((sa, 3)));
    let released = find("released", "shared");
    assert_eq!(released.len(), 2, "{lines:?}");
    assert_claim(released[0], Some((sa, 3)));
    assert_eq!(released[0]["reason"], "force");
    assert_claim(released[1], Some((sb, 9)));
    assert_eq!(released[1]["reason"], "graceful");
}

/// A kick without `claim` takes the first waiter at the address (as for
/// v1); a `claim` that is not a number is a 400 that changes nothing.
#[tokio::test]
async fn a_kick_without_a_claim_takes_the_first_in_line_and_a_bad_claim_is_refused() {
    let server = TestServer::start().await;
    let admin = HttpServer::admin(server.handle.clone(), EffectiveConfig::default()).await;
    let (holder, _) = server.hold("q", LEASE).await;
    let (mut b, _) = RawV2::open(server.addr, LEASE).await;
    for claim in [1, 2] {
        assert_eq!(
            b.acquire(claim, Mode::Wait, "q").await,
            ServerFrame::Waiting { claim }
        );
    }
    let addr = server.handle.lock("q").expect("held").waiters[0].remote_addr;
    let (status, body) = admin
        .delete(&format!("/api/locks/q/waiters/{addr}?claim=first"))
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(server.waiters("q"), 2);
    let (status, body) = admin.delete(&format!("/api/locks/q/waiters/{addr}")).await;
    assert_eq!(status, 200, "{body}");
    assert!(matches!(
        b.recv().await,
        ServerFrame::Revoked { claim: 1, .. }
    ));
    let left = server.handle.lock("q").expect("held").waiters;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].claim.map(|c| c.claim), Some(2));
    admin.stop().await;
    server.stop_and_drop((holder, b)).await;
}
