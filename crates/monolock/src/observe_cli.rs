//! `monolock observe NAME`: one JSON line per state of a lock, for scripts
//! and `jq` (a follower reading its leader's address, say). The first line
//! is the state when the server registered the watch (`"initial": true`),
//! then one line per change, in token order, each flushed as it is
//! written. `--once` asks once (a lookup) and prints one line.

use std::{
    io::{self, Write},
    path::PathBuf,
    process::ExitCode,
};

use clap::Args;
use monolock_client::{Client, Connector, Error, LockState};
use serde_json::json;
use tokio::signal::unix::{SignalKind, signal};

use crate::{
    args::EXIT_USAGE,
    exec::{DEFAULT_SERVER, EXIT_UNAVAILABLE, parse_servers, tls_connector_from},
    render::chain,
};

const AFTER_HELP: &str = "\
Each line is one JSON object:
  {\"event\":\"granted\",\"held\":true,\"token\":\"1883284866859008\",\"value\":\"10.0.0.7:9000\",
   \"initial\":false,\"coalesced\":false,\"reason\":null,\"since_ms\":1796300000000}
event is free, held (states: the first line, a coalesced line, --once), granted,
value (the holder replaced its value) or released (reason: released, expired,
forced or ended_by_server). token is a decimal string; value is \"\" when the
lock is free; since_ms is the server's wall clock of the grant or the release
(0 if unknown). A line with \"coalesced\": true follows a stretch of changes this
reader was too slow to be told one by one: it is the state now.

What it names is advisory: the holder may already have lost the lock. Use the
value to find the holder, and fence every write with the token.

Exit status:
  0    SIGINT or SIGTERM (or --once answered, or stdout closed)
  64   usage or client error (bad flag or name, a server without observers)
  69   the server could not be reached, or the observation ended (one line on
       stderr says why)";

/// Flags of `monolock observe`.
#[derive(Debug, Args)]
#[command(
    about = "Print a lock's state and every change, one JSON line each",
    after_help = AFTER_HELP
)]
pub struct ObserveArgs {
    /// Server address, or several separated by commas (tried in order).
    #[arg(long, env = "MONOLOCK_ADDRESS", default_value = DEFAULT_SERVER, value_parser = parse_servers, value_name = "ADDR[,ADDR...]")]
    server: String,

    /// Ask once who holds the lock, print one line and exit.
    #[arg(long)]
    once: bool,

    /// Speak TLS, trusting the CA certificates in this PEM file.
    #[arg(long, env = "MONOLOCK_TLS_CA", value_name = "FILE")]
    tls_ca: Option<PathBuf>,

    /// Client certificate chain (PEM, leaf first) for mTLS; needs --tls-key
    /// and --tls-ca.
    #[arg(long, env = "MONOLOCK_TLS_CERT", value_name = "FILE")]
    tls_cert: Option<PathBuf>,

    /// The client certificate's private key (PEM); needs --tls-cert.
    #[arg(long, env = "MONOLOCK_TLS_KEY", value_name = "FILE")]
    tls_key: Option<PathBuf>,

    /// The name the server's certificate must match (default: the host of
    /// --server); needs --tls-ca.
    #[arg(long, env = "MONOLOCK_TLS_SERVER_NAME", value_name = "NAME")]
    tls_server_name: Option<String>,

    /// The lock's name (1 to 255 bytes of UTF-8, exact).
    #[arg(value_name = "NAME")]
    name: String,
}

/// Runs `monolock observe`; the exit status is documented in its `--help`.
pub fn main(args: ObserveArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("monolock observe: cannot start the runtime: {err}");
            return ExitCode::from(EXIT_UNAVAILABLE);
        }
    };
    ExitCode::from(runtime.block_on(observe(args)))
}

async fn observe(args: ObserveArgs) -> u8 {
    let tls = tls_connector_from(
        args.tls_ca.as_ref(),
        args.tls_cert.as_ref(),
        args.tls_key.as_ref(),
        args.tls_server_name.as_ref(),
    );
    match tls {
        Err(message) => {
            eprintln!("monolock observe: {message}");
            EXIT_USAGE
        }
        Ok(None) => run(Client::new(args.server.clone()), &args).await,
        Ok(Some(tls)) => {
            let client = Client::new(args.server.clone()).with_connector(tls);
            run(client, &args).await
        }
    }
}

/// The exit status for a failure: what fails the same way every time is
/// a usage error; the rest is the server's or the network's.
fn fail(args: &ObserveArgs, err: &Error) -> u8 {
    eprintln!("monolock observe: lock {:?}: {}", args.name, chain(err));
    if err.is_temporary() {
        EXIT_UNAVAILABLE
    } else {
        EXIT_USAGE
    }
}

async fn run<C: Connector>(client: Client<C>, args: &ObserveArgs) -> u8 {
    let (mut interrupt, mut terminate) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(interrupt), Ok(terminate)) => (interrupt, terminate),
        (Err(err), _) | (_, Err(err)) => {
            eprintln!("monolock observe: cannot install signal handlers: {err}");
            return EXIT_UNAVAILABLE;
        }
    };
    let mut stdout = io::stdout().lock();
    if args.once {
        let state = tokio::select! {
            state = client.holder(&args.name) => state,
            _ = interrupt.recv() => return 0,
            _ = terminate.recv() => return 0,
        };
        return match state {
            // A closed stdout is the reader's choice: nothing to report.
            Ok(state) => {
                let _ = print(&mut stdout, &state);
                0
            }
            Err(err) => fail(args, &err),
        };
    }
    let mut observation = tokio::select! {
        observation = client.observe(&args.name) => match observation {
            Ok(observation) => observation,
            Err(err) => return fail(args, &err),
        },
        _ = interrupt.recv() => return 0,
        _ = terminate.recv() => return 0,
    };
    loop {
        let next = tokio::select! {
            next = observation.next() => next,
            _ = interrupt.recv() => return 0,
            _ = terminate.recv() => return 0,
        };
        match next {
            Some(Ok(state)) => {
                if print(&mut stdout, &state).is_err() {
                    // The reader went away (`| head -1`): nothing to tell.
                    return 0;
                }
            }
            Some(Err(err)) => return fail(args, &err),
            None => return EXIT_UNAVAILABLE,
        }
    }
}

/// One state as its JSON line, the fields in the order a person reads
/// them (what happened, to whom, then the details).
fn line(state: &LockState) -> String {
    let reason = state.reason.map(|reason| reason.name());
    format!(
        "{{\"event\":{},\"held\":{},\"token\":{},\"value\":{},\"initial\":{},\"coalesced\":{},\"reason\":{},\"since_ms\":{}}}",
        json!(state.event.name()),
        state.held,
        json!(state.token.to_string()),
        json!(state.value),
        state.initial,
        state.coalesced,
        json!(reason),
        state.since_ms(),
    )
}

/// Writes one line and flushes it, so a reader sees each state at once.
fn print(out: &mut impl Write, state: &LockState) -> io::Result<()> {
    writeln!(out, "{}", line(state))?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use monolock_client::{ReleaseReason, StateEvent};
    use serde_json::Value;

    use super::*;

    #[test]
    fn a_line_is_one_json_object_in_reading_order() {
        let state = LockState {
            event: StateEvent::Released,
            held: false,
            token: u64::MAX,
            value: "a \"quoted\" é\n".into(),
            since: None,
            initial: false,
            coalesced: true,
            reason: Some(ReleaseReason::EndedByServer),
        };
        let text = line(&state);
        assert!(
            text.starts_with(r#"{"event":"released","held":false,"token":"18446744073709551615","#)
        );
        let parsed: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(parsed["value"], "a \"quoted\" é\n");
        assert_eq!(parsed["reason"], "ended_by_server");
        assert_eq!(parsed["since_ms"], 0);
        assert_eq!(parsed["coalesced"], true);
        assert!(!text.contains('\n'), "one line");
    }
}
