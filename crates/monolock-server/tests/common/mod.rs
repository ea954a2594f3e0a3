//! Shared helpers: an in-process server on 127.0.0.1:0 and a raw-bytes peer.
#![allow(dead_code)] // each test binary uses a different subset

use std::{io, net::SocketAddr, time::Duration};

use monolock_proto::{ServerFrame, decode_response, msg};
use monolock_server::{ServerConfig, ServerHandle};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    net::TcpStream,
    task::JoinHandle,
    time::timeout,
};

/// Long enough that only a real hang trips it, short enough to fail fast.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// A server running in this process.
pub struct TestServer {
    pub addr: SocketAddr,
    pub handle: ServerHandle,
    task: JoinHandle<io::Result<()>>,
}

impl TestServer {
    pub async fn start() -> Self {
        Self::start_with(ServerConfig::default()).await
    }

    pub async fn start_with(config: ServerConfig) -> Self {
        let (addr, handle, task) = monolock_testkit::spawn_server(config).await;
        Self { addr, handle, task }
    }

    /// Graceful shutdown; returns once every connection is closed.
    pub async fn stop(self) {
        self.handle.shutdown();
        timeout(PATIENCE, self.task)
            .await
            .expect("server stops in time")
            .expect("server task")
            .expect("server result");
    }

    pub async fn connect(&self) -> Peer<TcpStream> {
        Peer::connect(self.addr).await
    }

    /// Connects and sends ACQUIRE; returns the peer and the first reply.
    pub async fn acquire(&self, name: &str, lease_ms: u32) -> (Peer<TcpStream>, ServerFrame) {
        let mut peer = self.connect().await;
        peer.send(&acquire_bytes(1, lease_ms, name.as_bytes()))
            .await;
        let reply = peer.recv().await;
        (peer, reply)
    }

    /// Acquires and asserts the lock was granted at once; returns the token.
    pub async fn hold(&self, name: &str, lease_ms: u32) -> (Peer<TcpStream>, u64) {
        let (peer, reply) = self.acquire(name, lease_ms).await;
        match reply {
            ServerFrame::Acquired { token } => (peer, token),
            other => panic!("expected ACQUIRED for {name:?}, got {other:?}"),
        }
    }

    /// Acquires and asserts the session was queued.
    pub async fn wait_in_line(&self, name: &str, lease_ms: u32) -> Peer<TcpStream> {
        let (peer, reply) = self.acquire(name, lease_ms).await;
        assert_eq!(reply, ServerFrame::Waiting, "expected WAITING for {name:?}");
        peer
    }
}

/// The raw bytes of an ACQUIRE, any field allowed (even invalid ones).
pub fn acquire_bytes(version: u8, lease_ms: u32, name: &[u8]) -> Vec<u8> {
    let mut out = vec![msg::ACQUIRE, version];
    out.extend_from_slice(&lease_ms.to_be_bytes());
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

/// Polls `probe` until it is true, failing after [`PATIENCE`].
pub async fn eventually(what: &str, mut probe: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !probe() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
