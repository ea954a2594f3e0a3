//! Latency samples, percentiles, and the median / spread of repeated rounds.

use std::time::Duration;

/// Latency samples in nanoseconds.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    nanos: Vec<u64>,
    sorted: bool,
}

impl Samples {
    /// Records one latency.
    pub fn push(&mut self, d: Duration) {
        self.nanos
            .push(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        self.sorted = false;
    }

    /// Appends every sample of `other`.
    pub fn extend(&mut self, other: &Samples) {
        self.nanos.extend_from_slice(&other.nanos);
        self.sorted = false;
    }

    /// How many samples.
    pub fn len(&self) -> usize {
        self.nanos.len()
    }

    /// True when there are no samples.
    pub fn is_empty(&self) -> bool {
        self.nanos.is_empty()
    }

    fn sort(&mut self) {
        if !self.sorted {
            self.nanos.sort_unstable();
            self.sorted = true;
        }
    }

    /// The nearest-rank percentile `p` (0..=100), in microseconds.
    pub fn percentile_us(&mut self, p: f64) -> Option<f64> {
        if self.nanos.is_empty() {
            return None;
        }
        self.sort();
        let n = self.nanos.len();
        let rank = ((p / 100.0) * n as f64).ceil() as usize;
        let idx = rank.clamp(1, n) - 1;
        Some(self.nanos[idx] as f64 / 1_000.0)
    }

    /// The largest sample, in microseconds.
    pub fn max_us(&mut self) -> Option<f64> {
        self.percentile_us(100.0)
    }

    /// `(latency_us, fraction of samples >= latency)` points for a
    /// complementary-CDF chart, at most about `points` of them, from the
    /// fastest sample (fraction 1) to the slowest (fraction 1/n).
    pub fn ccdf_points(&mut self, points: usize) -> Vec<(f64, f64)> {
        if self.nanos.is_empty() || points == 0 {
            return Vec::new();
        }
        self.sort();
        let n = self.nanos.len();
        let frac = |i: usize| (n - i) as f64 / n as f64;
        // Dense in the tail: evenly spaced in log(fraction).
        let mut idx: Vec<usize> = (0..=points)
            .map(|k| {
                let f = (n as f64).powf(-(k as f64) / points as f64);
                n - ((f * n as f64).round() as usize).clamp(1, n)
            })
            .collect();
        idx.dedup();
        idx.into_iter()
            .map(|i| (self.nanos[i] as f64 / 1_000.0, frac(i)))
            .collect()
    }
}

/// The median and range of one figure over the rounds of a run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// Median over rounds (mean of the two middle values for an even count).
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// How many rounds produced the figure.
    pub n: usize,
}

/// Median and range of `values`; `None` if empty. Infinite values (e.g. a
/// fairness ratio with a starved client) sort last.
pub fn spread(values: &[f64]) -> Option<Spread> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        let (a, b) = (v[n / 2 - 1], v[n / 2]);
        if a.is_infinite() || b.is_infinite() {
            b
        } else {
            (a + b) / 2.0
        }
    };
    Some(Spread {
        median,
        min: v[0],
        max: v[n - 1],
        n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut s = Samples::default();
        for us in 1..=100u64 {
            s.push(Duration::from_micros(us));
        }
        assert_eq!(s.percentile_us(50.0), Some(50.0));
        assert_eq!(s.percentile_us(99.0), Some(99.0));
        assert_eq!(s.max_us(), Some(100.0));
        assert_eq!(s.percentile_us(0.0), Some(1.0));
    }

    #[test]
    fn spread_of_rounds() {
        let s = spread(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
        let s = spread(&[4.0, 1.0]).unwrap();
        assert_eq!(s.median, 2.5);
        let s = spread(&[1.0, f64::INFINITY]).unwrap();
        assert!(s.median.is_infinite());
        assert!(spread(&[]).is_none());
    }

    #[test]
    fn ccdf_runs_from_one_to_one_over_n() {
        let mut s = Samples::default();
        for us in 1..=1000u64 {
            s.push(Duration::from_micros(us));
        }
        let pts = s.ccdf_points(50);
        assert_eq!(pts.first(), Some(&(1.0, 1.0)));
        assert_eq!(pts.last(), Some(&(1000.0, 0.001)));
        assert!(pts.len() <= 51);
        assert!(pts.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 >= w[1].1));
    }
}
