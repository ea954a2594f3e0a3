//! The startup grace: for a while after start, accept and queue but grant
//! nothing.
//!
//! A standby that takes over a failed primary's address knows nothing of
//! the primary's holders. They give up their claims at 0.8 x lease of
//! silence, so a standby that grants nothing for at least the longest lease
//! in use never hands out a lock that someone still believes they hold.
//!
//! The gate sits in front of the lock table rather than inside it: while it
//! is closed, sessions wait here in arrival order (answered WAITING, their
//! leases running as usual); when it opens, one pass hands them to the
//! table in that same order, so the first of each lock is granted and the
//! rest queue behind it in FIFO order. After that the gate costs one atomic
//! load per ACQUIRE and per session end.

use std::{
    collections::VecDeque,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use tokio::time::Instant;
use tracing::info;

use crate::{
    core::slot::{EndNotice, SessionSlot},
    core::table::{Acquired, LockTable},
};

/// The startup grace as `/readyz` and `/api/info` show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraceStatus {
    /// The configured grace (zero: none).
    pub configured: Duration,
    /// Whether grants are still held back.
    pub running: bool,
    /// Time left until grants begin (zero once over).
    pub remaining: Duration,
    /// Sessions waiting for the grace to end.
    pub held: usize,
}

struct Held {
    queue: VecDeque<Arc<SessionSlot>>,
    closing: bool,
}

/// The gate in front of the lock table.
pub(crate) struct StartupGrace {
    configured: Duration,
    ends: Instant,
    /// Set once grants are allowed (at once without a grace); read without
    /// the mutex on every ACQUIRE and session end.
    open: AtomicBool,
    held: Mutex<Held>,
}

impl StartupGrace {
    /// A gate that opens `grace` after `now` (open at once for zero).
    pub(crate) fn new(grace: Duration, now: Instant) -> Self {
        Self {
            configured: grace,
            ends: now + grace,
            open: AtomicBool::new(grace.is_zero()),
            held: Mutex::new(Held {
                queue: VecDeque::new(),
                closing: false,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        // Nothing panics while holding it; the queue stays consistent.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// When the gate opens.
    pub(crate) fn ends(&self) -> Option<Instant> {
        (!self.is_open()).then_some(self.ends)
    }

    /// Hands `slot` to the table, or holds it (answered WAITING) while the
    /// grace runs.
    pub(crate) fn admit(&self, slot: &Arc<SessionSlot>, table: &LockTable) -> Acquired {
        self.admit_or(slot, table, true)
    }

    /// As [`admit`](Self::admit) for a request that may wait (`wait`) or
    /// only try: while the grace runs, a try is answered busy (nothing is
    /// granted yet).
    pub(crate) fn admit_or(
        &self,
        slot: &Arc<SessionSlot>,
        table: &LockTable,
        wait: bool,
    ) -> Acquired {
        if !self.is_open() {
            let mut held = self.lock();
            if held.closing {
                return Acquired::ShuttingDown;
            }
            if !self.is_open() {
                if !wait {
                    return Acquired::Busy;
                }
                held.queue.push_back(Arc::clone(slot));
                return Acquired::Queued;
            }
        }
        table.acquire_or(slot, wait)
    }

    /// Takes `slot` out of the gate if it is still held there (its session
    /// ended during the grace); the table's own `end` covers the rest.
    pub(crate) fn leave(&self, slot: &Arc<SessionSlot>) {
        if self.is_open() {
            return;
        }
        let mut held = self.lock();
        if let Some(pos) = held.queue.iter().position(|s| Arc::ptr_eq(s, slot)) {
            held.queue.remove(pos);
        }
    }

    /// Ends the grace: every held session goes to the table in arrival
    /// order and a granted one is pushed its ACQUIRED. A session whose
    /// lease ran out while held is dropped, never granted.
    pub(crate) fn open(&self, table: &LockTable) {
        let mut held = self.lock();
        if self.is_open() || held.closing {
            return;
        }
        let now = Instant::now();
        let mut granted = 0usize;
        let count = held.queue.len();
        for slot in held.queue.drain(..) {
            if slot.end_notice().is_some() {
                continue;
            }
            if table.lease_end(&slot) <= now {
                slot.end_from_outside(EndNotice::Expired);
                continue;
            }
            match table.acquire(&slot) {
                Acquired::Granted(_) => {
                    granted += 1;
                    slot.wake();
                }
                Acquired::Queued | Acquired::Busy => {}
                Acquired::ShuttingDown => {
                    slot.end_from_outside(EndNotice::Shutdown);
                }
            }
        }
        self.open.store(true, Ordering::Release);
        drop(held);
        info!(
            grace_ms = self.configured.as_millis() as u64,
            sessions = count,
            granted,
            "startup grace over; granting"
        );
    }

    /// Shutdown: nothing held will be granted; every held session is told
    /// to end.
    pub(crate) fn close(&self) {
        if self.is_open() {
            return;
        }
        let mut held = self.lock();
        held.closing = true;
        for slot in held.queue.drain(..) {
            slot.end_from_outside(EndNotice::Shutdown);
        }
    }

    /// The grace as the ops and admin endpoints show it.
    pub(crate) fn status(&self) -> GraceStatus {
        let running = !self.is_open();
        GraceStatus {
            configured: self.configured,
            running,
            remaining: if running {
                self.ends.saturating_duration_since(Instant::now())
            } else {
                Duration::ZERO
            },
            held: if running { self.lock().queue.len() } else { 0 },
        }
    }
}
