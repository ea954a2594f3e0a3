//! `monolock`: the lock server and the tools around it.
// Denied rather than forbidden: `exec` signals a process group with kill(2).
#![deny(unsafe_code)]

mod admin_cli;
mod admin_client;
mod args;
mod events_cli;
mod exec;
mod manual;
mod observe_cli;
mod process;
mod render;
mod sentinel;
mod serve;
mod systemd;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// The version `--version` prints: the crate's, and the commit it was
/// built from.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("MONOLOCK_GIT_COMMIT"),
    ")"
);

/// A lock server for fleets: the TCP connection is the claim.
#[derive(Debug, Parser)]
#[command(
    name = "monolock",
    version = VERSION,
    about,
    propagate_version = true,
    arg_required_else_help = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the lock server.
    Serve(serve::ServeArgs),
    /// Run a command while holding a lock.
    Exec(exec::ExecArgs),
    #[command(flatten)]
    Admin(admin_cli::AdminCommand),
    /// Follow every change live, one line per event (the current locks first).
    Events(events_cli::EventsArgs),
    /// Print a lock's state and every change, one JSON line each.
    Observe(observe_cli::ObserveArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(manual::CompletionsArgs),
    /// Print a manual page (roff): monolock(1), or monolock-SUBCOMMAND(1).
    Man(manual::ManArgs),
    /// Guards a command's process group for `monolock exec` (internal).
    #[command(hide = true)]
    ExecSentinel(sentinel::SentinelArgs),
}

fn main() -> ExitCode {
    forget_empty_variables();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return args::exit_for_clap_error(&err, &Cli::command()),
    };
    match cli.command {
        Command::Serve(args) => serve::main(args),
        Command::Exec(args) => exec::main(args),
        Command::Admin(command) => admin_cli::main(command),
        Command::Events(args) => events_cli::main(args),
        Command::Observe(args) => observe_cli::main(args),
        Command::Completions(args) => manual::completions(args, Cli::command()),
        Command::Man(args) => manual::man(args, Cli::command()),
        Command::ExecSentinel(args) => sentinel::main(args),
    }
}

/// An empty `MONOLOCK_*` variable means "unset", for every flag of every
/// subcommand: a unit file or CI job that blanks a variable gets the
/// default, not a parse error. (clap would take the empty string as the
/// value.)
#[allow(unsafe_code)]
fn forget_empty_variables() {
    let empty: Vec<_> = std::env::vars_os()
        .filter(|(name, value)| {
            value.is_empty() && name.to_str().is_some_and(|n| n.starts_with("MONOLOCK_"))
        })
        .map(|(name, _)| name)
        .collect();
    for name in empty {
        // SAFETY: called first thing in main, before any other thread
        // exists (the runtimes start later), so nothing reads the
        // environment concurrently.
        unsafe { std::env::remove_var(name) };
    }
}
