//! The ACL: the semantics of docs/operations.md ("The ACL") as a table,
//! and denials on the wire.

mod common;
#[path = "common/http.rs"]
mod http;
#[path = "common/pki.rs"]
mod pki;
#[path = "common/wire.rs"]
mod wire;

use std::sync::Arc;

use common::{Peer, TestServer};
use monolock_proto::ServerFrame;
use monolock_server::{
    Acl, AclFileAuthorizer, AuditLog, AuditTarget, Metrics, Observers, ServerConfig,
};
use pki::{Ca, TlsDir, client_config, connect_tls, write};

/// The example rule of docs/operations.md ("The ACL"), plus a second rule
/// to show the union.
const ACL: &str = r#"{"rules":[
  {"identity":"spiffe://prod/worker/*","locks":["nightly/*","shard-?"]},
  {"identity":"spiffe://prod/deployer","locks":["deploy/web","nightly/import"]}
]}"#;

#[test]
fn spec_semantics_as_a_table() {
    let acl = Acl::from_json(ACL).expect("valid ACL");
    let worker = "spiffe://prod/worker/1";
    let cases: &[(&str, &str, bool, &str)] = &[
        (worker, "nightly/import", true, "lock glob matches"),
        (worker, "shard-3", true, "? is one character"),
        (worker, "shard-31", false, "? is exactly one character"),
        (worker, "shard-", false, "? is not zero characters"),
        (
            worker,
            "shard-é",
            true,
            "? is one Unicode scalar, not a byte",
        ),
        (worker, "shard-é1", false, "the whole string must match"),
        (worker, "nightly/a/b/c", true, "* crosses /"),
        (worker, "nightly/", true, "* matches the empty run"),
        (worker, "nightly", false, "the / is literal"),
        (worker, "Nightly/import", false, "case-sensitive"),
        (worker, " nightly/import", false, "no trimming"),
        (worker, "deploy/web", false, "deny by default"),
        (
            "spiffe://prod/worker/eu/7",
            "shard-1",
            true,
            "identity * crosses / too",
        ),
        (
            "spiffe://prod/worker",
            "shard-1",
            false,
            "identity must match whole",
        ),
        (
            "SPIFFE://prod/worker/1",
            "shard-1",
            false,
            "identity is case-sensitive",
        ),
        ("spiffe://prod/deployer", "deploy/web", true, "second rule"),
        (
            "spiffe://prod/deployer",
            "nightly/import",
            true,
            "union of rules",
        ),
        (
            "spiffe://prod/deployer",
            "nightly/export",
            false,
            "only its own patterns",
        ),
        ("", "nightly/import", false, "no identity, no rule"),
    ];
    for &(identity, lock, allowed, why) in cases {
        assert_eq!(
            acl.allows(identity, lock),
            allowed,
            "{identity:?} on {lock:?}: {why}"
        );
    }
}

#[tokio::test]
async fn a_denied_acquire_gets_0x18_is_counted_logged_and_audited() {
    let ca = Ca::new("server CA");
    let clients = Ca::new("client CA");
    let files = TlsDir::new(&ca.server(), Some(&clients));
    let acl_path = write(files.dir.path(), "acl.json", ACL);
    let acl = Arc::new(AclFileAuthorizer::load(acl_path).expect("valid ACL"));
    let metrics = Arc::new(Metrics::new());
    let audit_path = files.path("audit.jsonl");
    let audit = Arc::new(AuditLog::open(AuditTarget::File(audit_path.clone())).expect("audit"));
    let server = TestServer::start_with(
        ServerConfig::default()
            .with_tls(files.server_tls(true))
            .with_authorizer(acl)
            .with_observer(Arc::new(Observers(vec![metrics.clone(), audit.clone()]))),
    )
    .await;
    let worker = clients.client_uri("spiffe://prod/worker/1");
    let config = client_config(&[&ca], Some(&worker));

    let mut allowed = Peer::new(
        connect_tls(server.addr, config.clone())
            .await
            .expect("mTLS"),
    );
    allowed.send(&wire::acquire("shard-3", 30_000)).await;
    assert!(matches!(allowed.recv().await, ServerFrame::Acquired { .. }));

    let mut denied = Peer::new(connect_tls(server.addr, config).await.expect("mTLS"));
    denied.send(&wire::acquire("shard-31", 30_000)).await;
    let (code, reason) = denied.expect_error_then_close().await;
    assert_eq!(code, 0x18, "{reason}");
    assert_eq!(
        reason,
        "lock \"shard-31\" is not allowed for identity \"spiffe://prod/worker/1\""
    );
    assert!(server.handle.lock("shard-31").is_none());

    let exposition = http::Exposition::parse(&metrics.render(&server.handle));
    assert_eq!(exposition.value("monolock_acl_denials_total"), 1.0);
    assert_eq!(
        exposition.value("monolock_protocol_errors_total{code=\"0x18\"}"),
        1.0
    );
    audit.flush().await;
    let text = std::fs::read_to_string(&audit_path).expect("audit file");
    let denial: serde_json::Value = text
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).expect("JSON line"))
        .find(|line| line["event"] == "denied")
        .expect("a denied event");
    assert_eq!(denial["lock"], "shard-31");
    assert_eq!(denial["identity"], "spiffe://prod/worker/1");
    assert!(denial.get("token").is_none());
    server.stop_and_drop((allowed, denied)).await;
    audit.close().await;
}
