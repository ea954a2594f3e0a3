//! The admin HTTP API: inspect locks and queues, force-release, kick.
//!
//! | endpoint | meaning |
//! |---|---|
//! | `GET /` | the live dashboard (one embedded page) |
//! | `GET /api/events[?match=GLOB]` | Server-Sent Events: a snapshot, then every change (see [`crate::EventHub`]) |
//! | `GET /api/info` | version, uptime, effective config, counts |
//! | `GET /api/locks[?match=GLOB]` | every lock with its holder and FIFO queue |
//! | `GET /api/locks/{name}` | one lock (404 if nobody holds it) |
//! | `POST /api/locks/{name}/release[?token=N]` | force-release: the holder gets ERROR 0x02 (a version 2 claim is told REVOKED and its session lives on); with `token`, only that grant (409 with the current holder otherwise) |
//! | `DELETE /api/locks/{name}/waiters/{remote_addr}[?claim=ID]` | remove one waiter (ERROR 0x02; a version 2 claim is told REVOKED and its session lives on); with `claim`, that claim of the session at that address |
//! | `GET /api/sessions` | every open protocol version 2 session, with its claims held and waiting |
//!
//! A holder or waiter that is a claim of a version 2 session carries
//! `"protocol": 2`, `"session"` (the server's id for the session) and
//! `"claim"` (the client's claim id); a version 1 holder or waiter has
//! none of the three, as in the audit log.
//!
//! Lock names are percent-encoded in paths (`nightly%2Fimport`). Times are
//! RFC 3339 in UTC. Errors are `{"error": "..."}` with a fitting status;
//! unknown or malformed query parameters (and a `match` pattern over
//! [`MAX_MATCH_BYTES`]) are a 400 and change nothing.
//!
//! With an [`AdminToken`](crate::AdminToken), every request but the page's static shell needs
//! `Authorization: Bearer <token>` (401 otherwise); without one, bind the
//! listener to loopback.
//!
//! Served on a socket ([`serve_with`]), the API is behind a [`WebGuard`]:
//! a `Host` that does not name the listener is refused (DNS rebinding), and
//! so is a change (`POST`, `DELETE`) that a web page could have sent from
//! another site; a change needs `X-Requested-By` ([`crate::REQUEST_HEADER`]).

mod handlers;
pub(crate) mod json;
mod options;

pub use handlers::MAX_MATCH_BYTES;
pub use json::*;
pub use options::AdminOptions;

use std::{future::Future, io, sync::Arc};

use axum::{
    Router, middleware,
    routing::{delete, get, post},
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::{HostCheck, ServerHandle, WebGuard, ops::dashboard, ops::http_conn};
use handlers::{
    AdminState, authenticate, events_handler, info_handler, kick_handler, lock_handler,
    locks_handler, method_not_allowed, not_found, release_handler, require_admin_identity,
    sessions_handler,
};

/// The admin API as a router (for embedding or testing without a socket).
pub fn router(handle: ServerHandle, config: EffectiveConfig) -> Router {
    router_with(AdminOptions::new(handle, config), CancellationToken::new())
}

/// The admin API with `options`; event streams end when `stop` is cancelled.
///
/// Without the [`WebGuard`] that [`serve_with`] puts in front (it needs
/// the listener's address): put it in front of a router served otherwise.
pub fn router_with(options: AdminOptions, stop: CancellationToken) -> Router {
    let token = options.token.clone();
    let identities = options.identities.clone();
    let state = Arc::new(AdminState { options, stop });
    let api = Router::new()
        .route("/api/info", get(info_handler))
        .route("/api/events", get(events_handler))
        .route("/api/locks", get(locks_handler))
        .route("/api/sessions", get(sessions_handler))
        .route("/api/locks/{name}", get(lock_handler))
        .route("/api/locks/{name}/release", post(release_handler))
        .route(
            "/api/locks/{name}/waiters/{remote_addr}",
            delete(kick_handler),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state);
    // The token, when there is one, is the admin's credential, as it
    // always was; without one, under mTLS, the certificate's identity is.
    let api = match (token, identities) {
        (Some(token), _) => api.layer(middleware::from_fn_with_state(token, authenticate)),
        (None, Some(identities)) => api.layer(middleware::from_fn_with_state(
            identities,
            require_admin_identity,
        )),
        (None, None) => api,
    };
    // The page's shell holds no data (everything it shows comes from the
    // API with the token), and a browser cannot add a bearer header to a
    // navigation: it is served without authentication.
    Router::new().route("/", get(dashboard::page)).merge(api)
}

/// Serves the admin API on `listener` (already bound) until `shutdown`
/// resolves, behind a [`WebGuard`]. Warns in the log when the address is
/// not loopback: the API has no authentication.
///
/// # Errors
/// The I/O error that stopped the server.
pub async fn serve(
    listener: TcpListener,
    handle: ServerHandle,
    config: EffectiveConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve_with(listener, AdminOptions::new(handle, config), shutdown).await
}

/// Serves the admin listener with `options` on `listener` (already bound)
/// until `shutdown` resolves, behind a [`WebGuard`] for its address and
/// the options' allowed hosts; open event streams end then.
///
/// # Errors
/// The I/O error that stopped the server.
pub async fn serve_with(
    listener: TcpListener,
    options: AdminOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let addr = listener.local_addr()?;
    let tls = options.tls.clone();
    let scheme = match &tls {
        None => "http",
        Some(tls) if tls.is_mutual() => "mtls",
        Some(_) => "https",
    };
    if options.token.is_some() {
        info!(%addr, auth = "bearer", scheme, "admin API listening");
    } else if addr.ip().is_loopback() || scheme == "mtls" {
        info!(%addr, auth = "none", scheme, "admin API listening");
    } else {
        warn!(%addr, scheme, "admin API listening on a non-loopback address without authentication");
    }
    if !options.allowed_hosts.is_empty() {
        info!(%addr, allowed_hosts = %options.allowed_hosts, "admin API also serves these Host names");
    }
    let stop = CancellationToken::new();
    let mut guard = WebGuard::new(addr, HostCheck::Always, options.allowed_hosts.clone());
    if options.token.is_some() {
        guard = guard.with_bearer_token();
    }
    let (limits, stats) = (options.http_limits, Arc::clone(&options.http_stats));
    let app = guard.layer(router_with(options, stop.clone()));
    let shutdown = async move {
        shutdown.await;
        stop.cancel();
    };
    http_conn::serve(listener, tls, app, limits, stats, shutdown).await
}

/// The admin listener served on a thread of its own; see [`spawn`].
#[derive(Debug)]
#[must_use = "join it to learn when the admin API has stopped"]
pub struct AdminThread {
    done: tokio::sync::oneshot::Receiver<io::Result<()>>,
}

impl AdminThread {
    /// Waits until the admin API has stopped (after its `shutdown`).
    ///
    /// # Errors
    /// The I/O error that stopped it, or the thread's failure.
    pub async fn join(self) -> io::Result<()> {
        self.done
            .await
            .map_err(|_| io::Error::other("the admin API thread ended without a result"))?
    }
}

/// Serves the admin listener as [`serve_with`] does, on a thread of its
/// own (`monolock-admin`) with a single-threaded runtime, until `shutdown`
/// resolves.
///
/// Why a thread of its own: what the admin listener does at scale (event
/// streams to a hundred dashboards, snapshots of a large table, TLS
/// handshakes) never takes a worker of the protocol's runtime, where it
/// would queue grants behind its writes; on a machine with a core to spare
/// the OS runs it beside the protocol path rather than on it. The ops
/// endpoint stays on the protocol's runtime, so health checks answer for
/// the protocol path itself.
///
/// # Errors
/// The listener cannot be moved, or the OS refused to start the thread.
///
/// # Example
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// use monolock_server::{Server, ServerConfig, admin::{self, AdminOptions, EffectiveConfig}};
///
/// let server = Server::new(ServerConfig::default());
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// let options = AdminOptions::new(server.handle(), EffectiveConfig::default());
/// let stop = tokio_util::sync::CancellationToken::new();
/// let thread = admin::spawn(listener, options, stop.clone().cancelled_owned())?;
/// stop.cancel();
/// thread.join().await
/// # }
/// ```
pub fn spawn(
    listener: TcpListener,
    options: AdminOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<AdminThread> {
    // Taken off this runtime's reactor, registered with the thread's own.
    let listener = listener.into_std()?;
    let (tx, done) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("monolock-admin".to_owned())
        .spawn(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .and_then(|runtime| {
                    runtime.block_on(async move {
                        serve_with(TcpListener::from_std(listener)?, options, shutdown).await
                    })
                });
            let _ = tx.send(result);
        })?;
    Ok(AdminThread { done })
}
