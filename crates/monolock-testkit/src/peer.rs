//! A raw-bytes protocol peer that reads whole server frames, over TCP or
//! over an in-memory pipe to the real session code (for paused-time tests).

use std::{net::SocketAddr, time::Duration};

use monolock_proto::{ServerFrame, decode_response, msg};
use monolock_server::ServerHandle;
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream},
    net::TcpStream,
    time::timeout,
};

use crate::patience::PATIENCE;

/// The raw bytes of an ACQUIRE, any field allowed (even invalid ones).
pub fn acquire_bytes(version: u8, lease_ms: u32, name: &[u8]) -> Vec<u8> {
    let mut out = vec![msg::ACQUIRE, version];
    out.extend_from_slice(&lease_ms.to_be_bytes());
    // Names longer than u16::MAX are truncated in the length field on
    // purpose: the bytes are whatever the test asks for.
    #[allow(clippy::cast_possible_truncation)]
    out.extend_from_slice(&(name.len() as u16).to_be_bytes());
    out.extend_from_slice(name);
    out
}

/// A client that speaks raw bytes and reads whole server frames.
pub struct Peer<S> {
    pub stream: S,
    buf: Vec<u8>,
}

impl Peer<TcpStream> {
    pub async fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).await.expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        Self::new(stream)
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.stream.local_addr().expect("local addr")
    }
}

impl Peer<DuplexStream> {
    /// A session served by `handle`'s real session code over an in-memory
    /// pipe, seen by the server as coming from 127.0.0.1:`port`. No socket
    /// and no timer of its own: fit for tokio's paused clock.
    pub fn pipe(handle: &ServerHandle, port: u16) -> Self {
        let (client, server_side) = tokio::io::duplex(4096);
        let handle = handle.clone();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        tokio::spawn(async move { handle.serve_stream(server_side, addr, "").await });
        Self::new(client)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Peer<S> {
    pub fn new(stream: S) -> Self {
        Self {
            stream,
            buf: Vec::new(),
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("send");
    }

    /// Sends ACQUIRE (protocol version 1) and returns the first reply.
    pub async fn acquire(&mut self, name: &str, lease_ms: u32) -> ServerFrame {
        self.send(&acquire_bytes(1, lease_ms, name.as_bytes()))
            .await;
        self.recv().await
    }

    pub async fn heartbeat(&mut self) -> ServerFrame {
        self.send(&[msg::HEARTBEAT]).await;
        self.recv().await
    }

    /// The next frame; panics on EOF or after [`PATIENCE`].
    pub async fn recv(&mut self) -> ServerFrame {
        match timeout(PATIENCE, self.next_frame()).await {
            Ok(Some(frame)) => frame,
            Ok(None) => panic!("connection closed while a frame was expected"),
            Err(_) => panic!("no frame within {PATIENCE:?}"),
        }
    }

    /// The next frame within `within`, `None` if none came (panics on EOF).
    pub async fn recv_within(&mut self, within: Duration) -> Option<ServerFrame> {
        match timeout(within, self.next_frame()).await {
            Ok(Some(frame)) => Some(frame),
            Ok(None) => panic!("connection closed while waiting for a frame"),
            Err(_) => None,
        }
    }

    /// Reads an ERROR frame and then EOF; returns the code and reason.
    pub async fn expect_error_then_close(&mut self) -> (u8, String) {
        let frame = self.recv().await;
        let ServerFrame::Error { code, reason } = frame else {
            panic!("expected ERROR, got {frame:?}");
        };
        self.expect_eof().await;
        (code.0, reason)
    }

    /// Asserts the server closes the connection with nothing more to say.
    pub async fn expect_eof(&mut self) {
        let closed = timeout(PATIENCE, async {
            loop {
                if !self.buf.is_empty() {
                    return Err(self.buf.clone());
                }
                let mut chunk = [0u8; 64];
                match self.stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => return Ok(()),
                    Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                }
            }
        })
        .await
        .expect("connection closed in time");
        if let Err(extra) = closed {
            panic!("expected EOF, got bytes {extra:02x?}");
        }
    }

    /// `None` on EOF or a read error.
    async fn next_frame(&mut self) -> Option<ServerFrame> {
        loop {
            match decode_response(&self.buf) {
                Ok(Some((frame, used))) => {
                    self.buf.drain(..used);
                    return Some(frame);
                }
                Ok(None) => {}
                Err(err) => panic!("undecodable bytes from server: {err}"),
            }
            let mut chunk = [0u8; 512];
            match self.stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

/// A [`monolock_client`] connector that reaches `handle`'s real session
/// code over in-memory pipes: the real client and the real server with no
/// socket in between, so a test of leases and heartbeats can run on
/// tokio's paused clock. Each connection is seen by the server as coming
/// from 127.0.0.1 with the next port from 1.
#[derive(Clone)]
pub struct PipeConnector {
    handle: ServerHandle,
    next_port: std::sync::Arc<std::sync::atomic::AtomicU16>,
}

impl PipeConnector {
    pub fn new(handle: &ServerHandle) -> Self {
        Self {
            handle: handle.clone(),
            next_port: std::sync::Arc::new(std::sync::atomic::AtomicU16::new(1)),
        }
    }

    /// A client of `handle` over pipes (the address is only a label).
    pub fn client(handle: &ServerHandle) -> monolock_client::Client<Self> {
        monolock_client::Client::new("pipe").with_connector(Self::new(handle))
    }
}

impl monolock_client::Connector for PipeConnector {
    type Stream = DuplexStream;

    async fn connect(
        &self,
        _addr: &str,
    ) -> std::io::Result<monolock_client::Connection<DuplexStream>> {
        let port = self
            .next_port
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Peer { stream, .. } = Peer::pipe(&self.handle, port);
        Ok(monolock_client::Connection::new(stream))
    }
}
