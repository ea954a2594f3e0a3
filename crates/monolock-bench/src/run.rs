//! A whole run: the plan of each mode, the servers, the interleaved rounds
//! (monolock and Redis alternate which goes first: A B, B A, ...), and the
//! outputs.

use std::{
    fmt::Write as _,
    future::Future,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::{
    RunArgs, Scenario, charts, contention, cycles, dead, floor,
    report::{self, Metrics, Summary, TargetContext, fmt_num},
    servers::{self, Server, System},
    sessions,
    stats::Samples,
    sys,
};

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
    fn key(self) -> &'static str {
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
    rounds: usize,
    warmup: Duration,
    latency_len: Duration,
    throughput_clients: Vec<usize>,
    throughput_len: Duration,
    contention_clients: usize,
    contention_len: Duration,
    /// Longer windows when work is held under the lock, so every client
    /// gets enough turns that max/min is not a rounding artefact.
    contention_work_len: Duration,
    works: Vec<Duration>,
    redis_delays: Vec<Duration>,
    dead_lease: Duration,
    long_ttl: Option<Duration>,
    sessions: sessions::Params,
}

const MS: fn(u64) -> Duration = Duration::from_millis;

impl Plan {
    fn for_mode(mode: Mode, rounds: Option<usize>) -> Self {
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

    fn contention_variants(&self) -> Vec<(String, String, Duration)> {
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

    fn describe(&self) -> String {
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
            "- throughput: {:?} clients on distinct names, {} s windows",
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

/// Runs a benchmark; `Ok(false)` if any step failed or (smoke) a sanity
/// check did not hold.
pub async fn run(args: RunArgs, setup_notes: Vec<String>) -> Result<bool> {
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
    let pin = cpus(&args);
    let server_cpu = pin.map(|(s, _)| s);
    let mut notes: Vec<String> = setup_notes;
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

    let started = Instant::now();
    let mut mono = Server::start_monolock(&mono_bin, server_cpu, &logs).await?;
    let mut redis = match &redis_bin {
        Some(bin) => match Server::start_redis(bin, server_cpu, &logs).await {
            Ok(s) => Some(s),
            Err(e) => {
                notes.push(format!("Redis not run: {e:#}"));
                None
            }
        },
        None => None,
    };
    let redis_ran = redis.is_some();
    let meta = json!({
        "mode": mode.key(),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "started_unix": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        "machine": machine(),
        "pinning": match pin { Some((s, c)) => json!({"server_cpu": s, "client_cpu": c}), None => json!(null) },
        "scheduling": if args.realtime { "SCHED_FIFO 10".to_owned() } else { format!("nice {}", args.nice) },
        "monolock_bin": mono_bin.display().to_string(),
        "monolock_version": command_line(&mono_bin, "--version"),
        "redis_version": redis_bin.as_deref().and_then(servers::redis_version),
        "notes": notes,
    });
    eprintln!(
        "monolock-bench --{}: {}",
        mode.key(),
        serde_json::to_string(&meta["machine"])?
    );
    eprint!("{}", plan.describe());
    for n in &notes {
        eprintln!("note: {n}");
    }

    let variants = plan.contention_variants();
    let want = |s: Scenario| args.only.is_empty() || args.only.contains(&s);
    let mut steps = Steps {
        errors: Vec::new(),
        next_id: u64::from(std::process::id()) << 20,
    };
    let mut rounds: Vec<Metrics> = Vec::new();
    let mut chart = ChartData::default();
    let (mut mono_restarts, mut redis_restarts) = (0u32, 0u32);
    for round in 0..plan.rounds {
        eprintln!("round {}/{}", round + 1, plan.rounds);
        let mut m = Metrics::default();
        let order = if round % 2 == 0 {
            [System::Monolock, System::Redis]
        } else {
            [System::Redis, System::Monolock]
        };
        // The machine's floor, for reading the latencies against.
        if want(Scenario::Latency) || want(Scenario::Contention) {
            steps
                .step(
                    "machine floor, 1-byte echo round trip".to_owned(),
                    floor::round_trip(&exe, server_cpu, plan.warmup, plan.latency_len, &mut m),
                )
                .await;
        }
        // 1. Uncontended latency.
        for sys in order.into_iter().filter(|_| want(Scenario::Latency)) {
            let Some(server) = pick(sys, &mono, &redis) else {
                continue;
            };
            let id = steps.id();
            if let Some(samples) = steps
                .step(
                    format!("latency, {}", sys.key()),
                    cycles::latency(server, id, plan.warmup, plan.latency_len, &mut m),
                )
                .await
            {
                match sys {
                    System::Monolock => chart.latency_mono.extend(&samples),
                    System::Redis => chart.latency_redis.extend(&samples),
                }
            }
        }
        // 2. Uncontended throughput.
        for &clients in plan
            .throughput_clients
            .iter()
            .filter(|_| want(Scenario::Throughput))
        {
            for sys in order {
                let Some(server) = pick(sys, &mono, &redis) else {
                    continue;
                };
                let id = steps.id();
                steps
                    .step(
                        format!("throughput, {clients} client(s), {}", sys.key()),
                        cycles::throughput(
                            server,
                            id,
                            clients,
                            plan.warmup,
                            plan.throughput_len,
                            &mut m,
                        ),
                    )
                    .await;
            }
            revive(&mut mono, &mut mono_restarts, &mono_bin, server_cpu, &logs).await?;
        }
        // 3. Contention.
        for (label, human, work) in variants.iter().filter(|_| want(Scenario::Contention)) {
            for sys in order {
                let Some(server) = pick(sys, &mono, &redis) else {
                    continue;
                };
                let delays: Vec<Duration> = match sys {
                    System::Monolock => vec![Duration::ZERO],
                    System::Redis => plan.redis_delays.clone(),
                };
                for delay in delays {
                    let id = steps.id();
                    let p = contention::Params {
                        clients: plan.contention_clients,
                        work: *work,
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
                    if let Some(o) = steps
                        .step(what, contention::run(server, id, label, p, &mut m))
                        .await
                    {
                        let key = (label.clone(), o.series);
                        chart
                            .handover
                            .entry(key.clone())
                            .or_default()
                            .extend(&o.handover);
                        chart.waits.entry(key).or_default().extend(&o.waits);
                    }
                }
            }
            revive(&mut mono, &mut mono_restarts, &mono_bin, server_cpu, &logs).await?;
        }
        // 4. Dead holder.
        for sys in order.into_iter().filter(|_| want(Scenario::Dead)) {
            let Some(server) = pick(sys, &mono, &redis) else {
                continue;
            };
            let series = match sys {
                System::Monolock => "monolock".to_owned(),
                System::Redis => format!("redis-ttl{}", ttl_key(plan.dead_lease)),
            };
            for fault in [dead::Fault::Kill, dead::Fault::Stop] {
                let id = steps.id();
                let name = format!("bench/dead/{id}");
                if let Some(d) = steps
                    .step(
                        format!("dead holder, SIG{}, {series}", fault.key().to_uppercase()),
                        dead::trial(server, &exe, &name, fault, plan.dead_lease),
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
        if let (Some(ttl), Some(server)) = (
            plan.long_ttl.filter(|_| want(Scenario::Dead)),
            redis.as_ref(),
        ) {
            // The two long trials run side by side on different keys.
            let (kill_id, stop_id) = (steps.id(), steps.id());
            let (kill_name, stop_name) = (
                format!("bench/dead/{kill_id}"),
                format!("bench/dead/{stop_id}"),
            );
            let both = async {
                let (k, s) = tokio::join!(
                    dead::trial(server, &exe, &kill_name, dead::Fault::Kill, ttl),
                    dead::trial(server, &exe, &stop_name, dead::Fault::Stop, ttl)
                );
                anyhow::Ok((k?, s?))
            };
            if let Some((k, s)) = steps
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
        revive(&mut mono, &mut mono_restarts, &mono_bin, server_cpu, &logs).await?;
        if let Some(r) = redis.as_mut() {
            revive(
                r,
                &mut redis_restarts,
                redis_bin.as_deref().unwrap_or(Path::new("redis-server")),
                server_cpu,
                &logs,
            )
            .await?;
        }
        // 5. Sessions at scale, each system on a fresh server of its own.
        for sys in order.into_iter().filter(|_| want(Scenario::Sessions)) {
            let bin = match (sys, redis_bin.as_deref()) {
                (System::Monolock, _) => mono_bin.as_path(),
                (System::Redis, Some(bin)) if redis_ran => bin,
                (System::Redis, _) => continue,
            };
            let id = steps.id();
            let sessions_step = async {
                let fresh = match sys {
                    System::Monolock => Server::start_monolock(bin, server_cpu, &logs).await?,
                    System::Redis => Server::start_redis(bin, server_cpu, &logs).await?,
                };
                sessions::run(&fresh, &exe, id, plan.sessions, &logs, &mut m).await
            };
            let what = match sys {
                System::Monolock => format!(
                    "sessions at scale, {} monolock sessions",
                    plan.sessions.sessions
                ),
                System::Redis => format!(
                    "sessions calibration, {} idle Redis connections sending PING",
                    plan.sessions.sessions
                ),
            };
            steps.step(what, sessions_step).await;
        }
        rounds.push(m);
    }
    drop(mono);
    drop(redis);

    // Outputs.
    let summary = report::summarize(&rounds);
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
    let results = report::results_table(&summary, &ctx, &plan.throughput_clients, redis_ran);
    let delays = report::redis_delays_table(&summary, &ctx);
    let targets_md = report::targets_table(&targets);
    let elapsed = started.elapsed().as_secs_f64();

    if mode == Mode::Smoke {
        for problem in smoke_checks(&summary, &plan, redis_ran) {
            steps.errors.push(format!("sanity check: {problem}"));
        }
    }

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
    let _ = writeln!(md, "## Targets\n\n{targets_md}");
    if let Some(text) = report::extrapolation(&summary, plan.sessions.lease) {
        let _ = writeln!(md, "## Sessions: extrapolation to 1M\n\n{text}");
    }
    let _ = writeln!(md, "## Plan\n\n{}", plan.describe());
    let meta_notes = meta["notes"].as_array().cloned().unwrap_or_default();
    if !meta_notes.is_empty() || !steps.errors.is_empty() {
        let _ = writeln!(md, "## Notes\n");
        for n in meta_notes.iter().filter_map(|n| n.as_str()) {
            let _ = writeln!(md, "- {n}");
        }
        for e in &steps.errors {
            let _ = writeln!(md, "- error: {e}");
        }
    }
    println!("\n{md}");
    println!("finished in {elapsed:.0} s; results in {}", out.display());

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
        out.join("results.json"),
        serde_json::to_string_pretty(&json)?,
    )
    .context("write results.json")?;
    std::fs::write(out.join("summary.md"), &md).context("write summary.md")?;
    write_charts(&out, &summary, &plan, &mut chart, &variants)?;

    if !steps.errors.is_empty() {
        eprintln!("{} step(s) failed:", steps.errors.len());
        for e in &steps.errors {
            eprintln!("  {e}");
        }
        return Ok(false);
    }
    Ok(true)
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

fn pick<'a>(sys: System, mono: &'a Server, redis: &'a Option<Server>) -> Option<&'a Server> {
    match sys {
        System::Monolock => Some(mono),
        System::Redis => redis.as_ref(),
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
