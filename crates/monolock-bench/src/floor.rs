//! The machine's floor: the round trip of one byte between the server CPU
//! and the generator CPU through a plain blocking echo process, no lock
//! server involved.
//!
//! Every handover needs at least a message each way (the release reaching
//! the server, the grant reaching the next holder), so this round trip
//! bounds what any lock service can reach on the machine the figures come
//! from. The echo child (`monolock-bench echo`) runs on the server CPU with
//! the servers' scheduling; the generator side is the same tokio runtime
//! every client of the bench uses.

use std::{
    io::{ErrorKind, Read, Write},
    net::{SocketAddr, TcpListener},
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use clap::Args;
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::TcpStream,
    process::Command,
    time::timeout,
};

use crate::{cycles::OP_TIMEOUT, report::Metrics, stats::Samples, sys};

/// Upper bound on round trips per window.
const MAX_ROUND_TRIPS: u64 = 10_000_000;

/// Arguments of `monolock-bench echo`.
#[derive(Args, Debug)]
pub struct EchoArgs {
    /// Exit after this many seconds whatever happens.
    #[arg(long, default_value_t = 60)]
    pub max_secs: u64,
}

/// Runs `echo`: prints `READY <port>`, then echoes the first connection's
/// bytes back one read at a time until it closes or `max_secs` pass.
pub fn echo(args: EchoArgs) -> Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0").context("bind the echo port")?;
    let port = listener.local_addr()?.port();
    let mut out = std::io::stdout().lock();
    writeln!(out, "READY {port}")?;
    out.flush()?;
    let give_up = Instant::now() + Duration::from_secs(args.max_secs);
    let (mut stream, _) = listener.accept().context("accept the generator")?;
    stream.set_nodelay(true)?;
    let mut buf = [0u8; 64];
    loop {
        let left = give_up.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => stream.write_all(&buf[..n])?,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Measures the round trip for `warmup + length` (figures from after the
/// warm-up) and records `floor.rtt_p50_us`, `floor.rtt_p99_us` and
/// `floor.server_cpu_us_per_rtt`: the echo process's CPU time per round
/// trip, what answering one message over loopback costs a server that
/// does nothing else (a blocking read and a write).
pub async fn round_trip(
    exe: &std::path::Path,
    server_cpu: Option<usize>,
    warmup: Duration,
    length: Duration,
    m: &mut Metrics,
) -> Result<()> {
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("echo")
        .args([
            "--max-secs",
            &(warmup + length + OP_TIMEOUT).as_secs().to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(cpu) = server_cpu {
        sys::pin_command(&mut cmd, cpu);
    }
    let mut child = Command::from(cmd)
        .kill_on_drop(true)
        .spawn()
        .context("start the echo child")?;
    let stdout = child.stdout.take().context("echo stdout")?;
    let line = timeout(OP_TIMEOUT, BufReader::new(stdout).lines().next_line())
        .await
        .context("echo child did not report READY in time")??
        .context("echo child exited before READY")?;
    let Some(port) = line.strip_prefix("READY ").and_then(|p| p.parse().ok()) else {
        bail!("echo child said {line:?}");
    };
    let pid = child.id().context("echo child pid")?;
    let mut stream = TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port)))
        .await
        .context("connect to the echo child")?;
    stream.set_nodelay(true)?;
    let measure_from = Instant::now() + warmup;
    let end = measure_from + length;
    let mut samples = Samples::default();
    let mut byte = [1u8];
    let mut cpu_from = None;
    for _ in 0..MAX_ROUND_TRIPS {
        let sent = Instant::now();
        if sent >= end {
            break;
        }
        if sent >= measure_from && cpu_from.is_none() {
            cpu_from = Some(sys::proc_sample(pid).context("read the echo child's /proc")?);
        }
        timeout(OP_TIMEOUT, async {
            stream.write_all(&byte).await?;
            stream.read_exact(&mut byte).await
        })
        .await
        .context("echo round trip timed out")??;
        if sent >= measure_from {
            samples.push(sent.elapsed());
        }
    }
    let cpu_to = sys::proc_sample(pid).context("read the echo child's /proc")?;
    drop(stream);
    let _ = timeout(OP_TIMEOUT, child.wait()).await;
    if samples.is_empty() {
        bail!("no echo round trip in the window");
    }
    if let Some(from) = cpu_from {
        m.put(
            "floor.server_cpu_us_per_rtt",
            (cpu_to.cpu - from.cpu).as_secs_f64() * 1e6 / samples.len() as f64,
        );
    }
    m.put_opt("floor.rtt_p50_us", samples.percentile_us(50.0));
    m.put_opt("floor.rtt_p99_us", samples.percentile_us(99.0));
    Ok(())
}
