//! The admin HTTP API, endpoint by endpoint, over real sockets.

mod common;
#[path = "common/http.rs"]
mod http;

use std::collections::BTreeSet;

use common::TestServer;
use http::HttpServer;
use monolock_proto::ServerFrame;
use monolock_server::admin::EffectiveConfig;
use serde_json::Value;

fn effective(server: &TestServer) -> EffectiveConfig {
    EffectiveConfig {
        listen: server.addr.to_string(),
        ops_listen: None,
        admin_listen: Some("127.0.0.1:7071".to_owned()),
        tls: false,
        mtls: false,
        acl_file: None,
        audit_log: Some("-".to_owned()),
        io_timeout_ms: 5000,
    }
}

fn keys(value: &Value) -> BTreeSet<&str> {
    value
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect()
}

fn assert_rfc3339_utc(text: &Value) {
    let text = text.as_str().expect("a time string");
    assert!(text.ends_with('Z'), "UTC: {text}");
    humantime::parse_rfc3339(text).unwrap_or_else(|err| panic!("{text}: {err}"));
}

#[tokio::test]
async fn info_shows_version_uptime_config_and_counts() {
    let server = TestServer::start().await;
    let admin = HttpServer::admin(server.handle.clone(), effective(&server)).await;
    let (holder, _) = server.hold("a", 30_000).await;
    let w1 = server.wait_in_line("a", 30_000).await;
    let (other, _) = server.hold("b", 30_000).await;

    let info = admin.get_json("/api/info", 200).await;
    assert_eq!(info["version"], env!("CARGO_PKG_VERSION"));
    assert!(info["uptime_ms"].is_u64());
    assert_eq!(info["locks"], 2);
    assert_eq!(info["sessions"], 3);
    assert_eq!(info["waiters"], 1);
    assert_eq!(info["connections"], 3);
    let config = &info["config"];
    assert_eq!(
        keys(config),
        BTreeSet::from([
            "listen",
            "ops_listen",
            "admin_listen",
            "tls",
            "mtls",
            "acl_file",
            "audit_log",
            "io_timeout_ms"
        ])
    );
    assert_eq!(config["listen"], server.addr.to_string());
    assert_eq!(config["tls"], false);
    assert_eq!(config["audit_log"], "-");
    assert_eq!(config["io_timeout_ms"], 5000);
    assert_eq!(config["ops_listen"], Value::Null);
    admin.stop().await;
    server.stop_and_drop((holder, w1, other)).await;
}

#[tokio::test]
async fn locks_lists_holders_and_fifo_queues_with_match() {
    let server = TestServer::start().await;
    let admin = HttpServer::admin(server.handle.clone(), effective(&server)).await;
    let (holder, token) = server.hold("nightly/import", 2000).await;
    let w1 = server.wait_in_line("nightly/import", 3000).await;
    let w2 = server.wait_in_line("nightly/import", 4000).await;
    let (deep, _) = server.hold("nightly/eu/export", 30_000).await;
    let (other, _) = server.hold("shard-3", 30_000).await;

    let all = admin.get_json("/api/locks", 200).await;
    let names: Vec<&str> = all["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .map(|lock| lock["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["nightly/eu/export", "nightly/import", "shard-3"]);

    // `*` crosses `/`; the pattern is percent-encoded in the query.
    let nightly = admin.get_json("/api/locks?match=nightly%2F*", 200).await;
    assert_eq!(nightly["locks"].as_array().unwrap().len(), 2);
    let shards = admin.get_json("/api/locks?match=shard-%3F", 200).await;
    assert_eq!(shards["locks"][0]["name"], "shard-3");
    let none = admin.get_json("/api/locks?match=Nightly*", 200).await;
    assert_eq!(none, serde_json::json!({"locks": []}));

    let lock = &nightly["locks"][1];
    assert_eq!(lock["name"], "nightly/import");
    assert_eq!(keys(lock), BTreeSet::from(["name", "holder", "waiters"]));
    let h = &lock["holder"];
    assert_eq!(
        keys(h),
        BTreeSet::from([
            "identity",
            "remote_addr",
            "since",
            "lease_ms",
            "token",
            "value"
        ])
    );
    assert_eq!(h["identity"], "");
    // A version 1 claim has no value: always present, empty.
    assert_eq!(h["value"], "");
    assert_eq!(h["remote_addr"], holder.local_addr().to_string());
    assert_eq!(h["lease_ms"], 2000);
    assert_eq!(h["token"], token);
    assert_rfc3339_utc(&h["since"]);
    let waiters = lock["waiters"].as_array().expect("waiters");
    assert_eq!(waiters.len(), 2);
    for (waiter, (peer, lease)) in waiters.iter().zip([(&w1, 3000), (&w2, 4000)]) {
        assert_eq!(
            keys(waiter),
            BTreeSet::from(["identity", "remote_addr", "queued_at", "lease_ms", "value"])
        );
        assert_eq!(waiter["value"], "");
        assert_eq!(waiter["remote_addr"], peer.local_addr().to_string());
        assert_eq!(waiter["lease_ms"], lease);
        assert_rfc3339_utc(&waiter["queued_at"]);
    }
    admin.stop().await;
    server.stop_and_drop((holder, w1, w2, deep, other)).await;
}

#[tokio::test]
async fn one_lock_by_percent_encoded_name_or_404() {
    let server = TestServer::start().await;
    let admin = HttpServer::admin(server.handle.clone(), effective(&server)).await;
    let (_holder, token) = server.hold("nightly/import", 30_000).await;
    let (_odd, _) = server.hold("a b?%é", 30_000).await;

    let lock = admin.get_json("/api/locks/nightly%2Fimport", 200).await;
    assert_eq!(lock["name"], "nightly/import");
    assert_eq!(lock["holder"]["token"], token);
    let odd = admin.get_json("/api/locks/a%20b%3F%25%C3%A9", 200).await;
    assert_eq!(odd["name"], "a b?%é");

    for path in [
        "/api/locks/nightly%2Fexport",
        "/api/locks/Nightly%2Fimport",
        "/api/locks/nightly",
    ] {
        let error = admin.get_json(path, 404).await;
        assert_eq!(keys(&error), BTreeSet::from(["error"]), "{path}");
        assert!(error["error"].as_str().unwrap().contains("no holder"));
    }
    // An unencoded `/` is another path, not a lock name.
    let error = admin.get_json("/api/locks/nightly/import", 404).await;
    assert!(error["error"].is_string());
    let (status, body) = admin.post("/api/info").await;
    assert_eq!(status, 405, "{body}");
    assert!(serde_json::from_str::<Value>(&body).unwrap()["error"].is_string());
    admin.stop().await;
    server.stop_and_drop((_holder, _odd)).await;
}

#[tokio::test]
async fn release_sends_0x02_to_the_holder_and_promotes_at_once() {
    let server = TestServer::start().await;
    let admin = HttpServer::admin(server.handle.clone(), effective(&server)).await;
    let (mut holder, token) = server.hold("deploy/web", 30_000).await;
    let mut next = server.wait_in_line("deploy/web", 30_000).await;

    let (status, body) = admin.post("/api/locks/deploy%2Fweb/release").await;
    assert_eq!(status, 200, "{body}");
    let released: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(released["token"], token);
    assert_eq!(released["remote_addr"], holder.local_addr().to_string());
    assert_rfc3339_utc(&released["since"]);

    let (code, _) = holder.expect_error_then_close().await;
    assert_eq!(code, 0x02);
    let ServerFrame::Acquired { token: promoted } = next.recv().await else {
        panic!("the next waiter is promoted");
    };
    assert!(promoted > token);
    let lock = admin.get_json("/api/locks/deploy%2Fweb", 200).await;
    assert_eq!(lock["holder"]["token"], promoted);

    let (status, body) = admin.post("/api/locks/nobody/release").await;
    assert_eq!(status, 404, "{body}");
    assert!(serde_json::from_str::<Value>(&body).unwrap()["error"].is_string());
    admin.stop().await;
    server.stop_and_drop((holder, next)).await;
}

#[tokio::test]
async fn kick_removes_the_listed_waiter_and_keeps_the_others_in_order() {
    let server = TestServer::start().await;
    let admin = HttpServer::admin(server.handle.clone(), effective(&server)).await;
    let (holder, _) = server.hold("q/1", 30_000).await;
    let w1 = server.wait_in_line("q/1", 30_000).await;
    let mut w2 = server.wait_in_line("q/1", 30_000).await;
    let w3 = server.wait_in_line("q/1", 30_000).await;

    // Kick exactly the address the API lists.
    let lock = admin.get_json("/api/locks/q%2F1", 200).await;
    let listed = lock["waiters"][1]["remote_addr"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(listed, w2.local_addr().to_string());
    let path = format!("/api/locks/q%2F1/waiters/{listed}");
    let (status, body) = admin.delete(&path).await;
    assert_eq!(status, 200, "{body}");
    let kicked: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(kicked["remote_addr"], listed);
    assert_rfc3339_utc(&kicked["queued_at"]);
    let (code, _) = w2.expect_error_then_close().await;
    assert_eq!(code, 0x02);

    let lock = admin.get_json("/api/locks/q%2F1", 200).await;
    let order: Vec<&str> = lock["waiters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["remote_addr"].as_str().unwrap())
        .collect();
    assert_eq!(
        order,
        [w1.local_addr().to_string(), w3.local_addr().to_string()]
    );

    // Gone now, so 404; a malformed address is 400; both JSON.
    let (status, body) = admin.delete(&path).await;
    assert_eq!(status, 404, "{body}");
    assert!(serde_json::from_str::<Value>(&body).unwrap()["error"].is_string());
    let (status, body) = admin
        .delete("/api/locks/q%2F1/waiters/not-an-address")
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(serde_json::from_str::<Value>(&body).unwrap()["error"].is_string());
    let (status, _) = admin.delete("/api/locks/unknown/waiters/127.0.0.1:1").await;
    assert_eq!(status, 404);
    admin.stop().await;
    server.stop_and_drop((holder, w1, w2, w3)).await;
}

#[tokio::test]
async fn unknown_endpoints_are_json_404s() {
    let server = TestServer::start().await;
    let admin = HttpServer::admin(server.handle.clone(), effective(&server)).await;
    let error = admin.get_json("/api/nothing", 404).await;
    assert!(error["error"].is_string());
    admin.stop().await;
    server.stop().await;
}
