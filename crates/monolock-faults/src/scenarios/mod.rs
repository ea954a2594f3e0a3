//! The fault scenarios, their shared harness and their report.
//!
//! Each scenario injects one kind of fault a number of times (`rounds`)
//! with randomised timing and parameters from a seeded generator, then
//! checks: no two beliefs in one lock overlap against one live server;
//! tokens are unique and increase in grant order, across restarts too; the
//! fenced resource refused every write under a superseded token; and the
//! scenario's own bounds (time from fault to the next grant, heartbeat
//! round trips, ...). A scenario fails by listing problems.

mod crash;
mod exhaustion;
mod failover;
mod hostile;
mod partition;
mod pause;
mod restart;
mod vrrp;

pub use vrrp::unavailable as vrrp_unavailable;

use std::{
    collections::BTreeMap, fmt, net::SocketAddr, path::PathBuf, sync::Arc, thread, time::Duration,
};

use monolock_server::{Server, ServerConfig, ServerHandle};
use rand::{SeedableRng, rngs::StdRng};
use serde::Serialize;

use crate::{
    audit::{EventRecorder, alternation_problems},
    belief::{Belief, overlaps, token_order_problems},
    checker::{Checker, Record, WaitTimeout},
    clock::{mono_ns, ms_between},
    messages::WorkerMsg,
    process::{ChildProcess, WorkerSpec},
};

/// Every scenario, in the order the suite runs them.
pub const ALL: [Scenario; 8] = [
    Scenario::HolderKilled,
    Scenario::HolderPaused,
    Scenario::Partition,
    Scenario::ServerRestart,
    Scenario::Failover,
    Scenario::HostileClients,
    Scenario::DescriptorExhaustion,
    Scenario::VrrpFailover,
];

/// One kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scenario {
    /// 1. The holder is SIGKILLed mid-work.
    HolderKilled,
    /// 2. The holder is SIGSTOPped for 2-5 leases, then continued.
    HolderPaused,
    /// 3. The holder's network misbehaves (proxy faults).
    Partition,
    /// 4. The server restarts under load (SIGTERM or SIGKILL).
    ServerRestart,
    /// 5. Failover to a passive standby behind a failover address.
    Failover,
    /// 6. Slow and hostile clients next to healthy ones.
    HostileClients,
    /// 7. The server runs out of file descriptors.
    DescriptorExhaustion,
    /// 8. keepalived moves a virtual IP between two real servers in
    ///    network namespaces (needs root).
    VrrpFailover,
}

impl Scenario {
    /// The scenario's name on the command line and in reports.
    pub const fn name(self) -> &'static str {
        match self {
            Self::HolderKilled => "holder-killed",
            Self::HolderPaused => "holder-paused",
            Self::Partition => "partition",
            Self::ServerRestart => "server-restart",
            Self::Failover => "failover",
            Self::HostileClients => "hostile-clients",
            Self::DescriptorExhaustion => "fd-exhaustion",
            Self::VrrpFailover => vrrp::NAME,
        }
    }

    /// Parses [`Scenario::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        ALL.into_iter().find(|s| s.name() == name)
    }

    /// Whether it needs the real `monolock` binary.
    pub const fn needs_server_binary(self) -> bool {
        matches!(
            self,
            Self::ServerRestart | Self::Failover | Self::DescriptorExhaustion | Self::VrrpFailover
        )
    }

    /// Runs the scenario once with `rounds` injections.
    pub async fn run(self, env: &Env, rounds: u32, seed: u64) -> Report {
        let mut report = Report::new(self, seed);
        let mut rng = StdRng::seed_from_u64(seed);
        let outcome = match self {
            Self::HolderKilled => crash::run(env, rounds, &mut rng, &mut report).await,
            Self::HolderPaused => pause::run(env, rounds, &mut rng, &mut report).await,
            Self::Partition => partition::run(env, rounds, &mut rng, &mut report).await,
            Self::ServerRestart => restart::run(env, rounds, &mut rng, &mut report).await,
            Self::Failover => failover::run(env, rounds, &mut rng, &mut report).await,
            Self::HostileClients => hostile::run(env, rounds, &mut rng, &mut report).await,
            Self::DescriptorExhaustion => exhaustion::run(env, rounds, &mut rng, &mut report).await,
            Self::VrrpFailover => vrrp::run(env, rounds, &mut rng, &mut report).await,
        };
        if let Err(err) = outcome {
            report.problem(format!("aborted: {err}"));
        }
        report
    }
}

/// What the scenarios need from outside.
#[derive(Clone, Debug)]
pub struct Env {
    /// The `monolock-fault-worker` binary.
    pub worker_bin: PathBuf,
    /// The `monolock` binary (restart, failover, descriptor exhaustion).
    pub server_bin: Option<PathBuf>,
}

impl Env {
    fn server_bin(&self) -> Result<PathBuf, String> {
        self.server_bin
            .clone()
            .ok_or_else(|| "this scenario needs the monolock binary".to_owned())
    }
}

/// Figures and findings of one scenario run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// The scenario.
    pub scenario: String,
    /// The seed of its random choices.
    pub seed: u64,
    /// Faults injected.
    pub faults: u64,
    /// Faults by kind.
    pub fault_kinds: BTreeMap<String, u64>,
    /// Beliefs (grants seen by workers) checked.
    pub beliefs: u64,
    /// Writes the fenced resource accepted.
    pub writes_accepted: u64,
    /// Writes it refused (an older token than one accepted).
    pub writes_rejected: u64,
    /// Writes sent after their writer's belief had ended (in flight across
    /// a pause or a restart).
    pub late_writes: u64,
    /// Of those, accepted (no newer holder had written yet: harmless, the
    /// resource's order is still the token order).
    pub late_writes_accepted: u64,
    /// Overlapping beliefs against one live server (must be 0).
    pub overlaps: u64,
    /// Overlapping beliefs granted by two different servers (failover:
    /// allowed by design, covered by fencing).
    pub cross_server_overlaps: u64,
    /// Overlaps right after a reset of both sides of the holder's
    /// connection (the server and the holder learn of the close at the same
    /// instant; covered by fencing).
    pub abortive_close_overlaps: u64,
    /// The longest of those, ms.
    pub max_abortive_overlap_ms: f64,
    /// The lease used, ms.
    pub lease_ms: u64,
    /// Longest time from a fault to the next grant, ms.
    pub max_fault_to_grant_ms: f64,
    /// Smallest gap between the end of a belief and the start of the next
    /// one in the same lock (negative would be an overlap), ms.
    pub min_handover_gap_ms: Option<f64>,
    /// Longest heartbeat round trip of a healthy client, ms.
    pub max_heartbeat_rtt_ms: Option<f64>,
    /// The bound that round trip had to stay within, ms.
    pub heartbeat_rtt_bound_ms: Option<f64>,
    /// Other counts (hostile connections, accept errors, ...).
    pub counts: BTreeMap<String, u64>,
    /// Violations found. Empty means the scenario passed.
    pub problems: Vec<String>,
    /// Wall time of the run, s.
    pub seconds: f64,
}

impl Report {
    fn new(scenario: Scenario, seed: u64) -> Self {
        Self {
            scenario: scenario.name().to_owned(),
            seed,
            ..Self::default()
        }
    }

    /// Records a violation.
    pub fn problem(&mut self, problem: impl Into<String>) {
        self.problems.push(problem.into());
    }

    fn fault(&mut self, kind: &str) {
        self.faults += 1;
        *self.fault_kinds.entry(kind.to_owned()).or_default() += 1;
    }

    fn count(&mut self, what: &str, n: u64) {
        *self.counts.entry(what.to_owned()).or_default() += n;
    }

    fn fault_to_grant(&mut self, ms: f64) {
        self.max_fault_to_grant_ms = self.max_fault_to_grant_ms.max(ms);
    }

    fn check(&mut self, ok: bool, problem: impl FnOnce() -> String) {
        if !ok {
            self.problem(problem());
        }
    }

    /// Whether the scenario passed.
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<16} {} faults={} beliefs={} writes ok={} refused={} late={} (accepted {}) overlaps={} cross-server={} lease={}ms max fault->grant={:.0}ms",
            self.scenario,
            if self.passed() { "PASS" } else { "FAIL" },
            self.faults,
            self.beliefs,
            self.writes_accepted,
            self.writes_rejected,
            self.late_writes,
            self.late_writes_accepted,
            self.overlaps,
            self.cross_server_overlaps,
            self.lease_ms,
            self.max_fault_to_grant_ms,
        )?;
        if self.abortive_close_overlaps > 0 {
            write!(
                f,
                " abortive-close overlaps={} (max {:.3}ms)",
                self.abortive_close_overlaps, self.max_abortive_overlap_ms
            )?;
        }
        if let Some(gap) = self.min_handover_gap_ms {
            write!(f, " min handover gap={gap:.1}ms")?;
        }
        if let (Some(rtt), Some(bound)) = (self.max_heartbeat_rtt_ms, self.heartbeat_rtt_bound_ms) {
            write!(f, " max hb rtt={rtt:.1}ms (bound {bound:.0}ms)")?;
        }
        for (k, v) in &self.counts {
            write!(f, " {k}={v}")?;
        }
        for p in &self.problems {
            write!(f, "\n    problem: {p}")?;
        }
        Ok(())
    }
}

/// A server running in this process on a runtime of its own (so that the
/// harness's own load does not delay it), with an event recorder.
pub struct InProcessServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its control handle.
    pub handle: ServerHandle,
    /// Grants and releases, in order.
    pub events: EventRecorder,
    thread: Option<thread::JoinHandle<()>>,
}

impl InProcessServer {
    /// Starts a server with this io-timeout on a 2-thread runtime.
    ///
    /// # Errors
    /// Runtime or bind errors.
    pub fn start(io_timeout: Duration) -> std::io::Result<Self> {
        let events = EventRecorder::default();
        let config = ServerConfig::default()
            .with_io_timeout(io_timeout)
            .with_observer(Arc::new(events.clone()));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        // Bound here with std, so this works from inside another runtime.
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let server = Server::new(config);
        let handle = server.handle();
        let thread = thread::Builder::new()
            .name("monolock-server".into())
            .spawn(move || {
                runtime.block_on(async move {
                    if let Ok(listener) = tokio::net::TcpListener::from_std(listener) {
                        let _ = server.run(listener).await;
                    }
                });
            })?;
        Ok(Self {
            addr,
            handle,
            events,
            thread: Some(thread),
        })
    }

    /// Waits until `name` has `waiters` waiters, at most `limit`. The table
    /// has no change notification, so this polls every 2 ms, bounded.
    ///
    /// # Errors
    /// [`WaitTimeout`].
    pub async fn wait_waiters(
        &self,
        name: &str,
        waiters: usize,
        limit: Duration,
    ) -> Result<(), WaitTimeout> {
        let deadline = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < deadline {
            if self
                .handle
                .lock(name)
                .is_some_and(|l| l.waiters.len() >= waiters)
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Err(WaitTimeout(
            limit,
            format!("{waiters} waiter(s) on {name:?}"),
        ))
    }

    /// When the server granted `token` for `lock` (CLOCK_MONOTONIC, stamped
    /// inside the lock table), if it did.
    pub fn granted_at(&self, lock: &str, token: u64) -> Option<u64> {
        self.events.events().iter().find_map(|e| {
            (e.kind == crate::audit::EventKind::Granted && e.lock == lock && e.token == token)
                .then_some(e.at_ns)
        })
    }

    /// Checks the grant/release alternation of everything it recorded.
    pub fn audit_problems(&self) -> Vec<String> {
        alternation_problems(&self.events.events())
    }
}

impl Drop for InProcessServer {
    fn drop(&mut self) {
        self.handle.shutdown();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Workers, the checker, and the analysis at the end.
pub struct Lab {
    /// The checker.
    pub checker: Checker,
    workers: BTreeMap<String, ChildProcess>,
    /// How stopped workers ended, for diagnostics.
    exits: BTreeMap<String, String>,
    /// Locks whose holder's connection was reset on both sides.
    abortive: std::collections::BTreeSet<String>,
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
            abortive: std::collections::BTreeSet::new(),
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
    ) -> Result<String, String> {
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
        let child = spec
            .start()
            .map_err(|err| format!("spawning {}: {err}", spec.binary.display()))?;
        self.workers.insert(name.clone(), child);
        Ok(name)
    }

    /// Marks `lock` as one whose holder's connection is reset on both
    /// sides: an overlap at that handover is counted apart, not failed.
    pub fn abortive(&mut self, lock: &str) {
        self.abortive.insert(lock.to_owned());
    }

    /// The worker's process.
    pub fn worker(&self, name: &str) -> Option<&ChildProcess> {
        self.workers.get(name)
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
    abortive: &std::collections::BTreeSet<String>,
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

/// How long after a fault the harness waits for an expected event before
/// declaring a problem: generous, so that a loaded machine does not fail a
/// run; the measured figures are reported separately.
fn patience(lease: Duration) -> Duration {
    lease * 4 + Duration::from_secs(5)
}

/// The number of fault injections per scenario in the CI form: every
/// scenario, every variant at least once, within the 5-minute budget.
pub const fn ci_rounds(scenario: Scenario) -> u32 {
    match scenario {
        Scenario::HolderKilled => 3,
        Scenario::HolderPaused => 2,
        Scenario::Partition => 7,
        Scenario::ServerRestart => 2,
        Scenario::Failover => 1,
        Scenario::HostileClients => 1,
        Scenario::DescriptorExhaustion => 1,
        Scenario::VrrpFailover => 1,
    }
}

/// Figures of many runs of one scenario, merged.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Totals {
    /// Runs merged.
    pub runs: u64,
    /// Runs that found problems.
    pub failed_runs: u64,
    /// Everything summed (counts), maximised (times) or minimised (gaps).
    pub merged: Report,
}

impl Totals {
    /// Merges one run.
    pub fn add(&mut self, r: &Report) {
        let m = &mut self.merged;
        if self.runs == 0 {
            m.scenario.clone_from(&r.scenario);
            m.lease_ms = r.lease_ms;
            m.heartbeat_rtt_bound_ms = r.heartbeat_rtt_bound_ms;
        }
        self.runs += 1;
        self.failed_runs += u64::from(!r.passed());
        m.faults += r.faults;
        for (k, v) in &r.fault_kinds {
            *m.fault_kinds.entry(k.clone()).or_default() += v;
        }
        m.beliefs += r.beliefs;
        m.writes_accepted += r.writes_accepted;
        m.writes_rejected += r.writes_rejected;
        m.late_writes += r.late_writes;
        m.late_writes_accepted += r.late_writes_accepted;
        m.overlaps += r.overlaps;
        m.cross_server_overlaps += r.cross_server_overlaps;
        m.abortive_close_overlaps += r.abortive_close_overlaps;
        m.max_abortive_overlap_ms = m.max_abortive_overlap_ms.max(r.max_abortive_overlap_ms);
        m.max_fault_to_grant_ms = m.max_fault_to_grant_ms.max(r.max_fault_to_grant_ms);
        m.min_handover_gap_ms = match (m.min_handover_gap_ms, r.min_handover_gap_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        m.max_heartbeat_rtt_ms = match (m.max_heartbeat_rtt_ms, r.max_heartbeat_rtt_ms) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        for (k, v) in &r.counts {
            *m.counts.entry(k.clone()).or_default() += v;
        }
        m.problems
            .extend(r.problems.iter().map(|p| format!("seed {}: {p}", r.seed)));
        m.seconds += r.seconds;
    }
}
