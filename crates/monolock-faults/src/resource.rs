//! The fenced resource: the thing a lock guards, modelled as a store that
//! refuses writes carrying a token older than one it has accepted.
//!
//! This is the other half of fencing. A lease cannot stop a holder that is
//! paused between checking its lock and writing; a resource that compares
//! tokens can. The model records every write, accepted or not, so that a
//! scenario can show both that stale writes happened and that none got in.

use std::collections::HashMap;

/// One write as the resource saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteRecord {
    /// The lock (one lock per guarded resource; tokens of different locks
    /// are never compared).
    pub lock: String,
    /// The writer's name.
    pub worker: String,
    /// The fencing token the write carried.
    pub token: u64,
    /// The writer's own sequence number.
    pub seq: u64,
    /// CLOCK_MONOTONIC when the writer sent it.
    pub sent_ns: u64,
    /// CLOCK_MONOTONIC when the resource decided.
    pub at_ns: u64,
    /// Whether it was accepted.
    pub accepted: bool,
    /// The highest token accepted for the lock before this write.
    pub highest_before: Option<u64>,
}

/// A write to submit.
#[derive(Clone, Debug)]
pub struct Write<'a> {
    /// The lock the writer holds.
    pub lock: &'a str,
    /// The writer's name.
    pub worker: &'a str,
    /// Its fencing token.
    pub token: u64,
    /// Its sequence number.
    pub seq: u64,
    /// When it was sent (CLOCK_MONOTONIC).
    pub sent_ns: u64,
}

/// Accepts a write for lock L only if its token is `>=` the highest token
/// accepted for L so far; records every decision.
///
/// ```
/// use monolock_faults::resource::{FencedResource, Write};
///
/// let mut resource = FencedResource::default();
/// let w = |token| Write { lock: "l", worker: "w", token, seq: 0, sent_ns: 0 };
/// assert!(resource.write(&w(5), 1));
/// assert!(resource.write(&w(5), 2)); // the same holder writes again
/// assert!(resource.write(&w(9), 3)); // a newer holder
/// assert!(!resource.write(&w(5), 4)); // the old holder, late: refused
/// assert_eq!(resource.stats().rejected, 1);
/// ```
#[derive(Debug, Default)]
pub struct FencedResource {
    highest: HashMap<String, u64>,
    log: Vec<WriteRecord>,
}

/// Counts over everything the resource saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResourceStats {
    /// Writes accepted.
    pub accepted: u64,
    /// Writes refused for carrying an old token.
    pub rejected: u64,
}

impl FencedResource {
    /// Decides one write at `at_ns`; true if accepted.
    pub fn write(&mut self, write: &Write<'_>, at_ns: u64) -> bool {
        let highest_before = self.highest.get(write.lock).copied();
        let accepted = highest_before.is_none_or(|highest| write.token >= highest);
        if accepted {
            self.highest.insert(write.lock.to_owned(), write.token);
        }
        self.log.push(WriteRecord {
            lock: write.lock.to_owned(),
            worker: write.worker.to_owned(),
            token: write.token,
            seq: write.seq,
            sent_ns: write.sent_ns,
            at_ns,
            accepted,
            highest_before,
        });
        accepted
    }

    /// The highest token accepted for `lock`.
    pub fn highest(&self, lock: &str) -> Option<u64> {
        self.highest.get(lock).copied()
    }

    /// Every write, in the order decided.
    pub fn log(&self) -> &[WriteRecord] {
        &self.log
    }

    /// Accepted and rejected counts.
    pub fn stats(&self) -> ResourceStats {
        let accepted = self.log.iter().filter(|w| w.accepted).count() as u64;
        ResourceStats {
            accepted,
            rejected: self.log.len() as u64 - accepted,
        }
    }

    /// Checks the resource's own invariant on its log: for each lock, the
    /// accepted tokens never decrease and every refused write carried a
    /// token below one already accepted. Returns the violations.
    pub fn check_log(&self) -> Vec<String> {
        let mut highest: HashMap<&str, u64> = HashMap::new();
        let mut problems = Vec::new();
        for w in &self.log {
            let before = highest.get(w.lock.as_str()).copied();
            let should_accept = before.is_none_or(|h| w.token >= h);
            if should_accept != w.accepted {
                problems.push(format!(
                    "lock {:?}: write {} by {} with token {} {} while the highest was {:?}",
                    w.lock,
                    w.seq,
                    w.worker,
                    w.token,
                    if w.accepted { "accepted" } else { "refused" },
                    before
                ));
            }
            if w.accepted {
                highest.insert(&w.lock, w.token);
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(lock: &str, token: u64) -> Write<'_> {
        Write {
            lock,
            worker: "w",
            token,
            seq: 0,
            sent_ns: 0,
        }
    }

    #[test]
    fn locks_are_fenced_independently() {
        let mut r = FencedResource::default();
        assert!(r.write(&write("a", 10), 0));
        assert!(r.write(&write("b", 3), 0));
        assert!(!r.write(&write("a", 9), 0));
        assert!(r.write(&write("b", 4), 0));
        assert_eq!(r.highest("a"), Some(10));
        assert_eq!(
            r.stats(),
            ResourceStats {
                accepted: 3,
                rejected: 1
            }
        );
        assert!(r.check_log().is_empty());
    }

    proptest::proptest! {
        #[test]
        fn accepted_tokens_never_decrease(tokens in proptest::collection::vec((0u8..3, 0u64..50), 0..200)) {
            let mut r = FencedResource::default();
            let names = ["a", "b", "c"];
            for (lock, token) in &tokens {
                r.write(&write(names[usize::from(*lock)], *token), 0);
            }
            proptest::prop_assert!(r.check_log().is_empty());
            for name in names {
                let accepted: Vec<u64> = r.log().iter().filter(|w| w.lock == name && w.accepted).map(|w| w.token).collect();
                proptest::prop_assert!(accepted.windows(2).all(|p| p[0] <= p[1]));
            }
        }
    }
}
