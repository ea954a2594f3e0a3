//! Replays the protocol vectors of `clients/conformance/vectors` (their
//! README is the format) against this client's sans-I/O cores: the version
//! 1 [`Exchange`](crate::exchange::Exchange) and the version 2
//! [`Exchange`](crate::v2::exchange::Exchange).
//!
//! The replayer is the drivers' part without the socket: it writes the
//! frames the drivers write (with the same encoders), decodes what arrives
//! with the same buffering, applies the deadline and the heartbeat when the
//! clock moves as the drivers' select loops do, and names losses with
//! [`LossReason::name`]. Every output is compared with the vector's, and
//! an output the vector does not list fails it.
//!
//! Built for the crate's own tests, and public (hidden) in the
//! `mutations` build so that the planted client mistakes can be shown to
//! fail the vectors (crates/monolock-client-mutants/tests/vectors.rs).

use std::{
    collections::{BTreeMap, VecDeque},
    path::{Path, PathBuf},
    time::Duration,
};

use monolock_proto::{
    ClientFrame, Lease, LockName, decode_response,
    ext::{self, FEATURE_VALUES_AND_OBSERVERS},
    v2::{self, Mode},
};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::{
    error::{LossReason, ProtocolViolation},
    exchange::{Event as V1Event, Exchange as V1Exchange},
    state::LockState,
    v2::{
        exchange::{Event as V2Event, Exchange as V2Exchange, UnobserveStep},
        session::{v1_code, write_release},
    },
};

/// The directory of the shared vectors, from this crate's manifest (the
/// mutants package shares the layout: both sit in `crates/`).
pub fn directory(manifest_dir: &str) -> PathBuf {
    Path::new(manifest_dir).join("../../clients/conformance/vectors")
}

/// Every vector file in `dir`, sorted by name.
///
/// # Errors
/// The directory cannot be read.
pub fn files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "json") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Replays one vector (its JSON text).
///
/// # Errors
/// Where the client disagreed with the vector (step index, expected and
/// produced), or why the vector is malformed.
pub fn replay(text: &str) -> Result<(), String> {
    let vector: Value = serde_json::from_str(text).map_err(|err| format!("not JSON: {err}"))?;
    let lease_ms = vector["lease_ms"]
        .as_u64()
        .and_then(|ms| u32::try_from(ms).ok())
        .and_then(Lease::from_millis)
        .ok_or("lease_ms: a positive u32 required")?;
    let steps = vector["steps"]
        .as_array()
        .ok_or("steps: an array required")?;
    let origin = Instant::now();
    let mut core: Box<dyn Core> = match vector["protocol"].as_u64() {
        Some(1) => Box::new(V1::new(lease_ms, origin)),
        Some(2) => Box::new(V2::new(lease_ms, origin)),
        _ => return Err("protocol: 1 or 2 required".into()),
    };
    let mut replay = Replay {
        origin,
        now: origin,
        writes: VecDeque::new(),
        events: VecDeque::new(),
    };
    for (index, step) in steps.iter().enumerate() {
        replay
            .step(core.as_mut(), step)
            .map_err(|err| format!("step {index} {step}: {err}"))?;
    }
    replay.no_pending()
}

/// Replays every vector in `dir`: the names of those that fail, each with
/// its first disagreement.
///
/// # Errors
/// The directory or a file cannot be read.
pub fn replay_all(dir: &Path) -> std::io::Result<Vec<(String, String)>> {
    let mut failures = Vec::new();
    for path in files(dir)? {
        let text = std::fs::read_to_string(&path)?;
        if let Err(err) = replay(&text) {
            let name = path.file_stem().unwrap_or_default().to_string_lossy();
            failures.push((name.into_owned(), err));
        }
    }
    Ok(failures)
}

/// The outputs of the input being checked, and the clock.
struct Replay {
    origin: Instant,
    now: Instant,
    /// `send` and `half_close` outputs not yet matched, in the order written.
    writes: VecDeque<Value>,
    /// `event` outputs not yet matched, in the order they arose.
    events: VecDeque<Value>,
}

impl Replay {
    fn step(&mut self, core: &mut dyn Core, step: &Value) -> Result<(), String> {
        let kind = step["step"].as_str().ok_or("no step kind")?;
        let mut out = Out::default();
        match kind {
            "call" | "recv" | "eof" | "advance" => {
                self.no_pending()?;
                match kind {
                    "call" => core.call(step, self.now, &mut out)?,
                    "recv" => {
                        let bytes = hex(step["hex"].as_str().ok_or("recv: no hex")?)?;
                        core.recv(&bytes, self.now, &mut out)?;
                    }
                    "eof" => core.eof(&mut out)?,
                    _ => {
                        let to = self.origin + ms(step["to"].as_u64().ok_or("advance: no to")?);
                        if to < self.now {
                            return Err("advance: the clock never goes back".into());
                        }
                        self.now = to;
                        core.advance(to, &mut out);
                    }
                }
                self.writes.extend(out.writes);
                self.events.extend(out.events);
                Ok(())
            }
            "send" | "half_close" => expect(&mut self.writes, step, "write"),
            "event" => expect(&mut self.events, step, "event"),
            "belief" => {
                let held = core.belief(claim_of(step)?, self.now)?;
                same(&step["held"], &json!(held))
            }
            "deadline" => {
                let at = core.deadline().ok_or("deadline asked after the end")?;
                same(&step["at"], &json!(self.instant(at)))
            }
            "next_heartbeat" => {
                let at = core.next_heartbeat().map(|at| self.instant(at));
                same(&step["at"], &json!(at))
            }
            other => Err(format!("unknown step kind {other:?}")),
        }
    }

    /// Milliseconds from the origin (the vectors assert whole ones only; a
    /// fraction shows as the next one down, and then disagrees).
    fn instant(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_millis()).unwrap_or(u64::MAX)
    }

    fn no_pending(&self) -> Result<(), String> {
        match (self.writes.front(), self.events.front()) {
            (None, None) => Ok(()),
            (write, event) => Err(format!(
                "the client produced an output the vector does not list: {}",
                write.or(event).cloned().unwrap_or_default()
            )),
        }
    }
}

fn expect(pending: &mut VecDeque<Value>, expected: &Value, what: &str) -> Result<(), String> {
    match pending.pop_front() {
        Some(produced) if produced == *expected => Ok(()),
        Some(produced) => Err(format!(
            "expected {expected}, the client produced {produced}"
        )),
        None => Err(format!(
            "expected {expected}, the client produced no {what}"
        )),
    }
}

fn same(expected: &Value, got: &Value) -> Result<(), String> {
    if expected == got {
        Ok(())
    } else {
        Err(format!("expected {expected}, the client says {got}"))
    }
}

fn claim_of(step: &Value) -> Result<Option<u32>, String> {
    match &step["claim"] {
        Value::Null => Ok(None),
        value => value
            .as_u64()
            .and_then(|id| u32::try_from(id).ok())
            .map(Some)
            .ok_or_else(|| "claim: a u32 required".into()),
    }
}

fn hex(text: &str) -> Result<Vec<u8>, String> {
    if !text.len().is_multiple_of(2) {
        return Err("hex: an even number of digits required".into());
    }
    (0..text.len())
        .step_by(2)
        .map(|at| {
            text.get(at..at + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(|| format!("hex: {text:?} is not lowercase hex"))
        })
        .collect()
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// What one input made the client do.
#[derive(Default)]
struct Out {
    writes: Vec<Value>,
    events: Vec<Value>,
}

impl Out {
    fn send(&mut self, bytes: &[u8]) {
        self.writes
            .push(json!({ "step": "send", "hex": to_hex(bytes) }));
    }

    fn half_close(&mut self) {
        self.writes.push(json!({ "step": "half_close" }));
    }

    fn event(&mut self, mut event: Value) {
        event["step"] = json!("event");
        self.events.push(event);
    }
}

/// One protocol version's core with its driver's duties.
trait Core {
    fn call(&mut self, step: &Value, now: Instant, out: &mut Out) -> Result<(), String>;
    fn recv(&mut self, bytes: &[u8], now: Instant, out: &mut Out) -> Result<(), String>;
    fn eof(&mut self, out: &mut Out) -> Result<(), String>;
    fn advance(&mut self, now: Instant, out: &mut Out);
    fn belief(&self, claim: Option<u32>, now: Instant) -> Result<bool, String>;
    fn deadline(&self) -> Option<Instant>;
    fn next_heartbeat(&self) -> Option<Instant>;
}

fn lock_name(step: &Value) -> Result<LockName, String> {
    let name = step["lock"].as_str().ok_or("call: no lock")?;
    LockName::new(name).map_err(|err| format!("lock {name:?}: {err}"))
}

fn lost(claim: Option<u32>, reason: &LossReason) -> Value {
    let mut event = json!({ "event": "lost", "reason": reason.name() });
    if let Some(claim) = claim {
        event["claim"] = json!(claim);
    }
    event
}

fn expired(lease: Lease) -> LossReason {
    LossReason::HeartbeatTimeout {
        lease: lease.as_duration(),
    }
}

/// Where a version 1 connection stands.
enum V1State {
    /// No ACQUIRE yet.
    Idle,
    /// The claim lives (asked, waiting or held).
    Live(V1Exchange),
    /// The owner released: write side shut down, waiting for the EOF.
    HalfClosed,
    /// Over: released or lost.
    Ended,
}

/// A version 1 connection as `session.rs`'s driver runs it.
struct V1 {
    lease: Lease,
    state: V1State,
    buf: Vec<u8>,
    token: Option<u64>,
}

impl V1 {
    fn new(lease: Lease, _origin: Instant) -> Self {
        Self {
            lease,
            state: V1State::Idle,
            buf: Vec::new(),
            token: None,
        }
    }

    fn lose(&mut self, reason: &LossReason, out: &mut Out) {
        self.state = V1State::Ended;
        out.event(lost(None, reason));
    }

    fn exchange(&self) -> Option<&V1Exchange> {
        match &self.state {
            V1State::Live(exchange) => Some(exchange),
            _ => None,
        }
    }

    /// The driver's `take_frames`: every whole frame, in order.
    fn take_frames(&mut self, now: Instant, out: &mut Out) {
        let V1State::Live(exchange) = &mut self.state else {
            return;
        };
        let mut used = 0;
        let mut end = None;
        loop {
            let frame = match decode_response(&self.buf[used..]) {
                Ok(Some((frame, len))) => {
                    used += len;
                    frame
                }
                Ok(None) => break,
                Err(err) => {
                    end = Some(LossReason::ProtocolViolation(
                        ProtocolViolation::from_decode(err),
                    ));
                    break;
                }
            };
            match exchange.on_frame(frame, now) {
                Ok(V1Event::Queued) => out.event(json!({ "event": "waiting" })),
                Ok(V1Event::Granted(token)) => {
                    self.token = Some(token);
                    out.event(json!({ "event": "granted", "token": token }));
                }
                Ok(V1Event::Confirmed) => {}
                Ok(V1Event::Closed { code, reason }) => {
                    end = Some(LossReason::Server { code, reason });
                    break;
                }
                Err(violation) => {
                    end = Some(LossReason::ProtocolViolation(violation));
                    break;
                }
            }
        }
        self.buf.drain(..used);
        if let Some(reason) = end {
            self.lose(&reason, out);
        }
    }
}

impl Core for V1 {
    fn call(&mut self, step: &Value, now: Instant, out: &mut Out) -> Result<(), String> {
        match (step["call"].as_str(), &self.state) {
            (Some("acquire"), V1State::Idle) => {
                if step["mode"] != "wait" {
                    return Err("version 1 vectors acquire in mode wait".into());
                }
                let frame = ClientFrame::acquire(self.lease, lock_name(step)?);
                out.send(&frame.to_bytes());
                self.state = V1State::Live(V1Exchange::new(self.lease.as_duration(), now));
                Ok(())
            }
            (Some("release"), V1State::Live(_)) => {
                self.state = V1State::HalfClosed;
                out.half_close();
                Ok(())
            }
            (call, _) => Err(format!("call {call:?} in this state")),
        }
    }

    fn recv(&mut self, bytes: &[u8], now: Instant, out: &mut Out) -> Result<(), String> {
        match &self.state {
            // What still arrives after the shutdown is read and dropped.
            V1State::HalfClosed => Ok(()),
            V1State::Live(exchange) => {
                // The driver's pessimist's check before it takes a read.
                if now >= exchange.deadline() {
                    self.lose(&expired(self.lease), out);
                    return Ok(());
                }
                self.buf.extend_from_slice(bytes);
                self.take_frames(now, out);
                Ok(())
            }
            V1State::Idle | V1State::Ended => Err("recv on no live connection".into()),
        }
    }

    fn eof(&mut self, out: &mut Out) -> Result<(), String> {
        match self.state {
            V1State::HalfClosed => {
                self.state = V1State::Ended;
                out.event(json!({ "event": "released" }));
                Ok(())
            }
            V1State::Live(_) => {
                self.lose(&LossReason::ConnectionClosed, out);
                Ok(())
            }
            V1State::Idle | V1State::Ended => Err("eof on no live connection".into()),
        }
    }

    fn advance(&mut self, now: Instant, out: &mut Out) {
        let V1State::Live(exchange) = &mut self.state else {
            return;
        };
        if now >= exchange.deadline() {
            self.lose(&expired(self.lease), out);
        } else if exchange.next_heartbeat().is_some_and(|due| due <= now) {
            out.send(&ClientFrame::Heartbeat.to_bytes());
            exchange.heartbeat_sent(now);
        }
    }

    fn belief(&self, claim: Option<u32>, now: Instant) -> Result<bool, String> {
        if claim.is_some() {
            return Err("a version 1 belief names no claim".into());
        }
        Ok(self
            .exchange()
            .is_some_and(|exchange| self.token.is_some() && now < exchange.deadline()))
    }

    fn deadline(&self) -> Option<Instant> {
        self.exchange().map(V1Exchange::deadline)
    }

    fn next_heartbeat(&self) -> Option<Instant> {
        self.exchange().and_then(V1Exchange::next_heartbeat)
    }
}

/// One claim of a version 2 session, as its owner sees it.
#[derive(Default)]
struct Owner {
    token: Option<u64>,
    /// The RELEASE is written: the owner no longer believes it holds.
    let_go: bool,
}

/// A version 2 session as `v2/session.rs`'s driver runs it.
struct V2 {
    lease: Lease,
    exchange: Option<V2Exchange>,
    ended: bool,
    buf: Vec<u8>,
    /// The live claims, by id (ascending: the order of their `lost`
    /// events when the session ends).
    owners: BTreeMap<u32, Owner>,
}

/// A state's fields as a `state` or `lock_state` event carries them.
fn state_fields(state: &LockState) -> Value {
    json!({
        "state_event": state.event.name(),
        "token": state.token,
        "since_ms": state.since_ms(),
        "value": state.value,
    })
}

fn watch_of(step: &Value) -> Result<u32, String> {
    step["watch"]
        .as_u64()
        .and_then(|id| u32::try_from(id).ok())
        .ok_or_else(|| "watch: a u32 required".into())
}

impl V2 {
    fn new(lease: Lease, _origin: Instant) -> Self {
        Self {
            lease,
            exchange: None,
            ended: false,
            buf: Vec::new(),
            owners: BTreeMap::new(),
        }
    }

    fn live(&self) -> Option<&V2Exchange> {
        self.exchange.as_ref().filter(|_| !self.ended)
    }

    /// The session is over: every live claim is lost with it, then every
    /// live watch, in ascending id.
    fn end(&mut self, reason: &LossReason, out: &mut Out) {
        self.ended = true;
        for claim in std::mem::take(&mut self.owners).into_keys() {
            out.event(lost(Some(claim), reason));
        }
        if let Some(exchange) = &self.exchange {
            for watch in exchange.watch_ids() {
                out.event(
                    json!({ "event": "watch_lost", "watch": watch, "reason": reason.name() }),
                );
            }
        }
    }

    fn unobserve(&mut self, watch: u32, now: Instant, out: &mut Out) {
        let Some(exchange) = self.exchange.as_mut() else {
            return;
        };
        if exchange.unobserve(watch) == UnobserveStep::Write {
            out.send(&ext::ClientFrame::Unobserve { watch }.to_bytes());
            exchange.unobserve_sent(watch, now);
        }
    }

    fn release(&mut self, claim: u32, now: Instant, out: &mut Out) {
        let Some(exchange) = self.exchange.as_mut() else {
            return;
        };
        let mut bytes = Vec::new();
        let let_go = write_release(exchange, &mut bytes, claim, now);
        if !bytes.is_empty() {
            out.send(&bytes);
        }
        if let_go && let Some(owner) = self.owners.get_mut(&claim) {
            owner.let_go = true;
        }
    }

    /// The driver's `take_frames` and `on_event`.
    fn take_frames(&mut self, now: Instant, out: &mut Out) {
        let mut used = 0;
        loop {
            let Some(exchange) = self.exchange.as_mut() else {
                return;
            };
            let frame = match ext::decode_response(&self.buf[used..]) {
                Ok(Some((frame, len))) => {
                    used += len;
                    frame
                }
                Ok(None) => break,
                Err(err) => {
                    let violation = ProtocolViolation::from_decode_ext(err);
                    self.end(&LossReason::ProtocolViolation(violation), out);
                    return;
                }
            };
            let event = match frame {
                ext::Response::Base(frame) => exchange.on_frame(frame, now),
                ext::Response::Ext(frame) => exchange.on_ext_frame(frame, now),
            };
            let event = match event {
                Ok(event) => event,
                Err(violation) => {
                    self.end(&LossReason::ProtocolViolation(violation), out);
                    return;
                }
            };
            match event {
                V2Event::Opened { .. } | V2Event::Nothing => {}
                V2Event::Held {
                    claim,
                    token,
                    release,
                } => {
                    self.owners.entry(claim).or_default().token = Some(token);
                    out.event(json!({ "event": "granted", "claim": claim, "token": token }));
                    if release {
                        self.release(claim, now, out);
                    }
                }
                V2Event::Queued { claim, release } => {
                    out.event(json!({ "event": "waiting", "claim": claim }));
                    if release {
                        self.release(claim, now, out);
                    }
                }
                V2Event::Busy { claim } => {
                    self.owners.remove(&claim);
                    out.event(json!({ "event": "busy", "claim": claim }));
                }
                V2Event::Refused { claim, code, .. } => {
                    self.owners.remove(&claim);
                    out.event(json!({ "event": "refused", "claim": claim, "code": code.0 }));
                }
                V2Event::Released { claim } => {
                    self.owners.remove(&claim);
                    out.event(json!({ "event": "released", "claim": claim }));
                }
                V2Event::Revoked {
                    claim,
                    code,
                    reason,
                } => {
                    self.owners.remove(&claim);
                    let reason = LossReason::Server {
                        code: v1_code(code),
                        reason,
                    };
                    out.event(lost(Some(claim), &reason));
                }
                V2Event::Ended { code, reason } => {
                    self.end(&LossReason::Server { code, reason }, out);
                    return;
                }
                V2Event::Features {
                    features,
                    max_watches,
                } => out.event(json!({
                    "event": "features",
                    "features": features,
                    "max_watches": max_watches,
                })),
                V2Event::Unsupported => {
                    // Nothing was asked on the session yet: nothing lost.
                    self.ended = true;
                    out.event(json!({ "event": "unsupported" }));
                    return;
                }
                V2Event::Proclaimed { claim } => {
                    out.event(json!({ "event": "proclaimed", "claim": claim }));
                }
                // A PROCLAIM that crossed the claim's end (REFUSED 0x20 after
                // a REVOKED) is nothing for anyone: the claim was lost.
                V2Event::ProclaimRefused { claim, code, .. } => {
                    if self.owners.contains_key(&claim) {
                        out.event(json!({ "event": "refused", "claim": claim, "code": code.0 }));
                    }
                }
                V2Event::Observing { watch, unobserve } => {
                    out.event(json!({ "event": "observing", "watch": watch }));
                    if unobserve {
                        self.unobserve(watch, now, out);
                    }
                }
                V2Event::WatchRefused { watch, code, .. } => {
                    out.event(json!({ "event": "refused", "watch": watch, "code": code.0 }));
                }
                V2Event::State { watch, state } => {
                    let mut event = state_fields(&state);
                    event["event"] = json!("state");
                    event["watch"] = json!(watch);
                    event["state_event"] = json!(state.event.name());
                    event["initial"] = json!(state.initial);
                    event["coalesced"] = json!(state.coalesced);
                    event["reason"] = json!(state.reason.map(|reason| reason.name()));
                    out.event(event);
                }
                V2Event::Unobserved { watch } => {
                    out.event(json!({ "event": "unobserved", "watch": watch }));
                }
                V2Event::LockState(state) => {
                    let mut event = state_fields(&state);
                    event["event"] = json!("lock_state");
                    out.event(event);
                }
                V2Event::LookupRefused { code, .. } => {
                    out.event(json!({ "event": "refused", "lookup": true, "code": code.0 }));
                }
            }
        }
        self.buf.drain(..used);
    }
}

impl Core for V2 {
    fn call(&mut self, step: &Value, now: Instant, out: &mut Out) -> Result<(), String> {
        if self.ended {
            return Err("call after the session ended".into());
        }
        let call = step["call"].as_str();
        if call == Some("open") {
            if self.exchange.is_some() {
                return Err("a second open".into());
            }
            out.send(&v2::ClientFrame::Open { lease: self.lease }.to_bytes());
            let mut exchange = V2Exchange::new(self.lease.as_duration(), now);
            match step["features"].as_u64() {
                None => {}
                Some(1) => {
                    let hello = ext::ClientFrame::Hello {
                        features: FEATURE_VALUES_AND_OBSERVERS,
                    };
                    out.send(&hello.to_bytes());
                    exchange.hello_sent(now);
                }
                Some(other) => return Err(format!("features {other}: 1 or none")),
            }
            self.exchange = Some(exchange);
            return Ok(());
        }
        let exchange = self.exchange.as_mut().ok_or("call before open")?;
        if !exchange.ready() {
            return Err("a call before FEATURES answered the HELLO".into());
        }
        match call {
            Some("observe") => {
                let watch = watch_of(step)?;
                let name = lock_name(step)?;
                out.send(&ext::ClientFrame::Observe { watch, name }.to_bytes());
                exchange.observe_sent(watch, now);
                return Ok(());
            }
            Some("unobserve") => {
                self.unobserve(watch_of(step)?, now, out);
                return Ok(());
            }
            Some("lookup") => {
                let name = lock_name(step)?;
                out.send(&ext::ClientFrame::Lookup { name }.to_bytes());
                exchange.lookup_sent(now);
                return Ok(());
            }
            _ => {}
        }
        let claim = claim_of(step)?.ok_or("call: no claim")?;
        match call {
            Some("acquire") => {
                let mode = match step["mode"].as_str() {
                    Some("wait") => Mode::Wait,
                    Some("try") => Mode::Try,
                    other => return Err(format!("mode {other:?}")),
                };
                let name = lock_name(step)?;
                let frame = match step.get("value") {
                    None => v2::ClientFrame::Acquire { claim, mode, name }.to_bytes(),
                    Some(value) => {
                        let value = value.as_str().ok_or("value: a string required")?;
                        ext::ClientFrame::AcquireValue {
                            claim,
                            mode,
                            name,
                            value: value.to_owned(),
                        }
                        .to_bytes()
                    }
                };
                out.send(&frame);
                exchange.acquire_sent(claim, mode, now);
                self.owners.insert(claim, Owner::default());
                Ok(())
            }
            Some("proclaim") => {
                let value = step["value"].as_str().ok_or("proclaim: no value")?;
                if exchange.is_live(claim) {
                    let frame = ext::ClientFrame::Proclaim {
                        claim,
                        value: value.to_owned(),
                    };
                    out.send(&frame.to_bytes());
                    exchange.proclaim_sent(claim, now);
                }
                Ok(())
            }
            Some("release") => {
                self.release(claim, now, out);
                Ok(())
            }
            other => Err(format!("call {other:?}")),
        }
    }

    fn recv(&mut self, bytes: &[u8], now: Instant, out: &mut Out) -> Result<(), String> {
        let exchange = self.live().ok_or("recv on no live session")?;
        if now >= exchange.deadline() {
            self.end(&expired(self.lease), out);
            return Ok(());
        }
        self.buf.extend_from_slice(bytes);
        self.take_frames(now, out);
        Ok(())
    }

    fn eof(&mut self, out: &mut Out) -> Result<(), String> {
        self.live().ok_or("eof on no live session")?;
        self.end(&LossReason::ConnectionClosed, out);
        Ok(())
    }

    fn advance(&mut self, now: Instant, out: &mut Out) {
        let Some(exchange) = self.exchange.as_mut().filter(|_| !self.ended) else {
            return;
        };
        if now >= exchange.deadline() {
            self.end(&expired(self.lease), out);
        } else if exchange.next_ping().is_some_and(|due| due <= now) {
            out.send(&v2::ClientFrame::Ping.to_bytes());
            exchange.ping_sent(now);
        }
    }

    fn belief(&self, claim: Option<u32>, now: Instant) -> Result<bool, String> {
        let claim = claim.ok_or("a version 2 belief names its claim")?;
        let Some(exchange) = self.live() else {
            return Ok(false);
        };
        Ok(self.owners.get(&claim).is_some_and(|owner| {
            owner.token.is_some() && !owner.let_go && now < exchange.deadline()
        }))
    }

    fn deadline(&self) -> Option<Instant> {
        self.live().map(V2Exchange::deadline)
    }

    fn next_heartbeat(&self) -> Option<Instant> {
        self.live().and_then(V2Exchange::next_ping)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_passes_every_vector() {
        let dir = directory(env!("CARGO_MANIFEST_DIR"));
        let files = files(&dir).expect("the vectors directory");
        assert!(files.len() >= 6, "vectors found in {}", dir.display());
        let failures = replay_all(&dir).expect("the vectors read");
        assert!(
            failures.is_empty(),
            "{} of {} vectors fail:\n{}",
            failures.len(),
            files.len(),
            failures
                .iter()
                .map(|(name, err)| format!("{name}: {err}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    #[test]
    fn an_unlisted_output_fails_the_replay() {
        // The heartbeat due at 500 is written; a vector that omits it fails.
        let vector = r#"{"protocol": 1, "lease_ms": 2000, "steps": [
            {"step": "call", "call": "acquire", "lock": "deploy", "mode": "wait"},
            {"step": "send", "hex": "0101000007d000066465706c6f79"},
            {"step": "recv", "hex": "120000000000000007"},
            {"step": "event", "event": "granted", "token": 7},
            {"step": "advance", "to": 500}
        ]}"#;
        let err = replay(vector).expect_err("the heartbeat is not listed");
        assert!(err.contains("does not list"), "{err}");
        // And a listed output the client does not produce fails it too.
        let vector = r#"{"protocol": 1, "lease_ms": 2000, "steps": [
            {"step": "call", "call": "acquire", "lock": "deploy", "mode": "wait"},
            {"step": "send", "hex": "0101000007d000066465706c6f79"},
            {"step": "advance", "to": 499},
            {"step": "send", "hex": "02"}
        ]}"#;
        let err = replay(vector).expect_err("nothing is due at 499");
        assert!(err.contains("produced no write"), "{err}");
    }
}
