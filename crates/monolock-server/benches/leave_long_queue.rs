//! Does a long queue joining and leaving stall other locks?
//!
//! 100,000 waiters queue on one lock and then leave, newest first (the
//! worst order for a queue searched from the front). Meanwhile two probes
//! run on other locks: a held session heartbeating every millisecond (round
//! trip of HEARTBEAT → ACQUIRED) and a session acquiring and releasing a
//! free lock over and over (ACQUIRE → ACQUIRED). Their p50/p99/max are
//! printed for three phases side by side: idle, the queue joining, the
//! queue leaving. Sessions run in-process over in-memory streams
//! ([`ServerHandle::serve_stream`]), so the figures are the server's own
//! work and not the kernel's.
//!
//! ```text
//! cargo bench -p monolock-server --bench leave_long_queue [-- WAITERS]
//! ```

mod common;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use common::{acquire_bytes, open, until_acquired};
use monolock_proto::msg;
use monolock_server::{Server, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PHASES: [&str; 3] = ["idle", "joining", "leaving"];
/// Waiters joined or dropped between yields, so the probes interleave.
const STEP: usize = 500;
const LEASE: Duration = Duration::from_secs(600);

fn main() {
    let waiters: usize = std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse().ok())
        .unwrap_or(100_000);
    common::runtime().block_on(run(waiters));
}

#[derive(Default)]
struct Samples {
    /// Per phase.
    heartbeat: [Vec<Duration>; 3],
    grant: [Vec<Duration>; 3],
}

async fn run(waiters: usize) {
    let server = Server::new(ServerConfig::default());
    let handle = server.handle();
    let phase = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(Mutex::new(Samples::default()));

    // The heartbeat probe: a holder of its own lock.
    let mut held = open(&handle, 1);
    held.write_all(&acquire_bytes("probe/heartbeat", LEASE))
        .await
        .expect("send");
    until_acquired(&mut held).await;
    let heartbeats = tokio::spawn({
        let (phase, stop, samples) = (phase.clone(), stop.clone(), samples.clone());
        async move {
            let mut tick = tokio::time::interval(Duration::from_millis(1));
            let mut reply = [0u8; 9];
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let start = Instant::now();
                held.write_all(&[msg::HEARTBEAT]).await.expect("heartbeat");
                held.read_exact(&mut reply).await.expect("reply");
                let at = phase.load(Ordering::Relaxed);
                samples.lock().expect("samples").heartbeat[at].push(start.elapsed());
            }
        }
    });
    // The grant probe: acquire a free lock, get it, release, again.
    let grants = tokio::spawn({
        let (handle, phase, stop, samples) =
            (handle.clone(), phase.clone(), stop.clone(), samples.clone());
        async move {
            let frame = acquire_bytes("probe/grant", LEASE);
            let mut tick = tokio::time::interval(Duration::from_millis(1));
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let took = common::grant_cycle(&handle, &frame).await;
                let at = phase.load(Ordering::Relaxed);
                samples.lock().expect("samples").grant[at].push(took);
            }
        }
    });

    tokio::time::sleep(Duration::from_secs(1)).await;

    // The long queue's holder, then the waiters.
    let mut holder = open(&handle, 3);
    holder
        .write_all(&acquire_bytes("long", LEASE))
        .await
        .expect("send");
    until_acquired(&mut holder).await;
    phase.store(1, Ordering::Relaxed);
    let frame = acquire_bytes("long", LEASE);
    let join_start = Instant::now();
    let mut clients = Vec::with_capacity(waiters);
    for i in 0..waiters {
        let mut client = open(&handle, 10_000 + (i % 50_000) as u16);
        client.write_all(&frame).await.expect("send");
        clients.push(client);
        if i % STEP == STEP - 1 {
            tokio::task::yield_now().await;
        }
    }
    while handle.counts().waiters < waiters {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let joined = join_start.elapsed();

    phase.store(2, Ordering::Relaxed);
    let leave_start = Instant::now();
    while !clients.is_empty() {
        let keep = clients.len().saturating_sub(STEP);
        clients.truncate(keep);
        tokio::task::yield_now().await;
    }
    while handle.counts().waiters > 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let left = leave_start.elapsed();
    stop.store(true, Ordering::Relaxed);
    heartbeats.await.expect("heartbeat probe");
    grants.await.expect("grant probe");
    drop(holder);

    let samples = samples.lock().expect("samples");
    println!("waiters on one lock: {waiters}");
    println!(
        "joined in {:.0} ms, left (newest first) in {:.0} ms",
        joined.as_secs_f64() * 1e3,
        left.as_secs_f64() * 1e3
    );
    println!(
        "{:<10} {:<10} {:>8} {:>10} {:>10} {:>10}",
        "probe", "phase", "samples", "p50 µs", "p99 µs", "max µs"
    );
    for (name, series) in [("heartbeat", &samples.heartbeat), ("grant", &samples.grant)] {
        for (at, phase) in PHASES.iter().enumerate() {
            let mut values = series[at].clone();
            values.sort();
            let pick = |q: f64| {
                values
                    .get(((values.len() as f64 * q).ceil() as usize).saturating_sub(1))
                    .map_or(f64::NAN, |d| d.as_secs_f64() * 1e6)
            };
            println!(
                "{:<10} {:<10} {:>8} {:>10.0} {:>10.0} {:>10.0}",
                name,
                phase,
                values.len(),
                pick(0.5),
                pick(0.99),
                pick(1.0)
            );
        }
    }
}
