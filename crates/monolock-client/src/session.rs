//! A claim's state as its owner sees it ([`Shared`], for both protocol
//! versions), and the protocol version 1 driver: one connection = one
//! claim, with the background task that owns the stream.
//!
//! The task is the connection's permanent reader (promotion is pushed): it
//! sends the ACQUIRE, reads whole frames, matches replies, sends heartbeats
//! on the schedule and abandons the claim at the deadline. It ends when the
//! claim ends, when a release is asked for, or when its owner drops it.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use monolock_proto::{ClientFrame, Lease, LockName, decode_response};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    sync::watch,
    time::{Instant, sleep_until, timeout_at},
};
use tokio_util::{sync::CancellationToken, task::AbortOnDropHandle};
use tracing::{Instrument, debug, debug_span};

use crate::{
    connector::{Connection, SocketShutdown, Transport},
    error::{LossReason, ProtocolViolation},
    exchange::{Event, Exchange},
};

/// Bytes read from the socket at a time. Frames are at most 258 bytes.
const READ_CHUNK: usize = 512;

/// Where a claim is, as seen by its owner.
#[derive(Clone, Debug)]
pub(crate) enum Status {
    /// ACQUIRE sent (or being sent), no reply yet.
    Unanswered,
    /// Queued behind the holder.
    Waiting,
    /// The lock is held under this token.
    Held(u64),
    /// A try-only ACQUIRE found the lock held (protocol v2: nothing queued).
    Busy,
    /// RELEASED was read: the lock is no longer this claim's.
    Released,
    /// The claim never reached the server's table and may be placed again:
    /// its session could not carry it (see [`Retry`]).
    Retry(Retry),
    /// The claim is over.
    Lost(LossReason),
}

impl Status {
    /// Whether the claim can change no more.
    pub(crate) fn is_final(&self) -> bool {
        matches!(
            self,
            Self::Busy | Self::Released | Self::Retry(_) | Self::Lost(_)
        )
    }
}

/// Why a claim is placed again, on another session or connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Retry {
    /// The server at this address answered OPEN with ERROR 0x10: it speaks
    /// protocol version 1 only.
    V1Only(Arc<str>),
    /// The session ended (or was full) before the server took the claim:
    /// idle-closed, at its claim bound, or closing.
    Elsewhere,
    /// The server at this address answered HELLO with ERROR 0x13: it
    /// lacks values and observers. A plain claim goes to a session that
    /// does not ask for them.
    NoExtension(Arc<str>),
}

/// `S + 0.8 x lease`, shared by the session's driver (which moves it) and
/// every claim of the session (which read it in `is_held`): an atomic, so
/// the heartbeat path takes no lock.
#[derive(Debug)]
pub(crate) struct Deadline {
    base: Instant,
    /// Nanoseconds after `base`.
    after: AtomicU64,
}

impl Deadline {
    /// A deadline at `at` (and never earlier than `at` later on).
    pub(crate) fn new(at: Instant) -> Self {
        Self {
            base: at,
            after: AtomicU64::new(0),
        }
    }

    /// The deadline now.
    pub(crate) fn get(&self) -> Instant {
        self.base + Duration::from_nanos(self.after.load(Ordering::Acquire))
    }

    /// Moves the deadline to `at` (not before the first one).
    pub(crate) fn set(&self, at: Instant) {
        let after =
            u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX);
        self.after.store(after, Ordering::Release);
    }
}

/// State shared by the driver task and the claim's owner.
#[derive(Debug)]
pub(crate) struct Shared {
    status: watch::Sender<Status>,
    /// The session's deadline (version 1: the claim's own).
    deadline: Arc<Deadline>,
    /// Cancelled exactly when the status becomes `Lost`.
    lost: CancellationToken,
    /// The session's socket, shut down when the deadline passes (and, for a
    /// version 1 claim, on any loss: the connection is the claim).
    socket: Option<Arc<SocketShutdown>>,
    /// Version 1: the connection is the claim, so any loss closes it.
    closes_on_loss: bool,
    lease: Duration,
    /// Version 2: its RELEASE was written, so the owner's belief is over
    /// (docs/protocol.md: a belief ends when RELEASE is sent).
    release_written: AtomicBool,
}

impl Shared {
    /// The state of a new claim that has not been answered yet.
    pub(crate) fn new(
        deadline: Arc<Deadline>,
        socket: Option<Arc<SocketShutdown>>,
        closes_on_loss: bool,
        lease: Duration,
    ) -> Self {
        let (status, _) = watch::channel(Status::Unanswered);
        Self {
            status,
            deadline,
            lost: CancellationToken::new(),
            socket,
            closes_on_loss,
            lease,
            release_written: AtomicBool::new(false),
        }
    }

    /// The claim's RELEASE was written: nobody may believe in it from now.
    pub(crate) fn mark_release_written(&self) {
        self.release_written.store(true, Ordering::Release);
    }

    /// Whether the owner may believe it holds the lock now: held, its
    /// deadline not passed, and no RELEASE written.
    #[cfg(feature = "mutations")]
    pub(crate) fn believed(&self) -> Option<u64> {
        match self.status() {
            Status::Held(token) if !self.release_written.load(Ordering::Acquire) => Some(token),
            _ => None,
        }
    }

    /// Marks the claim lost for `reason` unless it already ended (the
    /// first reason wins); a version 1 claim shuts its socket down.
    pub(crate) fn lose(&self, reason: LossReason) {
        let changed = self.status.send_if_modified(|status| {
            if status.is_final() {
                return false;
            }
            debug!(%reason, "claim lost");
            *status = Status::Lost(reason);
            true
        });
        if changed {
            self.lost.cancel();
            if self.closes_on_loss {
                self.close_socket();
            }
        }
    }

    /// Moves a live claim to `status`; an ended claim stays as it ended.
    pub(crate) fn advance(&self, status: Status) {
        self.status.send_if_modified(|current| {
            if current.is_final() {
                return false;
            }
            *current = status;
            true
        });
    }

    /// Shuts the socket down now, if the connection has one.
    pub(crate) fn close_socket(&self) {
        if let Some(socket) = &self.socket {
            socket.shutdown();
        }
    }

    /// The status, after checking the deadline against the clock: a claim
    /// whose deadline has passed is lost now, whatever timer has not fired
    /// yet. The deadline is the session's, so the session is over too: its
    /// socket is shut down here.
    pub(crate) fn status(&self) -> Status {
        if Instant::now() >= self.deadline() {
            let live = !self.status.borrow().is_final();
            if live {
                self.lose(LossReason::HeartbeatTimeout { lease: self.lease });
                self.close_socket();
            }
        }
        self.status.borrow().clone()
    }

    /// The status without looking at the clock.
    pub(crate) fn status_now(&self) -> Status {
        self.status.borrow().clone()
    }

    /// The reason the claim ended, if it has.
    pub(crate) fn loss(&self) -> Option<LossReason> {
        match self.status() {
            Status::Lost(reason) => Some(reason),
            _ => None,
        }
    }

    /// The current deadline.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline.get()
    }

    fn set_deadline(&self, deadline: Instant) {
        self.deadline.set(deadline);
    }

    /// A token cancelled when the claim is lost.
    pub(crate) fn lost_token(&self) -> &CancellationToken {
        &self.lost
    }

    /// Waits until `ready` maps the status to a value, or the claim is lost.
    ///
    /// # Errors
    /// The reason the claim ended first.
    pub(crate) async fn wait_until<T>(
        &self,
        ready: impl Fn(&Status) -> Option<T>,
    ) -> Result<T, LossReason> {
        let mut rx = self.status.subscribe();
        loop {
            let status = self.status();
            if let Some(value) = ready(&status) {
                return Ok(value);
            }
            if let Status::Lost(reason) = status {
                return Err(reason);
            }
            tokio::select! {
                // The sender lives in `self`, so `changed` cannot fail here.
                _ = rx.changed() => {}
                () = sleep_until(self.deadline()) => {}
            }
        }
    }

    /// The session's lease.
    pub(crate) fn lease(&self) -> Duration {
        self.lease
    }
}

/// How the task ended.
#[derive(Debug)]
pub(crate) enum TaskEnd {
    /// A release was asked for and the stream was shut down cleanly (or not).
    Released(std::io::Result<()>),
    /// The claim was lost; the reason is in the shared status.
    Lost,
}

/// A running claim: the shared state plus the task, which ends when this
/// is dropped. Dropping also shuts the socket down on the spot.
#[derive(Debug)]
pub(crate) struct Session {
    shared: Arc<Shared>,
    release: CancellationToken,
    task: AbortOnDropHandle<TaskEnd>,
}

impl Session {
    /// Starts the task for `conn`: it sends the ACQUIRE at once. A release
    /// waits at most `io_timeout` for the server's EOF.
    pub(crate) fn start<S: Transport>(
        conn: Connection<S>,
        name: LockName,
        lease: Lease,
        io_timeout: Duration,
    ) -> Self {
        let now = Instant::now();
        let shared = Arc::new(Shared::new(
            Arc::new(Deadline::new(now + lease.as_duration() * 4 / 5)),
            conn.shutdown.map(Arc::new),
            true,
            lease.as_duration(),
        ));
        let release = CancellationToken::new();
        let span = debug_span!("monolock_session", lock = %name, lease_ms = lease.as_millis());
        let driver = Driver {
            stream: conn.stream,
            shared: shared.clone(),
            release: release.clone(),
            io_timeout,
            buf: Vec::with_capacity(READ_CHUNK),
        };
        let task = tokio::spawn(
            driver
                .run(ClientFrame::acquire(lease, name))
                .instrument(span),
        );
        Self {
            shared,
            release,
            task: AbortOnDropHandle::new(task),
        }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Asks the task to shut the write side down and waits until the
    /// server's EOF confirms the release (the server releases in its table
    /// before it closes), at most the I/O timeout.
    ///
    /// # Errors
    /// The reason the claim had ended before the release, the error of the
    /// shutdown itself, or the timeout (the connection is closed then: the
    /// lock is gone for the caller, unconfirmed).
    pub(crate) async fn release(&mut self) -> Result<(), LossReason> {
        if let Some(reason) = self.shared.loss() {
            return Err(reason);
        }
        self.release.cancel();
        let end = (&mut self.task).await;
        match end {
            Ok(TaskEnd::Released(Ok(()))) => Ok(()),
            Ok(TaskEnd::Released(Err(err))) => Err(LossReason::io(err)),
            Ok(TaskEnd::Lost) | Err(_) => {
                Err(self.shared.loss().unwrap_or(LossReason::ConnectionClosed))
            }
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Given up on purpose: not a loss (the task's own `Drop` reports
        // one only for a claim still live).
        self.shared.advance(Status::Released);
        // Close right here, not when the aborted task is next polled: the
        // server promotes the next waiter as soon as it sees the FIN.
        self.shared.close_socket();
    }
}

/// The task's state.
struct Driver<S> {
    stream: S,
    shared: Arc<Shared>,
    release: CancellationToken,
    io_timeout: Duration,
    buf: Vec<u8>,
}

impl<S> Drop for Driver<S> {
    /// Runs before the stream closes (fields drop after this body), also
    /// when the task never finished (its runtime shut down, say): the claim
    /// is lost before the server can see the close and hand the lock on.
    fn drop(&mut self) {
        self.shared.lose(LossReason::ConnectionClosed);
    }
}

impl<S: Transport> Driver<S> {
    async fn run(mut self, acquire: ClientFrame) -> TaskEnd {
        let lost = self.shared.lost.clone();
        let result = tokio::select! {
            biased;
            () = lost.cancelled() => return TaskEnd::Lost,
            result = self.drive(acquire) => result,
        };
        match result {
            Ok(end) => end,
            Err(reason) => {
                self.shared.lose(reason);
                TaskEnd::Lost
            }
        }
    }

    async fn drive(&mut self, acquire: ClientFrame) -> Result<TaskEnd, LossReason> {
        let sent = Instant::now();
        let mut exchange = Exchange::new(self.shared.lease, sent);
        self.send(&acquire, exchange.deadline()).await?;
        debug!(frame = %acquire, "sent");
        let mut chunk = [0u8; READ_CHUNK];
        loop {
            let deadline = exchange.deadline();
            // The pessimist's check: past the deadline nothing read later
            // can bring the claim back.
            if Instant::now() >= deadline {
                return Err(self.timeout());
            }
            let next_heartbeat = exchange.next_heartbeat();
            tokio::select! {
                biased;
                () = self.release.cancelled() => {
                    self.shared.advance(Status::Released);
                    let bound = Instant::now() + self.io_timeout;
                    let result = timeout_at(bound, self.half_close_until_eof(&mut chunk))
                        .await
                        .unwrap_or_else(|_| {
                            Err(std::io::Error::new(
                                std::io::ErrorKind::TimedOut,
                                format!(
                                    "the server did not confirm the release within {:?}; \
                                     the connection was closed",
                                    self.io_timeout
                                ),
                            ))
                        });
                    if result.is_err() {
                        self.shared.close_socket();
                    }
                    return Ok(TaskEnd::Released(result));
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
                    self.take_frames(&mut exchange)?;
                }
                () = sleep_until(deadline) => return Err(self.timeout()),
                () = sleep_until(next_heartbeat.unwrap_or(deadline)), if next_heartbeat.is_some() => {
                    let sent = Instant::now();
                    self.send(&ClientFrame::Heartbeat, deadline).await?;
                    exchange.heartbeat_sent(sent);
                }
            }
        }
    }

    /// Version 1 has no release frame: the client shuts its write side
    /// down, and the server, seeing the EOF, releases the claim in its
    /// table and then closes. Reading until that EOF (frames still in
    /// flight, such as a heartbeat's reply, are discarded) confirms the
    /// release. A reset after the shutdown is the server closing too.
    async fn half_close_until_eof(&mut self, chunk: &mut [u8]) -> std::io::Result<()> {
        self.stream.shutdown().await?;
        loop {
            match self.stream.read(chunk).await {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(err)
                    if matches!(
                        err.kind(),
                        std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
                    ) =>
                {
                    return Ok(());
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// Decodes and applies every whole frame in the buffer.
    fn take_frames(&mut self, exchange: &mut Exchange) -> Result<(), LossReason> {
        let now = Instant::now();
        let mut used = 0;
        while let Some((frame, len)) = decode_response(&self.buf[used..])
            .map_err(|err| LossReason::ProtocolViolation(ProtocolViolation::from_decode(err)))?
        {
            used += len;
            debug!(?frame, "received");
            let event = exchange
                .on_frame(frame, now)
                .map_err(LossReason::ProtocolViolation)?;
            self.shared.set_deadline(exchange.deadline());
            match event {
                Event::Queued => self.shared.advance(Status::Waiting),
                Event::Granted(token) => self.shared.advance(Status::Held(token)),
                Event::Confirmed => {}
                Event::Closed { code, reason } => {
                    return Err(LossReason::Server { code, reason });
                }
            }
        }
        self.buf.drain(..used);
        Ok(())
    }

    /// Writes one frame, giving up at the deadline.
    async fn send(&mut self, frame: &ClientFrame, deadline: Instant) -> Result<(), LossReason> {
        let bytes = frame.to_bytes();
        let write = async {
            self.stream.write_all(&bytes).await?;
            self.stream.flush().await
        };
        match timeout_at(deadline, write).await {
            Ok(result) => result.map_err(LossReason::io),
            Err(_) => Err(self.timeout()),
        }
    }

    fn timeout(&self) -> LossReason {
        LossReason::HeartbeatTimeout {
            lease: self.shared.lease,
        }
    }
}
