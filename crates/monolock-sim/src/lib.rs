//! Deterministic simulation of the real monolock server and client.
//!
//! One process, one thread, one seed: the real `monolock-server` (its
//! table, sessions and lease wheel, through [`ServerHandle::serve_stream`])
//! and several real `monolock-client`s run as hosts of a
//! [turmoil](https://docs.rs/turmoil) simulation, whose network and clocks
//! are simulated. A nemesis drawn from the same seed injects faults between
//! steps (see `nemesis.rs`), and the invariants are checked as the run goes
//! (see `checker.rs`): at every millisecond, no two clients believe they
//! hold one lock granted by one server process outside the documented
//! exceptions; tokens strictly increase, across restarts too; waiters that
//! stayed are granted in FIFO order; no session silent for its whole lease
//! is granted; and once the faults stop, every client is granted again
//! (liveness).
//!
//! With [`Options::v2`], 2 or 3 version 2 hosts run beside the version 1
//! clients on the same locks: the same real client on its default
//! protocol, several claims at once sharing its sessions (`host_v2.rs`).
//! Their beliefs are checked like every other, claim by claim. The v2
//! client mistakes ([`Mutation::V2GrantedConfirmsSession`],
//! [`Mutation::V2BeliefPastDeadline`], [`Mutation::V2BeliefUntilReleased`])
//! are planted inside that client, and the server's
//! ([`Mutation::V2ReleasedBeforeTable`], [`Mutation::V2PromoteEndingSession`])
//! inside the server, all switched on through [`Options::mutations`].
//!
//! With [`Options::read_stalls`], two hosts whose reader stalls while
//! their writer goes on join them (`stalled.rs`): one speaks version 1 and
//! floods heartbeats, the other version 2 and pipelines try-ACQUIRE/RELEASE
//! pairs and PINGs, each once it holds a lock. What the server may write
//! ahead of a client's reads is then bounded (`stream.rs`) and its
//! io-timeout is short, so its writes block and io-timeout ends the
//! connection; the lock must stay held until the holder's deadline, and
//! [`Mutation::HandOnAtIoTimeout`] is found.
//!
//! With [`Options::observers`] (and `v2`), the version 2 hosts observe
//! every lock through the client's `observe` and give their claims values
//! they replace now and then, and a slow observer whose reader stalls
//! watches every lock many times over, so that the server coalesces its
//! pushes (`observing.rs`). The checker follows every observation
//! (`observers.rs`): token order, no grant told before the server made it,
//! release reasons, values that are their holders', and once the run is
//! quiet, every observer's last state equal to the table's;
//! [`Mutation::CoalescedPushGoesBack`] is found.
//!
//! The same seed gives the same run, byte for byte: [`Outcome::trace`] is
//! the evidence, and a failing seed is reproduced with
//! `monolock-sim --seed N`. With v2 hosts, every host's acts and beliefs
//! replay exactly; the server's own lines of one instant may come in
//! another order (it ends a v2 session's claims in its `HashMap`'s order).
//!
//! [`ServerHandle::serve_stream`]: monolock_server::ServerHandle::serve_stream
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod checker;
mod client;
mod conn;
mod host_v2;
mod lab;
mod nemesis;
mod observers;
mod observing;
mod server;
mod stalled;
mod stream;

use std::{
    collections::BTreeMap,
    time::{Duration, UNIX_EPOCH},
};

pub use checker::{Tally, Violation};
pub use monolock_mutation::Mutation;
pub use nemesis::{AIMED_FAULTS, BOUNDARY_FAULTS, FAULTS, V2_FAULTS};
use rand::{Rng, SeedableRng, rngs::SmallRng};

use crate::{lab::SharedLab, nemesis::Nemesis, stream::Gate};

/// The wall clock's reading at the start of every simulation (2027-01-15).
const EPOCH_UNIX_SECONDS: u64 = 1_800_000_000;
/// The simulation's step, and the network's delivery granularity.
///
/// Hosts run one after the other through each step, each from the step's
/// start to its end on its own clock; a message delivered within the step
/// it was sent in could be seen by its receiver at an instant before its
/// sender's. No message takes less than one step, so none arrives before it
/// was sent.
const TICK: Duration = Duration::from_millis(5);
/// With stalled readers: the most bytes the server may have written that a
/// client has not read (its send buffer and the client's receive buffer
/// together, small so that a few hundred replies fill it).
const SEND_WINDOW: usize = 1024;

/// What to simulate.
#[derive(Clone, Debug)]
pub struct Options {
    /// Simulated time during which faults are injected.
    pub faulty: Duration,
    /// After the faults stop, how long every client may take to be granted
    /// once more before the run counts as a liveness failure.
    pub quiet_limit: Duration,
    /// Known mistakes to switch on (none: the real code).
    pub mutations: Vec<Mutation>,
    /// Stop at this simulated instant, whatever the state (no liveness
    /// check): for replaying the first part of a seed.
    pub until: Option<Duration>,
    /// The faults to draw from, by name; `None`: a random half of
    /// [`FAULTS`] per seed (swarm testing), and [`V2_FAULTS`] when `v2`.
    pub faults: Option<Vec<&'static str>>,
    /// Add 2 or 3 protocol version 2 hosts (the real client on its
    /// default protocol, several claims per session) beside the version 1
    /// clients, on the same locks. Off: the version 1 run of the seed,
    /// unchanged.
    pub v2: bool,
    /// Let a v2 claim name a lock that another claim of its host holds or
    /// waits for, so that sessions hold and queue on one lock (on by
    /// default).
    pub same_lock_claims: bool,
    /// Add two hosts whose reader stalls while their writer goes on (one
    /// of each protocol version), bound what the server may write ahead of
    /// a client's reads, and shorten the server's io-timeout, so that its
    /// writes block and io-timeout ends their connections. Off: the run of
    /// the seed without them, unchanged.
    pub read_stalls: bool,
    /// With `v2`: every version 2 host observes every lock and gives its
    /// claims values (replaced now and then while held), and one slow
    /// observer host whose reader stalls watches every lock many times
    /// over, so that the server coalesces its pushes (`observing.rs`).
    /// Off: the run of the seed without them, unchanged.
    pub observers: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            faulty: Duration::from_secs(20),
            quiet_limit: Duration::from_secs(60),
            mutations: Vec::new(),
            until: None,
            faults: None,
            v2: false,
            same_lock_claims: true,
            read_stalls: false,
            observers: false,
        }
    }
}

/// How one seed went.
#[derive(Debug)]
pub struct Outcome {
    /// The seed.
    pub seed: u64,
    /// The first invariant broken, if any.
    pub violation: Option<Violation>,
    /// Simulated time covered.
    pub simulated: Duration,
    /// Counts from the checker.
    pub tally: Tally,
    /// Faults injected, by name.
    pub faults: BTreeMap<&'static str, u64>,
    /// Clients of this seed (version 1 and version 2 hosts).
    pub clients: usize,
    /// Of which version 2 hosts.
    pub v2_hosts: usize,
    /// Of which hosts whose reader stalls.
    pub stalled_hosts: usize,
    /// The server's io-timeout, when the run shortens it.
    pub io_timeout: Option<Duration>,
    /// Version 2 and stalled-reader events seen, by name (RELEASE and
    /// ACQUIRE in one write, a GRANTED crossing a RELEASE, sessions ended
    /// with held and waiting claims, a reader stalled with a lock held, a
    /// lock released at the lease end of a connection ended at
    /// io-timeout, ...).
    pub v2_events: BTreeMap<&'static str, u64>,
    /// Locks the clients share.
    pub locks: usize,
    /// Every event, stamped with simulated time: equal seeds give equal
    /// traces.
    pub trace: Vec<String>,
    /// The command that replays this seed with these options.
    pub replay: String,
}

impl Outcome {
    /// The command that replays this seed (with the options it ran with).
    pub fn replay_command(&self) -> String {
        self.replay.clone()
    }
}

fn replay_command(seed: u64, options: &Options) -> String {
    let mut command = format!("monolock-sim --seed {seed}");
    if options.faulty != Options::default().faulty {
        command.push_str(&format!(" --faulty-seconds {}", options.faulty.as_secs()));
    }
    if options.quiet_limit != Options::default().quiet_limit {
        command.push_str(&format!(
            " --quiet-seconds {}",
            options.quiet_limit.as_secs()
        ));
    }
    if let Some(faults) = &options.faults {
        command.push_str(&format!(" --faults {}", faults.join(",")));
    }
    if options.v2 {
        command.push_str(" --v2");
        if !options.same_lock_claims {
            command.push_str(" --no-same-lock-claims");
        }
        if options.observers {
            command.push_str(" --observers");
        }
    }
    if options.read_stalls {
        command.push_str(" --read-stalls");
    }
    for name in options.mutations.iter().map(|m| m.as_str()) {
        command.push_str(" --mutation ");
        command.push_str(name);
    }
    command
}

/// Switches mutations on for this thread while it lives.
struct MutationsOn;

impl MutationsOn {
    fn new(mutations: &[Mutation]) -> Self {
        monolock_mutation::set(mutations);
        Self
    }
}

impl Drop for MutationsOn {
    fn drop(&mut self) {
        monolock_mutation::set(&[]);
    }
}

/// Runs one seed to its end (or its first violation).
pub fn run(seed: u64, options: &Options) -> Outcome {
    let _mutations = MutationsOn::new(&options.mutations);
    let mut rng = SmallRng::seed_from_u64(seed);
    let clients = rng.random_range(3..=7);
    let locks: Vec<String> = (0..rng.random_range(1..=3))
        .map(|l| format!("lock-{l}"))
        .collect();
    let max_hold = Duration::from_millis(rng.random_range(50..=3000));
    let base_latency =
        TICK + Duration::from_millis(rng.random_range(0..=20) * u64::from(rng.random_bool(0.5)));
    // A new fault every 50 ms to 500 ms on average.
    let rate = TICK.as_secs_f64() / rng.random_range(0.05..0.5);
    let heal_at = options.faulty;
    // Drawn apart, so that the version 1 draws of a seed stay as they were.
    let mut v2_rng = SmallRng::seed_from_u64(seed ^ 0x7632_7632_7632_7632);
    let v2_hosts = if options.v2 {
        v2_rng.random_range(2..=3)
    } else {
        0
    };
    // Drawn apart too, for the same reason.
    let mut stall_rng = SmallRng::seed_from_u64(seed ^ 0x5354_414c_4c45_4452);
    let stalled_hosts = if options.read_stalls { 2 } else { 0 };
    let observers = options.v2 && options.observers;
    // Drawn apart too.
    let observer_seed = SmallRng::seed_from_u64(seed ^ 0x4f42_5345_5256_4552).random();
    let slow_observers = usize::from(observers);
    // Below the shortest lease but one, so that a blocked write reaches
    // io-timeout before the holder's lease runs out.
    let io_timeout = options
        .read_stalls
        .then(|| Duration::from_millis(stall_rng.random_range(100..=600)));

    let lab = SharedLab::new(clients + v2_hosts + stalled_hosts + slow_observers);
    if options.read_stalls {
        lab.set_window(Some(SEND_WINDOW));
    }
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .epoch(UNIX_EPOCH + Duration::from_secs(EPOCH_UNIX_SECONDS))
        .tick_duration(TICK)
        .simulation_duration(Duration::from_secs(u64::from(u32::MAX)))
        .min_message_latency(TICK)
        .max_message_latency(base_latency)
        .enable_random_order()
        .build();

    let durable = server::Durable;
    {
        let lab = lab.clone();
        sim.host(server::SERVER_HOST, move || {
            server::process(lab.clone(), durable.clone(), io_timeout)
        });
    }
    let mut hosts = Vec::new();
    let mut gates = Vec::new();
    for id in 0..clients {
        let host = format!("c{id}");
        let gate = Gate::default();
        let plan = client::Plan {
            id,
            seed: rng.random(),
            locks: locks.clone(),
            heal_at,
            max_hold,
        };
        sim.client(
            host.as_str(),
            client::process(plan, lab.clone(), gate.clone()),
        );
        hosts.push(host);
        gates.push(gate);
    }
    for id in clients..clients + v2_hosts {
        let host = format!("c{id}");
        let gate = Gate::default();
        let plan = host_v2::Plan {
            id,
            seed: v2_rng.random(),
            locks: locks.clone(),
            heal_at,
            max_hold,
            same_lock_claims: options.same_lock_claims,
            observers,
        };
        sim.client(
            host.as_str(),
            host_v2::process(plan, lab.clone(), gate.clone()),
        );
        hosts.push(host);
        gates.push(gate);
    }
    for (n, id) in (clients + v2_hosts..).take(stalled_hosts).enumerate() {
        let host = format!("c{id}");
        let gate = Gate::default();
        let plan = stalled::Plan {
            id,
            seed: stall_rng.random(),
            locks: locks.clone(),
            heal_at,
            version: if n == 0 {
                stalled::Version::V1
            } else {
                stalled::Version::V2
            },
        };
        sim.client(
            host.as_str(),
            stalled::process(plan, lab.clone(), gate.clone()),
        );
        hosts.push(host);
        gates.push(gate);
    }
    // The slow observer is left out of the nemesis's hosts: its reader's
    // own stalls are its fault, and the seed's other faults stay as drawn.
    for id in (clients + v2_hosts + stalled_hosts..).take(slow_observers) {
        let plan = observing::Plan {
            id,
            seed: observer_seed,
            locks: locks.clone(),
            heal_at,
        };
        sim.client(
            format!("c{id}").as_str(),
            observing::slow_process(plan, lab.clone(), Gate::default(), SEND_WINDOW),
        );
    }
    let mut nemesis = Nemesis::new(
        &sim,
        SmallRng::seed_from_u64(rng.random()),
        hosts,
        gates,
        locks.clone(),
        lab.clone(),
        base_latency,
        rate,
        options.faults.as_deref(),
        options.v2.then_some(clients),
    );

    let mut healed = false;
    let violation = loop {
        let now = sim.elapsed();
        if now < heal_at {
            nemesis.step(&mut sim, now);
        } else if !healed {
            nemesis.heal_all(&mut sim, now);
            lab.lock()
                .push_trace(now, format_args!("nemesis: faults stop"));
            healed = true;
        }
        let finished = match sim.step() {
            Ok(finished) => finished,
            Err(err) => {
                break Some(Violation {
                    at: now,
                    what: format!("a host failed: {err}"),
                });
            }
        };
        let mut lab = lab.lock();
        lab.checker.settle();
        if observers && healed {
            lab.checker.note_quiet(now);
        }
        if let Some(violation) = lab.checker.violation() {
            break Some(violation.clone());
        }
        if finished || options.until.is_some_and(|until| now >= until) {
            break None;
        }
        let unfinished = lab.checker.unfinished();
        // Observers compare their last states only once every client has
        // finished and the run has been quiet for `SETTLE`: they get that
        // long again, and a little more, beyond the clients' limit.
        let observers_limit = options.quiet_limit + observing::SETTLE + Duration::from_secs(5);
        if (!unfinished.is_empty() && now >= heal_at + options.quiet_limit)
            || now >= heal_at + observers_limit
        {
            break Some(Violation {
                at: now,
                what: format!(
                    "liveness: {:?} after the faults stopped, clients {unfinished:?} were never \
                     granted again (observers not done: {:?})",
                    options.quiet_limit,
                    lab.checker.observing()
                ),
            });
        }
    };
    let simulated = sim.elapsed();
    let mut lab = lab.lock();
    Outcome {
        seed,
        violation,
        simulated,
        tally: lab.checker.tally(),
        faults: nemesis.counts().clone(),
        clients: clients + v2_hosts + stalled_hosts + slow_observers,
        v2_hosts,
        stalled_hosts,
        io_timeout,
        v2_events: {
            let mut events = lab.v2_events();
            for (event, count) in lab.checker.states_read() {
                let name = match event {
                    "free" => "STATE FREE read",
                    "held" => "STATE HELD read",
                    "granted" => "STATE GRANTED read",
                    "value" => "STATE VALUE read",
                    "released" => "STATE RELEASED read",
                    _ => "STATE COALESCED read",
                };
                *events.entry(name).or_default() += count;
            }
            events
        },
        locks: locks.len(),
        trace: lab.take_trace(),
        replay: replay_command(seed, options),
    }
}
