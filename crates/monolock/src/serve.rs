//! `monolock serve`: flags, logging, signals, and the server's life.

use std::{io::IsTerminal, net::SocketAddr, process::ExitCode, time::Duration};

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use monolock_server::{Server, ServerConfig};
use tokio::signal::unix::{SignalKind, signal};
use tracing::{error, info, warn};

use crate::args::{parse_duration, parse_socket_addr};

/// Default for `--listen`: loopback, since the plaintext port is
/// unauthenticated.
const DEFAULT_LISTEN: &str = "127.0.0.1:7070";

/// Flags of `monolock serve`. Every flag has an environment variable; a flag
/// beats its variable, which beats the default.
#[derive(Debug, Args)]
#[command(
    about = "Run the lock server",
    after_help = "Durations accept 250ms, 5s, 1m. There is deliberately no lease setting, no \
                  heartbeat setting, no connection limit and no queue limit.\n\
                  Signals: SIGTERM/SIGINT shut down gracefully (ERROR 0x01 to every session); \
                  SIGHUP reloads."
)]
pub struct ServeArgs {
    /// Protocol address.
    #[arg(long, env = "MONOLOCK_LISTEN_ADDRESS", default_value = DEFAULT_LISTEN, value_parser = parse_socket_addr, value_name = "ADDR")]
    listen: SocketAddr,

    /// Bound on the first ACQUIRE after accept, on a started frame and on every write.
    #[arg(long, env = "MONOLOCK_IO_TIMEOUT", default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    io_timeout: Duration,

    /// Diagnostic log level.
    #[arg(long, env = "MONOLOCK_LOG_LEVEL", default_value = "info", value_enum)]
    log_level: LogLevel,

    /// Diagnostic log format (to stderr).
    #[arg(long, env = "MONOLOCK_LOG_FORMAT", default_value = "text", value_enum)]
    log_format: LogFormat,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn init_logging(level: LogLevel, format: LogFormat) {
    let level = match level {
        LogLevel::Debug => tracing::Level::DEBUG,
        LogLevel::Info => tracing::Level::INFO,
        LogLevel::Warn => tracing::Level::WARN,
        LogLevel::Error => tracing::Level::ERROR,
    };
    let builder = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

/// Runs the server until SIGTERM/SIGINT. Exit 0 after a graceful shutdown.
pub fn main(args: ServeArgs) -> ExitCode {
    init_logging(args.log_level, args.log_format);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            error!(error = %err, "cannot start the runtime");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            error!("{err:#}");
            eprintln!("monolock: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    // Handlers first: a signal that arrives right after startup is never lost.
    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut sighup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;

    match monolock_server::raise_fd_limit() {
        Ok((before, after)) if before != after => {
            info!(before, after, "raised the open-file limit")
        }
        Ok(_) => {}
        Err(err) => warn!(error = %err, "cannot raise the open-file limit"),
    }

    let config = ServerConfig::default().with_io_timeout(args.io_timeout);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let server = Server::new(config);
    let handle = server.handle();
    let mut running = tokio::spawn(server.run(listener));
    info!(version = env!("CARGO_PKG_VERSION"), "monolock started");

    loop {
        tokio::select! {
            result = &mut running => {
                return result.context("server task failed")?.context("server failed");
            }
            _ = sigterm.recv() => { info!("SIGTERM: shutting down"); handle.shutdown(); break; }
            _ = sigint.recv() => { info!("SIGINT: shutting down"); handle.shutdown(); break; }
            _ = sighup.recv() => info!("SIGHUP received; nothing to reload"),
        }
    }
    running
        .await
        .context("server task failed")?
        .context("server failed")?;
    info!("shutdown complete");
    Ok(())
}
