//! Lease expiry and tokens measured exactly: paused tokio time, sessions over
//! in-memory pipes served by the real session code, and an injected wall
//! clock.

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use common::{Peer, acquire_bytes};
use monolock_proto::ServerFrame;
use monolock_server::{Server, ServerConfig, ServerHandle, WallClock};
use tokio::{io::DuplexStream, time::Instant};

async fn acquire(
    handle: &ServerHandle,
    port: u16,
    name: &str,
    lease_ms: u32,
) -> (Peer<DuplexStream>, ServerFrame) {
    let mut peer = Peer::pipe(handle, port);
    peer.send(&acquire_bytes(1, lease_ms, name.as_bytes()))
        .await;
    let reply = peer.recv().await;
    (peer, reply)
}

fn server() -> ServerHandle {
    Server::new(ServerConfig::default()).handle()
}

/// Heartbeats `peer` every `every` until `done` resolves; returns the peer.
async fn keep_alive_until(
    peer: &mut Peer<DuplexStream>,
    every: Duration,
    until: Instant,
) -> Option<ServerFrame> {
    while Instant::now() + every < until {
        tokio::time::sleep(every).await;
        match peer.heartbeat().await {
            ServerFrame::Waiting => {}
            other => return Some(other),
        }
    }
    None
}

#[tokio::test(start_paused = true)]
async fn silent_holder_expires_exactly_at_its_lease() {
    let handle = server();
    let start = Instant::now();
    let (_holder, reply) = acquire(&handle, 1, "exact", 1_000).await;
    assert!(matches!(reply, ServerFrame::Acquired { .. }));
    let (mut waiter, reply) = acquire(&handle, 2, "exact", 400).await;
    assert_eq!(reply, ServerFrame::Waiting);

    // The waiter stays alive; nothing happens before the holder's lease ends.
    let early = keep_alive_until(
        &mut waiter,
        Duration::from_millis(100),
        start + Duration::from_millis(999),
    )
    .await;
    assert_eq!(early, None, "promoted before the lease ended");
    let pushed = waiter.recv().await;
    assert!(matches!(pushed, ServerFrame::Acquired { .. }), "{pushed:?}");
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(1_000) && waited <= Duration::from_millis(1_001),
        "expired after {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn each_heartbeat_restarts_the_lease() {
    let handle = server();
    let (mut holder, reply) = acquire(&handle, 1, "slide", 1_000).await;
    let ServerFrame::Acquired { token } = reply else {
        panic!("not granted: {reply:?}");
    };
    let (mut waiter, _) = acquire(&handle, 2, "slide", 60_000).await;
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(holder.heartbeat().await, ServerFrame::Acquired { token });
    let last_heard = Instant::now();
    let pushed = waiter.recv().await;
    assert!(matches!(pushed, ServerFrame::Acquired { .. }));
    let silent = last_heard.elapsed();
    assert!(
        silent >= Duration::from_millis(1_000) && silent <= Duration::from_millis(1_001),
        "expired {silent:?} after the last heartbeat"
    );
    holder.expect_eof().await;
}

/// Leases longer than one turn of the server's lease wheel (16.4 s) are
/// kept by heartbeats for minutes and still end exactly at their lease.
#[tokio::test(start_paused = true)]
async fn a_long_lease_is_kept_by_heartbeats_and_ends_exactly() {
    let handle = server();
    let (mut holder, reply) = acquire(&handle, 1, "long", 40_000).await;
    let ServerFrame::Acquired { token } = reply else {
        panic!("not granted: {reply:?}");
    };
    let (mut waiter, _) = acquire(&handle, 2, "long", 600_000).await;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(holder.heartbeat().await, ServerFrame::Acquired { token });
    }
    let last_heard = Instant::now();
    let pushed = waiter.recv_within(Duration::from_secs(60)).await;
    assert!(
        matches!(pushed, Some(ServerFrame::Acquired { .. })),
        "{pushed:?}"
    );
    let silent = last_heard.elapsed();
    assert!(
        silent >= Duration::from_secs(40) && silent <= Duration::from_millis(40_001),
        "expired {silent:?} after the last heartbeat"
    );
    holder.expect_eof().await;
}

#[tokio::test(start_paused = true)]
async fn a_silent_waiter_is_dropped_at_its_lease_and_never_granted() {
    let handle = server();
    let (mut holder, _) = acquire(&handle, 1, "q", 10_000).await;
    let (mut silent, _) = acquire(&handle, 2, "q", 500).await;
    let (mut patient, _) = acquire(&handle, 3, "q", 10_000).await;
    let start = Instant::now();
    silent.expect_eof().await;
    let dropped = start.elapsed();
    assert!(
        dropped >= Duration::from_millis(500) && dropped <= Duration::from_millis(501),
        "{dropped:?}"
    );
    assert_eq!(holder.heartbeat().await.clone(), holder_token(&handle, "q"));
    drop(holder);
    assert!(matches!(patient.recv().await, ServerFrame::Acquired { .. }));
    assert_eq!(handle.lock("q").expect("held").waiters.len(), 0);
}

fn holder_token(handle: &ServerHandle, name: &str) -> ServerFrame {
    ServerFrame::Acquired {
        token: handle.lock(name).expect("held").holder.token,
    }
}

#[tokio::test(start_paused = true)]
async fn io_timeout_bounds_the_first_acquire() {
    let handle =
        Server::new(ServerConfig::default().with_io_timeout(Duration::from_secs(5))).handle();
    let start = Instant::now();
    let mut peer = Peer::pipe(&handle, 1);
    peer.send(&acquire_bytes(1, 1_000, b"half")[..7]).await;
    peer.expect_eof().await;
    let closed = start.elapsed();
    assert!(
        closed >= Duration::from_secs(5) && closed <= Duration::from_millis(5_001),
        "{closed:?}"
    );
}

struct SteppingClock(AtomicU64);

impl WallClock for SteppingClock {
    fn unix_seconds(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[tokio::test]
async fn tokens_increase_when_the_wall_clock_steps_back() {
    // Built one second earlier: a process starts from the second after its
    // start, so the first grant at 1_900_000_000 is exactly that second's floor.
    let clock = Arc::new(SteppingClock(AtomicU64::new(1_899_999_999)));
    let server =
        common::TestServer::start_with(ServerConfig::default().with_wall_clock(clock.clone()))
            .await;
    let mut tokens = Vec::new();
    for second in [
        1_900_000_000u64,
        1_800_000_000,
        1_800_000_000,
        1_000,
        1_900_000_005,
    ] {
        clock.0.store(second, Ordering::Relaxed);
        for _ in 0..3 {
            let (peer, token) = server.hold("fence", 10_000).await;
            tokens.push(token);
            drop(peer);
            common::eventually("released", || server.handle.counts().locks == 0).await;
        }
    }
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "not strictly increasing: {tokens:?}"
    );
    assert_eq!(tokens[0], 1_900_000_000 << 20);
    assert_eq!(tokens[1], tokens[0] + 1);
    // After the steps back the sequence simply continues ...
    assert_eq!(tokens[11], tokens[0] + 11);
    // ... and follows the clock again once it is ahead.
    assert_eq!(tokens[12], 1_900_000_005 << 20);
    server.stop().await;
}
