//! `monolock`: the lock server and the tools around it.
// Denied rather than forbidden: `exec` signals a process group with kill(2).
#![deny(unsafe_code)]

mod admin_cli;
mod args;
mod exec;
mod serve;
mod systemd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// A lock server for fleets: the TCP connection is the claim.
#[derive(Debug, Parser)]
#[command(
    name = "monolock",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("MONOLOCK_GIT_COMMIT"), ")"),
    about,
    propagate_version = true
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
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return args::exit_for_clap_error(&err),
    };
    match cli.command {
        Command::Serve(args) => serve::main(args),
        Command::Exec(args) => exec::main(args),
        Command::Admin(command) => admin_cli::main(command),
    }
}
