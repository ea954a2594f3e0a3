//! A raw protocol v2 client for tests: it sends exactly the frames it is
//! told to (valid or not) and reads the server's frames one by one, with a
//! bounded patience, so a test can assert every byte of an exchange.
//!
//! It keeps no claim state and enforces no rule: that is what tests of the
//! server need. A client library builds its state machine on top of the
//! same `monolock_proto::v2` codec (docs/protocol.md, "Protocol version 2").
//!
//! ```no_run
//! # async fn demo(addr: std::net::SocketAddr) {
//! use monolock_proto::v2::{Mode, ServerFrame};
//! use monolock_testkit::v2::RawV2;
//!
//! let (mut client, _session) = RawV2::open(addr, 5_000).await;
//! let reply = client.acquire(1, Mode::Wait, "deploy").await;
//! assert!(matches!(reply, ServerFrame::Acquired { claim: 1, .. }));
//! assert_eq!(client.release(1).await, ServerFrame::Released { claim: 1 });
//! # }
//! ```

use std::{net::SocketAddr, time::Duration};

use monolock_proto::{
    Lease, LockName,
    v2::{self, ClientFrame, Mode, ServerFrame},
};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    net::TcpStream,
};

/// How long a read waits for a frame before the test fails: long enough
/// that only a real hang trips it.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// A raw v2 connection over any stream (TCP, TLS).
pub struct RawV2<S = TcpStream> {
    stream: S,
    buf: Vec<u8>,
}

/// What OPENED said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Opened {
    /// The server's session id.
    pub session: u64,
    /// The session's claim bound.
    pub max_claims: u32,
}

impl RawV2<TcpStream> {
    /// Connects to `addr` without sending anything.
    pub async fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).await.expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        Self::over(stream)
    }

    /// Connects, sends OPEN with `lease_ms` and reads OPENED.
    pub async fn open(addr: SocketAddr, lease_ms: u32) -> (Self, Opened) {
        let mut client = Self::connect(addr).await;
        let opened = client.open_session(lease_ms).await;
        (client, opened)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> RawV2<S> {
    /// A client over an established stream (e.g. after a TLS handshake).
    pub fn over(stream: S) -> Self {
        Self {
            stream,
            buf: Vec::with_capacity(512),
        }
    }

    /// Sends OPEN and reads OPENED.
    pub async fn open_session(&mut self, lease_ms: u32) -> Opened {
        let lease = Lease::from_millis(lease_ms).expect("positive lease");
        self.send(&ClientFrame::Open { lease }).await;
        match self.recv().await {
            ServerFrame::Opened {
                session,
                max_claims,
            } => Opened {
                session,
                max_claims,
            },
            other => panic!("expected OPENED, got {other:?}"),
        }
    }

    /// Sends one frame.
    pub async fn send(&mut self, frame: &ClientFrame) {
        self.send_raw(&frame.to_bytes()).await;
    }

    /// Sends these bytes in one write.
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
        self.stream.flush().await.expect("flush");
    }

    /// Sends ACQUIRE.
    pub async fn send_acquire(&mut self, claim: u32, mode: Mode, name: &str) {
        let name = LockName::new(name).expect("valid lock name");
        self.send(&ClientFrame::Acquire { claim, mode, name }).await;
    }

    /// Sends ACQUIRE and reads the next frame (its reply, unless a push
    /// comes first).
    pub async fn acquire(&mut self, claim: u32, mode: Mode, name: &str) -> ServerFrame {
        self.send_acquire(claim, mode, name).await;
        self.recv().await
    }

    /// Sends RELEASE and reads the next frame.
    pub async fn release(&mut self, claim: u32) -> ServerFrame {
        self.send_raw(&v2::release_frame(claim)).await;
        self.recv().await
    }

    /// Sends PING and reads the next frame.
    pub async fn ping(&mut self) -> ServerFrame {
        self.send(&ClientFrame::Ping).await;
        self.recv().await
    }

    /// The next frame; fails the test on EOF, a bad frame or no frame
    /// within [`PATIENCE`].
    pub async fn recv(&mut self) -> ServerFrame {
        match self.next().await {
            Some(frame) => frame,
            None => panic!("connection closed while a frame was expected"),
        }
    }

    /// The next frame, or `None` at EOF (or a reset); fails the test on a
    /// bad frame or nothing within [`PATIENCE`].
    pub async fn next(&mut self) -> Option<ServerFrame> {
        tokio::time::timeout(PATIENCE, self.next_unbounded())
            .await
            .expect("no frame from the server within the patience")
    }

    async fn next_unbounded(&mut self) -> Option<ServerFrame> {
        loop {
            match v2::decode_response(&self.buf) {
                Ok(Some((frame, used))) => {
                    self.buf.drain(..used);
                    return Some(frame);
                }
                Ok(None) => {}
                Err(err) => panic!("bad frame from the server: {err}"),
            }
            let mut chunk = [0u8; 512];
            match self.stream.read(&mut chunk).await {
                Ok(0) | Err(_) => {
                    assert!(self.buf.is_empty(), "closed inside a frame: {:?}", self.buf);
                    return None;
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Reads until EOF; fails the test if a frame comes instead.
    pub async fn expect_closed(&mut self) {
        if let Some(frame) = self.next().await {
            panic!("expected the connection to close, got {frame:?}");
        }
    }

    /// Reads the session's ERROR and then EOF; returns the ERROR's code.
    pub async fn expect_error(&mut self) -> monolock_proto::ErrorCode {
        match self.recv().await {
            ServerFrame::Error { code, .. } => {
                self.expect_closed().await;
                code
            }
            other => panic!("expected ERROR, got {other:?}"),
        }
    }

    /// The stream, e.g. to shut it down or drop it abruptly.
    pub fn stream_mut(&mut self) -> &mut S {
        &mut self.stream
    }
}

/// The raw v2 client over a blocking `std` socket, for tests of the real
/// binary that run without a runtime. Every read is bounded by
/// [`PATIENCE`].
pub mod blocking {
    use std::{
        io::{Read, Write},
        net::{SocketAddr, TcpStream},
    };

    use monolock_proto::{
        Lease,
        v2::{self, ClientFrame, ServerFrame},
    };

    use super::PATIENCE;

    /// The lease of [`open_v2`]: long enough that it never ends within a
    /// test.
    pub const LEASE_MS: u32 = 30_000;

    /// Connects, opens a session with a [`LEASE_MS`] lease and reads
    /// OPENED.
    pub fn open_v2(addr: SocketAddr) -> TcpStream {
        let mut stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
        let lease = Lease::from_millis(LEASE_MS).expect("lease");
        stream
            .write_all(&ClientFrame::Open { lease }.to_bytes())
            .expect("OPEN");
        let opened = read_v2_frame(&mut stream);
        assert!(
            matches!(opened, ServerFrame::Opened { .. }),
            "expected OPENED, got {opened:?}"
        );
        stream
    }

    /// Reads one frame, a byte at a time so that nothing after it is left
    /// buffered here; fails the test on EOF, a bad frame or a read that
    /// times out.
    pub fn read_v2_frame(stream: &mut TcpStream) -> ServerFrame {
        let mut buf = Vec::new();
        loop {
            if let Some((frame, used)) = v2::decode_response(&buf).expect("valid frame") {
                assert_eq!(used, buf.len(), "more than one frame at once");
                return frame;
            }
            let mut byte = [0u8; 1];
            let n = stream.read(&mut byte).expect("read");
            assert!(n > 0, "closed before a whole frame");
            buf.push(byte[0]);
        }
    }
}
