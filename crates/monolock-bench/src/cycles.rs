//! Uncontended lock cycles: one client's latency, and throughput of many
//! clients each on its own name.
//!
//! A monolock cycle is connect + ACQUIRE + ACQUIRED + close (the close is
//! the release). A Redis cycle is `SET NX PX` + the EVALSHA release, on a
//! connection opened once per client, as Redis clients do.

use std::{
    net::{Ipv4Addr, SocketAddr},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use rand::{SeedableRng, rngs::StdRng};
use tokio::time::{sleep_until, timeout};

use crate::{
    mono::{self, Conn},
    mono_v2,
    report::Metrics,
    resp::{self, RedisLock},
    servers::{Server, System},
    stats::Samples,
    sys,
};

/// No single operation of a healthy server takes this long: a bound that
/// keeps every loop finite even if a server hangs.
pub const OP_TIMEOUT: Duration = Duration::from_secs(5);
/// Lease for uncontended monolock cycles (never needs a heartbeat).
const CYCLE_LEASE: Duration = Duration::from_secs(60);
/// TTL for uncontended Redis cycles.
const CYCLE_TTL: Duration = Duration::from_secs(10);
/// Upper bound on cycles per client per window, whatever the speed.
const MAX_CYCLES: u64 = 50_000_000;

/// A distinct loopback source address per client (127.0.x.y, never .0),
/// so each has its own ephemeral-port space and short connections do not
/// run out of ports.
pub fn source_ip(client: usize) -> Ipv4Addr {
    let c = u32::try_from(client).unwrap_or(0) % (250 * 250);
    Ipv4Addr::new(127, 0, (1 + c / 250) as u8, (1 + c % 250) as u8)
}

/// Timing of one measured window: work starts at `start`, figures count
/// from `measure_from` (after a warm-up) to `end`.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    /// When load starts.
    pub start: Instant,
    /// When measurement starts.
    pub measure_from: Instant,
    /// When load stops.
    pub end: Instant,
}

impl Window {
    /// A window starting a little after now.
    pub fn new(warmup: Duration, length: Duration) -> Self {
        let start = Instant::now() + Duration::from_millis(20);
        let measure_from = start + warmup;
        Self {
            start,
            measure_from,
            end: measure_from + length,
        }
    }

    /// Measured seconds.
    pub fn secs(&self) -> f64 {
        (self.end - self.measure_from).as_secs_f64()
    }

    /// Waits out the window: the CPU time `server` and this process (the
    /// load generator) spent in its measured part.
    pub async fn measure_cpu(&self, server: &Server) -> Result<WindowCpu> {
        sleep_until(self.measure_from.into()).await;
        let server_from = server.sample()?;
        let client_from = sys::own_cpu_time();
        sleep_until(self.end.into()).await;
        let server_to = server.sample()?;
        let client_to = sys::own_cpu_time();
        Ok(WindowCpu {
            server: server_to.cpu - server_from.cpu,
            client: client_to - client_from,
        })
    }
}

/// CPU time spent in a window's measured part.
#[derive(Clone, Copy, Debug)]
pub struct WindowCpu {
    /// By the server under test.
    pub server: Duration,
    /// By this process, the load generator.
    pub client: Duration,
}

/// One client's lock cycles on its own name until `end`, on either system.
/// Returns the completed cycles in the window and their latencies.
async fn client_cycles(
    system: System,
    addr: SocketAddr,
    name: String,
    source: Option<Ipv4Addr>,
    win: Window,
    keep_samples: bool,
) -> Result<ClientCycles> {
    let mut acq_lat = Samples::default();
    let mut cyc_lat = Samples::default();
    let mut count = 0u64;
    let mut queued = 0u64;
    match system {
        System::Monolock => {
            let acquire = mono::acquire_bytes(&name, CYCLE_LEASE)?;
            sleep_until(win.start.into()).await;
            for _ in 0..MAX_CYCLES {
                let t0 = Instant::now();
                if t0 >= win.end {
                    break;
                }
                let t1 = timeout(OP_TIMEOUT, async {
                    let mut c = Conn::connect(addr, source).await?;
                    c.send(&acquire).await?;
                    // The server may not have processed this client's
                    // previous close yet: then it queues us behind our own
                    // old session and pushes the grant when it sees the close.
                    let (_token, waited) = c.until_acquired().await?;
                    let t1 = Instant::now();
                    drop(c); // the release
                    anyhow::Ok((t1, waited))
                })
                .await
                .context("monolock cycle timed out")??;
                let (t1, waited) = t1;
                let t2 = Instant::now();
                if t0 >= win.measure_from && t2 <= win.end {
                    count += 1;
                    queued += u64::from(waited);
                    if keep_samples {
                        acq_lat.push(t1 - t0);
                        cyc_lat.push(t2 - t0);
                    }
                }
            }
        }
        System::Redis => {
            let mut lock = RedisLock::connect(addr, CYCLE_TTL).await?;
            let mut rng = StdRng::from_rng(&mut rand::rng());
            sleep_until(win.start.into()).await;
            for _ in 0..MAX_CYCLES {
                let t0 = Instant::now();
                if t0 >= win.end {
                    break;
                }
                let token = resp::new_token(&mut rng);
                let t1 = timeout(OP_TIMEOUT, async {
                    if !lock.try_acquire(&name, &token).await? {
                        bail!("uncontended SET NX on {name} failed");
                    }
                    let t1 = Instant::now();
                    if !lock.release(&name, &token).await? {
                        bail!("release of {name} found another token");
                    }
                    anyhow::Ok(t1)
                })
                .await
                .context("redis cycle timed out")??;
                let t2 = Instant::now();
                if t0 >= win.measure_from && t2 <= win.end {
                    count += 1;
                    if keep_samples {
                        acq_lat.push(t1 - t0);
                        cyc_lat.push(t2 - t0);
                    }
                }
            }
        }
        System::Etcd | System::Zookeeper => {
            bail!("{system:?}: measured by the side-by-side scenario")
        }
    }
    Ok(ClientCycles {
        count,
        queued,
        acquire: acq_lat,
        cycle: cyc_lat,
    })
}

/// What one client's cycles produced.
struct ClientCycles {
    /// Cycles completed inside the measured window.
    count: u64,
    /// monolock only: cycles whose ACQUIRE was answered WAITING first.
    queued: u64,
    /// Start to grant.
    acquire: Samples,
    /// Start to release done.
    cycle: Samples,
}

/// Scenario 1: one client, acquire then release on its own name.
/// Records `latency.<sys>.{acquire,cycle}_{p50,p99}_us` and returns the
/// cycle latencies for the chart.
pub async fn latency(
    server: &Server,
    run_id: u64,
    warmup: Duration,
    length: Duration,
    m: &mut Metrics,
) -> Result<Samples> {
    let sys_key = server.series;
    let win = Window::new(warmup, length);
    let ClientCycles {
        count,
        queued,
        acquire: mut acq,
        cycle: mut cyc,
    } = client_cycles(
        server.system,
        server.addr,
        format!("bench/latency/{run_id}"),
        None,
        win,
        true,
    )
    .await?;
    if count == 0 {
        bail!("{sys_key}: no lock cycle completed in the latency window");
    }
    let pre = format!("latency.{sys_key}");
    m.put(&format!("{pre}.cycles"), count as f64);
    if server.system == System::Monolock {
        m.put(
            &format!("{pre}.queued_pct"),
            queued as f64 * 100.0 / count as f64,
        );
    }
    m.put_opt(&format!("{pre}.acquire_p50_us"), acq.percentile_us(50.0));
    m.put_opt(&format!("{pre}.acquire_p99_us"), acq.percentile_us(99.0));
    m.put_opt(&format!("{pre}.cycle_p50_us"), cyc.percentile_us(50.0));
    m.put_opt(&format!("{pre}.cycle_p99_us"), cyc.percentile_us(99.0));
    m.put_opt(&format!("{pre}.cycle_max_us"), cyc.max_us());
    Ok(cyc)
}

/// Scenario 2: `clients` clients on distinct names. Records
/// `throughput.c<N>.<series>.{cycles_per_s,server_cpu_ms_per_1k,...}`
/// (the series is `floor` for the connection floor, driven exactly like
/// monolock).
pub async fn throughput(
    server: &Server,
    run_id: u64,
    clients: usize,
    warmup: Duration,
    length: Duration,
    m: &mut Metrics,
) -> Result<()> {
    let sys_key = server.series;
    let win = Window::new(warmup, length);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..clients {
        let source = (server.system == System::Monolock).then(|| source_ip(i));
        tasks.spawn(client_cycles(
            server.system,
            server.addr,
            format!("bench/tp/{run_id}/{i}"),
            source,
            win,
            false,
        ));
    }
    record_throughput(
        server,
        tasks,
        win,
        clients,
        sys_key,
        server.system == System::Monolock,
        m,
    )
    .await
}

/// Waits out `win` while `tasks` cycle, then records
/// `throughput.c<clients>.<series>.*`: cycles/s, server CPU per 1,000
/// cycles, server and client CPU in cores, and (with `queued`) how many
/// acquisitions were queued.
async fn record_throughput(
    server: &Server,
    mut tasks: tokio::task::JoinSet<Result<ClientCycles>>,
    win: Window,
    clients: usize,
    series: &str,
    queued_figure: bool,
    m: &mut Metrics,
) -> Result<()> {
    let cpu = win.measure_cpu(server).await?;
    let (mut total, mut queued) = (0u64, 0u64);
    while let Some(joined) = tasks.join_next().await {
        let c = joined.context("client task panicked")??;
        total += c.count;
        queued += c.queued;
    }
    if total == 0 {
        bail!("{series}: no lock cycle completed with {clients} clients");
    }
    let secs = win.secs();
    let server_cpu = cpu.server.as_secs_f64();
    let pre = format!("throughput.c{clients}.{series}");
    m.put(&format!("{pre}.cycles_per_s"), total as f64 / secs);
    if queued_figure {
        m.put(
            &format!("{pre}.queued_pct"),
            queued as f64 * 100.0 / total as f64,
        );
    }
    m.put(
        &format!("{pre}.server_cpu_ms_per_1k"),
        server_cpu * 1e3 / (total as f64 / 1e3),
    );
    m.put(&format!("{pre}.server_cpu_cores"), server_cpu / secs);
    m.put(
        &format!("{pre}.client_cpu_cores"),
        cpu.client.as_secs_f64() / secs,
    );
    Ok(())
}

/// One protocol v2 client's lock cycles on its own name until the window
/// ends, over one session: ACQUIRE, then each cycle writes the RELEASE and
/// the next ACQUIRE together and reads RELEASED and ACQUIRED (one round
/// trip per cycle, the short-lock case of docs/protocol.md's checklist).
async fn client_cycles_v2(
    addr: SocketAddr,
    name: String,
    win: Window,
    keep_samples: bool,
) -> Result<ClientCycles> {
    const CLAIM: u32 = 1;
    let mut cyc_lat = Samples::default();
    let mut count = 0u64;
    let mut queued = 0u64;
    let acquire = mono_v2::acquire_bytes(CLAIM, &name)?;
    let mut cycle = monolock_proto::v2::release_frame(CLAIM).to_vec();
    cycle.extend_from_slice(&acquire);
    let mut s = timeout(OP_TIMEOUT, mono_v2::Session::open(addr, CYCLE_LEASE))
        .await
        .context("v2 OPEN timed out")??;
    sleep_until(win.start.into()).await;
    timeout(OP_TIMEOUT, async {
        s.send(&acquire).await?;
        s.until_granted(CLAIM).await
    })
    .await
    .context("v2 first ACQUIRE timed out")??;
    for _ in 0..MAX_CYCLES {
        let t0 = Instant::now();
        if t0 >= win.end {
            break;
        }
        let waited = timeout(OP_TIMEOUT, async {
            s.send(&cycle).await?;
            s.until_released(CLAIM).await?;
            s.until_granted(CLAIM).await
        })
        .await
        .context("v2 cycle timed out")??;
        let t2 = Instant::now();
        if t0 >= win.measure_from && t2 <= win.end {
            count += 1;
            queued += u64::from(waited);
            if keep_samples {
                cyc_lat.push(t2 - t0);
            }
        }
    }
    Ok(ClientCycles {
        count,
        queued,
        acquire: Samples::default(),
        cycle: cyc_lat,
    })
}

/// Scenario 2 for protocol v2: `clients` sessions, each cycling on its own
/// name. Records `throughput.c<N>.monolock_v2.{cycles_per_s,...}`, the same
/// figures as [`throughput`] records for v1 and Redis.
pub async fn throughput_v2(
    server: &Server,
    run_id: u64,
    clients: usize,
    warmup: Duration,
    length: Duration,
    m: &mut Metrics,
) -> Result<()> {
    let win = Window::new(warmup, length);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..clients {
        tasks.spawn(client_cycles_v2(
            server.addr,
            format!("bench/tp2/{run_id}/{i}"),
            win,
            false,
        ));
    }
    record_throughput(server, tasks, win, clients, "monolock_v2", true, m).await
}
