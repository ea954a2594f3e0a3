//! The model of protocol version 2 (sessions carrying many claims), checked
//! exhaustively at the small bounds CI affords.

use monolock_model::{Outcome, Params, Variant, check};

/// Two sessions on one lock, lease 4 ticks, messages read within the tick
/// they are written, horizon 5 ticks; two claims in use and two ACQUIREs
/// per session, one administrator act, one close, one stalled uplink.
fn small() -> Params {
    Params::sessions()
}

/// The checker finds a counterexample with `variant`; the protocol as
/// shipped holds at the same bounds
/// (`the_v2_protocol_as_shipped_holds_at_small_bounds`).
fn caught(variant: Variant) -> String {
    match check(&Params { variant, ..small() }) {
        Outcome::Broken { what, path, .. } => {
            assert!(!path.is_empty(), "{variant:?}: empty counterexample");
            what
        }
        outcome => panic!("{variant:?} not found: {outcome:?}"),
    }
}

#[test]
fn the_v2_protocol_as_shipped_holds_at_small_bounds() {
    let outcome = check(&small());
    assert!(outcome.holds(), "{outcome:?}");
}

#[test]
fn released_written_before_the_table_hands_on_is_caught() {
    let what = caught(Variant::ReleasedBeforeHandOn);
    assert!(what.contains("RELEASED read while the table"), "{what}");
}

#[test]
fn a_waiting_claim_outliving_its_session_is_caught() {
    let what = caught(Variant::ClaimOutlivesSession);
    assert!(what.contains("after its session ended"), "{what}");
}

#[test]
fn a_granted_push_counted_as_the_ping_reply_is_caught() {
    // The waiter's uplink stalls with a PING in flight; the GRANTED moves
    // its deadline past its lease, and the lock goes on to the other
    // session's second claim while it still believes.
    let what = caught(Variant::GrantedConfirmsPing);
    assert!(what.contains("believe they hold"), "{what}");
}

#[test]
fn a_granted_read_after_writing_release_is_not_a_hold() {
    // A RELEASE crosses the GRANTED: believing the push hands the lock to
    // two sessions at once.
    let what = caught(Variant::GrantedAfterRelease);
    assert!(what.contains("believe they hold"), "{what}");
}

#[test]
fn two_locks_keep_exclusion_at_small_bounds() {
    let params = Params {
        locks: 2,
        revokes: 0,
        closes: 0,
        stalls: 0,
        ..small()
    };
    let outcome = check(&params);
    assert!(outcome.holds(), "{outcome:?}");
}

#[test]
fn messages_in_flight_across_ticks_keep_exclusion_at_small_bounds() {
    let params = Params {
        max_delay: 1,
        horizon: 3,
        revokes: 0,
        closes: 0,
        stalls: 0,
        ..small()
    };
    let outcome = check(&params);
    assert!(outcome.holds(), "{outcome:?}");
}

/// One session's reader may stall for good while its writer goes on; the
/// server may then end the session at io-timeout. Its held claims stay held
/// until its last frame plus its lease.
fn reader_stall() -> Params {
    small().with_reader_stall()
}

#[test]
fn a_reader_that_stalls_keeps_exclusion_at_small_bounds() {
    let outcome = check(&reader_stall());
    assert!(outcome.holds(), "{outcome:?}");
}

#[test]
fn a_lock_kept_after_io_timeout_is_handed_on_at_the_lease_end_safely() {
    // Long enough for the hand-on at the ended session's last frame plus
    // its lease (an io-timeout at tick 3 hands on at tick 6), and for the
    // waiter to hold after it.
    let params = Params {
        horizon: 8,
        claims: 1,
        acquires: 1,
        ..reader_stall()
    };
    let outcome = check(&params);
    assert!(outcome.holds(), "{outcome:?}");
}

#[test]
fn handing_on_at_io_timeout_is_caught() {
    // The holder's reader stalls; its last confirmed frame keeps it
    // believing past the io-timeout, and the waiter is granted then.
    match check(&Params {
        variant: Variant::HandOnAtIoTimeout,
        ..reader_stall()
    }) {
        Outcome::Broken { what, path, .. } => {
            assert!(!path.is_empty());
            assert!(what.contains("believe they hold"), "{what}");
        }
        outcome => panic!("HandOnAtIoTimeout not found: {outcome:?}"),
    }
}

/// An observer of lock `A` (a session of its own with one watch) whose
/// outbox holds one push, read at any pace: every grant and release of
/// `A` is pushed in the table's order, a change that finds the outbox full
/// marks the watch, and the connection takes the state then, coalesced.
fn observed() -> Params {
    small().with_observer()
}

#[test]
fn an_observer_is_never_told_an_older_holder_after_a_newer_one_at_small_bounds() {
    let outcome = check(&observed());
    assert!(outcome.holds(), "{outcome:?}");
}

#[test]
fn a_coalesced_push_that_goes_back_is_caught() {
    // The release of the first holder finds the outbox full and marks the
    // watch; the grant to the next holder is queued and taken first, and
    // the coalesced state as of the marking (free, the first token) is
    // read after it.
    match check(&Params {
        variant: Variant::CoalescedPushGoesBack,
        ..observed()
    }) {
        Outcome::Broken { what, path, .. } => {
            assert!(!path.is_empty());
            assert!(what.contains("below the last one of its watch"), "{what}");
        }
        outcome => panic!("CoalescedPushGoesBack not found: {outcome:?}"),
    }
}
