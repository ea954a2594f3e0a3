//! Breadth-first search over every state reachable within the horizon.
//!
//! The visited set holds 64-bit fingerprints of states up to a renaming of
//! the clients (`State::fingerprint`), not the states: 8 bytes a state
//! instead of a few hundred, so finer time and three clients fit in memory.
//! This is hash compaction: two distinct states sharing a fingerprint would
//! prune one of them; with `n` states the chance of any such collision is
//! about `n^2 / 2^65` (under 3 x 10^-4 at 10^8 states). Only the frontier,
//! one tick's worth of breadth, is kept as whole states.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

use crate::params::{Params, Step};

/// A transition system the search explores: the protocol of version 1
/// (`model::State`) or of version 2 (`sessions::State`).
pub(crate) trait Model: Sized {
    /// The state at tick 0.
    fn initial(params: &Params) -> Self;
    /// A 64-bit fingerprint, equal for states that differ only by a
    /// renaming of identical clients.
    fn fingerprint(&self) -> u64;
    /// The first rule this state breaks, if any.
    fn violation(&self, params: &Params) -> Option<String>;
    /// Every state one step away.
    fn successors(&self, params: &Params, out: &mut Vec<(Step, Self)>);
}

/// The clients in a canonical order (sorted, each with its server
/// session), and for each client its number in that order: states that
/// differ only by a renaming of the clients hash alike once renamed so.
pub(crate) fn client_renaming<C: Ord, S: Ord>(
    clients: &[C],
    sessions: &[S],
) -> (Vec<usize>, [u8; 8]) {
    let mut order: Vec<usize> = (0..clients.len()).collect();
    order.sort_by(|&a, &b| (&clients[a], &sessions[a]).cmp(&(&clients[b], &sessions[b])));
    let mut rename = [0u8; 8];
    for (new, &old) in order.iter().enumerate() {
        rename[old] = u8::try_from(new).unwrap_or(u8::MAX);
    }
    (order, rename)
}

/// What the search covered.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Distinct states visited (up to a renaming of the clients).
    pub states: usize,
    /// Transitions taken.
    pub transitions: usize,
}

/// The verdict.
#[derive(Debug)]
pub enum Outcome {
    /// Every reachable state keeps every rule.
    Holds(Stats),
    /// A shortest path to a state that breaks a rule.
    Broken {
        /// The rule and the state's time.
        what: String,
        /// The steps from the initial state.
        path: Vec<Step>,
        /// The search so far.
        stats: Stats,
    },
}

impl Outcome {
    /// True when every rule held.
    pub fn holds(&self) -> bool {
        matches!(self, Self::Holds(_))
    }
}

/// The fingerprints are already uniform 64-bit hashes: hashing them again
/// for the set would only cost time. (A dozen lines; not worth a crate.)
#[derive(Default)]
struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Explores every interleaving of model `M` under `params` up to its
/// horizon.
pub(crate) fn search<M: Model>(params: &Params) -> Outcome {
    let initial = M::initial(params);
    let mut seen: HashSet<u64, BuildHasherDefault<Identity>> = HashSet::default();
    // Each visited state's predecessor (index here) and the step from it,
    // for the counterexample: 24 bytes a state.
    let mut trail: Vec<(u32, Step)> = vec![(u32::MAX, Step::Tick)];
    seen.insert(initial.fingerprint());
    let mut frontier = vec![(initial, 0u32)];
    let mut stats = Stats::default();
    let mut next = Vec::new();
    let mut successors = Vec::new();
    while !frontier.is_empty() {
        for (state, index) in frontier.drain(..) {
            if let Some(what) = state.violation(params) {
                stats.states = seen.len();
                return Outcome::Broken {
                    what,
                    path: path_to(&trail, index),
                    stats,
                };
            }
            successors.clear();
            state.successors(params, &mut successors);
            for (step, successor) in successors.drain(..) {
                stats.transitions += 1;
                if seen.insert(successor.fingerprint()) {
                    let at = u32::try_from(trail.len()).unwrap_or(u32::MAX);
                    trail.push((index, step));
                    next.push((successor, at));
                }
            }
        }
        std::mem::swap(&mut frontier, &mut next);
    }
    stats.states = seen.len();
    Outcome::Holds(stats)
}

fn path_to(trail: &[(u32, Step)], mut index: u32) -> Vec<Step> {
    let mut path = Vec::new();
    while let Some(&(parent, step)) = trail.get(index as usize)
        && parent != u32::MAX
    {
        path.push(step);
        index = parent;
    }
    path.reverse();
    path
}
