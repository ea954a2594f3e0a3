//! The latency summaries (`monolock_wait_seconds`,
//! `monolock_hold_seconds`), which the Prometheus client cannot write.

use std::{
    collections::VecDeque,
    fmt::Write as _,
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

/// Quantiles every summary reports.
pub const SUMMARY_QUANTILES: [f64; 3] = [0.5, 0.9, 0.99];
/// Summary quantiles cover observations no older than this (as the Go
/// client's default `MaxAge`)...
pub const SUMMARY_MAX_AGE: Duration = Duration::from_secs(10 * 60);
/// ...and at most this many of the most recent ones, so memory is fixed.
pub const SUMMARY_MAX_SAMPLES: usize = 4096;

/// A Prometheus summary: total count and sum, and quantiles over a sliding
/// window (the last [`SUMMARY_MAX_AGE`], at most [`SUMMARY_MAX_SAMPLES`]
/// observations).
///
/// prometheus-client 0.26 has no summary type, and its encoders cannot write
/// one: their `MetricType` has no `Summary` variant, so neither a custom
/// `EncodeMetric` nor a `Collector` can emit `# TYPE ... summary` (the nearest
/// they allow is an `untyped` family plus a histogram's `_bucket` line). A
/// histogram would change the series docs/operations.md promises ("Metrics
/// and health"), so this type encodes its few lines of the text format
/// itself, after the registry's output.
#[derive(Default)]
pub struct Summary {
    state: Mutex<SummaryState>,
}

#[derive(Default)]
struct SummaryState {
    count: u64,
    sum: f64,
    window: VecDeque<(Instant, f64)>,
}

impl Summary {
    /// Records one observation.
    pub fn observe(&self, value: f64) {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.count += 1;
        state.sum += value;
        if state.window.len() == SUMMARY_MAX_SAMPLES {
            state.window.pop_front();
        }
        state.window.push_back((now, value));
    }

    /// Count, sum, and each of [`SUMMARY_QUANTILES`] (NaN with no recent
    /// observation), by the nearest-rank method.
    pub fn snapshot(&self) -> (u64, f64, [f64; SUMMARY_QUANTILES.len()]) {
        let now = Instant::now();
        let mut values: Vec<f64>;
        let (count, sum) = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            while let Some(&(at, _)) = state.window.front() {
                if now.saturating_duration_since(at) <= SUMMARY_MAX_AGE {
                    break;
                }
                state.window.pop_front();
            }
            values = state.window.iter().map(|&(_, value)| value).collect();
            (state.count, state.sum)
        };
        values.sort_by(f64::total_cmp);
        let quantiles = SUMMARY_QUANTILES.map(|q| {
            if values.is_empty() {
                return f64::NAN;
            }
            // Nearest rank: the smallest value with at least q of all values
            // at or below it.
            let rank = (q * values.len() as f64).ceil() as usize;
            values[rank.clamp(1, values.len()) - 1]
        });
        (count, sum, quantiles)
    }

    /// Appends the summary in the Prometheus text format.
    pub(super) fn encode_text(&self, out: &mut String, name: &str, help: &str) {
        let (count, sum, quantiles) = self.snapshot();
        let _ = writeln!(out, "# HELP {name} {help}.");
        let _ = writeln!(out, "# TYPE {name} summary");
        for (q, value) in SUMMARY_QUANTILES.iter().zip(quantiles) {
            let _ = writeln!(out, "{name}{{quantile=\"{q}\"}} {}", float(value));
        }
        let _ = writeln!(out, "{name}_sum {}", float(sum));
        let _ = writeln!(out, "{name}_count {count}");
    }
}

/// A float as the text format writes it (`NaN`, `+Inf`, plain decimals).
fn float(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        value.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_quantiles_by_nearest_rank() {
        let summary = Summary::default();
        assert!(summary.snapshot().2.iter().all(|q| q.is_nan()));
        for value in 1..=100 {
            summary.observe(f64::from(value));
        }
        let (count, sum, quantiles) = summary.snapshot();
        assert_eq!(count, 100);
        assert_eq!(sum, 5050.0);
        assert_eq!(quantiles, [50.0, 90.0, 99.0]);
    }

    #[test]
    fn summary_window_is_bounded() {
        let summary = Summary::default();
        for _ in 0..SUMMARY_MAX_SAMPLES + 10 {
            summary.observe(1.0);
        }
        let state = summary.state.lock().unwrap();
        assert_eq!(state.window.len(), SUMMARY_MAX_SAMPLES);
        assert_eq!(state.count, (SUMMARY_MAX_SAMPLES + 10) as u64);
    }
}
