//! `monolock completions SHELL` and `monolock man [SUBCOMMAND]`: shell
//! completions and roff manual pages generated from the same flag
//! definitions the parser uses, so they cannot drift from `--help`.

use std::{
    io::{self, Write},
    process::ExitCode,
};

use clap::{Args, Command};
use clap_complete::Shell;

use crate::args::EXIT_USAGE;

/// Flags of `monolock completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: Shell,
}

/// Flags of `monolock man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// A subcommand's page (e.g. `exec` for monolock-exec(1)); default:
    /// monolock(1).
    #[arg(value_name = "SUBCOMMAND")]
    subcommand: Option<String>,
}

/// Prints the completion script on stdout, e.g.
/// `monolock completions bash > /etc/bash_completion.d/monolock`.
pub fn completions(args: CompletionsArgs, command: Command) -> ExitCode {
    // The generators list hidden subcommands too: complete from a copy
    // that has only the visible ones.
    let visible: Vec<Command> = command
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set())
        .cloned()
        .collect();
    let mut command = Command::new("monolock")
        .version(crate::VERSION)
        .propagate_version(true)
        .subcommands(visible);
    // Rendered into memory first: the generator panics on a failed write
    // (a closed pipe), and a closed pipe is not worth a panic.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "monolock", &mut script);
    match io::stdout().lock().write_all(&script) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if err.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("monolock completions: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Prints a manual page (roff) on stdout, e.g.
/// `monolock man exec > /usr/share/man/man1/monolock-exec.1`.
pub fn man(args: ManArgs, command: Command) -> ExitCode {
    // `monolock help` is clap's: it has no page of its own to point at.
    let command = command.disable_help_subcommand(true);
    let source = format!("monolock {}", command.get_version().unwrap_or_default());
    let page = match &args.subcommand {
        None => clap_mangen::Man::new(command),
        Some(name) => {
            let Some(sub) = command
                .find_subcommand(name)
                .filter(|sub| !sub.is_hide_set())
            else {
                eprintln!("monolock man: no subcommand {name:?} (see monolock --help)");
                return ExitCode::from(EXIT_USAGE);
            };
            // The page is named for the command line that runs it.
            let title = format!("monolock-{}", sub.get_name());
            clap_mangen::Man::new(sub.clone()).title(title)
        }
    };
    match page.source(source).render(&mut io::stdout()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("monolock man: {err}");
            ExitCode::FAILURE
        }
    }
}
