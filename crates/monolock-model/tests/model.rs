//! The model's exhaustive check at the small bounds CI affords.

use monolock_model::{Params, Variant, check};

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

/// Lease 8 ticks (a tick is 12.5 % of the lease: the heartbeat interval,
/// 1 to 2 ticks, is wider than the 20 % margin), one pause, one stalled
/// uplink.
fn client_mistakes() -> Params {
    Params {
        lease: 8,
        second: 8,
        horizon: 8,
        pauses: 1,
        stalls: 1,
        restarts: 0,
        acquires: 1,
        ..Params::small()
    }
}

/// The checker finds a counterexample with `variant` and none without it.
fn caught_and_safe_without(params: Params, variant: Variant) {
    let outcome = check(&Params { variant, ..params });
    assert!(!outcome.holds(), "{variant:?} not found: {outcome:?}");
    let outcome = check(&params);
    assert!(outcome.holds(), "{outcome:?}");
}

#[test]
fn a_deadline_from_the_receive_instant_is_caught_and_the_send_instant_is_safe() {
    caught_and_safe_without(client_mistakes(), Variant::DeadlineFromReceive);
}

#[test]
fn a_push_counted_as_a_heartbeat_confirmation_is_caught_and_not_counting_it_is_safe() {
    // The holder comes back for a second turn, queued behind the pushed
    // waiter whose uplink stalled with a heartbeat in flight.
    let params = Params {
        horizon: 9,
        acquires: 2,
        ..client_mistakes()
    };
    caught_and_safe_without(params, Variant::PushConfirmsHeartbeat);
}

#[test]
fn a_promoted_expired_waiter_is_caught() {
    let params = Params {
        pauses: 1,
        ..small()
    };
    let outcome = check(&Params {
        variant: Variant::PromoteExpiredWaiter,
        ..params
    });
    assert!(!outcome.holds(), "mistake not found: {outcome:?}");
}

#[test]
fn three_clients_keep_exclusion_at_small_bounds() {
    let params = Params {
        lease: 4,
        second: 4,
        horizon: 7,
        clients: 3,
        pauses: 0,
        ..small()
    };
    let outcome = check(&params);
    assert!(outcome.holds(), "{outcome:?}");
}

/// A version 1 holder whose reader stalls while it goes on heartbeating:
/// the server's replies pile up, and io-timeout may end its connection.
/// Long enough for the lock the server keeps to be handed on at the
/// holder's last frame plus its lease, and for the waiter to hold after.
fn reader_stall() -> Params {
    Params {
        lease: 5,
        second: 5,
        horizon: 11,
        pauses: 0,
        restarts: 0,
        acquires: 1,
        ..Params::small().with_reader_stall()
    }
}

#[test]
fn a_v1_reader_that_stalls_keeps_exclusion_and_its_lock_until_its_lease_ends() {
    let outcome = check(&reader_stall());
    assert!(outcome.holds(), "{outcome:?}");
}

#[test]
fn a_v1_lock_handed_on_at_io_timeout_is_caught() {
    match check(&Params {
        variant: Variant::HandOnAtIoTimeout,
        ..reader_stall()
    }) {
        monolock_model::Outcome::Broken { what, path, .. } => {
            assert!(!path.is_empty());
            assert!(what.contains("believe they hold"), "{what}");
        }
        outcome => panic!("HandOnAtIoTimeout not found: {outcome:?}"),
    }
}
