//! The lock table: holders, FIFO queues and tokens, behind one mutex.
//!
//! The table is touched only by ACQUIRE, the end of a session, promotion,
//! and the admin API; never by a heartbeat. Every operation is a short
//! critical section with no `.await` inside, which is why this is a
//! blocking mutex (`parking_lot`'s) and not tokio's: it is never held across
//! a suspension point, and a blocking one is cheaper. `parking_lot` rather
//! than std for `unlock_fair`, which lets a long snapshot hand the table to
//! a waiting grant between chunks. Sessions are notified only after the
//! state they will read has been written (a `Notify` permit is never lost).
//!
//! Each queue is keyed by a sequence number taken at ACQUIRE, so it stays
//! FIFO and a waiter leaves from anywhere in O(log n): 100,000 waiters
//! leaving one by one must not each scan the queue under this mutex (see
//! `benches/leave_long_queue.rs`). What a session shares with the table and
//! the lease wheel lives in `slot.rs`; the wheel decides expiry, the table
//! only refuses to promote a session that is silent or already ending.

use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
    sync::{Arc, atomic::Ordering},
    time::SystemTime,
};

use monolock_proto::{Lease, LockName, ext::StateEvent};
use parking_lot::{Mutex, MutexGuard};
use tokio::time::Instant;

use crate::{
    core::clock::WallClock,
    core::events::{ClaimRef, Event, Observer, ReleaseReason},
    core::leases::LeaseWheel,
    core::slot::{EndNotice, Epoch, SessionLink, SessionSlot},
    core::token::TokenIssuer,
    core::watch::{LockState, StatePush, Watch, ended_by, unix_ms},
};

/// What an ACQUIRE led to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// Granted at once with this token.
    Granted(u64),
    /// Queued behind the holder.
    Queued,
    /// Held by someone else, and the request was try-only: nothing queued.
    Busy,
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
    /// The queue, keyed by each waiter's `queue_seq`: FIFO order, and
    /// leaving from anywhere in O(log n) (a long queue's waiters leaving
    /// one by one must not cost O(n) each under the table's lock).
    waiters: BTreeMap<u64, Arc<SessionSlot>>,
}

/// The watches of one lock name, held or free.
struct Watched {
    /// In registration order, keyed by each watch's `seq`.
    watches: BTreeMap<u64, Arc<Watch>>,
    /// The token of the last release pushed to them (0: none yet), and
    /// when (ms since the Unix epoch): what a FREE state names.
    last_token: u64,
    freed_ms: u64,
}

struct TableState {
    locks: HashMap<LockName, LockEntry>,
    /// Watches by lock name; a name without watches has no entry.
    watched: HashMap<LockName, Watched>,
    tokens: TokenIssuer,
    waiters: usize,
    /// The next waiter's `queue_seq` (increasing, so FIFO).
    next_seq: u64,
    /// Set at shutdown: nothing is granted any more.
    closing: bool,
}

/// Locks a snapshot copies per turn under the table's mutex (what a turn
/// costs: BENCHMARKS.md, "Snapshots of a large table").
const SNAPSHOT_CHUNK: usize = 256;

/// The shared lock table.
pub(crate) struct LockTable {
    state: Mutex<TableState>,
    epoch: Epoch,
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
    /// Its session and claim, for a version 2 claim.
    pub claim: Option<ClaimRef>,
    /// The value it announced (empty: none).
    pub value: Arc<str>,
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
    /// Its session and claim, for a version 2 claim.
    pub claim: Option<ClaimRef>,
    /// The value its grant will show (empty: none).
    pub value: Arc<str>,
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

/// Why an administrator's force-release or kick did nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AdminRefused<T> {
    /// No such holder or waiter.
    #[error("no such session")]
    NotFound,
    /// The session was already ending for another reason when the request
    /// reached it; it ends that way (and is audited so), not by the
    /// administrator.
    #[error("the session was already ending: {ending}")]
    AlreadyEnding {
        /// The session as it was.
        session: T,
        /// How it is ending.
        ending: Ending,
    },
    /// A conditional force-release named a token that is not the holder's:
    /// the lock was handed on since.
    #[error("the lock is held under another token")]
    OtherToken {
        /// The grant that holds the lock now.
        current: T,
    },
}

/// How a session that an administrator reached too late is ending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Its lease ran out (it is closed without an ERROR frame).
    LeaseExpired,
    /// The server is shutting down (ERROR 0x01).
    ShuttingDown,
    /// Another administrator's request reached it first (ERROR 0x02).
    ClosedByAdmin,
}

impl Ending {
    /// A short phrase for logs and the admin API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::LeaseExpired => "its lease expired",
            Self::ShuttingDown => "the server is shutting down",
            Self::ClosedByAdmin => "an administrator already closed it",
        }
    }
}

impl std::fmt::Display for Ending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<EndNotice> for Ending {
    fn from(notice: EndNotice) -> Self {
        match notice {
            EndNotice::Expired => Self::LeaseExpired,
            EndNotice::Shutdown => Self::ShuttingDown,
            EndNotice::Forced | EndNotice::Kicked => Self::ClosedByAdmin,
        }
    }
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
    pub(crate) fn new(
        clock: Arc<dyn WallClock>,
        observer: Arc<dyn Observer>,
        tokens: TokenIssuer,
    ) -> Self {
        let epoch = Epoch::at(Instant::now());
        Self {
            state: Mutex::new(TableState {
                locks: HashMap::new(),
                watched: HashMap::new(),
                tokens,
                waiters: 0,
                next_seq: 0,
                closing: false,
            }),
            epoch,
            leases: Arc::new(LeaseWheel::new(epoch)),
            clock,
            observer,
        }
    }

    /// Gives back the map's capacity beyond what it holds, after a burst
    /// of claims has ended (see `admission.rs`, "memory after a burst").
    pub(crate) fn shrink(&self) {
        self.lock_state().locks.shrink_to_fit();
    }

    fn lock_state(&self) -> MutexGuard<'_, TableState> {
        // parking_lot's mutex does not poison: no code panics while holding
        // the guard, and the state is consistent between operations anyway.
        self.state.lock()
    }

    /// Records that `slot` was heard from at `now` (no lock taken).
    pub(crate) fn touch(&self, slot: &SessionSlot, now: Instant) {
        slot.touch(self.epoch, now);
    }

    /// When `slot`'s lease runs out unless it is heard from again.
    pub(crate) fn lease_end(&self, slot: &SessionSlot) -> Instant {
        self.epoch.instant(slot.deadline_nanos())
    }

    /// Starts expiring `slot` when it goes silent for its lease (after its
    /// first [`touch`](Self::touch)). Must run inside a tokio runtime.
    pub(crate) fn watch_lease(&self, slot: &Arc<SessionSlot>) {
        self.leases.watch(slot);
    }

    /// Grants the lock to `slot` if it is free, else queues it last.
    pub(crate) fn acquire(&self, slot: &Arc<SessionSlot>) -> Acquired {
        self.acquire_or(slot, true)
    }

    /// Grants the lock to `slot` if it is free; else queues it last if
    /// `wait`, or answers [`Acquired::Busy`] and changes nothing.
    pub(crate) fn acquire_or(&self, slot: &Arc<SessionSlot>, wait: bool) -> Acquired {
        let mut state = self.lock_state();
        let state = &mut *state;
        if state.closing {
            return Acquired::ShuttingDown;
        }
        if let Some(entry) = state.locks.get_mut(&slot.info.lock) {
            if !wait {
                return Acquired::Busy;
            }
            let seq = state.next_seq;
            state.next_seq += 1;
            slot.queue_seq.store(seq, Ordering::Relaxed);
            entry.waiters.insert(seq, Arc::clone(slot));
            state.waiters += 1;
            self.observer.observe(&Event::WaiterJoined(&slot.info));
            return Acquired::Queued;
        }
        let holder = self.grant(&mut state.tokens, slot, Instant::now(), false);
        let token = holder.token;
        tell_watches(&state.watched, &slot.info.lock, || granted_state(&holder));
        state.locks.insert(
            slot.info.lock.clone(),
            LockEntry {
                holder,
                waiters: BTreeMap::new(),
            },
        );
        Acquired::Granted(token)
    }

    /// Issues a token to `slot` (taken from the lock's queue if `queued`)
    /// and publishes it (caller holds the lock).
    fn grant(
        &self,
        tokens: &mut TokenIssuer,
        slot: &Arc<SessionSlot>,
        now: Instant,
        queued: bool,
    ) -> Holder {
        let token = tokens.issue(&*self.clock);
        slot.set_token(token);
        let value = slot.value();
        self.observer.observe(&Event::Granted {
            session: &slot.info,
            token,
            wait: now.saturating_duration_since(slot.queued_at),
            queued,
            value: value.as_deref().unwrap_or(""),
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
        if slot.claim.is_none() {
            self.leases.forget(slot);
        }
        let mut state = self.lock_state();
        self.end_locked(&mut state, slot, reason)
    }

    /// Ends every claim of a version 2 session in one critical section:
    /// its held locks are handed on and its waiters leave their queues at
    /// the same instant. Returns true when some waiter was promoted.
    pub(crate) fn end_claims<'s>(
        &self,
        claims: impl IntoIterator<Item = &'s Arc<SessionSlot>>,
        reason: ReleaseReason,
    ) -> bool {
        let mut state = self.lock_state();
        #[cfg(feature = "mutations")]
        if monolock_mutation::active(monolock_mutation::Mutation::V2PromoteEndingSession) {
            return self.end_claims_in_id_order(&mut state, claims, reason);
        }
        // Waiting claims leave their queues first, so that ending a held
        // claim never hands its lock to another claim of this same ending
        // session; held claims then end in lock-name order, so the tokens
        // their next holders get do not depend on the session's map order.
        let (mut held, waiting): (Vec<&Arc<SessionSlot>>, Vec<&Arc<SessionSlot>>) =
            claims.into_iter().partition(|slot| {
                state
                    .locks
                    .get(&slot.info.lock)
                    .is_some_and(|entry| Arc::ptr_eq(&entry.holder.slot, slot))
            });
        held.sort_by(|a, b| a.info.lock.cmp(&b.info.lock));
        let mut promoted = false;
        for slot in waiting.into_iter().chain(held) {
            promoted |= self.end_locked(&mut state, slot, reason);
        }
        promoted
    }

    /// The simulation's planted mistake `V2PromoteEndingSession`: a
    /// session's claims end one by one in claim-id order, so a held claim
    /// ending before a waiting claim of the same session on the same lock
    /// hands the lock to that claim of a session that is ending.
    #[cfg(feature = "mutations")]
    fn end_claims_in_id_order<'s>(
        &self,
        state: &mut TableState,
        claims: impl IntoIterator<Item = &'s Arc<SessionSlot>>,
        reason: ReleaseReason,
    ) -> bool {
        let mut claims: Vec<&Arc<SessionSlot>> = claims.into_iter().collect();
        claims.sort_by_key(|slot| slot.claim.as_ref().map(|claim| claim.id));
        let mut promoted = false;
        for slot in claims {
            promoted |= self.end_locked(state, slot, reason);
        }
        promoted
    }

    /// Ends the claims of a session the server closed on its own (a write
    /// blocked past io-timeout, a started frame not completed within it, a
    /// bad frame): its waiting claims leave their queues at once, since they
    /// hold nothing, but its held claims stay held, because the client may
    /// still count on them until its own deadline. They are returned, for
    /// the caller to release at `release_at` (the session's last frame plus
    /// its lease), and each is recorded as ended by the server with the
    /// reason its release will carry.
    pub(crate) fn end_waiting_keep_held<'s>(
        &self,
        claims: impl IntoIterator<Item = &'s Arc<SessionSlot>>,
        reason: ReleaseReason,
        release_at: Instant,
    ) -> Vec<Arc<SessionSlot>> {
        let mut state = self.lock_state();
        let now = Instant::now();
        let mut held = Vec::new();
        for slot in claims {
            let Some(entry) = state.locks.get(&slot.info.lock) else {
                continue;
            };
            if Arc::ptr_eq(&entry.holder.slot, slot) {
                self.observer.observe(&Event::EndedByServer {
                    session: &slot.info,
                    token: entry.holder.token,
                    reason,
                    release_in: release_at.saturating_duration_since(now),
                });
                held.push(Arc::clone(slot));
            } else {
                self.end_locked(&mut state, slot, reason);
            }
        }
        held
    }

    /// Stops watching the lease of a version 2 session (its own slot, which
    /// is never in the table).
    pub(crate) fn forget_lease(&self, slot: &SessionSlot) {
        self.leases.forget(slot);
    }

    fn end_locked(
        &self,
        state: &mut TableState,
        slot: &Arc<SessionSlot>,
        reason: ReleaseReason,
    ) -> bool {
        let Some(entry) = state.locks.get_mut(&slot.info.lock) else {
            return false;
        };
        if Arc::ptr_eq(&entry.holder.slot, slot) {
            let now = Instant::now();
            self.released(&entry.holder, now, reason);
            released_to_watches(&mut state.watched, &entry.holder, reason);
            return self.promote(state, slot.info.lock.clone(), now);
        }
        let seq = slot.queue_seq.load(Ordering::Relaxed);
        if entry
            .waiters
            .get(&seq)
            .is_some_and(|waiter| Arc::ptr_eq(waiter, slot))
        {
            entry.waiters.remove(&seq);
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
    /// is still alive, or forget the lock; true when there was one. Waiters
    /// found silent past their lease are dropped here, and so are those
    /// already told to end (the wheel expired them, and a heartbeat that
    /// landed before their task acted must not revive them): an expired
    /// waiter never gets the lock.
    fn promote(&self, state: &mut TableState, name: LockName, now: Instant) -> bool {
        let closing = state.closing;
        let Some(entry) = state.locks.get_mut(&name) else {
            return false;
        };
        while let Some((_, next)) = entry.waiters.pop_first() {
            state.waiters -= 1;
            // Skipped: a waiter already told to end, or silent past its
            // lease (unless the simulation's known mistake is switched on).
            let ending = next.is_ending();
            let expired = ending || next.is_silent(self.epoch, now);
            if closing || (expired && !planted_promote_expired_waiter()) {
                self.observer.observe(&Event::WaiterLeft(&next.info));
                if !closing && !ending {
                    next.end_from_outside(EndNotice::Expired);
                }
                continue;
            }
            entry.holder = self.grant(&mut state.tokens, &next, now, true);
            tell_watches(&state.watched, &name, || granted_state(&entry.holder));
            next.wake();
            return true;
        }
        state.locks.remove(&name);
        false
    }

    /// Force-releases the holder of `name` (only if its token is `expected`,
    /// when given); the next waiter is promoted at once. Returns the released
    /// holder, or why nothing was done: nobody holds it, the holder has
    /// another token, or the holder was already ending for another reason
    /// (its lease ran out, the server is shutting down) and ends that way.
    pub(crate) fn force_release(
        &self,
        name: &str,
        expected: Option<u64>,
    ) -> Result<HolderSnapshot, AdminRefused<HolderSnapshot>> {
        let mut state = self.lock_state();
        let state = &mut *state;
        let entry = state.locks.get_mut(name).ok_or(AdminRefused::NotFound)?;
        let snapshot = holder_snapshot(&entry.holder);
        if expected.is_some_and(|token| token != entry.holder.token) {
            return Err(AdminRefused::OtherToken { current: snapshot });
        }
        // The first end notice wins, whoever sets it (the wheel sets
        // Expired without the table's lock): only if it is ours is the
        // holder released here, audited as forced and told ERROR 0x02.
        let ending = entry.holder.slot.end_from_outside(EndNotice::Forced);
        if ending != EndNotice::Forced {
            return Err(AdminRefused::AlreadyEnding {
                session: snapshot,
                ending: ending.into(),
            });
        }
        let now = Instant::now();
        self.released(&entry.holder, now, ReleaseReason::Force);
        released_to_watches(&mut state.watched, &entry.holder, ReleaseReason::Force);
        self.observer.observe(&Event::ForceRelease {
            session: &entry.holder.slot.info,
            token: entry.holder.token,
        });
        let name = entry.holder.slot.info.lock.clone();
        self.promote(state, name, now);
        Ok(snapshot)
    }

    /// Removes the waiter at `remote_addr` (the first in line there, or,
    /// given `claim`, that version 2 claim of the session at that address)
    /// from the queue of `name`; the others keep their order. Returns the
    /// removed waiter, or why nothing was done (as
    /// [`force_release`](Self::force_release)).
    pub(crate) fn kick_waiter(
        &self,
        name: &str,
        remote_addr: SocketAddr,
        claim: Option<u32>,
    ) -> Result<WaiterSnapshot, AdminRefused<WaiterSnapshot>> {
        let mut state = self.lock_state();
        let state = &mut *state;
        let entry = state.locks.get_mut(name).ok_or(AdminRefused::NotFound)?;
        // A linear search, but only on the admin path.
        let (&seq, waiter) = entry
            .waiters
            .iter()
            .find(|(_, w)| {
                w.info.remote_addr == remote_addr
                    && claim.is_none_or(|id| w.info.claim.is_some_and(|c| c.claim == id))
            })
            .ok_or(AdminRefused::NotFound)?;
        let ending = waiter.end_from_outside(EndNotice::Kicked);
        if ending != EndNotice::Kicked {
            return Err(AdminRefused::AlreadyEnding {
                session: waiter_snapshot(waiter),
                ending: ending.into(),
            });
        }
        let waiter = entry.waiters.remove(&seq).ok_or(AdminRefused::NotFound)?;
        state.waiters -= 1;
        self.observer.observe(&Event::KickWaiter(&waiter.info));
        Ok(waiter_snapshot(&waiter))
    }

    /// Stops all future grants (from now on a release promotes nobody and an
    /// ACQUIRE is refused) and tells every session to end.
    pub(crate) fn close(&self) {
        let mut state = self.lock_state();
        state.closing = true;
        for entry in state.locks.values() {
            entry.holder.slot.end_from_outside(EndNotice::Shutdown);
            for waiter in entry.waiters.values() {
                waiter.end_from_outside(EndNotice::Shutdown);
            }
        }
    }

    /// Every lock whose name `filter` accepts, sorted by name.
    ///
    /// The names are copied under the mutex and filtered outside it; the
    /// locks are then taken in chunks of [`SNAPSHOT_CHUNK`], each under the
    /// mutex once, handed fairly to any session waiting for it in between: one
    /// pass over 100,000 locks would hold every grant up for as long as the
    /// whole copy takes (BENCHMARKS.md, "Snapshots of a large table", has
    /// the figures). Each lock is copied whole and consistent; the list
    /// as a whole may mix moments, as the event stream allows (its events
    /// apply idempotently over any snapshot taken after they subscribed).
    pub(crate) fn snapshot(&self, filter: impl Fn(&str) -> bool) -> Vec<LockSnapshot> {
        // Filtered outside the mutex: a costly `?match=` pattern must not
        // hold grants up (BENCHMARKS.md, "Snapshots of a large table").
        let mut names: Vec<LockName> = self.lock_state().locks.keys().cloned().collect();
        names.retain(|name| filter(name.as_str()));
        names.sort_unstable();
        let mut locks = Vec::with_capacity(names.len());
        for chunk in names.chunks(SNAPSHOT_CHUNK) {
            let state = self.lock_state();
            locks.extend(chunk.iter().filter_map(|name| {
                state
                    .locks
                    .get(name)
                    .map(|entry| lock_snapshot(name, entry))
            }));
            MutexGuard::unlock_fair(state);
        }
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

    /// Replaces the value of `slot`'s claim (PROCLAIM): a waiting claim's
    /// grant will carry it; a holder's watches are told VALUE, in the
    /// table's order with its other changes. False when the claim was
    /// ended from outside (expired, revoked, shut down).
    pub(crate) fn proclaim(&self, slot: &Arc<SessionSlot>, value: Option<Arc<str>>) -> bool {
        let mut state = self.lock_state();
        let state = &mut *state;
        if slot.is_ending() {
            return false;
        }
        let Some(entry) = state.locks.get(&slot.info.lock) else {
            // Not in the table yet (held at the startup grace's gate): its
            // grant, made under this lock, will carry the value.
            slot.set_value(value);
            return true;
        };
        if Arc::ptr_eq(&entry.holder.slot, slot) {
            slot.set_value(value);
            let value = slot.value();
            self.observer.observe(&Event::ValueReplaced {
                session: &slot.info,
                token: entry.holder.token,
                value: value.as_deref().unwrap_or(""),
            });
            tell_watches(&state.watched, &slot.info.lock, || LockState {
                event: StateEvent::Value,
                ..granted_state(&entry.holder)
            });
            return true;
        }
        // Waiting in the queue, or at the startup grace's gate.
        slot.set_value(value);
        true
    }

    /// Registers `watch` on its lock, last among the lock's watches, and
    /// returns the lock's state now: its first push (INITIAL). Every change
    /// after this one is pushed to it.
    pub(crate) fn observe(&self, watch: &Arc<Watch>) -> LockState {
        let mut state = self.lock_state();
        let state = &mut *state;
        let seq = state.next_seq;
        state.next_seq += 1;
        watch.seq.store(seq, Ordering::Relaxed);
        let watched = state
            .watched
            .entry(watch.name.clone())
            .or_insert_with(|| Watched {
                watches: BTreeMap::new(),
                last_token: 0,
                freed_ms: 0,
            });
        watched.watches.insert(seq, Arc::clone(watch));
        state_of(state.locks.get(&watch.name), Some(watched))
    }

    /// Unregisters `watches`: nothing more is pushed to them once this
    /// returns. A watch not registered is skipped.
    pub(crate) fn unobserve<'w>(&self, watches: impl IntoIterator<Item = &'w Arc<Watch>>) {
        let mut state = self.lock_state();
        for watch in watches {
            let Some(watched) = state.watched.get_mut(&watch.name) else {
                continue;
            };
            let seq = watch.seq.load(Ordering::Relaxed);
            if watched
                .watches
                .get(&seq)
                .is_some_and(|filed| Arc::ptr_eq(filed, watch))
            {
                watched.watches.remove(&seq);
                watch.retire();
                if watched.watches.is_empty() {
                    state.watched.remove(&watch.name);
                }
            }
        }
    }

    /// The state of `name` now (LOOKUP): FREE or HELD.
    pub(crate) fn lookup(&self, name: &LockName) -> LockState {
        let state = self.lock_state();
        state_of(state.locks.get(name), state.watched.get(name))
    }

    /// Moves what the table queued for `link`'s watches into `into`, in
    /// order, then, for each watch marked since the last look, its lock's
    /// state now, flagged coalesced. Taken under the table's lock when
    /// there are marks, so no change can fall between the queue and the
    /// state read: every push after these is newer.
    pub(crate) fn take_pushes(&self, link: &SessionLink, into: &mut Vec<StatePush>) {
        {
            let mut outbox = link.outbox.lock();
            if outbox.marked.is_empty() {
                into.append(&mut outbox.states);
                return;
            }
            if crate::core::watch::planted_coalesced_push_goes_back() {
                take_pushes_planted(&mut outbox, into);
                if !outbox.marked.is_empty() {
                    link.lease.notify.notify_one();
                }
                return;
            }
        }
        let state = self.lock_state();
        let mut outbox = link.outbox.lock();
        into.append(&mut outbox.states);
        for mark in outbox.take_marks() {
            if !mark.watch.is_live() {
                continue;
            }
            let name = &mark.watch.name;
            into.push(StatePush {
                watch: mark.watch.id,
                state: state_of(state.locks.get(name), state.watched.get(name)),
                coalesced: true,
            });
        }
    }

    /// Watches registered now (for tests).
    #[cfg(test)]
    pub(crate) fn watches(&self) -> usize {
        let state = self.lock_state();
        state.watched.values().map(|w| w.watches.len()).sum()
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
        claim: info.claim,
        value: holder.slot.value().unwrap_or_else(empty_value),
    }
}

fn waiter_snapshot(slot: &SessionSlot) -> WaiterSnapshot {
    let info = &slot.info;
    WaiterSnapshot {
        identity: Arc::clone(&info.identity),
        remote_addr: info.remote_addr,
        queued_at: info.queued_at,
        lease: info.lease,
        claim: info.claim,
        value: slot.value().unwrap_or_else(empty_value),
    }
}

/// The empty value of a snapshot (one allocation per process, not per
/// holder).
fn empty_value() -> Arc<str> {
    static EMPTY: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
    Arc::clone(EMPTY.get_or_init(|| Arc::from("")))
}

/// The GRANTED change of `holder`.
fn granted_state(holder: &Holder) -> LockState {
    LockState {
        event: StateEvent::Granted,
        token: holder.token,
        since_ms: unix_ms(holder.since_wall),
        ended_by: None,
        value: holder.slot.value(),
    }
}

/// The state of a lock with this entry (HELD) or none (FREE, naming the
/// last release its watches were told of, if any).
fn state_of(entry: Option<&LockEntry>, watched: Option<&Watched>) -> LockState {
    match entry {
        Some(entry) => LockState {
            event: StateEvent::Held,
            ..granted_state(&entry.holder)
        },
        None => watched.map_or_else(
            || LockState::free(0, 0),
            |w| LockState::free(w.last_token, w.freed_ms),
        ),
    }
}

/// Pushes the change `change()` builds to every watch of `name`, in their
/// order (built only when the name has watches).
fn tell_watches(
    watched: &HashMap<LockName, Watched>,
    name: &LockName,
    change: impl FnOnce() -> LockState,
) {
    let Some(w) = watched.get(name) else {
        return;
    };
    let change = change();
    for watch in w.watches.values() {
        watch.push(&change);
    }
}

/// Pushes the release of `holder` to the watches of its lock and records
/// it as the lock's last known holder.
fn released_to_watches(
    watched: &mut HashMap<LockName, Watched>,
    holder: &Holder,
    reason: ReleaseReason,
) {
    let Some(w) = watched.get_mut(&holder.slot.info.lock) else {
        return;
    };
    let freed_ms = unix_ms(SystemTime::now());
    w.last_token = holder.token;
    w.freed_ms = freed_ms;
    let change = LockState {
        event: StateEvent::Released,
        token: holder.token,
        since_ms: freed_ms,
        ended_by: Some(ended_by(reason)),
        value: None,
    };
    for watch in w.watches.values() {
        watch.push(&change);
    }
}

fn lock_snapshot(name: &LockName, entry: &LockEntry) -> LockSnapshot {
    LockSnapshot {
        name: name.clone(),
        holder: holder_snapshot(&entry.holder),
        waiters: entry.waiters.values().map(|w| waiter_snapshot(w)).collect(),
    }
}

/// The simulation's planted mistake `coalesced-push-goes-back`: the queue
/// goes first, alone, while the watch goes on being pushed changes once
/// there is room; the marks are taken at a later look, once the queue is
/// empty, each carrying the state as of when its watch was marked, which
/// by then may be older than changes already pushed.
#[cfg(feature = "mutations")]
fn take_pushes_planted(outbox: &mut crate::core::watch::Outbox, into: &mut Vec<StatePush>) {
    if !outbox.states.is_empty() {
        into.append(&mut outbox.states);
        return;
    }
    for mark in outbox.take_marks() {
        if mark.watch.is_live() {
            into.push(StatePush {
                watch: mark.watch.id,
                state: mark.at_mark,
                coalesced: true,
            });
        }
    }
}

#[cfg(not(feature = "mutations"))]
fn take_pushes_planted(_: &mut crate::core::watch::Outbox, _: &mut Vec<StatePush>) {}

/// Whether the simulation planted "promote a waiter whose lease ran out" on
/// this thread (`monolock-mutation`); always false outside the simulation.
#[inline(always)]
fn planted_promote_expired_waiter() -> bool {
    #[cfg(feature = "mutations")]
    {
        monolock_mutation::active(monolock_mutation::Mutation::PromoteExpiredWaiter)
    }
    #[cfg(not(feature = "mutations"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    //! The table's rules, synchronously: no runtime, no sockets. Sessions
    //! are slots whose deadlines the tests set; what the table tells a
    //! session is its token and its end notice.

    use std::{net::SocketAddr, sync::Mutex, time::Duration};

    use monolock_proto::{Lease, LockName};

    use monolock_proto::ext::ReleaseReason as EndedBy;

    use super::*;
    use crate::{core::clock::SystemWallClock, core::events::SessionInfo};

    /// Ownership events as `kind port`, in order.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<String>>);

    impl Observer for Recorder {
        fn observe(&self, event: &Event<'_>) {
            let line = match event {
                Event::Granted { session, .. } => format!("granted {}", session.remote_addr.port()),
                Event::Released {
                    session, reason, ..
                } => format!(
                    "released {} {}",
                    session.remote_addr.port(),
                    reason.as_str()
                ),
                Event::ForceRelease { session, .. } => {
                    format!("force_release {}", session.remote_addr.port())
                }
                Event::KickWaiter(session) => format!("kick_waiter {}", session.remote_addr.port()),
                Event::WaiterLeft(session) => format!("left {}", session.remote_addr.port()),
                Event::EndedByServer {
                    session, reason, ..
                } => format!(
                    "ended_by_server {} {}",
                    session.remote_addr.port(),
                    reason.as_str()
                ),
                _ => return,
            };
            self.0.lock().expect("recorder").push(line);
        }
    }

    impl Recorder {
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut *self.0.lock().expect("recorder"))
        }
    }

    fn table() -> (LockTable, Arc<Recorder>) {
        let recorder = Arc::new(Recorder::default());
        let table = LockTable::new(
            Arc::new(SystemWallClock),
            recorder.clone(),
            TokenIssuer::new(&SystemWallClock, None),
        );
        (table, recorder)
    }

    /// A live session on `lock` at `port` (its lease runs an hour from now).
    fn session(table: &LockTable, lock: &str, port: u16) -> Arc<SessionSlot> {
        let info = SessionInfo {
            lock: LockName::new(lock).expect("valid name"),
            lease: Lease::from_duration(Duration::from_secs(3_600)).expect("valid lease"),
            remote_addr: SocketAddr::from(([127, 0, 0, 1], port)),
            identity: Arc::from(""),
            queued_at: SystemTime::now(),
            claim: None,
        };
        let now = Instant::now();
        let slot = Arc::new(SessionSlot::new(info, now));
        table.touch(&slot, now);
        slot
    }

    /// Lock `l` held by port 1 with `waiters` queued behind it (ports 2,
    /// 3, ...), the events so far taken.
    fn line(
        waiters: u16,
    ) -> (
        LockTable,
        Arc<Recorder>,
        Arc<SessionSlot>,
        Vec<Arc<SessionSlot>>,
    ) {
        let (table, events) = table();
        let holder = session(&table, "l", 1);
        table.acquire(&holder);
        let queued: Vec<_> = (2..2 + waiters)
            .map(|port| session(&table, "l", port))
            .collect();
        for waiter in &queued {
            assert_eq!(table.acquire(waiter), Acquired::Queued);
        }
        events.take();
        (table, events, holder, queued)
    }

    fn queue(table: &LockTable, name: &str) -> Vec<u16> {
        table
            .lock(name)
            .map(|lock| lock.waiters.iter().map(|w| w.remote_addr.port()).collect())
            .unwrap_or_default()
    }

    fn holder(table: &LockTable, name: &str) -> Option<u16> {
        table.lock(name).map(|lock| lock.holder.remote_addr.port())
    }

    /// A session the server closes keeps what it holds (the caller releases
    /// it at the lease's end) and leaves the queues it waits in at once.
    #[test]
    fn a_server_chosen_ending_keeps_held_claims_and_drops_waiting_ones() {
        let (table, events, first, _queued) = line(1);
        let other = session(&table, "m", 9);
        table.acquire(&other);
        // Port 1 also waits on `m`.
        let waiting = {
            let info = SessionInfo {
                lock: LockName::new("m").expect("valid name"),
                ..first.info.clone()
            };
            let slot = Arc::new(SessionSlot::new(info, Instant::now()));
            assert_eq!(table.acquire(&slot), Acquired::Queued);
            slot
        };
        events.take();
        let release_at = Instant::now() + Duration::from_secs(3);
        let held =
            table.end_waiting_keep_held([&first, &waiting], ReleaseReason::IoTimeout, release_at);
        assert_eq!(held.len(), 1);
        assert!(Arc::ptr_eq(&held[0], &first));
        assert_eq!(events.take(), ["ended_by_server 1 io_timeout", "left 1"]);
        assert_eq!(holder(&table, "l"), Some(1));
        assert_eq!(queue(&table, "l"), [2]);
        assert_eq!(queue(&table, "m"), Vec::<u16>::new());
        // The release at the lease's end hands the lock on.
        table.end_claims(&held, ReleaseReason::IoTimeout);
        assert_eq!(events.take(), ["released 1 io_timeout", "granted 2"]);
    }

    #[test]
    fn a_snapshot_of_many_chunks_is_whole_sorted_and_filtered() {
        let (table, _) = table();
        let count = 3 * SNAPSHOT_CHUNK + 7;
        // Granted in an order unlike the names' (a stride coprime to count).
        let mut slots = Vec::new();
        for i in 0..count {
            let n = (i * 7) % count;
            let slot = session(&table, &format!("job-{n:05}"), 1);
            table.acquire(&slot);
            slots.push(slot);
        }
        let waiters: Vec<_> = [2, 3].map(|port| session(&table, "job-00300", port)).into();
        for waiter in &waiters {
            assert_eq!(table.acquire(waiter), Acquired::Queued);
        }
        let all = table.snapshot(|_| true);
        let names: Vec<String> = all.iter().map(|l| l.name.as_str().to_owned()).collect();
        let expected: Vec<String> = (0..count).map(|n| format!("job-{n:05}")).collect();
        assert_eq!(names, expected);
        let queued = all
            .iter()
            .find(|l| l.name.as_str() == "job-00300")
            .expect("job-00300");
        let ports: Vec<u16> = queued
            .waiters
            .iter()
            .map(|w| w.remote_addr.port())
            .collect();
        assert_eq!(ports, [2, 3]);
        let some = table.snapshot(|name| name.ends_with('5'));
        assert_eq!(some.len(), (0..count).filter(|n| n % 10 == 5).count());
        assert!(some.iter().all(|l| l.name.as_str().ends_with('5')));
        assert!(some.windows(2).all(|w| w[0].name < w[1].name));
    }

    /// Long enough that only a real hang trips it.
    const PATIENCE: Duration = Duration::from_secs(10);

    #[test]
    fn a_slow_snapshot_filter_never_holds_a_grant_up() {
        let (table, _) = table();
        let table = Arc::new(table);
        let held = session(&table, "held", 1);
        table.acquire(&held);
        let (filtering, filter_started) = std::sync::mpsc::channel();
        let (go, filter_may_end) = std::sync::mpsc::channel::<()>();
        let snapshotting = std::thread::spawn({
            let table = Arc::clone(&table);
            move || {
                table.snapshot(|_| {
                    let _ = filtering.send(());
                    let _ = filter_may_end.recv_timeout(PATIENCE);
                    true
                })
            }
        });
        filter_started
            .recv_timeout(PATIENCE)
            .expect("the filter runs");
        // The filter is stuck: a grant must still go through.
        let (granted, grant_done) = std::sync::mpsc::channel();
        std::thread::spawn({
            let table = Arc::clone(&table);
            move || {
                let fresh = session(&table, "fresh", 2);
                let _ = granted.send(table.acquire(&fresh));
            }
        });
        let result = grant_done.recv_timeout(PATIENCE);
        drop(go);
        assert!(
            matches!(result, Ok(Acquired::Granted(_))),
            "the grant waited for the filter: {result:?}"
        );
        let snapshot = snapshotting.join().expect("snapshot");
        assert!(snapshot.iter().any(|lock| lock.name.as_str() == "held"));
    }

    #[test]
    fn the_first_is_granted_the_rest_queue_in_order() {
        let (table, events) = table();
        let a = session(&table, "l", 1);
        let Acquired::Granted(token) = table.acquire(&a) else {
            panic!("a free lock is granted")
        };
        assert_eq!(a.granted_token(), Some(token));
        let waiters: Vec<_> = (2..6).map(|port| session(&table, "l", port)).collect();
        for w in &waiters {
            assert_eq!(table.acquire(w), Acquired::Queued);
            assert_eq!(w.granted_token(), None);
        }
        assert_eq!(queue(&table, "l"), [2, 3, 4, 5]);
        assert_eq!(
            table.counts(),
            TableCounts {
                locks: 1,
                waiters: 4
            }
        );
        assert_eq!(events.take(), ["granted 1"]);
    }

    #[test]
    fn a_release_promotes_the_first_waiter_with_a_greater_token() {
        let (table, events, a, w) = line(2);
        let first = a.granted_token().expect("a holds");
        let b = &w[0];
        assert!(table.end(&a, ReleaseReason::Graceful), "b promoted");
        let second = b.granted_token().expect("b granted");
        assert!(second > first);
        assert_eq!(holder(&table, "l"), Some(2));
        assert_eq!(queue(&table, "l"), [3]);
        assert_eq!(events.take(), ["released 1 graceful", "granted 2"]);
        // Ending twice is a no-op.
        assert!(!table.end(&a, ReleaseReason::Graceful));
        assert!(events.take().is_empty());
    }

    /// Leaving from the middle, the back and the front keeps the others'
    /// order, and the lock is forgotten with its last session.
    #[test]
    fn waiters_leave_from_anywhere_and_keep_the_order() {
        let (table, events, a, w) = line(5);
        for (leaving, left) in [
            (3_usize, vec![2, 4, 5, 6]),
            (6, vec![2, 4, 5]),
            (2, vec![4, 5]),
        ] {
            let s = &w[leaving - 2];
            assert!(!table.end(s, ReleaseReason::Graceful));
            assert_eq!(queue(&table, "l"), left);
        }
        assert_eq!(table.counts().waiters, 2);
        assert!(table.end(&a, ReleaseReason::Graceful));
        assert_eq!(holder(&table, "l"), Some(4));
        table.end(&w[2], ReleaseReason::Graceful);
        table.end(&w[3], ReleaseReason::Graceful);
        assert_eq!(table.counts(), TableCounts::default());
        assert_eq!(
            events.take(),
            [
                "left 3",
                "left 6",
                "left 2",
                "released 1 graceful",
                "granted 4",
                "released 4 graceful",
                "granted 5",
                "released 5 graceful"
            ]
        );
    }

    #[test]
    fn a_silent_waiter_is_skipped_and_told_it_expired() {
        let (table, events, a, w) = line(2);
        let b = &w[0];
        b.set_deadline_nanos(0);
        assert!(table.end(&a, ReleaseReason::Graceful));
        assert_eq!(b.granted_token(), None);
        assert_eq!(b.end_notice(), Some(EndNotice::Expired));
        assert_eq!(holder(&table, "l"), Some(3));
        assert_eq!(
            events.take(),
            ["released 1 graceful", "left 2", "granted 3"]
        );
    }

    /// The wheel expired the waiter; before its task acted, a heartbeat
    /// moved its deadline on. It is still never granted: no token burned,
    /// no grant audited to an expired session.
    #[test]
    fn an_expired_waiter_is_never_granted_even_after_a_late_heartbeat() {
        let (table, events, a, w) = line(1);
        let b = &w[0];
        b.end_from_outside(EndNotice::Expired); // the wheel
        table.touch(b, Instant::now()); // the late heartbeat
        assert!(!table.end(&a, ReleaseReason::Graceful));
        assert_eq!(b.granted_token(), None);
        assert_eq!(b.end_notice(), Some(EndNotice::Expired));
        assert_eq!(table.counts(), TableCounts::default());
        assert_eq!(events.take(), ["released 1 graceful", "left 2"]);
        // Its task ends it later: nothing more happens.
        assert!(!table.end(b, ReleaseReason::Expired));
        assert!(events.take().is_empty());
    }

    #[test]
    fn force_release_ends_the_holder_and_promotes() {
        let (table, events, a, w) = line(1);
        let b = &w[0];
        let released = table.force_release("l", None).expect("forced");
        assert_eq!(released.remote_addr.port(), 1);
        assert_eq!(a.end_notice(), Some(EndNotice::Forced));
        assert!(b.granted_token().is_some());
        assert_eq!(
            events.take(),
            ["released 1 force", "force_release 1", "granted 2"]
        );
        // The forced session's own end is then a no-op.
        assert!(!table.end(&a, ReleaseReason::Force));
        assert_eq!(
            table.force_release("none", None),
            Err(AdminRefused::NotFound)
        );
        assert!(events.take().is_empty());
    }

    /// A conditional force-release names the grant: another token changes
    /// nothing and names the current holder, so repeating the command never
    /// releases the next holder.
    #[test]
    fn force_release_with_a_token_releases_only_that_grant() {
        let (table, events, a, _w) = line(1);
        let token = a.granted_token().expect("granted");
        match table.force_release("l", Some(token + 1)) {
            Err(AdminRefused::OtherToken { current }) => assert_eq!(current.token, token),
            other => panic!("expected OtherToken, got {other:?}"),
        }
        assert_eq!(a.end_notice(), None);
        assert!(events.take().is_empty());
        let released = table.force_release("l", Some(token)).expect("forced");
        assert_eq!(released.token, token);
        assert_eq!(a.end_notice(), Some(EndNotice::Forced));
    }

    /// A force-release that reaches a holder the wheel has just expired
    /// does nothing and says so; the holder ends as expired.
    #[test]
    fn force_release_after_expiry_reports_it_and_changes_nothing() {
        let (table, events, a, _w) = line(1);
        a.end_from_outside(EndNotice::Expired); // the wheel
        match table.force_release("l", None) {
            Err(AdminRefused::AlreadyEnding { session, ending }) => {
                assert_eq!(session.remote_addr.port(), 1);
                assert_eq!(ending, Ending::LeaseExpired);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(a.end_notice(), Some(EndNotice::Expired));
        assert_eq!(holder(&table, "l"), Some(1));
        assert!(events.take().is_empty(), "nothing audited as forced");
        // Its task ends it as expired, and b is promoted then.
        assert!(table.end(&a, ReleaseReason::Expired));
        assert_eq!(events.take(), ["released 1 expired", "granted 2"]);
    }

    #[test]
    fn kick_removes_one_waiter_unless_it_is_already_ending() {
        let (table, events, _a, w) = line(3);
        let addr = |port| SocketAddr::from(([127, 0, 0, 1], port));
        let kicked = table.kick_waiter("l", addr(3), None).expect("kicked");
        assert_eq!(kicked.remote_addr.port(), 3);
        assert_eq!(w[1].end_notice(), Some(EndNotice::Kicked));
        assert_eq!(queue(&table, "l"), [2, 4]);
        assert_eq!(
            table.kick_waiter("l", addr(3), None),
            Err(AdminRefused::NotFound)
        );
        // The wheel got to 4 first.
        w[2].end_from_outside(EndNotice::Expired);
        assert!(matches!(
            table.kick_waiter("l", addr(4), None),
            Err(AdminRefused::AlreadyEnding {
                ending: Ending::LeaseExpired,
                ..
            })
        ));
        assert_eq!(queue(&table, "l"), [2, 4]);
        assert_eq!(events.take(), ["kick_waiter 3"]);
    }

    /// A protocol v2 session's link, its lease running an hour from now.
    fn v2_link(table: &LockTable) -> Arc<crate::core::slot::SessionLink> {
        let lease = session(table, "(v2 session)", 9);
        let link = crate::core::slot::SessionLink::new(1, lease);
        link.idle.store(false, Ordering::Relaxed);
        Arc::new(link)
    }

    /// A claim `id` of `link`'s session on `lock`, from port `port`.
    fn claim(
        link: &Arc<crate::core::slot::SessionLink>,
        lock: &str,
        port: u16,
        id: u32,
    ) -> Arc<SessionSlot> {
        let info = SessionInfo {
            lock: LockName::new(lock).expect("valid name"),
            lease: link.lease.info.lease,
            remote_addr: SocketAddr::from(([127, 0, 0, 1], port)),
            identity: Arc::from(""),
            queued_at: SystemTime::now(),
            claim: Some(ClaimRef {
                session: link.id,
                claim: id,
            }),
        };
        Arc::new(SessionSlot::new_claim(
            info,
            Instant::now(),
            Arc::clone(link),
            id,
        ))
    }

    /// The wheel expired a v2 session; before its task acted, a frame of
    /// its moved the session's deadline on. Its waiting claim is still
    /// never granted.
    #[test]
    fn a_claim_of_an_ending_session_is_never_granted() {
        let (table, events, a, _w) = line(0);
        let link = v2_link(&table);
        let waiting = claim(&link, "l", 5, 7);
        assert_eq!(table.acquire(&waiting), Acquired::Queued);
        link.lease.end_from_outside(EndNotice::Expired); // the wheel
        table.touch(&link.lease, Instant::now()); // the late frame
        assert!(!table.end(&a, ReleaseReason::Graceful));
        assert_eq!(waiting.granted_token(), None);
        assert_eq!(table.counts(), TableCounts::default());
        assert_eq!(events.take(), ["released 1 graceful", "left 5"]);
    }

    /// Two claims of one session wait on one lock from one address: a kick
    /// naming a claim removes that claim only, and the snapshot names each.
    #[test]
    fn a_kick_naming_a_claim_removes_only_that_claim() {
        let (table, events, _a, _w) = line(0);
        let link = v2_link(&table);
        let first = claim(&link, "l", 5, 7);
        let second = claim(&link, "l", 5, 8);
        assert_eq!(table.acquire(&first), Acquired::Queued);
        assert_eq!(table.acquire(&second), Acquired::Queued);
        events.take();
        let kicked = table
            .kick_waiter("l", SocketAddr::from(([127, 0, 0, 1], 5)), Some(8))
            .expect("kicked");
        let named = |session, claim| Some(ClaimRef { session, claim });
        assert_eq!(kicked.claim, named(1, 8));
        assert_eq!(second.end_notice(), Some(EndNotice::Kicked));
        assert_eq!(first.end_notice(), None);
        let lock = table.lock("l").expect("held");
        let left: Vec<_> = lock.waiters.iter().map(|w| w.claim).collect();
        assert_eq!(left, [named(1, 7)]);
        assert_eq!(lock.holder.claim, None);
        assert_eq!(
            table.kick_waiter("l", SocketAddr::from(([127, 0, 0, 1], 5)), Some(8)),
            Err(AdminRefused::NotFound)
        );
        assert_eq!(events.take(), ["kick_waiter 5"]);
    }

    /// A claim's grant and its revocation reach its session's task as its
    /// id, and the session's end ends every claim in one step.
    #[test]
    fn claims_wake_their_session_and_end_together() {
        let (table, events) = table();
        let link = v2_link(&table);
        let held = claim(&link, "x", 5, 1);
        let other = session(&table, "y", 2);
        let waiting = claim(&link, "y", 5, 2);
        let behind = session(&table, "x", 3);
        assert!(matches!(table.acquire(&held), Acquired::Granted(_)));
        assert!(matches!(table.acquire(&other), Acquired::Granted(_)));
        assert_eq!(table.acquire_or(&waiting, false), Acquired::Busy);
        assert_eq!(table.acquire(&waiting), Acquired::Queued);
        assert_eq!(table.acquire(&behind), Acquired::Queued);
        assert!(table.end(&other, ReleaseReason::Graceful));
        assert!(waiting.granted_token().is_some());
        assert_eq!(std::mem::take(&mut *link.changed.lock()), [2]);
        events.take();
        assert!(table.end_claims([&held, &waiting], ReleaseReason::Expired));
        assert_eq!(holder(&table, "x"), Some(3));
        assert_eq!(holder(&table, "y"), None);
        assert_eq!(
            events.take(),
            ["released 5 expired", "granted 3", "released 5 expired"]
        );
    }

    /// A session that holds a lock and also queues behind itself on it
    /// ends: the lock goes to the next live waiter, never to the ending
    /// session's own queued claim (no grant, no token for a dead session),
    /// whatever order the session hands its claims over in.
    #[test]
    fn an_ending_session_never_hands_a_lock_to_its_own_queued_claim() {
        for held_first in [true, false] {
            let (table, events) = table();
            let link = v2_link(&table);
            let held = claim(&link, "x", 5, 1);
            let again = claim(&link, "x", 5, 2);
            assert!(matches!(table.acquire(&held), Acquired::Granted(_)));
            assert_eq!(table.acquire(&again), Acquired::Queued);
            let behind = session(&table, "x", 3);
            assert_eq!(table.acquire(&behind), Acquired::Queued);
            events.take();
            let order = if held_first {
                [&held, &again]
            } else {
                [&again, &held]
            };
            assert!(table.end_claims(order, ReleaseReason::Graceful));
            assert_eq!(again.granted_token(), None, "held first: {held_first}");
            assert_eq!(holder(&table, "x"), Some(3));
            assert_eq!(
                events.take(),
                ["left 5", "released 5 graceful", "granted 3"],
                "held first: {held_first}"
            );
        }
    }

    /// A watch of `link`'s session on `lock`, registered; its INITIAL
    /// state.
    fn watch(
        table: &LockTable,
        link: &Arc<crate::core::slot::SessionLink>,
        id: u32,
        lock: &str,
    ) -> (Arc<Watch>, LockState) {
        let name = LockName::new(lock).expect("valid name");
        let watch = Arc::new(Watch::new(Arc::clone(link), id, name));
        let initial = table.observe(&watch);
        (watch, initial)
    }

    fn take(table: &LockTable, link: &crate::core::slot::SessionLink) -> Vec<StatePush> {
        let mut pushes = Vec::new();
        table.take_pushes(link, &mut pushes);
        pushes
    }

    /// Every grant, value and release reaches the watch in the table's
    /// order; a hand-on is RELEASED then GRANTED; a new watch of a free
    /// lock names the last token it knows; UNOBSERVE stops the pushes.
    #[test]
    fn watches_are_told_every_change_in_order() {
        let (table, _events) = table();
        let link = v2_link(&table);
        let (first_watch, initial) = watch(&table, &link, 1, "l");
        assert_eq!(initial, LockState::free(0, 0));
        let a = session(&table, "l", 1);
        let b = session(&table, "l", 2);
        a.set_value(Some(Arc::from("10.0.0.7:9000")));
        let Acquired::Granted(first) = table.acquire(&a) else {
            panic!("granted")
        };
        assert_eq!(table.acquire(&b), Acquired::Queued);
        assert!(table.proclaim(&b, Some(Arc::from("10.0.0.8:9000"))));
        assert!(table.proclaim(&a, Some(Arc::from("10.0.0.7:9001"))));
        assert!(table.end(&a, ReleaseReason::Expired));
        let second = b.granted_token().expect("b granted");
        let seen: Vec<(StateEvent, u64, String, Option<EndedBy>)> = take(&table, &link)
            .into_iter()
            .map(|push| {
                assert!(!push.coalesced);
                assert_eq!(push.watch, 1);
                let value = push.state.value_str().to_owned();
                (
                    push.state.event,
                    push.state.token,
                    value,
                    push.state.ended_by,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (StateEvent::Granted, first, "10.0.0.7:9000".to_owned(), None),
                (StateEvent::Value, first, "10.0.0.7:9001".to_owned(), None),
                (
                    StateEvent::Released,
                    first,
                    String::new(),
                    Some(EndedBy::Expired)
                ),
                (
                    StateEvent::Granted,
                    second,
                    "10.0.0.8:9000".to_owned(),
                    None
                ),
            ]
        );
        assert_eq!(
            table.lookup(&LockName::new("l").expect("name")).token,
            second
        );
        table.force_release("l", None).expect("forced");
        let released = take(&table, &link);
        assert_eq!(released.len(), 1);
        assert_eq!(released[0].state.ended_by, Some(EndedBy::Forced));
        let (_second_watch, initial) = watch(&table, &link, 2, "l");
        assert_eq!((initial.event, initial.token), (StateEvent::Free, second));
        table.unobserve([&first_watch]);
        assert!(!first_watch.is_live());
        assert_eq!(table.watches(), 1);
        let c = session(&table, "l", 3);
        assert!(matches!(table.acquire(&c), Acquired::Granted(_)));
        let pushes = take(&table, &link);
        assert_eq!(pushes.iter().map(|p| p.watch).collect::<Vec<_>>(), [2]);
    }

    /// An outbox holds at most `MAX_QUEUED_STATES` pushes: a change that
    /// finds it full is dropped and its watch marked; the next look takes
    /// the queue, then the lock's state now, COALESCED, and nothing goes
    /// back after it.
    #[test]
    fn a_full_outbox_coalesces_to_the_state_now() {
        let (table, _events) = table();
        let link = v2_link(&table);
        let (_watch, _) = watch(&table, &link, 7, "hot");
        let mut last = 0;
        let mut holder = session(&table, "hot", 0);
        for port in 0..200 {
            holder = session(&table, "hot", port);
            let Acquired::Granted(token) = table.acquire(&holder) else {
                panic!("granted")
            };
            last = token;
            if port < 199 {
                table.end(&holder, ReleaseReason::Graceful);
            }
        }
        {
            let outbox = link.outbox.lock();
            assert_eq!(outbox.states.len(), crate::core::watch::MAX_QUEUED_STATES);
            assert_eq!(outbox.marked.len(), 1);
        }
        let pushes = take(&table, &link);
        assert_eq!(pushes.len(), crate::core::watch::MAX_QUEUED_STATES + 1);
        let tokens: Vec<u64> = pushes.iter().map(|p| p.state.token).collect();
        assert!(tokens.is_sorted(), "{tokens:?}");
        let coalesced = pushes.last().expect("pushes");
        assert!(coalesced.coalesced);
        assert_eq!(
            (coalesced.state.event, coalesced.state.token),
            (StateEvent::Held, last)
        );
        assert!(pushes[..pushes.len() - 1].iter().all(|p| !p.coalesced));
        // The mark is gone: the next change is queued again, newer.
        assert!(take(&table, &link).is_empty());
        table.end(&holder, ReleaseReason::Graceful);
        let next = take(&table, &link);
        assert_eq!(next.len(), 1);
        assert!(!next[0].coalesced);
        assert_eq!(
            (next[0].state.event, next[0].state.token),
            (StateEvent::Released, last)
        );
    }

    #[test]
    fn close_ends_everyone_and_grants_nothing_more() {
        let (table, events, a, w) = line(1);
        let b = &w[0];
        table.close();
        for s in [&a, b] {
            assert_eq!(s.end_notice(), Some(EndNotice::Shutdown));
        }
        assert_eq!(
            table.acquire(&session(&table, "m", 3)),
            Acquired::ShuttingDown
        );
        assert!(!table.end(&a, ReleaseReason::Shutdown), "nobody promoted");
        assert_eq!(b.granted_token(), None);
        assert!(matches!(
            table.force_release("l", None),
            Err(AdminRefused::NotFound)
        ));
        assert_eq!(events.take(), ["released 1 shutdown", "left 2"]);
    }
}
