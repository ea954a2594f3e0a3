//! The protocol v2 side of the load generator: one session per client over
//! a tokio `TcpStream`, `monolock_proto::v2` doing all encoding and
//! decoding. As thin as [`crate::mono`]: no heartbeat task, leases long
//! enough not to need one.

use std::{net::SocketAddr, time::Duration};

use anyhow::{Context, Result, bail};
use monolock_proto::{
    Lease, LockName,
    v2::{self, ClientFrame, Mode, ServerFrame},
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::mono;

/// An open v2 session plus the bytes read that are not yet a whole frame.
pub struct Session {
    stream: tokio::net::TcpStream,
    buf: Vec<u8>,
}

impl Session {
    /// Connects, sends OPEN with `lease` and reads OPENED.
    pub async fn open(addr: SocketAddr, lease: Duration) -> Result<Self> {
        let stream = mono::connect(addr, None)
            .await
            .with_context(|| format!("connect to monolock at {addr}"))?;
        let mut session = Self {
            stream,
            buf: Vec::with_capacity(256),
        };
        let lease = Lease::from_duration(lease).context("lease must be 1 ms .. 49 days")?;
        session
            .send(&ClientFrame::Open { lease }.to_bytes())
            .await?;
        match session.read_frame().await? {
            ServerFrame::Opened { .. } => Ok(session),
            other => bail!("expected OPENED, got {other:?}"),
        }
    }

    /// Sends pre-encoded frames in one write.
    pub async fn send(&mut self, bytes: &[u8]) -> Result<()> {
        self.stream
            .write_all(bytes)
            .await
            .context("write to monolock")
    }

    /// Reads the next whole frame; EOF, a bad byte and ERROR are errors.
    pub async fn read_frame(&mut self) -> Result<ServerFrame> {
        loop {
            match v2::decode_response(&self.buf) {
                Ok(Some((frame, used))) => {
                    self.buf.drain(..used);
                    if let ServerFrame::Error { code, reason } = &frame {
                        bail!("monolock sent ERROR {code}: {reason}");
                    }
                    return Ok(frame);
                }
                Ok(None) => {}
                Err(e) => bail!("monolock protocol error: {e}"),
            }
            let n = self
                .stream
                .read_buf(&mut self.buf)
                .await
                .context("read from monolock")?;
            if n == 0 {
                bail!("monolock closed the connection");
            }
        }
    }

    /// Reads until claim `claim` is granted (its ACQUIRED reply, or a
    /// GRANTED push after WAITING); returns whether it waited.
    pub async fn until_granted(&mut self, claim: u32) -> Result<bool> {
        let mut waited = false;
        loop {
            match self.read_frame().await? {
                ServerFrame::Waiting { claim: c } if c == claim => waited = true,
                ServerFrame::Acquired { claim: c, .. } | ServerFrame::Granted { claim: c, .. }
                    if c == claim =>
                {
                    return Ok(waited);
                }
                other => bail!("unexpected frame while acquiring claim {claim}: {other:?}"),
            }
        }
    }

    /// Reads the RELEASED of `claim`.
    pub async fn until_released(&mut self, claim: u32) -> Result<()> {
        match self.read_frame().await? {
            ServerFrame::Released { claim: c } if c == claim => Ok(()),
            other => bail!("expected RELEASED {claim}, got {other:?}"),
        }
    }
}

/// The encoded ACQUIRE (wait) of `name` under `claim`.
pub fn acquire_bytes(claim: u32, name: &str) -> Result<Vec<u8>> {
    let name = LockName::new(name).with_context(|| format!("lock name {name:?}"))?;
    Ok(ClientFrame::Acquire {
        claim,
        mode: Mode::Wait,
        name,
    }
    .to_bytes())
}
