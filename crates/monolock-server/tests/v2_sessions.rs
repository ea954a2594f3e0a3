//! Protocol v2 over real sockets: a session carrying many claims, every
//! rule of docs/protocol.md ("Protocol version 2") and every bad input.

mod common;

use std::{sync::Arc, time::Duration};

use common::{TestServer, eventually};
use monolock_proto::{
    ErrorCode, LockName, ServerFrame as V1Frame,
    v2::{self, Mode, ServerFrame},
};
use monolock_server::{Authorizer, ServerConfig};
use monolock_testkit::v2::RawV2;

const LEASE: u32 = 10_000;

fn token_of(frame: &ServerFrame) -> u64 {
    match frame {
        ServerFrame::Acquired { token, .. } | ServerFrame::Granted { token, .. } => *token,
        other => panic!("expected a grant, got {other:?}"),
    }
}

fn holder_port(server: &TestServer, name: &str) -> Option<u16> {
    server
        .handle
        .lock(name)
        .map(|lock| lock.holder.remote_addr.port())
}

fn waiters(server: &TestServer, name: &str) -> usize {
    server
        .handle
        .lock(name)
        .map_or(0, |lock| lock.waiters.len())
}

#[tokio::test]
async fn open_acquire_try_release() {
    let server = TestServer::start().await;
    let (mut a, opened) = RawV2::open(server.addr, LEASE).await;
    assert!(opened.session > 0);
    assert_eq!(opened.max_claims, v2::DEFAULT_MAX_CLAIMS);
    assert_eq!(server.handle.sessions_v2(), 1);
    let held = a.acquire(1, Mode::Wait, "deploy").await;
    assert!(matches!(held, ServerFrame::Acquired { claim: 1, .. }));
    let (mut b, other) = RawV2::open(server.addr, LEASE).await;
    assert_ne!(other.session, opened.session);
    assert_eq!(
        b.acquire(7, Mode::Try, "deploy").await,
        ServerFrame::Busy { claim: 7 }
    );
    assert_eq!(waiters(&server, "deploy"), 0, "a try never queues");
    // The claim id of a BUSY is free: the same id, another lock.
    assert!(matches!(
        b.acquire(7, Mode::Try, "other").await,
        ServerFrame::Acquired { claim: 7, .. }
    ));
    assert_eq!(a.release(1).await, ServerFrame::Released { claim: 1 });
    assert_eq!(server.handle.lock("deploy"), None);
    assert_eq!(a.ping().await, ServerFrame::Pong);
    server.stop().await;
}

/// FIFO across sessions, and RELEASED only once the lock is handed on.
#[tokio::test]
async fn released_means_handed_on_in_fifo_order() {
    let server = TestServer::start().await;
    let (mut a, _) = RawV2::open(server.addr, LEASE).await;
    let (mut b, _) = RawV2::open(server.addr, LEASE).await;
    let (mut c, _) = RawV2::open(server.addr, LEASE).await;
    let first = token_of(&a.acquire(1, Mode::Wait, "l").await);
    assert_eq!(
        b.acquire(5, Mode::Wait, "l").await,
        ServerFrame::Waiting { claim: 5 }
    );
    assert_eq!(
        c.acquire(9, Mode::Wait, "l").await,
        ServerFrame::Waiting { claim: 9 }
    );
    let b_port = server.handle.lock("l").expect("held").waiters[0]
        .remote_addr
        .port();
    assert_eq!(a.release(1).await, ServerFrame::Released { claim: 1 });
    // Read RELEASED: the table has already handed the lock to b.
    assert_eq!(holder_port(&server, "l"), Some(b_port));
    let granted = b.recv().await;
    assert!(matches!(granted, ServerFrame::Granted { claim: 5, .. }));
    assert!(token_of(&granted) > first);
    assert_eq!(waiters(&server, "l"), 1);
    assert_eq!(b.release(5).await, ServerFrame::Released { claim: 5 });
    assert!(matches!(
        c.recv().await,
        ServerFrame::Granted { claim: 9, .. }
    ));
    server.stop().await;
}

#[tokio::test]
async fn release_of_a_waiting_claim_leaves_the_queue() {
    let server = TestServer::start().await;
    let (mut a, _) = RawV2::open(server.addr, LEASE).await;
    let (mut b, _) = RawV2::open(server.addr, LEASE).await;
    a.acquire(1, Mode::Wait, "q").await;
    assert_eq!(
        b.acquire(2, Mode::Wait, "q").await,
        ServerFrame::Waiting { claim: 2 }
    );
    assert_eq!(waiters(&server, "q"), 1);
    assert_eq!(b.release(2).await, ServerFrame::Released { claim: 2 });
    assert_eq!(waiters(&server, "q"), 0);
    assert_eq!(a.release(1).await, ServerFrame::Released { claim: 1 });
    assert_eq!(server.handle.lock("q"), None);
    // b was never granted: a PING is answered with nothing before it.
    assert_eq!(b.ping().await, ServerFrame::Pong);
    server.stop().await;
}

/// The short-lock case: RELEASE and the next ACQUIRE of the same id in
/// one write, answered in order.
#[tokio::test]
async fn a_release_and_the_next_acquire_pipelined_in_one_write() {
    let server = TestServer::start().await;
    let (mut a, _) = RawV2::open(server.addr, LEASE).await;
    let mut last = token_of(&a.acquire(3, Mode::Wait, "cycle").await);
    for _ in 0..50 {
        let mut bytes = v2::release_frame(3).to_vec();
        v2::ClientFrame::Acquire {
            claim: 3,
            mode: Mode::Wait,
            name: LockName::new("cycle").expect("name"),
        }
        .encode(&mut bytes);
        a.send_raw(&bytes).await;
        assert_eq!(a.recv().await, ServerFrame::Released { claim: 3 });
        let token = token_of(&a.recv().await);
        assert!(token > last);
        last = token;
    }
    server.stop().await;
}

/// Many claims on one connection; the connection's end ends every one of
/// them at once: held locks are handed on, waiters leave their queues.
#[tokio::test]
async fn the_session_end_ends_every_claim() {
    let server = TestServer::start().await;
    let (mut a, _) = RawV2::open(server.addr, LEASE).await;
    let (mut b, _) = RawV2::open(server.addr, LEASE).await;
    for claim in 0..100 {
        let reply = a.acquire(claim, Mode::Wait, &format!("many/{claim}")).await;
        assert!(matches!(reply, ServerFrame::Acquired { .. }), "{reply:?}");
    }
    assert_eq!(server.handle.counts().locks, 100);
    // b holds "other", and a waits for it; b waits for one of a's locks.
    b.acquire(1, Mode::Wait, "other").await;
    assert_eq!(
        a.acquire(100, Mode::Wait, "other").await,
        ServerFrame::Waiting { claim: 100 }
    );
    assert_eq!(
        b.acquire(2, Mode::Wait, "many/42").await,
        ServerFrame::Waiting { claim: 2 }
    );
    drop(a);
    // The push is the event: a's claims ended with its connection.
    assert!(matches!(
        b.recv().await,
        ServerFrame::Granted { claim: 2, .. }
    ));
    eventually("every lock of the closed session released", || {
        server.handle.counts().locks == 2
    })
    .await;
    assert_eq!(waiters(&server, "other"), 0, "a's waiter left the queue");
    server.stop().await;
}

#[tokio::test]
async fn bad_claim_frames_are_refused_and_the_session_lives_on() {
    let server = TestServer::start().await;
    let (mut a, _) = RawV2::open(server.addr, LEASE).await;
    let refused = |frame: ServerFrame| match frame {
        ServerFrame::Refused { claim, code, .. } => (claim, code),
        other => panic!("expected REFUSED, got {other:?}"),
    };
    assert_eq!(refused(a.release(9).await), (9, ErrorCode::UNKNOWN_CLAIM));
    let held = token_of(&a.acquire(1, Mode::Wait, "mine").await);
    assert_eq!(
        refused(a.acquire(1, Mode::Wait, "else").await),
        (1, ErrorCode::CLAIM_IN_USE)
    );
    assert_eq!(server.handle.lock("else"), None);
    // Mode 2, an empty name, a name that is not UTF-8.
    a.send_raw(&[0x21, 0, 0, 0, 4, 2, 1, b'x']).await;
    assert_eq!(refused(a.recv().await), (4, ErrorCode::UNKNOWN_MODE));
    a.send_raw(&[0x21, 0, 0, 0, 5, 0, 0]).await;
    assert_eq!(refused(a.recv().await), (5, ErrorCode::CLAIM_EMPTY_NAME));
    a.send_raw(&[0x21, 0, 0, 0, 6, 0, 1, 0xff]).await;
    assert_eq!(refused(a.recv().await), (6, ErrorCode::CLAIM_NAME_NOT_UTF8));
    // Claim 1 is untouched by all of it.
    assert_eq!(
        server.handle.lock("mine").map(|l| l.holder.token),
        Some(held)
    );
    assert_eq!(a.release(1).await, ServerFrame::Released { claim: 1 });
    assert_eq!(a.ping().await, ServerFrame::Pong);
    server.stop().await;
}

/// A frame that breaks the session ends it with ERROR, after the replies
/// to the frames before it, and releases its claims.
#[tokio::test]
async fn session_errors_end_every_claim() {
    for (bad, code) in [
        (0x02, ErrorCode::OUT_OF_STATE),
        (0x01, ErrorCode::OUT_OF_STATE),
        (0x7f, ErrorCode::UNKNOWN_MESSAGE_TYPE),
    ] {
        let server = TestServer::start().await;
        // A short lease: the server keeps the held lock until it would have
        // run out (server_endings.rs has the timing).
        let (mut a, _) = RawV2::open(server.addr, 300).await;
        a.acquire(1, Mode::Wait, "held").await;
        a.send_raw(&[0x23, bad]).await;
        assert_eq!(a.recv().await, ServerFrame::Pong);
        assert_eq!(a.expect_error().await, code);
        eventually("the lock released", || server.handle.lock("held").is_none()).await;
        server.stop().await;
    }
}

#[tokio::test]
async fn the_first_frame_chooses_the_version() {
    let server = TestServer::start().await;
    let code = |bytes: &'static [u8]| {
        let addr = server.addr;
        async move {
            let mut client = RawV2::connect(addr).await;
            client.send_raw(bytes).await;
            client.expect_error().await
        }
    };
    assert_eq!(
        code(&[1, 3, 0, 0, 0, 1]).await,
        ErrorCode::UNSUPPORTED_VERSION
    );
    assert_eq!(
        code(&[1, 2, 0, 0, 0, 0]).await,
        ErrorCode::LEASE_NOT_POSITIVE
    );
    assert_eq!(code(&[0x21, 2]).await, ErrorCode::FIRST_MESSAGE_NOT_ACQUIRE);
    // OPEN in pieces, then a pipelined ACQUIRE behind it.
    let mut a = RawV2::connect(server.addr).await;
    a.send_raw(&[1]).await;
    a.send_raw(&[2, 0, 0]).await;
    let mut rest = vec![0x27, 0x10];
    v2::ClientFrame::Acquire {
        claim: 1,
        mode: Mode::Try,
        name: LockName::new("piece").expect("name"),
    }
    .encode(&mut rest);
    a.send_raw(&rest).await;
    assert!(matches!(a.recv().await, ServerFrame::Opened { .. }));
    assert!(matches!(
        a.recv().await,
        ServerFrame::Acquired { claim: 1, .. }
    ));
    server.stop().await;
}

/// v1 and v2 claims share the same queues and the same token counter.
#[tokio::test]
async fn v1_and_v2_claims_queue_together() {
    let server = TestServer::start().await;
    let (v1_holder, first) = server.hold("shared", LEASE).await;
    let (mut a, _) = RawV2::open(server.addr, LEASE).await;
    assert_eq!(
        a.acquire(1, Mode::Wait, "shared").await,
        ServerFrame::Waiting { claim: 1 }
    );
    let mut v1_waiter = server.wait_in_line("shared", LEASE).await;
    drop(v1_holder);
    let granted = a.recv().await;
    assert!(token_of(&granted) > first);
    assert_eq!(a.release(1).await, ServerFrame::Released { claim: 1 });
    match v1_waiter.recv().await {
        V1Frame::Acquired { token } => assert!(token > token_of(&granted)),
        other => panic!("{other:?}"),
    }
    server.stop().await;
}

#[tokio::test]
async fn the_claim_bound_refuses_one_claim_and_keeps_the_session() {
    let server =
        TestServer::start_with(ServerConfig::default().with_max_claims_per_session(2)).await;
    let (mut a, opened) = RawV2::open(server.addr, LEASE).await;
    assert_eq!(opened.max_claims, 2);
    a.acquire(1, Mode::Wait, "one").await;
    a.acquire(2, Mode::Wait, "two").await;
    match a.acquire(3, Mode::Wait, "three").await {
        ServerFrame::Refused { claim: 3, code, .. } => {
            assert_eq!(code, ErrorCode::TOO_MANY_CLAIMS);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(server.handle.lock("three"), None);
    assert_eq!(a.release(1).await, ServerFrame::Released { claim: 1 });
    assert!(matches!(
        a.acquire(3, Mode::Wait, "three").await,
        ServerFrame::Acquired { claim: 3, .. }
    ));
    server.stop().await;
}

/// Force-release and kick end one claim; the session and its other
/// claims live on.
#[tokio::test]
async fn force_release_and_kick_revoke_one_claim() {
    let server = TestServer::start().await;
    let (mut a, _) = RawV2::open(server.addr, LEASE).await;
    let (mut b, _) = RawV2::open(server.addr, LEASE).await;
    a.acquire(1, Mode::Wait, "forced").await;
    a.acquire(2, Mode::Wait, "kept").await;
    assert_eq!(
        b.acquire(1, Mode::Wait, "forced").await,
        ServerFrame::Waiting { claim: 1 }
    );
    server.handle.force_release("forced").expect("held");
    match a.recv().await {
        ServerFrame::Revoked { claim: 1, code, .. } => assert_eq!(code, ErrorCode::CLAIM_REVOKED),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        b.recv().await,
        ServerFrame::Granted { claim: 1, .. }
    ));
    // The revoked id is free; the other claim is still held.
    assert!(matches!(
        a.release(1).await,
        ServerFrame::Refused {
            code: ErrorCode::UNKNOWN_CLAIM,
            ..
        }
    ));
    assert_eq!(a.release(2).await, ServerFrame::Released { claim: 2 });
    // Kick a's waiting claim on b's lock.
    assert_eq!(
        a.acquire(5, Mode::Wait, "forced").await,
        ServerFrame::Waiting { claim: 5 }
    );
    let a_addr = server.handle.lock("forced").expect("held").waiters[0].remote_addr;
    server.handle.kick_waiter("forced", a_addr).expect("queued");
    assert!(matches!(
        a.recv().await,
        ServerFrame::Revoked {
            claim: 5,
            code: ErrorCode::CLAIM_REVOKED,
            ..
        }
    ));
    assert_eq!(a.ping().await, ServerFrame::Pong);
    server.stop().await;
}

/// A revocation the client has not read yet comes before the reply to
/// its RELEASE.
#[tokio::test]
async fn a_revoked_claim_is_told_before_the_release_reply() {
    let server = TestServer::start().await;
    let (mut a, _) = RawV2::open(server.addr, LEASE).await;
    a.acquire(1, Mode::Wait, "r").await;
    server.handle.force_release("r").expect("held");
    // Sent without reading first: REVOKED may or may not have been written
    // yet, the order on the wire is the same.
    a.send_raw(&v2::release_frame(1)).await;
    assert!(matches!(
        a.recv().await,
        ServerFrame::Revoked { claim: 1, .. }
    ));
    assert!(matches!(
        a.recv().await,
        ServerFrame::Refused {
            claim: 1,
            code: ErrorCode::UNKNOWN_CLAIM,
            ..
        }
    ));
    server.stop().await;
}

/// A silent session loses every claim, held and waiting, at its lease;
/// PINGs keep it alive.
#[tokio::test]
async fn lease_expiry_ends_the_session_and_pings_keep_it() {
    let server = TestServer::start().await;
    let (mut quiet, _) = RawV2::open(server.addr, 300).await;
    let (mut busy, _) = RawV2::open(server.addr, 300).await;
    let (mut watcher, _) = RawV2::open(server.addr, LEASE).await;
    quiet.acquire(1, Mode::Wait, "e").await;
    busy.acquire(1, Mode::Wait, "f").await;
    assert_eq!(
        quiet.acquire(2, Mode::Wait, "f").await,
        ServerFrame::Waiting { claim: 2 }
    );
    assert_eq!(
        watcher.acquire(1, Mode::Wait, "e").await,
        ServerFrame::Waiting { claim: 1 }
    );
    // busy heartbeats while quiet says nothing.
    let ping_busy = async {
        for _ in 0..20 {
            assert_eq!(busy.ping().await, ServerFrame::Pong);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let (granted, ()) = tokio::join!(watcher.recv(), ping_busy);
    assert!(matches!(granted, ServerFrame::Granted { claim: 1, .. }));
    quiet.expect_closed().await;
    assert_eq!(waiters(&server, "f"), 0, "the silent waiter left");
    assert!(holder_port(&server, "f").is_some(), "busy still holds f");
    assert_eq!(busy.release(1).await, ServerFrame::Released { claim: 1 });
    server.stop().await;
}

#[tokio::test]
async fn idle_sessions_are_closed_and_busy_ones_are_not() {
    let server = TestServer::start_with(
        ServerConfig::default().with_idle_timeout(Duration::from_millis(200)),
    )
    .await;
    let (mut idle, _) = RawV2::open(server.addr, LEASE).await;
    let (mut busy, _) = RawV2::open(server.addr, LEASE).await;
    busy.acquire(1, Mode::Wait, "keep").await;
    assert_eq!(idle.expect_error().await, ErrorCode::IDLE_SESSION);
    assert_eq!(busy.ping().await, ServerFrame::Pong);
    // Idle again once its last claim is released.
    assert_eq!(busy.release(1).await, ServerFrame::Released { claim: 1 });
    assert_eq!(busy.expect_error().await, ErrorCode::IDLE_SESSION);
    eventually("both sessions gone", || server.handle.sessions_v2() == 0).await;
    server.stop().await;
}

#[tokio::test]
async fn descriptor_pressure_closes_idle_sessions_first() {
    let server = TestServer::start().await;
    let (mut idle, _) = RawV2::open(server.addr, LEASE).await;
    let (mut busy, _) = RawV2::open(server.addr, LEASE).await;
    busy.acquire(1, Mode::Wait, "keep").await;
    assert_eq!(server.handle.close_idle_sessions(), 1);
    assert_eq!(idle.expect_error().await, ErrorCode::IDLE_SESSION);
    assert_eq!(busy.ping().await, ServerFrame::Pong);
    server.stop().await;
}

#[tokio::test]
async fn shutdown_ends_every_session_with_0x01() {
    let server = TestServer::start().await;
    let (mut idle, _) = RawV2::open(server.addr, LEASE).await;
    let (mut busy, _) = RawV2::open(server.addr, LEASE).await;
    busy.acquire(1, Mode::Wait, "s").await;
    server.handle.shutdown();
    assert_eq!(busy.expect_error().await, ErrorCode::SHUTTING_DOWN);
    assert_eq!(idle.expect_error().await, ErrorCode::SHUTTING_DOWN);
    server.stop().await;
}

struct Prefix(&'static str);

impl Authorizer for Prefix {
    fn allows(&self, _identity: &str, lock: &LockName) -> bool {
        lock.as_str().starts_with(self.0)
    }
}

#[tokio::test]
async fn the_acl_is_checked_per_claim() {
    let server =
        TestServer::start_with(ServerConfig::default().with_authorizer(Arc::new(Prefix("ok/"))))
            .await;
    let (mut a, _) = RawV2::open(server.addr, LEASE).await;
    assert!(matches!(
        a.acquire(1, Mode::Wait, "ok/1").await,
        ServerFrame::Acquired { claim: 1, .. }
    ));
    assert!(matches!(
        a.acquire(2, Mode::Wait, "no/2").await,
        ServerFrame::Refused {
            claim: 2,
            code: ErrorCode::CLAIM_NOT_AUTHORIZED,
            ..
        }
    ));
    assert_eq!(a.release(1).await, ServerFrame::Released { claim: 1 });
    server.stop().await;
}

/// A claim waiting behind another claim of its own session (locks are not
/// re-entrant) is granted when the first is released.
#[tokio::test]
async fn two_claims_of_one_session_on_one_lock_queue() {
    let server = TestServer::start().await;
    let (mut a, _) = RawV2::open(server.addr, LEASE).await;
    a.acquire(1, Mode::Wait, "self").await;
    assert_eq!(
        a.acquire(2, Mode::Wait, "self").await,
        ServerFrame::Waiting { claim: 2 }
    );
    // The GRANTED of the session's own next claim follows the RELEASED at
    // once.
    assert_eq!(a.release(1).await, ServerFrame::Released { claim: 1 });
    assert!(matches!(
        a.recv().await,
        ServerFrame::Granted { claim: 2, .. }
    ));
    server.stop().await;
}

#[tokio::test]
async fn metrics_count_sessions_and_idle_closes() {
    let metrics = Arc::new(monolock_server::Metrics::new());
    let server = TestServer::start_with(
        ServerConfig::default()
            .with_observer(metrics.clone())
            .with_idle_timeout(Duration::from_millis(100)),
    )
    .await;
    let (mut idle, _) = RawV2::open(server.addr, LEASE).await;
    let (mut busy, _) = RawV2::open(server.addr, LEASE).await;
    busy.acquire(1, Mode::Wait, "m").await;
    let text = metrics.render(&server.handle);
    assert!(text.contains("monolock_v2_sessions_active 2"), "{text}");
    assert!(text.contains("monolock_locks_held 1"), "{text}");
    assert_eq!(idle.expect_error().await, ErrorCode::IDLE_SESSION);
    eventually("one session left", || server.handle.sessions_v2() == 1).await;
    let text = metrics.render(&server.handle);
    assert!(
        text.contains("monolock_v2_idle_sessions_closed_total 1"),
        "{text}"
    );
    assert!(text.contains("monolock_v2_sessions_active 1"), "{text}");
    assert_eq!(busy.ping().await, ServerFrame::Pong);
    server.stop().await;
}
