//! No thread, goroutine, task or descriptor leak after 1,000 cycles.

use serde_json::{Value, json};

use crate::{
    Check, Failure, Lab, PATIENCE, clients::Prepared, driver::Driver, ensure, server::Server,
};

/// Cycles run before the first measurement: runtimes start their pools,
/// caches and lazily opened descriptors on first use.
const WARM_UP: u64 = 50;

/// The cycles measured.
const CYCLES: u64 = 1_000;

/// Growth allowed in each count: a runtime may start one more idle worker
/// (tokio's blocking pool, a Go thread) after the warm-up. A leak of one
/// per cycle shows as 1,000.
const SLACK: u64 = 2;

/// Descriptors and threads of `pid`, read from /proc.
fn proc_counts(pid: u32) -> Check<(u64, u64)> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map_err(|err| Failure::new(format!("cannot list /proc/{pid}/fd: {err}")))?
        .count();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|err| Failure::new(format!("cannot read /proc/{pid}/status: {err}")))?;
    let threads = status
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| Failure::new(format!("no Threads line in /proc/{pid}/status")))?;
    Ok((u64::try_from(fds).unwrap_or(u64::MAX), threads))
}

/// What is compared before and after: /proc's counts, then whatever the
/// driver's `stats` reports.
fn measure(driver: &mut Driver) -> Check<Vec<(String, u64)>> {
    let (fds, threads) = proc_counts(driver.pid())?;
    let mut counts = vec![
        ("/proc fds".to_owned(), fds),
        ("/proc threads".to_owned(), threads),
    ];
    let stats = driver.stats()?;
    for key in ["fds", "threads", "tasks", "goroutines", "handles"] {
        if let Some(value) = stats.get(key).and_then(Value::as_u64) {
            counts.push((format!("stats {key}"), value));
        }
    }
    Ok(counts)
}

/// 1,000 lock-then-release cycles inside the driver (`cycles`), after a
/// warm-up of 50: the driver's descriptors and threads (from /proc) and
/// every count its `stats` reports have not grown by more than 2, and the
/// lock is free afterwards.
pub fn no_leak_after_1000_cycles(lab: &Lab, client: &Prepared) -> Check {
    let name = client.name();
    let server = Server::start(&lab.monolock, &[])?;
    let mut driver = client.driver(lab, 1)?;
    driver.open(&server.address())?;
    let lock = "conformance/cycles";
    let cycles =
        |count: u64| json!({"cmd": "cycles", "name": lock, "lease_ms": 10_000, "count": count});
    driver.ok(cycles(WARM_UP))?;
    let before = measure(&mut driver)?;
    let reply = driver.ok(cycles(CYCLES))?;
    ensure!(
        name,
        reply.0["count"].as_u64() == Some(CYCLES),
        "cycles answered count {}, expected {CYCLES}",
        reply.0["count"]
    );
    let after = measure(&mut driver)?;
    for (what, was) in &before {
        let now = after
            .iter()
            .find(|(key, _)| key == what)
            .map(|(_, value)| *value)
            .ok_or_else(|| driver.failure(format!("stats stopped reporting {what}")))?;
        ensure!(
            name,
            now <= was + SLACK,
            "{what} grew from {was} to {now} over {CYCLES} cycles (before: {before:?}, after: {after:?})"
        );
    }
    server
        .admin
        .until("the lock to be free after the cycles", PATIENCE, |admin| {
            Ok(admin.lock(lock)?.is_none().then_some(()))
        })?;
    driver.exit()
}
