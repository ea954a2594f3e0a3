//! 6. Slow and hostile clients next to healthy ones.
//!
//! While healthy clients hold locks (raw probes that time every heartbeat
//! round trip, and guards of the client library), the in-process server is
//! attacked by: clients that flood heartbeats and never read the replies,
//! slowloris clients (one byte per second), random bytes, truncated frames,
//! names declared 256..65535 bytes long, and thousands of connect-close
//! cycles. Checked: every healthy heartbeat is answered ACQUIRED with the
//! holder's token within the stated bound (0.4 x lease, see `RTT_BOUND`);
//! no healthy client loses its lock; each
//! oversized name gets ERROR 0x15 (not a reset); never-reading clients are
//! ended by io-timeout; the server's connections drain back to the healthy
//! ones.

use std::{sync::Arc, time::Duration};

use monolock_client::Client;
use monolock_proto::{ErrorCode, ServerFrame};
use rand::{Rng, SeedableRng, rngs::StdRng};
use tokio::{sync::Mutex, task::JoinSet, time::Instant};

use super::{InProcessServer, Report, Result, ScenarioError};
use crate::{
    audit::EventKind,
    probe::{self, Probe},
};

const LEASE: Duration = Duration::from_secs(2);
const IO_TIMEOUT: Duration = Duration::from_secs(1);
const HEARTBEAT_EVERY: Duration = Duration::from_millis(100);
const CONNECT_CLOSE_CYCLES: u32 = 3000;
/// How long a never-reading client floods and keeps its connection open
/// waiting for the server to end it. The server ends it one io-timeout
/// after its replies fill the socket buffers (some megabytes), which a
/// loaded machine reaches in seconds: generous, since the client must not
/// close first (that is a graceful end, not an io-timeout).
const NEVER_READING_LIMIT: Duration = Duration::from_secs(30);
/// The bound on a healthy heartbeat's round trip: 0.4 x lease. A client
/// confirms its claim in time as long as its heartbeat interval (at least
/// lease / 16) plus the round trip stays under 0.8 x lease, so a round trip
/// of 0.4 x lease still leaves margin; past it, hostile clients would be
/// costing healthy ones their locks.
const RTT_BOUND: Duration = Duration::from_millis(800);

pub(super) async fn run(
    _env: &super::Env,
    rounds: u32,
    rng: &mut StdRng,
    report: &mut Report,
) -> Result<()> {
    report.lease_ms = LEASE.as_millis() as u64;
    let bound = RTT_BOUND;
    report.heartbeat_rtt_bound_ms = Some(bound.as_secs_f64() * 1000.0);
    let server = InProcessServer::start(IO_TIMEOUT)
        .map_err(ScenarioError::io("starting the in-process server"))?;
    for round in 0..rounds.max(1) {
        attack_round(&server, round, rng.random(), report).await?;
    }
    let expected_io_timeouts = 2 * u64::from(rounds.max(1));
    let io_timeouts = |never_reading: bool| {
        server
            .events
            .events()
            .iter()
            .filter(|e| {
                e.kind == EventKind::Released
                    && e.reason.as_deref() == Some("io_timeout")
                    && e.lock.contains("/never-reading-") == never_reading
            })
            .count() as u64
    };
    // The server ends a blocked writer one io-timeout after its write
    // blocked, which may be after the client gave up sending, and releases
    // its lock only at its last frame + lease (a holder the server closes
    // keeps its lock until its own lease would have run out): wait for it
    // (bounded poll; the recorder has no notification).
    let deadline = Instant::now() + IO_TIMEOUT * 5 + LEASE;
    while io_timeouts(true) < expected_io_timeouts && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ended = io_timeouts(true);
    report.count("never_reading_ended_by_io_timeout", ended);
    report.check(ended == expected_io_timeouts, || {
        format!(
            "{ended} never-reading holders were ended by io-timeout, expected {expected_io_timeouts}; {}",
            never_reading_ends(&server.events.events())
        )
    });
    // Holders that had closed their connection when a write to them failed
    // released gracefully, not by io-timeout (see the regression test
    // `a_write_to_a_closed_peer_is_not_an_io_timeout`).
    let mislabelled = io_timeouts(false);
    report.count("closed_peers_released_as_io_timeout", mislabelled);
    report.check(mislabelled == 0, || {
        format!(
            "{mislabelled} holders that had closed their connection were released as io_timeout"
        )
    });
    for p in server.audit_problems() {
        report.problem(format!("audit: {p}"));
    }
    Ok(())
}

/// How each never-reading holder's grant ended, for the failure message:
/// `lock: reason` (or "still held").
fn never_reading_ends(events: &[crate::audit::OwnershipEvent]) -> String {
    let mut ends: std::collections::BTreeMap<&str, &str> = std::collections::BTreeMap::new();
    for e in events.iter().filter(|e| e.lock.contains("/never-reading-")) {
        let end = match e.kind {
            EventKind::Granted => "still held",
            EventKind::Released => e.reason.as_deref().unwrap_or("released"),
        };
        ends.insert(e.lock.as_str(), end);
    }
    let ends: Vec<String> = ends
        .iter()
        .map(|(lock, end)| format!("{lock}: {end}"))
        .collect();
    format!("their grants ended: {}", ends.join(", "))
}

async fn attack_round(
    server: &InProcessServer,
    round: u32,
    seed: u64,
    report: &mut Report,
) -> Result<()> {
    let addr = server.addr;
    let bound = RTT_BOUND;
    // Healthy raw probes, each holding its own lock, on a thread and
    // runtime of their own: they stand for clients on other machines, so
    // their round trips measure the server, not this process's load.
    let probes = HealthyProbes::start(addr, round).await?;
    // Healthy clients of the client library.
    let client = Client::new(addr.to_string());
    let mut guards = Vec::new();
    for i in 0..2 {
        let guard = client
            .acquire(format!("faults/hostile/{round}/guard-{i}"), LEASE)
            .await
            .map_err(|source| ScenarioError::Client {
                what: "healthy guard",
                source: Box::new(source),
            })?;
        guards.push(guard);
    }

    let mut attack = JoinSet::new();
    let mut rng = StdRng::seed_from_u64(seed);
    for i in 0..2 {
        let lock = format!("faults/hostile/{round}/never-reading-{i}");
        attack.spawn(async move {
            let sent =
                probe::never_reading(addr, &lock, LEASE, 64 << 20, NEVER_READING_LIMIT).await;
            // Counted together as "never_reading" below.
            match sent {
                Ok((_, probe::Stopped::Closed)) => ("never_reading_closed_by_server", 1),
                Ok((_, probe::Stopped::TimedOut)) => ("never_reading_still_open", 1),
                Ok((_, probe::Stopped::Sent)) => ("never_reading_sent_everything", 1),
                Err(_) => ("never_reading_failed", 1),
            }
        });
    }
    for i in 0..3 {
        let lock = format!("faults/hostile/{round}/slowloris-{i}");
        attack.spawn(async move {
            let sent = probe::slowloris(addr, &lock, Duration::from_secs(1), 64)
                .await
                .unwrap_or(0);
            // Cut off by io-timeout long before the frame is complete.
            ("slowloris_cut_off", u64::from(sent < 8 + lock.len()))
        });
    }
    for _ in 0..50 {
        let len = rng.random_range(1..300);
        let bytes = probe::random_garbage(&mut rng, len);
        attack.spawn(async move {
            let frame = probe::send_and_read(addr, &bytes, Duration::from_secs(3))
                .await
                .ok()
                .flatten();
            (
                "random_bytes_refused",
                u64::from(matches!(frame, Some(ServerFrame::Error { .. }))),
            )
        });
    }
    for _ in 0..30 {
        let full = probe::acquire_bytes(1000, 12, b"faults/trunc");
        let cut = rng.random_range(1..full.len());
        attack.spawn(async move {
            // Holds the partial frame open until the server gives up.
            let frame = probe::send_and_read(addr, &full[..cut], Duration::from_secs(4))
                .await
                .ok()
                .flatten();
            ("truncated_dropped", u64::from(frame.is_none()))
        });
    }
    for _ in 0..20 {
        let len = rng.random_range(256..=u16::MAX);
        let mut bytes = probe::acquire_bytes(1000, len, &[]);
        bytes.extend(std::iter::repeat_n(b'x', 4096));
        attack.spawn(async move {
            let frame = probe::send_and_read(addr, &bytes, Duration::from_secs(3))
                .await
                .ok()
                .flatten();
            let got = matches!(frame, Some(ServerFrame::Error { code, .. }) if code == ErrorCode::NAME_TOO_LONG);
            ("oversized_name_0x15", u64::from(got))
        });
    }
    for task in 0..4u32 {
        let lock = format!("faults/hostile/{round}/churn");
        attack.spawn(async move {
            let mut cycles = 0;
            let acquire = probe::acquire_bytes(1000, lock.len() as u16, lock.as_bytes());
            for i in 0..CONNECT_CLOSE_CYCLES / 4 {
                let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
                    continue;
                };
                if (i + task) % 2 == 0 {
                    use tokio::io::AsyncWriteExt;
                    let _ = stream.write_all(&acquire).await;
                }
                drop(stream);
                cycles += 1;
            }
            ("connect_close_cycles", cycles)
        });
    }
    let started = Instant::now();
    let mut expected: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    expected.insert("never_reading", 2);
    expected.insert("slowloris_cut_off", 3);
    expected.insert("oversized_name_0x15", 20);
    expected.insert("truncated_dropped", 30);
    let mut got: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    while let Some(done) = attack.join_next().await {
        if let Ok((what, n)) = done {
            *got.entry(what).or_default() += n;
        }
    }
    let never_reading: u64 = got
        .iter()
        .filter(|(what, _)| what.starts_with("never_reading_") && **what != "never_reading_failed")
        .map(|(_, n)| n)
        .sum();
    got.insert("never_reading", never_reading);
    let (rtts, failures) = probes.finish().await;
    report.count("attack_ms", started.elapsed().as_millis() as u64);
    for (what, n) in &got {
        report.count(what, *n);
    }
    for (what, n) in expected {
        let seen = got.get(what).copied().unwrap_or(0);
        report.check(seen == n, || format!("{what}: {seen} of {n}"));
    }
    report.fault("hostile-attack");
    for f in failures {
        report.problem(f);
    }
    report.count("healthy_heartbeats", rtts.len() as u64);
    let max = rtts.iter().max().copied().unwrap_or_default();
    let max_ms = max.as_secs_f64() * 1000.0;
    report.max_heartbeat_rtt_ms = Some(
        report
            .max_heartbeat_rtt_ms
            .map_or(max_ms, |m| m.max(max_ms)),
    );
    report.check(max <= bound, || {
        format!("a healthy heartbeat took {max:?} (bound {bound:?})")
    });
    report.check(!rtts.is_empty(), || {
        "no healthy heartbeat was measured".into()
    });
    for guard in &guards {
        report.check(guard.is_held() && guard.loss().is_none(), || {
            format!(
                "healthy guard {} lost its lock: {:?}",
                guard.name(),
                guard.loss()
            )
        });
    }
    // The hostile connections drain away (bounded poll: the server has no
    // notification for its connection count). The probes have closed; the
    // guards remain.
    // One connection per guard over protocol v1; over v2 (the client's
    // default) the guards share the client's sessions.
    let healthy_connections = match client.session_loads().len() {
        0 => guards.len(),
        sessions => sessions,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.handle.connections() > healthy_connections && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let left = server.handle.connections();
    report.check(left == healthy_connections, || {
        format!("{left} connections remain, expected the {healthy_connections} healthy ones")
    });
    drop(guards);
    Ok(())
}

/// Three raw probes holding locks and heartbeating every
/// `HEARTBEAT_EVERY`, on their own thread and runtime.
struct HealthyProbes {
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<(Vec<Duration>, Vec<String>)>,
}

impl HealthyProbes {
    /// Starts the probes and waits until each holds its lock.
    async fn start(addr: std::net::SocketAddr, round: u32) -> Result<Self> {
        let (ready_tx, ready) = tokio::sync::oneshot::channel::<Result<()>>();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("healthy-probes".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(err) => {
                        let what = "starting the healthy probes' runtime";
                        let _ = ready_tx.send(Err(ScenarioError::io(what)(err)));
                        return (Vec::new(), Vec::new());
                    }
                };
                runtime.block_on(run_probes(addr, round, ready_tx, stop_rx))
            })
            .map_err(ScenarioError::io("starting the healthy probes' thread"))?;
        match ready.await {
            Ok(Ok(())) => Ok(Self { stop, thread }),
            Ok(Err(err)) => Err(err),
            Err(_) => Err(ScenarioError::Unexpected(
                "the healthy probes' thread ended".into(),
            )),
        }
    }

    /// Stops them; returns every round trip and every failure.
    async fn finish(self) -> (Vec<Duration>, Vec<String>) {
        let _ = self.stop.send(());
        let thread = self.thread;
        tokio::task::spawn_blocking(move || thread.join())
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_else(|| (Vec::new(), vec!["the healthy probes panicked".into()]))
    }
}

async fn run_probes(
    addr: std::net::SocketAddr,
    round: u32,
    ready: tokio::sync::oneshot::Sender<Result<()>>,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> (Vec<Duration>, Vec<String>) {
    let mut probes = Vec::new();
    for i in 0..3 {
        let lock = format!("faults/hostile/{round}/healthy-{i}");
        match Probe::acquire(addr, &lock, LEASE, Duration::from_secs(5)).await {
            Ok((probe, ServerFrame::Acquired { token })) => probes.push((probe, token)),
            other => {
                let _ = ready.send(Err(ScenarioError::Unexpected(format!(
                    "healthy probe: {:?}",
                    other.map(|(_, f)| f)
                ))));
                return (Vec::new(), Vec::new());
            }
        }
    }
    let _ = ready.send(Ok(()));
    let rtts = Arc::new(Mutex::new(Vec::new()));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let stopped = Arc::new(tokio::sync::Notify::new());
    let mut tasks = JoinSet::new();
    for (mut probe, token) in probes {
        let (rtts, failures, stopped) = (rtts.clone(), failures.clone(), stopped.clone());
        tasks.spawn(async move {
            let finished = stopped.notified();
            tokio::pin!(finished);
            // At most one minute of heartbeats, whatever happens.
            for _ in 0..600 {
                match probe.heartbeat(LEASE).await {
                    Ok((ServerFrame::Acquired { token: t }, rtt)) if t == token => {
                        rtts.lock().await.push(rtt);
                    }
                    other => {
                        failures
                            .lock()
                            .await
                            .push(format!("healthy heartbeat: {other:?}"));
                        return;
                    }
                }
                tokio::select! {
                    () = &mut finished => return,
                    () = tokio::time::sleep(HEARTBEAT_EVERY) => {}
                }
            }
        });
    }
    let _ = stop.await;
    stopped.notify_waiters();
    while tasks.join_next().await.is_some() {}
    let rtts = std::mem::take(&mut *rtts.lock().await);
    let failures = std::mem::take(&mut *failures.lock().await);
    (rtts, failures)
}
