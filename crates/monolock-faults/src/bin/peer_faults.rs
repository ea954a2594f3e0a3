//! `monolock-peer-faults`: monolock, Redis, etcd and ZooKeeper broken by
//! the same faults, each through its own lock recipe; prints per system
//! and fault the overlapping beliefs and stale writes per 1,000 faults.
#![forbid(unsafe_code)]

use std::{path::PathBuf, process::ExitCode};

use anyhow::Context as _;
use clap::{Parser, builder::PossibleValuesParser};
use monolock_faults::{
    cli::{exit_status, seeded_runtime},
    peers::{Fault, Holders, Installs, System, run_system},
    process::locate_binary,
};

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
    let mut cells = Vec::new();
    for system in systems {
        println!("{}: {}", system.name(), system.settings());
        let found = runtime.block_on(run_system(
            system,
            &faults,
            args.rounds,
            &installs,
            &holders,
            &mut rng,
        ));
        for cell in &found {
            println!("  {cell}  [{:.0}s]", cell.seconds);
            for error in &cell.errors {
                println!("    error: {error}");
            }
            if let (Some(dir), Some(system), Some(fault)) = (&args.history, cell.system, cell.fault)
            {
                let path = dir.join(format!("{}-{}.json", system.name(), fault.name()));
                std::fs::create_dir_all(dir)
                    .and_then(|()| std::fs::write(&path, serde_json::to_vec(&cell.history)?))
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
        cells.extend(found);
    }
    if let Some(path) = &args.json {
        let json = serde_json::json!({ "seed": seed, "rounds": args.rounds, "cells": cells });
        std::fs::write(path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(cells.iter().all(|c| c.errors.is_empty()))
}
