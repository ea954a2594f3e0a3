//! `monolock-bench`: monolock side by side with Redis locks.
//!
//! ```text
//! monolock-bench --smoke   # a few seconds, no Redis needed (CI)
//! monolock-bench --quick   # < 2 minutes, 2 rounds
//! monolock-bench --full    # the published run, 5 rounds
//! ```
//!
//! It starts what it measures as child processes: a `monolock serve` (found
//! next to this binary, or `--monolock-bin`) and, when installed, a
//! `redis-server`, and for the side-by-side scenario a single `etcd` member
//! and a standalone ZooKeeper, each on a free loopback port, pinned to one CPU while the
//! load generator runs on another. Results go to a table on stdout, plus
//! `results.json`, `summary.md` and SVG charts in the output directory.
#![warn(missing_docs)]

mod charts;
mod conn_floor;
mod contention;
mod cycles;
mod dead;
mod floor;
mod mono;
mod mono_v2;
mod observers;
mod observers_etcd;
mod output;
mod peers;
mod plan;
mod report;
mod resp;
mod run;
mod servers;
mod session_floor;
mod sessions;
mod setup;
mod stats;
// The system calls and /proc readers are the testkit's, shared with the
// tests and the fault suite; `crate::sys` names them here.
use monolock_testkit::sys;
mod tls_claims;
mod v2_scenarios;
mod worker;

use std::{path::PathBuf, process::ExitCode};

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Benchmarks monolock against Redis locks (SET NX PX + Lua release), and
/// side by side with etcd and ZooKeeper.
#[derive(Parser, Debug)]
#[command(
    name = "monolock-bench",
    version,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    sub: Option<Sub>,
    #[command(flatten)]
    run: RunArgs,
}

/// Options of a benchmark run.
#[derive(Args, Debug, Clone)]
#[group(skip)]
pub struct RunArgs {
    /// A few seconds, tiny loads, no Redis needed; exits non-zero if anything failed.
    #[arg(long, conflicts_with_all = ["quick", "full"])]
    pub smoke: bool,
    /// Under two minutes: 2 rounds, 5,000 sessions, no 30 s TTL trial.
    #[arg(long, conflicts_with = "full")]
    pub quick: bool,
    /// The published run: 5 rounds, ~19,000 sessions, Redis TTL 30 s trials.
    #[arg(long)]
    pub full: bool,
    /// The `monolock` binary [default: next to this binary].
    #[arg(long, value_name = "PATH")]
    pub monolock_bin: Option<PathBuf>,
    /// A second `monolock` binary (an earlier build, say): the protocol v1
    /// figures of latency, throughput and contention are measured on it
    /// too, interleaved with the first round by round, and compared as
    /// ratios of each round's pair.
    #[arg(long, value_name = "PATH")]
    pub baseline_bin: Option<PathBuf>,
    /// The `redis-server` binary [default: from PATH].
    #[arg(long, value_name = "PATH")]
    pub redis_bin: Option<PathBuf>,
    /// Do not run Redis even if installed.
    #[arg(long)]
    pub no_redis: bool,
    /// The `etcd` binary of the side-by-side scenario [default: from PATH].
    #[arg(long, value_name = "PATH")]
    pub etcd_bin: Option<PathBuf>,
    /// Do not run etcd and ZooKeeper even if installed.
    #[arg(long)]
    pub no_peers: bool,
    /// Where results.json, summary.md and the charts go
    /// [default: target/monolock-bench/<mode>].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Run only these scenarios (repeatable); all by default.
    #[arg(long, value_enum, value_name = "SCENARIO")]
    pub only: Vec<Scenario>,
    /// Where the servers' logs go [default: target/monolock-bench/logs].
    #[arg(long, value_name = "DIR")]
    pub logs: Option<PathBuf>,
    /// Override the number of rounds.
    #[arg(long, value_name = "N")]
    pub rounds: Option<usize>,
    /// CPU for the servers.
    #[arg(long, default_value_t = 1, value_name = "CPU")]
    pub server_cpu: usize,
    /// CPU for the load generator (this process and its helpers).
    #[arg(long, default_value_t = 0, value_name = "CPU")]
    pub client_cpu: usize,
    /// Do not pin anything to CPUs.
    #[arg(long)]
    pub no_pin: bool,
    /// Nice value for the servers and the load generator (inherited by
    /// every child). A negative value keeps other work on a shared machine
    /// (compilers) from preempting the measured processes; it needs root,
    /// and is skipped with a note otherwise.
    #[arg(long, default_value_t = -10, value_name = "N", allow_hyphen_values = true)]
    pub nice: i32,
    /// Run the servers and the load generator under SCHED_FIFO (priority
    /// 10) instead: on a machine busy with other work this removes most
    /// scheduling noise from the tails. Needs root. The kernel's RT
    /// throttling still leaves other tasks 5% of each CPU.
    #[arg(long)]
    pub realtime: bool,
}

/// The scenarios of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// 1. One client's lock cycle latency.
    Latency,
    /// 2. Cycles/s of 1, 16, 64 clients on distinct names; the connection floor.
    Throughput,
    /// 3. 64 clients on one name.
    Contention,
    /// Many locks held by one process: v1 connections against one v2 session.
    ManyLocks,
    /// One client claiming in sequence over TLS and mTLS, v1 against v2.
    Tls,
    /// 4. SIGKILLed and SIGSTOPped holders.
    Dead,
    /// Side by side with etcd and ZooKeeper: cycles, one contended lock,
    /// a SIGKILLed holder, memory per held lock, every system through its
    /// own recipe.
    Peers,
    /// 5. Many idle heartbeating sessions.
    Sessions,
    /// Values and observers: release-to-observer latency with 1, 100 and
    /// 10,000 observers of one name, server CPU and memory per observer,
    /// value replacements/s, through the Rust client library.
    Observers,
}

#[derive(Subcommand, Debug)]
enum Sub {
    /// (internal) Hold one lock until killed.
    #[command(hide = true)]
    Hold(worker::HoldArgs),
    /// (internal) Open and heartbeat many monolock sessions.
    #[command(hide = true)]
    SessionsWorker(worker::WorkerArgs),
    /// (internal) Echo one connection's bytes: the machine-floor peer.
    #[command(hide = true)]
    Echo(floor::EchoArgs),
    /// (internal) Accept, read, answer, close: the connection floor.
    #[command(hide = true)]
    ConnFloor(conn_floor::ConnFloorArgs),
    /// (internal) Answer v2 OPEN, ACQUIRE and RELEASE on persistent
    /// connections with canned frames: the session floor.
    #[command(hide = true)]
    SessionFloor(session_floor::SessionFloorArgs),
    /// One client claiming in sequence on a fresh server, for profiling
    /// the server: prints its pid, then claims/s and its CPU per claim.
    ClaimLoop(tls_claims::ClaimLoopArgs),
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    // One thread: the generator is pinned to one CPU, and a single-threaded
    // runtime has no cross-thread wake-ups to bill to either system.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.sub {
        Some(Sub::Hold(args)) => runtime()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(worker::hold(args)))
            .map(|()| true),
        Some(Sub::SessionsWorker(args)) => runtime()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(worker::sessions_worker(args)))
            .map(|()| true),
        Some(Sub::Echo(args)) => floor::echo(args).map(|()| true),
        Some(Sub::ConnFloor(args)) => conn_floor::serve(args).map(|()| true),
        Some(Sub::SessionFloor(args)) => session_floor::serve(args).map(|()| true),
        Some(Sub::ClaimLoop(args)) => runtime()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(tls_claims::claim_loop(args)))
            .map(|()| true),
        None => {
            if !(cli.run.smoke || cli.run.quick || cli.run.full) {
                eprintln!("monolock-bench: choose a mode: --smoke, --quick or --full (see --help)");
                return ExitCode::from(2);
            }
            let notes = setup::prepare_process(&cli.run);
            runtime()
                .map_err(anyhow::Error::from)
                .and_then(|rt| rt.block_on(run::run(cli.run, notes)))
        }
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("monolock-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}
