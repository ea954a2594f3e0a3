//! A raw client of the version 2 extension (values and observers): it
//! sends exactly the frames it is told to and reads the server's frames
//! one by one, base and extension alike, with the one patience.
#![allow(dead_code)] // each test binary uses a different subset

use std::net::SocketAddr;

use monolock_proto::{
    Lease, LockName,
    ext::{self, ClientFrame as ExtFrame, LockState, Response, ServerFrame as ExtServer},
    v2::{self, ClientFrame, Mode, ServerFrame},
};
use monolock_testkit::PATIENCE;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// A raw connection speaking version 2 and its extension.
pub struct RawExt {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl RawExt {
    /// Connects without sending anything.
    pub async fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).await.expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        Self {
            stream,
            buf: Vec::with_capacity(512),
        }
    }

    /// A client over a connected stream.
    pub fn over(stream: TcpStream) -> Self {
        stream.set_nodelay(true).expect("nodelay");
        Self {
            stream,
            buf: Vec::with_capacity(512),
        }
    }

    /// Connects and writes OPEN with `lease_ms` and HELLO (features 1) in
    /// one write; reads OPENED and FEATURES. Returns the session id.
    pub async fn open(addr: SocketAddr, lease_ms: u32) -> (Self, u64) {
        let mut client = Self::connect(addr).await;
        let session = client.open_session(lease_ms).await;
        (client, session)
    }

    /// Writes OPEN and HELLO in one write; reads OPENED and FEATURES.
    pub async fn open_session(&mut self, lease_ms: u32) -> u64 {
        let client = self;
        let mut bytes = ClientFrame::Open {
            lease: Lease::from_millis(lease_ms).expect("lease"),
        }
        .to_bytes();
        ExtFrame::Hello {
            features: ext::FEATURE_VALUES_AND_OBSERVERS,
        }
        .encode(&mut bytes);
        client.send_raw(&bytes).await;
        let session = match client.recv().await {
            Response::Base(ServerFrame::Opened { session, .. }) => session,
            other => panic!("expected OPENED, got {other:?}"),
        };
        match client.recv().await {
            Response::Ext(ExtServer::Features { features, .. }) => {
                assert_eq!(features, ext::FEATURE_VALUES_AND_OBSERVERS);
            }
            other => panic!("expected FEATURES, got {other:?}"),
        }
        session
    }

    /// Writes `bytes` in one write.
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    /// Writes an extension frame.
    pub async fn send(&mut self, frame: &ExtFrame) {
        self.send_raw(&frame.to_bytes()).await;
    }

    /// Writes a base frame.
    pub async fn send_base(&mut self, frame: &ClientFrame) {
        self.send_raw(&frame.to_bytes()).await;
    }

    /// ACQUIRE_VALUE, then the next frame.
    pub async fn acquire_value(
        &mut self,
        claim: u32,
        mode: Mode,
        name: &str,
        value: &str,
    ) -> Response {
        self.send(&ExtFrame::AcquireValue {
            claim,
            mode,
            name: LockName::new(name).expect("name"),
            value: value.to_owned(),
        })
        .await;
        self.recv().await
    }

    /// ACQUIRE_VALUE expected granted at once; its token.
    pub async fn hold(&mut self, claim: u32, name: &str, value: &str) -> u64 {
        match self.acquire_value(claim, Mode::Wait, name, value).await {
            Response::Base(ServerFrame::Acquired { token, .. }) => token,
            other => panic!("expected ACQUIRED, got {other:?}"),
        }
    }

    /// RELEASE, then the next frame.
    pub async fn release(&mut self, claim: u32) -> Response {
        self.send_raw(&v2::release_frame(claim)).await;
        self.recv().await
    }

    /// OBSERVE; expects OBSERVING and returns the INITIAL state.
    pub async fn observe(&mut self, watch: u32, name: &str) -> LockState {
        self.send(&ExtFrame::Observe {
            watch,
            name: LockName::new(name).expect("name"),
        })
        .await;
        assert_eq!(
            self.recv().await,
            Response::Ext(ExtServer::Observing { watch })
        );
        let state = self.state(watch).await;
        assert!(state.initial(), "the first push is INITIAL: {state:?}");
        state
    }

    /// The next frame, which must be a STATE of `watch`.
    pub async fn state(&mut self, watch: u32) -> LockState {
        match self.recv().await {
            Response::Ext(ExtServer::State { watch: got, state }) => {
                assert_eq!(got, watch, "STATE of another watch: {state:?}");
                state
            }
            other => panic!("expected STATE of watch {watch}, got {other:?}"),
        }
    }

    /// LOOKUP, then the next frame.
    pub async fn lookup(&mut self, name: &str) -> Response {
        self.send(&ExtFrame::Lookup {
            name: LockName::new(name).expect("name"),
        })
        .await;
        self.recv().await
    }

    /// PING, then the next frame.
    pub async fn ping(&mut self) -> Response {
        self.send_base(&ClientFrame::Ping).await;
        self.recv().await
    }

    /// The next frame; fails the test on EOF, a bad frame or nothing
    /// within the patience.
    pub async fn recv(&mut self) -> Response {
        match self.next().await {
            Some(frame) => frame,
            None => panic!("connection closed while a frame was expected"),
        }
    }

    /// The next frame, or `None` at EOF.
    pub async fn next(&mut self) -> Option<Response> {
        tokio::time::timeout(PATIENCE, async {
            loop {
                match ext::decode_response(&self.buf) {
                    Ok(Some((frame, used))) => {
                        self.buf.drain(..used);
                        return Some(frame);
                    }
                    Ok(None) => {}
                    Err(err) => panic!("bad frame from the server: {err}"),
                }
                let mut chunk = [0u8; 4096];
                match self.stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => {
                        assert!(self.buf.is_empty(), "closed inside a frame");
                        return None;
                    }
                    Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                }
            }
        })
        .await
        .expect("no frame from the server within the patience")
    }

    /// Reads the session's ERROR and then EOF; returns the ERROR's code
    /// and reason.
    pub async fn expect_error(&mut self) -> (monolock_proto::ErrorCode, String) {
        match self.recv().await {
            Response::Base(ServerFrame::Error { code, reason }) => {
                assert!(self.next().await.is_none(), "EOF after ERROR");
                (code, reason)
            }
            other => panic!("expected ERROR, got {other:?}"),
        }
    }
}
