//! After the last round: the markdown summary, the charts, and the
//! figures `--smoke` requires.

use std::{fmt::Write as _, path::Path, time::Duration};

use anyhow::Result;

use crate::{
    charts,
    plan::Plan,
    report::{self, Summary, TargetContext},
    stats::Samples,
};

/// Samples kept for the charts, pooled over rounds.
#[derive(Default)]
pub(crate) struct ChartData {
    pub(crate) latency_mono: Samples,
    pub(crate) latency_redis: Samples,
    /// (contention label, series) -> handovers
    pub(crate) handover: std::collections::BTreeMap<(String, String), Samples>,
    /// (contention label, series) -> attempt-to-grant waits
    pub(crate) waits: std::collections::BTreeMap<(String, String), Samples>,
}

/// The markdown summary: results, Redis delays, extrapolation, plan,
/// notes.
pub(crate) fn summary_markdown(
    summary: &Summary,
    ctx: &TargetContext<'_>,
    plan: &Plan,
    redis_ran: bool,
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
    let _ = writeln!(
        md,
        "### Protocol v2 against v1 and Redis\n\n{}",
        report::v2_table(
            summary,
            &plan.throughput_clients,
            crate::tls_claims::MANY_CLIENTS,
        )
    );
    if let Some(floor) = summary.get("floor.server_cpu_us_per_rtt") {
        let _ = writeln!(
            md,
            "Machine floor of this run: a plain echo process spends {} µs of CPU per 1-byte round trip (a blocking read and a write, nothing else).\n",
            report::fmt_spread(floor)
        );
    }
    if summary.keys().any(|k| k.starts_with("peers.")) {
        let _ = writeln!(
            md,
            "### Side by side with etcd and ZooKeeper\n\nEvery system through its own lock recipe, each server on the same CPU; etcd's and ZooKeeper's data on tmpfs (no disk cost). monolock's SIGKILL row uses a protocol v1 holder; its memory row one v2 session.\n\n{}",
            crate::peers::table(
                summary,
                &plan.throughput_clients,
                &plan.peer_contention_clients
            )
        );
    }
    if summary.keys().any(|k| k.starts_with("observers.")) {
        let _ = writeln!(
            md,
            "### Values and observers\n\nThrough the Rust client library; every observer a client of its own (its own session and connection), all in the load generator's process. A cycle: the holder's `release()`, the waiter granted, every watch pushed RELEASED then GRANTED.\n\n{}",
            crate::observers::table(summary, &plan.observers)
        );
    }
    let base = report::baseline_table(summary);
    if !base.is_empty() {
        let _ = writeln!(
            md,
            "### Protocol v1: this build against the baseline build\n\n{base}"
        );
    }
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

/// The SVG charts of the run.
pub(crate) fn write_charts(
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
pub(crate) fn smoke_checks(s: &Summary, plan: &Plan, redis_ran: bool) -> Vec<String> {
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
    for c in &plan.throughput_clients {
        positive(
            &format!("throughput.c{c}.monolock_v2.cycles_per_s"),
            &mut problems,
        );
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
    positive("contention.w0.monolock_v2.acq_per_s", &mut problems);
    positive("contention.w0.v2_over_v1.acq_per_s", &mut problems);
    positive("many_locks.monolock.locks", &mut problems);
    positive("many_locks.monolock_v2.locks", &mut problems);
    for transport in ["plain", "tls", "mtls", "mtls_c16"] {
        for series in ["monolock", "monolock_v2"] {
            positive(
                &format!("tls_claims.{transport}.{series}.server_cpu_us_per_claim"),
                &mut problems,
            );
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
