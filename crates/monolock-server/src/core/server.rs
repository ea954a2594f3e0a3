//! The server and its control handle: what the rest of the crate, and the
//! programs around it, hold. The accept loop is on the wire side
//! (`wire/accept.rs`); the state both share is in `shared.rs`.

use std::{
    future::Future,
    io,
    net::SocketAddr,
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::TcpListener,
    time::Instant,
};

pub use crate::core::wire::accept::{ACCEPT_BACKOFF_MAX, ACCEPT_BACKOFF_MIN};
use crate::core::{
    config::ServerConfig,
    events::ReleaseReason,
    grace::GraceStatus,
    shared::{Shared, Shed},
    slot::{EndNotice, SessionLink},
    table::{AdminRefused, HolderSnapshot, LockSnapshot, TableCounts, WaiterSnapshot},
    wire::{accept, dispatch},
};

/// A lock server: build it, take a [`ServerHandle`], then [`Server::run`] it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// use monolock_server::{Server, ServerConfig};
///
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// let server = Server::new(ServerConfig::default());
/// let handle = server.handle();
/// let running = tokio::spawn(server.run(listener));
/// handle.shutdown();
/// running.await.expect("server task")?;
/// # Ok(())
/// # }
/// ```
pub struct Server {
    shared: Arc<Shared>,
}

impl Server {
    /// A server with this configuration, not yet listening.
    pub fn new(config: ServerConfig) -> Self {
        Self {
            shared: Arc::new(Shared::new(config)),
        }
    }

    /// A handle to inspect and control the server while it runs.
    pub fn handle(&self) -> ServerHandle {
        ServerHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Serves connections from `listener` (already bound) until
    /// [`ServerHandle::shutdown`]; then stops accepting, sends ERROR 0x01 to
    /// every session and returns once all connections are closed.
    ///
    /// # Errors
    /// None today: failures of `accept` are counted, backed off and retried.
    pub async fn run(self, listener: TcpListener) -> io::Result<()> {
        accept::run(self.shared, listener).await
    }
}

/// An open protocol version 2 session as the admin API shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct V2SessionSnapshot {
    /// The server's id for the session (in OPENED and every claim's events).
    pub id: u64,
    /// The client's address.
    pub remote_addr: SocketAddr,
    /// The mTLS identity, or empty.
    pub identity: Arc<str>,
    /// The session's lease.
    pub lease: monolock_proto::Lease,
    /// When its OPEN was read (wall clock).
    pub opened_at: std::time::SystemTime,
    /// Set when the server ended the session on its own and keeps its held
    /// claims until its lease's end; `None` while it is open.
    pub ended: Option<SessionEnded>,
    /// Its watches now (0 once it ended).
    pub watches: usize,
}

/// How a version 2 session the server ended is kept (see
/// [`V2SessionSnapshot::ended`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionEnded {
    /// Why the server ended it: the reason its kept claims' releases carry.
    pub reason: ReleaseReason,
    /// When its kept claims are released (its last frame plus its lease),
    /// unless an administrator or a shutdown releases them first.
    pub release_at: std::time::SystemTime,
}

/// Inspects and controls a running [`Server`]. Cheap to clone.
#[derive(Clone)]
pub struct ServerHandle {
    shared: Arc<Shared>,
}

impl ServerHandle {
    /// Starts a graceful shutdown: nothing is granted any more, the listener
    /// closes, every session gets ERROR 0x01 and is closed. Idempotent.
    pub fn shutdown(&self) {
        self.shared.grace.close();
        self.shared.table.close();
        self.shared.shutdown.cancel();
        // After the cancel: a version 2 session registered later sees it
        // when it checks, one registered earlier is told here.
        for link in self.shared.sessions.lock().values() {
            link.lease.end_from_outside(EndNotice::Shutdown);
        }
    }

    /// Open version 2 sessions.
    pub fn sessions_v2(&self) -> usize {
        self.shared.sessions.lock().len()
    }

    /// Asks every idle version 2 session (one with no claim), however
    /// recently opened, to close with ERROR 0x03; returns how many were
    /// asked. (Under descriptor pressure the server spares sessions opened
    /// less than an io-timeout ago: see [`ServerHandle::shed_for_descriptors`].)
    pub fn close_idle_sessions(&self) -> usize {
        self.shared.shed_idle_sessions(std::time::Duration::ZERO)
    }

    /// Frees descriptors as the server does when `accept` fails for want
    /// of them: closes every connection that has not sent a whole first
    /// frame (ERROR 0x04) if there is one, else asks idle version 2
    /// sessions open for at least one io-timeout to close (ERROR 0x03).
    /// Returns how many connections were asked to close.
    pub fn shed_for_descriptors(&self) -> usize {
        match self.shared.shed_for_descriptors() {
            Shed::Pending(n) | Shed::Idle(n) => n,
        }
    }

    /// Claims admitted now, held and waiting, of both protocol versions
    /// (what `--max-claims` bounds).
    pub fn claims(&self) -> usize {
        self.shared.claims.get()
    }

    /// Connections accepted whose first frame is not yet whole.
    pub fn pending_connections(&self) -> usize {
        self.shared.pending.len()
    }

    /// True from the first moment of shutdown.
    pub fn is_shutting_down(&self) -> bool {
        self.shared.shutdown.is_cancelled()
    }

    /// Resolves when shutdown has started.
    pub fn shutdown_started(&self) -> impl Future<Output = ()> + Send + 'static {
        self.shared.shutdown.clone().cancelled_owned()
    }

    /// Force-releases `name`: its holder gets ERROR 0x02 and is closed, and
    /// the next waiter is promoted at once.
    ///
    /// # Errors
    /// [`AdminRefused::NotFound`] if nobody holds it;
    /// [`AdminRefused::AlreadyEnding`] if the holder was already ending for
    /// another reason (its lease ran out a moment before): then nothing is
    /// done and the holder ends (and is audited) as it was going to.
    pub fn force_release(
        &self,
        name: &str,
    ) -> Result<HolderSnapshot, AdminRefused<HolderSnapshot>> {
        self.shared.table.force_release(name, None)
    }

    /// Force-releases `name` only if its holder has `token`, so a repeated
    /// command never releases the next holder.
    ///
    /// # Errors
    /// As [`ServerHandle::force_release`], and
    /// [`AdminRefused::OtherToken`] with the current holder when its token
    /// is another.
    pub fn force_release_token(
        &self,
        name: &str,
        token: u64,
    ) -> Result<HolderSnapshot, AdminRefused<HolderSnapshot>> {
        self.shared.table.force_release(name, Some(token))
    }

    /// Removes the waiter at `remote_addr` from the queue of `name` (it gets
    /// ERROR 0x02); the others keep their order.
    ///
    /// # Errors
    /// As [`ServerHandle::force_release`].
    pub fn kick_waiter(
        &self,
        name: &str,
        remote_addr: SocketAddr,
    ) -> Result<WaiterSnapshot, AdminRefused<WaiterSnapshot>> {
        self.shared.table.kick_waiter(name, remote_addr, None)
    }

    /// Removes the version 2 claim `claim` of the session at `remote_addr`
    /// from the queue of `name` (it is told REVOKED; its session and other
    /// claims live on); the others keep their order.
    ///
    /// # Errors
    /// As [`ServerHandle::force_release`].
    pub fn kick_claim(
        &self,
        name: &str,
        remote_addr: SocketAddr,
        claim: u32,
    ) -> Result<WaiterSnapshot, AdminRefused<WaiterSnapshot>> {
        self.shared
            .table
            .kick_waiter(name, remote_addr, Some(claim))
    }

    /// Every open version 2 session, by id (its claims are in
    /// [`ServerHandle::locks`], each naming its session).
    ///
    /// A session the server ended on its own is listed too, with
    /// [`V2SessionSnapshot::ended`] set, while its held claims are kept.
    pub fn v2_sessions(&self) -> Vec<V2SessionSnapshot> {
        let snapshot = |link: &SessionLink, ended: Option<SessionEnded>| {
            let info = &link.lease.info;
            V2SessionSnapshot {
                id: link.id,
                remote_addr: info.remote_addr,
                identity: Arc::clone(&info.identity),
                lease: info.lease,
                opened_at: info.queued_at,
                watches: if ended.is_some() {
                    0
                } else {
                    link.watches.load(Ordering::Relaxed)
                },
                ended,
            }
        };
        let ended: Vec<V2SessionSnapshot> = self
            .shared
            .ended
            .lock()
            .values()
            .map(|kept| {
                let ended = SessionEnded {
                    reason: kept.reason,
                    release_at: kept.release_at,
                };
                snapshot(&kept.link, Some(ended))
            })
            .collect();
        let mut sessions: Vec<V2SessionSnapshot> = self
            .shared
            .sessions
            .lock()
            .values()
            // A session ending now is in both maps for a moment.
            .filter(|link| !ended.iter().any(|session| session.id == link.id))
            .map(|link| snapshot(link, None))
            .collect();
        sessions.extend(ended);
        sessions.sort_unstable_by_key(|session| session.id);
        sessions
    }

    /// Held claims of connections the server ended on its own, kept until
    /// their lease's end (they count against `--max-claims` until then).
    pub fn kept_claims(&self) -> usize {
        self.shared.claims.kept()
    }

    /// Every lock with a holder whose name `filter` accepts, by name.
    pub fn locks(&self, filter: impl Fn(&str) -> bool) -> Vec<LockSnapshot> {
        self.shared.table.snapshot(filter)
    }

    /// One lock, or `None` if it has no holder (and so no waiters).
    pub fn lock(&self, name: &str) -> Option<LockSnapshot> {
        self.shared.table.lock(name)
    }

    /// Locks held and sessions waiting (during the startup grace, every
    /// session waits).
    pub fn counts(&self) -> TableCounts {
        let mut counts = self.shared.table.counts();
        counts.waiters += self.shared.grace.status().held;
        counts
    }

    /// Whether the startup grace still holds grants back, and for how long.
    pub fn startup_grace(&self) -> GraceStatus {
        self.shared.grace.status()
    }

    /// Open connections (with or without a session).
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Relaxed)
    }

    /// Time since the server was built.
    pub fn uptime(&self) -> Duration {
        self.shared.started.elapsed()
    }

    /// Serves one already-established stream (any transport: a Unix socket,
    /// an in-memory pipe in tests) exactly like an accepted TCP connection,
    /// until the session ends. `identity` is the authenticated client
    /// identity, empty if none.
    pub async fn serve_stream<S>(&self, stream: S, remote_addr: SocketAddr, identity: &str)
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let accepted_at = Instant::now();
        dispatch::serve(
            stream,
            remote_addr,
            Arc::from(identity),
            accepted_at,
            Arc::clone(&self.shared),
        )
        .await;
    }

    /// The configuration the server runs with.
    pub fn config(&self) -> &ServerConfig {
        &self.shared.config
    }
}

/// Runs a server on `listener` until `shutdown` resolves, then shuts it down
/// gracefully and returns once every connection is closed.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// // Shut down at once; a real server would wait for a signal here.
/// monolock_server::run(listener, Default::default(), async {}).await
/// # }
/// ```
///
/// # Errors
/// As [`Server::run`].
pub async fn run(
    listener: TcpListener,
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let server = Server::new(config);
    let handle = server.handle();
    let running = server.run(listener);
    tokio::pin!(running);
    tokio::select! {
        result = &mut running => return result,
        () = shutdown => handle.shutdown(),
    }
    running.await
}
