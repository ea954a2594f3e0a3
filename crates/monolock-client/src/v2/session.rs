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
//!
//! Every session asks for the extension (values and observers): HELLO
//! goes out with the OPEN, and nothing else is written until FEATURES
//! answers it. A server that answers OPENED then ERROR 0x13 predates the
//! extension: the address is remembered in the pool, and the claims
//! placed on the session go to a plain one. Watches share the session
//! with claims (their ids in a space of their own) and keep it open.

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc, Weak,
        atomic::{AtomicU8, AtomicU32, Ordering},
    },
    time::Duration,
};

use monolock_proto::{
    ErrorCode, Lease, LockName,
    ext::{self, FEATURE_VALUES_AND_OBSERVERS},
    v2::{ClientFrame, Mode, release_frame},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    sync::{mpsc, oneshot},
    time::{Instant, sleep_until, timeout, timeout_at},
};
use tracing::{Instrument, debug, debug_span};

use super::{
    exchange::{Event, Exchange, ReleaseStep, UnobserveStep},
    pool::Pool,
    watch::{Mailbox, WatchEnd},
};
use crate::{
    connector::{Connection, SocketShutdown, Transport},
    error::{LossReason, ProtocolViolation, Unsupported},
    exchange::{Planted, planted},
    session::{Deadline, Retry, Shared, Status},
    state::LockState,
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

/// Why a one-off request (PROCLAIM, LOOKUP) got no answer.
#[derive(Clone, Debug)]
pub(crate) enum RequestFailed {
    /// REFUSED, with the claim code.
    Refused { code: ErrorCode, reason: String },
    /// The session ended first.
    Lost(LossReason),
    /// The session lacks the extension.
    Unsupported(Unsupported),
    /// The session closed before the request was written: place it again.
    Retry,
}

/// The answer to a one-off request, sent back to its caller.
type Answer<T> = oneshot::Sender<Result<T, RequestFailed>>;

/// What a claim, a watch or a lookup asks of the session's task.
#[derive(Debug)]
enum Command {
    Acquire {
        claim: u32,
        mode: Mode,
        name: LockName,
        /// Some: written as ACQUIRE_VALUE.
        value: Option<String>,
        shared: Arc<Shared>,
    },
    Release {
        claim: u32,
    },
    Proclaim {
        claim: u32,
        value: String,
        answer: Answer<()>,
    },
    Observe {
        watch: u32,
        name: LockName,
        mailbox: Arc<Mailbox>,
    },
    Unobserve {
        watch: u32,
    },
    Lookup {
        name: LockName,
        answer: Answer<LockState>,
    },
    /// Close the session: a release that could not be confirmed.
    Close,
}

/// Whether a session has the extension: asked and not answered yet,
/// granted, or not there (a plain session, or a server without it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ExtensionStatus {
    Pending,
    Granted,
    Absent,
}

impl ExtensionStatus {
    const fn byte(self) -> u8 {
        match self {
            Self::Pending => 0,
            Self::Granted => 1,
            Self::Absent => 2,
        }
    }

    const fn from_byte(byte: u8) -> Self {
        match byte {
            0 => Self::Pending,
            1 => Self::Granted,
            _ => Self::Absent,
        }
    }
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

/// Claim and watch counts, shared with the task.
#[derive(Debug)]
struct Counts {
    next_claim: AtomicU32,
    /// Claims placed on the session and not yet freed.
    load: AtomicU32,
    /// The server's bound (assumed the default until OPENED says).
    max_claims: AtomicU32,
    next_watch: AtomicU32,
    /// Watches placed on the session and not yet freed.
    watch_load: AtomicU32,
    /// The server's bound (assumed the default until FEATURES says).
    max_watches: AtomicU32,
    /// An [`ExtensionStatus`].
    extension: AtomicU8,
}

impl SessionHandle {
    /// A session over `conn` (to `addr`), and its task, not yet started:
    /// claims placed before [`Starter::start`] go out in the OPEN's write.
    ///
    /// `hello`: ask for the extension (the pool knows whether the address
    /// lacks it); the pool is told if the server turns out to.
    pub(crate) fn new<S: Transport>(
        conn: Connection<S>,
        addr: Arc<str>,
        lease: Lease,
        hello: bool,
        pool: Weak<Pool>,
    ) -> (Arc<Self>, Starter<S>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let now = Instant::now();
        let deadline = Arc::new(Deadline::new(now + lease.as_duration() * 4 / 5));
        let extension = if hello {
            ExtensionStatus::Pending
        } else {
            ExtensionStatus::Absent
        };
        let counts = Arc::new(Counts {
            next_claim: AtomicU32::new(0),
            load: AtomicU32::new(0),
            max_claims: AtomicU32::new(monolock_proto::v2::DEFAULT_MAX_CLAIMS),
            next_watch: AtomicU32::new(1),
            watch_load: AtomicU32::new(0),
            max_watches: AtomicU32::new(ext::DEFAULT_MAX_WATCHES),
            extension: AtomicU8::new(extension.byte()),
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
            hello,
            pool,
            owners: HashMap::new(),
            watchers: HashMap::new(),
            proclaims: VecDeque::new(),
            lookups: VecDeque::new(),
            unsupported: false,
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
        (
            handle,
            Starter {
                driver: Box::new(driver),
                span,
            },
        )
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

    /// Whether the session has the extension.
    pub(crate) fn extension(&self) -> ExtensionStatus {
        ExtensionStatus::from_byte(self.counts.extension.load(Ordering::Acquire))
    }

    /// A watch id for one more watch, if the session has room for it.
    pub(crate) fn take_watch_slot(&self) -> Option<u32> {
        let counts = &self.counts;
        let max = counts.max_watches.load(Ordering::Acquire);
        counts
            .watch_load
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |load| {
                (load < max).then_some(load + 1)
            })
            .ok()?;
        let id = counts.next_watch.fetch_add(1, Ordering::AcqRel);
        if id >= CLAIM_IDS {
            counts.watch_load.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(id)
    }

    /// Places the watch `watch` (from [`take_watch_slot`](Self::take_watch_slot)):
    /// the OBSERVE goes out with the task's next write.
    pub(crate) fn observe(&self, watch: u32, name: LockName, mailbox: Arc<Mailbox>) {
        let command = Command::Observe {
            watch,
            name,
            mailbox: mailbox.clone(),
        };
        if self.tx.send(command).is_err() {
            self.counts.watch_load.fetch_sub(1, Ordering::AcqRel);
            mailbox.end(WatchEnd::Retry);
        }
    }

    /// The owner of `watch` stopped observing: an UNOBSERVE goes out
    /// (never blocking; its reply is matched by the task).
    pub(crate) fn unobserve(&self, watch: u32) {
        let _ = self.tx.send(Command::Unobserve { watch });
    }

    /// Asks who holds `name` now.
    pub(crate) fn lookup(
        &self,
        name: LockName,
    ) -> oneshot::Receiver<Result<LockState, RequestFailed>> {
        let (answer, rx) = oneshot::channel();
        if let Err(mpsc::error::SendError(Command::Lookup { answer, .. })) =
            self.tx.send(Command::Lookup { name, answer })
        {
            let _ = answer.send(Err(RequestFailed::Retry));
        }
        rx
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
    /// Boxed: a session's state is large, and a starter travels in
    /// `Placement` next to small variants.
    driver: Box<Driver<S>>,
    span: tracing::Span,
}

impl<S: Transport> Starter<S> {
    /// Spawns the task: it writes the OPEN with its HELLO in one write
    /// (a plain session: with every claim placed so far), and the claims
    /// once FEATURES is read.
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
    /// `session`: the ACQUIRE (ACQUIRE_VALUE with a value) goes out with
    /// the task's next write.
    pub(crate) fn start(
        session: Arc<SessionHandle>,
        id: u32,
        name: LockName,
        mode: Mode,
        value: Option<String>,
    ) -> Self {
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
            value,
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

    /// The session's address.
    pub(crate) fn addr(&self) -> &Arc<str> {
        &self.session.addr
    }

    /// Replaces the claim's value and waits for PROCLAIMED, at most
    /// `io_timeout`.
    ///
    /// # Errors
    /// Why the claim ended (or the session without the extension), or a
    /// timeout.
    pub(crate) async fn proclaim(
        &self,
        value: String,
        io_timeout: Duration,
    ) -> Result<(), RequestFailed> {
        if let Some(reason) = self.shared.loss() {
            return Err(RequestFailed::Lost(reason));
        }
        let (answer, rx) = oneshot::channel();
        let command = Command::Proclaim {
            claim: self.id,
            value,
            answer,
        };
        if self.session.tx.send(command).is_err() {
            return Err(RequestFailed::Lost(
                self.shared.loss().unwrap_or(LossReason::ConnectionClosed),
            ));
        }
        match timeout(io_timeout, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(RequestFailed::Lost(
                self.shared.loss().unwrap_or(LossReason::ConnectionClosed),
            )),
            Err(_) => Err(RequestFailed::Lost(LossReason::io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("PROCLAIM not confirmed within {io_timeout:?}"),
            )))),
        }
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
    /// Whether the session asks for the extension.
    hello: bool,
    /// Told when the server lacks the extension.
    pool: Weak<Pool>,
    /// The owner of every claim id the exchange knows.
    owners: HashMap<u32, Arc<Shared>>,
    /// The mailbox of every watch id the exchange knows.
    watchers: HashMap<u32, Arc<Mailbox>>,
    /// The callers of the PROCLAIMs in flight, in the order written.
    proclaims: VecDeque<Answer<()>>,
    /// The callers of the LOOKUPs in flight, in the order written.
    lookups: VecDeque<Answer<LockState>>,
    /// The server answered HELLO with ERROR 0x13.
    unsupported: bool,
    out: Vec<u8>,
    buf: Vec<u8>,
}

impl<S> Drop for Driver<S> {
    /// Runs before the stream closes (fields drop after this body), also
    /// when the task never finished: its runtime shut down, say. Every
    /// claim is lost before the server can see the close and hand a lock
    /// on; a claim never sent is placed elsewhere.
    fn drop(&mut self) {
        self.end_all(&LossReason::ConnectionClosed, None, Some(&Retry::Elsewhere));
    }
}

impl<S> Driver<S> {
    /// The session is over: every claim and watch still known ends for
    /// `reason` (a claim still unanswered is placed again with `retry`,
    /// if given), and every request in flight fails with it. What was
    /// never written is placed again with `unsent`, if given, else fails
    /// for `reason` too. Leaves everything empty, so a second call does
    /// nothing.
    fn end_all(&mut self, reason: &LossReason, retry: Option<&Retry>, unsent: Option<&Retry>) {
        self.rx.close();
        let unsupported = self.unsupported_error();
        while let Ok(command) = self.rx.try_recv() {
            match command {
                Command::Acquire { shared, .. } => match unsent {
                    Some(retry) => shared.advance(Status::Retry(retry.clone())),
                    None => shared.lose(reason.clone()),
                },
                Command::Observe { mailbox, .. } => {
                    mailbox.end(match (&unsupported, unsent) {
                        (Some(unsupported), _) => WatchEnd::Unsupported(unsupported.clone()),
                        (None, Some(_)) => WatchEnd::Retry,
                        (None, None) => WatchEnd::Lost(reason.clone()),
                    });
                }
                Command::Lookup { answer, .. } => {
                    let _ = answer.send(Err(match (&unsupported, unsent) {
                        (Some(unsupported), _) => RequestFailed::Unsupported(unsupported.clone()),
                        (None, Some(_)) => RequestFailed::Retry,
                        (None, None) => RequestFailed::Lost(reason.clone()),
                    }));
                }
                Command::Proclaim { answer, .. } => {
                    let _ = answer.send(Err(RequestFailed::Lost(reason.clone())));
                }
                Command::Release { .. } | Command::Unobserve { .. } | Command::Close => {}
            }
        }
        for (_, shared) in self.owners.drain() {
            match retry {
                Some(retry) if matches!(shared.status_now(), Status::Unanswered) => {
                    shared.advance(Status::Retry(retry.clone()));
                }
                _ => shared.lose(reason.clone()),
            }
        }
        for (_, mailbox) in self.watchers.drain() {
            mailbox.end(WatchEnd::Lost(reason.clone()));
        }
        for answer in self.proclaims.drain(..) {
            let _ = answer.send(Err(RequestFailed::Lost(reason.clone())));
        }
        for answer in self.lookups.drain(..) {
            let _ = answer.send(Err(RequestFailed::Lost(reason.clone())));
        }
    }

    /// The error for what needs the extension, once the server said it
    /// lacks it.
    fn unsupported_error(&self) -> Option<Unsupported> {
        let absent = ExtensionStatus::from_byte(self.counts.extension.load(Ordering::Acquire))
            == ExtensionStatus::Absent;
        absent.then(|| Unsupported::Server {
            addr: self.addr.to_string(),
        })
    }
}

impl<S: Transport> Driver<S> {
    async fn run(mut self: Box<Self>) {
        let opened_at = Instant::now();
        let mut exchange = Exchange::new(self.lease.as_duration(), opened_at);
        let end = self.drive(&mut exchange, opened_at).await;
        let closed = matches!(end, End::Closed);
        let reason = match end {
            End::Closed => LossReason::ConnectionClosed,
            End::Lost(reason) => reason,
        };
        debug!(%reason, claims = self.owners.len(), watches = self.watchers.len(), "session over");
        let retry = match &reason {
            _ if self.unsupported => Some(Retry::NoExtension(self.addr.clone())),
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
        // Remembered here, not only by a claim that reads it: an
        // observation or a lookup placed again must not ask the same
        // version 1 server again.
        if let (Some(Retry::V1Only(addr)), Some(pool)) = (&retry, self.pool.upgrade()) {
            pool.remember_v1_only(addr.clone());
        }
        // Closed by the client (idle): what raced with the close goes to
        // another session. Lost: it is lost with the session, unless the
        // server's answer says where it goes instead.
        let unsent = retry.clone().or(closed.then_some(Retry::Elsewhere));
        self.end_all(&reason, retry.as_ref(), unsent.as_ref());
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
        if self.hello {
            // HELLO with the OPEN, in one write; nothing else until
            // FEATURES answers it.
            ext::ClientFrame::Hello {
                features: FEATURE_VALUES_AND_OBSERVERS,
            }
            .encode(&mut self.out);
            exchange.hello_sent(opened_at);
        } else {
            // The first claims go out with the OPEN, in the same write.
            while let Ok(command) = self.rx.try_recv() {
                self.apply(exchange, command, opened_at)?;
            }
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
            if exchange.is_idle() {
                idle_since.get_or_insert_with(Instant::now);
            } else {
                idle_since = None;
            }
            let idle_until = idle_since.map(|since| since + SESSION_IDLE);
            let next_ping = exchange.next_ping();
            let ready = exchange.ready();
            tokio::select! {
                biased;
                command = self.rx.recv(), if ready => {
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
                value,
                shared,
            } => match value {
                None => {
                    ClientFrame::Acquire { claim, mode, name }.encode(&mut self.out);
                    exchange.acquire_sent(claim, mode, now);
                    self.owners.insert(claim, shared);
                }
                Some(_) if !exchange.extended() => {
                    self.counts.load.fetch_sub(1, Ordering::AcqRel);
                    shared.advance(Status::Retry(Retry::NoExtension(self.addr.clone())));
                }
                Some(value) => {
                    ext::ClientFrame::AcquireValue {
                        claim,
                        mode,
                        name,
                        value,
                    }
                    .encode(&mut self.out);
                    exchange.acquire_sent(claim, mode, now);
                    self.owners.insert(claim, shared);
                }
            },
            Command::Release { claim } => self.release(exchange, claim, now),
            Command::Proclaim {
                claim,
                value,
                answer,
            } => {
                if !exchange.extended() {
                    let unsupported = Unsupported::Server {
                        addr: self.addr.to_string(),
                    };
                    let _ = answer.send(Err(RequestFailed::Unsupported(unsupported)));
                } else if !exchange.is_live(claim) {
                    let reason = self
                        .owners
                        .get(&claim)
                        .and_then(|owner| owner.loss())
                        .unwrap_or(LossReason::ConnectionClosed);
                    let _ = answer.send(Err(RequestFailed::Lost(reason)));
                } else {
                    ext::ClientFrame::Proclaim { claim, value }.encode(&mut self.out);
                    exchange.proclaim_sent(claim, now);
                    self.proclaims.push_back(answer);
                }
            }
            Command::Observe {
                watch,
                name,
                mailbox,
            } => {
                if exchange.extended() {
                    ext::ClientFrame::Observe { watch, name }.encode(&mut self.out);
                    exchange.observe_sent(watch, now);
                    self.watchers.insert(watch, mailbox);
                } else {
                    self.counts.watch_load.fetch_sub(1, Ordering::AcqRel);
                    mailbox.end(WatchEnd::Unsupported(Unsupported::Server {
                        addr: self.addr.to_string(),
                    }));
                }
            }
            Command::Unobserve { watch } => self.unobserve(exchange, watch, now),
            Command::Lookup { name, answer } => {
                if exchange.extended() {
                    ext::ClientFrame::Lookup { name }.encode(&mut self.out);
                    exchange.lookup_sent(now);
                    self.lookups.push_back(answer);
                } else {
                    let unsupported = Unsupported::Server {
                        addr: self.addr.to_string(),
                    };
                    let _ = answer.send(Err(RequestFailed::Unsupported(unsupported)));
                }
            }
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

    fn unobserve(&mut self, exchange: &mut Exchange, watch: u32, now: Instant) {
        if exchange.unobserve(watch) == UnobserveStep::Write {
            ext::ClientFrame::Unobserve { watch }.encode(&mut self.out);
            exchange.unobserve_sent(watch, now);
        }
    }

    /// Decodes and applies every whole frame in the buffer.
    fn take_frames(&mut self, exchange: &mut Exchange) -> Result<(), LossReason> {
        let now = Instant::now();
        let mut used = 0;
        while let Some((frame, len)) = ext::decode_response(&self.buf[used..])
            .map_err(|err| LossReason::ProtocolViolation(ProtocolViolation::from_decode_ext(err)))?
        {
            used += len;
            let event = match frame {
                ext::Response::Base(frame) => exchange.on_frame(frame, now),
                ext::Response::Ext(frame) => exchange.on_ext_frame(frame, now),
            }
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
            Event::Features { max_watches, .. } => {
                let status = if exchange.extended() {
                    ExtensionStatus::Granted
                } else {
                    ExtensionStatus::Absent
                };
                self.counts
                    .max_watches
                    .store(max_watches, Ordering::Release);
                self.counts
                    .extension
                    .store(status.byte(), Ordering::Release);
            }
            Event::Unsupported => {
                debug!("the server lacks values and observers");
                self.counts
                    .extension
                    .store(ExtensionStatus::Absent.byte(), Ordering::Release);
                self.unsupported = true;
                if let Some(pool) = self.pool.upgrade() {
                    pool.remember_plain(self.addr.clone());
                }
                return Err(LossReason::Server {
                    code: ErrorCode::UNKNOWN_MESSAGE_TYPE,
                    reason: "the server lacks values and observers".into(),
                });
            }
            Event::Proclaimed { .. } => {
                if let Some(answer) = self.proclaims.pop_front() {
                    let _ = answer.send(Ok(()));
                }
            }
            Event::ProclaimRefused {
                claim,
                code,
                reason,
            } => {
                if let Some(answer) = self.proclaims.pop_front() {
                    let failed = match self.owners.get(&claim).and_then(|owner| owner.loss()) {
                        Some(loss) => RequestFailed::Lost(loss),
                        None => RequestFailed::Refused { code, reason },
                    };
                    let _ = answer.send(Err(failed));
                }
            }
            Event::Observing { watch, unobserve } => {
                if let Some(mailbox) = self.watchers.get(&watch) {
                    mailbox.observing();
                }
                if unobserve {
                    self.unobserve(exchange, watch, now);
                }
            }
            Event::WatchRefused {
                watch,
                code,
                reason,
            } => {
                if let Some(mailbox) = self.free_watch(watch) {
                    if code == ErrorCode::TOO_MANY_WATCHES {
                        // The session's bound: no new watch here until one
                        // ends; the watch goes to another session.
                        let load = self.counts.watch_load.load(Ordering::Acquire);
                        self.counts.max_watches.store(load, Ordering::Release);
                        mailbox.end(WatchEnd::Retry);
                    } else {
                        mailbox.end(WatchEnd::Refused { code, reason });
                    }
                }
            }
            Event::State { watch, state } => {
                if let Some(mailbox) = self.watchers.get(&watch) {
                    mailbox.push(state);
                }
            }
            Event::Unobserved { watch } => {
                if let Some(mailbox) = self.free_watch(watch) {
                    mailbox.end(WatchEnd::Lost(LossReason::ConnectionClosed));
                }
            }
            Event::LockState(state) => {
                if let Some(answer) = self.lookups.pop_front() {
                    let _ = answer.send(Ok(state));
                }
            }
            Event::LookupRefused { code, reason } => {
                if let Some(answer) = self.lookups.pop_front() {
                    let _ = answer.send(Err(RequestFailed::Refused { code, reason }));
                }
            }
        }
        Ok(())
    }

    /// Forgets a watch whose id is free again.
    fn free_watch(&mut self, watch: u32) -> Option<Arc<Mailbox>> {
        let mailbox = self.watchers.remove(&watch);
        if mailbox.is_some() {
            self.counts.watch_load.fetch_sub(1, Ordering::AcqRel);
        }
        mailbox
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
