//! Reloading (what SIGHUP does): TLS files, the ACL file, the audit file.
//! A reload that fails keeps the previous good state.

mod common;
#[path = "common/pki.rs"]
mod pki;
#[path = "common/wire.rs"]
mod wire;

use std::sync::Arc;

use common::{Peer, TestServer};
use monolock_proto::ServerFrame;
use monolock_server::{
    AclFileAuthorizer, AdminToken, AuditLog, AuditTarget, MAX_CONFIG_FILE_BYTES, Reloader,
    ServerConfig,
};
use pki::{Ca, TlsDir, client_config, connect_tls, server_certificate, write};

#[tokio::test]
async fn a_rotated_certificate_serves_new_connections_and_spares_open_ones() {
    let old_ca = Ca::new("old server CA");
    let new_ca = Ca::new("new server CA");
    let old_leaf = old_ca.server();
    let new_leaf = new_ca.server();
    let files = TlsDir::new(&old_leaf, None);
    let tls = files.server_tls(false);
    let reloader = Reloader::default().with_tls(tls.clone());
    let server = TestServer::start_with(ServerConfig::default().with_tls(tls)).await;
    // Clients trust both CAs, so each connection shows which one it got.
    let trust_both = client_config(&[&old_ca, &new_ca], None);

    let stream = connect_tls(server.addr, trust_both.clone())
        .await
        .expect("TLS handshake");
    assert_eq!(server_certificate(&stream), old_leaf.der);
    let mut before = Peer::new(stream);
    before.send(&wire::acquire("rotation", 30_000)).await;
    let ServerFrame::Acquired { token } = before.recv().await else {
        panic!("expected ACQUIRED");
    };

    files.rotate(&new_leaf);
    let report = reloader.reload().await;
    assert!(report.is_ok(), "{:?}", report.errors());

    let after = connect_tls(server.addr, trust_both.clone())
        .await
        .expect("TLS handshake");
    assert_eq!(server_certificate(&after), new_leaf.der);
    // A client that only trusts the old CA can no longer connect.
    assert!(
        connect_tls(server.addr, client_config(&[&old_ca], None))
            .await
            .is_err()
    );
    // The session opened before the rotation is untouched.
    assert_eq!(before.heartbeat().await, ServerFrame::Acquired { token });

    // Broken files on the next reload: the new certificate stays in force.
    write(files.dir.path(), "server.pem", "not a certificate");
    let report = reloader.reload().await;
    let errors = report.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("server.pem"), "{errors:?}");
    let still = connect_tls(server.addr, trust_both)
        .await
        .expect("TLS handshake");
    assert_eq!(server_certificate(&still), new_leaf.der);
    server.stop_and_drop(before).await;
}

#[tokio::test]
async fn a_broken_acl_file_on_reload_keeps_the_previous_rules() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write(
        dir.path(),
        "acl.json",
        r#"{"rules":[{"identity":"*","locks":["allowed/*"]}]}"#,
    );
    let acl = Arc::new(AclFileAuthorizer::load(&path).expect("valid ACL"));
    let reloader = Reloader::default().with_acl(acl.clone());
    let server = TestServer::start_with(ServerConfig::default().with_authorizer(acl.clone())).await;
    let try_lock = |name: &'static str| {
        let server = &server;
        async move {
            let (_peer, reply) = server.acquire(name, 30_000).await;
            reply
        }
    };
    assert!(matches!(
        try_lock("allowed/a").await,
        ServerFrame::Acquired { .. }
    ));

    for broken in [
        "{not json",
        r#"{"rules":[{"locks":["*"]}]}"#,
        r#"{"rules":[{"identity":"*","locks":[]}]}"#,
    ] {
        write(dir.path(), "acl.json", broken);
        let report = reloader.reload().await;
        let errors = report.errors();
        assert_eq!(errors.len(), 1, "{broken}: {errors:?}");
        assert!(
            errors[0].starts_with(&format!("ACL file {}", path.display())),
            "{errors:?}"
        );
        // The old rules still decide.
        assert!(matches!(
            try_lock("allowed/b").await,
            ServerFrame::Acquired { .. }
        ));
        assert!(matches!(
            try_lock("other").await,
            ServerFrame::Error { code, .. } if code.0 == 0x18
        ));
    }

    // A good file applies at once.
    write(
        dir.path(),
        "acl.json",
        r#"{"rules":[{"identity":"*","locks":["other"]}]}"#,
    );
    let report = reloader.reload().await;
    assert!(matches!(report.acl, Some(Ok(1))), "{report:?}");
    assert!(matches!(
        try_lock("other").await,
        ServerFrame::Acquired { .. }
    ));
    assert!(matches!(
        try_lock("allowed/c").await,
        ServerFrame::Error { code, .. } if code.0 == 0x18
    ));
    server.stop().await;
}

#[tokio::test]
async fn the_audit_file_reopens_after_a_rename() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("audit.jsonl");
    let rotated = dir.path().join("audit.jsonl.1");
    let audit = Arc::new(AuditLog::open(AuditTarget::File(path.clone())).expect("audit"));
    let reloader = Reloader::default().with_audit(audit.clone());
    let server = TestServer::start_with(ServerConfig::default().with_observer(audit.clone())).await;

    let (peer, _) = server.hold("before", 30_000).await;
    drop(peer);
    common::eventually("released", || server.handle.counts().locks == 0).await;

    // logrotate: rename, then SIGHUP.
    std::fs::rename(&path, &rotated).expect("rename");
    let report = reloader.reload().await;
    assert!(report.is_ok(), "{:?}", report.errors());

    let (peer, _) = server.hold("after", 30_000).await;
    drop(peer);
    common::eventually("released", || server.handle.counts().locks == 0).await;
    audit.flush().await;

    let locks_in = |file: &std::path::Path| -> Vec<String> {
        std::fs::read_to_string(file)
            .expect("audit file")
            .lines()
            .map(|line| {
                let value: serde_json::Value = serde_json::from_str(line).expect("JSON");
                format!(
                    "{} {}",
                    value["event"].as_str().unwrap(),
                    value["lock"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(locks_in(&rotated), ["granted before", "released before"]);
    assert_eq!(locks_in(&path), ["granted after", "released after"]);

    // A reopen that fails keeps writing to the handle it has.
    std::fs::remove_file(&path).expect("remove");
    std::fs::create_dir(&path).expect("a directory where the file was");
    let report = reloader.reload().await;
    let errors = report.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].starts_with("cannot open audit log"), "{errors:?}");
    let (peer, _) = server.hold("later", 30_000).await;
    drop(peer);
    common::eventually("released", || server.handle.counts().locks == 0).await;
    audit.flush().await;
    assert_eq!(audit.write_errors(), 0, "the old handle still takes writes");
    server.stop().await;
    audit.close().await;
}

/// Files over the 1 MiB bound (here valid content padded with spaces, which
/// would parse) are refused on reload with one line naming the file and the
/// bound, and every part keeps the state it had: the ACL's rules, the admin
/// token, the TLS certificate.
#[tokio::test]
async fn files_over_the_bound_on_reload_keep_the_previous_state() {
    let ca = Ca::new("server CA");
    let (old_leaf, new_leaf) = (ca.server(), ca.server());
    let files = TlsDir::new(&old_leaf, None);
    let tls = files.server_tls(false);
    let dir = files.dir.path();
    let acl_path = write(
        dir,
        "acl.json",
        r#"{"rules":[{"identity":"*","locks":["a/*"]}]}"#,
    );
    let token_path = write(dir, "token", "first-token");
    let acl = Arc::new(AclFileAuthorizer::load(&acl_path).expect("valid ACL"));
    let token = Arc::new(AdminToken::load(&token_path).expect("valid token"));
    let reloader = Reloader::default()
        .with_tls(tls.clone())
        .with_acl(acl.clone())
        .with_admin_token(token.clone());
    let server = TestServer::start_with(ServerConfig::default().with_tls(tls)).await;

    let padded = |text: &str| format!("{text}{}", " ".repeat(MAX_CONFIG_FILE_BYTES as usize));
    write(
        dir,
        "acl.json",
        &padded(r#"{"rules":[{"identity":"*","locks":["*"]}]}"#),
    );
    write(dir, "token", &padded("second-token"));
    files.rotate(&new_leaf);
    let cert = std::fs::read_to_string(&files.cert).expect("cert");
    write(dir, "server.pem", &padded(&cert));

    let report = reloader.reload().await;
    let errors = report.errors();
    assert_eq!(errors.len(), 3, "{errors:?}");
    for (error, file) in errors.iter().zip([&files.cert, &acl_path, &token_path]) {
        assert!(error.contains(&file.display().to_string()), "{error}");
        assert!(
            error.contains("larger than 1 MiB (1048576 bytes)"),
            "{error}"
        );
        assert!(!error.contains('\n'), "{error}");
    }
    assert_eq!(acl.current().rules().len(), 1);
    assert!(!acl.current().allows("anyone", "b/1"), "the old rules");
    assert!(token.check(Some(b"Bearer first-token")), "the old token");
    let stream = connect_tls(server.addr, client_config(&[&ca], None))
        .await
        .expect("TLS handshake");
    assert_eq!(
        server_certificate(&stream),
        old_leaf.der,
        "the old certificate"
    );
    server.stop().await;
}
