//! What a web page in the operator's browser can send the admin and ops
//! listeners, byte for byte over real sockets: a cross-site form post, a
//! DNS-rebinding `Host`, a preflight. Each is refused and changes nothing;
//! the requests of the CLI and of the dashboard still work.

mod common;
#[path = "common/http.rs"]
mod http;

use std::{net::SocketAddr, sync::Arc};

use common::{PATIENCE, TestServer};
use http::HttpServer;
use monolock_proto::ServerFrame;
use monolock_server::{
    AllowedHosts, Metrics,
    admin::{AdminOptions, EffectiveConfig},
};
use serde_json::Value;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    time::timeout,
};

/// An answer read whole: the status, the head (lower-cased) and the body.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|err| panic!("not JSON ({err}): {}", self.body))
    }

    /// The `{"error": ...}` line, asserting there is one.
    fn error(&self) -> String {
        let error = self.json()["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error in {}", self.body))
            .to_owned();
        assert!(!error.contains('\n'), "one line: {error:?}");
        error
    }

    fn has_cors_grant(&self) -> bool {
        self.head.contains("access-control-allow")
    }
}

/// Sends `head` (request line and headers, without the blank line) and a
/// `Connection: close`, then reads the whole answer.
async fn raw(addr: SocketAddr, head: &str) -> Answer {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let request = format!("{head}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("send");
        let mut bytes = Vec::new();
        stream.read_to_end(&mut bytes).await.expect("read");
        let text = String::from_utf8(bytes).expect("UTF-8 answer");
        let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("no status in {head:?}"));
        Answer {
            status,
            head: head.to_ascii_lowercase(),
            body: body.to_owned(),
        }
    };
    timeout(PATIENCE, exchange)
        .await
        .expect("an answer in time")
}

/// The cross-site form post of a hostile page: no preflight needed.
fn form_post(path: &str, host: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nOrigin: http://evil.example\r\n\
         Sec-Fetch-Site: cross-site\r\nContent-Type: text/plain"
    )
}

async fn admin(server: &TestServer) -> HttpServer {
    admin_with(AdminOptions::new(
        server.handle.clone(),
        EffectiveConfig::default(),
    ))
    .await
}

/// The admin listener with an event stream. (The hub is no observer of the
/// server: the stream's snapshot is all these tests read.)
async fn admin_with(options: AdminOptions) -> HttpServer {
    let events = monolock_server::EventHub::new().expect("event hub");
    HttpServer::admin_with(options.with_events(Arc::new(events))).await
}

/// The holder still holds `name` with `token`: the API lists it, and the
/// holder's heartbeat is answered ACQUIRED (no ERROR came first).
async fn still_held(
    admin: &HttpServer,
    holder: &mut common::Peer<TcpStream>,
    name: &str,
    token: u64,
) {
    let lock = admin.get_json(&format!("/api/locks/{name}"), 200).await;
    assert_eq!(lock["holder"]["token"], token, "{lock}");
    assert_eq!(holder.heartbeat().await, ServerFrame::Acquired { token });
}

#[tokio::test]
async fn a_cross_site_form_post_is_refused_and_the_holder_keeps_the_lock() {
    let server = TestServer::start().await;
    let admin = admin(&server).await;
    let (mut holder, token) = server.hold("deploy", 30_000).await;
    let waiter = server.wait_in_line("deploy", 30_000).await;
    let host = admin.addr.to_string();

    let answer = raw(admin.addr, &form_post("/api/locks/deploy/release", &host)).await;
    assert_eq!(answer.status, 403, "{}", answer.body);
    let error = answer.error();
    assert!(error.contains("cross-site"), "{error}");
    assert!(!answer.has_cors_grant(), "{}", answer.head);
    still_held(&admin, &mut holder, "deploy", token).await;

    // The same with only one of the two signs, and with the other
    // cross-site marks a browser sends.
    for (marks, what) in [
        ("Origin: http://evil.example", "origin"),
        ("Sec-Fetch-Site: cross-site", "cross-site"),
        ("Sec-Fetch-Site: same-site", "same-site"),
        ("Origin: null", "origin"),
        (
            "Origin: http://evil.example\r\nSec-Fetch-Site: same-origin",
            "origin",
        ),
    ] {
        let head = format!(
            "POST /api/locks/deploy/release HTTP/1.1\r\nHost: {host}\r\n{marks}\r\n\
             X-Requested-By: monolock"
        );
        let answer = raw(admin.addr, &head).await;
        assert_eq!(answer.status, 403, "{marks}: {}", answer.body);
        let error = answer.error();
        assert!(error.contains(what), "{marks}: {error}");
    }
    // A kick is refused alike.
    let waiter_addr = waiter.local_addr();
    let answer = raw(
        admin.addr,
        &format!(
            "DELETE /api/locks/deploy/waiters/{waiter_addr} HTTP/1.1\r\nHost: {host}\r\n\
             Origin: http://evil.example\r\nSec-Fetch-Site: cross-site"
        ),
    )
    .await;
    assert_eq!(answer.status, 403, "{}", answer.body);
    let lock = admin.get_json("/api/locks/deploy", 200).await;
    assert_eq!(lock["waiters"].as_array().map(Vec::len), Some(1), "{lock}");
    still_held(&admin, &mut holder, "deploy", token).await;
    admin.stop().await;
    server.stop_and_drop((holder, waiter)).await;
}

#[tokio::test]
async fn a_change_needs_a_header_no_page_can_send_cross_site_without_asking() {
    let server = TestServer::start().await;
    let admin = admin(&server).await;
    let (mut holder, token) = server.hold("deploy", 30_000).await;
    let host = admin.addr.to_string();

    // No Origin, no Sec-Fetch-Site (an old browser, a form without them):
    // refused for want of the header, with a line saying what to send.
    let answer = raw(
        admin.addr,
        &format!(
            "POST /api/locks/deploy/release HTTP/1.1\r\nHost: {host}\r\nContent-Type: text/plain"
        ),
    )
    .await;
    assert_eq!(answer.status, 403, "{}", answer.body);
    let error = answer.error();
    assert!(error.contains("X-Requested-By"), "{error}");
    still_held(&admin, &mut holder, "deploy", token).await;

    // A preflight gets no CORS grant.
    let answer = raw(
        admin.addr,
        &format!(
            "OPTIONS /api/locks/deploy/release HTTP/1.1\r\nHost: {host}\r\n\
             Origin: http://evil.example\r\nAccess-Control-Request-Method: POST\r\n\
             Access-Control-Request-Headers: x-requested-by"
        ),
    )
    .await;
    assert!(answer.status >= 400, "{} {}", answer.status, answer.body);
    assert!(!answer.has_cors_grant(), "{}", answer.head);
    still_held(&admin, &mut holder, "deploy", token).await;

    // What the dashboard sends (same origin, its header) and what the CLI
    // sends (no Origin, its header) are served.
    let answer = raw(
        admin.addr,
        &format!(
            "POST /api/locks/deploy/release?token={token} HTTP/1.1\r\nHost: {host}\r\n\
             Origin: http://{host}\r\nSec-Fetch-Site: same-origin\r\n\
             X-Requested-By: monolock-dashboard"
        ),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["token"], token);
    let (code, _) = holder.expect_error_then_close().await;
    assert_eq!(code, 0x02);

    let (again, token) = server.hold("deploy", 30_000).await;
    let answer = raw(
        admin.addr,
        &format!(
            "POST /api/locks/deploy/release HTTP/1.1\r\nHost: {host}\r\nX-Requested-By: monolock"
        ),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["token"], token);
    admin.stop().await;
    server.stop_and_drop((holder, again)).await;
}

#[tokio::test]
async fn a_rebinding_host_is_refused_for_reads_the_stream_and_the_page() {
    let server = TestServer::start().await;
    let admin = admin(&server).await;
    let port = admin.addr.port();
    let held = server.hold("deploy", 30_000).await;

    for path in [
        "/api/locks",
        "/api/events",
        "/",
        "/api/info",
        "/api/locks/deploy",
    ] {
        for host in [
            format!("evil.example:{port}"),
            "evil.example".to_owned(),
            format!("localhost.evil.example:{port}"),
            format!("127.0.0.1.nip.example:{port}"),
        ] {
            let answer = raw(admin.addr, &format!("GET {path} HTTP/1.1\r\nHost: {host}")).await;
            assert_eq!(
                answer.status, 403,
                "GET {path} Host {host}: {}",
                answer.body
            );
            let error = answer.error();
            assert!(
                error.contains(&host) && error.contains("--admin-allowed-host"),
                "{error}"
            );
            assert!(!answer.body.contains("deploy"), "{}", answer.body);
        }
    }
    // The listener's own names are served, with its port or none.
    for host in [
        admin.addr.to_string(),
        format!("localhost:{port}"),
        "localhost".to_owned(),
        format!("LocalHost:{port}"),
        format!("[::1]:{port}"),
        format!("127.0.0.2:{port}"),
        "127.0.0.1".to_owned(),
    ] {
        let answer = raw(
            admin.addr,
            &format!("GET /api/locks HTTP/1.1\r\nHost: {host}"),
        )
        .await;
        assert_eq!(answer.status, 200, "Host {host}: {}", answer.body);
    }
    // A port that is not the listener's is another server's name.
    for host in [
        format!("localhost:{}", port ^ 1),
        format!("127.0.0.1:{}", port ^ 1),
    ] {
        let answer = raw(
            admin.addr,
            &format!("GET /api/locks HTTP/1.1\r\nHost: {host}"),
        )
        .await;
        assert_eq!(answer.status, 403, "Host {host}: {}", answer.body);
    }
    // HTTP/1.0 without a Host (a load balancer's check): no browser sends
    // that, so it is no rebinding.
    let answer = raw(admin.addr, "GET /api/locks HTTP/1.0").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    admin.stop().await;
    server.stop_and_drop(held).await;
}

/// A page that frames the dashboard could lure a click onto its own
/// buttons (which send from the dashboard's origin): the page forbids it.
#[tokio::test]
async fn the_dashboard_cannot_be_framed_by_another_page() {
    let server = TestServer::start().await;
    let admin = admin(&server).await;
    let answer = raw(
        admin.addr,
        &format!(
            "GET / HTTP/1.1\r\nHost: {}\r\nSec-Fetch-Site: cross-site",
            admin.addr
        ),
    )
    .await;
    assert_eq!(answer.status, 200, "a link from elsewhere opens the page");
    let csp = answer
        .head
        .lines()
        .find_map(|line| line.strip_prefix("content-security-policy:"))
        .unwrap_or_else(|| panic!("no CSP in {}", answer.head));
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    admin.stop().await;
    server.stop().await;
}

#[tokio::test]
async fn the_checks_apply_with_a_token_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("token");
    std::fs::write(&path, "s3cret").expect("write");
    let token = Arc::new(monolock_server::AdminToken::load(&path).expect("token"));
    let server = TestServer::start().await;
    let options = AdminOptions::new(server.handle.clone(), EffectiveConfig::default())
        .with_token(token.clone());
    let admin = admin_with(options).await;
    let (mut holder, held) = server.hold("deploy", 30_000).await;
    let host = admin.addr.to_string();

    let answer = raw(
        admin.addr,
        &format!(
            "{}\r\nAuthorization: Bearer s3cret",
            form_post("/api/locks/deploy/release", &host)
        ),
    )
    .await;
    assert_eq!(answer.status, 403, "{}", answer.body);
    let answer = raw(
        admin.addr,
        "GET /api/locks HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer s3cret",
    )
    .await;
    assert_eq!(answer.status, 403, "{}", answer.body);
    // Refused before the token is looked at: no refusal counted.
    assert_eq!(token.unauthorized(), 0);
    let answer = raw(
        admin.addr,
        &format!("GET /api/locks/deploy HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer s3cret"),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["holder"]["token"], held);
    assert_eq!(
        holder.heartbeat().await,
        ServerFrame::Acquired { token: held }
    );
    admin.stop().await;
    server.stop_and_drop(holder).await;
}

#[tokio::test]
async fn names_given_with_admin_allowed_host_are_served() {
    let allowed = AllowedHosts::parse(["locks.example.com", "proxy.example:8443"]).expect("valid");
    let server = TestServer::start().await;
    let options = AdminOptions::new(server.handle.clone(), EffectiveConfig::default())
        .with_allowed_hosts(Arc::new(allowed));
    let admin = admin_with(options).await;
    let (holder, token) = server.hold("deploy", 30_000).await;

    for (host, status) in [
        ("locks.example.com", 200),
        ("LOCKS.example.com:443", 200),
        ("proxy.example:8443", 200),
        ("proxy.example", 403),
        ("proxy.example:443", 403),
        ("other.example.com", 403),
    ] {
        let answer = raw(
            admin.addr,
            &format!("GET /api/locks HTTP/1.1\r\nHost: {host}"),
        )
        .await;
        assert_eq!(answer.status, status, "Host {host}: {}", answer.body);
    }
    // Behind a proxy that rewrites Host to the listener's address, the
    // page's origin is the proxy's name: a named origin may change things.
    let host = admin.addr.to_string();
    let answer = raw(
        admin.addr,
        &format!(
            "POST /api/locks/deploy/release?token={token} HTTP/1.1\r\nHost: {host}\r\n\
             Origin: https://locks.example.com\r\nSec-Fetch-Site: same-origin\r\n\
             X-Requested-By: monolock-dashboard"
        ),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    admin.stop().await;
    server.stop_and_drop(holder).await;
}

#[test]
fn allowed_hosts_refuse_what_is_not_a_host_in_one_line() {
    for (bad, says) in [
        ("", "empty"),
        ("https://locks.example.com", "scheme"),
        ("locks.example.com/admin", "path"),
        ("locks example", "HOST"),
        ("locks.example.com:99999", "port"),
        ("locks.example.com:", "port"),
        ("[::1", "HOST"),
        ("*", "HOST"),
    ] {
        let err = AllowedHosts::parse([bad]).expect_err(bad).to_string();
        assert!(err.contains(says), "{bad:?}: {err}");
        assert!(!err.contains('\n'), "{err}");
    }
    let ok = AllowedHosts::parse(["Locks.Example.com", "[fd00::1]:8071", "10.0.0.5:8071"])
        .expect("valid");
    assert_eq!(ok.len(), 3);
}

#[tokio::test]
async fn the_ops_listener_on_loopback_refuses_a_rebinding_host() {
    let server = TestServer::start().await;
    let metrics = Arc::new(Metrics::new());
    let ops = HttpServer::ops(server.handle.clone(), metrics).await;
    let port = ops.addr.port();
    for path in ["/metrics", "/healthz", "/readyz"] {
        let answer = raw(
            ops.addr,
            &format!("GET {path} HTTP/1.1\r\nHost: evil.example:{port}"),
        )
        .await;
        assert_eq!(answer.status, 403, "{path}: {}", answer.body);
        assert!(
            answer.error().contains("--admin-allowed-host"),
            "{}",
            answer.body
        );
        for host in [ops.addr.to_string(), format!("localhost:{port}")] {
            let answer = raw(ops.addr, &format!("GET {path} HTTP/1.1\r\nHost: {host}")).await;
            assert_eq!(answer.status, 200, "{path} Host {host}: {}", answer.body);
        }
        // HAProxy's `option httpchk` (HTTP/1.0, no Host).
        let answer = raw(ops.addr, &format!("GET {path} HTTP/1.0")).await;
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
    }
    ops.stop().await;
    server.stop().await;
}

/// A change sent with `Authorization: Bearer <token>` to a listener with a
/// token needs no `X-Requested-By` (no page can send that header to another
/// site without a preflight); a wrong token is still a 401, and a change
/// with neither is still refused.
#[tokio::test]
async fn a_change_with_the_bearer_token_needs_no_requested_by_header() {
    let server = TestServer::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("token");
    std::fs::write(&path, "s3cret\n").expect("write the token");
    let token = Arc::new(monolock_server::AdminToken::load(&path).expect("token"));
    let admin = admin_with(
        AdminOptions::new(server.handle.clone(), EffectiveConfig::default()).with_token(token),
    )
    .await;
    let (holder, held) = server.hold("deploy", 30_000).await;
    let host = admin.addr.to_string();
    let post = |authorization: &'static str| {
        format!("POST /api/locks/deploy/release HTTP/1.1\r\nHost: {host}{authorization}")
    };

    let answer = raw(admin.addr, &post("")).await;
    assert_eq!(answer.status, 403, "{}", answer.body);
    assert!(answer.error().contains("X-Requested-By"));
    let answer = raw(admin.addr, &post("\r\nAuthorization: Bearer wrong")).await;
    assert_eq!(answer.status, 401, "{}", answer.body);
    let answer = raw(admin.addr, &post("\r\nAuthorization: Bearer s3cret")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["token"], held);
    admin.stop().await;
    server.stop_and_drop(holder).await;
}
