//! The short form of the side-by-side fault scenarios: each system
//! (monolock, Redis, etcd, ZooKeeper) takes one SIGKILLed holder through
//! its own lock recipe, so the comparison cannot rot. It asserts that every
//! system ran and no round errored, not the counts (those are the full
//! run's, `monolock-peer-faults`, in RELIABILITY.md).
//!
//! Needs `monolock` (`cargo build -p monolock`, or `MONOLOCK_BIN`) and the
//! peers installed (`.ci/setup.d/peers.sh`). Outside CI a missing peer is
//! reported in one line and not run; under CI it fails the test.

use std::{process::Command, sync::Mutex};

use monolock_faults::peers::{Cell, Fault, Holders, Installs, System, run_system};
use rand::{SeedableRng, rngs::StdRng};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn smoke(system: System) -> Option<Cell> {
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let installs = Installs::find();
    if let Some(why) = installs.missing(system) {
        assert!(std::env::var_os("CI").is_none(), "{why}");
        eprintln!("skipped: {why}");
        return None;
    }
    let holders = Holders {
        worker: env!("CARGO_BIN_EXE_monolock-fault-worker").into(),
        peer: env!("CARGO_BIN_EXE_monolock-peer-holder").into(),
    };
    let seed = rand::random();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cells = runtime.block_on(run_system(
        system,
        &[Fault::HolderKilled],
        1,
        &installs,
        &holders,
        &mut StdRng::seed_from_u64(seed),
    ));
    for cell in &cells {
        println!("{cell}");
    }
    let [cell] = cells.as_slice() else {
        panic!("one cell expected, got {}", cells.len());
    };
    assert!(cell.errors.is_empty(), "seed {seed}: {:?}", cell.errors);
    assert_eq!(cell.faults, 1, "the fault was not injected");
    assert!(
        cell.beliefs >= 2,
        "the lock did not move on: {} beliefs",
        cell.beliefs
    );
    assert!(cell.writes > 0, "no holder wrote");
    Some(cell.clone())
}

/// monolock's history is also checked by Porcupine, an existing
/// linearizability checker (`porcupine/`, Go), the lock modelled as a
/// mutex with fencing tokens; its own tests show the model rejects an
/// overlap, a stale write accepted and tokens going back.
#[test]
fn monolock() {
    let Some(cell) = smoke(System::Monolock) else {
        return;
    };
    if Command::new("go").arg("version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "go is not installed");
        eprintln!("Porcupine check skipped: go is not installed");
        return;
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("porcupine");
    let go = |args: &[&str]| {
        let out = Command::new("go")
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("running go");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "go {args:?}: {text}");
        text
    };
    go(&["vet", "./..."]);
    go(&["test", "./..."]);
    let history = std::env::temp_dir().join(format!(
        "monolock-peer-faults-history-{}.json",
        std::process::id()
    ));
    std::fs::write(&history, serde_json::to_vec(&cell.history).unwrap()).unwrap();
    let verdict = go(&["run", ".", history.to_str().unwrap()]);
    let _ = std::fs::remove_file(&history);
    println!("{verdict}");
    assert!(verdict.contains(": linearizable in "), "{verdict}");
}

#[test]
fn redis() {
    smoke(System::Redis);
}

#[test]
fn etcd() {
    smoke(System::Etcd);
}

#[test]
fn zookeeper() {
    smoke(System::Zookeeper);
}
