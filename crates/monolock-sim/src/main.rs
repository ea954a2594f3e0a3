//! `monolock-sim`: runs seeds of the deterministic simulation and reports.
//!
//! ```text
//! monolock-sim --seeds 1000            # seeds 0..1000
//! monolock-sim --seed 42 --trace       # one seed, its whole trace
//! monolock-sim --seeds 50 --mutation deadline-from-receive
//! monolock-sim --seeds 100 --v2        # version 2 sessions beside v1 clients
//! monolock-sim --seeds 50 --v2 --mutation v2-belief-until-released
//! monolock-sim --seeds 50 --v2 --mutation v2-released-before-table
//! monolock-sim --seeds 50 --read-stalls --mutation hand-on-at-io-timeout
//! monolock-sim --seeds 50 --v2 --observers --mutation coalesced-push-goes-back
//! ```
//!
//! Exits 0 when every seed passed, 1 when one failed (its seed and the
//! command that replays it are printed), 64 on a bad flag.

use std::{process::ExitCode, time::Duration};

use clap::Parser;
use monolock_sim::{AIMED_FAULTS, BOUNDARY_FAULTS, FAULTS, Mutation, Options, V2_FAULTS, run};

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Deterministic simulation of the monolock server and client"
)]
struct Args {
    /// Run this many seeds, starting at --first.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    first: u64,
    /// Run exactly this seed (overrides --seeds and --first).
    #[arg(long)]
    seed: Option<u64>,
    /// Simulated seconds of faults per seed.
    #[arg(long, default_value_t = 20)]
    faulty_seconds: u64,
    /// Simulated seconds after the faults stop within which every client
    /// must be granted again and finish (liveness). 60 by default; 90 with
    /// --observers, whose slow observer and extra values lengthen the
    /// queue of a seed that draws one lock for every claim (16 claims of
    /// holds up to 12 s each need up to 85 s).
    #[arg(long)]
    quiet_seconds: Option<u64>,
    /// Switch a known mistake on: push-confirms-heartbeat,
    /// deadline-from-receive, promote-expired-waiter; with --read-stalls
    /// hand-on-at-io-timeout; with --v2 also the
    /// server's v2-released-before-table, v2-promote-ending-session and
    /// the client's v2-granted-confirms-session, v2-belief-past-deadline,
    /// v2-belief-until-released; with --v2 --observers the server's
    /// coalesced-push-goes-back (repeatable).
    #[arg(long, value_parser = parse_mutation)]
    mutation: Vec<Mutation>,
    /// Run 2 or 3 protocol version 2 hosts (several claims per session)
    /// beside the version 1 clients, on the same locks.
    #[arg(long)]
    v2: bool,
    /// With --v2: never let a claim name a lock another claim of its host
    /// uses.
    #[arg(long)]
    no_same_lock_claims: bool,
    /// With --v2: the v2 hosts observe every lock and give their claims
    /// values (replaced now and then), and a slow observer whose reader
    /// stalls watches every lock 48 times over (off by default: the
    /// published v2 seeds and figures are runs without them).
    #[arg(long)]
    observers: bool,
    /// Run two hosts whose reader stalls while their writer goes on (one
    /// version 1, one version 2), with a bounded send window and a short
    /// io-timeout on the server.
    #[arg(long)]
    read_stalls: bool,
    /// Draw faults only from these (comma-separated names; "boundary" for
    /// the faults aimed at timing boundaries). Default: a random half of
    /// all faults per seed. The aimed faults (stall-heard-queue-head,
    /// isolate-after-late-reply) are drawn only when named.
    #[arg(long, value_delimiter = ',', value_parser = parse_fault)]
    faults: Option<Vec<String>>,
    /// Print the whole trace of each seed.
    #[arg(long)]
    trace: bool,
    /// Keep going after a failing seed.
    #[arg(long)]
    keep_going: bool,
}

fn parse_mutation(text: &str) -> Result<Mutation, String> {
    Mutation::ALL
        .into_iter()
        .find(|m| m.as_str() == text)
        .ok_or_else(|| {
            let known: Vec<&str> = Mutation::ALL.iter().map(|m| m.as_str()).collect();
            format!("unknown mutation {text:?}; known: {}", known.join(", "))
        })
}

fn parse_fault(text: &str) -> Result<String, String> {
    let known = FAULTS.iter().chain(&V2_FAULTS).chain(&AIMED_FAULTS);
    if text == "boundary" || known.clone().any(|fault| *fault == text) {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "unknown fault {text:?}; known: boundary, {}, {}, {}",
            FAULTS.join(", "),
            V2_FAULTS.join(", "),
            AIMED_FAULTS.join(", ")
        ))
    }
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(err) if err.use_stderr() => {
            let _ = err.print();
            return ExitCode::from(64);
        }
        Err(err) => {
            let _ = err.print();
            return ExitCode::SUCCESS;
        }
    };
    let mutations = args.mutation.clone();
    let v2_mistake = mutations.iter().any(|m| m.as_str().starts_with("v2-"));
    if v2_mistake && !args.v2 {
        eprintln!(
            "monolock-sim: a v2 mutation needs v2 hosts; add --v2 to run them beside the v1 clients"
        );
        return ExitCode::from(64);
    }
    if args.observers && !args.v2 {
        eprintln!("monolock-sim: --observers are version 2 hosts' watches; add --v2");
        return ExitCode::from(64);
    }
    if mutations.contains(&Mutation::CoalescedPushGoesBack) && !args.observers {
        eprintln!(
            "monolock-sim: coalesced-push-goes-back needs a slow observer; add --v2 --observers"
        );
        return ExitCode::from(64);
    }
    if mutations.contains(&Mutation::HandOnAtIoTimeout) && !args.read_stalls {
        eprintln!(
            "monolock-sim: hand-on-at-io-timeout needs a reader that stalls; add --read-stalls"
        );
        return ExitCode::from(64);
    }
    let options = Options {
        faulty: Duration::from_secs(args.faulty_seconds),
        quiet_limit: Duration::from_secs(args.quiet_seconds.unwrap_or(if args.observers {
            90
        } else {
            60
        })),
        mutations,
        v2: args.v2,
        same_lock_claims: !args.no_same_lock_claims,
        read_stalls: args.read_stalls,
        observers: args.observers,
        faults: args.faults.as_ref().map(|names| {
            names
                .iter()
                .flat_map(|name| {
                    match FAULTS
                        .iter()
                        .chain(V2_FAULTS.iter())
                        .chain(AIMED_FAULTS.iter())
                        .find(|f| **f == name.as_str())
                    {
                        Some(fault) => vec![*fault],
                        None => BOUNDARY_FAULTS.to_vec(),
                    }
                })
                .collect()
        }),
        ..Options::default()
    };
    let seeds = match args.seed {
        Some(seed) => seed..seed + 1,
        None => args.first..args.first.saturating_add(args.seeds),
    };
    let started = std::time::Instant::now();
    let (mut passed, mut failed, mut simulated, mut grants, mut faults) =
        (0u64, 0u64, Duration::ZERO, 0, 0);
    let mut v2_events = std::collections::BTreeMap::new();
    for seed in seeds {
        let outcome = run(seed, &options);
        simulated += outcome.simulated;
        grants += outcome.tally.grants;
        faults += outcome.faults.values().sum::<u64>();
        for (event, count) in &outcome.v2_events {
            *v2_events.entry(*event).or_insert(0u64) += count;
        }
        if let Some(count) = outcome.faults.get("revoke-one-claim") {
            *v2_events
                .entry("force-release of one claim of several")
                .or_insert(0) += count;
        }
        if args.trace {
            for line in &outcome.trace {
                println!("{line}");
            }
        }
        match &outcome.violation {
            None => passed += 1,
            Some(violation) => {
                failed += 1;
                println!("seed {seed} FAILED {violation}");
                for line in outcome.trace.iter().rev().take(30).rev() {
                    println!("  {line}");
                }
                println!("replay: {}", outcome.replay_command());
                if !args.keep_going {
                    break;
                }
            }
        }
    }
    println!(
        "seeds passed {passed}, failed {failed}; simulated {:.2} h; {grants} grants; {faults} faults; wall {:.1} s",
        simulated.as_secs_f64() / 3600.0,
        started.elapsed().as_secs_f64()
    );
    if args.v2 || args.read_stalls {
        let events: Vec<String> = v2_events
            .iter()
            .map(|(event, count)| format!("{event}: {count}"))
            .collect();
        println!("events: {}", events.join("; "));
    }
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
