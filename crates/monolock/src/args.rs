//! Parsing helpers shared by the subcommands.

use std::{net::SocketAddr, process::ExitCode, time::Duration};

/// Exit status for a bad flag, value or combination (as sysexits' EX_USAGE).
pub const EXIT_USAGE: u8 = 64;

/// The longest duration any flag accepts. Far beyond any useful lease,
/// wait or timeout, and far below what `Instant + Duration` can hold, so
/// no deadline computed from a flag can overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

/// Parses `250ms`, `5s`, `1m`, `1h30m`; zero is refused, and so is
/// anything above [`MAX_DURATION`].
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = parse_bounded_duration(text)?;
    if duration.is_zero() {
        return Err("must be greater than zero".to_owned());
    }
    Ok(duration)
}

/// Like [`parse_duration`], but zero is allowed (`--wait 0`: try once).
pub fn parse_duration_or_zero(text: &str) -> Result<Duration, String> {
    parse_bounded_duration(text)
}

fn parse_bounded_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text)
        .map_err(|err| format!("{err} (expected e.g. 250ms, 5s, 1m)"))?;
    if duration > MAX_DURATION {
        return Err(format!(
            "{text} is too long: at most {}",
            humantime::format_duration(MAX_DURATION)
        ));
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

/// Prints a clap error in full (help and version go to stdout) and picks
/// the exit status: 0 for help and version, [`EXIT_USAGE`] otherwise (a
/// missing subcommand included: the help is printed, on stderr).
pub fn exit_for_clap_error(err: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let _ = err.print();
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ExitCode::SUCCESS,
        _ => ExitCode::from(EXIT_USAGE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_bounded() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert!(parse_duration("0s").is_err());
        assert_eq!(parse_duration_or_zero("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("366d"), Ok(MAX_DURATION));
        let err = parse_duration("580000000000y").unwrap_err();
        assert!(err.contains("too long"), "{err}");
        assert!(parse_duration("367d").unwrap_err().contains("at most"));
        assert!(parse_duration("soon").is_err());
    }
}
