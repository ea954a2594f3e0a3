//! 2. The holder is SIGSTOPped for 2-5 leases, then continued.
//!
//! Two variants alternate. *External*: the harness stops the holder at a
//! random moment of its work. *In flight*: the holder stops itself right
//! after `is_held()` said true and before the write that check allowed, the
//! worst moment. Either way the server expires the silent session after
//! one lease and promotes the waiter; the harness continues the old holder
//! only after the new one has written. Checked: the lock moves on within
//! the lease; the old holder's belief ended (at its 0.8 x lease deadline)
//! before the new one began; on resuming, `is_held()` is false before it
//! can write; its in-flight write under the old token is refused.

use std::time::Duration;

use rand::{Rng, rngs::StdRng};

use super::{Env, InProcessStage, Report, Result, ScenarioError, patience};
use crate::{clock::ms_between, process::wait_stopped};

const LEASE: Duration = Duration::from_millis(500);

pub(super) async fn run(
    env: &Env,
    rounds: u32,
    rng: &mut StdRng,
    report: &mut Report,
) -> Result<()> {
    let mut stage = InProcessStage::open(env, LEASE, Duration::from_secs(5), report).await?;
    let outcome = async {
        for round in 0..rounds {
            let in_flight = round % 2 == 1;
            pause_round(&mut stage, round, in_flight, rng, report).await?;
        }
        Ok(())
    }
    .await;
    stage.finish(report, outcome).await
}

async fn pause_round(
    stage: &mut InProcessStage,
    round: u32,
    in_flight: bool,
    rng: &mut StdRng,
    report: &mut Report,
) -> Result<()> {
    let lock = format!("faults/holder-paused/{round}");
    let old = stage.spawn(&lock, LEASE, in_flight)?;
    let (_, old_token, old_from) = stage.lab.wait_held(&lock, 0, None, patience(LEASE)).await?;
    let new = stage.spawn(&lock, LEASE, false)?;
    let InProcessStage { server, lab } = &mut *stage;
    server.wait_waiters(&lock, 1, patience(LEASE)).await?;
    let pid = lab.pid(&old)?;
    let stopped_at = if in_flight {
        // The worker stops itself right after this report.
        let (reported, _) = lab.wait_pausing(&old, patience(LEASE)).await?;
        report.fault("sigstop-in-flight");
        reported
    } else {
        tokio::time::sleep(Duration::from_millis(
            rng.random_range(0..LEASE.as_millis() as u64 / 2),
        ))
        .await;
        let at = crate::clock::mono_ns();
        crate::process::send_signal(pid, libc::SIGSTOP)
            .map_err(ScenarioError::io(format!("stopping {old}")))?;
        report.fault("sigstop");
        at
    };
    wait_stopped(pid, patience(LEASE)).await?;
    let pause = LEASE.mul_f64(rng.random_range(2.0..5.0));
    let (_, new_token, from_ns) = lab
        .wait_held(&lock, old_from, Some(&old), pause.max(patience(LEASE)))
        .await?;
    // The server's own grant time: expiry is one lease after the last
    // heartbeat, which came before the stop, and is at most ~10 ms late;
    // allow for a loaded machine's scheduling.
    let granted_at = server.granted_at(&lock, new_token).unwrap_or(from_ns);
    let waited = ms_between(stopped_at, granted_at).max(0.0);
    report.fault_to_grant(waited);
    report.check(waited <= LEASE.as_millis() as f64 + 250.0, || {
        format!(
            "the server granted the lock {waited:.0} ms after the holder stopped (lease {LEASE:?})"
        )
    });
    lab.wait_write(new_token, patience(LEASE)).await?;
    let resume_at = tokio::time::Instant::now()
        + Duration::from_nanos(
            (stopped_at + crate::clock::nanos(pause)).saturating_sub(crate::clock::mono_ns()),
        );
    tokio::time::sleep_until(resume_at).await;
    crate::process::send_signal(pid, libc::SIGCONT)
        .map_err(ScenarioError::io(format!("continuing {old}")))?;
    let until_ns = lab.wait_lost(&old, old_token, patience(LEASE)).await?;
    report.check(until_ns <= from_ns, || {
        format!(
            "the paused holder believed until {:.1} ms after the next grant",
            ms_between(from_ns, until_ns)
        )
    });
    if in_flight {
        let resumed = lab.wait_resumed(&old, patience(LEASE)).await?;
        report.check(!resumed.0, || "is_held() was true after the pause".into());
        report.check(!resumed.1, || {
            "the in-flight write under the old token was accepted".into()
        });
        report.count("in_flight_writes_refused", u64::from(!resumed.1));
    }
    lab.stop(&old).await;
    lab.stop(&new).await;
    Ok(())
}
