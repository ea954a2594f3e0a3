//! 7. The server runs out of file descriptors.
//!
//! The real `monolock` binary runs with a hard RLIMIT_NOFILE of 64 (set in
//! the child before exec: the server raises its soft limit to the hard one
//! at startup, so the hard limit is the one that binds). More sessions are
//! opened than fit. Checked: the server fits `--max-connections` under the
//! limit less its descriptor reserve, so connections beyond it are refused
//! at once with ERROR 0x04 (never left waiting, and the server does not
//! exit); every admitted session keeps being served (heartbeats answered);
//! once sessions close, new connections are accepted and answered.

use std::time::Duration;

use monolock_proto::ServerFrame;
use rand::{Rng, rngs::StdRng};
use tokio::time::Instant;

use super::{Env, Report, Result, ScenarioError};
use crate::{
    probe::{Probe, ProbeError},
    process::{ServerProcess, ServerSpec},
};

/// The hard descriptor limit of the server.
const NOFILE: u64 = 64;
/// Sessions attempted: well past the limit.
const SESSIONS: usize = 100;
const LEASE: Duration = Duration::from_secs(30);

pub(super) async fn run(
    env: &Env,
    rounds: u32,
    rng: &mut StdRng,
    report: &mut Report,
) -> Result<()> {
    report.lease_ms = LEASE.as_millis() as u64;
    let server = ServerProcess::start(&ServerSpec {
        binary: env.server_bin()?,
        label: "fd-limited".into(),
        io_timeout: Duration::from_secs(5),
        log_level: "info",
        nofile: Some(NOFILE),
        audit_log: None,
    })
    .await?;
    for round in 0..rounds.max(1) {
        exhaust_round(&server, round, rng, report).await?;
    }
    let mut server = server;
    let status = server.process.stop(Duration::from_secs(10)).await;
    report.check(status.is_some_and(|s| s.success()), || {
        format!("the fd-limited server exited with {status:?}")
    });
    Ok(())
}

async fn exhaust_round(
    server: &ServerProcess,
    round: u32,
    rng: &mut StdRng,
    report: &mut Report,
) -> Result<()> {
    let mut probes = Vec::new();
    for i in 0..SESSIONS {
        let lock = format!("faults/fd/{round}/{i}");
        let probe = Probe::send_acquire(server.addr, &lock, LEASE, Duration::from_secs(5))
            .await
            .map_err(|source| ScenarioError::Probe {
                what: format!("connection {i} was not even queued"),
                source,
            })?;
        probes.push(probe);
    }
    report.fault("descriptor-exhaustion");
    // Admitted sessions answer at once; the rest are refused at once.
    let mut admitted = Vec::new();
    let mut waiting = Vec::new();
    let mut refused = 0usize;
    let first_reply_by = Instant::now() + Duration::from_secs(3);
    for mut probe in probes {
        let left = first_reply_by.saturating_duration_since(Instant::now());
        match probe.next_frame(left.max(Duration::from_millis(1))).await {
            Ok(ServerFrame::Acquired { token }) => admitted.push((probe, token)),
            Ok(ServerFrame::Error { code, .. })
                if code == monolock_proto::ErrorCode::TOO_MANY_CONNECTIONS =>
            {
                refused += 1;
            }
            Ok(other) => {
                return Err(ScenarioError::Unexpected(format!(
                    "unexpected first reply {other:?}"
                )));
            }
            Err(ProbeError::Timeout(_)) => waiting.push(probe),
            Err(source) => {
                return Err(ScenarioError::Probe {
                    what: "a session failed at the limit".into(),
                    source,
                });
            }
        }
    }
    report.count("sessions_admitted_at_limit", admitted.len() as u64);
    report.count("connections_waiting_at_limit", waiting.len() as u64);
    report.count("connections_refused_at_limit", refused as u64);
    report.check(waiting.is_empty(), || {
        format!(
            "{} connections were left waiting instead of refused",
            waiting.len()
        )
    });
    report.check(refused > 0, || {
        format!("all {SESSIONS} sessions were admitted under a limit of {NOFILE} descriptors")
    });
    // Existing sessions keep being served.
    let mut max_rtt = Duration::ZERO;
    for (probe, token) in admitted.iter_mut() {
        match probe.heartbeat(Duration::from_secs(5)).await {
            Ok((ServerFrame::Acquired { token: t }, rtt)) if t == *token => {
                max_rtt = max_rtt.max(rtt);
            }
            other => report.problem(format!("an admitted session was not served: {other:?}")),
        }
    }
    let max_ms = max_rtt.as_secs_f64() * 1000.0;
    report.max_heartbeat_rtt_ms = Some(
        report
            .max_heartbeat_rtt_ms
            .map_or(max_ms, |m| m.max(max_ms)),
    );
    // Free places: close a random part of the admitted sessions; as many
    // new connections are then served.
    let close = 5.min(admitted.len());
    for _ in 0..close {
        let i = rng.random_range(0..admitted.len());
        drop(admitted.swap_remove(i));
    }
    let recovered_at = Instant::now();
    let mut recovered = 0u64;
    let deadline = recovered_at + Duration::from_secs(10);
    for i in 0..close {
        let lock = format!("faults/fd/{round}/after/{i}");
        loop {
            let mut probe = Probe::send_acquire(server.addr, &lock, LEASE, Duration::from_secs(5))
                .await
                .map_err(|source| ScenarioError::Probe {
                    what: format!("connection {i} after recovery"),
                    source,
                })?;
            match probe.next_frame(Duration::from_secs(5)).await {
                Ok(ServerFrame::Acquired { .. }) => {
                    recovered += 1;
                    admitted.push((probe, 0));
                    break;
                }
                // The server sees a close a moment after it happens.
                Ok(ServerFrame::Error { code, .. })
                    if code == monolock_proto::ErrorCode::TOO_MANY_CONNECTIONS
                        && Instant::now() < deadline => {}
                other => {
                    report.problem(format!(
                        "a connection was not served after recovery: {other:?}"
                    ));
                    break;
                }
            }
        }
    }
    report.count("waiting_served_after_recovery", recovered);
    report.count("recovery_ms", recovered_at.elapsed().as_millis() as u64);
    report.fault_to_grant(recovered_at.elapsed().as_secs_f64() * 1000.0);
    Ok(())
}
