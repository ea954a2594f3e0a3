//! Reply matching and timing for one protocol version 2 session
//! (docs/protocol.md, "Writing a version 2 client: checklist"), as a pure
//! state machine: fed the frames sent and received with their instants,
//! it says what each frame meant, or that the server broke the protocol.
//!
//! - Every frame sent gets exactly one reply, in order: a FIFO of the
//!   frames in flight, each reply checked against the oldest (type and
//!   claim id). GRANTED and REVOKED are pushes and answer nothing.
//! - Each claim id: asked (ACQUIRE sent) -> waiting | held -> releasing
//!   (RELEASE sent) -> free on RELEASED. GRANTED may cross a RELEASE;
//!   REFUSED 0x20 answers a RELEASE that crossed a REVOKED.
//! - `S` is the send instant of the latest frame whose reply has arrived
//!   (before the first reply: the OPEN's); the session is given up at
//!   `S + 0.8 x lease`. A push moves nothing.
//! - PING on the version 1 schedule, only when nothing is in flight: any
//!   reply confirms the session, so a busy session never pings.
//! - The extension (values and observers): HELLO goes out with the OPEN
//!   and nothing else is written until FEATURES answers it; OPENED then
//!   ERROR 0x13 means the server predates the extension. Each watch id:
//!   asked (OBSERVE sent) -> watching -> unobserving (UNOBSERVE sent) ->
//!   free on UNOBSERVED, in a space of its own; a STATE whose token is
//!   below the watch's last one, or for a watch not in use, is a protocol
//!   violation. A STATE after UNOBSERVE was written means nothing.

use std::{
    collections::{HashMap, VecDeque},
    time::Duration,
};

use monolock_proto::{
    ErrorCode,
    ext::{self, FEATURE_VALUES_AND_OBSERVERS, ServerFrame as ExtFrame},
    v2::{Mode, ServerFrame},
};
use tokio::time::Instant;

use crate::{
    error::ProtocolViolation,
    exchange::{Planted, planted},
    schedule::Schedule,
    state::{LockState, StateEvent},
};

/// How far the planted `v2-belief-past-deadline` moves the deadline: far
/// past any simulated run.
const PAST_EVERY_DEADLINE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A frame the client sent, awaiting its reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sent {
    Open,
    Hello,
    Acquire(u32),
    Release(u32),
    Ping,
    Proclaim(u32),
    Observe(u32),
    Unobserve(u32),
    Lookup,
}

/// Where one watch id stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Watch {
    /// OBSERVE sent, no reply yet; `unobserve`: its owner let go meanwhile.
    Asking { unobserve: bool },
    /// OBSERVING read; `last`: the token of the latest push (0 before any).
    Watching { last: u64 },
    /// UNOBSERVE sent, UNOBSERVED not read yet.
    Unobserving,
}

/// Whether the session asked for the extension, and what it was told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Extension {
    /// No HELLO: a plain session.
    NotAsked,
    /// HELLO sent, no FEATURES yet: nothing else may be written.
    Asked,
    /// FEATURES granted values and observers.
    Granted,
    /// FEATURES without the bit: plain claims only.
    Refused,
}

/// Where one claim id stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Claim {
    /// ACQUIRE sent, no reply yet; `release`: its owner let go meanwhile.
    Asking {
        mode: Mode,
        release: bool,
    },
    Waiting,
    Held,
    /// RELEASE sent, RELEASED not read yet.
    Releasing,
}

/// What a frame from the server meant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// The reply to OPEN.
    Opened {
        /// The most claims the session may have at once.
        max_claims: u32,
    },
    /// Nothing for any claim's owner (PONG, a GRANTED that crossed a
    /// RELEASE, REFUSED 0x20 after a REVOKED).
    Nothing,
    /// The claim holds the lock (ACQUIRED, or GRANTED pushed). `release`:
    /// its owner let go while it was asked; write RELEASE now.
    Held {
        /// The claim id.
        claim: u32,
        /// The fencing token of the grant.
        token: u64,
        /// Write a RELEASE for it now.
        release: bool,
    },
    /// The claim is queued. `release` as for `Held`.
    Queued {
        /// The claim id.
        claim: u32,
        /// Write a RELEASE for it now.
        release: bool,
    },
    /// A try-only ACQUIRE found the lock held; the id is free.
    Busy {
        /// The claim id.
        claim: u32,
    },
    /// The ACQUIRE was refused; the id is free.
    Refused {
        /// The claim id.
        claim: u32,
        /// The claim code.
        code: ErrorCode,
        /// The server's detail.
        reason: String,
    },
    /// RELEASED: the lock is handed on; the id is free.
    Released {
        /// The claim id.
        claim: u32,
    },
    /// The server ended the claim (an administrator); the id is free.
    Revoked {
        /// The claim id.
        claim: u32,
        /// The claim code (0x08).
        code: ErrorCode,
        /// The server's detail.
        reason: String,
    },
    /// FEATURES: the extension is granted (bit 0 of `features`) or not.
    Features {
        /// The feature bits granted.
        features: u32,
        /// The most watches the session may have at once.
        max_watches: u32,
    },
    /// OPENED, then ERROR 0x13 answering HELLO: the server predates the
    /// extension. The session is over; no claim or watch existed yet.
    Unsupported,
    /// PROCLAIMED: the server has the claim's new value.
    Proclaimed {
        /// The claim id.
        claim: u32,
    },
    /// A PROCLAIM was refused (REFUSED naming the claim).
    ProclaimRefused {
        /// The claim id.
        claim: u32,
        /// The claim code.
        code: ErrorCode,
        /// The server's detail.
        reason: String,
    },
    /// OBSERVING: the watch is in use; `unobserve`: its owner let go
    /// while it was asked; write UNOBSERVE now.
    Observing {
        /// The watch id.
        watch: u32,
        /// Write an UNOBSERVE for it now.
        unobserve: bool,
    },
    /// An OBSERVE was refused; the id is free.
    WatchRefused {
        /// The watch id.
        watch: u32,
        /// The claim code.
        code: ErrorCode,
        /// The server's detail.
        reason: String,
    },
    /// A STATE pushed to a watch in use.
    State {
        /// The watch id.
        watch: u32,
        /// The lock's state.
        state: LockState,
    },
    /// UNOBSERVED: the id is free.
    Unobserved {
        /// The watch id.
        watch: u32,
    },
    /// LOCK_STATE: the answer to a LOOKUP.
    LockState(LockState),
    /// A LOOKUP was refused.
    LookupRefused {
        /// The claim code.
        code: ErrorCode,
        /// The server's detail.
        reason: String,
    },
    /// ERROR: the session is over, with every claim.
    Ended {
        /// The session code.
        code: ErrorCode,
        /// The server's detail.
        reason: String,
    },
}

/// What [`Exchange::release`] asks of the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReleaseStep {
    /// Write a RELEASE now.
    Write,
    /// Nothing now: the ACQUIRE is unanswered (its reply says), or the id
    /// is already free.
    Nothing,
}

/// What [`Exchange::unobserve`] asks of the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UnobserveStep {
    /// Write an UNOBSERVE now.
    Write,
    /// Nothing now: the OBSERVE is unanswered (its reply says), or the id
    /// is already free or on its way out.
    Nothing,
}

/// Matching state and timing of one session.
#[derive(Debug)]
pub(crate) struct Exchange {
    schedule: Schedule,
    in_flight: VecDeque<(Sent, Instant)>,
    claims: HashMap<u32, Claim>,
    watches: HashMap<u32, Watch>,
    extension: Extension,
    /// `S`.
    confirmed_send: Instant,
    /// When the latest reply arrived.
    replied_at: Instant,
    opened: bool,
}

impl Exchange {
    /// The state right after the OPEN went out at `open_sent`.
    pub(crate) fn new(lease: Duration, open_sent: Instant) -> Self {
        Self {
            schedule: Schedule::new(lease),
            in_flight: VecDeque::from([(Sent::Open, open_sent)]),
            claims: HashMap::new(),
            watches: HashMap::new(),
            extension: Extension::NotAsked,
            confirmed_send: open_sent,
            replied_at: open_sent,
            opened: false,
        }
    }

    /// Whether OPENED has been read.
    pub(crate) fn opened(&self) -> bool {
        self.opened
    }

    /// The instant at which the session is given up without a reply.
    pub(crate) fn deadline(&self) -> Instant {
        if planted(Planted::V2BeliefPastDeadline) {
            // Believed until the connection is seen to end.
            return self.confirmed_send + PAST_EVERY_DEADLINE;
        }
        self.schedule.deadline(self.confirmed_send)
    }

    /// When the next PING is due: `None` while any frame is in flight (its
    /// reply will confirm the session).
    pub(crate) fn next_ping(&self) -> Option<Instant> {
        self.in_flight.is_empty().then(|| {
            self.schedule
                .next_send(self.confirmed_send, self.replied_at)
        })
    }

    /// Claim ids in use or asked for.
    #[cfg(test)]
    pub(crate) fn claims(&self) -> usize {
        self.claims.len()
    }

    /// Whether nothing keeps the session in use: no claim, no watch, no
    /// frame awaiting its reply but a PING.
    pub(crate) fn is_idle(&self) -> bool {
        self.claims.is_empty()
            && self.watches.is_empty()
            && self
                .in_flight
                .iter()
                .all(|(sent, _)| matches!(sent, Sent::Ping))
    }

    /// Records a HELLO written at `at` (right after the OPEN).
    pub(crate) fn hello_sent(&mut self, at: Instant) {
        self.extension = Extension::Asked;
        self.in_flight.push_back((Sent::Hello, at));
    }

    /// Whether frames other than the OPEN and HELLO may be written: not
    /// while a HELLO awaits its FEATURES.
    pub(crate) fn ready(&self) -> bool {
        self.extension != Extension::Asked
    }

    /// Whether FEATURES granted values and observers.
    pub(crate) fn extended(&self) -> bool {
        self.extension == Extension::Granted
    }

    /// Whether the claim is waiting or held (a PROCLAIM may name it).
    pub(crate) fn is_live(&self, claim: u32) -> bool {
        matches!(
            self.claims.get(&claim),
            Some(Claim::Waiting | Claim::Held | Claim::Asking { release: false, .. })
        )
    }

    /// Records a PROCLAIM of `claim` written at `at`.
    pub(crate) fn proclaim_sent(&mut self, claim: u32, at: Instant) {
        self.in_flight.push_back((Sent::Proclaim(claim), at));
    }

    /// Records an OBSERVE of `watch` written at `at`.
    pub(crate) fn observe_sent(&mut self, watch: u32, at: Instant) {
        self.watches
            .insert(watch, Watch::Asking { unobserve: false });
        self.in_flight.push_back((Sent::Observe(watch), at));
    }

    /// The owner of `watch` let go: whether to write an UNOBSERVE now.
    pub(crate) fn unobserve(&mut self, watch: u32) -> UnobserveStep {
        match self.watches.get_mut(&watch) {
            Some(Watch::Asking { unobserve }) => {
                *unobserve = true;
                UnobserveStep::Nothing
            }
            Some(Watch::Watching { .. }) => UnobserveStep::Write,
            Some(Watch::Unobserving) | None => UnobserveStep::Nothing,
        }
    }

    /// Records an UNOBSERVE of `watch` written at `at`.
    pub(crate) fn unobserve_sent(&mut self, watch: u32, at: Instant) {
        self.watches.insert(watch, Watch::Unobserving);
        self.in_flight.push_back((Sent::Unobserve(watch), at));
    }

    /// Watch ids in use, asked for or on their way out, ascending.
    #[cfg(any(test, feature = "mutations"))]
    pub(crate) fn watch_ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self.watches.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Records a LOOKUP written at `at`.
    pub(crate) fn lookup_sent(&mut self, at: Instant) {
        self.in_flight.push_back((Sent::Lookup, at));
    }

    /// Interprets one frame of the extension that arrived at `now`.
    ///
    /// # Errors
    /// A [`ProtocolViolation`] when the frame cannot be the next one.
    pub(crate) fn on_ext_frame(
        &mut self,
        frame: ExtFrame,
        now: Instant,
    ) -> Result<Event, ProtocolViolation> {
        match frame {
            ExtFrame::State { watch, state } => self.on_state(watch, state),
            reply => self.on_ext_reply(reply, now),
        }
    }

    /// A STATE push: in token order, for a watch in use.
    fn on_state(&mut self, watch: u32, wire: ext::LockState) -> Result<Event, ProtocolViolation> {
        let token = wire.token;
        match self.watches.get_mut(&watch) {
            Some(Watch::Watching { last }) => {
                if token < *last {
                    return Err(ProtocolViolation::StateWentBack {
                        watch,
                        last: *last,
                        token,
                    });
                }
                *last = token;
                Ok(Event::State {
                    watch,
                    state: LockState::from_wire(wire),
                })
            }
            // Pushed before the server read the UNOBSERVE: nobody's.
            Some(Watch::Unobserving) => Ok(Event::Nothing),
            Some(Watch::Asking { .. }) | None => {
                Err(ProtocolViolation::UnknownWatch { watch, token })
            }
        }
    }

    /// A reply of the extension: it answers the oldest frame in flight.
    fn on_ext_reply(&mut self, frame: ExtFrame, now: Instant) -> Result<Event, ProtocolViolation> {
        let Some(&(sent, sent_at)) = self.in_flight.front() else {
            return Err(unexpected_ext(&frame));
        };
        let event = match (sent, &frame) {
            (
                Sent::Hello,
                &ExtFrame::Features {
                    features,
                    max_watches,
                },
            ) => {
                self.extension = if features & FEATURE_VALUES_AND_OBSERVERS != 0 {
                    Extension::Granted
                } else {
                    Extension::Refused
                };
                Some(Event::Features {
                    features,
                    max_watches,
                })
            }
            (Sent::Proclaim(id), &ExtFrame::Proclaimed { claim }) if claim == id => {
                Some(Event::Proclaimed { claim })
            }
            (Sent::Observe(id), &ExtFrame::Observing { watch }) if watch == id => {
                match self.watches.get(&watch) {
                    Some(&Watch::Asking { unobserve }) => {
                        self.watches.insert(watch, Watch::Watching { last: 0 });
                        Some(Event::Observing { watch, unobserve })
                    }
                    _ => None,
                }
            }
            (Sent::Unobserve(id), &ExtFrame::Unobserved { watch })
                if watch == id && self.watches.get(&watch) == Some(&Watch::Unobserving) =>
            {
                self.watches.remove(&watch);
                Some(Event::Unobserved { watch })
            }
            (Sent::Lookup, ExtFrame::LockState(wire))
                if matches!(wire.event, StateEvent::Free | StateEvent::Held) =>
            {
                Some(Event::LockState(LockState::from_wire(wire.clone())))
            }
            _ => None,
        };
        let Some(event) = event else {
            return Err(unexpected_ext(&frame));
        };
        self.replied(sent_at, now);
        Ok(event)
    }

    /// The oldest frame in flight, sent at `sent_at`, got its reply at
    /// `now`: it confirms the session as of its send.
    fn replied(&mut self, sent_at: Instant, now: Instant) {
        self.in_flight.pop_front();
        self.schedule
            .observe_rtt(now.saturating_duration_since(sent_at));
        self.confirmed_send = if planted(Planted::DeadlineFromReceive) {
            now
        } else {
            sent_at.max(self.confirmed_send)
        };
        self.replied_at = now;
    }

    /// Whether `claim` is asked for or in use.
    pub(crate) fn knows(&self, claim: u32) -> bool {
        self.claims.contains_key(&claim)
    }

    /// Records an ACQUIRE of `claim` written at `at`.
    pub(crate) fn acquire_sent(&mut self, claim: u32, mode: Mode, at: Instant) {
        self.claims.insert(
            claim,
            Claim::Asking {
                mode,
                release: false,
            },
        );
        self.in_flight.push_back((Sent::Acquire(claim), at));
    }

    /// The owner of `claim` let go: whether to write a RELEASE now.
    pub(crate) fn release(&mut self, claim: u32) -> ReleaseStep {
        match self.claims.get_mut(&claim) {
            Some(Claim::Asking { release, .. }) => {
                *release = true;
                ReleaseStep::Nothing
            }
            Some(Claim::Waiting | Claim::Held) => ReleaseStep::Write,
            Some(Claim::Releasing) | None => ReleaseStep::Nothing,
        }
    }

    /// Records a RELEASE of `claim` written at `at`.
    pub(crate) fn release_sent(&mut self, claim: u32, at: Instant) {
        self.claims.insert(claim, Claim::Releasing);
        self.in_flight.push_back((Sent::Release(claim), at));
    }

    /// Records a PING written at `at`.
    pub(crate) fn ping_sent(&mut self, at: Instant) {
        self.in_flight.push_back((Sent::Ping, at));
    }

    /// Interprets one frame that arrived at `now`.
    ///
    /// # Errors
    /// A [`ProtocolViolation`] when the frame cannot be the next one a
    /// version 2 server sends; the caller closes the session.
    pub(crate) fn on_frame(
        &mut self,
        frame: ServerFrame,
        now: Instant,
    ) -> Result<Event, ProtocolViolation> {
        match frame {
            ServerFrame::Error { code, reason } => {
                let answers_hello = matches!(self.in_flight.front(), Some((Sent::Hello, _)));
                if answers_hello && self.opened && code == ErrorCode::UNKNOWN_MESSAGE_TYPE {
                    self.extension = Extension::Refused;
                    return Ok(Event::Unsupported);
                }
                Ok(Event::Ended { code, reason })
            }
            ServerFrame::Granted { claim, token } => {
                if planted(Planted::PushConfirmsHeartbeat)
                    && let Some(&(_, sent_at)) = self.in_flight.front()
                {
                    self.confirmed_send = sent_at;
                }
                if planted(Planted::V2GrantedConfirmsSession)
                    && let Some(&(_, sent_at)) = self.in_flight.back()
                {
                    self.confirmed_send = self.confirmed_send.max(sent_at);
                }
                match self.claims.get_mut(&claim) {
                    Some(state @ Claim::Waiting) => {
                        *state = Claim::Held;
                        Ok(Event::Held {
                            claim,
                            token,
                            release: false,
                        })
                    }
                    // Granted while its RELEASE is on the way: RELEASED follows.
                    Some(Claim::Releasing) => Ok(Event::Nothing),
                    _ => Err(unexpected(ServerFrame::Granted { claim, token })),
                }
            }
            ServerFrame::Revoked {
                claim,
                code,
                reason,
            } => match self.claims.get(&claim) {
                Some(Claim::Waiting | Claim::Held | Claim::Releasing) => {
                    self.claims.remove(&claim);
                    Ok(Event::Revoked {
                        claim,
                        code,
                        reason,
                    })
                }
                _ => Err(unexpected(ServerFrame::Revoked {
                    claim,
                    code,
                    reason,
                })),
            },
            reply => self.on_reply(reply, now),
        }
    }

    /// A reply: it answers the oldest frame in flight.
    fn on_reply(&mut self, frame: ServerFrame, now: Instant) -> Result<Event, ProtocolViolation> {
        let Some(&(sent, sent_at)) = self.in_flight.front() else {
            return Err(unexpected(frame));
        };
        let event = match sent {
            Sent::Open => match frame {
                ServerFrame::Opened { max_claims, .. } => {
                    self.opened = true;
                    Some(Event::Opened { max_claims })
                }
                _ => None,
            },
            Sent::Ping => matches!(frame, ServerFrame::Pong).then_some(Event::Nothing),
            Sent::Acquire(id) => self.on_acquire_reply(id, &frame),
            Sent::Release(id) => self.on_release_reply(id, &frame),
            Sent::Hello => None,
            Sent::Proclaim(id) => match frame {
                ServerFrame::Refused {
                    claim,
                    code,
                    ref reason,
                } if claim == id => Some(Event::ProclaimRefused {
                    claim,
                    code,
                    reason: reason.clone(),
                }),
                _ => None,
            },
            Sent::Observe(id) => match frame {
                ServerFrame::Refused {
                    claim,
                    code,
                    ref reason,
                } if claim == id && matches!(self.watches.get(&id), Some(Watch::Asking { .. })) => {
                    self.watches.remove(&id);
                    Some(Event::WatchRefused {
                        watch: id,
                        code,
                        reason: reason.clone(),
                    })
                }
                _ => None,
            },
            // 0x20: the watch was not in use; its id is free all the same.
            Sent::Unobserve(id) => match frame {
                ServerFrame::Refused { claim, .. } if claim == id => {
                    self.watches.remove(&id);
                    Some(Event::Unobserved { watch: id })
                }
                _ => None,
            },
            Sent::Lookup => match frame {
                ServerFrame::Refused {
                    claim: 0,
                    code,
                    ref reason,
                } => Some(Event::LookupRefused {
                    code,
                    reason: reason.clone(),
                }),
                _ => None,
            },
        };
        let Some(event) = event else {
            return Err(unexpected(frame));
        };
        self.replied(sent_at, now);
        Ok(event)
    }

    /// The answer to the ACQUIRE of claim `id`, or `None` if `frame` is not
    /// one (another claim's, or one its state cannot take).
    fn on_acquire_reply(&mut self, id: u32, frame: &ServerFrame) -> Option<Event> {
        let state = self.claims.get_mut(&id)?;
        let Claim::Asking { mode, release } = *state else {
            return None;
        };
        let event = match *frame {
            ServerFrame::Acquired { claim, token } if claim == id => {
                *state = Claim::Held;
                Event::Held {
                    claim,
                    token,
                    release,
                }
            }
            ServerFrame::Waiting { claim } if claim == id && mode == Mode::Wait => {
                *state = Claim::Waiting;
                Event::Queued { claim, release }
            }
            ServerFrame::Busy { claim } if claim == id && mode == Mode::Try => {
                self.claims.remove(&claim);
                Event::Busy { claim }
            }
            ServerFrame::Refused {
                claim,
                code,
                ref reason,
            } if claim == id => {
                let reason = reason.clone();
                self.claims.remove(&claim);
                Event::Refused {
                    claim,
                    code,
                    reason,
                }
            }
            _ => return None,
        };
        Some(event)
    }

    /// The answer to the RELEASE of claim `id`, or `None` if `frame` is not
    /// one.
    fn on_release_reply(&mut self, id: u32, frame: &ServerFrame) -> Option<Event> {
        match *frame {
            ServerFrame::Released { claim }
                if claim == id && matches!(self.claims.get(&claim), Some(Claim::Releasing)) =>
            {
                self.claims.remove(&claim);
                Some(Event::Released { claim })
            }
            // The RELEASE crossed a REVOKED: the claim was already gone.
            ServerFrame::Refused { claim, code, .. }
                if claim == id && code == ErrorCode::UNKNOWN_CLAIM && !self.knows(claim) =>
            {
                Some(Event::Nothing)
            }
            _ => None,
        }
    }
}

fn unexpected(frame: ServerFrame) -> ProtocolViolation {
    ProtocolViolation::Unexpected { frame }
}

fn unexpected_ext(frame: &ExtFrame) -> ProtocolViolation {
    ProtocolViolation::UnexpectedExtension {
        frame: format!("{frame:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_millis(2000);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn opened(t0: Instant, at: Duration) -> Exchange {
        let mut ex = Exchange::new(LEASE, t0);
        let ev = ex.on_frame(
            ServerFrame::Opened {
                session: 1,
                max_claims: 8,
            },
            t0 + at,
        );
        assert_eq!(ev, Ok(Event::Opened { max_claims: 8 }));
        ex
    }

    #[tokio::test(start_paused = true)]
    async fn every_reply_confirms_its_send_instant_and_a_push_confirms_nothing() {
        let t0 = Instant::now();
        let mut ex = opened(t0, ms(10));
        assert_eq!(ex.deadline(), t0 + ms(1600));
        ex.acquire_sent(1, Mode::Wait, t0 + ms(100));
        assert_eq!(ex.next_ping(), None, "a frame is in flight");
        assert_eq!(
            ex.on_frame(ServerFrame::Waiting { claim: 1 }, t0 + ms(110)),
            Ok(Event::Queued {
                claim: 1,
                release: false
            })
        );
        assert_eq!(ex.deadline(), t0 + ms(100) + ms(1600));
        // srtt 10ms: base 500 - 20 = 480, from the latest confirmed send.
        assert_eq!(ex.next_ping(), Some(t0 + ms(100) + ms(480)));
        ex.ping_sent(t0 + ms(580));
        let pushed = ex.on_frame(ServerFrame::Granted { claim: 1, token: 9 }, t0 + ms(585));
        assert_eq!(
            pushed,
            Ok(Event::Held {
                claim: 1,
                token: 9,
                release: false
            })
        );
        assert_eq!(ex.deadline(), t0 + ms(1700), "a push confirms nothing");
        assert_eq!(
            ex.on_frame(ServerFrame::Pong, t0 + ms(590)),
            Ok(Event::Nothing)
        );
        assert_eq!(ex.deadline(), t0 + ms(580) + ms(1600));
    }

    #[tokio::test(start_paused = true)]
    async fn release_is_confirmed_by_released_and_frees_the_id() {
        let t0 = Instant::now();
        let mut ex = opened(t0, ms(1));
        ex.acquire_sent(4, Mode::Try, t0);
        assert_eq!(
            ex.on_frame(ServerFrame::Acquired { claim: 4, token: 2 }, t0),
            Ok(Event::Held {
                claim: 4,
                token: 2,
                release: false
            })
        );
        assert_eq!(ex.release(4), ReleaseStep::Write);
        ex.release_sent(4, t0 + ms(5));
        assert_eq!(ex.release(4), ReleaseStep::Nothing, "already on its way");
        assert_eq!(
            ex.on_frame(ServerFrame::Released { claim: 4 }, t0 + ms(6)),
            Ok(Event::Released { claim: 4 })
        );
        assert_eq!(ex.claims(), 0);
        assert_eq!(ex.release(4), ReleaseStep::Nothing, "a free id");
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_asked_before_the_reply_goes_out_after_it() {
        let t0 = Instant::now();
        let mut ex = opened(t0, ms(1));
        ex.acquire_sent(1, Mode::Wait, t0);
        ex.acquire_sent(2, Mode::Try, t0);
        assert_eq!(ex.release(1), ReleaseStep::Nothing);
        assert_eq!(ex.release(2), ReleaseStep::Nothing);
        assert_eq!(
            ex.on_frame(ServerFrame::Waiting { claim: 1 }, t0),
            Ok(Event::Queued {
                claim: 1,
                release: true
            })
        );
        assert_eq!(
            ex.on_frame(ServerFrame::Busy { claim: 2 }, t0),
            Ok(Event::Busy { claim: 2 })
        );
        assert!(!ex.knows(2), "a busy id is free: nothing to release");
    }

    #[tokio::test(start_paused = true)]
    async fn a_grant_may_cross_a_release_and_a_revoke_comes_first() {
        let t0 = Instant::now();
        let mut ex = opened(t0, ms(1));
        ex.acquire_sent(1, Mode::Wait, t0);
        ex.acquire_sent(2, Mode::Wait, t0);
        ex.on_frame(ServerFrame::Waiting { claim: 1 }, t0).unwrap();
        ex.on_frame(ServerFrame::Acquired { claim: 2, token: 5 }, t0)
            .unwrap();
        ex.release_sent(1, t0);
        ex.release_sent(2, t0);
        assert_eq!(
            ex.on_frame(ServerFrame::Granted { claim: 1, token: 6 }, t0),
            Ok(Event::Nothing)
        );
        let revoked = ServerFrame::Revoked {
            claim: 2,
            code: ErrorCode::CLAIM_REVOKED,
            reason: "force-release".into(),
        };
        assert!(matches!(
            ex.on_frame(revoked, t0),
            Ok(Event::Revoked { claim: 2, .. })
        ));
        assert_eq!(
            ex.on_frame(ServerFrame::Released { claim: 1 }, t0),
            Ok(Event::Released { claim: 1 })
        );
        let refused = ServerFrame::Refused {
            claim: 2,
            code: ErrorCode::UNKNOWN_CLAIM,
            reason: String::new(),
        };
        assert_eq!(ex.on_frame(refused, t0), Ok(Event::Nothing));
        assert_eq!(ex.claims(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn violations() {
        let t0 = Instant::now();
        let mut ex = Exchange::new(LEASE, t0);
        // A reply that does not answer the oldest frame (the OPEN).
        assert!(
            ex.on_frame(ServerFrame::Pong, t0).is_err(),
            "PONG answering an OPEN"
        );
        let mut ex = opened(t0, ms(1));
        assert!(
            ex.on_frame(ServerFrame::Pong, t0).is_err(),
            "nothing in flight"
        );
        ex.acquire_sent(1, Mode::Wait, t0);
        assert!(
            ex.on_frame(ServerFrame::Waiting { claim: 2 }, t0).is_err(),
            "another claim's reply"
        );
        let mut ex = opened(t0, ms(1));
        ex.acquire_sent(1, Mode::Wait, t0);
        assert!(
            ex.on_frame(ServerFrame::Busy { claim: 1 }, t0).is_err(),
            "BUSY for a waiting ACQUIRE"
        );
        let mut ex = opened(t0, ms(1));
        assert!(
            ex.on_frame(ServerFrame::Granted { claim: 3, token: 1 }, t0)
                .is_err(),
            "GRANTED for an unknown claim"
        );
        let mut ex = opened(t0, ms(1));
        ex.acquire_sent(1, Mode::Wait, t0);
        ex.on_frame(ServerFrame::Acquired { claim: 1, token: 1 }, t0)
            .unwrap();
        assert!(
            ex.on_frame(ServerFrame::Granted { claim: 1, token: 1 }, t0)
                .is_err(),
            "a second grant"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn error_ends_the_session_in_any_state() {
        let t0 = Instant::now();
        let mut ex = Exchange::new(LEASE, t0);
        let ended = ex.on_frame(
            ServerFrame::Error {
                code: ErrorCode::UNSUPPORTED_VERSION,
                reason: String::new(),
            },
            t0,
        );
        assert!(
            matches!(ended, Ok(Event::Ended { code, .. }) if code == ErrorCode::UNSUPPORTED_VERSION)
        );
        assert!(!ex.opened());
    }
}
