//! Unit tests of the client's protocol version 2 sessions against a
//! scripted fake server over in-memory streams, on paused time: every
//! instant is exact.

use std::time::Duration;

use monolock_proto::{
    ClientFrame as V1Frame, ErrorCode, Phase, ServerFrame as V1Reply, decode_request as decode_v1,
    ext,
    v2::{self, Mode, ServerFrame},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt, DuplexStream},
    time::{Instant, sleep},
};

use crate::{Enqueued, Error, LossReason, Protocol, tests::FakeServer};

const LEASE: Duration = Duration::from_millis(2000);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A client frame of a session, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Req {
    Open(u32),
    Acquire {
        claim: u32,
        mode: Mode,
        name: String,
    },
    Release(u32),
    Ping,
    Observe {
        watch: u32,
        name: String,
    },
    Unobserve(u32),
}

/// One session, server side.
struct Peer {
    stream: DuplexStream,
    buf: Vec<u8>,
    opened: bool,
    /// The client asked for the extension with its OPEN.
    hello: bool,
    /// How many bytes each read returned: one write of the client arrives
    /// in one read here.
    reads: Vec<usize>,
}

impl Peer {
    fn new(stream: DuplexStream) -> Self {
        Self {
            stream,
            buf: Vec::new(),
            opened: false,
            hello: false,
            reads: Vec::new(),
        }
    }

    fn decode(&mut self) -> Option<Req> {
        if !self.opened {
            // OPEN and the HELLO written with it: one request here.
            let (lease, used) = v2::decode_open(&self.buf).expect("an OPEN")?;
            let hello = self.buf.get(used..used + ext::HELLO_LEN)?;
            assert_eq!(hello, [0x24, 0, 0, 0, 1], "HELLO follows the OPEN");
            self.buf.drain(..used + ext::HELLO_LEN);
            self.opened = true;
            self.hello = true;
            return Some(Req::Open(lease.as_millis()));
        }
        let (request, used) = ext::decode_request(&self.buf).expect("a v2 frame")?;
        let req = match request {
            ext::Request::Base(v2::Request::Acquire { claim, mode, name }) => Req::Acquire {
                claim,
                mode,
                name: name.to_owned(),
            },
            ext::Request::Base(v2::Request::Release { claim }) => Req::Release(claim),
            ext::Request::Base(v2::Request::Ping) => Req::Ping,
            ext::Request::Observe { watch, name } => Req::Observe {
                watch,
                name: name.to_owned(),
            },
            ext::Request::Unobserve { watch } => Req::Unobserve(watch),
            other => panic!("unexpected {other:?}"),
        };
        self.buf.drain(..used);
        Some(req)
    }

    /// The next client frame, or `None` at EOF.
    async fn next(&mut self) -> Option<Req> {
        loop {
            if let Some(req) = self.decode() {
                return Some(req);
            }
            let mut chunk = [0u8; 1024];
            let n = self.stream.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                return None;
            }
            self.reads.push(n);
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    async fn expect(&mut self, want: Req) {
        assert_eq!(self.next().await, Some(want));
    }

    /// Expects an ACQUIRE of `name` and returns its claim id.
    async fn acquire(&mut self, name: &str, want: Mode) -> u32 {
        match self.next().await {
            Some(Req::Acquire {
                claim,
                mode,
                name: got,
            }) if got == name && mode == want => claim,
            other => panic!("expected ACQUIRE {name} {want:?}, got {other:?}"),
        }
    }

    async fn send(&mut self, frame: ServerFrame) {
        self.stream
            .write_all(&frame.to_bytes())
            .await
            .expect("client reads");
    }

    /// OPENED, and FEATURES granting the extension when it was asked for.
    async fn opened(&mut self, max_claims: u32) {
        self.send(ServerFrame::Opened {
            session: 1,
            max_claims,
        })
        .await;
        if self.hello {
            self.stream
                .write_all(&ext::features_frame(1, 1024))
                .await
                .expect("client reads");
        }
    }
}

/// A client of a fake v2 server whose first session is open and holds
/// `name` under claim id `claim` (token 7).
async fn holding(
    name: &str,
) -> (
    crate::Client<crate::tests::DuplexConnector>,
    FakeServer,
    Peer,
    crate::LockGuard,
) {
    let (client, mut server) = FakeServer::speaking(Protocol::V2);
    let acquiring = tokio::spawn({
        let client = client.clone();
        let name = name.to_owned();
        async move { client.acquire(name, LEASE).await }
    });
    let mut peer = Peer::new(server.accept_stream().await);
    peer.expect(Req::Open(2000)).await;
    peer.opened(1024).await;
    let claim = peer.acquire(name, Mode::Wait).await;
    peer.send(ServerFrame::Acquired { claim, token: 7 }).await;
    let guard = acquiring.await.unwrap().expect("granted");
    (client, server, peer, guard)
}

#[tokio::test(start_paused = true)]
async fn the_open_and_hello_go_out_in_one_write_and_claims_share_the_session() {
    let (client, server, mut peer, first) = holding("a").await;
    assert_eq!(
        peer.reads,
        [6 + 5, 7 + 1],
        "OPEN and HELLO in one write, the ACQUIRE once FEATURES is read"
    );
    assert_eq!(first.token(), 7);
    let second = tokio::spawn({
        let client = client.clone();
        async move { client.acquire("b", LEASE).await }
    });
    let claim = peer.acquire("b", Mode::Wait).await;
    peer.send(ServerFrame::Acquired { claim, token: 8 }).await;
    let second = second.await.unwrap().expect("granted");
    assert_eq!(second.token(), 8);
    assert_eq!(server.connects(), 1, "one session carries both claims");
    assert_eq!(client.session_loads(), [2]);
}

#[tokio::test(start_paused = true)]
async fn a_silent_session_loses_every_claim_at_four_fifths_of_the_lease() {
    let (client, _server, mut peer, first) = holding("a").await;
    let t0 = Instant::now();
    let second = tokio::spawn({
        let client = client.clone();
        async move { client.acquire("b", LEASE).await }
    });
    let claim = peer.acquire("b", Mode::Wait).await;
    peer.send(ServerFrame::Acquired { claim, token: 8 }).await;
    let second = second.await.unwrap().expect("granted");
    // The ACQUIRE of "b" went out at t0 (paused time: no time passed) and
    // its reply confirmed it: the session's deadline is t0 + 1.6 s.
    assert_eq!(first.deadline(), t0 + ms(1600));
    assert_eq!(second.deadline(), t0 + ms(1600));
    // From now on the server reads but never answers (its PINGs go unanswered).
    let silent = tokio::spawn(async move { while peer.next().await.is_some() {} });
    sleep(ms(1599)).await;
    assert!(first.is_held() && second.is_held());
    let (a, b) = tokio::join!(first.lost(), second.lost());
    assert_eq!(
        Instant::now(),
        t0 + ms(1600),
        "both at the session's deadline"
    );
    assert!(matches!(a, LossReason::HeartbeatTimeout { .. }), "{a:?}");
    assert!(matches!(b, LossReason::HeartbeatTimeout { .. }), "{b:?}");
    silent.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_pushed_grant_confirms_nothing() {
    let (client, _server, mut peer, holder) = holding("a").await;
    let t0 = Instant::now();
    let Enqueued::Waiting(waiter) = ({
        let enqueue = tokio::spawn({
            let client = client.clone();
            async move { client.enqueue("b", LEASE).await }
        });
        let claim = peer.acquire("b", Mode::Wait).await;
        peer.send(ServerFrame::Waiting { claim }).await;
        let waiter = enqueue.await.unwrap().expect("queued");
        // The PING goes out once nothing is in flight, a quarter lease on.
        peer.expect(Req::Ping).await;
        let ping_sent = Instant::now();
        assert_eq!(ping_sent, t0 + ms(500));
        peer.send(ServerFrame::Granted { claim, token: 9 }).await;
        waiter
    }) else {
        panic!("b should wait");
    };
    let guard = waiter.granted().await.expect("granted by the push");
    assert_eq!(guard.token(), 9);
    assert_eq!(
        guard.deadline(),
        t0 + ms(1600),
        "the push moved nothing: the ACQUIRE's send is still S"
    );
    peer.send(ServerFrame::Pong).await;
    sleep(ms(1)).await;
    assert_eq!(
        guard.deadline(),
        t0 + ms(500) + ms(1600),
        "the PONG confirmed the PING"
    );
    assert!(holder.is_held());
}

#[tokio::test(start_paused = true)]
async fn release_returns_once_released_is_read() {
    let (_client, _server, mut peer, guard) = holding("a").await;
    let release = tokio::spawn(guard.release());
    peer.expect(Req::Release(0)).await;
    sleep(ms(100)).await;
    assert!(!release.is_finished(), "RELEASED not read yet");
    peer.send(ServerFrame::Released { claim: 0 }).await;
    release.await.unwrap().expect("released");
}

#[tokio::test(start_paused = true)]
async fn an_unconfirmed_release_closes_the_session_within_the_io_timeout() {
    let (client, mut server, mut peer, first) = {
        let (client, server, peer, guard) = holding("a").await;
        (client.with_io_timeout(ms(300)), server, peer, guard)
    };
    let second = tokio::spawn({
        let client = client.clone();
        async move { client.acquire("b", LEASE).await }
    });
    let claim = peer.acquire("b", Mode::Wait).await;
    peer.send(ServerFrame::Acquired { claim, token: 8 }).await;
    let second = second.await.unwrap().expect("granted");
    // `second` was claimed through the client with the short io-timeout.
    let started = Instant::now();
    let mut release = tokio::spawn(async move {
        let result = second.release().await;
        (Instant::now(), result)
    });
    peer.expect(Req::Release(claim)).await;
    // The server never answers; the client closes the session.
    let (at, result) = (&mut release).await.unwrap();
    assert_eq!(at - started, ms(300));
    assert!(
        matches!(result, Err(Error::Lost(LossReason::Io(_)))),
        "{result:?}"
    );
    assert!(matches!(first.lost().await, LossReason::Io(_)));
    assert_eq!(peer.next().await, None, "the connection is closed");
    let _ = &mut server;
}

#[tokio::test(start_paused = true)]
async fn dropping_a_guard_sends_release_from_the_session_task() {
    let (_client, _server, mut peer, guard) = holding("a").await;
    drop(guard);
    peer.expect(Req::Release(0)).await;
    peer.send(ServerFrame::Released { claim: 0 }).await;
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_wait_sends_release_once_its_reply_is_read() {
    let (client, _server, mut peer, _holder) = holding("a").await;
    let waiting = tokio::spawn({
        let client = client.clone();
        async move { client.acquire("a", LEASE).await }
    });
    let claim = peer.acquire("a", Mode::Wait).await;
    waiting.abort();
    let _ = waiting.await;
    peer.send(ServerFrame::Waiting { claim }).await;
    peer.expect(Req::Release(claim)).await;
    peer.send(ServerFrame::Released { claim }).await;
}

#[tokio::test(start_paused = true)]
async fn try_acquire_asks_in_try_mode_and_a_busy_id_is_not_released() {
    let (client, _server, mut peer, _holder) = holding("a").await;
    let trying = tokio::spawn({
        let client = client.clone();
        async move { client.try_acquire("a", LEASE).await }
    });
    let claim = peer.acquire("a", Mode::Try).await;
    peer.send(ServerFrame::Busy { claim }).await;
    assert!(trying.await.unwrap().expect("answered").is_none());
    // Nothing follows for the busy id: the next frame is the schedule's PING.
    peer.expect(Req::Ping).await;
}

#[tokio::test(start_paused = true)]
async fn a_revoked_claim_ends_alone() {
    let (client, _server, mut peer, first) = holding("a").await;
    let second = tokio::spawn({
        let client = client.clone();
        async move { client.acquire("b", LEASE).await }
    });
    let claim = peer.acquire("b", Mode::Wait).await;
    peer.send(ServerFrame::Acquired { claim, token: 8 }).await;
    let second = second.await.unwrap().expect("granted");
    peer.send(ServerFrame::Revoked {
        claim: 0,
        code: ErrorCode::CLAIM_REVOKED,
        reason: "force-release".into(),
    })
    .await;
    match first.lost().await {
        // Reported in version 1's vocabulary: closed by administrator.
        LossReason::Server { code, .. } => assert_eq!(code, ErrorCode::CLOSED_BY_ADMIN),
        other => panic!("expected 0x02, got {other:?}"),
    }
    assert!(second.is_held());
    assert!(second.loss().is_none());
}

#[tokio::test(start_paused = true)]
async fn too_many_claims_moves_the_claim_to_another_session() {
    let (client, mut server, mut peer, _first) = holding("a").await;
    let second = tokio::spawn({
        let client = client.clone();
        async move { client.acquire("b", LEASE).await }
    });
    let claim = peer.acquire("b", Mode::Wait).await;
    peer.send(ServerFrame::Refused {
        claim,
        code: ErrorCode::TOO_MANY_CLAIMS,
        reason: String::new(),
    })
    .await;
    let mut other = Peer::new(server.accept_stream().await);
    other.expect(Req::Open(2000)).await;
    other.opened(1024).await;
    let claim = other.acquire("b", Mode::Wait).await;
    other.send(ServerFrame::Acquired { claim, token: 8 }).await;
    assert_eq!(second.await.unwrap().expect("granted").token(), 8);
    assert_eq!(server.connects(), 2);
}

#[tokio::test(start_paused = true)]
async fn error_0x10_to_the_open_falls_back_to_v1_and_is_remembered() {
    let (client, mut server) = FakeServer::speaking(Protocol::V2);
    let acquiring = tokio::spawn({
        let client = client.clone();
        async move { client.acquire("a", LEASE).await }
    });
    // A version 1 server: ERROR 0x10 to the OPEN, then it closes.
    let mut first = server.accept_stream().await;
    let mut open = [0u8; 6];
    first.read_exact(&mut open).await.unwrap();
    assert_eq!(open[..2], [0x01, 0x02], "an OPEN");
    let error = V1Reply::Error {
        code: ErrorCode::UNSUPPORTED_VERSION,
        reason: "unsupported protocol version 2".into(),
    };
    first.write_all(&error.to_bytes()).await.unwrap();
    drop(first);
    // The claim is placed again, over version 1.
    let mut stream = server.accept_stream().await;
    let mut buf = Vec::new();
    let frame = loop {
        let mut chunk = [0u8; 256];
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "EOF before the ACQUIRE");
        buf.extend_from_slice(&chunk[..n]);
        if let Some((frame, _)) = decode_v1(&buf, Phase::AwaitingAcquire).unwrap() {
            break frame;
        }
    };
    assert!(matches!(frame, V1Frame::Acquire { .. }), "{frame:?}");
    stream
        .write_all(&V1Reply::Acquired { token: 5 }.to_bytes())
        .await
        .unwrap();
    let guard = acquiring.await.unwrap().expect("granted over v1");
    assert_eq!(guard.token(), 5);
    assert_eq!(client.session_loads(), Vec::<u32>::new(), "no v2 session");
    // Remembered: the next claim speaks version 1 at once.
    let next = tokio::spawn({
        let client = client.clone();
        async move { client.acquire("b", LEASE).await }
    });
    let mut stream = server.accept_stream().await;
    let mut head = [0u8; 9];
    stream.read_exact(&mut head).await.unwrap();
    assert_eq!(head[..2], [0x01, 0x01], "a v1 ACQUIRE, no OPEN");
    stream
        .write_all(&V1Reply::Acquired { token: 6 }.to_bytes())
        .await
        .unwrap();
    assert_eq!(next.await.unwrap().expect("granted").token(), 6);
    assert_eq!(server.connects(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_release_and_the_next_acquire_go_out_in_one_write() {
    let (client, _server, mut peer, guard) = holding("a").await;
    // Both commands are queued before the session's task next runs: the
    // acquire is polled once (it places its claim) without yielding.
    drop(guard);
    let mut next = Box::pin({
        let client = client.clone();
        async move { client.acquire("a", LEASE).await }
    });
    let first_poll = tokio::time::timeout(Duration::ZERO, &mut next).await;
    assert!(first_poll.is_err(), "not granted yet");
    let next = tokio::spawn(next);
    peer.expect(Req::Release(0)).await;
    let claim = peer.acquire("a", Mode::Wait).await;
    assert_eq!(
        peer.reads[2..],
        [5 + 7 + 1],
        "RELEASE and ACQUIRE in one write"
    );
    peer.send(ServerFrame::Released { claim: 0 }).await;
    peer.send(ServerFrame::Acquired { claim, token: 8 }).await;
    assert_eq!(next.await.unwrap().expect("granted").token(), 8);
}

#[tokio::test(start_paused = true)]
async fn a_watch_keeps_its_session_open_and_it_closes_idle_once_unobserved() {
    let (client, mut server) = FakeServer::speaking(Protocol::V2);
    let observing = tokio::spawn({
        let client = client.clone();
        async move { client.observe("a").await }
    });
    let mut peer = Peer::new(server.accept_stream().await);
    peer.expect(Req::Open(2000)).await;
    peer.opened(1024).await;
    let Some(Req::Observe { watch, name }) = peer.next().await else {
        panic!("an OBSERVE");
    };
    assert_eq!(name, "a");
    let initial = ext::ServerFrame::State {
        watch,
        state: ext::LockState {
            event: ext::StateEvent::Free,
            flags: ext::FLAG_INITIAL,
            token: 0,
            since_ms: 0,
            reason: None,
            value: String::new(),
        },
    };
    let mut bytes = ext::ServerFrame::Observing { watch }.to_bytes();
    bytes.extend_from_slice(&initial.to_bytes());
    peer.stream.write_all(&bytes).await.expect("client reads");
    let mut observation = observing.await.unwrap().expect("observing");
    let first = observation
        .next()
        .await
        .expect("a state")
        .expect("no error");
    assert!(first.initial && !first.held);
    // The server answers every PING; a minute passes with the watch alone.
    let (unobserved_tx, unobserved) = tokio::sync::oneshot::channel();
    let answering = tokio::spawn(async move {
        let mut unobserved_tx = Some(unobserved_tx);
        while let Some(req) = peer.next().await {
            match req {
                // The idle close may cross the last PONG: not an error.
                Req::Ping => {
                    let _ = peer.stream.write_all(&ServerFrame::Pong.to_bytes()).await;
                }
                Req::Unobserve(id) => {
                    let reply = ext::ServerFrame::Unobserved { watch: id }.to_bytes();
                    peer.stream.write_all(&reply).await.expect("client reads");
                    if let Some(tx) = unobserved_tx.take() {
                        let _ = tx.send(id);
                    }
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    });
    sleep(ms(60_000)).await;
    assert_eq!(
        client.session_loads(),
        [0],
        "a watch keeps the session open"
    );
    drop(observation);
    assert_eq!(unobserved.await.expect("UNOBSERVE written"), watch);
    sleep(ms(21_000)).await;
    assert!(
        client.session_loads().is_empty(),
        "closed once idle for 20 s"
    );
    answering.await.expect("the server saw the close");
    assert_eq!(server.connects(), 1);
}

#[tokio::test(start_paused = true)]
async fn observing_a_version_1_server_is_unsupported_after_one_open() {
    let (client, mut server) = FakeServer::speaking(Protocol::V2);
    let observing = tokio::spawn({
        let client = client.clone();
        async move { client.observe("a").await }
    });
    // A version 1 server: ERROR 0x10 to the OPEN, then it closes.
    let mut first = server.accept_stream().await;
    let mut open = [0u8; 6];
    first.read_exact(&mut open).await.unwrap();
    assert_eq!(open[..2], [0x01, 0x02], "an OPEN");
    let error = V1Reply::Error {
        code: ErrorCode::UNSUPPORTED_VERSION,
        reason: "unsupported protocol version 2".into(),
    };
    first.write_all(&error.to_bytes()).await.unwrap();
    drop(first);
    let err = observing
        .await
        .unwrap()
        .expect_err("no observers in version 1");
    assert!(
        matches!(err, Error::Unsupported(crate::Unsupported::Server { .. })),
        "{err:?}"
    );
    assert!(!err.is_temporary());
    assert_eq!(server.connects(), 1, "asked once, then remembered");
    let err = client.holder("a").await.expect_err("nor lookups");
    assert!(matches!(err, Error::Unsupported(_)), "{err:?}");
    assert_eq!(server.connects(), 1, "refused before dialing");
}
