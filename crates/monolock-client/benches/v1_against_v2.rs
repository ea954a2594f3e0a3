//! The Rust client speaking protocol v1 (forced) against v2 (the default),
//! side by side in one run, against a server in a child process (this
//! same binary, re-run with `--serve`), so that its memory is its own:
//!
//! 1. lock cycles (acquire, then a confirmed release): p50, p99 and
//!    cycles/s, one task and 16 concurrent tasks on one client;
//! 2. a process holding 10,000 locks: connections, client CPU while taking
//!    them and while holding them, client and server RSS;
//! 3. TLS and mTLS lock cycles/s.
//!
//! `cargo bench -p monolock-client --bench v1_against_v2`. Every loop is
//! bounded in count and in time; the whole run takes well under a minute.

use std::{
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use monolock_client::{Client, Connector, Protocol, TlsConnector};
use monolock_server::{Server, ServerConfig, ServerTls, TlsFiles};
use monolock_testkit::{
    pki::{Ca, Files},
    sys::{self, own_cpu_time, raise_nofile_limit},
};

const LEASE: Duration = Duration::from_secs(10);
const CYCLES: usize = 3_000;
const CYCLES_WITHIN: Duration = Duration::from_secs(3);
const CONCURRENT: usize = 16;
const HELD: usize = 10_000;
const HOLD_FOR: Duration = Duration::from_secs(3);
const TAKE_WITHIN: Duration = Duration::from_secs(60);
const TLS_CYCLES: usize = 1_000;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|arg| arg == "--serve") {
        serve(
            args.get(at + 1).map(PathBuf::from),
            args.get(at + 2).is_some(),
        );
        return;
    }
    let limit = raise_nofile_limit().unwrap_or(0);
    // One thread for the client: its own cost, without cross-thread
    // wake-ups (the server runs in its child process).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        cycles().await;
        held(limit).await;
        tls().await;
    });
}

/// The child: a server on 127.0.0.1:0 (TLS from `tls_dir`, mutual if
/// asked), its address on stdout, until stdin closes.
fn serve(tls_dir: Option<PathBuf>, mutual: bool) {
    let _ = raise_nofile_limit();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let mut config = ServerConfig::default();
        if let Some(dir) = tls_dir {
            let files = TlsFiles {
                cert: dir.join("server.pem"),
                key: dir.join("server.key"),
                client_ca: mutual.then(|| dir.join("clients-ca.pem")),
            };
            config = config.with_tls(Arc::new(ServerTls::load(files).expect("TLS files")));
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        println!("{}", listener.local_addr().expect("addr"));
        let server = tokio::spawn(Server::new(config).run(listener));
        // Ends when the parent closes stdin (or dies).
        tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
                line.clear();
            }
        })
        .await
        .ok();
        server.abort();
    });
}

/// A server in a child process; killed on drop.
struct ChildServer {
    child: Child,
    _stdin: ChildStdin,
    addr: String,
}

impl ChildServer {
    fn start(tls: Option<(&Path, bool)>) -> Self {
        let mut command = Command::new(std::env::current_exe().expect("own path"));
        command.arg("--serve");
        if let Some((dir, mutual)) = tls {
            command.arg(dir);
            if mutual {
                command.arg("mutual");
            }
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("server child");
        let stdin = child.stdin.take().expect("stdin");
        let mut addr = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut addr)
            .expect("address line");
        Self {
            child,
            _stdin: stdin,
            addr: addr.trim().to_owned(),
        }
    }

    fn rss_kb(&self) -> u64 {
        rss_kb(self.child.id())
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The resident memory of process `pid` in KiB (0 once it is gone).
fn rss_kb(pid: u32) -> u64 {
    sys::resident_bytes(pid).unwrap_or(0) / 1024
}

/// Established TCP connections to `addr`'s port (only this process
/// connects to the child server), from /proc/net/tcp.
fn connections_to(addr: &str) -> usize {
    let Some(port) = addr
        .rsplit(':')
        .next()
        .and_then(|port| port.parse::<u16>().ok())
    else {
        return 0;
    };
    sys::tcp_sockets()
        .iter()
        .filter(|socket| socket.remote_port == port && socket.state == sys::TCP_ESTABLISHED)
        .count()
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted
        .get((sorted.len() * p / 100).min(sorted.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default()
}

fn protocols() -> [(&'static str, Protocol); 2] {
    [("v1", Protocol::V1), ("v2", Protocol::V2)]
}

/// One task: acquire then release, `CYCLES` times or `CYCLES_WITHIN`.
async fn cycle_latencies<C: Connector>(
    client: &Client<C>,
    name: &str,
    count: usize,
) -> (Vec<Duration>, Duration) {
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(count);
    while latencies.len() < count && started.elapsed() < CYCLES_WITHIN {
        let at = Instant::now();
        let guard = client.acquire(name, LEASE).await.expect("acquire");
        guard.release().await.expect("release");
        latencies.push(at.elapsed());
    }
    (latencies, started.elapsed())
}

async fn cycles() {
    println!("## Lock cycles: acquire + release, one client, server in a child process\n");
    println!("| protocol | tasks | cycles | p50 | p99 | cycles/s |");
    println!("|---|---|---|---|---|---|");
    let server = ChildServer::start(None);
    let mut single = Vec::new();
    let mut many = Vec::new();
    for (label, protocol) in protocols() {
        let client = Client::new(server.addr.clone()).with_protocol(protocol);
        // Warm-up: the first session, the allocator.
        let _ = cycle_latencies(&client, "bench/warm", 100).await;
        let (mut latencies, took) = cycle_latencies(&client, "bench/one", CYCLES).await;
        latencies.sort_unstable();
        let rate = latencies.len() as f64 / took.as_secs_f64();
        println!(
            "| {label} | 1 | {} | {:.1} µs | {:.1} µs | {rate:.0} |",
            latencies.len(),
            percentile(&latencies, 50).as_secs_f64() * 1e6,
            percentile(&latencies, 99).as_secs_f64() * 1e6,
        );
        single.push((rate, percentile(&latencies, 50)));

        let started = Instant::now();
        let tasks: Vec<_> = (0..CONCURRENT)
            .map(|n| {
                let client = client.clone();
                tokio::spawn(async move {
                    cycle_latencies(&client, &format!("bench/many/{n}"), CYCLES)
                        .await
                        .0
                })
            })
            .collect();
        let mut latencies = Vec::new();
        for task in tasks {
            latencies.extend(task.await.expect("task"));
        }
        let took = started.elapsed();
        latencies.sort_unstable();
        let rate = latencies.len() as f64 / took.as_secs_f64();
        println!(
            "| {label} | {CONCURRENT} | {} | {:.1} µs | {:.1} µs | {rate:.0} |",
            latencies.len(),
            percentile(&latencies, 50).as_secs_f64() * 1e6,
            percentile(&latencies, 99).as_secs_f64() * 1e6,
        );
        many.push(rate);
    }
    println!(
        "\nv2 / v1: 1 task {:.2}x cycles/s (p50 {:.2}x), {CONCURRENT} tasks {:.2}x cycles/s\n",
        single[1].0 / single[0].0,
        single[1].1.as_secs_f64() / single[0].1.as_secs_f64(),
        many[1] / many[0],
    );
}

async fn held(limit: u64) {
    // A version 1 claim takes two descriptors in the client (its socket,
    // and the duplicate `Drop` shuts down): bound the count by the limit.
    let fit = usize::try_from(limit.saturating_sub(512) / 2).unwrap_or(usize::MAX);
    if fit < HELD {
        println!(
            "The descriptor limit is {limit}: version 1 holds {fit} locks here (two descriptors a claim).\n"
        );
    }
    // Version 2 first: the client's heap then grows from the same start.
    let runs = [
        ("v2", Protocol::V2, HELD),
        ("v1", Protocol::V1, HELD.min(fit)),
    ];
    println!("## One process holding many locks (lease {LEASE:?}), a fresh server each\n");
    println!(
        "| protocol | locks | connections | take | client CPU taking | client CPU holding {HOLD_FOR:?} | client RSS | server RSS |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (label, protocol, count) in runs {
        if count < 1_000 {
            println!("| {label} | skipped: the descriptor limit is {limit} | | | | | | |");
            continue;
        }
        let server = ChildServer::start(None);
        let client = Client::new(server.addr.clone()).with_protocol(protocol);
        let rss_before = rss_kb(std::process::id());
        let server_before = server.rss_kb();
        let cpu = own_cpu_time();
        let started = Instant::now();
        let mut guards = Vec::with_capacity(count);
        // In batches of 256 at once: bounded concurrency, bounded time.
        while guards.len() < count && started.elapsed() < TAKE_WITHIN {
            let batch: Vec<_> = (guards.len()..(guards.len() + 256).min(count))
                .map(|n| {
                    let client = client.clone();
                    tokio::spawn(async move { client.acquire(format!("held/{n}"), LEASE).await })
                })
                .collect();
            for task in batch {
                guards.push(task.await.expect("task").expect("acquire"));
            }
        }
        let take = started.elapsed();
        let taking_cpu = own_cpu_time() - cpu;
        let cpu = own_cpu_time();
        tokio::time::sleep(HOLD_FOR).await; // the quantity measured: heartbeats while holding
        let holding_cpu = own_cpu_time() - cpu;
        assert!(
            guards.iter().all(|guard| guard.is_held()),
            "every lock held"
        );
        let connections = connections_to(&server.addr);
        println!(
            "| {label} | {} | {connections} | {:.2} s | {:.2} s | {:.3} s | +{} MB | {} MB (+{} MB) |",
            guards.len(),
            take.as_secs_f64(),
            taking_cpu.as_secs_f64(),
            holding_cpu.as_secs_f64(),
            rss_kb(std::process::id()).saturating_sub(rss_before) / 1024,
            server.rss_kb() / 1024,
            server.rss_kb().saturating_sub(server_before) / 1024,
        );
        drop(guards);
    }
    println!();
}

async fn tls() {
    println!("## TLS and mTLS lock cycles (acquire + release), one task\n");
    println!("| transport | protocol | cycles | p50 | cycles/s |");
    println!("|---|---|---|---|---|");
    let server_ca = Ca::new("bench server CA");
    let client_ca = Ca::new("bench client CA");
    let files = Files::new();
    files.leaf("server", &server_ca.server());
    files.ca("clients-ca.pem", &client_ca);
    let ca = files.ca("ca.pem", &server_ca);
    let (cert, key) = files.leaf("client", &client_ca.client_uri("spiffe://bench/1"));
    let dir = files.path("");
    for (transport, mutual) in [("TLS", false), ("mTLS", true)] {
        let server = ChildServer::start(Some((&dir, mutual)));
        let mut rates = Vec::new();
        for (label, protocol) in protocols() {
            let mut builder = TlsConnector::builder().with_ca_file(&ca);
            if mutual {
                builder = builder.with_client_cert_files(&cert, &key);
            }
            let client = Client::new(server.addr.clone())
                .with_connector(builder.build().expect("TLS settings"))
                .with_protocol(protocol);
            let _ = cycle_latencies(&client, "bench/tls-warm", 20).await;
            let (mut latencies, took) = cycle_latencies(&client, "bench/tls", TLS_CYCLES).await;
            latencies.sort_unstable();
            let rate = latencies.len() as f64 / took.as_secs_f64();
            println!(
                "| {transport} | {label} | {} | {:.1} µs | {rate:.0} |",
                latencies.len(),
                percentile(&latencies, 50).as_secs_f64() * 1e6,
            );
            rates.push(rate);
        }
        println!(
            "\n{transport}: v2 / v1 {:.1}x cycles/s\n",
            rates[1] / rates[0]
        );
    }
    let _ = std::io::stdout().flush();
}
