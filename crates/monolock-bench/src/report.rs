//! Figures of a run: per-round metrics, their median and spread, the
//! targets with PASS/MISS, and the tables (markdown, printed and saved).

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

/// The outcome of one target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Met.
    Pass,
    /// Not met.
    Miss,
    /// Could not be judged (a side was not run or produced no figure).
    NotRun,
}

impl Status {
    fn word(self) -> &'static str {
        match self {
            Self::Pass => "PASS",
            Self::Miss => "MISS",
            Self::NotRun => "not run",
        }
    }
}

/// One target and how the run fared against it.
#[derive(Clone, Debug)]
pub struct TargetResult {
    /// What is measured.
    pub name: String,
    /// The goal, in words.
    pub goal: String,
    /// The figures behind the verdict.
    pub observed: String,
    /// The verdict.
    pub status: Status,
}

impl TargetResult {
    /// As JSON.
    pub fn to_json(&self) -> Value {
        json!({"target": self.name, "goal": self.goal, "observed": self.observed, "result": self.status.word()})
    }
}

/// What the targets need to know about the run besides its figures.
pub struct TargetContext<'a> {
    /// Contention variants (e.g. `w0`, `w1ms`) with a human label.
    pub contention: &'a [(String, String)],
    /// The monolock lease (and Redis TTL) of the dead-holder trials, ms.
    pub dead_lease_ms: f64,
    /// Sessions aimed at.
    pub sessions: usize,
}

fn get<'s>(s: &'s Summary, key: &str) -> Option<&'s Spread> {
    s.get(key)
}

fn ratio_target(
    name: String,
    goal: String,
    mono: Option<&Spread>,
    redis: Option<(String, Spread)>,
    limit: f64,
    at_least: bool,
    unit: &str,
) -> TargetResult {
    let (status, observed) = match (mono, redis) {
        (Some(m), Some((series, r))) if r.median > 0.0 => {
            let ratio = m.median / r.median;
            let ok = if at_least {
                ratio >= limit
            } else {
                ratio <= limit
            };
            (
                if ok { Status::Pass } else { Status::Miss },
                format!(
                    "{}× ({} vs {} {unit}, Redis {series})",
                    fmt_num(ratio),
                    fmt_num(m.median),
                    fmt_num(r.median)
                ),
            )
        }
        (Some(m), _) => (
            Status::NotRun,
            format!("monolock {} {unit}; Redis not run", fmt_num(m.median)),
        ),
        _ => (Status::NotRun, "no figure".to_owned()),
    };
    TargetResult {
        name,
        goal,
        observed,
        status,
    }
}

fn bound_target(
    name: &str,
    goal: String,
    value: Option<f64>,
    limit: f64,
    unit: &str,
    how: &str,
) -> TargetResult {
    match value {
        Some(v) => TargetResult {
            name: name.to_owned(),
            goal,
            observed: if unit.is_empty() {
                format!("{} ({how})", fmt_num(v))
            } else {
                format!("{} {unit} ({how})", fmt_num(v))
            },
            status: if v <= limit {
                Status::Pass
            } else {
                Status::Miss
            },
        },
        None => TargetResult {
            name: name.to_owned(),
            goal,
            observed: "no figure".to_owned(),
            status: Status::NotRun,
        },
    }
}

/// Judges every target of the issue against the summary.
pub fn evaluate_targets(s: &Summary, ctx: &TargetContext<'_>) -> Vec<TargetResult> {
    let mut out = Vec::new();
    for (label, human) in ctx.contention {
        let m = |f: &str| get(s, &format!("contention.{label}.monolock.{f}"));
        out.push(ratio_target(
            format!("contention acquisitions/s, {human}"),
            "≥ 2× Redis best".into(),
            m("acq_per_s"),
            redis_best(s, label, "acq_per_s", true),
            2.0,
            true,
            "/s",
        ));
        out.push(ratio_target(
            format!("contention handover p99, {human}"),
            "≤ 1/3 of Redis best".into(),
            m("handover_p99_us"),
            redis_best(s, label, "handover_p99_us", false),
            1.0 / 3.0,
            false,
            "µs",
        ));
        out.push(bound_target(
            &format!("contention fairness max/min, {human}"),
            "≤ 1.1".into(),
            m("fairness").map(|sp| sp.median),
            1.1,
            "",
            "median",
        ));
        out.push(ratio_target(
            format!("contention worst wait, {human}"),
            "≤ 1/2 of Redis best".into(),
            m("worst_wait_ms"),
            redis_best(s, label, "worst_wait_ms", false),
            0.5,
            false,
            "ms",
        ));
    }
    out.push(ratio_target(
        "uncontended cycle p50".into(),
        "≤ 1.5× Redis".into(),
        get(s, "latency.monolock.cycle_p50_us"),
        get(s, "latency.redis.cycle_p50_us").map(|sp| ("cycle".to_owned(), *sp)),
        1.5,
        false,
        "µs",
    ));
    out.push(ratio_target(
        "throughput at 64 clients".into(),
        "≥ 0.5× Redis".into(),
        get(s, "throughput.c64.monolock.cycles_per_s"),
        get(s, "throughput.c64.redis.cycles_per_s").map(|sp| ("c64".to_owned(), *sp)),
        0.5,
        true,
        "cycles/s",
    ));
    out.push(bound_target(
        "SIGKILLed holder: next grant",
        "< 10 ms".into(),
        get(s, "dead.kill.monolock.handover_ms").map(|sp| sp.max),
        10.0,
        "ms",
        "worst trial",
    ));
    out.push(bound_target(
        "SIGSTOPped holder: next grant",
        format!("≤ lease + 10 ms = {} ms", fmt_num(ctx.dead_lease_ms + 10.0)),
        get(s, "dead.stop.monolock.handover_ms").map(|sp| sp.max),
        ctx.dead_lease_ms + 10.0,
        "ms",
        "worst trial",
    ));
    out.push(bound_target(
        "server memory per session",
        "≤ 2 KiB (2048 B)".into(),
        get(s, "sessions.monolock.rss_per_session_bytes").map(|sp| sp.median),
        2048.0,
        "B",
        "median RSS growth / sessions",
    ));
    let measured_at =
        get(s, "sessions.monolock.sessions").map_or(ctx.sessions as f64, |sp| sp.median);
    out.push(bound_target(
        "server CPU, ~19k sessions at 10 s lease",
        "< 0.25 core".into(),
        get(s, "sessions.monolock.server_cpu_cores_at_19k").map(|sp| sp.median),
        0.25,
        "core",
        &if measured_at < 18_000.0 {
            format!(
                "measured at {} sessions, scaled linearly to 19k",
                fmt_num(measured_at)
            )
        } else {
            format!(
                "measured at {} sessions, scaled to 19k",
                fmt_num(measured_at)
            )
        },
    ));
    out.push(bound_target(
        "probe heartbeat p99 under session load",
        "< 5 ms (5000 µs)".into(),
        get(s, "sessions.monolock.probe_p99_us").map(|sp| sp.max),
        5000.0,
        "µs",
        "worst round",
    ));
    out
}

/// The targets as a markdown table.
pub fn targets_table(targets: &[TargetResult]) -> String {
    let mut t = String::from("| target | goal | observed | result |\n|---|---|---|---|\n");
    for r in targets {
        let _ = writeln!(
            t,
            "| {} | {} | {} | **{}** |",
            r.name,
            r.goal,
            r.observed,
            r.status.word()
        );
    }
    t
}

struct Row {
    scenario: String,
    figure: String,
    mono: Option<String>,
    redis: Option<String>,
    ratio: Option<f64>,
}

/// The main results table (markdown): medians with [min–max] over rounds.
pub fn results_table(
    s: &Summary,
    ctx: &TargetContext<'_>,
    throughput_clients: &[usize],
    redis_ran: bool,
) -> String {
    let mut rows: Vec<Row> = Vec::new();
    let pair = |rows: &mut Vec<Row>, scenario: &str, figure: &str, mk: &str, rk: Option<&str>| {
        let m = s.get(mk);
        let r = rk.and_then(|k| s.get(k));
        rows.push(Row {
            scenario: scenario.to_owned(),
            figure: figure.to_owned(),
            mono: m.map(fmt_spread),
            redis: r.map(fmt_spread),
            ratio: match (m, r) {
                (Some(m), Some(r)) if r.median > 0.0 => Some(m.median / r.median),
                _ => None,
            },
        });
    };
    // One measurement for both systems: shown in both columns, no ratio.
    for (fig, key) in [
        ("1-byte TCP round trip p50 (µs)", "floor.rtt_p50_us"),
        ("1-byte TCP round trip p99 (µs)", "floor.rtt_p99_us"),
    ] {
        if let Some(sp) = s.get(key) {
            rows.push(Row {
                scenario: "machine floor: plain echo process, no lock".to_owned(),
                figure: fig.to_owned(),
                mono: Some(fmt_spread(sp)),
                redis: Some(fmt_spread(sp)),
                ratio: None,
            });
        }
    }
    for (fig, key) in [
        ("lock cycle p50 (µs)", "cycle_p50_us"),
        ("lock cycle p99 (µs)", "cycle_p99_us"),
        ("acquire p50 (µs)", "acquire_p50_us"),
        ("acquire p99 (µs)", "acquire_p99_us"),
        ("cycles queued behind own previous close (%)", "queued_pct"),
    ] {
        pair(
            &mut rows,
            "uncontended, 1 client",
            fig,
            &format!("latency.monolock.{key}"),
            Some(&format!("latency.redis.{key}")),
        );
    }
    for c in throughput_clients {
        let sc = format!("throughput, {c} client{}", if *c == 1 { "" } else { "s" });
        for (fig, key) in [
            ("cycles/s", "cycles_per_s"),
            ("server CPU ms / 1k cycles", "server_cpu_ms_per_1k"),
            ("client CPU (cores)", "client_cpu_cores"),
            ("cycles queued behind own previous close (%)", "queued_pct"),
        ] {
            pair(
                &mut rows,
                &sc,
                fig,
                &format!("throughput.c{c}.monolock.{key}"),
                Some(&format!("throughput.c{c}.redis.{key}")),
            );
        }
    }
    for (label, human) in ctx.contention {
        let sc = format!("contention, {human}");
        for (fig, key, higher) in [
            ("acquisitions/s", "acq_per_s", true),
            (
                "handover to another client p50 (µs)",
                "handover_p50_us",
                false,
            ),
            (
                "handover to another client p99 (µs)",
                "handover_p99_us",
                false,
            ),
            (
                "handover to another client max (µs)",
                "handover_max_us",
                false,
            ),
            (
                "lock taken straight back by its releaser (%)",
                "regrant_pct",
                false,
            ),
            (
                "release → next grant, any client, p99 (µs)",
                "next_grant_p99_us",
                false,
            ),
            ("fairness max/min per client", "fairness", false),
            ("wait p99 (µs)", "wait_p99_us", false),
            ("worst wait (ms)", "worst_wait_ms", false),
            ("hold time p50 (µs)", "hold_p50_us", false),
            ("server CPU (cores)", "server_cpu_cores", false),
            ("client CPU (cores)", "client_cpu_cores", false),
        ] {
            let m = s.get(&format!("contention.{label}.monolock.{key}"));
            let r = redis_best(s, label, key, higher);
            rows.push(Row {
                scenario: sc.clone(),
                figure: fig.to_owned(),
                mono: m.map(fmt_spread),
                redis: r.as_ref().map(|(series, sp)| {
                    format!(
                        "{} ({})",
                        fmt_spread(sp),
                        series.trim_start_matches("redis-")
                    )
                }),
                ratio: match (m, &r) {
                    (Some(m), Some((_, r))) if r.median > 0.0 => Some(m.median / r.median),
                    _ => None,
                },
            });
        }
    }
    let lease = fmt_num(ctx.dead_lease_ms / 1000.0);
    for (fault, human) in [("kill", "SIGKILL"), ("stop", "SIGSTOP")] {
        let ttl1 = s
            .keys()
            .find(|k| {
                k.starts_with(&format!("dead.{fault}.redis-ttl")) && !k.contains(".redis-ttl30s.")
            })
            .cloned();
        pair(
            &mut rows,
            "dead holder",
            &format!("{human} → next grant (ms); lease / TTL {lease} s"),
            &format!("dead.{fault}.monolock.handover_ms"),
            ttl1.as_deref(),
        );
        if s.contains_key(&format!("dead.{fault}.redis-ttl30s.handover_ms")) {
            pair(
                &mut rows,
                "dead holder",
                &format!("{human} → next grant (ms); Redis TTL 30 s"),
                "",
                Some(&format!("dead.{fault}.redis-ttl30s.handover_ms")),
            );
        }
    }
    for (fig, key) in [
        ("sessions held", "sessions"),
        ("server RSS growth per session (B)", "rss_per_session_bytes"),
        (
            "kernel slab growth per socket (B, machine-wide, not in RSS)",
            "kernel_slab_bytes_per_socket",
        ),
        ("heartbeats/s", "heartbeats_per_s"),
        ("server CPU (cores)", "server_cpu_cores"),
        (
            "server CPU per heartbeat (µs)",
            "server_cpu_us_per_heartbeat",
        ),
        (
            "server CPU scaled to 19k sessions (cores)",
            "server_cpu_cores_at_19k",
        ),
        ("probe heartbeat p50 (µs)", "probe_p50_us"),
        ("probe heartbeat p99 (µs)", "probe_p99_us"),
        ("probe heartbeat max (µs)", "probe_max_us"),
        (
            "extrapolated to 1M sessions: RSS (GiB)",
            "extrapolated_1m_rss_gib",
        ),
        (
            "extrapolated to 1M sessions: CPU (cores)",
            "extrapolated_1m_cpu_cores",
        ),
    ] {
        pair(
            &mut rows,
            "sessions at scale",
            fig,
            &format!("sessions.monolock.{key}"),
            (!key.starts_with("extrapolated"))
                .then(|| format!("sessions.redis.{key}"))
                .as_deref(),
        );
    }

    let redis_empty = if redis_ran { "—" } else { "not run" };
    let mut t = String::from(
        "| scenario | figure | monolock | Redis | monolock / Redis |\n|---|---|---|---|---|\n",
    );
    for r in rows {
        if r.mono.is_none() && r.redis.is_none() {
            continue;
        }
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {} |",
            r.scenario,
            r.figure,
            r.mono.as_deref().unwrap_or("—"),
            r.redis.as_deref().unwrap_or(redis_empty),
            r.ratio.map_or("—".to_owned(), fmt_num)
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
    fn targets_pass_miss_and_not_run() {
        let s = summary(&[
            ("contention.w0.monolock.acq_per_s", 5000.0),
            ("contention.w0.redis-d1.acq_per_s", 2000.0),
            ("contention.w0.monolock.fairness", 1.05),
            ("dead.kill.monolock.handover_ms", 12.0),
        ]);
        let ctx = TargetContext {
            contention: &[("w0".into(), "no work".into())],
            dead_lease_ms: 1000.0,
            sessions: 5000,
        };
        let t = evaluate_targets(&s, &ctx);
        let by = |n: &str| t.iter().find(|r| r.name.starts_with(n)).unwrap().status;
        assert_eq!(by("contention acquisitions/s"), Status::Pass);
        assert_eq!(by("contention fairness"), Status::Pass);
        assert_eq!(by("SIGKILLed"), Status::Miss);
        assert_eq!(by("contention handover p99"), Status::NotRun);
        assert!(targets_table(&t).contains("**MISS**"));
    }

    #[test]
    fn json_turns_infinity_into_null() {
        let mut m = Metrics::default();
        m.put("a", f64::INFINITY);
        m.put("b", 1.5);
        assert_eq!(m.to_json(), json!({"a": null, "b": 1.5}));
    }
}
