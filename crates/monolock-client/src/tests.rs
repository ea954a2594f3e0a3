//! Unit tests of the client's protocol version 1 exchange against a
//! scripted fake server over in-memory streams, on paused time: every
//! instant is exact. (Version 2 sessions: `tests_v2.rs`.)

use std::{
    io,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use monolock_proto::{ClientFrame, ErrorCode, Phase, ServerFrame, decode_request};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt, DuplexStream},
    sync::mpsc,
    time::{Instant, sleep},
};

use crate::{
    Client, Connection, Connector, Enqueued, Error, LossReason, Protocol, ProtocolViolation,
    RetryPolicy,
};

/// Hands each new connection's far end to the test.
pub(crate) struct DuplexConnector {
    accepted: mpsc::UnboundedSender<DuplexStream>,
    connects: Arc<AtomicUsize>,
}

impl Connector for DuplexConnector {
    type Stream = DuplexStream;

    async fn connect(&self, _addr: &str) -> io::Result<Connection<DuplexStream>> {
        self.connects.fetch_add(1, Ordering::SeqCst);
        let (client, server) = tokio::io::duplex(4096);
        self.accepted
            .send(server)
            .map_err(|_| io::Error::from(io::ErrorKind::ConnectionRefused))?;
        Ok(Connection::new(client))
    }
}

/// The fake server: accepts connections made through its connector.
pub(crate) struct FakeServer {
    accepted: mpsc::UnboundedReceiver<DuplexStream>,
    connects: Arc<AtomicUsize>,
}

impl FakeServer {
    fn new() -> (Client<DuplexConnector>, Self) {
        Self::speaking(Protocol::V1)
    }

    /// A fake server, and a client speaking `protocol` to it.
    pub(crate) fn speaking(protocol: Protocol) -> (Client<DuplexConnector>, Self) {
        let (tx, rx) = mpsc::unbounded_channel();
        let connects = Arc::new(AtomicUsize::new(0));
        let client = Client::new("fake:1")
            .with_connector(DuplexConnector {
                accepted: tx,
                connects: connects.clone(),
            })
            .with_protocol(protocol);
        (
            client,
            Self {
                accepted: rx,
                connects,
            },
        )
    }

    async fn accept(&mut self) -> Peer {
        Peer {
            stream: self.accept_stream().await,
            buf: Vec::new(),
            phase: Phase::AwaitingAcquire,
        }
    }

    /// The server end of the next connection.
    pub(crate) async fn accept_stream(&mut self) -> DuplexStream {
        self.accepted.recv().await.expect("connector alive")
    }

    pub(crate) fn connects(&self) -> usize {
        self.connects.load(Ordering::SeqCst)
    }
}

/// One connection, server side.
struct Peer {
    stream: DuplexStream,
    buf: Vec<u8>,
    phase: Phase,
}

impl Peer {
    /// The next client frame, or `None` at EOF.
    async fn frame(&mut self) -> Option<ClientFrame> {
        loop {
            if let Some((frame, used)) = decode_request(&self.buf, self.phase).expect("valid frame")
            {
                self.buf.drain(..used);
                self.phase = Phase::Established;
                return Some(frame);
            }
            let mut chunk = [0u8; 256];
            let n = self.stream.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                return None;
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    async fn expect_acquire(&mut self) -> (String, u32) {
        match self.frame().await {
            Some(ClientFrame::Acquire { lease, name }) => (name.to_string(), lease.as_millis()),
            other => panic!("expected ACQUIRE, got {other:?}"),
        }
    }

    async fn expect_heartbeat(&mut self) {
        assert_eq!(self.frame().await, Some(ClientFrame::Heartbeat));
    }

    async fn expect_eof(&mut self) {
        assert_eq!(self.frame().await, None);
    }

    async fn send(&mut self, frame: ServerFrame) {
        self.write(&frame.to_bytes()).await;
    }

    /// Ends the session with ERROR `code` (and no reason), as a server does.
    async fn send_error(&mut self, code: ErrorCode) {
        self.send(ServerFrame::Error {
            code,
            reason: String::new(),
        })
        .await;
    }

    async fn write(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("client reads");
    }
}

const LEASE: Duration = Duration::from_secs(2);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn acquired(token: u64) -> ServerFrame {
    ServerFrame::Acquired { token }
}

#[tokio::test(start_paused = true)]
async fn heartbeats_follow_the_schedule_with_rtt_correction() {
    let (client, mut server) = FakeServer::new();
    let script = tokio::spawn(async move {
        let mut peer = server.accept().await;
        let t0 = Instant::now();
        assert_eq!(peer.expect_acquire().await, ("jobs/a".into(), 2000));
        // A 100ms round trip for the ACQUIRE: srtt 100ms, interval 300ms.
        sleep(ms(100)).await;
        peer.send(acquired(11)).await;
        peer.expect_heartbeat().await;
        assert_eq!(t0.elapsed(), ms(300), "send-to-send from the ACQUIRE");
        // Answer at once: srtt = (4 * 100 + 0) / 5 = 80ms, interval 340ms.
        peer.send(acquired(11)).await;
        peer.expect_heartbeat().await;
        assert_eq!(t0.elapsed(), ms(640));
        peer.send(acquired(11)).await;
        peer
    });
    let guard = client.acquire("jobs/a", LEASE).await.unwrap();
    assert_eq!(guard.token(), 11);
    assert_eq!(guard.name().as_str(), "jobs/a");
    let mut peer = script.await.unwrap();
    assert!(guard.is_held());
    drop(guard);
    peer.expect_eof().await;
}

#[tokio::test(start_paused = true)]
async fn slow_replies_send_the_next_heartbeat_on_arrival() {
    let (client, mut server) = FakeServer::new();
    let script = tokio::spawn(async move {
        let mut peer = server.accept().await;
        peer.expect_acquire().await;
        // lease 400ms: base 100ms; a 60ms round trip makes 2*srtt >= base.
        sleep(ms(60)).await;
        peer.send(acquired(1)).await;
        let replied = Instant::now();
        peer.expect_heartbeat().await;
        assert_eq!(replied.elapsed(), Duration::ZERO);
        sleep(ms(60)).await;
        peer.send(acquired(1)).await;
        let replied = Instant::now();
        peer.expect_heartbeat().await;
        assert_eq!(replied.elapsed(), Duration::ZERO);
        peer
    });
    let guard = client.acquire("slow", ms(400)).await.unwrap();
    let _peer = script.await.unwrap();
    drop(guard);
}

#[tokio::test(start_paused = true)]
async fn a_silent_server_loses_the_lock_at_four_fifths_of_the_lease() {
    let (client, mut server) = FakeServer::new();
    let script = tokio::spawn(async move {
        let mut peer = server.accept().await;
        peer.expect_acquire().await;
        peer.send(acquired(5)).await;
        peer.expect_heartbeat().await;
        peer.send(acquired(5)).await;
        // From here on: silence. The heartbeat in flight is never answered.
        peer.expect_heartbeat().await;
        peer.expect_eof().await;
        Instant::now()
    });
    let t0 = Instant::now();
    let guard = client.acquire("quiet", LEASE).await.unwrap();
    let reason = guard.lost().await;
    let lost_at = Instant::now();
    assert!(
        matches!(reason, LossReason::HeartbeatTimeout { lease } if lease == LEASE),
        "{reason:?}"
    );
    // The last confirmed send was the first heartbeat, at 500ms.
    assert_eq!(lost_at - t0, ms(500 + 1600));
    assert_eq!(guard.deadline(), t0 + ms(500 + 1600));
    assert!(!guard.is_held());
    let closed_at = script.await.unwrap();
    assert_eq!(closed_at, lost_at, "the connection closes with the loss");
    assert!(matches!(
        guard.release().await,
        Err(Error::LockLost(lost)) if matches!(lost.reason(), LossReason::HeartbeatTimeout { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_heartbeats_and_is_promoted_by_a_push() {
    let (client, mut server) = FakeServer::new();
    let script = tokio::spawn(async move {
        let mut peer = server.accept().await;
        peer.expect_acquire().await;
        peer.send(ServerFrame::Waiting).await;
        for _ in 0..3 {
            peer.expect_heartbeat().await;
            peer.send(ServerFrame::Waiting).await;
        }
        peer.expect_heartbeat().await;
        // Promotion while the heartbeat is in flight: the push first, then
        // the heartbeat's own reply.
        peer.send(acquired(42)).await;
        sleep(ms(10)).await;
        peer.send(acquired(42)).await;
        peer.expect_heartbeat().await;
        peer.send(acquired(42)).await;
        peer
    });
    let Enqueued::Waiting(waiter) = client.enqueue("queue", LEASE).await.unwrap() else {
        panic!("expected to wait");
    };
    assert_eq!(waiter.name().as_str(), "queue");
    let guard = waiter.granted().await.unwrap();
    assert_eq!(guard.token(), 42);
    let mut peer = script.await.unwrap();
    assert!(guard.is_held());
    // A v1 release is confirmed by the server's EOF after the client's.
    let (released, ()) = tokio::join!(guard.release(), async move {
        peer.expect_eof().await;
    });
    released.unwrap();
}

#[tokio::test(start_paused = true)]
async fn protocol_violations_close_the_connection() {
    type IsExpected = fn(&ProtocolViolation) -> bool;
    let cases: [(&[u8], IsExpected); 3] = [
        (&[0x12, 0, 0, 0, 0, 0, 0, 0, 8], |v| {
            matches!(
                v,
                ProtocolViolation::TokenMismatch {
                    expected: 7,
                    got: 8
                }
            )
        }),
        (&[0x7f], |v| matches!(v, ProtocolViolation::Decode(_))),
        (&[0x11], |v| {
            matches!(v, ProtocolViolation::WaitingAfterGrant)
        }),
    ];
    for (bytes, check) in cases {
        let (client, mut server) = FakeServer::new();
        let script = tokio::spawn(async move {
            let mut peer = server.accept().await;
            peer.expect_acquire().await;
            peer.send(acquired(7)).await;
            peer.expect_heartbeat().await;
            peer.write(bytes).await;
            peer.expect_eof().await;
        });
        let guard = client.acquire("strict", LEASE).await.unwrap();
        match guard.lost().await {
            LossReason::ProtocolViolation(v) => assert!(check(&v), "{v:?}"),
            other => panic!("expected a protocol violation, got {other:?}"),
        }
        script.await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_reply_with_nothing_in_flight_is_a_violation() {
    let (client, mut server) = FakeServer::new();
    tokio::spawn(async move {
        let mut peer = server.accept().await;
        peer.expect_acquire().await;
        peer.send(acquired(3)).await;
        sleep(ms(10)).await;
        peer.send(acquired(3)).await;
        peer.expect_eof().await;
    });
    let guard = client.acquire("strict", LEASE).await.unwrap();
    assert!(matches!(
        guard.lost().await,
        LossReason::ProtocolViolation(ProtocolViolation::Unsolicited { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn frames_split_across_reads_are_reassembled() {
    let (client, mut server) = FakeServer::new();
    tokio::spawn(async move {
        let mut peer = server.accept().await;
        peer.expect_acquire().await;
        let bytes = acquired(0x0102_0304_0506_0708).to_bytes();
        for byte in bytes {
            peer.write(&[byte]).await;
            sleep(ms(1)).await;
        }
        peer.expect_heartbeat().await;
        // Reply and an ERROR in one write: both are taken apart.
        let mut both = acquired(0x0102_0304_0506_0708).to_bytes();
        ServerFrame::Error {
            code: ErrorCode::CLOSED_BY_ADMIN,
            reason: "kicked".into(),
        }
        .encode(&mut both);
        peer.write(&both).await;
    });
    let guard = client.acquire("split", LEASE).await.unwrap();
    assert_eq!(guard.token(), 0x0102_0304_0506_0708);
    match guard.lost().await {
        LossReason::Server { code, reason } => {
            assert_eq!(code, ErrorCode::CLOSED_BY_ADMIN);
            assert_eq!(reason, "kicked");
        }
        other => panic!("{other:?}"),
    }
    assert!(!guard.is_held());
}

#[tokio::test(start_paused = true)]
async fn server_errors_are_classified_by_range() {
    let (client, mut server) = FakeServer::new();
    tokio::spawn(async move {
        for code in [0x18, 0x0e] {
            let mut peer = server.accept().await;
            peer.expect_acquire().await;
            peer.send_error(ErrorCode(code)).await;
        }
    });
    let err = client.acquire("acl", LEASE).await.unwrap_err();
    assert_eq!(err.server_code(), Some(ErrorCode::NOT_AUTHORIZED));
    assert!(!err.is_temporary());
    let err = client.acquire("acl", LEASE).await.unwrap_err();
    assert_eq!(err.server_code(), Some(ErrorCode(0x0e)));
    assert!(err.is_temporary(), "unknown codes below 0x10 are temporary");
}

#[tokio::test(start_paused = true)]
async fn try_acquire_on_a_busy_lock_closes_its_connection() {
    let (client, mut server) = FakeServer::new();
    let script = tokio::spawn(async move {
        let mut peer = server.accept().await;
        peer.expect_acquire().await;
        peer.send(ServerFrame::Waiting).await;
        peer.expect_eof().await;
    });
    assert!(client.try_acquire("busy", LEASE).await.unwrap().is_none());
    script.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn dropping_a_pending_acquire_closes_its_connection() {
    let (client, mut server) = FakeServer::new();
    let script = tokio::spawn(async move {
        let mut peer = server.accept().await;
        peer.expect_acquire().await;
        peer.send(ServerFrame::Waiting).await;
        peer.expect_heartbeat().await;
        peer.send(ServerFrame::Waiting).await;
        peer.expect_eof().await;
        Instant::now()
    });
    let t0 = Instant::now();
    let result = client.acquire_timeout("busy", LEASE, ms(700)).await;
    assert!(result.unwrap().is_none());
    assert_eq!(script.await.unwrap() - t0, ms(700));
}

#[tokio::test(start_paused = true)]
async fn invalid_input_is_rejected_before_dialing() {
    let (client, server) = FakeServer::new();
    assert!(matches!(
        client.acquire("", LEASE).await,
        Err(Error::InvalidName(_))
    ));
    assert!(matches!(
        client.acquire("x".repeat(256), LEASE).await,
        Err(Error::InvalidName(_))
    ));
    assert!(matches!(
        client.try_acquire("ok", Duration::ZERO).await,
        Err(Error::InvalidLease { .. })
    ));
    assert!(matches!(
        client.acquire("ok", Duration::from_micros(999)).await,
        Err(Error::InvalidLease { .. })
    ));
    assert!(matches!(
        client
            .acquire_retrying("ok", Duration::from_secs(u64::from(u32::MAX)))
            .await,
        Err(Error::InvalidLease { .. })
    ));
    assert_eq!(server.connects(), 0);
}

#[tokio::test(start_paused = true)]
async fn acquire_retrying_retries_server_conditions_only() {
    let (client, mut server) = FakeServer::new();
    tokio::spawn(async move {
        for code in [0x02, 0x01] {
            let mut peer = server.accept().await;
            peer.expect_acquire().await;
            peer.send_error(ErrorCode(code)).await;
        }
        let mut peer = server.accept().await;
        peer.expect_acquire().await;
        peer.send(acquired(77)).await;
        peer.expect_eof().await;
        let mut peer = server.accept().await;
        peer.expect_acquire().await;
        peer.send_error(ErrorCode::NOT_AUTHORIZED).await;
    });
    let client = client.with_retry_policy(RetryPolicy::new().with_max_attempts(5));
    let guard = client.acquire_retrying("retry", LEASE).await.unwrap();
    assert_eq!(guard.token(), 77);
    drop(guard);
    let err = client.acquire_retrying("retry", LEASE).await.unwrap_err();
    assert_eq!(err.server_code(), Some(ErrorCode::NOT_AUTHORIZED));
}

#[tokio::test(start_paused = true)]
async fn run_locked_cancels_the_work_on_loss_and_reports_it() {
    let (client, mut server) = FakeServer::new();
    tokio::spawn(async move {
        let mut peer = server.accept().await;
        peer.expect_acquire().await;
        peer.send(acquired(9)).await;
        sleep(ms(100)).await;
        peer.send_error(ErrorCode::CLOSED_BY_ADMIN).await;
    });
    let outcome = client
        .run_locked("scoped", LEASE, |lock| async move {
            assert_eq!(lock.token(), 9);
            assert!(lock.is_held());
            lock.cancelled().await;
            assert!(!lock.is_held());
            "stopped"
        })
        .await
        .unwrap();
    assert_eq!(outcome.output, "stopped");
    assert_eq!(outcome.token, 9);
    assert!(!outcome.held_throughout());
    assert!(matches!(
        outcome.loss,
        Some(LossReason::Server {
            code: ErrorCode::CLOSED_BY_ADMIN,
            ..
        })
    ));
}

#[tokio::test(start_paused = true)]
async fn run_locked_reports_a_loss_even_when_the_work_succeeds() {
    let (client, mut server) = FakeServer::new();
    tokio::spawn(async move {
        let mut peer = server.accept().await;
        peer.expect_acquire().await;
        peer.send(acquired(4)).await;
        // Never answer a heartbeat.
        while peer.frame().await.is_some() {}
    });
    let outcome = client
        .run_locked("scoped", LEASE, |_lock| async move {
            sleep(Duration::from_secs(3)).await;
            Ok::<_, ()>(())
        })
        .await
        .unwrap();
    assert_eq!(outcome.output, Ok(()));
    assert!(matches!(
        outcome.loss,
        Some(LossReason::HeartbeatTimeout { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn connect_failures_and_timeouts() {
    let (client, server) = FakeServer::new();
    drop(server);
    let err = client.acquire("x", LEASE).await.unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    assert!(err.is_temporary());

    /// A connector that never answers.
    struct Hang;
    impl Connector for Hang {
        type Stream = DuplexStream;
        async fn connect(&self, _addr: &str) -> io::Result<Connection<DuplexStream>> {
            std::future::pending().await
        }
    }
    let client = Client::new("hang:1")
        .with_connector(Hang)
        .with_connect_timeout(ms(250));
    let started = Instant::now();
    let err = client.acquire("x", LEASE).await.unwrap_err();
    assert!(matches!(err, Error::ConnectTimeout { .. }), "{err:?}");
    assert_eq!(started.elapsed(), ms(250));
}
