//! `monolock exec`: run a command while holding a lock.
//!
//! Acquire NAME, run CMD with `MONOLOCK_LOCK` and `MONOLOCK_TOKEN` in its own
//! process group, heartbeat while it runs, and stop it (SIGTERM, then
//! SIGKILL after a grace period) the moment the lock is lost. A sentinel
//! process kills the group if exec itself dies. With no CMD, hold the lock
//! until a signal arrives.

use std::{
    ffi::OsString,
    io::{self, Write},
    os::unix::process::ExitStatusExt,
    path::PathBuf,
    process::{ExitCode, ExitStatus},
    time::Duration,
};

use clap::{ArgAction, Args};
use monolock_client::{
    Client, Connector, Enqueued, Error, LockGuard, LossReason, MAX_LEASE, MAX_VALUE_LEN, MIN_LEASE,
    ProtocolViolation, TcpConnector, TlsConnector, WrongPeer,
};
use tokio::{
    process::{Child, Command},
    signal::unix::{Signal, SignalKind, signal},
    time::{Instant, sleep, sleep_until, timeout},
};

use crate::{
    args::{EXIT_USAGE, parse_duration, parse_duration_or_zero, parse_switch},
    process::{
        Terminal, announce_group, die_with_parent, enter_new_pid_namespace, group_alive,
        signal_group,
    },
    render::chain,
    sentinel::Sentinel,
};

/// The lock was not acquired: busy with `--no-wait`, or `--wait` ran out
/// (sysexits' EX_TEMPFAIL: "try again later", which cron wrappers know).
/// `--conflict-exit-code` replaces it.
pub const EXIT_NOT_ACQUIRED: u8 = 75;

/// The lock was lost while the command ran; the command was stopped. One
/// past the last sysexits code, so it means nothing else by convention.
pub const EXIT_LOST: u8 = 79;

/// The server could not be reached or failed the session before the
/// command started (sysexits' EX_UNAVAILABLE).
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
The `--` before CMD is needed only when CMD's first word starts with `-`.
Without CMD (and without -c), exec prints the token and holds the lock until
SIGINT, SIGTERM or SIGHUP.

If the lock is lost while the command runs, its process group gets SIGTERM at
once and SIGKILL after --kill-grace. If exec itself dies (even by SIGKILL), a
sentinel process kills the command's process group at once. SIGINT, SIGTERM
and SIGHUP sent to monolock exec are forwarded to the command's process group
while it runs; before the lock is granted they abort the wait (exit 128+N).
On a terminal, the command is the foreground job, so it can read the keyboard.

--retry retries connection failures and server conditions (shutdown,
administrator kick), logging each retry on stderr (unless -q), until the
server has been unreachable for --retry-for; a bad certificate, a TLS
mismatch, a wrong port or an ACL refusal is never retried. --server takes
several addresses (a,b): each connection tries them in order. On/off
variables (MONOLOCK_RETRY, MONOLOCK_PID_NAMESPACE) take 1/0, true/false,
yes/no or on/off.

--value gives the lock a value for the command's whole run (its HOST:PORT, for
followers that forward to the leader): `monolock observe NAME` prints it with
every change. A server older than lock values refuses it (exit 64).

--tls-ca turns TLS on: the server's certificate must chain to that CA and
match the host of --server (or --tls-server-name). --tls-cert and --tls-key
add a client certificate for mTLS; the server takes the client's identity
from it.

Exit status:
  the command's own   it ran to the end holding the lock (128+N if killed by signal N)
  64                  usage or client error (bad flag, name, lease, value, address or TLS
                      file; a certificate or TLS mismatch; a wrong port; refused by the
                      ACL; --value to a server without lock values)
  69                  server unreachable, or it failed the session before the command
                      started (shutdown, administrator kick, silence)
  75                  not acquired: busy with --no-wait or --wait 0, or --wait ran out
                      (--conflict-exit-code replaces 75)
  79                  the lock was lost while the command ran; the command was stopped
  126 / 127           the command could not be executed / was not found
  128+N               exec got signal N while waiting for the lock
  0                   without CMD: the lock was held until SIGINT, SIGTERM or SIGHUP";

/// Flags of `monolock exec`.
#[derive(Debug, Args)]
#[command(
    about = "Run a command while holding a lock",
    after_help = AFTER_HELP,
    override_usage = "monolock exec [OPTIONS] <NAME> [--] [CMD [ARGS]...]\n       monolock exec [OPTIONS] <NAME> -c <SHELL_COMMAND>"
)]
pub struct ExecArgs {
    /// Server address, or several separated by commas (tried in order).
    #[arg(long, env = "MONOLOCK_ADDRESS", default_value = DEFAULT_SERVER, value_parser = parse_servers, value_name = "ADDR[,ADDR...]")]
    server: String,

    /// Lease: how long the server tolerates silence before it hands the
    /// lock on. Not a limit on the command's run time.
    #[arg(long, env = "MONOLOCK_LEASE", default_value = "2s", value_parser = parse_lease, value_name = "DURATION", allow_hyphen_values = true)]
    lease: Duration,

    /// Wait at most this long for the lock; 0 tries once (default: wait as
    /// long as it takes).
    #[arg(long, env = "MONOLOCK_WAIT", value_parser = parse_duration_or_zero, value_name = "DURATION", conflicts_with = "no_wait", allow_hyphen_values = true)]
    wait: Option<Duration>,

    /// Do not wait: exit 75 at once if the lock is held.
    #[arg(short = 'n', long)]
    no_wait: bool,

    /// Retry connection failures and server conditions (shutdown,
    /// administrator kick) with backoff, for at most --retry-for of an
    /// unreachable server.
    #[arg(long, env = "MONOLOCK_RETRY", action = ArgAction::SetTrue, value_parser = parse_switch)]
    retry: bool,

    /// With --retry: give up once the server has been unreachable this long.
    #[arg(long, env = "MONOLOCK_RETRY_FOR", default_value = "30s", value_parser = parse_duration, value_name = "DURATION", allow_hyphen_values = true)]
    retry_for: Duration,

    /// Time between SIGTERM and SIGKILL when the lock is lost.
    #[arg(long, env = "MONOLOCK_KILL_GRACE", default_value = "5s", value_parser = parse_duration_or_zero, value_name = "DURATION", allow_hyphen_values = true)]
    kill_grace: Duration,

    /// Exit status when the lock is not acquired (busy, or --wait ran out),
    /// as flock -E.
    #[arg(short = 'E', long, default_value_t = EXIT_NOT_ACQUIRED, value_parser = clap::value_parser!(u8).range(1..), value_name = "CODE")]
    conflict_exit_code: u8,

    /// Say on stderr when the lock is queued, granted (token, wait time)
    /// and released.
    #[arg(short, long)]
    verbose: bool,

    /// Say nothing on stderr about the expected outcomes: the lock busy
    /// (or --wait running out) and the retries of --retry. Failures are
    /// still reported. For cron, which mails whatever is printed.
    #[arg(short, long, conflicts_with = "verbose")]
    quiet: bool,

    /// Run the command in a new PID namespace, so that every descendant,
    /// even one that left the process group (setsid), dies with exec and
    /// when the command ends. Needs root (CAP_SYS_ADMIN). Inside, the
    /// command sees namespace PIDs ($$ is 2).
    #[arg(long, env = "MONOLOCK_PID_NAMESPACE", action = ArgAction::SetTrue, value_parser = parse_switch)]
    pid_namespace: bool,

    /// Run this string with /bin/sh -c (as flock -c) instead of CMD.
    #[arg(short = 'c', long = "command", value_name = "SHELL_COMMAND")]
    shell: Option<OsString>,

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

    /// A value the lock carries while the command runs (at most 1024
    /// bytes of UTF-8): this instance's HOST:PORT, say. `monolock observe`,
    /// the client's observers and `monolock locks` show it with the holder.
    #[arg(long, value_name = "STR", value_parser = parse_value)]
    value: Option<String>,

    /// The lock's name (1 to 255 bytes of UTF-8, exact).
    #[arg(value_name = "NAME")]
    name: String,

    /// The command and its arguments (none: hold the lock until a signal).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD",
        conflicts_with = "shell"
    )]
    command: Vec<OsString>,
}

/// Parses `--server`: one or more `HOST:PORT` separated by commas. A bad
/// address is a usage error at startup, never a retried connect failure.
pub fn parse_servers(text: &str) -> Result<String, String> {
    let mut addrs = Vec::new();
    for addr in text.split(',').map(str::trim) {
        let bad = || {
            format!(
                "{addr:?} is not HOST:PORT (e.g. 127.0.0.1:7070, locks.internal:7070, [::1]:7070)"
            )
        };
        let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.is_empty()
            || host.contains(['[', ']', ' ', '/'])
            || port.parse::<u16>().map_or(true, |p| p == 0)
        {
            return Err(bad());
        }
        addrs.push(addr);
    }
    Ok(addrs.join(","))
}

/// Parses `--value`: at most [`MAX_VALUE_LEN`] bytes, refused at startup
/// like any bad flag.
fn parse_value(text: &str) -> Result<String, String> {
    if text.len() > MAX_VALUE_LEN {
        return Err(format!(
            "value of {} bytes is above the maximum of {MAX_VALUE_LEN} bytes",
            text.len()
        ));
    }
    Ok(text.to_owned())
}

/// Parses `--lease` within the bounds every monolock client puts on a
/// lease: whole milliseconds, 100 ms to 1 hour.
fn parse_lease(text: &str) -> Result<Duration, String> {
    let lease = parse_duration(text)?;
    if lease < MIN_LEASE || lease > MAX_LEASE || !lease.subsec_nanos().is_multiple_of(1_000_000) {
        return Err(format!(
            "{text} is out of range: a lease is 100ms to 1h, in whole milliseconds"
        ));
    }
    Ok(lease)
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
    match tls {
        None => acquire_and_run(TcpConnector, &args, &mut signals).await,
        Some(tls) => acquire_and_run(tls, &args, &mut signals).await,
    }
}

/// The TLS connector the flags ask for: `None` for plain TCP, or one line
/// saying what is wrong with them.
fn tls_connector(args: &ExecArgs) -> Result<Option<TlsConnector>, String> {
    tls_connector_from(
        args.tls_ca.as_ref(),
        args.tls_cert.as_ref(),
        args.tls_key.as_ref(),
        args.tls_server_name.as_ref(),
    )
}

/// The TLS connector of `--tls-ca`, `--tls-cert`, `--tls-key` and
/// `--tls-server-name` (exec's, observe's): `None` for plain TCP, or one
/// line saying what is wrong with them.
pub fn tls_connector_from(
    tls_ca: Option<&PathBuf>,
    tls_cert: Option<&PathBuf>,
    tls_key: Option<&PathBuf>,
    tls_server_name: Option<&String>,
) -> Result<Option<TlsConnector>, String> {
    let identity = match (tls_cert, tls_key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (Some(_), None) => return Err("--tls-cert needs --tls-key (its private key)".to_owned()),
        (None, Some(_)) => return Err("--tls-key needs --tls-cert (its certificate)".to_owned()),
        (None, None) => None,
    };
    let Some(ca) = tls_ca else {
        return match (identity, tls_server_name) {
            (None, None) => Ok(None),
            (Some(_), _) => Err("--tls-cert and --tls-key need --tls-ca (TLS is off)".to_owned()),
            (None, Some(_)) => Err("--tls-server-name needs --tls-ca (TLS is off)".to_owned()),
        };
    };
    let mut builder = TlsConnector::builder().with_ca_file(ca);
    if let Some((cert, key)) = identity {
        builder = builder.with_client_cert_files(cert, key);
    }
    if let Some(name) = tls_server_name {
        builder = builder.with_server_name(name);
    }
    builder.build().map(Some).map_err(|err| chain(&err))
}

/// Waits for the lock, then runs the command under it (or holds the lock
/// until a signal when there is no command).
async fn acquire_and_run<C: Connector + Clone>(
    connector: C,
    args: &ExecArgs,
    signals: &mut Signals,
) -> u8 {
    let client = Client::new(args.server.clone())
        .with_default_lease(args.lease)
        .with_connector(connector.clone());
    let started = Instant::now();
    let guard = tokio::select! {
        result = acquire(&client, &connector, args) => match result {
            Ok(Some(guard)) => guard,
            Ok(None) if args.quiet => return args.conflict_exit_code,
            Ok(None) => {
                match args.wait {
                    Some(wait) if !wait.is_zero() && !args.no_wait => eprintln!(
                        "monolock exec: lock {:?} not acquired within {}",
                        args.name,
                        humantime::format_duration(wait)
                    ),
                    _ => eprintln!("monolock exec: lock {:?} is held by someone else", args.name),
                }
                return args.conflict_exit_code;
            }
            Err(err) => {
                let code = exit_code_for(&err);
                let gave_up = if args.retry && err.is_temporary() {
                    format!(
                        " (gave up: --retry-for {} of an unreachable server)",
                        humantime::format_duration(args.retry_for)
                    )
                } else {
                    String::new()
                };
                eprintln!(
                    "monolock exec: cannot acquire lock {:?}: {}{gave_up}",
                    args.name,
                    describe(&err, args)
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
    if args.verbose {
        eprintln!(
            "monolock exec: acquired lock {:?} with token {} after {}",
            args.name,
            guard.token(),
            humantime::format_duration(Duration::from_millis(
                u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
            ))
        );
    }
    match command_line(args) {
        Some((program, rest)) => run_command(guard, program, rest, args, signals).await,
        None => hold(guard, args, signals).await,
    }
}

/// The program and its arguments: `-c STRING` as `/bin/sh -c STRING`, or
/// CMD; `None` when there is neither.
fn command_line(args: &ExecArgs) -> Option<(OsString, Vec<OsString>)> {
    if let Some(shell) = &args.shell {
        return Some(("/bin/sh".into(), vec!["-c".into(), shell.clone()]));
    }
    let (program, rest) = args.command.split_first()?;
    Some((program.clone(), rest.to_vec()))
}

/// Takes the lock as the flags say: `Ok(None)` when it was not acquired.
async fn acquire<C: Connector>(
    client: &Client<C>,
    connector: &C,
    args: &ExecArgs,
) -> Result<Option<LockGuard>, Error> {
    let once = args.no_wait || args.wait.is_some_and(|wait| wait.is_zero());
    let attempt = || async {
        if once {
            let value = args.value.as_deref().unwrap_or_default();
            match client
                .try_acquire_with_value(&args.name, args.lease, value)
                .await
            {
                Err(err) => Err(unanswered(err, connector, args).await),
                result => result,
            }
        } else {
            wait_reporting(client, connector, args).await.map(Some)
        }
    };
    let attempts = async {
        if !args.retry {
            return attempt().await;
        }
        let policy = client
            .retry_policy()
            .clone()
            .with_retry_for(Some(args.retry_for));
        policy
            .retry_notify(attempt, |err, delay| {
                if args.quiet {
                    return;
                }
                eprintln!(
                    "monolock exec: cannot acquire lock {:?}: {}; retrying in {}",
                    args.name,
                    chain(err),
                    humantime::format_duration(Duration::from_millis(
                        u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)
                    ))
                );
            })
            .await
    };
    match args.wait {
        Some(limit) if !once => timeout(limit, attempts).await.unwrap_or(Ok(None)),
        _ => attempts.await,
    }
}

/// Waits in the queue, saying so with `--verbose`.
///
/// WAITING is all the protocol says: the lock is held, or the server is in
/// its startup grace (nothing is granted yet). exec cannot tell which, so
/// it says both; `monolock locks` and `monolock info` say which.
async fn wait_reporting<C: Connector>(
    client: &Client<C>,
    connector: &C,
    args: &ExecArgs,
) -> Result<LockGuard, Error> {
    let value = args.value.as_deref().unwrap_or_default();
    let enqueued = match client
        .enqueue_with_value(&args.name, args.lease, value)
        .await
    {
        Ok(enqueued) => enqueued,
        Err(err) => return Err(unanswered(err, connector, args).await),
    };
    match enqueued {
        Enqueued::Acquired(guard) => Ok(guard),
        Enqueued::Waiting(waiter) => {
            if args.verbose {
                eprintln!(
                    "monolock exec: lock {:?} is not granted yet (it is held, or the server is in its startup grace); queued (first come, first served)",
                    args.name
                );
            }
            waiter.granted().await
        }
    }
}

/// How long the HTTP probe may take, connection included.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A failure before the server's first reply, named: when nothing came
/// back in time (a monolock server answers ACQUIRE at once) and the port
/// answers an HTTP request like HTTP, it is an HTTP port (one that waits
/// for the rest of a request), not a silent server.
async fn unanswered<C: Connector>(err: Error, connector: &C, args: &ExecArgs) -> Error {
    if matches!(
        err,
        Error::WrongPeer {
            problem: WrongPeer::Silent { .. },
            ..
        }
    ) && answers_http(connector, &args.server).await
    {
        return Error::Lost(LossReason::ProtocolViolation(ProtocolViolation::HttpServer));
    }
    err
}

/// Whether the first of `servers` that accepts a connection answers an
/// HTTP request as an HTTP server does. A monolock server answers it with
/// an ERROR frame (0x11), never with `HTTP/`.
async fn answers_http<C: Connector>(connector: &C, servers: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    for addr in servers.split(',') {
        let Ok(Ok(connection)) = timeout(PROBE_TIMEOUT, connector.connect(addr)).await else {
            continue;
        };
        let mut stream = connection.into_stream();
        let probe = async {
            stream.write_all(b"GET / HTTP/1.0\r\n\r\n").await?;
            let mut head = [0u8; 5];
            stream.read_exact(&mut head).await?;
            Ok::<_, io::Error>(head)
        };
        return matches!(timeout(PROBE_TIMEOUT, probe).await, Ok(Ok(head)) if &head == b"HTTP/");
    }
    false
}

/// An acquire failure as one line: what happened, and for a wrong port or
/// a TLS mismatch, what to do.
fn describe(err: &Error, args: &ExecArgs) -> String {
    if matches!(
        err,
        Error::Lost(LossReason::ProtocolViolation(ProtocolViolation::HttpServer))
            | Error::WrongPeer {
                problem: WrongPeer::Http,
                ..
            }
    ) {
        return format!(
            "{} is not a monolock protocol port (it answered like HTTP): give --server the server's --listen address, not its admin or ops port",
            args.server
        );
    }
    if args.tls_ca.is_some()
        && let Error::WrongPeer {
            addr,
            problem: WrongPeer::NoTls,
        } = err
    {
        return format!(
            "the server does not speak TLS: {addr} answered the TLS handshake in plain text; drop --tls-ca, or give the server's TLS port"
        );
    }
    chain(err)
}

/// No command: print the token, hold until a signal, release.
async fn hold(guard: LockGuard, args: &ExecArgs, signals: &mut Signals) -> u8 {
    let mut stdout = io::stdout().lock();
    let _ = writeln!(stdout, "{}", guard.token()).and_then(|()| stdout.flush());
    drop(stdout);
    tokio::select! {
        signal = signals.recv() => {
            if args.verbose {
                eprintln!("monolock exec: {}; releasing lock {:?}", signal_name(signal), args.name);
            }
            release(guard, args).await;
            0
        }
        reason = guard.lost() => {
            eprintln!(
                "monolock exec: lost lock {:?}: {}",
                args.name,
                chain(&reason)
            );
            EXIT_LOST
        }
    }
}

async fn release(guard: LockGuard, args: &ExecArgs) {
    match guard.release().await {
        Ok(()) if args.verbose => eprintln!("monolock exec: released lock {:?}", args.name),
        Ok(()) => {}
        Err(err) => eprintln!(
            "monolock exec: releasing lock {:?}: {}",
            args.name,
            chain(&err)
        ),
    }
}

/// Runs the command under `guard` and picks the exit status.
async fn run_command(
    guard: LockGuard,
    program: OsString,
    rest: Vec<OsString>,
    args: &ExecArgs,
    signals: &mut Signals,
) -> u8 {
    if args.pid_namespace
        && let Err(err) = enter_new_pid_namespace()
    {
        eprintln!(
            "monolock exec: --pid-namespace: cannot create a PID namespace: {err} (it needs root)"
        );
        return EXIT_USAGE;
    }
    // The sentinel first: a command is never started that it could not
    // stop if exec died.
    let sentinel = match Sentinel::start() {
        Ok(sentinel) => sentinel,
        Err(err) => {
            eprintln!("monolock exec: cannot start the sentinel process: {err}");
            return EXIT_UNAVAILABLE;
        }
    };
    let terminal = Terminal::foreground();
    let mut command = Command::new(&program);
    command
        .args(&rest)
        .env("MONOLOCK_LOCK", guard.name().as_str())
        .env("MONOLOCK_TOKEN", guard.token().to_string())
        .process_group(0);
    die_with_parent(&mut command, terminal.is_some(), args.pid_namespace);
    if let Some(pipe) = sentinel.pipe_fd() {
        announce_group(&mut command, pipe);
    }
    // A last look at the clock: a process paused between the grant and
    // here (SIGSTOP, swap, a suspended VM) must not start the command on a
    // claim the server may already have handed on.
    if !guard.is_held() {
        let reason = guard
            .loss()
            .map_or_else(String::new, |reason| format!(": {}", chain(&reason)));
        eprintln!(
            "monolock exec: lock {:?} was lost before the command started{reason}; not running it",
            args.name
        );
        sentinel.dismiss().await;
        return EXIT_UNAVAILABLE;
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(err) => {
            let code = spawn_failure(&program, &err);
            sentinel.dismiss().await;
            release(guard, args).await;
            return code;
        }
    };
    // The child leads its own group: its pid is the group id (the sentinel
    // has it from the child already). It is not reaped before `wait`
    // returns, so the id cannot be reused meanwhile.
    let group = child.id().and_then(|pid| i32::try_from(pid).ok());
    let code = loop {
        tokio::select! {
            biased;
            status = child.wait() => {
                if let Some(terminal) = &terminal { terminal.take_back(); }
                break finish(guard, status, args).await;
            }
            reason = guard.lost() => {
                stop_after_loss(&mut child, group, &reason, args, signals).await;
                if let Some(terminal) = &terminal { terminal.take_back(); }
                break EXIT_LOST;
            }
            signal = signals.recv() => forward(group, signal),
        }
    };
    sentinel.dismiss().await;
    code
}

/// Says why the command could not be started, and picks the exit status.
fn spawn_failure(program: &OsString, err: &io::Error) -> u8 {
    let program = program.to_string_lossy();
    if err.raw_os_error() == Some(libc::EPIPE) {
        eprintln!("monolock exec: the sentinel process is gone; not running {program}");
        return EXIT_UNAVAILABLE;
    }
    eprintln!("monolock exec: cannot run {program}: {err}");
    if err.kind() == io::ErrorKind::NotFound {
        EXIT_NOT_FOUND
    } else {
        EXIT_CANNOT_EXECUTE
    }
}

/// The command ended on its own: its status, unless the lock was gone by then.
async fn finish(guard: LockGuard, status: io::Result<ExitStatus>, args: &ExecArgs) -> u8 {
    if let Some(reason) = guard.loss() {
        eprintln!(
            "monolock exec: lock {:?} was lost before the command ended: {}",
            args.name,
            chain(&reason)
        );
        return EXIT_LOST;
    }
    release(guard, args).await;
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
        "monolock exec: lost lock {:?} while the command ran: {}; sending SIGTERM (SIGKILL after {grace})",
        args.name,
        chain(&reason)
    );
    forward(group, libc::SIGTERM);
    // Bounded at parse time, so this cannot overflow; checked all the same.
    let give_up = Instant::now()
        .checked_add(args.kill_grace)
        .unwrap_or_else(Instant::now);
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

/// What fails the same way every time (bad input, a certificate or TLS
/// mismatch, a wrong port, an ACL refusal) is a usage error; everything
/// else is the server's or the network's.
fn exit_code_for(err: &Error) -> u8 {
    if err.is_temporary() {
        EXIT_UNAVAILABLE
    } else {
        EXIT_USAGE
    }
}

#[cfg(test)]
mod tests {
    use monolock_client::{ErrorCode, TlsError};

    use super::*;

    #[test]
    fn a_value_is_at_most_1024_bytes_of_utf8() {
        let most = "é".repeat(512);
        assert_eq!(parse_value(&most), Ok(most.clone()));
        assert_eq!(
            parse_value(&format!("{most}x")),
            Err("value of 1025 bytes is above the maximum of 1024 bytes".to_owned())
        );
    }

    #[test]
    fn exit_codes_by_error_class() {
        let server = |code| {
            Error::from(LossReason::Server {
                code: ErrorCode(code),
                reason: String::new(),
            })
        };
        assert_eq!(exit_code_for(&server(0x18)), EXIT_USAGE);
        assert_eq!(exit_code_for(&server(0x01)), EXIT_UNAVAILABLE);
        assert_eq!(
            exit_code_for(&Error::from(LossReason::ConnectionClosed)),
            EXIT_UNAVAILABLE
        );
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
    fn server_lists_and_leases_are_checked_at_parse_time() {
        assert_eq!(
            parse_servers("127.0.0.1:7070, [::1]:7071,locks.internal:7072").as_deref(),
            Ok("127.0.0.1:7070,[::1]:7071,locks.internal:7072")
        );
        for bad in [
            "",
            "7070",
            "host:",
            "host:0",
            "host:99999",
            ":7070",
            "a:1,,b:2",
            "h st:1",
        ] {
            assert!(parse_servers(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_lease("2s"), Ok(Duration::from_secs(2)));
        assert!(parse_lease("100us").is_err());
        assert!(parse_lease("50d").is_err());
    }
}
