//! 4. The server restarts under load: SIGTERM (graceful: ERROR 0x01 to
//!    every session) and SIGKILL alternate.
//!
//! Three workers cycle through one lock through a stable address (a pass
//! proxy in front of whichever server is current), and a fourth pauses
//! itself holding the lock with a write in flight. The server is stopped;
//! every client sees ERROR 0x01 or EOF and stops; a fresh server starts
//! once the wall clock has passed the second of the old server's last
//! grant (the token layout's "grants more than a second apart"); the
//! workers re-acquire from it. Checked: tokens from the new server exceed
//! every token of the old one; no belief survives the old server; the
//! paused worker's late write under its old token is refused once the new
//! holder has written.

use std::time::Duration;

use rand::{Rng, rngs::StdRng};

use super::{
    Env, Report, Result, ScenarioError,
    fleet::{FleetStage, LEASE, LateWriter},
    patience, wait_past_unix_second,
};
use crate::{
    clock::{mono_ns, ms_between},
    messages::WorkerMsg,
    process::ServerProcess,
};
use monolock_proto::token_unix_seconds;

const LOCK: &str = "faults/server-restart";

pub(super) async fn run(
    env: &Env,
    rounds: u32,
    rng: &mut StdRng,
    report: &mut Report,
) -> Result<()> {
    let holds: Vec<Duration> = (0..3)
        .map(|_| Duration::from_millis(rng.random_range(50..200)))
        .collect();
    // SIGTERM on even rounds, SIGKILL on odd ones.
    let round = async |stage: &mut FleetStage, old, number: u32, report: &mut Report| {
        restart_round(stage, old, number.is_multiple_of(2), report).await
    };
    FleetStage::run_rounds(env, report, rounds.max(2), false, LOCK, &holds, round).await
}

async fn restart_round(
    stage: &mut FleetStage,
    mut old: ServerProcess,
    graceful: bool,
    report: &mut Report,
) -> Result<ServerProcess> {
    let FleetStage { servers, vip, lab } = stage;
    // Load first: a few grants on the old server.
    let start = mono_ns();
    lab.wait_held(LOCK, start, None, patience(LEASE)).await?;
    let late = LateWriter::park(lab, vip.addr(), LOCK).await?;
    lab.wait_held(LOCK, mono_ns(), None, patience(LEASE))
        .await?;
    let fault_at = if graceful {
        let at = old
            .process
            .signal(libc::SIGTERM)
            .map_err(ScenarioError::io("stopping the server"))?;
        let status = old.process.wait_exit(Duration::from_secs(15)).await;
        report.check(status.is_some_and(|s| s.success()), || {
            format!("after SIGTERM the server exited with {status:?}")
        });
        report.fault("sigterm");
        at
    } else {
        report.fault("sigkill");
        old.process.kill().await
    };
    servers.retire(&old);
    let old_label = old.label.clone();
    drop(old);
    let last = servers.max_token(&old_label, report);
    wait_past_unix_second(token_unix_seconds(last)).await;
    let new = servers.start().await?;
    vip.set_backend(Some(new.addr));
    let (_, token, from_ns) = lab
        .wait_held(LOCK, fault_at, Some(late.name()), patience(LEASE))
        .await?;
    report.check(token > last, || {
        format!("the first grant after the restart has token {token}, not above {last}")
    });
    report.fault_to_grant(ms_between(fault_at, from_ns));
    // How the clients learned: ERROR 0x01 or a closed connection.
    let reasons = lab
        .checker
        .records()
        .iter()
        .filter(|r| r.at_ns >= fault_at)
        .filter_map(|r| match &r.msg {
            WorkerMsg::Lost { reason, .. } | WorkerMsg::AcquireFailed { error: reason, .. } => {
                Some(reason.clone())
            }
            _ => None,
        })
        .collect::<Vec<_>>();
    let notified = reasons.iter().filter(|r| r.contains("0x01")).count() as u64;
    report.count("clients_told_0x01", notified);
    if graceful {
        report.check(notified > 0, || {
            format!("after SIGTERM no client reported ERROR 0x01: {reasons:?}")
        });
    }
    report.count("client_loss_reports", reasons.len() as u64);
    late.release(lab, token, report).await?;
    Ok(new)
}
