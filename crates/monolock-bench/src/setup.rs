//! Before the first round: this process's CPU and priority, the mode's
//! plan, the binaries, the output directories, and what the report notes
//! about the machine.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::{
    RunArgs, Scenario,
    plan::{Mode, Plan},
    servers, sys,
};

/// Pins this (still single-threaded) process to the client CPU and sets
/// its nice value, so the runtime and every process it starts inherit both.
/// Returns what could not be done, for the report.
pub fn prepare_process(args: &RunArgs) -> Vec<String> {
    let mut notes = Vec::new();
    if !args.no_pin && cpus(args).is_none() {
        notes.push(format!(
            "not pinned: needs 2+ CPUs and distinct --server-cpu/--client-cpu below {}",
            sys::online_cpus()
        ));
    }
    if let Some((_, client)) = cpus(args)
        && let Err(e) = sys::pin_current_thread(client)
    {
        notes.push(format!(
            "cannot pin the load generator to CPU {client}: {e}"
        ));
    }
    if args.realtime {
        if let Err(e) = sys::set_realtime(10) {
            notes.push(format!(
                "cannot switch to SCHED_FIFO: {e}; running at the default priority"
            ));
        }
    } else if args.nice != 0
        && let Err(e) = sys::set_nice(args.nice.clamp(-20, 19))
    {
        notes.push(format!(
            "cannot set nice {}: {e}; running at the default priority",
            args.nice
        ));
    }
    notes
}

/// (server CPU, client CPU) if pinning applies.
pub(crate) fn cpus(args: &RunArgs) -> Option<(usize, usize)> {
    let n = sys::online_cpus();
    (!args.no_pin
        && n >= 2
        && args.server_cpu < n
        && args.client_cpu < n
        && args.server_cpu != args.client_cpu)
        .then_some((args.server_cpu, args.client_cpu))
}

/// The machine, for the report.
pub(crate) fn machine() -> serde_json::Value {
    let model = sys::cpu_model().unwrap_or_else(|| "unknown".to_owned());
    let kernel = sys::kernel_release().unwrap_or_default();
    let load = sys::load_average().unwrap_or_default();
    json!({"nproc": sys::online_cpus(), "cpu_model": model, "kernel": kernel, "loadavg_at_start": load})
}

/// The first line `bin arg` prints, e.g. its version.
pub(crate) fn command_line(bin: &Path, arg: &str) -> Option<String> {
    let out = Command::new(bin).arg(arg).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .next()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
}

/// What a run needs before its first server starts: the plan, where
/// things are, and the notes for the report.
pub(crate) struct Setup {
    pub(crate) mode: Mode,
    pub(crate) plan: Plan,
    /// Scenarios to run (all by default).
    pub(crate) only: Vec<Scenario>,
    pub(crate) out: PathBuf,
    pub(crate) logs: PathBuf,
    /// This binary (the helpers' executable).
    pub(crate) exe: PathBuf,
    pub(crate) mono_bin: PathBuf,
    /// A second monolock binary whose v1 figures are measured beside
    /// `mono_bin`'s (`--baseline-bin`).
    pub(crate) base_bin: Option<PathBuf>,
    pub(crate) redis_bin: Option<PathBuf>,
    /// The `etcd` binary of the side-by-side scenario, if it is to run.
    pub(crate) etcd_bin: Option<PathBuf>,
    /// `java` and the ZooKeeper jar of the side-by-side scenario, if it is
    /// to run.
    pub(crate) zookeeper: Option<(PathBuf, PathBuf)>,
    /// `--no-peers`: etcd and ZooKeeper left out on purpose.
    pub(crate) no_peers: bool,
    pub(crate) server_cpu: Option<usize>,
    pub(crate) notes: Vec<String>,
}

impl Setup {
    /// Reads the mode and the binaries from `args`, creates the output
    /// directories, and notes what will not run.
    pub(crate) fn new(args: &RunArgs, setup_notes: Vec<String>) -> Result<Self> {
        let mode = if args.full {
            Mode::Full
        } else if args.quick {
            Mode::Quick
        } else {
            Mode::Smoke
        };
        let plan = Plan::for_mode(mode, args.rounds);
        let out = args
            .out
            .clone()
            .unwrap_or_else(|| PathBuf::from("target/monolock-bench").join(mode.key()));
        // Server logs stay out of the results directory (which may be docs/).
        let logs = args
            .logs
            .clone()
            .unwrap_or_else(|| PathBuf::from("target/monolock-bench/logs"));
        for dir in [&out, &logs] {
            std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        }
        let exe = std::env::current_exe().context("locate this binary")?;
        let mono_bin = match &args.monolock_bin {
            Some(p) => p.clone(),
            None => exe
                .parent()
                .map(|d| d.join("monolock"))
                .context("this binary has no directory")?,
        };
        if !mono_bin.is_file() {
            bail!(
                "no monolock binary at {}: build it first (`cargo build -p monolock` with the same profile) or pass --monolock-bin PATH",
                mono_bin.display()
            );
        }
        if let Some(base) = &args.baseline_bin
            && !base.is_file()
        {
            bail!(
                "no monolock binary at {} (--baseline-bin): build the baseline first, or leave the flag out",
                base.display()
            );
        }
        let mut notes = setup_notes;
        if !args.only.is_empty() {
            notes.push(format!("only these scenarios were run: {:?}", args.only));
        }
        let redis_bin = if args.no_redis {
            notes.push("Redis not run: --no-redis".to_owned());
            None
        } else {
            match args
                .redis_bin
                .clone()
                .or_else(|| servers::find_on_path("redis-server"))
            {
                Some(p) if p.is_file() => Some(p),
                _ => {
                    notes.push(
                        "Redis not run: redis-server is not installed (`apt-get update && apt-get install -y redis-server`)"
                            .to_owned(),
                    );
                    None
                }
            }
        };
        let peers_wanted =
            !args.no_peers && (args.only.is_empty() || args.only.contains(&Scenario::Peers));
        // etcd's watch sits beside monolock's observers too.
        let etcd_wanted =
            peers_wanted || (!args.no_peers && args.only.contains(&Scenario::Observers));
        let etcd_bin = if etcd_wanted {
            let found = args
                .etcd_bin
                .clone()
                .or_else(|| servers::find_on_path("etcd"))
                .filter(|p| p.is_file());
            if found.is_none() {
                notes.push(
                    "etcd not run: etcd is not installed (`apt-get install etcd-server`, or .ci/setup.d/peers.sh)"
                        .to_owned(),
                );
            }
            found
        } else {
            None
        };
        let zookeeper = if peers_wanted {
            let found = crate::peers::zookeeper_install();
            if found.is_none() {
                notes.push(
                    "ZooKeeper not run: java or /usr/share/java/zookeeper.jar missing (`apt-get install zookeeperd`, or .ci/setup.d/peers.sh)"
                        .to_owned(),
                );
            }
            found
        } else {
            None
        };
        if plan.long_ttl.is_none() {
            notes.push(
                "Redis TTL 30 s dead-holder trials run only in --full (30 s per trial)".to_owned(),
            );
        }
        Ok(Self {
            mode,
            plan,
            only: args.only.clone(),
            out,
            logs,
            exe,
            mono_bin,
            base_bin: args.baseline_bin.clone(),
            redis_bin,
            etcd_bin,
            zookeeper,
            no_peers: args.no_peers,
            server_cpu: cpus(args).map(|(s, _)| s),
            notes,
        })
    }

    /// Whether `scenario` is to run.
    pub(crate) fn wants(&self, scenario: Scenario) -> bool {
        self.only.is_empty() || self.only.contains(&scenario)
    }
}
