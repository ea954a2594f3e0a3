//! Observers of the locks (docs/protocol.md, "Version 2 extension: values
//! and observers"), through the shipped client's `observe`: every version
//! 2 host watches the locks its claims contend for, and one slow observer
//! host, whose reader stalls now and then, watches each lock many times
//! over on one session, so that the server's outbox for it fills and its
//! watches are told the lock's state coalesced.
//!
//! Every state read goes to the checker as it is read. Once the run is
//! quiet (every client finished, the table empty) and has stayed so for
//! [`SETTLE`], each observer hands the checker its last state of every
//! lock, which must be the table's.

use std::{cell::RefCell, collections::BTreeMap, rc::Rc, time::Duration};

use monolock_client::{Client, Error, LockState, ReleaseReason, StateEvent};
use rand::{Rng, SeedableRng, rngs::SmallRng};

use crate::{
    lab::SharedLab,
    observers::Seen,
    server,
    stream::{Gate, SimConnector},
};

/// How long the run stays quiet before observers compare their last
/// states with the table: past every observer's deadline (0.8 x its lease,
/// [`SLOW_LEASE`] at most) after a crash nobody heard of, and its backoff
/// before it observes again.
pub(crate) const SETTLE: Duration = Duration::from_secs(6);
/// The slow observer's lease: long enough for its reader to stall for
/// [`LONGEST_STALL`] without reaching its deadline (0.8 x lease after the
/// last confirmed PING, sent a quarter lease apart at most).
const SLOW_LEASE: Duration = Duration::from_secs(5);
/// The longest stall of the slow observer's reader (below the server's
/// io-timeout, 5 s by default, and its own deadline).
const LONGEST_STALL: Duration = Duration::from_millis(2500);
/// Watches the slow observer places on each lock: each change of a lock
/// is that many pushes, so that a stall of a second or two fills the
/// server's outbox (256 pushes) behind a full send window.
const SLOW_WATCHES: usize = 48;

fn now() -> Duration {
    turmoil::sim_elapsed().unwrap_or_default()
}

/// The last state each watch read, by watch number (`None`: it ended).
pub(crate) type Views = Rc<RefCell<BTreeMap<u64, (String, Option<Seen>)>>>;

/// What the checker reads of a state.
pub(crate) fn seen(state: &LockState) -> Seen {
    Seen {
        event: match state.event {
            StateEvent::Free => "free",
            StateEvent::Held => "held",
            StateEvent::Granted => "granted",
            StateEvent::Value => "value",
            StateEvent::Released => "released",
        },
        held: state.held,
        token: state.token,
        value: state.value.clone(),
        reason: state.reason.map(|reason| match reason {
            ReleaseReason::Released => "released",
            ReleaseReason::Expired => "expired",
            ReleaseReason::Forced => "forced",
            ReleaseReason::EndedByServer => "ended_by_server",
        }),
        initial: state.initial,
        coalesced: state.coalesced,
    }
}

/// Whether the observation ended because the server broke the protocol
/// (the client ends such a session with the loss reason `protocol`).
fn broken_protocol(err: &Error) -> bool {
    matches!(err, Error::ObservationEnded(ended) if ended.reason().name() == "protocol")
}

/// Observes `lock` as watch `watch`, again and again (a new watch number
/// each time) while its observations end, until dropped. Until the faults
/// stop, an observation is also given up (dropped: an UNOBSERVE) after a
/// number of states drawn from `seed`, and another placed.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn observe_lock(
    id: usize,
    lock: String,
    first_watch: u64,
    stride: u64,
    seed: u64,
    heal_at: Duration,
    client: Client<SimConnector>,
    lab: SharedLab,
    views: Views,
) {
    let mut rng = SmallRng::seed_from_u64(seed ^ first_watch);
    let mut watch = first_watch;
    loop {
        views.borrow_mut().insert(watch, (lock.clone(), None));
        let mut patience = rng.random_range(10..400u32);
        match client.observe(&lock).await {
            Ok(mut observation) => loop {
                if patience == 0 && now() < heal_at {
                    let mut lab = lab.lock();
                    lab.count_v2("observation given up (UNOBSERVE)");
                    lab.checker
                        .observation_ended(now(), id, watch, &lock, false, "given up");
                    break;
                }
                patience = patience.saturating_sub(1);
                match observation.next().await {
                    Some(Ok(state)) => {
                        let seen = seen(&state);
                        lab.lock().checker.observed(now(), id, watch, &lock, &seen);
                        views.borrow_mut().insert(watch, (lock.clone(), Some(seen)));
                    }
                    Some(Err(err)) => {
                        lab.trace(format_args!("c{id} watch {watch} of {lock} ends: {err}"));
                        lab.lock().count_v2("observation ended with its session");
                        lab.lock().checker.observation_ended(
                            now(),
                            id,
                            watch,
                            &lock,
                            broken_protocol(&err),
                            &err.to_string(),
                        );
                        break;
                    }
                    None => break,
                }
            },
            Err(err) => lab.trace(format_args!("c{id} cannot observe {lock}: {err}")),
        }
        views.borrow_mut().remove(&watch);
        watch += stride;
        let backoff = 20 + (watch % 7) * 25;
        tokio::time::sleep(Duration::from_millis(backoff)).await;
    }
}

/// Waits until the run has been quiet for [`SETTLE`], then hands the
/// checker the last state of every live watch in `views` (at least one
/// per lock of `locks`).
pub(crate) async fn final_views(id: usize, locks: &[String], views: &Views, lab: &SharedLab) {
    loop {
        let quiet = lab.lock().checker.quiet_since();
        if quiet.is_some_and(|quiet| now() >= quiet + SETTLE) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let views = views.borrow();
    let mut lab = lab.lock();
    for lock in locks {
        let mut any = false;
        for (_, last) in views.values().filter(|(l, _)| l == lock) {
            any = true;
            lab.checker.final_view(now(), id, lock, last.as_ref());
        }
        if !any {
            lab.checker.final_view(now(), id, lock, None);
        }
    }
    lab.checker.observer_done(id);
}

/// What the slow observer does.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub(crate) id: usize,
    pub(crate) seed: u64,
    pub(crate) locks: Vec<String>,
    pub(crate) heal_at: Duration,
}

/// The slow observer host: [`SLOW_WATCHES`] watches of every lock on one
/// session, its reader stalling for up to [`LONGEST_STALL`] at a time
/// until the faults stop.
pub(crate) async fn slow_process(
    plan: Plan,
    lab: SharedLab,
    gate: Gate,
    window: usize,
) -> turmoil::Result {
    let id = plan.id;
    {
        let mut lab = lab.lock();
        // It holds nothing: the exclusion checks do not wait for it.
        lab.checker.client_done(id);
        lab.checker.observer_started(id);
    }
    let mut rng = SmallRng::seed_from_u64(plan.seed);
    let client = Client::new(server::address())
        .with_connector(SimConnector {
            gate: gate.clone(),
            lab: lab.clone(),
            window: Some(window),
        })
        .with_connect_timeout(Duration::from_millis(500))
        .with_default_lease(SLOW_LEASE);
    lab.trace(format_args!(
        "c{id} slow observer: {SLOW_WATCHES} watches of each lock"
    ));
    let views = Views::default();
    let mut tasks = tokio::task::JoinSet::new();
    let stride = (SLOW_WATCHES * plan.locks.len()) as u64;
    for (l, lock) in plan.locks.iter().enumerate() {
        for w in 0..SLOW_WATCHES {
            let first = (l * SLOW_WATCHES + w) as u64;
            tasks.spawn_local(observe_lock(
                id,
                lock.clone(),
                first,
                stride,
                plan.seed,
                plan.heal_at,
                client.clone(),
                lab.clone(),
                views.clone(),
            ));
        }
    }
    while now() < plan.heal_at {
        let reading = Duration::from_millis(rng.random_range(100..1500));
        tokio::time::sleep(reading).await;
        let stall = Duration::from_millis(rng.random_range(300..=LONGEST_STALL.as_millis() as u64));
        lab.trace(format_args!("c{id} stops reading for {stall:?}"));
        gate.stall_reads(true);
        tokio::time::sleep(stall).await;
        gate.stall_reads(false);
        lab.trace(format_args!("c{id} reads again"));
        lab.lock().count_v2("observer's reader stalled");
    }
    final_views(id, &plan.locks, &views, &lab).await;
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    lab.trace(format_args!("c{id} done"));
    Ok(())
}
