//! The audit log: one JSON line per ownership event, to a file or stdout.
//!
//! ```json
//! {"time":"2026-08-08T12:00:00.123Z","event":"granted","lock":"nightly/import","identity":"spiffe://prod/worker/1","remote_addr":"10.0.0.5:52114","token":1872956384870401,"wait_ms":0,"lease_ms":30000}
//! ```
//!
//! A claim of a protocol version 2 session also names the session (the
//! server's id, as in OPENED) and the claim (the client's id), after the
//! address; a version 1 line has none of the three fields:
//!
//! ```json
//! {"time":"2026-08-08T12:00:01.456Z","event":"granted","lock":"shard-3","identity":"","remote_addr":"10.0.0.7:40112","protocol":2,"session":17,"claim":3,"token":1872956384870402,"wait_ms":0,"lease_ms":10000}
//! ```
//!
//! Ownership events reach the [`Observer`] while the lock table is locked,
//! in the order they took effect. [`AuditLog::observe`] only copies the event
//! into a bounded queue (never any I/O there, or every grant would wait on
//! the disk); one writer thread drains the queue in order and writes. When
//! the queue is full, [`AuditOverflow`] decides: drop and count (marked in
//! the log by a `gap` line) or wait a bounded time. Closing and reopening
//! are bounded in time too, so a stalled sink never holds up shutdown.
//! So for one lock a `released` line always comes before the next `granted`
//! line, however many sessions churn it.
//!
//! A write that fails is logged and counted ([`AuditLog::write_errors`]); the
//! server goes on. [`AuditLog::reopen`] (on SIGHUP, for logrotate) opens the
//! path again; if that fails the old handle stays in use.

use std::{
    collections::VecDeque,
    fs::{File, OpenOptions},
    io::{self, Write},
    path::{Path, PathBuf},
    sync::{
        Arc, Condvar, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, SystemTime},
};

use serde::Serialize;
use tokio::sync::oneshot;
use tracing::{error, info};

use crate::{
    Event, Observer,
    ops::record::{Record, rfc3339},
};

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
    /// The writer did not get to the request in time: the sink is stalled.
    #[error("the audit log sink is stalled ({queued} lines queued; waited {waited:?})")]
    Stalled {
        /// How long the request waited.
        waited: Duration,
        /// Lines queued when it gave up.
        queued: usize,
    },
}

/// The line that stands for lines dropped while the queue was full.
#[derive(Serialize)]
struct GapLine {
    time: String,
    event: &'static str,
    lost: u64,
    since: String,
}

impl Gap {
    fn write_json(&self, out: &mut Vec<u8>) {
        let line = GapLine {
            time: rfc3339(SystemTime::now()),
            event: "gap",
            lost: self.lost,
            since: rfc3339(self.since),
        };
        // As above: cannot fail.
        let _ = serde_json::to_writer(&mut *out, &line);
        out.push(b'\n');
    }
}

enum Msg {
    Record(Record),
    Flush(oneshot::Sender<()>),
    Reopen(oneshot::Sender<Result<(), AuditError>>),
    Close(oneshot::Sender<()>),
}

/// What the audit log does with an event when its queue is full: the sink
/// (a disk, a pipe into a log shipper) is slower than the grants, or stalled.
///
/// An audit log is a record of ownership, so no line is ever lost silently:
/// whatever is dropped is counted (`monolock_audit_dropped_lines_total`),
/// logged loudly when it starts, and marked in the log itself by one `gap`
/// line with the count (`{"time":…,"event":"gap","lost":N,"since":…}`),
/// written in the place of the missing lines as soon as the sink takes
/// lines again. Grants never wait on the sink without bound either.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AuditOverflow {
    /// Drop the event and count it; grants never wait (the default: the
    /// lock service stays available while a log shipper is down).
    #[default]
    Drop,
    /// Wait for room, at most 250 ms per event, and drop only then. While it waits, every grant, release and ACQUIRE waits with it
    /// (the lock table is held); heartbeats do not. For a sink that is slow
    /// rather than gone, when losing lines costs more than slower grants.
    Block,
}

impl AuditOverflow {
    /// `drop` or `block`, as the flag spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Drop => "drop",
            Self::Block => "block",
        }
    }
}

/// Default for [`AuditOptions::capacity`]: lines queued for the writer
/// before [`AuditOverflow`] applies (about 10 MB of queued events).
pub const AUDIT_QUEUE_CAPACITY: usize = 65_536;

/// The longest one event waits for room under [`AuditOverflow::Block`].
pub const AUDIT_BLOCK_MAX: Duration = Duration::from_millis(250);

/// Default for [`AuditOptions::stop_timeout`]: how long
/// [`AuditLog::close`] and [`AuditLog::reopen`] wait for the writer.
pub const AUDIT_STOP_TIMEOUT: Duration = Duration::from_secs(2);

/// How the audit log queues and what it does when the sink falls behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuditOptions {
    /// Lines queued for the writer at most; the bound on the memory a
    /// stalled sink can take.
    pub capacity: usize,
    /// What happens to an event that finds the queue full.
    pub overflow: AuditOverflow,
    /// How long closing (at shutdown) and reopening (on SIGHUP) wait for
    /// the writer before giving up on it.
    pub stop_timeout: Duration,
}

impl Default for AuditOptions {
    fn default() -> Self {
        Self {
            capacity: AUDIT_QUEUE_CAPACITY,
            overflow: AuditOverflow::Drop,
            stop_timeout: AUDIT_STOP_TIMEOUT,
        }
    }
}

/// The queue between [`Observer::observe`] (under the table's lock) and the
/// writer thread: a mutex held only to push or to take everything, and
/// condition variables signalled only when someone waits on them (a futex
/// wake per event would cost every grant a system call).
struct Queue {
    state: Mutex<QueueState>,
    /// The writer waits here for work.
    work: Condvar,
    /// Events waiting for room ([`AuditOverflow::Block`]) wait here.
    room: Condvar,
    options: AuditOptions,
    /// [`AUDIT_BLOCK_MAX`] (longer in tests, to show what wakes a wait).
    block_max: Duration,
    dropped_total: AtomicU64,
}

#[derive(Default)]
struct QueueState {
    msgs: VecDeque<Msg>,
    /// `Msg::Record`s in `msgs`.
    records: usize,
    /// Lines dropped since the writer last took the queue, and when the
    /// first of them was.
    gap: Option<Gap>,
    /// Close was asked for: later events are dropped (not counted).
    closed: bool,
    writer_waiting: bool,
    /// Events waiting for room.
    blocked: usize,
}

#[derive(Clone, Copy)]
struct Gap {
    lost: u64,
    since: SystemTime,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, QueueState> {
        // Nothing panics while the guard is held.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wake_writer(&self, state: &mut QueueState) {
        if state.writer_waiting {
            state.writer_waiting = false;
            self.work.notify_one();
        }
    }

    /// Queues a control message; these are never refused (they are few,
    /// and the writer must see them in order).
    fn control(&self, msg: Msg) -> Result<(), AuditError> {
        let mut state = self.lock();
        if state.closed {
            return Err(AuditError::Stopped);
        }
        if matches!(msg, Msg::Close(_)) {
            state.closed = true;
            if state.blocked > 0 {
                self.room.notify_all();
            }
        }
        state.msgs.push_back(msg);
        self.wake_writer(&mut state);
        Ok(())
    }

    /// Queues an event, or applies the overflow policy.
    fn record(&self, record: Record) {
        let mut state = self.lock();
        if state.records >= self.options.capacity
            && self.options.overflow == AuditOverflow::Block
            && !state.closed
        {
            state.blocked += 1;
            let (guard, _) = self
                .room
                .wait_timeout_while(state, self.block_max, |state| {
                    state.records >= self.options.capacity && !state.closed
                })
                .unwrap_or_else(PoisonError::into_inner);
            state = guard;
            state.blocked -= 1;
        }
        if state.closed {
            return;
        }
        if state.records >= self.options.capacity {
            self.dropped_total.fetch_add(1, Ordering::Relaxed);
            match &mut state.gap {
                Some(gap) => gap.lost += 1,
                None => {
                    state.gap = Some(Gap {
                        lost: 1,
                        since: record.time(),
                    });
                    error!(
                        capacity = self.options.capacity,
                        policy = self.options.overflow.as_str(),
                        "audit log queue full: the sink is not taking lines; dropping and counting them, a gap line will mark them once it flows"
                    );
                }
            }
            return;
        }
        state.msgs.push_back(Msg::Record(record));
        state.records += 1;
        self.wake_writer(&mut state);
    }

    /// Waits for work and takes all of it, with the gap to mark after it
    /// (lines are dropped only while the queue is full, so every dropped
    /// line came after every message taken with it).
    fn take(&self) -> (VecDeque<Msg>, Option<Gap>) {
        let mut state = self.lock();
        while state.msgs.is_empty() && state.gap.is_none() {
            state.writer_waiting = true;
            state = self
                .work
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        state.writer_waiting = false;
        state.records = 0;
        if state.blocked > 0 {
            self.room.notify_all();
        }
        (std::mem::take(&mut state.msgs), state.gap.take())
    }

    fn queued(&self) -> usize {
        self.lock().records
    }
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
    queue: Arc<Queue>,
    write_errors: Arc<AtomicU64>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl AuditLog {
    /// Opens the target (a file is created if missing and appended to) and
    /// starts the writer thread, with the default [`AuditOptions`].
    ///
    /// # Errors
    /// [`AuditError::Open`] if the file cannot be opened.
    pub fn open(target: AuditTarget) -> Result<Self, AuditError> {
        Self::open_with(target, AuditOptions::default())
    }

    /// As [`AuditLog::open`], with these options.
    ///
    /// # Errors
    /// [`AuditError::Open`] if the file cannot be opened.
    pub fn open_with(target: AuditTarget, options: AuditOptions) -> Result<Self, AuditError> {
        let sink = match &target {
            AuditTarget::Stdout => Sink::Stdout,
            AuditTarget::File(path) => Sink::File(open_append(path)?),
        };
        let queue = Arc::new(Queue {
            state: Mutex::new(QueueState::default()),
            work: Condvar::new(),
            room: Condvar::new(),
            options: AuditOptions {
                capacity: options.capacity.max(1),
                ..options
            },
            block_max: AUDIT_BLOCK_MAX,
            dropped_total: AtomicU64::new(0),
        });
        let write_errors = Arc::new(AtomicU64::new(0));
        let writer = Writer {
            target: target.clone(),
            sink,
            queue: Arc::clone(&queue),
            write_errors: Arc::clone(&write_errors),
            failing: false,
        };
        let thread = std::thread::Builder::new()
            .name("monolock-audit".to_owned())
            .spawn(move || writer.run())
            .map_err(AuditError::Thread)?;
        Ok(Self {
            target,
            queue,
            write_errors,
            writer: Mutex::new(Some(thread)),
        })
    }

    /// Where the lines go.
    pub fn target(&self) -> &AuditTarget {
        &self.target
    }

    /// The options it runs with.
    pub fn options(&self) -> AuditOptions {
        self.queue.options
    }

    /// Lines lost to failed writes since startup.
    pub fn write_errors(&self) -> u64 {
        self.write_errors.load(Ordering::Relaxed)
    }

    /// A shared view of [`AuditLog::write_errors`], for metrics.
    pub fn write_errors_counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.write_errors)
    }

    /// Lines dropped because the queue was full, since startup (each run of
    /// them is also marked in the log by a `gap` line).
    pub fn dropped_lines(&self) -> u64 {
        self.queue.dropped_total.load(Ordering::Relaxed)
    }

    /// True once [`AuditLog::close`] has been called.
    pub fn is_closed(&self) -> bool {
        self.queue.lock().closed
    }

    /// Lines queued for the writer now.
    pub fn queued_lines(&self) -> usize {
        self.queue.queued()
    }

    /// Resolves once every event observed before the call is written (or
    /// at once after [`AuditLog::close`]). Not bounded in time: a stalled
    /// sink stalls it.
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.queue.control(Msg::Flush(done)).is_ok() {
            let _ = wait.await;
        }
    }

    /// Opens the file again (after logrotate moved it): events observed
    /// before the call go to the old file, later ones to the new. A no-op
    /// for stdout. Waits for the writer at most
    /// [`AuditOptions::stop_timeout`].
    ///
    /// # Errors
    /// [`AuditError::Open`] if the file cannot be opened; the old handle
    /// stays in use. [`AuditError::Stalled`] if the writer did not get to it
    /// in time (it still reopens when it does). [`AuditError::Stopped`]
    /// after [`AuditLog::close`].
    pub async fn reopen(&self) -> Result<(), AuditError> {
        let (done, wait) = oneshot::channel();
        self.queue.control(Msg::Reopen(done))?;
        let timeout = self.queue.options.stop_timeout;
        match tokio::time::timeout(timeout, wait).await {
            Ok(answer) => answer.map_err(|_| AuditError::Stopped)?,
            Err(_) => Err(AuditError::Stalled {
                waited: timeout,
                queued: self.queued_lines(),
            }),
        }
    }

    /// Writes everything observed so far and stops the writer; later events
    /// are dropped. Waits for the writer at most
    /// [`AuditOptions::stop_timeout`]: past that, what is still queued is
    /// given up (logged with its count) and the writer is left to the
    /// process's exit. Idempotent. True when everything was written.
    pub async fn close(&self) -> bool {
        let (done, wait) = oneshot::channel();
        if self.queue.control(Msg::Close(done)).is_err() {
            return true;
        }
        let timeout = self.queue.options.stop_timeout;
        if tokio::time::timeout(timeout, wait).await.is_err() {
            error!(
                target_file = %self.target,
                waited_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                lost_lines = self.queued_lines(),
                "audit log did not drain before shutdown: the sink is stalled; the queued lines are lost"
            );
            return false;
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
        true
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
            self.queue.record(record);
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
    queue: Arc<Queue>,
    write_errors: Arc<AtomicU64>,
    /// In a run of failed writes (log the first and the recovery only).
    failing: bool,
}

impl Writer {
    /// Takes the queue whole and writes it in order: lines taken together
    /// are written with one call; control messages act after everything
    /// queued before them; a gap line follows what was taken with it.
    fn run(mut self) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        let mut lines = 0u64;
        loop {
            let (msgs, gap) = self.queue.take();
            let mut close = None;
            for msg in msgs {
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
                    // Nothing is queued after Close.
                    Msg::Close(done) => close = Some(done),
                }
            }
            if let Some(gap) = gap {
                gap.write_json(&mut batch);
                lines += 1;
            }
            self.write(&mut batch, &mut lines);
            if let Some(gap) = gap {
                info!(target_file = %self.target, lost_lines = gap.lost, "audit log flowing again; a gap line marks the lines dropped");
            }
            if let Some(done) = close {
                let _ = done.send(());
                return;
            }
        }
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

#[cfg(test)]
mod tests {
    //! The queue's overflow rules, without a writer thread: nothing takes
    //! from the queue unless the test does, as with a stalled sink.

    use std::{net::SocketAddr, time::Instant};

    use monolock_proto::{Lease, LockName};

    use super::*;
    use crate::SessionInfo;

    fn queue(capacity: usize, overflow: AuditOverflow) -> Arc<Queue> {
        queue_blocking_for(capacity, overflow, AUDIT_BLOCK_MAX)
    }

    fn queue_blocking_for(
        capacity: usize,
        overflow: AuditOverflow,
        block_max: Duration,
    ) -> Arc<Queue> {
        Arc::new(Queue {
            state: Mutex::new(QueueState::default()),
            work: Condvar::new(),
            room: Condvar::new(),
            options: AuditOptions {
                capacity,
                overflow,
                stop_timeout: AUDIT_STOP_TIMEOUT,
            },
            block_max,
            dropped_total: AtomicU64::new(0),
        })
    }

    fn record() -> Record {
        let info = SessionInfo {
            lock: LockName::new("audit").expect("valid name"),
            lease: Lease::from_millis(1_000).expect("valid lease"),
            remote_addr: SocketAddr::from(([127, 0, 0, 1], 1)),
            identity: Arc::from(""),
            queued_at: SystemTime::now(),
            claim: None,
        };
        Record::of_event(&Event::Denied(&info)).expect("an audited event")
    }

    fn records(msgs: &VecDeque<Msg>) -> usize {
        msgs.iter()
            .filter(|msg| matches!(msg, Msg::Record(_)))
            .count()
    }

    #[test]
    fn a_full_queue_drops_counts_and_marks_the_gap_after_what_it_held() {
        let queue = queue(2, AuditOverflow::Drop);
        for _ in 0..5 {
            queue.record(record());
        }
        assert_eq!(queue.queued(), 2);
        assert_eq!(queue.dropped_total.load(Ordering::Relaxed), 3);
        let (msgs, gap) = queue.take();
        assert_eq!(records(&msgs), 2);
        assert_eq!(gap.map(|gap| gap.lost), Some(3));
        // Room again: nothing more is dropped, and the next gap starts anew.
        queue.record(record());
        let (msgs, gap) = queue.take();
        assert_eq!(records(&msgs), 1);
        assert!(gap.is_none());
        let mut line = Vec::new();
        Gap {
            lost: 3,
            since: SystemTime::now(),
        }
        .write_json(&mut line);
        let value: serde_json::Value = serde_json::from_slice(&line).expect("JSON");
        assert_eq!(value["event"], "gap");
        assert_eq!(value["lost"], 3);
    }

    /// Under `block`, an event waits for room a bounded time, then drops
    /// (counted); room made meanwhile lets it in.
    #[test]
    fn block_waits_a_bounded_time_for_room() {
        let queue = queue(1, AuditOverflow::Block);
        queue.record(record());
        let started = Instant::now();
        queue.record(record());
        assert!(started.elapsed() >= AUDIT_BLOCK_MAX);
        assert_eq!(queue.dropped_total.load(Ordering::Relaxed), 1);
        assert_eq!(queue.queued(), 1);

        // A writer that takes while an event waits lets it in (with a wait
        // bound of an hour, the take is what ends the wait).
        let queue = queue_blocking_for(1, AuditOverflow::Block, Duration::from_secs(3_600));
        let waiting = full_with_a_blocked_writer(&queue);
        let (msgs, _) = queue.take();
        assert_eq!(records(&msgs), 1);
        waiting.join().expect("recorded");
        assert_eq!(queue.queued(), 1);
        assert_eq!(queue.dropped_total.load(Ordering::Relaxed), 0);
    }

    /// Fills `queue` (of capacity 1) and starts a thread whose event waits
    /// for room; returns once it waits.
    fn full_with_a_blocked_writer(queue: &Arc<Queue>) -> std::thread::JoinHandle<()> {
        queue.record(record());
        let waiting = std::thread::spawn({
            let queue = Arc::clone(queue);
            move || queue.record(record())
        });
        while queue.lock().blocked == 0 {
            std::thread::yield_now();
        }
        waiting
    }

    /// Close frees an event waiting for room at once (it is dropped, as
    /// every event after close is): with a wait bound of an hour, only the
    /// close can end the wait within the test.
    #[test]
    fn close_frees_a_blocked_event() {
        let queue = queue_blocking_for(1, AuditOverflow::Block, Duration::from_secs(3_600));
        let waiting = full_with_a_blocked_writer(&queue);
        let (done, _wait) = oneshot::channel();
        queue.control(Msg::Close(done)).expect("open");
        waiting.join().expect("returned");
        assert_eq!(queue.queued(), 1);
        assert!(matches!(
            queue.control(Msg::Flush(oneshot::channel().0)),
            Err(AuditError::Stopped)
        ));
    }
}
