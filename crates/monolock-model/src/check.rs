//! Breadth-first search over every state reachable within the horizon.

use std::collections::{HashMap, VecDeque};

use crate::model::{Params, State, Step};

/// What the search covered.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Distinct states visited.
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

/// Explores every interleaving of `params` up to its horizon.
pub fn check(params: &Params) -> Outcome {
    let initial = State::initial(params);
    // Each state's predecessor and the step that led to it, for the path.
    let mut seen: HashMap<State, Option<(usize, Step)>> = HashMap::new();
    let mut order: Vec<State> = Vec::new();
    let mut queue = VecDeque::new();
    seen.insert(initial.clone(), None);
    order.push(initial.clone());
    queue.push_back(0usize);
    let mut stats = Stats::default();
    let mut next = Vec::new();
    while let Some(index) = queue.pop_front() {
        let state = order[index].clone();
        if let Some(what) = state.violation(params) {
            stats.states = seen.len();
            return Outcome::Broken {
                what,
                path: path_to(&seen, &order, &state),
                stats,
            };
        }
        next.clear();
        state.successors(params, &mut next);
        for (step, successor) in next.drain(..) {
            stats.transitions += 1;
            if !seen.contains_key(&successor) {
                seen.insert(successor.clone(), Some((index, step)));
                order.push(successor);
                queue.push_back(order.len() - 1);
            }
        }
    }
    stats.states = seen.len();
    Outcome::Holds(stats)
}

fn path_to(
    seen: &HashMap<State, Option<(usize, Step)>>,
    order: &[State],
    state: &State,
) -> Vec<Step> {
    let mut path = Vec::new();
    let mut current = state;
    while let Some(Some((parent, step))) = seen.get(current) {
        path.push(*step);
        current = &order[*parent];
    }
    path.reverse();
    path
}
