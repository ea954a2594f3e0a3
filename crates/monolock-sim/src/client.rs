//! A client host: the real `monolock-client` taking, holding and giving up
//! locks in a loop, and a probe that reads `is_held()` every millisecond
//! for the checker.

use std::{cell::RefCell, rc::Rc, time::Duration};

use monolock_client::{Client, LockGuard, Protocol};
use rand::{Rng, SeedableRng, rngs::SmallRng};

use crate::{
    lab::SharedLab,
    server,
    stream::{Gate, SimConnector},
};

/// Leases the clients ask for.
pub(crate) const LEASES: [Duration; 3] = [
    Duration::from_millis(400),
    Duration::from_millis(1000),
    Duration::from_millis(2500),
];

/// How often each client reads `is_held()`: the simulation's tick.
pub(crate) const PROBE_EVERY: Duration = Duration::from_millis(1);

/// What one client does.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub(crate) id: usize,
    pub(crate) seed: u64,
    pub(crate) locks: Vec<String>,
    /// From then on no fault is injected: one more full cycle, then stop.
    pub(crate) heal_at: Duration,
    pub(crate) max_hold: Duration,
}

type Held = Rc<RefCell<Option<Rc<LockGuard>>>>;

fn now() -> Duration {
    turmoil::sim_elapsed().unwrap_or_default()
}

/// The client process.
pub(crate) async fn process(plan: Plan, lab: SharedLab, gate: Gate) -> turmoil::Result {
    let held = Held::default();
    let probe = tokio::task::spawn_local(probe(plan.id, held.clone(), lab.clone()));
    let client = Client::new(server::address())
        .with_connector(SimConnector {
            gate,
            lab: lab.clone(),
            window: None,
        })
        .with_connect_timeout(Duration::from_millis(500))
        // These hosts are the version 1 clients; v2 hosts are `host_v2.rs`.
        .with_protocol(Protocol::V1);
    let mut rng = SmallRng::seed_from_u64(plan.seed);
    let id = plan.id;
    loop {
        let healed = now() >= plan.heal_at;
        let lock = &plan.locks[rng.random_range(0..plan.locks.len())];
        let lease = LEASES[rng.random_range(0..LEASES.len())];
        // Some acquires are abandoned while queued (a caller's timeout).
        let patience = (!healed && rng.random_bool(0.15))
            .then(|| Duration::from_millis(rng.random_range(10..2000)));
        lab.trace(format_args!("c{id} asks for {lock} lease {lease:?}"));
        let acquire = client.acquire(lock, lease);
        let result = match patience {
            Some(patience) => tokio::time::timeout(patience, acquire).await.ok(),
            None => Some(acquire.await),
        };
        match result {
            None => lab.trace(format_args!("c{id} stops waiting for {lock}")),
            Some(Ok(guard)) => {
                lab.trace(format_args!("c{id} holds {lock} token {}", guard.token()));
                hold(&plan, &lab, &held, guard, &mut rng).await;
                if healed {
                    break;
                }
            }
            Some(Err(err)) => {
                lab.trace(format_args!("c{id} fails to get {lock}: {err}"));
                let backoff = rng.random_range(5..200);
                tokio::time::sleep(Duration::from_millis(backoff)).await;
            }
        }
    }
    probe.abort();
    lab.lock().checker.client_done(id);
    lab.trace(format_args!("c{id} done"));
    Ok(())
}

/// Holds `guard` for a while (or until it is lost), then releases it or
/// drops it.
async fn hold(plan: &Plan, lab: &SharedLab, held: &Held, guard: LockGuard, rng: &mut SmallRng) {
    let id = plan.id;
    let guard = Rc::new(guard);
    *held.borrow_mut() = Some(Rc::clone(&guard));
    // Short holds churn the queues; long ones (several leases) are where
    // heartbeats and deadlines matter.
    let hold_for = if rng.random_bool(0.4) {
        guard.lease().mul_f64(rng.random_range(1.0..5.0))
    } else {
        Duration::from_millis(rng.random_range(0..=plan.max_hold.as_millis() as u64))
    };
    tokio::select! {
        () = tokio::time::sleep(hold_for) => {}
        reason = guard.lost() => lab.trace(format_args!("c{id} lost {}: {reason}", guard.name())),
    }
    held.borrow_mut().take();
    let release = rng.random_bool(0.5);
    if let (true, Ok(guard)) = (release, Rc::try_unwrap(guard)) {
        let result = guard.release().await;
        lab.trace(format_args!("c{id} releases: {result:?}"));
    } else {
        lab.trace(format_args!("c{id} drops its guard"));
    }
    let think = rng.random_range(0..100);
    tokio::time::sleep(Duration::from_millis(think)).await;
}

/// Reads `is_held()` every millisecond and reports it.
async fn probe(id: usize, held: Held, lab: SharedLab) {
    let mut tick = tokio::time::interval(PROBE_EVERY);
    loop {
        tick.tick().await;
        let belief = held
            .borrow()
            .as_ref()
            .filter(|guard| guard.is_held())
            .map(|guard| (guard.name().as_str().to_owned(), guard.token()));
        lab.lock().checker.probe(id, now(), belief);
    }
}
