//! The accept loop: every connection from the protocol listener, counted
//! against `--max-connections`, handed to its own task (TLS first where
//! configured), and the server's background chores (the startup grace's
//! gate, giving memory back after a burst of claims).

use std::{
    io,
    net::SocketAddr,
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use tokio::{
    net::{TcpListener, TcpStream},
    time::{Instant, timeout_at},
};
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::core::{
    admission::{OVER_LIMIT_REASON, RECLAIM_INTERVAL, trim_heap},
    config::ProtocolTls,
    events::Event,
    shared::{Shared, Shed},
    slot::deadline_after,
    wire::dispatch,
};

/// First pause after a failed `accept` (e.g. EMFILE); doubles up to the cap.
pub const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(5);
/// Longest pause between `accept` retries.
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_millis(500);

/// Serves connections from `listener` until shutdown, then waits for every
/// connection, and for the claims of sessions the server closed, to end.
pub(crate) async fn run(shared: Arc<Shared>, listener: TcpListener) -> io::Result<()> {
    let tracker = TaskTracker::new();
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, "listening");
    }
    let nodelay = if inherit_nodelay(&listener) {
        Nodelay::Inherited
    } else {
        Nodelay::SetEach
    };
    spawn_grace_gate(&shared, &tracker);
    spawn_reclaimer(&shared, &tracker);
    let mut backoff = ACCEPT_BACKOFF_MIN;
    loop {
        let accepted = tokio::select! {
            biased;
            () = shared.shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((tcp, remote_addr)) => {
                backoff = ACCEPT_BACKOFF_MIN;
                admit(&shared, &tracker, tcp, remote_addr, nodelay);
            }
            Err(err) if is_per_connection(&err) => {
                debug!(error = %err, "accept: connection aborted before it was taken");
            }
            Err(err) => {
                accept_failed(&shared, &err);
                warn!(error = %err, backoff_ms = backoff.as_millis() as u64, "accept failed; backing off");
                tokio::select! {
                    () = shared.shutdown.cancelled() => break,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
            }
        }
    }
    drop(listener);
    info!(
        connections = shared.connections.load(Ordering::Relaxed),
        "stopped accepting; closing sessions"
    );
    tracker.close();
    tracker.wait().await;
    // Claims of sessions the server closed, released at once now.
    shared.lease_holds.close();
    shared.lease_holds.wait().await;
    info!("all connections closed");
    Ok(())
}

/// Opens the gate of the startup grace when it ends (unless the server
/// shuts down first).
fn spawn_grace_gate(shared: &Arc<Shared>, tracker: &TaskTracker) {
    let Some(ends) = shared.grace.ends() else {
        return;
    };
    info!(
        grace_ms = shared.config.startup_grace.as_millis() as u64,
        "startup grace: accepting and queueing, granting nothing yet"
    );
    let gate = Arc::clone(shared);
    tracker.spawn(async move {
        tokio::select! {
            () = gate.shutdown.cancelled() => {}
            () = tokio::time::sleep_until(ends) => gate.grace.open(&gate.table),
        }
    });
}

/// Looks every [`RECLAIM_INTERVAL`] whether a burst of claims has ended,
/// and then gives its memory back.
fn spawn_reclaimer(shared: &Arc<Shared>, tracker: &TaskTracker) {
    let reclaimer = Arc::clone(shared);
    tracker.spawn(async move {
        let mut every = tokio::time::interval(RECLAIM_INTERVAL);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = reclaimer.shutdown.cancelled() => break,
                _ = every.tick() => {}
            }
            if reclaimer.claims.burst_ended() {
                reclaimer.table.shrink();
                trim_heap();
                debug!(
                    claims = reclaimer.claims.get(),
                    "a burst of claims ended: memory given back"
                );
            }
        }
    });
}

/// Takes an accepted connection: refused at once over `--max-connections`,
/// else served by a task of its own.
fn admit(
    shared: &Arc<Shared>,
    tracker: &TaskTracker,
    tcp: TcpStream,
    remote_addr: SocketAddr,
    nodelay: Nodelay,
) {
    // Counted here, not in the task, so a burst of accepts cannot
    // overshoot the limit.
    if shared.connections.fetch_add(1, Ordering::AcqRel) >= shared.config.max_connections {
        shared.connections.fetch_sub(1, Ordering::AcqRel);
        shared.config.observer.observe(&Event::ConnectionRefused);
        debug!(%remote_addr, "over --max-connections: refused");
        shared.pending.refuse(tcp, OVER_LIMIT_REASON);
        return;
    }
    shared.pending.register(remote_addr);
    // Two task types, so a plaintext task stays exactly as small as it
    // would be in a server without TLS. No tracing span per connection:
    // entering it on every poll costs each heartbeat; debug events name
    // the address.
    match &shared.config.tls {
        None => tracker.spawn(connection(tcp, remote_addr, nodelay, Arc::clone(shared))),
        Some(tls) => tracker.spawn(tls_connection(
            tcp,
            remote_addr,
            nodelay,
            Arc::clone(tls),
            Arc::clone(shared),
        )),
    };
}

/// Counts a failed `accept`; out of descriptors, frees some in the order
/// `admission.rs` gives.
fn accept_failed(shared: &Shared, err: &io::Error) {
    shared.config.observer.observe(&Event::AcceptFailed(err));
    if !matches!(err.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
        return;
    }
    match shared.shed_for_descriptors() {
        Shed::Pending(0) | Shed::Idle(0) => {}
        Shed::Pending(connections) => info!(
            connections,
            "out of descriptors: closing connections without a first frame"
        ),
        Shed::Idle(sessions) => {
            info!(sessions, "out of descriptors: closing idle v2 sessions")
        }
    }
}

/// Errors that concern one connection only; the next `accept` can go at once.
fn is_per_connection(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}

/// Whether accepted sockets still need `TCP_NODELAY` set.
#[derive(Clone, Copy)]
enum Nodelay {
    /// The listener has it, and the kernel copies it to accepted sockets.
    Inherited,
    /// Set on each accepted socket.
    SetEach,
}

/// Sets `TCP_NODELAY` on the listening socket where the kernel copies it
/// to every socket `accept` returns (Linux), which saves a `setsockopt` per
/// connection; true when that is the case.
fn inherit_nodelay(listener: &TcpListener) -> bool {
    cfg!(target_os = "linux")
        && socket2::SockRef::from(listener)
            .set_tcp_nodelay(true)
            .is_ok()
}

async fn connection(
    tcp: TcpStream,
    remote_addr: SocketAddr,
    nodelay: Nodelay,
    shared: Arc<Shared>,
) {
    let accepted_at = opened(&tcp, nodelay, &shared);
    let identity = Arc::clone(&shared.no_identity);
    dispatch::serve(tcp, remote_addr, identity, accepted_at, Arc::clone(&shared)).await;
    closed(&shared);
}

/// A TLS connection: the handshake completes before any protocol byte is
/// read, within io-timeout of accept (the same budget then bounds the first
/// ACQUIRE). A failed or late handshake is counted and closes this
/// connection only.
async fn tls_connection(
    tcp: TcpStream,
    remote_addr: SocketAddr,
    nodelay: Nodelay,
    tls: Arc<dyn ProtocolTls>,
    shared: Arc<Shared>,
) {
    let acceptor = tls.acceptor();
    let accepted_at = opened(&tcp, nodelay, &shared);
    // Out of descriptors, a connection still in its handshake goes first,
    // without a frame (there is no TLS session to carry one). Its place is
    // taken again by the first frame's wait once the handshake is done.
    let shed = shared
        .pending
        .take(remote_addr)
        .map(|pending| pending.shed.clone());
    let shed = async {
        match shed {
            Some(token) => token.cancelled_owned().await,
            None => std::future::pending().await,
        }
    };
    let deadline = deadline_after(accepted_at, shared.config.io_timeout);
    let handshake = tokio::select! {
        biased;
        () = shared.shutdown.cancelled() => None,
        () = shed => {
            shared.config.observer.observe(&Event::ConnectionShed);
            None
        }
        handshake = timeout_at(deadline, acceptor.accept(tcp)) => Some(handshake),
    };
    match handshake {
        None => shared.pending.forget(remote_addr),
        Some(Ok(Ok(stream))) => {
            let identity = match stream.get_ref().1.peer_certificates() {
                Some([leaf, ..]) => Arc::from(tls.identity_of_certificate(leaf)),
                _ => Arc::clone(&shared.no_identity),
            };
            debug!(%remote_addr, %identity, "TLS handshake complete");
            dispatch::serve(
                stream,
                remote_addr,
                identity,
                accepted_at,
                Arc::clone(&shared),
            )
            .await;
        }
        Some(Ok(Err(err))) => {
            shared.pending.forget(remote_addr);
            shared.config.observer.observe(&Event::TlsHandshakeFailed);
            debug!(%remote_addr, error = %err, "TLS handshake failed");
        }
        Some(Err(_)) => {
            shared.pending.forget(remote_addr);
            shared.config.observer.observe(&Event::TlsHandshakeFailed);
            debug!(%remote_addr, "TLS handshake not complete within io-timeout");
        }
    }
    closed(&shared);
}

/// Bookkeeping for a new connection; returns the accept instant.
fn opened(tcp: &TcpStream, nodelay: Nodelay, shared: &Shared) -> Instant {
    let accepted_at = Instant::now();
    // Heartbeats are one byte: without NODELAY, Nagle would hold replies back.
    if let Nodelay::SetEach = nodelay {
        let _ = tcp.set_nodelay(true);
    }
    shared.config.observer.observe(&Event::Accepted);
    accepted_at
}

pub(crate) fn closed(shared: &Shared) {
    shared.connections.fetch_sub(1, Ordering::Relaxed);
    shared.config.observer.observe(&Event::Closed);
}

#[cfg(test)]
mod tests {
    /// Every held session is one task holding this future for its whole
    /// life, so its size is most of the per-session memory the server adds
    /// to the kernel's (BENCHMARKS.md, "Sessions at scale", has the figure).
    /// Cold paths (handshake, ERROR and drain, blocked writes) are boxed to
    /// keep it here.
    #[tokio::test]
    async fn a_plaintext_session_task_stays_small() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let shared = std::sync::Arc::new(crate::core::shared::Shared::new(
            crate::ServerConfig::default(),
        ));
        let task = super::connection(stream, addr, super::Nodelay::SetEach, shared);
        let size = std::mem::size_of_val(&task);
        assert!(size <= 960, "a session's future grew to {size} bytes");
    }

    /// The per-connection `setsockopt` is skipped only where accepted
    /// sockets really come with `TCP_NODELAY` from the listener.
    #[tokio::test]
    async fn accepted_sockets_inherit_nodelay_from_the_listener() {
        let listener = crate::bind("127.0.0.1:0".parse().expect("address")).expect("bind");
        let inherited = super::inherit_nodelay(&listener);
        assert_eq!(inherited, cfg!(target_os = "linux"));
        let addr = listener.local_addr().expect("addr");
        let _client = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (accepted, _) = listener.accept().await.expect("accept");
        if inherited {
            assert!(
                accepted.nodelay().expect("getsockopt"),
                "NODELAY not inherited"
            );
        }
    }
}
