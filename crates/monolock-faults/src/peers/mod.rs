//! Side by side: monolock, Redis, etcd and ZooKeeper broken by the same
//! faults, each through the lock recipe its users are told to use.
//!
//! Every holder is a separate process (`monolock-fault-worker` for
//! monolock, `monolock-peer-holder` for the others) that reports to the
//! [`Checker`] when it believes it holds a lock, from its client library's
//! own signals, and writes to the fenced resource under the system's token
//! while it believes so. Each round: holder A takes a fresh lock, B waits
//! for it, then one fault:
//!
//! - `holder-paused`: A is SIGSTOPped for 2-3x the lease/session timeout,
//!   at a random moment or (every other round) by itself right after a
//!   belief check and before the write it allowed; it is continued after B
//!   has written;
//! - `holder-killed`: A is SIGKILLed;
//! - `partition`: A's connection to the server (a [`FaultProxy`]) goes
//!   silent both ways for 2-3x the timeout, healed after B has written;
//! - `server-paused`: the server is SIGSTOPped for 2-3x the timeout;
//! - `server-restart`: the server is stopped (SIGTERM) and started again on
//!   the same port and data directory, as a service manager restarts it,
//!   and waited for until it is ready as its documentation says;
//! - `server-killed`: the same with SIGKILL.
//!
//! Counted per system and fault: overlapping beliefs (two holders
//! believing at once), stale writes (a write decided after a later holder
//! began to believe: a resource without fencing accepts every one), and
//! how many of those the resource's token check refused; grants whose
//! token is not above an earlier grant's of the same lock; and, under a
//! restart, whether holder A learned of it by its client's own signals.

pub mod servers;

use std::{collections::HashMap, net::SocketAddr, path::PathBuf, time::Duration};

use rand::{Rng, rngs::StdRng};
use serde::Serialize;
use tokio::{
    process::{Child, Command},
    time::{sleep, sleep_until, timeout},
};

use crate::{
    belief::overlaps,
    checker::{Checker, Record},
    clock::{mono_ns, nanos},
    messages::WorkerMsg,
    process::{send_signal, wait_stopped},
    proxy::{FaultProxy, Faults},
};
pub use servers::{Installs, PeerServer};

/// A lock service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum System {
    /// monolock, through its Rust client.
    Monolock,
    /// Redis, `SET NX PX` with a TTL/3 watchdog.
    Redis,
    /// etcd, a lease and its lock service.
    Etcd,
    /// ZooKeeper, the lock recipe.
    Zookeeper,
}

impl System {
    /// Every system, in table order.
    pub const ALL: [Self; 4] = [Self::Monolock, Self::Redis, Self::Etcd, Self::Zookeeper];

    /// Its name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Monolock => "monolock",
            Self::Redis => "redis",
            Self::Etcd => "etcd",
            Self::Zookeeper => "zookeeper",
        }
    }

    /// Parses [`System::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The lease, TTL or session timeout its holders use. Every system's
    /// own default is longer (etcd `concurrency` 60 s, Curator 60 s
    /// asked / 40 s granted by ZooKeeper's defaults, Redisson 30 s); these
    /// are the shortest each allows with its server defaults (ZooKeeper:
    /// 2 ticks of 2 s; etcd: whole seconds, at least 1.5 s), and monolock
    /// and Redis get etcd's, so that rounds take seconds.
    pub const fn timeout(self) -> Duration {
        match self {
            Self::Zookeeper => Duration::from_secs(4),
            Self::Monolock | Self::Redis | Self::Etcd => Duration::from_secs(2),
        }
    }

    /// The settings in one line, for the report.
    pub const fn settings(self) -> &'static str {
        match self {
            Self::Monolock => {
                "lease 2 s; the client believes until 0.8 x lease after its last heartbeat answer"
            }
            Self::Redis => {
                "TTL 2 s, extended every 0.67 s; belief until TTL after the last successful SET/extension was sent"
            }
            Self::Etcd => {
                "lease TTL 2 s, keep-alive every 0.67 s; belief until the stream fails or the TTL of the last answer passes (server defaults)"
            }
            Self::Zookeeper => {
                "session timeout 4 s (tickTime 2000, Debian's default); belief until the state leaves SyncConnected"
            }
        }
    }
}

/// A fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// The holder is SIGSTOPped past its lease or session.
    HolderPaused,
    /// The holder is SIGKILLed.
    HolderKilled,
    /// The holder's connection goes silent past its lease or session.
    Partition,
    /// The server is SIGSTOPped past the lease or session.
    ServerPaused,
    /// The server is stopped (SIGTERM) and started again.
    ServerRestart,
    /// The server is SIGKILLed and started again.
    ServerKilled,
}

impl Fault {
    /// Every fault, in table order.
    pub const ALL: [Self; 6] = [
        Self::HolderPaused,
        Self::HolderKilled,
        Self::Partition,
        Self::ServerPaused,
        Self::ServerRestart,
        Self::ServerKilled,
    ];

    /// Its name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::HolderPaused => "holder-paused",
            Self::HolderKilled => "holder-killed",
            Self::Partition => "partition",
            Self::ServerPaused => "server-paused",
            Self::ServerRestart => "server-restart",
            Self::ServerKilled => "server-killed",
        }
    }

    /// Parses [`Fault::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// The holder binaries.
#[derive(Clone, Debug)]
pub struct Holders {
    /// `monolock-fault-worker`.
    pub worker: PathBuf,
    /// `monolock-peer-holder`.
    pub peer: PathBuf,
}

/// What one system did under one fault.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Cell {
    /// The system.
    pub system: Option<System>,
    /// The fault.
    pub fault: Option<Fault>,
    /// Faults injected.
    pub faults: u32,
    /// Beliefs recorded (holds).
    pub beliefs: usize,
    /// Pairs of beliefs in one lock that overlapped.
    pub overlaps: usize,
    /// The longest overlap, ms.
    pub max_overlap_ms: f64,
    /// Writes decided after a later holder began to believe (a resource
    /// without fencing accepts them all).
    pub stale_writes: usize,
    /// Of those, the ones the resource's token check refused.
    pub stale_refused: usize,
    /// Writes the resource accepted.
    pub writes: u64,
    /// Grants whose token was not above every earlier token of the same
    /// lock (Redis has no token: none are counted).
    pub tokens_not_rising: usize,
    /// Under a restart: rounds in which holder A reported the loss of its
    /// lock by its client's own signals before the round ended.
    pub holder_told: u32,
    /// Under a restart: why A said its belief ended, and how often.
    pub told_reasons: std::collections::BTreeMap<String, u32>,
    /// Under a restart: the longest time from the signal until the new
    /// process was ready, ms.
    pub max_restart_ms: f64,
    /// Why rounds could not go on (none expected).
    pub errors: Vec<String>,
    /// Seconds the cell took.
    pub seconds: f64,
    /// The history for an outside linearizability checker
    /// (`crates/monolock-faults/porcupine`): every belief and every write.
    #[serde(skip)]
    pub history: serde_json::Value,
}

impl Cell {
    /// `n` per 1,000 faults.
    pub fn per_thousand(&self, n: usize) -> f64 {
        if self.faults == 0 {
            0.0
        } else {
            n as f64 * 1000.0 / f64::from(self.faults)
        }
    }
}

impl std::fmt::Display for Cell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:<10} {:<14} faults={:<3} beliefs={:<4} overlaps={} ({:.0}/1000, max {:.0} ms) stale_writes={} ({:.0}/1000) refused_by_token={} tokens_not_rising={} errors={}",
            self.system.map_or("?", System::name),
            self.fault.map_or("?", Fault::name),
            self.faults,
            self.beliefs,
            self.overlaps,
            self.per_thousand(self.overlaps),
            self.max_overlap_ms,
            self.stale_writes,
            self.per_thousand(self.stale_writes),
            self.stale_refused,
            self.tokens_not_rising,
            self.errors.len()
        )?;
        if matches!(self.fault, Some(Fault::ServerRestart | Fault::ServerKilled)) {
            write!(
                f,
                " holder_told={}/{} (max restart {:.0} ms) {:?}",
                self.holder_told, self.faults, self.max_restart_ms, self.told_reasons
            )?;
        }
        Ok(())
    }
}

/// Runs `faults` against `system`, `rounds` injections each, on one server;
/// hands each cell to `done` as soon as it is complete.
pub async fn run_system(
    system: System,
    faults: &[Fault],
    rounds: u32,
    installs: &Installs,
    holders: &Holders,
    rng: &mut StdRng,
    mut done: impl FnMut(&Cell) + Send,
) -> Vec<Cell> {
    let server = match PeerServer::start(system, installs).await {
        Ok(server) => server,
        Err(err) => {
            let cells: Vec<Cell> = faults
                .iter()
                .map(|&fault| Cell {
                    system: Some(system),
                    fault: Some(fault),
                    errors: vec![format!("starting {}: {err:#}", system.name())],
                    ..Cell::default()
                })
                .collect();
            cells.iter().for_each(&mut done);
            return cells;
        }
    };
    let mut cells = Vec::new();
    for &fault in faults {
        let started = std::time::Instant::now();
        let mut cell = run_cell(&server, fault, rounds, holders, rng).await;
        cell.seconds = started.elapsed().as_secs_f64();
        done(&cell);
        cells.push(cell);
    }
    cells
}

/// One holder process.
struct Holder {
    name: String,
    child: Child,
    pid: u32,
}

struct Stage<'a> {
    server: &'a PeerServer,
    holders: &'a Holders,
    checker: Checker,
    next: u32,
    limit: Duration,
}

impl Stage<'_> {
    fn spawn(&mut self, via: SocketAddr, lock: &str, pause_once: bool) -> anyhow::Result<Holder> {
        self.next += 1;
        let name = format!("h{}", self.next);
        let system = self.server.system;
        let ttl_ms = system.timeout().as_millis().to_string();
        let mut command = match system {
            System::Monolock => {
                let mut c = Command::new(&self.holders.worker);
                c.args(["--lease-ms", &ttl_ms, "--hold-ms", "0"]);
                c
            }
            _ => {
                let mut c = Command::new(&self.holders.peer);
                c.args(["--system", system.name(), "--ttl-ms", &ttl_ms]);
                c
            }
        };
        command
            .args(["--name", &name, "--lock", lock, "--write-every-ms", "20"])
            .arg("--server")
            .arg(via.to_string())
            .arg("--checker")
            .arg(self.checker.addr().to_string());
        if pause_once {
            command.arg("--pause-once");
        }
        command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        servers::isolate(&mut command);
        let child = command.spawn()?;
        let pid = child.id().unwrap_or_default();
        Ok(Holder { name, child, pid })
    }

    async fn wait<T>(
        &self,
        what: &str,
        find: impl FnMut(&[Record]) -> Option<T>,
    ) -> anyhow::Result<T> {
        Ok(self.checker.wait_for(self.limit, what, find).await?)
    }

    async fn wait_held(&self, lock: &str, by: &str) -> anyhow::Result<(u64, u64)> {
        self.wait(&format!("{by} to hold {lock}"), |records| {
            records.iter().find_map(|r| match &r.msg {
                WorkerMsg::Held {
                    lock: l,
                    token,
                    from_ns,
                } if l == lock && r.worker == by => Some((*token, *from_ns)),
                _ => None,
            })
        })
        .await
    }

    async fn wait_accepted_write(&self, by: Option<&str>, after_ns: u64) -> anyhow::Result<()> {
        self.wait("an accepted write", |records| {
            records
                .iter()
                .any(|r| {
                    r.accepted == Some(true)
                        && r.at_ns > after_ns
                        && by.is_none_or(|b| b == r.worker)
                })
                .then_some(())
        })
        .await
    }

    async fn wait_lost(&self, by: &str, token: u64) -> anyhow::Result<()> {
        self.wait_lost_reason(by, token).await.map(drop)
    }

    /// Waits for `by` to report the loss of `token`; returns its reason.
    async fn wait_lost_reason(&self, by: &str, token: u64) -> anyhow::Result<String> {
        self.wait(&format!("{by} to lose {token}"), |records| {
            records.iter().find_map(|r| match &r.msg {
                WorkerMsg::Lost {
                    token: t, reason, ..
                } if r.worker == by && *t == token => Some(reason.clone()),
                _ => None,
            })
        })
        .await
    }

    /// SIGTERM (after SIGCONT), at most 5 s, then SIGKILL; beliefs it could
    /// not close end now.
    async fn stop(&self, mut holder: Holder) {
        let _ = send_signal(holder.pid, libc::SIGCONT);
        let _ = send_signal(holder.pid, libc::SIGTERM);
        if timeout(Duration::from_secs(5), holder.child.wait())
            .await
            .is_err()
        {
            let _ = holder.child.start_kill();
            let _ = timeout(Duration::from_secs(5), holder.child.wait()).await;
        }
        let _ = self
            .checker
            .wait_disconnected(&holder.name, Duration::from_secs(5))
            .await;
        self.checker
            .close_beliefs_of(&holder.name, mono_ns(), "stopped by the harness");
    }
}

async fn run_cell(
    server: &PeerServer,
    fault: Fault,
    rounds: u32,
    holders: &Holders,
    rng: &mut StdRng,
) -> Cell {
    let mut cell = Cell {
        system: Some(server.system),
        fault: Some(fault),
        ..Cell::default()
    };
    let checker = match Checker::start().await {
        Ok(c) => c,
        Err(err) => {
            cell.errors.push(format!("checker: {err}"));
            return cell;
        }
    };
    let ttl = server.system.timeout();
    let mut stage = Stage {
        server,
        holders,
        checker,
        next: 0,
        limit: ttl * 4 + Duration::from_secs(20),
    };
    for round in 0..rounds {
        if let Err(err) = run_round(&mut stage, fault, round, rng, &mut cell).await {
            cell.errors.push(format!("round {round}: {err:#}"));
        }
    }
    analyse(&stage.checker, &mut cell);
    cell
}

async fn run_round(
    stage: &mut Stage<'_>,
    fault: Fault,
    round: u32,
    rng: &mut StdRng,
    cell: &mut Cell,
) -> anyhow::Result<()> {
    let ttl = stage.server.system.timeout();
    let lock = format!("peer-faults/{}/{round}", fault.name());
    let proxy_a = FaultProxy::start(stage.server.addr).await?;
    let proxy_b = FaultProxy::start(stage.server.addr).await?;
    let in_flight = fault == Fault::HolderPaused && round % 2 == 1;
    let a = stage.spawn(proxy_a.addr(), &lock, in_flight)?;
    let outcome = async {
        let (a_token, a_from) = stage.wait_held(&lock, &a.name).await?;
        let b = stage.spawn(proxy_b.addr(), &lock, false)?;
        let result = inject(
            stage,
            fault,
            &lock,
            in_flight,
            &a,
            &b,
            (a_token, a_from),
            &proxy_a,
            ttl,
            rng,
            cell,
        )
        .await;
        stage.stop(b).await;
        result
    }
    .await;
    stage.stop(a).await;
    outcome
}

#[allow(clippy::too_many_arguments)]
async fn inject(
    stage: &Stage<'_>,
    fault: Fault,
    lock: &str,
    in_flight: bool,
    a: &Holder,
    b: &Holder,
    (a_token, a_from): (u64, u64),
    proxy_a: &FaultProxy,
    ttl: Duration,
    rng: &mut StdRng,
    cell: &mut Cell,
) -> anyhow::Result<()> {
    let lasting = ttl.mul_f64(rng.random_range(2.0..3.0));
    let at_random = Duration::from_millis(rng.random_range(0..ttl.as_millis() as u64 / 2));
    match fault {
        Fault::HolderPaused => {
            if in_flight {
                // It stops itself right after this report.
                stage
                    .wait("the holder to pause itself", |records| {
                        records
                            .iter()
                            .any(|r| {
                                r.worker == a.name && matches!(r.msg, WorkerMsg::Pausing { .. })
                            })
                            .then_some(())
                    })
                    .await?;
            } else {
                sleep(at_random).await;
                send_signal(a.pid, libc::SIGSTOP)?;
            }
            wait_stopped(a.pid, stage.limit).await?;
            let stopped_at = mono_ns();
            cell.faults += 1;
            stage.wait_held(lock, &b.name).await?;
            stage.wait_accepted_write(Some(&b.name), a_from).await?;
            let resume_at = tokio::time::Instant::now()
                + Duration::from_nanos((stopped_at + nanos(lasting)).saturating_sub(mono_ns()));
            sleep_until(resume_at).await;
            send_signal(a.pid, libc::SIGCONT)?;
            // Its belief ends by its own signals or, if they never come,
            // when the harness stops it (counted as an overlap).
            let _ = stage.wait_lost(&a.name, a_token).await;
        }
        Fault::HolderKilled => {
            sleep(at_random).await;
            let at = mono_ns();
            send_signal(a.pid, libc::SIGKILL)?;
            cell.faults += 1;
            let _ = stage
                .checker
                .wait_disconnected(&a.name, Duration::from_secs(5))
                .await;
            stage.checker.close_beliefs_of(&a.name, at, "killed");
            stage.wait_held(lock, &b.name).await?;
            stage.wait_accepted_write(Some(&b.name), at).await?;
        }
        Fault::Partition => {
            sleep(at_random).await;
            let asked = mono_ns();
            proxy_a.set_faults(Faults::BLACK_HOLE);
            let at = proxy_a
                .applied_after(asked, Duration::from_secs(5))
                .await
                .unwrap_or(asked);
            cell.faults += 1;
            stage.wait_held(lock, &b.name).await?;
            stage.wait_accepted_write(Some(&b.name), at).await?;
            let heal_at = tokio::time::Instant::now()
                + Duration::from_nanos((at + nanos(lasting)).saturating_sub(mono_ns()));
            sleep_until(heal_at).await;
            proxy_a.set_faults(Faults::PASS);
            let _ = stage.wait_lost(&a.name, a_token).await;
        }
        Fault::ServerPaused => {
            sleep(at_random).await;
            let pid = stage.server.pid();
            send_signal(pid, libc::SIGSTOP)?;
            let paused = wait_stopped(pid, stage.limit).await;
            // The pause is the fault: its length is the point, not a wait.
            sleep(lasting).await;
            send_signal(pid, libc::SIGCONT)?;
            paused?;
            cell.faults += 1;
            let resumed = mono_ns();
            stage.wait_accepted_write(None, resumed).await?;
        }
        Fault::ServerRestart | Fault::ServerKilled => {
            sleep(at_random).await;
            let restarted = stage.server.restart(fault == Fault::ServerKilled).await?;
            cell.faults += 1;
            cell.max_restart_ms = cell
                .max_restart_ms
                .max(restarted.ready_ns.saturating_sub(restarted.signalled_ns) as f64 / 1e6);
            // Back in service: some holder writes again.
            stage.wait_accepted_write(None, restarted.ready_ns).await?;
            // A's belief ends by its own signals, or (counted as an overlap
            // if B believed meanwhile) when the harness stops it.
            if let Ok(reason) = stage.wait_lost_reason(&a.name, a_token).await {
                cell.holder_told += 1;
                *cell.told_reasons.entry(reason_kind(&reason)).or_default() += 1;
            }
        }
    }
    Ok(())
}

/// A loss reason without its details (the causes after the first `: `),
/// to count alike reasons together.
fn reason_kind(reason: &str) -> String {
    reason.split(": ").next().unwrap_or(reason).to_owned()
}

/// Counts overlaps and stale writes from the journal.
fn analyse(checker: &Checker, cell: &mut Cell) {
    let (mut beliefs, open) = checker.beliefs(|_, _| "server".into());
    let end = mono_ns();
    beliefs.extend(open.into_iter().map(|mut b| {
        b.until_ns = end;
        b.end = "open at the end".into();
        b
    }));
    cell.beliefs = beliefs.len();
    let found = overlaps(&beliefs, false);
    cell.overlaps = found.len();
    cell.max_overlap_ms = found
        .iter()
        .map(|o| o.overlap_ns as f64 / 1e6)
        .fold(0.0, f64::max);
    let records = checker.records();
    cell.tokens_not_rising = tokens_not_rising(&records);
    let (stale, refused) = stale_writes(&records);
    cell.stale_writes = stale;
    cell.stale_refused = refused;
    cell.writes = checker.resource_stats().accepted;
    cell.history = history(&beliefs, &records);
}

/// The history as the Porcupine check reads it: beliefs (a grant, from
/// `from_ns`, and the end of the holder's claim: from `until_ns` until the
/// checker heard of it, or the end of the run when the harness closed it)
/// and writes (sent, decided, accepted), on CLOCK_MONOTONIC.
fn history(beliefs: &[crate::belief::Belief], records: &[Record]) -> serde_json::Value {
    let end = mono_ns();
    let lost_heard: HashMap<(&str, u64), u64> = records
        .iter()
        .filter_map(|r| match &r.msg {
            WorkerMsg::Lost { token, .. } => Some(((r.worker.as_str(), *token), r.at_ns)),
            _ => None,
        })
        .collect();
    let beliefs: Vec<serde_json::Value> = beliefs
        .iter()
        .map(|b| {
            let heard = lost_heard
                .get(&(b.worker.as_str(), b.token))
                .copied()
                .unwrap_or(end)
                .max(b.until_ns);
            serde_json::json!({
                "lock": b.lock, "worker": b.worker, "token": b.token,
                "from_ns": b.from_ns, "until_ns": b.until_ns, "ended_heard_ns": heard,
            })
        })
        .collect();
    let writes: Vec<serde_json::Value> = records
        .iter()
        .filter_map(|r| match (&r.msg, r.accepted) {
            (
                WorkerMsg::Write {
                    lock,
                    token,
                    sent_ns,
                    ..
                },
                Some(accepted),
            ) => Some(serde_json::json!({
                "lock": lock, "worker": r.worker, "token": token,
                "sent_ns": sent_ns, "decided_ns": r.at_ns, "accepted": accepted,
            })),
            _ => None,
        })
        .collect();
    serde_json::json!({ "beliefs": beliefs, "writes": writes })
}

/// Grants (in the order their holders began to believe) whose token is not
/// above every earlier grant's of the same lock; token 0 (Redis: none) is
/// not counted.
pub fn tokens_not_rising(records: &[Record]) -> usize {
    let mut grants: HashMap<&str, Vec<(u64, u64)>> = HashMap::new();
    for r in records {
        if let WorkerMsg::Held {
            lock,
            token,
            from_ns,
        } = &r.msg
            && *token != 0
        {
            grants.entry(lock).or_default().push((*from_ns, *token));
        }
    }
    grants
        .into_values()
        .map(|mut list| {
            list.sort_unstable();
            let mut highest = 0;
            list.into_iter()
                .filter(|&(_, token)| {
                    let fell = token <= highest;
                    highest = highest.max(token);
                    fell
                })
                .count()
        })
        .sum()
}

/// Writes decided after another holder of the same lock began to believe
/// later than the writer did, and how many of them were refused.
pub fn stale_writes(records: &[Record]) -> (usize, usize) {
    // (lock) -> [(from_ns, worker)]
    let mut helds: HashMap<&str, Vec<(u64, &str)>> = HashMap::new();
    for r in records {
        if let WorkerMsg::Held { lock, from_ns, .. } = &r.msg {
            helds.entry(lock).or_default().push((*from_ns, &r.worker));
        }
    }
    let (mut stale, mut refused) = (0, 0);
    for r in records {
        let WorkerMsg::Write { lock, .. } = &r.msg else {
            continue;
        };
        let Some(list) = helds.get(lock.as_str()) else {
            continue;
        };
        let own = list
            .iter()
            .filter(|(from, w)| *w == r.worker && *from <= r.at_ns)
            .map(|(from, _)| *from)
            .max();
        let Some(own) = own else { continue };
        let superseded = list
            .iter()
            .any(|(from, w)| *w != r.worker && *from > own && *from <= r.at_ns);
        if superseded {
            stale += 1;
            if r.accepted == Some(false) {
                refused += 1;
            }
        }
    }
    (stale, refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(worker: &str, at_ns: u64, msg: WorkerMsg, accepted: Option<bool>) -> Record {
        Record {
            worker: worker.into(),
            at_ns,
            msg,
            accepted,
        }
    }

    fn held(worker: &str, token: u64, from_ns: u64) -> Record {
        let msg = WorkerMsg::Held {
            lock: "l".into(),
            token,
            from_ns,
        };
        record(worker, from_ns, msg, None)
    }

    fn write(worker: &str, token: u64, at_ns: u64, accepted: bool) -> Record {
        let msg = WorkerMsg::Write {
            lock: "l".into(),
            token,
            seq: 0,
            sent_ns: at_ns,
        };
        record(worker, at_ns, msg, Some(accepted))
    }

    #[test]
    fn a_write_after_a_later_holder_began_is_stale() {
        let records = [
            held("a", 5, 10),
            write("a", 5, 20, true),
            held("b", 7, 30),
            write("b", 7, 40, true),
            write("a", 5, 50, false),
            write("a", 0, 60, true),
        ];
        // a's writes at 50 and 60 came after b began; one was refused.
        assert_eq!(stale_writes(&records), (2, 1));
    }

    #[test]
    fn a_grant_at_or_below_an_earlier_token_is_counted() {
        let records = [
            held("a", 5, 10),
            held("b", 7, 30),
            held("c", 7, 50),
            held("d", 6, 60),
            held("e", 9, 70),
        ];
        assert_eq!(tokens_not_rising(&records), 2);
        // Redis's grants carry no token.
        assert_eq!(tokens_not_rising(&[held("a", 0, 10), held("b", 0, 20)]), 0);
    }

    #[test]
    fn a_holder_that_takes_the_lock_again_is_current() {
        let records = [
            held("a", 5, 10),
            held("b", 7, 30),
            held("a", 9, 50),
            write("a", 9, 60, true),
        ];
        assert_eq!(stale_writes(&records), (0, 0));
    }
}
