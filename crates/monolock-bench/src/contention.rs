//! Scenario 3: many clients on one name.
//!
//! Every client loops: wait for the lock, hold it for `work`, give it up,
//! ask again at once. Grants and releases are stamped with `Instant` in this
//! one process, so the handover (previous holder's release to the next
//! holder's grant) is measured on one monotonic clock. A handover is the
//! lock changing hands: release to the grant of a *different* client. A
//! client that takes the lock straight back (which Redis retry loops allow,
//! FIFO does not) is counted apart, as a re-grant.
//!
//! monolock clients connect, send ACQUIRE and read until the pushed
//! ACQUIRED; closing is the release, and asking again is a new connection
//! at the back of the FIFO queue. Redis clients retry `SET NX PX` with a
//! jittered sleep of mean `retry_delay` between failures, and release with
//! the check-and-delete script.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use rand::{SeedableRng, rngs::StdRng};
use tokio::time::{sleep, sleep_until, timeout, timeout_at};

use crate::{
    cycles::{OP_TIMEOUT, Window, source_ip},
    mono::{self, Conn},
    report::Metrics,
    resp::{self, RedisLock},
    servers::{Server, System},
    stats::Samples,
};

/// Upper bound on lock attempts per client per window.
const MAX_ATTEMPTS: u64 = 10_000_000;
/// Redis TTL during contention: far longer than any hold, so a key never
/// expires under its holder and every release is a real release.
const CONTENTION_TTL: Duration = Duration::from_secs(10);

/// What one client saw.
#[derive(Default)]
pub(crate) struct ClientLog {
    /// (grant, release) of every completed hold.
    pub(crate) holds: Vec<(Instant, Instant)>,
    /// Attempt-to-grant of every completed wait.
    pub(crate) waits: Vec<Duration>,
    /// The wait still open when the window closed, if any.
    pub(crate) open_wait: Option<Duration>,
    /// Releases that found the key no longer ours (Redis only).
    pub(crate) lost: u64,
}

/// The parameters of one contention run.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// Clients on the one name.
    pub clients: usize,
    /// Time held under the lock (0 = release at once).
    pub work: Duration,
    /// Redis only: mean sleep between failed `SET NX` attempts.
    pub retry_delay: Duration,
    /// Warm-up before figures count.
    pub warmup: Duration,
    /// Measured length.
    pub length: Duration,
}

async fn hold_for(work: Duration) {
    if !work.is_zero() {
        sleep(work).await;
    }
}

async fn mono_client(
    addr: SocketAddr,
    acquire: std::sync::Arc<Vec<u8>>,
    client: usize,
    win: Window,
    work: Duration,
) -> Result<ClientLog> {
    let mut log = ClientLog::default();
    let source = Some(source_ip(client));
    sleep_until(win.start.into()).await;
    for _ in 0..MAX_ATTEMPTS {
        let attempt = Instant::now();
        if attempt >= win.end {
            break;
        }
        let granted = timeout_at(win.end.into(), async {
            let mut c = Conn::connect(addr, source).await?;
            c.send(&acquire).await?;
            c.until_acquired().await?;
            anyhow::Ok(c)
        })
        .await;
        let conn = match granted {
            Err(_window_closed) => {
                log.open_wait = Some(win.end - attempt);
                break;
            }
            Ok(result) => result?,
        };
        let grant = Instant::now();
        hold_for(work).await;
        let release = Instant::now();
        drop(conn); // closing is releasing
        log.holds.push((grant, release));
        log.waits.push(grant - attempt);
    }
    Ok(log)
}

async fn redis_client(
    addr: SocketAddr,
    key: String,
    win: Window,
    work: Duration,
    retry_delay: Duration,
) -> Result<ClientLog> {
    let mut log = ClientLog::default();
    let mut lock = RedisLock::connect(addr, CONTENTION_TTL).await?;
    let mut rng = StdRng::from_rng(&mut rand::rng());
    sleep_until(win.start.into()).await;
    'attempts: for _ in 0..MAX_ATTEMPTS {
        let attempt = Instant::now();
        if attempt >= win.end {
            break;
        }
        let token = resp::new_token(&mut rng);
        // Retry SET NX with jittered sleeps until it succeeds or the window closes.
        loop {
            let ok = timeout(OP_TIMEOUT, lock.try_acquire(&key, &token))
                .await
                .context("redis SET timed out")??;
            if ok {
                break;
            }
            let now = Instant::now();
            if now >= win.end {
                log.open_wait = Some(win.end - attempt);
                break 'attempts;
            }
            sleep_until(
                (now + resp::jittered(retry_delay, &mut rng))
                    .min(win.end)
                    .into(),
            )
            .await;
            if Instant::now() >= win.end {
                log.open_wait = Some(win.end - attempt);
                break 'attempts;
            }
        }
        let grant = Instant::now();
        hold_for(work).await;
        let release = Instant::now();
        let still_ours = timeout(OP_TIMEOUT, lock.release(&key, &token))
            .await
            .context("redis release timed out")??;
        if !still_ours {
            log.lost += 1;
        }
        log.holds.push((grant, release));
        log.waits.push(grant - attempt);
    }
    Ok(log)
}

/// Samples of one contention run, for the charts.
pub struct Outcome {
    /// `monolock` or `redis-d<ms>`.
    pub series: String,
    /// Release to the grant of another client.
    pub handover: Samples,
    /// Attempt to grant, every completed wait.
    pub waits: Samples,
}

/// Runs one contention measurement and records
/// `contention.<label>.<series>.*` where series is the monolock server's
/// (`monolock`, or `monolock_base` for the baseline build) or
/// `redis-d<ms>`.
pub async fn run(
    server: &Server,
    run_id: u64,
    label: &str,
    p: Params,
    m: &mut Metrics,
) -> Result<Outcome> {
    let win = Window::new(p.warmup, p.length);
    let series = match server.system {
        System::Redis => format!("redis-d{}", p.retry_delay.as_millis()),
        _ => server.series.to_owned(),
    };
    let name = format!("bench/contended/{run_id}");
    // Long enough that no waiter needs a heartbeat during the window.
    let lease = (p.warmup + p.length) * 4 + Duration::from_secs(60);
    let acquire = std::sync::Arc::new(mono::acquire_bytes(&name, lease)?);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..p.clients {
        match server.system {
            System::Monolock => {
                tasks.spawn(mono_client(server.addr, acquire.clone(), i, win, p.work));
            }
            System::Redis => {
                tasks.spawn(redis_client(
                    server.addr,
                    name.clone(),
                    win,
                    p.work,
                    p.retry_delay,
                ));
            }
            System::Etcd | System::Zookeeper => {
                bail!("{}: measured by the side-by-side scenario", server.series)
            }
        }
    }
    let cpu = win.measure_cpu(server).await?;

    let mut logs = Vec::with_capacity(p.clients);
    while let Some(joined) = tasks.join_next().await {
        logs.push(joined.context("client task panicked")??);
    }
    let secs = win.secs();
    let a = analyse(&logs, win);
    if a.acquisitions == 0 {
        bail!("{series}: no acquisition in the contention window ({label})");
    }
    let pre = format!("contention.{label}.{series}");
    let mut handover = a.handover;
    m.put(&format!("{pre}.acq_per_s"), a.acquisitions as f64 / secs);
    m.put_opt(
        &format!("{pre}.handover_p50_us"),
        handover.percentile_us(50.0),
    );
    m.put_opt(
        &format!("{pre}.handover_p99_us"),
        handover.percentile_us(99.0),
    );
    m.put_opt(&format!("{pre}.handover_max_us"), handover.max_us());
    let transitions = (handover.len() + a.regrant.len()).max(1) as f64;
    m.put(
        &format!("{pre}.regrant_pct"),
        a.regrant.len() as f64 * 100.0 / transitions,
    );
    // Release to the next grant whoever gets it (re-grants included).
    let mut any_next = handover.clone();
    any_next.extend(&a.regrant);
    m.put_opt(
        &format!("{pre}.next_grant_p99_us"),
        any_next.percentile_us(99.0),
    );
    m.put(&format!("{pre}.fairness"), a.fairness);
    m.put(&format!("{pre}.min_client_acq"), a.min_per_client as f64);
    m.put(&format!("{pre}.max_client_acq"), a.max_per_client as f64);
    m.put(
        &format!("{pre}.worst_wait_ms"),
        a.worst_wait.as_secs_f64() * 1e3,
    );
    let mut waits = a.waits;
    m.put_opt(&format!("{pre}.wait_p99_us"), waits.percentile_us(99.0));
    let mut holds = a.hold_times;
    m.put_opt(&format!("{pre}.hold_p50_us"), holds.percentile_us(50.0));
    m.put(&format!("{pre}.overlaps"), a.overlaps as f64);
    m.put(&format!("{pre}.lost_releases"), a.lost as f64);
    m.put(
        &format!("{pre}.server_cpu_cores"),
        cpu.server.as_secs_f64() / secs,
    );
    m.put(
        &format!("{pre}.client_cpu_cores"),
        cpu.client.as_secs_f64() / secs,
    );
    if a.overlaps > 0 {
        bail!(
            "{series}: {} overlapping holds — mutual exclusion violated ({label})",
            a.overlaps
        );
    }
    Ok(Outcome {
        series,
        handover,
        waits,
    })
}

/// What a contention run's client logs add up to.
pub(crate) struct Analysis {
    /// Grants inside the measured window.
    pub(crate) acquisitions: u64,
    /// Release to the grant of another client.
    pub(crate) handover: Samples,
    /// Release to a grant of the same client.
    pub(crate) regrant: Samples,
    waits: Samples,
    hold_times: Samples,
    /// Most acquisitions of one client over the fewest (∞ if one starved).
    pub(crate) fairness: f64,
    min_per_client: u64,
    max_per_client: u64,
    worst_wait: Duration,
    /// Holds that began before the previous one ended.
    pub(crate) overlaps: u64,
    lost: u64,
}

/// Orders every client's holds on one clock: handovers, re-grants,
/// fairness, overlaps.
pub(crate) fn analyse(logs: &[ClientLog], win: Window) -> Analysis {
    // Every hold of every client, ordered by grant: (grant, release, client).
    let mut all: Vec<(Instant, Instant, usize)> = logs
        .iter()
        .enumerate()
        .flat_map(|(c, l)| l.holds.iter().map(move |&(g, r)| (g, r, c)))
        .collect();
    all.sort_by_key(|&(grant, _, _)| grant);
    let mut handover = Samples::default();
    let mut regrant = Samples::default();
    let mut hold_times = Samples::default();
    let mut overlaps = 0u64;
    for pair in all.windows(2) {
        let (prev, next) = (pair[0], pair[1]);
        if next.0 < win.measure_from {
            continue;
        }
        if next.0 < prev.1 {
            overlaps += 1;
        } else if next.2 == prev.2 {
            regrant.push(next.0 - prev.1);
        } else {
            handover.push(next.0 - prev.1);
        }
    }
    for &(grant, release, _) in &all {
        if grant >= win.measure_from {
            hold_times.push(release - grant);
        }
    }
    let per_client: Vec<u64> = logs
        .iter()
        .map(|l| {
            l.holds
                .iter()
                .filter(|(grant, _)| *grant >= win.measure_from)
                .count() as u64
        })
        .collect();
    let acquisitions = per_client.iter().sum();
    let min_per_client = per_client.iter().copied().min().unwrap_or(0);
    let max_per_client = per_client.iter().copied().max().unwrap_or(0);
    let fairness = if min_per_client == 0 {
        f64::INFINITY
    } else {
        max_per_client as f64 / min_per_client as f64
    };
    let mut waits = Samples::default();
    let mut worst_wait = Duration::ZERO;
    for l in logs {
        for &w in &l.waits {
            waits.push(w);
            worst_wait = worst_wait.max(w);
        }
        if let Some(w) = l.open_wait {
            worst_wait = worst_wait.max(w);
        }
    }
    Analysis {
        acquisitions,
        handover,
        regrant,
        waits,
        hold_times,
        fairness,
        min_per_client,
        max_per_client,
        worst_wait,
        overlaps,
        lost: logs.iter().map(|l| l.lost).sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handover_fairness_and_overlap() {
        let t = Instant::now();
        let ms = |n: u64| t + Duration::from_millis(n);
        let win = Window {
            start: t,
            measure_from: t,
            end: ms(100),
        };
        let a = ClientLog {
            holds: vec![(ms(0), ms(1)), (ms(4), ms(5))],
            waits: vec![Duration::from_millis(0), Duration::from_millis(3)],
            open_wait: None,
            lost: 0,
        };
        let b = ClientLog {
            holds: vec![(ms(2), ms(3))],
            waits: vec![Duration::from_millis(2)],
            open_wait: Some(Duration::from_millis(9)),
            lost: 0,
        };
        let mut r = analyse(&[a, b], win);
        assert_eq!(r.acquisitions, 3);
        assert_eq!(r.overlaps, 0);
        assert_eq!(r.handover.len(), 2);
        assert_eq!(r.regrant.len(), 0);
        assert_eq!(r.handover.max_us(), Some(1000.0));
        assert_eq!(r.fairness, 2.0);
        assert_eq!(r.worst_wait, Duration::from_millis(9));

        let c = ClientLog {
            holds: vec![(ms(0), ms(10))],
            ..ClientLog::default()
        };
        let d = ClientLog {
            holds: vec![(ms(5), ms(6))],
            ..ClientLog::default()
        };
        assert_eq!(analyse(&[c, d], win).overlaps, 1);
        let again = ClientLog {
            holds: vec![(ms(0), ms(1)), (ms(2), ms(3))],
            ..ClientLog::default()
        };
        let r = analyse(&[again], win);
        assert_eq!((r.handover.len(), r.regrant.len()), (0, 1));
        let e = ClientLog::default();
        assert!(analyse(&[e], win).fairness.is_infinite());
    }
}
