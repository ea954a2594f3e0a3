//! Being told the lock is gone: force-release, a paused server, shutdown.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::{Check, Lab, clients::Prepared, driver::Driver, ensure, server::Server};

/// How soon a force-release must reach the holder as a loss.
const FORCED_WITHIN: Duration = Duration::from_secs(1);

/// The lease of the paused-server scenario: long against the scheduling
/// noise of a loaded machine (a heartbeat every ~500 ms), short enough to
/// keep the scenario under 2 s.
const PAUSE_LEASE_MS: u64 = 2_000;

/// How often the paused-server scenario asks `is_held`.
const POLL: Duration = Duration::from_millis(10);

/// The lease where nothing waits for one to run out.
const LEASE_MS: u64 = 5_000;

/// Requires a loss message to name the lock as every client words it:
/// `lock "NAME" lost (REASON): DETAIL`.
fn names_the_lock(driver: &Driver, message: &str, lock: &str, reason: &str) -> Check {
    let expected = format!("lock \"{lock}\" lost ({reason})");
    ensure!(
        driver.client,
        message.starts_with(&expected),
        "{}: the loss message must start with {expected:?}: {message:?}",
        driver.label
    );
    Ok(())
}

/// Requires the loss of `handle` (a claim on `lock`) to be reported
/// everywhere it shows: `is_held` false, `check` failing with `lost`,
/// `reason` and a message naming the lock, and a release that answers ok
/// or `lost` and forgets the handle.
fn lost_everywhere(driver: &mut Driver, handle: &str, lock: &str, reason: &str) -> Check {
    let client = driver.client;
    ensure!(
        client,
        !driver.is_held(handle)?,
        "{}: is_held is true after the loss",
        driver.label
    );
    let check = driver.fails(json!({"cmd": "check", "handle": handle}), &["lost"])?;
    ensure!(
        client,
        check.reason() == Some(reason),
        "{}: check reports the loss with reason {:?}, expected {reason:?}: {}",
        driver.label,
        check.reason(),
        check.0
    );
    names_the_lock(driver, check.message(), lock, reason)?;
    let release = driver.call(json!({"cmd": "release", "handle": handle}))?;
    ensure!(
        client,
        release.ok() || release.kind() == Some("lost"),
        "{}: release of a lost lock answered {}",
        driver.label,
        release.0
    );
    driver.fails(
        json!({"cmd": "is_held", "handle": handle}),
        &["unknown_handle"],
    )?;
    Ok(())
}

/// Collects the reply to `wait_lost` and requires it to report a loss of
/// `lock` for `reason`, with the client's loss message naming the lock.
fn expect_loss(driver: &mut Driver, lock: &str, reason: &str) -> Check {
    let reply = driver.reply()?;
    let client = driver.client;
    ensure!(
        client,
        reply.ok() && reply.flag("lost") == Some(true),
        "{}: wait_lost did not report a loss: {}",
        driver.label,
        reply.0
    );
    ensure!(
        client,
        reply.0["reason"].as_str() == Some(reason),
        "{}: wait_lost reported reason {}, expected {reason:?}",
        driver.label,
        reply.0["reason"]
    );
    let message = reply.0["message"].as_str().unwrap_or_default().to_owned();
    names_the_lock(driver, &message, lock, reason)
}

/// An administrator force-releases the lock through the admin API
/// (`POST /api/locks/NAME/release`): the holder's `wait_lost`, already
/// waiting, reports the loss with reason `forced` within 1 s of the
/// request, and every other view of the lock agrees.
pub fn force_release_reaches_holder(lab: &Lab, client: &Prepared) -> Check {
    let server = Server::start(&lab.monolock, &[])?;
    let mut driver = client.driver(lab, 1)?;
    driver.open(&server.address())?;
    let lock = "conformance/forced";
    driver.lock("h", lock, LEASE_MS)?;
    driver.send(json!({"cmd": "wait_lost", "handle": "h", "timeout_ms": 10_000}))?;
    let forced = Instant::now();
    server.admin.force_release(lock)?;
    expect_loss(&mut driver, lock, "forced")?;
    let took = forced.elapsed();
    ensure!(
        client.name(),
        took < FORCED_WITHIN,
        "the force-release reached the holder after {took:?}, more than {FORCED_WITHIN:?}"
    );
    lost_everywhere(&mut driver, "h", lock, "forced")?;
    driver.exit()
}

/// The server is frozen with SIGSTOP while a client holds a lock with a
/// 2 s lease: the client must give the lock up on its own, at the latest
/// 0.8 x lease after the send of the last heartbeat the server confirmed.
///
/// The runner cannot see that send, but it can bound it from outside: a
/// confirmed heartbeat was answered by the server, so it was sent before
/// the server stopped, and the server has stopped by the time /proc shows
/// it in state T (instant `stopped`). So the client's deadline
/// `S + 0.8 x lease` is at or before `stopped + 0.8 x lease`, and the
/// assertion is exact: **every `is_held` sent at or after
/// `stopped + 0.8 x lease` must answer false** (the driver reads the
/// client's state after receiving the command, and both processes read
/// the same monotonic clock). A poll sent earlier may answer either way.
/// The loss is then reported by `check` with reason `expired` (the server
/// never answered, so no other reason fits).
pub fn paused_server_is_held_false(lab: &Lab, client: &Prepared) -> Check {
    let name = client.name();
    let server = Server::start(&lab.monolock, &[])?;
    let mut driver = client.driver(lab, 1)?;
    driver.open(&server.address())?;
    let lock = "conformance/paused";
    driver.lock("h", lock, PAUSE_LEASE_MS)?;
    ensure!(
        name,
        driver.is_held("h")?,
        "is_held is false right after the grant, with the server running"
    );
    server.signal(libc::SIGSTOP)?;
    server.wait_stopped()?;
    let stopped = Instant::now();
    let bound = stopped + Duration::from_millis(PAUSE_LEASE_MS * 8 / 10);
    let mut polls = 0;
    loop {
        let sent = Instant::now();
        polls += 1;
        if !driver.is_held("h")? {
            break;
        }
        ensure!(
            name,
            sent < bound,
            "is_held was still true when asked {:?} after the server stopped \
             (poll {polls}); the deadline S + 0.8 x lease was at most {:?} after it",
            sent.duration_since(stopped),
            bound.duration_since(stopped)
        );
        std::thread::sleep(POLL);
    }
    let check = driver.fails(json!({"cmd": "check", "handle": "h"}), &["lost"])?;
    ensure!(
        name,
        check.reason() == Some("expired"),
        "the loss to a paused server is reported with reason {:?}, expected \"expired\": {}",
        check.reason(),
        check.0
    );
    names_the_lock(&driver, check.message(), lock, "expired")?;
    server.signal(libc::SIGCONT)?;
    driver.exit()
}

/// SIGTERM to the server ends the holder's claim with ERROR 0x01, which
/// the client reports with reason `shutdown`.
pub fn sigterm_gives_shutdown(lab: &Lab, client: &Prepared) -> Check {
    signalled_server_loses(
        lab,
        client,
        libc::SIGTERM,
        "conformance/shutdown",
        "shutdown",
    )
}

/// SIGKILL to the server closes the holder's connection without an ERROR
/// frame: the client reports the loss with reason `connection`, and its
/// message names the lock.
pub fn killed_server_gives_connection(lab: &Lab, client: &Prepared) -> Check {
    signalled_server_loses(
        lab,
        client,
        libc::SIGKILL,
        "conformance/killed",
        "connection",
    )
}

/// The holder of `lock` waits for its loss while the server gets `signal`:
/// the loss comes with `reason`, everywhere the client reports it.
fn signalled_server_loses(
    lab: &Lab,
    client: &Prepared,
    signal: libc::c_int,
    lock: &str,
    reason: &str,
) -> Check {
    let mut server = Server::start(&lab.monolock, &[])?;
    let mut driver = client.driver(lab, 1)?;
    driver.open(&server.address())?;
    driver.lock("h", lock, LEASE_MS)?;
    driver.send(json!({"cmd": "wait_lost", "handle": "h", "timeout_ms": 10_000}))?;
    server.signal(signal)?;
    expect_loss(&mut driver, lock, reason)?;
    lost_everywhere(&mut driver, "h", lock, reason)?;
    server.wait_exit()?;
    driver.exit()
}
