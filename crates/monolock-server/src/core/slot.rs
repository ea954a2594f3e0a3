//! What a session's task, the lock table and the lease wheel share: the
//! [`SessionSlot`], why a session was ended from outside ([`EndNotice`]),
//! and the deadline arithmetic ([`Epoch`], [`deadline_after`]).
//!
//! The table and the wheel both depend on this module and not on each
//! other's internals: the table keeps holders, queues and tokens, the wheel
//! keeps expiry.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::{sync::Notify, time::Instant};

use crate::core::{events::SessionInfo, watch::Outbox};

/// Stands in for "never" where an `Instant` is needed.
const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 86_400);

/// `at + duration`, or about a century after `at` where that is not
/// representable: every deadline a client or operator can set (an absurd
/// io-timeout, a huge lease) goes through here, so none can panic.
pub(crate) fn deadline_after(at: Instant, duration: Duration) -> Instant {
    at.checked_add(duration)
        .or_else(|| at.checked_add(FAR_FUTURE))
        .unwrap_or(at)
}

/// `SessionSlot::wheel_pos` of a session not in the lease wheel.
pub(crate) const NOT_FILED: u64 = u64::MAX;

/// The instant deadlines are counted from, in nanoseconds, so that a
/// deadline fits in an atomic `u64` (a heartbeat stores it, no lock).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Epoch(Instant);

impl Epoch {
    /// An epoch at `at`.
    pub(crate) fn at(at: Instant) -> Self {
        Self(at)
    }

    /// Nanoseconds from the epoch to `at` (0 before it, `u64::MAX` past
    /// 584 years).
    pub(crate) fn nanos(self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.0).as_nanos()).unwrap_or(u64::MAX)
    }

    /// The instant `nanos` after the epoch (far in the future if that is
    /// not representable).
    pub(crate) fn instant(self, nanos: u64) -> Instant {
        deadline_after(self.0, Duration::from_nanos(nanos))
    }

    /// The epoch itself.
    #[cfg(test)]
    pub(crate) fn start(self) -> Instant {
        self.0
    }
}

/// Why a session was ended from outside its own task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum EndNotice {
    /// Force-released by an administrator (send ERROR 0x02).
    Forced = 1,
    /// Removed from its queue by an administrator (send ERROR 0x02).
    Kicked = 2,
    /// Found silent past its lease (by the wheel, or at promotion).
    Expired = 3,
    /// The server is shutting down (send ERROR 0x01).
    Shutdown = 4,
}

/// The part of a session the table, the wheel and its task share. The task
/// writes `deadline` on every frame (an atomic store: no lock); the table
/// writes `token`, the table or the wheel `end_notice`, and then they wake
/// the task through `notify`.
pub(crate) struct SessionSlot {
    pub(crate) info: SessionInfo,
    pub(crate) queued_at: Instant,
    /// Monotonic nanoseconds since the table's epoch past which the session
    /// is silent for longer than its lease.
    deadline: AtomicU64,
    /// The token of its grant, 0 while waiting (real tokens are never 0).
    token: AtomicU64,
    end_notice: AtomicU8,
    pub(crate) notify: Notify,
    /// Where the lease wheel filed this session; only read and written
    /// under the wheel's lock.
    pub(crate) wheel_pos: AtomicU64,
    /// Its place in its lock's queue while it waits; only read and written
    /// under the table's lock.
    pub(crate) queue_seq: AtomicU64,
    /// For a claim of a version 2 session: the session it belongs to, and
    /// its claim id. `None` for a version 1 session (the connection is the
    /// claim).
    pub(crate) claim: Option<ClaimOf>,
    /// The claim's value (`None`: empty), replaced under the table's lock
    /// only, so what the table reads under it is what watches are told.
    value: parking_lot::Mutex<Option<Arc<str>>>,
}

/// Where a version 2 claim belongs.
pub(crate) struct ClaimOf {
    /// The session: its lease, its task's wake-up and its inbox.
    pub(crate) link: Arc<SessionLink>,
    /// The claim id the client chose.
    pub(crate) id: u32,
}

/// What a version 2 session shares with the table, the wheel and the
/// server: one per session, however many claims it has.
///
/// The session's lease lives in `lease`, a slot of its own that is filed in
/// the lease wheel (one entry per session, not per claim) and never enters
/// the table; its claims read their deadline from it. The table tells the
/// session's task which claims it changed (granted, force-released,
/// kicked) by pushing their ids onto `changed` and waking `lease.notify`:
/// the task swaps the list out once per wakeup, so a wakeup costs what its
/// changes cost, whatever the number of claims.
pub(crate) struct SessionLink {
    /// The server's id for the session (in OPENED, logs and events).
    pub(crate) id: u64,
    /// The session's lease slot.
    pub(crate) lease: Arc<SessionSlot>,
    /// Ids of claims the table changed since the task last looked.
    pub(crate) changed: parking_lot::Mutex<Vec<u32>>,
    /// True while the session has no claim (an idle session).
    pub(crate) idle: AtomicBool,
    /// Set when the server asks idle sessions to close (descriptors ran
    /// out); the task closes if it is still idle when it looks.
    pub(crate) shed: AtomicBool,
    /// STATE pushes the table queued for the session's watches.
    pub(crate) outbox: parking_lot::Mutex<Outbox>,
    /// How many watches the session has (for the admin API).
    pub(crate) watches: std::sync::atomic::AtomicUsize,
}

impl SessionLink {
    /// The link of session `id`, whose lease slot is `lease`: idle, with
    /// nothing changed and nothing queued.
    pub(crate) fn new(id: u64, lease: Arc<SessionSlot>) -> Self {
        Self {
            id,
            lease,
            changed: parking_lot::Mutex::new(Vec::new()),
            idle: AtomicBool::new(true),
            shed: AtomicBool::new(false),
            outbox: parking_lot::Mutex::new(Outbox::default()),
            watches: std::sync::atomic::AtomicUsize::new(0),
        }
    }
}

impl SessionSlot {
    pub(crate) fn new(info: SessionInfo, queued_at: Instant) -> Self {
        Self {
            info,
            queued_at,
            deadline: AtomicU64::new(u64::MAX),
            token: AtomicU64::new(0),
            end_notice: AtomicU8::new(0),
            notify: Notify::new(),
            wheel_pos: AtomicU64::new(NOT_FILED),
            queue_seq: AtomicU64::new(0),
            claim: None,
            value: parking_lot::Mutex::new(None),
        }
    }

    /// The claim's value, `None` when empty.
    pub(crate) fn value(&self) -> Option<Arc<str>> {
        self.value.lock().clone()
    }

    /// Replaces the claim's value (the table, under its lock; or its
    /// session before the claim reaches the table). An empty value is none.
    pub(crate) fn set_value(&self, value: Option<Arc<str>>) {
        *self.value.lock() = value.filter(|v| !v.is_empty());
    }

    /// A claim of a version 2 session: its deadline is the session's, and
    /// waking it wakes the session's task with its id.
    pub(crate) fn new_claim(
        info: SessionInfo,
        queued_at: Instant,
        link: Arc<SessionLink>,
        id: u32,
    ) -> Self {
        let mut slot = Self::new(info, queued_at);
        slot.claim = Some(ClaimOf { link, id });
        slot
    }

    /// The deadline, in nanoseconds since the table's epoch (a claim's is
    /// its session's).
    pub(crate) fn deadline_nanos(&self) -> u64 {
        match &self.claim {
            None => self.deadline.load(Ordering::Acquire),
            Some(claim) => claim.link.lease.deadline_nanos(),
        }
    }

    /// Wakes the task that serves this slot, after the state it will read
    /// was written: a version 1 session's own task, or a claim's session
    /// task, told which claim changed.
    pub(crate) fn wake(&self) {
        match &self.claim {
            None => self.notify.notify_one(),
            Some(claim) => {
                claim.link.changed.lock().push(claim.id);
                claim.link.lease.notify.notify_one();
            }
        }
    }

    /// Records that the session was heard from at `now`: its lease runs
    /// from there.
    pub(crate) fn touch(&self, epoch: Epoch, now: Instant) {
        let deadline = epoch.nanos(deadline_after(now, self.info.lease.as_duration()));
        self.deadline.store(deadline, Ordering::Release);
    }

    #[cfg(test)]
    pub(crate) fn set_deadline_nanos(&self, nanos: u64) {
        self.deadline.store(nanos, Ordering::Release);
    }

    /// Told to end already: itself, or (a claim) its session.
    pub(crate) fn is_ending(&self) -> bool {
        self.end_notice().is_some()
            || self
                .claim
                .as_ref()
                .is_some_and(|claim| claim.link.lease.end_notice().is_some())
    }

    /// Silent past its lease at `now`.
    pub(crate) fn is_silent(&self, epoch: Epoch, now: Instant) -> bool {
        self.deadline_nanos() <= epoch.nanos(now)
    }

    /// The token of this session's grant, if it has been granted.
    pub(crate) fn granted_token(&self) -> Option<u64> {
        match self.token.load(Ordering::Acquire) {
            0 => None,
            token => Some(token),
        }
    }

    /// Publishes the session's grant (the table, under its lock).
    pub(crate) fn set_token(&self, token: u64) {
        self.token.store(token, Ordering::Release);
    }

    pub(crate) fn end_notice(&self) -> Option<EndNotice> {
        match self.end_notice.load(Ordering::Acquire) {
            1 => Some(EndNotice::Forced),
            2 => Some(EndNotice::Kicked),
            3 => Some(EndNotice::Expired),
            4 => Some(EndNotice::Shutdown),
            _ => None,
        }
    }

    /// Tells the session's task to end, for the first reason given: a
    /// later one (say, the lease running out before the task saw a
    /// force-release) does not change what the client is told. Returns the
    /// notice in force: `notice` itself if it was the first, else the
    /// earlier one, which is what will really happen to the session.
    pub(crate) fn end_from_outside(&self, notice: EndNotice) -> EndNotice {
        let first =
            self.end_notice
                .compare_exchange(0, notice as u8, Ordering::AcqRel, Ordering::Acquire);
        self.wake();
        match first {
            Ok(_) => notice,
            Err(_) => self.end_notice().unwrap_or(notice),
        }
    }
}
