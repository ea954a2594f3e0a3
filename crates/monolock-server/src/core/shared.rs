//! The state the accept loop, every connection and the handle share: the
//! configuration, the lock table, the startup grace, the shutdown signal,
//! the counts, and the open version 2 sessions. Its own module so that the
//! server and the session code both depend on it, not on each other.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::SystemTime,
};

use tokio::time::Instant;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::debug;

use crate::{
    core::admission::{ClaimCount, ClaimPermit, PendingConnections},
    core::config::ServerConfig,
    core::events::ReleaseReason,
    core::grace::StartupGrace,
    core::slot::{SessionLink, SessionSlot},
    core::table::LockTable,
    core::token::TokenIssuer,
};

/// State shared by the accept loop, every connection and the handle.
pub(crate) struct Shared {
    pub(crate) config: ServerConfig,
    /// Shared with the tasks that release the held claims of sessions the
    /// server closed, which outlive their connection.
    pub(crate) table: Arc<LockTable>,
    /// Holds grants back for `--startup-grace` after start.
    pub(crate) grace: StartupGrace,
    pub(crate) shutdown: CancellationToken,
    pub(crate) connections: AtomicUsize,
    pub(crate) started: std::time::Instant,
    /// Shared by every plaintext connection, so they allocate no identity.
    pub(crate) no_identity: Arc<str>,
    /// The next version 2 session's id (ids start at 1).
    pub(crate) next_session_id: AtomicU64,
    /// Every open version 2 session, by id: for shutdown, for closing idle
    /// sessions when descriptors run out, and for counts. Touched once at
    /// a session's open and once at its end, never per claim.
    pub(crate) sessions: parking_lot::Mutex<HashMap<u64, Arc<SessionLink>>>,
    /// The tasks holding the claims of sessions the server closed until
    /// their lease runs out; the server waits for them at shutdown (they
    /// release at once then), so their releases reach the audit log.
    pub(crate) lease_holds: TaskTracker,
    /// Connections whose first frame is not yet whole (closed first when
    /// descriptors run out).
    pub(crate) pending: Arc<PendingConnections>,
    /// Claims admitted, against `--max-claims`.
    pub(crate) claims: ClaimCount,
    /// Watches registered, against `--max-watches`.
    pub(crate) watches: AtomicUsize,
    /// Version 2 sessions the server ended whose held claims it keeps
    /// until their lease's end, by id: shown by the admin API until then.
    pub(crate) ended: Arc<parking_lot::Mutex<HashMap<u64, EndedSession>>>,
}

/// A version 2 session the server ended, while its held claims are kept.
#[derive(Clone)]
pub(crate) struct EndedSession {
    pub(crate) link: Arc<SessionLink>,
    /// Why the server ended it (the kept claims' release reason).
    pub(crate) reason: ReleaseReason,
    /// When its kept claims are released (wall clock), unless an
    /// administrator or a shutdown releases them first.
    pub(crate) release_at: SystemTime,
}

impl Shared {
    /// The state of a server with this configuration: an empty table whose
    /// tokens start above any earlier process's, and the startup grace
    /// counted from now.
    pub(crate) fn new(config: ServerConfig) -> Self {
        let tokens = TokenIssuer::new(&*config.wall_clock, config.token_floor.clone());
        let table = Arc::new(LockTable::new(
            Arc::clone(&config.wall_clock),
            Arc::clone(&config.observer),
            tokens,
        ));
        let grace = StartupGrace::new(config.startup_grace, Instant::now());
        Self {
            config,
            table,
            grace,
            shutdown: CancellationToken::new(),
            connections: AtomicUsize::new(0),
            started: std::time::Instant::now(),
            no_identity: Arc::from(""),
            next_session_id: AtomicU64::new(1),
            sessions: parking_lot::Mutex::new(HashMap::new()),
            lease_holds: TaskTracker::new(),
            pending: Arc::default(),
            claims: ClaimCount::default(),
            watches: AtomicUsize::new(0),
            ended: Arc::default(),
        }
    }

    /// Releases `held` (claims of a session the server closed, still held
    /// in the table) at `at`, the instant the session's lease would have
    /// run out, with `reason`; or at once, as a shutdown, if the server
    /// shuts down first. Nothing of the connection is kept meanwhile: the
    /// task holds the claims' slots and a timer. An administrator may
    /// force-release a claim before; its release here is then a no-op.
    ///
    /// Until then the claims count against `--max-claims` and as kept,
    /// and a version 2 `session` is listed as ended.
    pub(crate) fn release_when_lease_ends(
        &self,
        held: Vec<Arc<SessionSlot>>,
        at: Instant,
        reason: ReleaseReason,
        session: Option<&Arc<SessionLink>>,
    ) {
        if held.is_empty() {
            return;
        }
        let kept = self.claims.keep(held.len());
        let ended_id = session.map(|link| {
            let release_at = SystemTime::now() + at.saturating_duration_since(Instant::now());
            let ended = EndedSession {
                link: Arc::clone(link),
                reason,
                release_at,
            };
            self.ended.lock().insert(link.id, ended);
            link.id
        });
        let ended = Arc::clone(&self.ended);
        let table = Arc::clone(&self.table);
        let shutdown = self.shutdown.clone();
        self.lease_holds.spawn(async move {
            let reason = tokio::select! {
                biased;
                () = shutdown.cancelled() => ReleaseReason::Shutdown,
                () = tokio::time::sleep_until(at) => reason,
            };
            debug!(
                claims = held.len(),
                reason = reason.as_str(),
                "releasing the claims of a closed session"
            );
            table.end_claims(&held, reason);
            if let Some(id) = ended_id {
                ended.lock().remove(&id);
            }
            drop(kept);
        });
    }

    /// A permit for one more claim, or `None` (counted) at `--max-claims`.
    pub(crate) fn admit_claim(&self) -> Option<ClaimPermit> {
        let permit = self.claims.try_admit(self.config.max_claims);
        if permit.is_none() {
            self.config
                .observer
                .observe(&crate::core::events::Event::ClaimLimitRefused);
        }
        permit
    }

    /// One more watch against `--max-watches`: false (counted as refused)
    /// when the server has as many as it may. Given back with
    /// [`Shared::watches_ended`].
    pub(crate) fn admit_watch(&self) -> bool {
        let max = self.config.max_watches;
        let admitted = self
            .watches
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok();
        let event = if admitted {
            crate::core::events::Event::WatchesChanged(1)
        } else {
            crate::core::events::Event::WatchRefused(crate::core::events::WatchBound::Server)
        };
        self.config.observer.observe(&event);
        admitted
    }

    /// `count` watches admitted by [`Shared::admit_watch`] ended.
    pub(crate) fn watches_ended(&self, count: usize) {
        if count == 0 {
            return;
        }
        self.watches.fetch_sub(count, Ordering::AcqRel);
        let delta = -i64::try_from(count).unwrap_or(i64::MAX);
        self.config
            .observer
            .observe(&crate::core::events::Event::WatchesChanged(delta));
    }

    /// Frees descriptors in the order `admission.rs` gives: connections
    /// without a whole first frame if there are any, else idle sessions.
    /// Returns what was asked to close.
    pub(crate) fn shed_for_descriptors(&self) -> Shed {
        let pending = self.pending.shed_all();
        if pending > 0 {
            return Shed::Pending(pending);
        }
        Shed::Idle(self.shed_idle_sessions(self.config.io_timeout))
    }

    /// Asks every idle version 2 session open for at least `min_age` to
    /// close (ERROR 0x03); returns how many were asked. A session that has
    /// a claim by the time it looks stays open. Under descriptor pressure
    /// `min_age` is one io-timeout: a session opened later may have its
    /// first ACQUIRE on its way.
    pub(crate) fn shed_idle_sessions(&self, min_age: std::time::Duration) -> usize {
        let sessions = self.sessions.lock();
        let now = Instant::now();
        let mut asked = 0;
        for link in sessions.values() {
            let opened_long_enough = now.saturating_duration_since(link.lease.queued_at) >= min_age;
            if opened_long_enough && link.idle.load(Ordering::Acquire) {
                link.shed.store(true, Ordering::Release);
                link.lease.notify.notify_one();
                asked += 1;
            }
        }
        asked
    }
}

/// What [`Shared::shed_for_descriptors`] asked to close.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shed {
    /// This many connections without a whole first frame.
    Pending(usize),
    /// This many idle version 2 sessions.
    Idle(usize),
}
