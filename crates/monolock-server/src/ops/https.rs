//! TLS (and mTLS) for the admin and ops listeners, reusing the protocol's
//! [`ServerTls`]: the same certificate and key, the same client CA when one
//! is configured, and the same SIGHUP reload.
//!
//! Why reuse rather than separate `--admin-tls-*` files: the listeners
//! belong to the same server identity, operators already rotate those files,
//! and one CA deciding who may talk to the server at all is easier to audit.
//! An HTTP client then needs a certificate from that CA (`curl --cert`,
//! Prometheus `tls_config.cert_file`).
//!
//! Handshakes run in their own tasks, bounded by [`HANDSHAKE_TIMEOUT`], so a
//! client that connects and says nothing never holds up the next one.

use std::{io, net::SocketAddr, sync::Arc, time::Duration};

use tokio::{
    net::{TcpListener, TcpStream},
    sync::mpsc,
};
use tokio_rustls::server::TlsStream;
use tracing::debug;

use crate::ops::tls::ServerTls;

/// How long an HTTP client has to complete its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshaken connections waiting for the HTTP server to take them.
const READY_QUEUE: usize = 64;

/// A listener that yields only connections whose TLS handshake (with a
/// client certificate, under mTLS) succeeded; for `axum::serve`.
#[derive(Debug)]
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local_addr: SocketAddr,
    acceptor: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    /// Starts accepting on `listener` (already bound) with `tls`. Must be
    /// called inside a tokio runtime.
    ///
    /// # Errors
    /// The listener has no local address.
    pub fn new(listener: TcpListener, tls: Arc<ServerTls>) -> io::Result<Self> {
        let local_addr = listener.local_addr()?;
        let (tx, ready) = mpsc::channel(READY_QUEUE);
        let acceptor = tokio::spawn(accept_loop(listener, tls, tx));
        Ok(Self {
            ready,
            local_addr,
            acceptor,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    tls: Arc<ServerTls>,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    let mut backoff = crate::core::server::ACCEPT_BACKOFF_MIN;
    loop {
        let (tcp, addr) = match listener.accept().await {
            Ok(accepted) => {
                backoff = crate::core::server::ACCEPT_BACKOFF_MIN;
                accepted
            }
            Err(err) => {
                debug!(error = %err, "HTTPS accept failed; backing off");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(crate::core::server::ACCEPT_BACKOFF_MAX);
                continue;
            }
        };
        let acceptor = tls.acceptor();
        let ready = ready.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => {
                    let _ = ready.send((stream, addr)).await;
                }
                Ok(Err(err)) => debug!(%addr, error = %err, "HTTPS handshake failed"),
                Err(_) => debug!(%addr, "HTTPS handshake not complete in time"),
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accept loop never ends on its own; if it was aborted,
            // nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local_addr)
    }
}
