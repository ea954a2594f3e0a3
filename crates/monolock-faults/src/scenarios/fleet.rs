//! The stage of the scenarios that replace the server under load (restart,
//! failover): real `monolock` children started one after another, a proxy
//! playing the stable address clients connect to, a [`Lab`] of workers,
//! and the checks that span servers (tokens rise from one server to the
//! next; each server's audit log alternates grant and release).

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use super::{Env, Lab, Report, ScenarioError, error::Result, patience};
use crate::{
    audit::{OwnershipEvent, alternation_problems, parse_audit_line},
    process::{ServerProcess, ServerSpec, scratch_path, wait_stopped},
    proxy::FaultProxy,
};

/// The lease of every client of these scenarios.
pub(super) const LEASE: Duration = Duration::from_millis(600);

/// Servers, the address in front of them, and the workers.
pub(super) struct FleetStage {
    /// Every server started, with what the retired ones granted.
    pub servers: Servers,
    /// The stable address (a pass proxy) in front of the current server.
    pub vip: FaultProxy,
    /// The workers and the checker.
    pub lab: Lab,
}

impl FleetStage {
    /// Starts the first server, the address in front of it and the lab,
    /// and records the lease in `report`; returns the first server too.
    pub(super) async fn open(env: &Env, report: &mut Report) -> Result<(Self, ServerProcess)> {
        report.lease_ms = LEASE.as_millis() as u64;
        let mut servers = Servers::new(env)?;
        let first = servers.start().await?;
        let vip = FaultProxy::start(first.addr)
            .await
            .map_err(ScenarioError::io("starting the proxy"))?;
        let lab = Lab::new(env)
            .await
            .map_err(ScenarioError::io("starting the checker"))?;
        Ok((Self { servers, vip, lab }, first))
    }

    /// The whole run of a scenario that replaces the server under load:
    /// opens the stage, starts one worker on `lock` per hold in `holds`,
    /// then runs `rounds` rounds, each handing the live server to `round` (with the
    /// round's number) and going on with the server it returns; finishes
    /// whatever happened (see [`FleetStage::finish`]).
    ///
    /// # Errors
    /// The first error of the opening, the workers or a round.
    pub(super) async fn run_rounds(
        env: &Env,
        report: &mut Report,
        rounds: u32,
        cross_server_allowed: bool,
        lock: &str,
        holds: &[Duration],
        mut round: impl AsyncFnMut(&mut Self, ServerProcess, u32, &mut Report) -> Result<ServerProcess>,
    ) -> Result<()> {
        let (mut stage, first) = Self::open(env, report).await?;
        let mut live = Some(first);
        let outcome = async {
            for hold in holds {
                stage.spawn(lock, *hold)?;
            }
            for number in 0..rounds {
                let Some(old) = live.take() else { break };
                live = Some(round(&mut stage, old, number, report).await?);
            }
            Ok(())
        }
        .await;
        stage
            .finish(live.as_ref(), report, cross_server_allowed, outcome)
            .await
    }

    /// Starts a worker on `lock` through the stable address.
    ///
    /// # Errors
    /// The spawn error.
    pub(super) fn spawn(&mut self, lock: &str, hold: Duration) -> Result<String> {
        self.lab.spawn(self.vip.addr(), lock, LEASE, hold, false)
    }

    /// Ends the scenario whatever `outcome` was: stops the workers,
    /// retires `last` (the live server), runs every check into `report`,
    /// and returns `outcome`. With `cross_server_allowed`, beliefs granted
    /// by two servers may overlap (failover).
    pub(super) async fn finish(
        mut self,
        last: Option<&ServerProcess>,
        report: &mut Report,
        cross_server_allowed: bool,
        outcome: Result<()>,
    ) -> Result<()> {
        self.lab.stop_all().await;
        if let Some(last) = last {
            self.servers.retire(last);
        }
        let servers = &self.servers;
        self.lab
            .finish(report, |lock, token| servers.server_of(lock, token))
            .await;
        servers.check(report, cross_server_allowed);
        outcome
    }
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
    /// No server yet; audit logs are checked when the binary writes them.
    pub(super) fn new(env: &Env) -> Result<Self> {
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

    /// Starts the next server (`server1`, `server2`, ...).
    pub(super) async fn start(&mut self) -> Result<ServerProcess> {
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
        .map_err(ScenarioError::from)
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

    /// The highest token a retired server granted (0 if none), and a
    /// problem in `report` if its log showed none: the scenario waits past
    /// that token's second, and a wrong 0 would let the next server reuse
    /// tokens.
    pub(super) fn max_token(&self, label: &str, report: &mut Report) -> u64 {
        let max = self
            .grants
            .iter()
            .find(|(l, _)| l == label)
            .and_then(|(_, grants)| grants.iter().map(|(_, t)| *t).max());
        report.check(max.is_some(), || {
            format!("{label} logged no grant (its debug log's \"granted\" and \"promoted\" lines)")
        });
        max.unwrap_or(0)
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

/// A worker paused holding the lock with a write in flight.
pub(super) struct LateWriter {
    name: String,
    pid: u32,
}

impl LateWriter {
    /// Starts a worker that takes `lock` and pauses itself with a write in
    /// flight; returns once it has stopped.
    pub(super) async fn park(lab: &mut Lab, addr: SocketAddr, lock: &str) -> Result<Self> {
        let name = lab.spawn(addr, lock, LEASE, Duration::ZERO, true)?;
        lab.wait_pausing(&name, patience(LEASE) * 2).await?;
        let pid = lab.pid(&name)?;
        wait_stopped(pid, patience(LEASE)).await?;
        Ok(Self { name, pid })
    }

    /// Its worker name.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// Continues it once `new_token` has been written, and checks that its
    /// in-flight write under the old token was refused.
    pub(super) async fn release(
        self,
        lab: &mut Lab,
        new_token: u64,
        report: &mut Report,
    ) -> Result<()> {
        let name = &self.name;
        lab.wait_write(new_token, patience(LEASE)).await?;
        crate::process::send_signal(self.pid, libc::SIGCONT)
            .map_err(ScenarioError::io(format!("continuing {name}")))?;
        let (held, accepted) = lab.wait_resumed(name, patience(LEASE)).await?;
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
}

/// Sleeps until the wall clock is in a later second than `unix_second`
/// (at most a little over a second), so that a fresh server's tokens start
/// above every token of that second: the "grants more than a second apart"
/// condition of the token layout, met on purpose.
pub async fn wait_past_unix_second(unix_second: u64) {
    for _ in 0..3 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        if now.as_secs() > unix_second {
            return;
        }
        let to_next = Duration::from_secs(1) - Duration::from_nanos(u64::from(now.subsec_nanos()));
        tokio::time::sleep(to_next + Duration::from_millis(2)).await;
    }
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
