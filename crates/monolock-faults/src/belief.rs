//! Belief intervals: when each worker believed it held a lock.
//!
//! A worker's belief starts when `acquire` hands it a guard and ends at the
//! first of: the moment its client reported the loss, and the client's own
//! deadline (`S + 0.8 x lease`) as the client knew it then. The client
//! contract promises that, against one live server, no two beliefs in the
//! same lock overlap: the holder always learns of a loss before the server
//! hands the lock on. These functions check exactly that.

use std::collections::{BTreeMap, HashMap};

use crate::clock::ms_between;

/// One worker's belief that it held one lock under one token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Belief {
    /// The lock.
    pub lock: String,
    /// The worker.
    pub worker: String,
    /// The token of the grant.
    pub token: u64,
    /// Which server granted it (a label; beliefs from different servers may
    /// legitimately overlap after a failover: fencing covers that).
    pub server: String,
    /// CLOCK_MONOTONIC when the worker learned it held the lock.
    pub from_ns: u64,
    /// CLOCK_MONOTONIC until which it was entitled to believe so.
    pub until_ns: u64,
    /// How the belief ended (loss reason, `killed`, `stopped`, ...).
    pub end: String,
}

impl Belief {
    fn overlap_ns(&self, other: &Belief) -> u64 {
        let start = self.from_ns.max(other.from_ns);
        let end = self.until_ns.min(other.until_ns);
        end.saturating_sub(start)
    }
}

/// Two beliefs in one lock that overlap in time.
#[derive(Clone, Debug)]
pub struct Overlap {
    /// The earlier belief.
    pub first: Belief,
    /// The later belief.
    pub second: Belief,
    /// For how long both were believed.
    pub overlap_ns: u64,
}

impl std::fmt::Display for Overlap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "lock {:?}: {} (token {}, server {}) believed until {:.3} ms after {} (token {}, server {}) began; overlap {:.3} ms",
            self.first.lock,
            self.first.worker,
            self.first.token,
            self.first.server,
            ms_between(self.second.from_ns, self.first.until_ns),
            self.second.worker,
            self.second.token,
            self.second.server,
            self.overlap_ns as f64 / 1e6
        )
    }
}

/// Every pair of overlapping beliefs in the same lock. With
/// `same_server_only`, only pairs granted by the same server count (the
/// contract holds against one live server).
pub fn overlaps(beliefs: &[Belief], same_server_only: bool) -> Vec<Overlap> {
    let mut by_lock: BTreeMap<&str, Vec<&Belief>> = BTreeMap::new();
    for b in beliefs {
        by_lock.entry(&b.lock).or_default().push(b);
    }
    let mut found = Vec::new();
    for list in by_lock.values_mut() {
        list.sort_by_key(|b| (b.from_ns, b.until_ns));
        for (i, first) in list.iter().enumerate() {
            for second in &list[i + 1..] {
                if second.from_ns >= first.until_ns {
                    // Sorted by start: every later belief starts later still.
                    break;
                }
                if same_server_only && first.server != second.server {
                    continue;
                }
                let overlap_ns = first.overlap_ns(second);
                if overlap_ns > 0 {
                    found.push(Overlap {
                        first: (*first).clone(),
                        second: (*second).clone(),
                        overlap_ns,
                    });
                }
            }
        }
    }
    found
}

/// Checks the tokens behind the beliefs: within a lock, every token belongs
/// to one worker only, and ordered by when they began, beliefs carry
/// strictly increasing tokens, across server restarts and failovers too.
/// Returns the violations.
pub fn token_order_problems(beliefs: &[Belief]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut owners: HashMap<(&str, u64), &str> = HashMap::new();
    for b in beliefs {
        if let Some(other) = owners.insert((&b.lock, b.token), &b.worker)
            && other != b.worker
        {
            problems.push(format!(
                "lock {:?}: token {} was held by both {} and {}",
                b.lock, b.token, other, b.worker
            ));
        }
    }
    let mut by_lock: BTreeMap<&str, Vec<&Belief>> = BTreeMap::new();
    for b in beliefs {
        by_lock.entry(&b.lock).or_default().push(b);
    }
    for list in by_lock.values_mut() {
        list.sort_by_key(|b| b.from_ns);
        for pair in list.windows(2) {
            if pair[1].token <= pair[0].token {
                problems.push(format!(
                    "lock {:?}: {} began holding token {} (server {}) after {} held token {} (server {})",
                    pair[1].lock,
                    pair[1].worker,
                    pair[1].token,
                    pair[1].server,
                    pair[0].worker,
                    pair[0].token,
                    pair[0].server
                ));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn belief(worker: &str, token: u64, server: &str, from_ns: u64, until_ns: u64) -> Belief {
        Belief {
            lock: "l".into(),
            worker: worker.into(),
            token,
            server: server.into(),
            from_ns,
            until_ns,
            end: String::new(),
        }
    }

    #[test]
    fn touching_intervals_do_not_overlap() {
        let beliefs = [belief("a", 1, "s", 0, 10), belief("b", 2, "s", 10, 20)];
        assert!(overlaps(&beliefs, false).is_empty());
        assert!(token_order_problems(&beliefs).is_empty());
    }

    #[test]
    fn a_long_early_belief_is_compared_with_every_later_one() {
        let beliefs = [
            belief("a", 1, "s", 0, 100),
            belief("b", 2, "s", 10, 20),
            belief("c", 3, "s", 50, 60),
        ];
        let found = overlaps(&beliefs, false);
        assert_eq!(found.len(), 2);
        assert_eq!(found[1].second.worker, "c");
        assert_eq!(found[1].overlap_ns, 10);
    }

    #[test]
    fn other_servers_only_count_when_asked() {
        let beliefs = [belief("a", 1, "old", 0, 100), belief("b", 9, "new", 50, 60)];
        assert!(overlaps(&beliefs, true).is_empty());
        assert_eq!(overlaps(&beliefs, false).len(), 1);
    }

    #[test]
    fn token_regressions_and_shared_tokens_are_reported() {
        let beliefs = [belief("a", 5, "old", 0, 10), belief("b", 4, "new", 20, 30)];
        assert_eq!(token_order_problems(&beliefs).len(), 1);
        let shared = [belief("a", 5, "s", 0, 10), belief("b", 5, "s", 20, 30)];
        assert_eq!(token_order_problems(&shared).len(), 2);
    }
}
