//! Protocol v2 beside v1 where their shapes differ most: contention (many
//! sessions, one lock) and many locks held by one process.
//!
//! - Contention: `clients` v2 sessions on one name, each ACQUIRE (wait),
//!   then RELEASE at once, in a loop; recorded as
//!   `contention.<label>.monolock_v2.acq_per_s` next to v1's
//!   `contention.<label>.monolock.acq_per_s`.
//! - Many locks: `locks` locks held by this process, as `locks` v1
//!   connections and as one v2 session, each on a fresh server: the
//!   server's RSS growth, its connections, and what one heartbeat round
//!   costs it (every connection once for v1, one PING for v2). Recorded as
//!   `many_locks.<series>.*`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tokio::time::{sleep_until, timeout};

use crate::{
    cycles::{OP_TIMEOUT, Window, source_ip},
    mono::{self, Conn},
    mono_v2,
    report::Metrics,
    servers::Server,
    sys,
};

/// Lease of the sessions holding many locks (no heartbeat needed while
/// they are set up and measured).
const MANY_LEASE: Duration = Duration::from_secs(60);
/// Frames written per batch when one session acquires many locks.
const BATCH: usize = 512;

/// One v2 session's acquisitions of `name` until the window ends.
async fn contender(addr: std::net::SocketAddr, name: String, win: Window) -> Result<u64> {
    const CLAIM: u32 = 1;
    let acquire = mono_v2::acquire_bytes(CLAIM, &name)?;
    let release = monolock_proto::v2::release_frame(CLAIM);
    let mut s = timeout(OP_TIMEOUT, mono_v2::Session::open(addr, MANY_LEASE))
        .await
        .context("v2 OPEN timed out")??;
    sleep_until(win.start.into()).await;
    let mut count = 0u64;
    for _ in 0..50_000_000u64 {
        if Instant::now() >= win.end {
            break;
        }
        // A waiter may wait for every other contender: bounded by the
        // window, not by one operation's timeout.
        let patience = win.end.saturating_duration_since(Instant::now()) + OP_TIMEOUT;
        timeout(patience, async {
            s.send(&acquire).await?;
            s.until_granted(CLAIM).await
        })
        .await
        .context("v2 contended ACQUIRE timed out")??;
        let granted = Instant::now();
        timeout(OP_TIMEOUT, async {
            s.send(&release).await?;
            s.until_released(CLAIM).await
        })
        .await
        .context("v2 RELEASE timed out")??;
        if granted >= win.measure_from && granted <= win.end {
            count += 1;
        }
    }
    Ok(count)
}

/// Contention over protocol v2: `clients` sessions on one name.
pub async fn contention(
    server: &Server,
    run_id: u64,
    label: &str,
    clients: usize,
    warmup: Duration,
    length: Duration,
    m: &mut Metrics,
) -> Result<()> {
    let win = Window::new(warmup, length);
    let name = format!("bench/contention-v2/{run_id}");
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..clients {
        tasks.spawn(contender(server.addr, name.clone(), win));
    }
    sleep_until(win.measure_from.into()).await;
    let s0 = server.sample()?;
    sleep_until(win.end.into()).await;
    let s1 = server.sample()?;
    let mut total = 0u64;
    while let Some(joined) = tasks.join_next().await {
        total += joined.context("contender panicked")??;
    }
    if total == 0 {
        bail!("monolock v2: no acquisition under contention");
    }
    let secs = win.secs();
    let pre = format!("contention.{label}.monolock_v2");
    m.put(&format!("{pre}.acq_per_s"), total as f64 / secs);
    m.put(
        &format!("{pre}.server_cpu_cores"),
        (s1.cpu - s0.cpu).as_secs_f64() / secs,
    );
    Ok(())
}

/// `locks` locks held through `locks` v1 connections, on `server` (fresh).
pub async fn hold_v1(server: &Server, run_id: u64, locks: usize, m: &mut Metrics) -> Result<()> {
    sys::raise_nofile_limit().context("raise RLIMIT_NOFILE")?;
    let before = server.sample()?;
    let mut conns = Vec::with_capacity(locks);
    for i in 0..locks {
        let acquire = mono::acquire_bytes(&format!("bench/many/{run_id}/{i}"), MANY_LEASE)?;
        let mut c = timeout(
            OP_TIMEOUT,
            Conn::connect(server.addr, Some(source_ip(i / 20_000))),
        )
        .await
        .context("connect timed out")??;
        c.send(&acquire).await?;
        conns.push(c);
    }
    for c in &mut conns {
        timeout(OP_TIMEOUT, c.until_acquired())
            .await
            .context("v1 ACQUIRE timed out")??;
    }
    let held = server.sample()?;
    // One heartbeat round: every connection once.
    for c in &mut conns {
        c.send(&mono::HEARTBEAT).await?;
    }
    for c in &mut conns {
        timeout(OP_TIMEOUT, c.read_frame())
            .await
            .context("v1 heartbeat timed out")??;
    }
    let after = server.sample()?;
    record(m, "monolock", locks, locks, before, held, after, locks);
    Ok(())
}

/// `locks` locks held through one v2 session, on `server` (fresh).
pub async fn hold_v2(server: &Server, run_id: u64, locks: usize, m: &mut Metrics) -> Result<()> {
    let before = server.sample()?;
    let mut s = timeout(OP_TIMEOUT, mono_v2::Session::open(server.addr, MANY_LEASE))
        .await
        .context("v2 OPEN timed out")??;
    let mut claim = 0u32;
    while (claim as usize) < locks {
        let mut batch = Vec::with_capacity(BATCH * 32);
        let first = claim;
        while (claim as usize) < locks && claim - first < BATCH as u32 {
            batch.extend_from_slice(&mono_v2::acquire_bytes(
                claim,
                &format!("bench/many/{run_id}/{claim}"),
            )?);
            claim += 1;
        }
        s.send(&batch).await?;
        for c in first..claim {
            timeout(OP_TIMEOUT, s.until_granted(c))
                .await
                .context("v2 ACQUIRE timed out")??;
        }
    }
    let held = server.sample()?;
    s.send(&[monolock_proto::v2::msg::PING]).await?;
    match timeout(OP_TIMEOUT, s.read_frame())
        .await
        .context("PING timed out")??
    {
        monolock_proto::v2::ServerFrame::Pong => {}
        other => bail!("expected PONG, got {other:?}"),
    }
    let after = server.sample()?;
    record(m, "monolock_v2", locks, 1, before, held, after, 1);
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn record(
    m: &mut Metrics,
    series: &str,
    locks: usize,
    connections: usize,
    before: sys::ProcSample,
    held: sys::ProcSample,
    after: sys::ProcSample,
    heartbeats_per_round: usize,
) {
    let pre = format!("many_locks.{series}");
    m.put(&format!("{pre}.locks"), locks as f64);
    m.put(&format!("{pre}.connections"), connections as f64);
    m.put(
        &format!("{pre}.rss_growth_mib"),
        held.rss_bytes.saturating_sub(before.rss_bytes) as f64 / (1024.0 * 1024.0),
    );
    m.put(
        &format!("{pre}.rss_bytes_per_lock"),
        held.rss_bytes.saturating_sub(before.rss_bytes) as f64 / locks as f64,
    );
    m.put(
        &format!("{pre}.heartbeats_per_round"),
        heartbeats_per_round as f64,
    );
    m.put(
        &format!("{pre}.heartbeat_round_server_cpu_us"),
        (after.cpu - held.cpu).as_secs_f64() * 1e6,
    );
    // At a 60 s lease a client heartbeats every 15 s.
    m.put(
        &format!("{pre}.heartbeats_per_s_at_60s_lease"),
        heartbeats_per_round as f64 / 15.0,
    );
}
