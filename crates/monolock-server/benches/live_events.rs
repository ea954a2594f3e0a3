//! What live event subscribers cost the protocol path: contention
//! throughput (clients taking turns on one lock: connect, ACQUIRE, wait for
//! the grant, close) and CPU time per grant, with no subscriber and with
//! 100 subscribers following `GET /api/events` over real sockets.
//!
//! The server's runtime and its contending clients are pinned to the first
//! CPU, which they saturate; the subscribers run in child processes (this
//! binary again, `subscribe ADDR COUNT CPU PATH SECONDS`) pinned to the
//! last. Every setting has its own server, whose admin API runs on its own
//! thread as `monolock serve` runs it (`admin::spawn`):
//!
//! - no subscriber (the noise control);
//! - no subscriber, the last CPU busy with loopback traffic unrelated to
//!   monolock (a child `neighbour CPU pump`: what a busy neighbour core
//!   costs);
//! - no subscriber, the last CPU carrying the subscribers' traffic without
//!   monolock (a child `neighbour CPU stand-in`: a loopback server writing
//!   64 KiB every 20 ms to each of 100 connections of the same subscriber
//!   child process, about the bytes the real subscribers read);
//! - 100 subscribers, the admin thread and the event dispatcher on the last
//!   CPU (a machine with a core to spare);
//! - the same following `?match=` a pattern the contended lock does not
//!   match (filtered on the server);
//! - 100 subscribers, the admin thread and dispatcher on the first CPU (one
//!   core for everything: the worst case);
//! - the same with smaller batches (5 ms, 16 KiB).
//!
//! In each round every setting runs one slice beside one slice of a quiet
//! server (which goes first alternates), and each figure is a ratio within
//! such a pair, so that the machine's drift cancels; every subscriber stays
//! connected for the whole run (idle while its server is).
//!
//! Then what the protocol path itself pays: the time of one
//! `EventHub::observe` (called inside the lock table's critical section for
//! every grant and release) with no subscriber and with 100 subscribers
//! draining their streams.
//!
//! `cargo bench -p monolock-server --bench live_events [-- ROUNDS SLICE_MS]`
//! (default 20 rounds of 1000 ms slices; slices of 100 ms to 30 s).
//!
//! `cargo bench -p monolock-server --bench live_events -- profile [ROUNDS
//! SECONDS]` (default 3 rounds of 10 s windows, at most 30 s) instead attributes CPU 0's time
//! per grant with `perf record` (see [`profile`]): no subscriber, CPU 1
//! busy, 100 subscribers.

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

/// The longest slice or profile window: the neighbour processes stop on
/// their own after a minute, so that none outlives a crashed bench.
const MAX_SLICE: Duration = Duration::from_secs(30);

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let first = args.next();
    if first.as_deref() == Some("neighbour") {
        let cpu = args.next();
        if let Some(cpu) = cpu.as_deref().and_then(|a| a.parse().ok()) {
            pin(cpu);
        }
        return match args.next().as_deref() {
            Some("stand-in") => runtime().block_on(stand_in_process(cpu.unwrap_or_default())),
            _ => runtime().block_on(neighbour_process()),
        };
    }
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
        let bound = args
            .next()
            .and_then(|a| a.parse().ok())
            .map_or(Duration::from_secs(60), Duration::from_secs);
        return runtime().block_on(subscriber_process(admin, count, path, bound));
    }
    let profiling = first.as_deref() == Some("profile");
    let first = if profiling { args.next() } else { first };
    let rounds: Option<usize> = first.and_then(|a| a.parse().ok());
    let length: Option<u64> = args.next().and_then(|a| a.parse().ok());
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
    if profiling {
        let Some(other_cpu) = subscriber_cpu else {
            eprintln!("profile: needs two CPUs (one for the protocol path, one for the rest)");
            std::process::exit(2);
        };
        return runtime().block_on(profile::run(
            rounds.unwrap_or(3).max(1),
            Duration::from_secs(length.unwrap_or(10).clamp(1, MAX_SLICE.as_secs())),
            other_cpu,
        ));
    }
    runtime().block_on(bench(
        rounds.unwrap_or(20).max(1),
        Duration::from_millis(length.unwrap_or(1000)).clamp(Duration::from_millis(100), MAX_SLICE),
        subscriber_cpu,
    ));
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

    /// Starts [`SUBSCRIBERS`] subscribers to `path` in a child process, for
    /// at most `bound`, and returns once the server counts them all.
    async fn subscribe(&self, path: &str, bound: Duration) -> Helper {
        let cpu = self
            .subscriber_cpu
            .map_or_else(|| "any".to_owned(), |cpu| cpu.to_string());
        // The child says "ready" once every stream has its response started,
        // which the server sends only after it has registered the
        // subscription.
        let readers = Helper::start(
            &[
                "subscribe",
                &self.admin.to_string(),
                &SUBSCRIBERS.to_string(),
                &cpu,
                path,
                &bound.as_secs().to_string(),
            ],
            "the subscribers",
        )
        .await;
        assert_eq!(self.hub.subscribers(), SUBSCRIBERS);
        readers
    }
}

/// A child process of this binary (subscribers or a neighbour): it prints
/// "ready" once started, runs until its stdin closes, then prints what its
/// readers read.
struct Helper {
    child: tokio::process::Child,
    stdout: BufReader<tokio::process::ChildStdout>,
}

impl Helper {
    /// Starts this binary with `args`; returns once it is ready.
    async fn start(args: &[&str], what: &str) -> Self {
        let mut child = tokio::process::Command::new(std::env::current_exe().expect("exe"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|err| panic!("start {what}: {err}"));
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        let _ = tokio::time::timeout(Duration::from_secs(60), stdout.read_line(&mut line)).await;
        assert_eq!(line.trim(), "ready", "{what} did not start");
        Self { child, stdout }
    }

    /// Ends it; what its readers read (0 if it does not say).
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

fn default_hub() -> EventHub {
    EventHub::new().expect("event hub")
}

fn small_batch_hub() -> EventHub {
    EventHub::with_batching(SMALL_BUFFER, KEEPALIVE_INTERVAL, SMALL).expect("event hub")
}

impl Setting {
    /// One contention slice on this setting's server, beside its neighbour.
    async fn slice(&self, slice: Duration, cpu: Option<usize>) -> Figures {
        let neighbour = match self.neighbour {
            Some(traffic) => Some(neighbour(cpu, traffic).await),
            None => None,
        };
        let figures = contention(self.lab.addr, slice).await;
        if let Some(neighbour) = neighbour {
            let read = neighbour.finish().await;
            self.neighbour_bytes.fetch_add(read, Ordering::Relaxed);
        }
        figures
    }
}

/// What a neighbour process sends over loopback.
#[derive(Clone, Copy)]
enum Traffic {
    /// One connection, as fast as it goes.
    Pump,
    /// The subscribers' traffic without monolock: [`STAND_IN_BATCH`] bytes
    /// every flush interval to each of [`SUBSCRIBERS`] connections, read by
    /// the same subscriber child process as the real subscribers.
    StandIn,
}

/// Bytes per stand-in connection per flush interval: about what each real
/// subscriber gets in the subscriber settings (some 500 bytes a grant at
/// 6,000–7,000 grants a second, in 20 ms batches).
const STAND_IN_BATCH: usize = 64 * 1024;

/// A child process sending loopback traffic unrelated to monolock on
/// `cpu`; returns once the traffic flows.
async fn neighbour(cpu: Option<usize>, traffic: Traffic) -> Helper {
    let cpu = cpu.map_or_else(|| "any".to_owned(), |cpu| cpu.to_string());
    let kind = match traffic {
        Traffic::Pump => "pump",
        Traffic::StandIn => "stand-in",
    };
    Helper::start(&["neighbour", &cpu, kind], "the neighbour").await
}

/// Waits until stdin closes, a minute at most.
async fn stdin_closed() {
    let mut stdin = tokio::io::stdin();
    let mut sink = [0u8; 64];
    let _ = tokio::time::timeout(Duration::from_secs(60), async {
        while matches!(stdin.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// The stand-in: a loopback server writing [`STAND_IN_BATCH`] bytes every
/// [`FLUSH_INTERVAL`](monolock_server::FLUSH_INTERVAL) to each connection of
/// a subscriber child process (pinned to `cpu`, as this process is), until
/// stdin closes; then prints what the child read.
async fn stand_in_process(cpu: String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (batches, _) =
        tokio::sync::broadcast::channel::<bytes::Bytes>(monolock_server::SUBSCRIBER_BUFFER);
    let accept = {
        let batches = batches.clone();
        async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut next = batches.subscribe();
                tokio::spawn(async move {
                    let mut request = [0u8; 1024];
                    let _ = stream.read(&mut request).await;
                    let head = b"HTTP/1.0 200 OK\r\ncontent-type: text/event-stream\r\n\r\n";
                    if stream.write_all(head).await.is_err() {
                        return;
                    }
                    loop {
                        match next.recv().await {
                            Ok(batch) => {
                                if stream.write_all(&batch).await.is_err() {
                                    break;
                                }
                            }
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                            Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                        }
                    }
                });
            }
        }
    };
    let ticker = async move {
        let batch = bytes::Bytes::from(vec![b'x'; STAND_IN_BATCH]);
        let mut ticks = tokio::time::interval(monolock_server::FLUSH_INTERVAL);
        loop {
            ticks.tick().await;
            let _ = batches.send(batch.clone());
        }
    };
    let readers = async move {
        let readers = Helper::start(
            &[
                "subscribe",
                &addr.to_string(),
                &SUBSCRIBERS.to_string(),
                &cpu,
                "/",
                "60",
            ],
            "the stand-in's readers",
        )
        .await;
        println!("ready");
        stdin_closed().await;
        println!("{}", readers.finish().await);
    };
    tokio::select! {
        () = accept => {}
        () = ticker => {}
        () = readers => {}
    }
}

/// The neighbour: 64 KiB writes through one loopback connection until
/// stdin closes (a minute at most).
async fn neighbour_process() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let mut writer = TcpStream::connect(addr).await.expect("connect");
    let (mut reader, _) = listener.accept().await.expect("accept");
    println!("ready");
    let pump = async move {
        let chunk = vec![7u8; 64 * 1024];
        while writer.write_all(&chunk).await.is_ok() {}
    };
    let drain = async move {
        let mut buf = vec![0u8; 64 * 1024];
        while matches!(reader.read(&mut buf).await, Ok(n) if n > 0) {}
    };
    tokio::select! {
        () = pump => {}
        () = drain => {}
        () = stdin_closed() => {}
    }
}

/// One setting measured against the quiet server: its own lab, and what
/// its subscribers follow (`None`: no subscriber, the noise control).
struct Setting {
    name: &'static str,
    lab: Lab,
    path: Option<&'static str>,
    /// Loopback traffic unrelated to monolock on the subscribers' CPU
    /// during this setting's slices: what a busy neighbour core costs.
    neighbour: Option<Traffic>,
    /// What the neighbour's readers read, over all slices.
    neighbour_bytes: AtomicU64,
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn quartiles(values: &mut [f64]) -> (f64, f64) {
    values.sort_by(f64::total_cmp);
    (values[values.len() / 4], values[values.len() * 3 / 4])
}

async fn bench(rounds: usize, slice: Duration, subscriber_cpu: Option<usize>) {
    // The admin thread and dispatcher beside the subscribers (a core to
    // spare), or on the protocol's core (one core for everything).
    let (apart, shared) = (subscriber_cpu, None);
    let quiet = Lab::start(default_hub, apart, subscriber_cpu).await;
    let mut settings = Vec::new();
    for (name, make_hub, admin_cpu, path) in [
        (
            "no subscriber (noise control)",
            default_hub as fn() -> EventHub,
            apart,
            None,
        ),
        ("no subscriber, CPU 1 busy", default_hub, apart, None),
        ("no subscriber, stand-in traffic", default_hub, apart, None),
        (
            "100, admin thread on CPU 1",
            default_hub,
            apart,
            Some(ALL_EVENTS),
        ),
        (
            "100 ?match= other, admin on 1",
            default_hub,
            apart,
            Some(OTHER_EVENTS),
        ),
        (
            "100, admin thread on CPU 0",
            default_hub,
            shared,
            Some(ALL_EVENTS),
        ),
        (
            "100, admin on 0, 5 ms/16 KiB",
            small_batch_hub,
            shared,
            Some(ALL_EVENTS),
        ),
    ] {
        let lab = Lab::start(make_hub, admin_cpu, subscriber_cpu).await;
        let neighbour = if name.ends_with("busy") {
            Some(Traffic::Pump)
        } else if name.ends_with("stand-in traffic") {
            Some(Traffic::StandIn)
        } else {
            None
        };
        settings.push(Setting {
            name,
            lab,
            path,
            neighbour,
            neighbour_bytes: AtomicU64::new(0),
        });
    }
    println!(
        "contention: {CLIENTS} clients taking turns on one lock, server and clients on CPU 0, \
         {SUBSCRIBERS} subscribers per setting in another process on CPU {}",
        subscriber_cpu.map_or_else(|| "any (not pinned)".to_owned(), |cpu| cpu.to_string()),
    );
    println!(
        "{rounds} rounds; in each, every setting runs one {} ms slice beside one of a server \
         with no subscriber (which first alternates); ratio = setting / quiet of the same pair; \
         every subscriber stays connected throughout (idle while its server is)",
        slice.as_millis()
    );
    // Every setting's subscribers for the whole run, so that all settings
    // share the same stretch of the machine's (noisy) time.
    let run_time = slice * u32::try_from(2 * rounds * settings.len()).unwrap_or(u32::MAX);
    let bound = run_time + Duration::from_secs(120);
    let mut readers = Vec::new();
    for setting in &settings {
        readers.push(match setting.path {
            Some(path) => Some(setting.lab.subscribe(path, bound).await),
            None => None,
        });
    }
    let mut base: Vec<Vec<Figures>> = vec![Vec::with_capacity(rounds); settings.len()];
    let mut loaded: Vec<Vec<Figures>> = vec![Vec::with_capacity(rounds); settings.len()];
    for round in 0..rounds {
        for (i, setting) in settings.iter().enumerate() {
            if (round + i) % 2 == 0 {
                base[i].push(contention(quiet.addr, slice).await);
                loaded[i].push(setting.slice(slice, subscriber_cpu).await);
            } else {
                loaded[i].push(setting.slice(slice, subscriber_cpu).await);
                base[i].push(contention(quiet.addr, slice).await);
            }
        }
    }
    for setting in settings.iter().filter(|setting| setting.path.is_some()) {
        assert_eq!(
            setting.lab.hub.subscribers(),
            SUBSCRIBERS,
            "{}: subscribers left during the run",
            setting.name
        );
    }
    let mut bytes = Vec::new();
    for (reader, setting) in readers.into_iter().zip(&settings) {
        bytes.push(match reader {
            Some(reader) => reader.finish().await,
            None => setting.neighbour_bytes.load(Ordering::Relaxed),
        });
    }
    println!(
        "{:<30} {:>8} {:>8} {:>6} {:>13} {:>8} {:>6} {:>8} {:>9}",
        "setting",
        "quiet/s",
        "setting/s",
        "ratio",
        "ratio IQR",
        "proto us",
        "ratio",
        "machine",
        "B/grant"
    );
    for (i, setting) in settings.iter().enumerate() {
        let (base, loaded) = (&base[i], &loaded[i]);
        let pair_ratio = |f: fn(&Figures) -> f64| -> Vec<f64> {
            base.iter().zip(loaded).map(|(b, l)| f(l) / f(b)).collect()
        };
        let mut ratios = pair_ratio(|f| f.grants_per_s);
        let (q1, q3) = quartiles(&mut ratios);
        let pick = |v: &[Figures], f: fn(&Figures) -> f64| {
            median(&mut v.iter().map(f).collect::<Vec<_>>())
        };
        let grants: u64 = loaded.iter().map(|f| f.grants).sum();
        println!(
            "{:<30} {:>8.0} {:>8.0} {:>6.3} {:>6.3}-{:<6.3} {:>8.1} {:>6.3} {:>8.1} {:>9.0}",
            setting.name,
            pick(base, |f| f.grants_per_s),
            pick(loaded, |f| f.grants_per_s),
            median(&mut ratios),
            q1,
            q3,
            pick(loaded, |f| f.cpu_us_per_grant),
            median(&mut pair_ratio(|f| f.cpu_us_per_grant)),
            pick(loaded, |f| f.machine_us_per_grant),
            bytes[i] as f64 / grants.max(1) as f64,
        );
    }
    let cut_off: Vec<String> = settings
        .iter()
        .map(|setting| setting.lab.hub.lagged().to_string())
        .collect();
    println!("subscribers cut off, per setting: {}", cut_off.join(" "));
    quiet.handle.shutdown();
    for setting in &settings {
        setting.lab.handle.shutdown();
    }
    println!(
        "observe: the cost the table's critical section pays per event, on CPU 0, the \
         dispatcher and {SUBSCRIBERS} draining subscribers on CPU {}",
        subscriber_cpu.map_or_else(|| "any".to_owned(), |cpu| cpu.to_string())
    );
    for round in 1..=5 {
        let (quiet, loaded) = tokio::task::spawn_blocking(move || {
            (
                observe_cost(0, subscriber_cpu),
                observe_cost(SUBSCRIBERS, subscriber_cpu),
            )
        })
        .await
        .expect("observer thread");
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
    };
    let mut spent = Duration::ZERO;
    for burst in 0..BURSTS {
        let started = Instant::now();
        for i in 0..BURST {
            hub.observe(&Event::Granted {
                session: &session,
                token: u64::from(burst * BURST + i),
                wait: Duration::ZERO,
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
async fn subscriber_process(admin: SocketAddr, count: usize, path: String, bound: Duration) {
    let stop = CancellationToken::new();
    let (ready, mut started) = tokio::sync::mpsc::channel(count.max(1));
    let subscribers = tokio::spawn(subscribe(admin, count, path, ready, stop.clone()));
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

/// `count` subscribers to `path` reading everything as fast as they can
/// until `stop`; each sends on `ready` once its first bytes came (the
/// server has subscribed it); the bytes they read.
async fn subscribe(
    admin: SocketAddr,
    count: usize,
    path: String,
    ready: tokio::sync::mpsc::Sender<()>,
    stop: CancellationToken,
) -> u64 {
    let request = format!("GET {path} HTTP/1.0\r\nHost: {admin}\r\n\r\n");
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

/// `profile [ROUNDS] [SECONDS]` (default 3 rounds of 10 s windows): where
/// CPU 0's time per grant goes, by `perf record` of CPU 0 (a `cpu-clock`
/// sample every 100 µs, user space and kernel), with no subscriber, with
/// CPU 1 busy with unrelated loopback traffic, and with 100 subscribers.
/// What the protocol path runs on behalf of the subscribers is the event
/// hub's `observe`; the rest of any difference is the machine's. Needs
/// `perf` and the right to sample the kernel (root, or
/// `kernel.perf_event_paranoid` at most 1).
mod profile {
    use super::*;

    /// Nanoseconds of CPU time per sample (`perf record -c` of `cpu-clock`).
    const SAMPLE_NS: u64 = 100_000;

    /// What runs beside the protocol path during a window.
    #[derive(Clone, Copy)]
    enum Mode {
        Quiet,
        Busy,
        Subscribers,
    }

    const MODES: [(Mode, &str); 3] = [
        (Mode::Quiet, "no subscriber"),
        (Mode::Busy, "no subscriber, CPU 1 busy"),
        (Mode::Subscribers, "100 subscribers"),
    ];

    /// Where CPU 0's samples fell.
    const GROUPS: [&str; 4] = ["event hub", "other user", "kernel RCU+slab", "kernel rest"];

    /// The group of a sample in `symbol`, `kernel` if in the kernel.
    fn group(kernel: bool, symbol: &str) -> usize {
        if symbol.contains("monolock_server::live::") {
            0
        } else if !kernel {
            1
        } else if symbol.starts_with("rcu_")
            || symbol.contains("slab_free")
            || symbol.contains("kfree")
            || symbol == "kmem_cache_free"
        {
            2
        } else {
            3
        }
    }

    /// Samples and grants of one mode, summed over rounds.
    #[derive(Default)]
    struct Tally {
        grants: f64,
        samples: [u64; GROUPS.len()],
    }

    pub(super) async fn run(rounds: usize, window: Duration, other_cpu: usize) {
        let perf_works = std::process::Command::new("perf")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if !perf_works {
            eprintln!("profile: `perf` is not installed (Debian: apt install linux-perf)");
            std::process::exit(2);
        }
        println!(
            "profile: {CLIENTS} clients taking turns on one lock, server and clients on CPU 0; \
             admin thread, dispatcher and whatever else on CPU {other_cpu}; {rounds} rounds of \
             {} s per mode; perf cpu-clock samples of CPU 0 every {} µs",
            window.as_secs(),
            SAMPLE_NS / 1000
        );
        let mut tallies: Vec<Tally> = MODES.iter().map(|_| Tally::default()).collect();
        for round in 0..rounds {
            for step in 0..MODES.len() {
                // Each round starts with a different mode, so that drift
                // does not favour one.
                let index = (round + step) % MODES.len();
                let (grants, samples) = window_of(MODES[index].0, window, other_cpu).await;
                let tally = &mut tallies[index];
                tally.grants += grants;
                for (sum, add) in tally.samples.iter_mut().zip(samples) {
                    *sum += add;
                }
            }
        }
        println!(
            "CPU 0's µs per grant, by where the samples fell (ratio: to no subscriber)\n\
             {:<26} {:>9} {:>7} {:>6} {:>10} {:>10} {:>15} {:>11}",
            "mode", "grants/s", "total", "ratio", GROUPS[0], GROUPS[1], GROUPS[2], GROUPS[3]
        );
        let per_grant = |tally: &Tally, samples: u64| {
            samples as f64 * SAMPLE_NS as f64 / 1000.0 / tally.grants.max(1.0)
        };
        let quiet_total = per_grant(&tallies[0], tallies[0].samples.iter().sum());
        for ((_, name), tally) in MODES.iter().zip(&tallies) {
            let total = per_grant(tally, tally.samples.iter().sum());
            let [hub, user, rcu, rest] = tally.samples.map(|samples| per_grant(tally, samples));
            println!(
                "{name:<26} {:>9.0} {total:>7.1} {:>6.3} {hub:>10.2} {user:>10.1} {rcu:>15.1} {rest:>11.1}",
                tally.grants / (window.as_secs_f64() * rounds as f64),
                total / quiet_total,
            );
        }
    }

    /// One window of `mode` on a fresh server: grants in the window and
    /// CPU 0's samples by group.
    async fn window_of(
        mode: Mode,
        window: Duration,
        other_cpu: usize,
    ) -> (f64, [u64; GROUPS.len()]) {
        let lab = Lab::start(default_hub, Some(other_cpu), Some(other_cpu)).await;
        let readers = match mode {
            Mode::Subscribers => Some(
                lab.subscribe(ALL_EVENTS, window * 2 + Duration::from_secs(60))
                    .await,
            ),
            _ => None,
        };
        let neighbour = match mode {
            Mode::Busy => Some(neighbour(Some(other_cpu), Traffic::Pump).await),
            _ => None,
        };
        // Warm: connections' memory, the queue, the subscribers' streams.
        let _ = contention(lab.addr, Duration::from_secs(1)).await;
        let data =
            std::env::temp_dir().join(format!("monolock-live-events-{}.perf", std::process::id()));
        // The server is warm, so the load is steady from its first grant;
        // it runs two seconds longer than the recording, which starts once
        // perf is up, so the recording ends inside it.
        let load = tokio::spawn(contention(lab.addr, window + Duration::from_secs(2)));
        let recorded = tokio::process::Command::new("perf")
            .args(["record", "-q", "-e", "cpu-clock", "-c"])
            .arg(SAMPLE_NS.to_string())
            .args(["-C", "0", "-o"])
            .arg(&data)
            .args(["--", "sleep"])
            .arg(window.as_secs().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .is_ok_and(|status| status.success());
        let figures = load.await.expect("contention");
        if let Some(neighbour) = neighbour {
            neighbour.finish().await;
        }
        if let Some(readers) = readers {
            readers.finish().await;
        }
        lab.handle.shutdown();
        assert!(
            recorded,
            "perf record failed (kernel.perf_event_paranoid, or not root?)"
        );
        let samples = samples_of(&data);
        let _ = std::fs::remove_file(&data);
        (figures.grants_per_s * window.as_secs_f64(), samples)
    }

    /// CPU 0's samples in `data` by group; idle, and perf and its `sleep`, left out.
    fn samples_of(data: &std::path::Path) -> [u64; GROUPS.len()] {
        let report = std::process::Command::new("perf")
            .args(["report", "-q", "--stdio", "-n", "--sort", "comm,sym", "-i"])
            .arg(data)
            .stderr(Stdio::null())
            .output()
            .expect("perf report");
        let mut samples = [0; GROUPS.len()];
        // "  12.34%  1234  bench-protocol  [k] tcp_ack"
        for line in String::from_utf8_lossy(&report.stdout).lines() {
            let mut fields = line.split_whitespace();
            let (Some(_), Some(count), Some(comm), Some(space)) =
                (fields.next(), fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            let Ok(count) = count.parse::<u64>() else {
                continue;
            };
            if comm.starts_with("swapper") || comm.starts_with("perf") || comm == "sleep" {
                continue;
            }
            let symbol = fields.collect::<Vec<_>>().join(" ");
            samples[group(space == "[k]", &symbol)] += count;
        }
        samples
    }
}
