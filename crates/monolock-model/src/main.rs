//! `monolock-model`: checks the protocol model exhaustively and searches
//! the margins.
//!
//! ```text
//! monolock-model                      # the small bounds, then the margins
//! monolock-model --lease 16 --horizon 48
//! ```

use std::time::Instant;

use clap::Parser;
use monolock_model::{Outcome, Params, Variant, check};

#[derive(Parser, Debug)]
#[command(version, about = "Exhaustive check of the monolock protocol model")]
struct Args {
    /// Lease, in ticks.
    #[arg(long, default_value_t = Params::small().lease)]
    lease: u32,
    /// Most ticks a message is in flight.
    #[arg(long, default_value_t = Params::small().max_delay)]
    max_delay: u32,
    /// Ticks explored.
    #[arg(long, default_value_t = Params::small().horizon)]
    horizon: u32,
    /// Pauses per client.
    #[arg(long, default_value_t = Params::small().pauses)]
    pauses: u8,
    /// Server restarts.
    #[arg(long, default_value_t = Params::small().restarts)]
    restarts: u8,
    /// Acquires per client.
    #[arg(long, default_value_t = Params::small().acquires)]
    acquires: u8,
}

fn run(label: &str, params: &Params) -> bool {
    let started = Instant::now();
    let outcome = check(params);
    let secs = started.elapsed().as_secs_f64();
    match &outcome {
        Outcome::Holds(stats) => println!(
            "{label}: holds ({} states, {} transitions, {secs:.1} s)",
            stats.states, stats.transitions
        ),
        Outcome::Broken { what, path, stats } => {
            println!(
                "{label}: BROKEN after {} states ({secs:.1} s): {what}",
                stats.states
            );
            let steps: Vec<String> = path.iter().map(ToString::to_string).collect();
            println!("  path: {}", steps.join(", "));
        }
    }
    outcome.holds()
}

fn main() {
    let args = Args::parse();
    let base = Params {
        lease: args.lease,
        max_delay: args.max_delay,
        horizon: args.horizon,
        pauses: args.pauses,
        restarts: args.restarts,
        acquires: args.acquires,
        second: args.lease,
        ..Params::small()
    };
    run("protocol as shipped (f = 0.8, no drift)", &base);
    for variant in [
        Variant::PushConfirmsHeartbeat,
        Variant::DeadlineFromReceive,
        Variant::PromoteExpiredWaiter,
    ] {
        run(&format!("{variant:?}"), &Params { variant, ..base });
    }
    // The largest abandon fraction for which exclusion holds without drift.
    let mut largest = None;
    for fraction in (500..=1200).step_by(1000 / base.lease as usize) {
        if run(
            &format!("fraction {fraction}/1000"),
            &Params { fraction, ..base },
        ) {
            largest = Some(fraction);
        } else {
            break;
        }
    }
    println!("largest safe abandon fraction: {largest:?} / 1000");
    let mut drift_ok = None;
    for drift in (0..=1000).step_by(50) {
        if run(
            &format!("drift {drift}/1000 at f = 0.8"),
            &Params { drift, ..base },
        ) {
            drift_ok = Some(drift);
        } else {
            break;
        }
    }
    println!("largest safe client clock drift at f = 0.8: {drift_ok:?} / 1000");
}
