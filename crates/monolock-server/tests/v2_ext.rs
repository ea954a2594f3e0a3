//! The version 2 extension, values and observers, over real sockets:
//! asking for it (HELLO / FEATURES), values on claims (ACQUIRE_VALUE,
//! PROCLAIM), watches (OBSERVE, every change in token order, each release
//! reason), LOOKUP, the bounds and the ACL (docs/protocol.md, "Version 2
//! extension: values and observers").

mod common;
#[path = "common/ext.rs"]
mod ext_client;

use std::{sync::Arc, time::Duration};

use common::{TestServer, eventually, within};
use ext_client::RawExt;
use monolock_proto::{
    ErrorCode, LockName,
    ext::{
        self, ClientFrame as ExtFrame, LockState, Response, ServerFrame as ExtServer, StateEvent,
    },
    v2::{self, ClientFrame, Mode, ServerFrame},
};
use monolock_server::{Authorizer, ServerConfig};

const LEASE: u32 = 30_000;

fn refused(id: u32, code: ErrorCode) -> impl Fn(&Response) -> bool {
    move |frame| {
        matches!(frame, Response::Base(ServerFrame::Refused { claim, code: got, .. })
            if *claim == id && *got == code)
    }
}

#[track_caller]
fn assert_refused(frame: &Response, id: u32, code: ErrorCode) {
    assert!(
        refused(id, code)(frame),
        "expected REFUSED {id} {code:?}, got {frame:?}"
    );
}

#[track_caller]
fn assert_change(state: &LockState, event: StateEvent, token: u64, value: &str) {
    assert_eq!(
        (state.event, state.token, state.value.as_str(), state.flags),
        (event, token, value, 0),
        "{state:?}"
    );
}

/// OPEN and HELLO in one write: OPENED, then FEATURES granting bit 0 and
/// the session's watch bound, byte for byte as docs/protocol.md shows.
#[tokio::test]
async fn hello_is_answered_with_features() {
    let server =
        TestServer::start_with(ServerConfig::default().with_max_watches_per_session(7)).await;
    let mut client = RawExt::connect(server.addr).await;
    client
        .send_raw(&[
            0x01, 0x02, 0x00, 0x00, 0x07, 0xd0, 0x24, 0x00, 0x00, 0x00, 0x01,
        ])
        .await;
    let mut replies = [0u8; 13 + 9];
    within("OPENED and FEATURES", async {
        use tokio::io::AsyncReadExt;
        client.stream.read_exact(&mut replies).await.expect("read");
    })
    .await;
    assert_eq!(replies[0], v2::msg::OPENED);
    assert_eq!(replies[13..], [0x39, 0, 0, 0, 1, 0, 0, 0, 7]);
    // Bits it does not know are not granted; the session is an ordinary
    // one in every other respect.
    let mut other = RawExt::connect(server.addr).await;
    let mut bytes = ClientFrame::Open {
        lease: monolock_proto::Lease::from_millis(LEASE).expect("lease"),
    }
    .to_bytes();
    ExtFrame::Hello {
        features: 0xffff_fffe,
    }
    .encode(&mut bytes);
    other.send_raw(&bytes).await;
    other.recv().await;
    assert_eq!(
        other.recv().await,
        Response::Ext(ExtServer::Features {
            features: 0,
            max_watches: 7
        })
    );
    // Not granted: the extension's frames are unknown, as on an older
    // server.
    other
        .send(&ExtFrame::Lookup {
            name: LockName::new("l").expect("name"),
        })
        .await;
    assert_eq!(
        other.expect_error().await.0,
        ErrorCode::UNKNOWN_MESSAGE_TYPE
    );
    server.stop().await;
}

/// HELLO after any other frame, or a second HELLO, is ERROR 0x19.
#[tokio::test]
async fn hello_anywhere_but_first_is_out_of_state() {
    let server = TestServer::start().await;
    let mut late = RawExt::connect(server.addr).await;
    late.send_base(&ClientFrame::Open {
        lease: monolock_proto::Lease::from_millis(LEASE).expect("lease"),
    })
    .await;
    late.recv().await;
    assert_eq!(late.ping().await, Response::Base(ServerFrame::Pong));
    late.send(&ExtFrame::Hello { features: 1 }).await;
    assert_eq!(late.expect_error().await.0, ErrorCode::OUT_OF_STATE);

    let (mut twice, _) = RawExt::open(server.addr, LEASE).await;
    twice.send(&ExtFrame::Hello { features: 1 }).await;
    assert_eq!(twice.expect_error().await.0, ErrorCode::OUT_OF_STATE);
    server.stop().await;
}

/// Without HELLO, every frame of the extension is answered exactly as a
/// server without the extension answers it: ERROR 0x13 with the same
/// reason, byte for byte, and the close.
#[tokio::test]
async fn extension_frames_without_hello_are_unknown_types_byte_for_byte() {
    let server = TestServer::start().await;
    let name = LockName::new("deploy").expect("name");
    let frames = [
        ExtFrame::AcquireValue {
            claim: 1,
            mode: Mode::Wait,
            name: name.clone(),
            value: "10.0.0.7:9000".to_owned(),
        },
        ExtFrame::Proclaim {
            claim: 1,
            value: "x".to_owned(),
        },
        ExtFrame::Observe {
            watch: 7,
            name: name.clone(),
        },
        ExtFrame::Unobserve { watch: 7 },
        ExtFrame::Lookup { name },
    ];
    for frame in frames {
        let bytes = frame.to_bytes();
        // What a server before the extension answers: its decoder's error.
        let Err(before) = v2::decode_request(&bytes) else {
            panic!("the base decoder knows {frame}");
        };
        let expected = ServerFrame::Error {
            code: before.code,
            reason: before.reason,
        }
        .to_bytes();
        let mut client = RawExt::connect(server.addr).await;
        client
            .send_base(&ClientFrame::Open {
                lease: monolock_proto::Lease::from_millis(LEASE).expect("lease"),
            })
            .await;
        client.recv().await;
        client.send_raw(&bytes).await;
        let mut got = Vec::new();
        within("the ERROR and the close", async {
            use tokio::io::AsyncReadExt;
            client.stream.read_to_end(&mut got).await.expect("read");
        })
        .await;
        assert_eq!(got, expected, "{frame}");
        assert_eq!(got[1], ErrorCode::UNKNOWN_MESSAGE_TYPE.0);
    }
    server.stop().await;
}

/// A value rides with its claim: LOOKUP and the admin snapshot show it,
/// PROCLAIM replaces it for a holder and for a waiter (whose grant then
/// carries it), and it is gone with the claim.
#[tokio::test]
async fn values_are_shown_replaced_and_cleared() {
    let server = TestServer::start().await;
    let (mut a, _) = RawExt::open(server.addr, LEASE).await;
    let (mut b, _) = RawExt::open(server.addr, LEASE).await;
    let token = a.hold(1, "deploy", "10.0.0.7:9000").await;
    let held = server.lock("deploy").expect("held");
    assert_eq!(&*held.holder.value, "10.0.0.7:9000");
    match b.lookup("deploy").await {
        Response::Ext(ExtServer::LockState(state)) => {
            assert_eq!(
                (state.event, state.token, state.value.as_str(), state.flags),
                (StateEvent::Held, token, "10.0.0.7:9000", 0)
            );
            assert!(state.since_ms > 0);
        }
        other => panic!("expected LOCK_STATE, got {other:?}"),
    }
    a.send(&ExtFrame::Proclaim {
        claim: 1,
        value: "10.0.0.7:9001".to_owned(),
    })
    .await;
    assert_eq!(
        a.recv().await,
        Response::Ext(ExtServer::Proclaimed { claim: 1 })
    );
    assert_eq!(
        &*server.lock("deploy").expect("held").holder.value,
        "10.0.0.7:9001"
    );
    // A waiter's value: replaced while it waits, carried by its grant.
    assert_eq!(
        b.acquire_value(4, Mode::Wait, "deploy", "first").await,
        Response::Base(ServerFrame::Waiting { claim: 4 })
    );
    assert_eq!(
        &*server.lock("deploy").expect("held").waiters[0].value,
        "first"
    );
    b.send(&ExtFrame::Proclaim {
        claim: 4,
        value: "10.0.0.8:9000".to_owned(),
    })
    .await;
    assert_eq!(
        b.recv().await,
        Response::Ext(ExtServer::Proclaimed { claim: 4 })
    );
    assert_eq!(
        a.release(1).await,
        Response::Base(ServerFrame::Released { claim: 1 })
    );
    assert!(matches!(
        b.recv().await,
        Response::Base(ServerFrame::Granted { claim: 4, .. })
    ));
    assert_eq!(
        &*server.lock("deploy").expect("held").holder.value,
        "10.0.0.8:9000"
    );
    // An empty PROCLAIM clears it; a plain ACQUIRE has none.
    b.send(&ExtFrame::Proclaim {
        claim: 4,
        value: String::new(),
    })
    .await;
    assert_eq!(
        b.recv().await,
        Response::Ext(ExtServer::Proclaimed { claim: 4 })
    );
    assert_eq!(&*server.lock("deploy").expect("held").holder.value, "");
    assert_eq!(
        b.release(4).await,
        Response::Base(ServerFrame::Released { claim: 4 })
    );
    match b.lookup("deploy").await {
        Response::Ext(ExtServer::LockState(state)) => {
            assert_eq!((state.event, state.value.as_str()), (StateEvent::Free, ""));
        }
        other => panic!("expected LOCK_STATE, got {other:?}"),
    }
    server.stop().await;
}

/// The documented validation order and codes of ACQUIRE_VALUE and
/// PROCLAIM; the session lives on after each.
#[tokio::test]
async fn bad_values_are_refused_in_order() {
    let server = TestServer::start().await;
    let (mut a, _) = RawExt::open(server.addr, LEASE).await;
    let long = "v".repeat(ext::MAX_VALUE_LEN + 1);
    let acquire_raw = |claim: u32, mode: u8, name: &[u8], value: &[u8]| {
        let mut bytes = vec![ext::msg::ACQUIRE_VALUE];
        bytes.extend_from_slice(&claim.to_be_bytes());
        bytes.push(mode);
        bytes.push(u8::try_from(name.len()).expect("short name"));
        bytes.extend_from_slice(name);
        bytes.extend_from_slice(&u16::try_from(value.len()).expect("value").to_be_bytes());
        bytes.extend_from_slice(value);
        bytes
    };
    for (bytes, code) in [
        (
            acquire_raw(1, 9, b"", long.as_bytes()),
            ErrorCode::UNKNOWN_MODE,
        ),
        (
            acquire_raw(1, 0, b"", long.as_bytes()),
            ErrorCode::CLAIM_EMPTY_NAME,
        ),
        (
            acquire_raw(1, 0, b"\xff", b"\xff"),
            ErrorCode::CLAIM_NAME_NOT_UTF8,
        ),
        (
            acquire_raw(1, 0, b"l", long.as_bytes()),
            ErrorCode::VALUE_TOO_LONG,
        ),
        (acquire_raw(1, 0, b"l", b"\xff"), ErrorCode::VALUE_NOT_UTF8),
    ] {
        a.send_raw(&bytes).await;
        assert_refused(&a.recv().await, 1, code);
    }
    // The full 1,024 bytes are a value.
    let full = "v".repeat(ext::MAX_VALUE_LEN);
    a.hold(1, "l", &full).await;
    assert_eq!(server.lock("l").expect("held").holder.value.len(), 1024);
    // Then as an ACQUIRE: the claim id in use.
    assert_refused(
        &a.acquire_value(1, Mode::Wait, "m", "x").await,
        1,
        ErrorCode::CLAIM_IN_USE,
    );
    // PROCLAIM: the value first, then the claim id.
    let mut proclaim = vec![ext::msg::PROCLAIM, 0, 0, 0, 9];
    proclaim.extend_from_slice(&[0, 1, 0xff]);
    a.send_raw(&proclaim).await;
    assert_refused(&a.recv().await, 9, ErrorCode::VALUE_NOT_UTF8);
    a.send(&ExtFrame::Proclaim {
        claim: 9,
        value: long.clone(),
    })
    .await;
    assert_refused(&a.recv().await, 9, ErrorCode::VALUE_TOO_LONG);
    a.send(&ExtFrame::Proclaim {
        claim: 9,
        value: "x".to_owned(),
    })
    .await;
    assert_refused(&a.recv().await, 9, ErrorCode::UNKNOWN_CLAIM);
    assert_eq!(a.ping().await, Response::Base(ServerFrame::Pong));
    server.stop().await;
}

/// A watch: OBSERVING and the INITIAL state, then every grant, value
/// replacement and release in the table's order; a hand-on is RELEASED
/// (the old token) then GRANTED (the new one); FREE names the last token
/// known; tokens never go back.
#[tokio::test]
async fn a_watch_sees_every_change_in_token_order() {
    let server = TestServer::start().await;
    let (mut observer, _) = RawExt::open(server.addr, LEASE).await;
    let initial = observer.observe(7, "deploy").await;
    assert_eq!(
        (
            initial.event,
            initial.token,
            initial.flags,
            initial.value.as_str()
        ),
        (StateEvent::Free, 0, ext::FLAG_INITIAL, "")
    );
    let (mut a, _) = RawExt::open(server.addr, LEASE).await;
    let (mut c, _) = RawExt::open(server.addr, LEASE).await;
    let first = a.hold(1, "deploy", "10.0.0.7:9000").await;
    let granted = observer.state(7).await;
    assert_change(&granted, StateEvent::Granted, first, "10.0.0.7:9000");
    assert!(granted.since_ms > 0);
    a.send(&ExtFrame::Proclaim {
        claim: 1,
        value: "10.0.0.7:9001".to_owned(),
    })
    .await;
    assert_eq!(
        a.recv().await,
        Response::Ext(ExtServer::Proclaimed { claim: 1 })
    );
    assert_change(
        &observer.state(7).await,
        StateEvent::Value,
        first,
        "10.0.0.7:9001",
    );
    assert_eq!(
        c.acquire_value(1, Mode::Wait, "deploy", "10.0.0.8:9000")
            .await,
        Response::Base(ServerFrame::Waiting { claim: 1 })
    );
    assert_eq!(
        a.release(1).await,
        Response::Base(ServerFrame::Released { claim: 1 })
    );
    let Response::Base(ServerFrame::Granted { token: second, .. }) = c.recv().await else {
        panic!("c not granted");
    };
    assert!(second > first);
    let released = observer.state(7).await;
    assert_change(&released, StateEvent::Released, first, "");
    assert_eq!(released.reason, Some(ext::ReleaseReason::Released));
    assert_change(
        &observer.state(7).await,
        StateEvent::Granted,
        second,
        "10.0.0.8:9000",
    );
    // A second watch now starts from HELD; a plain ACQUIRE's value is
    // empty.
    let now = observer.observe(8, "deploy").await;
    assert_eq!(
        (now.event, now.token, now.value.as_str()),
        (StateEvent::Held, second, "10.0.0.8:9000")
    );
    assert_eq!(
        c.release(1).await,
        Response::Base(ServerFrame::Released { claim: 1 })
    );
    for watch in [7, 8] {
        let released = observer.state(watch).await;
        assert_change(&released, StateEvent::Released, second, "");
    }
    let (v1, _) = server.acquire("deploy", LEASE).await;
    let third = match observer.state(7).await {
        state if state.event == StateEvent::Granted => state.token,
        other => panic!("expected GRANTED, got {other:?}"),
    };
    assert!(third > second);
    assert_change(&observer.state(8).await, StateEvent::Granted, third, "");
    drop(v1);
    for watch in [7, 8] {
        let released = observer.state(watch).await;
        assert_change(&released, StateEvent::Released, third, "");
        assert_eq!(released.reason, Some(ext::ReleaseReason::Released));
    }
    // A new watch of the free lock names the last holder it knows.
    let free = observer.observe(9, "deploy").await;
    assert_eq!((free.event, free.token), (StateEvent::Free, third));
    observer.send(&ExtFrame::Unobserve { watch: 7 }).await;
    // The RELEASED of watch 8 may come before UNOBSERVED; none after.
    let mut frames = Vec::new();
    loop {
        let frame = observer.recv().await;
        let done = frame == Response::Ext(ExtServer::Unobserved { watch: 7 });
        frames.push(frame);
        if done {
            break;
        }
    }
    assert!(frames.len() <= 2, "{frames:?}");
    assert_refused(
        &{
            observer.send(&ExtFrame::Unobserve { watch: 7 }).await;
            observer.recv().await
        },
        7,
        ErrorCode::UNKNOWN_CLAIM,
    );
    server.stop().await;
}

/// LOOKUP answers the state now, FREE or HELD, with flags 0; a lock held
/// by a version 1 session has the empty value.
#[tokio::test]
async fn lookup_answers_the_state_now() {
    let server = TestServer::start().await;
    let (mut a, _) = RawExt::open(server.addr, LEASE).await;
    match a.lookup("never").await {
        Response::Ext(ExtServer::LockState(state)) => assert_eq!(
            state,
            LockState {
                event: StateEvent::Free,
                flags: 0,
                token: 0,
                since_ms: 0,
                reason: None,
                value: String::new(),
            }
        ),
        other => panic!("expected LOCK_STATE, got {other:?}"),
    }
    let (_v1, token) = server.hold("plain", LEASE).await;
    match a.lookup("plain").await {
        Response::Ext(ExtServer::LockState(state)) => {
            assert_eq!(
                (state.event, state.token, state.value.as_str(), state.flags),
                (StateEvent::Held, token, "", 0)
            );
        }
        other => panic!("expected LOCK_STATE, got {other:?}"),
    }
    // A bad name is refused for the frame alone, naming id 0.
    a.send_raw(&[ext::msg::LOOKUP, 0]).await;
    assert_refused(&a.recv().await, 0, ErrorCode::CLAIM_EMPTY_NAME);
    assert_eq!(a.ping().await, Response::Base(ServerFrame::Pong));
    server.stop().await;
}

/// The release reasons a watch is told: `expired` for a holder silent
/// past its lease, `forced` for an administrator's force-release.
#[tokio::test]
async fn a_watch_is_told_expired_and_forced() {
    let server = TestServer::start().await;
    let (mut observer, _) = RawExt::open(server.addr, LEASE).await;
    observer.observe(1, "silent").await;
    observer.observe(2, "forced").await;
    // A holder that never speaks again after its grant: its lease of a
    // second runs out.
    let (mut silent, _) = RawExt::open(server.addr, 1_000).await;
    let token = silent.hold(1, "silent", "me").await;
    assert_change(&observer.state(1).await, StateEvent::Granted, token, "me");
    let released = observer.state(1).await;
    assert_change(&released, StateEvent::Released, token, "");
    assert_eq!(released.reason, Some(ext::ReleaseReason::Expired));

    let (mut held, _) = RawExt::open(server.addr, LEASE).await;
    let token = held.hold(3, "forced", "").await;
    assert_change(&observer.state(2).await, StateEvent::Granted, token, "");
    server.handle.force_release("forced").expect("forced");
    let released = observer.state(2).await;
    assert_change(&released, StateEvent::Released, token, "");
    assert_eq!(released.reason, Some(ext::ReleaseReason::Forced));
    assert!(matches!(
        held.recv().await,
        Response::Base(ServerFrame::Revoked { claim: 3, .. })
    ));
    server.stop_and_drop((silent, held)).await;
}

/// A holder that stops reading: its writes block past io-timeout and the
/// server ends its session, keeping the held claim to its last frame plus
/// its lease; the watch is told RELEASED `ended_by_server` then, and
/// GRANTED to the next in line after it.
#[tokio::test]
async fn a_watch_is_told_ended_by_server_at_the_kept_claims_end() {
    let config = ServerConfig::default().with_io_timeout(Duration::from_millis(400));
    let server = TestServer::start_with(config).await;
    let (mut observer, _) = RawExt::open(server.addr, 60_000).await;
    observer.observe(1, "io-X").await;
    // A lease long next to io-timeout: the claim stays kept for seconds.
    let (mut holder, _) = RawExt::open(server.addr, 5_000).await;
    let token = holder.hold(1, "io-X", "stalled").await;
    assert_change(
        &observer.state(1).await,
        StateEvent::Granted,
        token,
        "stalled",
    );
    let (mut waiter, _) = RawExt::open(server.addr, 60_000).await;
    assert_eq!(
        waiter.acquire_value(1, Mode::Wait, "io-X", "next").await,
        Response::Base(ServerFrame::Waiting { claim: 1 })
    );
    socket2::SockRef::from(&holder.stream)
        .set_recv_buffer_size(4096)
        .expect("rcvbuf");
    // LOOKUPs of the held lock: each answer is about 40 times its frame,
    // so the holder's buffers fill and the server's writes block.
    let lookup = ExtFrame::Lookup {
        name: LockName::new("io-X").expect("name"),
    }
    .to_bytes()
    .repeat(500);
    let writer = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        for _ in 0..20_000 {
            if holder.stream.write_all(&lookup).await.is_err() {
                break;
            }
        }
        holder
    });
    // Ended by the server, its claim kept: LOOKUP still names it.
    eventually("the holder's session ended, its claim kept", || {
        server.handle.kept_claims() == 1
    })
    .await;
    match observer.lookup("io-X").await {
        Response::Ext(ExtServer::LockState(state)) => assert_eq!(
            (state.event, state.token, state.value.as_str()),
            (StateEvent::Held, token, "stalled")
        ),
        other => panic!("expected LOCK_STATE, got {other:?}"),
    }
    let released = observer.state(1).await;
    assert_change(&released, StateEvent::Released, token, "");
    assert_eq!(released.reason, Some(ext::ReleaseReason::EndedByServer));
    let Response::Base(ServerFrame::Granted { token: next, .. }) = waiter.recv().await else {
        panic!("the waiter was not granted");
    };
    assert_change(&observer.state(1).await, StateEvent::Granted, next, "next");
    let holder = within("the holder's writes fail", writer)
        .await
        .expect("writer");
    server.stop_and_drop((holder, waiter)).await;
}

/// The bounds: `max_watches` per session (REFUSED 0x0b) and in the whole
/// server (REFUSED 0x0c); the session lives on, the id is free again, and
/// an UNOBSERVE gives the watch back.
#[tokio::test]
async fn watches_are_bounded_per_session_and_per_server() {
    let config = ServerConfig::default()
        .with_max_watches_per_session(2)
        .with_max_watches(3);
    let server = TestServer::start_with(config).await;
    let (mut a, _) = RawExt::open(server.addr, LEASE).await;
    let (mut b, _) = RawExt::open(server.addr, LEASE).await;
    a.observe(1, "x").await;
    a.observe(2, "x").await;
    a.send(&ExtFrame::Observe {
        watch: 3,
        name: LockName::new("y").expect("name"),
    })
    .await;
    assert_refused(&a.recv().await, 3, ErrorCode::TOO_MANY_WATCHES);
    // The id in use comes before the bound.
    a.send(&ExtFrame::Observe {
        watch: 2,
        name: LockName::new("y").expect("name"),
    })
    .await;
    assert_refused(&a.recv().await, 2, ErrorCode::CLAIM_IN_USE);
    b.observe(1, "y").await;
    b.send(&ExtFrame::Observe {
        watch: 2,
        name: LockName::new("y").expect("name"),
    })
    .await;
    assert_refused(&b.recv().await, 2, ErrorCode::SERVER_WATCH_LIMIT);
    a.send(&ExtFrame::Unobserve { watch: 1 }).await;
    assert_eq!(
        a.recv().await,
        Response::Ext(ExtServer::Unobserved { watch: 1 })
    );
    b.observe(2, "y").await;
    // A session's end gives its watches back.
    drop(a);
    let mut c = within("the ended session's watches given back", async {
        loop {
            let (mut c, _) = RawExt::open(server.addr, LEASE).await;
            c.send(&ExtFrame::Observe {
                watch: 9,
                name: LockName::new("z").expect("name"),
            })
            .await;
            match c.recv().await {
                Response::Ext(ExtServer::Observing { watch: 9 }) => break c,
                refusal if refused(9, ErrorCode::SERVER_WATCH_LIMIT)(&refusal) => {
                    // The ended session's watches are not given back yet.
                    tokio::task::yield_now().await;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    })
    .await;
    c.state(9).await;
    server.stop_and_drop((b, c)).await;
}

/// Observing and looking up need the permission of acquiring: the ACL
/// refuses both (REFUSED 0x24) and the session lives on.
#[tokio::test]
async fn observe_and_lookup_need_the_acquire_permission() {
    struct OnlyPublic;
    impl Authorizer for OnlyPublic {
        fn allows(&self, _identity: &str, lock: &LockName) -> bool {
            lock.as_str().starts_with("public/")
        }
    }
    let config = ServerConfig::default().with_authorizer(Arc::new(OnlyPublic));
    let server = TestServer::start_with(config).await;
    let (mut a, _) = RawExt::open(server.addr, LEASE).await;
    a.send(&ExtFrame::Observe {
        watch: 4,
        name: LockName::new("secret/leader").expect("name"),
    })
    .await;
    assert_refused(&a.recv().await, 4, ErrorCode::CLAIM_NOT_AUTHORIZED);
    assert_refused(
        &a.lookup("secret/leader").await,
        0,
        ErrorCode::CLAIM_NOT_AUTHORIZED,
    );
    assert_refused(
        &a.acquire_value(1, Mode::Wait, "secret/leader", "x").await,
        1,
        ErrorCode::CLAIM_NOT_AUTHORIZED,
    );
    a.observe(4, "public/leader").await;
    assert!(matches!(
        a.lookup("public/leader").await,
        Response::Ext(ExtServer::LockState(_))
    ));
    server.stop().await;
}

/// A session whose only business is a watch is not idle: the idle timeout
/// closes a session without claims or watches (ERROR 0x03) and leaves the
/// observing one open.
#[tokio::test]
async fn a_watch_keeps_its_session_from_being_idle() {
    let config = ServerConfig::default().with_idle_timeout(Duration::from_secs(1));
    let server = TestServer::start_with(config).await;
    let (mut observer, _) = RawExt::open(server.addr, LEASE).await;
    observer.observe(1, "l").await;
    let (mut idle, _) = RawExt::open(server.addr, LEASE).await;
    assert_eq!(idle.expect_error().await.0, ErrorCode::IDLE_SESSION);
    // Opened before the idle one, so its idle timeout has run out too.
    assert_eq!(observer.ping().await, Response::Base(ServerFrame::Pong));
    observer.send(&ExtFrame::Unobserve { watch: 1 }).await;
    assert_eq!(
        observer.recv().await,
        Response::Ext(ExtServer::Unobserved { watch: 1 })
    );
    assert_eq!(observer.expect_error().await.0, ErrorCode::IDLE_SESSION);
    server.stop().await;
}

/// The slow reader: an observer that does not read while the lock changes
/// thousands of times. The lock's other sessions are not held up (every
/// ACQUIRE and RELEASE is answered, another session's PING too); once the
/// observer reads, it finds its pushes in token order, at least one
/// COALESCED, and ends on the lock's state now.
#[tokio::test]
async fn a_slow_observer_is_told_the_latest_state_coalesced() {
    let config = ServerConfig::default().with_io_timeout(Duration::from_secs(60));
    let server = TestServer::start_with(config).await;
    let mut observer = {
        // A small receive buffer, set before the connection exists, so
        // the window it announces stays small.
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.set_recv_buffer_size(4096).expect("rcvbuf");
        let stream = socket.connect(server.addr).await.expect("connect");
        RawExt::over(stream)
    };
    // Leases long next to the changes' minutes at worst on a loaded
    // machine: the observer and the other session stay silent meanwhile.
    observer.open_session(300_000).await;
    observer.observe(1, "hot").await;
    let (mut other, _) = RawExt::open(server.addr, 300_000).await;
    let (mut changer, _) = RawExt::open(server.addr, LEASE).await;
    // Enough changes of about 1 KiB each (two pushes a cycle) to fill the
    // server's socket buffer (at most tcp_wmem's largest) and the
    // observer's twice over, and the outbox's 256 after them.
    let value = "v".repeat(ext::MAX_VALUE_LEN);
    let send_buffer_max = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem")
        .ok()
        .and_then(|text| text.split_whitespace().nth(2)?.parse::<usize>().ok())
        .unwrap_or(4 << 20);
    let cycles = (2 * (send_buffer_max + 4096) + 256 * 1100) / (2 * 1050) + 100;
    let mut last = 0;
    for _ in 0..cycles {
        last = changer.hold(1, "hot", &value).await;
        assert_eq!(
            changer.release(1).await,
            Response::Base(ServerFrame::Released { claim: 1 })
        );
    }
    // The lock's other users were never held up by the observer.
    assert_eq!(other.ping().await, Response::Base(ServerFrame::Pong));
    let current = changer.hold(1, "hot", "final").await;
    // Now the observer reads: token order, a COALESCED push, and the end
    // on the state now.
    let mut seen_token = 0;
    let mut coalesced = 0;
    let mut pushes = 0;
    let end = loop {
        let state = observer.state(1).await;
        pushes += 1;
        assert!(
            state.token >= seen_token,
            "went back: {state:?} after {seen_token}"
        );
        seen_token = state.token;
        if state.coalesced() {
            coalesced += 1;
            assert!(
                matches!(state.event, StateEvent::Free | StateEvent::Held),
                "a coalesced push is a state: {state:?}"
            );
        }
        if state.token == current && state.held() {
            break state;
        }
        assert!(pushes <= 2 * cycles + 1, "more pushes than changes");
    };
    assert!(coalesced >= 1, "no COALESCED push in {pushes}");
    assert!(pushes < 2 * cycles + 1, "nothing was dropped");
    assert_eq!(end.value, "final");
    assert!(last < current);
    // Nothing more is pending: the next frame is the PING's answer.
    assert_eq!(observer.ping().await, Response::Base(ServerFrame::Pong));
    server.stop_and_drop((other, changer)).await;
}

/// A claim held at the startup grace's gate is waiting like any other:
/// PROCLAIM replaces its value, and the grant at the grace's end carries
/// the new one.
#[tokio::test]
async fn a_value_proclaimed_during_the_startup_grace_is_the_grants() {
    let config = ServerConfig::default().with_startup_grace(Duration::from_secs(2));
    let server = TestServer::start_with(config).await;
    let (mut observer, _) = RawExt::open(server.addr, LEASE).await;
    observer.observe(1, "g").await;
    let (mut a, _) = RawExt::open(server.addr, LEASE).await;
    assert_eq!(
        a.acquire_value(1, Mode::Wait, "g", "first").await,
        Response::Base(ServerFrame::Waiting { claim: 1 })
    );
    a.send(&ExtFrame::Proclaim {
        claim: 1,
        value: "second".to_owned(),
    })
    .await;
    assert_eq!(
        a.recv().await,
        Response::Ext(ExtServer::Proclaimed { claim: 1 })
    );
    let Response::Base(ServerFrame::Granted { token, .. }) = a.recv().await else {
        panic!("not granted at the grace's end");
    };
    assert_change(
        &observer.state(1).await,
        StateEvent::Granted,
        token,
        "second",
    );
    assert_eq!(&*server.lock("g").expect("held").holder.value, "second");
    server.stop().await;
}
