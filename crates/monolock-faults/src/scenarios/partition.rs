//! 3. The holder's network misbehaves, through a fault-injecting proxy.
//!
//! The holder reaches the (in-process) server through its own proxy; the
//! waiter connects directly. Each round injects one fault, cycling through:
//! a black hole both ways, dropping client-to-server only, dropping
//! server-to-client only, a delay so long that no heartbeat can be
//! confirmed within 0.8 x lease, a reset of the client side only (a
//! middlebox that lost its state: the server hears nothing more), a reset
//! of both sides, and a small delay that must *not* cost the holder its
//! lock. Checked: the holder's belief ends by `fault + 0.8 x lease` and
//! before the waiter's begins; the waiter gets the lock; no stale write is
//! accepted.
//!
//! The one exception is a reset of both sides: the server sees the
//! connection close at the same instant as the holder, and closing is
//! releasing, so the waiter is granted at once, racing the holder's own
//! reaction to the reset. Those overlaps (the holder's reaction time, well
//! under a millisecond) are counted apart as `abortive_close_overlaps`;
//! the fenced resource must still refuse every stale write.

use std::time::Duration;

use rand::{Rng, rngs::StdRng};

use super::{Env, InProcessStage, Report, Result, ScenarioError, patience};
use crate::{
    clock::{mono_ns, ms_between, nanos},
    messages::WorkerMsg,
    proxy::{Direction, FaultProxy, Faults},
};

const LEASE: Duration = Duration::from_millis(600);
/// The lease of the short-delay rounds, whose check is that the holder
/// keeps its lock: long enough that a worker process descheduled on a
/// loaded two-core machine does not miss its 0.8 x lease deadline.
const SHORT_DELAY_LEASE: Duration = Duration::from_secs(2);

/// The faults, in the order rounds cycle through them.
const KINDS: [&str; 7] = [
    "black-hole",
    "drop-to-server",
    "drop-to-client",
    "long-delay",
    "reset-client",
    "reset-both",
    "short-delay",
];

pub(super) async fn run(
    env: &Env,
    rounds: u32,
    rng: &mut StdRng,
    report: &mut Report,
) -> Result<()> {
    let mut stage = InProcessStage::open(env, LEASE, Duration::from_secs(5), report).await?;
    let offset = rng.random_range(0..KINDS.len());
    // Every kind at least once, whatever `rounds` says.
    let total = (rounds as usize).max(KINDS.len());
    let outcome = async {
        for round in 0..total {
            let kind = KINDS[(round + offset) % KINDS.len()];
            partition_round(&mut stage, round, kind, rng, report).await?;
        }
        Ok(())
    }
    .await;
    stage.finish(report, outcome).await
}

fn faults_for(kind: &str, rng: &mut StdRng) -> Faults {
    match kind {
        "black-hole" => Faults::BLACK_HOLE,
        "drop-to-server" => Faults {
            to_server: Direction::Drop,
            to_client: Direction::Pass,
        },
        "drop-to-client" => Faults {
            to_server: Direction::Pass,
            to_client: Direction::Drop,
        },
        // A round trip of at least 0.9 x lease can never confirm a
        // heartbeat within 0.8 x lease.
        "long-delay" => Faults::both(Direction::Delay(LEASE.mul_f64(rng.random_range(0.45..0.9)))),
        "short-delay" => Faults::both(Direction::Delay(
            LEASE.mul_f64(rng.random_range(0.01..0.05)),
        )),
        _ => Faults::PASS,
    }
}

async fn partition_round(
    stage: &mut InProcessStage,
    round: usize,
    kind: &str,
    rng: &mut StdRng,
    report: &mut Report,
) -> Result<()> {
    let InProcessStage { server, lab } = stage;
    let lock = format!("faults/partition/{round}");
    let proxy = FaultProxy::start(server.addr)
        .await
        .map_err(ScenarioError::io("starting the proxy"))?;
    let lease = if kind == "short-delay" {
        SHORT_DELAY_LEASE
    } else {
        LEASE
    };
    let holder = lab.spawn(proxy.addr(), &lock, lease, Duration::ZERO, false)?;
    let (_, token, _) = lab.wait_held(&lock, 0, None, patience(LEASE)).await?;
    let waiter = lab.spawn(server.addr, &lock, lease, Duration::ZERO, false)?;
    server.wait_waiters(&lock, 1, patience(LEASE)).await?;
    lab.wait_write(token, patience(LEASE)).await?;
    tokio::time::sleep(Duration::from_millis(
        rng.random_range(0..LEASE.as_millis() as u64 / 3),
    ))
    .await;
    let faults = faults_for(kind, rng);
    let delay = match faults.to_server {
        Direction::Delay(delay) => delay,
        _ => Duration::ZERO,
    };
    let asked_at = mono_ns();
    if kind == "reset-both" {
        // Server and holder see the close at the same instant: the lock is
        // handed on at once (closing is releasing), racing the holder's
        // own reaction. Fencing covers that window; see `Lab::abortive`.
        lab.abortive(&lock);
        proxy.reset_all();
    } else if kind == "reset-client" {
        proxy.reset_clients();
    } else {
        proxy.set_faults(faults);
    }
    report.fault(kind);
    // The fault takes effect when the proxy applies it (a reset at once).
    let fault_at = if kind.starts_with("reset") {
        asked_at
    } else {
        proxy
            .applied_after(asked_at, patience(LEASE))
            .await
            .ok_or_else(|| ScenarioError::Unexpected("the proxy did not apply the fault".into()))?
    };
    if kind == "short-delay" {
        // A small delay must cost nothing: the holder keeps its lock for
        // several leases and the waiter keeps waiting.
        let lost = lab
            .checker
            .wait_for(lease * 2, "no loss under a short delay", |records| {
                records.iter().find_map(|r| match &r.msg {
                    WorkerMsg::Lost {
                        token: t,
                        reason,
                        detected_ns,
                        ..
                    } if r.worker == holder && *t == token => Some(format!(
                        "{reason} ({:.0} ms after the fault)",
                        ms_between(fault_at, *detected_ns)
                    )),
                    _ => None,
                })
            })
            .await;
        if let Ok(how) = lost {
            report.problem(format!(
                "the holder lost its lock under a short delay ({delay:?} each way): {how}"
            ));
        }
    } else {
        let until_ns = lab.wait_lost(&holder, token, patience(LEASE)).await?;
        // The holder gives up by 0.8 x lease after its last confirmed
        // heartbeat, which was sent before the fault.
        let latest = fault_at + nanos(LEASE.mul_f64(0.8));
        report.check(until_ns <= latest, || {
            format!(
                "{kind}: the holder believed until {:.1} ms after the fault (0.8 x lease = {:.0} ms)",
                ms_between(fault_at, until_ns),
                LEASE.as_secs_f64() * 800.0
            )
        });
        let (_, _, from_ns) = lab
            .wait_held(&lock, fault_at, Some(&holder), patience(LEASE))
            .await
            .map_err(|source| ScenarioError::Stalled {
                source,
                context: format!(
                    "{kind}: server: {:?}; journal: {}",
                    server.handle.lock(&lock),
                    lab.describe(&lock)
                ),
            })?;
        report.fault_to_grant(ms_between(fault_at, from_ns));
        report.check(until_ns <= from_ns || kind == "reset-both", || {
            format!(
                "{kind}: the holder believed until {:.3} ms after the waiter was granted",
                ms_between(from_ns, until_ns)
            )
        });
    }
    proxy.set_faults(Faults::PASS);
    lab.stop(&holder).await;
    lab.stop(&waiter).await;
    Ok(())
}
