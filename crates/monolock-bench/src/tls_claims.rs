//! What one claim costs the server under TLS and mTLS, protocol v1 against
//! v2: one client claiming in sequence. v1 pays a TCP connect, a full TLS
//! handshake (and the client certificate's verification under mTLS) and a
//! close per claim; v2 pays them once per session, then a RELEASE and the
//! next ACQUIRE in one write per claim. Recorded as
//! `tls_claims.<tls|mtls>.<monolock|monolock_v2>.{claims_per_s,server_cpu_us_per_claim}`.

use std::{
    ffi::OsString,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use monolock_proto::{ServerFrame, decode_response, v2};
use monolock_testkit::pki::{Ca, Files, client_config, connect_tls};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    time::timeout,
};

use crate::{cycles::OP_TIMEOUT, mono, report::Metrics, servers::Server};

/// Parameters of one measurement.
pub struct Params<'a> {
    /// The `monolock` binary.
    pub bin: &'a Path,
    /// The servers' CPU.
    pub cpu: Option<usize>,
    /// Where server logs go.
    pub logs: &'a Path,
    /// mTLS (a client certificate) rather than TLS.
    pub mutual: bool,
    /// How long each protocol is driven.
    pub length: Duration,
}

/// Runs v1 then v2 against one fresh TLS server.
pub async fn run(p: Params<'_>, run_id: u64, m: &mut Metrics) -> Result<()> {
    let ca = Ca::new("monolock-bench CA");
    let server_leaf = ca.server();
    let client_leaf = ca.client_uri("spiffe://bench/worker");
    let files = Files::new();
    let (cert, key) = files.leaf("server", &server_leaf);
    let mut extra: Vec<OsString> = vec![
        "--tls-cert".into(),
        cert.into_os_string(),
        "--tls-key".into(),
        key.into_os_string(),
    ];
    if p.mutual {
        extra.push("--tls-client-ca".into());
        extra.push(files.ca("clients", &ca).into_os_string());
    }
    let server = Server::start_monolock_with(p.bin, p.cpu, p.logs, &extra).await?;
    let config = client_config(&[&ca], p.mutual.then_some(&client_leaf));
    let mode = if p.mutual { "mtls" } else { "tls" };
    let name = format!("bench/tls/{run_id}");

    // v1: a connection, a handshake, an ACQUIRE and a close per claim.
    let acquire = mono::acquire_bytes(&name, Duration::from_secs(60))?;
    let s0 = server.sample()?;
    let started = Instant::now();
    let mut v1_claims = 0u64;
    while started.elapsed() < p.length && v1_claims < 10_000_000 {
        timeout(OP_TIMEOUT, async {
            let mut tls = connect_tls(server.addr, Arc::clone(&config)).await?;
            tls.write_all(&acquire).await?;
            tls.flush().await?;
            let mut buf = Vec::with_capacity(16);
            loop {
                if let Ok(Some((frame, _))) = decode_response(&buf) {
                    match frame {
                        ServerFrame::Acquired { .. } => break,
                        ServerFrame::Waiting => {
                            buf.drain(..1);
                            continue;
                        }
                        ServerFrame::Error { code, reason } => bail!("ERROR {code}: {reason}"),
                    }
                }
                if tls.read_buf(&mut buf).await? == 0 {
                    bail!("closed before ACQUIRED");
                }
            }
            anyhow::Ok(())
        })
        .await
        .context("v1 TLS claim timed out")??;
        v1_claims += 1;
    }
    let v1_secs = started.elapsed().as_secs_f64();
    let s1 = server.sample()?;
    put(
        m,
        mode,
        "monolock",
        v1_claims,
        v1_secs,
        (s1.cpu - s0.cpu).as_secs_f64(),
    );

    // v2: one session, the handshake once, then RELEASE + ACQUIRE per claim.
    let mut tls = timeout(OP_TIMEOUT, connect_tls(server.addr, Arc::clone(&config)))
        .await
        .context("v2 TLS connect timed out")??;
    let lease = monolock_proto::Lease::from_millis(60_000).context("lease")?;
    let mut first = v2::ClientFrame::Open { lease }.to_bytes();
    let acquire = crate::mono_v2::acquire_bytes(1, &format!("{name}/v2"))?;
    first.extend_from_slice(&acquire);
    let mut cycle = v2::release_frame(1).to_vec();
    cycle.extend_from_slice(&acquire);
    let mut buf = Vec::with_capacity(64);
    exchange(&mut tls, &first, &mut buf, 2).await?;
    let s0 = server.sample()?;
    let started = Instant::now();
    let mut v2_claims = 0u64;
    while started.elapsed() < p.length && v2_claims < 100_000_000 {
        exchange(&mut tls, &cycle, &mut buf, 2).await?;
        v2_claims += 1;
    }
    let v2_secs = started.elapsed().as_secs_f64();
    let s1 = server.sample()?;
    put(
        m,
        mode,
        "monolock_v2",
        v2_claims,
        v2_secs,
        (s1.cpu - s0.cpu).as_secs_f64(),
    );
    Ok(())
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
    .context("v2 TLS exchange timed out")?
}

fn put(m: &mut Metrics, mode: &str, series: &str, claims: u64, secs: f64, cpu: f64) {
    let pre = format!("tls_claims.{mode}.{series}");
    m.put(&format!("{pre}.claims_per_s"), claims as f64 / secs);
    if claims > 0 {
        m.put(
            &format!("{pre}.server_cpu_us_per_claim"),
            cpu * 1e6 / claims as f64,
        );
    }
}
