//! 5. Failover to a passive standby behind a failover address.
//!
//! Two servers run; the proxy plays the failover address (VIP) and sends
//! every connection to the primary. Failover fences the primary (its
//! connections go silent both ways: its sessions can neither hear nor be
//! heard), kills it, waits until the wall clock has passed the second of
//! its last grant, and points the address at the standby. The clients
//! holding or waiting on the primary see silence, abandon their claims at
//! 0.8 x lease and re-acquire from the standby; a paused worker's late
//! write under a primary token is refused. Beliefs granted by the two
//! servers may overlap (the standby knows nothing of the primary's
//! holders): that is what fencing tokens are for, so those are counted,
//! not failed; the tokens must rise across the failover.

use std::time::Duration;

use rand::{Rng, rngs::StdRng};

use super::{
    Env, Report, Result,
    fleet::{FleetStage, LEASE, LateWriter},
    patience, wait_past_unix_second,
};
use crate::{
    clock::{mono_ns, ms_between},
    process::ServerProcess,
};
use monolock_proto::token_unix_seconds;

const LOCK: &str = "faults/failover";

pub(super) async fn run(
    env: &Env,
    rounds: u32,
    rng: &mut StdRng,
    report: &mut Report,
) -> Result<()> {
    // One worker that holds for three leases (when it holds at the
    // failover, it believes until its deadline while the standby may
    // already have granted), and two that let go after a short hold.
    let holds = [
        LEASE * 3,
        Duration::from_millis(rng.random_range(50..200)),
        Duration::from_millis(rng.random_range(50..200)),
    ];
    let round = async |stage: &mut FleetStage, primary, _, report: &mut Report| {
        let standby = stage.servers.start().await?;
        failover_round(stage, primary, standby, report).await
    };
    FleetStage::run_rounds(env, report, rounds.max(1), true, LOCK, &holds, round).await
}

async fn failover_round(
    stage: &mut FleetStage,
    mut primary: ServerProcess,
    standby: ServerProcess,
    report: &mut Report,
) -> Result<ServerProcess> {
    let FleetStage { servers, vip, lab } = stage;
    lab.wait_held(LOCK, mono_ns(), None, patience(LEASE))
        .await?;
    let late = LateWriter::park(lab, vip.addr(), LOCK).await?;
    lab.wait_held(LOCK, mono_ns(), None, patience(LEASE))
        .await?;
    // Fence: silence both ways, nothing routed anywhere; then the primary
    // dies (its closes are fenced too).
    vip.fence_all();
    vip.set_backend(None);
    let fault_at = mono_ns();
    primary.process.kill().await;
    report.fault("failover");
    servers.retire(&primary);
    let last = servers.max_token(&primary.label, report);
    drop(primary);
    wait_past_unix_second(token_unix_seconds(last)).await;
    vip.set_backend(Some(standby.addr));
    let (_, token, from_ns) = lab
        .wait_held(LOCK, fault_at, Some(late.name()), patience(LEASE))
        .await?;
    report.check(token > last, || {
        format!("the standby's first grant has token {token}, not above the primary's {last}")
    });
    report.fault_to_grant(ms_between(fault_at, from_ns));
    late.release(lab, token, report).await?;
    Ok(standby)
}
