//! Protocol version 2 sessions against the real server: claims share a
//! session, release is confirmed, loss stays per lock, and a server that
//! speaks version 1 only is spoken to in version 1.

mod common;

use std::{net::SocketAddr, time::Duration};

use common::{Proxy, TestServer, within};
use monolock_client::{Client, ErrorCode, LossReason, Protocol};
use monolock_proto::{ErrorCode as Code, ServerFrame};
use monolock_server::ServerConfig;
use monolock_testkit::peer::PipeConnector;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    task::JoinHandle,
    time::Instant,
};

const LEASE: Duration = Duration::from_secs(2);

/// The bound on the 1,000 cycles below: about 0.2 ms each on loopback,
/// so a hundred times that on a loaded machine.
const CYCLES_WITHIN: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_then_try_acquire_succeeds_1000_times_in_a_row() {
    let server = TestServer::start().await;
    let name = "handover";
    let mine = server.client();
    let theirs = server.client(); // another session: another process, to the server
    let started = Instant::now();
    for cycle in 0..1_000 {
        let (first, second) = if cycle % 2 == 0 {
            (&mine, &theirs)
        } else {
            (&theirs, &mine)
        };
        let guard = first.acquire(name, LEASE).await.expect("acquire");
        let token = guard.token();
        guard.release().await.expect("release");
        // The same process and another one, each right after a release.
        for client in [first, second] {
            let again = client
                .try_acquire(name, LEASE)
                .await
                .expect("try")
                .unwrap_or_else(|| panic!("cycle {cycle}: busy right after a confirmed release"));
            assert!(again.token() > token);
            again.release().await.expect("release");
        }
        assert!(
            started.elapsed() < CYCLES_WITHIN,
            "cycle {cycle} after {:?}",
            started.elapsed()
        );
    }
    assert_eq!(mine.session_loads(), [0], "one session, no claim left");
    assert_eq!(theirs.session_loads(), [0]);
    assert!(server.lock(name).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_session_loses_every_claim_before_the_server_hands_any_on() {
    let server = TestServer::start().await;
    let proxy = Proxy::start(server.addr).await;
    let client = proxy.client();
    let names = ["s/a", "s/b", "s/c"];
    let mut guards = Vec::new();
    for name in names {
        guards.push(client.acquire(name, LEASE).await.expect("acquire"));
    }
    assert_eq!(client.session_loads(), [3], "one session carries them");
    let first_deadline = guards[0].deadline();
    common::eventually("a confirmed PING", || guards[0].deadline() > first_deadline).await;
    proxy.go_silent_after_next_reply();
    let mut lost_at = Vec::new();
    for guard in &guards {
        let reason = within("the loss", guard.lost()).await;
        lost_at.push(Instant::now());
        assert!(
            matches!(reason, LossReason::HeartbeatTimeout { .. }),
            "{reason:?}"
        );
    }
    // One deadline for the session: the three report together.
    let spread = *lost_at.last().unwrap() - lost_at[0];
    assert!(spread < Duration::from_millis(50), "{spread:?}");
    // The server still holds all three: the client gave up first.
    for name in names {
        assert!(
            server.lock(name).is_some(),
            "{name} handed on before the client knew"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_release_ends_that_claim_alone() {
    let server = TestServer::start().await;
    let client = server.client();
    let kept = client.acquire("f/kept", LEASE).await.expect("acquire");
    let forced = client.acquire("f/forced", LEASE).await.expect("acquire");
    server.handle.force_release("f/forced").expect("held");
    match within("the loss", forced.lost()).await {
        LossReason::Server { code, .. } => assert_eq!(code, ErrorCode::CLOSED_BY_ADMIN),
        other => panic!("expected 0x02, got {other:?}"),
    }
    assert!(kept.is_held());
    assert_eq!(
        server.lock("f/kept").map(|l| l.holder.token),
        Some(kept.token())
    );
    // The session carries new claims on.
    let again = client.acquire("f/forced", LEASE).await.expect("acquire");
    assert!(again.token() > forced.token());
    assert_eq!(client.session_loads(), [2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_claim_bound_opens_more_sessions() {
    let server =
        TestServer::start_with(ServerConfig::default().with_max_claims_per_session(2)).await;
    let client = server.client();
    let mut guards = Vec::new();
    for n in 0..5 {
        guards.push(
            client
                .acquire(format!("b/{n}"), LEASE)
                .await
                .expect("acquire"),
        );
    }
    let mut loads = client.session_loads();
    loads.sort_unstable();
    assert_eq!(loads, [1, 2, 2]);
    guards.clear();
    common::eventually("every claim released", || {
        (0..5).all(|n| server.lock(&format!("b/{n}")).is_none())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_wait_leaves_the_queue_and_the_next_waiter_is_served() {
    let server = TestServer::start().await;
    let name = "c/queue";
    let holder = server.client().acquire(name, LEASE).await.expect("acquire");
    let client = server.client();
    let cancelled = tokio::spawn({
        let client = client.clone();
        async move { client.acquire(name, LEASE).await }
    });
    server.wait_for_waiters(name, 1).await;
    cancelled.abort();
    let _ = cancelled.await;
    common::eventually("the cancelled claim to leave", || server.waiters(name) == 0).await;
    let next = tokio::spawn({
        let client = client.clone();
        async move { client.acquire(name, LEASE).await }
    });
    server.wait_for_waiters(name, 1).await;
    holder.release().await.expect("release");
    let guard = within("the grant", next).await.unwrap().expect("granted");
    assert!(guard.is_held());
}

/// A version 1 only server in front of the real one: ERROR 0x10 to an
/// OPEN, version 1 connections passed through.
struct V1Only {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl V1Only {
    async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut head = [0u8; 2];
                    if client.read_exact(&mut head).await.is_err() {
                        return;
                    }
                    if head[1] != 1 {
                        let error = ServerFrame::Error {
                            code: Code::UNSUPPORTED_VERSION,
                            reason: "unsupported protocol version".into(),
                        };
                        let _ = client.write_all(&error.to_bytes()).await;
                        return;
                    }
                    let Ok(mut server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    if server.write_all(&head).await.is_ok() {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        Self { addr, task }
    }
}

impl Drop for V1Only {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1_only_server_is_spoken_to_in_v1() {
    let server = TestServer::start().await;
    let old = V1Only::start(server.addr).await;
    let client = Client::new(old.addr.to_string());
    assert_eq!(client.protocol(), Protocol::V2);
    let guard = client
        .acquire("old/a", LEASE)
        .await
        .expect("acquire over v1");
    assert_eq!(
        server.lock("old/a").map(|l| l.holder.token),
        Some(guard.token())
    );
    assert!(client.session_loads().is_empty(), "no v2 session");
    let other = client
        .acquire("old/b", LEASE)
        .await
        .expect("acquire over v1");
    assert!(
        client
            .try_acquire("old/a", LEASE)
            .await
            .expect("try")
            .is_none(),
        "busy"
    );
    guard.release().await.expect("release");
    other.release().await.expect("release");
}

/// The subject is the passage of time: the real client and the real
/// server over in-memory pipes on tokio's paused clock.
#[tokio::test(start_paused = true)]
async fn an_idle_session_heartbeats_then_closes_20_s_after_its_last_claim() {
    let server = TestServer::start().await;
    let client = PipeConnector::client(&server.handle);
    let lease = Duration::from_secs(1);
    let guard = client.acquire("idle", lease).await.expect("acquire");
    guard.release().await.expect("release");
    assert_eq!(client.session_loads(), [0]);
    // 19 leases without a claim: only its PINGs keep the session open.
    tokio::time::sleep(Duration::from_secs(19)).await;
    assert_eq!(client.session_loads(), [0], "the session is still open");
    let again = client.try_acquire("idle", lease).await.expect("try");
    assert!(again.is_some(), "served by the same session");
    drop(again);
    tokio::time::sleep(Duration::from_secs(21)).await;
    assert!(
        client.session_loads().is_empty(),
        "closed once idle for 20 s"
    );
    // The next claim opens a new session.
    let guard = client.acquire("idle", lease).await.expect("acquire");
    assert_eq!(client.session_loads(), [1]);
    guard.release().await.expect("release");
}

for_each_protocol! {
/// A session (v1: a claim's connection) runs on the runtime that opened
/// it. If that runtime goes, the connection closes and the server hands
/// the locks on: every guard must read the loss at once, whatever runtime
/// it lives on.
#[test]
fn a_session_whose_runtime_ends_loses_its_claims_at_once(protocol) {
    let server_runtime = tokio::runtime::Runtime::new().expect("runtime");
    let server = server_runtime.block_on(TestServer::start());
    let opener = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = server.client().with_protocol(protocol);
    let guard = opener
        .block_on(client.acquire("gone/a", LEASE))
        .expect("acquire");
    assert!(guard.is_held());
    drop(opener);
    assert!(
        !guard.is_held(),
        "lost the moment its session's task is gone"
    );
    assert!(matches!(guard.loss(), Some(LossReason::ConnectionClosed)));
    server_runtime.block_on(common::eventually("the server to release it", || {
        server.lock("gone/a").is_none()
    }));
}
}
