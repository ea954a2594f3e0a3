//! What the example programs share on the command line: the lock server
//! flags and a `main` that ends in an exit code, never a panic.

use std::{future::Future, process::ExitCode, time::Duration};

use clap::Parser;

use crate::exit::{self, Failure};

/// The lock server and the lease, as `monolock exec` takes them.
#[derive(Debug, clap::Args)]
pub struct LockArgs {
    /// The monolock server.
    #[arg(long, env = "MONOLOCK_ADDRESS", default_value = "127.0.0.1:7070")]
    pub server: String,
    /// The lease: how long the server tolerates silence before it hands the
    /// lock on (a failure detector, not a limit on the work).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub lease: Duration,
}

/// Parses the command line and runs `run`: a refused command line exits 64
/// (`--help` and `--version` exit 0), a [`Failure`] prints one line
/// `PROGRAM: message` and exits with its code.
pub async fn main<A, F>(program: &str, run: impl FnOnce(A) -> F) -> ExitCode
where
    A: Parser,
    F: Future<Output = Result<(), Failure>>,
{
    match A::try_parse() {
        Ok(args) => exit::report(program, run(args).await),
        Err(err) => {
            let _ = err.print();
            if err.use_stderr() {
                ExitCode::from(exit::USAGE)
            } else {
                ExitCode::SUCCESS
            }
        }
    }
}
