//! The model's exhaustive check at the small bounds CI affords.

use monolock_model::{Params, check};

fn small() -> Params {
    Params {
        lease: 8,
        second: 8,
        horizon: 9,
        pauses: 0,
        restarts: 0,
        acquires: 1,
        ..Params::small()
    }
}

#[test]
fn the_protocol_as_shipped_keeps_exclusion_and_tokens_at_small_bounds() {
    let outcome = check(&small());
    assert!(outcome.holds(), "{outcome:?}");
}

#[test]
fn a_client_that_never_gives_up_is_caught_once_paused() {
    // Abandoning only after twice the lease: a paused holder still believes
    // when the server hands the lock on.
    let params = Params {
        fraction: 2000,
        lease: 4,
        second: 4,
        horizon: 9,
        pauses: 1,
        ..small()
    };
    let outcome = check(&params);
    assert!(!outcome.holds(), "exclusion not broken: {outcome:?}");
}

#[test]
fn tokens_rise_across_a_restart_at_small_bounds() {
    let params = Params {
        lease: 4,
        second: 4,
        horizon: 8,
        restarts: 1,
        acquires: 2,
        ..small()
    };
    let outcome = check(&params);
    assert!(outcome.holds(), "{outcome:?}");
}
