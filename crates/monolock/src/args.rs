//! Parsing helpers shared by the subcommands.

use std::{net::SocketAddr, process::ExitCode, time::Duration};

/// Exit status for a bad flag, value or combination (as sysexits' EX_USAGE).
pub const EXIT_USAGE: u8 = 64;

/// Parses `250ms`, `5s`, `1m`, `1h30m`; zero is refused.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text)
        .map_err(|err| format!("{err} (expected e.g. 250ms, 5s, 1m)"))?;
    if duration.is_zero() {
        return Err("must be greater than zero".to_owned());
    }
    Ok(duration)
}

/// Parses `IP:PORT`, `[IPv6]:PORT` or `:PORT` (every IPv4 interface).
pub fn parse_socket_addr(text: &str) -> Result<SocketAddr, String> {
    let full = if text.starts_with(':') {
        format!("0.0.0.0{text}")
    } else {
        text.to_owned()
    };
    full.parse()
        .map_err(|_| "expected IP:PORT, [IPv6]:PORT or :PORT".to_owned())
}

/// Prints a clap error as one line (help and version print in full) and
/// picks the exit status.
pub fn exit_for_clap_error(err: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match err.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = err.print();
            ExitCode::SUCCESS
        }
        _ => {
            let rendered = err.to_string();
            let line = rendered.lines().next().unwrap_or("invalid arguments");
            eprintln!("monolock: {}", line.trim_start_matches("error: "));
            ExitCode::from(EXIT_USAGE)
        }
    }
}
