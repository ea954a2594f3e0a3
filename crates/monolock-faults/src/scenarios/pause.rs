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

use super::{Env, InProcessServer, Lab, Report, patience};
use crate::{clock::ms_between, messages::WorkerMsg, process::wait_stopped};

const LEASE: Duration = Duration::from_millis(500);

pub(super) async fn run(
    env: &Env,
    rounds: u32,
    rng: &mut StdRng,
    report: &mut Report,
) -> Result<(), String> {
    report.lease_ms = LEASE.as_millis() as u64;
    let server = InProcessServer::start(Duration::from_secs(5)).map_err(|e| e.to_string())?;
    let mut lab = Lab::new(env).await.map_err(|e| e.to_string())?;
    let mut outcome = Ok(());
    for round in 0..rounds {
        let in_flight = round % 2 == 1;
        if let Err(err) = pause_round(&mut lab, &server, round, in_flight, rng, report).await {
            outcome = Err(err);
            break;
        }
    }
    lab.finish(report, |_, _| "in-process".to_owned()).await;
    for p in server.audit_problems() {
        report.problem(format!("audit: {p}"));
    }
    outcome
}

async fn pause_round(
    lab: &mut Lab,
    server: &InProcessServer,
    round: u32,
    in_flight: bool,
    rng: &mut StdRng,
    report: &mut Report,
) -> Result<(), String> {
    let lock = format!("faults/holder-paused/{round}");
    let err = |e: crate::checker::WaitTimeout| e.to_string();
    let old = lab.spawn(server.addr, &lock, LEASE, Duration::ZERO, in_flight)?;
    let (_, old_token, old_from) = lab
        .wait_held(&lock, 0, None, patience(LEASE))
        .await
        .map_err(err)?;
    let new = lab.spawn(server.addr, &lock, LEASE, Duration::ZERO, false)?;
    server
        .wait_waiters(&lock, 1, patience(LEASE))
        .await
        .map_err(err)?;
    let pid = lab.worker(&old).map(|w| w.pid()).ok_or("worker gone")?;
    let stopped_at = if in_flight {
        // The worker stops itself right after this report.
        let reported = lab
            .checker
            .wait_for(patience(LEASE), "the holder to pause itself", |records| {
                records.iter().find_map(|r| {
                    (r.worker == old && matches!(r.msg, WorkerMsg::Pausing { .. }))
                        .then_some(r.at_ns)
                })
            })
            .await
            .map_err(err)?;
        report.fault("sigstop-in-flight");
        reported
    } else {
        tokio::time::sleep(Duration::from_millis(
            rng.random_range(0..LEASE.as_millis() as u64 / 2),
        ))
        .await;
        let at = crate::clock::mono_ns();
        crate::process::send_signal(pid, libc::SIGSTOP).map_err(|e| e.to_string())?;
        report.fault("sigstop");
        at
    };
    wait_stopped(pid, patience(LEASE)).await.map_err(err)?;
    let pause = LEASE.mul_f64(rng.random_range(2.0..5.0));
    let (_, new_token, from_ns) = lab
        .wait_held(&lock, old_from, Some(&old), pause.max(patience(LEASE)))
        .await
        .map_err(err)?;
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
    lab.wait_write(new_token, patience(LEASE))
        .await
        .map_err(err)?;
    let resume_at = tokio::time::Instant::now()
        + Duration::from_nanos(
            (stopped_at + crate::clock::nanos(pause)).saturating_sub(crate::clock::mono_ns()),
        );
    tokio::time::sleep_until(resume_at).await;
    crate::process::send_signal(pid, libc::SIGCONT).map_err(|e| e.to_string())?;
    let until_ns = lab
        .wait_lost(&old, old_token, patience(LEASE))
        .await
        .map_err(err)?;
    report.check(until_ns <= from_ns, || {
        format!(
            "the paused holder believed until {:.1} ms after the next grant",
            ms_between(from_ns, until_ns)
        )
    });
    if in_flight {
        let resumed = lab
            .checker
            .wait_for(patience(LEASE), "the resumed holder's report", |records| {
                records.iter().find_map(|r| match &r.msg {
                    WorkerMsg::Resumed {
                        held_after_resume,
                        write_accepted,
                        ..
                    } if r.worker == old => Some((*held_after_resume, *write_accepted)),
                    _ => None,
                })
            })
            .await
            .map_err(err)?;
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
