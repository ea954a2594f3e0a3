//! The lab: worker processes contending for locks, the checker they report
//! to and write through, and the analysis of everything they saw.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    path::PathBuf,
    time::Duration,
};

use super::{Env, Report, ScenarioError, error::Result};
use crate::{
    belief::{Belief, overlaps, token_order_problems},
    checker::{Checker, Record, WaitTimeout},
    clock::{mono_ns, ms_between},
    messages::WorkerMsg,
    process::{ChildProcess, WorkerSpec},
};

/// Workers, the checker, and the analysis at the end.
pub struct Lab {
    /// The checker.
    pub checker: Checker,
    workers: BTreeMap<String, ChildProcess>,
    /// How stopped workers ended, for diagnostics.
    exits: BTreeMap<String, String>,
    /// Locks whose holder's connection was reset on both sides.
    abortive: BTreeSet<String>,
    next: u32,
    worker_bin: PathBuf,
}

impl Lab {
    /// A lab with a fresh checker.
    ///
    /// # Errors
    /// Binding the checker failed.
    pub async fn new(env: &Env) -> std::io::Result<Self> {
        Ok(Self::with_checker(env, Checker::start().await?))
    }

    /// A lab around `checker` (one bound where workers in another network
    /// namespace reach it).
    pub fn with_checker(env: &Env, checker: Checker) -> Self {
        Self {
            checker,
            workers: BTreeMap::new(),
            exits: BTreeMap::new(),
            abortive: BTreeSet::new(),
            next: 0,
            worker_bin: env.worker_bin.clone(),
        }
    }

    /// Starts a worker; returns its name.
    ///
    /// # Errors
    /// The spawn error.
    pub fn spawn(
        &mut self,
        server: SocketAddr,
        lock: &str,
        lease: Duration,
        hold: Duration,
        pause_once: bool,
    ) -> Result<String> {
        self.next += 1;
        let name = format!("w{}", self.next);
        let spec = WorkerSpec {
            binary: self.worker_bin.clone(),
            name: name.clone(),
            server,
            checker: self.checker.addr(),
            lock: lock.to_owned(),
            lease,
            hold,
            write_every: Duration::from_millis(10),
            pause_once,
        };
        let child = spec.start().map_err(ScenarioError::io(format!(
            "spawning {}",
            spec.binary.display()
        )))?;
        self.workers.insert(name.clone(), child);
        Ok(name)
    }

    /// Marks `lock` as one whose holder's connection is reset on both
    /// sides: an overlap at that handover is counted apart, not failed.
    pub fn abortive(&mut self, lock: &str) {
        self.abortive.insert(lock.to_owned());
    }

    /// The process id of a live worker.
    ///
    /// # Errors
    /// [`ScenarioError::WorkerGone`].
    pub fn pid(&self, name: &str) -> Result<u32> {
        self.workers
            .get(name)
            .map(ChildProcess::pid)
            .ok_or_else(|| ScenarioError::WorkerGone(name.to_owned()))
    }

    /// Kills a worker with SIGKILL and ends its beliefs when the signal was
    /// sent: from then on the process can observe nothing, and the server
    /// can hand its lock on only after the kernel has closed its socket.
    pub async fn kill(&mut self, name: &str) -> Option<u64> {
        let mut child = self.workers.remove(name)?;
        let at = child.kill().await;
        // Whatever it sent before dying counts; then its beliefs end here.
        let _ = self
            .checker
            .wait_disconnected(name, Duration::from_secs(5))
            .await;
        self.checker.close_beliefs_of(name, at, "killed");
        Some(at)
    }

    /// Stops a worker with SIGTERM (it releases and reports), killing it
    /// if it does not exit within 5 s.
    pub async fn stop(&mut self, name: &str) {
        if let Some(mut child) = self.workers.remove(name) {
            let status = child.stop(Duration::from_secs(5)).await;
            if status.is_none() {
                self.checker.close_beliefs_of(name, mono_ns(), "killed");
            }
            // Its last lines may still be on their way to the checker.
            let _ = self
                .checker
                .wait_disconnected(name, Duration::from_secs(5))
                .await;
            let stderr = child.stderr().snapshot();
            let tail = stderr[stderr.len().saturating_sub(5)..].join(" | ");
            self.exits
                .insert(name.to_owned(), format!("exit {status:?}; stderr: {tail}"));
        }
    }

    /// Stops every worker.
    pub async fn stop_all(&mut self) {
        let names: Vec<String> = self.workers.keys().cloned().collect();
        for name in &names {
            if let Some(child) = self.workers.get(name) {
                let _ = child.signal(libc::SIGCONT);
                let _ = child.signal(libc::SIGTERM);
            }
        }
        for name in names {
            self.stop(&name).await;
        }
    }

    /// Waits for a worker other than `except` to report holding `lock`
    /// with a belief that began after `after_ns`; returns (worker, token,
    /// from_ns).
    ///
    /// # Errors
    /// [`WaitTimeout`].
    pub async fn wait_held(
        &self,
        lock: &str,
        after_ns: u64,
        except: Option<&str>,
        limit: Duration,
    ) -> Result<(String, u64, u64), WaitTimeout> {
        self.checker
            .wait_for(limit, &format!("a grant of {lock:?}"), |records| {
                records.iter().find_map(|r| match &r.msg {
                    WorkerMsg::Held {
                        lock: l,
                        token,
                        from_ns,
                    } if l == lock
                        && *from_ns > after_ns
                        && except.is_none_or(|e| e != r.worker) =>
                    {
                        Some((r.worker.clone(), *token, *from_ns))
                    }
                    _ => None,
                })
            })
            .await
    }

    /// Waits for `worker` to report the loss of `token`; returns until_ns.
    ///
    /// # Errors
    /// [`WaitTimeout`].
    pub async fn wait_lost(
        &self,
        worker: &str,
        token: u64,
        limit: Duration,
    ) -> Result<u64, WaitTimeout> {
        self.checker
            .wait_for(
                limit,
                &format!("{worker} to report losing {token}"),
                |records| {
                    records.iter().find_map(|r| match &r.msg {
                        WorkerMsg::Lost {
                            token: t, until_ns, ..
                        } if r.worker == worker && *t == token => Some(*until_ns),
                        _ => None,
                    })
                },
            )
            .await
    }

    /// Waits for the first accepted write under `token`.
    ///
    /// # Errors
    /// [`WaitTimeout`].
    pub async fn wait_write(&self, token: u64, limit: Duration) -> Result<u64, WaitTimeout> {
        self.checker
            .wait_for(limit, &format!("a write under {token}"), |records| {
                records.iter().find_map(|r| match &r.msg {
                    WorkerMsg::Write { token: t, .. }
                        if *t == token && r.accepted == Some(true) =>
                    {
                        Some(r.at_ns)
                    }
                    _ => None,
                })
            })
            .await
    }

    /// Waits for `worker` (spawned with `pause_once`) to report that it is
    /// about to stop itself; returns when it said so and the token it
    /// believes it holds.
    ///
    /// # Errors
    /// [`WaitTimeout`].
    pub async fn wait_pausing(
        &self,
        worker: &str,
        limit: Duration,
    ) -> Result<(u64, u64), WaitTimeout> {
        self.checker
            .wait_for(limit, &format!("{worker} to pause itself"), |records| {
                records.iter().find_map(|r| match &r.msg {
                    WorkerMsg::Pausing { token, .. } if r.worker == worker => {
                        Some((r.at_ns, *token))
                    }
                    _ => None,
                })
            })
            .await
    }

    /// Waits for a paused `worker`'s report after it was continued:
    /// whether `is_held()` was still true, and whether its in-flight write
    /// was accepted.
    ///
    /// # Errors
    /// [`WaitTimeout`].
    pub async fn wait_resumed(
        &self,
        worker: &str,
        limit: Duration,
    ) -> Result<(bool, bool), WaitTimeout> {
        self.checker
            .wait_for(
                limit,
                &format!("{worker}'s report after resuming"),
                |records| {
                    records.iter().find_map(|r| match &r.msg {
                        WorkerMsg::Resumed {
                            held_after_resume,
                            write_accepted,
                            ..
                        } if r.worker == worker => Some((*held_after_resume, *write_accepted)),
                        _ => None,
                    })
                },
            )
            .await
    }

    /// The last journal entries about `lock`, for a diagnostic.
    pub fn describe(&self, lock: &str) -> String {
        let records = self.checker.records();
        let about: Vec<String> = records
            .iter()
            .filter(|r| match &r.msg {
                WorkerMsg::Held { lock: l, .. }
                | WorkerMsg::Lost { lock: l, .. }
                | WorkerMsg::AcquireFailed { lock: l, .. }
                | WorkerMsg::Pausing { lock: l, .. }
                | WorkerMsg::Resumed { lock: l, .. } => l == lock,
                _ => false,
            })
            .map(|r| format!("{} at {}: {:?}", r.worker, r.at_ns, r.msg))
            .collect();
        about[about.len().saturating_sub(8)..].join("; ")
    }

    /// The worker currently holding `lock`, with its token (the latest
    /// open belief).
    pub fn holder(&self, lock: &str) -> Option<(String, u64)> {
        let records = self.checker.records();
        let mut open: Vec<(String, u64)> = Vec::new();
        for r in &records {
            match &r.msg {
                WorkerMsg::Held { lock: l, token, .. } if l == lock => {
                    open.push((r.worker.clone(), *token));
                }
                WorkerMsg::Lost { lock: l, token, .. } if l == lock => {
                    open.retain(|(w, t)| !(w == &r.worker && t == token));
                }
                _ => {}
            }
        }
        open.into_iter()
            .filter(|(w, _)| self.workers.contains_key(w))
            .max_by_key(|(_, t)| *t)
    }

    /// Stops every worker, then checks everything the checker saw and
    /// adds the figures to `report`. `server_of` labels the server that
    /// granted a token.
    pub async fn finish(&mut self, report: &mut Report, server_of: impl Fn(&str, u64) -> String) {
        self.stop_all().await;
        let (beliefs, open) = self.checker.beliefs(server_of);
        for b in &open {
            report.problem(format!(
                "{} never reported the end of its belief in {:?} (token {}); {}",
                b.worker,
                b.lock,
                b.token,
                self.exits.get(&b.worker).map_or("", String::as_str)
            ));
        }
        analyse(report, &beliefs, &self.checker.records(), &self.abortive);
        let stats = self.checker.resource_stats();
        report.writes_accepted += stats.accepted;
        report.writes_rejected += stats.rejected;
        for p in self.checker.resource_problems() {
            report.problem(p);
        }
    }
}

/// Adds the belief and write checks to `report`.
/// Overlaps in `abortive` locks are counted apart (see
/// [`Report::abortive_close_overlaps`]).
pub fn analyse(
    report: &mut Report,
    beliefs: &[Belief],
    records: &[Record],
    abortive: &BTreeSet<String>,
) {
    report.beliefs += beliefs.len() as u64;
    for overlap in overlaps(beliefs, true) {
        if abortive.contains(&overlap.first.lock) {
            report.abortive_close_overlaps += 1;
            report.max_abortive_overlap_ms = report
                .max_abortive_overlap_ms
                .max(overlap.overlap_ns as f64 / 1e6);
            continue;
        }
        report.overlaps += 1;
        report.problem(format!("overlap: {overlap}"));
    }
    report.cross_server_overlaps += overlaps(beliefs, false)
        .iter()
        .filter(|o| o.first.server != o.second.server)
        .count() as u64;
    for p in token_order_problems(beliefs) {
        report.problem(p);
    }
    // Gaps between consecutive beliefs of one lock granted by one server.
    let mut by_lock: BTreeMap<(&str, &str), Vec<&Belief>> = BTreeMap::new();
    for b in beliefs {
        by_lock.entry((&b.lock, &b.server)).or_default().push(b);
    }
    for ((lock, _), list) in &mut by_lock {
        if abortive.contains(*lock) {
            continue;
        }
        list.sort_by_key(|b| b.from_ns);
        for pair in list.windows(2) {
            let gap = ms_between(pair[0].until_ns, pair[1].from_ns);
            report.min_handover_gap_ms =
                Some(report.min_handover_gap_ms.map_or(gap, |m| m.min(gap)));
        }
    }
    // Writes sent after the writer's belief ended.
    let ends: BTreeMap<(&str, u64), u64> = beliefs
        .iter()
        .map(|b| ((b.worker.as_str(), b.token), b.until_ns))
        .collect();
    for r in records {
        let WorkerMsg::Write {
            token,
            sent_ns,
            lock,
            ..
        } = &r.msg
        else {
            continue;
        };
        let Some(&until) = ends.get(&(r.worker.as_str(), *token)) else {
            continue;
        };
        if *sent_ns <= until {
            continue;
        }
        report.late_writes += 1;
        if r.accepted != Some(true) {
            continue;
        }
        report.late_writes_accepted += 1;
        // Accepted late: only allowed if no newer token had been written.
        let newer_written = records.iter().any(|o| {
            o.at_ns < r.at_ns
                && o.accepted == Some(true)
                && matches!(&o.msg, WorkerMsg::Write { token: t, lock: l, .. } if l == lock && t > token)
        });
        if newer_written {
            report.problem(format!(
                "stale write accepted: {} wrote under {token} after a newer token was written",
                r.worker
            ));
        }
    }
}
