//! The simulation in CI: a bounded number of seeds of the real code, a
//! replay that must match byte for byte, and the proof that the checker
//! has teeth (each known mistake, switched on, is found).

use std::time::Duration;

use monolock_sim::{Mutation, Options, Outcome, run};

/// Seeds run against the real code in CI.
const CI_SEEDS: u64 = 6;
/// Simulated seconds of faults per seed in CI.
const CI_FAULTY: Duration = Duration::from_secs(15);

fn options(mutations: &[Mutation]) -> Options {
    Options {
        faulty: CI_FAULTY,
        mutations: mutations.to_vec(),
        ..Options::default()
    }
}

fn explain(outcome: &Outcome, mutations: &[Mutation]) -> String {
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
        outcome.replay_command(mutations)
    )
}

#[test]
fn the_real_code_keeps_every_invariant_over_the_ci_seeds() {
    let mut simulated = Duration::ZERO;
    let mut grants = 0;
    let mut faults = 0;
    for seed in 0..CI_SEEDS {
        let outcome = run(seed, &options(&[]));
        assert!(outcome.violation.is_none(), "{}", explain(&outcome, &[]));
        assert!(outcome.tally.grants > 0, "seed {seed} granted nothing");
        simulated += outcome.simulated;
        grants += outcome.tally.grants;
        faults += outcome.faults.values().sum::<u64>();
    }
    eprintln!(
        "{CI_SEEDS} seeds, {:.1} simulated minutes, {grants} grants, {faults} faults",
        simulated.as_secs_f64() / 60.0
    );
}

#[test]
fn a_seed_replays_byte_for_byte() {
    let options = Options {
        faulty: Duration::from_secs(5),
        ..Options::default()
    };
    let first = run(7, &options);
    let second = run(7, &options);
    assert!(first.trace.len() > 50, "too short a trace to compare");
    assert_eq!(first.trace, second.trace);
    let other = run(8, &options);
    assert_ne!(first.trace, other.trace, "different seeds, same run");
}

/// Runs seeds from 0 with `mutation` on until one breaks an invariant;
/// returns that outcome.
fn first_failure(mutation: Mutation, seeds: u64) -> Outcome {
    for seed in 0..seeds {
        let outcome = run(seed, &options(&[mutation]));
        if outcome.violation.is_some() {
            eprintln!(
                "{}: found by seed {seed}: {}",
                mutation.as_str(),
                outcome
                    .violation
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default()
            );
            return outcome;
        }
    }
    panic!("{} not found in {seeds} seeds", mutation.as_str());
}

#[test]
fn a_pushed_acquired_counted_as_a_heartbeat_confirmation_is_found() {
    let outcome = first_failure(Mutation::PushConfirmsHeartbeat, 20);
    assert!(outcome.violation.is_some());
}

#[test]
fn a_deadline_taken_from_the_receive_instant_is_found() {
    let outcome = first_failure(Mutation::DeadlineFromReceive, 20);
    assert!(outcome.violation.is_some());
}

#[test]
fn promoting_a_waiter_whose_lease_expired_is_found() {
    let outcome = first_failure(Mutation::PromoteExpiredWaiter, 20);
    assert!(outcome.violation.is_some());
}
