//! The queue as one client sees it: try_lock, bounded waits, and taking a
//! lock right after another client released it.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::{
    Check, Lab,
    clients::Prepared,
    driver::lock_cmd,
    ensure,
    scenarios::{exit_all, open_all},
    server::Server,
};

/// The lease of these scenarios; nothing here waits for one to run out.
const LEASE_MS: u64 = 5_000;

/// How long the server may take to notice a closed connection: the time
/// between a client's close and the admin API no longer listing it. A
/// close reaches the server in microseconds; this only bounds the wait.
const CLOSE_NOTICED: Duration = Duration::from_secs(2);

/// The bounded wait of `bounded_wait_not_acquired`.
const WAIT_MS: u64 = 300;

/// try_lock on a busy lock answers `acquired: false` and has left nothing
/// in the queue by the time it answers: the admin API, asked right after
/// the reply, shows no waiter (v2 asks in try-only mode; v1 half-closes
/// the connection the server answered WAITING on and reads until the
/// server's EOF). Once the holder's release has returned, nobody holds
/// the lock (no forgotten claim was promoted), so the same driver's
/// try_lock then takes it.
pub fn try_lock_leaves_no_trace(lab: &Lab, client: &Prepared) -> Check {
    let name = client.name();
    let server = Server::start(&lab.monolock, &[])?;
    let mut drivers = client.drivers(lab, 1, 2)?;
    open_all(&mut drivers, &server.address())?;
    let lock = "conformance/try-lock";
    let held = drivers[0].lock("h", lock, LEASE_MS)?;
    let attempt = drivers[1].try_lock("t", lock, LEASE_MS)?;
    ensure!(
        name,
        attempt.is_none(),
        "try_lock on a lock held under token {held} answered acquired with token {attempt:?}"
    );
    let waiting = server.admin.waiters(lock)?;
    ensure!(
        name,
        waiting == 0,
        "right after try_lock answered acquired: false, the admin API shows {waiting} waiter(s)"
    );
    drivers[0].release("h")?;
    let after = server.admin.lock(lock)?;
    ensure!(
        name,
        after.is_none(),
        "right after the holder's release returned, the admin API still shows the lock \
         (a try_lock left in the queue would hold it now): {after:?}"
    );
    let taken = drivers[1].try_lock("t", lock, LEASE_MS)?;
    ensure!(
        name,
        taken.is_some_and(|token| token > held),
        "try_lock of a free lock answered {taken:?}, expected a token above {held}"
    );
    drivers[1].release("t")?;
    exit_all(drivers)
}

/// A wait bounded to 300 ms on a held lock fails with `not_acquired`, no
/// sooner than 300 ms after the command was sent and within 3 s, and the
/// place in the queue is given up; the holder still holds (and its
/// `wait_lost` answers `lost: false` when its timeout runs out).
pub fn bounded_wait_not_acquired(lab: &Lab, client: &Prepared) -> Check {
    let name = client.name();
    let server = Server::start(&lab.monolock, &[])?;
    let mut drivers = client.drivers(lab, 1, 2)?;
    open_all(&mut drivers, &server.address())?;
    let lock = "conformance/bounded";
    drivers[0].lock("h", lock, LEASE_MS)?;
    let sent = Instant::now();
    drivers[1].fails(
        lock_cmd("w", lock, LEASE_MS, Some(WAIT_MS)),
        &["not_acquired"],
    )?;
    let took = sent.elapsed();
    ensure!(
        name,
        took >= Duration::from_millis(WAIT_MS),
        "a wait bounded to {WAIT_MS} ms gave up after {took:?}"
    );
    ensure!(
        name,
        took < Duration::from_millis(WAIT_MS) + Duration::from_secs(3),
        "a wait bounded to {WAIT_MS} ms took {took:?} to give up"
    );
    server.admin.until(
        "the timed-out waiter's place in the queue to disappear",
        CLOSE_NOTICED,
        |admin| Ok((admin.waiters(lock)? == 0).then_some(())),
    )?;
    ensure!(
        name,
        drivers[0].is_held("h")?,
        "the holder lost the lock while another driver waited"
    );
    let quiet = drivers[0].ok(json!({"cmd": "wait_lost", "handle": "h", "timeout_ms": 50}))?;
    ensure!(
        name,
        quiet.flag("lost") == Some(false),
        "wait_lost on a held lock should answer lost: false after its timeout: {}",
        quiet.0
    );
    drivers[1].fails(json!({"cmd": "token", "handle": "w"}), &["unknown_handle"])?;
    drivers[0].release("h")?;
    exit_all(drivers)
}

/// How many times `release_then_try_lock` hands the lock over: a release
/// that returns before the server has released loses the race only now
/// and then, so one handover would let it pass most runs.
const HANDOVERS: usize = 20;

/// A driver releases the lock; another driver of the same client then
/// takes it with try_lock, at the first attempt, 20 times in turn. Every
/// client's release is confirmed, v1 and v2 alike: v2 reads RELEASED; v1
/// shuts its write side down and reads until the server's EOF (the server
/// releases before it closes). No retry, no exception.
pub fn release_then_try_lock(lab: &Lab, client: &Prepared) -> Check {
    let name = client.name();
    let server = Server::start(&lab.monolock, &[])?;
    let mut drivers = client.drivers(lab, 1, 2)?;
    open_all(&mut drivers, &server.address())?;
    let lock = "conformance/handover";
    let mut first = drivers[0].lock("h", lock, LEASE_MS)?;
    for round in 0..HANDOVERS {
        let (from, to) = if round % 2 == 0 { (0, 1) } else { (1, 0) };
        drivers[from].release("h")?;
        let token = drivers[to].try_lock("h", lock, LEASE_MS)?;
        let Some(token) = token else {
            return Err(drivers[to].failure(format!(
                "try_lock right after {}'s release returned found the lock busy \
                 (handover {})",
                drivers[from].label,
                round + 1
            )));
        };
        ensure!(
            name,
            token > first,
            "the new holder's token {token} is not above the previous one's {first}"
        );
        first = token;
    }
    let last = if HANDOVERS.is_multiple_of(2) { 0 } else { 1 };
    drivers[last].release("h")?;
    exit_all(drivers)
}
