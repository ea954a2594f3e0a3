//! What live event subscribers cost the protocol path: contention
//! throughput (clients taking turns on one lock: connect, ACQUIRE, wait for
//! the grant, close) with no subscriber and with 100 subscribers following
//! `GET /api/events` over real sockets, in alternating rounds of one run.
//!
//! Then what the protocol path itself pays: the time of one
//! `EventHub::observe` (called inside the lock table's critical section for
//! every grant and release) with no subscriber and with 100 subscribers
//! draining their streams.
//!
//! `cargo bench -p monolock-server --bench live_events [-- ROUNDS SECONDS]`

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use monolock_proto::{ClientFrame, Lease, LockName, ServerFrame, decode_response};
use monolock_server::{
    Event, EventHub, Observer, Server, ServerConfig, SessionInfo,
    admin::{self, AdminOptions, EffectiveConfig},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

/// Clients contending for the one lock.
const CLIENTS: usize = 16;
/// Event subscribers in the loaded rounds.
const SUBSCRIBERS: usize = 100;

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let seconds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let round = Duration::from_secs(seconds);

    let hub = Arc::new(EventHub::new().expect("event hub"));
    let server = Server::new(ServerConfig::default().with_observer(hub.clone()));
    let handle = server.handle();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(server.run(listener));
    let admin_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let admin_addr = admin_listener.local_addr().expect("addr");
    let options =
        AdminOptions::new(handle.clone(), EffectiveConfig::default()).with_events(hub.clone());
    tokio::spawn(admin::serve_with(
        admin_listener,
        options,
        std::future::pending(),
    ));

    println!(
        "contention: {CLIENTS} clients taking turns on one lock; {rounds} rounds of {seconds}s per setting, alternating"
    );
    let mut without = Vec::new();
    let mut with = Vec::new();
    for r in 0..rounds {
        let quiet = contention(addr, round).await;
        without.push(quiet);
        let subscribers = Subscribers::start(admin_addr, SUBSCRIBERS).await;
        while hub.subscribers() < SUBSCRIBERS {
            tokio::task::yield_now().await;
        }
        let loaded = contention(addr, round).await;
        let received = subscribers.stop().await;
        with.push(loaded);
        println!(
            "round {}: {:>9.0} grants/s without subscribers, {:>9.0} grants/s with {SUBSCRIBERS} (they read {:.1} MB, {} cut off so far)",
            r + 1,
            quiet,
            loaded,
            received as f64 / 1e6,
            hub.lagged()
        );
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (quiet, loaded) = (median(&mut without), median(&mut with));
    println!(
        "median: {quiet:.0} grants/s without, {loaded:.0} grants/s with {SUBSCRIBERS} subscribers: ratio {:.3}",
        loaded / quiet
    );
    handle.shutdown();

    println!("observe: the cost the table's critical section pays per event");
    for round in 0..rounds {
        let quiet = observe_cost(0).await;
        let loaded = observe_cost(SUBSCRIBERS).await;
        println!(
            "round {}: {quiet:>6.0} ns per event without subscribers, {loaded:>6.0} ns with {SUBSCRIBERS}",
            round + 1
        );
    }
}

/// Events observed per call of [`observe_cost`].
const OBSERVED: u32 = 200_000;

/// Nanoseconds per `observe` of a grant, with `subscribers` draining.
async fn observe_cost(subscribers: usize) -> f64 {
    let hub = Arc::new(EventHub::new().expect("event hub"));
    let mut drains = Vec::new();
    for _ in 0..subscribers {
        let mut subscription = hub.subscribe();
        drains.push(tokio::spawn(async move {
            while subscription.next().await.is_some() {}
        }));
    }
    let observer = hub.clone();
    let elapsed = tokio::task::spawn_blocking(move || {
        let session = SessionInfo {
            lock: LockName::new("nightly/import").expect("name"),
            lease: Lease::from_millis(10_000).expect("lease"),
            remote_addr: "10.0.0.5:52114".parse().expect("address"),
            identity: Arc::from("spiffe://prod/worker/1"),
            queued_at: std::time::SystemTime::now(),
        };
        let started = Instant::now();
        for token in 0..OBSERVED {
            observer.observe(&Event::Granted {
                session: &session,
                token: u64::from(token),
                wait: Duration::ZERO,
            });
        }
        started.elapsed()
    })
    .await
    .expect("observer thread");
    drop(hub);
    for drain in drains {
        drain.abort();
    }
    elapsed.as_nanos() as f64 / f64::from(OBSERVED)
}

/// Grants per second over `duration` with [`CLIENTS`] clients taking turns.
async fn contention(addr: SocketAddr, duration: Duration) -> f64 {
    let grants = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (grants, stop) = (grants.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            let acquire = ClientFrame::acquire(
                Lease::from_millis(10_000).expect("lease"),
                LockName::new("contended").expect("name"),
            )
            .to_bytes();
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut stream) = TcpStream::connect(addr).await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                if stream.write_all(&acquire).await.is_err() {
                    continue;
                }
                if granted(&mut stream).await {
                    grants.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let counted = grants.load(Ordering::Relaxed);
    let elapsed = started.elapsed();
    for client in clients {
        let _ = client.await;
    }
    counted as f64 / elapsed.as_secs_f64()
}

/// Reads replies until ACQUIRED (true) or the end of the connection.
async fn granted(stream: &mut TcpStream) -> bool {
    let mut buf = Vec::with_capacity(64);
    let mut chunk = [0u8; 64];
    loop {
        while let Ok(Some((frame, used))) = decode_response(&buf) {
            buf.drain(..used);
            if let ServerFrame::Acquired { .. } = frame {
                return true;
            }
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Event subscribers reading everything as fast as they can.
struct Subscribers {
    tasks: Vec<tokio::task::JoinHandle<u64>>,
    stop: Arc<AtomicBool>,
}

impl Subscribers {
    async fn start(admin: SocketAddr, count: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for _ in 0..count {
            let mut stream = TcpStream::connect(admin).await.expect("connect admin");
            stream
                .write_all(b"GET /api/events HTTP/1.0\r\nHost: bench\r\n\r\n")
                .await
                .expect("request");
            let stop = stop.clone();
            tasks.push(tokio::spawn(async move {
                let mut total = 0u64;
                let mut chunk = vec![0u8; 64 * 1024];
                while !stop.load(Ordering::Relaxed) {
                    match tokio::time::timeout(Duration::from_millis(100), stream.read(&mut chunk))
                        .await
                    {
                        Ok(Ok(0)) | Ok(Err(_)) => break,
                        Ok(Ok(n)) => total += n as u64,
                        Err(_) => {}
                    }
                }
                total
            }));
        }
        Self { tasks, stop }
    }

    /// Closes every subscription; the bytes they read.
    async fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let mut total = 0;
        for task in self.tasks {
            total += task.await.unwrap_or(0);
        }
        total
    }
}
