//! etcd's watch beside monolock's observers, for the same fan-out: N
//! watchers of one key, each an `etcd-client` client of its own (its own
//! gRPC connection), all in this process as monolock's observers are. A
//! cycle is a `delete` of the key, then a `put` of it (what a leader's
//! resignation and a new leader's key are to a watcher of the election
//! key): the time from each call to each watcher's DELETE, then PUT,
//! event, and to the last watcher's. Recorded as `observers.etcd.fan<N>.*`.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use etcd_client::{EventType, WatchStream};
use tokio::{sync::mpsc, task::JoinSet, time::timeout};

use crate::{
    cycles::OP_TIMEOUT,
    observers::{Params, fitting, put_fan_out},
    peers::etcd_connect,
    report::Metrics,
    servers::Server,
    stats::Samples,
    sys,
};

/// Watchers connecting at once while they are placed.
const PLACING_AT_ONCE: usize = 64;
/// The longest a change may take to reach every watcher.
const FAN_OUT_PATIENCE: Duration = Duration::from_secs(60);
/// Cycles before the measured ones.
const WARM_CYCLES: usize = 3;

/// One watcher's event, stamped when its stream yielded it.
struct Seen {
    watcher: usize,
    put: bool,
    revision: i64,
    at: Instant,
}

/// The figures' key prefix of etcd's fan-out to `watchers`.
pub fn fan_key(watchers: usize) -> String {
    format!("observers.etcd.fan{watchers}")
}

/// A watcher of `key` on a client of its own, once etcd said the watch
/// is created.
async fn watcher(addr: SocketAddr, key: String) -> Result<(etcd_client::Client, WatchStream)> {
    let mut client = etcd_connect(addr).await?;
    let mut stream = client.watch(key, None).await.context("etcd watch")?;
    let created = stream
        .message()
        .await
        .context("etcd watch")?
        .context("the watch stream ended before it was created")?;
    if !created.created() {
        bail!("etcd's first watch response is not its creation");
    }
    Ok((client, stream))
}

/// Reads `stream` until it ends, reporting every event.
async fn forward_events(
    watcher: usize,
    mut stream: WatchStream,
    out: mpsc::UnboundedSender<Result<Seen, String>>,
) {
    loop {
        let report = match stream.message().await {
            Ok(Some(response)) => {
                let at = Instant::now();
                for event in response.events() {
                    let seen = Seen {
                        watcher,
                        put: event.event_type() == EventType::Put,
                        revision: event.kv().map_or(0, |kv| kv.mod_revision()),
                        at,
                    };
                    if out.send(Ok(seen)).is_err() {
                        return;
                    }
                }
                continue;
            }
            Ok(None) => Err(format!("watcher {watcher}: the stream ended")),
            Err(e) => Err(format!("watcher {watcher}: {e}")),
        };
        let _ = out.send(report);
        return;
    }
}

/// Waits until every watcher has the event of `revision` (a put or a
/// delete); returns the instant the last one had it.
async fn until_every_watcher_has(
    reports: &mut mpsc::UnboundedReceiver<Result<Seen, String>>,
    watchers: usize,
    put: bool,
    revision: i64,
    called: Instant,
    samples: &mut Samples,
) -> Result<Instant> {
    let mut told = vec![false; watchers];
    let mut left = watchers;
    let mut last = called;
    let give_up = Instant::now() + FAN_OUT_PATIENCE;
    while left > 0 {
        let seen = timeout(
            give_up.saturating_duration_since(Instant::now()),
            reports.recv(),
        )
        .await
        .with_context(|| {
            format!("{left} of {watchers} etcd watchers had no event within {FAN_OUT_PATIENCE:?}")
        })?
        .context("every etcd watch stream ended")?
        .map_err(anyhow::Error::msg)?;
        if seen.put == put && seen.revision == revision && !told[seen.watcher] {
            told[seen.watcher] = true;
            left -= 1;
            samples.push(seen.at.saturating_duration_since(called));
            last = last.max(seen.at);
        }
    }
    Ok(last)
}

/// etcd's fan-out to `watchers` watchers, on `server` (a fresh etcd).
pub async fn fan_out(
    server: &Server,
    run_id: u64,
    watchers: usize,
    p: &Params,
    m: &mut Metrics,
) -> Result<()> {
    // One descriptor per watcher: its gRPC connection.
    let wanted = watchers;
    let (watchers, capped) = fitting(watchers, 1);
    if let Some(why) = &capped {
        eprint!("({why}) ");
    }
    let key = format!("bench/observers/{run_id}");
    let mut writer = etcd_connect(server.addr).await?;
    writer
        .put(key.clone(), "holder", None)
        .await
        .context("etcd put")?;
    let idle = server.sample()?;
    let mut placed = Vec::with_capacity(watchers);
    while placed.len() < watchers {
        let mut batch = JoinSet::new();
        for _ in placed.len()..watchers.min(placed.len() + PLACING_AT_ONCE) {
            let key = key.clone();
            batch.spawn(timeout(OP_TIMEOUT, watcher(server.addr, key)));
        }
        while let Some(joined) = batch.join_next().await {
            placed.push(
                joined
                    .context("watcher panicked")?
                    .context("placing an etcd watcher timed out")??,
            );
        }
    }
    let watching = server.sample()?;

    let (tx, mut reports) = mpsc::unbounded_channel();
    let mut clients = Vec::with_capacity(watchers);
    let mut readers = JoinSet::new();
    for (i, (client, stream)) in placed.into_iter().enumerate() {
        clients.push(client);
        readers.spawn(forward_events(i, stream, tx.clone()));
    }
    drop(tx);

    let (mut deleted, mut put) = (Samples::default(), Samples::default());
    let mut last_put = Samples::default();
    let mut cpu_from = None;
    let mut cycles = 0usize;
    let mut measure_until = None;
    for cycle in 0..WARM_CYCLES + p.max_cycles {
        if cycle == WARM_CYCLES {
            cpu_from = Some((server.sample()?, sys::own_cpu_time()));
        }
        let measured = cycle >= WARM_CYCLES;
        let (mut d, mut u) = (Samples::default(), Samples::default());
        let called = Instant::now();
        let revision = timeout(OP_TIMEOUT, writer.delete(key.clone(), None))
            .await
            .context("etcd delete timed out")??
            .header()
            .map_or(0, |h| h.revision());
        until_every_watcher_has(&mut reports, watchers, false, revision, called, &mut d).await?;
        let called = Instant::now();
        let revision = timeout(
            OP_TIMEOUT,
            writer.put(key.clone(), format!("holder-{cycle}"), None),
        )
        .await
        .context("etcd put timed out")??
        .header()
        .map_or(0, |h| h.revision());
        let last =
            until_every_watcher_has(&mut reports, watchers, true, revision, called, &mut u).await?;
        if measured {
            deleted.extend(&d);
            put.extend(&u);
            last_put.push(last.saturating_duration_since(called));
            cycles += 1;
            let until = *measure_until.get_or_insert_with(|| Instant::now() + p.cycles_len);
            if Instant::now() >= until {
                break;
            }
        }
    }
    let cpu_to = (server.sample()?, sys::own_cpu_time());
    readers.abort_all();
    drop(clients);

    // Keyed by the count asked for; `.observers` is the count used.
    let pre = fan_key(wanted);
    put_fan_out(m, &pre, capped.is_some(), watchers, cycles);
    for (what, samples) in [
        ("delete", &mut deleted),
        ("put", &mut put),
        ("last_put", &mut last_put),
    ] {
        m.put_opt(&format!("{pre}.{what}_p50_us"), samples.percentile_us(50.0));
        m.put_opt(&format!("{pre}.{what}_p99_us"), samples.percentile_us(99.0));
    }
    if let Some((from, own_from)) = cpu_from
        && cycles > 0
    {
        let cycle_us = (cpu_to.0.cpu - from.cpu).as_secs_f64() * 1e6 / cycles as f64;
        m.put(&format!("{pre}.server_cpu_us_per_cycle"), cycle_us);
        m.put(
            &format!("{pre}.client_cpu_us_per_cycle"),
            (cpu_to.1 - own_from).as_secs_f64() * 1e6 / cycles as f64,
        );
    }
    if watchers > 1 {
        m.put(
            &format!("{pre}.rss_bytes_per_observer"),
            watching.rss_bytes.saturating_sub(idle.rss_bytes) as f64 / watchers as f64,
        );
    }
    Ok(())
}
