//! An explicit-state model of the monolock protocol with time in ticks, and
//! a breadth-first checker that explores every interleaving up to a
//! horizon.
//!
//! Why a checker of our own and not `stateright`: the questions asked here
//! are quantitative (is `S + f x lease` before `last_seen + lease` on every
//! path, for which `f` and which clock drift), so time must be a number in
//! the state and timers must be compared with each other. `stateright`
//! models timers as unordered nondeterministic events; encoding ticks in
//! its `Model` trait would leave its actor layer and UI unused, for a large
//! dependency. Breadth-first search over a hash set of states is a page of
//! code, and it gives shortest counterexamples.
//!
//! The model: one server and two or three clients on one lock, each with its
//! own TCP connection (two FIFO channels, every message delivered within
//! `max_delay` ticks of being sent), heartbeats on the shipped schedule
//! (any interval between the floor and a quarter lease, at most one in
//! flight), client pauses (no I/O while the clock runs), server restarts
//! (the process: clients see their connections reset; or the machine: they
//! see nothing) with today's token rule, and client clocks that run slow by
//! up to `drift`, uplinks that may stall for good, and readers that may
//! stall for good while their writer goes on (the server then ends the
//! connection at io-timeout and keeps a held lock until the holder's last
//! frame plus its lease).
//!
//! With `Params::protocol` 2, the model of protocol version 2 instead
//! (`sessions.rs`): two or three sessions, each carrying up to two claims
//! on one or two locks, RELEASE and its RELEASED ("handed on"), a RELEASE
//! crossing a GRANTED, an administrator's REVOKED of one claim, and
//! sessions ending by close or lease expiry with claims held and waiting.
//! See docs/safety.md for the mapping to the code and for the checker's
//! reductions.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod check;
mod frames;
mod model;
mod params;
mod sessions;
mod vectors;

pub use check::{Outcome, Stats};
pub use frames::{Answer, Frame};
pub use params::{Params, Step, Variant};
pub use vectors::export as export_vector;

/// Explores every interleaving of `params` up to its horizon: the model of
/// protocol version 1, or of version 2 when `params.protocol` is 2.
pub fn check(params: &Params) -> Outcome {
    if params.protocol == 2 {
        check::search::<sessions::State>(params)
    } else {
        check::search::<model::State>(params)
    }
}
