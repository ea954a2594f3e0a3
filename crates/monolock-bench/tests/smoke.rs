//! `monolock-bench --smoke` end to end, so the bench cannot rot: it starts a
//! real `monolock serve` (and `redis-server` when installed), runs every
//! scenario at toy size and must exit 0 with no step failed. The
//! side-by-side scenario (etcd and ZooKeeper beside monolock and Redis) and
//! the values-and-observers scenario have tests of their own.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

/// The bench binary under test.
fn bench() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_monolock-bench"))
}

/// Whether the `monolock` binary the bench starts is built next to it.
/// `cargo test --workspace` builds it; `cargo test -p monolock-bench` alone
/// does not. CI runs the workspace, so there it must exist.
fn monolock_built() -> bool {
    let monolock = bench().with_file_name("monolock");
    if monolock.is_file() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set but there is no monolock binary at {}",
        monolock.display()
    );
    eprintln!(
        "skipped: no monolock binary at {} (build it with `cargo build -p monolock`)",
        monolock.display()
    );
    false
}

/// Runs `monolock-bench --smoke ARGS` writing into `dir`, which must exit 0
/// with no step failed: results.json's text and its JSON.
fn run_smoke(dir: &Path, args: &[&str]) -> (String, serde_json::Value) {
    let out = dir.join("out");
    let run = Command::new(bench())
        .arg("--smoke")
        .args(args)
        .arg("--out")
        .arg(&out)
        .arg("--logs")
        .arg(dir.join("logs"))
        .output()
        .expect("run monolock-bench");
    assert!(
        run.status.success(),
        "monolock-bench --smoke {} failed ({}):\n{}\n{}",
        args.join(" "),
        run.status,
        String::from_utf8_lossy(&run.stderr),
        String::from_utf8_lossy(&run.stdout)
    );
    let results = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let json: serde_json::Value = serde_json::from_str(&results).expect("valid JSON");
    assert_eq!(json["errors"], serde_json::json!([]), "{results}");
    (results, json)
}

#[test]
fn smoke_mode_runs_every_scenario() {
    if !monolock_built() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("monolock-bench-smoke-{}", std::process::id()));
    let out = dir.join("out");
    // Every scenario but the side-by-side one, which
    // `side_by_side_smoke_runs_every_system` below runs, and the observers
    // one (`observers_smoke_measures_fan_out_and_value_replacement`).
    let (results, json) = run_smoke(
        &dir,
        &[
            "--only",
            "latency",
            "--only",
            "throughput",
            "--only",
            "contention",
            "--only",
            "many-locks",
            "--only",
            "tls",
            "--only",
            "dead",
            "--only",
            "sessions",
        ],
    );
    assert!(json["summary"]["contention.w0.monolock.acq_per_s"]["median"].as_f64() > Some(0.0));
    // The Redis half runs wherever redis-server is installed, and CI
    // installs it (.ci/setup.d/redis.sh): its figures must be there too.
    if installed("redis-server", "--version") || std::env::var_os("CI").is_some() {
        let redis = json["summary"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(key, value)| key.contains(".redis") && value["median"].as_f64() > Some(0.0))
            .count();
        assert!(
            redis > 0,
            "no Redis figures in results.json: is redis-server installed?\n{results}"
        );
    }
    for chart in ["latency.svg", "throughput.svg", "handover.svg", "wait.svg"] {
        let svg = std::fs::read_to_string(out.join(chart)).expect(chart);
        assert!(svg.starts_with("<svg"), "{chart} is not an SVG");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The series of the side-by-side table, as results.json keys them.
const SIDE_BY_SIDE: [&str; 6] = [
    "mono_2rt",
    "mono_pipelined",
    "redis",
    "etcd",
    "zookeeper",
    "session_floor",
];

#[test]
fn side_by_side_smoke_runs_every_system() {
    if !monolock_built() {
        return;
    }
    let ci = std::env::var_os("CI").is_some();
    let peers = installed("redis-server", "--version")
        && installed("etcd", "--version")
        && installed("java", "-version")
        && std::path::Path::new("/usr/share/java/zookeeper.jar").is_file();
    if !peers {
        // CI installs them all (.ci/setup.d/redis.sh and peers.sh).
        assert!(
            !ci,
            "CI is set but Redis, etcd or ZooKeeper is not installed"
        );
        eprintln!("skipped: Redis, etcd or ZooKeeper is not installed (.ci/setup.d/peers.sh)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("monolock-bench-peers-{}", std::process::id()));
    let out = dir.join("out");
    let (results, json) = run_smoke(&dir, &["--only", "peers"]);
    let summary = &json["summary"];
    let positive = |key: &str| summary[key]["median"].as_f64().is_some_and(|v| v > 0.0);
    for series in SIDE_BY_SIDE {
        for clients in [1, 4] {
            let key = format!("peers.tp.c{clients}.{series}.cycles_per_s");
            assert!(positive(&key), "{key} missing or zero:\n{results}");
        }
        // Throughput patterns only: no waiter, no holder to kill.
        if series == "mono_pipelined" || series == "session_floor" {
            continue;
        }
        for figure in [
            "cont.c4.{}.acq_per_s",
            "cont.c4.{}.handover_p50_us",
            "dead.{}.handover_ms",
            "dead.{}.lease_ms",
            "mem.{}.locks",
        ] {
            let key = format!("peers.{}", figure.replace("{}", series));
            assert!(positive(&key), "{key} missing or zero:\n{results}");
        }
    }
    // The table names every system and its pattern.
    let md = std::fs::read_to_string(out.join("summary.md")).expect("summary.md");
    for heading in [
        "monolock v2",
        "pipelined",
        "Redis",
        "etcd",
        "ZooKeeper",
        "session floor",
    ] {
        assert!(
            md.contains(heading),
            "summary.md has no {heading} column:\n{md}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn observers_smoke_measures_fan_out_and_value_replacement() {
    if !monolock_built() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("monolock-bench-observers-{}", std::process::id()));
    let out = dir.join("out");
    let (results, json) = run_smoke(&dir, &["--only", "observers", "--no-redis"]);
    let summary = &json["summary"];
    let median = |key: &str| summary[key]["median"].as_f64();
    // The smoke plan: fan-outs to 1 and 10 observers, each a client of its
    // own; value replacement with 0, 1 and 10.
    for observers in [1, 10] {
        let pre = format!("observers.fan{observers}");
        assert_eq!(
            median(&format!("{pre}.observers")),
            Some(f64::from(observers)),
            "{results}"
        );
        for figure in [
            "released_p50_us",
            "released_p99_us",
            "granted_p50_us",
            "granted_p99_us",
            "last_p50_us",
            "last_p99_us",
            "server_cpu_us_per_cycle",
            "cycles",
        ] {
            let key = format!("{pre}.{figure}");
            assert!(
                median(&key).is_some_and(|v| v > 0.0),
                "{key} missing or zero:\n{results}"
            );
        }
        // The last observer is told no sooner than the median one.
        assert!(median(&format!("{pre}.last_p50_us")) >= median(&format!("{pre}.granted_p50_us")));
    }
    for key in [
        "observers.fan10.rss_bytes_per_observer",
        "observers.shared10.watches",
    ] {
        assert!(median(key).is_some(), "{key} missing:\n{results}");
    }
    for observers in [0, 1, 10] {
        for figure in ["replacements_per_s", "server_cpu_us_per_replacement"] {
            let key = format!("observers.value.o{observers}.{figure}");
            assert!(
                median(&key).is_some_and(|v| v > 0.0),
                "{key} missing or zero:\n{results}"
            );
        }
    }
    // etcd's watch runs beside them wherever etcd is installed, and CI
    // installs it (.ci/setup.d/peers.sh).
    if installed("etcd", "--version") || std::env::var_os("CI").is_some() {
        for figure in ["delete_p50_us", "put_p50_us", "last_put_p50_us"] {
            let key = format!("observers.etcd.fan10.{figure}");
            assert!(
                median(&key).is_some_and(|v| v > 0.0),
                "{key} missing or zero: is etcd installed?\n{results}"
            );
        }
    }
    let md = std::fs::read_to_string(out.join("summary.md")).expect("summary.md");
    for heading in [
        "### Values and observers",
        "10 observer(s)",
        "replacements/s",
    ] {
        assert!(md.contains(heading), "summary.md has no {heading:?}:\n{md}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn installed(bin: &str, version_flag: &str) -> bool {
    Command::new(bin)
        .arg(version_flag)
        .output()
        .is_ok_and(|out| out.status.success())
}
