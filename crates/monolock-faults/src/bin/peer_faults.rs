//! `monolock-peer-faults`: monolock, Redis, etcd and ZooKeeper broken by
//! the same faults, each through its own lock recipe; prints per system
//! and fault the overlapping beliefs and stale writes per 1,000 faults.
#![forbid(unsafe_code)]

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
};

use anyhow::Context as _;
use clap::{Parser, builder::PossibleValuesParser};
use monolock_faults::{
    cli::{exit_status, seeded_runtime},
    peers::{Cell, Fault, Holders, Installs, System, run_system},
    process::locate_binary,
};
use rand::{Rng as _, SeedableRng as _, rngs::StdRng};

/// The fault scenarios side by side with etcd, ZooKeeper and Redis.
#[derive(Debug, Parser)]
#[command(
    after_help = "Needs `monolock` built with the same profile (cargo build -p monolock) or \
                  MONOLOCK_BIN, and etcd, ZooKeeper (java and /usr/share/java/zookeeper.jar) \
                  and redis-server installed. Exit status 1 if any round could not run."
)]
struct Args {
    /// Only these systems (repeatable).
    #[arg(long = "system", value_parser = PossibleValuesParser::new(System::ALL.map(System::name)))]
    systems: Vec<String>,
    /// Only these faults (repeatable).
    #[arg(long = "fault", value_parser = PossibleValuesParser::new(Fault::ALL.map(Fault::name)))]
    faults: Vec<String>,
    /// Fault injections per system and fault.
    #[arg(long, default_value_t = 4)]
    rounds: u32,
    /// Run the systems at the same time, each on its own server, rather than
    /// one after another (each system's faults still one after another).
    /// Rounds mostly wait out timeouts, so this divides the run's length by
    /// up to the number of systems.
    #[arg(long)]
    parallel: bool,
    /// Seed of the random choices (default: random, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Also write the cells as JSON to this file.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Write each cell's history (beliefs and writes) to
    /// DIR/SYSTEM-FAULT.json, for the Porcupine check
    /// (crates/monolock-faults/porcupine).
    #[arg(long, value_name = "DIR")]
    history: Option<PathBuf>,
}

fn main() -> ExitCode {
    exit_status("monolock-peer-faults", run(Args::parse()))
}

fn run(args: Args) -> anyhow::Result<bool> {
    let systems: Vec<System> = if args.systems.is_empty() {
        System::ALL.to_vec()
    } else {
        args.systems
            .iter()
            .filter_map(|s| System::from_name(s))
            .collect()
    };
    let faults: Vec<Fault> = if args.faults.is_empty() {
        Fault::ALL.to_vec()
    } else {
        args.faults
            .iter()
            .filter_map(|f| Fault::from_name(f))
            .collect()
    };
    let holders = Holders {
        worker: locate_binary("monolock-fault-worker", "MONOLOCK_FAULT_WORKER_BIN")?,
        peer: locate_binary("monolock-peer-holder", "MONOLOCK_PEER_HOLDER_BIN")?,
    };
    let installs = Installs::find();
    let (seed, mut rng, runtime) = seeded_runtime(args.seed)?;
    let history = args.history.as_deref();
    // Each cell is printed (and its history written) as soon as it is done.
    let written = std::sync::Mutex::new(Ok(()));
    let done = |cell: &Cell| {
        let outcome = print_cell(cell, history);
        let mut first = written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if first.is_ok() {
            *first = outcome;
        }
    };
    for system in &systems {
        println!("{}: {}", system.name(), system.settings());
    }
    let mut cells = Vec::new();
    if args.parallel {
        // One generator per system, drawn from the seed in table order.
        let rngs: Vec<StdRng> = systems
            .iter()
            .map(|_| StdRng::seed_from_u64(rng.random()))
            .collect();
        let runs = systems.iter().zip(rngs).map(|(&system, mut rng)| {
            let (faults, installs, holders, done) = (&faults, &installs, &holders, &done);
            async move {
                run_system(
                    system,
                    faults,
                    args.rounds,
                    installs,
                    holders,
                    &mut rng,
                    done,
                )
                .await
            }
        });
        for found in runtime.block_on(futures_util::future::join_all(runs)) {
            cells.extend(found);
        }
    } else {
        for &system in &systems {
            cells.extend(runtime.block_on(run_system(
                system,
                &faults,
                args.rounds,
                &installs,
                &holders,
                &mut rng,
                &done,
            )));
        }
    }
    written
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)?;
    if let Some(path) = &args.json {
        let json = serde_json::json!({
            "seed": seed, "rounds": args.rounds, "parallel": args.parallel, "cells": cells,
        });
        std::fs::write(path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(cells.iter().all(|c| c.errors.is_empty()))
}

/// Prints one cell, and writes its history under `history`.
fn print_cell(cell: &Cell, history: Option<&Path>) -> anyhow::Result<()> {
    println!("  {cell}  [{:.0}s]", cell.seconds);
    for error in &cell.errors {
        println!("    error: {error}");
    }
    if let (Some(dir), Some(system), Some(fault)) = (history, cell.system, cell.fault) {
        let path = dir.join(format!("{}-{}.json", system.name(), fault.name()));
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&path, serde_json::to_vec(&cell.history)?))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
