//! The simulation in CI: a bounded number of seeds of the real code, a
//! replay that must match byte for byte, and the proof that the checker
//! has teeth: each known mistake, switched on, breaks an invariant on a
//! seed where the real code keeps them all.
//!
//! Larger sweeps run by hand: `monolock-sim --seeds 1000`.

use std::time::Duration;

use monolock_sim::{AIMED_FAULTS, BOUNDARY_FAULTS, Mutation, Options, Outcome, run};

fn explain(outcome: &Outcome) -> String {
    let tail: Vec<&str> = outcome
        .trace
        .iter()
        .rev()
        .take(40)
        .rev()
        .map(String::as_str)
        .collect();
    format!(
        "seed {} failed: {:?}\n{}\nreplay: {}",
        outcome.seed,
        outcome.violation,
        tail.join("\n"),
        outcome.replay_command()
    )
}

/// Seeds of the real code with every fault on the menu (a random half of
/// it per seed), then quiet until every client has been granted again.
#[test]
fn the_real_code_keeps_every_invariant_over_the_ci_seeds() {
    let options = Options {
        faulty: Duration::from_secs(10),
        ..Options::default()
    };
    let (mut simulated, mut grants, mut faults) = (Duration::ZERO, 0, 0);
    for seed in 0..4 {
        let outcome = run(seed, &options);
        assert!(outcome.violation.is_none(), "{}", explain(&outcome));
        assert!(outcome.tally.grants > 0, "seed {seed} granted nothing");
        assert!(!outcome.faults.is_empty(), "seed {seed} injected nothing");
        simulated += outcome.simulated;
        grants += outcome.tally.grants;
        faults += outcome.faults.values().sum::<u64>();
    }
    eprintln!(
        "4 seeds: {:.1} simulated minutes, {grants} grants, {faults} faults",
        simulated.as_secs_f64() / 60.0
    );
}

#[test]
fn a_seed_replays_byte_for_byte() {
    let options = Options {
        faulty: Duration::from_secs(4),
        ..Options::default()
    };
    let first = run(7, &options);
    let second = run(7, &options);
    assert!(first.trace.len() > 50, "too short a trace to compare");
    assert!(first.trace.iter().any(|line| line.contains("nemesis")));
    assert_eq!(first.trace, second.trace);
    let other = run(8, &options);
    assert_ne!(first.trace, other.trace, "different seeds, same run");
}

/// Runs `seed` with the faults aimed at timing boundaries, with `mutation`
/// on and off, up to `until`; the mutation must break the invariant named
/// by `broken` and the real code must not.
fn found(seed: u64, until: Duration, mutation: Mutation, broken: &str) {
    let shipped = Options {
        faulty: Duration::from_secs(15),
        until: Some(until),
        faults: Some(BOUNDARY_FAULTS.to_vec()),
        ..Options::default()
    };
    let planted = Options {
        mutations: vec![mutation],
        ..shipped.clone()
    };
    caught(seed, &planted, &shipped, mutation.as_str(), broken);
}

/// Runs `seed` with a mistake planted (`planted`) and without (`shipped`):
/// the mistake must break the invariant named by `broken`, the shipped code
/// must not. Returns the violation.
fn caught(seed: u64, planted: &Options, shipped: &Options, mistake: &str, broken: &str) -> String {
    let mutated = run(seed, planted);
    let violation = mutated
        .violation
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(
        violation.contains(broken),
        "{mistake} on seed {seed}: expected {broken:?}, got {violation:?}"
    );
    eprintln!("{}: {violation}", mutated.replay_command());
    let real = run(seed, shipped);
    assert!(real.violation.is_none(), "{}", explain(&real));
    violation
}

#[test]
fn a_pushed_acquired_counted_as_a_heartbeat_confirmation_is_found() {
    found(
        17,
        Duration::from_secs(13),
        Mutation::PushConfirmsHeartbeat,
        "two holders",
    );
}

/// Runs `seed` up to `until` with `aimed` (one of [`AIMED_FAULTS`]) alone
/// on the menu; `mistake` must break exclusion and the shipped code must
/// not.
fn found_by_aimed(seed: u64, until: Duration, aimed: &'static str, mistake: Mutation) {
    assert!(AIMED_FAULTS.contains(&aimed));
    let shipped = Options {
        faulty: Duration::from_secs(15),
        until: Some(until),
        faults: Some(vec![aimed]),
        ..Options::default()
    };
    let planted = Options {
        mutations: vec![mistake],
        ..shipped.clone()
    };
    caught(seed, &planted, &shipped, mistake.as_str(), "two holders");
}

/// The queue head with the longest lease stalls its uplink just after a
/// heartbeat arrived, and the lock is pushed to it with the next one in
/// flight.
#[test]
fn a_pushed_acquired_counted_as_a_heartbeat_confirmation_is_found_by_the_aimed_fault() {
    found_by_aimed(
        40000,
        Duration::from_secs(2),
        "stall-heard-queue-head",
        Mutation::PushConfirmsHeartbeat,
    );
}

/// A holder's reply held back for a third to a half of its lease, then
/// the holder cut off both ways.
#[test]
fn a_deadline_taken_from_the_receive_instant_is_found_by_the_aimed_fault() {
    found_by_aimed(
        40037,
        Duration::from_secs(1),
        "isolate-after-late-reply",
        Mutation::DeadlineFromReceive,
    );
}

#[test]
fn a_deadline_taken_from_the_receive_instant_is_found() {
    found(
        19,
        Duration::from_secs(9),
        Mutation::DeadlineFromReceive,
        "two holders",
    );
}

#[test]
fn promoting_a_waiter_whose_lease_expired_is_found() {
    found(
        0,
        Duration::from_secs(1),
        Mutation::PromoteExpiredWaiter,
        "silent for its whole lease",
    );
}

/// The version 2 events each CI sweep must have seen, so that the seeds
/// cannot pass without exercising them.
const V2_EVENTS: [&str; 6] = [
    "several claims held on one host",
    "claim given up while asked or queued",
    "BUSY",
    "RELEASED read",
    "REVOKED",
    "session deadline passed with a claim held",
];

/// Version 2 sessions (several claims each) beside the version 1 clients
/// on the same locks, every fault on the menu plus the force-release of
/// one claim of a session that holds several.
#[test]
fn v2_sessions_beside_v1_clients_keep_every_invariant_over_the_ci_seeds() {
    let options = Options {
        faulty: Duration::from_secs(10),
        v2: true,
        ..Options::default()
    };
    let (mut simulated, mut grants) = (Duration::ZERO, 0);
    let mut events = std::collections::BTreeMap::new();
    let mut revoked_one = 0;
    for seed in V2_CI_SEEDS {
        let outcome = run(seed, &options);
        assert!(outcome.violation.is_none(), "{}", explain(&outcome));
        assert!(outcome.v2_hosts > 0, "seed {seed} ran no v2 host");
        simulated += outcome.simulated;
        grants += outcome.tally.grants;
        for (event, count) in &outcome.v2_events {
            *events.entry(*event).or_insert(0) += count;
        }
        revoked_one += outcome.faults.get("revoke-one-claim").copied().unwrap_or(0);
    }
    eprintln!(
        "v2 seeds {V2_CI_SEEDS:?}: {:.1} simulated minutes, {grants} grants, \
         {revoked_one} force-releases of one claim of several, {events:?}",
        simulated.as_secs_f64() / 60.0
    );
    for event in V2_EVENTS {
        assert!(
            events.get(event).is_some_and(|n| *n > 0),
            "no {event:?} in {events:?}"
        );
    }
    assert!(revoked_one > 0, "no force-release of one claim of several");
}

/// The seeds of the CI sweep with version 2 hosts.
const V2_CI_SEEDS: std::ops::Range<u64> = 4..8;

/// What the hosts and the nemesis did, token values masked: a version 2
/// session that ends with several claims has the server end them in its
/// `HashMap`'s order, which differs from run to run, so the server's own
/// lines (and the token numbers that a claim of the ending session may
/// take in passing) are left out. Everything a client decided or believed
/// must replay exactly.
fn behaviour(trace: &[String]) -> Vec<String> {
    trace
        .iter()
        .filter(|line| !line.contains(" server ") && !line.contains(" admin "))
        .map(|line| {
            let mut masked = String::with_capacity(line.len());
            let mut digits = String::new();
            for c in line.chars().chain(std::iter::once(' ')) {
                if c.is_ascii_digit() {
                    digits.push(c);
                    continue;
                }
                masked.push_str(if digits.len() >= 10 { "TOKEN" } else { &digits });
                digits.clear();
                masked.push(c);
            }
            masked
        })
        .collect()
}

#[test]
fn a_v2_seed_replays_what_every_host_did() {
    let options = Options {
        faulty: Duration::from_secs(4),
        v2: true,
        ..Options::default()
    };
    let first = run(7, &options);
    let second = run(7, &options);
    assert!(first.trace.iter().any(|line| line.contains("v2 host")));
    assert_eq!(behaviour(&first.trace), behaviour(&second.trace));
    let other = run(8, &options);
    assert_ne!(behaviour(&first.trace), behaviour(&other.trace));
}

/// Runs `seed` with version 2 hosts and the seed's own half of the fault
/// menu, with the client's planted v2 `mistake` on and off, up to
/// `until`; the mistake must break the invariant named by `broken` and
/// the shipped client must not.
fn found_v2(seed: u64, until: Duration, mistake: Mutation, broken: &str) {
    let shipped = Options {
        faulty: Duration::from_secs(15),
        until: Some(until),
        v2: true,
        ..Options::default()
    };
    let planted = Options {
        mutations: vec![mistake],
        ..shipped.clone()
    };
    let violation = caught(seed, &planted, &shipped, mistake.as_str(), broken);
    assert!(
        violation.contains("claim"),
        "{} on seed {seed}: the violation names no v2 claim: {violation:?}",
        mistake.as_str()
    );
}

#[test]
fn a_v2_claim_believed_until_released_arrives_is_found() {
    found_v2(
        1,
        Duration::from_secs(7),
        Mutation::V2BeliefUntilReleased,
        "two holders",
    );
}

#[test]
fn v2_claims_believed_past_the_session_deadline_are_found() {
    found_v2(
        34,
        Duration::from_secs(7),
        Mutation::V2BeliefPastDeadline,
        "two holders",
    );
}

#[test]
fn a_granted_push_taken_as_confirming_the_v2_session_is_found() {
    found_v2(
        27,
        Duration::from_secs(15),
        Mutation::V2GrantedConfirmsSession,
        "two holders",
    );
}

/// Runs `seed` with version 2 hosts and the seed's own half of the fault
/// menu, with the server's planted v2 `mutation` on and off, up to
/// `until`; the mutation must break the invariant named by `broken` and
/// the shipped server must not.
fn found_in_v2_server(seed: u64, until: Duration, mutation: Mutation, broken: &str) {
    let shipped = Options {
        faulty: Duration::from_secs(15),
        until: Some(until),
        v2: true,
        ..Options::default()
    };
    let planted = Options {
        mutations: vec![mutation],
        ..shipped.clone()
    };
    caught(seed, &planted, &shipped, mutation.as_str(), broken);
}

#[test]
fn released_written_before_the_table_released_the_claim_is_found() {
    found_in_v2_server(
        1,
        Duration::from_secs(1),
        Mutation::V2ReleasedBeforeTable,
        "read RELEASED while the server still holds",
    );
}

#[test]
fn a_queued_claim_promoted_as_its_session_ends_is_found() {
    found_in_v2_server(
        6,
        Duration::from_secs(3),
        Mutation::V2PromoteEndingSession,
        "after the server read the end of its connection",
    );
}

/// The seeds of the CI sweep with hosts whose reader stalls.
const STALL_CI_SEEDS: std::ops::Range<u64> = 8..10;

/// Two hosts whose reader stalls while their writer goes on (one of each
/// protocol version) beside the version 1 clients, every fault on the
/// menu: the server's writes to them block, io-timeout ends their
/// connections, and the locks they held stay held until their deadline.
#[test]
fn readers_that_stall_keep_every_invariant_over_the_ci_seeds() {
    let options = Options {
        faulty: Duration::from_secs(10),
        read_stalls: true,
        ..Options::default()
    };
    let mut events = std::collections::BTreeMap::new();
    for seed in STALL_CI_SEEDS {
        let outcome = run(seed, &options);
        assert!(outcome.violation.is_none(), "{}", explain(&outcome));
        assert_eq!(outcome.stalled_hosts, 2);
        assert!(outcome.io_timeout.is_some());
        for (event, count) in &outcome.v2_events {
            *events.entry(*event).or_insert(0) += count;
        }
    }
    eprintln!("stalled-reader seeds {STALL_CI_SEEDS:?}: {events:?}");
    for event in [
        "reader stalled with a lock held",
        "held lock released after an io-timeout ending",
    ] {
        assert!(
            events.get(event).is_some_and(|n| *n > 0),
            "no {event:?} in {events:?}"
        );
    }
}

#[test]
fn a_lock_handed_on_when_io_timeout_ends_its_holders_connection_is_found() {
    // The holder on seed 7 speaks version 1 (it floods heartbeats), on
    // seed 3 version 2 (try-ACQUIRE/RELEASE pairs and PINGs).
    for (seed, until) in [(7, 4), (3, 6)] {
        let shipped = Options {
            faulty: Duration::from_secs(15),
            until: Some(Duration::from_secs(until)),
            read_stalls: true,
            ..Options::default()
        };
        let planted = Options {
            mutations: vec![Mutation::HandOnAtIoTimeout],
            ..shipped.clone()
        };
        let mistake = Mutation::HandOnAtIoTimeout.as_str();
        caught(seed, &planted, &shipped, mistake, "counts on its token");
    }
}
