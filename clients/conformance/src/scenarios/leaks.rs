//! No thread, goroutine, task or descriptor leak after 1,000 cycles.

use std::time::{Duration, Instant};

use monolock_testkit::sys;
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

/// How long counts may take to come back down after the last cycle.
const SETTLE: Duration = Duration::from_secs(3);

/// The first count that grew by more than [`SLACK`] (`Ok(None)`: none
/// did); `Err` when a count of `before` is missing from `after`.
fn grown(before: &[(String, u64)], after: &[(String, u64)]) -> Result<Option<String>, String> {
    for (what, was) in before {
        let now = after
            .iter()
            .find(|(key, _)| key == what)
            .map(|(_, value)| *value)
            .ok_or_else(|| format!("stats stopped reporting {what}"))?;
        if now > was + SLACK {
            return Ok(Some(format!("{what} grew from {was} to {now}")));
        }
    }
    Ok(None)
}

/// Descriptors and threads of `pid`, read from /proc.
fn proc_counts(pid: u32) -> Check<(u64, u64)> {
    let fds = sys::open_descriptors(pid)
        .map_err(|err| Failure::new(format!("cannot list /proc/{pid}/fd: {err}")))?;
    let threads = sys::thread_count(pid)
        .map_err(|err| Failure::new(format!("cannot read /proc/{pid}/status: {err}")))?;
    Ok((fds, threads))
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
/// every count its `stats` reports have not grown by more than 2 (within
/// 3 s of the last cycle, for what ends asynchronously), and the lock is
/// free afterwards.
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
    // A session's last task, goroutine or descriptor may end a moment
    // after its release returned: a leak is what is still there after
    // SETTLE, measured again and again until then.
    let settle_until = Instant::now() + SETTLE;
    loop {
        let after = measure(&mut driver)?;
        let growth = grown(&before, &after).map_err(|missing| driver.failure(missing))?;
        let Some(growth) = growth else { break };
        ensure!(
            name,
            Instant::now() < settle_until,
            "{growth} over {CYCLES} cycles, and still {SETTLE:?} later \
             (before: {before:?}, after: {after:?})"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server
        .admin
        .until("the lock to be free after the cycles", PATIENCE, |admin| {
            Ok(admin.lock(lock)?.is_none().then_some(()))
        })?;
    driver.exit()
}
