//! The scenarios: one list, run for every client.
//!
//! A scenario starts its own server(s) and drivers, so that the clients'
//! runs are independent and can go side by side. Cross-language scenarios
//! mix the drivers of every client in the run on one server and one lock.
//! Every wait is bounded; nothing sleeps to synchronise (a scenario waits
//! for a reply, a log line or a state of the admin API).

mod leaks;
mod loss;
mod observers;
mod ordering;
mod queue;
mod sessions;
mod transport;
mod values;

use crate::{Check, Lab, clients::Prepared, driver::Driver};

/// What a scenario runs on.
pub enum Run {
    /// Once for each client, with that client's drivers alone.
    Each(fn(&Lab, &Prepared) -> Check),
    /// As `Each`, in a thread of its own beside the client's other
    /// scenarios: for a scenario that mostly waits on a bound (5 s), so
    /// that the wait costs no wall time of its own.
    Beside(fn(&Lab, &Prepared) -> Check),
    /// Once, with drivers of every client in the run mixed; reported on
    /// one line per client.
    Across(fn(&Lab, &[&Prepared]) -> Check),
}

/// A named scenario.
pub struct Scenario {
    /// The name printed on its lines.
    pub name: &'static str,
    /// What it runs.
    pub run: Run,
}

/// Every scenario, in the order they run.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "tokens_increase_across_clients",
        run: Run::Across(ordering::tokens_increase_across_clients),
    },
    Scenario {
        name: "fifo_five_waiters",
        run: Run::Across(ordering::fifo_five_waiters),
    },
    Scenario {
        name: "try_lock_leaves_no_trace",
        run: Run::Each(queue::try_lock_leaves_no_trace),
    },
    Scenario {
        name: "bounded_wait_not_acquired",
        run: Run::Each(queue::bounded_wait_not_acquired),
    },
    Scenario {
        name: "release_then_try_lock",
        run: Run::Each(queue::release_then_try_lock),
    },
    Scenario {
        name: "force_release_reaches_holder",
        run: Run::Each(loss::force_release_reaches_holder),
    },
    Scenario {
        name: "paused_server_is_held_false",
        run: Run::Each(loss::paused_server_is_held_false),
    },
    Scenario {
        name: "sigterm_gives_shutdown",
        run: Run::Each(loss::sigterm_gives_shutdown),
    },
    Scenario {
        name: "killed_server_gives_connection",
        run: Run::Each(loss::killed_server_gives_connection),
    },
    Scenario {
        name: "wrong_port_is_a_connect_error",
        run: Run::Each(transport::wrong_port_is_a_connect_error),
    },
    Scenario {
        name: "silent_port_is_a_temporary_connect_error",
        run: Run::Beside(transport::silent_port_is_a_temporary_connect_error),
    },
    Scenario {
        name: "many_locks_few_connections",
        run: Run::Each(sessions::many_locks_few_connections),
    },
    Scenario {
        name: "tls",
        run: Run::Each(transport::tls),
    },
    Scenario {
        name: "mtls",
        run: Run::Each(transport::mtls),
    },
    Scenario {
        name: "bad_input_rejected_before_connecting",
        run: Run::Each(transport::bad_input_rejected_before_connecting),
    },
    Scenario {
        name: "lease_bounds_refused_before_connecting",
        run: Run::Each(transport::lease_bounds_refused_before_connecting),
    },
    Scenario {
        name: "address_with_scheme_refused",
        run: Run::Each(transport::address_with_scheme_refused),
    },
    Scenario {
        name: "dead_address_named",
        run: Run::Each(transport::dead_address_named),
    },
    Scenario {
        name: "no_leak_after_1000_cycles",
        run: Run::Each(leaks::no_leak_after_1000_cycles),
    },
    Scenario {
        name: "value_shown_to_holder_lookups",
        run: Run::Across(values::value_shown_to_holder_lookups),
    },
    Scenario {
        name: "observers_see_every_hand_on_in_token_order",
        run: Run::Across(observers::observers_see_every_hand_on_in_token_order),
    },
    Scenario {
        name: "observer_sees_release_reasons",
        run: Run::Each(observers::observer_sees_release_reasons),
    },
    Scenario {
        name: "election_fails_over",
        run: Run::Each(observers::election_fails_over),
    },
    Scenario {
        name: "older_server_is_unsupported",
        run: Run::Each(values::older_server_is_unsupported),
    },
    Scenario {
        name: "value_too_long_refused_before_connecting",
        run: Run::Each(values::value_too_long_refused_before_connecting),
    },
    Scenario {
        name: "observer_bound_refused",
        run: Run::Each(observers::observer_bound_refused),
    },
];

/// Opens every driver on `address`.
fn open_all(drivers: &mut [Driver], address: &str) -> Check {
    drivers.iter_mut().try_for_each(|d| d.open(address))
}

/// Sends `exit` to every driver and requires each to exit 0 (all are
/// asked first, so that they wind down side by side).
fn exit_all(mut drivers: Vec<Driver>) -> Check {
    drivers.iter_mut().try_for_each(Driver::ask_exit)?;
    drivers.into_iter().try_for_each(Driver::exit)
}
