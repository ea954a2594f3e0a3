//! `monolock-model`: checks the protocol model exhaustively and searches
//! the margins.
//!
//! ```text
//! monolock-model                                  # shipped + the 3 mistakes
//! monolock-model --lease 16 --horizon 40 --margins
//! monolock-model --clients 3 --lease 12 --horizon 16 --only-shipped
//! monolock-model --protocol 2                     # v2: shipped + its 4 mistakes
//! monolock-model --protocol 2 --mistake GrantedConfirmsPing \
//!     --export-vector clients/conformance/vectors  # its counterexample as a vector
//! ```

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use monolock_model::{Outcome, Params, Step, Variant, check};

/// Writes the counterexample of `params` (a client mistake) as a vector.
fn export_vector(params: &Params, lease_ms: u32, dir: &std::path::Path) -> ExitCode {
    match monolock_model::export_vector(params, lease_ms) {
        Ok((name, text)) => {
            let path = dir.join(format!("{name}.json"));
            match std::fs::write(&path, text) {
                Ok(()) => {
                    println!("wrote {}", path.display());
                    ExitCode::SUCCESS
                }
                Err(err) => {
                    eprintln!("monolock-model: {}: {err}", path.display());
                    ExitCode::FAILURE
                }
            }
        }
        Err(err) => {
            eprintln!("monolock-model: --export-vector: {err}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Exhaustive check of the monolock protocol model",
    after_help = "Protocol version 2 (--protocol 2): sessions carrying many claims. \
--clients is then the number of sessions, --acquires the ACQUIREs each session \
may write, --claims the claims it may have in use at once, --locks the locks \
they choose from; --revokes and --closes bound the administrator's acts and the \
closes of sessions with claims in use. The defaults change with the protocol \
(shown as v1 / v2). Its mistakes: ReleasedBeforeHandOn, ClaimOutlivesSession, \
GrantedConfirmsPing, GrantedAfterRelease. Restarts are modelled for version 1 only.\n\n\
  monolock-model --protocol 2                      # shipped + the 4 v2 mistakes, CI bounds\n\
  monolock-model --protocol 2 --only-shipped --lease 8 --horizon 10\n\
  monolock-model --protocol 2 --mistake GrantedConfirmsPing"
)]
struct Args {
    /// The protocol version modelled: 1 (a connection is a claim) or 2
    /// (sessions carrying many claims).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    protocol: u8,
    /// Lease, in ticks [default: 5 / 4].
    #[arg(long)]
    lease: Option<u32>,
    /// Most ticks a message is in flight [default: 1 / 0].
    #[arg(long)]
    max_delay: Option<u32>,
    /// Ticks explored [default: 10 / 5].
    #[arg(long)]
    horizon: Option<u32>,
    /// Clients (v2: sessions), 1 to 3 [default: 2].
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=3))]
    clients: Option<u8>,
    /// Pauses per client [default: 1 / 0].
    #[arg(long)]
    pauses: Option<u8>,
    /// Server restarts (v1 only) [default: 0].
    #[arg(long)]
    restarts: Option<u8>,
    /// Uplinks that may stall for good (over all clients) [default: 0 / 1].
    #[arg(long)]
    stalls: Option<u8>,
    /// Acquires per client (v2: ACQUIRE frames per session) [default: 1 / 2].
    #[arg(long)]
    acquires: Option<u8>,
    /// v2: claims a session may have in use at once, 1 or 2 [default: 2].
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=2))]
    claims: Option<u8>,
    /// v2: locks, 1 or 2 [default: 1].
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=2))]
    locks: Option<u8>,
    /// v2: administrator acts, force-release or kick of one claim (over all
    /// sessions) [default: 1].
    #[arg(long)]
    revokes: Option<u8>,
    /// v2: closes of a session with claims in use (over all sessions)
    /// [default: 1].
    #[arg(long)]
    closes: Option<u8>,
    /// Readers that may stall for good while their writer goes on (over
    /// all sessions); the server may end such a session at io-timeout
    /// [default: 0; the reader-stall runs use 1].
    #[arg(long)]
    read_stalls: Option<u8>,
    /// io-timeout, in ticks [default: 1].
    #[arg(long)]
    io_timeout: Option<u32>,
    /// v2: observers of lock A (0 or 1), each a session with one watch
    /// [default: 0; the observer runs use 1].
    #[arg(long)]
    observers: Option<u8>,
    /// v2: STATE pushes the server keeps queued for an observer before it
    /// coalesces [default: 1].
    #[arg(long)]
    outbox: Option<u8>,
    /// Abandon fraction, in thousandths of the lease [default: 800].
    #[arg(long)]
    fraction: Option<u32>,
    /// Client clock drift, in thousandths (its deadline falls this much
    /// later) [default: 0].
    #[arg(long)]
    drift: Option<u32>,
    /// Check only this known mistake (the variant's name).
    #[arg(long)]
    mistake: Option<String>,
    /// With --mistake (a client's): write its counterexample as a protocol
    /// vector into this directory (clients/conformance/vectors).
    #[arg(long, value_name = "DIR", requires = "mistake")]
    export_vector: Option<std::path::PathBuf>,
    /// The lease of an exported vector, in milliseconds (100 ms to 1 h, a
    /// multiple of 20 and of the model's lease).
    #[arg(long, default_value_t = 2000)]
    vector_lease_ms: u32,
    /// Check the protocol as shipped only (no mistakes, no margins).
    #[arg(long)]
    only_shipped: bool,
    /// Also search the largest safe abandon fraction (no drift) and the
    /// largest safe clock drift (at f = 0.8), by bisection in thousandths.
    #[arg(long)]
    margins: bool,
}

impl Args {
    /// The preset of the protocol, with the flags given.
    fn params(&self) -> Params {
        let preset = if self.protocol == 2 {
            Params::sessions()
        } else {
            Params::small()
        };
        let lease = self.lease.unwrap_or(preset.lease);
        Params {
            lease,
            second: lease,
            max_delay: self.max_delay.unwrap_or(preset.max_delay),
            horizon: self.horizon.unwrap_or(preset.horizon),
            clients: self.clients.unwrap_or(preset.clients),
            pauses: self.pauses.unwrap_or(preset.pauses),
            restarts: self.restarts.unwrap_or(preset.restarts),
            stalls: self.stalls.unwrap_or(preset.stalls),
            acquires: self.acquires.unwrap_or(preset.acquires),
            claims: self.claims.unwrap_or(preset.claims),
            locks: self.locks.unwrap_or(preset.locks),
            revokes: self.revokes.unwrap_or(preset.revokes),
            closes: self.closes.unwrap_or(preset.closes),
            read_stalls: self.read_stalls.unwrap_or(preset.read_stalls),
            io_timeout: self.io_timeout.unwrap_or(preset.io_timeout),
            observers: self.observers.unwrap_or(preset.observers),
            outbox: self.outbox.unwrap_or(preset.outbox),
            fraction: self.fraction.unwrap_or(preset.fraction),
            drift: self.drift.unwrap_or(preset.drift),
            ..preset
        }
    }
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
            // One line a tick: its steps in order.
            let mut tick = 0;
            let mut line: Vec<String> = Vec::new();
            for step in path {
                if matches!(step, Step::Tick) {
                    println!("  t={tick}: {}", line.join("; "));
                    line.clear();
                    tick += 1;
                } else {
                    line.push(step.to_string());
                }
            }
            println!("  t={tick}: {}", line.join("; "));
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
    if args.protocol == 2 && args.restarts.is_some_and(|r| r > 0) {
        eprintln!(
            "monolock-model: --restarts: the version 2 model has no restarts \
             (tokens across restarts are checked with --protocol 1); drop the flag"
        );
        return ExitCode::from(64);
    }
    let base = args.params();
    println!(
        "lease {} ticks (a tick is {:.1} % of the lease), heartbeat every {} to {} ticks, \
         delays up to {} ticks, {} clients, horizon {} ticks{}",
        base.lease,
        100.0 / f64::from(base.lease),
        base.floor(),
        base.base(),
        base.max_delay,
        base.clients,
        base.horizon,
        if base.protocol == 2 {
            format!(
                "; protocol 2: {} claims in use and {} ACQUIREs per session, {} lock(s), \
                 {} revoke(s), {} close(s), {} stall(s), {} reader stall(s) \
                 (io-timeout {} ticks), {} pause(s) each, {} observer(s) (outbox {})",
                base.claims,
                base.acquires,
                base.locks,
                base.revokes,
                base.closes,
                base.stalls,
                base.read_stalls,
                base.io_timeout,
                base.pauses,
                base.observers,
                base.outbox
            )
        } else {
            String::new()
        }
    );
    // A reader that stalls while its writer goes on, and a server ending
    // that session at io-timeout, at the bounds CI affords.
    let reader_stall = base.with_reader_stall();
    if let Some(name) = &args.mistake {
        let mistakes = Variant::mistakes(base.protocol);
        let Some(&variant) = mistakes.iter().find(|v| format!("{v:?}") == *name) else {
            eprintln!(
                "monolock-model: --mistake: unknown {name:?} for protocol {} (one of {mistakes:?})",
                base.protocol
            );
            return ExitCode::from(64);
        };
        let (label, bounds) = if variant.needs_reader_stall() && base.read_stalls == 0 {
            (format!("{variant:?} (a reader stalls)"), reader_stall)
        } else if variant.needs_observer() && base.observers == 0 {
            (format!("{variant:?} (an observer)"), base.with_observer())
        } else {
            (format!("{variant:?}"), base)
        };
        if let Some(dir) = &args.export_vector {
            return export_vector(&Params { variant, ..bounds }, args.vector_lease_ms, dir);
        }
        let holds = run(&label, &Params { variant, ..bounds });
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
    let stalled_shipped = base.read_stalls > 0
        || run(
            "protocol, a reader stalls (no revoke, close or uplink stall)",
            &reader_stall,
        );
    let observed_shipped = base.protocol != 2
        || base.observers > 0
        || run(
            "protocol, an observer of A (no revoke, close or uplink stall)",
            &base.with_observer(),
        );
    let shipped = shipped && stalled_shipped && observed_shipped;
    if args.only_shipped {
        return if shipped {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    for &variant in Variant::mistakes(base.protocol) {
        if variant.needs_reader_stall() && base.read_stalls == 0 {
            run(
                &format!("{variant:?} (a reader stalls)"),
                &Params {
                    variant,
                    ..reader_stall
                },
            );
        } else if variant.needs_observer() && base.observers == 0 {
            run(
                &format!("{variant:?} (an observer)"),
                &Params {
                    variant,
                    ..base.with_observer()
                },
            );
        } else {
            run(&format!("{variant:?}"), &Params { variant, ..base });
        }
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
