//! What a scenario run found: its figures and its problems, and the totals
//! of many runs of one scenario (`--soak`).

use std::{collections::BTreeMap, fmt};

use serde::Serialize;

use super::Scenario;

/// Figures and findings of one scenario run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// The scenario.
    pub scenario: String,
    /// The seed of its random choices.
    pub seed: u64,
    /// Faults injected.
    pub faults: u64,
    /// Faults by kind.
    pub fault_kinds: BTreeMap<String, u64>,
    /// Beliefs (grants seen by workers) checked.
    pub beliefs: u64,
    /// Writes the fenced resource accepted.
    pub writes_accepted: u64,
    /// Writes it refused (an older token than one accepted).
    pub writes_rejected: u64,
    /// Writes sent after their writer's belief had ended (in flight across
    /// a pause or a restart).
    pub late_writes: u64,
    /// Of those, accepted (no newer holder had written yet: harmless, the
    /// resource's order is still the token order).
    pub late_writes_accepted: u64,
    /// Overlapping beliefs against one live server (must be 0).
    pub overlaps: u64,
    /// Overlapping beliefs granted by two different servers (failover:
    /// allowed by design, covered by fencing).
    pub cross_server_overlaps: u64,
    /// Overlaps right after a reset of both sides of the holder's
    /// connection (the server and the holder learn of the close at the same
    /// instant; covered by fencing).
    pub abortive_close_overlaps: u64,
    /// The longest of those, ms.
    pub max_abortive_overlap_ms: f64,
    /// The lease used, ms.
    pub lease_ms: u64,
    /// Longest time from a fault to the next grant, ms.
    pub max_fault_to_grant_ms: f64,
    /// Smallest gap between the end of a belief and the start of the next
    /// one in the same lock (negative would be an overlap), ms.
    pub min_handover_gap_ms: Option<f64>,
    /// Longest heartbeat round trip of a healthy client, ms.
    pub max_heartbeat_rtt_ms: Option<f64>,
    /// The bound that round trip had to stay within, ms.
    pub heartbeat_rtt_bound_ms: Option<f64>,
    /// Other counts (hostile connections, accept errors, ...), summed over
    /// rounds and runs.
    pub counts: BTreeMap<String, u64>,
    /// Named durations, ms: the longest over rounds and runs (a phase of a
    /// failover, say), never summed.
    pub maxima: BTreeMap<String, f64>,
    /// Violations found. Empty means the scenario passed.
    pub problems: Vec<String>,
    /// Wall time of the run, s.
    pub seconds: f64,
}

impl Report {
    pub(super) fn new(scenario: Scenario, seed: u64) -> Self {
        Self {
            scenario: scenario.name().to_owned(),
            seed,
            ..Self::default()
        }
    }

    /// Records a violation.
    pub fn problem(&mut self, problem: impl Into<String>) {
        self.problems.push(problem.into());
    }

    pub(super) fn fault(&mut self, kind: &str) {
        self.faults += 1;
        *self.fault_kinds.entry(kind.to_owned()).or_default() += 1;
    }

    pub(super) fn count(&mut self, what: &str, n: u64) {
        *self.counts.entry(what.to_owned()).or_default() += n;
    }

    /// Records a duration whose longest value is the figure.
    pub(super) fn maximum(&mut self, what: &str, ms: f64) {
        let longest = self.maxima.entry(what.to_owned()).or_insert(ms);
        *longest = longest.max(ms);
    }

    pub(super) fn fault_to_grant(&mut self, ms: f64) {
        self.max_fault_to_grant_ms = self.max_fault_to_grant_ms.max(ms);
    }

    pub(super) fn check(&mut self, ok: bool, problem: impl FnOnce() -> String) {
        if !ok {
            self.problem(problem());
        }
    }

    /// Whether the scenario passed.
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<16} {} faults={} beliefs={} writes ok={} refused={} late={} (accepted {}) overlaps={} cross-server={} lease={}ms max fault->grant={:.0}ms",
            self.scenario,
            if self.passed() { "PASS" } else { "FAIL" },
            self.faults,
            self.beliefs,
            self.writes_accepted,
            self.writes_rejected,
            self.late_writes,
            self.late_writes_accepted,
            self.overlaps,
            self.cross_server_overlaps,
            self.lease_ms,
            self.max_fault_to_grant_ms,
        )?;
        if self.abortive_close_overlaps > 0 {
            write!(
                f,
                " abortive-close overlaps={} (max {:.3}ms)",
                self.abortive_close_overlaps, self.max_abortive_overlap_ms
            )?;
        }
        if let Some(gap) = self.min_handover_gap_ms {
            write!(f, " min handover gap={gap:.1}ms")?;
        }
        if let (Some(rtt), Some(bound)) = (self.max_heartbeat_rtt_ms, self.heartbeat_rtt_bound_ms) {
            write!(f, " max hb rtt={rtt:.1}ms (bound {bound:.0}ms)")?;
        }
        for (k, v) in &self.counts {
            write!(f, " {k}={v}")?;
        }
        for (k, v) in &self.maxima {
            write!(f, " max {k}={v:.0}")?;
        }
        for p in &self.problems {
            write!(f, "\n    problem: {p}")?;
        }
        Ok(())
    }
}

/// Figures of many runs of one scenario, merged.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Totals {
    /// Runs merged.
    pub runs: u64,
    /// Runs that found problems.
    pub failed_runs: u64,
    /// Everything summed (counts), maximised (times) or minimised (gaps).
    pub merged: Report,
}

impl Totals {
    /// Merges one run.
    pub fn add(&mut self, r: &Report) {
        let m = &mut self.merged;
        if self.runs == 0 {
            m.scenario.clone_from(&r.scenario);
            m.lease_ms = r.lease_ms;
            m.heartbeat_rtt_bound_ms = r.heartbeat_rtt_bound_ms;
        }
        self.runs += 1;
        self.failed_runs += u64::from(!r.passed());
        m.faults += r.faults;
        for (k, v) in &r.fault_kinds {
            *m.fault_kinds.entry(k.clone()).or_default() += v;
        }
        m.beliefs += r.beliefs;
        m.writes_accepted += r.writes_accepted;
        m.writes_rejected += r.writes_rejected;
        m.late_writes += r.late_writes;
        m.late_writes_accepted += r.late_writes_accepted;
        m.overlaps += r.overlaps;
        m.cross_server_overlaps += r.cross_server_overlaps;
        m.abortive_close_overlaps += r.abortive_close_overlaps;
        m.max_abortive_overlap_ms = m.max_abortive_overlap_ms.max(r.max_abortive_overlap_ms);
        m.max_fault_to_grant_ms = m.max_fault_to_grant_ms.max(r.max_fault_to_grant_ms);
        m.min_handover_gap_ms = match (m.min_handover_gap_ms, r.min_handover_gap_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        m.max_heartbeat_rtt_ms = match (m.max_heartbeat_rtt_ms, r.max_heartbeat_rtt_ms) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        for (k, v) in &r.counts {
            *m.counts.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &r.maxima {
            m.maximum(k, *v);
        }
        m.problems
            .extend(r.problems.iter().map(|p| format!("seed {}: {p}", r.seed)));
        m.seconds += r.seconds;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maxima_are_the_longest_over_rounds_and_runs_never_a_sum() {
        let mut run = Report::default();
        run.maximum("case-fault-to-grant-ms", 1600.0);
        run.maximum("case-fault-to-grant-ms", 1700.0);
        run.maximum("case-fault-to-grant-ms", 1500.0);
        run.count("case-overlaps", 1);
        run.count("case-overlaps", 2);
        assert_eq!(run.maxima["case-fault-to-grant-ms"], 1700.0);
        assert_eq!(run.counts["case-overlaps"], 3);
        let mut other = Report::default();
        other.maximum("case-fault-to-grant-ms", 1650.0);
        let mut totals = Totals::default();
        totals.add(&run);
        totals.add(&other);
        assert_eq!(totals.merged.maxima["case-fault-to-grant-ms"], 1700.0);
        assert_eq!(totals.merged.counts["case-overlaps"], 3);
        assert!(run.to_string().contains(" max case-fault-to-grant-ms=1700"));
    }
}
