//! Reply matching for one connection (docs/protocol.md, "Matching
//! replies"), as a pure state machine.
//!
//! Every ACQUIRE and HEARTBEAT gets exactly one reply, in order, and a
//! promotion adds exactly one unsolicited ACQUIRED. The client keeps at
//! most one request in flight, so a reply always answers that request,
//! except for the one push: while WAITING, the first ACQUIRED is the push
//! (a heartbeat in flight stays in flight; its own ACQUIRED follows). A
//! push confirms nothing. Anything else is a protocol violation.

use std::time::Duration;

use monolock_proto::{ErrorCode, ServerFrame};
use tokio::time::Instant;

use crate::{error::ProtocolViolation, schedule::Schedule};

/// Where the claim stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Standing {
    /// ACQUIRE sent, no reply yet.
    Unanswered,
    /// Queued behind the holder.
    Waiting,
    /// Granted under this token.
    Held(u64),
}

/// What a frame from the server meant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// The reply to the ACQUIRE: queued.
    Queued,
    /// The lock was granted (the ACQUIRE's reply, or the push).
    Granted(u64),
    /// A heartbeat reply that changed nothing but the deadline.
    Confirmed,
    /// The server ended the session.
    Closed {
        /// The ERROR code.
        code: ErrorCode,
        /// The ERROR reason.
        reason: String,
    },
}

/// The request in flight: its send instant.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    sent_at: Instant,
}

/// Matching state and timing for one connection.
#[derive(Debug)]
pub(crate) struct Exchange {
    schedule: Schedule,
    standing: Standing,
    in_flight: Option<InFlight>,
    /// `S`: send instant of the latest request whose reply arrived (before
    /// the first reply: the ACQUIRE's).
    confirmed_send: Instant,
    next_heartbeat: Option<Instant>,
}

impl Exchange {
    /// The state right after the ACQUIRE went out at `acquire_sent`.
    pub(crate) fn new(lease: Duration, acquire_sent: Instant) -> Self {
        Self {
            schedule: Schedule::new(lease),
            standing: Standing::Unanswered,
            in_flight: Some(InFlight {
                sent_at: acquire_sent,
            }),
            confirmed_send: acquire_sent,
            next_heartbeat: None,
        }
    }

    /// Where the claim stands.
    #[cfg(test)]
    pub(crate) fn standing(&self) -> Standing {
        self.standing
    }

    /// The instant at which the claim is abandoned without a confirmation.
    pub(crate) fn deadline(&self) -> Instant {
        self.schedule.deadline(self.confirmed_send)
    }

    /// When the next heartbeat is due; `None` while a request is in flight.
    pub(crate) fn next_heartbeat(&self) -> Option<Instant> {
        self.in_flight
            .is_none()
            .then_some(self.next_heartbeat)
            .flatten()
    }

    /// Records a heartbeat sent at `at`.
    pub(crate) fn heartbeat_sent(&mut self, at: Instant) {
        debug_assert!(self.in_flight.is_none(), "one request in flight at most");
        self.in_flight = Some(InFlight { sent_at: at });
        self.next_heartbeat = None;
    }

    /// The smoothed round trip so far.
    #[cfg(test)]
    pub(crate) fn srtt(&self) -> Option<Duration> {
        self.schedule.srtt()
    }

    /// Interprets one frame that arrived at `now`.
    ///
    /// # Errors
    /// A [`ProtocolViolation`] when the frame cannot be the next one a v1
    /// server sends; the caller closes the connection.
    pub(crate) fn on_frame(
        &mut self,
        frame: ServerFrame,
        now: Instant,
    ) -> Result<Event, ProtocolViolation> {
        match frame {
            ServerFrame::Error { code, reason } => Ok(Event::Closed { code, reason }),
            ServerFrame::Waiting => match self.standing {
                Standing::Held(_) => Err(ProtocolViolation::WaitingAfterGrant),
                Standing::Unanswered => {
                    self.confirm(now, ServerFrame::Waiting)?;
                    self.standing = Standing::Waiting;
                    Ok(Event::Queued)
                }
                Standing::Waiting => {
                    self.confirm(now, ServerFrame::Waiting)?;
                    Ok(Event::Confirmed)
                }
            },
            ServerFrame::Acquired { token } => match self.standing {
                Standing::Unanswered => {
                    self.confirm(now, ServerFrame::Acquired { token })?;
                    self.standing = Standing::Held(token);
                    Ok(Event::Granted(token))
                }
                // The push: confirms nothing, a heartbeat in flight stays so.
                Standing::Waiting => {
                    if planted(Planted::PushConfirmsHeartbeat) && self.in_flight.is_some() {
                        self.confirm(now, ServerFrame::Acquired { token })?;
                    }
                    self.standing = Standing::Held(token);
                    Ok(Event::Granted(token))
                }
                Standing::Held(expected) if expected != token => {
                    Err(ProtocolViolation::TokenMismatch {
                        expected,
                        got: token,
                    })
                }
                Standing::Held(_) => {
                    self.confirm(now, ServerFrame::Acquired { token })?;
                    Ok(Event::Confirmed)
                }
            },
        }
    }

    /// Takes the request in flight as answered at `now`.
    fn confirm(&mut self, now: Instant, frame: ServerFrame) -> Result<(), ProtocolViolation> {
        let Some(InFlight { sent_at }) = self.in_flight.take() else {
            return Err(ProtocolViolation::Unsolicited { frame });
        };
        self.schedule
            .observe_rtt(now.saturating_duration_since(sent_at));
        self.confirmed_send = if planted(Planted::DeadlineFromReceive) {
            now
        } else {
            sent_at
        };
        self.next_heartbeat = Some(self.schedule.next_send(sent_at, now));
        Ok(())
    }
}

/// The client mistakes the simulation can plant (`monolock-mutation`), in
/// either protocol's exchange.
#[derive(Clone, Copy)]
pub(crate) enum Planted {
    PushConfirmsHeartbeat,
    DeadlineFromReceive,
    V2GrantedConfirmsSession,
    V2BeliefPastDeadline,
    V2BeliefUntilReleased,
}

/// Whether the simulation planted `mistake` on this thread; always false
/// outside the simulation.
#[inline(always)]
pub(crate) fn planted(mistake: Planted) -> bool {
    #[cfg(feature = "mutations")]
    {
        use monolock_mutation::{Mutation, active};
        active(match mistake {
            Planted::PushConfirmsHeartbeat => Mutation::PushConfirmsHeartbeat,
            Planted::DeadlineFromReceive => Mutation::DeadlineFromReceive,
            Planted::V2GrantedConfirmsSession => Mutation::V2GrantedConfirmsSession,
            Planted::V2BeliefPastDeadline => Mutation::V2BeliefPastDeadline,
            Planted::V2BeliefUntilReleased => Mutation::V2BeliefUntilReleased,
        })
    }
    #[cfg(not(feature = "mutations"))]
    {
        let _ = mistake;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_millis(2000);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn acquire_reply_grants_and_is_an_rtt_sample() {
        let t0 = Instant::now();
        let mut ex = Exchange::new(LEASE, t0);
        assert_eq!(ex.deadline(), t0 + ms(1600));
        assert_eq!(ex.next_heartbeat(), None);
        let ev = ex.on_frame(ServerFrame::Acquired { token: 7 }, t0 + ms(20));
        assert_eq!(ev, Ok(Event::Granted(7)));
        assert_eq!(ex.srtt(), Some(ms(20)));
        assert_eq!(ex.standing(), Standing::Held(7));
        // base 500 - 2*20 = 460, measured from the ACQUIRE's send.
        assert_eq!(ex.next_heartbeat(), Some(t0 + ms(460)));
        assert_eq!(ex.deadline(), t0 + ms(1600));
    }

    #[tokio::test(start_paused = true)]
    async fn heartbeat_reply_moves_the_deadline_to_its_send_instant() {
        let t0 = Instant::now();
        let mut ex = Exchange::new(LEASE, t0);
        ex.on_frame(ServerFrame::Acquired { token: 7 }, t0 + ms(10))
            .unwrap();
        ex.heartbeat_sent(t0 + ms(480));
        assert_eq!(ex.next_heartbeat(), None);
        let ev = ex.on_frame(ServerFrame::Acquired { token: 7 }, t0 + ms(500));
        assert_eq!(ev, Ok(Event::Confirmed));
        assert_eq!(ex.deadline(), t0 + ms(480) + ms(1600));
    }

    #[tokio::test(start_paused = true)]
    async fn push_while_a_heartbeat_is_in_flight_confirms_nothing() {
        let t0 = Instant::now();
        let mut ex = Exchange::new(LEASE, t0);
        assert_eq!(
            ex.on_frame(ServerFrame::Waiting, t0 + ms(10)),
            Ok(Event::Queued)
        );
        ex.heartbeat_sent(t0 + ms(480));
        // The first ACQUIRED is the push, even with a heartbeat in flight.
        assert_eq!(
            ex.on_frame(ServerFrame::Acquired { token: 9 }, t0 + ms(490)),
            Ok(Event::Granted(9))
        );
        assert_eq!(ex.deadline(), t0 + ms(1600), "a push confirms nothing");
        assert_eq!(
            ex.next_heartbeat(),
            None,
            "the heartbeat is still in flight"
        );
        // The heartbeat's own reply follows.
        assert_eq!(
            ex.on_frame(ServerFrame::Acquired { token: 9 }, t0 + ms(500)),
            Ok(Event::Confirmed)
        );
        assert_eq!(ex.deadline(), t0 + ms(480) + ms(1600));
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_reply_to_a_heartbeat_then_push() {
        let t0 = Instant::now();
        let mut ex = Exchange::new(LEASE, t0);
        ex.on_frame(ServerFrame::Waiting, t0 + ms(10)).unwrap();
        ex.heartbeat_sent(t0 + ms(480));
        assert_eq!(
            ex.on_frame(ServerFrame::Waiting, t0 + ms(490)),
            Ok(Event::Confirmed)
        );
        assert_eq!(
            ex.on_frame(ServerFrame::Acquired { token: 3 }, t0 + ms(600)),
            Ok(Event::Granted(3))
        );
        // A second unsolicited ACQUIRED has nothing to answer.
        assert!(matches!(
            ex.on_frame(ServerFrame::Acquired { token: 3 }, t0 + ms(610)),
            Err(ProtocolViolation::Unsolicited { .. })
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn violations() {
        let t0 = Instant::now();
        let mut ex = Exchange::new(LEASE, t0);
        ex.on_frame(ServerFrame::Acquired { token: 5 }, t0).unwrap();
        assert!(matches!(
            ex.on_frame(ServerFrame::Acquired { token: 5 }, t0),
            Err(ProtocolViolation::Unsolicited { .. })
        ));
        ex.heartbeat_sent(t0 + ms(400));
        assert_eq!(
            ex.on_frame(ServerFrame::Acquired { token: 6 }, t0 + ms(401)),
            Err(ProtocolViolation::TokenMismatch {
                expected: 5,
                got: 6
            })
        );
        assert_eq!(
            ex.on_frame(ServerFrame::Waiting, t0 + ms(401)),
            Err(ProtocolViolation::WaitingAfterGrant)
        );
        // A waiter's WAITING with nothing in flight answers nothing.
        let mut ex = Exchange::new(LEASE, t0);
        ex.on_frame(ServerFrame::Waiting, t0).unwrap();
        assert!(matches!(
            ex.on_frame(ServerFrame::Waiting, t0),
            Err(ProtocolViolation::Unsolicited { .. })
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn error_frames_end_the_session_in_any_state() {
        let t0 = Instant::now();
        let mut ex = Exchange::new(LEASE, t0);
        let ev = ex.on_frame(
            ServerFrame::Error {
                code: ErrorCode::SHUTTING_DOWN,
                reason: "bye".into(),
            },
            t0,
        );
        assert_eq!(
            ev,
            Ok(Event::Closed {
                code: ErrorCode::SHUTTING_DOWN,
                reason: "bye".into()
            })
        );
    }
}
