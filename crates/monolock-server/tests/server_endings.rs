//! When the server ends a connection on its own (a write blocked past
//! io-timeout, a started frame not completed within io-timeout, a bad
//! frame), the locks it held are not handed on before its last frame plus
//! its lease: the client may still count on them until its own deadline
//! (docs/protocol.md, "How a claim ends"). Its waiting claims leave their
//! queues at once, its socket closes at once, and an administrator's
//! force-release and a shutdown still release at once.
//!
//! Every instant compared here is measured from a real event: a frame the
//! test sent, or an event the server reported to its observer as it
//! happened. The lower bound on a grant is "last frame + lease"; the upper
//! bound is generous, for a loaded machine.

mod common;

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use common::{TestServer, eventually, within};
use monolock_proto::{
    ServerFrame, msg,
    v2::{self, ClientFrame, Mode},
};
use monolock_server::{Event, Observer, ReleaseReason, ServerConfig};
use monolock_testkit::v2::RawV2;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The stalled holder's lease: long next to io-timeout, so a lock handed on
/// at the ending (io-timeout after the last read) is told apart from one
/// handed on at the lease's end by seconds.
const LEASE: Duration = Duration::from_millis(3_000);
const LEASE_MS: u32 = 3_000;
/// The waiters' lease: they send nothing while they wait.
const WAITER_LEASE_MS: u32 = 60_000;
const IO_TIMEOUT: Duration = Duration::from_millis(400);
/// How much later than "last frame + lease" a grant may come: the lease
/// wheel's millisecond and the scheduling of a loaded machine.
const LATE: Duration = Duration::from_secs(2);
/// On a server-side instant used as the holder's last frame: the observer
/// sees a batch's events a little after the batch's frames restarted the
/// lease.
const BATCH: Duration = Duration::from_millis(100);

/// What the server reported, with when.
#[derive(Clone, Debug)]
enum Seen {
    Heartbeats,
    Granted {
        lock: String,
        addr: SocketAddr,
        token: u64,
    },
    Released {
        lock: String,
        addr: SocketAddr,
        reason: ReleaseReason,
    },
    EndedByServer {
        lock: String,
        reason: ReleaseReason,
        release_in: Duration,
    },
    WaiterLeft {
        lock: String,
    },
}

#[derive(Default)]
struct Timeline(Mutex<Vec<(Instant, Seen)>>);

impl Observer for Timeline {
    fn observe(&self, event: &Event<'_>) {
        let seen = match event {
            Event::Heartbeats(_) => Seen::Heartbeats,
            Event::Granted { session, token, .. } => Seen::Granted {
                lock: session.lock.to_string(),
                addr: session.remote_addr,
                token: *token,
            },
            Event::Released {
                session, reason, ..
            } => Seen::Released {
                lock: session.lock.to_string(),
                addr: session.remote_addr,
                reason: *reason,
            },
            Event::EndedByServer {
                session,
                reason,
                release_in,
                ..
            } => Seen::EndedByServer {
                lock: session.lock.to_string(),
                reason: *reason,
                release_in: *release_in,
            },
            Event::WaiterLeft(session) => Seen::WaiterLeft {
                lock: session.lock.to_string(),
            },
            _ => return,
        };
        self.0
            .lock()
            .expect("timeline")
            .push((Instant::now(), seen));
    }
}

impl Timeline {
    fn all(&self) -> Vec<(Instant, Seen)> {
        self.0.lock().expect("timeline").clone()
    }

    /// The first event `pick` accepts, waiting for it.
    async fn first<T>(&self, what: &str, pick: impl Fn(&Seen) -> Option<T>) -> (Instant, T) {
        let mut found = None;
        eventually(what, || {
            found = self
                .all()
                .into_iter()
                .find_map(|(at, seen)| pick(&seen).map(|t| (at, t)));
            found.is_some()
        })
        .await;
        found.expect("found")
    }

    async fn granted(&self, lock: &str, to: SocketAddr) -> (Instant, u64) {
        self.first(&format!("{lock} granted to {to}"), |seen| match seen {
            Seen::Granted {
                lock: l,
                addr,
                token,
            } if l == lock && *addr == to => Some(*token),
            _ => None,
        })
        .await
    }

    async fn ended_by_server(&self, lock: &str) -> (Instant, (ReleaseReason, Duration)) {
        self.first(&format!("{lock} ended by the server"), |seen| match seen {
            Seen::EndedByServer {
                lock: l,
                reason,
                release_in,
            } if l == lock => Some((*reason, *release_in)),
            _ => None,
        })
        .await
    }

    /// The reasons of every release of `lock` by `holder`.
    fn releases(&self, lock: &str, holder: SocketAddr) -> Vec<ReleaseReason> {
        self.all()
            .into_iter()
            .filter_map(|(_, seen)| match seen {
                Seen::Released {
                    lock: l,
                    addr,
                    reason,
                } if l == lock && addr == holder => Some(reason),
                _ => None,
            })
            .collect()
    }

    /// The last instant before `before` at which the server took in a frame
    /// of the connection at `addr` (an ownership event of its own) or any
    /// heartbeat.
    fn last_activity(&self, addr: SocketAddr, before: Instant) -> Instant {
        self.all()
            .into_iter()
            .filter(|(at, seen)| {
                *at <= before
                    && match seen {
                        Seen::Heartbeats => true,
                        Seen::Granted { addr: a, .. } | Seen::Released { addr: a, .. } => {
                            *a == addr
                        }
                        _ => false,
                    }
            })
            .map(|(at, _)| at)
            .max()
            .expect("some activity of the holder")
    }
}

async fn start() -> (TestServer, Arc<Timeline>) {
    let timeline = Arc::new(Timeline::default());
    let server = TestServer::start_with(
        ServerConfig::default()
            .with_io_timeout(IO_TIMEOUT)
            .with_observer(timeline.clone()),
    )
    .await;
    (server, timeline)
}

/// Asserts `granted` came no earlier than `last_frame + LEASE` and not much
/// later.
fn assert_granted_at_lease_end(what: &str, last_frame: Instant, granted: Instant) {
    let after = granted.saturating_duration_since(last_frame);
    assert!(
        granted >= last_frame + LEASE,
        "{what}: the lock was handed on {after:?} after the holder's last frame, \
         before its lease of {LEASE:?} ran out"
    );
    assert!(
        after <= LEASE + LATE,
        "{what}: handed on only {after:?} after the holder's last frame"
    );
}

/// Reads and discards until the server's close is seen (EOF or reset).
async fn read_until_closed(stream: &mut (impl tokio::io::AsyncRead + Unpin)) {
    within("the server closes the connection", async {
        let mut sink = vec![0; 64 * 1024];
        while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// The reproduction of the defect, in version 2: a holder that keeps
/// writing (pipelined try-ACQUIRE / RELEASE pairs on other names, and
/// PINGs) but stops reading. The server's writes stall and io-timeout ends the
/// session; the waiter is granted only when the holder's lease would have
/// run out, counted from the last frame the server took in.
#[tokio::test]
async fn v2_a_holder_that_stops_reading_keeps_its_lock_until_its_lease_ends() {
    let (server, timeline) = start().await;
    let (mut holder, _) = RawV2::open(server.addr, LEASE_MS).await;
    let holder_addr = holder.stream_mut().local_addr().expect("addr");
    let v2::ServerFrame::Acquired { token, .. } = holder.acquire(1, Mode::Wait, "io-X").await
    else {
        panic!("io-X not granted");
    };
    let (mut waiter, _) = RawV2::open(server.addr, WAITER_LEASE_MS).await;
    let waiter_addr = waiter.stream_mut().local_addr().expect("addr");
    assert_eq!(
        waiter.acquire(1, Mode::Wait, "io-X").await,
        v2::ServerFrame::Waiting { claim: 1 }
    );
    // A small receive buffer fills sooner; the replies pile up in the
    // server's send buffer until its writes block.
    socket2::SockRef::from(&*holder.stream_mut())
        .set_recv_buffer_size(4096)
        .expect("rcvbuf");
    let writer = tokio::spawn(async move {
        // The reproduction's pipelined pairs, and PINGs between them: a
        // PING costs the server least per byte of reply, so its buffers
        // fill in a fraction of a second even on a loaded machine.
        let mut batch = Vec::new();
        for i in 0..20u32 {
            let name = monolock_proto::LockName::new(format!("other-{i}")).expect("name");
            ClientFrame::Acquire {
                claim: 2,
                mode: Mode::Try,
                name,
            }
            .encode(&mut batch);
            batch.extend_from_slice(&v2::release_frame(2));
            batch.extend(std::iter::repeat_n(v2::msg::PING, 200));
        }
        for _ in 0..20_000 {
            if holder.stream_mut().write_all(&batch).await.is_err() {
                break;
            }
        }
        holder
    });

    let (ended_at, (reason, release_in)) = timeline.ended_by_server("io-X").await;
    assert_eq!(reason, ReleaseReason::IoTimeout);
    // The lock still shows its holder, and the waiter is still in line.
    let lock = server.lock("io-X").expect("still held");
    assert_eq!(lock.holder.token, token);
    assert_eq!(lock.waiters.len(), 1);
    // The connection is closed now, not at the lease's end.
    let mut holder = within("the holder's writes fail", writer)
        .await
        .expect("writer");
    read_until_closed(holder.stream_mut()).await;
    let closed_at = Instant::now();

    let (granted_at, _) = timeline.granted("io-X", waiter_addr).await;
    assert!(matches!(
        waiter.recv().await,
        v2::ServerFrame::Granted { claim: 1, .. }
    ));
    assert!(
        closed_at < granted_at,
        "the socket was held to the lease's end"
    );
    let last_frame = timeline.last_activity(holder_addr, ended_at);
    assert_granted_at_lease_end("v2 write io-timeout", last_frame - BATCH, granted_at);
    // The ending was announced with the time left to the lease's end.
    assert!(
        release_in > Duration::ZERO && release_in < LEASE,
        "{release_in:?}"
    );
    assert_eq!(
        timeline.releases("io-X", holder_addr),
        [ReleaseReason::IoTimeout]
    );
    server.stop_and_drop((holder, waiter)).await;
}

/// Version 1: a holder that floods heartbeats without reading its
/// replies. io-timeout on the blocked write ends it; the waiter is granted
/// at its last heartbeat plus its lease.
#[tokio::test]
async fn v1_a_holder_that_stops_reading_keeps_its_lock_until_its_lease_ends() {
    let (server, timeline) = start().await;
    let (holder, token) = server.hold("stuck", LEASE_MS).await;
    let holder_addr = holder.local_addr();
    let mut waiter = server.wait_in_line("stuck", WAITER_LEASE_MS).await;
    let waiter_addr = waiter.stream.local_addr().expect("addr");
    socket2::SockRef::from(&holder.stream)
        .set_recv_buffer_size(4096)
        .expect("rcvbuf");
    let (mut read_half, mut write_half) = holder.stream.into_split();
    let flood = tokio::spawn(async move {
        let burst = vec![msg::HEARTBEAT; 64 * 1024];
        for _ in 0..2_000 {
            if write_half.write_all(&burst).await.is_err() {
                break;
            }
        }
        write_half
    });

    let (ended_at, (reason, _)) = timeline.ended_by_server("stuck").await;
    assert_eq!(reason, ReleaseReason::IoTimeout);
    let lock = server.lock("stuck").expect("still held");
    assert_eq!(lock.holder.token, token);
    assert_eq!(lock.waiters.len(), 1);
    read_until_closed(&mut read_half).await;
    let closed_at = Instant::now();
    let write_half = within("the flood stops", flood).await.expect("flood");

    let (granted_at, _) = timeline.granted("stuck", waiter_addr).await;
    assert!(matches!(
        waiter.recv().await,
        ServerFrame::Acquired { token: next } if next > token
    ));
    assert!(
        closed_at < granted_at,
        "the socket was held to the lease's end"
    );
    // Only the holder sends heartbeats here.
    let last_frame = timeline.last_activity(holder_addr, ended_at);
    assert_granted_at_lease_end("v1 write io-timeout", last_frame - BATCH, granted_at);
    assert_eq!(
        timeline.releases("stuck", holder_addr),
        [ReleaseReason::IoTimeout]
    );
    server.stop_and_drop((read_half, write_half, waiter)).await;
}

/// Version 2: a started frame not completed within io-timeout ends the
/// session. The held claim stays held to the lease's end; the session's
/// waiting claim leaves its queue at once.
#[tokio::test]
async fn v2_a_frame_left_half_sent_keeps_the_lock_until_the_lease_ends() {
    let (server, timeline) = start().await;
    let (_other, _) = server.hold("busy", WAITER_LEASE_MS).await;
    let (mut holder, _) = RawV2::open(server.addr, LEASE_MS).await;
    assert!(matches!(
        holder.acquire(1, Mode::Wait, "half").await,
        v2::ServerFrame::Acquired { claim: 1, .. }
    ));
    assert_eq!(
        holder.acquire(2, Mode::Wait, "busy").await,
        v2::ServerFrame::Waiting { claim: 2 }
    );
    let (mut waiter, _) = RawV2::open(server.addr, WAITER_LEASE_MS).await;
    let waiter_addr = waiter.stream_mut().local_addr().expect("addr");
    assert_eq!(
        waiter.acquire(1, Mode::Wait, "half").await,
        v2::ServerFrame::Waiting { claim: 1 }
    );
    let last_frame = Instant::now();
    assert_eq!(holder.ping().await, v2::ServerFrame::Pong);
    let mut acquire = Vec::new();
    ClientFrame::Acquire {
        claim: 3,
        mode: Mode::Wait,
        name: monolock_proto::LockName::new("never-finished").expect("name"),
    }
    .encode(&mut acquire);
    holder.send_raw(&acquire[..4]).await;

    let (ended_at, (reason, _)) = timeline.ended_by_server("half").await;
    assert_eq!(reason, ReleaseReason::IoTimeout);
    assert!(ended_at >= last_frame + IO_TIMEOUT);
    // The waiting claim left its queue at the ending, not at the lease's end.
    let (left_at, ()) = timeline
        .first("the waiting claim left", |seen| match seen {
            Seen::WaiterLeft { lock } if lock == "busy" => Some(()),
            _ => None,
        })
        .await;
    assert!(left_at < last_frame + LEASE);
    assert_eq!(server.waiters("busy"), 0);
    assert_eq!(server.waiters("half"), 1);
    holder.expect_closed().await;
    let closed_at = Instant::now();

    let (granted_at, _) = timeline.granted("half", waiter_addr).await;
    assert!(matches!(
        waiter.recv().await,
        v2::ServerFrame::Granted { claim: 1, .. }
    ));
    assert!(closed_at < granted_at);
    assert_granted_at_lease_end("v2 started frame", last_frame, granted_at);
    server.stop_and_drop((holder, waiter, _other)).await;
}

/// Version 2: a bad frame from a holder ends the session with an ERROR,
/// and the lock stays held to the lease's end.
#[tokio::test]
async fn v2_a_protocol_error_keeps_the_lock_until_the_lease_ends() {
    let (server, timeline) = start().await;
    let (mut holder, _) = RawV2::open(server.addr, LEASE_MS).await;
    let holder_addr = holder.stream_mut().local_addr().expect("addr");
    assert!(matches!(
        holder.acquire(1, Mode::Wait, "v2-bad").await,
        v2::ServerFrame::Acquired { claim: 1, .. }
    ));
    let (mut waiter, _) = RawV2::open(server.addr, WAITER_LEASE_MS).await;
    let waiter_addr = waiter.stream_mut().local_addr().expect("addr");
    assert_eq!(
        waiter.acquire(1, Mode::Wait, "v2-bad").await,
        v2::ServerFrame::Waiting { claim: 1 }
    );
    let last_frame = Instant::now();
    assert_eq!(holder.ping().await, v2::ServerFrame::Pong);
    holder.send_raw(&[0x7f]).await;
    holder.expect_error().await;
    let closed_at = Instant::now();
    let (_, (reason, _)) = timeline.ended_by_server("v2-bad").await;
    assert_eq!(reason, ReleaseReason::ProtocolError);

    let (granted_at, _) = timeline.granted("v2-bad", waiter_addr).await;
    assert!(matches!(
        waiter.recv().await,
        v2::ServerFrame::Granted { claim: 1, .. }
    ));
    assert!(closed_at < granted_at);
    assert_granted_at_lease_end("v2 protocol error", last_frame, granted_at);
    assert_eq!(
        timeline.releases("v2-bad", holder_addr),
        [ReleaseReason::ProtocolError]
    );
    server.stop_and_drop((holder, waiter)).await;
}

/// Version 1: a bad byte from a holder ends the session with an ERROR,
/// and the lock stays held to the lease's end.
#[tokio::test]
async fn v1_a_protocol_error_keeps_the_lock_until_the_lease_ends() {
    let (server, timeline) = start().await;
    let (mut holder, token) = server.hold("v1-bad", LEASE_MS).await;
    let holder_addr = holder.local_addr();
    let mut waiter = server.wait_in_line("v1-bad", WAITER_LEASE_MS).await;
    let waiter_addr = waiter.stream.local_addr().expect("addr");
    let last_frame = Instant::now();
    assert_eq!(holder.heartbeat().await, ServerFrame::Acquired { token });
    holder.send(&[0x7f]).await;
    assert_eq!(holder.expect_error_then_close().await.0, 0x13);
    let closed_at = Instant::now();
    let (_, (reason, _)) = timeline.ended_by_server("v1-bad").await;
    assert_eq!(reason, ReleaseReason::ProtocolError);
    assert_eq!(server.lock("v1-bad").expect("held").holder.token, token);

    let (granted_at, _) = timeline.granted("v1-bad", waiter_addr).await;
    assert!(matches!(
        waiter.recv().await,
        ServerFrame::Acquired { token: next } if next > token
    ));
    assert!(closed_at < granted_at);
    assert_granted_at_lease_end("v1 protocol error", last_frame, granted_at);
    assert_eq!(
        timeline.releases("v1-bad", holder_addr),
        [ReleaseReason::ProtocolError]
    );
    server.stop_and_drop((holder, waiter)).await;
}

/// A waiter the server ends holds nothing: it leaves its queue at once.
#[tokio::test]
async fn v1_a_waiter_with_a_protocol_error_leaves_its_queue_at_once() {
    let (server, timeline) = start().await;
    let (holder, _) = server.hold("queue", WAITER_LEASE_MS).await;
    let mut waiter = server.wait_in_line("queue", LEASE_MS).await;
    let sent = Instant::now();
    waiter.send(&[0x7f]).await;
    assert_eq!(waiter.expect_error_then_close().await.0, 0x13);
    let (left_at, ()) = timeline
        .first("the waiter left", |seen| match seen {
            Seen::WaiterLeft { lock } if lock == "queue" => Some(()),
            _ => None,
        })
        .await;
    assert!(left_at < sent + LEASE);
    assert_eq!(server.waiters("queue"), 0);
    server.stop_and_drop(holder).await;
}

/// An administrator's force-release of a lock whose holder the server
/// closed hands it on at once, as for any holder, and only once.
#[tokio::test]
async fn a_force_release_of_a_closed_holder_hands_the_lock_on_at_once() {
    let (server, timeline) = start().await;
    let (mut holder, token) = server.hold("forced", LEASE_MS).await;
    let holder_addr = holder.local_addr();
    let mut waiter = server.wait_in_line("forced", WAITER_LEASE_MS).await;
    let waiter_addr = waiter.stream.local_addr().expect("addr");
    let last_frame = Instant::now();
    assert_eq!(holder.heartbeat().await, ServerFrame::Acquired { token });
    holder.send(&[0x7f]).await;
    assert_eq!(holder.expect_error_then_close().await.0, 0x13);
    timeline.ended_by_server("forced").await;

    let forced_at = Instant::now();
    let released = server.handle.force_release("forced").expect("released");
    assert_eq!(released.token, token);
    let (granted_at, _) = timeline.granted("forced", waiter_addr).await;
    assert!(granted_at < last_frame + LEASE);
    assert!(granted_at >= forced_at);
    assert!(matches!(
        waiter.recv().await,
        ServerFrame::Acquired { token: next } if next > token
    ));
    // Past the closed holder's lease (an absence can only be checked by
    // waiting past it): its pending release found the lock already handed
    // on and changed nothing.
    tokio::time::sleep_until((last_frame + LEASE + BATCH).into()).await;
    let ServerFrame::Acquired { token: next } = waiter.heartbeat().await else {
        panic!("the new holder lost its lock");
    };
    assert_eq!(server.lock("forced").expect("held").holder.token, next);
    assert_eq!(
        timeline.releases("forced", holder_addr),
        [ReleaseReason::Force]
    );
    server.stop_and_drop((holder, waiter)).await;
}

/// A shutdown releases the locks of sessions the server closed at once
/// (reason `shutdown`), and the server does not wait for their leases.
#[tokio::test]
async fn a_shutdown_releases_the_locks_of_closed_holders_at_once() {
    let (server, timeline) = start().await;
    let (mut holder, _) = RawV2::open(server.addr, WAITER_LEASE_MS).await;
    let holder_addr = holder.stream_mut().local_addr().expect("addr");
    assert!(matches!(
        holder.acquire(1, Mode::Wait, "at-shutdown").await,
        v2::ServerFrame::Acquired { claim: 1, .. }
    ));
    holder.send_raw(&[0x7f]).await;
    holder.expect_error().await;
    let (_, (_, release_in)) = timeline.ended_by_server("at-shutdown").await;
    assert!(release_in > Duration::from_secs(30), "{release_in:?}");
    assert!(server.lock("at-shutdown").is_some());

    let started = Instant::now();
    server.stop_and_drop(holder).await;
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(
        timeline.releases("at-shutdown", holder_addr),
        [ReleaseReason::Shutdown]
    );
}
