//! `monolock serve`: flags, logging, signals, and the server's life.

use std::{
    ffi::OsString, io::IsTerminal, net::SocketAddr, path::PathBuf, process::ExitCode, sync::Arc,
    time::Duration,
};

use anyhow::Context as _;
use clap::{ArgAction, Args, ValueEnum, builder::OsStringValueParser};
use monolock_server::{
    AUDIT_QUEUE_CAPACITY, AclFileAuthorizer, AdminIdentities, AdminToken, AllowedHosts, AuditLog,
    AuditOptions, AuditOverflow, AuditTarget, EventHub, HttpLimits, HttpStats, Listeners, Metrics,
    Reloader, ServerConfig, ServerTls, Service, SystemWallClock, TlsFiles, TokenFloor,
    admin::EffectiveConfig,
};
use tokio::{
    net::TcpListener,
    signal::unix::{Signal, SignalKind, signal},
    task::JoinHandle,
};
use tracing::{error, info, warn};

use crate::args::{
    EXIT_USAGE, parse_duration, parse_duration_or_zero, parse_socket_addr, parse_switch,
};

/// The longest `--startup-grace` accepted: anything longer is a typo (a
/// grace only needs to cover the longest lease in use).
const MAX_STARTUP_GRACE: Duration = Duration::from_secs(24 * 3600);

/// Parses `--startup-grace`: a duration from 0 up to a day.
fn parse_grace(text: &str) -> Result<Duration, String> {
    let grace = parse_duration_or_zero(text)?;
    if grace > MAX_STARTUP_GRACE {
        return Err("longer than a day; a grace needs only cover the longest lease".to_owned());
    }
    Ok(grace)
}

/// Default for `--listen`: loopback, since the plaintext port is
/// unauthenticated.
const DEFAULT_LISTEN: &str = "127.0.0.1:7070";

/// Flags of `monolock serve`. Every flag has an environment variable; a flag
/// beats its variable, which beats the default. An empty value means "off".
#[derive(Debug, Args)]
#[command(
    about = "Run the lock server",
    after_help = "Durations accept 250ms, 5s, 1m. Addresses accept IP:PORT, [IPv6]:PORT or :PORT. \
                  On/off variables take 1/0, true/false, yes/no or on/off. \
                  There is deliberately no lease setting and no heartbeat setting; connections \
                  and claims are bounded by --max-connections and --max-claims.\n\
                  Signals: SIGTERM/SIGINT shut down gracefully (/healthz turns 503, ERROR 0x01 to \
                  every session, the ops listener stays up 2s longer); SIGHUP re-reads the TLS \
                  files, the ACL file and the admin token file and reopens the audit log, \
                  keeping the previous state of any part that fails."
)]
pub struct ServeArgs {
    /// Protocol address.
    #[arg(long, env = "MONOLOCK_LISTEN_ADDRESS", default_value = DEFAULT_LISTEN, value_parser = parse_socket_addr, value_name = "ADDR")]
    listen: SocketAddr,

    /// Address for /metrics, /healthz and /readyz [default: off].
    #[arg(long, env = "MONOLOCK_OPS_LISTEN_ADDRESS", value_name = "ADDR")]
    ops_listen: Option<String>,

    /// Address for the admin HTTP API and dashboard; off loopback it needs
    /// --admin-token-file (or --admin-insecure) [default: off].
    #[arg(long, env = "MONOLOCK_ADMIN_LISTEN_ADDRESS", value_name = "ADDR")]
    admin_listen: Option<String>,

    /// File holding the admin bearer token; every admin request then needs
    /// `Authorization: Bearer <token>`. Re-read on SIGHUP [default: none].
    #[arg(long, env = "MONOLOCK_ADMIN_TOKEN_FILE", value_name = "PATH", value_parser = OsStringValueParser::new())]
    admin_token_file: Option<OsString>,

    /// Serve the admin API off loopback without a token (the operator means it).
    #[arg(long, env = "MONOLOCK_ADMIN_INSECURE", action = ArgAction::SetTrue, value_parser = parse_switch)]
    admin_insecure: bool,

    /// A name the admin and ops listeners serve in Host besides IP addresses and
    /// localhost, e.g. the one a reverse proxy passes on: HOST (any port) or
    /// HOST:PORT. Repeatable; comma-separated in the variable [default: none].
    #[arg(
        long,
        env = "MONOLOCK_ADMIN_ALLOWED_HOST",
        value_delimiter = ',',
        value_name = "HOST"
    )]
    admin_allowed_host: Vec<String>,

    /// Serve the admin API over HTTPS with the protocol's --tls-cert/--tls-key; with
    /// --tls-client-ca, admin clients need a certificate from that CA (mTLS).
    #[arg(long, env = "MONOLOCK_ADMIN_TLS", action = ArgAction::SetTrue, value_parser = parse_switch)]
    admin_tls: bool,

    /// With --admin-tls, --tls-client-ca and no --admin-token-file: a client certificate
    /// with this identity (exactly) is an administrator; every other one is refused (403).
    /// Repeatable; comma-separated in the variable; the ACL file's "admin" list adds
    /// patterns [default: none].
    #[arg(
        long,
        env = "MONOLOCK_ADMIN_IDENTITY",
        value_delimiter = ',',
        value_name = "ID"
    )]
    admin_identity: Vec<String>,

    /// Serve /metrics, /healthz and /readyz over HTTPS, as --admin-tls does.
    #[arg(long, env = "MONOLOCK_OPS_TLS", action = ArgAction::SetTrue, value_parser = parse_switch)]
    ops_tls: bool,

    /// Server certificate chain (PEM); with --tls-key, enables TLS [default: none].
    #[arg(long, env = "MONOLOCK_TLS_CERT", value_name = "PATH", value_parser = OsStringValueParser::new())]
    tls_cert: Option<OsString>,

    /// Server private key (PEM); with --tls-cert, enables TLS [default: none].
    #[arg(long, env = "MONOLOCK_TLS_KEY", value_name = "PATH", value_parser = OsStringValueParser::new())]
    tls_key: Option<OsString>,

    /// CA pool (PEM) that client certificates must chain to; enables mTLS; requires
    /// --tls-cert and --tls-key [default: none].
    #[arg(long, env = "MONOLOCK_TLS_CLIENT_CA", value_name = "PATH", value_parser = OsStringValueParser::new())]
    tls_client_ca: Option<OsString>,

    /// ACL file (JSON); requires --tls-client-ca [default: none, every lock allowed].
    #[arg(long, env = "MONOLOCK_ACL_FILE", value_name = "PATH", value_parser = OsStringValueParser::new())]
    acl_file: Option<OsString>,

    /// Audit log: a file path, or - for stdout [default: off].
    #[arg(long, env = "MONOLOCK_AUDIT_LOG", value_name = "PATH|-")]
    audit_log: Option<String>,

    /// When the audit queue is full (the sink is stalled or slow): drop lines, count them
    /// and mark them with a gap line, or block each grant up to 250ms first.
    #[arg(
        long,
        env = "MONOLOCK_AUDIT_OVERFLOW",
        default_value = "drop",
        value_enum,
        value_name = "POLICY"
    )]
    audit_overflow: AuditOverflowArg,

    /// Audit lines queued for the writer at most (bounds the memory of a stalled sink).
    #[arg(long, env = "MONOLOCK_AUDIT_QUEUE", default_value_t = AUDIT_QUEUE_CAPACITY as u32, value_parser = clap::value_parser!(u32).range(1..=16_777_216), value_name = "LINES")]
    audit_queue: u32,

    /// Bound on the TLS handshake and first ACQUIRE after accept, on a started frame and
    /// on every write.
    #[arg(long, env = "MONOLOCK_IO_TIMEOUT", default_value = "5s", value_parser = parse_duration, value_name = "DURATION", allow_hyphen_values = true)]
    io_timeout: Duration,

    /// Token floor file: reserved token ranges are written here before use, so tokens
    /// rise across a restart even if the wall clock stepped back; created if missing
    /// [default: none].
    #[arg(long, env = "MONOLOCK_TOKEN_FLOOR", value_name = "PATH", value_parser = OsStringValueParser::new())]
    token_floor: Option<OsString>,

    /// Grant nothing for this long after start (sessions queue and get WAITING); for a
    /// standby, at least the longest lease in use. 0 = none.
    #[arg(long, env = "MONOLOCK_STARTUP_GRACE", default_value = "0s", value_parser = parse_grace, value_name = "DURATION", allow_hyphen_values = true)]
    startup_grace: Duration,

    /// Protocol v2: the most claims (held or waiting) one session may have at once; one
    /// more ACQUIRE is refused (REFUSED 0x09) and the session lives on.
    #[arg(long, env = "MONOLOCK_MAX_CLAIMS_PER_SESSION", default_value_t = monolock_server::DEFAULT_MAX_CLAIMS_PER_SESSION, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    max_claims_per_session: u32,

    /// After SIGTERM, how long /metrics, /healthz and /readyz stay up (answering 503)
    /// once the protocol listener has closed, so probes and scrapes see the shutdown.
    #[arg(long, env = "MONOLOCK_OPS_SHUTDOWN_GRACE", default_value = "2s", value_parser = parse_duration_or_zero, value_name = "DURATION", allow_hyphen_values = true)]
    ops_shutdown_grace: Duration,

    /// Protocol v2: close a session that has had no claim for this long (ERROR 0x03);
    /// 0 turns it off (as Redis's `timeout 0`).
    #[arg(long, env = "MONOLOCK_IDLE_TIMEOUT", default_value = "60s", value_parser = parse_duration_or_zero, value_name = "DURATION", allow_hyphen_values = true)]
    idle_timeout: Duration,

    /// Protocol connections open at once; one more is told ERROR 0x04 and closed. Never
    /// more than the open-file limit less a reserve for the HTTP listeners and files
    /// [default: that figure].
    #[arg(long, env = "MONOLOCK_MAX_CONNECTIONS", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..), value_name = "N")]
    max_connections: Option<usize>,

    /// Claims (held and waiting) over all sessions; one more ACQUIRE is refused with code
    /// 0x0a (REFUSED in v2, the session lives on; ERROR in v1).
    #[arg(long, env = "MONOLOCK_MAX_CLAIMS", default_value_t = monolock_server::DEFAULT_MAX_CLAIMS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..), value_name = "N")]
    max_claims: usize,

    /// Protocol v2 extension: the most watches (OBSERVE) one session may have at once,
    /// announced in FEATURES; one more is refused (REFUSED 0x0b) and the session lives
    /// on.
    #[arg(long, env = "MONOLOCK_MAX_WATCHES_PER_SESSION", default_value_t = monolock_server::DEFAULT_MAX_WATCHES_PER_SESSION, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    max_watches_per_session: u32,

    /// Watches (OBSERVE) over all sessions; one more is refused with code 0x0c (the
    /// session lives on).
    #[arg(long, env = "MONOLOCK_MAX_WATCHES", default_value_t = monolock_server::DEFAULT_MAX_WATCHES, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..), value_name = "N")]
    max_watches: usize,

    /// Admin and ops listeners: time a client has to send a whole request head (from
    /// accept, or from the first byte of a later request).
    #[arg(long, env = "MONOLOCK_HTTP_HEADER_TIMEOUT", default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    http_header_timeout: Duration,

    /// Admin and ops listeners: time a kept-alive connection may wait for its next request,
    /// and a response may go without a byte moving.
    #[arg(long, env = "MONOLOCK_HTTP_IDLE_TIMEOUT", default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    http_idle_timeout: Duration,

    /// Admin and ops listeners: connections open at once, each; one more gets 503.
    #[arg(long, env = "MONOLOCK_HTTP_MAX_CONNECTIONS", default_value_t = monolock_server::DEFAULT_HTTP_MAX_CONNECTIONS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000), value_name = "N")]
    http_max_connections: usize,

    /// Diagnostic log level.
    #[arg(long, env = "MONOLOCK_LOG_LEVEL", default_value = "info", value_enum)]
    log_level: LogLevel,

    /// Diagnostic log format (always to stderr).
    #[arg(long, env = "MONOLOCK_LOG_FORMAT", default_value = "text", value_enum)]
    log_format: LogFormat,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum AuditOverflowArg {
    Drop,
    Block,
}

impl From<AuditOverflowArg> for AuditOverflow {
    fn from(arg: AuditOverflowArg) -> Self {
        match arg {
            AuditOverflowArg::Drop => Self::Drop,
            AuditOverflowArg::Block => Self::Block,
        }
    }
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
        LogFormat::Text => builder.fmt_fields(escaped_fields()).init(),
        // serde_json escapes every string: the lines stay valid JSON.
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

/// Text-format fields with control characters escaped: lock names,
/// identities and reasons come from clients, and one holding a newline
/// must not start a line of its own (a forged log line).
fn escaped_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + 'static {
    use tracing_subscriber::field::MakeExt as _;
    tracing_subscriber::fmt::format::debug_fn(|writer, field, value| {
        let text = format!("{value:?}");
        if field.name() == "message" {
            writer.write_str(&escape_control(&text))
        } else {
            write!(writer, "{}={}", field.name(), escape_control(&text))
        }
    })
    .delimited(" ")
}

/// `text` with every control character (newlines, NUL, escape sequences)
/// written as a Rust escape (`\n`, `\0`, `\u{1b}`).
fn escape_control(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            escaped.extend(c.escape_default());
        } else {
            escaped.push(c);
        }
    }
    std::borrow::Cow::Owned(escaped)
}

/// The flags, checked: every combination valid, every value parsed.
#[derive(Debug)]
struct Settings {
    listen: SocketAddr,
    ops_listen: Option<SocketAddr>,
    admin_listen: Option<SocketAddr>,
    admin_token_file: Option<PathBuf>,
    admin_tls: bool,
    ops_tls: bool,
    /// Whose certificates are administrators: `Some` when the admin
    /// listener authenticates by client certificate (mTLS, no token).
    admin_identities: Option<Vec<String>>,
    allowed_hosts: AllowedHosts,
    tls: Option<TlsFiles>,
    acl_file: Option<PathBuf>,
    audit_log: Option<AuditTarget>,
    audit_options: AuditOptions,
    io_timeout: Duration,
    token_floor: Option<PathBuf>,
    startup_grace: Duration,
    max_claims_per_session: u32,
    idle_timeout: Duration,
    ops_shutdown_grace: Duration,
    /// `None`: as many as the descriptors allow.
    max_connections: Option<usize>,
    max_claims: usize,
    max_watches_per_session: u32,
    max_watches: usize,
    http_limits: HttpLimits,
}

/// A value given as empty (flag or environment variable) means "off".
fn non_empty<T: AsRef<std::ffi::OsStr>>(value: Option<T>) -> Option<T> {
    value.filter(|v| !v.as_ref().is_empty())
}

fn optional_addr(flag: &str, value: Option<String>) -> Result<Option<SocketAddr>, String> {
    non_empty(value)
        .map(|text| parse_socket_addr(&text).map_err(|err| format!("{flag} {text:?}: {err}")))
        .transpose()
}

impl Settings {
    /// Checks the flag combinations docs/operations.md allows ("Settings");
    /// the error is one line.
    fn from_args(mut args: ServeArgs) -> Result<Self, String> {
        let path = |value: Option<OsString>| non_empty(value).map(PathBuf::from);
        let tls_cert = path(args.tls_cert.take());
        let tls_key = path(args.tls_key.take());
        let client_ca = path(args.tls_client_ca.take());
        let acl_file = path(args.acl_file.take());
        let admin_token_file = path(args.admin_token_file.take());
        let admin_listen = optional_addr("--admin-listen", args.admin_listen.clone())?;
        let admin_identities = admin_access(
            &args,
            tls_cert.is_some(),
            client_ca.is_some(),
            admin_listen,
            admin_token_file.is_some(),
        )?;
        let tls = tls_files(tls_cert, tls_key, client_ca)?;
        let mtls = tls.as_ref().is_some_and(|tls| tls.client_ca.is_some());
        let allowed_hosts = AllowedHosts::parse(
            args.admin_allowed_host
                .iter()
                .map(String::as_str)
                .filter(|name| !name.trim().is_empty()),
        )
        .map_err(|err| err.to_string())?;
        if acl_file.is_some() && !mtls {
            return Err(
                "--acl-file requires --tls-client-ca (ACL identities come from client certificates)"
                    .to_owned(),
            );
        }
        Ok(Self {
            listen: args.listen,
            ops_listen: optional_addr("--ops-listen", args.ops_listen)?,
            admin_listen,
            admin_token_file,
            admin_tls: args.admin_tls,
            ops_tls: args.ops_tls,
            admin_identities,
            allowed_hosts,
            tls,
            acl_file,
            audit_log: non_empty(args.audit_log).map(|text| AuditTarget::parse(&text)),
            audit_options: AuditOptions {
                capacity: args.audit_queue as usize,
                overflow: args.audit_overflow.into(),
                ..AuditOptions::default()
            },
            io_timeout: args.io_timeout,
            token_floor: path(args.token_floor),
            startup_grace: args.startup_grace,
            max_claims_per_session: args.max_claims_per_session,
            // 0 means off, as Redis's `timeout 0`: no session is ever idle
            // long enough.
            idle_timeout: if args.idle_timeout.is_zero() {
                Duration::MAX
            } else {
                args.idle_timeout
            },
            ops_shutdown_grace: args.ops_shutdown_grace,
            max_connections: args.max_connections,
            max_claims: args.max_claims,
            max_watches_per_session: args.max_watches_per_session,
            max_watches: args.max_watches,
            http_limits: HttpLimits {
                header_timeout: args.http_header_timeout,
                idle_timeout: args.http_idle_timeout,
                max_connections: args.http_max_connections,
            },
        })
    }
}

/// The TLS files, which go together: a key needs its certificate, client
/// verification needs both.
fn tls_files(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
) -> Result<Option<TlsFiles>, String> {
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(TlsFiles {
            cert,
            key,
            client_ca,
        })),
        (None, Some(_)) => Err("--tls-key requires --tls-cert".to_owned()),
        (Some(_), None) => Err("--tls-cert requires --tls-key".to_owned()),
        (None, None) if client_ca.is_some() => {
            Err("--tls-client-ca requires --tls-cert and --tls-key".to_owned())
        }
        (None, None) => Ok(None),
    }
}

/// Checks how the admin and ops listeners are protected, and returns the
/// certificate identities that are administrators (`None`: the token, or
/// no authentication, decides).
fn admin_access(
    args: &ServeArgs,
    has_cert: bool,
    has_client_ca: bool,
    admin_listen: Option<SocketAddr>,
    has_token: bool,
) -> Result<Option<Vec<String>>, String> {
    for (flag, set) in [("--admin-tls", args.admin_tls), ("--ops-tls", args.ops_tls)] {
        if set && !has_cert {
            return Err(format!(
                "{flag} requires --tls-cert and --tls-key (it serves the protocol's certificate)"
            ));
        }
    }
    // Client certificates authenticate admin clients as a token does.
    let admin_mtls = args.admin_tls && has_client_ca;
    if let Some(addr) = admin_listen
        && !addr.ip().is_loopback()
        && !has_token
        && !admin_mtls
        && !args.admin_insecure
    {
        return Err(format!(
            "--admin-listen {addr} is not loopback: give --admin-token-file (or --admin-tls with --tls-client-ca), or --admin-insecure to serve it without authentication"
        ));
    }
    let admin_identity: Vec<String> = args
        .admin_identity
        .iter()
        .map(|identity| identity.trim().to_owned())
        .filter(|identity| !identity.is_empty())
        .collect();
    let admin_by_certificate = admin_mtls && !has_token;
    if !admin_identity.is_empty() && !admin_by_certificate {
        return Err(
            "--admin-identity requires --admin-tls with --tls-client-ca and no --admin-token-file (the token decides otherwise)"
                .to_owned(),
        );
    }
    Ok(admin_by_certificate.then_some(admin_identity))
}

/// What the files named by the flags hold, loaded before anything listens.
struct Loaded {
    tls: Option<Arc<ServerTls>>,
    acl: Option<Arc<AclFileAuthorizer>>,
    audit: Option<Arc<AuditLog>>,
    admin_token: Option<Arc<AdminToken>>,
    token_floor: Option<Arc<TokenFloor>>,
}

fn load(settings: &Settings) -> Result<Loaded, String> {
    let tls = given(settings.tls.clone(), ServerTls::load)?;
    let acl = given(settings.acl_file.clone(), AclFileAuthorizer::load)?;
    let audit = given(settings.audit_log.clone(), |target| {
        AuditLog::open_with(target, settings.audit_options)
    })?;
    let admin_token = given(settings.admin_token_file.clone(), AdminToken::load)?;
    let token_floor = given(settings.token_floor.clone(), |path| {
        TokenFloor::open(path, Arc::new(SystemWallClock))
    })?;
    Ok(Loaded {
        tls,
        acl,
        audit,
        admin_token,
        token_floor,
    })
}

/// What a flag names, loaded when the flag is given; the error as one line.
fn given<A, T, E: ToString>(
    flag: Option<A>,
    load: impl FnOnce(A) -> Result<T, E>,
) -> Result<Option<Arc<T>>, String> {
    flag.map(|arg| load(arg).map(Arc::new).map_err(|err| err.to_string()))
        .transpose()
}

/// Runs the server until SIGTERM/SIGINT. Exit 0 after a graceful shutdown,
/// 64 for invalid flags, 1 for unusable files or addresses.
pub fn main(args: ServeArgs) -> ExitCode {
    let (log_level, log_format) = (args.log_level, args.log_format);
    let settings = match Settings::from_args(args) {
        Ok(settings) => settings,
        Err(line) => {
            eprintln!("monolock: {line}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // Files are read before logging starts, so a bad one is one line.
    let loaded = match load(&settings) {
        Ok(loaded) => loaded,
        Err(line) => {
            eprintln!("monolock: {line}");
            return ExitCode::FAILURE;
        }
    };
    init_logging(log_level, log_format);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            error!(error = %err, "cannot start the runtime");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(settings, loaded)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            error!("{err:#}");
            eprintln!("monolock: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn bind_http(what: &str, addr: Option<SocketAddr>) -> anyhow::Result<Option<TcpListener>> {
    match addr {
        Some(addr) => {
            Ok(Some(TcpListener::bind(addr).await.with_context(|| {
                format!("cannot listen on {addr} ({what})")
            })?))
        }
        None => Ok(None),
    }
}

async fn serve(settings: Settings, loaded: Loaded) -> anyhow::Result<()> {
    // Handlers first: a signal that arrives right after startup is never lost.
    let signals = Signals::install()?;

    let descriptors = match monolock_server::raise_fd_limit() {
        Ok((before, after)) => {
            if before != after {
                info!(before, after, "raised the open-file limit");
            }
            Some(after)
        }
        Err(err) => {
            warn!(error = %err, "cannot raise the open-file limit");
            None
        }
    };
    let max_connections = fit_max_connections(&settings, descriptors)?;

    let (service, effective) = build_service(&settings, max_connections, loaded)?;
    let reloader = service.reloader().clone();
    let listeners = Listeners {
        protocol: monolock_server::bind(settings.listen)
            .with_context(|| format!("cannot listen on {}", settings.listen))?,
        ops: bind_http("ops", settings.ops_listen).await?,
        admin: bind_http("admin", settings.admin_listen).await?,
    };
    info!(
        version = env!("CARGO_PKG_VERSION"),
        tls = effective.tls,
        mtls = effective.mtls,
        acl = effective.acl_file.as_deref().unwrap_or(""),
        audit_log = effective.audit_log.as_deref().unwrap_or(""),
        "monolock started"
    );
    // Every listener is bound and served: tell systemd (Type=notify).
    crate::systemd::notify_ready();

    service
        .run(listeners, signals.serve(reloader))
        .await
        .context("server failed")
}

/// `--max-connections`, lowered (as Redis lowers `maxclients`) so that the
/// descriptor limit keeps a reserve: the admin and ops listeners' caps, and
/// [`monolock_server::RESERVED_DESCRIPTORS`] for files and refusals.
fn fit_max_connections(settings: &Settings, descriptors: Option<u64>) -> anyhow::Result<usize> {
    let asked = settings
        .max_connections
        .unwrap_or(monolock_server::DEFAULT_MAX_CONNECTIONS);
    let Some(limit) = descriptors else {
        return Ok(asked);
    };
    let http_listeners = [settings.ops_listen, settings.admin_listen]
        .iter()
        .filter(|addr| addr.is_some())
        .count() as u64;
    let reserve = monolock_server::RESERVED_DESCRIPTORS
        + http_listeners * settings.http_limits.max_connections as u64;
    let Some(fits) = monolock_server::connections_within(limit, reserve) else {
        anyhow::bail!(
            "the open-file limit ({limit}) leaves no descriptor for connections after the reserve ({reserve}: {} for files, --http-max-connections for each HTTP listener); raise it (ulimit -n) or lower --http-max-connections",
            monolock_server::RESERVED_DESCRIPTORS
        );
    };
    if fits < asked {
        if settings.max_connections.is_some() {
            warn!(
                asked,
                max_connections = fits,
                descriptor_limit = limit,
                reserve,
                "--max-connections lowered to fit the open-file limit less the reserve"
            );
        } else {
            info!(
                max_connections = fits,
                descriptor_limit = limit,
                reserve,
                "connection limit: the open-file limit less the reserve"
            );
        }
        return Ok(fits);
    }
    info!(
        max_connections = asked,
        descriptor_limit = limit,
        reserve,
        "connection limit"
    );
    Ok(asked)
}

/// The protocol server's configuration: its bounds, TLS and ACL.
fn server_config(
    settings: &Settings,
    max_connections: usize,
    token_floor: Option<Arc<TokenFloor>>,
    tls: &Option<Arc<ServerTls>>,
    acl: &Option<Arc<AclFileAuthorizer>>,
) -> ServerConfig {
    let mut config = ServerConfig::default()
        .with_io_timeout(settings.io_timeout)
        .with_startup_grace(settings.startup_grace)
        .with_max_claims_per_session(settings.max_claims_per_session)
        .with_idle_timeout(settings.idle_timeout)
        .with_max_connections(max_connections)
        .with_max_claims(settings.max_claims)
        .with_max_watches_per_session(settings.max_watches_per_session)
        .with_max_watches(settings.max_watches);
    if let Some(floor) = token_floor {
        config = config.with_token_floor(floor);
    }
    if let Some(tls) = tls {
        config = config.with_tls(tls.clone());
    }
    if let Some(acl) = acl {
        acl.warn_if_no_rules();
        config = config.with_authorizer(acl.clone());
    }
    config
}

/// The ops listener's metrics, with every source the settings turn on.
fn metrics(
    settings: &Settings,
    max_connections: usize,
    (admin_http, ops_http): (Arc<HttpStats>, Arc<HttpStats>),
    audit: &Option<Arc<AuditLog>>,
    admin_token: &Option<Arc<AdminToken>>,
) -> Metrics {
    let mut metrics = Metrics::new()
        .with_build_info(env!("MONOLOCK_GIT_COMMIT"))
        .with_limits(max_connections, settings.max_claims)
        .with_ops_http_stats(ops_http);
    if settings.admin_listen.is_some() {
        metrics = metrics.with_admin_http_stats(admin_http);
    }
    if let Some(audit) = audit {
        metrics = metrics.with_audit_log(audit.clone());
    }
    if let Some(token) = admin_token {
        metrics = metrics.with_admin_unauthorized(token.unauthorized_counter());
    }
    metrics
}

/// The service the settings and the loaded files describe (with the
/// reloader of its files, for SIGHUP), and the configuration the admin API
/// reports.
fn build_service(
    settings: &Settings,
    max_connections: usize,
    loaded: Loaded,
) -> anyhow::Result<(Service, EffectiveConfig)> {
    let Loaded {
        tls,
        acl,
        audit,
        admin_token,
        token_floor,
    } = loaded;
    let config = server_config(settings, max_connections, token_floor, &tls, &acl);
    let effective = EffectiveConfig {
        tls: tls.is_some(),
        mtls: tls.as_ref().is_some_and(|tls| tls.is_mutual()),
        acl_file: settings
            .acl_file
            .as_ref()
            .map(|path| path.display().to_string()),
        audit_log: settings.audit_log.as_ref().map(ToString::to_string),
        io_timeout_ms: u64::try_from(settings.io_timeout.as_millis()).unwrap_or(u64::MAX),
        ..EffectiveConfig::default()
    };
    let commit = env!("MONOLOCK_GIT_COMMIT");
    let mut service = Service::builder(config)
        .with_admin_config(effective.clone())
        .with_commit(commit)
        .with_ops_grace(settings.ops_shutdown_grace)
        .with_http_limits(settings.http_limits);
    let (admin_http, ops_http) = (Arc::<HttpStats>::default(), Arc::<HttpStats>::default());
    service = service.with_http_stats(admin_http.clone(), ops_http.clone());
    if let Some(tls) = &tls {
        service = service.reload_tls(tls.clone());
    }
    if let Some(acl) = &acl {
        service = service.reload_acl(acl.clone());
    }
    if let Some(audit) = &audit {
        service = service.with_audit(audit.clone());
    }
    if settings.ops_listen.is_some() {
        let stats = (admin_http, ops_http);
        let metrics = metrics(settings, max_connections, stats, &audit, &admin_token);
        service = service.with_metrics(Arc::new(metrics));
    }
    // The live event stream exists only with the admin listener.
    if settings.admin_listen.is_some() {
        let events = EventHub::new().context("starting the event stream")?;
        service = service.with_events(Arc::new(events));
    }
    if let Some(token) = &admin_token {
        service = service.with_admin_token(token.clone());
    }
    if let Some(named) = &settings.admin_identities
        && settings.admin_listen.is_some()
    {
        let mut identities = AdminIdentities::new(named.iter().cloned());
        if let Some(acl) = &acl {
            identities = identities.with_acl(acl.clone());
        }
        if identities.names_none() {
            warn!(
                "the admin API takes client certificates and no token, but no identity is an administrator: every request will be refused; name them with --admin-identity or the ACL file's admin list"
            );
        }
        service = service.with_admin_identities(Arc::new(identities));
    }
    service = service.with_allowed_hosts(Arc::new(settings.allowed_hosts.clone()));
    if let Some(tls) = &tls {
        if settings.admin_tls {
            service = service.with_admin_tls(tls.clone());
        }
        if settings.ops_tls {
            service = service.with_ops_tls(tls.clone());
        }
    }
    Ok((service.build(), effective))
}

/// The signals the server acts on, installed before anything listens.
struct Signals {
    terminate: Signal,
    interrupt: Signal,
    hangup: Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Self> {
        Ok(Self {
            terminate: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            interrupt: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
            hangup: signal(SignalKind::hangup()).context("installing the SIGHUP handler")?,
        })
    }

    /// The signal loop, the service's shutdown future: it ends at SIGTERM
    /// or SIGINT. A reload runs in its own task, so the loop goes on
    /// serving signals (SIGTERM above all) whatever a reload waits on.
    /// SIGHUPs that arrive while one runs start one more reload when it
    /// ends: the running one may have read its files before they changed.
    async fn serve(mut self, reloader: Reloader) {
        let mut reloading: Option<JoinHandle<()>> = None;
        let mut again = false;
        loop {
            tokio::select! {
                _ = self.terminate.recv() => { info!("SIGTERM: shutting down"); return; }
                _ = self.interrupt.recv() => { info!("SIGINT: shutting down"); return; }
                _ = self.hangup.recv() => {
                    if reloading.is_some() {
                        if !again {
                            info!("SIGHUP: a reload is running; another one follows it");
                        }
                        again = true;
                        continue;
                    }
                    info!("SIGHUP: reloading");
                    reloading = Some(spawn_reload(&reloader));
                }
                () = async {
                    match reloading.as_mut() {
                        Some(task) => { let _ = task.await; }
                        None => std::future::pending().await,
                    }
                } => {
                    reloading = None;
                    if std::mem::take(&mut again) {
                        info!("SIGHUP: reloading again, for the signals received meanwhile");
                        reloading = Some(spawn_reload(&reloader));
                    }
                }
            }
        }
    }
}

/// One reload, in a task of its own.
fn spawn_reload(reloader: &Reloader) -> JoinHandle<()> {
    let reloader = reloader.clone();
    tokio::spawn(async move {
        let report = reloader.reload().await;
        if !report.is_ok() {
            warn!(
                failures = report.errors().len(),
                "reload incomplete; the failed parts keep their previous state"
            );
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn check(args: &[&str]) -> Result<Settings, String> {
        let cli = Cli::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
            .map_err(|err| err.to_string())?;
        Settings::from_args(cli.serve)
    }

    #[test]
    fn invalid_combinations_are_one_clear_line() {
        let cases: &[(&[&str], &str)] = &[
            (&["--tls-key", "k.pem"], "--tls-key requires --tls-cert"),
            (&["--tls-cert", "c.pem"], "--tls-cert requires --tls-key"),
            (
                &["--tls-client-ca", "ca.pem"],
                "--tls-client-ca requires --tls-cert and --tls-key",
            ),
            (
                &[
                    "--tls-cert",
                    "c.pem",
                    "--tls-key",
                    "k.pem",
                    "--acl-file",
                    "acl.json",
                ],
                "--acl-file requires --tls-client-ca",
            ),
            (
                &["--acl-file", "acl.json"],
                "--acl-file requires --tls-client-ca",
            ),
            (&["--ops-listen", "nowhere"], "--ops-listen \"nowhere\""),
            (&["--admin-listen", "1.2.3.4"], "--admin-listen \"1.2.3.4\""),
            (
                &["--admin-listen", "0.0.0.0:7071"],
                "--admin-listen 0.0.0.0:7071 is not loopback: give --admin-token-file",
            ),
            (
                &["--admin-tls"],
                "--admin-tls requires --tls-cert and --tls-key",
            ),
            (
                &["--ops-tls"],
                "--ops-tls requires --tls-cert and --tls-key",
            ),
            (
                &[
                    "--admin-listen",
                    ":7071",
                    "--admin-tls",
                    "--tls-cert",
                    "c.pem",
                    "--tls-key",
                    "k.pem",
                ],
                "--admin-listen 0.0.0.0:7071 is not loopback",
            ),
        ];
        for (args, expected) in cases {
            let err = check(args).expect_err("invalid");
            assert!(err.starts_with(expected), "{args:?}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn a_grace_is_zero_up_to_a_day() {
        assert_eq!(parse_grace("0"), Ok(Duration::ZERO));
        assert_eq!(parse_grace("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_grace("24h"), Ok(MAX_STARTUP_GRACE));
        assert!(parse_grace("25h").is_err());
        assert!(parse_grace("soon").is_err());
    }

    #[test]
    fn empty_values_mean_off() {
        let settings = check(&[
            "--ops-listen",
            "",
            "--admin-listen",
            "",
            "--tls-client-ca",
            "",
            "--audit-log",
            "",
        ])
        .expect("valid");
        assert_eq!(settings.ops_listen, None);
        assert_eq!(settings.admin_listen, None);
        assert_eq!(settings.tls, None);
        assert_eq!(settings.audit_log, None);
        assert_eq!(settings.startup_grace, Duration::ZERO);
        assert_eq!(
            check(&["--token-floor", ""]).expect("valid").token_floor,
            None
        );
        let grace = check(&["--startup-grace", "2500ms"]).expect("valid");
        assert_eq!(grace.startup_grace, Duration::from_millis(2500));
    }

    #[test]
    fn full_mtls_configuration() {
        let settings = check(&[
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "--tls-client-ca",
            "ca.pem",
            "--acl-file",
            "acl.json",
            "--audit-log",
            "-",
            "--ops-listen",
            ":9090",
        ])
        .expect("valid");
        let tls = settings.tls.expect("tls");
        assert_eq!(tls.client_ca, Some(PathBuf::from("ca.pem")));
        assert_eq!(settings.audit_log, Some(AuditTarget::Stdout));
        assert_eq!(settings.ops_listen, Some("0.0.0.0:9090".parse().unwrap()));
    }

    #[test]
    fn admin_allowed_hosts_repeat_split_on_commas_and_refuse_urls() {
        let settings = check(&[
            "--admin-allowed-host",
            "locks.example.com",
            "--admin-allowed-host",
            "proxy.example:8443,[fd00::1]:7071",
        ])
        .expect("valid");
        assert_eq!(
            settings.allowed_hosts.to_string(),
            "locks.example.com,proxy.example:8443,[fd00::1]:7071"
        );
        assert!(check(&[]).expect("valid").allowed_hosts.is_empty());
        let err = check(&["--admin-allowed-host", "https://locks.example.com"])
            .expect_err("a URL is no host");
        assert!(
            err.starts_with(
                "--admin-allowed-host \"https://locks.example.com\": give the host alone"
            ),
            "{err}"
        );
    }

    #[test]
    fn an_admin_listener_off_loopback_needs_a_token_or_the_insecure_flag() {
        for args in [
            &["--admin-listen", ":7071", "--admin-token-file", "t"][..],
            &["--admin-listen", ":7071", "--admin-insecure"][..],
            &["--admin-listen", "127.0.0.1:7071"][..],
            &[
                "--admin-listen",
                ":7071",
                "--admin-tls",
                "--tls-cert",
                "c.pem",
                "--tls-key",
                "k.pem",
                "--tls-client-ca",
                "ca.pem",
            ][..],
        ] {
            check(args).unwrap_or_else(|err| panic!("{args:?}: {err}"));
        }
    }
}
