//! A watch's mailbox: the states its session's task read for it, waiting
//! for the observer to take them, and how the watch ended.
//!
//! Bounded like the server's outbox: a reader that falls
//! [`MAILBOX_BOUND`] states behind is told only where the lock stands now,
//! flagged coalesced, exactly as the server tells a slow connection. So a
//! stream nobody polls costs one bounded queue, never an unbounded buffer.

use std::{
    collections::VecDeque,
    sync::{Mutex, MutexGuard, PoisonError},
    task::{Context, Poll, Waker},
};

use monolock_proto::ErrorCode;

use crate::{
    error::{LossReason, Unsupported},
    state::LockState,
};

/// States kept for an observer that has not taken them yet.
pub(crate) const MAILBOX_BOUND: usize = 256;

/// How a watch ended, or why it never started.
#[derive(Clone, Debug)]
pub(crate) enum WatchEnd {
    /// The OBSERVE was refused (a bound, the ACL, a bad name).
    Refused { code: ErrorCode, reason: String },
    /// The session ended.
    Lost(LossReason),
    /// The session lacks the extension.
    Unsupported(Unsupported),
    /// The session closed before the OBSERVE was written: place it again.
    Retry,
}

#[derive(Debug)]
enum Phase {
    /// OBSERVE placed, no reply yet.
    Asked,
    /// OBSERVING read.
    Observing,
    /// Over; `None` once the observer was told.
    Ended(Option<WatchEnd>),
}

#[derive(Debug)]
struct Inner {
    phase: Phase,
    states: VecDeque<LockState>,
    waker: Option<Waker>,
}

/// Shared by a watch's session task (which fills it) and its observer.
#[derive(Debug)]
pub(crate) struct Mailbox {
    /// A std mutex: held for a queue operation, never across an await.
    inner: Mutex<Inner>,
}

impl Mailbox {
    pub(crate) fn new() -> Self {
        Self {
            inner: Mutex::new(Inner {
                phase: Phase::Asked,
                states: VecDeque::new(),
                waker: None,
            }),
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `change` and wakes the observer after the lock is dropped.
    fn change(&self, change: impl FnOnce(&mut Inner)) {
        let waker = {
            let mut inner = self.inner();
            change(&mut inner);
            inner.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// OBSERVING was read.
    pub(crate) fn observing(&self) {
        self.change(|inner| {
            if matches!(inner.phase, Phase::Asked) {
                inner.phase = Phase::Observing;
            }
        });
    }

    /// A STATE for the watch. Past the bound the queue gives way to the
    /// state now, flagged coalesced.
    pub(crate) fn push(&self, state: LockState) {
        self.change(|inner| {
            if inner.states.len() >= MAILBOX_BOUND {
                inner.states.clear();
                inner.states.push_back(state.coalesced_now());
            } else {
                inner.states.push_back(state);
            }
        });
    }

    /// The watch is over (the first end wins).
    pub(crate) fn end(&self, end: WatchEnd) {
        self.change(|inner| {
            if !matches!(inner.phase, Phase::Ended(_)) {
                inner.phase = Phase::Ended(Some(end));
            }
        });
    }

    /// Whether the watch ended (the observer may not have been told yet).
    pub(crate) fn is_ended(&self) -> bool {
        matches!(self.inner().phase, Phase::Ended(_))
    }

    /// Ready once the server answered the OBSERVE (or the watch ended
    /// before it did).
    pub(crate) fn poll_opened(&self, cx: &mut Context<'_>) -> Poll<Result<(), WatchEnd>> {
        let mut inner = self.inner();
        match &mut inner.phase {
            Phase::Observing => Poll::Ready(Ok(())),
            Phase::Ended(end) => Poll::Ready(Err(end.take().unwrap_or(WatchEnd::Retry))),
            Phase::Asked => {
                inner.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    /// The next state; then, once the watch ended, how (once); then none.
    pub(crate) fn poll_next(
        &self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<LockState, WatchEnd>>> {
        let mut inner = self.inner();
        if let Some(state) = inner.states.pop_front() {
            return Poll::Ready(Some(Ok(state)));
        }
        match &mut inner.phase {
            Phase::Ended(end) => Poll::Ready(end.take().map(Err)),
            Phase::Asked | Phase::Observing => {
                inner.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::task::Waker;

    use super::*;
    use crate::state::StateEvent;

    fn state(event: StateEvent, token: u64) -> LockState {
        let value = if event.held() { "a" } else { "" };
        LockState::new(event, token, 0, None, value.into())
    }

    #[test]
    fn a_reader_that_falls_behind_is_told_the_state_now_once() {
        let mailbox = Mailbox::new();
        let mut cx = Context::from_waker(Waker::noop());
        mailbox.observing();
        for token in 1..=u64::try_from(MAILBOX_BOUND).unwrap_or(u64::MAX) {
            mailbox.push(state(StateEvent::Granted, token));
        }
        mailbox.push(state(StateEvent::Released, 300));
        let Poll::Ready(Some(Ok(first))) = mailbox.poll_next(&mut cx) else {
            panic!("a state is queued");
        };
        assert_eq!(
            (first.event, first.token, first.coalesced, first.held),
            (StateEvent::Free, 300, true, false)
        );
        assert!(mailbox.poll_next(&mut cx).is_pending(), "nothing else kept");
        mailbox.end(WatchEnd::Lost(LossReason::ConnectionClosed));
        assert!(matches!(
            mailbox.poll_next(&mut cx),
            Poll::Ready(Some(Err(WatchEnd::Lost(_))))
        ));
        assert!(matches!(mailbox.poll_next(&mut cx), Poll::Ready(None)));
    }
}
