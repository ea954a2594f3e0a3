//! The whole service in-process: its listeners and its shutdown order
//! (readiness 503, ERROR 0x01 to every session, admin stop, audit close,
//! ops grace), with no child process.

mod common;
#[path = "common/http.rs"]
mod http;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use common::{PATIENCE, Peer, acquire_bytes};
use http::request;
use hyper::Method;
use monolock_proto::ServerFrame;
use monolock_server::{AuditLog, AuditTarget, Listeners, Metrics, ServerConfig, Service};
use tokio::{net::TcpListener, sync::oneshot, time::timeout};

async fn bind() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    (listener, addr)
}

/// Waits for `Service::run` to return, and checks it returned Ok.
async fn stops_cleanly(running: tokio::task::JoinHandle<std::io::Result<()>>) {
    timeout(PATIENCE, running)
        .await
        .expect("stops in time")
        .expect("task")
        .expect("clean shutdown");
}

#[tokio::test]
async fn shutdown_goes_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    let audit = Arc::new(AuditLog::open(AuditTarget::File(path.clone())).expect("audit"));
    let (protocol, addr) = bind().await;
    let (ops, ops_addr) = bind().await;
    let (admin, admin_addr) = bind().await;
    // A grace far longer than the test, to look at the ops endpoint in it.
    let service = Service::builder(ServerConfig::default())
        .with_metrics(Arc::new(Metrics::new()))
        .with_audit(audit.clone())
        .with_ops_grace(Duration::from_secs(3_600))
        .build();
    let handle = service.handle();
    let (stop, stopped) = oneshot::channel::<()>();
    let listeners = Listeners {
        protocol,
        ops: Some(ops),
        admin: Some(admin),
    };
    let running = tokio::spawn(service.run(listeners, async {
        let _ = stopped.await;
    }));

    let mut holder = Peer::connect(addr).await;
    holder.send(&acquire_bytes(1, 10_000, b"order")).await;
    assert!(matches!(holder.recv().await, ServerFrame::Acquired { .. }));
    // The handle taken before `run` is the running server's: it sees the lock.
    assert_eq!(handle.counts().locks, 1);
    assert_eq!(request(ops_addr, Method::GET, "/readyz").await.0, 200);
    let (status, info) = request(admin_addr, Method::GET, "/api/info").await;
    assert_eq!(status, 200);
    let info: serde_json::Value = serde_json::from_str(&info).expect("JSON");
    assert_eq!(info["config"]["listen"], addr.to_string());
    assert_eq!(info["config"]["admin_listen"], admin_addr.to_string());

    stop.send(()).expect("running");
    // Every session is told, then closed.
    assert_eq!(holder.expect_error_then_close().await.0, 0x01);
    assert!(handle.is_shutting_down());
    // The audit log is closed once the sessions are gone and the admin API
    // has stopped...
    common::eventually("the audit log closes", || audit.is_closed()).await;
    assert!(
        tokio::net::TcpStream::connect(admin_addr).await.is_err(),
        "the admin API stopped before the audit log closed"
    );
    common::eventually("the shutdown is audited", || {
        std::fs::read_to_string(&path).is_ok_and(|lines| lines.contains("\"reason\":\"shutdown\""))
    })
    .await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    // ...while the ops endpoint still answers, not ready, for its grace.
    assert_eq!(request(ops_addr, Method::GET, "/readyz").await.0, 503);
    assert!(!running.is_finished());
    running.abort();
}

#[tokio::test]
async fn run_returns_after_the_grace() {
    let (protocol, addr) = bind().await;
    let (ops, ops_addr) = bind().await;
    let service = Service::builder(ServerConfig::default())
        .with_metrics(Arc::new(Metrics::new()))
        .with_ops_grace(Duration::ZERO)
        .build();
    let listeners = Listeners {
        protocol,
        ops: Some(ops),
        admin: None,
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let running = tokio::spawn(service.run(listeners, async {
        let _ = stopped.await;
    }));
    let mut holder = Peer::connect(addr).await;
    holder.send(&acquire_bytes(1, 10_000, b"grace")).await;
    holder.recv().await;
    stop.send(()).expect("running");
    stops_cleanly(running).await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    assert!(tokio::net::TcpStream::connect(ops_addr).await.is_err());
}

#[tokio::test]
async fn an_ops_listener_needs_metrics() {
    let (protocol, _) = bind().await;
    let (ops, _) = bind().await;
    let listeners = Listeners {
        protocol,
        ops: Some(ops),
        admin: None,
    };
    let err = Service::builder(ServerConfig::default())
        .build()
        .run(listeners, std::future::pending())
        .await
        .expect_err("refused");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
}

/// `GET path` over a blocking socket, on a thread of its own: the whole
/// response.
fn get_on_a_thread(addr: SocketAddr, path: &'static str) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("request");
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        let _ = tx.send(response);
    });
    rx
}

/// The admin API runs on a thread of its own: it answers while every
/// worker of the protocol's runtime is busy (here the only one, held by
/// this test), and its work never takes one of them.
#[tokio::test(flavor = "current_thread")]
async fn the_admin_api_answers_while_the_protocol_runtime_is_busy() {
    let (protocol, addr) = bind().await;
    let (admin, admin_addr) = bind().await;
    let listeners = Listeners {
        protocol,
        ops: None,
        admin: Some(admin),
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let service = Service::builder(ServerConfig::default()).build();
    let running = tokio::spawn(service.run(listeners, async {
        let _ = stopped.await;
    }));
    let mut holder = Peer::connect(addr).await;
    holder
        .send(&acquire_bytes(1, 10_000, b"busy/runtime"))
        .await;
    assert!(matches!(holder.recv().await, ServerFrame::Acquired { .. }));

    let response = get_on_a_thread(admin_addr, "/api/locks");
    // Holds the runtime's only thread: nothing scheduled on it can run
    // until the answer has come.
    let response = response
        .recv_timeout(PATIENCE)
        .expect("the admin API answered");
    assert!(response.starts_with("HTTP/1.0 200"), "{response}");
    assert!(response.contains("\"busy/runtime\""), "{response}");

    stop.send(()).expect("running");
    stops_cleanly(running).await;
}

/// The built service's reloader covers exactly the reloadable parts it was
/// built with: the audit log here, and no TLS, ACL or admin token.
#[tokio::test]
async fn the_reloader_covers_the_parts_the_service_was_built_with() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    let audit = Arc::new(AuditLog::open(AuditTarget::File(path.clone())).expect("audit"));
    let service = Service::builder(ServerConfig::default())
        .with_audit(audit.clone())
        .build();
    std::fs::remove_file(&path).expect("rotate the audit file away");
    let report = service.reloader().reload().await;
    assert!(report.is_ok(), "{:?}", report.errors());
    assert!(matches!(report.audit, Some(Ok(()))));
    assert!(report.tls.is_none() && report.acl.is_none() && report.admin_token.is_none());
    // Reopening created the file anew at its path.
    assert!(path.exists(), "the audit log was reopened");
    audit.close().await;
}
