//! `monolock-bench --smoke` end to end, so the bench cannot rot: it starts a
//! real `monolock serve` (and `redis-server` when installed), runs every
//! scenario at toy size and must exit 0 with no step failed.

use std::{path::PathBuf, process::Command};

#[test]
fn smoke_mode_runs_every_scenario() {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_monolock-bench"));
    let monolock = bench.with_file_name("monolock");
    if !monolock.is_file() {
        // `cargo test --workspace` builds it; `cargo test -p monolock-bench`
        // alone does not. CI runs the workspace, so there it must exist.
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but there is no monolock binary at {}",
            monolock.display()
        );
        eprintln!(
            "skipped: no monolock binary at {} (build it with `cargo build -p monolock`)",
            monolock.display()
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("monolock-bench-smoke-{}", std::process::id()));
    let out = dir.join("out");
    let run = Command::new(&bench)
        .arg("--smoke")
        .arg("--out")
        .arg(&out)
        .arg("--logs")
        .arg(dir.join("logs"))
        .output()
        .expect("run monolock-bench");
    assert!(
        run.status.success(),
        "monolock-bench --smoke failed ({}):\n{}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr),
        String::from_utf8_lossy(&run.stdout)
    );
    let results = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let json: serde_json::Value = serde_json::from_str(&results).expect("valid JSON");
    assert_eq!(json["errors"], serde_json::json!([]));
    assert!(json["summary"]["contention.w0.monolock.acq_per_s"]["median"].as_f64() > Some(0.0));
    // The Redis half runs wherever redis-server is installed, and CI
    // installs it (.ci/setup.d/redis.sh): its figures must be there too.
    if redis_installed() || std::env::var_os("CI").is_some() {
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

fn redis_installed() -> bool {
    Command::new("redis-server")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success())
}
