//! An in-process server on 127.0.0.1 with a free port, on the test's
//! runtime, and the ways a test stops it.

use std::{io, net::SocketAddr};

use monolock_proto::ServerFrame;
use monolock_server::{LockSnapshot, Server, ServerConfig, ServerHandle};
use tokio::{net::TcpListener, net::TcpStream, task::JoinHandle, time::timeout};

use crate::{
    patience::{PATIENCE, eventually},
    peer::Peer,
};

/// Starts a server on 127.0.0.1 with a free port, on the current runtime.
/// Returns its address, its handle, and the task running it.
pub async fn spawn_server(
    config: ServerConfig,
) -> (SocketAddr, ServerHandle, JoinHandle<io::Result<()>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let server = Server::new(config);
    let handle = server.handle();
    (addr, handle, tokio::spawn(server.run(listener)))
}

/// A server running in this process. Dropped without [`TestServer::stop`],
/// it is told to shut down.
pub struct TestServer {
    pub addr: SocketAddr,
    pub handle: ServerHandle,
    task: Option<JoinHandle<io::Result<()>>>,
}

impl TestServer {
    pub async fn start() -> Self {
        Self::start_with(ServerConfig::default()).await
    }

    pub async fn start_with(config: ServerConfig) -> Self {
        let (addr, handle, task) = spawn_server(config).await;
        Self {
            addr,
            handle,
            task: Some(task),
        }
    }

    /// Graceful shutdown; returns once every connection is closed.
    ///
    /// The server sends each open session ERROR and drains its input until
    /// the peer closes (at most the error drain, 500 ms): a test that still
    /// holds peers and does not read their goodbye should use
    /// [`TestServer::stop_and_drop`].
    pub async fn stop(mut self) {
        self.handle.shutdown();
        self.join().await;
    }

    /// Graceful shutdown that closes `open` (the test's peers or clients,
    /// any value) as soon as the shutdown has begun, so the server's error
    /// drain ends on their EOF instead of running out its time.
    pub async fn stop_and_drop<T>(mut self, open: T) {
        self.handle.shutdown();
        drop(open);
        self.join().await;
    }

    async fn join(&mut self) {
        if let Some(task) = self.task.take() {
            timeout(PATIENCE, task)
                .await
                .expect("server stops in time")
                .expect("server task")
                .expect("server result");
        }
    }

    pub async fn connect(&self) -> Peer<TcpStream> {
        Peer::connect(self.addr).await
    }

    /// Connects and sends ACQUIRE; returns the peer and the first reply.
    pub async fn acquire(&self, name: &str, lease_ms: u32) -> (Peer<TcpStream>, ServerFrame) {
        let mut peer = self.connect().await;
        let reply = peer.acquire(name, lease_ms).await;
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

    /// A client of this server over TCP.
    pub fn client(&self) -> monolock_client::Client {
        monolock_client::Client::new(self.addr.to_string())
    }

    /// The lock's state on the server, if it has a holder.
    pub fn lock(&self, name: &str) -> Option<LockSnapshot> {
        self.handle.lock(name)
    }

    /// Number of waiters queued on `name`.
    pub fn waiters(&self, name: &str) -> usize {
        self.lock(name).map_or(0, |lock| lock.waiters.len())
    }

    /// Waits until `name` has exactly `n` waiters.
    pub async fn wait_for_waiters(&self, name: &str, n: usize) {
        eventually(&format!("{n} waiters on {name}"), || {
            self.waiters(name) == n
        })
        .await;
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if self.task.is_some() {
            self.handle.shutdown();
        }
    }
}
