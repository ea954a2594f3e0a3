//! Scenario 5: many idle monolock sessions, each heartbeating on its
//! lease, spread over several worker processes (this binary's hidden
//! `sessions-worker`), each worker on its own loopback source address.
//! Measured on a fresh server: RSS growth per session, server CPU for the
//! heartbeat load, and the heartbeat round trip of a probe session.
//!
//! Run against Redis it is a calibration, not a competitor: the same number
//! of idle connections, each sending PING at the heartbeat rate, shows what
//! one small request per wake-up costs a well-tuned server on this machine.
//! (A Redis lock holder would multiplex its keys over one connection.)

use std::{
    fmt::Write as _,
    net::Ipv4Addr,
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use monolock_proto::ServerFrame;
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines},
    process::{Child, ChildStdout, Command},
    time::{sleep, sleep_until, timeout},
};

use crate::{
    cycles::OP_TIMEOUT,
    mono::{self, Conn},
    report::Metrics,
    resp::RespConn,
    servers::{Server, System},
    stats::Samples,
    sys,
};

/// A monolock session or a Redis connection that answers heartbeats / PINGs.
enum Probe {
    Monolock(Conn),
    Redis(RespConn),
}

impl Probe {
    async fn open(server: &Server, name: &str, lease: Duration) -> Result<Self> {
        match server.system {
            System::Monolock => {
                let mut c = Conn::connect(server.addr, None).await?;
                c.send(&mono::acquire_bytes(name, lease)?).await?;
                timeout(OP_TIMEOUT, c.until_acquired()).await??;
                Ok(Self::Monolock(c))
            }
            System::Redis => Ok(Self::Redis(RespConn::connect(server.addr).await?)),
            System::Etcd | System::Zookeeper => {
                bail!("{}: no sessions-at-scale probe", server.series)
            }
        }
    }

    async fn beat(&mut self) -> Result<()> {
        match self {
            Self::Monolock(c) => match timeout(OP_TIMEOUT, c.heartbeat()).await?? {
                ServerFrame::Acquired { .. } => Ok(()),
                other => bail!("probe heartbeat answered {other:?}"),
            },
            Self::Redis(c) => timeout(OP_TIMEOUT, c.ping()).await?,
        }
    }
}

/// The session count the per-core CPU target is stated for.
pub const TARGET_SESSIONS: f64 = 19_000.0;

/// Parameters of a sessions run.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// Sessions in total.
    pub sessions: usize,
    /// Worker processes to spread them over.
    pub workers: usize,
    /// Lease of every session (heartbeat every lease/4).
    pub lease: Duration,
    /// How long the probe measures.
    pub window: Duration,
    /// Probe heartbeat spacing.
    pub probe_every: Duration,
}

struct Worker {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Worker {
    async fn line(&mut self, wait: Duration, what: &str) -> Result<String> {
        timeout(wait, self.lines.next_line())
            .await
            .with_context(|| format!("sessions worker: no {what} within {wait:?}"))??
            .with_context(|| format!("sessions worker exited before {what}"))
    }
}

fn counts(line: &str, tag: &str) -> Result<(u64, u64)> {
    let mut it = line.split_whitespace();
    if it.next() != Some(tag) {
        bail!("sessions worker said {line:?}, expected {tag}");
    }
    let mut num = || -> Result<u64> {
        it.next()
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("malformed worker line {line:?}"))
    };
    Ok((num()?, num()?))
}

/// Runs the scenario against `server` (which must be fresh and otherwise
/// idle). Records `sessions.monolock.*`; returns the probe's round trips.
pub async fn run(
    server: &Server,
    exe: &Path,
    run_id: u64,
    p: Params,
    log_dir: &Path,
    m: &mut Metrics,
) -> Result<Samples> {
    // Settle the server (runtime threads, allocator) with some traffic
    // before the baseline, so the baseline is a running server's.
    let mut warm = Probe::open(server, &format!("bench/warm/{run_id}"), p.lease).await?;
    for _ in 0..200 {
        warm.beat().await?;
    }
    drop(warm);
    if server.system == System::Monolock {
        let acquire =
            mono::acquire_bytes(&format!("bench/warm/{run_id}"), Duration::from_secs(10))?;
        for _ in 0..200 {
            let mut c = Conn::connect(server.addr, None).await?;
            c.send(&acquire).await?;
            timeout(OP_TIMEOUT, c.until_acquired()).await??;
        }
    }
    sleep(Duration::from_millis(300)).await;
    let base = server.sample()?;
    let kmem0 = sys::kernel_slab_bytes();

    let workers_n = p.workers.clamp(1, 200);
    let mut workers = Vec::with_capacity(workers_n);
    for w in 0..workers_n {
        let count = p.sessions / workers_n + usize::from(w < p.sessions % workers_n);
        let source = Ipv4Addr::new(127, 1, (w / 250) as u8, (1 + w % 250) as u8);
        let mut child = Command::new(exe)
            .arg("sessions-worker")
            .args(["--system", server.system.key()])
            .args(["--addr", &server.addr.to_string()])
            .args(["--source-ip", &source.to_string()])
            .args(["--count", &count.to_string()])
            .args(["--lease-ms", &p.lease.as_millis().to_string()])
            .args(["--prefix", &format!("bench/s/{run_id}/{w}/")])
            .args(["--max-secs", &(p.window.as_secs() + 180).to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("start a sessions worker")?;
        let stdout = child.stdout.take().context("worker stdout")?;
        workers.push(Worker {
            child,
            lines: BufReader::new(stdout).lines(),
        });
    }
    let timeline = log_dir.join(format!("probe-{}-{run_id}.csv", server.system.key()));
    let baseline = Baseline {
        server: base,
        slab: kmem0,
    };
    let result = measure(server, &mut workers, run_id, p, baseline, &timeline, m).await;
    // Tell every worker to stop (a line on stdin), then collect DONE.
    let mut answered = 0u64;
    let mut lost = 0u64;
    for w in &mut workers {
        if let Some(mut stdin) = w.child.stdin.take() {
            let _ = stdin.write_all(b"STOP\n").await;
        }
    }
    for w in &mut workers {
        match w
            .line(OP_TIMEOUT * 3, "DONE")
            .await
            .and_then(|l| counts(&l, "DONE"))
        {
            Ok((a, l)) => {
                answered += a;
                lost += l;
            }
            Err(e) => eprintln!("warning: {e:#}"),
        }
        let _ = w.child.start_kill();
        let _ = timeout(OP_TIMEOUT, w.child.wait()).await;
    }
    m.put(
        "sessions.monolock.worker_heartbeats_answered",
        answered as f64,
    );
    m.put("sessions.monolock.sessions_lost", lost as f64);
    let probe = result?;
    if lost > 0 {
        bail!("{lost} sessions failed a heartbeat during the sessions run");
    }
    Ok(probe)
}

/// The idle server's figures, before any session.
struct Baseline {
    server: sys::ProcSample,
    slab: Option<u64>,
}

async fn measure(
    server: &Server,
    workers: &mut [Worker],
    run_id: u64,
    p: Params,
    baseline: Baseline,
    timeline: &Path,
    m: &mut Metrics,
) -> Result<Samples> {
    let started = Instant::now();
    let (mut ok, mut failed) = (0u64, 0u64);
    for w in workers.iter_mut() {
        let (o, f) = counts(&w.line(Duration::from_secs(180), "READY").await?, "READY")?;
        ok += o;
        failed += f;
    }
    let connect_secs = started.elapsed().as_secs_f64();
    let pre = format!("sessions.{}", server.system.key());
    m.put(&format!("{pre}.sessions"), ok as f64);
    m.put(&format!("{pre}.sessions_failed"), failed as f64);
    m.put(&format!("{pre}.connect_secs"), connect_secs);
    if ok == 0 {
        bail!("no session could be opened");
    }
    if failed > 0 {
        bail!("{failed} of {} sessions could not be opened", ok + failed);
    }
    // Let every session heartbeat at least once: steady state.
    sleep(p.lease / 4 + Duration::from_millis(500)).await;
    let loaded = server.sample()?;
    let kmem1 = sys::kernel_slab_bytes();

    // The probe: its own session, heartbeating every `probe_every`.
    let mut probe = Probe::open(server, &format!("bench/probe/{run_id}"), p.lease).await?;
    let mut rtts = Samples::default();
    let mut csv = String::from("offset_ms,rtt_us\n");
    let t0 = Instant::now();
    let s0 = server.sample()?;
    let end = t0 + p.window;
    let mut next = t0;
    while next < end {
        sleep_until(next.into()).await;
        let sent = Instant::now();
        probe.beat().await?;
        let rtt = sent.elapsed();
        rtts.push(rtt);
        let _ = writeln!(
            csv,
            "{:.3},{:.1}",
            (sent - t0).as_secs_f64() * 1e3,
            rtt.as_secs_f64() * 1e6
        );
        next += p.probe_every;
    }
    // The probe's time line (offset ms, round trip µs), for finding stalls.
    let _ = std::fs::write(timeline, csv);
    let s1 = server.sample()?;
    let secs = t0.elapsed().as_secs_f64();
    drop(probe);

    let n = ok as f64;
    let per_session = loaded.rss_bytes.saturating_sub(baseline.server.rss_bytes) as f64 / n;
    let cores = (s1.cpu - s0.cpu).as_secs_f64() / secs;
    let hb_per_s = n / (p.lease / 4).as_secs_f64();
    m.put(
        &format!("{pre}.rss_base_mib"),
        baseline.server.rss_bytes as f64 / 1048576.0,
    );
    m.put(
        &format!("{pre}.rss_loaded_mib"),
        loaded.rss_bytes as f64 / 1048576.0,
    );
    m.put(&format!("{pre}.rss_per_session_bytes"), per_session);
    if let (Some(k0), Some(k1)) = (baseline.slab, kmem1) {
        // Both ends of every connection live in this kernel: halve it.
        m.put(
            &format!("{pre}.kernel_slab_bytes_per_socket"),
            k1.saturating_sub(k0) as f64 / (2.0 * n),
        );
    }
    m.put(&format!("{pre}.heartbeats_per_s"), hb_per_s);
    m.put(&format!("{pre}.server_cpu_cores"), cores);
    m.put(
        &format!("{pre}.server_cpu_us_per_heartbeat"),
        cores * 1e6 / hb_per_s,
    );
    m.put(
        &format!("{pre}.server_cpu_cores_at_19k"),
        cores * TARGET_SESSIONS / n,
    );
    m.put_opt(&format!("{pre}.probe_p50_us"), rtts.percentile_us(50.0));
    m.put_opt(&format!("{pre}.probe_p99_us"), rtts.percentile_us(99.0));
    m.put_opt(&format!("{pre}.probe_max_us"), rtts.max_us());
    m.put(&format!("{pre}.probe_samples"), rtts.len() as f64);
    m.put(
        &format!("{pre}.extrapolated_1m_rss_gib"),
        per_session * 1e6 / 1073741824.0,
    );
    m.put(&format!("{pre}.extrapolated_1m_cpu_cores"), cores * 1e6 / n);
    Ok(rtts)
}
