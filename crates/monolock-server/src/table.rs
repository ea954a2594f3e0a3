//! The lock table: holders, FIFO queues and tokens, behind one mutex.
//!
//! The table is touched only by ACQUIRE, the end of a session, promotion,
//! and the admin API; never by a heartbeat. Every operation is a short
//! critical section with no `.await` inside, which is why this is a
//! `std::sync::Mutex` and not tokio's: it is never held across a suspension
//! point, and the std one is cheaper. Sessions are notified only after the
//! state they will read has been written (a `Notify` permit is never lost).

use std::{
    collections::{HashMap, VecDeque},
    net::SocketAddr,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU8, AtomicU64, Ordering},
    },
    time::{Duration, SystemTime},
};

use monolock_proto::{
    Lease, LockName,
    mutation::{self, Mutation},
};
use tokio::{sync::Notify, time::Instant};

use crate::{
    events::{Event, Observer, ReleaseReason, SessionInfo},
    leases::{LeaseWheel, NOT_FILED},
    token::{TokenIssuer, WallClock},
};

/// Stands in for "never" where an `Instant` is needed.
const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 86_400);

/// Why a session was ended from outside its own task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum EndNotice {
    /// Force-released by an administrator (send ERROR 0x02).
    Forced = 1,
    /// Removed from its queue by an administrator (send ERROR 0x02).
    Kicked = 2,
    /// Found silent past its lease while at the head of the queue.
    Expired = 3,
    /// The server is shutting down (send ERROR 0x01).
    Shutdown = 4,
}

/// The part of a session the table and its task share. The task writes
/// `deadline` on every frame (an atomic store: no lock); the table writes
/// `token` and `end_notice` and then wakes the task through `notify`.
pub(crate) struct SessionSlot {
    pub(crate) info: SessionInfo,
    queued_at: Instant,
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
        }
    }

    /// The deadline, in nanoseconds since the table's epoch.
    pub(crate) fn deadline_nanos(&self) -> u64 {
        self.deadline.load(Ordering::Acquire)
    }

    #[cfg(test)]
    pub(crate) fn set_deadline_nanos(&self, nanos: u64) {
        self.deadline.store(nanos, Ordering::Release);
    }

    /// The token of this session's grant, if it has been granted.
    pub(crate) fn granted_token(&self) -> Option<u64> {
        match self.token.load(Ordering::Acquire) {
            0 => None,
            token => Some(token),
        }
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
    /// force-release) does not change what the client is told.
    pub(crate) fn end_from_outside(&self, notice: EndNotice) {
        let _ =
            self.end_notice
                .compare_exchange(0, notice as u8, Ordering::Release, Ordering::Relaxed);
        self.notify.notify_one();
    }
}

/// What an ACQUIRE led to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// Granted at once with this token.
    Granted(u64),
    /// Queued behind the holder.
    Queued,
    /// Refused: the server is shutting down.
    ShuttingDown,
}

struct Holder {
    slot: Arc<SessionSlot>,
    token: u64,
    since: Instant,
    since_wall: SystemTime,
}

struct LockEntry {
    holder: Holder,
    waiters: VecDeque<Arc<SessionSlot>>,
}

struct TableState {
    locks: HashMap<LockName, LockEntry>,
    tokens: TokenIssuer,
    waiters: usize,
    /// Set at shutdown: nothing is granted any more.
    closing: bool,
}

/// The shared lock table.
pub(crate) struct LockTable {
    state: Mutex<TableState>,
    epoch: Instant,
    leases: Arc<LeaseWheel>,
    clock: Arc<dyn WallClock>,
    observer: Arc<dyn Observer>,
}

impl Drop for LockTable {
    fn drop(&mut self) {
        self.leases.stop();
    }
}

/// A holder as the admin API shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderSnapshot {
    /// mTLS identity, or empty.
    pub identity: Arc<str>,
    /// The holder's address.
    pub remote_addr: SocketAddr,
    /// When it was granted (wall clock).
    pub since: SystemTime,
    /// Its lease.
    pub lease: Lease,
    /// Its fencing token.
    pub token: u64,
}

/// A waiter as the admin API shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaiterSnapshot {
    /// mTLS identity, or empty.
    pub identity: Arc<str>,
    /// The waiter's address.
    pub remote_addr: SocketAddr,
    /// When its ACQUIRE arrived (wall clock).
    pub queued_at: SystemTime,
    /// Its lease.
    pub lease: Lease,
}

/// One lock with its holder and its queue in FIFO order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockSnapshot {
    /// The lock's name.
    pub name: LockName,
    /// The holder (a lock with waiters always has one).
    pub holder: HolderSnapshot,
    /// The queue, first in line first.
    pub waiters: Vec<WaiterSnapshot>,
}

/// Counts for `/api/info` and gauges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableCounts {
    /// Locks with a holder.
    pub locks: usize,
    /// Sessions queued behind a holder.
    pub waiters: usize,
}

impl LockTable {
    pub(crate) fn new(clock: Arc<dyn WallClock>, observer: Arc<dyn Observer>) -> Self {
        let epoch = Instant::now();
        Self {
            state: Mutex::new(TableState {
                locks: HashMap::new(),
                tokens: TokenIssuer::new(),
                waiters: 0,
                closing: false,
            }),
            epoch,
            leases: Arc::new(LeaseWheel::new(epoch)),
            clock,
            observer,
        }
    }

    fn lock_state(&self) -> MutexGuard<'_, TableState> {
        // No code panics while holding the guard; if one ever did, the state
        // is still consistent between operations, so keep serving.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn nanos_since_epoch(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Records that `slot` was heard from at `now` (no lock taken).
    pub(crate) fn touch(&self, slot: &SessionSlot, now: Instant) {
        let deadline = self.nanos_since_epoch(now + slot.info.lease.as_duration());
        slot.deadline.store(deadline, Ordering::Release);
    }

    /// When `slot`'s lease runs out unless it is heard from again.
    pub(crate) fn lease_end(&self, slot: &SessionSlot) -> Instant {
        let deadline = Duration::from_nanos(slot.deadline_nanos());
        self.epoch
            .checked_add(deadline)
            .unwrap_or_else(|| Instant::now() + FAR_FUTURE)
    }

    /// Starts expiring `slot` when it goes silent for its lease (after its
    /// first [`touch`](Self::touch)). Must run inside a tokio runtime.
    pub(crate) fn watch_lease(&self, slot: &Arc<SessionSlot>) {
        self.leases.watch(slot);
    }

    fn is_silent(&self, slot: &SessionSlot, now: Instant) -> bool {
        slot.deadline.load(Ordering::Acquire) <= self.nanos_since_epoch(now)
    }

    /// Grants the lock to `slot` if it is free, else queues it last.
    pub(crate) fn acquire(&self, slot: &Arc<SessionSlot>) -> Acquired {
        let mut state = self.lock_state();
        let state = &mut *state;
        if state.closing {
            return Acquired::ShuttingDown;
        }
        if let Some(entry) = state.locks.get_mut(&slot.info.lock) {
            entry.waiters.push_back(Arc::clone(slot));
            state.waiters += 1;
            self.observer.observe(&Event::WaiterJoined(&slot.info));
            return Acquired::Queued;
        }
        let holder = self.grant(&mut state.tokens, slot, Instant::now());
        let token = holder.token;
        state.locks.insert(
            slot.info.lock.clone(),
            LockEntry {
                holder,
                waiters: VecDeque::new(),
            },
        );
        Acquired::Granted(token)
    }

    /// Issues a token to `slot` and publishes it (caller holds the lock).
    fn grant(&self, tokens: &mut TokenIssuer, slot: &Arc<SessionSlot>, now: Instant) -> Holder {
        let token = tokens.issue(&*self.clock);
        slot.token.store(token, Ordering::Release);
        self.observer.observe(&Event::Granted {
            session: &slot.info,
            token,
            wait: now.saturating_duration_since(slot.queued_at),
        });
        Holder {
            slot: Arc::clone(slot),
            token,
            since: now,
            since_wall: SystemTime::now(),
        }
    }

    /// Ends `slot`'s part in the table: a holder releases (and the next live
    /// waiter is promoted in the same step), a waiter leaves its queue.
    /// Idempotent: a session already removed by the admin API is a no-op.
    /// Returns true when a waiter was promoted.
    pub(crate) fn end(&self, slot: &Arc<SessionSlot>, reason: ReleaseReason) -> bool {
        self.leases.forget(slot);
        let mut state = self.lock_state();
        let state = &mut *state;
        let Some(entry) = state.locks.get_mut(&slot.info.lock) else {
            return false;
        };
        if Arc::ptr_eq(&entry.holder.slot, slot) {
            let now = Instant::now();
            self.released(&entry.holder, now, reason);
            return self.promote(state, slot.info.lock.clone(), now);
        }
        if let Some(pos) = entry.waiters.iter().position(|w| Arc::ptr_eq(w, slot)) {
            entry.waiters.remove(pos);
            state.waiters -= 1;
            self.observer.observe(&Event::WaiterLeft(&slot.info));
        }
        false
    }

    fn released(&self, holder: &Holder, now: Instant, reason: ReleaseReason) {
        self.observer.observe(&Event::Released {
            session: &holder.slot.info,
            token: holder.token,
            held: now.saturating_duration_since(holder.since),
            reason,
        });
    }

    /// The holder of `name` is gone: hand the lock to the first waiter that
    /// is still alive, or forget the lock. Waiters found silent past their
    /// lease are dropped here, so an expired waiter never gets the lock.
    /// Hands `name` to its first live waiter; true when there was one.
    fn promote(&self, state: &mut TableState, name: LockName, now: Instant) -> bool {
        let closing = state.closing;
        let Some(entry) = state.locks.get_mut(&name) else {
            return false;
        };
        while let Some(next) = entry.waiters.pop_front() {
            state.waiters -= 1;
            let silent =
                self.is_silent(&next, now) && !mutation::active(Mutation::PromoteExpiredWaiter);
            if closing || silent {
                self.observer.observe(&Event::WaiterLeft(&next.info));
                if !closing {
                    next.end_from_outside(EndNotice::Expired);
                }
                continue;
            }
            entry.holder = self.grant(&mut state.tokens, &next, now);
            next.notify.notify_one();
            return true;
        }
        state.locks.remove(&name);
        false
    }

    /// Force-releases the holder of `name`; the next waiter is promoted at
    /// once. Returns the released holder.
    pub(crate) fn force_release(&self, name: &str) -> Option<HolderSnapshot> {
        let mut state = self.lock_state();
        let state = &mut *state;
        let entry = state.locks.get_mut(name)?;
        let snapshot = holder_snapshot(&entry.holder);
        let now = Instant::now();
        self.released(&entry.holder, now, ReleaseReason::Force);
        self.observer.observe(&Event::ForceRelease {
            session: &entry.holder.slot.info,
            token: entry.holder.token,
        });
        entry.holder.slot.end_from_outside(EndNotice::Forced);
        let name = entry.holder.slot.info.lock.clone();
        self.promote(state, name, now);
        Some(snapshot)
    }

    /// Removes the waiter at `remote_addr` from the queue of `name`; the
    /// others keep their order. Returns the removed waiter.
    pub(crate) fn kick_waiter(
        &self,
        name: &str,
        remote_addr: SocketAddr,
    ) -> Option<WaiterSnapshot> {
        let mut state = self.lock_state();
        let state = &mut *state;
        let entry = state.locks.get_mut(name)?;
        let pos = entry
            .waiters
            .iter()
            .position(|w| w.info.remote_addr == remote_addr)?;
        let waiter = entry.waiters.remove(pos)?;
        state.waiters -= 1;
        self.observer.observe(&Event::KickWaiter(&waiter.info));
        waiter.end_from_outside(EndNotice::Kicked);
        Some(waiter_snapshot(&waiter))
    }

    /// Stops all future grants (from now on a release promotes nobody and an
    /// ACQUIRE is refused) and tells every session to end.
    pub(crate) fn close(&self) {
        let mut state = self.lock_state();
        state.closing = true;
        for entry in state.locks.values() {
            entry.holder.slot.end_from_outside(EndNotice::Shutdown);
            for waiter in &entry.waiters {
                waiter.end_from_outside(EndNotice::Shutdown);
            }
        }
    }

    /// Every lock whose name `filter` accepts, sorted by name.
    pub(crate) fn snapshot(&self, filter: impl Fn(&str) -> bool) -> Vec<LockSnapshot> {
        let state = self.lock_state();
        let mut locks: Vec<LockSnapshot> = state
            .locks
            .iter()
            .filter(|(name, _)| filter(name.as_str()))
            .map(|(name, entry)| lock_snapshot(name, entry))
            .collect();
        drop(state);
        locks.sort_by(|a, b| a.name.cmp(&b.name));
        locks
    }

    /// One lock, if it has a holder.
    pub(crate) fn lock(&self, name: &str) -> Option<LockSnapshot> {
        let state = self.lock_state();
        state
            .locks
            .get(name)
            .map(|entry| lock_snapshot(&entry.holder.slot.info.lock, entry))
    }

    pub(crate) fn counts(&self) -> TableCounts {
        let state = self.lock_state();
        TableCounts {
            locks: state.locks.len(),
            waiters: state.waiters,
        }
    }
}

fn holder_snapshot(holder: &Holder) -> HolderSnapshot {
    let info = &holder.slot.info;
    HolderSnapshot {
        identity: Arc::clone(&info.identity),
        remote_addr: info.remote_addr,
        since: holder.since_wall,
        lease: info.lease,
        token: holder.token,
    }
}

fn waiter_snapshot(slot: &SessionSlot) -> WaiterSnapshot {
    let info = &slot.info;
    WaiterSnapshot {
        identity: Arc::clone(&info.identity),
        remote_addr: info.remote_addr,
        queued_at: info.queued_at,
        lease: info.lease,
    }
}

fn lock_snapshot(name: &LockName, entry: &LockEntry) -> LockSnapshot {
    LockSnapshot {
        name: name.clone(),
        holder: holder_snapshot(&entry.holder),
        waiters: entry.waiters.iter().map(|w| waiter_snapshot(w)).collect(),
    }
}
