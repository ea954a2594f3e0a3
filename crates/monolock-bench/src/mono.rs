//! The monolock side of the load generator: protocol v1 spoken directly over
//! a tokio `TcpStream`, with `monolock-proto` doing all encoding and
//! decoding. Deliberately thinner than the official client (no heartbeat
//! task, no deadline bookkeeping) so the generator costs as little as
//! possible; the scenarios choose leases long enough not to need heartbeats
//! unless they send them themselves.

use std::{
    net::{Ipv4Addr, SocketAddr},
    time::Duration,
};

use anyhow::{Context, Result, bail};
use monolock_proto::{ClientFrame, Lease, LockName, ServerFrame, decode_response};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpSocket, TcpStream},
};

use crate::sys;

/// Connects with TCP_NODELAY, optionally from a chosen loopback source
/// address (bound before connect, port chosen at connect time).
pub async fn connect(addr: SocketAddr, source: Option<Ipv4Addr>) -> std::io::Result<TcpStream> {
    let stream = match source {
        None => TcpStream::connect(addr).await?,
        Some(ip) => {
            let socket = socket2::Socket::new(
                socket2::Domain::IPV4,
                socket2::Type::STREAM,
                Some(socket2::Protocol::TCP),
            )?;
            socket.set_nonblocking(true)?;
            sys::bind_source_ip(&socket, ip)?;
            let std_stream: std::net::TcpStream = socket.into();
            TcpSocket::from_std_stream(std_stream).connect(addr).await?
        }
    };
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// A connection plus the bytes read from it that are not yet a whole frame.
pub struct Conn {
    /// The socket; dropping it is the release.
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    /// Wraps a connected stream.
    pub fn new(stream: TcpStream) -> Self {
        Self {
            stream,
            buf: Vec::with_capacity(64),
        }
    }

    /// Connects (see [`connect`]).
    pub async fn connect(addr: SocketAddr, source: Option<Ipv4Addr>) -> Result<Self> {
        let stream = connect(addr, source)
            .await
            .with_context(|| format!("connect to monolock at {addr}"))?;
        Ok(Self::new(stream))
    }

    /// Sends pre-encoded frame bytes.
    pub async fn send(&mut self, bytes: &[u8]) -> Result<()> {
        self.stream
            .write_all(bytes)
            .await
            .context("write to monolock")
    }

    /// Reads the next whole server frame. EOF, an undecodable byte and an
    /// ERROR frame are errors.
    pub async fn read_frame(&mut self) -> Result<ServerFrame> {
        loop {
            match decode_response(&self.buf) {
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

    /// Reads frames until ACQUIRED; returns the token and whether a WAITING
    /// came first.
    pub async fn until_acquired(&mut self) -> Result<(u64, bool)> {
        let mut waited = false;
        loop {
            match self.read_frame().await? {
                ServerFrame::Waiting => waited = true,
                ServerFrame::Acquired { token } => return Ok((token, waited)),
                ServerFrame::Error { .. } => bail!("unreachable: errors are returned above"),
            }
        }
    }

    /// Sends one heartbeat and reads its reply; returns the reply.
    pub async fn heartbeat(&mut self) -> Result<ServerFrame> {
        self.send(&HEARTBEAT).await?;
        self.read_frame().await
    }
}

/// The one-byte HEARTBEAT frame.
pub const HEARTBEAT: [u8; 1] = [monolock_proto::msg::HEARTBEAT];

/// The encoded ACQUIRE for `name` with `lease`.
pub fn acquire_bytes(name: &str, lease: Duration) -> Result<Vec<u8>> {
    let name = LockName::new(name).with_context(|| format!("lock name {name:?}"))?;
    let lease = Lease::from_duration(lease).context("lease must be 1 ms .. 49 days")?;
    Ok(ClientFrame::acquire(lease, name).to_bytes())
}
