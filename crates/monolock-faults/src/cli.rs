//! What the two runners (`monolock-faults` and `monolock-peer-faults`)
//! share around their scenarios: the seeded random choices, the runtime
//! and the exit status.

use std::process::ExitCode;

use rand::{Rng, SeedableRng, rngs::StdRng};
use tokio::runtime::Runtime;

/// The exit status of a run: 0 when it passed, 1 when it found a problem
/// (`Ok(false)`), 2 with the error on stderr, as `program: error`, when it
/// could not run.
pub fn exit_status(program: &str, outcome: anyhow::Result<bool>) -> ExitCode {
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("{program}: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// The seed of the random choices (`seed`, or a random one; printed
/// either way, so a run can be repeated), their generator, and the
/// two-thread runtime the scenarios run on.
///
/// # Errors
/// The runtime cannot be built.
pub fn seeded_runtime(seed: Option<u64>) -> anyhow::Result<(u64, StdRng, Runtime)> {
    let seed = seed.unwrap_or_else(|| rand::rng().random());
    println!("seed {seed}");
    let rng = StdRng::seed_from_u64(seed);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    Ok((seed, rng, runtime))
}
