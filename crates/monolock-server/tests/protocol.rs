//! Protocol v1 over real TCP sockets: raw bytes in, raw bytes out (and,
//! where the subject is the passage of leases, over in-memory pipes on
//! tokio's paused clock).

mod common;

use std::time::Duration;

use common::{Peer, TestServer, acquire_bytes};
use monolock_proto::{ServerFrame, msg};
use monolock_server::{AdminRefused, Server, ServerConfig};
use tokio::time::Instant;

const LEASE_MS: u32 = 10_000;

/// Every client error of the first frame, each answered with its code and
/// then a closed connection.
#[tokio::test]
async fn first_frame_errors_carry_their_codes_and_close() {
    let server = TestServer::start().await;
    let long_name = vec![b'x'; 256];
    let cases: Vec<(&str, Vec<u8>, u8)> = vec![
        ("heartbeat first", vec![msg::HEARTBEAT], 0x11),
        ("unknown type first", vec![0x7f, 1, 2, 3], 0x11),
        ("server frame type first", vec![msg::ACQUIRED], 0x11),
        ("version 0", acquire_bytes(0, LEASE_MS, b"v"), 0x10),
        // Version 2 opens a v2 session (tests/v2_sessions.rs).
        ("version 3", acquire_bytes(3, LEASE_MS, b"v"), 0x10),
        ("zero lease", acquire_bytes(1, 0, b"z"), 0x17),
        ("empty name", acquire_bytes(1, LEASE_MS, b""), 0x14),
        (
            "256-byte name",
            acquire_bytes(1, LEASE_MS, &long_name),
            0x15,
        ),
        (
            "invalid UTF-8",
            acquire_bytes(1, LEASE_MS, b"caf\xc3"),
            0x16,
        ),
        (
            "lone continuation byte",
            acquire_bytes(1, LEASE_MS, b"\x80abc"),
            0x16,
        ),
        // Earlier checks win: bad version with zero lease and empty name.
        (
            "order: version before lease",
            acquire_bytes(9, 0, b""),
            0x10,
        ),
        (
            "order: lease before name",
            acquire_bytes(1, 0, &long_name),
            0x17,
        ),
    ];
    for (what, bytes, code) in cases {
        let mut peer = server.connect().await;
        peer.send(&bytes).await;
        let (got, reason) = peer.expect_error_then_close().await;
        assert_eq!(got, code, "{what}: reason {reason:?}");
        assert!(!reason.is_empty(), "{what}: a reason for humans");
    }
    assert_eq!(server.handle.counts().locks, 0);
    server.stop().await;
}

/// The ERROR for an oversized name arrives even though the client has sent
/// kilobytes the server never reads (write side shut down, then drained).
#[tokio::test]
async fn oversized_name_error_survives_unread_input() {
    let server = TestServer::start().await;
    let mut peer = server.connect().await;
    let mut bytes = acquire_bytes(1, LEASE_MS, &[b'n'; 300]);
    bytes.extend(std::iter::repeat_n(b'n', 60_000));
    peer.send(&bytes).await;
    let (code, _) = peer.expect_error_then_close().await;
    assert_eq!(code, 0x15);
    server.stop_and_drop(peer).await;
}

#[tokio::test]
async fn errors_after_acquire_release_the_holder() {
    // The holder's lease: its lock is handed on when it runs out.
    const HOLDER_LEASE_MS: u32 = 300;
    let server = TestServer::start().await;
    for (bytes, code) in [
        (acquire_bytes(1, LEASE_MS, b"dup"), 0x12u8),
        (vec![0x7f], 0x13),
        (vec![msg::WAITING], 0x13),
    ] {
        let asked = Instant::now();
        let (mut holder, _) = server.hold("errs", HOLDER_LEASE_MS).await;
        let mut waiter = server.wait_in_line("errs", LEASE_MS).await;
        holder.send(&bytes).await;
        let (got, reason) = holder.expect_error_then_close().await;
        assert_eq!(got, code, "{reason}");
        if code == 0x13 {
            assert!(reason.contains(&format!("0x{:02x}", bytes[0])), "{reason}");
        }
        // The holder's lock goes to the waiter when the holder's lease
        // (from its ACQUIRE, its last frame) runs out, not at the error.
        assert!(matches!(waiter.recv().await, ServerFrame::Acquired { .. }));
        assert!(asked.elapsed() >= Duration::from_millis(HOLDER_LEASE_MS.into()));
        drop(waiter);
        common::eventually("lock forgotten", || server.handle.counts().locks == 0).await;
    }
    server.stop().await;
}

/// Heartbeats pipelined before a bad byte are answered, in order, first.
#[tokio::test]
async fn heartbeats_before_a_bad_byte_are_answered() {
    let server = TestServer::start().await;
    let (mut holder, token) = server.hold("pipe", LEASE_MS).await;
    holder.send(&[msg::HEARTBEAT, msg::HEARTBEAT, 0x55]).await;
    assert_eq!(holder.recv().await, ServerFrame::Acquired { token });
    assert_eq!(holder.recv().await, ServerFrame::Acquired { token });
    let (code, _) = holder.expect_error_then_close().await;
    assert_eq!(code, 0x13);
    server.stop_and_drop(holder).await;
}

#[tokio::test]
async fn heartbeat_replies_carry_state_and_the_grant_token() {
    let server = TestServer::start().await;
    let (mut holder, token) = server.hold("state", LEASE_MS).await;
    let mut waiter = server.wait_in_line("state", LEASE_MS).await;
    for _ in 0..3 {
        assert_eq!(holder.heartbeat().await, ServerFrame::Acquired { token });
        assert_eq!(waiter.heartbeat().await, ServerFrame::Waiting);
    }
    drop(holder);
    let pushed = waiter.recv().await;
    let ServerFrame::Acquired { token: new_token } = pushed else {
        panic!("expected push, got {pushed:?}");
    };
    assert!(new_token > token);
    // Every later ACQUIRED carries the token of the grant.
    assert_eq!(
        waiter.heartbeat().await,
        ServerFrame::Acquired { token: new_token }
    );
    server.stop_and_drop(waiter).await;
}

/// A waiter that sends nothing after ACQUIRE is pushed the lock.
#[tokio::test]
async fn promotion_is_pushed_to_a_silent_waiter() {
    let server = TestServer::start().await;
    let (holder, _) = server.hold("push", LEASE_MS).await;
    let mut waiter = server.wait_in_line("push", LEASE_MS).await;
    assert_eq!(waiter.recv_within(Duration::from_millis(100)).await, None);
    let released = Instant::now();
    drop(holder);
    assert!(matches!(waiter.recv().await, ServerFrame::Acquired { .. }));
    let handover = released.elapsed();
    assert!(
        handover < Duration::from_secs(1),
        "handover took {handover:?}"
    );
    server.stop_and_drop(waiter).await;
}

#[tokio::test]
async fn fifo_over_many_waiters_with_increasing_tokens() {
    let server = TestServer::start().await;
    let (holder, first_token) = server.hold("fifo", LEASE_MS).await;
    let mut waiters = Vec::new();
    for _ in 0..8 {
        waiters.push(server.wait_in_line("fifo", LEASE_MS).await);
    }
    let queued: Vec<_> = server
        .handle
        .lock("fifo")
        .expect("lock")
        .waiters
        .iter()
        .map(|w| w.remote_addr)
        .collect();
    let expected: Vec<_> = waiters.iter().map(|w| w.local_addr()).collect();
    assert_eq!(queued, expected, "queue in arrival order");

    drop(holder);
    let mut last = first_token;
    for (i, mut waiter) in waiters.into_iter().enumerate() {
        let ServerFrame::Acquired { token } = waiter.recv().await else {
            panic!("waiter {i} not promoted");
        };
        assert!(token > last, "token of waiter {i} must increase");
        last = token;
        drop(waiter);
    }
    common::eventually("lock forgotten", || server.handle.counts().locks == 0).await;
    server.stop().await;
}

/// Heartbeats every quarter lease keep a holder for twelve leases while a
/// waiter stands in line. The subject is the passage of leases, not the
/// socket: the real session code over in-memory pipes on tokio's paused
/// clock (as in lease_timing.rs), so no scheduler stall can pass for
/// silence and the test waits for no real time.
#[tokio::test(start_paused = true)]
async fn heartbeats_keep_a_holder_for_many_leases() {
    let handle = Server::new(ServerConfig::default()).handle();
    let lease = Duration::from_millis(400);
    let mut holder = Peer::pipe(&handle, 1);
    let ServerFrame::Acquired { token } = holder.acquire("long", 400).await else {
        panic!("the first ACQUIRE of a free lock is granted");
    };
    let mut waiter = Peer::pipe(&handle, 2);
    assert_eq!(waiter.acquire("long", 60_000).await, ServerFrame::Waiting);
    let start = Instant::now();
    // 12 leases, heartbeating every quarter lease.
    while start.elapsed() < lease * 12 {
        tokio::time::sleep(lease / 4).await;
        assert_eq!(holder.heartbeat().await, ServerFrame::Acquired { token });
    }
    assert!(start.elapsed() >= lease * 12);
    assert_eq!(
        waiter.recv_within(Duration::ZERO).await,
        None,
        "waiter must not be promoted"
    );
    assert_eq!(handle.lock("long").expect("held").holder.token, token);
}

/// Real time: a silent holder is replaced after its lease, not before.
/// Tolerance: expiry never early; at most 500 ms late, for a loaded 2-core
/// CI machine (the timer itself is exact to the millisecond: see the
/// paused-time tests in lease_timing.rs).
#[tokio::test]
async fn silent_holder_is_replaced_after_its_lease_and_not_before() {
    let server = TestServer::start().await;
    let lease = Duration::from_millis(300);
    // Measured from before the ACQUIRE is sent: the server starts the lease
    // when it reads the frame, which is after this instant (and up to a
    // round trip before the client sees the reply).
    let sent_at = Instant::now();
    let (silent_holder, token) = server.hold("silent", 300).await;
    let mut waiter = server.wait_in_line("silent", 60_000).await;
    let ServerFrame::Acquired { token: new_token } = waiter.recv().await else {
        panic!("waiter not promoted");
    };
    let waited = sent_at.elapsed();
    assert!(new_token > token);
    assert!(waited >= lease, "promoted early, after {waited:?}");
    assert!(
        waited < lease + Duration::from_millis(500),
        "promoted late, after {waited:?}"
    );
    server.stop_and_drop((silent_holder, waiter)).await;
}

#[tokio::test]
async fn silent_waiter_loses_its_place() {
    let server = TestServer::start().await;
    let (holder, _) = server.hold("line", LEASE_MS).await;
    let mut silent = server.wait_in_line("line", 200).await;
    let mut patient = server.wait_in_line("line", LEASE_MS).await;
    // The silent waiter is dropped after its lease: connection closed.
    silent.expect_eof().await;
    assert_eq!(server.handle.lock("line").expect("held").waiters.len(), 1);
    drop(holder);
    assert!(matches!(patient.recv().await, ServerFrame::Acquired { .. }));
    server.stop_and_drop((silent, patient)).await;
}

#[tokio::test]
async fn a_frame_delivered_one_byte_at_a_time() {
    let server = TestServer::start().await;
    let mut peer = server.connect().await;
    let bytes = acquire_bytes(1, LEASE_MS, "bytes/€".as_bytes());
    for byte in &bytes {
        peer.send(std::slice::from_ref(byte)).await;
        tokio::task::yield_now().await;
    }
    let ServerFrame::Acquired { token } = peer.recv().await else {
        panic!("not granted");
    };
    assert_eq!(peer.heartbeat().await, ServerFrame::Acquired { token });
    assert!(server.handle.lock("bytes/€").is_some());
    server.stop_and_drop(peer).await;
}

#[tokio::test]
async fn names_are_exact_bytes() {
    let server = TestServer::start().await;
    let max = "m".repeat(255);
    let euro = "€".repeat(85); // 255 bytes
    let names = [
        "a",
        "A",
        " a",
        "a ",
        "ä",
        "日本/ロック",
        max.as_str(),
        euro.as_str(),
    ];
    let mut holders = Vec::new();
    for name in names {
        // All distinct locks: every one is granted at once.
        holders.push(server.hold(name, LEASE_MS).await);
    }
    let held: Vec<String> = server
        .handle
        .locks(|_| true)
        .iter()
        .map(|l| l.name.to_string())
        .collect();
    let mut expected: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    expected.sort();
    assert_eq!(held, expected);
    // A second claim on one of them queues: same bytes, same lock.
    server.wait_in_line(" a", LEASE_MS).await;
    server.stop_and_drop(holders).await;
}

/// A client that never reads is dropped after io-timeout (its lock handed
/// on when its lease runs out: `server_endings.rs`); a healthy client keeps
/// being served meanwhile.
#[tokio::test]
async fn a_client_that_never_reads_is_dropped_without_delaying_others() {
    // A client delayed behind the stuck one would wait at least io-timeout.
    let io_timeout = Duration::from_millis(1_500);
    let server = TestServer::start_with(ServerConfig::default().with_io_timeout(io_timeout)).await;
    let (mut stuck, _) = server.hold("stuck", 3_000).await;
    let mut waiter = server.wait_in_line("stuck", 60_000).await;
    let (mut healthy, healthy_token) = server.hold("healthy", 60_000).await;

    // Flood heartbeats without reading: replies (9 bytes each) pile up until
    // the server's writes block.
    let flood = tokio::spawn(async move {
        let burst = vec![msg::HEARTBEAT; 64 * 1024];
        for _ in 0..2_000 {
            if tokio::io::AsyncWriteExt::write_all(&mut stuck.stream, &burst)
                .await
                .is_err()
            {
                break;
            }
        }
    });
    let start = Instant::now();
    let mut worst = Duration::ZERO;
    loop {
        let sent = Instant::now();
        assert_eq!(
            healthy.heartbeat().await,
            ServerFrame::Acquired {
                token: healthy_token
            }
        );
        worst = worst.max(sent.elapsed());
        if let Some(frame) = waiter.recv_within(Duration::from_millis(20)).await {
            assert!(matches!(frame, ServerFrame::Acquired { .. }), "{frame:?}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "stuck holder never dropped"
        );
    }
    assert!(
        worst < Duration::from_millis(750),
        "healthy heartbeat took {worst:?}"
    );
    flood.abort();
    server.stop_and_drop((waiter, healthy)).await;
}

#[tokio::test]
async fn first_acquire_must_arrive_within_io_timeout() {
    let io_timeout = Duration::from_millis(300);
    let server = TestServer::start_with(ServerConfig::default().with_io_timeout(io_timeout)).await;
    let started = Instant::now();
    let mut idle = server.connect().await;
    let mut partial = server.connect().await;
    partial
        .send(&acquire_bytes(1, LEASE_MS, b"slow")[..5])
        .await;
    idle.expect_eof().await;
    partial.expect_eof().await;
    let elapsed = started.elapsed();
    assert!(elapsed >= io_timeout, "closed early: {elapsed:?}");
    assert_eq!(server.handle.counts().locks, 0);
    server.stop_and_drop((idle, partial)).await;
}

#[tokio::test]
async fn shutdown_sends_error_0x01_to_every_session() {
    let server = TestServer::start().await;
    let (holder, _) = server.hold("bye", LEASE_MS).await;
    let waiter = server.wait_in_line("bye", LEASE_MS).await;
    let (other, _) = server.hold("other", LEASE_MS).await;
    let handle = server.handle.clone();
    let stopping = tokio::spawn(server.stop());
    // Each peer closes once it has read the goodbye, so the server's
    // error drain ends on its EOF.
    for mut peer in [holder, waiter, other] {
        let (code, _) = peer.expect_error_then_close().await;
        assert_eq!(code, 0x01);
    }
    stopping.await.expect("stopped");
    // Nothing was granted during shutdown.
    assert_eq!(handle.counts().locks, 0);
}

#[tokio::test]
async fn admin_force_release_and_kick() {
    let server = TestServer::start().await;
    let (mut holder, token) = server.hold("adm", LEASE_MS).await;
    let mut first = server.wait_in_line("adm", LEASE_MS).await;
    let mut second = server.wait_in_line("adm", LEASE_MS).await;
    let mut third = server.wait_in_line("adm", LEASE_MS).await;

    let kicked = server
        .handle
        .kick_waiter("adm", second.local_addr())
        .expect("kicked");
    assert_eq!(kicked.remote_addr, second.local_addr());
    assert_eq!(second.expect_error_then_close().await.0, 0x02);
    assert_eq!(
        server.handle.kick_waiter("adm", second.local_addr()),
        Err(AdminRefused::NotFound)
    );

    let released = server.handle.force_release("adm").expect("released");
    assert_eq!(released.token, token);
    assert_eq!(holder.expect_error_then_close().await.0, 0x02);
    let ServerFrame::Acquired { token: next } = first.recv().await else {
        panic!("first waiter not promoted");
    };
    assert!(next > token);
    assert_eq!(server.handle.lock("adm").expect("held").holder.token, next);
    drop(first);
    assert!(matches!(third.recv().await, ServerFrame::Acquired { .. }));
    assert_eq!(
        server.handle.force_release("nobody"),
        Err(AdminRefused::NotFound)
    );
    server.stop_and_drop((holder, second, third)).await;
}

/// TCP is a stream: heartbeats may arrive in the same segment as the
/// ACQUIRE, and each gets its reply after the ACQUIRE's. (The first reply
/// once overwrote them in the shared buffer.)
#[tokio::test]
async fn heartbeats_pipelined_behind_the_acquire_are_answered() {
    let server = TestServer::start().await;
    for (name, heartbeats) in [("p1", 1usize), ("p3", 3), ("p40", 40)] {
        let mut peer = server.connect().await;
        let mut bytes = acquire_bytes(1, LEASE_MS, name.as_bytes());
        bytes.extend(std::iter::repeat_n(msg::HEARTBEAT, heartbeats));
        peer.send(&bytes).await;
        let ServerFrame::Acquired { token } = peer.recv().await else {
            panic!("{name}: not granted");
        };
        for i in 0..heartbeats {
            assert_eq!(
                peer.recv().await,
                ServerFrame::Acquired { token },
                "{name}: reply {i}"
            );
        }
        assert_eq!(peer.heartbeat().await, ServerFrame::Acquired { token });
    }
    server.stop().await;
}

/// Records the reason of every release.
#[derive(Default)]
struct ReleaseReasons(std::sync::Mutex<Vec<monolock_server::ReleaseReason>>);

impl monolock_server::Observer for ReleaseReasons {
    fn observe(&self, event: &monolock_server::Event<'_>) {
        if let monolock_server::Event::Released { reason, .. } = event {
            self.0.lock().expect("reasons").push(*reason);
        }
    }
}

/// A holder that sends a heartbeat and resets its connection at once makes
/// the reply's write fail: that is a client that closed (`graceful`), not a
/// client that stopped reading (`io_timeout`).
#[tokio::test]
async fn a_write_to_a_closed_peer_is_a_graceful_release() {
    let reasons = std::sync::Arc::new(ReleaseReasons::default());
    let server =
        TestServer::start_with(ServerConfig::default().with_observer(reasons.clone())).await;
    for i in 0..20 {
        let (peer, _) = server.hold(&format!("reset-{i}"), LEASE_MS).await;
        let mut stream = peer.stream;
        socket2::SockRef::from(&stream)
            .set_linger(Some(Duration::ZERO))
            .expect("linger");
        tokio::io::AsyncWriteExt::write_all(&mut stream, &[msg::HEARTBEAT])
            .await
            .expect("heartbeat");
        drop(stream);
    }
    common::eventually("20 releases", || {
        reasons.0.lock().expect("reasons").len() == 20
    })
    .await;
    let reasons = reasons.0.lock().expect("reasons").clone();
    assert!(
        reasons
            .iter()
            .all(|r| *r == monolock_server::ReleaseReason::Graceful),
        "{reasons:?}"
    );
    server.stop().await;
}
