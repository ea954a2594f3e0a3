//! The short form of the side-by-side fault scenarios: each system
//! (monolock, Redis, etcd, ZooKeeper) takes one SIGKILLed holder through
//! its own lock recipe, and monolock, Redis and etcd a server restarted
//! under a held lock, so the comparison cannot rot. It asserts that every
//! system ran and no round errored, not the peers' counts (those are the
//! full run's, `monolock-peer-faults`, in RELIABILITY.md); of monolock it
//! also asserts what it promises across a restart: the holder is told,
//! and tokens rise.
//!
//! Needs `monolock` (`cargo build -p monolock`, or `MONOLOCK_BIN`) and the
//! peers installed (`.ci/setup.d/peers.sh`). Outside CI a missing peer is
//! reported in one line and not run; under CI it fails the test.

use std::{process::Command, sync::Mutex};

use monolock_faults::peers::{Cell, Fault, Holders, Installs, System, run_system};
use rand::{SeedableRng, rngs::StdRng};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn smoke(system: System, faults: &[Fault]) -> Option<Vec<Cell>> {
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
        faults,
        1,
        &installs,
        &holders,
        &mut StdRng::seed_from_u64(seed),
        |cell| println!("{cell}"),
    ));
    assert_eq!(cells.len(), faults.len(), "one cell per fault expected");
    for cell in &cells {
        let fault = cell.fault.map_or("?", Fault::name);
        assert!(
            cell.errors.is_empty(),
            "seed {seed}, {fault}: {:?}",
            cell.errors
        );
        assert_eq!(cell.faults, 1, "{fault} was not injected");
        assert!(
            cell.beliefs >= 2,
            "{fault}: the lock did not move on: {} beliefs",
            cell.beliefs
        );
        assert!(cell.writes > 0, "{fault}: no holder wrote");
    }
    Some(cells)
}

/// monolock's history is also checked by Porcupine, an existing
/// linearizability checker (`porcupine/`, Go), the lock modelled as a
/// mutex with fencing tokens; its own tests show the model rejects an
/// overlap, a stale write accepted and tokens going back.
#[test]
fn monolock() {
    let Some(cells) = smoke(
        System::Monolock,
        &[
            Fault::HolderKilled,
            Fault::ServerRestart,
            Fault::ServerKilled,
        ],
    ) else {
        return;
    };
    for cell in &cells {
        assert_eq!(cell.tokens_not_rising, 0, "tokens fell: {cell}");
    }
    for cell in &cells[1..] {
        assert_eq!(cell.holder_told, 1, "the holder was not told: {cell}");
    }
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
    let histories: Vec<_> = cells
        .iter()
        .enumerate()
        .map(|(i, cell)| {
            let path = std::env::temp_dir().join(format!(
                "monolock-peer-faults-history-{}-{i}.json",
                std::process::id()
            ));
            std::fs::write(&path, serde_json::to_vec(&cell.history).unwrap()).unwrap();
            path
        })
        .collect();
    let mut args = vec!["run".to_owned(), ".".to_owned()];
    args.extend(histories.iter().map(|p| p.to_string_lossy().into_owned()));
    let verdict = go(&args.iter().map(String::as_str).collect::<Vec<_>>());
    for path in &histories {
        let _ = std::fs::remove_file(path);
    }
    println!("{verdict}");
    assert_eq!(
        verdict.matches(": linearizable in ").count(),
        cells.len(),
        "{verdict}"
    );
}

#[test]
fn redis() {
    smoke(System::Redis, &[Fault::HolderKilled, Fault::ServerRestart]);
}

#[test]
fn etcd() {
    smoke(System::Etcd, &[Fault::HolderKilled, Fault::ServerRestart]);
}

#[test]
fn zookeeper() {
    smoke(System::Zookeeper, &[Fault::HolderKilled]);
}
