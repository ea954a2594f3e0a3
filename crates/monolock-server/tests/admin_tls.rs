//! HTTPS and mTLS on the admin and ops listeners, with the protocol's
//! certificate and client CA.

mod common;
#[path = "common/pki.rs"]
mod pki;

use std::{net::SocketAddr, sync::Arc};

use common::{PATIENCE, TestServer};
use monolock_server::{
    Metrics, ServerTls,
    admin::{self, AdminOptions, EffectiveConfig},
    ops,
};
use pki::{Ca, TlsDir, client_config, connect_tls};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
    time::timeout,
};
use tokio_util::sync::CancellationToken;

/// An HTTP/1.0 GET over TLS; the response, or the error that ended it.
async fn get(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    path: &str,
) -> std::io::Result<String> {
    let exchange = async {
        let mut stream = connect_tls(addr, config).await?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok(String::from_utf8_lossy(&response).into_owned())
    };
    timeout(PATIENCE, exchange)
        .await
        .expect("an answer in time")
}

#[tokio::test]
async fn admin_and_ops_listeners_require_a_client_certificate_under_mtls() {
    let ca = Ca::new("server CA");
    let clients = Ca::new("client CA");
    let files = TlsDir::new(&ca.server(), Some(&clients));
    let tls: Arc<ServerTls> = files.server_tls(true);
    let server = TestServer::start().await;
    let stop = CancellationToken::new();

    let admin_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let admin_addr = admin_listener.local_addr().expect("addr");
    let options =
        AdminOptions::new(server.handle.clone(), EffectiveConfig::default()).with_tls(tls.clone());
    let admin_task = tokio::spawn(admin::serve_with(
        admin_listener,
        options,
        stop.clone().cancelled_owned(),
    ));
    let ops_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let ops_addr = ops_listener.local_addr().expect("addr");
    let ops_task = tokio::spawn(ops::serve_tls(
        ops_listener,
        tls,
        server.handle.clone(),
        Arc::new(Metrics::new()),
        stop.clone().cancelled_owned(),
    ));

    let operator = clients.client_uri("spiffe://prod/operator");
    let with_cert = client_config(&[&ca], Some(&operator));
    let without_cert = client_config(&[&ca], None);
    let stranger = Ca::new("another CA").client_uri("spiffe://elsewhere/operator");
    let wrong_ca = client_config(&[&ca], Some(&stranger));

    for (addr, path, body) in [
        (admin_addr, "/api/info", "\"version\""),
        (ops_addr, "/healthz", "ok"),
    ] {
        let response = get(addr, with_cert.clone(), path).await.expect("served");
        assert!(response.starts_with("HTTP/1.0 200"), "{response}");
        assert!(response.contains(body), "{response}");
        for refused in [without_cert.clone(), wrong_ca.clone()] {
            let outcome = get(addr, refused, path).await;
            assert!(
                outcome.as_ref().is_err() || outcome.as_ref().is_ok_and(|r| r.is_empty()),
                "{path} answered without a valid client certificate: {outcome:?}"
            );
        }
    }
    // A client that never starts its handshake does not hold up the others.
    let _silent = tokio::net::TcpStream::connect(admin_addr)
        .await
        .expect("connect");
    let response = get(admin_addr, with_cert, "/api/info")
        .await
        .expect("served");
    assert!(response.starts_with("HTTP/1.0 200"), "{response}");

    stop.cancel();
    for task in [admin_task, ops_task] {
        timeout(PATIENCE, task)
            .await
            .expect("stops in time")
            .expect("task")
            .expect("result");
    }
    server.stop().await;
}
