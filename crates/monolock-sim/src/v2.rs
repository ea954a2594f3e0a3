//! The simulation's protocol version 2 client, as a sans-I/O core: it is
//! fed the server's frames and instants and hands back the bytes to send;
//! the host in `client_v2.rs` does the I/O around it.
//!
//! It follows the client contract of docs/protocol.md ("Protocol version
//! 2", "Writing a version 2 client: checklist"):
//!
//! - one FIFO of the frames sent; each reply answers the oldest and must
//!   name the same claim (a mismatch closes the session);
//! - `S` is the send instant of the latest frame whose reply has arrived
//!   (before the first reply, the OPEN's), and every claim is lost at
//!   `S + 0.8 x lease`, whenever a belief is read; pushes (GRANTED,
//!   REVOKED) confirm nothing;
//! - PING on the version 1 schedule (`clamp(lease/4 - 2 srtt, floor,
//!   lease/4)` after the latest frame sent, one PING in flight at most);
//! - a belief ("claim C holds lock L under token T") starts when ACQUIRED
//!   or GRANTED is read and ends when RELEASE is *sent*, REVOKED is read,
//!   or the session ends or reaches its deadline.
//!
//! A claim id may be reused at once (RELEASE and ACQUIRE written
//! together), so each id keeps its generations in order: the oldest is
//! the one pushes and the RELEASE's reply are about.
//!
//! [`Mistake`]s switch known client errors on, for the simulation to show
//! that it finds them.

use std::{
    collections::{BTreeMap, VecDeque},
    time::Duration,
};

use monolock_proto::{
    Lease, LockName,
    v2::{ClientFrame, Mode, ServerFrame},
};
use tokio::time::Instant;

/// The largest floor between two PINGs (as version 1).
const MAX_FLOOR: Duration = Duration::from_millis(100);

/// A known mistake of a version 2 client, switched on in the simulation's
/// own client only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mistake {
    /// A GRANTED push is taken as confirming the session: `S` moves to the
    /// send instant of the latest frame sent.
    GrantedConfirmsSession,
    /// Claims are believed past the session's deadline, until the
    /// connection is seen to end.
    BeliefPastDeadline,
    /// A claim is believed until RELEASED arrives, not only until RELEASE
    /// is sent.
    BeliefUntilReleased,
}

impl Mistake {
    /// Every mistake.
    pub const ALL: [Self; 3] = [
        Self::GrantedConfirmsSession,
        Self::BeliefPastDeadline,
        Self::BeliefUntilReleased,
    ];

    /// Its name on a command line.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::GrantedConfirmsSession => "v2-granted-confirms-session",
            Self::BeliefPastDeadline => "v2-belief-past-deadline",
            Self::BeliefUntilReleased => "v2-belief-until-released",
        }
    }
}

/// A frame sent and not yet answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sent {
    Open,
    Acquire(u32),
    Release(u32),
    Ping,
}

/// One generation of a claim id, as the client sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    /// ACQUIRE sent, no reply yet.
    Acquiring(LockName),
    /// Queued (WAITING read).
    Waiting(LockName),
    /// Held under this token.
    Held(LockName, u64),
    /// RELEASE sent; the token if the claim was held (or granted while the
    /// RELEASE was on its way).
    Releasing(LockName, Option<u64>),
}

/// What a frame from the server did, for the trace and the event counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Note {
    /// A reply or push that changes nothing worth telling.
    Quiet,
    /// A claim now holds its lock (ACQUIRED or GRANTED).
    Holds(u32, u64),
    /// A GRANTED for a claim whose RELEASE was already sent.
    GrantedWhileReleasing(u32, u64),
    /// A claim was revoked (REVOKED).
    Revoked(u32),
    /// A REVOKED crossed the claim's RELEASE (REFUSED 0x20 follows).
    RevokedWhileReleasing(u32),
    /// RELEASED (or REFUSED) read for a claim not in use.
    Released(u32),
    /// RELEASED read for a claim on this lock, held under this token (none:
    /// it was waiting).
    ReleasedClaim(u32, LockName, Option<u64>),
    /// BUSY or REFUSED for an ACQUIRE.
    NotTaken(u32),
}

/// Why the session is over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The server sent ERROR.
    Error(String),
    /// A frame broke the contract (an unexpected reply, a push for no
    /// claim).
    Violation(String),
}

/// One version 2 session of the simulation's client.
#[derive(Debug)]
pub(crate) struct Core {
    lease: Duration,
    base: Duration,
    floor: Duration,
    srtt: Option<Duration>,
    sent: VecDeque<(Sent, Instant)>,
    /// `S`: the send instant of the latest frame whose reply arrived.
    confirmed: Instant,
    last_send: Instant,
    ping_in_flight: bool,
    claims: BTreeMap<u32, VecDeque<Claim>>,
    opened: bool,
    mistakes: Vec<Mistake>,
}

impl Core {
    /// A session opening now: returns the core and the OPEN's bytes.
    pub(crate) fn open(lease: Lease, now: Instant, mistakes: Vec<Mistake>) -> (Self, Vec<u8>) {
        let lease_d = lease.as_duration();
        let base = lease_d / 4;
        let core = Self {
            lease: lease_d,
            base,
            floor: MAX_FLOOR.min(base / 4),
            srtt: None,
            sent: VecDeque::from([(Sent::Open, now)]),
            confirmed: now,
            last_send: now,
            ping_in_flight: false,
            claims: BTreeMap::new(),
            opened: false,
            mistakes,
        };
        (core, ClientFrame::Open { lease }.to_bytes())
    }

    fn mistake(&self, mistake: Mistake) -> bool {
        self.mistakes.contains(&mistake)
    }

    /// The session's lease.
    pub(crate) fn lease(&self) -> Duration {
        self.lease
    }

    /// `S + 0.8 x lease`: every claim is lost at this instant.
    pub(crate) fn deadline(&self) -> Instant {
        self.confirmed + self.lease * 4 / 5
    }

    /// Whether the deadline has passed (the driver then closes), unless
    /// the mistake of believing past it is on.
    pub(crate) fn expired(&self, now: Instant) -> bool {
        now >= self.deadline() && !self.mistake(Mistake::BeliefPastDeadline)
    }

    /// Whether OPENED has been read.
    pub(crate) fn is_open(&self) -> bool {
        self.opened
    }

    fn sent_now(&mut self, what: Sent, now: Instant) {
        self.sent.push_back((what, now));
        self.last_send = self.last_send.max(now);
    }

    /// Appends an ACQUIRE to `out`.
    pub(crate) fn acquire(
        &mut self,
        claim: u32,
        mode: Mode,
        name: LockName,
        now: Instant,
        out: &mut Vec<u8>,
    ) {
        ClientFrame::Acquire {
            claim,
            mode,
            name: name.clone(),
        }
        .encode(out);
        self.claims
            .entry(claim)
            .or_default()
            .push_back(Claim::Acquiring(name));
        self.sent_now(Sent::Acquire(claim), now);
    }

    /// Appends a RELEASE to `out`: the claim's belief ends here.
    pub(crate) fn release(&mut self, claim: u32, now: Instant, out: &mut Vec<u8>) {
        ClientFrame::Release { claim }.encode(out);
        if let Some(generation) = self.claims.get_mut(&claim).and_then(|g| g.back_mut()) {
            *generation = match generation.clone() {
                Claim::Held(name, token) => Claim::Releasing(name, Some(token)),
                Claim::Acquiring(name) | Claim::Waiting(name) => Claim::Releasing(name, None),
                releasing @ Claim::Releasing(..) => releasing,
            };
        }
        self.sent_now(Sent::Release(claim), now);
    }

    /// The PING interval: `clamp(base - 2 srtt, floor, base)`.
    fn interval(&self) -> Duration {
        let correction = self.srtt.unwrap_or_default().saturating_mul(2);
        self.base
            .saturating_sub(correction)
            .clamp(self.floor, self.base)
    }

    /// When the next PING is due (none while one is in flight). Every
    /// frame sent counts as a heartbeat.
    pub(crate) fn next_ping(&self) -> Option<Instant> {
        (!self.ping_in_flight).then(|| self.last_send + self.interval())
    }

    /// Appends a PING to `out`.
    pub(crate) fn ping(&mut self, now: Instant, out: &mut Vec<u8>) {
        ClientFrame::Ping.encode(out);
        self.ping_in_flight = true;
        self.sent_now(Sent::Ping, now);
    }

    /// The latest generation of `claim`.
    pub(crate) fn claim(&self, claim: u32) -> Option<&Claim> {
        self.claims.get(&claim).and_then(VecDeque::back)
    }

    /// Whether any claim in use (any generation) names `lock`.
    pub(crate) fn names_lock(&self, lock: &LockName) -> bool {
        self.claims.values().flatten().any(|claim| match claim {
            Claim::Acquiring(name)
            | Claim::Waiting(name)
            | Claim::Held(name, _)
            | Claim::Releasing(name, _) => name == lock,
        })
    }

    /// Whether one lock has a claim of this session held and another
    /// waiting (latest generations).
    pub(crate) fn holds_and_waits_on_one_lock(&self) -> bool {
        let latest: Vec<&Claim> = self.claims.values().filter_map(VecDeque::back).collect();
        latest.iter().any(|held| match held {
            Claim::Held(lock, _) => latest
                .iter()
                .any(|other| matches!(other, Claim::Waiting(name) if name == lock)),
            _ => false,
        })
    }

    /// Claims held and waiting (latest generations).
    pub(crate) fn counts(&self) -> (usize, usize) {
        let mut counts = (0, 0);
        for claim in self.claims.values().filter_map(VecDeque::back) {
            match claim {
                Claim::Held(..) => counts.0 += 1,
                Claim::Waiting(..) => counts.1 += 1,
                _ => {}
            }
        }
        counts
    }

    /// What the client believes at `now`: (claim, lock, token) for each
    /// claim it holds, none past the deadline.
    pub(crate) fn beliefs(&self, now: Instant) -> Vec<(u32, String, u64)> {
        if now >= self.deadline() && !self.mistake(Mistake::BeliefPastDeadline) {
            return Vec::new();
        }
        let until_released = self.mistake(Mistake::BeliefUntilReleased);
        let mut beliefs = Vec::new();
        for (&id, generations) in &self.claims {
            for claim in generations {
                match claim {
                    Claim::Held(name, token) => {
                        beliefs.push((id, name.as_str().to_owned(), *token));
                    }
                    Claim::Releasing(name, Some(token)) if until_released => {
                        beliefs.push((id, name.as_str().to_owned(), *token));
                    }
                    _ => {}
                }
            }
        }
        beliefs
    }

    /// Takes in one frame from the server, read at `now`.
    ///
    /// # Errors
    /// [`Ended`] when the session is over (ERROR, or a frame the contract
    /// does not allow): the driver closes, and every claim is lost.
    pub(crate) fn on_frame(&mut self, frame: ServerFrame, now: Instant) -> Result<Note, Ended> {
        match frame {
            ServerFrame::Granted { claim, token } => self.granted(claim, token),
            ServerFrame::Revoked { claim, .. } => self.revoked(claim),
            ServerFrame::Error { code, reason } => {
                Err(Ended::Error(format!("ERROR {code}: {reason}")))
            }
            reply => self.reply(reply, now),
        }
    }

    fn granted(&mut self, claim: u32, token: u64) -> Result<Note, Ended> {
        if self.mistake(Mistake::GrantedConfirmsSession) {
            self.confirmed = self.confirmed.max(self.last_send);
        }
        let oldest = self.claims.get_mut(&claim).and_then(VecDeque::front_mut);
        match oldest {
            Some(Claim::Waiting(name)) => {
                let name = name.clone();
                *oldest_of(&mut self.claims, claim) = Claim::Held(name, token);
                Ok(Note::Holds(claim, token))
            }
            Some(Claim::Releasing(name, None)) => {
                let name = name.clone();
                *oldest_of(&mut self.claims, claim) = Claim::Releasing(name, Some(token));
                Ok(Note::GrantedWhileReleasing(claim, token))
            }
            other => Err(Ended::Violation(format!(
                "GRANTED for claim {claim} in state {other:?}"
            ))),
        }
    }

    fn revoked(&mut self, claim: u32) -> Result<Note, Ended> {
        let generations = self.claims.entry(claim).or_default();
        match generations.front() {
            Some(Claim::Held(..) | Claim::Waiting(..)) => {
                generations.pop_front();
                if generations.is_empty() {
                    self.claims.remove(&claim);
                }
                Ok(Note::Revoked(claim))
            }
            // The RELEASE's reply (REFUSED 0x20) removes it.
            Some(Claim::Releasing(name, _)) => {
                let name = name.clone();
                *oldest_of(&mut self.claims, claim) = Claim::Releasing(name, None);
                Ok(Note::RevokedWhileReleasing(claim))
            }
            other => {
                let what = format!("REVOKED for claim {claim} in state {other:?}");
                Err(Ended::Violation(what))
            }
        }
    }

    fn reply(&mut self, reply: ServerFrame, now: Instant) -> Result<Note, Ended> {
        let Some((sent, sent_at)) = self.sent.pop_front() else {
            return Err(Ended::Violation(format!(
                "{reply:?} with nothing in flight"
            )));
        };
        // Every reply confirms its request's send instant.
        self.confirmed = self.confirmed.max(sent_at);
        let sample = now.saturating_duration_since(sent_at);
        self.srtt = Some(match self.srtt {
            None => sample,
            Some(srtt) => (srtt * 4 + sample) / 5,
        });
        let mismatch = || Ended::Violation(format!("{reply:?} answering {sent:?}"));
        match (sent, &reply) {
            (Sent::Open, ServerFrame::Opened { .. }) => {
                self.opened = true;
                Ok(Note::Quiet)
            }
            (Sent::Ping, ServerFrame::Pong) => {
                self.ping_in_flight = false;
                Ok(Note::Quiet)
            }
            (Sent::Acquire(id), ServerFrame::Acquired { claim, token }) if id == *claim => {
                let name = self.newest_acquiring(id).ok_or_else(mismatch)?;
                *newest_of(&mut self.claims, id) = Claim::Held(name, *token);
                Ok(Note::Holds(id, *token))
            }
            (Sent::Acquire(id), ServerFrame::Waiting { claim }) if id == *claim => {
                let name = self.newest_acquiring(id).ok_or_else(mismatch)?;
                *newest_of(&mut self.claims, id) = Claim::Waiting(name);
                Ok(Note::Quiet)
            }
            (
                Sent::Acquire(id),
                ServerFrame::Busy { claim } | ServerFrame::Refused { claim, .. },
            ) if id == *claim => {
                self.newest_acquiring(id).ok_or_else(mismatch)?;
                self.drop_generation(id, false);
                Ok(Note::NotTaken(id))
            }
            (
                Sent::Release(id),
                ServerFrame::Released { claim } | ServerFrame::Refused { claim, .. },
            ) if id == *claim => {
                // A RELEASE of an id not in use has nothing to end.
                let Some(Claim::Releasing(name, token)) =
                    self.claims.get(&id).and_then(VecDeque::front).cloned()
                else {
                    return Ok(Note::Released(id));
                };
                self.drop_generation(id, true);
                Ok(if matches!(reply, ServerFrame::Released { .. }) {
                    Note::ReleasedClaim(id, name, token)
                } else {
                    Note::Released(id)
                })
            }
            _ => Err(mismatch()),
        }
    }

    /// The name of `claim`'s newest generation if it awaits its ACQUIRE's
    /// reply.
    fn newest_acquiring(&self, claim: u32) -> Option<LockName> {
        match self.claim(claim) {
            Some(Claim::Acquiring(name)) => Some(name.clone()),
            _ => None,
        }
    }

    fn drop_generation(&mut self, claim: u32, oldest: bool) {
        if let Some(generations) = self.claims.get_mut(&claim) {
            if oldest {
                generations.pop_front();
            } else {
                generations.pop_back();
            }
            if generations.is_empty() {
                self.claims.remove(&claim);
            }
        }
    }
}

/// Callers have just matched the generation: it exists.
fn oldest_of(claims: &mut BTreeMap<u32, VecDeque<Claim>>, claim: u32) -> &mut Claim {
    claims
        .entry(claim)
        .or_default()
        .front_mut()
        .unwrap_or_else(|| unreachable!("claim {claim} was just matched"))
}

fn newest_of(claims: &mut BTreeMap<u32, VecDeque<Claim>>, claim: u32) -> &mut Claim {
    claims
        .entry(claim)
        .or_default()
        .back_mut()
        .unwrap_or_else(|| unreachable!("claim {claim} was just matched"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn name(text: &str) -> LockName {
        LockName::new(text).unwrap()
    }

    fn opened(mistakes: Vec<Mistake>) -> (Core, Instant) {
        let t0 = Instant::now();
        let (mut core, _) = Core::open(Lease::from_millis(1000).unwrap(), t0, mistakes);
        let opened = ServerFrame::Opened {
            session: 1,
            max_claims: 8,
        };
        assert_eq!(core.on_frame(opened, t0 + ms(10)), Ok(Note::Quiet));
        (core, t0)
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_runs_from_the_latest_answered_send() {
        let (mut core, t0) = opened(Vec::new());
        assert_eq!(core.deadline(), t0 + ms(800));
        let mut out = Vec::new();
        core.acquire(1, Mode::Wait, name("a"), t0 + ms(100), &mut out);
        core.ping(t0 + ms(200), &mut out);
        // The ACQUIRE's reply confirms its send, not its arrival.
        let reply = ServerFrame::Acquired { claim: 1, token: 7 };
        assert_eq!(core.on_frame(reply, t0 + ms(500)), Ok(Note::Holds(1, 7)));
        assert_eq!(core.deadline(), t0 + ms(900));
        assert_eq!(core.beliefs(t0 + ms(899)), vec![(1, "a".into(), 7)]);
        assert!(core.beliefs(t0 + ms(900)).is_empty());
        assert!(core.expired(t0 + ms(900)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_push_confirms_nothing_unless_the_mistake_is_on() {
        for (mistakes, deadline) in [
            (Vec::new(), ms(900)),
            (vec![Mistake::GrantedConfirmsSession], ms(1100)),
        ] {
            let (mut core, t0) = opened(mistakes);
            let mut out = Vec::new();
            core.acquire(1, Mode::Wait, name("a"), t0 + ms(100), &mut out);
            let waiting = ServerFrame::Waiting { claim: 1 };
            assert_eq!(core.on_frame(waiting, t0 + ms(150)), Ok(Note::Quiet));
            core.ping(t0 + ms(300), &mut out);
            let granted = ServerFrame::Granted { claim: 1, token: 9 };
            assert_eq!(core.on_frame(granted, t0 + ms(400)), Ok(Note::Holds(1, 9)));
            assert_eq!(core.deadline(), t0 + deadline);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_belief_ends_when_release_is_sent_and_an_id_is_reused_at_once() {
        let (mut core, t0) = opened(Vec::new());
        let mut out = Vec::new();
        core.acquire(3, Mode::Wait, name("a"), t0 + ms(20), &mut out);
        let acquired = ServerFrame::Acquired { claim: 3, token: 5 };
        core.on_frame(acquired, t0 + ms(30)).unwrap();
        core.release(3, t0 + ms(40), &mut out);
        core.acquire(3, Mode::Wait, name("a"), t0 + ms(40), &mut out);
        assert!(core.beliefs(t0 + ms(40)).is_empty());
        let released = ServerFrame::Released { claim: 3 };
        assert_eq!(
            core.on_frame(released, t0 + ms(50)),
            Ok(Note::ReleasedClaim(3, name("a"), Some(5)))
        );
        let acquired = ServerFrame::Acquired { claim: 3, token: 6 };
        assert_eq!(core.on_frame(acquired, t0 + ms(50)), Ok(Note::Holds(3, 6)));
        assert_eq!(core.beliefs(t0 + ms(50)), vec![(3, "a".into(), 6)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_granted_crossing_a_release_is_no_belief_unless_the_mistake_is_on() {
        for (mistakes, believed) in [
            (Vec::new(), false),
            (vec![Mistake::BeliefUntilReleased], true),
        ] {
            let (mut core, t0) = opened(mistakes);
            let mut out = Vec::new();
            core.acquire(1, Mode::Wait, name("a"), t0 + ms(20), &mut out);
            core.on_frame(ServerFrame::Waiting { claim: 1 }, t0 + ms(30))
                .unwrap();
            core.release(1, t0 + ms(40), &mut out);
            let granted = ServerFrame::Granted { claim: 1, token: 4 };
            assert_eq!(
                core.on_frame(granted, t0 + ms(45)),
                Ok(Note::GrantedWhileReleasing(1, 4))
            );
            assert_eq!(!core.beliefs(t0 + ms(45)).is_empty(), believed);
            core.on_frame(ServerFrame::Released { claim: 1 }, t0 + ms(50))
                .unwrap();
            assert!(core.beliefs(t0 + ms(50)).is_empty());
            assert_eq!(core.claim(1), None);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_revoked_before_the_release_reply_and_a_stray_reply_end_cleanly() {
        let (mut core, t0) = opened(Vec::new());
        let mut out = Vec::new();
        core.acquire(1, Mode::Wait, name("a"), t0 + ms(20), &mut out);
        core.on_frame(ServerFrame::Acquired { claim: 1, token: 4 }, t0 + ms(30))
            .unwrap();
        core.release(1, t0 + ms(40), &mut out);
        let revoked = ServerFrame::Revoked {
            claim: 1,
            code: monolock_proto::ErrorCode(0x08),
            reason: String::new(),
        };
        assert_eq!(
            core.on_frame(revoked, t0 + ms(45)),
            Ok(Note::RevokedWhileReleasing(1))
        );
        let refused = ServerFrame::Refused {
            claim: 1,
            code: monolock_proto::ErrorCode(0x20),
            reason: String::new(),
        };
        assert_eq!(core.on_frame(refused, t0 + ms(50)), Ok(Note::Released(1)));
        assert_eq!(core.claim(1), None);
        // A reply naming another claim than the oldest request's ends it.
        core.acquire(2, Mode::Try, name("b"), t0 + ms(60), &mut out);
        let wrong = ServerFrame::Busy { claim: 3 };
        assert!(matches!(
            core.on_frame(wrong, t0 + ms(70)),
            Err(Ended::Violation(_))
        ));
    }
}
