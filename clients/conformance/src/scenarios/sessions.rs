//! Many locks from one process: a few connections on protocol v2, one
//! connection per lock on v1, as each protocol is documented.

use std::collections::HashSet;

use monolock_testkit::sys;
use serde_json::Value;

use crate::{Check, Failure, Lab, clients::Prepared, ensure, server::Server};

/// The locks one v2 driver holds at once.
const V2_LOCKS: usize = 1_000;

/// The locks one v1 driver holds at once: enough to tell one connection
/// per lock from a few, without a thousand descriptors per run.
const V1_LOCKS: usize = 50;

/// "A few connections": the v2 sessions 1,000 claims may use. The server
/// takes 1,024 claims per session, so one is enough; a client may spread
/// its claims over a few more.
const FEW: usize = 4;

/// Descriptors a runtime may open besides its connections (an epoll or
/// eventfd started on first use, a resolver's socket).
const SLACK: u64 = 4;

/// The lease: nothing here waits for one to run out.
const LEASE_MS: u64 = 10_000;

/// The driver's open descriptors, from /proc.
fn fds(pid: u32) -> Check<u64> {
    sys::open_descriptors(pid)
        .map_err(|err| Failure::new(format!("cannot list /proc/{pid}/fd: {err}")))
}

/// One driver takes many locks (distinct names) and holds them all.
///
/// - **v2** (the client's default): 1,000 locks. The admin API's
///   `/api/sessions` lists at most 4 sessions, whose `held` counts add up
///   to 1,000, and the driver's descriptors (/proc) grew by at most the
///   sessions plus 4 from before its first lock.
/// - **v1** (`force_v1`): 50 locks, and the documented v1 behaviour: one
///   connection per lock. `/api/sessions` lists none, the admin API shows
///   the 50 holders as v1 claims (no `protocol` field) from 50 distinct
///   remote addresses, and the driver's descriptors grew by at least 50.
pub fn many_locks_few_connections(lab: &Lab, client: &Prepared) -> Check {
    let name = client.name();
    let server = Server::start(&lab.monolock, &[])?;
    let mut driver = client.driver(lab, 1)?;
    driver.open(&server.address())?;
    let before = fds(driver.pid())?;
    let count = if client.force_v1 { V1_LOCKS } else { V2_LOCKS };
    for i in 0..count {
        driver.lock(&format!("h{i}"), &format!("conformance/many/{i}"), LEASE_MS)?;
    }
    let after = fds(driver.pid())?;
    let grown = after.saturating_sub(before);
    let sessions = server.admin.sessions()?;
    let holders = server.admin.locks_matching("conformance/many/*")?;
    ensure!(
        name,
        holders.len() == count,
        "{count} locks taken, the admin API shows {} held",
        holders.len()
    );
    if client.force_v1 {
        ensure!(
            name,
            sessions.is_empty(),
            "forced to v1, the client opened v2 sessions: {sessions:?}"
        );
        let mut remotes = HashSet::new();
        for lock in &holders {
            let holder = &lock["holder"];
            ensure!(
                name,
                holder.get("protocol").is_none_or(Value::is_null),
                "forced to v1, a lock is held by a v2 claim: {lock}"
            );
            remotes.insert(
                holder["remote_addr"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
        }
        ensure!(
            name,
            remotes.len() == count,
            "v1 holds each lock on its own connection: {count} locks came from {} remote \
             addresses",
            remotes.len()
        );
        ensure!(
            name,
            grown >= count as u64,
            "v1 holds each lock on its own connection, but {count} locks grew the driver's \
             descriptors by {grown} ({before} -> {after})"
        );
    } else {
        let held: u64 = sessions.iter().filter_map(|s| s["held"].as_u64()).sum();
        ensure!(
            name,
            !sessions.is_empty() && sessions.len() <= FEW,
            "{count} locks on v2 should take between 1 and {FEW} sessions; the admin API \
             lists {}",
            sessions.len()
        );
        ensure!(
            name,
            held == count as u64,
            "the v2 sessions hold {held} claims in all, expected {count}: {sessions:?}"
        );
        ensure!(
            name,
            grown <= sessions.len() as u64 + SLACK,
            "{count} locks on {} session(s) grew the driver's descriptors by {grown} \
             ({before} -> {after})",
            sessions.len()
        );
    }
    driver.exit()
}
