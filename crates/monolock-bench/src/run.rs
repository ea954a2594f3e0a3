//! A whole run, in three parts: setup (the plan of the mode, the binaries,
//! the servers), the rounds (each runs every selected scenario once,
//! monolock and Redis alternating which goes first: A B, B A, ...), and
//! the outputs (tables on stdout, `results.json`, `summary.md`, charts).
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
//!    `row_specs`), its targets if it has any (`target_specs`), and the
//!    figures `--smoke` must produce (`smoke_checks` here).

use std::{
    fmt::Write as _,
    future::Future,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use serde_json::json;

use crate::{
    RunArgs, Scenario, charts, contention, cycles, dead, floor,
    plan::{Mode, Plan},
    report::{self, Metrics, Summary, TargetContext},
    servers::{self, Server, System},
    sessions,
    stats::Samples,
    sys,
};

/// Pins this (still single-threaded) process to the client CPU and sets
/// its nice value, so the runtime and every process it starts inherit both.
/// Returns what could not be done, for the report.
pub fn prepare_process(args: &RunArgs) -> Vec<String> {
    let mut notes = Vec::new();
    if !args.no_pin && cpus(args).is_none() {
        notes.push(format!(
            "not pinned: needs 2+ CPUs and distinct --server-cpu/--client-cpu below {}",
            sys::online_cpus()
        ));
    }
    if let Some((_, client)) = cpus(args)
        && let Err(e) = sys::pin_current_thread(client)
    {
        notes.push(format!(
            "cannot pin the load generator to CPU {client}: {e}"
        ));
    }
    if args.realtime {
        if let Err(e) = sys::set_realtime(10) {
            notes.push(format!(
                "cannot switch to SCHED_FIFO: {e}; running at the default priority"
            ));
        }
    } else if args.nice != 0
        && let Err(e) = sys::set_nice(args.nice.clamp(-20, 19))
    {
        notes.push(format!(
            "cannot set nice {}: {e}; running at the default priority",
            args.nice
        ));
    }
    notes
}

/// (server CPU, client CPU) if pinning applies.
fn cpus(args: &RunArgs) -> Option<(usize, usize)> {
    let n = sys::online_cpus();
    (!args.no_pin
        && n >= 2
        && args.server_cpu < n
        && args.client_cpu < n
        && args.server_cpu != args.client_cpu)
        .then_some((args.server_cpu, args.client_cpu))
}

fn machine() -> serde_json::Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_else(|| "unknown".to_owned());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    json!({"nproc": sys::online_cpus(), "cpu_model": model, "kernel": kernel, "loadavg_at_start": load})
}

fn command_line(bin: &Path, arg: &str) -> Option<String> {
    let out = Command::new(bin).arg(arg).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .next()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
}

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

/// Samples kept for the charts, pooled over rounds.
#[derive(Default)]
struct ChartData {
    latency_mono: Samples,
    latency_redis: Samples,
    /// (contention label, series) -> handovers
    handover: std::collections::BTreeMap<(String, String), Samples>,
    /// (contention label, series) -> attempt-to-grant waits
    waits: std::collections::BTreeMap<(String, String), Samples>,
}

/// What a run needs before its first server starts: the plan, where
/// things are, and the notes for the report.
struct Setup {
    mode: Mode,
    plan: Plan,
    /// Scenarios to run (all by default).
    only: Vec<Scenario>,
    out: PathBuf,
    logs: PathBuf,
    /// This binary (the helpers' executable).
    exe: PathBuf,
    mono_bin: PathBuf,
    redis_bin: Option<PathBuf>,
    server_cpu: Option<usize>,
    notes: Vec<String>,
}

impl Setup {
    /// Reads the mode and the binaries from `args`, creates the output
    /// directories, and notes what will not run.
    fn new(args: &RunArgs, setup_notes: Vec<String>) -> Result<Self> {
        let mode = if args.full {
            Mode::Full
        } else if args.quick {
            Mode::Quick
        } else {
            Mode::Smoke
        };
        let plan = Plan::for_mode(mode, args.rounds);
        let out = args
            .out
            .clone()
            .unwrap_or_else(|| PathBuf::from("target/monolock-bench").join(mode.key()));
        // Server logs stay out of the results directory (which may be docs/).
        let logs = args
            .logs
            .clone()
            .unwrap_or_else(|| PathBuf::from("target/monolock-bench/logs"));
        for dir in [&out, &logs] {
            std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        }
        let exe = std::env::current_exe().context("locate this binary")?;
        let mono_bin = match &args.monolock_bin {
            Some(p) => p.clone(),
            None => exe
                .parent()
                .map(|d| d.join("monolock"))
                .context("this binary has no directory")?,
        };
        if !mono_bin.is_file() {
            bail!(
                "no monolock binary at {}: build it first (`cargo build -p monolock` with the same profile) or pass --monolock-bin PATH",
                mono_bin.display()
            );
        }
        let mut notes = setup_notes;
        if !args.only.is_empty() {
            notes.push(format!("only these scenarios were run: {:?}", args.only));
        }
        let redis_bin = if args.no_redis {
            notes.push("Redis not run: --no-redis".to_owned());
            None
        } else {
            match args
                .redis_bin
                .clone()
                .or_else(|| servers::find_on_path("redis-server"))
            {
                Some(p) if p.is_file() => Some(p),
                _ => {
                    notes.push(
                        "Redis not run: redis-server is not installed (`apt-get update && apt-get install -y redis-server`)"
                            .to_owned(),
                    );
                    None
                }
            }
        };
        if plan.long_ttl.is_none() {
            notes.push(
                "Redis TTL 30 s dead-holder trials run only in --full (30 s per trial)".to_owned(),
            );
        }
        Ok(Self {
            mode,
            plan,
            only: args.only.clone(),
            out,
            logs,
            exe,
            mono_bin,
            redis_bin,
            server_cpu: cpus(args).map(|(s, _)| s),
            notes,
        })
    }

    fn wants(&self, scenario: Scenario) -> bool {
        self.only.is_empty() || self.only.contains(&scenario)
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
            servers: UnderTest { mono, redis, floor },
            setup,
            steps: Steps {
                errors: Vec::new(),
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
            "redis_version": s.redis_bin.as_deref().and_then(servers::redis_version),
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
        if self.setup.wants(Scenario::Latency) || self.setup.wants(Scenario::Contention) {
            self.echo_floor(&mut m).await;
        }
        for &scenario in Scenario::value_variants() {
            if self.setup.wants(scenario) {
                self.scenario(scenario, order, &mut m).await?;
            }
        }
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
            Scenario::Dead => self.dead(order, m).await?,
            Scenario::Sessions => self.sessions(order, m).await,
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
        for sys in order {
            let Some(server) = self.servers.get(sys) else {
                continue;
            };
            let id = self.steps.id();
            if let Some(samples) = self
                .steps
                .step(
                    format!("latency, {}", sys.key()),
                    cycles::latency(server, id, plan.warmup, plan.latency_len, m),
                )
                .await
            {
                match sys {
                    System::Monolock => self.chart.latency_mono.extend(&samples),
                    System::Redis => self.chart.latency_redis.extend(&samples),
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
            let systems = order.into_iter().filter_map(|sys| self.servers.get(sys));
            for server in systems.chain(floor) {
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
            let pre = format!("throughput.c{clients}");
            let cpu = |series: &str| m.get(&format!("{pre}.{series}.server_cpu_ms_per_1k"));
            let ratios: Vec<(System, f64)> = match cpu("floor").filter(|f| *f > 0.0) {
                Some(floor) => order
                    .into_iter()
                    .filter_map(|sys| cpu(sys.key()).map(|c| (sys, c / floor)))
                    .collect(),
                None => Vec::new(),
            };
            for (sys, ratio) in ratios {
                m.put(&format!("{pre}.{}.server_cpu_vs_floor", sys.key()), ratio);
            }
            self.revive_monolock().await?;
        }
        Ok(())
    }

    /// Scenario 3, contention: every variant, monolock and every Redis retry delay.
    async fn contention(&mut self, order: [System; 2], m: &mut Metrics) -> Result<()> {
        for (label, human, work) in self.setup.plan.contention_variants() {
            for sys in order {
                let plan = &self.setup.plan;
                let Some(server) = self.servers.get(sys) else {
                    continue;
                };
                let delays: Vec<Duration> = match sys {
                    System::Monolock => vec![Duration::ZERO],
                    System::Redis => plan.redis_delays.clone(),
                };
                for delay in delays {
                    let id = self.steps.id();
                    let p = contention::Params {
                        clients: plan.contention_clients,
                        work,
                        retry_delay: delay,
                        warmup: plan.warmup,
                        length: if work.is_zero() {
                            plan.contention_len
                        } else {
                            plan.contention_work_len
                        },
                    };
                    let what = match sys {
                        System::Monolock => format!("contention, {human}, monolock"),
                        System::Redis => {
                            format!("contention, {human}, redis retry {} ms", delay.as_millis())
                        }
                    };
                    if let Some(o) = self
                        .steps
                        .step(what, contention::run(server, id, &label, p, m))
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
                System::Monolock => "monolock".to_owned(),
                System::Redis => format!("redis-ttl{}", ttl_key(lease)),
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

    /// Scenario 5, sessions at scale, each system on a fresh server of its own.
    async fn sessions(&mut self, order: [System; 2], m: &mut Metrics) {
        let s = &self.setup;
        for sys in order {
            let bin = match (sys, s.redis_bin.as_deref()) {
                (System::Monolock, _) => s.mono_bin.as_path(),
                (System::Redis, Some(bin)) if self.redis_ran => bin,
                (System::Redis, _) => continue,
            };
            let id = self.steps.id();
            let params = s.plan.sessions;
            let sessions_step = async {
                let fresh = match sys {
                    System::Monolock => Server::start_monolock(bin, s.server_cpu, &s.logs).await?,
                    System::Redis => Server::start_redis(bin, s.server_cpu, &s.logs).await?,
                };
                sessions::run(&fresh, &s.exe, id, params, &s.logs, m).await
            };
            let what = match sys {
                System::Monolock => {
                    format!("sessions at scale, {} monolock sessions", params.sessions)
                }
                System::Redis => format!(
                    "sessions calibration, {} idle Redis connections sending PING",
                    params.sessions
                ),
            };
            self.steps.step(what, sessions_step).await;
        }
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
            sessions: plan.sessions.sessions,
        };
        let targets = report::evaluate_targets(&summary, &ctx);
        let elapsed = started.elapsed().as_secs_f64();
        if s.mode == Mode::Smoke {
            for problem in smoke_checks(&summary, plan, redis_ran) {
                steps.errors.push(format!("sanity check: {problem}"));
            }
        }
        let md = summary_markdown(
            &summary,
            &ctx,
            plan,
            redis_ran,
            &targets,
            meta,
            &steps.errors,
        );
        println!("\n{md}");
        println!("finished in {elapsed:.0} s; results in {}", s.out.display());

        let json = json!({
            "meta": meta,
            "plan": plan.describe().lines().collect::<Vec<_>>(),
            "elapsed_s": elapsed,
            "rounds": rounds.iter().map(Metrics::to_json).collect::<Vec<_>>(),
            "summary": report::summary_json(&summary),
            "targets": targets.iter().map(report::TargetResult::to_json).collect::<Vec<_>>(),
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

/// The servers under test.
struct UnderTest {
    mono: Server,
    redis: Option<Server>,
    /// The connection floor (when throughput is run).
    floor: Option<Server>,
}

impl UnderTest {
    /// The server of `sys`, if it runs.
    fn get(&self, sys: System) -> Option<&Server> {
        match sys {
            System::Monolock => Some(&self.mono),
            System::Redis => self.redis.as_ref(),
        }
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

/// The markdown summary: results, Redis delays, targets, extrapolation,
/// plan, notes.
fn summary_markdown(
    summary: &Summary,
    ctx: &TargetContext<'_>,
    plan: &Plan,
    redis_ran: bool,
    targets: &[report::TargetResult],
    meta: &serde_json::Value,
    errors: &[String],
) -> String {
    let results = report::results_table(summary, ctx, &plan.throughput_clients, redis_ran);
    let delays = report::redis_delays_table(summary, ctx);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "## Results ({} rounds; median [min–max])\n",
        plan.rounds
    );
    let _ = writeln!(md, "{results}");
    if !delays.is_empty() {
        let _ = writeln!(md, "### Redis, every retry delay\n\n{delays}");
    }
    let _ = writeln!(md, "## Targets\n\n{}", report::targets_table(targets));
    if let Some(text) = report::extrapolation(summary, plan.sessions.lease) {
        let _ = writeln!(md, "## Sessions: extrapolation to 1M\n\n{text}");
    }
    let _ = writeln!(md, "## Plan\n\n{}", plan.describe());
    let meta_notes = meta["notes"].as_array().cloned().unwrap_or_default();
    if !meta_notes.is_empty() || !errors.is_empty() {
        let _ = writeln!(md, "## Notes\n");
        for n in meta_notes.iter().filter_map(|n| n.as_str()) {
            let _ = writeln!(md, "- {n}");
        }
        for e in errors {
            let _ = writeln!(md, "- error: {e}");
        }
    }
    md
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

fn write_charts(
    out: &Path,
    summary: &Summary,
    plan: &Plan,
    data: &mut ChartData,
    variants: &[(String, String, Duration)],
) -> Result<()> {
    charts::latency_ccdf(
        &out.join("latency.svg"),
        "Uncontended lock cycle latency (1 client)",
        "lock cycle latency (log scale)",
        vec![
            charts::Series {
                label: "monolock: connect + ACQUIRE + ACQUIRED + close".into(),
                samples: &mut data.latency_mono,
                monolock: true,
                light: false,
            },
            charts::Series {
                label: "Redis: SET NX PX + EVALSHA release".into(),
                samples: &mut data.latency_redis,
                monolock: false,
                light: false,
            },
        ],
    )?;
    for (file, title, x_desc, figure, map) in [
        (
            "handover.svg",
            format!(
                "Handover: release → grant of another client, {} clients on one lock",
                plan.contention_clients
            ),
            "handover latency (log scale)",
            "handover_p99_us",
            &mut data.handover,
        ),
        (
            "wait.svg",
            format!(
                "Wait: attempt → grant, {} clients on one lock",
                plan.contention_clients
            ),
            "time from asking to holding (log scale)",
            "worst_wait_ms",
            &mut data.waits,
        ),
    ] {
        // Per variant: monolock, and the Redis retry delay best at `figure`.
        let mut pulled: Vec<(String, bool, bool, Samples)> = Vec::new();
        for (i, (label, human, _)) in variants.iter().enumerate() {
            let light = i > 0;
            if let Some(s) = map.remove(&(label.clone(), "monolock".to_owned())) {
                pulled.push((format!("monolock, {human}"), true, light, s));
            }
            if let Some((series, _)) = report::redis_best(summary, label, figure, false)
                && let Some(s) = map.remove(&(label.clone(), series.clone()))
            {
                let delay = series.trim_start_matches("redis-d");
                pulled.push((format!("Redis retry {delay} ms, {human}"), false, light, s));
            }
        }
        charts::latency_ccdf(
            &out.join(file),
            &title,
            x_desc,
            pulled
                .iter_mut()
                .map(|(label, monolock, light, samples)| charts::Series {
                    label: label.clone(),
                    samples,
                    monolock: *monolock,
                    light: *light,
                })
                .collect(),
        )?;
    }
    charts::throughput(
        &out.join("throughput.svg"),
        summary,
        &plan.throughput_clients,
    )?;
    Ok(())
}

/// Smoke mode: the figures every path must have produced.
fn smoke_checks(s: &Summary, plan: &Plan, redis_ran: bool) -> Vec<String> {
    let mut problems = Vec::new();
    let positive = |key: &str, problems: &mut Vec<String>| match s.get(key) {
        Some(sp) if sp.median > 0.0 && sp.median.is_finite() => {}
        Some(sp) => problems.push(format!("{key} = {}", sp.median)),
        None => problems.push(format!("{key} missing")),
    };
    positive("floor.rtt_p99_us", &mut problems);
    for c in &plan.throughput_clients {
        positive(
            &format!("throughput.c{c}.floor.cycles_per_s"),
            &mut problems,
        );
    }
    let mut systems = vec!["monolock"];
    if redis_ran {
        systems.push("redis");
    }
    for sys in &systems {
        positive(&format!("latency.{sys}.cycle_p50_us"), &mut problems);
        for c in &plan.throughput_clients {
            positive(
                &format!("throughput.c{c}.{sys}.cycles_per_s"),
                &mut problems,
            );
        }
    }
    for (label, _, _) in plan.contention_variants() {
        positive(
            &format!("contention.{label}.monolock.acq_per_s"),
            &mut problems,
        );
        positive(
            &format!("contention.{label}.monolock.handover_p50_us"),
            &mut problems,
        );
        positive(
            &format!("contention.{label}.monolock.fairness"),
            &mut problems,
        );
        if redis_ran {
            for d in &plan.redis_delays {
                positive(
                    &format!("contention.{label}.redis-d{}.acq_per_s", d.as_millis()),
                    &mut problems,
                );
            }
        }
    }
    positive("dead.kill.monolock.handover_ms", &mut problems);
    positive("dead.stop.monolock.handover_ms", &mut problems);
    match s.get("sessions.monolock.sessions") {
        Some(sp) if sp.median as usize == plan.sessions.sessions => {}
        other => problems.push(format!(
            "sessions: {} of {} opened",
            other.map_or(0.0, |sp| sp.median),
            plan.sessions.sessions
        )),
    }
    positive("sessions.monolock.probe_p99_us", &mut problems);
    problems
}
