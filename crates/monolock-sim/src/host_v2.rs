//! A version 2 host: the real `monolock-client` on its default protocol,
//! with several claims at once (one task each) sharing the client's
//! sessions, and a probe that reads every claim's belief every millisecond
//! for the checker.
//!
//! The claims of a host ask for one lease, so they gather on one session:
//! they hold and queue side by side, a REVOKED ends one of them, and a
//! pause or a stalled link meets every claim at the session's deadline.
//! The probe reads a claim's belief through its guard until the guard is
//! given up, and through the release too: by the contract the belief ends
//! when the RELEASE is written, not when RELEASED arrives.

use std::{cell::RefCell, rc::Rc, time::Duration};

use crate::observers::{ClaimId, value_of};
use crate::observing::{self, Views};
use monolock_client::{BeliefProbe, Client, ErrorCode, LockGuard, LossReason};
use rand::{Rng, SeedableRng, rngs::SmallRng};

use crate::{
    client::{LEASES, PROBE_EVERY},
    lab::SharedLab,
    server,
    stream::{Gate, SimConnector},
};

/// What one version 2 host does.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub(crate) id: usize,
    pub(crate) seed: u64,
    pub(crate) locks: Vec<String>,
    /// From then on no fault is injected: one more cycle per claim, then
    /// stop.
    pub(crate) heal_at: Duration,
    pub(crate) max_hold: Duration,
    /// Let a claim name a lock another claim of the host uses.
    pub(crate) same_lock_claims: bool,
    /// Observe every lock, and give every claim a value (replaced now and
    /// then while held).
    pub(crate) observers: bool,
}

/// Per claim slot: the lock it uses (asked, queued or held) and, while it
/// may believe, the probe of its belief.
#[derive(Default)]
struct Slot {
    lock: Option<String>,
    belief: Option<BeliefProbe>,
}

type Slots = Rc<RefCell<Vec<Slot>>>;

fn now() -> Duration {
    turmoil::sim_elapsed().unwrap_or_default()
}

/// The host process.
pub(crate) async fn process(plan: Plan, lab: SharedLab, gate: Gate) -> turmoil::Result {
    let mut rng = SmallRng::seed_from_u64(plan.seed);
    let claims = rng.random_range(3..=5);
    let lease = LEASES[rng.random_range(0..LEASES.len())];
    // The client's default protocol: version 2 sessions.
    let client = Client::new(server::address())
        .with_connector(SimConnector {
            gate,
            lab: lab.clone(),
            window: None,
        })
        .with_connect_timeout(Duration::from_millis(500))
        .with_default_lease(lease);
    let slots: Slots = Rc::new(RefCell::new((0..claims).map(|_| Slot::default()).collect()));
    let probe = tokio::task::spawn_local(probe(
        plan.clone(),
        client.clone(),
        lease,
        slots.clone(),
        lab.clone(),
    ));
    lab.trace(format_args!(
        "c{} v2 host: {claims} claims, lease {lease:?}",
        plan.id
    ));
    let views = Views::default();
    let mut watching = tokio::task::JoinSet::new();
    if plan.observers {
        lab.lock().checker.observer_started(plan.id);
        let stride = plan.locks.len() as u64;
        for (l, lock) in plan.locks.iter().enumerate() {
            watching.spawn_local(observing::observe_lock(
                plan.id,
                lock.clone(),
                l as u64,
                stride,
                plan.seed,
                plan.heal_at,
                client.clone(),
                lab.clone(),
                views.clone(),
            ));
        }
    }
    let mut tasks = tokio::task::JoinSet::new();
    for slot in 0..claims {
        let seed = rng.random();
        tasks.spawn_local(claim_loop(
            plan.clone(),
            slot,
            seed,
            client.clone(),
            lease,
            slots.clone(),
            lab.clone(),
        ));
    }
    // Once the faults stop, the first claim granted and given up again
    // ends the host (its other claims are dropped: RELEASEs).
    let _ = tasks.join_next().await;
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    probe.abort();
    lab.lock().checker.client_done(plan.id);
    if plan.observers {
        observing::final_views(plan.id, &plan.locks, &views, &lab).await;
        watching.abort_all();
        while watching.join_next().await.is_some() {}
    }
    lab.trace(format_args!("c{} done", plan.id));
    Ok(())
}

/// One claim slot: asks, holds, releases or drops, thinks, again.
async fn claim_loop(
    plan: Plan,
    slot: usize,
    seed: u64,
    client: Client<SimConnector>,
    lease: Duration,
    slots: Slots,
    lab: SharedLab,
) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let id = plan.id;
    // Spread the first asks out.
    tokio::time::sleep(Duration::from_millis(rng.random_range(0..50))).await;
    let mut ask = 0u64;
    loop {
        let healed = now() >= plan.heal_at;
        let lock = {
            let slots = slots.borrow();
            let free: Vec<&String> = plan
                .locks
                .iter()
                .filter(|lock| {
                    plan.same_lock_claims || !slots.iter().any(|s| s.lock.as_ref() == Some(*lock))
                })
                .collect();
            if free.is_empty() {
                None
            } else {
                Some(free[rng.random_range(0..free.len())].clone())
            }
        };
        let Some(lock) = lock else {
            tokio::time::sleep(Duration::from_millis(rng.random_range(10..100))).await;
            continue;
        };
        slots.borrow_mut()[slot].lock = Some(lock.clone());
        let try_only = !healed && rng.random_bool(0.2);
        // Some asks are abandoned while queued (a caller's timeout): the
        // claim's RELEASE goes out while it waits.
        let patience = (!healed && !try_only && rng.random_bool(0.3))
            .then(|| Duration::from_millis(rng.random_range(10..1500)));
        lab.trace(format_args!(
            "c{id} claim {slot} asks for {lock}{}",
            if try_only { " (try)" } else { "" }
        ));
        ask += 1;
        let claim: ClaimId = (id, slot as u32, ask);
        // With observers, every claim carries a value naming it; without,
        // none (the plain ACQUIRE of the runs before values).
        let value = if plan.observers {
            let value = value_of(id, slot as u32, ask, 0);
            lab.lock().checker.value_written(value.clone(), claim, 0);
            value
        } else {
            String::new()
        };
        let result = if try_only {
            match client.try_acquire_with_value(&lock, lease, &value).await {
                Ok(Some(guard)) => Some(Ok(guard)),
                Ok(None) => {
                    lab.trace(format_args!("c{id} claim {slot}: {lock} busy"));
                    lab.lock().count_v2("BUSY");
                    None
                }
                Err(err) => Some(Err(err)),
            }
        } else {
            let acquire = client.acquire_with_value(&lock, lease, &value);
            match patience {
                Some(patience) => match tokio::time::timeout(patience, acquire).await {
                    Ok(result) => Some(result),
                    Err(_) => {
                        lab.trace(format_args!("c{id} claim {slot} stops waiting for {lock}"));
                        lab.lock().count_v2("claim given up while asked or queued");
                        None
                    }
                },
                None => Some(acquire.await),
            }
        };
        let mut done = false;
        match result {
            None => {}
            Some(Ok(guard)) => {
                lab.trace(format_args!(
                    "c{id} claim {slot} holds {lock} token {}",
                    guard.token()
                ));
                if plan.observers {
                    lab.lock()
                        .checker
                        .holder_learned(now(), guard.token(), claim);
                }
                hold(&plan, (slot, claim), &slots, &lab, guard, lease, &mut rng).await;
                done = healed;
            }
            Some(Err(err)) => {
                lab.trace(format_args!(
                    "c{id} claim {slot} fails to get {lock}: {err}"
                ));
                let backoff = rng.random_range(5..200);
                tokio::time::sleep(Duration::from_millis(backoff)).await;
            }
        }
        slots.borrow_mut()[slot].lock = None;
        if done {
            break;
        }
        let think = rng.random_range(0..100);
        tokio::time::sleep(Duration::from_millis(think)).await;
    }
}

/// Holds `guard` for a while (or until it is lost), then releases it,
/// waiting for RELEASED, or drops it.
async fn hold(
    plan: &Plan,
    (slot, claim): (usize, ClaimId),
    slots: &Slots,
    lab: &SharedLab,
    guard: LockGuard,
    lease: Duration,
    rng: &mut SmallRng,
) {
    let id = plan.id;
    slots.borrow_mut()[slot].belief = Some(guard.belief_probe());
    if slots.borrow().iter().filter(|s| s.belief.is_some()).count() > 1 {
        lab.lock().count_v2("several claims held on one host");
    }
    let healed = now() >= plan.heal_at;
    let hold_for = if !healed && rng.random_bool(0.3) {
        lease.mul_f64(rng.random_range(1.0..4.0))
    } else {
        Duration::from_millis(rng.random_range(0..=plan.max_hold.as_millis() as u64))
    };
    let until = tokio::time::Instant::now() + hold_for;
    // With observers, the value is replaced up to twice while held (a
    // PROCLAIM halfway through what is left of the hold).
    let proclaims = if plan.observers {
        rng.random_range(0..=2u32)
    } else {
        0
    };
    let lost = async {
        for n in 1..=proclaims {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            tokio::select! {
                () = tokio::time::sleep(left / 2) => {}
                reason = guard.lost() => return Some(reason),
            }
            let value = value_of(id, slot as u32, claim.2, n);
            lab.lock().checker.value_written(value.clone(), claim, n);
            tokio::select! {
                replaced = guard.set_value(&value) => {
                    lab.trace(format_args!("c{id} claim {slot} replaces its value: {replaced:?}"));
                    if replaced.is_ok() {
                        lab.lock().count_v2("PROCLAIMED read");
                    }
                }
                reason = guard.lost() => return Some(reason),
            }
        }
        tokio::select! {
            () = tokio::time::sleep_until(until) => None,
            reason = guard.lost() => Some(reason),
        }
    }
    .await;
    if let Some(reason) = lost {
        lab.trace(format_args!(
            "c{id} claim {slot} lost {}: {reason}",
            guard.name()
        ));
        let event = match &reason {
            LossReason::Server { code, .. } if *code == ErrorCode::CLOSED_BY_ADMIN => "REVOKED",
            LossReason::HeartbeatTimeout { .. } => "session deadline passed with a claim held",
            _ => "session ended with a claim held",
        };
        lab.lock().count_v2(event);
        slots.borrow_mut()[slot].belief = None;
        return;
    }
    if rng.random_bool(0.7) {
        let name = guard.name().as_str().to_owned();
        let token = guard.token();
        // The probe keeps reading the belief while the release is on its
        // way: it must end when the RELEASE is written.
        let result = guard.release().await;
        lab.trace(format_args!("c{id} claim {slot} releases: {result:?}"));
        if result.is_ok() {
            lab.lock().count_v2("RELEASED read");
            lab.lock()
                .checker
                .released_read(now(), id, slot as u32, &name, token);
        }
    } else {
        lab.trace(format_args!("c{id} claim {slot} drops its guard"));
        drop(guard);
    }
    slots.borrow_mut()[slot].belief = None;
}

/// Reads every claim's belief every millisecond and reports them; places
/// one more claim when the nemesis asks (a frame in flight at a chosen
/// instant).
async fn probe(
    plan: Plan,
    client: Client<SimConnector>,
    lease: Duration,
    slots: Slots,
    lab: SharedLab,
) {
    let id = plan.id;
    let mut tick = tokio::time::interval(PROBE_EVERY);
    loop {
        tick.tick().await;
        let beliefs: Vec<(u32, String, u64)> = slots
            .borrow()
            .iter()
            .enumerate()
            .filter_map(|(slot, s)| {
                let token = s.belief.as_ref()?.believed()?;
                Some((slot as u32, s.lock.clone()?, token))
            })
            .collect();
        let poked = {
            let mut lab = lab.lock();
            lab.checker.probe_claims(id, now(), beliefs);
            lab.take_poke(id)
        };
        if poked {
            let lock = plan.locks[(now().as_millis() as usize) % plan.locks.len()].clone();
            let client = client.clone();
            let lab = lab.clone();
            tokio::task::spawn_local(async move {
                lab.trace(format_args!("c{id} places one more claim, on {lock}"));
                // Given up (a RELEASE) as soon as it is answered.
                let asked = client.try_acquire(&lock, lease);
                let _ = tokio::time::timeout(lease * 2, asked).await;
            });
        }
    }
}
