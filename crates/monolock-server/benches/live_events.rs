//! What live event subscribers cost the protocol path, measured two ways.
//!
//! Inside the lock: the time of one `EventHub::observe`, which the lock
//! table's critical section calls for every grant and release, with no
//! subscriber and with 100 subscribers draining their streams (the
//! dispatcher and the subscribers on the last CPU, `observe` on the first).
//!
//! End to end: contention throughput (clients taking turns on one lock:
//! connect, ACQUIRE, wait for the grant, close) and CPU time per grant on
//! a server with no subscriber and on one with 100 subscribers following
//! `GET /api/events` over real sockets. The servers' runtime and the
//! contending clients are pinned to the first CPU, which they saturate;
//! the subscribers run in a child process (this binary again, `subscribe
//! ADDR COUNT CPU SECONDS`) pinned to the last. Each server's admin API
//! runs on its own thread as `monolock serve` runs it (`admin::spawn`),
//! started on the last CPU with the event dispatcher. In each round the
//! two servers run one slice each (which goes first alternates), and each
//! figure is a ratio within the round, so that the machine's drift
//! cancels.
//!
//! `cargo bench -p monolock-server --bench live_events [-- ROUNDS SLICE_MS]`
//! (default 20 rounds of 1000 ms slices; slices of 100 ms to 30 s). The
//! figures and what they say: BENCHMARKS.md, "Live event subscribers".

use std::{
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
    Event, EventHub, Observer, Server, ServerConfig, ServerHandle, SessionInfo,
    admin::{self, AdminOptions, EffectiveConfig},
};
use monolock_testkit::sys;
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::{TcpListener, TcpStream},
};
use tokio_util::sync::CancellationToken;

/// Clients contending for the one lock.
const CLIENTS: usize = 16;
/// Event subscribers.
const SUBSCRIBERS: usize = 100;
/// Rounds of the `observe` timing.
const OBSERVE_ROUNDS: usize = 5;

/// The longest slice: the subscriber process stops on its own a minute
/// after the run should have ended, so that none outlives a crashed bench.
const MAX_SLICE: Duration = Duration::from_secs(30);

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let first = args.next();
    if first.as_deref() == Some("subscribe") {
        let admin: SocketAddr = args
            .next()
            .and_then(|a| a.parse().ok())
            .expect("subscribe ADDR COUNT CPU SECONDS");
        let count: usize = args
            .next()
            .and_then(|a| a.parse().ok())
            .unwrap_or(SUBSCRIBERS);
        if let Some(cpu) = args.next().and_then(|a| a.parse().ok()) {
            pin(cpu);
        }
        let bound = args
            .next()
            .and_then(|a| a.parse().ok())
            .map_or(Duration::from_secs(60), Duration::from_secs);
        return runtime().block_on(subscriber_process(admin, count, bound));
    }
    let rounds = first.and_then(|a| a.parse().ok()).unwrap_or(20usize).max(1);
    let slice = args
        .next()
        .and_then(|a| a.parse().ok())
        .map_or(Duration::from_secs(1), Duration::from_millis)
        .clamp(Duration::from_millis(100), MAX_SLICE);
    // Learnt before pinning narrows what this process may use.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let other_cpu = if cpus > 1 {
        // Pinned before the runtime starts, so every thread inherits it.
        pin(0);
        Some(cpus - 1)
    } else {
        eprintln!("one CPU: nothing pinned");
        None
    };
    observe_rounds(other_cpu);
    runtime().block_on(contention_rounds(rounds, slice, other_cpu));
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .thread_name(PROTOCOL_THREADS)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Restricts this thread (and every thread it starts later) to `cpu`;
/// if the OS refuses, nothing is pinned and the bench says so.
fn pin(cpu: usize) {
    if let Err(err) = sys::pin_current_thread(cpu) {
        eprintln!("nothing pinned to CPU {cpu}: {err}");
    }
}

fn cpu_name(cpu: Option<usize>) -> String {
    cpu.map_or_else(|| "any".to_owned(), |cpu| cpu.to_string())
}

/// The name of this bench's runtime threads, which run the protocol path
/// (the server's sessions and its contending clients) and nothing else.
const PROTOCOL_THREADS: &str = "bench-protocol";

/// CPU time (user + system) the protocol threads have used so far (from
/// `/proc/self/task/*/stat`, in clock ticks of 10 ms): not the admin
/// thread's or the event dispatcher's.
fn protocol_cpu() -> Duration {
    // The kernel keeps the first 15 bytes of a thread's name.
    sys::threads_cpu_time(|name| PROTOCOL_THREADS.starts_with(name))
}

/// Prints the cost of `observe` without and with subscribers, a line per
/// round.
fn observe_rounds(other_cpu: Option<usize>) {
    println!(
        "observe: the cost the table's critical section pays per event, on CPU 0; the \
         dispatcher and {SUBSCRIBERS} draining subscribers on CPU {}",
        cpu_name(other_cpu)
    );
    for round in 1..=OBSERVE_ROUNDS {
        let quiet = observe_cost(0, other_cpu);
        let loaded = observe_cost(SUBSCRIBERS, other_cpu);
        println!(
            "round {round}: {quiet:>6.0} ns per event without subscribers, {loaded:>6.0} ns with {SUBSCRIBERS}"
        );
    }
}

/// Bursts of events per call of [`observe_cost`], and events per burst: a
/// burst is far below the hub's pending limit, and the pause after it lets
/// the dispatcher keep up, as it does at any real grant rate.
const BURSTS: u32 = 1_000;
const BURST: u32 = 100;

/// Nanoseconds per `observe` of a grant on this thread, with `subscribers`
/// draining; the hub's dispatcher and the subscribers run on a thread of
/// their own, on `other_cpu` if given (as the admin thread does).
fn observe_cost(subscribers: usize, other_cpu: Option<usize>) -> f64 {
    let (hub_tx, hub_rx) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let drainer = std::thread::spawn(move || {
        if let Some(cpu) = other_cpu {
            pin(cpu);
        }
        // Made here, so that the dispatcher thread inherits the pinning.
        let hub = Arc::new(EventHub::new().expect("event hub"));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let mut drains = Vec::new();
            for _ in 0..subscribers {
                let mut subscription = hub.subscribe();
                drains.push(tokio::spawn(async move {
                    while subscription.next().await.is_some() {}
                }));
            }
            hub_tx.send(hub).expect("hub");
            let _ = stopped.await;
            for drain in drains {
                drain.abort();
            }
        });
    });
    let hub: Arc<EventHub> = hub_rx.recv().expect("hub");
    let session = SessionInfo {
        lock: LockName::new("nightly/import").expect("name"),
        lease: Lease::from_millis(10_000).expect("lease"),
        remote_addr: "10.0.0.5:52114".parse().expect("address"),
        identity: Arc::from("spiffe://prod/worker/1"),
        queued_at: std::time::SystemTime::now(),
        claim: None,
    };
    let mut spent = Duration::ZERO;
    for burst in 0..BURSTS {
        let started = Instant::now();
        for i in 0..BURST {
            hub.observe(&Event::Granted {
                session: &session,
                token: u64::from(burst * BURST + i),
                wait: Duration::ZERO,
                queued: false,
                value: "",
            });
        }
        spent += started.elapsed();
        // The load's pace (100 events every 2 ms, 50,000 a second), not a
        // wait for anything.
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(
        hub.lagged(),
        0,
        "a subscriber fell behind: the figure would be wrong"
    );
    let _ = stop.send(());
    drainer.join().expect("drainer");
    spent.as_nanos() as f64 / f64::from(BURSTS * BURST)
}

/// One server with its own hub and admin listener, served as `monolock
/// serve` serves them: the admin API on its own thread (`admin::spawn`).
struct Lab {
    hub: Arc<EventHub>,
    handle: ServerHandle,
    addr: SocketAddr,
    admin: SocketAddr,
}

impl Lab {
    /// Starts a server on this runtime (CPU 0) with an event hub and the
    /// admin API. The event dispatcher's thread and the admin thread are
    /// started from a thread pinned to `other_cpu`, so they inherit it and
    /// the protocol path keeps CPU 0 to itself.
    async fn start(other_cpu: Option<usize>) -> Self {
        let runtime = tokio::runtime::Handle::current();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let admin_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let admin = admin_listener.local_addr().expect("addr");
        let (hub, server) = std::thread::spawn(move || {
            if let Some(cpu) = other_cpu {
                pin(cpu);
            }
            let _entered = runtime.enter();
            let hub = Arc::new(EventHub::new().expect("event hub"));
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
        }
    }
}

/// The child process of subscribers: it prints "ready" once every stream
/// has started, runs until its stdin closes, then prints what it read.
struct Subscribers {
    child: tokio::process::Child,
    stdout: BufReader<tokio::process::ChildStdout>,
}

impl Subscribers {
    /// Starts [`SUBSCRIBERS`] subscribers to `lab`'s events in a child
    /// process on `cpu`, for at most `bound`, and returns once the server
    /// counts them all.
    async fn start(lab: &Lab, cpu: Option<usize>, bound: Duration) -> Self {
        let mut child = tokio::process::Command::new(std::env::current_exe().expect("exe"))
            .args([
                "subscribe",
                &lab.admin.to_string(),
                &SUBSCRIBERS.to_string(),
                &cpu_name(cpu),
                &bound.as_secs().to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|err| panic!("start the subscribers: {err}"));
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        // The child says "ready" once every stream has its response started,
        // which the server sends only after it has registered the
        // subscription.
        let mut line = String::new();
        let _ = tokio::time::timeout(Duration::from_secs(60), stdout.read_line(&mut line)).await;
        assert_eq!(line.trim(), "ready", "the subscribers did not start");
        assert_eq!(lab.hub.subscribers(), SUBSCRIBERS);
        Self { child, stdout }
    }

    /// Ends them; the bytes they read (0 if they do not say).
    async fn finish(mut self) -> u64 {
        drop(self.child.stdin.take());
        let mut line = String::new();
        let _ = self.stdout.read_line(&mut line).await;
        let _ = self.child.wait().await;
        line.trim().parse().unwrap_or(0)
    }
}

/// What one contention slice measured.
#[derive(Clone, Copy)]
struct Figures {
    grants: u64,
    grants_per_s: f64,
    /// The protocol threads' CPU time (server sessions and clients; not the
    /// admin thread, the event dispatcher or the subscribers) per grant.
    cpu_us_per_grant: f64,
    /// Every CPU's busy time per grant (`/proc/stat`): the above, the
    /// subscribers, and the kernel's work on behalf of either.
    machine_us_per_grant: f64,
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn quartiles(values: &mut [f64]) -> (f64, f64) {
    values.sort_by(f64::total_cmp);
    (values[values.len() / 4], values[values.len() * 3 / 4])
}

/// Contention on a server without subscribers and on one with
/// [`SUBSCRIBERS`], a slice of each per round; prints the medians and the
/// ratios within rounds.
async fn contention_rounds(rounds: usize, slice: Duration, other_cpu: Option<usize>) {
    let quiet = Lab::start(other_cpu).await;
    let loaded = Lab::start(other_cpu).await;
    println!(
        "contention: {CLIENTS} clients taking turns on one lock, server and clients on CPU 0, \
         {SUBSCRIBERS} subscribers in another process on CPU {}",
        cpu_name(other_cpu)
    );
    println!(
        "{rounds} rounds; in each, one {} ms slice of each server (which first alternates); \
         ratio = with subscribers / without, within a round",
        slice.as_millis()
    );
    let bound = slice * u32::try_from(2 * rounds).unwrap_or(u32::MAX) + Duration::from_secs(60);
    let subscribers = Subscribers::start(&loaded, other_cpu, bound).await;
    let mut base = Vec::with_capacity(rounds);
    let mut with = Vec::with_capacity(rounds);
    for round in 0..rounds {
        if round % 2 == 0 {
            base.push(contention(quiet.addr, slice).await);
            with.push(contention(loaded.addr, slice).await);
        } else {
            with.push(contention(loaded.addr, slice).await);
            base.push(contention(quiet.addr, slice).await);
        }
    }
    assert_eq!(
        loaded.hub.subscribers(),
        SUBSCRIBERS,
        "subscribers left during the run"
    );
    let read = subscribers.finish().await;
    let pick =
        |v: &[Figures], f: fn(&Figures) -> f64| median(&mut v.iter().map(f).collect::<Vec<_>>());
    let ratios = |f: fn(&Figures) -> f64| -> Vec<f64> {
        base.iter().zip(&with).map(|(b, l)| f(l) / f(b)).collect()
    };
    let grants: u64 = with.iter().map(|f| f.grants).sum();
    println!(
        "{:<16} {:>9} {:>15} {:>15} {:>9}",
        "subscribers", "grants/s", "proto us/grant", "machine us/gr.", "B/grant"
    );
    for (name, figures, bytes) in [("none", &base, 0.0), ("100", &with, read as f64)] {
        println!(
            "{name:<16} {:>9.0} {:>15.1} {:>15.1} {:>9.0}",
            pick(figures, |f| f.grants_per_s),
            pick(figures, |f| f.cpu_us_per_grant),
            pick(figures, |f| f.machine_us_per_grant),
            bytes / grants.max(1) as f64,
        );
    }
    let mut throughput = ratios(|f| f.grants_per_s);
    let (q1, q3) = quartiles(&mut throughput);
    println!(
        "ratio 100 / none, median of {rounds}: grants/s {:.3} (IQR {q1:.3}-{q3:.3}), \
         protocol CPU per grant {:.3}, machine CPU per grant {:.3}",
        median(&mut throughput),
        median(&mut ratios(|f| f.cpu_us_per_grant)),
        median(&mut ratios(|f| f.machine_us_per_grant)),
    );
    println!("subscribers cut off: {}", loaded.hub.lagged());
    quiet.handle.shutdown();
    loaded.handle.shutdown();
}

/// Grants per second over `duration` with [`CLIENTS`] clients taking
/// turns, and the CPU time per grant.
async fn contention(addr: SocketAddr, duration: Duration) -> Figures {
    let grants = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let cpu = protocol_cpu();
    let machine = sys::machine_busy_time();
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
    let machine = sys::machine_busy_time().saturating_sub(machine);
    for client in clients {
        let _ = client.await;
    }
    let counted = counted.max(1) as f64;
    Figures {
        grants: counted as u64,
        grants_per_s: counted / elapsed.as_secs_f64(),
        cpu_us_per_grant: cpu.as_secs_f64() * 1e6 / counted,
        machine_us_per_grant: machine.as_secs_f64() * 1e6 / counted,
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

/// The child process: [`subscribe`] until stdin closes, or `bound` in any
/// case; then prints the bytes read.
async fn subscriber_process(admin: SocketAddr, count: usize, bound: Duration) {
    let stop = CancellationToken::new();
    let (ready, mut started) = tokio::sync::mpsc::channel(count.max(1));
    let subscribers = tokio::spawn(subscribe(admin, count, ready, stop.clone()));
    for _ in 0..count {
        if started.recv().await.is_none() {
            break;
        }
    }
    println!("ready");
    let mut stdin = tokio::io::stdin();
    let mut sink = [0u8; 64];
    let _ = tokio::time::timeout(bound, async {
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

/// `count` subscribers to `GET /api/events` reading everything as fast as
/// they can until `stop`; each sends on `ready` once its first bytes came
/// (the server has subscribed it); the bytes they read.
async fn subscribe(
    admin: SocketAddr,
    count: usize,
    ready: tokio::sync::mpsc::Sender<()>,
    stop: CancellationToken,
) -> u64 {
    let request = format!("GET /api/events HTTP/1.0\r\nHost: {admin}\r\n\r\n");
    let mut tasks = Vec::new();
    for _ in 0..count {
        let mut stream = TcpStream::connect(admin).await.expect("connect admin");
        stream.write_all(request.as_bytes()).await.expect("request");
        let stop = stop.clone();
        let ready = ready.clone();
        tasks.push(tokio::spawn(async move {
            let mut total = 0u64;
            let mut chunk = vec![0u8; 64 * 1024];
            let mut ready = Some(ready);
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    read = stream.read(&mut chunk) => match read {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            total += n as u64;
                            if let Some(ready) = ready.take() {
                                let _ = ready.send(()).await;
                            }
                        }
                    },
                }
            }
            total
        }));
    }
    // Only the streams hold it now: a stream that ends unheard ends the wait.
    drop(ready);
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap_or(0);
    }
    total
}
