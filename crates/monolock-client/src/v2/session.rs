//! One protocol version 2 session: the task that owns its connection, the
//! handle the pool keeps, and a claim's handle.
//!
//! The task is the connection's permanent reader and only writer. Claims
//! reach it through an unbounded channel (a `send` never blocks, so `Drop`
//! may send a RELEASE): it drains every command waiting, encodes them into
//! one buffer and writes it once, reads replies in batches, answers each
//! claim through the claim's own [`Shared`] state, heartbeats the session
//! (PING, only when nothing is in flight) and gives every claim up at the
//! session's deadline. The deadline lives in an atomic read by every claim
//! (`is_held`), so the heartbeat path takes no lock.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    },
    time::Duration,
};

use monolock_proto::{
    ErrorCode, Lease, LockName,
    v2::{ClientFrame, Mode, decode_response, release_frame},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    sync::mpsc,
    time::{Instant, sleep_until, timeout, timeout_at},
};
use tracing::{Instrument, debug, debug_span};

use super::exchange::{Event, Exchange, ReleaseStep};
use crate::{
    connector::{Connection, SocketShutdown, Transport},
    error::{LossReason, ProtocolViolation},
    exchange::{Planted, planted},
    session::{Deadline, Retry, Shared, Status},
};

/// How long a session stays open without claims before the client closes
/// it: a third of the server's default `--idle-timeout` (60 s), so the
/// client's close wins the race against the server's ERROR 0x03 with room
/// to spare.
pub(crate) const SESSION_IDLE: Duration = Duration::from_secs(20);

/// Claim ids a session hands out in its life; then it takes no new claim
/// and closes once idle, so an id is never reused while the claim that
/// had it may live.
const CLAIM_IDS: u32 = 1 << 31;

/// Bytes read from the socket at a time: many replies per read.
const READ_CHUNK: usize = 16 * 1024;

/// What a claim asks of the session's task.
#[derive(Debug)]
enum Command {
    Acquire {
        claim: u32,
        mode: Mode,
        name: LockName,
        shared: Arc<Shared>,
    },
    Release {
        claim: u32,
    },
    /// Close the session: a release that could not be confirmed.
    Close,
}

/// What the pool and the claims keep of a session.
#[derive(Debug)]
pub(crate) struct SessionHandle {
    tx: mpsc::UnboundedSender<Command>,
    lease: Lease,
    deadline: Arc<Deadline>,
    socket: Option<Arc<SocketShutdown>>,
    counts: Arc<Counts>,
    addr: Arc<str>,
}

/// Claim counts, shared with the task.
#[derive(Debug)]
struct Counts {
    next_claim: AtomicU32,
    /// Claims placed on the session and not yet freed.
    load: AtomicU32,
    /// The server's bound (assumed the default until OPENED says).
    max_claims: AtomicU32,
}

impl SessionHandle {
    /// A session over `conn` (to `addr`), and its task, not yet started:
    /// claims placed before [`Starter::start`] go out in the OPEN's write.
    pub(crate) fn new<S: Transport>(
        conn: Connection<S>,
        addr: Arc<str>,
        lease: Lease,
    ) -> (Arc<Self>, Starter<S>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let now = Instant::now();
        let deadline = Arc::new(Deadline::new(now + lease.as_duration() * 4 / 5));
        let counts = Arc::new(Counts {
            next_claim: AtomicU32::new(0),
            load: AtomicU32::new(0),
            max_claims: AtomicU32::new(monolock_proto::v2::DEFAULT_MAX_CLAIMS),
        });
        let socket = conn.shutdown.map(Arc::new);
        let span = debug_span!("monolock_session_v2", %addr, lease_ms = lease.as_millis());
        let driver = Driver {
            stream: conn.stream,
            rx,
            counts: counts.clone(),
            deadline: deadline.clone(),
            lease,
            addr: addr.clone(),
            owners: HashMap::new(),
            out: Vec::with_capacity(256),
            buf: Vec::with_capacity(READ_CHUNK),
        };
        let handle = Arc::new(Self {
            tx,
            lease,
            deadline,
            socket,
            counts,
            addr,
        });
        (handle, Starter { driver, span })
    }

    /// The address the session is connected to.
    pub(crate) fn addr(&self) -> &Arc<str> {
        &self.addr
    }

    /// The session's lease.
    pub(crate) fn lease(&self) -> Lease {
        self.lease
    }

    /// Whether the task still takes commands.
    pub(crate) fn is_open(&self) -> bool {
        !self.tx.is_closed()
    }

    /// Whether a new claim may go to this session: open, and not past its
    /// deadline (a process resumed from a pause must not place a claim on
    /// a session its task is about to give up).
    pub(crate) fn is_usable(&self) -> bool {
        self.is_open() && Instant::now() < self.deadline.get()
    }

    /// Claims the session carries now.
    pub(crate) fn load(&self) -> u32 {
        self.counts.load.load(Ordering::Acquire)
    }

    /// A claim id for one more claim, if the session has room for it.
    pub(crate) fn take_slot(&self) -> Option<u32> {
        let counts = &self.counts;
        let max = counts.max_claims.load(Ordering::Acquire);
        counts
            .load
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |load| {
                (load < max).then_some(load + 1)
            })
            .ok()?;
        let id = counts.next_claim.fetch_add(1, Ordering::AcqRel);
        if id >= CLAIM_IDS {
            counts.load.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(id)
    }

    /// Closes the session now: every claim on it ends.
    pub(crate) fn close(&self) {
        if let Some(socket) = &self.socket {
            socket.shutdown();
        }
        let _ = self.tx.send(Command::Close);
    }
}

/// A session's task, ready to run.
pub(crate) struct Starter<S> {
    driver: Driver<S>,
    span: tracing::Span,
}

impl<S: Transport> Starter<S> {
    /// Spawns the task: it writes the OPEN and every claim placed so far
    /// in one write.
    pub(crate) fn start(self) {
        tokio::spawn(self.driver.run().instrument(self.span));
    }
}

/// A claim on a session, as its owner holds it. Dropping it before the
/// claim ended sends a RELEASE from the session's task (never blocking).
#[derive(Debug)]
pub(crate) struct Claim {
    session: Arc<SessionHandle>,
    id: u32,
    shared: Arc<Shared>,
}

impl Claim {
    /// Places the claim `id` (from [`SessionHandle::take_slot`]) on
    /// `session`: the ACQUIRE goes out with the task's next write.
    pub(crate) fn start(session: Arc<SessionHandle>, id: u32, name: LockName, mode: Mode) -> Self {
        let shared = Arc::new(Shared::new(
            session.deadline.clone(),
            session.socket.clone(),
            false,
            session.lease.as_duration(),
        ));
        let command = Command::Acquire {
            claim: id,
            mode,
            name,
            shared: shared.clone(),
        };
        if session.tx.send(command).is_err() {
            // The session ended before it could carry the claim.
            session.counts.load.fetch_sub(1, Ordering::AcqRel);
            shared.advance(Status::Retry(Retry::Elsewhere));
        }
        Self {
            session,
            id,
            shared,
        }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Releases the claim and waits for RELEASED, at most `io_timeout`;
    /// past it, the session is closed (which releases every claim on it).
    ///
    /// # Errors
    /// Why the claim had ended before the release (a REVOKED that crossed
    /// it included), or a timeout.
    pub(crate) async fn release(&mut self, io_timeout: Duration) -> Result<(), LossReason> {
        if let Some(reason) = self.shared.loss() {
            return Err(reason);
        }
        if self
            .session
            .tx
            .send(Command::Release { claim: self.id })
            .is_err()
        {
            return Err(self.shared.loss().unwrap_or(LossReason::ConnectionClosed));
        }
        let released = self
            .shared
            .wait_until(|status| matches!(status, Status::Released).then_some(()));
        match timeout(io_timeout, released).await {
            Ok(result) => result,
            Err(_) => {
                self.session.close();
                Err(LossReason::io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("RELEASE not confirmed within {io_timeout:?}; the session was closed"),
                )))
            }
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.shared.status_now().is_final() {
            let _ = self.session.tx.send(Command::Release { claim: self.id });
            // Given up on purpose: whatever happens to the session now is
            // no loss of this claim's owner.
            self.shared.advance(Status::Released);
        }
    }
}

/// Reports the server's claim codes in version 1's vocabulary, so that a
/// caller branches on one set of codes whatever the version spoken.
pub(crate) fn v1_code(code: ErrorCode) -> ErrorCode {
    match code {
        ErrorCode::CLAIM_REVOKED => ErrorCode::CLOSED_BY_ADMIN,
        ErrorCode::CLAIM_NOT_AUTHORIZED => ErrorCode::NOT_AUTHORIZED,
        ErrorCode::CLAIM_EMPTY_NAME => ErrorCode::EMPTY_NAME,
        ErrorCode::CLAIM_NAME_NOT_UTF8 => ErrorCode::NAME_NOT_UTF8,
        other => other,
    }
}

/// The owner of `claim` let go: encodes a RELEASE into `out` if one is
/// due now (the claim is waiting or held). True when it was: from then on
/// the owner no longer believes it holds the lock.
pub(crate) fn write_release(
    exchange: &mut Exchange,
    out: &mut Vec<u8>,
    claim: u32,
    now: Instant,
) -> bool {
    if exchange.release(claim) != ReleaseStep::Write {
        return false;
    }
    out.extend_from_slice(&release_frame(claim));
    exchange.release_sent(claim, now);
    !planted(Planted::V2BeliefUntilReleased)
}

/// How the session ended.
enum End {
    /// Closed by the client (idle, or nobody left to use it).
    Closed,
    /// Lost: every claim on it is lost for this reason.
    Lost(LossReason),
}

/// The task's state.
struct Driver<S> {
    stream: S,
    rx: mpsc::UnboundedReceiver<Command>,
    counts: Arc<Counts>,
    deadline: Arc<Deadline>,
    lease: Lease,
    addr: Arc<str>,
    /// The owner of every claim id the exchange knows.
    owners: HashMap<u32, Arc<Shared>>,
    out: Vec<u8>,
    buf: Vec<u8>,
}

impl<S> Drop for Driver<S> {
    /// Runs before the stream closes (fields drop after this body), also
    /// when the task never finished: its runtime shut down, say. Every
    /// claim is lost before the server can see the close and hand a lock
    /// on; a claim never sent is placed elsewhere.
    fn drop(&mut self) {
        self.rx.close();
        while let Ok(command) = self.rx.try_recv() {
            if let Command::Acquire { shared, .. } = command {
                shared.advance(Status::Retry(Retry::Elsewhere));
            }
        }
        for shared in self.owners.values() {
            shared.lose(LossReason::ConnectionClosed);
        }
    }
}

impl<S: Transport> Driver<S> {
    async fn run(mut self) {
        let opened_at = Instant::now();
        let mut exchange = Exchange::new(self.lease.as_duration(), opened_at);
        let end = self.drive(&mut exchange, opened_at).await;
        // Claims placed but never sent go to another session in `Drop`.
        let reason = match end {
            End::Closed => LossReason::ConnectionClosed,
            End::Lost(reason) => reason,
        };
        debug!(%reason, claims = self.owners.len(), "session over");
        let retry = match &reason {
            LossReason::Server { code, .. }
                if *code == ErrorCode::UNSUPPORTED_VERSION && !exchange.opened() =>
            {
                Some(Retry::V1Only(self.addr.clone()))
            }
            LossReason::Server { code, .. } if *code == ErrorCode::IDLE_SESSION => {
                Some(Retry::Elsewhere)
            }
            _ => None,
        };
        for shared in self.owners.values() {
            match &retry {
                Some(retry) if matches!(shared.status_now(), Status::Unanswered) => {
                    shared.advance(Status::Retry(retry.clone()));
                }
                _ => shared.lose(reason.clone()),
            }
        }
    }

    async fn drive(&mut self, exchange: &mut Exchange, opened_at: Instant) -> End {
        match self.exchange_frames(exchange, opened_at).await {
            Ok(()) => End::Closed,
            Err(reason) => End::Lost(reason),
        }
    }

    async fn exchange_frames(
        &mut self,
        exchange: &mut Exchange,
        opened_at: Instant,
    ) -> Result<(), LossReason> {
        ClientFrame::Open { lease: self.lease }.encode(&mut self.out);
        // The first claims go out with the OPEN, in the same write.
        while let Ok(command) = self.rx.try_recv() {
            self.apply(exchange, command, opened_at)?;
        }
        self.flush(exchange.deadline()).await?;
        let mut idle_since = Some(opened_at);
        let mut chunk = vec![0u8; READ_CHUNK];
        loop {
            let deadline = exchange.deadline();
            self.deadline.set(deadline);
            if Instant::now() >= deadline {
                return Err(self.timeout());
            }
            if exchange.claims() == 0 {
                idle_since.get_or_insert_with(Instant::now);
            } else {
                idle_since = None;
            }
            let idle_until = idle_since.map(|since| since + SESSION_IDLE);
            let next_ping = exchange.next_ping();
            tokio::select! {
                biased;
                command = self.rx.recv() => {
                    // Every handle is gone: nobody can use the session.
                    let Some(command) = command else { return Ok(()) };
                    let now = Instant::now();
                    self.apply(exchange, command, now)?;
                    while let Ok(command) = self.rx.try_recv() {
                        self.apply(exchange, command, now)?;
                    }
                    self.flush(deadline).await?;
                }
                read = self.stream.read(&mut chunk) => {
                    let n = read.map_err(LossReason::io)?;
                    if n == 0 {
                        return Err(LossReason::ConnectionClosed);
                    }
                    if Instant::now() >= exchange.deadline() {
                        return Err(self.timeout());
                    }
                    self.buf.extend_from_slice(&chunk[..n]);
                    self.take_frames(exchange)?;
                    self.flush(exchange.deadline()).await?;
                }
                () = sleep_until(deadline) => return Err(self.timeout()),
                () = sleep_until(next_ping.unwrap_or(deadline)), if next_ping.is_some() => {
                    let now = Instant::now();
                    ClientFrame::Ping.encode(&mut self.out);
                    exchange.ping_sent(now);
                    self.flush(deadline).await?;
                }
                () = sleep_until(idle_until.unwrap_or(deadline)), if idle_until.is_some() => {
                    debug!("idle session closed");
                    return Ok(());
                }
            }
        }
    }

    /// Encodes what `command` asks for into the next write.
    fn apply(
        &mut self,
        exchange: &mut Exchange,
        command: Command,
        now: Instant,
    ) -> Result<(), LossReason> {
        match command {
            Command::Acquire {
                claim,
                mode,
                name,
                shared,
            } => {
                ClientFrame::Acquire { claim, mode, name }.encode(&mut self.out);
                exchange.acquire_sent(claim, mode, now);
                self.owners.insert(claim, shared);
            }
            Command::Release { claim } => self.release(exchange, claim, now),
            Command::Close => {
                return Err(LossReason::io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "a RELEASE was not confirmed in time; the session was closed",
                )));
            }
        }
        Ok(())
    }

    fn release(&mut self, exchange: &mut Exchange, claim: u32, now: Instant) {
        if write_release(exchange, &mut self.out, claim, now)
            && let Some(owner) = self.owners.get(&claim)
        {
            owner.mark_release_written();
        }
    }

    /// Decodes and applies every whole frame in the buffer.
    fn take_frames(&mut self, exchange: &mut Exchange) -> Result<(), LossReason> {
        let now = Instant::now();
        let mut used = 0;
        while let Some((frame, len)) = decode_response(&self.buf[used..])
            .map_err(|err| LossReason::ProtocolViolation(ProtocolViolation::from_decode_v2(err)))?
        {
            used += len;
            let event = exchange
                .on_frame(frame, now)
                .map_err(LossReason::ProtocolViolation)?;
            self.on_event(exchange, event, now)?;
        }
        self.buf.drain(..used);
        self.deadline.set(exchange.deadline());
        Ok(())
    }

    fn on_event(
        &mut self,
        exchange: &mut Exchange,
        event: Event,
        now: Instant,
    ) -> Result<(), LossReason> {
        match event {
            Event::Opened { max_claims } => {
                self.counts.max_claims.store(max_claims, Ordering::Release);
            }
            Event::Nothing => {}
            Event::Held {
                claim,
                token,
                release,
            } => {
                self.owner(claim).advance(Status::Held(token));
                if release {
                    self.release(exchange, claim, now);
                }
            }
            Event::Queued { claim, release } => {
                self.owner(claim).advance(Status::Waiting);
                if release {
                    self.release(exchange, claim, now);
                }
            }
            Event::Busy { claim } => self.free(claim).advance(Status::Busy),
            Event::Refused {
                claim,
                code,
                reason,
            } => {
                let shared = self.free(claim);
                if code == ErrorCode::TOO_MANY_CLAIMS {
                    // The server's bound: no new claim here until one ends.
                    let load = self.counts.load.load(Ordering::Acquire);
                    self.counts.max_claims.store(load, Ordering::Release);
                    shared.advance(Status::Retry(Retry::Elsewhere));
                } else {
                    shared.lose(LossReason::Server {
                        code: v1_code(code),
                        reason,
                    });
                }
            }
            Event::Released { claim } => self.free(claim).advance(Status::Released),
            Event::Revoked {
                claim,
                code,
                reason,
            } => self.free(claim).lose(LossReason::Server {
                code: v1_code(code),
                reason,
            }),
            Event::Ended { code, reason } => return Err(LossReason::Server { code, reason }),
        }
        Ok(())
    }

    /// The owner of a claim the exchange knows (the two maps hold the same
    /// ids; a stand-in if they ever did not, so nothing panics).
    fn owner(&self, claim: u32) -> Arc<Shared> {
        self.owners
            .get(&claim)
            .cloned()
            .unwrap_or_else(|| self.orphan())
    }

    /// Forgets a claim whose id is free again.
    fn free(&mut self, claim: u32) -> Arc<Shared> {
        let shared = self.owners.remove(&claim);
        if shared.is_some() {
            self.counts.load.fetch_sub(1, Ordering::AcqRel);
        }
        shared.unwrap_or_else(|| self.orphan())
    }

    fn orphan(&self) -> Arc<Shared> {
        Arc::new(Shared::new(
            self.deadline.clone(),
            None,
            false,
            self.lease.as_duration(),
        ))
    }

    /// Writes what is pending in one write, giving up at the deadline.
    async fn flush(&mut self, deadline: Instant) -> Result<(), LossReason> {
        if self.out.is_empty() {
            return Ok(());
        }
        let write = async {
            self.stream.write_all(&self.out).await?;
            self.stream.flush().await
        };
        let result = match timeout_at(deadline, write).await {
            Ok(result) => result.map_err(LossReason::io),
            Err(_) => Err(self.timeout()),
        };
        self.out.clear();
        result
    }

    fn timeout(&self) -> LossReason {
        LossReason::HeartbeatTimeout {
            lease: self.lease.as_duration(),
        }
    }
}
