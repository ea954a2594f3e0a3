//! The fault scenarios, their shared harness and their report.
//!
//! Each scenario injects one kind of fault a number of times (`rounds`)
//! with randomised timing and parameters from a seeded generator, then
//! checks: no two beliefs in one lock overlap against one live server;
//! tokens are unique and increase in grant order, across restarts too; the
//! fenced resource refused every write under a superseded token; and the
//! scenario's own bounds (time from fault to the next grant, heartbeat
//! round trips, ...). A scenario fails by listing problems.
//!
//! The harness, one concept per file: [`report`] (what a run found),
//! [`error`] (why a run could not go on), [`lab`] (workers, checker and the
//! analysis), [`in_process`] (an in-process server and a lab: the stage of
//! crash, pause and partition) and `fleet` (real servers replaced under
//! load behind a stable address: restart and failover).
//!
//! # Adding a scenario
//!
//! 1. A file here, `my_fault.rs`, with a module doc saying what is
//!    injected and what is checked, and
//!    `pub(super) async fn run(env: &Env, rounds: u32, rng: &mut StdRng,
//!    report: &mut Report) -> Result<()>`; open its stage first
//!    ([`InProcessStage::open`] or `FleetStage::open`) and end with the
//!    stage's `finish`, which runs the shared checks.
//! 2. Here: `mod my_fault;`, a variant of [`Scenario`], and the variant at
//!    the end of [`ALL`]. The compiler then points at the two matches to
//!    complete: [`Scenario::spec`] (name, CI rounds, whether it needs the
//!    server binary) and [`Scenario::run`].
//! 3. A `#[test]` in `tests/scenarios.rs` calling `run(Scenario::MyFault)`.

mod crash;
mod error;
mod exhaustion;
mod failover;
mod fleet;
mod hostile;
mod in_process;
mod lab;
mod partition;
mod pause;
mod report;
mod restart;
mod vrrp;

pub use vrrp::unavailable as vrrp_unavailable;

use std::{path::PathBuf, time::Duration};

use rand::{SeedableRng, rngs::StdRng};
use serde::Serialize;

pub use self::{
    error::{Result, ScenarioError},
    fleet::wait_past_unix_second,
    in_process::{InProcessServer, InProcessStage},
    lab::{Lab, analyse},
    report::{Report, Totals},
};

/// Every scenario, in the order the suite runs them.
pub const ALL: &[Scenario] = &[
    Scenario::HolderKilled,
    Scenario::HolderPaused,
    Scenario::Partition,
    Scenario::ServerRestart,
    Scenario::Failover,
    Scenario::HostileClients,
    Scenario::DescriptorExhaustion,
    Scenario::VrrpFailover,
];

/// One kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scenario {
    /// 1. The holder is SIGKILLed mid-work.
    HolderKilled,
    /// 2. The holder is SIGSTOPped for 2-5 leases, then continued.
    HolderPaused,
    /// 3. The holder's network misbehaves (proxy faults).
    Partition,
    /// 4. The server restarts under load (SIGTERM or SIGKILL).
    ServerRestart,
    /// 5. Failover to a passive standby behind a failover address.
    Failover,
    /// 6. Slow and hostile clients next to healthy ones.
    HostileClients,
    /// 7. The server runs out of file descriptors.
    DescriptorExhaustion,
    /// 8. keepalived moves a virtual IP between two real servers in
    ///    network namespaces (needs root).
    VrrpFailover,
}

/// What the suite needs to know about a scenario besides how to run it.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// Its name on the command line and in reports.
    pub name: &'static str,
    /// Fault injections in the CI form: every variant at least once, the
    /// whole suite within its 5-minute budget.
    pub ci_rounds: u32,
    /// Whether it needs the real `monolock` binary.
    pub needs_server_binary: bool,
}

impl Scenario {
    /// Its facts, in one table.
    pub const fn spec(self) -> Spec {
        const fn spec(name: &'static str, ci_rounds: u32, needs_server_binary: bool) -> Spec {
            Spec {
                name,
                ci_rounds,
                needs_server_binary,
            }
        }
        match self {
            Self::HolderKilled => spec("holder-killed", 3, false),
            Self::HolderPaused => spec("holder-paused", 2, false),
            Self::Partition => spec("partition", 7, false),
            Self::ServerRestart => spec("server-restart", 2, true),
            Self::Failover => spec("failover", 1, true),
            Self::HostileClients => spec("hostile-clients", 1, false),
            Self::DescriptorExhaustion => spec("fd-exhaustion", 1, true),
            Self::VrrpFailover => spec(vrrp::NAME, 1, true),
        }
    }

    /// The scenario's name on the command line and in reports.
    pub const fn name(self) -> &'static str {
        self.spec().name
    }

    /// Parses [`Scenario::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        ALL.iter().copied().find(|s| s.name() == name)
    }

    /// Whether it needs the real `monolock` binary.
    pub const fn needs_server_binary(self) -> bool {
        self.spec().needs_server_binary
    }

    /// Runs the scenario once with `rounds` injections.
    pub async fn run(self, env: &Env, rounds: u32, seed: u64) -> Report {
        let mut report = Report::new(self, seed);
        let mut rng = StdRng::seed_from_u64(seed);
        let (rng, r) = (&mut rng, &mut report);
        let outcome = match self {
            Self::HolderKilled => crash::run(env, rounds, rng, r).await,
            Self::HolderPaused => pause::run(env, rounds, rng, r).await,
            Self::Partition => partition::run(env, rounds, rng, r).await,
            Self::ServerRestart => restart::run(env, rounds, rng, r).await,
            Self::Failover => failover::run(env, rounds, rng, r).await,
            Self::HostileClients => hostile::run(env, rounds, rng, r).await,
            Self::DescriptorExhaustion => exhaustion::run(env, rounds, rng, r).await,
            Self::VrrpFailover => vrrp::run(env, rounds, rng, r).await,
        };
        if let Err(err) = outcome {
            report.problem(format!("aborted: {err}"));
        }
        report
    }
}

/// The number of fault injections per scenario in the CI form: every
/// scenario, every variant at least once, within the 5-minute budget.
pub const fn ci_rounds(scenario: Scenario) -> u32 {
    scenario.spec().ci_rounds
}

/// What the scenarios need from outside.
#[derive(Clone, Debug)]
pub struct Env {
    /// The `monolock-fault-worker` binary.
    pub worker_bin: PathBuf,
    /// The `monolock` binary (restart, failover, descriptor exhaustion).
    pub server_bin: Option<PathBuf>,
}

impl Env {
    fn server_bin(&self) -> Result<PathBuf> {
        self.server_bin.clone().ok_or(ScenarioError::NoServerBinary)
    }
}

/// How long after a fault the harness waits for an expected event before
/// declaring a problem: generous, so that a loaded machine does not fail a
/// run; the measured figures are reported separately.
fn patience(lease: Duration) -> Duration {
    lease * 4 + Duration::from_secs(5)
}
