//! A version 2 client host: sessions of the simulation's own v2 client
//! (`v2.rs`) carrying several claims at once, on the same locks as the
//! version 1 clients, and a probe that reads its beliefs every millisecond
//! for the checker.
//!
//! Each session opens with a lease drawn from [`LEASES`], runs 3 to 5 claim
//! slots side by side, and ends in one of the ways the protocol names:
//!
//! - each slot loops: ACQUIRE (wait, or try), hold, RELEASE; some RELEASEs
//!   go in one write with the next ACQUIRE of the same id, some are sent
//!   while the claim still waits (racing its GRANTED push); some ACQUIREs name a
//!   lock another claim of the session holds or waits for, so a session
//!   may hold and queue on one lock when it ends;
//! - after a drawn lifetime the session ends with its held and waiting
//!   claims: by close (the connection dropped at once), or by expiry (the
//!   client stops sending, gives its claims up at its deadline and closes
//!   only after the server's lease has run out, as a stopped process
//!   would), or gracefully (every claim released, then close);
//! - a session also ends at its deadline (`S + 0.8 x lease`), on EOF, a
//!   reset, ERROR or a frame the contract does not allow.
//!
//! Once the faults stop, the host finishes after one more claim held and
//! released (the liveness check waits for it).

use std::{cell::RefCell, net::SocketAddr, rc::Rc, time::Duration};

use monolock_proto::{
    Lease, LockName,
    v2::{Mode, decode_response},
};
use rand::{Rng, SeedableRng, rngs::SmallRng};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    time::Instant,
};

use crate::{
    client::{LEASES, PROBE_EVERY},
    lab::SharedLab,
    server,
    stream::{Gate, SimStream},
    v2::{Claim, Core, Mistake, Note},
};

/// What one v2 host does.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub(crate) id: usize,
    pub(crate) seed: u64,
    pub(crate) locks: Vec<String>,
    pub(crate) heal_at: Duration,
    pub(crate) max_hold: Duration,
    pub(crate) mistakes: Vec<Mistake>,
    /// Whether a claim may name a lock another claim of its session uses.
    pub(crate) same_lock_claims: bool,
}

type Current = Rc<RefCell<Option<Core>>>;

fn elapsed() -> Duration {
    turmoil::sim_elapsed().unwrap_or_default()
}

/// How a session ends on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    Close,
    Expiry,
    Graceful,
}

/// One claim slot of a session.
#[derive(Clone, Copy, Debug)]
enum Slot {
    /// Nothing claimed; the next ACQUIRE at this instant.
    Idle(Instant),
    /// ACQUIRE sent under this id; give up (RELEASE while waiting) at the
    /// instant, if any.
    Asking(u32, Option<Instant>),
    /// Held under this id until the instant.
    Holding(u32, Instant),
}

struct Workload {
    id: usize,
    rng: SmallRng,
    /// Whether an ACQUIRE may name a lock another claim of the session
    /// holds or waits for: drawn apart, so that the other draws of a seed
    /// stay as they were when it says no (`None`: never).
    same_lock: Option<SmallRng>,
    locks: Vec<String>,
    max_hold: Duration,
    slots: Vec<Slot>,
    next_claim: u32,
    /// When the session ends on purpose, and how.
    end: Option<(Instant, Ending)>,
    /// Silent since (ending by expiry): nothing more is sent.
    silent: Option<Instant>,
    /// A hold completed after the faults stopped: the host may finish.
    done: bool,
    /// Times the purposeful end was put off to catch the session with
    /// claims both held and waiting.
    put_off: u32,
    healed: bool,
}

/// The host process.
pub(crate) async fn process(plan: Plan, lab: SharedLab, gate: Gate) -> turmoil::Result {
    let current = Current::default();
    let probe = tokio::task::spawn_local(probe(plan.id, current.clone(), lab.clone()));
    let mut rng = SmallRng::seed_from_u64(plan.seed);
    let id = plan.id;
    loop {
        let healed = elapsed() >= plan.heal_at;
        let lease = LEASES[rng.random_range(0..LEASES.len())];
        let work_seed: u64 = rng.random();
        let mut work = Workload {
            id,
            rng: SmallRng::seed_from_u64(work_seed),
            same_lock: plan
                .same_lock_claims
                .then(|| SmallRng::seed_from_u64(work_seed ^ 0x5a4d_454c_4f43_4b32)),
            locks: plan.locks.clone(),
            max_hold: plan.max_hold,
            slots: Vec::new(),
            next_claim: rng.random_range(0..4),
            end: None,
            silent: None,
            done: false,
            put_off: 0,
            healed,
        };
        lab.trace(format_args!("c{id} opens a v2 session, lease {lease:?}"));
        let finished = session(&plan, &lab, &gate, &current, lease, &mut work).await;
        current.borrow_mut().take();
        if finished {
            break;
        }
        let backoff = rng.random_range(5..200);
        tokio::time::sleep(Duration::from_millis(backoff)).await;
    }
    probe.abort();
    lab.lock().checker.client_done(id);
    lab.trace(format_args!("c{id} done"));
    Ok(())
}

/// Runs one session to its end; true when the host is done.
async fn session(
    plan: &Plan,
    lab: &SharedLab,
    gate: &Gate,
    current: &Current,
    lease: Duration,
    work: &mut Workload,
) -> bool {
    let id = plan.id;
    let connect = turmoil::net::TcpStream::connect(server::address());
    let stream = match tokio::time::timeout(Duration::from_millis(500), connect).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(err)) => {
            lab.trace(format_args!("c{id} cannot connect: {err}"));
            return false;
        }
        Err(_) => {
            lab.trace(format_args!("c{id} connect timed out"));
            return false;
        }
    };
    let Ok(local) = stream.local_addr() else {
        return false;
    };
    let mut stream = SimStream::client(stream, local, gate.clone(), lab.clone());
    let Some(lease_ms) = Lease::from_duration(lease) else {
        return false;
    };
    let now = Instant::now();
    let (core, open) = Core::open(lease_ms, now, plan.mistakes.clone());
    *current.borrow_mut() = Some(core);
    work.start(now, lease);
    let mut out = open;
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 512];
    loop {
        if !out.is_empty() {
            let written = match stream.write_all(&out).await {
                Ok(()) => stream.flush().await,
                Err(err) => Err(err),
            };
            if let Err(err) = written {
                lab.trace(format_args!("c{id} v2 write failed: {err}"));
                return false;
            }
            out.clear();
        }
        let now = Instant::now();
        let wake = {
            let core = current.borrow();
            let Some(core) = core.as_ref() else {
                return false;
            };
            // Before OPENED nothing is due but the deadline.
            let mut wake = None;
            if core.is_open() {
                wake = work.next_at();
                match work.silent {
                    Some(since) => wake = Some(since + lease.mul_f64(1.5)),
                    None => wake = earliest(wake, core.next_ping()),
                }
            }
            if core.deadline() > now {
                wake = earliest(wake, Some(core.deadline()));
            }
            wake.unwrap_or(now + lease)
        };
        // Biased: tokio's random branch order would break the replay.
        tokio::select! {
            biased;
            read = stream.read(&mut chunk) => match read {
                Ok(0) | Err(_) => {
                    lab.trace(format_args!("c{id} v2 session closed by the server: every claim lost"));
                    return false;
                }
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    if !take_frames(id, local, lab, current, &mut buf, work) {
                        return false;
                    }
                }
            },
            () = tokio::time::sleep_until(wake) => {}
        }
        let now = Instant::now();
        let mut core = current.borrow_mut();
        let Some(core) = core.as_mut() else {
            return false;
        };
        if let Some(since) = work.silent {
            // A stopped process: its claims went at its deadline; it closes
            // once the server's lease has surely run out.
            if now >= since + core.lease().mul_f64(1.5) {
                lab.trace(format_args!("c{id} closes its silent session"));
                return false;
            }
            continue;
        }
        if core.expired(now) {
            let (held, waiting) = core.counts();
            lab.trace(format_args!(
                "c{id} v2 deadline passed: {held} held and {waiting} waiting claims lost"
            ));
            return false;
        }
        if !core.is_open() {
            continue;
        }
        match work.act(core, now, &mut out, lab) {
            Act::Go => {}
            Act::Close => {
                if core.holds_and_waits_on_one_lock() {
                    lab.lock().count_v2("close holding and waiting on one lock");
                }
                let (held, waiting) = core.counts();
                lab.lock().count_v2(if held > 0 && waiting > 0 {
                    "close with held and waiting claims"
                } else {
                    "close"
                });
                lab.trace(format_args!(
                    "c{id} closes its v2 session with {held} held and {waiting} waiting claims"
                ));
                return false;
            }
            Act::Finish => {
                lab.trace(format_args!("c{id} closes its v2 session, finished"));
                return true;
            }
        }
        if work.silent.is_none()
            && let Some(due) = core.next_ping()
            && due <= now
        {
            core.ping(now, &mut out);
        }
    }
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Decodes and applies every whole frame in `buf`; false when the session
/// is over.
fn take_frames(
    id: usize,
    local: SocketAddr,
    lab: &SharedLab,
    current: &Current,
    buf: &mut Vec<u8>,
    work: &mut Workload,
) -> bool {
    let now = Instant::now();
    loop {
        let (frame, used) = match decode_response(buf) {
            Ok(Some(decoded)) => decoded,
            Ok(None) => return true,
            Err(err) => {
                lab.trace(format_args!("c{id} v2 bad frame: {err}"));
                return false;
            }
        };
        buf.drain(..used);
        let result = {
            let mut core = current.borrow_mut();
            let Some(core) = core.as_mut() else {
                return false;
            };
            let result = core.on_frame(frame, now);
            // RELEASED means released: the server neither holds the claim
            // nor queues it any more (docs/protocol.md, "Claims").
            if let Ok(Note::ReleasedClaim(claim, lock, token)) = &result {
                let in_use = core.names_lock(lock);
                lab.lock().checker.released_read(
                    elapsed(),
                    id,
                    local,
                    *claim,
                    lock.as_str(),
                    *token,
                    in_use,
                );
            }
            result
        };
        match result {
            Ok(note) => work.note(lab, &note),
            Err(ended) => {
                lab.trace(format_args!("c{id} v2 session over: {ended:?}"));
                return false;
            }
        }
    }
}

enum Act {
    Go,
    Close,
    Finish,
}

impl Workload {
    fn start(&mut self, now: Instant, lease: Duration) {
        let slots = self.rng.random_range(3..=5);
        self.slots = (0..slots)
            .map(|_| Slot::Idle(now + Duration::from_millis(self.rng.random_range(0..50))))
            .collect();
        if !self.healed {
            let life = lease.mul_f64(self.rng.random_range(1.0..4.0));
            let ending = match self.rng.random_range(0..10) {
                0..=3 => Ending::Close,
                4..=7 => Ending::Expiry,
                _ => Ending::Graceful,
            };
            self.end = Some((now + life, ending));
        }
    }

    fn next_at(&self) -> Option<Instant> {
        if self.silent.is_some() {
            return None;
        }
        let mut next = self.end.map(|(at, _)| at);
        for slot in &self.slots {
            let at = match *slot {
                Slot::Idle(at) | Slot::Holding(_, at) | Slot::Asking(_, Some(at)) => Some(at),
                Slot::Asking(_, None) => None,
            };
            next = earliest(next, at);
        }
        next
    }

    fn note(&mut self, lab: &SharedLab, note: &Note) {
        let id = self.id;
        match note {
            Note::Quiet | Note::Released(_) | Note::ReleasedClaim(..) | Note::NotTaken(_) => {}
            Note::Holds(claim, token) => {
                lab.trace(format_args!("c{id} claim {claim} holds, token {token}"));
            }
            Note::GrantedWhileReleasing(claim, token) => {
                lab.lock().count_v2("GRANTED crossing a RELEASE");
                lab.trace(format_args!(
                    "c{id} claim {claim} GRANTED token {token} while its RELEASE is on the way"
                ));
            }
            Note::Revoked(claim) => {
                lab.lock().count_v2("REVOKED");
                lab.trace(format_args!("c{id} claim {claim} revoked"));
            }
            Note::RevokedWhileReleasing(claim) => {
                lab.lock().count_v2("REVOKED crossing a RELEASE");
                lab.trace(format_args!(
                    "c{id} claim {claim} revoked while its RELEASE is on the way"
                ));
            }
        }
    }

    fn hold_for(&mut self, lease: Duration) -> Duration {
        if self.rng.random_bool(0.3) {
            lease.mul_f64(self.rng.random_range(1.0..4.0))
        } else {
            Duration::from_millis(self.rng.random_range(0..=self.max_hold.as_millis() as u64))
        }
    }

    fn acquire(
        &mut self,
        core: &mut Core,
        now: Instant,
        out: &mut Vec<u8>,
        lab: &SharedLab,
    ) -> Option<Slot> {
        // Now and then a claim names a lock that another claim of the
        // session holds or waits for: the session then holds and queues on
        // one lock, and its end must hand that lock on past its own queued
        // claim.
        let same_lock = self
            .same_lock
            .as_mut()
            .is_some_and(|rng| rng.random_bool(0.3));
        let in_use: Vec<String> = self
            .slots
            .iter()
            .filter_map(|slot| match slot {
                Slot::Asking(claim, _) | Slot::Holding(claim, _) => match core.claim(*claim) {
                    Some(
                        Claim::Acquiring(name)
                        | Claim::Waiting(name)
                        | Claim::Held(name, _)
                        | Claim::Releasing(name, _),
                    ) => Some(name.as_str().to_owned()),
                    None => None,
                },
                Slot::Idle(_) => None,
            })
            .collect();
        let free: Vec<&String> = self
            .locks
            .iter()
            .filter(|l| same_lock || !in_use.contains(l))
            .collect();
        if free.is_empty() {
            return Some(self.think(now));
        }
        let lock = free[self.rng.random_range(0..free.len())].clone();
        let name = LockName::new(&lock).ok()?;
        let mode = if self.rng.random_bool(0.2) {
            Mode::Try
        } else {
            Mode::Wait
        };
        let claim = self.next_claim;
        self.next_claim = self.next_claim.wrapping_add(1);
        lab.trace(format_args!(
            "c{} claim {claim} asks for {lock} ({mode:?})",
            self.id
        ));
        core.acquire(claim, mode, name, now, out);
        let patience = (!self.healed && self.rng.random_bool(0.4))
            .then(|| now + Duration::from_millis(self.rng.random_range(10..1500)));
        Some(Slot::Asking(claim, patience))
    }

    /// Moves every slot on by what the core says and what is due at `now`,
    /// appending the frames to send to `out`.
    fn act(&mut self, core: &mut Core, now: Instant, out: &mut Vec<u8>, lab: &SharedLab) -> Act {
        let id = self.id;
        if let Some((at, ending)) = self.end
            && at <= now
        {
            let (held, waiting) = core.counts();
            if ending != Ending::Graceful && (held == 0 || waiting == 0) && self.put_off < 8 {
                self.put_off += 1;
                let later = now + Duration::from_millis(self.rng.random_range(50..400));
                self.end = Some((later, ending));
                return Act::Go;
            }
            match ending {
                Ending::Close => return Act::Close,
                Ending::Expiry => {
                    let (held, waiting) = core.counts();
                    lab.lock().count_v2(if held > 0 && waiting > 0 {
                        "expiry with held and waiting claims"
                    } else {
                        "expiry"
                    });
                    lab.trace(format_args!(
                        "c{id} goes silent with {held} held and {waiting} waiting claims"
                    ));
                    self.silent = Some(now);
                    return Act::Go;
                }
                Ending::Graceful => {
                    for slot in std::mem::take(&mut self.slots) {
                        if let Slot::Asking(claim, _) | Slot::Holding(claim, _) = slot {
                            core.release(claim, now, out);
                        }
                    }
                    self.end = Some((now + core.lease(), Ending::Close));
                    lab.trace(format_args!("c{id} releases every claim"));
                    return Act::Go;
                }
            }
        }
        let lease = core.lease();
        for i in 0..self.slots.len() {
            let slot = self.slots[i];
            self.slots[i] = match slot {
                Slot::Idle(at) if at <= now => match self.acquire(core, now, out, lab) {
                    Some(next) => next,
                    None => slot,
                },
                Slot::Idle(_) => slot,
                Slot::Asking(claim, patience) => match core.claim(claim) {
                    Some(Claim::Held(..)) => Slot::Holding(claim, now + self.hold_for(lease)),
                    Some(Claim::Acquiring(_) | Claim::Waiting(_)) => match patience {
                        Some(at) if at <= now => {
                            lab.trace(format_args!("c{id} claim {claim} stops waiting: RELEASE"));
                            core.release(claim, now, out);
                            lab.lock().count_v2("RELEASE of a waiting claim");
                            self.think(now)
                        }
                        _ => slot,
                    },
                    Some(Claim::Releasing(..)) | None => self.think(now),
                },
                Slot::Holding(claim, until) => match core.claim(claim) {
                    Some(Claim::Held(..)) if until <= now => {
                        lab.trace(format_args!("c{id} claim {claim} releases"));
                        core.release(claim, now, out);
                        if self.healed {
                            self.done = true;
                            self.think(now)
                        } else if self.rng.random_bool(0.4) {
                            // RELEASE and the next ACQUIRE of the same id,
                            // in one write.
                            let lock = match core.claim(claim) {
                                Some(Claim::Releasing(name, _)) => name.as_str().to_owned(),
                                _ => String::new(),
                            };
                            match LockName::new(&lock) {
                                Ok(name) => {
                                    lab.trace(format_args!(
                                        "c{id} claim {claim} asks for {lock} again in the same write"
                                    ));
                                    core.acquire(claim, Mode::Wait, name, now, out);
                                    lab.lock().count_v2("RELEASE and ACQUIRE in one write");
                                    Slot::Asking(claim, None)
                                }
                                Err(_) => self.think(now),
                            }
                        } else {
                            self.think(now)
                        }
                    }
                    Some(Claim::Held(..)) => slot,
                    _ => self.think(now),
                },
            };
        }
        if self.done {
            return Act::Finish;
        }
        Act::Go
    }

    fn think(&mut self, now: Instant) -> Slot {
        Slot::Idle(now + Duration::from_millis(self.rng.random_range(0..100)))
    }
}

/// Reads the session's beliefs every millisecond and reports them.
async fn probe(id: usize, current: Current, lab: SharedLab) {
    let mut tick = tokio::time::interval(PROBE_EVERY);
    loop {
        tick.tick().await;
        let now = Instant::now();
        let beliefs = current
            .borrow()
            .as_ref()
            .map(|core| core.beliefs(now))
            .unwrap_or_default();
        lab.lock().checker.probe_claims(id, elapsed(), beliefs);
    }
}
