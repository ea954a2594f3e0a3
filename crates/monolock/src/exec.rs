//! `monolock exec`: run a command while holding a lock.
//!
//! Acquire NAME, run CMD with `MONOLOCK_LOCK` and `MONOLOCK_TOKEN` in its own
//! process group, heartbeat while it runs, and stop it (SIGTERM, then
//! SIGKILL after a grace period) the moment the lock is lost.

use std::{
    ffi::OsString,
    io,
    os::unix::process::ExitStatusExt,
    path::PathBuf,
    process::{ExitCode, ExitStatus},
    time::Duration,
};

use clap::Args;
use monolock_client::{Client, Connector, Error, LockGuard, LossReason, TlsConnector};
use tokio::{
    process::{Child, Command},
    signal::unix::{Signal, SignalKind, signal},
    time::{Instant, sleep, sleep_until, timeout},
};

use crate::args::{EXIT_USAGE, parse_duration};

/// The lock was not acquired: busy with `--no-wait`, or `--wait` ran out
/// (sysexits' EX_TEMPFAIL: "try again later", which cron wrappers know).
pub const EXIT_NOT_ACQUIRED: u8 = 75;

/// The lock was lost while the command ran; the command was stopped. One
/// past the last sysexits code, so it means nothing else by convention.
pub const EXIT_LOST: u8 = 79;

/// The server could not be reached or failed the session before the grant
/// (sysexits' EX_UNAVAILABLE).
pub const EXIT_UNAVAILABLE: u8 = 69;

/// The command could not be started (as in POSIX shells).
pub const EXIT_CANNOT_EXECUTE: u8 = 126;

/// The command was not found (as in POSIX shells).
pub const EXIT_NOT_FOUND: u8 = 127;

/// Default for `--server`.
pub const DEFAULT_SERVER: &str = "127.0.0.1:7070";

/// How often the process group is checked for stragglers after a loss.
const GROUP_POLL: Duration = Duration::from_millis(20);

const AFTER_HELP: &str = "\
The command runs in its own process group with MONOLOCK_LOCK (the lock name)
and MONOLOCK_TOKEN (the fencing token, decimal) in its environment. Pass the
token to every write the lock guards, e.g. `WHERE token <= $MONOLOCK_TOKEN`.

If the lock is lost while the command runs, its process group gets SIGTERM at
once and SIGKILL after --kill-grace. SIGINT, SIGTERM and SIGHUP sent to
monolock exec are forwarded to the command's process group while it runs;
before the lock is granted they abort the wait (exit 128+N).

--tls-ca turns TLS on: the server's certificate must chain to that CA and
match the host of --server (or --tls-server-name). --tls-cert and --tls-key
add a client certificate for mTLS; the server takes the client's identity
from it.

Exit status:
  the command's own   it ran to the end holding the lock (128+N if killed by signal N)
  64                  usage or client error (bad flag, name, lease or TLS file; refused by the server's ACL)
  69                  server unreachable (TLS handshake failures included), or it failed
                      the session before the grant
  75                  not acquired: busy with --no-wait, or --wait ran out
  79                  the lock was lost while the command ran; the command was stopped
  126 / 127           the command could not be executed / was not found";

/// Flags of `monolock exec`.
#[derive(Debug, Args)]
#[command(
    about = "Run a command while holding a lock",
    after_help = AFTER_HELP,
    override_usage = "monolock exec [OPTIONS] <NAME> -- <CMD> [ARGS]..."
)]
pub struct ExecArgs {
    /// Server address.
    #[arg(long, env = "MONOLOCK_ADDRESS", default_value = DEFAULT_SERVER, value_name = "ADDR")]
    server: String,

    /// Lease: how long the server tolerates silence before it hands the
    /// lock on. Not a limit on the command's run time.
    #[arg(long, default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    lease: Duration,

    /// Wait at most this long for the lock (default: wait as long as it takes).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", conflicts_with = "no_wait")]
    wait: Option<Duration>,

    /// Do not wait: exit 75 at once if the lock is held.
    #[arg(long)]
    no_wait: bool,

    /// Retry connection failures and server conditions (shutdown,
    /// administrator kick) with backoff until the lock is acquired.
    #[arg(long)]
    retry: bool,

    /// Time between SIGTERM and SIGKILL when the lock is lost.
    #[arg(long, default_value = "5s", value_parser = parse_grace, value_name = "DURATION")]
    kill_grace: Duration,

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

    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

fn parse_grace(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|err| format!("{err} (expected e.g. 250ms, 5s, 1m)"))
}

/// Runs `monolock exec`; the exit code is documented in its `--help`.
pub fn main(args: ExecArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("monolock exec: cannot start the runtime: {err}");
            return ExitCode::from(EXIT_UNAVAILABLE);
        }
    };
    ExitCode::from(runtime.block_on(exec(args)))
}

async fn exec(args: ExecArgs) -> u8 {
    let tls = match tls_connector(&args) {
        Ok(tls) => tls,
        Err(message) => {
            eprintln!("monolock exec: {message}");
            return EXIT_USAGE;
        }
    };
    // Handlers first, so that a signal during the wait is never lost.
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(err) => {
            eprintln!("monolock exec: cannot install signal handlers: {err}");
            return EXIT_UNAVAILABLE;
        }
    };
    let client = Client::new(args.server.clone());
    match tls {
        None => acquire_and_run(&client, &args, &mut signals).await,
        Some(tls) => acquire_and_run(&client.with_connector(tls), &args, &mut signals).await,
    }
}

/// The TLS connector the flags ask for: `None` for plain TCP, or one line
/// saying what is wrong with them.
fn tls_connector(args: &ExecArgs) -> Result<Option<TlsConnector>, String> {
    let identity = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (Some(_), None) => return Err("--tls-cert needs --tls-key (its private key)".to_owned()),
        (None, Some(_)) => return Err("--tls-key needs --tls-cert (its certificate)".to_owned()),
        (None, None) => None,
    };
    let Some(ca) = &args.tls_ca else {
        return match (identity, &args.tls_server_name) {
            (None, None) => Ok(None),
            (Some(_), _) => Err("--tls-cert and --tls-key need --tls-ca (TLS is off)".to_owned()),
            (None, Some(_)) => Err("--tls-server-name needs --tls-ca (TLS is off)".to_owned()),
        };
    };
    let mut builder = TlsConnector::builder().with_ca_file(ca);
    if let Some((cert, key)) = identity {
        builder = builder.with_client_cert_files(cert, key);
    }
    if let Some(name) = &args.tls_server_name {
        builder = builder.with_server_name(name);
    }
    builder
        .build()
        .map(Some)
        .map_err(|err| format!("{:#}", anyhow::Error::new(err)))
}

/// Waits for the lock, then runs the command under it.
async fn acquire_and_run<C: Connector>(
    client: &Client<C>,
    args: &ExecArgs,
    signals: &mut Signals,
) -> u8 {
    let guard = tokio::select! {
        result = acquire(client, args) => match result {
            Ok(Some(guard)) => guard,
            Ok(None) => {
                match args.wait {
                    Some(wait) if !args.no_wait => eprintln!(
                        "monolock exec: lock {:?} not acquired within {}",
                        args.name,
                        humantime::format_duration(wait)
                    ),
                    _ => eprintln!("monolock exec: lock {:?} is held by someone else", args.name),
                }
                return EXIT_NOT_ACQUIRED;
            }
            Err(err) => {
                let code = exit_code_for(&err);
                eprintln!(
                    "monolock exec: cannot acquire lock {:?}: {:#}",
                    args.name,
                    anyhow::Error::new(err)
                );
                return code;
            }
        },
        signal = signals.recv() => {
            eprintln!(
                "monolock exec: {} while waiting for lock {:?}; giving up",
                signal_name(signal),
                args.name
            );
            return exit_code_for_signal(signal);
        }
    };
    run_command(guard, args, signals).await
}

/// Takes the lock as the flags say: `Ok(None)` when it was not acquired.
async fn acquire<C: Connector>(
    client: &Client<C>,
    args: &ExecArgs,
) -> Result<Option<LockGuard>, Error> {
    let (name, lease) = (args.name.as_str(), args.lease);
    let retry = client.retry_policy();
    if args.no_wait {
        return if args.retry {
            retry.retry(|| client.try_acquire(name, lease)).await
        } else {
            client.try_acquire(name, lease).await
        };
    }
    let wait = async {
        if args.retry {
            client.acquire_retrying(name, lease).await
        } else {
            client.acquire(name, lease).await
        }
    };
    match args.wait {
        None => wait.await.map(Some),
        Some(limit) => timeout(limit, wait).await.map_or(Ok(None), |r| r.map(Some)),
    }
}

/// Runs the command under `guard` and picks the exit status.
async fn run_command(guard: LockGuard, args: &ExecArgs, signals: &mut Signals) -> u8 {
    let Some((program, rest)) = args.command.split_first() else {
        return EXIT_USAGE; // clap requires a command
    };
    let mut command = Command::new(program);
    command
        .args(rest)
        .env("MONOLOCK_LOCK", guard.name().as_str())
        .env("MONOLOCK_TOKEN", guard.token().to_string())
        .process_group(0);
    die_with_parent(&mut command);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(err) => {
            eprintln!(
                "monolock exec: cannot run {}: {err}",
                program.to_string_lossy()
            );
            return if err.kind() == io::ErrorKind::NotFound {
                EXIT_NOT_FOUND
            } else {
                EXIT_CANNOT_EXECUTE
            };
        }
    };
    // The child leads its own group: its pid is the group id. It is not
    // reaped before `wait` returns, so the id cannot be reused meanwhile.
    let group = child.id().and_then(|pid| i32::try_from(pid).ok());
    loop {
        tokio::select! {
            biased;
            status = child.wait() => {
                return finish(guard, status, args).await;
            }
            reason = guard.lost() => {
                stop_after_loss(&mut child, group, &reason, args, signals).await;
                return EXIT_LOST;
            }
            signal = signals.recv() => forward(group, signal),
        }
    }
}

/// The command ended on its own: its status, unless the lock was gone by then.
async fn finish(guard: LockGuard, status: io::Result<ExitStatus>, args: &ExecArgs) -> u8 {
    if let Some(reason) = guard.loss() {
        eprintln!(
            "monolock exec: lock {:?} was lost before the command ended: {:#}",
            args.name,
            anyhow::Error::new(reason)
        );
        return EXIT_LOST;
    }
    if let Err(err) = guard.release().await {
        eprintln!(
            "monolock exec: releasing lock {:?}: {:#}",
            args.name,
            anyhow::Error::new(err)
        );
    }
    match status {
        Ok(status) => exit_code_for_status(status),
        Err(err) => {
            eprintln!("monolock exec: waiting for the command: {err}");
            EXIT_UNAVAILABLE
        }
    }
}

/// SIGTERM to the command's group now, SIGKILL to whatever is left of it
/// after the grace period; returns once the command has exited.
async fn stop_after_loss(
    child: &mut Child,
    group: Option<i32>,
    reason: &LossReason,
    args: &ExecArgs,
    signals: &mut Signals,
) {
    let grace = humantime::format_duration(args.kill_grace);
    eprintln!(
        "monolock exec: lost lock {:?} while the command ran: {:#}; sending SIGTERM (SIGKILL after {grace})",
        args.name,
        anyhow::Error::new(reason.clone())
    );
    forward(group, libc::SIGTERM);
    let give_up = Instant::now() + args.kill_grace;
    let mut exited = false;
    // Wait for the command, then for the rest of its group, until the grace
    // period ends.
    loop {
        if exited && !group.is_some_and(group_alive) {
            return;
        }
        tokio::select! {
            biased;
            _ = child.wait(), if !exited => exited = true,
            () = sleep_until(give_up) => break,
            () = sleep(GROUP_POLL), if exited => {}
            signal = signals.recv() => forward(group, signal),
        }
    }
    eprintln!("monolock exec: the command is still running after {grace}; sending SIGKILL");
    forward(group, libc::SIGKILL);
    if !exited {
        let _ = child.wait().await;
    }
}

fn forward(group: Option<i32>, signal: i32) {
    if let Some(group) = group
        && let Err(err) = signal_group(group, signal)
        && err.raw_os_error() != Some(libc::ESRCH)
    {
        eprintln!(
            "monolock exec: cannot send {} to the command: {err}",
            signal_name(signal)
        );
    }
}

/// Makes the kernel SIGKILL the command if this process dies first.
///
/// The claim is this process's connection: if `monolock exec` is killed
/// (even with SIGKILL, which it cannot catch), the server releases the lock
/// at once and may hand it on, so the command must not outlive it. The
/// parent-death signal fires when the thread that forked exits; this runtime
/// is current-thread, so that thread is the main thread, which lives as long
/// as the process. It reaches the command itself, not processes the command
/// forks into the background (docs/exec.md says so).
#[allow(unsafe_code)]
fn die_with_parent(command: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child before exec, where only
    // async-signal-safe calls are allowed: it makes two system calls
    // (prctl, getppid), allocates nothing and takes no lock.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl.
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Sends `signal` to every process in group `group` (`kill(-group, signal)`).
#[allow(unsafe_code)]
fn signal_group(group: i32, signal: i32) -> io::Result<()> {
    // kill(-1) would signal every process we may signal: never let it happen.
    if group <= 1 {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    // SAFETY: kill(2) takes two integers and reads or writes no memory of
    // this process; any failure is reported through errno.
    if unsafe { libc::kill(-group, signal) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether any process of the group is left (signal 0 probes).
fn group_alive(group: i32) -> bool {
    match signal_group(group, 0) {
        Ok(()) => true,
        Err(err) => err.raw_os_error() == Some(libc::EPERM),
    }
}

/// SIGINT, SIGTERM and SIGHUP, as one stream.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    fn install() -> io::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal's number.
    async fn recv(&mut self) -> i32 {
        tokio::select! {
            Some(()) = self.interrupt.recv() => libc::SIGINT,
            Some(()) = self.terminate.recv() => libc::SIGTERM,
            Some(()) = self.hangup.recv() => libc::SIGHUP,
            else => std::future::pending().await,
        }
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        libc::SIGKILL => "SIGKILL",
        _ => "a signal",
    }
}

fn exit_code_for_signal(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(u8::MAX)
}

fn exit_code_for_status(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(u8::MAX),
        (None, Some(signal)) => exit_code_for_signal(signal),
        (None, None) => EXIT_UNAVAILABLE,
    }
}

/// Client errors (the same request fails the same way) are usage errors;
/// everything else is the server's or the network's.
fn exit_code_for(err: &Error) -> u8 {
    match err {
        Error::InvalidName(_) | Error::InvalidLease { .. } | Error::Tls(_) => EXIT_USAGE,
        Error::Server { code, .. } if !code.is_temporary() => EXIT_USAGE,
        _ => EXIT_UNAVAILABLE,
    }
}

#[cfg(test)]
mod tests {
    use monolock_client::{ErrorCode, TlsError};

    use super::*;

    #[test]
    fn exit_codes_by_error_class() {
        let server = |code| Error::Server {
            code: ErrorCode(code),
            reason: String::new(),
        };
        assert_eq!(exit_code_for(&server(0x18)), EXIT_USAGE);
        assert_eq!(exit_code_for(&server(0x01)), EXIT_UNAVAILABLE);
        assert_eq!(exit_code_for(&Error::ConnectionClosed), EXIT_UNAVAILABLE);
        assert_eq!(
            exit_code_for(&Error::Tls(TlsError::NoTrustRoots)),
            EXIT_USAGE
        );
        assert_eq!(
            exit_code_for(&Error::InvalidLease {
                lease: Duration::ZERO
            }),
            EXIT_USAGE
        );
        assert_eq!(exit_code_for_signal(libc::SIGTERM), 143);
        assert_eq!(exit_code_for_status(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(
            exit_code_for_status(ExitStatus::from_raw(libc::SIGKILL)),
            137
        );
    }

    #[test]
    fn the_process_group_guard_refuses_all_processes() {
        assert!(signal_group(1, 0).is_err());
        assert!(signal_group(0, 0).is_err());
        assert!(signal_group(-5, 0).is_err());
    }
}
