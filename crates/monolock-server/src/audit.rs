//! The audit log: one JSON line per ownership event, to a file or stdout.
//!
//! ```json
//! {"time":"2026-08-08T12:00:00.123Z","event":"granted","lock":"nightly/import","identity":"spiffe://prod/worker/1","remote_addr":"10.0.0.5:52114","token":1872956384870401,"wait_ms":0}
//! ```
//!
//! Ownership events reach the [`Observer`] while the lock table is locked,
//! in the order they took effect. [`AuditLog::observe`] only copies the event
//! into an unbounded channel (never any I/O there, or every grant would wait
//! on the disk); one writer thread drains the channel in order and writes.
//! So for one lock a `released` line always comes before the next `granted`
//! line, however many sessions churn it.
//!
//! A write that fails is logged and counted ([`AuditLog::write_errors`]); the
//! server goes on. [`AuditLog::reopen`] (on SIGHUP, for logrotate) opens the
//! path again; if that fails the old handle stays in use.

use std::{
    fs::{File, OpenOptions},
    io::{self, Write},
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
        mpsc,
    },
    thread::JoinHandle,
    time::{Duration, SystemTime},
};

use monolock_proto::LockName;
use serde::Serialize;
use tokio::sync::oneshot;
use tracing::{error, info};

use crate::{Event, Observer, ReleaseReason, SessionInfo};

/// Where audit lines go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuditTarget {
    /// Standard output (diagnostics stay on stderr).
    Stdout,
    /// A file, opened for appending (created if missing).
    File(PathBuf),
}

impl AuditTarget {
    /// `-` is stdout; anything else is a file path.
    pub fn parse(text: &str) -> Self {
        if text == "-" {
            Self::Stdout
        } else {
            Self::File(PathBuf::from(text))
        }
    }
}

impl std::fmt::Display for AuditTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Stdout => f.write_str("-"),
            Self::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// The audit log could not be opened, reopened or stopped.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The file could not be opened for appending.
    #[error("cannot open audit log {}: {source}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The writer thread could not be started.
    #[error("cannot start the audit writer: {0}")]
    Thread(#[source] io::Error),
    /// The writer has already stopped.
    #[error("the audit writer has stopped")]
    Stopped,
}

/// An ownership event, copied out of the table's critical section (also
/// what the live event stream sends, as the same JSON).
pub(crate) struct Record {
    time: SystemTime,
    lock: LockName,
    identity: Arc<str>,
    remote_addr: SocketAddr,
    kind: Kind,
}

pub(crate) enum Kind {
    Granted {
        token: u64,
        wait: Duration,
    },
    Released {
        token: u64,
        held: Duration,
        reason: ReleaseReason,
    },
    Denied,
    ForceRelease {
        token: u64,
    },
    KickWaiter,
    /// A waiter joined a queue (live stream only).
    Queued,
    /// A waiter left a queue without being granted (live stream only).
    Dequeued,
}

/// The JSON shape of one line; fields in this order.
#[derive(Serialize)]
struct Line<'a> {
    time: String,
    event: &'static str,
    lock: &'a str,
    identity: &'a str,
    remote_addr: SocketAddr,
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wait_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    held_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
}

impl Record {
    /// The record of `event`, if it is one the audit log or the live stream
    /// reports (`queued` and `dequeued` only the stream).
    pub(crate) fn of_event(event: &Event<'_>) -> Option<Self> {
        let (session, kind) = match *event {
            Event::Granted {
                session,
                token,
                wait,
            } => (session, Kind::Granted { token, wait }),
            Event::Released {
                session,
                token,
                held,
                reason,
            } => (
                session,
                Kind::Released {
                    token,
                    held,
                    reason,
                },
            ),
            Event::Denied(session) => (session, Kind::Denied),
            Event::ForceRelease { session, token } => (session, Kind::ForceRelease { token }),
            Event::KickWaiter(session) => (session, Kind::KickWaiter),
            Event::WaiterJoined(session) => (session, Kind::Queued),
            Event::WaiterLeft(session) => (session, Kind::Dequeued),
            _ => return None,
        };
        Some(Self::new(session, kind))
    }

    /// The audit log's `event` name of this record.
    pub(crate) fn event_name(&self) -> &'static str {
        match self.kind {
            Kind::Granted { .. } => "granted",
            Kind::Released { .. } => "released",
            Kind::Denied => "denied",
            Kind::ForceRelease { .. } => "force_release",
            Kind::KickWaiter => "kick_waiter",
            Kind::Queued => "queued",
            Kind::Dequeued => "dequeued",
        }
    }

    fn new(session: &SessionInfo, kind: Kind) -> Self {
        Self {
            time: SystemTime::now(),
            lock: session.lock.clone(),
            identity: Arc::clone(&session.identity),
            remote_addr: session.remote_addr,
            kind,
        }
    }

    /// The JSON object and a newline.
    pub(crate) fn write_json(&self, out: &mut Vec<u8>) {
        let (token, wait_ms, held_ms, reason) = match self.kind {
            Kind::Granted { token, wait } => (Some(token), Some(millis(wait)), None, None),
            Kind::Released {
                token,
                held,
                reason,
            } => (Some(token), None, Some(millis(held)), Some(reason.as_str())),
            Kind::ForceRelease { token } => (Some(token), None, None, None),
            Kind::Denied | Kind::KickWaiter | Kind::Queued | Kind::Dequeued => {
                (None, None, None, None)
            }
        };
        let line = Line {
            time: rfc3339(self.time),
            event: self.event_name(),
            lock: self.lock.as_str(),
            identity: &self.identity,
            remote_addr: self.remote_addr,
            token,
            wait_ms,
            held_ms,
            reason,
        };
        // Serialising plain strings and integers into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, &line);
        out.push(b'\n');
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A wall-clock time as RFC 3339 in UTC, to the millisecond
/// (`2026-08-08T12:00:00.123Z`): the format of the audit log and the admin API.
pub fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

enum Msg {
    Record(Record),
    Flush(oneshot::Sender<()>),
    Reopen(oneshot::Sender<Result<(), AuditError>>),
    Close(oneshot::Sender<()>),
}

/// The audit log: an [`Observer`] that writes ownership events as JSON lines.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use monolock_server::{AuditLog, AuditTarget, ServerConfig};
///
/// let audit = Arc::new(AuditLog::open(AuditTarget::parse("/var/log/monolock/audit.jsonl"))?);
/// let config = ServerConfig::default().with_observer(audit.clone());
/// // ... run the server; on SIGHUP: audit.reopen().await ...
/// audit.close().await; // every event so far is written
/// # let _ = config;
/// # Ok(())
/// # }
/// ```
pub struct AuditLog {
    target: AuditTarget,
    tx: mpsc::Sender<Msg>,
    write_errors: Arc<AtomicU64>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl AuditLog {
    /// Opens the target (a file is created if missing and appended to) and
    /// starts the writer thread.
    ///
    /// # Errors
    /// [`AuditError::Open`] if the file cannot be opened.
    pub fn open(target: AuditTarget) -> Result<Self, AuditError> {
        let sink = match &target {
            AuditTarget::Stdout => Sink::Stdout,
            AuditTarget::File(path) => Sink::File(open_append(path)?),
        };
        let (tx, rx) = mpsc::channel();
        let write_errors = Arc::new(AtomicU64::new(0));
        let writer = Writer {
            target: target.clone(),
            sink,
            rx,
            write_errors: Arc::clone(&write_errors),
            failing: false,
        };
        let thread = std::thread::Builder::new()
            .name("monolock-audit".to_owned())
            .spawn(move || writer.run())
            .map_err(AuditError::Thread)?;
        Ok(Self {
            target,
            tx,
            write_errors,
            writer: Mutex::new(Some(thread)),
        })
    }

    /// Where the lines go.
    pub fn target(&self) -> &AuditTarget {
        &self.target
    }

    /// Lines lost to failed writes since startup.
    pub fn write_errors(&self) -> u64 {
        self.write_errors.load(Ordering::Relaxed)
    }

    /// A shared view of [`AuditLog::write_errors`], for metrics.
    pub fn write_errors_counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.write_errors)
    }

    /// Resolves once every event observed before the call is written.
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Msg::Flush(done)).is_ok() {
            let _ = wait.await;
        }
    }

    /// Opens the file again (after logrotate moved it): events observed
    /// before the call go to the old file, later ones to the new. A no-op
    /// for stdout.
    ///
    /// # Errors
    /// [`AuditError::Open`] if the file cannot be opened; the old handle
    /// stays in use. [`AuditError::Stopped`] after [`AuditLog::close`].
    pub async fn reopen(&self) -> Result<(), AuditError> {
        let (done, wait) = oneshot::channel();
        self.tx
            .send(Msg::Reopen(done))
            .map_err(|_| AuditError::Stopped)?;
        wait.await.map_err(|_| AuditError::Stopped)?
    }

    /// Writes everything observed so far and stops the writer; later events
    /// are dropped. Idempotent.
    pub async fn close(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Msg::Close(done)).is_ok() {
            let _ = wait.await;
        }
        let thread = self
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread {
            // The thread has answered Close: it is returning.
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

impl Observer for AuditLog {
    /// Copies ownership events into the writer's channel; no I/O here.
    fn observe(&self, event: &Event<'_>) {
        // Queue movements are for the live stream only.
        if matches!(event, Event::WaiterJoined(_) | Event::WaiterLeft(_)) {
            return;
        }
        if let Some(record) = Record::of_event(event) {
            // Fails only after close(): nothing to do then.
            let _ = self.tx.send(Msg::Record(record));
        }
    }
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

fn open_append(path: &Path) -> Result<File, AuditError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|source| AuditError::Open {
            path: path.to_owned(),
            source,
        })
}

enum Sink {
    Stdout,
    File(File),
}

impl Sink {
    fn write_batch(&mut self, batch: &[u8]) -> io::Result<()> {
        match self {
            Self::Stdout => {
                let mut out = io::stdout().lock();
                out.write_all(batch)?;
                out.flush()
            }
            Self::File(file) => file.write_all(batch),
        }
    }
}

/// Flush a batch once it reaches this size even if more events are queued.
const MAX_BATCH: usize = 64 * 1024;

/// The writer thread's state.
struct Writer {
    target: AuditTarget,
    sink: Sink,
    rx: mpsc::Receiver<Msg>,
    write_errors: Arc<AtomicU64>,
    /// In a run of failed writes (log the first and the recovery only).
    failing: bool,
}

impl Writer {
    /// Drains the channel in order: lines queued together are written with
    /// one call; control messages act after everything queued before them.
    fn run(mut self) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        let mut lines = 0u64;
        while let Ok(first) = self.rx.recv() {
            let mut next = Some(first);
            while let Some(msg) = next.take() {
                match msg {
                    Msg::Record(record) => {
                        record.write_json(&mut batch);
                        lines += 1;
                        if batch.len() >= MAX_BATCH {
                            self.write(&mut batch, &mut lines);
                        }
                    }
                    Msg::Flush(done) => {
                        self.write(&mut batch, &mut lines);
                        let _ = done.send(());
                    }
                    Msg::Reopen(done) => {
                        self.write(&mut batch, &mut lines);
                        let _ = done.send(self.reopen());
                    }
                    Msg::Close(done) => {
                        self.write(&mut batch, &mut lines);
                        let _ = done.send(());
                        return;
                    }
                }
                next = self.rx.try_recv().ok();
            }
            self.write(&mut batch, &mut lines);
        }
        self.write(&mut batch, &mut lines);
    }

    fn write(&mut self, batch: &mut Vec<u8>, lines: &mut u64) {
        if batch.is_empty() {
            return;
        }
        match self.sink.write_batch(batch) {
            Ok(()) => {
                if self.failing {
                    self.failing = false;
                    info!(target_file = %self.target, "audit log writes succeed again");
                }
            }
            Err(err) => {
                self.write_errors.fetch_add(*lines, Ordering::Relaxed);
                if !self.failing {
                    self.failing = true;
                    error!(target_file = %self.target, error = %err, lost_lines = *lines, "audit log write failed; events are being lost");
                }
            }
        }
        batch.clear();
        *lines = 0;
    }

    fn reopen(&mut self) -> Result<(), AuditError> {
        let AuditTarget::File(path) = &self.target else {
            return Ok(());
        };
        let file = open_append(path)?;
        self.sink = Sink::File(file);
        Ok(())
    }
}
