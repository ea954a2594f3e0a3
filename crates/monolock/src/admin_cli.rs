//! Operator commands that talk to a running server's admin API:
//! `monolock locks`, `lock`, `release`, `kick`, `sessions`, `info` (and
//! `events`, in its own module).
//!
//! A protocol version 2 claim is named by its session and claim id
//! (`monolock locks` adds `PROTOCOL SESSION CLAIM` columns when any holder
//! is one; a table of version 1 holders only is as it always was).
//!
//! A readable table by default, the API's JSON with `--json`. Exit status 0
//! on success, 1 if the server answered with an error (unknown lock, absent
//! waiter, wrong token) or could not be reached, 64 for bad arguments.
//! Names and identities are printed with control characters escaped, so a
//! lock name can never move the cursor or forge a row.

use std::{
    process::ExitCode,
    time::{Duration, SystemTime},
};

use clap::Subcommand;
use hyper::Method;
use monolock_proto::{LockName, MAX_NAME_LEN};
use monolock_server::admin::{
    GraceInfo, HolderInfo, LockInfo, LockList, ServerInfo, SessionEntry, SessionList, WaiterInfo,
};

use crate::{
    admin_client::{AdminArgs, call, encode},
    args::EXIT_USAGE,
    render::{age, identity, printable, table},
};

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
    /// Remove one waiter from a lock's queue (it gets ERROR 0x02, a protocol v2 claim REVOKED); the others keep their order.
    Kick {
        /// The lock's name, exactly (case-sensitive).
        name: String,
        /// The waiter's address exactly as `monolock lock NAME` lists it.
        remote_addr: String,
        /// For a protocol v2 session: the claim to remove (the CLAIM column of
        /// `monolock lock NAME`); without it, the first waiter at the address.
        #[arg(long, value_name = "ID")]
        claim: Option<u32>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// List open protocol v2 sessions with their claims held and waiting.
    Sessions {
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
    /// The lock name the command names, checked as the protocol checks
    /// it, so that an empty or overlong name is one line, not a 404.
    fn check_name(&self) -> Result<(), String> {
        let name = match self {
            Self::Lock { name, .. } | Self::Release { name, .. } | Self::Kick { name, .. } => name,
            Self::Locks { .. } | Self::Sessions { .. } | Self::Info { .. } => return Ok(()),
        };
        LockName::new(name).map(drop).map_err(|err| {
            format!(
                "invalid lock name {:?}: {err} (names are 1 to {MAX_NAME_LEN} bytes of UTF-8)",
                printable(name)
            )
        })
    }

    fn admin(&self) -> &AdminArgs {
        match self {
            Self::Locks { admin, .. }
            | Self::Lock { admin, .. }
            | Self::Release { admin, .. }
            | Self::Kick { admin, .. }
            | Self::Sessions { admin }
            | Self::Info { admin } => admin,
        }
    }
}

/// Runs one operator command.
pub fn main(command: AdminCommand) -> ExitCode {
    if let Err(line) = command.check_name() {
        eprintln!("monolock: {line}");
        return ExitCode::from(EXIT_USAGE);
    }
    let runtime = match crate::admin_client::runtime(command.admin()) {
        Ok(runtime) => runtime,
        Err(code) => return code,
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
        AdminCommand::Locks { pattern, admin } => locks(pattern, &admin).await,
        AdminCommand::Lock { name, admin } => {
            let path = format!("/api/locks/{}", encode(&name));
            let (body, lock) = call::<LockInfo>(&admin, Method::GET, &path).await?;
            Ok(if admin.json {
                body
            } else {
                lock_detail(&lock, SystemTime::now())
            })
        }
        AdminCommand::Release { name, token, admin } => release(name, token, &admin).await,
        AdminCommand::Kick {
            name,
            remote_addr,
            claim,
            admin,
        } => kick(name, remote_addr, claim, &admin).await,
        AdminCommand::Sessions { admin } => {
            let (body, list) = call::<SessionList>(&admin, Method::GET, "/api/sessions").await?;
            Ok(if admin.json {
                body
            } else if list.sessions.is_empty() {
                "no protocol v2 sessions open\n".to_owned()
            } else {
                sessions_table(&list.sessions, SystemTime::now())
            })
        }
        AdminCommand::Info { admin } => {
            let (body, info) = call::<ServerInfo>(&admin, Method::GET, "/api/info").await?;
            Ok(if admin.json { body } else { info_table(&info) })
        }
    }
}

/// `monolock locks`: the held locks, as a table or the API's JSON.
async fn locks(pattern: Option<String>, admin: &AdminArgs) -> Result<String, String> {
    let path = match &pattern {
        Some(glob) => format!("/api/locks?match={}", encode(glob)),
        None => "/api/locks".to_owned(),
    };
    let (body, list) = call::<LockList>(admin, Method::GET, &path).await?;
    if admin.json {
        return Ok(body);
    }
    // Nothing is granted during the startup grace: say so, or an
    // empty table would read as a free server.
    let mut out = match call::<ServerInfo>(admin, Method::GET, "/api/info").await {
        Ok((_, info)) => grace_line(&info.startup_grace).unwrap_or_default(),
        Err(_) => String::new(),
    };
    if list.locks.is_empty() {
        match &pattern {
            Some(glob) => out.push_str(&format!("no held lock matches {}\n", printable(glob))),
            None => out.push_str("no locks held\n"),
        }
    } else {
        out.push_str(&locks_table(&list.locks, SystemTime::now()));
    }
    Ok(out)
}

/// `monolock release`: force-releases a lock and says what its holder was told.
async fn release(name: String, token: Option<u64>, admin: &AdminArgs) -> Result<String, String> {
    let mut path = format!("/api/locks/{}/release", encode(&name));
    if let Some(token) = token {
        path.push_str(&format!("?token={token}"));
    }
    let (body, holder) = call::<HolderInfo>(admin, Method::POST, &path).await?;
    Ok(if admin.json {
        body
    } else {
        match (holder.v2.session, holder.v2.claim) {
            (Some(session), Some(claim)) => format!(
                "released {}: claim {claim} of session {session} at {} (token {}) was told REVOKED; its session lives on\n",
                printable(&name),
                holder.remote_addr,
                holder.token
            ),
            _ => format!(
                "released {}: holder {} (token {}) got ERROR 0x02\n",
                printable(&name),
                holder.remote_addr,
                holder.token
            ),
        }
    })
}

/// `monolock kick`: removes one waiter from a lock's queue.
async fn kick(
    name: String,
    remote_addr: String,
    claim: Option<u32>,
    admin: &AdminArgs,
) -> Result<String, String> {
    let mut path = format!(
        "/api/locks/{}/waiters/{}",
        encode(&name),
        encode(&remote_addr)
    );
    if let Some(claim) = claim {
        path.push_str(&format!("?claim={claim}"));
    }
    let (body, waiter) = call::<WaiterInfo>(admin, Method::DELETE, &path).await?;
    Ok(if admin.json {
        body
    } else {
        match (waiter.v2.session, waiter.v2.claim) {
            (Some(session), Some(claim)) => format!(
                "removed claim {claim} of session {session} at {} from the queue of {} (it was told REVOKED; its session lives on)\n",
                waiter.remote_addr,
                printable(&name)
            ),
            _ => format!(
                "removed waiter {} from the queue of {} (it got ERROR 0x02)\n",
                waiter.remote_addr,
                printable(&name)
            ),
        }
    })
}

/// The `PROTOCOL`, `SESSION` and `CLAIM` cells of a holder or waiter:
/// `1 - -` for version 1.
fn claim_cells(session: Option<u64>, claim: Option<u32>) -> [String; 3] {
    match (session, claim) {
        (Some(session), Some(claim)) => ["2".into(), session.to_string(), claim.to_string()],
        _ => ["1".into(), "-".into(), "-".into()],
    }
}

fn locks_table(locks: &[LockInfo], now: SystemTime) -> String {
    // Columns for protocol v2 only when a v2 claim holds a lock, so that
    // a v1-only table stays what scripts already parse.
    let any_v2 = locks.iter().any(|lock| lock.holder.v2.claim.is_some());
    // And a VALUE column, last, only when some holder announced a value.
    let any_value = locks.iter().any(|lock| !lock.holder.value.is_empty());
    let rows = locks
        .iter()
        .map(|lock| {
            let mut row = vec![
                printable(&lock.name).into_owned(),
                lock.holder.remote_addr.clone(),
                identity(&lock.holder.identity).into_owned(),
                lock.holder.token.to_string(),
                age(&lock.holder.since, now),
                millis(lock.holder.lease_ms),
                lock.waiters.len().to_string(),
            ];
            if any_v2 {
                row.extend(claim_cells(lock.holder.v2.session, lock.holder.v2.claim));
            }
            if any_value {
                row.push(value_cell(&lock.holder.value));
            }
            row
        })
        .collect();
    let mut headers = vec![
        "NAME", "HOLDER", "IDENTITY", "TOKEN", "HELD", "LEASE", "WAITERS",
    ];
    if any_v2 {
        headers.extend(["PROTOCOL", "SESSION", "CLAIM"]);
    }
    if any_value {
        headers.push("VALUE");
    }
    table(&headers, rows)
}

/// The most characters of a value a table cell shows; `monolock lock NAME`
/// and the admin API show it whole.
const VALUE_CELL_CHARS: usize = 48;

/// A claim's value in a table: `-` when empty, control characters
/// escaped, cut to [`VALUE_CELL_CHARS`] with `...`.
fn value_cell(value: &str) -> String {
    if value.is_empty() {
        return "-".to_owned();
    }
    let shown = printable(value);
    if shown.chars().count() <= VALUE_CELL_CHARS {
        return shown.into_owned();
    }
    let mut cut: String = shown.chars().take(VALUE_CELL_CHARS - 3).collect();
    cut.push_str("...");
    cut
}

fn sessions_table(sessions: &[SessionEntry], now: SystemTime) -> String {
    // A WATCHES column only when some session observes a lock.
    let any_watches = sessions.iter().any(|session| session.watches > 0);
    let rows = sessions
        .iter()
        .map(|session| {
            let mut row = vec![
                session.session.to_string(),
                session.remote_addr.clone(),
                identity(&session.identity).into_owned(),
                millis(session.lease_ms),
                age(&session.opened_at, now),
                session.held.to_string(),
                session.waiting.to_string(),
            ];
            if any_watches {
                row.push(session.watches.to_string());
            }
            row
        })
        .collect();
    let mut headers = vec![
        "SESSION",
        "REMOTE_ADDR",
        "IDENTITY",
        "LEASE",
        "OPEN",
        "HELD",
        "WAITING",
    ];
    if any_watches {
        headers.push("WATCHES");
    }
    table(&headers, rows)
}

fn lock_detail(lock: &LockInfo, now: SystemTime) -> String {
    let holder = &lock.holder;
    let mut rows = vec![
        vec!["lock".into(), printable(&lock.name).into_owned()],
        vec!["holder".into(), holder.remote_addr.clone()],
    ];
    if let (Some(session), Some(claim)) = (holder.v2.session, holder.v2.claim) {
        rows.push(vec!["protocol".into(), "2".into()]);
        rows.push(vec!["session".into(), session.to_string()]);
        rows.push(vec!["claim".into(), claim.to_string()]);
    }
    rows.extend([
        vec!["identity".into(), identity(&holder.identity).into_owned()],
        vec!["token".into(), holder.token.to_string()],
        vec![
            "since".into(),
            format!("{} ({} ago)", holder.since, age(&holder.since, now)),
        ],
        vec!["lease".into(), millis(holder.lease_ms)],
        vec!["waiters".into(), lock.waiters.len().to_string()],
    ]);
    // Only when there is one, so a lock without a value reads as it did.
    if !holder.value.is_empty() {
        rows.push(vec!["value".into(), printable(&holder.value).into_owned()]);
    }
    let mut out = table(&["", ""], rows);
    if !lock.waiters.is_empty() {
        out.push('\n');
        let any_v2 = lock.waiters.iter().any(|waiter| waiter.v2.claim.is_some());
        let rows = lock
            .waiters
            .iter()
            .enumerate()
            .map(|(i, waiter)| {
                let mut row = vec![
                    (i + 1).to_string(),
                    waiter.remote_addr.clone(),
                    identity(&waiter.identity).into_owned(),
                    format!("{} ({} ago)", waiter.queued_at, age(&waiter.queued_at, now)),
                    millis(waiter.lease_ms),
                ];
                if any_v2 {
                    row.extend(claim_cells(waiter.v2.session, waiter.v2.claim));
                }
                row
            })
            .collect();
        let mut headers = vec!["#", "REMOTE_ADDR", "IDENTITY", "QUEUED_AT", "LEASE"];
        if any_v2 {
            headers.extend(["PROTOCOL", "SESSION", "CLAIM"]);
        }
        out.push_str(&table(&headers, rows));
    }
    out
}

/// `server in startup grace, ...` while the grace runs.
fn grace_line(grace: &GraceInfo) -> Option<String> {
    grace.running.then(|| {
        format!(
            "server in startup grace, {} ms left: nothing is granted until then ({} queued)\n",
            grace.remaining_ms, grace.held
        )
    })
}

/// A lease or timeout in milliseconds, as `2s`, `1m 30s`, `49days`.
fn millis(ms: impl Into<u64>) -> String {
    humantime::format_duration(Duration::from_millis(ms.into())).to_string()
}

fn info_table(info: &ServerInfo) -> String {
    let config = &info.config;
    let or_off = |value: &Option<String>| match value {
        Some(value) => printable(value).into_owned(),
        None => "off".to_owned(),
    };
    let on_off = |on: bool| if on { "on" } else { "off" };
    let mtls = if config.mtls {
        "on (client certificates required)"
    } else {
        "off"
    };
    let uptime = Duration::from_secs(info.uptime_ms / 1000);
    let status = &info.startup_grace;
    let grace = if status.running {
        format!(
            "server in startup grace, {} ms left ({} queued)",
            status.remaining_ms, status.held
        )
    } else if status.grace_ms > 0 {
        format!("{} (over)", millis(status.grace_ms))
    } else {
        "off".to_owned()
    };
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
            vec!["tls".into(), on_off(config.tls).to_owned()],
            vec!["mtls".into(), mtls.to_owned()],
            vec!["acl file".into(), or_off(&config.acl_file)],
            vec!["audit log".into(), or_off(&config.audit_log)],
            vec!["io timeout".into(), millis(config.io_timeout_ms)],
            vec!["token floor".into(), or_off(&info.token_floor)],
            vec!["startup grace".into(), grace],
            vec!["locks".into(), info.locks.to_string()],
            vec!["sessions".into(), info.sessions.to_string()],
            vec!["waiters".into(), info.waiters.to_string()],
            vec!["connections".into(), info.connections.to_string()],
            vec!["v2 sessions".into(), info.v2_sessions.to_string()],
        ],
    )
}

#[cfg(test)]
mod tests {
    use monolock_server::admin::{ClaimFields, EffectiveConfig};

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
                value: String::new(),
                v2: ClaimFields::default(),
            },
            waiters: vec![WaiterInfo {
                identity: String::new(),
                remote_addr: "10.0.0.6:41230".into(),
                queued_at: "2026-08-08T12:00:07Z".into(),
                lease_ms: 2000,
                value: String::new(),
                v2: ClaimFields::default(),
            }],
        }
    }

    #[test]
    fn tables_are_aligned_and_readable() {
        let now = humantime::parse_rfc3339("2026-08-08T12:03:12Z").unwrap();
        let text = locks_table(&[lock()], now);
        assert_eq!(
            text,
            "NAME            HOLDER          IDENTITY                TOKEN             HELD    LEASE  WAITERS\n\
             nightly/import  10.0.0.5:52114  spiffe://prod/worker/1  1872956384870401  3m 12s  2s     1\n"
        );
        let detail = lock_detail(&lock(), now);
        assert!(detail.starts_with("lock      nightly/import\n"), "{detail}");
        assert!(detail.contains("1  10.0.0.6:41230  -"), "{detail}");
        assert!(detail.contains("(3m 5s ago)"), "{detail}");
    }

    /// A v2 holder adds `PROTOCOL SESSION CLAIM` columns (v1 rows show
    /// `1 - -`); a v2 waiter adds them to the queue of `monolock lock`.
    #[test]
    fn v2_claims_show_protocol_session_and_claim() {
        let now = humantime::parse_rfc3339("2026-08-08T12:03:12Z").unwrap();
        let mut v2 = lock();
        v2.name = "shard-3".into();
        v2.holder.v2 = ClaimFields {
            protocol: Some(2),
            session: Some(17),
            claim: Some(3),
        };
        v2.waiters[0].v2 = ClaimFields {
            protocol: Some(2),
            session: Some(18),
            claim: Some(9),
        };
        let text = locks_table(&[lock(), v2.clone()], now);
        assert_eq!(
            text,
            "NAME            HOLDER          IDENTITY                TOKEN             HELD    LEASE  WAITERS  PROTOCOL  SESSION  CLAIM\n\
             nightly/import  10.0.0.5:52114  spiffe://prod/worker/1  1872956384870401  3m 12s  2s     1        1         -        -\n\
             shard-3         10.0.0.5:52114  spiffe://prod/worker/1  1872956384870401  3m 12s  2s     1        2         17       3\n"
        );
        let detail = lock_detail(&v2, now);
        assert!(
            detail.contains("protocol  2\nsession   17\nclaim     3\n"),
            "{detail}"
        );
        assert!(detail.contains("PROTOCOL  SESSION  CLAIM\n"), "{detail}");
        assert!(
            detail.trim_end().ends_with("2s     2         18       9"),
            "{detail}"
        );
        let sessions = sessions_table(
            &[SessionEntry {
                session: 17,
                remote_addr: "10.0.0.5:52114".into(),
                identity: String::new(),
                lease_ms: 10_000,
                opened_at: "2026-08-08T12:00:00Z".into(),
                held: 1,
                waiting: 2,
                state: "open".into(),
                reason: None,
                release_at: None,
                claims: Vec::new(),
                watches: 0,
            }],
            now,
        );
        assert_eq!(
            sessions,
            "SESSION  REMOTE_ADDR     IDENTITY  LEASE  OPEN    HELD  WAITING\n\
             17       10.0.0.5:52114  -         10s    3m 12s  1     2\n"
        );
    }

    /// A holder's value shows in a VALUE column, last, only when some
    /// holder has one; a long one is cut in the table and whole in the
    /// lock's detail.
    #[test]
    fn values_show_in_a_last_column_when_there_are_any() {
        let now = humantime::parse_rfc3339("2026-08-08T12:03:12Z").unwrap();
        let mut leader = lock();
        leader.name = "leader".into();
        leader.holder.value = "10.0.0.7:9000".into();
        let text = locks_table(&[lock(), leader.clone()], now);
        assert_eq!(
            text,
            "NAME            HOLDER          IDENTITY                TOKEN             HELD    LEASE  WAITERS  VALUE\n\
             nightly/import  10.0.0.5:52114  spiffe://prod/worker/1  1872956384870401  3m 12s  2s     1        -\n\
             leader          10.0.0.5:52114  spiffe://prod/worker/1  1872956384870401  3m 12s  2s     1        10.0.0.7:9000\n"
        );
        leader.holder.value = format!("{}\n", "x".repeat(100));
        let text = locks_table(std::slice::from_ref(&leader), now);
        let cell = text
            .lines()
            .nth(1)
            .and_then(|row| row.split_whitespace().last());
        assert_eq!(
            cell,
            Some(format!("{}...", "x".repeat(45)).as_str()),
            "{text}"
        );
        let detail = lock_detail(&leader, now);
        assert!(
            detail.contains(&format!("value     {}\\n\n", "x".repeat(100))),
            "{detail}"
        );
    }

    #[test]
    fn control_characters_are_escaped_in_tables() {
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

    #[test]
    fn info_names_mtls_sessions_and_the_grace() {
        let info = ServerInfo {
            version: "0.1.0".into(),
            commit: "abc".into(),
            uptime_ms: 1_500,
            config: EffectiveConfig {
                tls: true,
                mtls: true,
                io_timeout_ms: 5_000,
                ..EffectiveConfig::default()
            },
            locks: 1,
            sessions: 3,
            waiters: 2,
            connections: 4,
            v2_sessions: 5,
            startup_grace: GraceInfo {
                grace_ms: 30_000,
                running: true,
                remaining_ms: 12_345,
                held: 2,
            },
            token_floor: None,
        };
        let text = info_table(&info);
        for row in [
            "tls            on\n",
            "mtls           on (client certificates required)\n",
            "io timeout     5s\n",
            "startup grace  server in startup grace, 12345 ms left (2 queued)\n",
            "sessions       3\n",
            "v2 sessions    5\n",
        ] {
            assert!(text.contains(row), "{row:?} missing from:\n{text}");
        }
    }
}
