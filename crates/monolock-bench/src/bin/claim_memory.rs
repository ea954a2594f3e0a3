//! What a claim costs the server in memory, and whether that memory comes
//! back after a burst.
//!
//! Starts `monolock serve` (the binary given), then runs BURSTS bursts: in
//! each, SESSIONS protocol v2 sessions each take CLAIMS claims on distinct
//! names of NAME_LEN bytes (pipelined, try mode), hold them, then close.
//! After every burst it waits for `/metrics` to show no lock held and
//! reads the server's RSS. Prints the RSS at start, at the peak of each
//! burst and after it (SETTLE_MS after the last claim ended, 6000 by
//! default: the server looks for an ended burst every 5 s), and the bytes
//! per claim (peak less start, over the claims held).
//!
//! ```text
//! cargo build --release -p monolock
//! cargo run --release -p monolock-bench --bin claim-memory -- \
//!     target/release/monolock 100 1024 25 255
//! ```

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{SocketAddr, TcpStream},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use monolock_proto::{Lease, LockName, v2};
use monolock_testkit::sys;

struct Server {
    child: Child,
    protocol: SocketAddr,
    ops: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(monolock: &str, claims: usize) -> anyhow::Result<Server> {
    let mut child = Command::new(monolock)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--ops-listen",
            "127.0.0.1:0",
        ])
        .args(["--log-format", "json", "--log-level", "warn"])
        .args(["--max-claims-per-session", &claims.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {monolock}"))?;
    // `--log-level warn` hides the startup lines: ask /proc for the ports.
    let stderr = child.stderr.take().context("stderr")?;
    std::thread::spawn(move || for _ in BufReader::new(stderr).lines() {});
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ports = sys::listening_ports(pid);
        if ports.len() >= 2 {
            // The protocol listener is bound first.
            let protocol = SocketAddr::from(([127, 0, 0, 1], ports[0]));
            let ops = SocketAddr::from(([127, 0, 0, 1], ports[1]));
            return Ok(Server {
                child,
                protocol,
                ops,
            });
        }
        if Instant::now() > deadline {
            bail!("the server did not listen within 30 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn metric(ops: SocketAddr, name: &str) -> anyhow::Result<u64> {
    let mut stream = TcpStream::connect(ops)?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {ops}\r\nConnection: close\r\n\r\n"
    )?;
    let mut body = String::new();
    stream.read_to_string(&mut body)?;
    body.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("no {name} in /metrics"))
}

/// One session taking `claims` claims on names unique to (`burst`,
/// `session`); returns the open stream once every claim is ACQUIRED.
fn session(
    addr: SocketAddr,
    burst: usize,
    session: usize,
    claims: usize,
    name_len: usize,
) -> anyhow::Result<TcpStream> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let lease = Lease::from_millis(60_000).context("lease")?;
    let mut out = v2::ClientFrame::Open { lease }.to_bytes();
    for claim in 0..claims {
        let prefix = format!("b{burst}-s{session}-c{claim}-");
        let mut name = prefix.clone();
        name.extend(std::iter::repeat_n(
            'x',
            name_len.saturating_sub(prefix.len()),
        ));
        v2::ClientFrame::Acquire {
            claim: claim as u32,
            mode: v2::Mode::Try,
            name: LockName::new(&name).context("name")?,
        }
        .encode(&mut out);
    }
    stream.write_all(&out)?;
    let mut buf = Vec::new();
    let mut acquired = 0;
    let mut opened = false;
    while acquired < claims {
        let mut chunk = [0u8; 16 * 1024];
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            bail!("the server closed a session");
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut used = 0;
        while let Some((frame, len)) = v2::decode_response(&buf[used..])? {
            used += len;
            match frame {
                v2::ServerFrame::Opened { .. } => opened = true,
                v2::ServerFrame::Acquired { .. } => acquired += 1,
                other => bail!("unexpected {other:?}"),
            }
        }
        buf.drain(..used);
    }
    anyhow::ensure!(opened, "no OPENED");
    Ok(stream)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, default: usize| -> anyhow::Result<usize> {
        args.get(i)
            .map_or(Ok(default), |v| v.parse().context("a number"))
    };
    let monolock = args
        .get(1)
        .context("usage: claim-memory MONOLOCK [SESSIONS CLAIMS BURSTS NAME_LEN SETTLE_MS]")?;
    let (sessions, claims, bursts, name_len) =
        (arg(2, 100)?, arg(3, 1024)?, arg(4, 25)?, arg(5, 255)?);
    let settle = Duration::from_millis(arg(6, 6000)? as u64);
    sys::raise_nofile_limit().context("raise RLIMIT_NOFILE")?;
    let server = start(monolock, claims)?;
    let pid = server.child.id();
    let start_rss = sys::resident_bytes(pid).unwrap_or(0);
    let total = sessions * claims;
    println!(
        "claim-memory: {sessions} sessions x {claims} claims = {total} claims of {name_len}-byte names, {bursts} bursts"
    );
    println!("rss at start: {:.1} MiB", mib(start_rss));
    println!("burst  peak_MiB  after_MiB  bytes_per_claim  seconds");
    let mut last_after = start_rss;
    for burst in 0..bursts {
        let began = Instant::now();
        let handles: Vec<_> = (0..sessions)
            .map(|s| {
                let addr = server.protocol;
                std::thread::spawn(move || session(addr, burst, s, claims, name_len))
            })
            .collect();
        let mut streams = Vec::with_capacity(sessions);
        for handle in handles {
            streams.push(
                handle
                    .join()
                    .map_err(|_| anyhow::anyhow!("a session thread panicked"))??,
            );
        }
        let held = metric(server.ops, "monolock_locks_held")?;
        anyhow::ensure!(held as usize == total, "{held} held, {total} expected");
        let peak = sys::resident_bytes(pid).unwrap_or(0);
        drop(streams);
        let deadline = Instant::now() + Duration::from_secs(120);
        while metric(server.ops, "monolock_locks_held")? > 0 {
            anyhow::ensure!(Instant::now() < deadline, "claims never ended");
            std::thread::sleep(Duration::from_millis(20));
        }
        // The server looks for an ended burst every 5 s (RECLAIM_INTERVAL).
        std::thread::sleep(settle);
        let after = sys::resident_bytes(pid).unwrap_or(0);
        last_after = after;
        println!(
            "{burst:>5}  {:>8.1}  {:>9.1}  {:>15.0}  {:>7.2}",
            mib(peak),
            mib(after),
            peak.saturating_sub(start_rss) as f64 / total as f64,
            began.elapsed().as_secs_f64()
        );
    }
    println!(
        "rss after the last burst: {:.1} MiB ({:.1} MiB above start)",
        mib(last_after),
        mib(last_after.saturating_sub(start_rss))
    );
    Ok(())
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
