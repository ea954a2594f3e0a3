//! `monolock events`: follows `GET /api/events` in a terminal, one line per
//! event, like `kubectl get -w`: the locks held now first (from the stream's
//! snapshot), then every change as it happens. `--json` prints the
//! snapshot and then each event's JSON (the audit log's format) one per
//! line. A subscriber the server cut off for falling behind reconnects and
//! starts over from a fresh snapshot; so does one whose server went away
//! (a restart, a failover), with backoff and a line on stderr each time,
//! as the dashboard does, unless `--once` asks to exit instead.

use std::{io::Write as _, process::ExitCode, time::Duration};

use clap::Args;
use http_body_util::BodyExt;
use hyper::Method;
use monolock_server::{
    Glob,
    admin::{LockInfo, LockList},
};
use serde_json::Value;

use crate::{
    admin_client::{AdminArgs, encode, refusal, send},
    render::{identity, printable},
};

/// With no byte for this long (the server sends a keep-alive every 15 s),
/// the stream is taken for dead.
const IDLE_LIMIT: Duration = Duration::from_secs(60);

/// Column widths of the event lines (wider values push the line).
const WIDTHS: [usize; 5] = [24, 13, 24, 21, 24];

/// The first delay before reconnecting to a server that went away.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);

/// The longest delay between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Flags of `monolock events`.
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Only events of locks whose name matches this glob.
    #[arg(long = "match", value_name = "GLOB")]
    pattern: Option<String>,
    /// Exit (status 1) when the stream ends instead of reconnecting.
    #[arg(long)]
    once: bool,
    #[command(flatten)]
    admin: AdminArgs,
}

/// Runs `monolock events`: exit 1 once the stream ends or fails, 64 for
/// contradictory flags.
pub fn main(args: EventsArgs) -> ExitCode {
    let runtime = match crate::admin_client::runtime(&args.admin) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    match runtime.block_on(follow(&args.admin, args.pattern.as_deref(), args.once)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(line) => {
            eprintln!("monolock: {line}");
            ExitCode::FAILURE
        }
    }
}

/// Follows the stream. A failure before the first stream opens ends the
/// command (the address or the token is wrong: one line, exit 1); after
/// it, a stream that ends or fails is reopened with backoff, unless
/// `once`, or unless the server refuses the request itself (a 4xx: a
/// rotated token, say, which no retry heals).
///
/// The server filters by `pattern` (`?match=`), so other locks' traffic
/// never crosses the network; the same glob is applied here too, so the
/// output is the same against a server that streams everything.
async fn follow(admin: &AdminArgs, pattern: Option<&str>, once: bool) -> Result<(), String> {
    let glob = pattern.map(Glob::new);
    let matches = |name: &str| glob.as_ref().is_none_or(|glob| glob.matches(name));
    let path = match pattern {
        Some(pattern) => format!("/api/events?match={}", encode(pattern)),
        None => "/api/events".to_owned(),
    };
    let mut state = State {
        // Printed once the first stream is open, so a failure is one line.
        header_due: !admin.json,
        opened: false,
        reconnecting: false,
    };
    let mut backoff = FIRST_BACKOFF;
    loop {
        let why = match stream_once(admin, &path, &matches, &mut state).await {
            Ok(End::Lagged) => {
                eprintln!(
                    "monolock: fell behind the server's event stream; reconnecting for a fresh snapshot"
                );
                continue;
            }
            Ok(End::Closed) => "the server closed the event stream".to_owned(),
            Err(Failure::Fatal(line)) => return Err(line),
            Err(Failure::Lost(line)) => line,
        };
        if once || !state.opened {
            return Err(why);
        }
        // A stream opened since the last failure starts the backoff over.
        if !state.reconnecting {
            backoff = FIRST_BACKOFF;
        }
        eprintln!(
            "monolock: {why}; reconnecting in {} (--once exits instead)",
            humantime::format_duration(backoff)
        );
        state.reconnecting = true;
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// What one stream leaves to the next.
struct State {
    /// The column header is still to be printed.
    header_due: bool,
    /// A stream has been open at least once.
    opened: bool,
    /// The last stream failed and this one replaces it.
    reconnecting: bool,
}

enum End {
    Lagged,
    Closed,
}

/// Why a stream could not be followed.
enum Failure {
    /// The server refused the request (a 4xx: it would refuse it again),
    /// or the output cannot be written.
    Fatal(String),
    /// The connection failed, the stream broke off or fell silent, or the
    /// server answered with a 5xx: a later attempt may succeed.
    Lost(String),
}

async fn stream_once(
    admin: &AdminArgs,
    path: &str,
    matches: &impl Fn(&str) -> bool,
    state: &mut State,
) -> Result<End, Failure> {
    let (url, response) = send(admin, Method::GET, path, "text/event-stream")
        .await
        .map_err(Failure::Lost)?;
    if !response.status().is_success() {
        let server_side = response.status().is_server_error();
        let line = refusal(&url, response).await;
        return Err(if server_side {
            Failure::Lost(line)
        } else {
            Failure::Fatal(line)
        });
    }
    state.opened = true;
    if std::mem::take(&mut state.reconnecting) {
        eprintln!("monolock: reconnected to {url}; the locks held now follow");
    }
    if std::mem::take(&mut state.header_due) {
        print_line(&["TIME", "EVENT", "LOCK", "REMOTE_ADDR", "IDENTITY", "DETAIL"])
            .map_err(Failure::Fatal)?;
    }
    let mut body = response.into_body();
    let mut buf: Vec<u8> = Vec::new();
    loop {
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = buf.drain(..end + 2).collect();
            let (name, data) = parse_block(&String::from_utf8_lossy(&block));
            match name.as_deref() {
                None => {}
                Some("lagged") => return Ok(End::Lagged),
                Some("snapshot") => {
                    print_snapshot(admin.json, &data, matches).map_err(Failure::Fatal)?;
                }
                Some(_) => print_event(admin.json, &data, matches).map_err(Failure::Fatal)?,
            }
        }
        let frame = match tokio::time::timeout(IDLE_LIMIT, body.frame()).await {
            Ok(Some(Ok(frame))) => frame,
            Ok(Some(Err(err))) => {
                return Err(Failure::Lost(format!(
                    "the event stream from {url} failed: {err}"
                )));
            }
            Ok(None) => return Ok(End::Closed),
            Err(_) => {
                return Err(Failure::Lost(format!(
                    "nothing from {url} for {}s (not even a keep-alive)",
                    IDLE_LIMIT.as_secs()
                )));
            }
        };
        if let Ok(data) = frame.into_data() {
            buf.extend_from_slice(&data);
        }
    }
}

/// An SSE block's event name (`None` for a comment) and its data.
fn parse_block(block: &str) -> (Option<String>, String) {
    let mut name = None;
    let mut data = String::new();
    for line in block.lines() {
        if let Some(value) = line.strip_prefix("event:") {
            name = Some(value.trim().to_owned());
        } else if let Some(value) = line.strip_prefix("data:") {
            data.push_str(value.strip_prefix(' ').unwrap_or(value));
        }
    }
    (name, data)
}

fn print_snapshot(json: bool, data: &str, matches: &impl Fn(&str) -> bool) -> Result<(), String> {
    let mut list: LockList = serde_json::from_str(data)
        .map_err(|err| format!("unexpected snapshot from the server: {err}"))?;
    list.locks.retain(|lock| matches(&lock.name));
    if json {
        let mut line = serde_json::json!({ "event": "snapshot" });
        line["locks"] = serde_json::to_value(&list.locks).unwrap_or_default();
        return write_out(&line.to_string());
    }
    for lock in &list.locks {
        for line in snapshot_lines(lock) {
            write_out(&line)?;
        }
    }
    Ok(())
}

/// A held lock as `held` and `waiting` lines, like events that happened.
fn snapshot_lines(lock: &LockInfo) -> Vec<String> {
    let holder = &lock.holder;
    let mut lines = vec![format_line(&[
        &holder.since,
        "held",
        &printable(&lock.name),
        &holder.remote_addr,
        &identity(&holder.identity),
        &format!(
            "{}token={} lease={}{}",
            claim_detail(holder.v2.session, holder.v2.claim),
            holder.token,
            millis(holder.lease_ms),
            if holder.value.is_empty() {
                String::new()
            } else {
                format!(" value={}", printable(&holder.value))
            }
        ),
    ])];
    for (position, waiter) in lock.waiters.iter().enumerate() {
        lines.push(format_line(&[
            &waiter.queued_at,
            "waiting",
            &printable(&lock.name),
            &waiter.remote_addr,
            &identity(&waiter.identity),
            &format!(
                "{}position={} lease={}",
                claim_detail(waiter.v2.session, waiter.v2.claim),
                position + 1,
                millis(waiter.lease_ms)
            ),
        ]));
    }
    lines
}

fn print_event(json: bool, data: &str, matches: &impl Fn(&str) -> bool) -> Result<(), String> {
    let event: Value = serde_json::from_str(data)
        .map_err(|err| format!("unexpected event from the server: {err}"))?;
    if !matches(event["lock"].as_str().unwrap_or_default()) {
        return Ok(());
    }
    if json {
        return write_out(data);
    }
    write_out(&event_line(&event))
}

/// `session=17 claim=3 ` for a protocol v2 claim, nothing for version 1.
fn claim_detail(session: Option<u64>, claim: Option<u32>) -> String {
    match (session, claim) {
        (Some(session), Some(claim)) => format!("session={session} claim={claim} "),
        _ => String::new(),
    }
}

/// One event as a line: time, event, lock, address, identity, then its
/// own fields (`token=.. wait=..ms`, `token=.. held=..ms reason=..`),
/// after `session=.. claim=..` for a protocol v2 claim.
fn event_line(event: &Value) -> String {
    let text = |key: &str| event[key].as_str().unwrap_or_default().to_owned();
    let mut detail = Vec::new();
    if let (Some(session), Some(claim)) = (event["session"].as_u64(), event["claim"].as_u64()) {
        detail.push(format!("session={session} claim={claim}"));
    }
    if let Some(token) = event["token"].as_u64() {
        detail.push(format!("token={token}"));
    }
    for (key, label) in [("wait_ms", "wait"), ("held_ms", "held")] {
        if let Some(ms) = event[key].as_u64() {
            detail.push(format!("{label}={ms}ms"));
        }
    }
    if let Some(reason) = event["reason"].as_str() {
        detail.push(format!("reason={}", printable(reason)));
    }
    // A claim's value (on `granted` when it has one, always on `value`),
    // last: it is the one field that may hold spaces.
    if let Some(value) = event["value"].as_str() {
        detail.push(format!("value={}", printable(value)));
    }
    format_line(&[
        &text("time"),
        &printable(&text("event")),
        &printable(&text("lock")),
        &text("remote_addr"),
        &identity(&text("identity")),
        &detail.join(" "),
    ])
}

/// A lease in milliseconds, humanised (`2s`, `49days`).
fn millis(ms: u32) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_millis(u64::from(ms)))
}

fn format_line(cells: &[&str]) -> String {
    let mut line = String::new();
    for (i, cell) in cells.iter().enumerate() {
        line.push_str(cell);
        if let Some(width) = WIDTHS.get(i) {
            let pad = width.saturating_sub(cell.chars().count()) + 2;
            line.extend(std::iter::repeat_n(' ', pad));
        } else if i + 1 < cells.len() {
            line.push_str("  ");
        }
    }
    line.trim_end().to_owned()
}

fn print_line(cells: &[&str]) -> Result<(), String> {
    write_out(&format_line(cells))
}

/// Writes one line and flushes it at once (the output is usually followed
/// live or piped into `grep --line-buffered`); a closed pipe ends the command.
fn write_out(line: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|err| format!("cannot write the output: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_one_aligned_line_with_names_escaped() {
        let event: Value = serde_json::from_str(
            r#"{"time":"2026-08-08T12:00:00.123Z","event":"released","lock":"evil\n\u001b[2Jname","identity":"","remote_addr":"10.0.0.5:52114","token":7,"held_ms":1500,"reason":"force"}"#,
        )
        .expect("JSON");
        assert_eq!(
            event_line(&event),
            "2026-08-08T12:00:00.123Z  released       evil\\n\\u{1b}[2Jname       10.0.0.5:52114         -                         token=7 held=1500ms reason=force"
        );
    }

    /// A grant's value and a replacement of it end the line.
    #[test]
    fn values_end_the_line() {
        let granted: Value = serde_json::from_str(
            r#"{"time":"2026-08-08T12:00:00.123Z","event":"granted","lock":"deploy","identity":"","remote_addr":"10.0.0.5:52114","protocol":2,"session":17,"claim":3,"token":7,"value":"10.0.0.7:9000","wait_ms":0,"lease_ms":10000}"#,
        )
        .unwrap();
        assert!(
            event_line(&granted)
                .ends_with("session=17 claim=3 token=7 wait=0ms value=10.0.0.7:9000"),
            "{}",
            event_line(&granted)
        );
        let replaced: Value = serde_json::from_str(
            r#"{"time":"2026-08-08T12:00:01.000Z","event":"value","lock":"deploy","identity":"","remote_addr":"10.0.0.5:52114","protocol":2,"session":17,"claim":3,"token":7,"value":"a\nb"}"#,
        )
        .unwrap();
        assert!(
            event_line(&replaced).ends_with("token=7 value=a\\nb"),
            "{}",
            event_line(&replaced)
        );
    }

    #[test]
    fn a_v2_claim_is_named_before_its_details() {
        let event: Value = serde_json::from_str(
            r#"{"time":"2026-08-08T12:00:00.123Z","event":"granted","lock":"shard-3","identity":"","remote_addr":"10.0.0.5:52114","protocol":2,"session":17,"claim":3,"token":7,"wait_ms":0,"lease_ms":10000}"#,
        )
        .expect("JSON");
        assert!(
            event_line(&event).ends_with("session=17 claim=3 token=7 wait=0ms"),
            "{}",
            event_line(&event)
        );
        let lock: LockInfo = serde_json::from_str(
            r#"{"name":"shard-3","holder":{"identity":"","remote_addr":"10.0.0.5:52114","since":"2026-08-08T12:00:00Z","lease_ms":10000,"token":7,"protocol":2,"session":17,"claim":3},
               "waiters":[{"identity":"","remote_addr":"10.0.0.6:1","queued_at":"2026-08-08T12:00:01Z","lease_ms":2000,"protocol":2,"session":18,"claim":9},
                          {"identity":"","remote_addr":"10.0.0.7:1","queued_at":"2026-08-08T12:00:02Z","lease_ms":2000}]}"#,
        )
        .expect("JSON");
        let lines = snapshot_lines(&lock);
        assert!(
            lines[0].ends_with("session=17 claim=3 token=7 lease=10s"),
            "{lines:?}"
        );
        assert!(
            lines[1].ends_with("session=18 claim=9 position=1 lease=2s"),
            "{lines:?}"
        );
        assert!(
            lines[2].ends_with("-                         position=2 lease=2s"),
            "{lines:?}"
        );
    }

    #[test]
    fn columns_line_up_with_the_header_whatever_fills_them() {
        let header = format_line(&["TIME", "EVENT", "LOCK", "REMOTE_ADDR", "IDENTITY", "DETAIL"]);
        let identity = |line: &str| line.find("IDENTITY").or_else(|| line.find("id!"));
        let detail = |line: &str| line.find("DETAIL").or_else(|| line.find("token="));
        for time in [
            "2026-08-08T12:00:00Z",
            "2026-08-08T12:00:00.12Z",
            "2026-08-08T12:00:00.123Z",
        ] {
            for event in ["held", "promoted", "force-release"] {
                for id in ["id!", "id!spiffe://prod/w/1"] {
                    let cells = [time, event, "name", "10.0.0.5:52114", id, "token=1"];
                    let line = format_line(&cells);
                    assert_eq!(identity(&line), identity(&header), "{line}\n{header}");
                    assert_eq!(detail(&line), detail(&header), "{line}\n{header}");
                }
            }
        }
    }

    #[test]
    fn sse_blocks_parse() {
        assert_eq!(
            parse_block("event: granted\ndata: {\"a\":1}\n\n"),
            (Some("granted".to_owned()), "{\"a\":1}".to_owned())
        );
        assert_eq!(parse_block(": keep-alive\n\n"), (None, String::new()));
    }
}
