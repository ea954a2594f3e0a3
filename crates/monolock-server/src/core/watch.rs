//! Watches: what an observing session shares with the lock table.
//!
//! A watch ([`Watch`]) is filed in the table under its lock's name, in
//! the order watches were registered. Every change the table makes to a
//! watched lock (a grant, a value replaced, a release) is handed, under
//! the table's lock and in the table's order, to every watch of the name:
//! it is appended to the watch's session's [`Outbox`] and the session's
//! task is woken. The table never waits on a session: appending is a push
//! onto a vector under the outbox's own short lock, and an outbox holding
//! [`MAX_QUEUED_STATES`] pushes not yet taken by its connection takes no
//! more. A change that finds it full is dropped and its watch marked; the
//! session's next look at its outbox (its connection took its writes)
//! takes, together with what is queued and under the table's lock, one
//! state per marked watch as the lock is at that moment, flagged
//! COALESCED (docs/protocol.md, "Watches").
//!
//! Per watch, tokens never go back: the table pushes in its own order, a
//! marked watch takes nothing more until its coalesced state is taken, and
//! that state is read under the table's lock at the same instant the
//! queue is taken, so every later push is newer.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::SystemTime,
};

use monolock_proto::{
    LockName,
    ext::{ReleaseReason as EndedBy, StateEvent},
};

use crate::core::{events::ReleaseReason, slot::SessionLink};

/// The most STATE pushes a session keeps queued by the table and not yet
/// taken by its connection (docs/protocol.md, "Watches").
pub(crate) const MAX_QUEUED_STATES: usize = 256;

/// How a release for `reason` is told to watches.
pub(crate) fn ended_by(reason: ReleaseReason) -> EndedBy {
    match reason {
        ReleaseReason::Graceful => EndedBy::Released,
        ReleaseReason::Expired => EndedBy::Expired,
        ReleaseReason::Force => EndedBy::Forced,
        // A shutdown is the server ending every session.
        ReleaseReason::IoTimeout | ReleaseReason::ProtocolError | ReleaseReason::Shutdown => {
            EndedBy::EndedByServer
        }
    }
}

/// A lock's state or a change of it, as a watch is told (the wire's
/// `state`, without the flags, which the session adds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LockState {
    pub(crate) event: StateEvent,
    /// The holder's token; the ended claim's (RELEASED); the last holder's
    /// if known (FREE), else 0.
    pub(crate) token: u64,
    /// Wall clock, ms since the Unix epoch, of the grant (HELD, GRANTED,
    /// VALUE) or of becoming free (FREE, RELEASED); 0 if unknown.
    pub(crate) since_ms: u64,
    /// Set for RELEASED only.
    pub(crate) ended_by: Option<EndedBy>,
    /// The holder's value (HELD, GRANTED, VALUE); `None` when empty.
    pub(crate) value: Option<Arc<str>>,
}

impl LockState {
    /// The lock is free; its last holder had `token` (0: unknown), freed at
    /// `since_ms`.
    pub(crate) fn free(token: u64, since_ms: u64) -> Self {
        Self {
            event: StateEvent::Free,
            token,
            since_ms,
            ended_by: None,
            value: None,
        }
    }

    /// The state a change leaves the lock in (FREE after RELEASED, HELD
    /// after GRANTED or VALUE).
    #[cfg(feature = "mutations")]
    pub(crate) fn settled(&self) -> Self {
        let event = match self.event {
            StateEvent::Free | StateEvent::Released => StateEvent::Free,
            StateEvent::Held | StateEvent::Granted | StateEvent::Value => StateEvent::Held,
        };
        Self {
            event,
            ended_by: None,
            ..self.clone()
        }
    }

    /// The value's text, empty when none.
    pub(crate) fn value_str(&self) -> &str {
        self.value.as_deref().unwrap_or("")
    }
}

/// Milliseconds since the Unix epoch of `at` (0 before it).
pub(crate) fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

/// One watch of a session on one lock name.
pub(crate) struct Watch {
    /// The session it belongs to (its outbox and wake-up).
    pub(crate) link: Arc<SessionLink>,
    /// The watch id the client chose.
    pub(crate) id: u32,
    /// The lock it watches.
    pub(crate) name: LockName,
    /// Its place among the lock's watches; written under the table's lock.
    pub(crate) seq: std::sync::atomic::AtomicU64,
    /// Changes were dropped for it (its outbox was full): its next push is
    /// the state now, coalesced. Read and written under the outbox's lock.
    marked: AtomicBool,
    /// False once it is unregistered from the table (under the table's
    /// lock): a coalesced state is no longer taken for it.
    live: AtomicBool,
}

impl Watch {
    pub(crate) fn new(link: Arc<SessionLink>, id: u32, name: LockName) -> Self {
        Self {
            link,
            id,
            name,
            seq: std::sync::atomic::AtomicU64::new(0),
            marked: AtomicBool::new(false),
            live: AtomicBool::new(true),
        }
    }

    /// Whether it is still registered.
    pub(crate) fn is_live(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }

    /// Unregistered (the table, under its lock).
    pub(crate) fn retire(&self) {
        self.live.store(false, Ordering::Release);
    }

    /// Hands `change` to the watch's session (the table, under its lock):
    /// queued, or dropped with the watch marked when the outbox is full.
    /// Wakes the session's task either way. Never waits on the session.
    pub(crate) fn push(self: &Arc<Self>, change: &LockState) {
        {
            let mut outbox = self.link.outbox.lock();
            let marked = self.marked.load(Ordering::Relaxed);
            let full = outbox.states.len() >= MAX_QUEUED_STATES;
            if full || (marked && !planted_coalesced_push_goes_back()) {
                if !marked {
                    self.marked.store(true, Ordering::Relaxed);
                    outbox.marked.push(Mark {
                        watch: Arc::clone(self),
                        #[cfg(feature = "mutations")]
                        at_mark: change.settled(),
                    });
                }
            } else {
                outbox.states.push(StatePush {
                    watch: self.id,
                    state: change.clone(),
                    coalesced: false,
                });
            }
        }
        self.link.lease.notify.notify_one();
    }
}

/// A STATE push waiting for its session's connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StatePush {
    pub(crate) watch: u32,
    pub(crate) state: LockState,
    /// The state now, after changes of the watch were dropped.
    pub(crate) coalesced: bool,
}

/// A watch whose changes were dropped since its session last looked.
pub(crate) struct Mark {
    pub(crate) watch: Arc<Watch>,
    /// The state the dropped change left (the planted mistake
    /// `coalesced-push-goes-back` pushes this instead of the state now).
    #[cfg(feature = "mutations")]
    pub(crate) at_mark: LockState,
}

/// What the table has for a session's connection: STATE pushes in the
/// table's order, and the watches marked when that queue was full.
#[derive(Default)]
pub(crate) struct Outbox {
    pub(crate) states: Vec<StatePush>,
    pub(crate) marked: Vec<Mark>,
}

impl Outbox {
    /// Everything queued and marked, flags cleared (a session ending).
    pub(crate) fn take_all(&mut self) -> (Vec<StatePush>, Vec<Mark>) {
        (std::mem::take(&mut self.states), self.take_marks())
    }

    /// Clears the marks' flags (under the outbox's lock) and hands them
    /// over.
    pub(crate) fn take_marks(&mut self) -> Vec<Mark> {
        let marks = std::mem::take(&mut self.marked);
        for mark in &marks {
            mark.watch.marked.store(false, Ordering::Relaxed);
        }
        marks
    }
}

/// Whether the simulation planted `coalesced-push-goes-back` on this
/// thread (`monolock-mutation`); always false outside the simulation.
#[inline(always)]
pub(crate) fn planted_coalesced_push_goes_back() -> bool {
    #[cfg(feature = "mutations")]
    {
        monolock_mutation::active(monolock_mutation::Mutation::CoalescedPushGoesBack)
    }
    #[cfg(not(feature = "mutations"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figures docs/operations.md ("Values and observers") gives for
    /// what a value's cell in every claim, a queued push and a watch cost
    /// (on a 64-bit target; the watch's name and a value's bytes are
    /// allocations of their own).
    #[test]
    fn what_values_pushes_and_watches_cost() {
        use std::mem::size_of;
        assert_eq!(size_of::<parking_lot::Mutex<Option<Arc<str>>>>(), 24);
        assert_eq!(size_of::<StatePush>(), 48);
        assert!(size_of::<Watch>() <= 40, "{}", size_of::<Watch>());
    }
}
