//! What one claim costs the server when one client claims in sequence,
//! protocol v1 against v2, over plain TCP, TLS and mTLS. v1 pays a TCP
//! connect, a close and (TLS) a full handshake, with the client
//! certificate's verification under mTLS, per claim; v2 pays them once per
//! session, then a RELEASE and the next ACQUIRE in one write per claim.
//! Recorded as
//! `tls_claims.<plain|tls|mtls>.<monolock|monolock_v2>.{claims_per_s,server_cpu_us_per_claim}`;
//! under mTLS also with [`MANY_CLIENTS`] clients claiming in sequence each
//! (`tls_claims.mtls_c16.*`), where one wake-up of the server can serve
//! several clients' claims.
//!
//! `monolock-bench claim-loop` drives one protocol over one transport
//! alone for as long as asked, and prints the server's process id first,
//! so that `strace -c -f -p` or `perf record -p` can watch the server
//! while it serves nothing else.

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use monolock_proto::{ServerFrame, decode_response, v2};
use monolock_testkit::pki::{Ca, Files, client_config, connect_tls};
use rustls::ClientConfig;
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    time::timeout,
};

use crate::{
    cycles::{OP_TIMEOUT, Window},
    mono,
    report::Metrics,
    servers::Server,
};

/// Upper bound on claims per measured window, whatever the speed.
const MAX_CLAIMS: u64 = 100_000_000;
/// Clients of the mTLS figures with several clients.
pub const MANY_CLIENTS: usize = 16;

/// How the client reaches the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Transport {
    /// Plain TCP.
    Plain,
    /// TLS, no client certificate.
    Tls,
    /// TLS with a client certificate (mTLS).
    Mtls,
}

impl Transport {
    /// Its name in metric keys.
    pub fn key(self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::Tls => "tls",
            Self::Mtls => "mtls",
        }
    }
}

/// Parameters of one measurement.
pub struct Params<'a> {
    /// The `monolock` binary.
    pub bin: &'a Path,
    /// The servers' CPU.
    pub cpu: Option<usize>,
    /// Where server logs go.
    pub logs: &'a Path,
    /// Plain TCP, TLS or mTLS.
    pub transport: Transport,
    /// Load before the window of the figures with several clients.
    pub warmup: Duration,
    /// How long each protocol is driven.
    pub length: Duration,
}

/// A fresh server for `transport`, and how a client connects to it.
struct Lab {
    server: Server,
    client: Option<Arc<ClientConfig>>,
    /// Keeps the PEM files alive as long as the server reads them.
    _files: Files,
}

impl Lab {
    async fn start(p: &Params<'_>) -> Result<Self> {
        let files = Files::new();
        let (extra, client) = match p.transport {
            Transport::Plain => (Vec::new(), None),
            Transport::Tls | Transport::Mtls => {
                let mutual = p.transport == Transport::Mtls;
                let ca = Ca::new("monolock-bench CA");
                let client_leaf = ca.client_uri("spiffe://bench/worker");
                let (cert, key) = files.leaf("server", &ca.server());
                let mut extra: Vec<OsString> = vec![
                    "--tls-cert".into(),
                    cert.into_os_string(),
                    "--tls-key".into(),
                    key.into_os_string(),
                ];
                if mutual {
                    extra.push("--tls-client-ca".into());
                    extra.push(files.ca("clients", &ca).into_os_string());
                }
                let config = client_config(&[&ca], mutual.then_some(&client_leaf));
                (extra, Some(config))
            }
        };
        let server = Server::start_monolock_with(p.bin, p.cpu, p.logs, &extra).await?;
        Ok(Self {
            server,
            client,
            _files: files,
        })
    }

    /// Claims `name` over v1 (a connection per claim) for `length`.
    async fn v1(&self, name: &str, length: Duration) -> Result<Claims> {
        let acquire = mono::acquire_bytes(name, Duration::from_secs(60))?;
        let addr = self.server.addr;
        let s0 = self.server.sample()?;
        let started = Instant::now();
        let mut claims = 0u64;
        while started.elapsed() < length && claims < MAX_CLAIMS {
            timeout(OP_TIMEOUT, async {
                match &self.client {
                    None => v1_claim(mono::connect(addr, None).await?, &acquire).await,
                    Some(config) => {
                        v1_claim(connect_tls(addr, Arc::clone(config)).await?, &acquire).await
                    }
                }
            })
            .await
            .context("v1 claim timed out")??;
            claims += 1;
        }
        let secs = started.elapsed().as_secs_f64();
        let s1 = self.server.sample()?;
        Ok(Claims {
            claims,
            secs,
            server_cpu: s1.cpu - s0.cpu,
        })
    }

    /// Claims `name` over one v2 session for `length`, counted from the
    /// session's first claim (its handshake and OPEN are not counted).
    async fn v2(&self, name: &str, length: Duration) -> Result<Claims> {
        let addr = self.server.addr;
        match &self.client {
            None => {
                let tcp = timeout(OP_TIMEOUT, mono::connect(addr, None))
                    .await
                    .context("v2 connect timed out")??;
                v2_claims(&self.server, tcp, name, length).await
            }
            Some(config) => {
                let tls = timeout(OP_TIMEOUT, connect_tls(addr, Arc::clone(config)))
                    .await
                    .context("v2 TLS connect timed out")??;
                v2_claims(&self.server, tls, name, length).await
            }
        }
    }

    /// `clients` clients claiming in sequence each, on names of their own,
    /// over v1 or v2, counted in a window after `warmup`.
    async fn many(
        &self,
        v2: bool,
        name: &str,
        clients: usize,
        warmup: Duration,
        length: Duration,
    ) -> Result<Claims> {
        let win = Window::new(warmup, length);
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..clients {
            let (addr, config) = (self.server.addr, self.client.clone());
            let name = format!("{name}/{i}");
            tasks.spawn(async move {
                if v2 {
                    v2_client(addr, config, &name, win).await
                } else {
                    v1_client(addr, config, &name, win).await
                }
            });
        }
        tokio::time::sleep_until(win.measure_from.into()).await;
        let s0 = self.server.sample()?;
        tokio::time::sleep_until(win.end.into()).await;
        let s1 = self.server.sample()?;
        let mut claims = 0;
        while let Some(joined) = tasks.join_next().await {
            claims += joined.context("client task panicked")??;
        }
        Ok(Claims {
            claims,
            secs: win.secs(),
            server_cpu: s1.cpu - s0.cpu,
        })
    }
}

/// One v1 client of [`Lab::many`]: its claims inside the window.
async fn v1_client(
    addr: std::net::SocketAddr,
    config: Option<Arc<ClientConfig>>,
    name: &str,
    win: Window,
) -> Result<u64> {
    let acquire = mono::acquire_bytes(name, Duration::from_secs(60))?;
    tokio::time::sleep_until(win.start.into()).await;
    let mut claims = 0;
    for _ in 0..MAX_CLAIMS {
        let t0 = Instant::now();
        if t0 >= win.end {
            break;
        }
        timeout(OP_TIMEOUT, async {
            match &config {
                None => v1_claim(mono::connect(addr, None).await?, &acquire).await,
                Some(config) => {
                    v1_claim(connect_tls(addr, Arc::clone(config)).await?, &acquire).await
                }
            }
        })
        .await
        .context("v1 claim timed out")??;
        if t0 >= win.measure_from && Instant::now() <= win.end {
            claims += 1;
        }
    }
    Ok(claims)
}

/// One v2 client of [`Lab::many`]: its claims inside the window.
async fn v2_client(
    addr: std::net::SocketAddr,
    config: Option<Arc<ClientConfig>>,
    name: &str,
    win: Window,
) -> Result<u64> {
    match config {
        None => {
            let tcp = timeout(OP_TIMEOUT, mono::connect(addr, None))
                .await
                .context("v2 connect timed out")??;
            v2_window(tcp, name, win).await
        }
        Some(config) => {
            let tls = timeout(OP_TIMEOUT, connect_tls(addr, config))
                .await
                .context("v2 TLS connect timed out")??;
            v2_window(tls, name, win).await
        }
    }
}

/// One v2 session's claims inside `win`.
async fn v2_window<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    name: &str,
    win: Window,
) -> Result<u64> {
    let (first, cycle) = v2_frames(name)?;
    let mut buf = Vec::with_capacity(64);
    exchange(&mut stream, &first, &mut buf, 2).await?;
    tokio::time::sleep_until(win.start.into()).await;
    let mut claims = 0;
    for _ in 0..MAX_CLAIMS {
        let t0 = Instant::now();
        if t0 >= win.end {
            break;
        }
        exchange(&mut stream, &cycle, &mut buf, 2).await?;
        if t0 >= win.measure_from && Instant::now() <= win.end {
            claims += 1;
        }
    }
    Ok(claims)
}

/// A v2 session's first bytes (OPEN and the first ACQUIRE of `name`) and
/// each claim's after that (RELEASE and the next ACQUIRE).
fn v2_frames(name: &str) -> Result<(Vec<u8>, Vec<u8>)> {
    let lease = monolock_proto::Lease::from_millis(60_000).context("lease")?;
    let mut first = v2::ClientFrame::Open { lease }.to_bytes();
    let acquire = crate::mono_v2::acquire_bytes(1, name)?;
    first.extend_from_slice(&acquire);
    let mut cycle = v2::release_frame(1).to_vec();
    cycle.extend_from_slice(&acquire);
    Ok((first, cycle))
}

/// Claims made in a window, and the server CPU they cost.
struct Claims {
    claims: u64,
    secs: f64,
    server_cpu: Duration,
}

/// Runs v1 then v2 against one fresh server of `p.transport`.
pub async fn run(p: Params<'_>, run_id: u64, m: &mut Metrics) -> Result<()> {
    let lab = Lab::start(&p).await?;
    let name = format!("bench/claims/{run_id}");
    let key = p.transport.key();
    let v1 = lab.v1(&name, p.length).await?;
    put(m, key, "monolock", &v1);
    let v2 = lab.v2(&format!("{name}/v2"), p.length).await?;
    put(m, key, "monolock_v2", &v2);
    if p.transport == Transport::Mtls {
        let key = format!("{key}_c{MANY_CLIENTS}");
        for (v2, series) in [(false, "monolock"), (true, "monolock_v2")] {
            let name = format!("{name}/many/{series}");
            let c = lab
                .many(v2, &name, MANY_CLIENTS, p.warmup, p.length)
                .await?;
            put(m, &key, series, &c);
        }
    }
    Ok(())
}

/// A v1 claim: ACQUIRE, read until ACQUIRED; dropping the stream closes it.
async fn v1_claim<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, acquire: &[u8]) -> Result<()> {
    stream.write_all(acquire).await?;
    stream.flush().await?;
    let mut buf = Vec::with_capacity(16);
    loop {
        if let Ok(Some((frame, _))) = decode_response(&buf) {
            match frame {
                ServerFrame::Acquired { .. } => return Ok(()),
                ServerFrame::Waiting => {
                    buf.drain(..1);
                    continue;
                }
                ServerFrame::Error { code, reason } => bail!("ERROR {code}: {reason}"),
            }
        }
        if stream.read_buf(&mut buf).await? == 0 {
            bail!("closed before ACQUIRED");
        }
    }
}

/// One v2 session on `stream`: OPEN and the first ACQUIRE, then a RELEASE
/// and the next ACQUIRE in one write per claim, for `length`. The window
/// starts after the first claim, so it holds no handshake and no OPEN.
async fn v2_claims<S: AsyncRead + AsyncWrite + Unpin>(
    server: &Server,
    mut stream: S,
    name: &str,
    length: Duration,
) -> Result<Claims> {
    let (first, cycle) = v2_frames(name)?;
    let mut buf = Vec::with_capacity(64);
    exchange(&mut stream, &first, &mut buf, 2).await?;
    let s0 = server.sample()?;
    let started = Instant::now();
    let mut claims = 0u64;
    while started.elapsed() < length && claims < MAX_CLAIMS {
        exchange(&mut stream, &cycle, &mut buf, 2).await?;
        claims += 1;
    }
    let secs = started.elapsed().as_secs_f64();
    let s1 = server.sample()?;
    Ok(Claims {
        claims,
        secs,
        server_cpu: s1.cpu - s0.cpu,
    })
}

/// Writes `bytes` and reads `replies` v2 frames (none of them ERROR).
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    bytes: &[u8],
    buf: &mut Vec<u8>,
    replies: usize,
) -> Result<()> {
    timeout(OP_TIMEOUT, async {
        stream.write_all(bytes).await?;
        stream.flush().await?;
        let mut got = 0;
        while got < replies {
            match v2::decode_response(buf)? {
                Some((v2::ServerFrame::Error { code, reason }, _)) => {
                    bail!("ERROR {code}: {reason}")
                }
                Some((_, used)) => {
                    buf.drain(..used);
                    got += 1;
                }
                None => {
                    if stream.read_buf(buf).await? == 0 {
                        bail!("v2 session closed");
                    }
                }
            }
        }
        anyhow::Ok(())
    })
    .await
    .context("v2 exchange timed out")?
}

fn put(m: &mut Metrics, mode: &str, series: &str, c: &Claims) {
    let pre = format!("tls_claims.{mode}.{series}");
    m.put(&format!("{pre}.claims_per_s"), c.claims as f64 / c.secs);
    if c.claims > 0 {
        m.put(
            &format!("{pre}.server_cpu_us_per_claim"),
            c.server_cpu.as_secs_f64() * 1e6 / c.claims as f64,
        );
    }
}

/// `monolock-bench claim-loop`: one client claiming in sequence, one
/// protocol over one transport, on a fresh server, for profiling it.
#[derive(Args, Debug)]
pub struct ClaimLoopArgs {
    /// Plain TCP, TLS or mTLS.
    #[arg(long, value_enum, default_value_t = Transport::Mtls)]
    transport: Transport,
    /// Protocol version 1 (a connection per claim) rather than 2.
    #[arg(long)]
    v1: bool,
    /// How long to claim, after a second's warm-up (1..=600 s).
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    seconds: u64,
    /// The `monolock` binary [default: next to this binary].
    #[arg(long, value_name = "PATH")]
    monolock_bin: Option<PathBuf>,
    /// CPU for the server (none: not pinned).
    #[arg(long, value_name = "CPU")]
    server_cpu: Option<usize>,
}

/// Starts the server, prints `server pid N`, warms up for a second, then
/// claims for `--seconds` and prints claims/s and the server's CPU per
/// claim.
pub async fn claim_loop(args: ClaimLoopArgs) -> Result<()> {
    let exe = std::env::current_exe().context("locate this binary")?;
    let bin = match args.monolock_bin {
        Some(bin) => bin,
        None => exe
            .parent()
            .map(|d| d.join("monolock"))
            .context("this binary has no directory")?,
    };
    let logs = std::env::temp_dir();
    let p = Params {
        bin: &bin,
        cpu: args.server_cpu,
        logs: &logs,
        transport: args.transport,
        warmup: Duration::from_secs(1),
        length: Duration::from_secs(args.seconds.clamp(1, 600)),
    };
    let lab = Lab::start(&p).await?;
    println!("server pid {}", lab.server.pid);
    let name = format!("bench/claim-loop/{}", std::process::id());
    let warm = Duration::from_secs(1);
    let run = async |length| {
        if args.v1 {
            lab.v1(&name, length).await
        } else {
            lab.v2(&name, length).await
        }
    };
    run(warm).await?;
    let c = run(p.length).await?;
    println!(
        "{} {}: {} claims in {:.2} s, {:.0} claims/s, server CPU {:.1} us per claim",
        if args.v1 { "v1" } else { "v2" },
        args.transport.key(),
        c.claims,
        c.secs,
        c.claims as f64 / c.secs,
        c.server_cpu.as_secs_f64() * 1e6 / c.claims.max(1) as f64,
    );
    Ok(())
}
