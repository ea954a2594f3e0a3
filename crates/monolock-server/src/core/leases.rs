//! Lease expiry for every session, from one timer wheel.
//!
//! A heartbeat only stores the session's new deadline (an atomic in its
//! [`SessionSlot`]); nothing here runs for it. The wheel files each session
//! under the millisecond its deadline falls in and looks at it again only
//! when that millisecond comes: a session whose deadline has moved on in the
//! meantime is filed again further out (lazily, once per look, however many
//! heartbeats came in between); one whose deadline has passed is told it
//! expired through its end notice, and its own task ends it as usual.
//!
//! Why not one tokio `Sleep` per session: each adds to its task's memory, a
//! reset that moves it earlier takes the timer driver's lock, and tokio's
//! hierarchical wheel moves every entry of a 4.096 s level at once, which at
//! tens of thousands of sessions stalls the runtime every 4 s (BENCHMARKS.md,
//! "Server-side observations", has the figures). Here a look is one slot at
//! a time, and a session costs one pointer in a slot plus its position.
//!
//! Expiry is never early (a session is expired only once its deadline is
//! `<=` now) and no later than a timer of its own would fire: the driver
//! sleeps until the earliest deadline of the next non-empty slot, not to
//! the slot's end, so only the runtime timer's millisecond rounding is
//! added.

use std::sync::{
    Arc, Mutex, MutexGuard, PoisonError,
    atomic::{AtomicBool, Ordering},
};

use tokio::{sync::Notify, time::Instant};
use tokio_util::sync::CancellationToken;

use crate::core::slot::{EndNotice, Epoch, NOT_FILED, SessionSlot};

/// Width of one slot, in nanoseconds (1 ms).
const TICK_NANOS: u64 = 1_000_000;
/// Slots in the wheel: 16.4 s at 1 ms, so a 10 s lease is filed once and
/// looked at once; longer leases are filed at the far end and looked at
/// again every 16.4 s.
const SLOTS: u64 = 16_384;

/// The wheel of every session's lease deadline.
pub(crate) struct LeaseWheel {
    /// Deadlines are nanoseconds since this instant (the table's epoch).
    epoch: Epoch,
    state: Mutex<WheelState>,
    /// Woken when a session is filed earlier than the driver's next look.
    wake: Notify,
    /// Whether a driver task is running (started with the first session,
    /// again if the runtime that ran it went away).
    driving: AtomicBool,
    /// Stops the driver (when the table is dropped).
    stop: CancellationToken,
}

struct WheelState {
    /// `slots[tick % SLOTS]`: sessions to look at when `tick` comes.
    slots: Box<[Vec<Arc<SessionSlot>>]>,
    /// The first tick not looked at yet.
    next_tick: u64,
    /// Sessions filed.
    len: usize,
    /// When the driver looks next, in nanoseconds since the epoch
    /// (`u64::MAX`: when woken).
    sleeping_until: u64,
}

impl LeaseWheel {
    pub(crate) fn new(epoch: Epoch) -> Self {
        Self {
            epoch,
            state: Mutex::new(WheelState {
                slots: (0..SLOTS).map(|_| Vec::new()).collect(),
                next_tick: 0,
                len: 0,
                sleeping_until: u64::MAX,
            }),
            wake: Notify::new(),
            driving: AtomicBool::new(false),
            stop: CancellationToken::new(),
        }
    }

    /// Ends the driver task.
    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }

    fn lock(&self) -> MutexGuard<'_, WheelState> {
        // Nothing panics while the guard is held; the state is consistent
        // between operations either way.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts watching `slot`'s deadline (called once, when its session has
    /// a valid ACQUIRE). Must run inside a tokio runtime.
    pub(crate) fn watch(self: &Arc<Self>, slot: &Arc<SessionSlot>) {
        if !self.driving.swap(true, Ordering::AcqRel) {
            tokio::spawn(drive(Arc::clone(self)));
        }
        let mut state = self.lock();
        let earliest = state.next_tick;
        state.file(Arc::clone(slot), earliest);
        let deadline = slot.deadline_nanos();
        if deadline < state.sleeping_until {
            state.sleeping_until = deadline;
            self.wake.notify_one();
        }
    }

    /// Stops watching `slot` (its session ended). A no-op if it was not
    /// filed, e.g. because the wheel already expired it.
    pub(crate) fn forget(&self, slot: &SessionSlot) {
        let mut state = self.lock();
        let pos = slot.wheel_pos.load(Ordering::Relaxed);
        if pos == NOT_FILED {
            return;
        }
        let (index, at) = unpack(pos);
        let filed_here = state.slots[index]
            .get(at)
            .is_some_and(|filed| std::ptr::eq(Arc::as_ptr(filed), slot));
        if filed_here {
            state.remove(index, at);
        }
    }

    /// Expires every session due by now and files again those whose
    /// deadline moved; returns when to look next, if anything is filed.
    fn advance(&self) -> Option<Instant> {
        let now = self.epoch.nanos(Instant::now());
        let now_tick = now / TICK_NANOS;
        let mut state = self.lock();
        if state.len == 0 {
            state.next_tick = state.next_tick.max(now_tick + 1);
            state.sleeping_until = u64::MAX;
            return None;
        }
        // Slots whose whole millisecond has passed. Behind by more than a
        // turn, every slot is due once.
        let from = state.next_tick.max((now_tick + 1).saturating_sub(SLOTS));
        for tick in from..=now_tick {
            state.look_at(tick, now);
        }
        state.next_tick = state.next_tick.max(now_tick + 1);
        let next = state.next_look(now);
        state.sleeping_until = next.unwrap_or(u64::MAX);
        next.map(|nanos| self.epoch.instant(nanos))
    }
}

impl WheelState {
    /// Files `slot` under its deadline's tick, but not before `earliest` nor
    /// a whole turn after it.
    fn file(&mut self, slot: Arc<SessionSlot>, earliest: u64) {
        let deadline = slot.deadline_nanos();
        let tick = deadline
            .div_ceil(TICK_NANOS)
            .clamp(earliest, earliest + SLOTS - 1);
        let index = slot_index(tick);
        let bucket = &mut self.slots[index];
        slot.wheel_pos
            .store(pack(index, bucket.len()), Ordering::Relaxed);
        bucket.push(slot);
        self.len += 1;
    }

    /// Expires the sessions of `tick` whose deadline has passed and files
    /// the others again.
    fn look_at(&mut self, tick: u64, now: u64) {
        let index = slot_index(tick);
        if self.slots[index].is_empty() {
            return;
        }
        let due = std::mem::take(&mut self.slots[index]);
        self.len -= due.len();
        for slot in due {
            if slot.deadline_nanos() <= now {
                slot.wheel_pos.store(NOT_FILED, Ordering::Relaxed);
                slot.end_from_outside(EndNotice::Expired);
            } else {
                self.file(slot, tick + 1);
            }
        }
    }

    /// Takes the session at `at` of slot `index` out of the wheel.
    fn remove(&mut self, index: usize, at: usize) -> Arc<SessionSlot> {
        let bucket = &mut self.slots[index];
        let slot = bucket.swap_remove(at);
        if let Some(moved) = bucket.get(at) {
            moved.wheel_pos.store(pack(index, at), Ordering::Relaxed);
        }
        slot.wheel_pos.store(NOT_FILED, Ordering::Relaxed);
        self.len -= 1;
        slot
    }

    /// The earliest deadline in the first non-empty slot (the slot still in
    /// progress may hold some already due: they are expired here), so the
    /// driver wakes at a deadline and not at the end of its millisecond.
    fn next_look(&mut self, now: u64) -> Option<u64> {
        loop {
            let tick = self.next_filed()?;
            let index = slot_index(tick);
            // A deadline past the slot's end was moved by heartbeats; the
            // slot's end is when it is filed again.
            let mut wake = tick.saturating_mul(TICK_NANOS);
            let mut at = 0;
            while at < self.slots[index].len() {
                let deadline = self.slots[index][at].deadline_nanos();
                if deadline <= now {
                    self.remove(index, at).end_from_outside(EndNotice::Expired);
                } else {
                    wake = wake.min(deadline);
                    at += 1;
                }
            }
            if !self.slots[index].is_empty() {
                return Some(wake);
            }
        }
    }

    /// The first tick from `next_tick` on with a session filed.
    fn next_filed(&self) -> Option<u64> {
        (self.next_tick..self.next_tick + SLOTS)
            .find(|&tick| !self.slots[slot_index(tick)].is_empty())
    }
}

fn slot_index(tick: u64) -> usize {
    // SLOTS fits in usize on every target this builds for.
    (tick % SLOTS) as usize
}

fn pack(index: usize, at: usize) -> u64 {
    ((index as u64) << 32) | at as u64
}

fn unpack(pos: u64) -> (usize, usize) {
    ((pos >> 32) as usize, (pos & u64::from(u32::MAX)) as usize)
}

/// Clears `driving` when the driver stops, however it stops (shutdown, or
/// its runtime going away), so the next session starts a new one.
struct Driving(Arc<LeaseWheel>);

impl Drop for Driving {
    fn drop(&mut self) {
        self.0.driving.store(false, Ordering::Release);
    }
}

async fn drive(wheel: Arc<LeaseWheel>) {
    let driving = Driving(wheel);
    let wheel = &driving.0;
    loop {
        let next = wheel.advance();
        tokio::select! {
            biased;
            () = wheel.stop.cancelled() => return,
            () = wheel.wake.notified() => {}
            () = sleep_until(next) => {}
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::{
        net::SocketAddr,
        time::{Duration, SystemTime},
    };

    use monolock_proto::{Lease, LockName};

    use super::*;
    use crate::core::events::SessionInfo;

    fn slot(deadline: Duration) -> Arc<SessionSlot> {
        let info = SessionInfo {
            lock: LockName::new("wheel").expect("valid name"),
            lease: Lease::from_duration(Duration::from_secs(1)).expect("valid lease"),
            remote_addr: SocketAddr::from(([127, 0, 0, 1], 1)),
            identity: Arc::from(""),
            queued_at: SystemTime::now(),
            claim: None,
        };
        let slot = Arc::new(SessionSlot::new(info, Instant::now()));
        slot.set_deadline_nanos(u64::try_from(deadline.as_nanos()).expect("small"));
        slot
    }

    /// Waits for `slot`'s end notice; returns when it came, since `start`.
    async fn expired_after(slot: Arc<SessionSlot>, start: Instant) -> Duration {
        loop {
            slot.notify.notified().await;
            if slot.end_notice() == Some(EndNotice::Expired) {
                return start.elapsed();
            }
        }
    }

    #[test]
    fn positions_round_trip() {
        for (index, at) in [
            (0, 0),
            (16_383, 0),
            (7, 123_456),
            (16_383, u32::MAX as usize),
        ] {
            assert_eq!(unpack(pack(index, at)), (index, at));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn forgetting_keeps_the_other_positions_right() {
        let wheel = Arc::new(LeaseWheel::new(Epoch::at(Instant::now())));
        let same = Duration::from_millis(5);
        let (a, b, c) = (slot(same), slot(same), slot(same));
        for s in [&a, &b, &c] {
            wheel.watch(s);
        }
        // a leaves: c moves into its place and must know it.
        wheel.forget(&a);
        wheel.forget(&c);
        assert_eq!(wheel.lock().len, 1);
        wheel.forget(&b);
        wheel.forget(&b);
        assert_eq!(wheel.lock().len, 0);
        for s in [&a, &b, &c] {
            assert_eq!(s.wheel_pos.load(Ordering::Relaxed), NOT_FILED);
            assert_eq!(Arc::strong_count(s), 1, "the wheel still holds a session");
            assert_eq!(s.end_notice(), None);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn expires_at_the_deadline_never_before_even_past_a_whole_turn() {
        let start = Instant::now();
        let wheel = Arc::new(LeaseWheel::new(Epoch::at(start)));
        // Within the first slot, mid-wheel, and two beyond one turn (16.4 s).
        let deadlines = [
            Duration::from_micros(300),
            Duration::from_millis(7_001),
            Duration::from_millis(20_000),
            Duration::from_millis(40_500),
        ];
        let mut waits = tokio::task::JoinSet::new();
        for (i, deadline) in deadlines.into_iter().enumerate() {
            let s = slot(deadline);
            wheel.watch(&s);
            waits.spawn(async move { (i, expired_after(s, start).await) });
        }
        while let Some(joined) = waits.join_next().await {
            let (i, after) = joined.expect("waiter");
            let deadline = deadlines[i];
            assert!(
                after >= deadline && after <= deadline + Duration::from_millis(1),
                "deadline {deadline:?} expired after {after:?}"
            );
        }
        assert_eq!(wheel.lock().len, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_moved_deadline_is_followed() {
        let start = Instant::now();
        let wheel = Arc::new(LeaseWheel::new(Epoch::at(start)));
        let s = slot(Duration::from_millis(10));
        wheel.watch(&s);
        let expiry = tokio::spawn(expired_after(Arc::clone(&s), start));
        tokio::time::sleep(Duration::from_millis(6)).await;
        // What a heartbeat does: store a later deadline, nothing else.
        s.set_deadline_nanos(30_000_000);
        let after = expiry.await.expect("waiter");
        assert!(
            after >= Duration::from_millis(30) && after <= Duration::from_millis(31),
            "{after:?}"
        );
    }

    /// An administrator's force-release that the session's task has not
    /// acted on yet is not turned into a quiet expiry by the wheel.
    #[tokio::test(start_paused = true)]
    async fn expiry_does_not_replace_an_earlier_end_notice() {
        let start = Instant::now();
        let wheel = Arc::new(LeaseWheel::new(Epoch::at(start)));
        let s = slot(Duration::from_millis(5));
        wheel.watch(&s);
        s.end_from_outside(EndNotice::Forced);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(wheel.lock().len, 0, "the wheel did not look at it");
        assert_eq!(s.end_notice(), Some(EndNotice::Forced));
    }

    #[test]
    fn a_new_driver_starts_when_the_old_runtime_is_gone() {
        let runtime = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .expect("runtime")
        };
        let first = runtime();
        let wheel = first.block_on(async {
            let wheel = Arc::new(LeaseWheel::new(Epoch::at(Instant::now())));
            wheel.watch(&slot(Duration::from_secs(3_600)));
            tokio::task::yield_now().await;
            wheel
        });
        assert!(wheel.driving.load(Ordering::Acquire));
        drop(first);
        assert!(
            !wheel.driving.load(Ordering::Acquire),
            "driver outlived its runtime"
        );

        // The wheel's epoch came from the first runtime's clock; the second
        // one must still expire sessions, by its own driver.
        runtime().block_on(async {
            let start = Instant::now();
            let deadline =
                start.saturating_duration_since(wheel.epoch.start()) + Duration::from_millis(50);
            let s = slot(deadline);
            wheel.watch(&s);
            let after = expired_after(s, wheel.epoch.start()).await;
            assert!(
                after >= deadline && after <= deadline + Duration::from_millis(1),
                "{after:?}"
            );
        });
    }
}
