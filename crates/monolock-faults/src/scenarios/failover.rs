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
    Env, Lab, Report, patience,
    restart::{LEASE, Servers, park_late_writer, release_late_writer},
    wait_past_unix_second,
};
use crate::{
    checker::WaitTimeout,
    clock::{mono_ns, ms_between},
    process::ServerProcess,
    proxy::FaultProxy,
};
use monolock_proto::token_unix_seconds;

const LOCK: &str = "faults/failover";

pub(super) async fn run(
    env: &Env,
    rounds: u32,
    rng: &mut StdRng,
    report: &mut Report,
) -> Result<(), String> {
    report.lease_ms = LEASE.as_millis() as u64;
    let mut servers = Servers::new(env)?;
    let first = servers.start().await?;
    let vip = FaultProxy::start(first.addr)
        .await
        .map_err(|e| e.to_string())?;
    let mut lab = Lab::new(env).await.map_err(|e| e.to_string())?;
    // Two workers that let go after a short hold, and one that holds for
    // three leases: when it holds at the failover, it believes until its
    // deadline while the standby may already have granted.
    for i in 0..3 {
        let hold = if i == 0 {
            LEASE * 3
        } else {
            Duration::from_millis(rng.random_range(50..200))
        };
        lab.spawn(vip.addr(), LOCK, LEASE, hold, false)?;
    }
    let mut outcome = Ok(());
    let mut primary = Some(first);
    for _ in 0..rounds.max(1) {
        let standby = match servers.start().await {
            Ok(standby) => standby,
            Err(err) => {
                outcome = Err(err);
                break;
            }
        };
        let Some(old) = primary.take() else { break };
        match failover_round(&mut lab, &mut servers, old, standby, &vip, report).await {
            Ok(next) => primary = Some(next),
            Err(err) => {
                outcome = Err(err);
                break;
            }
        }
    }
    servers
        .conclude(&mut lab, primary.as_ref(), report, true)
        .await;
    outcome
}

async fn failover_round(
    lab: &mut Lab,
    servers: &mut Servers,
    mut primary: ServerProcess,
    standby: ServerProcess,
    vip: &FaultProxy,
    report: &mut Report,
) -> Result<ServerProcess, String> {
    let err = |e: WaitTimeout| e.to_string();
    lab.wait_held(LOCK, mono_ns(), None, patience(LEASE))
        .await
        .map_err(err)?;
    let late = park_late_writer(lab, vip.addr(), LOCK).await?;
    lab.wait_held(LOCK, mono_ns(), None, patience(LEASE))
        .await
        .map_err(err)?;
    // Fence: silence both ways, nothing routed anywhere; then the primary
    // dies (its closes are fenced too).
    vip.fence_all();
    vip.set_backend(None);
    let fault_at = mono_ns();
    primary.process.kill().await;
    report.fault("failover");
    servers.retire(&primary);
    let last = servers.max_token(&primary.label).unwrap_or(0);
    drop(primary);
    wait_past_unix_second(token_unix_seconds(last)).await;
    vip.set_backend(Some(standby.addr));
    let (_, token, from_ns) = lab
        .wait_held(LOCK, fault_at, Some(&late.0), patience(LEASE))
        .await
        .map_err(err)?;
    report.check(token > last, || {
        format!("the standby's first grant has token {token}, not above the primary's {last}")
    });
    report.fault_to_grant(ms_between(fault_at, from_ns));
    release_late_writer(lab, &late, token, report).await?;
    Ok(standby)
}
