//! Where a failover's time went: from the fault to the standby's first
//! grant, on one clock (CLOCK_MONOTONIC, milliseconds after the fault).
//!
//! Three sources tell it: the harness (the fault and its command), the
//! standby's own files (its takeover script's stamp and its server's
//! "listening" log line, both on the wall clock, mapped through the pair of
//! clocks read at the fault) and the workers' journal (losses, failed
//! acquires with the client's error, grants). A failover slower than its
//! bound fails with this timeline in the problem, so the next slow run says
//! by itself which step took the time.

use std::{fmt, time::SystemTime};

use crate::{checker::Record, messages::WorkerMsg};

/// The monotonic and the wall clock, read together.
#[derive(Clone, Copy, Debug)]
pub(super) struct Clocks {
    mono_ns: u64,
    wall: SystemTime,
}

impl Clocks {
    pub(super) fn now() -> Self {
        Self {
            mono_ns: crate::clock::mono_ns(),
            wall: SystemTime::now(),
        }
    }

    /// The monotonic instant of a wall-clock stamp (the wall clock does not
    /// step within a failover).
    pub(super) fn mono_of(self, wall: SystemTime) -> u64 {
        match wall.duration_since(self.wall) {
            Ok(after) => self.mono_ns.saturating_add(nanos(after)),
            Err(before) => self.mono_ns.saturating_sub(nanos(before.duration())),
        }
    }
}

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Events after a fault, printed in order.
#[derive(Debug)]
pub(super) struct Timeline {
    fault_ns: u64,
    events: Vec<(u64, String)>,
}

impl Timeline {
    pub(super) fn new(fault_ns: u64) -> Self {
        Self {
            fault_ns,
            events: Vec::new(),
        }
    }

    /// Milliseconds from the fault to `at_ns` (negative before it).
    pub(super) fn ms(&self, at_ns: u64) -> f64 {
        crate::clock::ms_between(self.fault_ns, at_ns)
    }

    pub(super) fn add(&mut self, at_ns: u64, what: impl Into<String>) {
        self.events.push((at_ns, what.into()));
    }

    /// The workers' journal between the fault and `until_ns` (exclusive
    /// for grants: the grant that ends the timeline is added by the
    /// caller): losses, grants, and failed acquires (a run of the same error from one
    /// worker in one line, with its count and span).
    pub(super) fn add_workers(&mut self, lock: &str, records: &[Record], until_ns: u64) {
        // (worker, error, count, first, last) of the run being collected.
        let mut runs: Vec<(String, String, u32, u64, u64)> = Vec::new();
        for r in records {
            if r.at_ns < self.fault_ns || r.at_ns > until_ns {
                continue;
            }
            match &r.msg {
                WorkerMsg::AcquireFailed { lock: l, error } if l == lock => {
                    match runs
                        .iter_mut()
                        .rev()
                        .find(|run| run.0 == r.worker)
                        .filter(|run| run.1 == *error)
                    {
                        Some(run) => {
                            run.2 += 1;
                            run.4 = r.at_ns;
                        }
                        None => runs.push((r.worker.clone(), error.clone(), 1, r.at_ns, r.at_ns)),
                    }
                }
                WorkerMsg::Lost {
                    lock: l,
                    token,
                    detected_ns,
                    reason,
                    ..
                } if l == lock => self.add(
                    *detected_ns,
                    format!("{} lost token {token}: {reason}", r.worker),
                ),
                WorkerMsg::Held {
                    lock: l,
                    token,
                    from_ns,
                } if l == lock && *from_ns < until_ns => {
                    self.add(*from_ns, format!("{} granted token {token}", r.worker));
                }
                _ => {}
            }
        }
        for (worker, error, count, first, last) in runs {
            let what = if count == 1 {
                format!("{worker} acquire failed: {error}")
            } else {
                format!(
                    "{worker} acquire failed {count} times until +{:.0} ms: {error}",
                    self.ms(last)
                )
            };
            self.add(first, what);
        }
    }
}

impl fmt::Display for Timeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut events: Vec<&(u64, String)> = self.events.iter().collect();
        events.sort_by_key(|(at, _)| *at);
        for (at, what) in events {
            write!(f, "\n      {:>+8.0} ms  {what}", self.ms(*at))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn record(worker: &str, at_ns: u64, msg: WorkerMsg) -> Record {
        Record {
            worker: worker.into(),
            at_ns,
            msg,
            accepted: None,
        }
    }

    fn failed(error: &str) -> WorkerMsg {
        WorkerMsg::AcquireFailed {
            lock: "l".into(),
            error: error.into(),
        }
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn wall_stamps_map_onto_the_monotonic_clock() {
        let clocks = Clocks::now();
        let later = clocks.wall + Duration::from_millis(1500);
        assert_eq!(clocks.mono_of(later), clocks.mono_ns + 1500 * MS);
        let earlier = clocks.wall - Duration::from_millis(2);
        assert_eq!(clocks.mono_of(earlier), clocks.mono_ns - 2 * MS);
    }

    #[test]
    fn runs_of_one_error_are_one_line_and_events_are_in_order() {
        let fault = 1_000 * MS;
        let mut timeline = Timeline::new(fault);
        timeline.add(fault + 400 * MS, "standby took over");
        let records = [
            record("w0", fault - MS, failed("before the fault")),
            record("w2", fault + 850 * MS, failed("refused")),
            record("w3", fault + 860 * MS, failed("timed out")),
            record("w2", fault + 900 * MS, failed("refused")),
            record("w2", fault + 950 * MS, failed("refused")),
            record(
                "w2",
                fault + 1600 * MS,
                WorkerMsg::Held {
                    lock: "l".into(),
                    token: 7,
                    from_ns: fault + 1590 * MS,
                },
            ),
            record("w2", fault + 1700 * MS, failed("after the grant")),
        ];
        // Until the grant the caller found; it adds that line itself.
        timeline.add_workers("l", &records, fault + 1590 * MS);
        timeline.add(fault + 1590 * MS, "w2 granted token 7");
        let text = timeline.to_string();
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        assert_eq!(
            lines,
            [
                "+400 ms  standby took over",
                "+850 ms  w2 acquire failed 3 times until +950 ms: refused",
                "+860 ms  w3 acquire failed: timed out",
                "+1590 ms  w2 granted token 7",
            ]
        );
    }
}
