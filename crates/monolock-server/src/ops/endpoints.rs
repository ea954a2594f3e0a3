//! The ops endpoint: `/metrics`, `/healthz`, `/readyz`.
//!
//! Health and readiness answer `200 ok` while the server serves and `503`
//! from the first moment of shutdown. During the startup grace `/readyz`
//! answers `200` with `startup grace: N ms left`: the server is ready for
//! traffic (it accepts and queues; sessions must reach it to be first in
//! line), it only grants nothing yet. Run this listener a little longer than
//! the protocol listener ([`OPS_SHUTDOWN_GRACE`]) so that probes and scrapes
//! see the whole shutdown.
//!
//! Served on a socket, the endpoints are behind a [`WebGuard`] that checks
//! `Host` when the listener is bound to loopback ([`HostCheck::OnLoopback`]:
//! a web page cannot read the figures by DNS rebinding), and not off
//! loopback, where Prometheus scrapes by names of its own choosing.

use std::{future::Future, io, sync::Arc, time::Duration};

use axum::{
    Router,
    extract::State,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use tokio::net::TcpListener;
use tracing::info;

use crate::{
    AllowedHosts, HostCheck, METRICS_CONTENT_TYPE, Metrics, ServerHandle, ServerTls, WebGuard,
    ops::http_conn::{self, HttpLimits, HttpStats},
};

/// How long the ops listener stays up after the protocol listener has
/// closed, so that load balancers and Prometheus see the 503 and the last
/// figures.
pub const OPS_SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

struct OpsState {
    handle: ServerHandle,
    metrics: Arc<Metrics>,
}

/// The ops endpoints as a router.
pub fn router(handle: ServerHandle, metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(health_handler))
        .route("/readyz", get(ready_handler))
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found") })
        .with_state(Arc::new(OpsState { handle, metrics }))
}

/// Serves the ops endpoints on `listener` (already bound) until `shutdown`
/// resolves.
///
/// # Errors
/// The I/O error that stopped the server.
pub async fn serve(
    listener: TcpListener,
    handle: ServerHandle,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let options = OpsOptions::new(handle, metrics);
    serve_with(listener, options, shutdown).await
}

/// As [`serve`], over HTTPS with `tls` (mTLS when it has a client CA: then
/// scrapers and probes need a client certificate); see [`crate::TlsListener`].
///
/// # Errors
/// The I/O error that stopped the server.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<ServerTls>,
    handle: ServerHandle,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let options = OpsOptions::new(handle, metrics).with_tls(tls);
    serve_with(listener, options, shutdown).await
}

/// What the ops listener serves, and how.
#[derive(Clone)]
pub struct OpsOptions {
    handle: ServerHandle,
    metrics: Arc<Metrics>,
    tls: Option<Arc<ServerTls>>,
    allowed_hosts: Arc<AllowedHosts>,
    http_limits: HttpLimits,
    http_stats: Arc<HttpStats>,
}

impl OpsOptions {
    /// The endpoints over `handle` and `metrics`, in plain HTTP.
    pub fn new(handle: ServerHandle, metrics: Arc<Metrics>) -> Self {
        Self {
            handle,
            metrics,
            tls: None,
            allowed_hosts: Arc::default(),
            http_limits: HttpLimits::default(),
            http_stats: Arc::default(),
        }
    }

    /// Bounds the listener's connections: header and idle timeouts and a
    /// cap (see [`HttpLimits`]).
    #[must_use]
    pub fn with_http_limits(mut self, limits: HttpLimits) -> Self {
        self.http_limits = limits;
        self
    }

    /// Counts the listener's connections into `stats` (for metrics).
    #[must_use]
    pub fn with_http_stats(mut self, stats: Arc<HttpStats>) -> Self {
        self.http_stats = stats;
        self
    }

    /// Serves HTTPS with `tls` (mTLS when it has a client CA).
    #[must_use]
    pub fn with_tls(mut self, tls: Arc<ServerTls>) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Serves these names in `Host` besides the listener's own
    /// (`--admin-allowed-host`); see [`WebGuard`].
    #[must_use]
    pub fn with_allowed_hosts(mut self, allowed: Arc<AllowedHosts>) -> Self {
        self.allowed_hosts = allowed;
        self
    }
}

/// Serves the ops endpoints with `options` on `listener` (already bound),
/// behind a [`WebGuard`], until `shutdown` resolves.
///
/// # Errors
/// The I/O error that stopped the server.
pub async fn serve_with(
    listener: TcpListener,
    options: OpsOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let addr = listener.local_addr()?;
    let OpsOptions {
        handle,
        metrics,
        tls,
        allowed_hosts,
        http_limits,
        http_stats,
    } = options;
    let app =
        WebGuard::new(addr, HostCheck::OnLoopback, allowed_hosts).layer(router(handle, metrics));
    match &tls {
        Some(tls) => info!(%addr, mtls = tls.is_mutual(), "ops endpoint listening"),
        None => info!(%addr, "ops endpoint listening"),
    }
    http_conn::serve(listener, tls, app, http_limits, http_stats, shutdown).await
}

async fn metrics_handler(State(state): State<Arc<OpsState>>) -> Response {
    let body = state.metrics.render(&state.handle);
    ([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], body).into_response()
}

async fn health_handler(State(state): State<Arc<OpsState>>) -> Response {
    if state.handle.is_shutting_down() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response()
    } else {
        (StatusCode::OK, "ok").into_response()
    }
}

async fn ready_handler(State(state): State<Arc<OpsState>>) -> Response {
    let grace = state.handle.startup_grace();
    if state.handle.is_shutting_down() || !grace.running {
        return health_handler(State(state)).await;
    }
    let left = grace.remaining.as_millis();
    (StatusCode::OK, format!("startup grace: {left} ms left")).into_response()
}
