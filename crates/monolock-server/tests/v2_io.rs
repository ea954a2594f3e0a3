//! The v2 session's I/O per request, counted on the stream it is served
//! over: a client that writes a RELEASE and the next ACQUIRE together costs
//! the session one read that returns bytes and one write, in steady state;
//! a batch of pipelined frames costs one read and one write too. Each
//! system call on a real socket is one of these calls, so a flush per
//! frame, a reply split over several writes or a read per frame shows
//! here as a count, not only as a slower benchmark.

use std::{
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
};

use monolock_proto::{
    LockName,
    v2::{self, ClientFrame, Mode, ServerFrame},
};
use monolock_server::{Server, ServerConfig};
use monolock_testkit::v2::RawV2;
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};

/// Cycles of RELEASE + next ACQUIRE counted.
const CYCLES: u64 = 200;

/// Calls on the served stream that moved bytes.
#[derive(Default)]
struct Counts {
    reads: AtomicU64,
    writes: AtomicU64,
}

/// The server's end of the pipe, counting reads that returned bytes and
/// writes that took bytes.
struct Counted {
    inner: DuplexStream,
    counts: Arc<Counts>,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.counts.reads.fetch_add(1, Ordering::Relaxed);
        }
        polled
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, bytes);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.counts.writes.fetch_add(1, Ordering::Relaxed);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A client of one v2 session over a counted pipe.
struct Client {
    _server: Server,
    raw: RawV2<DuplexStream>,
    counts: Arc<Counts>,
}

impl Client {
    /// Serves a session on a fresh server; OPEN is written and OPENED read.
    async fn open() -> Self {
        let server = Server::new(ServerConfig::default());
        let handle = server.handle();
        let (stream, served) = tokio::io::duplex(64 * 1024);
        let counts = Arc::new(Counts::default());
        let served = Counted {
            inner: served,
            counts: Arc::clone(&counts),
        };
        let addr: SocketAddr = ([127, 0, 0, 1], 4000).into();
        tokio::spawn(async move { handle.serve_stream(served, addr, "").await });
        let mut raw = RawV2::over(stream);
        raw.open_session(60_000).await;
        Self {
            _server: server,
            raw,
            counts,
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.raw.send_raw(bytes).await;
    }

    async fn next(&mut self) -> ServerFrame {
        self.raw.recv().await
    }

    /// (reads, writes) the session has made so far.
    fn counts(&self) -> (u64, u64) {
        (
            self.counts.reads.load(Ordering::Relaxed),
            self.counts.writes.load(Ordering::Relaxed),
        )
    }
}

fn acquire(claim: u32, name: &str) -> Vec<u8> {
    ClientFrame::Acquire {
        claim,
        mode: Mode::Wait,
        name: LockName::new(name).expect("name"),
    }
    .to_bytes()
}

#[tokio::test]
async fn a_release_and_the_next_acquire_cost_one_read_and_one_write() {
    let mut client = Client::open().await;
    client.send(&acquire(1, "cycle")).await;
    assert!(matches!(
        client.next().await,
        ServerFrame::Acquired { claim: 1, .. }
    ));
    let mut cycle = v2::release_frame(1).to_vec();
    cycle.extend_from_slice(&acquire(1, "cycle"));
    let (reads, writes) = client.counts();
    for _ in 0..CYCLES {
        client.send(&cycle).await;
        assert!(matches!(
            client.next().await,
            ServerFrame::Released { claim: 1 }
        ));
        assert!(matches!(
            client.next().await,
            ServerFrame::Acquired { claim: 1, .. }
        ));
    }
    let (r, w) = client.counts();
    assert_eq!(
        (r - reads, w - writes),
        (CYCLES, CYCLES),
        "reads and writes of {CYCLES} cycles"
    );
}

#[tokio::test]
async fn a_pipelined_batch_costs_one_read_and_one_write() {
    let mut client = Client::open().await;
    let mut batch = Vec::new();
    for claim in 0..32 {
        batch.extend_from_slice(&acquire(claim, &format!("batch/{claim}")));
    }
    batch.push(v2::msg::PING);
    let (reads, writes) = client.counts();
    client.send(&batch).await;
    for claim in 0..32 {
        assert!(
            matches!(client.next().await, ServerFrame::Acquired { claim: c, .. } if c == claim)
        );
    }
    assert!(matches!(client.next().await, ServerFrame::Pong));
    let (r, w) = client.counts();
    assert_eq!(
        (r - reads, w - writes),
        (1, 1),
        "reads and writes of one batch"
    );
}
