//! 1. The holder is SIGKILLed mid-work.
//!
//! Three workers contend for one lock on an in-process server; each round
//! kills the current holder at a random moment of its work and starts a
//! replacement. The kernel closes the dead process's socket, so the server
//! releases at once and the next waiter must be granted well within the
//! lease. A dead process cannot write, so no stale write is possible; the
//! resource and the beliefs are checked all the same.

use std::time::Duration;

use rand::{Rng, rngs::StdRng};

use super::{Env, InProcessStage, Report, Result, patience};
use crate::clock::ms_between;

const LEASE: Duration = Duration::from_millis(1000);
const LOCK: &str = "faults/holder-killed";

pub(super) async fn run(
    env: &Env,
    rounds: u32,
    rng: &mut StdRng,
    report: &mut Report,
) -> Result<()> {
    let mut stage = InProcessStage::open(env, LEASE, Duration::from_secs(5), report).await?;
    let outcome = rounds_of_kills(&mut stage, rounds, rng, report).await;
    stage.finish(report, outcome).await
}

async fn rounds_of_kills(
    stage: &mut InProcessStage,
    rounds: u32,
    rng: &mut StdRng,
    report: &mut Report,
) -> Result<()> {
    for _ in 0..3 {
        stage.spawn(LOCK, LEASE, false)?;
    }
    for _ in 0..rounds {
        let InProcessStage { server, lab } = &mut *stage;
        let (holder, token, _) = lab.wait_held(LOCK, 0, None, patience(LEASE)).await?;
        // The latest grant may already be lost; take the live holder.
        let (holder, token) = lab.holder(LOCK).unwrap_or((holder, token));
        // Let it work (write) for a random while, then kill it.
        lab.wait_write(token, patience(LEASE)).await?;
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..150))).await;
        let Some(killed_at) = lab.kill(&holder).await else {
            continue;
        };
        report.fault("sigkill");
        let (next, next_token, from_ns) = lab
            .wait_held(LOCK, killed_at, Some(&holder), patience(LEASE))
            .await?;
        // The server's own grant time (the waiter may be scheduled later).
        let granted_at = server.granted_at(LOCK, next_token).unwrap_or(from_ns);
        let waited = ms_between(killed_at, granted_at).max(0.0);
        report.fault_to_grant(waited);
        // A closed socket releases at once: far inside the lease.
        report.check(waited < LEASE.as_millis() as f64, || {
            format!(
                "{next} was granted {waited:.0} ms after the holder was killed (lease {LEASE:?})"
            )
        });
        stage.spawn(LOCK, LEASE, false)?;
    }
    Ok(())
}
