//! `monolock-model`: checks the protocol model exhaustively and searches
//! the margins.
//!
//! ```text
//! monolock-model                                  # shipped + the 3 mistakes
//! monolock-model --lease 16 --horizon 40 --margins
//! monolock-model --clients 3 --lease 12 --horizon 16 --only-shipped
//! ```

use std::process::ExitCode;
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
    /// Clients (2 or 3).
    #[arg(long, default_value_t = Params::small().clients, value_parser = clap::value_parser!(u8).range(1..=3))]
    clients: u8,
    /// Pauses per client.
    #[arg(long, default_value_t = Params::small().pauses)]
    pauses: u8,
    /// Server restarts.
    #[arg(long, default_value_t = Params::small().restarts)]
    restarts: u8,
    /// Uplinks that may stall for good (over all clients).
    #[arg(long, default_value_t = Params::small().stalls)]
    stalls: u8,
    /// Acquires per client.
    #[arg(long, default_value_t = Params::small().acquires)]
    acquires: u8,
    /// Abandon fraction, in thousandths of the lease.
    #[arg(long, default_value_t = Params::small().fraction)]
    fraction: u32,
    /// Client clock drift, in thousandths (its deadline falls this much later).
    #[arg(long, default_value_t = Params::small().drift)]
    drift: u32,
    /// Check only this known mistake (the variant's name).
    #[arg(long)]
    mistake: Option<String>,
    /// Check the protocol as shipped only (no mistakes, no margins).
    #[arg(long)]
    only_shipped: bool,
    /// Also search the largest safe abandon fraction (no drift) and the
    /// largest safe clock drift (at f = 0.8), by bisection in thousandths.
    #[arg(long)]
    margins: bool,
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

/// The largest value in `safe..=broken` for which `holds` is true, given
/// that it holds at `safe` and not at `broken`. Sound because a larger
/// fraction or drift only lengthens a belief: a path that breaks exclusion
/// at one value is a path at every larger value (the holder's abandon, the
/// only step the value moves, comes after the violation on it).
fn bisect(mut safe: u32, mut broken: u32, holds: impl Fn(u32) -> bool) -> u32 {
    while broken - safe > 1 {
        let mid = safe + (broken - safe) / 2;
        if holds(mid) {
            safe = mid;
        } else {
            broken = mid;
        }
    }
    safe
}

fn main() -> ExitCode {
    let args = Args::parse();
    let base = Params {
        lease: args.lease,
        max_delay: args.max_delay,
        horizon: args.horizon,
        clients: args.clients,
        pauses: args.pauses,
        restarts: args.restarts,
        stalls: args.stalls,
        fraction: args.fraction,
        drift: args.drift,
        acquires: args.acquires,
        second: args.lease,
        ..Params::small()
    };
    println!(
        "lease {} ticks (a tick is {:.1} % of the lease), heartbeat every {} to {} ticks, \
         delays up to {} ticks, {} clients, horizon {} ticks",
        base.lease,
        100.0 / f64::from(base.lease),
        base.floor(),
        base.base(),
        base.max_delay,
        base.clients,
        base.horizon
    );
    if let Some(name) = &args.mistake {
        let Some(variant) = Variant::ALL.into_iter().find(|v| format!("{v:?}") == *name) else {
            eprintln!(
                "monolock-model: --mistake: unknown {name:?} (one of {:?})",
                Variant::ALL
            );
            return ExitCode::from(64);
        };
        let holds = run(&format!("{variant:?}"), &Params { variant, ..base });
        return if holds {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        };
    }
    let shipped = run(
        &format!(
            "protocol (f = {}/1000, drift {}/1000: abandon after {} ticks)",
            base.fraction,
            base.drift,
            base.abandon_after()
        ),
        &base,
    );
    if args.only_shipped {
        return if shipped {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    for variant in Variant::ALL {
        run(&format!("{variant:?}"), &Params { variant, ..base });
    }
    if args.margins {
        let fraction = bisect(800, 2000, |fraction| {
            run(
                &format!("fraction {fraction}/1000"),
                &Params { fraction, ..base },
            )
        });
        println!(
            "largest safe abandon fraction, no drift: {fraction}/1000 \
             (abandon after {} ticks of a {}-tick lease)",
            Params { fraction, ..base }.abandon_after(),
            base.lease
        );
        let drift = bisect(0, 1000, |drift| {
            run(
                &format!("drift {drift}/1000 at f = 0.8"),
                &Params { drift, ..base },
            )
        });
        println!(
            "largest safe client clock drift at f = 0.8: {drift}/1000 \
             (abandon after {} ticks of a {}-tick lease)",
            Params { drift, ..base }.abandon_after(),
            base.lease
        );
    }
    if shipped {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
