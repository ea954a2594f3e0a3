//! The audit log: the exact events and fields of docs/operations.md ("The
//! audit log"), ownership that never overlaps in the log under heavy churn,
//! and write failures that do not stop the server.

mod common;
#[path = "common/wire.rs"]
mod wire;

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    path::Path,
    sync::Arc,
    time::Duration,
};

use common::{PATIENCE, TestServer};
use monolock_proto::{LockName, ServerFrame, decode_response};
use monolock_server::{AuditLog, AuditTarget, Authorizer, Observers, ServerConfig};
use serde_json::Value;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    time::{interval, timeout},
};

fn read_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("audit file")
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|err| panic!("{err}: {line}")))
        .collect()
}

fn keys(line: &Value) -> BTreeSet<&str> {
    line.as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect()
}

/// The fields docs/operations.md puts on every audit event, plus the event's
/// extras.
fn expected_keys(extra: &[&'static str]) -> BTreeSet<&'static str> {
    ["time", "event", "lock", "identity", "remote_addr"]
        .into_iter()
        .chain(extra.iter().copied())
        .collect()
}

/// Checks one line's fields and types for its event; returns the event.
fn check_shape(line: &Value) -> String {
    let event = line["event"].as_str().expect("event").to_owned();
    let extra: &[&str] = match event.as_str() {
        "granted" => &["token", "wait_ms", "lease_ms"],
        "released" => &["token", "held_ms", "reason"],
        "denied" | "kick_waiter" => &[],
        "force_release" => &["token"],
        "ended_by_server" => &["token", "reason", "release_in_ms"],
        other => panic!("unknown event {other}"),
    };
    assert_eq!(keys(line), expected_keys(extra), "{line}");
    let time = line["time"].as_str().expect("time");
    assert!(time.ends_with('Z'), "UTC: {time}");
    humantime::parse_rfc3339(time).expect("RFC 3339 time");
    line["remote_addr"]
        .as_str()
        .expect("remote_addr")
        .parse::<SocketAddr>()
        .expect("an address");
    assert!(line["identity"].is_string());
    assert!(line["lock"].is_string());
    for number in ["token", "wait_ms", "lease_ms", "held_ms", "release_in_ms"] {
        if let Some(value) = line.get(number) {
            assert!(value.is_u64(), "{number} in {line}");
        }
    }
    event
}

/// Denies any lock whose name starts with `forbidden`.
struct DenyForbidden;

impl Authorizer for DenyForbidden {
    fn allows(&self, _identity: &str, lock: &LockName) -> bool {
        !lock.as_str().starts_with("forbidden")
    }
}

#[tokio::test]
async fn every_event_has_exactly_its_fields() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("audit.jsonl");
    let audit = Arc::new(AuditLog::open(AuditTarget::File(path.clone())).expect("audit"));
    let server = TestServer::start_with(
        ServerConfig::default()
            .with_observer(audit.clone())
            .with_authorizer(Arc::new(DenyForbidden)),
    )
    .await;

    // granted, then released (graceful).
    let (peer, token) = server.hold("a/graceful", 30_000).await;
    drop(peer);
    common::eventually("graceful release", || {
        server.handle.lock("a/graceful").is_none()
    })
    .await;
    // denied.
    let (mut peer, _) = server.acquire("forbidden/x", 30_000).await;
    peer.expect_eof().await;
    // force_release (+ released force), promotion of a waiter.
    let (mut forced, _) = server.hold("b/forced", 30_000).await;
    let mut next = server.wait_in_line("b/forced", 30_000).await;
    let mut kicked = server.wait_in_line("b/forced", 30_000).await;
    // kick_waiter.
    let kicked_addr = kicked.local_addr();
    server
        .handle
        .kick_waiter("b/forced", kicked_addr)
        .expect("kicked");
    assert_eq!(kicked.expect_error_then_close().await.0, 0x02);
    server.handle.force_release("b/forced").expect("forced");
    assert_eq!(forced.expect_error_then_close().await.0, 0x02);
    let ServerFrame::Acquired { token: promoted } = next.recv().await else {
        panic!("promotion pushed");
    };
    drop(next);
    common::eventually("graceful release", || {
        server.handle.lock("b/forced").is_none()
    })
    .await;
    // protocol_error: ended_by_server at once, released when the lease
    // would have run out.
    let (mut bad, _) = server.hold("b/bad", 300).await;
    bad.send(&[0x7f]).await;
    assert_eq!(bad.expect_error_then_close().await.0, 0x13);
    common::eventually("the bad holder's lease ran out", || {
        server.handle.lock("b/bad").is_none()
    })
    .await;
    // expired.
    let (mut silent, _) = server.hold("c/expired", 50).await;
    silent.expect_eof().await;
    // shutdown.
    let (holding, _) = server.hold("d/shutdown", 30_000).await;
    server
        .stop_and_drop((forced, bad, kicked, silent, holding))
        .await;
    audit.close().await;

    let lines = read_lines(&path);
    let summary: Vec<String> = lines
        .iter()
        .map(|line| {
            let event = check_shape(line);
            let reason = line["reason"]
                .as_str()
                .map(|r| format!(" {r}"))
                .unwrap_or_default();
            format!("{event} {}{reason}", line["lock"].as_str().unwrap())
        })
        .collect();
    assert_eq!(
        summary,
        [
            "granted a/graceful",
            "released a/graceful graceful",
            "denied forbidden/x",
            "granted b/forced",
            "kick_waiter b/forced",
            "released b/forced force",
            "force_release b/forced",
            "granted b/forced",
            "released b/forced graceful",
            "granted b/bad",
            "ended_by_server b/bad protocol_error",
            "released b/bad protocol_error",
            "granted c/expired",
            "released c/expired expired",
            "granted d/shutdown",
            "released d/shutdown shutdown",
        ]
    );
    assert_eq!(lines[0]["token"], token);
    assert_eq!(lines[0]["wait_ms"], 0);
    assert_eq!(lines[0]["lease_ms"], 30_000, "the grant's lease");
    assert_eq!(lines[10]["token"], lines[9]["token"]);
    assert!(lines[10]["release_in_ms"].as_u64().unwrap() <= 300);
    assert!(lines[11]["held_ms"].as_u64().unwrap() >= 250);
    assert_eq!(lines[12]["lease_ms"], 50);
    assert_eq!(lines[0]["identity"], "");
    assert_eq!(lines[4]["remote_addr"], kicked_addr.to_string());
    assert_eq!(lines[5]["token"], lines[6]["token"]);
    assert_eq!(lines[7]["token"], promoted);
    assert!(lines[13]["held_ms"].as_u64().unwrap() >= 50);
}

/// How one round of a churning client ends once it holds the lock.
#[derive(Clone, Copy, Debug)]
enum Plan {
    /// Close at once (graceful).
    Close,
    /// Keep heartbeating for a while (a force-release may hit it), then close.
    Linger,
    /// Stop heartbeating and wait for the server to expire it.
    GoSilent,
    /// Send a bad byte (protocol error).
    Misbehave,
}

const CHURN_LEASE_MS: u32 = 250;
const CHURN_HEARTBEAT: Duration = Duration::from_millis(40);

/// One connection: ACQUIRE, heartbeat while waiting, act out `plan` once
/// granted. Ends when the server closes or the plan is done.
async fn churn_round(addr: SocketAddr, lock: &str, plan: Plan) {
    let Ok(stream) = TcpStream::connect(addr).await else {
        return;
    };
    let _ = stream.set_nodelay(true);
    let (mut reader, mut writer) = stream.into_split();
    if writer
        .write_all(&wire::acquire(lock, CHURN_LEASE_MS))
        .await
        .is_err()
    {
        return;
    }
    let mut ticker = interval(CHURN_HEARTBEAT);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 256];
    let mut held = false;
    let mut lingering = 0;
    loop {
        tokio::select! {
            read = reader.read(&mut chunk) => {
                let n = match read { Ok(0) | Err(_) => return, Ok(n) => n };
                buf.extend_from_slice(&chunk[..n]);
                while let Some((frame, used)) = decode_response(&buf).expect("valid frames") {
                    buf.drain(..used);
                    match frame {
                        ServerFrame::Acquired { .. } if !held => {
                            held = true;
                            match plan {
                                Plan::Close => return,
                                Plan::Linger => {}
                                Plan::GoSilent => {
                                    // No more heartbeats: wait for the close.
                                    let _ = timeout(PATIENCE, async {
                                        while matches!(reader.read(&mut chunk).await, Ok(1..)) {}
                                    }).await;
                                    return;
                                }
                                Plan::Misbehave => {
                                    let _ = writer.write_all(&[0x7f]).await;
                                    let _ = timeout(PATIENCE, async {
                                        while matches!(reader.read(&mut chunk).await, Ok(1..)) {}
                                    }).await;
                                    return;
                                }
                            }
                        }
                        ServerFrame::Error { .. } => return,
                        _ => {}
                    }
                }
            }
            _ = ticker.tick() => {
                if held {
                    lingering += 1;
                    if lingering > 2 {
                        return;
                    }
                }
                if writer.write_all(&wire::heartbeat()).await.is_err() {
                    return;
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ownership_never_overlaps_under_churn() {
    const CLIENTS: usize = 24;
    const ROUNDS: usize = 5;
    const LOCKS: [&str; 2] = ["hot/a", "hot/b"];
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("audit.jsonl");
    let audit = Arc::new(AuditLog::open(AuditTarget::File(path.clone())).expect("audit"));
    let server = TestServer::start_with(
        ServerConfig::default().with_observer(Arc::new(Observers(vec![audit.clone()]))),
    )
    .await;
    let addr = server.addr;

    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        clients.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let plan = match (client + round) % 12 {
                    0 => Plan::GoSilent,
                    1 | 7 => Plan::Misbehave,
                    2 | 5 | 8 | 11 => Plan::Linger,
                    _ => Plan::Close,
                };
                // Silent holders go to the lock the administrator never
                // force-releases, so they live to expire.
                let lock = match plan {
                    Plan::GoSilent => LOCKS[1],
                    _ => LOCKS[(client + round) % LOCKS.len()],
                };
                churn_round(addr, lock, plan).await;
            }
        }));
    }
    // An administrator force-releasing and kicking while the churn runs.
    let handle = server.handle.clone();
    let done = tokio_util::sync::CancellationToken::new();
    let admin = tokio::spawn({
        let done = done.clone();
        async move {
            let (mut forced, mut kicked) = (0, 0);
            let mut pace = interval(Duration::from_millis(15));
            for step in 0usize.. {
                tokio::select! {
                    () = done.cancelled() => break,
                    _ = pace.tick() => {}
                }
                let lock = LOCKS[step % LOCKS.len()];
                if step % 3 == 0 {
                    let first = handle.lock(lock).and_then(|l| l.waiters.first().cloned());
                    if let Some(waiter) = first {
                        kicked += usize::from(handle.kick_waiter(lock, waiter.remote_addr).is_ok());
                    }
                } else {
                    forced += usize::from(handle.force_release(LOCKS[0]).is_ok());
                }
            }
            (forced, kicked)
        }
    });
    for client in clients {
        timeout(Duration::from_secs(60), client)
            .await
            .expect("churn finishes")
            .expect("client task");
    }
    done.cancel();
    let (forced, kicked) = admin.await.expect("admin task");
    assert!(forced > 0 && kicked > 0, "forced {forced}, kicked {kicked}");
    // Someone holds each lock at shutdown, once the last misbehaving or
    // silent holder's lease has run out.
    common::eventually("both locks free", || server.handle.counts().locks == 0).await;
    let (_a, _) = server.hold(LOCKS[0], 30_000).await;
    let (_b, _) = server.hold(LOCKS[1], 30_000).await;
    server.stop_and_drop((_a, _b)).await;
    audit.close().await;

    let lines = read_lines(&path);
    let mut holder: BTreeMap<String, Option<u64>> = BTreeMap::new();
    let mut last_released: BTreeMap<String, (u64, String)> = BTreeMap::new();
    let mut last_token = 0;
    let mut reasons = BTreeSet::new();
    let (mut grants, mut releases, mut force_events, mut kick_events) = (0, 0, 0, 0);
    let mut ended_by_server = 0;
    for (index, line) in lines.iter().enumerate() {
        let event = check_shape(line);
        let lock = line["lock"].as_str().unwrap().to_owned();
        let current = holder.entry(lock.clone()).or_default();
        match event.as_str() {
            "granted" => {
                let token = line["token"].as_u64().unwrap();
                assert_eq!(*current, None, "line {index}: granted while held: {line}");
                assert!(token > last_token, "line {index}: tokens increase");
                last_token = token;
                *current = Some(token);
                grants += 1;
            }
            "released" => {
                let token = line["token"].as_u64().unwrap();
                assert_eq!(
                    *current,
                    Some(token),
                    "line {index}: released a token not held: {line}"
                );
                *current = None;
                let reason = line["reason"].as_str().unwrap().to_owned();
                reasons.insert(reason.clone());
                last_released.insert(lock, (token, reason));
                releases += 1;
            }
            "force_release" => {
                let token = line["token"].as_u64().unwrap();
                assert_eq!(
                    last_released.get(&lock),
                    Some(&(token, "force".to_owned())),
                    "line {index}: force_release follows its released"
                );
                force_events += 1;
            }
            "kick_waiter" => kick_events += 1,
            // The holder keeps the lock until its released line.
            "ended_by_server" => {
                let token = line["token"].as_u64().unwrap();
                assert_eq!(*current, Some(token), "line {index}: {line}");
                ended_by_server += 1;
            }
            other => panic!("unexpected event {other}"),
        }
    }
    assert!(
        holder.values().all(Option::is_none),
        "all released at shutdown"
    );
    assert_eq!(grants, releases);
    assert_eq!(force_events, forced);
    assert_eq!(kick_events, kicked);
    for reason in ["graceful", "expired", "force", "protocol_error", "shutdown"] {
        assert!(
            reasons.contains(reason),
            "no {reason} release in {reasons:?}"
        );
    }
    assert!(grants >= CLIENTS, "{grants} grants");
    assert!(ended_by_server > 0, "no misbehaving holder was ended");
}

#[tokio::test]
async fn a_failing_audit_sink_is_counted_and_the_server_goes_on() {
    // Every write to /dev/full fails with ENOSPC.
    let audit = Arc::new(AuditLog::open(AuditTarget::File("/dev/full".into())).expect("open"));
    let server = TestServer::start_with(ServerConfig::default().with_observer(audit.clone())).await;
    for round in 0..3 {
        let (peer, _) = server.hold("disk-full", 30_000).await;
        drop(peer);
        common::eventually("released", || server.handle.counts().locks == 0).await;
        audit.flush().await;
        assert_eq!(
            audit.write_errors(),
            2 * (round + 1),
            "granted + released lost"
        );
    }
    server.stop().await;
    audit.close().await;
}
