//! `monolock-faults`: runs the fault scenarios against the real server and
//! client, once each (the CI form) or randomised for a duration (`--soak`),
//! and prints the figures.
#![forbid(unsafe_code)]

use std::{collections::BTreeMap, path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Context as _;
use clap::{Parser, builder::PossibleValuesParser};
use monolock_faults::{
    cli::{exit_status, seeded_runtime},
    process::locate_binary,
    scenarios::{ALL, Env, Scenario, Totals, ci_rounds},
};
use rand::Rng;

/// Fault injection against monolock: crashes, pauses, partitions,
/// restarts, failover, hostile clients, descriptor exhaustion.
#[derive(Debug, Parser)]
#[command(
    after_help = "Needs `monolock` built with the same profile (cargo build -p monolock) or \
                  MONOLOCK_BIN. Exit status 1 if any scenario found a problem."
)]
struct Args {
    /// Run randomised scenarios for this long (e.g. 10m) instead of each
    /// scenario once.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    soak: Option<Duration>,
    /// Only these scenarios (repeatable).
    #[arg(
        long = "scenario",
        value_name = "NAME",
        value_parser = PossibleValuesParser::new(ALL.iter().map(|s| s.name()))
    )]
    scenarios: Vec<String>,
    /// Seed of the random choices (default: random, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Also write the figures as JSON to this file.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
}

fn main() -> ExitCode {
    exit_status("monolock-faults", run(Args::parse()))
}

fn run(args: Args) -> anyhow::Result<bool> {
    let selected: Vec<Scenario> = if args.scenarios.is_empty() {
        ALL.to_vec()
    } else {
        args.scenarios
            .iter()
            .map(|name| {
                Scenario::from_name(name).with_context(|| format!("unknown scenario {name:?}"))
            })
            .collect::<anyhow::Result<_>>()?
    };
    let worker_bin = locate_binary("monolock-fault-worker", "MONOLOCK_FAULT_WORKER_BIN")?;
    let server_bin = locate_binary("monolock", "MONOLOCK_BIN").ok();
    if server_bin.is_none() && selected.iter().any(|s| s.needs_server_binary()) {
        anyhow::bail!(
            "cannot find the monolock binary: run `cargo build -p monolock` (same profile) or set MONOLOCK_BIN"
        );
    }
    let env = Env {
        worker_bin,
        server_bin,
    };
    let (seed, mut rng, runtime) = seeded_runtime(args.seed)?;
    let mut totals: BTreeMap<Scenario, Totals> = BTreeMap::new();
    let started = std::time::Instant::now();
    let mut plan: Vec<Scenario> = selected.clone();
    let mut next = 0;
    loop {
        let scenario = match args.soak {
            None => match plan.get(next) {
                Some(s) => *s,
                None => break,
            },
            Some(duration) => {
                if started.elapsed() >= duration {
                    break;
                }
                if next == plan.len() {
                    // A new random order every pass, every scenario once per pass.
                    plan = selected.clone();
                    for i in (1..plan.len()).rev() {
                        plan.swap(i, rng.random_range(0..=i));
                    }
                    next = 0;
                }
                plan[next]
            }
        };
        next += 1;
        let rounds = if args.soak.is_some() {
            ci_rounds(scenario) * rng.random_range(1..=3)
        } else {
            ci_rounds(scenario)
        };
        let run_seed: u64 = rng.random();
        let run_started = std::time::Instant::now();
        let mut report = runtime.block_on(scenario.run(&env, rounds, run_seed));
        report.seconds = run_started.elapsed().as_secs_f64();
        println!("{report}  [{:.1}s]", report.seconds);
        totals.entry(scenario).or_default().add(&report);
    }
    println!(
        "\n== totals after {:.0}s ==",
        started.elapsed().as_secs_f64()
    );
    let mut all_passed = true;
    for t in totals.values() {
        all_passed &= t.failed_runs == 0;
        println!("runs={} failed={} {}", t.runs, t.failed_runs, t.merged);
    }
    if let Some(path) = &args.json {
        let json = serde_json::json!({
            "seed": seed,
            "seconds": started.elapsed().as_secs_f64(),
            "scenarios": totals.values().collect::<Vec<_>>(),
        });
        std::fs::write(path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(all_passed)
}
