//! Figures of a run: per-round metrics, their median and spread, and the
//! tables of figures and ratios (markdown, printed and saved).

use std::{collections::BTreeMap, fmt::Write as _};

use serde_json::{Value, json};

use crate::stats::{Spread, spread};

/// The figures of one round, by dotted key
/// (`<scenario>[.<variant>].<series>.<figure>`).
#[derive(Clone, Debug, Default)]
pub struct Metrics(pub BTreeMap<String, f64>);

impl Metrics {
    /// Records a figure.
    pub fn put(&mut self, key: &str, value: f64) {
        self.0.insert(key.to_owned(), value);
    }

    /// The figure recorded under `key`, if any.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.0.get(key).copied()
    }

    /// Records a figure if there is one.
    pub fn put_opt(&mut self, key: &str, value: Option<f64>) {
        if let Some(v) = value {
            self.put(key, v);
        }
    }

    /// As JSON (non-finite numbers, e.g. a starved client's fairness, become null).
    pub fn to_json(&self) -> Value {
        Value::Object(self.0.iter().map(|(k, v)| (k.clone(), num(*v))).collect())
    }
}

fn num(v: f64) -> Value {
    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
}

/// Median and spread of every key over the rounds.
pub type Summary = BTreeMap<String, Spread>;

/// Summarises rounds key by key.
pub fn summarize(rounds: &[Metrics]) -> Summary {
    let mut values: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for r in rounds {
        for (k, v) in &r.0 {
            values.entry(k.as_str()).or_default().push(*v);
        }
    }
    values
        .into_iter()
        .filter_map(|(k, v)| spread(&v).map(|s| (k.to_owned(), s)))
        .collect()
}

/// The summary as JSON.
pub fn summary_json(s: &Summary) -> Value {
    Value::Object(
        s.iter()
            .map(|(k, sp)| {
                (
                    k.clone(),
                    json!({"median": num(sp.median), "min": num(sp.min), "max": num(sp.max), "n": sp.n}),
                )
            })
            .collect(),
    )
}

/// The Redis retry-delay series (`redis-d<ms>`) of contention `label` with
/// the best median of `figure`, and that median's spread.
pub fn redis_best(
    s: &Summary,
    label: &str,
    figure: &str,
    higher_is_better: bool,
) -> Option<(String, Spread)> {
    let prefix = format!("contention.{label}.redis-d");
    let suffix = format!(".{figure}");
    s.iter()
        .filter(|(k, _)| k.starts_with(&prefix) && k.ends_with(&suffix))
        .map(|(k, sp)| {
            let series = k[prefix.len() - "redis-d".len()..k.len() - suffix.len()].to_owned();
            (series, *sp)
        })
        .reduce(|best, cand| {
            let better = if higher_is_better {
                cand.1.median > best.1.median
            } else {
                cand.1.median < best.1.median
            };
            if better { cand } else { best }
        })
}

/// Formats a figure for a table: 3 significant digits-ish, ∞ for infinity.
pub fn fmt_num(v: f64) -> String {
    if v.is_infinite() {
        "∞".to_owned()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else if v != 0.0 && v.abs() < 0.001 {
        // Ratios of ten thousand to one keep two digits, not "0.000".
        format!("{v:.1e}")
    } else {
        format!("{v:.3}")
    }
}

/// `median [min–max]`, or just the median for a single round.
pub fn fmt_spread(sp: &Spread) -> String {
    if sp.n > 1 && sp.min != sp.max {
        format!(
            "{} [{}–{}]",
            fmt_num(sp.median),
            fmt_num(sp.min),
            fmt_num(sp.max)
        )
    } else {
        fmt_num(sp.median)
    }
}

/// What the tables need to know about the run besides its figures.
pub struct TargetContext<'a> {
    /// Contention variants (e.g. `w0`, `w1ms`) with a human label.
    pub contention: &'a [(String, String)],
    /// The monolock lease (and Redis TTL) of the dead-holder trials, ms.
    pub dead_lease_ms: f64,
}

/// Where the Redis figure of a table row comes from.
#[derive(Clone, Debug)]
enum RedisFigure {
    /// None: a figure of monolock only.
    None,
    /// The monolock figure itself: one measurement for both systems (the
    /// machine floors), shown in both columns without a ratio.
    Shared,
    /// This key.
    Key(String),
    /// Of contention variant `label`, the Redis retry delay with the best
    /// median of `figure`.
    BestDelay {
        /// The contention variant.
        label: String,
        /// The figure compared.
        figure: &'static str,
        /// Which way is better.
        higher_is_better: bool,
    },
}

impl RedisFigure {
    fn key(key: String) -> Self {
        Self::Key(key)
    }

    /// The Redis series and its spread, if there is a figure.
    fn look_up(&self, s: &Summary) -> Option<(String, Spread)> {
        match self {
            Self::None | Self::Shared => None,
            Self::Key(key) => s.get(key).map(|sp| (String::new(), *sp)),
            Self::BestDelay {
                label,
                figure,
                higher_is_better,
            } => redis_best(s, label, figure, *higher_is_better),
        }
    }
}

/// A figure of a results-table section: its label, the last part of its
/// key, which way is better (to pick Redis's best retry delay), and
/// whether Redis has it at all.
struct Fig {
    label: &'static str,
    key: &'static str,
    higher_is_better: bool,
    monolock_only: bool,
}

const fn fig(label: &'static str, key: &'static str) -> Fig {
    Fig {
        label,
        key,
        higher_is_better: false,
        monolock_only: false,
    }
}

const fn higher(label: &'static str, key: &'static str) -> Fig {
    Fig {
        higher_is_better: true,
        ..fig(label, key)
    }
}

const fn monolock_only(label: &'static str, key: &'static str) -> Fig {
    Fig {
        monolock_only: true,
        ..fig(label, key)
    }
}

/// The machine floor (`floor.<key>`), one measurement for both systems.
const FLOOR_FIGS: &[Fig] = &[
    fig("1-byte TCP round trip p50 (µs)", "rtt_p50_us"),
    fig("1-byte TCP round trip p99 (µs)", "rtt_p99_us"),
];

/// `latency.<system>.<key>`.
const LATENCY_FIGS: &[Fig] = &[
    fig("lock cycle p50 (µs)", "cycle_p50_us"),
    fig("lock cycle p99 (µs)", "cycle_p99_us"),
    fig("acquire p50 (µs)", "acquire_p50_us"),
    fig("acquire p99 (µs)", "acquire_p99_us"),
    fig("cycles queued behind own previous close (%)", "queued_pct"),
];

/// `throughput.c<N>.<system>.<key>`.
const THROUGHPUT_FIGS: &[Fig] = &[
    higher("cycles/s", "cycles_per_s"),
    fig("server CPU ms / 1k cycles", "server_cpu_ms_per_1k"),
    fig(
        "server CPU per cycle ÷ connection floor's (×)",
        "server_cpu_vs_floor",
    ),
    fig("client CPU (cores)", "client_cpu_cores"),
    fig("cycles queued behind own previous close (%)", "queued_pct"),
];

/// `throughput.c<N>.floor.<key>`: the connection floor at the same load,
/// one measurement shown for both systems.
const CONN_FLOOR_FIGS: &[Fig] = &[
    higher("cycles/s", "cycles_per_s"),
    fig("server CPU ms / 1k cycles", "server_cpu_ms_per_1k"),
];

/// `contention.<variant>.<series>.<key>`; Redis shows its best retry delay.
const CONTENTION_FIGS: &[Fig] = &[
    higher("acquisitions/s", "acq_per_s"),
    fig("handover to another client p50 (µs)", "handover_p50_us"),
    fig("handover to another client p99 (µs)", "handover_p99_us"),
    fig("handover to another client max (µs)", "handover_max_us"),
    fig(
        "lock taken straight back by its releaser (%)",
        "regrant_pct",
    ),
    fig(
        "release → next grant, any client, p99 (µs)",
        "next_grant_p99_us",
    ),
    fig("fairness max/min per client", "fairness"),
    fig("wait p99 (µs)", "wait_p99_us"),
    fig("worst wait (ms)", "worst_wait_ms"),
    fig("hold time p50 (µs)", "hold_p50_us"),
    fig("server CPU (cores)", "server_cpu_cores"),
    fig("client CPU (cores)", "client_cpu_cores"),
];

/// `sessions.<system>.<key>`.
const SESSIONS_FIGS: &[Fig] = &[
    fig("sessions held", "sessions"),
    fig("server RSS growth per session (B)", "rss_per_session_bytes"),
    fig(
        "kernel slab growth per socket (B, machine-wide, not in RSS)",
        "kernel_slab_bytes_per_socket",
    ),
    fig("heartbeats/s", "heartbeats_per_s"),
    fig("server CPU (cores)", "server_cpu_cores"),
    fig(
        "server CPU per heartbeat (µs)",
        "server_cpu_us_per_heartbeat",
    ),
    fig(
        "server CPU scaled to 19k sessions (cores)",
        "server_cpu_cores_at_19k",
    ),
    fig("probe heartbeat p50 (µs)", "probe_p50_us"),
    fig("probe heartbeat p99 (µs)", "probe_p99_us"),
    fig("probe heartbeat max (µs)", "probe_max_us"),
    monolock_only(
        "extrapolated to 1M sessions: RSS (GiB)",
        "extrapolated_1m_rss_gib",
    ),
    monolock_only(
        "extrapolated to 1M sessions: CPU (cores)",
        "extrapolated_1m_cpu_cores",
    ),
];

/// One row of the results table: where its two figures come from.
struct RowSpec {
    scenario: String,
    figure: String,
    mono: Option<String>,
    redis: RedisFigure,
}

/// Rows of one section: every figure of `figs`, keys made by `mono` and
/// `redis`.
fn section(
    rows: &mut Vec<RowSpec>,
    scenario: &str,
    figs: &[Fig],
    mono: impl Fn(&Fig) -> String,
    redis: impl Fn(&Fig) -> RedisFigure,
) {
    rows.extend(figs.iter().map(|f| RowSpec {
        scenario: scenario.to_owned(),
        figure: f.label.to_owned(),
        mono: Some(mono(f)),
        redis: if f.monolock_only {
            RedisFigure::None
        } else {
            redis(f)
        },
    }));
}

/// Every row of the results table, in order.
fn row_specs(s: &Summary, ctx: &TargetContext<'_>, throughput_clients: &[usize]) -> Vec<RowSpec> {
    let mut rows = Vec::new();
    section(
        &mut rows,
        "machine floor: plain echo process, no lock",
        FLOOR_FIGS,
        |f| format!("floor.{}", f.key),
        |_| RedisFigure::Shared,
    );
    section(
        &mut rows,
        "uncontended, 1 client",
        LATENCY_FIGS,
        |f| format!("latency.monolock.{}", f.key),
        |f| RedisFigure::key(format!("latency.redis.{}", f.key)),
    );
    for c in throughput_clients {
        section(
            &mut rows,
            &format!("throughput, {c} client{}", if *c == 1 { "" } else { "s" }),
            THROUGHPUT_FIGS,
            |f| format!("throughput.c{c}.monolock.{}", f.key),
            |f| RedisFigure::key(format!("throughput.c{c}.redis.{}", f.key)),
        );
        section(
            &mut rows,
            &format!(
                "throughput, {c} client{}, protocol v2 (a session each; RELEASE + next ACQUIRE in one write)",
                if *c == 1 { "" } else { "s" }
            ),
            THROUGHPUT_FIGS,
            |f| format!("throughput.c{c}.monolock_v2.{}", f.key),
            |f| RedisFigure::key(format!("throughput.c{c}.redis.{}", f.key)),
        );
        section(
            &mut rows,
            &format!(
                "connection floor, {c} client{}: accept, read, write, close; no lock",
                if *c == 1 { "" } else { "s" }
            ),
            CONN_FLOOR_FIGS,
            |f| format!("throughput.c{c}.floor.{}", f.key),
            |_| RedisFigure::Shared,
        );
    }
    for (label, human) in ctx.contention {
        section(
            &mut rows,
            &format!("contention, {human}"),
            CONTENTION_FIGS,
            |f| format!("contention.{label}.monolock.{}", f.key),
            |f| RedisFigure::BestDelay {
                label: label.clone(),
                figure: f.key,
                higher_is_better: f.higher_is_better,
            },
        );
    }
    // Dead holders: Redis at the same TTL as monolock's lease, and (--full)
    // at 30 s as a row of its own.
    let lease = fmt_num(ctx.dead_lease_ms / 1000.0);
    for (fault, human) in [("kill", "SIGKILL"), ("stop", "SIGSTOP")] {
        let same_ttl = s
            .keys()
            .find(|k| {
                k.starts_with(&format!("dead.{fault}.redis-ttl")) && !k.contains(".redis-ttl30s.")
            })
            .cloned();
        rows.push(RowSpec {
            scenario: "dead holder".to_owned(),
            figure: format!("{human} → next grant (ms); lease / TTL {lease} s"),
            mono: Some(format!("dead.{fault}.monolock.handover_ms")),
            redis: same_ttl.map_or(RedisFigure::None, RedisFigure::key),
        });
        let long_ttl = format!("dead.{fault}.redis-ttl30s.handover_ms");
        if s.contains_key(&long_ttl) {
            rows.push(RowSpec {
                scenario: "dead holder".to_owned(),
                figure: format!("{human} → next grant (ms); Redis TTL 30 s"),
                mono: None,
                redis: RedisFigure::key(long_ttl),
            });
        }
    }
    section(
        &mut rows,
        "sessions at scale",
        SESSIONS_FIGS,
        |f| format!("sessions.monolock.{}", f.key),
        |f| RedisFigure::key(format!("sessions.redis.{}", f.key)),
    );
    rows
}

/// Protocol v2 against v1 and Redis, one row per figure that has a v2
/// counterpart (markdown): medians with [min–max] over rounds. v2 / v1 is
/// the median [min–max] of each round's own ratio where both ran in every
/// round (see `paired_ratios` in `run.rs`), else the ratio of the medians.
/// `mtls_clients`: how many clients the mTLS rows with several clients ran.
pub fn v2_table(s: &Summary, throughput_clients: &[usize], mtls_clients: usize) -> String {
    let mut t = String::from(
        "| figure | v1 | v2 | Redis | v2 / v1 | v2 / Redis |\n|---|---|---|---|---|---|\n",
    );
    let mut rows: Vec<(String, String, String, Option<String>)> = Vec::new();
    for c in throughput_clients {
        for (label, key) in [
            ("cycles/s", "cycles_per_s"),
            ("server CPU µs / cycle", "server_cpu_ms_per_1k"),
        ] {
            let pre = format!("throughput.c{c}");
            rows.push((
                format!("short-lock cycles, {c} client(s): {label}"),
                format!("{pre}.monolock.{key}"),
                format!("{pre}.monolock_v2.{key}"),
                Some(format!("{pre}.redis.{key}")),
            ));
        }
    }
    for key in ["acq_per_s", "server_cpu_cores"] {
        rows.push((
            format!("contention, one lock, no work: {key}"),
            format!("contention.w0.monolock.{key}"),
            format!("contention.w0.monolock_v2.{key}"),
            None,
        ));
    }
    for (label, key) in [
        ("locks held", "locks"),
        ("connections", "connections"),
        ("server RSS growth (MiB)", "rss_growth_mib"),
        ("server RSS per lock (B)", "rss_bytes_per_lock"),
        ("heartbeats per round", "heartbeats_per_round"),
        (
            "server CPU per heartbeat round (µs)",
            "heartbeat_round_server_cpu_us",
        ),
        (
            "heartbeats/s at a 60 s lease",
            "heartbeats_per_s_at_60s_lease",
        ),
    ] {
        rows.push((
            format!("many locks, one process: {label}"),
            format!("many_locks.monolock.{key}"),
            format!("many_locks.monolock_v2.{key}"),
            None,
        ));
    }
    let many = format!("mtls_c{mtls_clients}");
    for mode in ["plain", "tls", "mtls", many.as_str()] {
        let who = match mode.strip_prefix("mtls_c") {
            Some(n) => format!("{n} clients claiming in sequence each, mtls"),
            None => format!("one client claiming in sequence, {mode}"),
        };
        for (label, key) in [
            ("claims/s", "claims_per_s"),
            ("server CPU µs / claim", "server_cpu_us_per_claim"),
        ] {
            rows.push((
                format!("{who}: {label}"),
                format!("tls_claims.{mode}.monolock.{key}"),
                format!("tls_claims.{mode}.monolock_v2.{key}"),
                None,
            ));
        }
    }
    let ratio = |a: Option<&Spread>, b: Option<&Spread>| match (a, b) {
        (Some(a), Some(b)) if b.median > 0.0 => fmt_num(a.median / b.median),
        _ => "—".to_owned(),
    };
    let cell = |sp: Option<&Spread>| sp.map_or("—".to_owned(), fmt_spread);
    for (label, v1_key, v2_key, redis) in rows {
        let (v1, v2) = (s.get(&v1_key), s.get(&v2_key));
        if v2.is_none() {
            continue;
        }
        let redis = redis.as_deref().and_then(|k| s.get(k));
        let paired = s.get(&v2_key.replacen(".monolock_v2.", ".v2_over_v1.", 1));
        let v2_over_v1 = match (paired, v1, v2) {
            (Some(p), Some(a), Some(b)) if p.n == a.n && p.n == b.n => fmt_spread(p),
            _ => ratio(v2, v1),
        };
        let _ = writeln!(
            t,
            "| {label} | {} | {} | {} | {v2_over_v1} | {} |",
            cell(v1),
            cell(v2),
            cell(redis),
            ratio(v2, redis)
        );
    }
    t
}

/// The v1 figures of this build against the `--baseline-bin` build, both
/// measured in the same rounds, interleaved (markdown); empty without a
/// baseline. The ratio is this build's over the baseline's, per round,
/// median [min–max]: 1.00 is no change.
pub fn baseline_table(s: &Summary) -> String {
    let mut t = String::from(
        "| figure | this build | baseline | this / baseline, per round |\n|---|---|---|---|\n",
    );
    let mut any = false;
    for (key, paired) in s {
        let Some(at) = key.find(".over_base.") else {
            continue;
        };
        let (scenario, figure) = (&key[..at], &key[at + ".over_base.".len()..]);
        let cell = |series: &str| {
            s.get(&format!("{scenario}.{series}.{figure}"))
                .map_or("—".to_owned(), fmt_spread)
        };
        any = true;
        let _ = writeln!(
            t,
            "| {scenario}: {figure} | {} | {} | {} |",
            cell("monolock"),
            cell("monolock_base"),
            fmt_spread(paired)
        );
    }
    if any { t } else { String::new() }
}

/// The main results table (markdown): medians with [min–max] over rounds.
pub fn results_table(
    s: &Summary,
    ctx: &TargetContext<'_>,
    throughput_clients: &[usize],
    redis_ran: bool,
) -> String {
    let redis_empty = if redis_ran { "—" } else { "not run" };
    let mut t = String::from(
        "| scenario | figure | monolock | Redis | monolock / Redis |\n|---|---|---|---|---|\n",
    );
    for row in row_specs(s, ctx, throughput_clients) {
        let mono = row.mono.as_deref().and_then(|k| s.get(k));
        let redis = row.redis.look_up(s);
        let redis_cell = match (&row.redis, &redis) {
            (RedisFigure::Shared, _) => mono.map(fmt_spread),
            (RedisFigure::BestDelay { .. }, Some((series, sp))) => Some(format!(
                "{} ({})",
                fmt_spread(sp),
                series.trim_start_matches("redis-")
            )),
            (_, r) => r.as_ref().map(|(_, sp)| fmt_spread(sp)),
        };
        if mono.is_none() && redis_cell.is_none() {
            continue;
        }
        let ratio = match (mono, &redis) {
            (Some(m), Some((_, r))) if r.median > 0.0 => Some(m.median / r.median),
            _ => None,
        };
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {} |",
            row.scenario,
            row.figure,
            mono.map_or("—".to_owned(), fmt_spread),
            redis_cell.as_deref().unwrap_or(redis_empty),
            ratio.map_or("—".to_owned(), fmt_num)
        );
    }
    t
}

/// Every Redis retry delay of every contention variant (markdown).
pub fn redis_delays_table(s: &Summary, ctx: &TargetContext<'_>) -> String {
    let mut t = String::from(
        "| contention | Redis retry delay | acquisitions/s | handover p99 (µs) | re-grants (%) | fairness | worst wait (ms) | server CPU | client CPU |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut any = false;
    for (label, human) in ctx.contention {
        let prefix = format!("contention.{label}.redis-d");
        let mut delays: Vec<u64> = s
            .keys()
            .filter_map(|k| k.strip_prefix(&prefix))
            .filter_map(|rest| rest.split('.').next())
            .filter_map(|d| d.parse().ok())
            .collect();
        delays.sort_unstable();
        delays.dedup();
        for d in delays {
            any = true;
            let f = |fig: &str| {
                s.get(&format!("{prefix}{d}.{fig}"))
                    .map_or("—".to_owned(), fmt_spread)
            };
            let _ = writeln!(
                t,
                "| {human} | {d} ms | {} | {} | {} | {} | {} | {} | {} |",
                f("acq_per_s"),
                f("handover_p99_us"),
                f("regrant_pct"),
                f("fairness"),
                f("worst_wait_ms"),
                f("server_cpu_cores"),
                f("client_cpu_cores")
            );
        }
    }
    if any { t } else { String::new() }
}

/// The 1M-session extrapolation, in words, from the measured per-session
/// figures; `None` without a sessions run.
pub fn extrapolation(s: &Summary, lease: std::time::Duration) -> Option<String> {
    let pre = "sessions.monolock";
    let n = s.get(&format!("{pre}.sessions"))?.median;
    let rss = s.get(&format!("{pre}.rss_per_session_bytes"))?.median;
    let cores = s.get(&format!("{pre}.server_cpu_cores"))?.median;
    let us_per_hb = s.get(&format!("{pre}.server_cpu_us_per_heartbeat"))?.median;
    let slab = s
        .get(&format!("{pre}.kernel_slab_bytes_per_socket"))
        .map(|sp| sp.median);
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .map(|t| t.split_whitespace().collect::<Vec<_>>().join("–"))
            .unwrap_or_else(|_| "?".to_owned())
    };
    let gib = |bytes: f64| bytes / 1073741824.0;
    let hb_per_s = 1e6 / (lease.as_secs_f64() / 4.0).max(1e-3);
    let mut t = String::new();
    let _ = writeln!(
        t,
        "Measured with {} sessions ({} s lease, a heartbeat every {} s each): {} B of server RSS per session, {} µs of server CPU per heartbeat ({} cores in all){}.\n",
        fmt_num(n),
        fmt_num(lease.as_secs_f64()),
        fmt_num(lease.as_secs_f64() / 4.0),
        fmt_num(rss),
        fmt_num(us_per_hb),
        fmt_num(cores),
        slab.map_or(String::new(), |k| format!(
            ", and about {} B of kernel slab per socket (outside RSS, machine-wide, noisy)",
            fmt_num(k)
        ))
    );
    let _ = writeln!(
        t,
        "Linear extrapolation to 1,000,000 sessions at the same lease: {} GiB of RSS{}, and {} heartbeats/s costing {} cores at {} µs each.\n",
        fmt_num(gib(rss * 1e6)),
        slab.map_or(String::new(), |k| format!(
            " plus ~{} GiB of kernel socket memory",
            fmt_num(gib(k * 1e6))
        )),
        fmt_num(hb_per_s),
        fmt_num(us_per_hb * hb_per_s / 1e6),
        fmt_num(us_per_hb)
    );
    let _ = writeln!(
        t,
        "What bounds it, in order: (1) CPU for heartbeats — it scales with sessions ÷ lease, so a lease six times longer costs a sixth, and the per-heartbeat cost is mostly the kernel's wake-up path (see the Redis calibration column); (2) descriptors — one per session, so RLIMIT_NOFILE must exceed 1M, and this kernel caps it at fs.nr_open = {}; (3) memory — the RSS above plus the kernel's socket structures; (4) on the client side, one source address reaches one server port through at most the ephemeral range ({} here, ~28k ports), so 1M sessions need ≥ 36 client addresses or hosts.",
        read("/proc/sys/fs/nr_open"),
        read("/proc/sys/net/ipv4/ip_local_port_range")
    );
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(pairs: &[(&str, f64)]) -> Summary {
        let mut m = Metrics::default();
        for (k, v) in pairs {
            m.put(k, *v);
        }
        summarize(&[m])
    }

    #[test]
    fn v2_table_shows_the_paired_ratio_and_baseline_table_this_build_over_the_baseline() {
        let s = summary(&[
            ("contention.w0.monolock.acq_per_s", 100.0),
            ("contention.w0.monolock_v2.acq_per_s", 130.0),
            ("contention.w0.v2_over_v1.acq_per_s", 1.2),
            ("contention.w0.monolock_base.acq_per_s", 90.0),
            ("contention.w0.over_base.acq_per_s", 1.05),
        ]);
        let v2 = v2_table(&s, &[], crate::tls_claims::MANY_CLIENTS);
        assert!(
            v2.contains("| contention, one lock, no work: acq_per_s | 100 | 130 | — | 1.20 | — |"),
            "{v2}"
        );
        let base = baseline_table(&s);
        assert!(
            base.contains("| contention.w0: acq_per_s | 100 | 90.0 | 1.05 |"),
            "{base}"
        );
        assert_eq!(baseline_table(&summary(&[])), "");
    }

    #[test]
    fn best_redis_delay_per_figure() {
        let s = summary(&[
            ("contention.w0.redis-d1.acq_per_s", 900.0),
            ("contention.w0.redis-d10.acq_per_s", 1200.0),
            ("contention.w0.redis-d1.handover_p99_us", 500.0),
            ("contention.w0.redis-d10.handover_p99_us", 9000.0),
            ("contention.w0.monolock.acq_per_s", 5000.0),
        ]);
        let (series, sp) = redis_best(&s, "w0", "acq_per_s", true).unwrap();
        assert_eq!((series.as_str(), sp.median), ("redis-d10", 1200.0));
        let (series, _) = redis_best(&s, "w0", "handover_p99_us", false).unwrap();
        assert_eq!(series, "redis-d1");
        assert!(redis_best(&s, "w1ms", "acq_per_s", true).is_none());
    }

    #[test]
    fn throughput_rows_set_each_system_against_the_connection_floor() {
        let s = summary(&[
            ("throughput.c16.monolock.server_cpu_vs_floor", 1.1),
            ("throughput.c16.redis.server_cpu_vs_floor", 0.5),
            ("throughput.c16.floor.server_cpu_ms_per_1k", 30.0),
        ]);
        let ctx = TargetContext {
            contention: &[],
            dead_lease_ms: 1000.0,
        };
        let t = results_table(&s, &ctx, &[16], true);
        assert!(
            t.contains(
                "| throughput, 16 clients | server CPU per cycle ÷ connection floor's (×) | 1.10 | 0.500 | 2.20 |"
            ),
            "{t}"
        );
        assert!(
            t.contains("| server CPU ms / 1k cycles | 30.0 | 30.0 | — |"),
            "{t}"
        );
    }

    #[test]
    fn json_turns_infinity_into_null() {
        let mut m = Metrics::default();
        m.put("a", f64::INFINITY);
        m.put("b", 1.5);
        assert_eq!(m.to_json(), json!({"a": null, "b": 1.5}));
    }
}
