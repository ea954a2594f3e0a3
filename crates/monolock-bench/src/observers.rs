//! Values and observers (docs/protocol.md, "Version 2 extension: values
//! and observers"), measured through the Rust client library
//! (`monolock-client`) as users get it.
//!
//! - **Fan-out**, for each observer count N, on a fresh server: one name,
//!   a holder (its own client) and a waiter (another), and N observers,
//!   **each on a client of its own** (its own session and connection: what
//!   N processes watching would be, all in this process). A cycle is the
//!   holder's `release()`: the server hands the lock to the waiter and
//!   pushes RELEASED (the old token) then GRANTED (the new one) to every
//!   watch. Recorded per observer: the time from the `release` call to its
//!   stream yielding RELEASED, and GRANTED; per cycle, the time until the
//!   *last* observer has GRANTED. The former holder then queues again, so
//!   the next cycle hands the lock back. The same cycles with no observer
//!   first, on the same server, give what a cycle costs the server without
//!   any push: server CPU per push is net of it.
//! - **Memory per observer**: the server's RSS with the N observers placed
//!   (each told its initial state), minus its RSS before, over N. Also the
//!   same N watches placed by one client, which multiplexes them on its
//!   sessions (1,024 watches each): what a watch costs without a session
//!   and a connection of its own.
//! - **Value replacement**: one holder calling `set_value` in a loop (each
//!   returns once PROCLAIMED is read) with 0, 1 and 100 observers reading
//!   every state; replacements/s and server CPU per replacement. At the end
//!   every observer must be told the last value.
//!
//! The observers run in this process, on its one thread (pinned to the
//! load generator's CPU): the fan-out's latencies include this process
//! reading N connections one after another, as one machine watching would.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use monolock_client::{Client, Enqueued, LockGuard, Observation, StateEvent, Waiter};
use tokio::{
    sync::mpsc,
    task::JoinSet,
    time::{sleep, timeout},
};

use crate::{cycles::OP_TIMEOUT, report::Metrics, servers::Server, stats::Samples, sys};

/// Lease of the holder and the waiter.
const HOLDER_LEASE: Duration = Duration::from_secs(10);
/// Lease of the observers' sessions: long, so that their heartbeats
/// (every lease / 4) cost the server next to nothing while pushes are
/// measured.
const OBSERVER_LEASE: Duration = Duration::from_secs(300);
/// Observers connecting at once while they are placed.
const PLACING_AT_ONCE: usize = 128;
/// Descriptors kept back for the rest of this process (servers' logs,
/// the holder and the waiter, the runtime) when the descriptor limit
/// caps the observer count.
const DESCRIPTOR_RESERVE: u64 = 256;
/// The longest a fan-out may take to reach every observer before the
/// step fails (a loaded machine, 10,000 connections).
const FAN_OUT_PATIENCE: Duration = Duration::from_secs(60);
/// Cycles before the measured ones, in every fan-out run.
const WARM_CYCLES: usize = 3;

/// Sizes and durations of the scenario.
#[derive(Clone, Debug)]
pub struct Params {
    /// Observer counts of the fan-out runs.
    pub fan_outs: Vec<usize>,
    /// At most this many measured cycles per fan-out run...
    pub max_cycles: usize,
    /// ... and no longer than this, once the first cycle is done.
    pub cycles_len: Duration,
    /// Cycles with no observer, for the server's CPU per bare cycle.
    pub bare_cycles: usize,
    /// Observer counts of the value replacement runs.
    pub value_observers: Vec<usize>,
    /// Each value replacement window (after `warmup`).
    pub value_len: Duration,
    /// Replacements before each measured window.
    pub warmup: Duration,
}

/// What one observer's stream yielded, stamped when it yielded it.
struct Seen {
    observer: usize,
    event: StateEvent,
    token: u64,
    coalesced: bool,
    at: Instant,
}

/// A stream's end, or a state; sent by each observer's task.
type Report = Result<Seen, String>;

/// The figures' key prefix of a fan-out of `observers`.
pub fn fan_key(observers: usize) -> String {
    format!("observers.fan{observers}")
}

/// The figures' key prefix of value replacement with `observers`.
pub fn value_key(observers: usize) -> String {
    format!("observers.value.o{observers}")
}

/// Descriptors one monolock observer takes in this process: its socket,
/// and the duplicate the Rust client keeps to shut it down from any task
/// (`SocketShutdown`).
pub const MONOLOCK_DESCRIPTORS: u64 = 2;

/// How many observers fit this process's descriptor limit (raised to its
/// hard limit first), each taking `descriptors`: `wanted`, or fewer with
/// the reason.
pub fn fitting(wanted: usize, descriptors: u64) -> (usize, Option<String>) {
    let limit = sys::raise_nofile_limit().unwrap_or(1024);
    observers_within(limit, wanted, descriptors)
}

/// [`fitting`] under the descriptor limit `limit`.
fn observers_within(limit: u64, wanted: usize, descriptors: u64) -> (usize, Option<String>) {
    let room = limit.saturating_sub(DESCRIPTOR_RESERVE) / descriptors.max(1);
    let room = usize::try_from(room).unwrap_or(usize::MAX);
    if wanted <= room {
        (wanted, None)
    } else {
        (
            room,
            Some(format!(
                "{wanted} observers do not fit the descriptor limit (RLIMIT_NOFILE {limit}, {descriptors} per observer): {room} were used"
            )),
        )
    }
}

/// A client of its own for one observer.
fn observer_client(server: &Server) -> Client {
    Client::new(server.addr.to_string()).with_default_lease(OBSERVER_LEASE)
}

/// Places `count` observers of `name`, each on a client of its own, and
/// reads each one's initial state, which must name `holder_token`.
async fn place_observers(
    server: &Server,
    name: &str,
    count: usize,
    holder_token: u64,
) -> Result<Vec<(Client, Observation)>> {
    let mut placed = Vec::with_capacity(count);
    let mut next = 0;
    while next < count {
        let mut batch = JoinSet::new();
        for _ in next..count.min(next + PLACING_AT_ONCE) {
            let client = observer_client(server);
            let name = name.to_owned();
            batch.spawn(timeout(OP_TIMEOUT, async move {
                let mut observation = client.observe(&name).await?;
                let initial = observation
                    .next()
                    .await
                    .context("the observation ended before its initial state")??;
                anyhow::Ok((client, observation, initial))
            }));
        }
        next = count.min(next + PLACING_AT_ONCE);
        while let Some(joined) = batch.join_next().await {
            let (client, observation, initial) = joined
                .context("observer panicked")?
                .context("placing an observer timed out")??;
            if !(initial.initial && initial.held && initial.token == holder_token) {
                bail!("an observer's initial state is {initial:?}, not the holder's");
            }
            placed.push((client, observation));
        }
    }
    Ok(placed)
}

/// Reads `observation` until it ends, reporting every state.
async fn forward_states(
    observer: usize,
    mut observation: Observation,
    out: mpsc::UnboundedSender<Report>,
) {
    while let Some(next) = observation.next().await {
        let at = Instant::now();
        let report = next
            .map(|state| Seen {
                observer,
                event: state.event,
                token: state.token,
                coalesced: state.coalesced,
                at,
            })
            .map_err(|e| format!("observer {observer}: {e}"));
        let ended = report.is_err();
        if out.send(report).is_err() || ended {
            return;
        }
    }
}

/// The lock's two contenders: one holds, the other waits behind it.
struct Contenders {
    holder: (Client, LockGuard),
    waiter: (Client, Waiter),
    name: String,
}

impl Contenders {
    async fn start(server: &Server, name: &str) -> Result<Self> {
        let client = |who: &str| {
            (
                Client::new(server.addr.to_string()).with_default_lease(HOLDER_LEASE),
                who.to_owned(),
            )
        };
        let (a, a_value) = client("holder-a");
        let (b, b_value) = client("holder-b");
        let guard = timeout(OP_TIMEOUT, a.acquire_with_value(name, None, &a_value))
            .await
            .context("the first ACQUIRE timed out")??;
        let waiter = queue(&b, name, &b_value).await?;
        Ok(Self {
            holder: (a, guard),
            waiter: (b, waiter),
            name: name.to_owned(),
        })
    }

    fn holder_token(&self) -> u64 {
        self.holder.1.token()
    }

    /// One hand-on: the holder releases, the waiter is granted, and the
    /// former holder queues again. Returns the instant of the `release`
    /// call, the released token, the granted one and the waiter's grant.
    async fn hand_on(self) -> Result<(Self, HandOn)> {
        let Self {
            holder: (holder_client, guard),
            waiter: (waiter_client, waiter),
            name,
        } = self;
        let released = guard.token();
        let called = Instant::now();
        timeout(OP_TIMEOUT, guard.release())
            .await
            .context("RELEASE timed out")??;
        let granted = timeout(OP_TIMEOUT, waiter.granted())
            .await
            .context("the waiter's grant timed out")??;
        let waiter_granted = Instant::now();
        let value = format!("queued-{}", granted.token());
        let queued = queue(&holder_client, &name, &value).await?;
        let hand_on = HandOn {
            called,
            released,
            granted: granted.token(),
            waiter_granted,
        };
        Ok((
            Self {
                holder: (waiter_client, granted),
                waiter: (holder_client, queued),
                name,
            },
            hand_on,
        ))
    }
}

/// One hand-on, as [`Contenders::hand_on`] saw it.
struct HandOn {
    called: Instant,
    released: u64,
    granted: u64,
    waiter_granted: Instant,
}

/// Queues a claim of `name` with `value` behind its holder.
async fn queue(client: &Client, name: &str, value: &str) -> Result<Waiter> {
    match timeout(OP_TIMEOUT, client.enqueue_with_value(name, None, value))
        .await
        .context("ACQUIRE timed out")??
    {
        Enqueued::Waiting(waiter) => Ok(waiter),
        Enqueued::Acquired(_) => bail!("the lock was free when it should have been held"),
    }
}

/// Waits until every observer has been told the grant of `hand_on`:
/// stamps each observer's RELEASED and GRANTED into `released` and
/// `granted`, and returns the instant the last one was told, and how many
/// were told by a coalesced state instead.
async fn until_every_observer_knows(
    reports: &mut mpsc::UnboundedReceiver<Report>,
    observers: usize,
    hand_on: &HandOn,
    released: &mut Samples,
    granted: &mut Samples,
) -> Result<(Instant, u64)> {
    let mut told = vec![false; observers];
    let mut left = observers;
    let mut last = hand_on.called;
    let mut coalesced = 0u64;
    let give_up = Instant::now() + FAN_OUT_PATIENCE;
    while left > 0 {
        let report = timeout(give_up.saturating_duration_since(Instant::now()), reports.recv())
            .await
            .with_context(|| {
                format!("{left} of {observers} observers were not told of the grant within {FAN_OUT_PATIENCE:?}")
            })?
            .context("every observer's stream ended")?;
        let seen = report.map_err(anyhow::Error::msg)?;
        let since_call = seen.at.saturating_duration_since(hand_on.called);
        match seen.event {
            StateEvent::Released if seen.token == hand_on.released => released.push(since_call),
            StateEvent::Granted | StateEvent::Held
                if seen.token == hand_on.granted && !told[seen.observer] =>
            {
                told[seen.observer] = true;
                left -= 1;
                granted.push(since_call);
                last = last.max(seen.at);
                coalesced += u64::from(seen.coalesced);
            }
            // A coalesced FREE, the older holder's state, or a grant this
            // observer was already told of (never twice: token order).
            _ => {}
        }
    }
    Ok((last, coalesced))
}

/// The same hand-ons with no observer: the server's CPU per bare cycle.
async fn bare_cycles(server: &Server, run_id: u64, cycles: usize) -> Result<f64> {
    let name = format!("bench/observers/bare/{run_id}");
    let mut contenders = Contenders::start(server, &name).await?;
    for _ in 0..WARM_CYCLES {
        contenders = contenders.hand_on().await?.0;
    }
    let before = server.sample()?;
    for _ in 0..cycles {
        contenders = contenders.hand_on().await?.0;
    }
    let after = server.sample()?;
    Ok((after.cpu - before.cpu).as_secs_f64() * 1e6 / cycles.max(1) as f64)
}

/// Lets the server settle (runtime threads, allocator) with some traffic
/// before a baseline is read.
async fn warm(server: &Server, run_id: u64) -> Result<()> {
    let client = Client::new(server.addr.to_string());
    let name = format!("bench/observers/warm/{run_id}");
    for _ in 0..100 {
        let guard = timeout(
            OP_TIMEOUT,
            client.acquire_with_value(&name, HOLDER_LEASE, "w"),
        )
        .await
        .context("warm-up ACQUIRE timed out")??;
        let watch = timeout(OP_TIMEOUT, client.observe(&name))
            .await
            .context("warm-up OBSERVE timed out")??;
        drop(watch);
        timeout(OP_TIMEOUT, guard.release())
            .await
            .context("warm-up RELEASE timed out")??;
    }
    // Not a synchronisation: the idle server's RSS is read a moment after
    // the warm-up's frees, as the sessions scenario reads its baseline.
    sleep(Duration::from_millis(300)).await;
    Ok(())
}

/// One fan-out run on `server` (fresh): memory per observer, then the
/// hand-on cycles with `observers` observers.
pub async fn fan_out(
    server: &Server,
    run_id: u64,
    observers: usize,
    p: &Params,
    m: &mut Metrics,
) -> Result<()> {
    let wanted = observers;
    let (observers, capped) = fitting(observers, MONOLOCK_DESCRIPTORS);
    if let Some(why) = &capped {
        eprint!("({why}) ");
    }
    warm(server, run_id).await?;
    let bare_cpu_us = bare_cycles(server, run_id, p.bare_cycles).await?;
    let name = format!("bench/observers/fan/{run_id}");
    let mut contenders = Contenders::start(server, &name).await?;
    let idle = server.sample()?;
    let placing = Instant::now();
    let placed = place_observers(server, &name, observers, contenders.holder_token()).await?;
    let placing_secs = placing.elapsed().as_secs_f64();
    let watching = server.sample()?;

    let (tx, mut reports) = mpsc::unbounded_channel();
    let mut clients = Vec::with_capacity(observers);
    let mut readers = JoinSet::new();
    for (i, (client, observation)) in placed.into_iter().enumerate() {
        clients.push(client);
        readers.spawn(forward_states(i, observation, tx.clone()));
    }
    drop(tx);

    let (mut released, mut granted) = (Samples::default(), Samples::default());
    let (mut last, mut waiter) = (Samples::default(), Samples::default());
    let mut coalesced = 0;
    let mut cpu_from = None;
    let mut cycles = 0usize;
    let mut measure_until = None;
    for cycle in 0..WARM_CYCLES + p.max_cycles {
        if cycle == WARM_CYCLES {
            cpu_from = Some((server.sample()?, sys::own_cpu_time()));
        }
        let (next, hand_on) = contenders.hand_on().await?;
        contenders = next;
        let measured = cycle >= WARM_CYCLES;
        let (mut r, mut g) = (Samples::default(), Samples::default());
        let (told_last, told_coalesced) =
            until_every_observer_knows(&mut reports, observers, &hand_on, &mut r, &mut g).await?;
        if measured {
            released.extend(&r);
            granted.extend(&g);
            last.push(told_last.saturating_duration_since(hand_on.called));
            waiter.push(hand_on.waiter_granted - hand_on.called);
            coalesced += told_coalesced;
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
    put_fan_out(m, &pre, capped.is_some(), observers, cycles);
    m.put(&format!("{pre}.placing_secs"), placing_secs);
    put_percentiles(m, &pre, "released", &mut released);
    put_percentiles(m, &pre, "granted", &mut granted);
    put_percentiles(m, &pre, "last", &mut last);
    put_percentiles(m, &pre, "waiter", &mut waiter);
    m.put(&format!("{pre}.coalesced"), coalesced as f64);
    if let Some((from, own_from)) = cpu_from
        && cycles > 0
    {
        let cycle_us = (cpu_to.0.cpu - from.cpu).as_secs_f64() * 1e6 / cycles as f64;
        let pushes = 2.0 * observers as f64;
        m.put(&format!("{pre}.server_cpu_us_per_cycle"), cycle_us);
        // This process: the holder, the waiter and every observer's reads.
        m.put(
            &format!("{pre}.client_cpu_us_per_cycle"),
            (cpu_to.1 - own_from).as_secs_f64() * 1e6 / cycles as f64,
        );
        m.put(&format!("{pre}.bare_cycle_cpu_us"), bare_cpu_us);
        if observers > 0 {
            m.put(
                &format!("{pre}.server_cpu_us_per_push"),
                (cycle_us - bare_cpu_us).max(0.0) / pushes,
            );
        }
    }
    // One observer's memory is below the RSS's page granularity.
    if observers > 1 {
        m.put(
            &format!("{pre}.rss_bytes_per_observer"),
            watching.rss_bytes.saturating_sub(idle.rss_bytes) as f64 / observers as f64,
        );
    }
    Ok(())
}

/// `<pre>.<what>_p50_us` and `_p99_us` of `samples`.
/// What every fan-out reports first, monolock's and etcd's alike: the
/// count used, the descriptor limit when it capped the count asked for,
/// and the cycles measured.
pub(crate) fn put_fan_out(m: &mut Metrics, pre: &str, capped: bool, used: usize, cycles: usize) {
    if capped {
        m.put(
            &format!("{pre}.descriptor_limit"),
            sys::raise_nofile_limit().unwrap_or(0) as f64,
        );
    }
    m.put(&format!("{pre}.observers"), used as f64);
    m.put(&format!("{pre}.cycles"), cycles as f64);
}

fn put_percentiles(m: &mut Metrics, pre: &str, what: &str, samples: &mut Samples) {
    m.put_opt(&format!("{pre}.{what}_p50_us"), samples.percentile_us(50.0));
    m.put_opt(&format!("{pre}.{what}_p99_us"), samples.percentile_us(99.0));
}

/// `watches` watches of one name placed by one client, which multiplexes
/// them on its sessions, on `server` (fresh): the server's RSS per watch.
pub async fn shared_watches(
    server: &Server,
    run_id: u64,
    watches: usize,
    m: &mut Metrics,
) -> Result<()> {
    warm(server, run_id).await?;
    let idle = server.sample()?;
    let client = observer_client(server);
    let name = format!("bench/observers/shared/{run_id}");
    let mut placed = Vec::with_capacity(watches);
    while placed.len() < watches {
        let mut batch = JoinSet::new();
        for _ in placed.len()..watches.min(placed.len() + PLACING_AT_ONCE) {
            let client = client.clone();
            let name = name.clone();
            batch.spawn(timeout(OP_TIMEOUT, async move {
                let mut observation = client.observe(&name).await?;
                observation
                    .next()
                    .await
                    .context("the observation ended before its initial state")??;
                anyhow::Ok(observation)
            }));
        }
        while let Some(joined) = batch.join_next().await {
            let observation = joined
                .context("watch panicked")?
                .context("placing a watch timed out")??;
            placed.push(observation);
        }
    }
    let watching = server.sample()?;
    let pre = format!("observers.shared{watches}");
    m.put(&format!("{pre}.watches"), watches as f64);
    m.put(
        &format!("{pre}.sessions"),
        client.session_loads().len() as f64,
    );
    m.put(
        &format!("{pre}.rss_bytes_per_watch"),
        watching.rss_bytes.saturating_sub(idle.rss_bytes) as f64 / watches as f64,
    );
    Ok(())
}

/// One observer of value replacement: reads every state until told
/// `last`; returns the states read and how many were coalesced.
async fn value_reader(mut observation: Observation, last: Arc<str>) -> Result<(u64, u64)> {
    let (mut states, mut coalesced) = (0u64, 0u64);
    while let Some(next) = observation.next().await {
        let state = next?;
        states += 1;
        coalesced += u64::from(state.coalesced);
        if state.held && *state.value == *last {
            return Ok((states, coalesced));
        }
    }
    bail!("the observation ended before the last value")
}

/// Value replacement with `observers` observers of the holder's lock.
pub async fn value_replacement(
    server: &Server,
    run_id: u64,
    observers: usize,
    p: &Params,
    m: &mut Metrics,
) -> Result<()> {
    let name = format!("bench/observers/value/{run_id}/{observers}");
    let holder = Client::new(server.addr.to_string()).with_default_lease(HOLDER_LEASE);
    let guard = timeout(OP_TIMEOUT, holder.acquire_with_value(&name, None, "v0"))
        .await
        .context("ACQUIRE timed out")??;
    let placed = place_observers(server, &name, observers, guard.token()).await?;
    // Unique per run, and never a value of the loop below.
    let last: Arc<str> = format!("last-{run_id}").into();
    let mut readers = JoinSet::new();
    let mut clients = Vec::with_capacity(observers);
    for (client, observation) in placed {
        clients.push(client);
        readers.spawn(value_reader(observation, last.clone()));
    }

    let measure_from = Instant::now() + p.warmup;
    let end = measure_from + p.value_len;
    let mut from = None;
    let mut replaced = 0u64;
    let mut replaced_in_all = 0u64;
    for i in 0..u64::MAX {
        let now = Instant::now();
        if now >= end {
            break;
        }
        if from.is_none() && now >= measure_from {
            from = Some((server.sample()?, now));
        }
        timeout(OP_TIMEOUT, guard.set_value(format!("v{i}")))
            .await
            .context("PROCLAIM timed out")??;
        replaced += u64::from(from.is_some());
        replaced_in_all += 1;
    }
    let (s1, t1) = (server.sample()?, Instant::now());
    timeout(OP_TIMEOUT, guard.set_value(&*last))
        .await
        .context("the last PROCLAIM timed out")??;
    let (mut states, mut coalesced) = (0u64, 0u64);
    while let Some(joined) = timeout(FAN_OUT_PATIENCE, readers.join_next())
        .await
        .context("an observer was not told the last value")?
    {
        let (s, c) = joined.context("observer panicked")??;
        states += s;
        coalesced += c;
    }
    drop(clients);
    timeout(OP_TIMEOUT, guard.release())
        .await
        .context("RELEASE timed out")??;

    let Some((s0, t0)) = from else {
        bail!("the value replacement window never started");
    };
    if replaced == 0 {
        bail!("no value was replaced in the window");
    }
    let secs = (t1 - t0).as_secs_f64();
    let pre = value_key(observers);
    m.put(&format!("{pre}.observers"), observers as f64);
    m.put(&format!("{pre}.replacements_per_s"), replaced as f64 / secs);
    m.put(
        &format!("{pre}.server_cpu_us_per_replacement"),
        (s1.cpu - s0.cpu).as_secs_f64() * 1e6 / replaced as f64,
    );
    if observers > 0 {
        // Of every change there was to tell (each replacement, and the
        // last value; the initial state was read while placing), the
        // share an observer was told.
        m.put(
            &format!("{pre}.observer_told_share"),
            states as f64 / observers as f64 / (replaced_in_all + 1) as f64,
        );
        m.put(&format!("{pre}.coalesced_states"), coalesced as f64);
    }
    Ok(())
}

/// The scenario's table: one column per observer count, median
/// [min–max] over rounds.
pub fn table(s: &crate::report::Summary, p: &Params) -> String {
    use std::fmt::Write as _;
    let cell = |key: String| {
        s.get(&key)
            .map_or_else(|| "–".to_owned(), crate::report::fmt_spread)
    };
    let mut md = String::new();
    let _ = write!(md, "| release → observers (each its own client) |");
    for n in &p.fan_outs {
        let _ = write!(md, " {} |", observer_heading(s, *n));
    }
    let _ = writeln!(md);
    let _ = writeln!(md, "|---|{}", "---:|".repeat(p.fan_outs.len()));
    let fan_rows: [(&str, &str); 14] = [
        (
            "released_p50_us",
            "release call → an observer's RELEASED, p50 (µs)",
        ),
        (
            "released_p99_us",
            "release call → an observer's RELEASED, p99 (µs)",
        ),
        (
            "granted_p50_us",
            "release call → an observer's GRANTED, p50 (µs)",
        ),
        (
            "granted_p99_us",
            "release call → an observer's GRANTED, p99 (µs)",
        ),
        (
            "last_p50_us",
            "release call → the last observer's GRANTED, p50 (µs)",
        ),
        (
            "last_p99_us",
            "release call → the last observer's GRANTED, p99 (µs)",
        ),
        (
            "waiter_p50_us",
            "release call → the waiter's grant, p50 (µs)",
        ),
        (
            "server_cpu_us_per_push",
            "server CPU per push, net of a bare cycle (µs)",
        ),
        ("server_cpu_us_per_cycle", "server CPU per cycle (µs)"),
        (
            "client_cpu_us_per_cycle",
            "load generator CPU per cycle: holder, waiter, observers (µs)",
        ),
        (
            "bare_cycle_cpu_us",
            "server CPU per cycle with no observer (µs)",
        ),
        ("rss_bytes_per_observer", "server RSS per observer (bytes)"),
        ("coalesced", "grants told by a coalesced state"),
        ("cycles", "cycles measured"),
    ];
    for (figure, label) in fan_rows {
        let cells: Vec<String> = p
            .fan_outs
            .iter()
            .map(|n| cell(format!("{}.{figure}", fan_key(*n))))
            .collect();
        if cells.iter().any(|c| c != "–") {
            let _ = writeln!(md, "| {label} | {} |", cells.join(" | "));
        }
    }
    let shared: Vec<String> = p
        .fan_outs
        .iter()
        .map(|n| cell(format!("observers.shared{n}.rss_bytes_per_watch")))
        .collect();
    if shared.iter().any(|c| c != "–") {
        let _ = writeln!(
            md,
            "| server RSS per watch, N watches multiplexed by one client (bytes) | {} |",
            shared.join(" | ")
        );
    }
    let etcd_rows: [(&str, &str); 9] = [
        (
            "delete_p50_us",
            "etcd: delete call → a watcher's DELETE, p50 (µs)",
        ),
        (
            "delete_p99_us",
            "etcd: delete call → a watcher's DELETE, p99 (µs)",
        ),
        ("put_p50_us", "etcd: put call → a watcher's PUT, p50 (µs)"),
        ("put_p99_us", "etcd: put call → a watcher's PUT, p99 (µs)"),
        (
            "last_put_p50_us",
            "etcd: put call → the last watcher's PUT, p50 (µs)",
        ),
        (
            "last_put_p99_us",
            "etcd: put call → the last watcher's PUT, p99 (µs)",
        ),
        (
            "server_cpu_us_per_cycle",
            "etcd: server CPU per cycle, a delete and a put (µs)",
        ),
        (
            "client_cpu_us_per_cycle",
            "etcd: load generator CPU per cycle: writer, watchers (µs)",
        ),
        (
            "rss_bytes_per_observer",
            "etcd: server RSS per watcher (bytes)",
        ),
    ];
    for (figure, label) in etcd_rows {
        let cells: Vec<String> = p
            .fan_outs
            .iter()
            .map(|n| cell(format!("{}.{figure}", crate::observers_etcd::fan_key(*n))))
            .collect();
        if cells.iter().any(|c| c != "–") {
            let _ = writeln!(md, "| {label} | {} |", cells.join(" | "));
        }
    }
    let _ = writeln!(md);
    let _ = write!(md, "| set_value in a loop (PROCLAIMED read) |");
    for n in &p.value_observers {
        let _ = write!(md, " {n} observer(s) |");
    }
    let _ = writeln!(md);
    let _ = writeln!(md, "|---|{}", "---:|".repeat(p.value_observers.len()));
    for (figure, label) in [
        ("replacements_per_s", "replacements/s"),
        (
            "server_cpu_us_per_replacement",
            "server CPU per replacement (µs)",
        ),
        (
            "observer_told_share",
            "share of the values an observer was told",
        ),
        ("coalesced_states", "states told coalesced (all observers)"),
    ] {
        let cells: Vec<String> = p
            .value_observers
            .iter()
            .map(|n| cell(format!("{}.{figure}", value_key(*n))))
            .collect();
        if cells.iter().any(|c| c != "–") {
            let _ = writeln!(md, "| {label} | {} |", cells.join(" | "));
        }
    }
    md
}

/// A fan-out column's heading: its observer count, and the count used if
/// the descriptor limit capped it.
fn observer_heading(s: &crate::report::Summary, wanted: usize) -> String {
    match s.get(&format!("{}.observers", fan_key(wanted))) {
        Some(used) if used.max < wanted as f64 => {
            let limit = s
                .get(&format!("{}.descriptor_limit", fan_key(wanted)))
                .map_or_else(String::new, |l| {
                    format!(" by RLIMIT_NOFILE {}", crate::report::fmt_num(l.max))
                });
            format!(
                "{wanted} asked, {} used{limit}",
                crate::report::fmt_num(used.min)
            )
        }
        _ => format!("{wanted} observer(s)"),
    }
}

/// Smoke mode: the figures the scenario must have produced.
pub fn smoke_checks(s: &crate::report::Summary, p: &Params) -> Vec<String> {
    let mut keys = Vec::new();
    for n in &p.fan_outs {
        let pre = fan_key(*n);
        for figure in [
            "released_p50_us",
            "granted_p50_us",
            "granted_p99_us",
            "last_p50_us",
            "server_cpu_us_per_cycle",
            "cycles",
        ] {
            keys.push(format!("{pre}.{figure}"));
        }
    }
    for n in &p.value_observers {
        keys.push(format!("{}.replacements_per_s", value_key(*n)));
        keys.push(format!("{}.server_cpu_us_per_replacement", value_key(*n)));
    }
    keys.into_iter()
        .filter_map(|key| match s.get(&key) {
            Some(sp) if sp.median > 0.0 && sp.median.is_finite() => None,
            Some(sp) => Some(format!("{key} = {}", sp.median)),
            None => Some(format!("{key} missing")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::spread;

    #[test]
    fn observers_beyond_the_descriptor_limit_are_capped_and_say_why() {
        // The Rust client's two descriptors a connection: 10,000 observers
        // need more than 20,000.
        let (used, why) = observers_within(20_000, 10_000, MONOLOCK_DESCRIPTORS);
        assert_eq!(used, 9_872);
        let why = why.expect("a reason");
        assert!(why.contains("RLIMIT_NOFILE 20000"), "{why}");
        assert_eq!(observers_within(40_000, 10_000, 2), (10_000, None));
        assert_eq!(observers_within(20_000, 10_000, 1), (10_000, None));
    }

    #[test]
    fn a_capped_column_names_the_count_used_and_the_limit() {
        let mut s = crate::report::Summary::new();
        let put = |s: &mut crate::report::Summary, key: &str, v: f64| {
            s.insert(key.to_owned(), spread(&[v]).expect("one value"));
        };
        put(&mut s, "observers.fan100.observers", 100.0);
        put(&mut s, "observers.fan10000.observers", 9_872.0);
        put(&mut s, "observers.fan10000.descriptor_limit", 20_000.0);
        assert_eq!(observer_heading(&s, 100), "100 observer(s)");
        assert_eq!(
            observer_heading(&s, 10_000),
            "10000 asked, 9872 used by RLIMIT_NOFILE 20000"
        );
    }
}
