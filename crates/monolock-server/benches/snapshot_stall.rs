//! What a snapshot of the lock table (`GET /api/locks`, the first event of
//! every `GET /api/events`, so every dashboard load) costs the protocol
//! path when many locks are held.
//!
//! N sessions each hold a lock of their own (in-process, over in-memory
//! streams: [`ServerHandle::serve_stream`]). A grant probe acquires and
//! releases a free lock every millisecond; its latency is printed with no
//! snapshot running and while snapshots are taken back to back, beside how
//! long one snapshot takes.
//!
//! ```text
//! cargo bench -p monolock-server --bench snapshot_stall [-- LOCKS]
//! ```

mod common;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use common::{acquire_bytes, open};
use monolock_server::{Server, ServerConfig};
use tokio::io::AsyncWriteExt;

const LEASE: Duration = Duration::from_secs(600);
const PHASE_TIME: Duration = Duration::from_secs(3);

fn main() {
    let locks: usize = std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse().ok())
        .unwrap_or(100_000);
    common::runtime().block_on(run(locks));
}

async fn run(locks: usize) {
    let server = Server::new(ServerConfig::default());
    let handle = server.handle();
    let mut holders = Vec::with_capacity(locks);
    for i in 0..locks {
        let mut client = open(&handle, 10_000 + (i % 50_000) as u16);
        client
            .write_all(&acquire_bytes(&format!("fleet/job-{i:07}"), LEASE))
            .await
            .expect("send");
        holders.push(client);
        if i % 500 == 499 {
            tokio::task::yield_now().await;
        }
    }
    while handle.counts().locks < locks {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    println!("locks held: {locks}");

    let phase = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let samples: Arc<Mutex<[Vec<Duration>; 2]>> = Arc::default();
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
                samples.lock().expect("samples")[at].push(took);
            }
        }
    });
    tokio::time::sleep(PHASE_TIME).await;
    phase.store(1, Ordering::Relaxed);
    let snapshots = tokio::task::spawn_blocking({
        let handle = handle.clone();
        move || {
            let mut times = Vec::new();
            let started = Instant::now();
            while started.elapsed() < PHASE_TIME {
                let t = Instant::now();
                let list = handle.locks(|_| true);
                times.push(t.elapsed());
                assert!(list.len() >= locks);
            }
            times
        }
    });
    let mut times = snapshots.await.expect("snapshots");
    stop.store(true, Ordering::Relaxed);
    grants.await.expect("probe");
    times.sort();
    println!(
        "snapshots: {} taken, p50 {:.1} ms, max {:.1} ms",
        times.len(),
        times[times.len() / 2].as_secs_f64() * 1e3,
        times[times.len() - 1].as_secs_f64() * 1e3
    );
    let samples = samples.lock().expect("samples");
    for (name, series) in ["no snapshot", "snapshots back to back"]
        .iter()
        .zip(samples.iter())
    {
        let mut values = series.clone();
        values.sort();
        let pick = |q: f64| values[((values.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
        println!(
            "grant probe, {name:<24}: {:>5} samples, p50 {:>8.0} µs, p99 {:>8.0} µs, max {:>8.0} µs",
            values.len(),
            pick(0.5),
            pick(0.99),
            pick(1.0)
        );
    }
    drop(holders);
}
