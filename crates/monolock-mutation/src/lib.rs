//! Known mistakes of the protocol's implementations, reintroduced on purpose
//! so that the deterministic simulation (`monolock-sim`) can show it finds
//! them. Test support, not part of any shipped interface.
//!
//! Only the simulation depends on this crate and switches on the
//! `mutations` feature of `monolock-server` and `monolock-client`, which is
//! what makes them ask [`active`]. Without that feature they do not depend
//! on this crate at all and their checks compile to the normal code, so
//! the `monolock` binary built on its own (`cargo build`, `--profile
//! dist`) carries none of it. A simulation switches mutations on for its
//! own thread with [`set`]; every other thread, and every thread by
//! default, runs the normal code, so a workspace build that unifies the
//! feature behaves exactly as before.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// One reintroduced mistake.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Mutation {
    /// The client takes a pushed ACQUIRED as the reply to its heartbeat in
    /// flight, and moves its deadline to that heartbeat's send instant.
    PushConfirmsHeartbeat = 1,
    /// The client measures its deadline from the instant a reply arrived
    /// instead of the send instant of the request it answers.
    DeadlineFromReceive = 2,
    /// The server promotes the next waiter without checking that its lease
    /// is still running.
    PromoteExpiredWaiter = 4,
    /// A version 2 session writes RELEASED before the table has released
    /// the claim and handed the lock on: the table catches up only when
    /// the session next reads from its client.
    V2ReleasedBeforeTable = 8,
    /// A version 2 session that ends hands its claims to the table in
    /// claim-id order, held and waiting alike, so ending a held claim may
    /// promote (grant) a waiting claim of the same ending session.
    V2PromoteEndingSession = 16,
    /// The server hands a held lock on as soon as it closes the holder's
    /// connection for a write blocked past io-timeout, instead of when the
    /// holder's lease would have run out (the client whose reader stalls
    /// still counts on its grant until its own deadline).
    HandOnAtIoTimeout = 32,
    /// A version 2 client takes a pushed GRANTED as confirming its
    /// session: `S` moves to the send instant of the latest frame sent,
    /// answered or not.
    V2GrantedConfirmsSession = 64,
    /// A version 2 client believes its claims past the session's deadline,
    /// until it sees the connection end.
    V2BeliefPastDeadline = 128,
    /// A version 2 client believes a claim until RELEASED arrives, not
    /// only until its RELEASE is written.
    V2BeliefUntilReleased = 256,
    /// The server's coalesced STATE (a slow observer's changes were
    /// dropped) carries the lock's state as of when the watch was marked,
    /// not the state now, and is written after changes pushed since: the
    /// observer is told an older holder after a newer one.
    CoalescedPushGoesBack = 512,
}

impl Mutation {
    /// Every mutation.
    pub const ALL: [Self; 10] = [
        Self::PushConfirmsHeartbeat,
        Self::DeadlineFromReceive,
        Self::PromoteExpiredWaiter,
        Self::V2ReleasedBeforeTable,
        Self::V2PromoteEndingSession,
        Self::HandOnAtIoTimeout,
        Self::V2GrantedConfirmsSession,
        Self::V2BeliefPastDeadline,
        Self::V2BeliefUntilReleased,
        Self::CoalescedPushGoesBack,
    ];

    /// Its name on a command line.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::PushConfirmsHeartbeat => "push-confirms-heartbeat",
            Self::DeadlineFromReceive => "deadline-from-receive",
            Self::PromoteExpiredWaiter => "promote-expired-waiter",
            Self::V2ReleasedBeforeTable => "v2-released-before-table",
            Self::V2PromoteEndingSession => "v2-promote-ending-session",
            Self::HandOnAtIoTimeout => "hand-on-at-io-timeout",
            Self::V2GrantedConfirmsSession => "v2-granted-confirms-session",
            Self::V2BeliefPastDeadline => "v2-belief-past-deadline",
            Self::V2BeliefUntilReleased => "v2-belief-until-released",
            Self::CoalescedPushGoesBack => "coalesced-push-goes-back",
        }
    }
}

thread_local! {
    static ACTIVE: std::cell::Cell<u16> = const { std::cell::Cell::new(0) };
}

/// Whether `mutation` is switched on for this thread.
#[inline(always)]
pub fn active(mutation: Mutation) -> bool {
    ACTIVE.with(|active| active.get() & mutation as u16 != 0)
}

/// Switches exactly `mutations` on for this thread (none: the normal code).
pub fn set(mutations: &[Mutation]) {
    let bits = mutations.iter().fold(0, |bits, m| bits | *m as u16);
    ACTIVE.with(|active| active.set(bits));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_by_default_and_per_thread() {
        assert!(!active(Mutation::PromoteExpiredWaiter));
        set(&[Mutation::PromoteExpiredWaiter]);
        assert!(active(Mutation::PromoteExpiredWaiter));
        assert!(!active(Mutation::DeadlineFromReceive));
        let other = std::thread::spawn(|| active(Mutation::PromoteExpiredWaiter));
        assert!(!other.join().unwrap());
        set(&[]);
        assert!(!active(Mutation::PromoteExpiredWaiter));
    }
}
