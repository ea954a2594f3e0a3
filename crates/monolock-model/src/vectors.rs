//! Exports a counterexample to a known client mistake as a protocol
//! vector (clients/conformance/vectors, whose README is the format): the
//! mistaken client's view of the trace, its inputs with the outputs the
//! *correct* client gives, so that every client replays it and a client
//! making the mistake fails it.
//!
//! The model's time is ticks and its client heartbeats anywhere between
//! the floor and a quarter lease; a vector's client is the shipped one,
//! whose heartbeat instants follow from the round trips (docs/protocol.md,
//! "Heartbeats: the client's schedule"). So the export places the client's
//! events at `tick x (lease_ms / lease)` milliseconds, except that an event
//! the model put at the instant a shipped client's heartbeat falls due is
//! moved one millisecond earlier (an owner's call, a frame read), and the
//! model's heartbeat goes where the schedule puts it. A trace whose
//! heartbeats the schedule cannot reproduce (one sent with another request
//! in flight, say) is not exported: the export says why.
//!
//! The expected outputs are computed here from the rules of the protocol
//! page, for the correct client and for the mistaken one; the client whose
//! outputs differ is the one the vector follows. The Rust client's tests
//! replay every exported vector, so a vector that the shipped client does
//! not produce exactly fails there.

use std::fmt::Write as _;

use crate::{
    Outcome, Params, Step, Variant, check,
    check::Model,
    frames::{Answer, Frame},
    model::{Down, State as V1State},
};

/// One millisecond, in the nanoseconds the schedule is computed in.
const MS: u64 = 1_000_000;

/// A vector for `params` (whose `variant` is a client mistake): its file
/// name (without `.json`) and text.
///
/// # Errors
/// The checker finds no counterexample, the mistake is not a client's, or
/// the trace cannot be replayed by the shipped client's schedule.
pub fn export(params: &Params, lease_ms: u32) -> Result<(String, String), String> {
    let mistake = Mistake::of(params.variant)
        .ok_or_else(|| format!("{:?} is not a client's mistake", params.variant))?;
    // Leases are 100 ms to 1 h (docs/protocol.md); a vector outside them
    // would pin behaviour no client may show.
    if !(100..=3_600_000).contains(&lease_ms)
        || params.lease == 0
        || !lease_ms.is_multiple_of(params.lease)
        || !lease_ms.is_multiple_of(20)
    {
        return Err(format!(
            "the vector's lease ({lease_ms} ms) must be 100 ms to 1 h, and a multiple of 20 \
             and of the model's ({} ticks)",
            params.lease
        ));
    }
    let Outcome::Broken { path, what, .. } = check(params) else {
        return Err(format!(
            "{:?}: no counterexample at these bounds",
            params.variant
        ));
    };
    let timelines = if params.protocol == 2 {
        v2_timelines(&path, params.clients)
    } else {
        v1_timelines(params, &path)?
    };
    let tick = u64::from(lease_ms / params.lease) * MS;
    let mut last_err = String::from("no client acts in the counterexample");
    for (client, timeline) in timelines.iter().enumerate() {
        let correct = Client::new(params.protocol, lease_ms, None).run(timeline, tick);
        let mistaken = Client::new(params.protocol, lease_ms, Some(mistake)).run(timeline, tick);
        match (correct, mistaken) {
            (Ok(correct), mistaken) if mistaken.as_ref() != Ok(&correct) => {
                let name = format!("v{}-model-{}", params.protocol, mistake.name());
                let description = format!(
                    "Exported by monolock-model from its counterexample to {:?} \
                     (lease {} ticks, a tick is {} ms): client c{client}'s view, \
                     with the correct client's outputs. The model's verdict on the \
                     mistaken client: {what}.",
                    params.variant,
                    params.lease,
                    lease_ms / params.lease
                );
                let text = render(&name, &description, params.protocol, lease_ms, &correct);
                return Ok((name, text));
            }
            (Err(err), _) => last_err = format!("client c{client}: {err}"),
            (Ok(_), _) => {}
        }
    }
    Err(format!(
        "{:?}: no client's view tells the mistake apart ({last_err})",
        params.variant
    ))
}

/// The client mistakes the export knows, as the vectors' clients make them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mistake {
    PushConfirmsHeartbeat,
    DeadlineFromReceive,
    GrantedConfirmsPing,
    GrantedAfterRelease,
}

impl Mistake {
    fn of(variant: Variant) -> Option<Self> {
        match variant {
            Variant::PushConfirmsHeartbeat => Some(Self::PushConfirmsHeartbeat),
            Variant::DeadlineFromReceive => Some(Self::DeadlineFromReceive),
            Variant::GrantedConfirmsPing => Some(Self::GrantedConfirmsPing),
            Variant::GrantedAfterRelease => Some(Self::GrantedAfterRelease),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::PushConfirmsHeartbeat => "push-confirms-heartbeat",
            Self::DeadlineFromReceive => "deadline-from-receive",
            Self::GrantedConfirmsPing => "granted-confirms-ping",
            Self::GrantedAfterRelease => "granted-after-release",
        }
    }
}

/// What one client did or was given in the trace, at a tick.
#[derive(Clone, Copy, Debug)]
enum Input {
    /// v1: connect and ACQUIRE.
    Acquire,
    /// v2: OPEN.
    Open,
    /// v2: ACQUIRE (wait) of a claim on a lock.
    AcquireClaim { claim: u8, lock: u8 },
    /// v2: RELEASE.
    Release { claim: u8 },
    /// The model's client heartbeats (v1 HEARTBEAT, v2 PING).
    Heartbeat,
    /// A version 1 frame read.
    ReadV1(Down),
    /// A version 2 frame read.
    ReadV2(Answer),
}

type Timeline = Vec<(u32, Input)>;

/// Each v1 client's inputs, by re-running the path (its steps name no
/// message: the state says which one a read takes).
fn v1_timelines(params: &Params, path: &[Step]) -> Result<Vec<Timeline>, String> {
    let mut state = V1State::initial(params);
    let mut timelines = vec![Vec::new(); usize::from(params.clients)];
    let mut successors = Vec::new();
    for step in path {
        let input = match *step {
            Step::Acquire(c) => Some((c, Input::Acquire)),
            Step::Heartbeat(c) => Some((c, Input::Heartbeat)),
            Step::ClientReads(c) => {
                let client = &state.clients[c];
                client
                    .down
                    .first()
                    .filter(|msg| msg.conn == client.conn && !client_idle(client))
                    .map(|msg| (c, Input::ReadV1(msg.body)))
            }
            _ => None,
        };
        if let Some((c, input)) = input {
            timelines[c].push((state.now, input));
        }
        successors.clear();
        state.successors(params, &mut successors);
        let wanted = format!("{step:?}");
        state = successors
            .drain(..)
            .find(|(taken, _)| format!("{taken:?}") == wanted)
            .map(|(_, next)| next)
            .ok_or_else(|| format!("the path does not replay at {wanted}"))?;
    }
    Ok(timelines)
}

fn client_idle(client: &crate::model::Client) -> bool {
    client.phase == crate::model::Phase::Idle
}

/// Each v2 client's inputs: the path names every frame but the OPEN, which
/// every session writes in the initial state.
fn v2_timelines(path: &[Step], clients: u8) -> Vec<Timeline> {
    let mut timelines = vec![vec![(0, Input::Open)]; usize::from(clients)];
    let mut now = 0;
    for step in path {
        let (c, input) = match *step {
            Step::Tick => {
                now += 1;
                continue;
            }
            Step::Sends { client, frame } => match frame {
                Frame::Open => (client, Input::Open),
                Frame::Acquire { claim, lock } => (client, Input::AcquireClaim { claim, lock }),
                Frame::Release { claim } => (client, Input::Release { claim }),
                Frame::Ping => (client, Input::Heartbeat),
                // A close is no call of the vocabulary: the view ends here.
                Frame::Close => (client, Input::ReadV2(Answer::Closed)),
            },
            Step::Reads { client, answer } => (client, Input::ReadV2(answer)),
            _ => continue,
        };
        timelines[c].push((now, input));
    }
    timelines
}

/// A claim of the expected client (v2, by the model's id).
#[derive(Clone, Copy, PartialEq, Eq)]
enum ClaimState {
    Asked,
    Waiting,
    Held,
    Releasing,
}

/// The client the vector expects, computed from docs/protocol.md's rules:
/// the shipped schedule, `S`, reply matching; with `mistake`, the client
/// that makes it.
struct Client {
    protocol: u8,
    lease: u64,
    mistake: Option<Mistake>,
    now: u64,
    /// Requests in flight, oldest first: (kind, claim, send instant).
    pending: Vec<(Sent, u8, u64)>,
    confirmed: u64,
    replied: u64,
    srtt: Option<u64>,
    /// v1: where the claim stands.
    v1: Option<ClaimState>,
    claims: Vec<(u8, ClaimState, bool)>,
    /// Every claim id asked for so far (a vector never reuses one).
    used: Vec<u8>,
    /// The connection (v1) or session (v2) has begun.
    started: bool,
    over: bool,
    steps: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Sent {
    Open,
    Acquire,
    Release,
    Ping,
}

impl Client {
    fn new(protocol: u8, lease_ms: u32, mistake: Option<Mistake>) -> Self {
        Self {
            protocol,
            lease: u64::from(lease_ms) * MS,
            mistake,
            now: 0,
            pending: Vec::new(),
            confirmed: 0,
            replied: 0,
            srtt: None,
            v1: None,
            claims: Vec::new(),
            used: Vec::new(),
            started: false,
            over: false,
            steps: Vec::new(),
        }
    }

    fn base(&self) -> u64 {
        self.lease / 4
    }

    fn deadline(&self) -> u64 {
        self.confirmed + self.lease * 4 / 5
    }

    /// The docs' schedule: `clamp(base - 2 srtt, floor, base)` from `S`,
    /// never before the reply; at the reply when `2 srtt >= base`. None
    /// while a request is in flight or before the first reply.
    fn next_heartbeat(&self) -> Option<u64> {
        if !self.pending.is_empty() || self.srtt.is_none() || self.over {
            return None;
        }
        let twice = 2 * self.srtt.unwrap_or(0);
        if twice >= self.base() {
            return Some(self.replied);
        }
        let floor = (100 * MS).min(self.base() / 4);
        let interval = (self.base() - twice).max(floor);
        Some((self.confirmed + interval).max(self.replied))
    }

    fn push(&mut self, step: String) {
        self.steps.push(step);
    }

    /// Runs the timeline; the steps of the vector.
    fn run(mut self, timeline: &Timeline, tick: u64) -> Result<Vec<String>, String> {
        if timeline.is_empty() {
            return Err("no events".into());
        }
        // The instant the previous event of the same tick went to: the
        // events of one tick stay together (a reply read in the tick of its
        // request has a round trip of 0, as in the model).
        let mut same_tick: Option<(u32, u64)> = None;
        for &(at, input) in timeline {
            if self.over {
                break;
            }
            let natural = u64::from(at) * tick;
            let due = self.next_heartbeat();
            let together = same_tick
                .filter(|&(tick_at, _)| tick_at == at)
                .map(|(_, instant)| instant);
            let instant = match input {
                Input::Heartbeat => {
                    let Some(due) = due else {
                        // The shipped client has a request in flight: it
                        // sends nothing (the mistaken client may think
                        // otherwise). Its reply, if any, would not match.
                        continue;
                    };
                    due.max(self.now)
                }
                _ => match (together, due) {
                    (Some(instant), _) => instant,
                    (None, Some(due)) if due <= natural => due.saturating_sub(MS).max(self.now),
                    (None, _) => natural.max(self.now),
                },
            };
            same_tick = Some((at, instant));
            if due.is_some_and(|due| due < instant) {
                return Err(format!(
                    "a heartbeat falls due at {} ms, before the next event",
                    due.unwrap_or(0) / MS
                ));
            }
            self.advance_to(instant)?;
            if self.over {
                break;
            }
            match input {
                Input::Heartbeat => {} // written by the advance
                other => self.apply(other)?,
            }
            self.beliefs();
        }
        if !self.over {
            // The end: held up to the last millisecond before the
            // deadline, lost at it.
            if self.next_heartbeat().is_some() {
                return Err("the trace ends with no request in flight".into());
            }
            let deadline = self.deadline();
            if deadline > self.now {
                self.advance_to(deadline - MS)?;
                self.beliefs();
            }
            self.advance_to(deadline)?;
            self.beliefs();
        }
        Ok(self.steps)
    }

    fn ms(at: u64) -> Result<u64, String> {
        if at.is_multiple_of(MS) {
            Ok(at / MS)
        } else {
            Err(format!("the instant {at} ns is not a whole millisecond"))
        }
    }

    fn advance_to(&mut self, to: u64) -> Result<(), String> {
        // Before the first call the clock's start at 0 is the advance.
        if self.started || to != 0 {
            self.push(format!(r#"{{"step": "advance", "to": {}}}"#, Self::ms(to)?));
        }
        self.now = to;
        if !self.started || self.over {
            return Ok(());
        }
        if to >= self.deadline() {
            self.lose("expired");
            return Ok(());
        }
        if self.next_heartbeat().is_some_and(|due| due <= to) {
            let frame = if self.protocol == 2 { "23" } else { "02" };
            self.push(format!(r#"{{"step": "send", "hex": "{frame}"}}"#));
            self.pending.push((Sent::Ping, 0, to));
        }
        Ok(())
    }

    fn lose(&mut self, reason: &str) {
        self.over = true;
        if self.protocol == 1 {
            if self.v1.is_some() {
                self.push(format!(
                    r#"{{"step": "event", "event": "lost", "reason": "{reason}"}}"#
                ));
            }
        } else {
            let mut ids: Vec<u8> = self.claims.iter().map(|(id, _, _)| *id).collect();
            ids.sort_unstable();
            for id in ids {
                self.push(format!(
                    r#"{{"step": "event", "event": "lost", "claim": {}, "reason": "{reason}"}}"#,
                    u32::from(id) + 1
                ));
            }
        }
        self.v1 = None;
        self.claims.clear();
    }

    fn beliefs(&mut self) {
        let live = !self.over && self.now < self.deadline();
        if self.protocol == 1 {
            let held = live && self.v1 == Some(ClaimState::Held);
            self.push(format!(r#"{{"step": "belief", "held": {held}}}"#));
            return;
        }
        let mut shown: Vec<(u8, bool)> = self
            .claims
            .iter()
            .map(|&(id, state, believed)| (id, live && (state == ClaimState::Held || believed)))
            .collect();
        shown.sort_unstable();
        for (id, held) in shown {
            self.push(format!(
                r#"{{"step": "belief", "claim": {}, "held": {held}}}"#,
                u32::from(id) + 1
            ));
        }
    }

    /// A reply confirms the oldest request in flight.
    fn confirm(&mut self) -> Result<(Sent, u8), String> {
        if self.pending.is_empty() {
            return Err("a reply with no request in flight".into());
        }
        let (kind, claim, sent) = self.pending.remove(0);
        let rtt = self.now - sent;
        self.srtt = Some(match self.srtt {
            None => rtt,
            Some(srtt) => (srtt * 4 + rtt) / 5,
        });
        self.confirmed = if self.mistake == Some(Mistake::DeadlineFromReceive) {
            self.now
        } else {
            sent.max(self.confirmed)
        };
        self.replied = self.now;
        Ok((kind, claim))
    }

    fn event(&mut self, fields: &str) {
        self.push(format!(r#"{{"step": "event", "event": {fields}}}"#));
    }

    fn apply(&mut self, input: Input) -> Result<(), String> {
        match input {
            Input::Acquire => {
                self.push(
                    r#"{"step": "call", "call": "acquire", "lock": "A", "mode": "wait"}"#.into(),
                );
                self.push(format!(
                    r#"{{"step": "send", "hex": "0101{:08x}000141"}}"#,
                    self.lease / MS
                ));
                self.v1 = Some(ClaimState::Asked);
                self.started = true;
                self.pending.push((Sent::Acquire, 0, self.now));
                self.confirmed = self.now;
            }
            Input::Open => {
                self.push(r#"{"step": "call", "call": "open"}"#.into());
                self.push(format!(
                    r#"{{"step": "send", "hex": "0102{:08x}"}}"#,
                    self.lease / MS
                ));
                self.pending.push((Sent::Open, 0, self.now));
                self.started = true;
                self.confirmed = self.now;
            }
            Input::AcquireClaim { claim, lock } => {
                let id = u32::from(claim) + 1;
                let name = char::from(b'A' + lock);
                self.push(format!(
                    r#"{{"step": "call", "call": "acquire", "claim": {id}, "lock": "{name}", "mode": "wait"}}"#
                ));
                self.push(format!(
                    r#"{{"step": "send", "hex": "21{id:08x}0001{:02x}"}}"#,
                    u32::from(name)
                ));
                if self.used.contains(&claim) {
                    return Err(format!("claim id {claim} used twice"));
                }
                self.used.push(claim);
                self.claims.push((claim, ClaimState::Asked, false));
                self.pending.push((Sent::Acquire, claim, self.now));
            }
            Input::Release { claim } => {
                let id = u32::from(claim) + 1;
                self.push(format!(
                    r#"{{"step": "call", "call": "release", "claim": {id}}}"#
                ));
                let slot = self
                    .claims
                    .iter_mut()
                    .find(|(c, _, _)| *c == claim)
                    .ok_or("RELEASE of a claim not in use")?;
                if !matches!(slot.1, ClaimState::Waiting | ClaimState::Held) {
                    return Err("RELEASE of a claim neither waiting nor held".into());
                }
                slot.1 = ClaimState::Releasing;
                self.push(format!(r#"{{"step": "send", "hex": "22{id:08x}"}}"#));
                self.pending.push((Sent::Release, claim, self.now));
            }
            Input::Heartbeat => {}
            Input::ReadV1(down) => self.read_v1(down)?,
            Input::ReadV2(answer) => self.read_v2(answer)?,
        }
        Ok(())
    }

    fn read_v1(&mut self, down: Down) -> Result<(), String> {
        match down {
            Down::Closed => {
                self.push(r#"{"step": "eof"}"#.into());
                self.lose("connection");
            }
            Down::Waiting => {
                self.push(r#"{"step": "recv", "hex": "11"}"#.into());
                self.confirm()?;
                if self.v1 == Some(ClaimState::Asked) {
                    self.v1 = Some(ClaimState::Waiting);
                    self.event(r#""waiting""#);
                }
            }
            Down::Acquired(token) => {
                self.push(format!(r#"{{"step": "recv", "hex": "12{token:016x}"}}"#));
                match self.v1 {
                    Some(ClaimState::Asked) => {
                        self.confirm()?;
                        self.v1 = Some(ClaimState::Held);
                        self.event(&format!(r#""granted", "token": {token}"#));
                    }
                    Some(ClaimState::Waiting) => {
                        // The push: confirms nothing.
                        if self.mistake == Some(Mistake::PushConfirmsHeartbeat)
                            && !self.pending.is_empty()
                        {
                            self.confirm()?;
                        }
                        self.v1 = Some(ClaimState::Held);
                        self.event(&format!(r#""granted", "token": {token}"#));
                    }
                    _ => {
                        self.confirm()?;
                    }
                }
            }
        }
        Ok(())
    }

    fn read_v2(&mut self, answer: Answer) -> Result<(), String> {
        let id = |claim: u8| u32::from(claim) + 1;
        let hex = match answer {
            Answer::Opened => "30000000000000000100000002".to_owned(),
            Answer::Acquired { claim, token } => format!("31{:08x}{token:016x}", id(claim)),
            Answer::Waiting { claim } => format!("32{:08x}", id(claim)),
            Answer::Released { claim } => format!("34{:08x}", id(claim)),
            Answer::Refused { claim } => format!("36{:08x}2000", id(claim)),
            Answer::Pong => "35".to_owned(),
            Answer::Granted { claim, token } => format!("37{:08x}{token:016x}", id(claim)),
            Answer::Revoked { claim } => format!("38{:08x}0800", id(claim)),
            Answer::Closed => {
                self.push(r#"{"step": "eof"}"#.into());
                self.lose("connection");
                return Ok(());
            }
        };
        self.push(format!(r#"{{"step": "recv", "hex": "{hex}"}}"#));
        match answer {
            Answer::Granted { claim, token } => {
                if self.mistake == Some(Mistake::GrantedConfirmsPing)
                    && let Some(&(_, _, sent)) =
                        self.pending.iter().find(|(kind, _, _)| *kind == Sent::Ping)
                {
                    self.confirmed = self.confirmed.max(sent);
                }
                let after_release = self.mistake == Some(Mistake::GrantedAfterRelease);
                let slot = self
                    .claims
                    .iter_mut()
                    .find(|(c, _, _)| *c == claim)
                    .ok_or("GRANTED for a claim not in use")?;
                match slot.1 {
                    ClaimState::Waiting => {
                        slot.1 = ClaimState::Held;
                        self.event(&format!(
                            r#""granted", "claim": {}, "token": {token}"#,
                            id(claim)
                        ));
                    }
                    ClaimState::Releasing if after_release => slot.2 = true,
                    ClaimState::Releasing => {}
                    _ => return Err("GRANTED for a claim not waiting".into()),
                }
            }
            Answer::Revoked { claim } => {
                self.claims.retain(|(c, _, _)| *c != claim);
                self.event(&format!(
                    r#""lost", "claim": {}, "reason": "forced""#,
                    id(claim)
                ));
            }
            reply => {
                let (kind, asked) = self.confirm()?;
                let slot = self.claims.iter().position(|(c, _, _)| *c == asked);
                match (reply, kind) {
                    (Answer::Opened, Sent::Open) | (Answer::Pong, Sent::Ping) => {}
                    (Answer::Refused { .. }, Sent::Release) if slot.is_none() => {}
                    (Answer::Acquired { claim, token }, Sent::Acquire) if claim == asked => {
                        let slot = slot.ok_or("ACQUIRED for a claim not asked")?;
                        self.claims[slot].1 = ClaimState::Held;
                        self.event(&format!(
                            r#""granted", "claim": {}, "token": {token}"#,
                            id(claim)
                        ));
                    }
                    (Answer::Waiting { claim }, Sent::Acquire) if claim == asked => {
                        let slot = slot.ok_or("WAITING for a claim not asked")?;
                        self.claims[slot].1 = ClaimState::Waiting;
                        self.event(&format!(r#""waiting", "claim": {}"#, id(claim)));
                    }
                    (Answer::Released { claim }, Sent::Release) if claim == asked => {
                        self.claims.retain(|(c, _, _)| *c != claim);
                        self.event(&format!(r#""released", "claim": {}"#, id(claim)));
                    }
                    _ => return Err("a reply that does not answer the request in flight".into()),
                }
            }
        }
        Ok(())
    }
}

fn render(name: &str, description: &str, protocol: u8, lease_ms: u32, steps: &[String]) -> String {
    let mut text = String::from("{\n");
    let _ = writeln!(text, "  \"name\": \"{name}\",");
    let _ = writeln!(
        text,
        "  \"description\": \"{}\",",
        description.replace('"', "'")
    );
    let _ = writeln!(text, "  \"protocol\": {protocol},");
    let _ = writeln!(text, "  \"lease_ms\": {lease_ms},");
    let _ = writeln!(text, "  \"source\": \"monolock-model\",");
    text.push_str("  \"steps\": [\n");
    let lines: Vec<String> = steps.iter().map(|step| format!("    {step}")).collect();
    text.push_str(&lines.join(",\n"));
    text.push_str("\n  ]\n}\n");
    text
}
