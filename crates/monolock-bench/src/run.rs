//! A whole run: setup (`setup.rs`: the plan of the mode, the binaries;
//! then the servers, here), the rounds (each runs every selected scenario
//! once, monolock and Redis alternating which goes first: A B, B A, ...),
//! and the outputs (`output.rs`: tables on stdout, `results.json`,
//! `summary.md`, charts).
//!
//! # Adding a scenario
//!
//! 1. A variant of [`Scenario`] (`main.rs`; its place there is its place
//!    in a round), and a module with its measurement, which records
//!    figures under `<scenario>[.<variant>].<series>.<figure>` keys.
//! 2. A method of [`Bench`] that runs it for both systems (see
//!    [`Bench::throughput`]), and its arm in [`Bench::scenario`] (the
//!    compiler asks for it).
//! 3. Its rows in `report.rs` (a figure table and a line in
//!    `row_specs`), and the figures `--smoke` must produce (`smoke_checks`
//!    in `output.rs`).

use std::{
    future::Future,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use serde_json::json;

use crate::{
    RunArgs, Scenario, contention, cycles, dead, floor,
    output::{ChartData, smoke_checks, summary_markdown, write_charts},
    peers::{self, Series},
    plan::Mode,
    report::{self, Metrics, TargetContext},
    servers::{self, Server, System},
    sessions,
    setup::{Setup, command_line, cpus, machine},
};

/// Where one step's failure is recorded.
struct Steps {
    errors: Vec<String>,
    next_id: u64,
}

impl Steps {
    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    async fn step<T>(&mut self, what: String, fut: impl Future<Output = Result<T>>) -> Option<T> {
        let started = Instant::now();
        eprint!("  {what} ... ");
        match fut.await {
            Ok(v) => {
                eprintln!("ok ({:.1} s)", started.elapsed().as_secs_f64());
                Some(v)
            }
            Err(e) => {
                eprintln!("FAILED: {e:#}");
                self.errors.push(format!("{what}: {e:#}"));
                None
            }
        }
    }
}

/// A run in progress: the setup, the servers under test, and what the
/// rounds have produced so far.
struct Bench {
    setup: Setup,
    servers: UnderTest,
    /// Whether Redis started at all (the report says "not run" otherwise).
    redis_ran: bool,
    steps: Steps,
    chart: ChartData,
    mono_restarts: u32,
    redis_restarts: u32,
}

impl Bench {
    /// Starts the servers (Redis only if it is there and starts).
    async fn start(mut setup: Setup) -> Result<Self> {
        let mono = Server::start_monolock(&setup.mono_bin, setup.server_cpu, &setup.logs).await?;
        let redis = match &setup.redis_bin {
            Some(bin) => match Server::start_redis(bin, setup.server_cpu, &setup.logs).await {
                Ok(s) => Some(s),
                Err(e) => {
                    setup.notes.push(format!("Redis not run: {e:#}"));
                    None
                }
            },
            None => None,
        };
        let base = match &setup.base_bin {
            Some(bin) => Some(
                Server::start_monolock_as(BASE, bin, setup.server_cpu, &setup.logs, &[])
                    .await
                    .context("start the --baseline-bin server")?,
            ),
            None => None,
        };
        let (etcd, zookeeper) = if setup.wants(Scenario::Peers) {
            start_peers(&mut setup).await
        } else {
            (None, None)
        };
        let session_floor = if setup.wants(Scenario::Peers) {
            match Server::start_session_floor(&setup.exe, setup.server_cpu, &setup.logs).await {
                Ok(s) => Some(s),
                Err(e) => {
                    setup.notes.push(format!("session floor not run: {e:#}"));
                    None
                }
            }
        } else {
            None
        };
        let mut errors = Vec::new();
        if std::env::var_os("CI").is_some() && setup.wants(Scenario::Peers) && !setup.no_peers {
            // CI installs both (.ci/setup.d/peers.sh): the comparison must
            // not rot by being skipped there.
            for (name, ran) in [("etcd", etcd.is_some()), ("ZooKeeper", zookeeper.is_some())] {
                if !ran {
                    errors.push(format!("{name} did not run although CI is set"));
                }
            }
        }
        let floor = if setup.wants(Scenario::Throughput) {
            match Server::start_conn_floor(&setup.exe, setup.server_cpu, &setup.logs).await {
                Ok(s) => Some(s),
                Err(e) => {
                    setup.notes.push(format!("connection floor not run: {e:#}"));
                    None
                }
            }
        } else {
            None
        };
        Ok(Self {
            redis_ran: redis.is_some(),
            servers: UnderTest {
                mono,
                base,
                redis,
                floor,
                etcd,
                zookeeper,
                session_floor,
            },
            setup,
            steps: Steps {
                errors,
                next_id: u64::from(std::process::id()) << 20,
            },
            chart: ChartData::default(),
            mono_restarts: 0,
            redis_restarts: 0,
        })
    }

    /// The run's metadata for `results.json` (and its machine line on stderr).
    fn meta(&self, args: &RunArgs) -> serde_json::Value {
        let s = &self.setup;
        let pin = cpus(args);
        json!({
            "mode": s.mode.key(),
            "command": std::env::args().collect::<Vec<_>>().join(" "),
            "started_unix": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
            "machine": machine(),
            "pinning": match pin { Some((s, c)) => json!({"server_cpu": s, "client_cpu": c}), None => json!(null) },
            "scheduling": if args.realtime { "SCHED_FIFO 10".to_owned() } else { format!("nice {}", args.nice) },
            "monolock_bin": s.mono_bin.display().to_string(),
            "monolock_version": command_line(&s.mono_bin, "--version"),
            "baseline_bin": s.base_bin.as_ref().map(|b| b.display().to_string()),
            "baseline_version": s.base_bin.as_deref().and_then(|b| command_line(b, "--version")),
            "redis_version": s.redis_bin.as_deref().and_then(servers::redis_version),
            "etcd_version": s.etcd_bin.as_deref().and_then(|b| servers::first_line(b, "--version")),
            "zookeeper_jar": s.zookeeper.as_ref().map(|(_, jar)| jar.display().to_string()),
            "notes": s.notes,
        })
    }

    /// One round: every selected scenario once, in [`Scenario`] order.
    async fn round(&mut self, round: usize) -> Result<Metrics> {
        eprintln!("round {}/{}", round + 1, self.setup.plan.rounds);
        let mut m = Metrics::default();
        let order = if round.is_multiple_of(2) {
            [System::Monolock, System::Redis]
        } else {
            [System::Redis, System::Monolock]
        };
        // The machine's floor, for reading the latencies against.
        if [Scenario::Latency, Scenario::Contention, Scenario::Tls]
            .into_iter()
            .any(|sc| self.setup.wants(sc))
        {
            self.echo_floor(&mut m).await;
        }
        for &scenario in Scenario::value_variants() {
            if self.setup.wants(scenario) {
                self.scenario(scenario, order, &mut m).await?;
            }
        }
        paired_ratios(&mut m);
        Ok(m)
    }

    /// Runs one scenario for both systems, `order[0]` first.
    async fn scenario(
        &mut self,
        scenario: Scenario,
        order: [System; 2],
        m: &mut Metrics,
    ) -> Result<()> {
        match scenario {
            Scenario::Latency => self.latency(order, m).await,
            Scenario::Throughput => self.throughput(order, m).await?,
            Scenario::Contention => self.contention(order, m).await?,
            Scenario::ManyLocks => self.many_locks(m).await,
            Scenario::Tls => self.tls_claims(m).await,
            Scenario::Dead => self.dead(order, m).await?,
            Scenario::Peers => self.peers(order, m).await,
            Scenario::Sessions => self.sessions(order, m).await,
            Scenario::Observers => self.observers(m).await,
        }
        Ok(())
    }

    /// The 1-byte echo round trip between the two CPUs.
    async fn echo_floor(&mut self, m: &mut Metrics) {
        let s = &self.setup;
        self.steps
            .step(
                "machine floor, 1-byte echo round trip".to_owned(),
                floor::round_trip(&s.exe, s.server_cpu, s.plan.warmup, s.plan.latency_len, m),
            )
            .await;
    }

    /// Scenario 1, uncontended latency.
    async fn latency(&mut self, order: [System; 2], m: &mut Metrics) {
        let plan = &self.setup.plan;
        for server in self.servers.in_order(order) {
            let id = self.steps.id();
            if let Some(samples) = self
                .steps
                .step(
                    format!("latency, {}", server.series),
                    cycles::latency(server, id, plan.warmup, plan.latency_len, m),
                )
                .await
            {
                match (server.system, server.series) {
                    (System::Monolock, BASE) => {}
                    (System::Monolock, _) => self.chart.latency_mono.extend(&samples),
                    (System::Redis, _) => self.chart.latency_redis.extend(&samples),
                    (System::Etcd | System::Zookeeper, _) => {}
                }
            }
        }
    }

    /// Scenario 2, uncontended throughput at each client count: monolock,
    /// Redis, then the connection floor, and each system's server CPU per
    /// cycle as a multiple of the floor's.
    async fn throughput(&mut self, order: [System; 2], m: &mut Metrics) -> Result<()> {
        for clients in self.setup.plan.throughput_clients.clone() {
            let floor = self.servers.floor.as_ref();
            for server in self.servers.in_order(order).into_iter().chain(floor) {
                let plan = &self.setup.plan;
                let id = self.steps.id();
                self.steps
                    .step(
                        format!("throughput, {clients} client(s), {}", server.series),
                        cycles::throughput(
                            server,
                            id,
                            clients,
                            plan.warmup,
                            plan.throughput_len,
                            m,
                        ),
                    )
                    .await;
            }
            if let Some(server) = self.servers.get(System::Monolock) {
                let plan = &self.setup.plan;
                let id = self.steps.id();
                self.steps
                    .step(
                        format!("throughput, {clients} client(s), monolock protocol v2"),
                        cycles::throughput_v2(
                            server,
                            id,
                            clients,
                            plan.warmup,
                            plan.throughput_len,
                            m,
                        ),
                    )
                    .await;
            }
            put_vs_floor(
                m,
                &format!("throughput.c{clients}"),
                "server_cpu_ms_per_1k",
                "floor",
                order.map(System::key),
                "server_cpu_vs_floor",
            );
            self.revive_monolock().await?;
        }
        Ok(())
    }

    /// One client claiming in sequence over plain TCP, TLS and mTLS, v1
    /// against v2, each on a fresh server.
    async fn tls_claims(&mut self, m: &mut Metrics) {
        let s = &self.setup;
        for transport in crate::tls_claims::Transport::value_variants()
            .iter()
            .copied()
        {
            let id = self.steps.id();
            let params = crate::tls_claims::Params {
                bin: &s.mono_bin,
                cpu: s.server_cpu,
                logs: &s.logs,
                transport,
                warmup: s.plan.warmup,
                length: s.plan.throughput_len,
            };
            let what = format!(
                "one client claiming in sequence over {}, v1 and v2",
                transport.key()
            );
            self.steps
                .step(what, crate::tls_claims::run(params, id, m))
                .await;
        }
    }

    /// Many locks held by one process, v1 against v2, each on a fresh
    /// server.
    async fn many_locks(&mut self, m: &mut Metrics) {
        let s = &self.setup;
        let locks = s.plan.many_locks;
        for v2 in [false, true] {
            let id = self.steps.id();
            let step = async {
                // One v2 session holds every lock.
                let extra = ["--max-claims-per-session".into(), locks.to_string().into()];
                let fresh =
                    Server::start_monolock_with(&s.mono_bin, s.server_cpu, &s.logs, &extra).await?;
                if v2 {
                    crate::v2_scenarios::hold_v2(&fresh, id, locks, m).await
                } else {
                    crate::v2_scenarios::hold_v1(&fresh, id, locks, m).await
                }
            };
            let what = format!(
                "{locks} locks held by one process, {}",
                if v2 {
                    "one v2 session"
                } else {
                    "v1 connections"
                }
            );
            self.steps.step(what, step).await;
        }
    }

    /// Scenario 3, contention: every variant, monolock (v1; v2 without
    /// work; the baseline build's v1 if any) and every Redis retry delay.
    /// monolock's runs alternate their order round by round, as the
    /// systems do, so that none of them always runs first.
    async fn contention(&mut self, order: [System; 2], m: &mut Metrics) -> Result<()> {
        for (label, human, work) in self.setup.plan.contention_variants() {
            for sys in order {
                let plan = &self.setup.plan;
                let p = |retry_delay| contention::Params {
                    clients: plan.contention_clients,
                    work,
                    retry_delay,
                    warmup: plan.warmup,
                    length: if work.is_zero() {
                        plan.contention_len
                    } else {
                        plan.contention_work_len
                    },
                };
                let runs: Vec<(ContentionRun<'_>, Duration)> = match sys {
                    System::Monolock => {
                        let mut runs: Vec<ContentionRun<'_>> = self
                            .servers
                            .monolocks()
                            .into_iter()
                            .map(ContentionRun::V1)
                            .collect();
                        if work.is_zero() {
                            runs.push(ContentionRun::V2(&self.servers.mono));
                        }
                        if order[0] != System::Monolock {
                            runs.reverse();
                        }
                        runs.into_iter().map(|r| (r, Duration::ZERO)).collect()
                    }
                    System::Redis => match self.servers.redis.as_ref() {
                        Some(redis) => plan
                            .redis_delays
                            .iter()
                            .map(|d| (ContentionRun::V1(redis), *d))
                            .collect(),
                        None => Vec::new(),
                    },
                    // Measured by the side-by-side scenario.
                    System::Etcd | System::Zookeeper => Vec::new(),
                };
                for (run, delay) in runs {
                    let id = self.steps.id();
                    let server = match run {
                        ContentionRun::V2(server) => {
                            self.steps
                                .step(
                                    format!("contention, {human}, monolock protocol v2"),
                                    crate::v2_scenarios::contention(
                                        server,
                                        id,
                                        &label,
                                        plan.contention_clients,
                                        plan.warmup,
                                        plan.contention_len,
                                        m,
                                    ),
                                )
                                .await;
                            continue;
                        }
                        ContentionRun::V1(server) => server,
                    };
                    let what = match sys {
                        System::Redis => {
                            format!("contention, {human}, redis retry {} ms", delay.as_millis())
                        }
                        _ => format!("contention, {human}, {}", server.series),
                    };
                    if let Some(o) = self
                        .steps
                        .step(what, contention::run(server, id, &label, p(delay), m))
                        .await
                    {
                        let key = (label.clone(), o.series);
                        self.chart
                            .handover
                            .entry(key.clone())
                            .or_default()
                            .extend(&o.handover);
                        self.chart.waits.entry(key).or_default().extend(&o.waits);
                    }
                }
            }
            self.revive_monolock().await?;
        }
        Ok(())
    }

    /// Scenario 4, dead holder: SIGKILL and SIGSTOP at the short lease and TTL,
    /// and in `--full` Redis at a long TTL too.
    async fn dead(&mut self, order: [System; 2], m: &mut Metrics) -> Result<()> {
        let exe = &self.setup.exe;
        let lease = self.setup.plan.dead_lease;
        for sys in order {
            let Some(server) = self.servers.get(sys) else {
                continue;
            };
            let series = match sys {
                System::Redis => format!("redis-ttl{}", ttl_key(lease)),
                other => other.key().to_owned(),
            };
            for fault in [dead::Fault::Kill, dead::Fault::Stop] {
                let id = self.steps.id();
                let name = format!("bench/dead/{id}");
                if let Some(d) = self
                    .steps
                    .step(
                        format!("dead holder, SIG{}, {series}", fault.key().to_uppercase()),
                        dead::trial(server, exe, &name, fault, lease),
                    )
                    .await
                {
                    m.put(
                        &format!("dead.{}.{series}.handover_ms", fault.key()),
                        d.as_secs_f64() * 1e3,
                    );
                }
            }
        }
        if let (Some(ttl), Some(server)) = (self.setup.plan.long_ttl, self.servers.redis.as_ref()) {
            // The two long trials run side by side on different keys.
            let (kill_id, stop_id) = (self.steps.id(), self.steps.id());
            let (kill_name, stop_name) = (
                format!("bench/dead/{kill_id}"),
                format!("bench/dead/{stop_id}"),
            );
            let both = async {
                let (k, s) = tokio::join!(
                    dead::trial(server, exe, &kill_name, dead::Fault::Kill, ttl),
                    dead::trial(server, exe, &stop_name, dead::Fault::Stop, ttl)
                );
                anyhow::Ok((k?, s?))
            };
            if let Some((k, s)) = self
                .steps
                .step(
                    format!("dead holder, SIGKILL + SIGSTOP, redis-ttl{}", ttl_key(ttl)),
                    both,
                )
                .await
            {
                let series = format!("redis-ttl{}", ttl_key(ttl));
                m.put(
                    &format!("dead.kill.{series}.handover_ms"),
                    k.as_secs_f64() * 1e3,
                );
                m.put(
                    &format!("dead.stop.{series}.handover_ms"),
                    s.as_secs_f64() * 1e3,
                );
            }
        }
        self.revive_monolock().await?;
        self.revive_redis().await
    }

    /// Side by side with etcd and ZooKeeper: every row for every series
    /// whose server runs, the series in `order`'s direction (monolock's
    /// first when monolock goes first, the reverse otherwise).
    async fn peers(&mut self, order: [System; 2], m: &mut Metrics) {
        let servers = peers::Servers {
            mono: &self.servers.mono,
            redis: self.servers.redis.as_ref(),
            etcd: self.servers.etcd.as_ref(),
            zookeeper: self.servers.zookeeper.as_ref(),
            floor: self.servers.session_floor.as_ref(),
        };
        let mut series: Vec<Series> = Series::ALL
            .into_iter()
            .filter(|se| servers.of(*se).is_some())
            .collect();
        if order[0] != System::Monolock {
            series.reverse();
        }
        let s = &self.setup;
        let plan = &s.plan;
        for &clients in &plan.throughput_clients {
            for &se in &series {
                let Some(server) = servers.of(se) else {
                    continue;
                };
                let id = self.steps.id();
                self.steps
                    .step(
                        format!("side by side, {clients} client(s) cycling, {}", se.key()),
                        peers::throughput(
                            se,
                            server,
                            id,
                            clients,
                            plan.warmup,
                            plan.throughput_len,
                            m,
                        ),
                    )
                    .await;
            }
            put_vs_floor(
                m,
                &format!("peers.tp.c{clients}"),
                "server_cpu_us_per_cycle",
                Series::Floor.key(),
                series.iter().map(|se| se.key()),
                "cpu_vs_floor",
            );
        }
        for &clients in &plan.peer_contention_clients {
            for &se in series.iter().filter(|se| se.contends()) {
                let Some(server) = servers.of(se) else {
                    continue;
                };
                let id = self.steps.id();
                self.steps
                    .step(
                        format!("side by side, {clients} clients on one lock, {}", se.key()),
                        peers::contention(
                            se,
                            server,
                            id,
                            clients,
                            plan.warmup,
                            plan.contention_len,
                            m,
                        ),
                    )
                    .await;
            }
        }
        for &se in series.iter().filter(|se| se.contends()) {
            let Some(server) = servers.of(se) else {
                continue;
            };
            let id = self.steps.id();
            let name = format!("bench/peers-dead/{id}");
            let trial = async {
                let lease =
                    peers::effective_lease(server.system, server.addr, plan.dead_lease).await?;
                let handover =
                    dead::trial(server, &s.exe, &name, dead::Fault::Kill, plan.dead_lease).await?;
                anyhow::Ok((lease, handover))
            };
            if let Some((lease, handover)) = self
                .steps
                .step(
                    format!("side by side, SIGKILLed holder, {}", se.key()),
                    trial,
                )
                .await
            {
                let pre = format!("peers.dead.{}", se.key());
                m.put(&format!("{pre}.handover_ms"), handover.as_secs_f64() * 1e3);
                m.put(&format!("{pre}.lease_ms"), lease.as_secs_f64() * 1e3);
            }
        }
        for &se in series.iter().filter(|se| se.contends()) {
            let id = self.steps.id();
            let locks = plan.peer_locks;
            let step = async {
                let cpu = s.server_cpu;
                let fresh = match se.system() {
                    System::Monolock => {
                        let extra = ["--max-claims-per-session".into(), locks.to_string().into()];
                        Server::start_monolock_with(&s.mono_bin, cpu, &s.logs, &extra).await?
                    }
                    System::Redis => {
                        let bin = s.redis_bin.as_deref().context("no redis-server")?;
                        Server::start_redis(bin, cpu, &s.logs).await?
                    }
                    System::Etcd => {
                        let bin = s.etcd_bin.as_deref().context("no etcd")?;
                        Server::start_etcd(bin, cpu, &s.logs).await?
                    }
                    System::Zookeeper => {
                        let (java, jar) = s.zookeeper.as_ref().context("no ZooKeeper")?;
                        Server::start_zookeeper(java, jar, cpu, &s.logs).await?
                    }
                };
                peers::many_locks(se, &fresh, id, locks, m).await
            };
            self.steps
                .step(
                    format!(
                        "side by side, {locks} locks held by one session, {}",
                        se.key()
                    ),
                    step,
                )
                .await;
        }
    }

    /// Scenario 5, sessions at scale, each system on a fresh server of its own.
    async fn sessions(&mut self, order: [System; 2], m: &mut Metrics) {
        let s = &self.setup;
        for sys in order {
            let bin = match (sys, s.redis_bin.as_deref()) {
                (System::Monolock, _) => s.mono_bin.as_path(),
                (System::Redis, Some(bin)) if self.redis_ran => bin,
                _ => continue,
            };
            let id = self.steps.id();
            let params = s.plan.sessions;
            let sessions_step = async {
                let fresh = match sys {
                    System::Redis => Server::start_redis(bin, s.server_cpu, &s.logs).await?,
                    _ => Server::start_monolock(bin, s.server_cpu, &s.logs).await?,
                };
                sessions::run(&fresh, &s.exe, id, params, &s.logs, m).await
            };
            let what = match sys {
                System::Redis => format!(
                    "sessions calibration, {} idle Redis connections sending PING",
                    params.sessions
                ),
                _ => format!("sessions at scale, {} monolock sessions", params.sessions),
            };
            self.steps.step(what, sessions_step).await;
        }
    }

    /// Values and observers: each fan-out on a fresh server, its watches'
    /// memory when one client multiplexes them on another, etcd's watch
    /// of the same fan-out on a fresh etcd (when installed), then value
    /// replacement on one more monolock server.
    async fn observers(&mut self, m: &mut Metrics) {
        let s = &self.setup;
        let p = &s.plan.observers;
        for &observers in &p.fan_outs {
            let id = self.steps.id();
            let step = async {
                let fresh = Server::start_monolock(&s.mono_bin, s.server_cpu, &s.logs).await?;
                crate::observers::fan_out(&fresh, id, observers, p, m).await
            };
            let what = format!("values and observers, release to {observers} observer(s)");
            self.steps.step(what, step).await;
            if observers > 1 {
                let id = self.steps.id();
                let step = async {
                    let fresh = Server::start_monolock(&s.mono_bin, s.server_cpu, &s.logs).await?;
                    crate::observers::shared_watches(&fresh, id, observers, m).await
                };
                let what = format!("values and observers, {observers} watches on one client");
                self.steps.step(what, step).await;
            }
            if let Some(etcd) = &s.etcd_bin {
                let id = self.steps.id();
                let step = async {
                    let fresh = Server::start_etcd(etcd, s.server_cpu, &s.logs).await?;
                    crate::observers_etcd::fan_out(&fresh, id, observers, p, m).await
                };
                let what =
                    format!("values and observers, etcd: delete / put to {observers} watcher(s)");
                self.steps.step(what, step).await;
            }
        }
        let id = self.steps.id();
        let step = async {
            let fresh = Server::start_monolock(&s.mono_bin, s.server_cpu, &s.logs).await?;
            for &observers in &p.value_observers {
                crate::observers::value_replacement(&fresh, id, observers, p, m).await?;
            }
            anyhow::Ok(())
        };
        let what = format!(
            "values and observers, set_value in a loop with {:?} observers",
            p.value_observers
        );
        self.steps.step(what, step).await;
    }

    /// Restarts monolock if it died during a step (at most 3 times a run).
    async fn revive_monolock(&mut self) -> Result<()> {
        let s = &self.setup;
        revive(
            &mut self.servers.mono,
            &mut self.mono_restarts,
            &s.mono_bin,
            s.server_cpu,
            &s.logs,
        )
        .await
    }

    /// Restarts Redis if it died during a step (at most 3 times a run).
    async fn revive_redis(&mut self) -> Result<()> {
        let s = &self.setup;
        let Some(redis) = self.servers.redis.as_mut() else {
            return Ok(());
        };
        revive(
            redis,
            &mut self.redis_restarts,
            s.redis_bin.as_deref().unwrap_or(Path::new("redis-server")),
            s.server_cpu,
            &s.logs,
        )
        .await
    }

    /// Stops the servers; prints and writes the outputs. `Ok(false)` if a
    /// step failed or (smoke) a sanity check did not hold.
    fn finish(
        self,
        rounds: &[Metrics],
        meta: &serde_json::Value,
        started: Instant,
    ) -> Result<bool> {
        let Self {
            setup: s,
            servers,
            redis_ran,
            mut steps,
            mut chart,
            ..
        } = self;
        let peers_ran: Vec<Series> = if s.wants(Scenario::Peers) {
            let of = peers::Servers {
                mono: &servers.mono,
                redis: servers.redis.as_ref(),
                etcd: servers.etcd.as_ref(),
                zookeeper: servers.zookeeper.as_ref(),
                floor: servers.session_floor.as_ref(),
            };
            Series::ALL
                .into_iter()
                .filter(|se| of.of(*se).is_some())
                .collect()
        } else {
            Vec::new()
        };
        drop(servers);
        let plan = &s.plan;
        let summary = report::summarize(rounds);
        let variants = plan.contention_variants();
        let variant_labels: Vec<(String, String)> = variants
            .iter()
            .map(|(l, h, _)| (l.clone(), h.clone()))
            .collect();
        let ctx = TargetContext {
            contention: &variant_labels,
            dead_lease_ms: plan.dead_lease.as_secs_f64() * 1e3,
        };
        let elapsed = started.elapsed().as_secs_f64();
        if s.mode == Mode::Smoke {
            // The figures of the other scenarios are required when they all ran.
            // (The side-by-side and observers scenarios check their own.)
            let all_others = Scenario::value_variants()
                .iter()
                .filter(|sc| !matches!(sc, Scenario::Peers | Scenario::Observers))
                .all(|sc| s.wants(*sc));
            let others = if all_others {
                smoke_checks(&summary, plan, redis_ran)
            } else {
                Vec::new()
            };
            let problems = others
                .into_iter()
                .chain(peers::smoke_checks(&summary, plan, &peers_ran))
                .chain(if s.wants(Scenario::Observers) {
                    crate::observers::smoke_checks(&summary, &plan.observers)
                } else {
                    Vec::new()
                });
            for problem in problems {
                steps.errors.push(format!("sanity check: {problem}"));
            }
        }
        let md = summary_markdown(&summary, &ctx, plan, redis_ran, meta, &steps.errors);
        println!("\n{md}");
        println!("finished in {elapsed:.0} s; results in {}", s.out.display());

        let json = json!({
            "meta": meta,
            "plan": plan.describe().lines().collect::<Vec<_>>(),
            "elapsed_s": elapsed,
            "rounds": rounds.iter().map(Metrics::to_json).collect::<Vec<_>>(),
            "summary": report::summary_json(&summary),
            "errors": steps.errors,
        });
        std::fs::write(
            s.out.join("results.json"),
            serde_json::to_string_pretty(&json)?,
        )
        .context("write results.json")?;
        std::fs::write(s.out.join("summary.md"), &md).context("write summary.md")?;
        write_charts(&s.out, &summary, plan, &mut chart, &variants)?;

        if !steps.errors.is_empty() {
            eprintln!("{} step(s) failed:", steps.errors.len());
            for e in &steps.errors {
                eprintln!("  {e}");
            }
            return Ok(false);
        }
        Ok(true)
    }
}

/// Starts etcd and ZooKeeper where they are installed, with a note for
/// each that does not start.
async fn start_peers(setup: &mut Setup) -> (Option<Server>, Option<Server>) {
    let etcd = match &setup.etcd_bin {
        Some(bin) => match Server::start_etcd(bin, setup.server_cpu, &setup.logs).await {
            Ok(s) => Some(s),
            Err(e) => {
                setup.notes.push(format!("etcd not run: {e:#}"));
                None
            }
        },
        None => None,
    };
    let zookeeper = match &setup.zookeeper {
        Some((java, jar)) => {
            match Server::start_zookeeper(java, jar, setup.server_cpu, &setup.logs).await {
                Ok(s) => Some(s),
                Err(e) => {
                    setup.notes.push(format!("ZooKeeper not run: {e:#}"));
                    None
                }
            }
        }
        None => None,
    };
    (etcd, zookeeper)
}

/// The series of the `--baseline-bin` server's figures.
const BASE: &str = "monolock_base";

/// The servers under test.
struct UnderTest {
    mono: Server,
    /// The `--baseline-bin` build, if any: its v1 figures beside `mono`'s.
    base: Option<Server>,
    redis: Option<Server>,
    /// The connection floor (when throughput is run).
    floor: Option<Server>,
    /// etcd and ZooKeeper (when the side-by-side scenario is run and they
    /// are installed).
    etcd: Option<Server>,
    zookeeper: Option<Server>,
    /// The session floor (when the side-by-side scenario is run).
    session_floor: Option<Server>,
}

impl UnderTest {
    /// The server of `sys`, if it runs.
    fn get(&self, sys: System) -> Option<&Server> {
        match sys {
            System::Monolock => Some(&self.mono),
            System::Redis => self.redis.as_ref(),
            System::Etcd => self.etcd.as_ref(),
            System::Zookeeper => self.zookeeper.as_ref(),
        }
    }

    /// The monolock servers whose v1 figures are measured: this build,
    /// then the baseline build if any.
    fn monolocks(&self) -> Vec<&Server> {
        std::iter::once(&self.mono).chain(&self.base).collect()
    }

    /// Every server of a v1 scenario in the round's order: the systems in
    /// `order`, and the monolock builds in that order too (this build
    /// first when monolock goes first, the baseline first otherwise).
    fn in_order(&self, order: [System; 2]) -> Vec<&Server> {
        let mut servers = Vec::new();
        for sys in order {
            match sys {
                System::Monolock => {
                    let mut monolocks = self.monolocks();
                    if order[0] != System::Monolock {
                        monolocks.reverse();
                    }
                    servers.extend(monolocks);
                }
                System::Redis => servers.extend(&self.redis),
                System::Etcd | System::Zookeeper => {}
            }
        }
        servers
    }
}

/// One monolock contention run.
enum ContentionRun<'a> {
    /// Protocol v1 clients on this server (monolock, its baseline, or Redis).
    V1(&'a Server),
    /// Protocol v2 sessions on this server.
    V2(&'a Server),
}

/// Records each series' `figure` under `pre` as a multiple of the floor
/// series' as `{pre}.{series}.{ratio}`; nothing where the floor has no
/// positive figure.
fn put_vs_floor<'k>(
    m: &mut Metrics,
    pre: &str,
    figure: &str,
    floor: &str,
    series: impl IntoIterator<Item = &'k str>,
    ratio: &str,
) {
    let of = |key: &str| m.get(&format!("{pre}.{key}.{figure}"));
    let Some(floor) = of(floor).filter(|f| *f > 0.0) else {
        return;
    };
    let ratios: Vec<(&str, f64)> = series
        .into_iter()
        .filter_map(|key| of(key).map(|v| (key, v / floor)))
        .collect();
    for (key, value) in ratios {
        m.put(&format!("{pre}.{key}.{ratio}"), value);
    }
}

/// Each round's paired ratios, recorded beside its figures: for every
/// figure of `<scenario>.monolock_v2.<figure>` and
/// `<scenario>.monolock_base.<figure>` with a `<scenario>.monolock.<figure>`
/// in the same round, `<scenario>.v2_over_v1.<figure>` and
/// `<scenario>.over_base.<figure>` (this build over the baseline). Their
/// medians over rounds compare the two in pairs measured back to back,
/// which shares out the machine's drift between rounds.
fn paired_ratios(m: &mut Metrics) {
    let mut ratios = Vec::new();
    for (key, value) in &m.0 {
        for (series, ratio) in [
            (".monolock_v2.", ".v2_over_v1."),
            (".monolock_base.", ".over_base."),
        ] {
            let Some(at) = key.find(series) else {
                continue;
            };
            let v1_key = format!("{}.monolock.{}", &key[..at], &key[at + series.len()..]);
            let Some(v1) = m.get(&v1_key) else {
                continue;
            };
            let ratio_key = format!("{}{ratio}{}", &key[..at], &key[at + series.len()..]);
            let (num, den) = if series == ".monolock_v2." {
                (*value, v1)
            } else {
                (v1, *value)
            };
            if den > 0.0 && num.is_finite() {
                ratios.push((ratio_key, num / den));
            }
        }
    }
    for (key, ratio) in ratios {
        m.put(&key, ratio);
    }
}

/// Runs a benchmark; `Ok(false)` if any step failed or (smoke) a sanity
/// check did not hold.
pub async fn run(args: RunArgs, setup_notes: Vec<String>) -> Result<bool> {
    let setup = Setup::new(&args, setup_notes)?;
    let started = Instant::now();
    let mut bench = Bench::start(setup).await?;
    let meta = bench.meta(&args);
    eprintln!(
        "monolock-bench --{}: {}",
        bench.setup.mode.key(),
        serde_json::to_string(&meta["machine"])?
    );
    eprint!("{}", bench.setup.plan.describe());
    for n in &bench.setup.notes {
        eprintln!("note: {n}");
    }
    let mut rounds: Vec<Metrics> = Vec::new();
    for round in 0..bench.setup.plan.rounds {
        rounds.push(bench.round(round).await?);
    }
    bench.finish(&rounds, &meta, started)
}

/// Restarts a server that died during a step (at most a few times per run).
async fn revive(
    server: &mut Server,
    restarts: &mut u32,
    bin: &Path,
    cpu: Option<usize>,
    logs: &Path,
) -> Result<()> {
    if server.check_alive().is_ok() {
        return Ok(());
    }
    *restarts += 1;
    if *restarts > 3 {
        bail!("{} died more than 3 times; giving up", server.system.key());
    }
    eprintln!("  {} died; restarting it", server.system.key());
    *server = match server.system {
        System::Monolock => Server::start_monolock(bin, cpu, logs).await?,
        System::Redis => Server::start_redis(bin, cpu, logs).await?,
        System::Etcd | System::Zookeeper => bail!("{} died", server.series),
    };
    Ok(())
}

/// `1s`, `30s`, `300ms`: the TTL part of a Redis dead-holder series name.
fn ttl_key(ttl: Duration) -> String {
    let ms = ttl.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paired_ratios_set_v2_and_this_build_against_v1_of_the_same_round() {
        let mut m = Metrics::default();
        m.put("contention.w0.monolock.acq_per_s", 100.0);
        m.put("contention.w0.monolock_v2.acq_per_s", 125.0);
        m.put("contention.w0.monolock_base.acq_per_s", 80.0);
        m.put("latency.monolock_base.cycle_p50_us", 50.0);
        m.put("throughput.c1.monolock_v2.cycles_per_s", 10.0);
        m.put("throughput.c1.monolock.cycles_per_s", 0.0);
        paired_ratios(&mut m);
        assert_eq!(m.get("contention.w0.v2_over_v1.acq_per_s"), Some(1.25));
        assert_eq!(m.get("contention.w0.over_base.acq_per_s"), Some(1.25));
        // No v1 figure to pair with, or a zero one: no ratio.
        assert_eq!(m.get("latency.over_base.cycle_p50_us"), None);
        assert_eq!(m.get("throughput.c1.v2_over_v1.cycles_per_s"), None);
    }
}
