//! Operator commands that talk to a running server's admin API:
//! `monolock locks`, `lock`, `release`, `kick`.
//!
//! A readable table by default, the API's JSON with `--json`. Exit status 0
//! on success, 1 if the server answered with an error (unknown lock, absent
//! waiter) or could not be reached, 64 for bad arguments.

use std::{
    process::ExitCode,
    time::{Duration, SystemTime},
};

use clap::{Args, Subcommand};
use http_body_util::{BodyExt, Empty};
use hyper::{Method, Request, StatusCode, body::Bytes};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use monolock_server::admin::{ErrorBody, HolderInfo, LockInfo, LockList, WaiterInfo};
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
    /// Admin API of the server: HOST:PORT or an http:// URL.
    #[arg(long, env = "MONOLOCK_ADMIN_ADDRESS", default_value = DEFAULT_ADMIN, value_name = "ADDR")]
    admin: String,

    /// Print the API's JSON instead of a table.
    #[arg(long)]
    json: bool,
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
}

/// Runs one operator command.
pub fn main(command: AdminCommand) -> ExitCode {
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
        AdminCommand::Release { name, admin } => {
            let path = format!("/api/locks/{}/release", encode(&name));
            let (body, holder) = call::<HolderInfo>(&admin, Method::POST, &path).await?;
            Ok(if admin.json {
                body
            } else {
                format!(
                    "released {name}: holder {} (token {}) got ERROR 0x02\n",
                    holder.remote_addr, holder.token
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
                    "removed waiter {} from the queue of {name} (it got ERROR 0x02)\n",
                    waiter.remote_addr
                )
            })
        }
    }
}

fn encode(text: &str) -> String {
    utf8_percent_encode(text, SEGMENT).to_string()
}

fn base_url(admin: &str) -> String {
    let admin = admin.trim_end_matches('/');
    if admin.contains("://") {
        admin.to_owned()
    } else {
        format!("http://{admin}")
    }
}

/// One request; on 2xx the body (newline-terminated) and its decoded value,
/// otherwise the API's error message as one line.
async fn call<T: DeserializeOwned>(
    admin: &AdminArgs,
    method: Method,
    path: &str,
) -> Result<(String, T), String> {
    let url = format!("{}{path}", base_url(&admin.admin));
    let request = Request::builder()
        .method(method)
        .uri(&url)
        .header(hyper::header::ACCEPT, "application/json")
        .body(Empty::<Bytes>::new())
        .map_err(|err| format!("invalid admin address {:?}: {err}", admin.admin))?;
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let exchange = async {
        let response = client.request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>((status, body))
    };
    let (status, body) = match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(err)) => {
            return Err(format!(
                "cannot reach the admin API at {url}: {}",
                chain(&*err)
            ));
        }
        Err(_) => {
            return Err(format!(
                "no answer from the admin API at {url} within {}s",
                REQUEST_TIMEOUT.as_secs()
            ));
        }
    };
    let text = String::from_utf8_lossy(&body).into_owned();
    if !status.is_success() {
        let message = serde_json::from_str::<ErrorBody>(&text)
            .map(|body| body.error)
            .unwrap_or_else(|_| text.trim().to_owned());
        return Err(describe_status(status, &message));
    }
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

fn identity(identity: &str) -> &str {
    if identity.is_empty() { "-" } else { identity }
}

fn locks_table(locks: &[LockInfo], now: SystemTime) -> String {
    if locks.is_empty() {
        return "no locks held\n".to_owned();
    }
    let rows = locks
        .iter()
        .map(|lock| {
            vec![
                lock.name.clone(),
                lock.holder.remote_addr.clone(),
                identity(&lock.holder.identity).to_owned(),
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
            vec!["lock".into(), lock.name.clone()],
            vec!["holder".into(), holder.remote_addr.clone()],
            vec!["identity".into(), identity(&holder.identity).to_owned()],
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
                    identity(&waiter.identity).to_owned(),
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
        assert_eq!(base_url("127.0.0.1:7071"), "http://127.0.0.1:7071");
        assert_eq!(base_url("http://ops.example:80/"), "http://ops.example:80");
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
        assert_eq!(locks_table(&[], now), "no locks held\n");
    }
}
