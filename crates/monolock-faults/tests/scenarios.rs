//! The CI form of the fault suite: every scenario once, with the numbers
//! of injections of `ci_rounds`, against the real worker processes and
//! (for restart, failover and descriptor exhaustion) the real `monolock`
//! binary.
//!
//! The binary comes from the same target directory and profile: build it
//! first (`cargo build -p monolock`, with `--release` for a release run)
//! or point `MONOLOCK_BIN` at one. The scenarios run one at a time: their
//! timing bounds are part of what they check, and two at once on two
//! cores would measure each other.

use std::sync::Mutex;

use monolock_faults::{
    process::locate_binary,
    scenarios::{Env, Scenario, ci_rounds},
};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn run(scenario: Scenario) {
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let server_bin = if scenario.needs_server_binary() {
        Some(locate_binary("monolock", "MONOLOCK_BIN").unwrap_or_else(|err| panic!("{err}")))
    } else {
        None
    };
    let env = Env {
        worker_bin: env!("CARGO_BIN_EXE_monolock-fault-worker").into(),
        server_bin,
    };
    let seed = std::env::var("MONOLOCK_FAULTS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let mut report = runtime.block_on(scenario.run(&env, ci_rounds(scenario), seed));
    report.seconds = started.elapsed().as_secs_f64();
    println!("{report}");
    assert!(
        report.passed(),
        "{} failed (MONOLOCK_FAULTS_SEED={seed} repeats its choices):\n{report}",
        scenario.name()
    );
    assert!(report.faults > 0, "no fault was injected");
}

/// One test per scenario that needs nothing beyond the two binaries.
macro_rules! scenario_tests {
    ($($test:ident => $scenario:ident),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                run(Scenario::$scenario);
            }
        )*
    };
}

scenario_tests! {
    holder_killed => HolderKilled,
    holder_paused => HolderPaused,
    partition => Partition,
    server_restart => ServerRestart,
    failover => Failover,
    hostile_clients => HostileClients,
    fd_exhaustion => DescriptorExhaustion,
}

/// Needs root and keepalived (CI has both; `.ci/setup.d/keepalived.sh`).
/// Without them it says so in one line and does not run, except under CI,
/// where it must run.
#[test]
fn vrrp_failover() {
    if let Some(why) = monolock_faults::scenarios::vrrp_unavailable() {
        assert!(std::env::var_os("CI").is_none(), "{why}");
        eprintln!("skipped: {why}");
        return;
    }
    run(Scenario::VrrpFailover);
}
