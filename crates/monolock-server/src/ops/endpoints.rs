//! The ops endpoint: `/metrics`, `/healthz`, `/readyz`.
//!
//! Health and readiness answer `200 ok` while the server serves and `503`
//! from the first moment of shutdown. During the startup grace `/readyz`
//! answers `200` with `startup grace: N ms left`: the server is ready for
//! traffic (it accepts and queues; sessions must reach it to be first in
//! line), it only grants nothing yet. Run this listener a little longer than
//! the protocol listener ([`OPS_SHUTDOWN_GRACE`]) so that probes and scrapes
//! see the whole shutdown.

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

use crate::{METRICS_CONTENT_TYPE, Metrics, ServerHandle};

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
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, "ops endpoint listening");
    }
    axum::serve(listener, router(handle, metrics))
        .with_graceful_shutdown(shutdown)
        .await
}

/// As [`serve`], over HTTPS with `tls` (mTLS when it has a client CA: then
/// scrapers and probes need a client certificate); see [`crate::TlsListener`].
///
/// # Errors
/// The I/O error that stopped the server.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<crate::ServerTls>,
    handle: ServerHandle,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, mtls = tls.is_mutual(), "ops endpoint listening");
    }
    axum::serve(
        crate::TlsListener::new(listener, tls)?,
        router(handle, metrics),
    )
    .with_graceful_shutdown(shutdown)
    .await
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
