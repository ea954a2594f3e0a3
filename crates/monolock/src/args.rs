//! Parsing helpers shared by the subcommands.

use std::{net::SocketAddr, process::ExitCode, time::Duration};

/// Exit status for a bad flag, value or combination (as sysexits' EX_USAGE).
pub const EXIT_USAGE: u8 = 64;

/// The longest duration any flag accepts. Far beyond any useful lease,
/// wait or timeout, and far below what `Instant + Duration` can hold, so
/// no deadline computed from a flag can overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(MAX_DURATION_DAYS * 24 * 3600);

const MAX_DURATION_DAYS: u64 = 366;

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
    if text.trim_start().starts_with('-') {
        return Err(format!(
            "{text} is negative: durations cannot be negative (expected e.g. 0, 250ms, 5s, 1m)"
        ));
    }
    let duration = humantime::parse_duration(text)
        .map_err(|err| format!("{err} (expected e.g. 250ms, 5s, 1m)"))?;
    if duration > MAX_DURATION {
        return Err(format!(
            "{text} is too long: at most {MAX_DURATION_DAYS} days"
        ));
    }
    Ok(duration)
}

/// Parses an on/off switch given by an environment variable: `1`/`0`,
/// `true`/`false`, `yes`/`no`, `on`/`off`, in any case.
pub fn parse_switch(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err("expected 1 or 0, true or false, yes or no, on or off".to_owned()),
    }
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

/// Prints a clap error and picks the exit status: 0 for help and version
/// (printed in full), [`EXIT_USAGE`] otherwise. A missing subcommand
/// prints the help, on stderr. Every other error is one line on stderr
/// holding all of clap's message but the usage block: what is wrong,
/// which arguments are missing, and clap's tips (such as using `--`). The
/// line starts with the subcommand (`monolock exec:`), and a bad value
/// that came from an environment variable names the variable.
pub fn exit_for_clap_error(err: &clap::Error, command: &clap::Command) -> ExitCode {
    use clap::error::ErrorKind;
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = err.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = err.print();
            ExitCode::from(EXIT_USAGE)
        }
        _ => {
            let argv: Vec<String> = std::env::args_os()
                .skip(1)
                .map(|arg| arg.to_string_lossy().into_owned())
                .collect();
            let sub = argv
                .iter()
                .find(|arg| !arg.starts_with('-'))
                .and_then(|name| command.find_subcommand(name));
            let mut line = one_line(&err.to_string());
            if let Some((shown, variable)) = sub.and_then(|sub| from_variable(err, sub, &argv)) {
                line = line.replacen(&format!("'{shown}'"), &variable, 1);
            }
            match sub {
                Some(sub) => eprintln!("monolock {}: {line}", sub.get_name()),
                None => eprintln!("monolock: {line}"),
            }
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// For a bad value that came from an environment variable (its flag is
/// not on the command line): the argument as clap shows it, and
/// `$VARIABLE (--flag)` to show instead.
fn from_variable(
    err: &clap::Error,
    sub: &clap::Command,
    argv: &[String],
) -> Option<(String, String)> {
    use clap::error::{ContextKind, ContextValue};
    let Some(ContextValue::String(shown)) = err.get(ContextKind::InvalidArg) else {
        return None;
    };
    let long = shown.strip_prefix("--")?.split([' ', '=']).next()?;
    let arg = sub
        .get_arguments()
        .find(|arg| arg.get_long() == Some(long))?;
    let variable = arg.get_env()?.to_str()?;
    let flag = format!("--{long}");
    let on_command_line = argv.iter().any(|word| {
        word == &flag
            || word.starts_with(&format!("{flag}="))
            || arg.get_short().is_some_and(|short| {
                word.starts_with('-') && !word.starts_with("--") && word.contains(short)
            })
    });
    if on_command_line || std::env::var_os(variable).is_none() {
        return None;
    }
    Some((shown.clone(), format!("${variable} ({flag})")))
}

/// clap's rendered error as one line: its lines joined, the usage block
/// and the "For more information" trailer left out (the line ends by
/// pointing at `--help` instead).
fn one_line(rendered: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for line in rendered.lines().map(str::trim) {
        if line.starts_with("Usage:") {
            break;
        }
        if line.is_empty() || line.starts_with("For more information") {
            continue;
        }
        parts.push(line.strip_prefix("error: ").unwrap_or(line));
    }
    let mut text = parts.join(" ");
    if text.is_empty() {
        text.push_str("invalid arguments");
    }
    text.push_str(" (see --help)");
    text
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
        let negative = parse_duration_or_zero("-1s").unwrap_err();
        assert!(negative.contains("cannot be negative"), "{negative}");
    }

    #[test]
    fn switches_take_the_usual_spellings() {
        for on in ["1", "true", "TRUE", "yes", "Yes", "on", "ON"] {
            assert_eq!(parse_switch(on), Ok(true), "{on}");
        }
        for off in ["0", "false", "False", "no", "NO", "off", "Off"] {
            assert_eq!(parse_switch(off), Ok(false), "{off}");
        }
        assert!(parse_switch("maybe").unwrap_err().contains("yes or no"));
    }

    #[test]
    fn clap_errors_keep_everything_but_the_usage_on_one_line() {
        let missing = "error: the following required arguments were not provided:\n  <NAME>\n\nUsage: monolock exec [OPTIONS] <NAME>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line(missing),
            "the following required arguments were not provided: <NAME> (see --help)"
        );
        let tip = "error: unexpected argument '-x' found\n\n  tip: to pass '-x' as a value, use '-- -x'\n\nUsage: monolock exec\n";
        assert_eq!(
            one_line(tip),
            "unexpected argument '-x' found tip: to pass '-x' as a value, use '-- -x' (see --help)"
        );
    }
}
