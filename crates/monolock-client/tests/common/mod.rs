//! Helpers for tests against the real server, in-process on 127.0.0.1:0.
#![allow(dead_code)] // each test binary uses a different subset

use std::{
    future::Future,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use monolock_client::Client;
use monolock_server::{LockSnapshot, ServerConfig, ServerHandle};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{
        TcpListener, TcpStream,
        tcp::{OwnedReadHalf, OwnedWriteHalf},
    },
    task::JoinHandle,
    time::Instant,
};

/// How long a test waits for something that should happen at once.
pub const PATIENCE: Duration = Duration::from_secs(5);

/// A server running on the test's runtime.
pub struct TestServer {
    pub addr: SocketAddr,
    pub handle: ServerHandle,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    pub async fn start() -> Self {
        Self::start_with(ServerConfig::default()).await
    }

    /// A server with `config` (TLS, say).
    pub async fn start_with(config: ServerConfig) -> Self {
        let (addr, handle, task) = monolock_testkit::spawn_server(config).await;
        Self {
            addr,
            handle,
            task: Some(task),
        }
    }

    pub fn client(&self) -> Client {
        Client::new(self.addr.to_string())
    }

    /// The lock's state on the server, if it has a holder.
    pub fn lock(&self, name: &str) -> Option<LockSnapshot> {
        self.handle.lock(name)
    }

    /// Number of waiters queued on `name`.
    pub fn waiters(&self, name: &str) -> usize {
        self.lock(name).map_or(0, |lock| lock.waiters.len())
    }

    /// Polls until `name` has exactly `n` waiters.
    pub async fn wait_for_waiters(&self, name: &str, n: usize) {
        eventually(&format!("{n} waiters on {name}"), || {
            self.waiters(name) == n
        })
        .await;
    }

    /// Shuts the server down and waits until it has closed every session.
    pub async fn stop(mut self) {
        self.handle.shutdown();
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(PATIENCE, task).await;
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}

/// Polls `check` every millisecond until it holds; panics after [`PATIENCE`].
pub async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Awaits `fut`, panicking after [`PATIENCE`].
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, fut)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// A TCP proxy in front of a server that can go silent: while silenced it
/// keeps every connection open but forwards nothing, in either direction,
/// like a partitioned network or a frozen server. Its upstream can be
/// switched for new connections (a failover address).
pub struct Proxy {
    pub addr: SocketAddr,
    state: Arc<ProxyState>,
    task: JoinHandle<()>,
}

struct ProxyState {
    upstream: Mutex<SocketAddr>,
    silent: AtomicBool,
    /// Go silent right before forwarding the next chunk from the server.
    silent_after_reply: AtomicBool,
    /// When the last chunk from a client was read and forwarded.
    last_upstream: Mutex<Option<Instant>>,
    /// Bytes forwarded from the server to clients.
    downstream_bytes: AtomicUsize,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(ProxyState {
            upstream: Mutex::new(upstream),
            silent: AtomicBool::new(false),
            silent_after_reply: AtomicBool::new(false),
            last_upstream: Mutex::new(None),
            downstream_bytes: AtomicUsize::new(0),
        });
        let task = tokio::spawn({
            let state = state.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let upstream = *state.upstream.lock().expect("lock");
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        continue; // dropping `client` refuses it
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (client_rd, client_wr) = client.into_split();
                    let (server_rd, server_wr) = server.into_split();
                    tokio::spawn(pump(client_rd, server_wr, state.clone(), false));
                    tokio::spawn(pump(server_rd, client_wr, state.clone(), true));
                }
            }
        });
        Self { addr, state, task }
    }

    pub fn client(&self) -> Client {
        Client::new(self.addr.to_string())
    }

    /// Stops forwarding; connections stay open.
    pub fn go_silent(&self) {
        self.state.silent.store(true, Ordering::SeqCst);
    }

    /// Forwards the next chunk from the server (a reply), then goes
    /// silent: the server sees no later frame of the client, so the last
    /// one it saw is the one that reply confirmed.
    pub fn go_silent_after_next_reply(&self) {
        self.state.silent_after_reply.store(true, Ordering::SeqCst);
    }

    /// When the proxy last read a chunk from a client and forwarded it: the
    /// client sent it before, the server received it after.
    pub fn last_forwarded_upstream(&self) -> Option<Instant> {
        *self.state.last_upstream.lock().expect("lock")
    }

    /// New connections go to `upstream` from now on.
    pub fn set_upstream(&self, upstream: SocketAddr) {
        *self.state.upstream.lock().expect("lock") = upstream;
    }

    /// Bytes forwarded from the server to clients so far.
    pub fn downstream_bytes(&self) -> usize {
        self.state.downstream_bytes.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    state: Arc<ProxyState>,
    downstream: bool,
) {
    let mut buf = [0u8; 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let read_at = Instant::now();
        if downstream && state.silent_after_reply.swap(false, Ordering::SeqCst) {
            state.silent.store(true, Ordering::SeqCst);
        } else if state.silent.load(Ordering::SeqCst) {
            continue;
        }
        if !downstream {
            *state.last_upstream.lock().expect("lock") = Some(read_at);
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
        if downstream {
            state.downstream_bytes.fetch_add(n, Ordering::SeqCst);
        }
    }
    if !state.silent.load(Ordering::SeqCst) {
        let _ = to.shutdown().await;
    } else {
        // Silence means silence: keep the other side open, say nothing.
        std::future::pending::<()>().await;
    }
}
