//! The live event stream (`GET /api/events`), admin authentication and
//! conditional force-release, over real sockets.

mod common;
#[path = "common/ext.rs"]
mod ext_client;
#[path = "common/http.rs"]
mod http;
#[path = "common/sse.rs"]
mod sse;
#[path = "common/wire.rs"]
mod wire;

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use common::{PATIENCE, TestServer, eventually};
use http::HttpServer;
use hyper::Method;
use monolock_proto::ServerFrame;
use monolock_proto::{Lease, LockName};
use monolock_server::{
    AdminToken, Batching, Event, EventHub, Listeners, Metrics, Observer, Observers, ServerConfig,
    Service, SessionInfo,
    admin::{self, AdminOptions, EffectiveConfig},
};
use serde_json::Value;
use sse::SseClient;
use tokio::time::timeout;

/// A protocol server and its admin listener sharing one event hub.
struct Lab {
    server: TestServer,
    admin: HttpServer,
    hub: Arc<EventHub>,
    metrics: Arc<Metrics>,
}

impl Lab {
    async fn start() -> Self {
        Self::start_with(EventHub::new().expect("hub"), None).await
    }

    async fn start_with(hub: EventHub, token: Option<Arc<AdminToken>>) -> Self {
        let hub = Arc::new(hub);
        let mut metrics = Metrics::new();
        if let Some(token) = &token {
            metrics = metrics.with_admin_unauthorized(token.unauthorized_counter());
        }
        let metrics = Arc::new(metrics);
        let server = TestServer::start_with(
            ServerConfig::default()
                .with_observer(Arc::new(Observers(vec![hub.clone(), metrics.clone()]))),
        )
        .await;
        let effective = EffectiveConfig {
            listen: server.addr.to_string(),
            ..EffectiveConfig::default()
        };
        let mut options =
            AdminOptions::new(server.handle.clone(), effective).with_events(hub.clone());
        if let Some(token) = token {
            options = options.with_token(token);
        }
        let admin = HttpServer::admin_with(options).await;
        Self {
            server,
            admin,
            hub,
            metrics,
        }
    }

    async fn subscribe(&self) -> SseClient {
        self.subscribe_to("/api/events").await
    }

    async fn subscribe_to(&self, path: &str) -> SseClient {
        let mut client = SseClient::open_path(self.admin.addr, path, None).await;
        assert_eq!(client.status, 200, "{}", client.head);
        let first = client.next_event().await;
        assert_eq!(first.name.as_deref(), Some("snapshot"));
        client.pending_snapshot = Some(first.json());
        client
    }

    async fn stop(self) {
        self.admin.stop().await;
        self.server.stop().await;
    }

    /// [`Lab::stop`] that closes the test's open peers as the protocol
    /// server's shutdown begins (see `TestServer::stop_and_drop`).
    async fn stop_and_drop<T>(self, open: T) {
        self.admin.stop().await;
        self.server.stop_and_drop(open).await;
    }
}

fn assert_event(event: &sse::SseEvent, name: &str, lock: &str) -> Value {
    assert_eq!(event.name.as_deref(), Some(name), "{event:?}");
    let data = event.json();
    assert_eq!(data["event"], name, "{data}");
    assert_eq!(data["lock"], lock, "{data}");
    assert!(data["time"].as_str().is_some_and(|t| t.ends_with('Z')));
    data
}

#[tokio::test]
async fn a_subscriber_gets_a_snapshot_then_every_change_in_order() {
    let lab = Lab::start().await;
    let (holder, token) = lab.server.hold("jobs/a", 30_000).await;

    let mut events = lab.subscribe().await;
    let snapshot = events.pending_snapshot.take().expect("snapshot");
    assert_eq!(snapshot["locks"][0]["name"], "jobs/a");
    assert_eq!(snapshot["locks"][0]["holder"]["token"], token);
    assert_eq!(
        snapshot["locks"][0]["holder"]["remote_addr"],
        holder.local_addr().to_string()
    );

    // A waiter joins, then leaves without being granted.
    let leaving = lab.server.wait_in_line("jobs/a", 30_000).await;
    let queued = assert_event(&events.next_event().await, "queued", "jobs/a");
    assert_eq!(queued["remote_addr"], leaving.local_addr().to_string());
    assert!(queued.get("token").is_none());
    assert_eq!(queued["lease_ms"], 30_000, "a waiter's lease: {queued}");
    drop(leaving);
    let dequeued = assert_event(&events.next_event().await, "dequeued", "jobs/a");
    assert_eq!(dequeued["remote_addr"], queued["remote_addr"]);

    // The holder leaves: released (graceful), then the next waiter's grant.
    let mut next = lab.server.wait_in_line("jobs/a", 12_500).await;
    assert_event(&events.next_event().await, "queued", "jobs/a");
    drop(holder);
    let released = assert_event(&events.next_event().await, "released", "jobs/a");
    assert_eq!(released["token"], token);
    assert_eq!(released["reason"], "graceful");
    assert!(released["held_ms"].is_u64());
    let granted = assert_event(&events.next_event().await, "granted", "jobs/a");
    let ServerFrame::Acquired { token: next_token } = next.recv().await else {
        panic!("the waiter is promoted");
    };
    assert_eq!(granted["token"], next_token);
    assert_eq!(granted["remote_addr"], next.local_addr().to_string());
    assert!(granted["wait_ms"].is_u64());
    assert_eq!(
        granted["lease_ms"], 12_500,
        "the new holder's lease: {granted}"
    );

    // An administrator kicks a waiter and force-releases the holder.
    let kicked = lab.server.wait_in_line("jobs/a", 30_000).await;
    assert_event(&events.next_event().await, "queued", "jobs/a");
    let path = format!("/api/locks/jobs%2Fa/waiters/{}", kicked.local_addr());
    assert_eq!(lab.admin.delete(&path).await.0, 200);
    assert_event(&events.next_event().await, "kick_waiter", "jobs/a");
    assert_eq!(lab.admin.post("/api/locks/jobs%2Fa/release").await.0, 200);
    let forced = assert_event(&events.next_event().await, "released", "jobs/a");
    assert_eq!(forced["reason"], "force");
    assert_event(&events.next_event().await, "force_release", "jobs/a");
    let (code, _) = next.expect_error_then_close().await;
    assert_eq!(code, 0x02);

    drop(kicked);
    lab.stop_and_drop(next).await;
}

#[tokio::test]
async fn an_idle_stream_gets_keep_alive_comments() {
    let hub = EventHub::with_limits(64, Duration::from_millis(50)).expect("hub");
    let lab = Lab::start_with(hub, None).await;
    let mut events = lab.subscribe().await;
    for _ in 0..2 {
        let comment = events.next().await.expect("a keep-alive");
        assert_eq!(comment.name, None);
        assert_eq!(comment.data, "keep-alive");
    }
    lab.stop().await;
}

/// A subscriber that never reads is cut off with a final `lagged` event,
/// and the grants go on meanwhile: the observer never waits for it. If it
/// did, the churn below would stop once the subscriber's buffers filled and
/// the test would time out. A reconnect gets a fresh snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_subscriber_is_cut_off_without_slowing_grants() {
    // A small buffer so that the kernel's socket buffers, not this one,
    // are most of what must fill up.
    let hub = EventHub::with_limits(2, Duration::from_secs(60)).expect("hub");
    let lab = Lab::start_with(hub, None).await;
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let stream = socket.connect(lab.admin.addr).await.expect("connect");
    let mut stalled = SseClient::open_on(stream, "/api/events", None).await;
    assert_eq!(stalled.status, 200);
    eventually("the stalled subscriber is registered", || {
        lab.hub.subscribers() == 1
    })
    .await;

    // Churn: grant and release long-named locks from 8 clients at once,
    // until the stalled subscriber is cut off (bounded in count and time).
    const MAX_CYCLES: usize = 20_000;
    let name = |worker: usize| format!("{:0>200}", worker);
    let churn = async {
        let mut workers = Vec::new();
        for worker in 0..8 {
            let addr = lab.server.addr;
            let hub = lab.hub.clone();
            let name = name(worker);
            workers.push(tokio::spawn(async move {
                let mut cycles = 0;
                while hub.lagged() == 0 && cycles < MAX_CYCLES / 8 {
                    let mut peer = common::Peer::connect(addr).await;
                    peer.send(&wire::acquire(&name, 30_000)).await;
                    // The server may not have seen the previous close yet.
                    let mut reply = peer.recv().await;
                    if reply == ServerFrame::Waiting {
                        reply = peer.recv().await;
                    }
                    assert!(matches!(reply, ServerFrame::Acquired { .. }), "{reply:?}");
                    drop(peer);
                    cycles += 1;
                }
                cycles
            }));
        }
        let mut total = 0;
        for worker in workers {
            total += worker.await.expect("worker");
        }
        total
    };
    let cycles = timeout(Duration::from_secs(60), churn)
        .await
        .expect("grants go on while a subscriber is stalled");
    assert_eq!(lab.hub.lagged(), 1, "cut off after {cycles} grant cycles");

    // It can still read what was sent, and the last thing is `lagged`.
    let rest = stalled.rest(PATIENCE).await;
    assert!(
        rest.trim_end().ends_with(
            "event: lagged\ndata: {\"error\":\"this subscriber fell too far behind and was cut off; reconnect for a fresh snapshot\"}"
        ),
        "...{}",
        &rest[rest.len().saturating_sub(300)..]
    );
    eventually("the subscription is gone", || lab.hub.subscribers() == 0).await;

    // A reconnect starts over with a snapshot of the table as it is now.
    let (_holder, token) = lab.server.hold("after", 30_000).await;
    let mut again = lab.subscribe().await;
    let snapshot = again.pending_snapshot.take().expect("snapshot");
    let locks = snapshot["locks"].as_array().expect("locks");
    assert_eq!(locks.len(), 1, "{snapshot}");
    assert_eq!(locks[0]["holder"]["token"], token);
    lab.stop_and_drop(_holder).await;
}

/// Events the dispatcher has not taken yet are bounded: past the limit an
/// event is dropped and every subscriber is cut off as `lagged` (its
/// picture would be wrong), and a new subscription works again. The
/// dispatcher sleeps a whole second after the first event of a batch, so
/// the 1,000 events observed meanwhile are certain to pass the limit of 100.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_that_falls_behind_cuts_everyone_off_rather_than_grow() {
    let batching = Batching {
        flush_interval: Duration::from_secs(1),
        ..Batching::default()
    };
    let hub = EventHub::with_batching(64, Duration::from_secs(60), batching)
        .expect("hub")
        .with_pending_limit(100);
    let lab = Lab::start_with(hub, None).await;
    let mut first = lab.subscribe().await;
    let mut second = lab.subscribe_to("/api/events?match=x*").await;

    let session = session("flood", "", 9);
    for token in 0..1_000 {
        lab.hub.observe(&Event::Granted {
            session: &session,
            token,
            wait: Duration::ZERO,
            queued: false,
            value: "",
        });
    }
    for subscriber in [&mut first, &mut second] {
        let last = subscriber.until("lagged").await;
        assert!(last.data.contains("reconnect"), "{last:?}");
        assert_eq!(subscriber.next().await, None, "the stream ends");
    }
    assert_eq!(lab.hub.lagged(), 2);

    let mut again = lab.subscribe().await;
    let (holder, token) = lab.server.hold("after", 30_000).await;
    let granted = assert_event(&again.next_event().await, "granted", "after");
    assert_eq!(granted["token"], token);
    lab.stop_and_drop(holder).await;
}

/// A session of `lock` for events observed directly, without a client.
fn session(lock: &str, identity: &str, port: u16) -> SessionInfo {
    SessionInfo {
        lock: LockName::new(lock).expect("name"),
        lease: Lease::from_millis(10_000).expect("lease"),
        remote_addr: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        identity: Arc::from(identity),
        queued_at: std::time::SystemTime::now(),
        claim: None,
    }
}

/// Each event carries its own session's lock name and identity (the hub
/// copies both beside the event for the dispatcher): names of 1 to 255
/// bytes, empty, long and non-ASCII identities, all in one batch.
#[tokio::test]
async fn every_event_keeps_its_own_lock_name_and_identity() {
    let lab = Lab::start().await;
    let mut subscriber = lab.subscribe().await;
    let sessions: Vec<SessionInfo> = [
        ("a", ""),
        (&"n".repeat(255)[..], "spiffe://prod/worker/1"),
        ("nightly/import", ""),
        ("deploy/web", "wörker-ß.example"),
        ("x", &"i".repeat(253)[..]),
    ]
    .iter()
    .zip(1000..)
    .map(|((lock, identity), port)| session(lock, identity, port))
    .collect();
    for (token, session) in (1..).zip(&sessions) {
        lab.hub.observe(&Event::Granted {
            session,
            token,
            wait: Duration::ZERO,
            queued: false,
            value: "",
        });
        lab.hub.observe(&Event::WaiterJoined(session));
    }
    for (token, session) in (1..).zip(&sessions) {
        for name in ["granted", "queued"] {
            let data = assert_event(&subscriber.next_event().await, name, session.lock.as_str());
            assert_eq!(data["identity"], &*session.identity, "{data}");
            assert_eq!(
                data["remote_addr"],
                session.remote_addr.to_string(),
                "{data}"
            );
            if name == "granted" {
                assert_eq!(data["token"], token, "{data}");
            }
            assert_eq!(data["lease_ms"], 10_000, "{data}");
        }
    }
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_subscribers_each_see_every_change() {
    let lab = Lab::start().await;
    let mut subscribers = Vec::new();
    for _ in 0..100 {
        subscribers.push(lab.subscribe().await);
    }
    assert_eq!(lab.hub.subscribers(), 100);
    let (holder, token) = lab.server.hold("shared", 30_000).await;
    drop(holder);
    for subscriber in &mut subscribers {
        let granted = assert_event(&subscriber.next_event().await, "granted", "shared");
        assert_eq!(granted["token"], token);
        assert_event(&subscriber.next_event().await, "released", "shared");
    }
    drop(subscribers);
    eventually("every subscription is gone", || lab.hub.subscribers() == 0).await;
    lab.stop().await;
}

/// `?match=` filters on the server: the snapshot and the events name only
/// matching locks, subscribers with different patterns each get theirs,
/// and an unfiltered one still gets everything.
#[tokio::test]
async fn match_narrows_the_snapshot_and_the_events_on_the_server() {
    let lab = Lab::start().await;
    let (held_a, token_a) = lab.server.hold("deploy/web", 30_000).await;
    let (held_b, _) = lab.server.hold("nightly/import", 30_000).await;

    let mut deploys = lab.subscribe_to("/api/events?match=deploy%2F*").await;
    let mut nightly = lab.subscribe_to("/api/events?match=nightly/*").await;
    let mut everything = lab.subscribe().await;
    let snapshot = deploys.pending_snapshot.take().expect("snapshot");
    let locks = snapshot["locks"].as_array().expect("locks");
    assert_eq!(locks.len(), 1, "{snapshot}");
    assert_eq!(locks[0]["name"], "deploy/web");
    assert_eq!(locks[0]["holder"]["token"], token_a);
    let snapshot = nightly.pending_snapshot.take().expect("snapshot");
    assert_eq!(snapshot["locks"][0]["name"], "nightly/import", "{snapshot}");
    let snapshot = everything.pending_snapshot.take().expect("snapshot");
    assert_eq!(snapshot["locks"].as_array().map(Vec::len), Some(2));

    // Other locks' changes first, then one that matches: the filtered
    // stream's next event is the matching one.
    for name in ["other/1", "nightly/2", "other/3"] {
        drop(lab.server.hold(name, 30_000).await.0);
    }
    let (held, token) = lab.server.hold("deploy/api", 30_000).await;
    let granted = assert_event(&deploys.next_event().await, "granted", "deploy/api");
    assert_eq!(granted["token"], token);
    drop(held);
    assert_event(&deploys.next_event().await, "released", "deploy/api");

    assert_event(&nightly.next_event().await, "granted", "nightly/2");
    assert_event(&nightly.next_event().await, "released", "nightly/2");
    // Closes are noticed asynchronously, so across locks only the set is
    // certain, not the order.
    let mut seen = Vec::new();
    for _ in 0..8 {
        let event = everything.next_event().await.json();
        seen.push(format!("{} {}", event["event"], event["lock"]).replace('"', ""));
    }
    seen.sort();
    let mut expected: Vec<String> = ["other/1", "nightly/2", "other/3", "deploy/api"]
        .iter()
        .flat_map(|lock| [format!("granted {lock}"), format!("released {lock}")])
        .collect();
    expected.sort();
    assert_eq!(seen, expected);
    lab.stop_and_drop((held_a, held_b)).await;
}

#[tokio::test]
async fn open_streams_do_not_hold_up_shutdown() {
    let lab = Lab::start().await;
    let mut events = lab.subscribe().await;
    lab.admin.stop().await;
    assert_eq!(events.next().await, None, "the stream ends at shutdown");
    lab.server.stop().await;
}

#[tokio::test]
async fn with_a_token_every_admin_request_needs_it_and_refusals_are_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("admin-token");
    std::fs::write(&path, "correct-horse\n").expect("write");
    let token = Arc::new(AdminToken::load(&path).expect("token"));
    let lab = Lab::start_with(EventHub::new().expect("hub"), Some(token.clone())).await;
    let addr = lab.admin.addr;

    for (bearer, expected) in [
        (None, 401),
        (Some("wrong"), 401),
        (Some("correct-hors"), 401),
        (Some("correct-horse"), 200),
    ] {
        for path in ["/api/info", "/api/locks", "/api/locks/x/release?token=1"] {
            let method = if path.ends_with("token=1") {
                Method::POST
            } else {
                Method::GET
            };
            let (status, body) = http::request_as(addr, method, path, bearer).await;
            let expected = if expected == 200 && path.contains("release") {
                404
            } else {
                expected
            };
            assert_eq!(status, expected, "{path} with {bearer:?}: {body}");
            let json: Value = serde_json::from_str(&body).expect("JSON error");
            if status == 401 {
                assert!(json["error"].as_str().expect("error").contains("Bearer"));
            }
        }
    }
    let refused = SseClient::open(addr, None).await;
    assert_eq!(refused.status, 401);
    let mut events = SseClient::open(addr, Some("correct-horse")).await;
    assert_eq!(events.status, 200);
    assert_eq!(events.next_event().await.name.as_deref(), Some("snapshot"));
    // The page's shell carries no data and loads without the token.
    let (status, page) = http::request_as(addr, Method::GET, "/", None).await;
    assert_eq!(status, 200);
    assert!(page.contains("<title>monolock"));

    let exposition = http::Exposition::parse(&lab.metrics.render(&lab.server.handle));
    assert_eq!(
        exposition.value("monolock_admin_unauthorized_total"),
        10.0,
        "3 paths x 3 refusals + 1 stream"
    );

    // SIGHUP's reload: the new token works at once, the old one no more.
    std::fs::write(&path, "battery-staple").expect("write");
    token.reload().expect("reload");
    let (status, _) =
        http::request_as(addr, Method::GET, "/api/info", Some("battery-staple")).await;
    assert_eq!(status, 200);
    let (status, _) = http::request_as(addr, Method::GET, "/api/info", Some("correct-horse")).await;
    assert_eq!(status, 401);
    lab.stop().await;
}

#[tokio::test]
async fn a_conditional_release_never_releases_the_next_holder() {
    let lab = Lab::start().await;
    let (mut first, token) = lab.server.hold("deploy", 30_000).await;
    let mut second = lab.server.wait_in_line("deploy", 30_000).await;

    let (status, body) = lab
        .admin
        .post(&format!("/api/locks/deploy/release?token={}", token + 1))
        .await;
    assert_eq!(status, 409, "{body}");
    let conflict: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(conflict["holder"]["token"], token);
    assert!(
        conflict["error"]
            .as_str()
            .is_some_and(|e| e.contains("nothing released")),
        "{body}"
    );
    assert_eq!(
        lab.server.handle.lock("deploy").expect("held").holder.token,
        token
    );

    let path = format!("/api/locks/deploy/release?token={token}");
    let (status, body) = lab.admin.post(&path).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(first.expect_error_then_close().await.0, 0x02);
    let ServerFrame::Acquired { token: next } = second.recv().await else {
        panic!("the waiter is promoted");
    };
    // The same command again: 409, and the new holder keeps the lock.
    let (status, body) = lab.admin.post(&path).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        lab.server.handle.lock("deploy").expect("held").holder.token,
        next
    );
    assert!(
        second
            .recv_within(Duration::from_millis(50))
            .await
            .is_none()
    );
    lab.stop_and_drop((first, second)).await;
}

#[tokio::test]
async fn malformed_query_parameters_are_a_json_error_and_change_nothing() {
    let lab = Lab::start().await;
    let (_holder, token) = lab.server.hold("keep", 30_000).await;
    let longest = "*".repeat(admin::MAX_MATCH_BYTES);
    let too_long_events = format!("/api/events?match={longest}k");
    let too_long_locks = format!("/api/locks?match={longest}k");
    let (status, body) = http::request(
        lab.admin.addr,
        Method::GET,
        &format!("/api/locks?match={longest}"),
    )
    .await;
    assert_eq!(status, 200, "the longest pattern is served: {body}");
    assert!(body.contains("\"keep\""), "{body}");
    for (method, path) in [
        (Method::POST, "/api/locks/keep/release?token=abc"),
        (Method::POST, "/api/locks/keep/release?token=-1"),
        (Method::POST, "/api/locks/keep/release?tokn=1"),
        (Method::GET, "/api/locks?mtach=*"),
        (Method::GET, "/api/events?since=3"),
        (Method::GET, "/api/events?match=*&match=x"),
        (Method::GET, too_long_events.as_str()),
        (Method::GET, too_long_locks.as_str()),
    ] {
        let (status, body) = http::request(lab.admin.addr, method, path).await;
        assert_eq!(status, 400, "{path}: {body}");
        let json: Value = serde_json::from_str(&body).expect("a JSON error");
        assert!(
            json["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{body}"
        );
    }
    assert_eq!(
        lab.server.handle.lock("keep").expect("held").holder.token,
        token
    );
    lab.stop_and_drop(_holder).await;
}

#[tokio::test]
async fn a_snapshot_of_a_thousand_locks_then_every_release() {
    let lab = Lab::start().await;
    let mut holders = Vec::new();
    for i in 0..1000 {
        holders.push(lab.server.hold(&format!("bulk/{i:04}"), 30_000).await.0);
    }
    let mut events = lab.subscribe().await;
    let snapshot = events.pending_snapshot.take().expect("snapshot");
    assert_eq!(snapshot["locks"].as_array().map(Vec::len), Some(1000));
    drop(holders);
    let mut released = 0;
    while released < 1000 {
        let event = events.next_event().await;
        if event.name.as_deref() == Some("released") {
            released += 1;
        }
    }
    lab.stop().await;
}

/// The end of a server's life reaches its subscribers: a stream read over
/// real HTTP shows every session held at shutdown as `released` with
/// reason `shutdown` (and a waiter as `dequeued`) before it ends. The
/// shutdown's releases happen within the last moments of the admin
/// listener, inside one batching interval of the hub.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_sees_every_shutdown_release_before_the_stream_ends() {
    let hub = Arc::new(EventHub::new().expect("hub"));
    let protocol = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = protocol.local_addr().expect("addr");
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let admin_addr = admin.local_addr().expect("addr");
    let listeners = Listeners {
        protocol,
        ops: None,
        admin: Some(admin),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(
        Service::builder(ServerConfig::default())
            .with_events(hub.clone())
            .build()
            .run(listeners, async {
                let _ = stopped.await;
            }),
    );

    let mut holders = Vec::new();
    let mut tokens = BTreeSet::new();
    for i in 0..5 {
        let mut peer = common::Peer::connect(addr).await;
        peer.send(&wire::acquire(&format!("shutdown/{i}"), 30_000))
            .await;
        let ServerFrame::Acquired { token } = peer.recv().await else {
            panic!("granted");
        };
        tokens.insert(token);
        holders.push(peer);
    }
    let mut waiter = common::Peer::connect(addr).await;
    waiter.send(&wire::acquire("shutdown/0", 30_000)).await;
    assert_eq!(waiter.recv().await, ServerFrame::Waiting);

    let mut events = SseClient::open(admin_addr, None).await;
    assert_eq!(events.status, 200, "{}", events.head);
    let snapshot = events.next_event().await;
    assert_eq!(snapshot.json()["locks"].as_array().map(Vec::len), Some(5));

    // Clients as they behave: each reads its ERROR 0x01 and closes at once,
    // so the sessions end within moments of the shutdown.
    let waiter_addr = waiter.local_addr().to_string();
    let mut closing = Vec::new();
    for mut peer in holders.into_iter().chain([waiter]) {
        closing.push(tokio::spawn(async move {
            let frame = peer.recv().await;
            assert!(matches!(frame, ServerFrame::Error { .. }), "{frame:?}");
        }));
    }
    stop.send(()).expect("running");
    let mut released = BTreeSet::new();
    let mut dequeued = Vec::new();
    while let Some(event) = events.next().await {
        match event.name.as_deref() {
            Some("released") => {
                let data = event.json();
                assert_eq!(data["reason"], "shutdown", "{data}");
                released.insert(data["token"].as_u64().expect("token"));
            }
            Some("dequeued") => dequeued.push(event.json()["remote_addr"].clone()),
            _ => {}
        }
    }
    assert_eq!(released, tokens, "every holder's shutdown release");
    assert_eq!(dequeued, vec![Value::from(waiter_addr)]);
    for peer in closing {
        peer.await.expect("told");
    }
    timeout(PATIENCE, running)
        .await
        .expect("stops in time")
        .expect("task")
        .expect("clean shutdown");
}

/// A claim's value on the stream: the snapshot's holder and `granted`
/// carry it, a PROCLAIM of the holder is a `value` event (with the token),
/// a grant without a value has no `value` field, as it always had.
#[tokio::test]
async fn values_ride_on_granted_and_value_events() {
    use monolock_proto::{
        ext::{ClientFrame as ExtFrame, Response, ServerFrame as ExtServer},
        v2::Mode,
    };
    let lab = Lab::start().await;
    let (mut leader, _) = ext_client::RawExt::open(lab.server.addr, 30_000).await;
    let first = leader.hold(1, "leader", "10.0.0.7:9000").await;
    let mut events = lab.subscribe().await;
    let snapshot = events.pending_snapshot.take().expect("snapshot");
    assert_eq!(snapshot["locks"][0]["holder"]["value"], "10.0.0.7:9000");
    leader
        .send(&ExtFrame::Proclaim {
            claim: 1,
            value: "10.0.0.7:9001".to_owned(),
        })
        .await;
    assert_eq!(
        leader.recv().await,
        Response::Ext(ExtServer::Proclaimed { claim: 1 })
    );
    let replaced = assert_event(&events.next_event().await, "value", "leader");
    assert_eq!(replaced["token"], first);
    assert_eq!(replaced["value"], "10.0.0.7:9001");
    assert_eq!(replaced["claim"], 1);
    let (mut next, _) = ext_client::RawExt::open(lab.server.addr, 30_000).await;
    assert_eq!(
        next.acquire_value(2, Mode::Wait, "leader", "10.0.0.8:9000")
            .await,
        Response::Base(monolock_proto::v2::ServerFrame::Waiting { claim: 2 })
    );
    assert_event(&events.next_event().await, "queued", "leader");
    leader.release(1).await;
    assert_event(&events.next_event().await, "released", "leader");
    let granted = assert_event(&events.next_event().await, "granted", "leader");
    assert_eq!(granted["value"], "10.0.0.8:9000");
    let (plain, _) = lab.server.hold("plain", 30_000).await;
    let granted = assert_event(&events.next_event().await, "granted", "plain");
    assert!(granted.get("value").is_none(), "{granted}");
    lab.stop_and_drop((leader, next, plain)).await;
}
