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

use std::{path::PathBuf, time::Duration};

use rand::{Rng, rngs::StdRng};

use super::{Env, Lab, Report, patience, wait_past_unix_second};
use crate::{
    audit::{OwnershipEvent, alternation_problems, parse_audit_line},
    checker::WaitTimeout,
    clock::{mono_ns, ms_between},
    messages::WorkerMsg,
    process::{ServerProcess, ServerSpec, scratch_path, wait_stopped},
    proxy::FaultProxy,
};
use monolock_proto::token_unix_seconds;

pub(super) const LEASE: Duration = Duration::from_millis(600);
const LOCK: &str = "faults/server-restart";

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
    let mut current = Some(first);
    let mut lab = Lab::new(env).await.map_err(|e| e.to_string())?;
    for _ in 0..3 {
        let hold = Duration::from_millis(rng.random_range(50..200));
        lab.spawn(vip.addr(), LOCK, LEASE, hold, false)?;
    }
    let mut outcome = Ok(());
    for round in 0..rounds.max(2) {
        let graceful = round % 2 == 0;
        let Some(old) = current.take() else { break };
        match restart_round(&mut lab, &mut servers, old, &vip, graceful, report).await {
            Ok(next) => current = Some(next),
            Err(err) => {
                outcome = Err(err);
                break;
            }
        }
    }
    servers
        .conclude(&mut lab, current.as_ref(), report, false)
        .await;
    outcome
}

/// The servers of a scenario, dead or alive, with what they granted.
pub(super) struct Servers {
    binary: PathBuf,
    audit: bool,
    started: u32,
    /// Label -> (lock, token) grants, for servers that are gone.
    grants: Vec<(String, Vec<(String, u64)>)>,
    audit_files: Vec<(String, PathBuf)>,
}

impl Servers {
    pub(super) fn new(env: &Env) -> Result<Self, String> {
        let binary = env.server_bin()?;
        let audit = supports_flag(&binary, "--audit-log");
        Ok(Self {
            binary,
            audit,
            started: 0,
            grants: Vec::new(),
            audit_files: Vec::new(),
        })
    }

    pub(super) async fn start(&mut self) -> Result<ServerProcess, String> {
        self.started += 1;
        let label = format!("server{}", self.started);
        let audit_log = self
            .audit
            .then(|| scratch_path(&format!("{label}-audit.jsonl")));
        if let Some(path) = &audit_log {
            let _ = std::fs::remove_file(path);
            self.audit_files.push((label.clone(), path.clone()));
        }
        ServerProcess::start(&ServerSpec {
            binary: self.binary.clone(),
            label,
            io_timeout: Duration::from_secs(2),
            log_level: "debug",
            nofile: None,
            audit_log,
        })
        .await
    }

    /// Keeps what a server granted (call before dropping it).
    pub(super) fn retire(&mut self, server: &ServerProcess) {
        self.grants
            .push((server.label.clone(), server.logged_grants()));
    }

    pub(super) fn server_of(&self, lock: &str, token: u64) -> String {
        self.grants
            .iter()
            .find(|(_, grants)| grants.iter().any(|(l, t)| l == lock && *t == token))
            .map_or_else(|| "unknown".to_owned(), |(label, _)| label.clone())
    }

    /// The highest token a retired server granted.
    pub(super) fn max_token(&self, label: &str) -> Option<u64> {
        self.grants
            .iter()
            .find(|(l, _)| l == label)
            .and_then(|(_, grants)| grants.iter().map(|(_, t)| *t).max())
    }

    /// Ends a scenario: stops the workers, retires the last live server,
    /// and runs the lab's checks and this scenario's token checks.
    pub(super) async fn conclude(
        &mut self,
        lab: &mut Lab,
        last: Option<&ServerProcess>,
        report: &mut Report,
        cross_server_allowed: bool,
    ) {
        lab.stop_all().await;
        if let Some(last) = last {
            self.retire(last);
        }
        lab.finish(report, |lock, token| self.server_of(lock, token))
            .await;
        self.check(report, cross_server_allowed);
    }

    /// Checks that each server's tokens exceed every earlier server's, and
    /// the audit logs when the binary writes them. With
    /// `cross_server_allowed`, beliefs of two servers may overlap (failover).
    pub(super) fn check(&self, report: &mut Report, cross_server_allowed: bool) {
        let mut highest: Option<(String, u64)> = None;
        for (label, grants) in &self.grants {
            let Some(min) = grants.iter().map(|(_, t)| *t).min() else {
                continue;
            };
            if let Some((before, max_before)) = &highest {
                report.check(min > *max_before, || {
                    format!("{label}'s first token {min} is not above {before}'s last token {max_before}")
                });
            }
            let max = grants.iter().map(|(_, t)| *t).max().unwrap_or(min);
            highest = Some((label.clone(), max));
        }
        report.count("servers", self.grants.len() as u64);
        if !cross_server_allowed && report.cross_server_overlaps > 0 {
            report.problem(format!(
                "{} belief(s) overlapped across a restart",
                report.cross_server_overlaps
            ));
        }
        for (label, path) in &self.audit_files {
            let Ok(text) = std::fs::read_to_string(path) else {
                report.problem(format!("{label}: no audit log at {}", path.display()));
                continue;
            };
            let mut events: Vec<OwnershipEvent> = Vec::new();
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                match parse_audit_line(line) {
                    Ok(Some(event)) => events.push(event),
                    Ok(None) => {}
                    Err(err) => report.problem(format!("{label} audit: {err}")),
                }
            }
            report.count("audit_events", events.len() as u64);
            for p in alternation_problems(&events) {
                report.problem(format!("{label} audit: {p}"));
            }
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Whether `binary serve --help` mentions `flag`.
fn supports_flag(binary: &PathBuf, flag: &str) -> bool {
    std::process::Command::new(binary)
        .args(["serve", "--help"])
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).contains(flag))
        .unwrap_or(false)
}

/// Starts a worker that takes `lock` and pauses itself with a write in
/// flight; returns its name, pid and token once it has stopped.
pub(super) async fn park_late_writer(
    lab: &mut Lab,
    addr: std::net::SocketAddr,
    lock: &str,
) -> Result<(String, u32, u64), String> {
    let err = |e: WaitTimeout| e.to_string();
    let name = lab.spawn(addr, lock, LEASE, Duration::ZERO, true)?;
    let token = lab
        .checker
        .wait_for(patience(LEASE) * 2, "the late writer to pause", |records| {
            records.iter().find_map(|r| match &r.msg {
                WorkerMsg::Pausing { token, .. } if r.worker == name => Some(*token),
                _ => None,
            })
        })
        .await
        .map_err(err)?;
    let pid = lab.worker(&name).map(|w| w.pid()).ok_or("worker gone")?;
    wait_stopped(pid, patience(LEASE)).await.map_err(err)?;
    Ok((name, pid, token))
}

/// Continues the late writer once `new_token` has been written, and checks
/// that its in-flight write under the old token was refused.
pub(super) async fn release_late_writer(
    lab: &mut Lab,
    (name, pid, _): &(String, u32, u64),
    new_token: u64,
    report: &mut Report,
) -> Result<(), String> {
    let err = |e: WaitTimeout| e.to_string();
    lab.wait_write(new_token, patience(LEASE))
        .await
        .map_err(err)?;
    crate::process::send_signal(*pid, libc::SIGCONT).map_err(|e| e.to_string())?;
    let (held, accepted) = lab
        .checker
        .wait_for(patience(LEASE), "the late writer's report", |records| {
            records.iter().find_map(|r| match &r.msg {
                WorkerMsg::Resumed {
                    held_after_resume,
                    write_accepted,
                    ..
                } if &r.worker == name => Some((*held_after_resume, *write_accepted)),
                _ => None,
            })
        })
        .await
        .map_err(err)?;
    report.check(!held, || {
        format!("{name}: is_held() was true after the pause")
    });
    report.check(!accepted, || {
        format!("{name}: the late write under the old token was accepted")
    });
    report.count("late_writes_refused", u64::from(!accepted));
    lab.stop(name).await;
    Ok(())
}

async fn restart_round(
    lab: &mut Lab,
    servers: &mut Servers,
    mut old: ServerProcess,
    vip: &FaultProxy,
    graceful: bool,
    report: &mut Report,
) -> Result<ServerProcess, String> {
    let err = |e: WaitTimeout| e.to_string();
    // Load first: a few grants on the old server.
    let start = mono_ns();
    lab.wait_held(LOCK, start, None, patience(LEASE))
        .await
        .map_err(err)?;
    let late = park_late_writer(lab, vip.addr(), LOCK).await?;
    lab.wait_held(LOCK, mono_ns(), None, patience(LEASE))
        .await
        .map_err(err)?;
    let fault_at = if graceful {
        let at = old
            .process
            .signal(libc::SIGTERM)
            .map_err(|e| e.to_string())?;
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
    let last = servers.max_token(&old_label).unwrap_or(0);
    wait_past_unix_second(token_unix_seconds(last)).await;
    let new = servers.start().await?;
    vip.set_backend(Some(new.addr));
    let (_, token, from_ns) = lab
        .wait_held(LOCK, fault_at, Some(&late.0), patience(LEASE))
        .await
        .map_err(err)?;
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
    release_late_writer(lab, &late, token, report).await?;
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_must_rise_across_servers() {
        let servers = Servers {
            binary: PathBuf::new(),
            audit: false,
            started: 2,
            grants: vec![
                ("a".into(), vec![("l".into(), 10), ("l".into(), 12)]),
                ("b".into(), vec![("l".into(), 11)]),
            ],
            audit_files: Vec::new(),
        };
        let mut report = Report::default();
        servers.check(&mut report, true);
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        assert_eq!(servers.server_of("l", 11), "b");
    }
}
