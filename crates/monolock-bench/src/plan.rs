//! What a run measures: the modes and, for each, the sizes and durations
//! of every scenario.

use std::{fmt::Write as _, time::Duration};

use crate::{observers, report::fmt_num, sessions};

/// Which run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Seconds; proves every path works.
    Smoke,
    /// Under two minutes.
    Quick,
    /// The published run.
    Full,
}

impl Mode {
    /// Its name in paths and in the report.
    pub fn key(self) -> &'static str {
        match self {
            Self::Smoke => "smoke",
            Self::Quick => "quick",
            Self::Full => "full",
        }
    }
}

/// Sizes and durations of every scenario for a mode.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Rounds; monolock and Redis alternate which runs first.
    pub rounds: usize,
    /// Load before every measured window.
    pub warmup: Duration,
    /// The uncontended-latency window (and the floors').
    pub latency_len: Duration,
    /// Client counts of the throughput scenario.
    pub throughput_clients: Vec<usize>,
    /// Each throughput window.
    pub throughput_len: Duration,
    /// Clients on the one contended name.
    pub contention_clients: usize,
    /// Contention windows without work under the lock.
    pub contention_len: Duration,
    /// Longer windows when work is held under the lock, so every client
    /// gets enough turns that max/min is not a rounding artefact.
    pub contention_work_len: Duration,
    /// Work held under the lock, one contention variant each.
    pub works: Vec<Duration>,
    /// Redis retry delays tried in every contention variant.
    pub redis_delays: Vec<Duration>,
    /// monolock lease and Redis TTL of the dead-holder trials.
    pub dead_lease: Duration,
    /// A long Redis TTL tried as well (`--full` only).
    pub long_ttl: Option<Duration>,
    /// The sessions-at-scale scenario.
    pub sessions: sessions::Params,
    /// Locks held by one process, v1 connections against one v2 session.
    pub many_locks: usize,
    /// Side by side with etcd and ZooKeeper: clients on the one contended lock.
    pub peer_contention_clients: Vec<usize>,
    /// Side by side: locks held by one session for the memory row.
    pub peer_locks: usize,
    /// Values and observers.
    pub observers: observers::Params,
}

const MS: fn(u64) -> Duration = Duration::from_millis;

impl Plan {
    /// The plan of `mode`, with `rounds` overriding its number of rounds.
    pub fn for_mode(mode: Mode, rounds: Option<usize>) -> Self {
        let mut plan = match mode {
            Mode::Smoke => Self {
                rounds: 1,
                warmup: MS(50),
                latency_len: MS(200),
                throughput_clients: vec![1, 4],
                throughput_len: MS(200),
                contention_clients: 8,
                contention_len: MS(300),
                contention_work_len: MS(400),
                works: vec![Duration::ZERO, MS(1)],
                redis_delays: vec![MS(1)],
                dead_lease: MS(300),
                long_ttl: None,
                many_locks: 200,
                peer_contention_clients: vec![4],
                peer_locks: 200,
                observers: observers::Params {
                    fan_outs: vec![1, 10],
                    max_cycles: 20,
                    cycles_len: MS(300),
                    bare_cycles: 20,
                    value_observers: vec![0, 1, 10],
                    value_len: MS(300),
                    warmup: MS(50),
                },
                sessions: sessions::Params {
                    sessions: 200,
                    workers: 2,
                    lease: MS(2_000),
                    window: MS(1_000),
                    probe_every: MS(10),
                },
            },
            Mode::Quick => Self {
                rounds: 2,
                warmup: MS(100),
                latency_len: MS(1_000),
                throughput_clients: vec![1, 16, 64],
                throughput_len: MS(1_000),
                contention_clients: 64,
                contention_len: MS(1_200),
                contention_work_len: MS(3_000),
                works: vec![Duration::ZERO, MS(1)],
                redis_delays: vec![MS(1), MS(10), MS(50)],
                dead_lease: MS(1_000),
                long_ttl: None,
                many_locks: 10_000,
                peer_contention_clients: vec![16, 64],
                peer_locks: 10_000,
                observers: observers::Params {
                    fan_outs: vec![1, 100, 10_000],
                    max_cycles: 1_000,
                    cycles_len: MS(2_000),
                    bare_cycles: 500,
                    value_observers: vec![0, 1, 100],
                    value_len: MS(1_000),
                    warmup: MS(100),
                },
                sessions: sessions::Params {
                    sessions: 5_000,
                    workers: 2,
                    lease: MS(10_000),
                    window: MS(5_000),
                    probe_every: MS(10),
                },
            },
            Mode::Full => Self {
                rounds: 5,
                warmup: MS(250),
                latency_len: MS(3_000),
                throughput_clients: vec![1, 16, 64],
                throughput_len: MS(3_000),
                contention_clients: 64,
                contention_len: MS(4_000),
                contention_work_len: MS(8_000),
                works: vec![Duration::ZERO, MS(1)],
                redis_delays: vec![MS(1), MS(10), MS(50)],
                dead_lease: MS(1_000),
                long_ttl: Some(Duration::from_secs(30)),
                many_locks: 10_000,
                peer_contention_clients: vec![16, 64],
                peer_locks: 10_000,
                observers: observers::Params {
                    fan_outs: vec![1, 100, 10_000],
                    max_cycles: 5_000,
                    cycles_len: MS(5_000),
                    bare_cycles: 2_000,
                    value_observers: vec![0, 1, 100],
                    value_len: MS(3_000),
                    warmup: MS(250),
                },
                sessions: sessions::Params {
                    sessions: 19_000,
                    workers: 4,
                    lease: MS(10_000),
                    window: MS(20_000),
                    probe_every: MS(10),
                },
            },
        };
        if let Some(r) = rounds {
            plan.rounds = r.clamp(1, 50);
        }
        plan
    }

    /// The contention variants: (key label, human label, work under the lock).
    pub fn contention_variants(&self) -> Vec<(String, String, Duration)> {
        self.works
            .iter()
            .map(|w| {
                if w.is_zero() {
                    ("w0".to_owned(), "no work under the lock".to_owned(), *w)
                } else {
                    (
                        format!("w{}ms", w.as_millis()),
                        format!("{} ms work under the lock", w.as_millis()),
                        *w,
                    )
                }
            })
            .collect()
    }

    /// The plan in words, one line per scenario.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        let secs = |d: Duration| fmt_num(d.as_secs_f64());
        let _ = writeln!(
            s,
            "- rounds: {} (monolock and Redis alternate which runs first)",
            self.rounds
        );
        let _ = writeln!(
            s,
            "- warm-up before each measured window: {} s",
            secs(self.warmup)
        );
        let _ = writeln!(
            s,
            "- uncontended latency: 1 client, {} s window",
            secs(self.latency_len)
        );
        let _ = writeln!(
            s,
            "- throughput: {:?} clients on distinct names, {} s windows; then the connection floor (a bare tokio accept/read/write/close server) under the same load",
            self.throughput_clients,
            secs(self.throughput_len)
        );
        let _ = writeln!(
            s,
            "- contention: {} clients on one name, work {:?} (a tokio sleep: ~1 ms becomes ~2 ms), windows {} s without work / {} s with; Redis retry delays {:?} (jittered ×0.5–1.5)",
            self.contention_clients,
            self.works,
            secs(self.contention_len),
            secs(self.contention_work_len),
            self.redis_delays
        );
        let _ = writeln!(
            s,
            "- dead holder: monolock lease / Redis TTL {} s, 1 SIGKILL + 1 SIGSTOP trial per round{}",
            secs(self.dead_lease),
            match self.long_ttl {
                Some(t) => format!("; Redis TTL {} s as well", secs(t)),
                None => "; Redis TTL 30 s skipped in this mode (30 s per trial)".to_owned(),
            }
        );
        let _ = writeln!(
            s,
            "- side by side with etcd and ZooKeeper (each server on the same CPU, data on tmpfs): {:?} clients cycling, {:?} clients on one lock, a SIGKILLed holder at lease / TTL / session timeout {} s, {} locks held by one session",
            self.throughput_clients,
            self.peer_contention_clients,
            secs(self.dead_lease),
            self.peer_locks
        );
        let o = &self.observers;
        let _ = writeln!(
            s,
            "- values and observers (Rust client library, each observer a client of its own): {:?} observers of one name, up to {} hand-on cycles or {} s each (after {} with no observer); set_value in a loop with {:?} observers, {} s windows",
            o.fan_outs,
            o.max_cycles,
            secs(o.cycles_len),
            o.bare_cycles,
            o.value_observers,
            secs(o.value_len)
        );
        let _ = writeln!(
            s,
            "- sessions: {} monolock sessions over {} worker processes, lease {} s (heartbeat every {} s), probe every {} ms for {} s",
            self.sessions.sessions,
            self.sessions.workers,
            secs(self.sessions.lease),
            secs(self.sessions.lease / 4),
            self.sessions.probe_every.as_millis(),
            secs(self.sessions.window)
        );
        s
    }
}
