//! What live event subscribers cost the protocol path: contention
//! throughput (clients taking turns on one lock: connect, ACQUIRE, wait for
//! the grant, close) and CPU time per grant, with no subscriber and with
//! 100 subscribers following `GET /api/events` over real sockets, in
//! alternating rounds of one run.
//!
//! The server and its contending clients are pinned to the first CPU, which
//! they saturate; the subscribers run in a child process (this binary
//! again, `subscribe ADDR COUNT CPU PATH`) pinned to the last. The admin
//! API runs on its own thread, as `monolock serve` runs it
//! (`admin::spawn`); each round runs every setting once, in this order:
//! no subscriber; no subscriber again (the two quiet figures are the noise
//! band any difference must leave to count); 100 subscribers with the
//! admin thread and the event dispatcher on the last CPU (a machine with a
//! core to spare); the same following `?match=` a pattern the contended
//! lock does not match (filtered on the server); 100 with the admin thread
//! and dispatcher on the first CPU (one core for everything: the worst
//! case); the same with smaller batches (5 ms, 16 KiB).
//!
//! Then what the protocol path itself pays: the time of one
//! `EventHub::observe` (called inside the lock table's critical section for
//! every grant and release) with no subscriber and with 100 subscribers
//! draining their streams.
//!
//! `cargo bench -p monolock-server --bench live_events [-- ROUNDS SECONDS]`

use std::{
    io::Read as _,
    net::SocketAddr,
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use monolock_proto::{ClientFrame, Lease, LockName, ServerFrame, decode_response};
use monolock_server::{
    Batching, Event, EventHub, KEEPALIVE_INTERVAL, Observer, Server, ServerConfig, ServerHandle,
    SessionInfo,
    admin::{self, AdminOptions, EffectiveConfig},
};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::{TcpListener, TcpStream},
};
use tokio_util::sync::CancellationToken;

/// Clients contending for the one lock.
const CLIENTS: usize = 16;
/// Event subscribers in the loaded rounds.
const SUBSCRIBERS: usize = 100;

/// Smaller batches (the defaults before), for comparison: 5 ms windows,
/// 16 KiB batches, 64 batches of buffer per subscriber (the same 1 MiB bound).
const SMALL: Batching = Batching {
    flush_interval: Duration::from_millis(5),
    max_batch_bytes: 16 * 1024,
};
const SMALL_BUFFER: usize = 64;

/// Every event of every lock.
const ALL_EVENTS: &str = "/api/events";
/// Events of locks the contended one is not: the server filters them all.
const OTHER_EVENTS: &str = "/api/events?match=other%2F*";

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let first = args.next();
    if first.as_deref() == Some("subscribe") {
        let admin: SocketAddr = args
            .next()
            .and_then(|a| a.parse().ok())
            .expect("subscribe ADDR COUNT");
        let count: usize = args
            .next()
            .and_then(|a| a.parse().ok())
            .unwrap_or(SUBSCRIBERS);
        if let Some(cpu) = args.next().and_then(|a| a.parse().ok()) {
            pin(cpu);
        }
        let path = args.next().unwrap_or_else(|| ALL_EVENTS.to_owned());
        return runtime().block_on(subscriber_process(admin, count, path));
    }
    let rounds: usize = first.and_then(|a| a.parse().ok()).unwrap_or(3);
    let seconds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    // Learnt before pinning narrows what this process may use.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let subscriber_cpu = if cpus > 1 {
        // Pinned before the runtime starts, so every thread inherits it.
        pin(0);
        Some(cpus - 1)
    } else {
        eprintln!("one CPU: nothing pinned");
        None
    };
    runtime().block_on(bench(rounds, Duration::from_secs(seconds), subscriber_cpu));
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .thread_name(PROTOCOL_THREADS)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Restricts this thread (and every thread it starts later) to `cpu`, with
/// `taskset` so that the bench needs no unsafe code; without it nothing is
/// pinned and the bench says so.
fn pin(cpu: usize) {
    // `taskset -p` on the thread id pins this thread only; threads started
    // afterwards inherit its mask.
    let tid = std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name().and_then(|n| n.to_str()).map(str::to_owned));
    let pinned = tid.is_some_and(|tid| {
        std::process::Command::new("taskset")
            .args(["-p", "-c", &cpu.to_string(), &tid])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    });
    if !pinned {
        eprintln!("taskset failed: nothing pinned to CPU {cpu}");
    }
}

/// The name of this bench's runtime threads, which run the protocol path
/// (the server's sessions and its contending clients) and nothing else.
const PROTOCOL_THREADS: &str = "bench-protocol";

/// CPU time (user + system) the protocol threads have used so far, summed
/// from `/proc/self/task/*/stat` (clock ticks, 10 ms each on Linux): not
/// the admin thread's or the event dispatcher's.
fn protocol_cpu() -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    let ticks: u64 = tasks
        .flatten()
        .filter_map(|task| {
            let mut stat = String::new();
            std::fs::File::open(task.path().join("stat"))
                .and_then(|mut f| f.read_to_string(&mut stat))
                .ok()?;
            // The name is in parentheses and may hold spaces; the kernel
            // keeps its first 15 bytes.
            let (head, rest) = stat.rsplit_once(')')?;
            let (_, name) = head.split_once('(')?;
            if !PROTOCOL_THREADS.starts_with(name) {
                return None;
            }
            let fields: Vec<&str> = rest.split_whitespace().collect();
            // utime and stime are fields 14 and 15 of the line, 12 and 13 after ")".
            let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
            Some(tick(11)? + tick(12)?)
        })
        .sum();
    Duration::from_millis(ticks * 10)
}

/// Busy time of all CPUs so far: the first line of `/proc/stat` (clock
/// ticks of 10 ms) less idle and iowait.
fn machine_busy() -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> = stat.lines().next().map_or(Vec::new(), |line| {
        line.split_whitespace()
            .skip(1)
            .filter_map(|f| f.parse().ok())
            .collect()
    });
    // user nice system idle iowait irq softirq steal (guest is within user)
    let busy: u64 = ticks
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, t)| t)
        .sum();
    Duration::from_millis(busy * 10)
}

/// One server with its own hub and admin listener, served as `monolock
/// serve` serves them: the admin API on its own thread (`admin::spawn`).
struct Lab {
    hub: Arc<EventHub>,
    handle: ServerHandle,
    addr: SocketAddr,
    admin: SocketAddr,
    /// Where the subscriber process runs, if pinned.
    subscriber_cpu: Option<usize>,
}

impl Lab {
    /// Starts a server on this runtime (CPU 0) with `hub`, made by
    /// `make_hub`, and the admin API. Both the event dispatcher's thread and
    /// the admin thread are started from a thread pinned to `admin_cpu`, so
    /// they inherit it: on CPU 1 the protocol path keeps CPU 0 to itself
    /// (as on a machine with a core to spare); on CPU 0 all share one core.
    async fn start(
        make_hub: fn() -> EventHub,
        admin_cpu: Option<usize>,
        subscriber_cpu: Option<usize>,
    ) -> Self {
        let runtime = tokio::runtime::Handle::current();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let admin_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let admin = admin_listener.local_addr().expect("addr");
        let (hub, server) = std::thread::spawn(move || {
            if let Some(cpu) = admin_cpu {
                pin(cpu);
            }
            let _entered = runtime.enter();
            let hub = Arc::new(make_hub());
            let server = Server::new(ServerConfig::default().with_observer(hub.clone()));
            let options = AdminOptions::new(server.handle(), EffectiveConfig::default())
                .with_events(hub.clone());
            let thread = admin::spawn(admin_listener, options, std::future::pending())
                .expect("admin thread");
            // Runs until the process ends.
            std::mem::forget(thread);
            (hub, server)
        })
        .join()
        .expect("starter thread");
        let handle = server.handle();
        tokio::spawn(server.run(listener));
        Self {
            hub,
            handle,
            addr,
            admin,
            subscriber_cpu,
        }
    }

    async fn wait_for_subscribers(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.hub.subscribers() < SUBSCRIBERS {
            assert!(Instant::now() < deadline, "subscribers did not connect");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Contention with [`SUBSCRIBERS`] subscribers to `path` in a child
    /// process.
    async fn loaded(&self, round: Duration, path: &str) -> Figures {
        let cpu = self
            .subscriber_cpu
            .map_or_else(|| "any".to_owned(), |cpu| cpu.to_string());
        let mut child = tokio::process::Command::new(std::env::current_exe().expect("exe"))
            .args([
                "subscribe",
                &self.admin.to_string(),
                &SUBSCRIBERS.to_string(),
                &cpu,
                path,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the subscriber process");
        self.wait_for_subscribers().await;
        let mut figures = contention(self.addr, round).await;
        drop(child.stdin.take());
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout");
        let _ = BufReader::new(stdout).read_line(&mut line).await;
        let _ = child.wait().await;
        figures.bytes_read = line.trim().parse().unwrap_or(0);
        figures
    }
}

/// What one contention round measured.
#[derive(Clone, Copy)]
struct Figures {
    grants_per_s: f64,
    /// The protocol threads' CPU time (server sessions and clients; not the
    /// admin thread, the event dispatcher or the subscribers) per grant.
    cpu_us_per_grant: f64,
    /// Every CPU's busy time per grant (`/proc/stat`): the above, the
    /// subscribers, and the kernel's work on behalf of either.
    machine_us_per_grant: f64,
    /// What the subscribers read.
    bytes_read: u64,
}

fn default_hub() -> EventHub {
    EventHub::new().expect("event hub")
}

fn small_batch_hub() -> EventHub {
    EventHub::with_batching(SMALL_BUFFER, KEEPALIVE_INTERVAL, SMALL).expect("event hub")
}

async fn bench(rounds: usize, round: Duration, subscriber_cpu: Option<usize>) {
    // The admin thread beside the subscribers, or on the protocol's core.
    let apart = Lab::start(default_hub, subscriber_cpu, subscriber_cpu).await;
    let shared = Lab::start(default_hub, None, subscriber_cpu).await;
    let smaller = Lab::start(small_batch_hub, None, subscriber_cpu).await;

    println!(
        "contention: {CLIENTS} clients taking turns on one lock, server and clients on CPU 0, \
         {SUBSCRIBERS} subscribers in another process on CPU {}; {rounds} rounds of {}s per setting, alternating",
        subscriber_cpu.map_or_else(|| "any (not pinned)".to_owned(), |cpu| cpu.to_string()),
        round.as_secs()
    );
    const SETTINGS: [&str; 6] = [
        "no subscriber",
        "no subscriber, again",
        "100, admin thread on CPU 1",
        "100 ?match= other, admin on 1",
        "100, admin thread on CPU 0",
        "100, admin on 0, 5 ms/16 KiB",
    ];
    println!("settings: {}", SETTINGS.join(" | "));
    println!(
        "each cell: grants/s, protocol threads' CPU us/grant, whole machine CPU us/grant, MB read"
    );
    let mut rows = Vec::new();
    for r in 0..rounds {
        let row = [
            contention(apart.addr, round).await,
            contention(apart.addr, round).await,
            apart.loaded(round, ALL_EVENTS).await,
            apart.loaded(round, OTHER_EVENTS).await,
            shared.loaded(round, ALL_EVENTS).await,
            smaller.loaded(round, ALL_EVENTS).await,
        ];
        let cells: Vec<String> = row
            .iter()
            .map(|f| {
                format!(
                    "{:>6.0}/s {:>5.1} {:>5.1} us {:>5.0} MB",
                    f.grants_per_s,
                    f.cpu_us_per_grant,
                    f.machine_us_per_grant,
                    f.bytes_read as f64 / 1e6
                )
            })
            .collect();
        println!("round {}: {}", r + 1, cells.join(" | "));
        rows.push(row);
    }
    let median = |pick: &dyn Fn(&[Figures; 6]) -> f64| {
        let mut v: Vec<f64> = rows.iter().map(pick).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let quiet = median(&|row| row[0].grants_per_s);
    let quiet_cpu = median(&|row| row[0].cpu_us_per_grant);
    let quiet_machine = median(&|row| row[0].machine_us_per_grant);
    for (i, what) in SETTINGS.iter().enumerate() {
        let grants = median(&|row| row[i].grants_per_s);
        let cpu = median(&|row| row[i].cpu_us_per_grant);
        let machine = median(&|row| row[i].machine_us_per_grant);
        println!(
            "median, {what:<29}: {grants:>6.0} grants/s (ratio {:.3}), protocol {cpu:>5.1} us CPU/grant (ratio {:.3}), machine {machine:>5.1} us (ratio {:.3})",
            grants / quiet,
            cpu / quiet_cpu,
            machine / quiet_machine,
        );
    }
    // Each round's loaded figure against the same round's first quiet one,
    // beside the second quiet one: the noise band.
    for (i, what) in SETTINGS.iter().enumerate().skip(1) {
        let ratios: Vec<String> = rows
            .iter()
            .map(|row| format!("{:.3}", row[i].grants_per_s / row[0].grants_per_s))
            .collect();
        println!("per round, {what:<29}: {}", ratios.join(" "));
    }
    println!(
        "subscribers cut off: {} (admin on CPU 1), {} (admin on CPU 0), {} (5 ms/16 KiB)",
        apart.hub.lagged(),
        shared.hub.lagged(),
        smaller.hub.lagged()
    );
    for lab in [&apart, &shared, &smaller] {
        lab.handle.shutdown();
    }

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

/// Grants per second over `duration` with [`CLIENTS`] clients taking
/// turns, and the process's CPU time per grant.
async fn contention(addr: SocketAddr, duration: Duration) -> Figures {
    let grants = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let cpu = protocol_cpu();
    let machine = machine_busy();
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
    let cpu = protocol_cpu().saturating_sub(cpu);
    let machine = machine_busy().saturating_sub(machine);
    for client in clients {
        let _ = client.await;
    }
    let counted = counted.max(1) as f64;
    Figures {
        grants_per_s: counted / elapsed.as_secs_f64(),
        cpu_us_per_grant: cpu.as_secs_f64() * 1e6 / counted,
        machine_us_per_grant: machine.as_secs_f64() * 1e6 / counted,
        bytes_read: 0,
    }
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

/// The child process: [`subscribe`] until stdin closes (bounded by a
/// minute in any case); then prints the bytes read.
async fn subscriber_process(admin: SocketAddr, count: usize, path: String) {
    let stop = CancellationToken::new();
    let subscribers = tokio::spawn(subscribe(admin, count, path, stop.clone()));
    let mut stdin = tokio::io::stdin();
    let mut sink = [0u8; 64];
    let _ = tokio::time::timeout(Duration::from_secs(60), async {
        while let Ok(n) = stdin.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
    stop.cancel();
    println!("{}", subscribers.await.unwrap_or(0));
}

/// `count` subscribers to `path` reading everything as fast as they can
/// until `stop`; the bytes they read.
async fn subscribe(admin: SocketAddr, count: usize, path: String, stop: CancellationToken) -> u64 {
    let request = format!("GET {path} HTTP/1.0\r\nHost: bench\r\n\r\n");
    let mut tasks = Vec::new();
    for _ in 0..count {
        let mut stream = TcpStream::connect(admin).await.expect("connect admin");
        stream.write_all(request.as_bytes()).await.expect("request");
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let mut total = 0u64;
            let mut chunk = vec![0u8; 64 * 1024];
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    read = stream.read(&mut chunk) => match read {
                        Ok(0) | Err(_) => break,
                        Ok(n) => total += n as u64,
                    },
                }
            }
            total
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap_or(0);
    }
    total
}
