//! Operator commands that talk to a running server's admin API:
//! `monolock locks`, `lock`, `release`, `kick`, `events`, `info`.
//!
//! A readable table by default, the API's JSON with `--json`. Exit status 0
//! on success, 1 if the server answered with an error (unknown lock, absent
//! waiter, wrong token) or could not be reached, 64 for bad arguments.
//! Names and identities are printed with control characters escaped, so a
//! lock name can never move the cursor or forge a row.
//!
//! The admin token, when the server wants one, comes from
//! `--admin-token-file` or else `$MONOLOCK_ADMIN_TOKEN`.
//!
//! An admin listener served with `--admin-tls` is reached over HTTPS with
//! `--admin-ca` (and, under mTLS, `--admin-cert`/`--admin-key`), through
//! the client crate's [`TlsConnector`]: the same rustls `ring` setup and
//! certificate errors as `monolock exec --tls-ca`.

use std::{
    borrow::Cow,
    path::PathBuf,
    process::ExitCode,
    time::{Duration, SystemTime},
};

use clap::{Args, Subcommand};
use http_body_util::{BodyExt, Empty};
use hyper::{Method, Request, StatusCode, Uri, body::Bytes, client::conn::http1};
use hyper_util::rt::TokioIo;
use monolock_client::{Connector as _, TcpConnector, TlsConnector};
use monolock_server::admin::{ErrorBody, HolderInfo, LockInfo, LockList, ServerInfo, WaiterInfo};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::de::DeserializeOwned;

/// Default for `--admin`: the default `--admin-listen` of a local server.
const DEFAULT_ADMIN: &str = "127.0.0.1:7071";

/// How long one request may take, connection included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything but RFC 3986's unreserved characters is encoded, so a name
/// with `/`, `?`, `%` or spaces is exactly one path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Where the admin API is and how to print its answers.
#[derive(Debug, Args)]
pub struct AdminArgs {
    /// Admin API of the server: HOST:PORT, or an http:// or https:// URL.
    #[arg(long, env = "MONOLOCK_ADMIN_ADDRESS", default_value = DEFAULT_ADMIN, value_name = "ADDR")]
    pub(crate) admin: String,

    /// Speak HTTPS to the admin API, trusting the CA certificates in this
    /// PEM file (a HOST:PORT address then means https://).
    #[arg(long, env = "MONOLOCK_ADMIN_CA", value_name = "FILE")]
    admin_ca: Option<PathBuf>,

    /// Client certificate chain (PEM, leaf first) for an admin listener
    /// under mTLS; needs --admin-key and --admin-ca.
    #[arg(long, env = "MONOLOCK_ADMIN_CERT", value_name = "FILE")]
    admin_cert: Option<PathBuf>,

    /// The client certificate's private key (PEM); needs --admin-cert.
    #[arg(long, env = "MONOLOCK_ADMIN_KEY", value_name = "FILE")]
    admin_key: Option<PathBuf>,

    /// File holding the admin bearer token [default: $MONOLOCK_ADMIN_TOKEN, else none].
    #[arg(long, value_name = "PATH")]
    admin_token_file: Option<PathBuf>,

    /// Print the API's JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The CA file and, for mTLS, the client certificate and key files.
type TlsFiles<'a> = (&'a PathBuf, Option<(&'a PathBuf, &'a PathBuf)>);

/// The variable holding the admin token itself (a file is preferred: a
/// variable is visible to every process of the same user).
const TOKEN_VARIABLE: &str = "MONOLOCK_ADMIN_TOKEN";

impl AdminArgs {
    /// The bearer token to send, if any.
    fn token(&self) -> Result<Option<String>, String> {
        let token = match &self.admin_token_file {
            Some(path) => std::fs::read_to_string(path).map_err(|err| {
                format!("cannot read the admin token file {}: {err}", path.display())
            })?,
            None => match std::env::var(TOKEN_VARIABLE) {
                Ok(token) => token,
                Err(_) => return Ok(None),
            },
        };
        let token = token.trim();
        Ok((!token.is_empty()).then(|| token.to_owned()))
    }

    /// The admin API's base URL and, for https://, the TLS connector the
    /// flags describe; a contradiction between them is one line.
    fn endpoint(&self) -> Result<(String, Option<TlsConnector>), String> {
        let (url, tls) = self.transport()?;
        let Some((ca, identity)) = tls else {
            return Ok((url, None));
        };
        let mut builder = TlsConnector::builder().with_ca_file(ca);
        if let Some((cert, key)) = identity {
            builder = builder.with_client_cert_files(cert, key);
        }
        let tls = builder
            .build()
            .map_err(|err| chain(&err as &(dyn std::error::Error + 'static)))?;
        Ok((url, Some(tls)))
    }

    /// The base URL and, for HTTPS, the CA and the client identity; a
    /// contradiction between the address and the TLS flags is one line.
    fn transport(&self) -> Result<(String, Option<TlsFiles<'_>>), String> {
        let url = base_url(&self.admin, self.admin_ca.is_some());
        let https = url.starts_with("https://");
        let identity = match (&self.admin_cert, &self.admin_key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (Some(_), None) => {
                return Err("--admin-cert needs --admin-key (its private key)".to_owned());
            }
            (None, Some(_)) => {
                return Err("--admin-key needs --admin-cert (its certificate)".to_owned());
            }
            (None, None) => None,
        };
        match (&self.admin_ca, https) {
            (Some(ca), true) => Ok((url, Some((ca, identity)))),
            (None, true) => Err(format!(
                "the admin address {url} is HTTPS: give --admin-ca (the CA that signed the admin listener's certificate)"
            )),
            (Some(_), false) => Err(format!(
                "--admin-ca needs an https:// admin address or HOST:PORT, not {url}"
            )),
            (None, false) if identity.is_some() => {
                Err("--admin-cert and --admin-key need --admin-ca (TLS is off)".to_owned())
            }
            (None, false) => Ok((url, None)),
        }
    }
}

/// The operator commands.
#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// List held locks with their holders and queues.
    Locks {
        /// Only locks whose name matches this glob (`*` crosses `/`, `?` is one character).
        #[arg(long = "match", value_name = "GLOB")]
        pattern: Option<String>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Show one lock: its holder and its queue in order.
    Lock {
        /// The lock's name, exactly (case-sensitive).
        name: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Force-release a lock: the holder gets ERROR 0x02 and the next waiter is promoted.
    Release {
        /// The lock's name, exactly (case-sensitive).
        name: String,
        /// Release only the grant with this fencing token (as `monolock lock` shows it),
        /// so running the command twice never releases the next holder.
        #[arg(long, value_name = "N")]
        token: Option<u64>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Remove one waiter from a lock's queue (it gets ERROR 0x02); the others keep their order.
    Kick {
        /// The lock's name, exactly (case-sensitive).
        name: String,
        /// The waiter's address exactly as `monolock lock NAME` lists it.
        remote_addr: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Follow every change live, one line per event (the current locks first).
    Events {
        /// Only events of locks whose name matches this glob.
        #[arg(long = "match", value_name = "GLOB")]
        pattern: Option<String>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Show the server's version, configuration and counts.
    Info {
        #[command(flatten)]
        admin: AdminArgs,
    },
}

impl AdminCommand {
    fn admin(&self) -> &AdminArgs {
        match self {
            Self::Locks { admin, .. }
            | Self::Lock { admin, .. }
            | Self::Release { admin, .. }
            | Self::Kick { admin, .. }
            | Self::Events { admin, .. }
            | Self::Info { admin } => admin,
        }
    }
}

/// Exit status for flags that contradict each other.
const EXIT_USAGE: u8 = 64;

/// Runs one operator command.
pub fn main(command: AdminCommand) -> ExitCode {
    if let Err(line) = command.admin().transport() {
        eprintln!("monolock: {line}");
        return ExitCode::from(EXIT_USAGE);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("monolock: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    if let AdminCommand::Events { pattern, admin } = command {
        return match runtime.block_on(crate::events_cli::follow(&admin, pattern.as_deref())) {
            Ok(()) => ExitCode::SUCCESS,
            Err(line) => {
                eprintln!("monolock: {line}");
                ExitCode::FAILURE
            }
        };
    }
    match runtime.block_on(run(command)) {
        Ok(output) => {
            print!("{output}");
            ExitCode::SUCCESS
        }
        Err(line) => {
            eprintln!("monolock: {line}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: AdminCommand) -> Result<String, String> {
    match command {
        AdminCommand::Locks { pattern, admin } => {
            let path = match &pattern {
                Some(glob) => format!("/api/locks?match={}", encode(glob)),
                None => "/api/locks".to_owned(),
            };
            let (body, list) = call::<LockList>(&admin, Method::GET, &path).await?;
            Ok(if admin.json {
                body
            } else if list.locks.is_empty() {
                match &pattern {
                    Some(glob) => format!("no held lock matches {}\n", printable(glob)),
                    None => "no locks held\n".to_owned(),
                }
            } else {
                locks_table(&list.locks, SystemTime::now())
            })
        }
        AdminCommand::Lock { name, admin } => {
            let path = format!("/api/locks/{}", encode(&name));
            let (body, lock) = call::<LockInfo>(&admin, Method::GET, &path).await?;
            Ok(if admin.json {
                body
            } else {
                lock_detail(&lock, SystemTime::now())
            })
        }
        AdminCommand::Release { name, token, admin } => {
            let mut path = format!("/api/locks/{}/release", encode(&name));
            if let Some(token) = token {
                path.push_str(&format!("?token={token}"));
            }
            let (body, holder) = call::<HolderInfo>(&admin, Method::POST, &path).await?;
            Ok(if admin.json {
                body
            } else {
                format!(
                    "released {}: holder {} (token {}) got ERROR 0x02\n",
                    printable(&name),
                    holder.remote_addr,
                    holder.token
                )
            })
        }
        AdminCommand::Kick {
            name,
            remote_addr,
            admin,
        } => {
            let path = format!(
                "/api/locks/{}/waiters/{}",
                encode(&name),
                encode(&remote_addr)
            );
            let (body, waiter) = call::<WaiterInfo>(&admin, Method::DELETE, &path).await?;
            Ok(if admin.json {
                body
            } else {
                format!(
                    "removed waiter {} from the queue of {} (it got ERROR 0x02)\n",
                    waiter.remote_addr,
                    printable(&name)
                )
            })
        }
        AdminCommand::Info { admin } => {
            let (body, info) = call::<ServerInfo>(&admin, Method::GET, "/api/info").await?;
            Ok(if admin.json { body } else { info_table(&info) })
        }
        AdminCommand::Events { .. } => Err("events streams; it is not a request".to_owned()),
    }
}

pub(crate) fn encode(text: &str) -> String {
    utf8_percent_encode(text, SEGMENT).to_string()
}

/// `admin` as a base URL: kept if it has a scheme, else `https://` when TLS
/// was asked for and `http://` otherwise.
fn base_url(admin: &str, tls: bool) -> String {
    let admin = admin.trim_end_matches('/');
    if admin.contains("://") {
        admin.to_owned()
    } else if tls {
        format!("https://{admin}")
    } else {
        format!("http://{admin}")
    }
}

/// Sends one request and returns the response (head only; the body is
/// read by the caller), bounded by [`REQUEST_TIMEOUT`]; errors are one line.
pub(crate) async fn send(
    admin: &AdminArgs,
    method: Method,
    path: &str,
    accept: &str,
) -> Result<(String, hyper::Response<hyper::body::Incoming>), String> {
    let (base, tls) = admin.endpoint()?;
    let url = format!("{base}{path}");
    let uri: Uri = url
        .parse()
        .map_err(|err| format!("invalid admin address {:?}: {err}", admin.admin))?;
    let authority = match uri.authority() {
        Some(authority) if authority.port().is_some() => authority.to_string(),
        Some(authority) => format!("{authority}:{}", if tls.is_some() { 443 } else { 80 }),
        None => return Err(format!("invalid admin address {:?}: no host", admin.admin)),
    };
    // Origin form and a Host header, as an HTTP/1.1 client sends them.
    let target = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let mut request = Request::builder()
        .method(method)
        .uri(target)
        .header(hyper::header::HOST, authority.as_str())
        .header(hyper::header::ACCEPT, accept)
        .header(monolock_server::REQUEST_HEADER, "monolock");
    if let Some(token) = admin.token()? {
        request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = request
        .body(Empty::<Bytes>::new())
        .map_err(|err| format!("invalid admin address {:?}: {err}", admin.admin))?;
    let exchange = async {
        let mut sender = match &tls {
            None => handshake(TcpConnector.connect(&authority).await?.into_stream()).await?,
            Some(tls) => handshake(tls.connect(&authority).await?.into_stream()).await?,
        };
        sender
            .send_request(request)
            .await
            .map_err(|err| Box::new(err) as Box<dyn std::error::Error + Send + Sync>)
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
        Ok(Ok(response)) => Ok((url, response)),
        Ok(Err(err)) if is_not_http(err.as_ref()) => Err(format!(
            "{authority} did not answer in HTTP: is it the lock protocol's port (--listen) \
             rather than the admin listener (--admin-listen), or an HTTPS listener (give --admin-ca)?"
        )),
        Ok(Err(err)) => Err(format!(
            "cannot reach the admin API at {url}: {}",
            chain(err.as_ref())
        )),
        Err(_) => Err(no_answer(&url)),
    }
}

/// True if the peer answered, but not in HTTP (hyper could not parse it).
fn is_not_http(err: &(dyn std::error::Error + 'static)) -> bool {
    err.downcast_ref::<hyper::Error>()
        .is_some_and(hyper::Error::is_parse)
}

/// HTTP/1.1 over one connection (plain TCP or TLS); the connection is
/// driven by its own task for as long as the response body is read.
async fn handshake<S>(
    stream: S,
) -> Result<http1::SendRequest<Empty<Bytes>>, Box<dyn std::error::Error + Send + Sync>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

fn no_answer(url: &str) -> String {
    format!(
        "no answer from the admin API at {url} within {}s",
        REQUEST_TIMEOUT.as_secs()
    )
}

/// The API's error message of a failed request, as one line.
pub(crate) async fn refusal(url: &str, response: hyper::Response<hyper::body::Incoming>) -> String {
    let status = response.status();
    let body = match tokio::time::timeout(REQUEST_TIMEOUT, response.into_body().collect()).await {
        Ok(Ok(body)) => body.to_bytes(),
        Ok(Err(err)) => return format!("cannot read the answer of {url}: {err}"),
        Err(_) => return no_answer(url),
    };
    let text = String::from_utf8_lossy(&body);
    let message = serde_json::from_str::<ErrorBody>(&text)
        .map(|body| body.error)
        .unwrap_or_else(|_| text.trim().to_owned());
    describe_status(status, &message)
}

/// One request; on 2xx the body (newline-terminated) and its decoded value,
/// otherwise the API's error message as one line.
async fn call<T: DeserializeOwned>(
    admin: &AdminArgs,
    method: Method,
    path: &str,
) -> Result<(String, T), String> {
    let (url, response) = send(admin, method, path, "application/json").await?;
    if !response.status().is_success() {
        return Err(refusal(&url, response).await);
    }
    let body = match tokio::time::timeout(REQUEST_TIMEOUT, response.into_body().collect()).await {
        Ok(Ok(body)) => body.to_bytes(),
        Ok(Err(err)) => return Err(format!("cannot read the answer of {url}: {err}")),
        Err(_) => return Err(no_answer(&url)),
    };
    let text = String::from_utf8_lossy(&body).into_owned();
    let value = serde_json::from_str(&text)
        .map_err(|err| format!("unexpected answer from {url}: {err}"))?;
    let mut body = text;
    if !body.ends_with('\n') {
        body.push('\n');
    }
    Ok((body, value))
}

fn describe_status(status: StatusCode, message: &str) -> String {
    if message.is_empty() {
        format!("admin API answered {status}")
    } else {
        format!("{message} ({status})")
    }
}

/// An error and its sources on one line.
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut line = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
}

/// `2m13s`-style age of an RFC 3339 time, or `?` if it cannot be read.
fn age(rfc3339: &str, now: SystemTime) -> String {
    match humantime::parse_rfc3339(rfc3339) {
        Ok(then) => {
            let elapsed = now.duration_since(then).unwrap_or_default();
            humantime::format_duration(Duration::from_secs(elapsed.as_secs())).to_string()
        }
        Err(_) => "?".to_owned(),
    }
}

fn identity(identity: &str) -> Cow<'_, str> {
    if identity.is_empty() {
        Cow::Borrowed("-")
    } else {
        printable(identity)
    }
}

/// `text` with control characters (and the invisible characters that
/// reorder or hide text) written as Rust escapes: `\n`, `\t`, `\u{1b}`.
pub(crate) fn printable(text: &str) -> Cow<'_, str> {
    fn hidden(c: char) -> bool {
        c.is_control()
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    }
    if !text.chars().any(hidden) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if hidden(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

fn locks_table(locks: &[LockInfo], now: SystemTime) -> String {
    let rows = locks
        .iter()
        .map(|lock| {
            vec![
                printable(&lock.name).into_owned(),
                lock.holder.remote_addr.clone(),
                identity(&lock.holder.identity).into_owned(),
                lock.holder.token.to_string(),
                age(&lock.holder.since, now),
                format!("{}ms", lock.holder.lease_ms),
                lock.waiters.len().to_string(),
            ]
        })
        .collect();
    table(
        &[
            "NAME", "HOLDER", "IDENTITY", "TOKEN", "HELD", "LEASE", "WAITERS",
        ],
        rows,
    )
}

fn lock_detail(lock: &LockInfo, now: SystemTime) -> String {
    let holder = &lock.holder;
    let mut out = table(
        &["", ""],
        vec![
            vec!["lock".into(), printable(&lock.name).into_owned()],
            vec!["holder".into(), holder.remote_addr.clone()],
            vec!["identity".into(), identity(&holder.identity).into_owned()],
            vec!["token".into(), holder.token.to_string()],
            vec![
                "since".into(),
                format!("{} ({} ago)", holder.since, age(&holder.since, now)),
            ],
            vec!["lease".into(), format!("{}ms", holder.lease_ms)],
            vec!["waiters".into(), lock.waiters.len().to_string()],
        ],
    );
    if !lock.waiters.is_empty() {
        out.push('\n');
        let rows = lock
            .waiters
            .iter()
            .enumerate()
            .map(|(i, waiter)| {
                vec![
                    (i + 1).to_string(),
                    waiter.remote_addr.clone(),
                    identity(&waiter.identity).into_owned(),
                    format!("{} ({} ago)", waiter.queued_at, age(&waiter.queued_at, now)),
                    format!("{}ms", waiter.lease_ms),
                ]
            })
            .collect();
        out.push_str(&table(
            &["#", "REMOTE_ADDR", "IDENTITY", "QUEUED_AT", "LEASE"],
            rows,
        ));
    }
    out
}

fn info_table(info: &ServerInfo) -> String {
    let config = &info.config;
    let or_off = |value: &Option<String>| match value {
        Some(value) => printable(value).into_owned(),
        None => "off".to_owned(),
    };
    let tls = match (config.tls, config.mtls) {
        (_, true) => "mTLS (client certificates required)",
        (true, false) => "TLS",
        (false, false) => "off",
    };
    let uptime = Duration::from_secs(info.uptime_ms / 1000);
    table(
        &["", ""],
        vec![
            vec![
                "version".into(),
                format!("{} (commit {})", info.version, info.commit),
            ],
            vec![
                "uptime".into(),
                humantime::format_duration(uptime).to_string(),
            ],
            vec!["listen".into(), config.listen.clone()],
            vec!["ops listen".into(), or_off(&config.ops_listen)],
            vec!["admin listen".into(), or_off(&config.admin_listen)],
            vec!["tls".into(), tls.to_owned()],
            vec!["acl file".into(), or_off(&config.acl_file)],
            vec!["audit log".into(), or_off(&config.audit_log)],
            vec!["io timeout".into(), format!("{}ms", config.io_timeout_ms)],
            vec!["locks".into(), info.locks.to_string()],
            vec!["waiters".into(), info.waiters.to_string()],
            vec!["connections".into(), info.connections.to_string()],
        ],
    )
}

/// Left-aligned columns separated by two spaces; a header row unless every
/// header is empty.
fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (cell, width) in cells.zip(&widths) {
            text.push_str(cell);
            text.extend(std::iter::repeat_n(' ', width - cell.chars().count() + 2));
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    if headers.iter().any(|h| !h.is_empty()) {
        line(&mut headers.iter().copied());
    }
    for row in &rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock() -> LockInfo {
        LockInfo {
            name: "nightly/import".into(),
            holder: HolderInfo {
                identity: "spiffe://prod/worker/1".into(),
                remote_addr: "10.0.0.5:52114".into(),
                since: "2026-08-08T12:00:00Z".into(),
                lease_ms: 2000,
                token: 1_872_956_384_870_401,
            },
            waiters: vec![WaiterInfo {
                identity: String::new(),
                remote_addr: "10.0.0.6:41230".into(),
                queued_at: "2026-08-08T12:00:07Z".into(),
                lease_ms: 2000,
            }],
        }
    }

    #[test]
    fn names_are_one_encoded_segment() {
        assert_eq!(encode("nightly/import"), "nightly%2Fimport");
        assert_eq!(encode("a b?%é"), "a%20b%3F%25%C3%A9");
        assert_eq!(encode("[::1]:5000"), "%5B%3A%3A1%5D%3A5000");
        assert_eq!(encode("x-y_z.~"), "x-y_z.~");
    }

    #[test]
    fn admin_address_forms() {
        assert_eq!(base_url("127.0.0.1:7071", false), "http://127.0.0.1:7071");
        assert_eq!(base_url("127.0.0.1:7071", true), "https://127.0.0.1:7071");
        assert_eq!(
            base_url("http://ops.example:80/", false),
            "http://ops.example:80"
        );
    }

    #[test]
    fn tables_are_aligned_and_readable() {
        let now = humantime::parse_rfc3339("2026-08-08T12:03:12Z").unwrap();
        let text = locks_table(&[lock()], now);
        assert_eq!(
            text,
            "NAME            HOLDER          IDENTITY                TOKEN             HELD    LEASE   WAITERS\n\
             nightly/import  10.0.0.5:52114  spiffe://prod/worker/1  1872956384870401  3m 12s  2000ms  1\n"
        );
        let detail = lock_detail(&lock(), now);
        assert!(detail.starts_with("lock      nightly/import\n"), "{detail}");
        assert!(detail.contains("1  10.0.0.6:41230  -"), "{detail}");
        assert!(detail.contains("(3m 5s ago)"), "{detail}");
    }

    #[test]
    fn control_characters_are_escaped_in_tables() {
        assert_eq!(printable("plain/name é"), "plain/name é");
        assert_eq!(printable("a\nb\tc\u{1b}[2J"), "a\\nb\\tc\\u{1b}[2J");
        assert_eq!(printable("left\u{202e}right"), "left\\u{202e}right");
        let now = humantime::parse_rfc3339("2026-08-08T12:03:12Z").unwrap();
        let mut evil = lock();
        evil.name = "x\ny".into();
        evil.holder.identity = "id\r".into();
        let text = locks_table(std::slice::from_ref(&evil), now);
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.contains("x\\ny") && text.contains("id\\r"), "{text}");
        let detail = lock_detail(&evil, now);
        assert!(detail.starts_with("lock      x\\ny\n"), "{detail}");
    }
}
