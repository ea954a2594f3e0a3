//! The admin HTTP API: inspect locks and queues, force-release, kick.
//!
//! | endpoint | meaning |
//! |---|---|
//! | `GET /api/info` | version, uptime, effective config, counts |
//! | `GET /api/locks[?match=GLOB]` | every lock with its holder and FIFO queue |
//! | `GET /api/locks/{name}` | one lock (404 if nobody holds it) |
//! | `POST /api/locks/{name}/release` | force-release: the holder gets ERROR 0x02 |
//! | `DELETE /api/locks/{name}/waiters/{remote_addr}` | remove one waiter (ERROR 0x02) |
//!
//! Lock names are percent-encoded in paths (`nightly%2Fimport`). Times are
//! RFC 3339 in UTC. Errors are `{"error": "..."}` with a fitting status.
//! There is no authentication: bind it to loopback.

use std::{future::Future, io, net::SocketAddr, sync::Arc};

use axum::{
    Json, Router,
    extract::{
        Path, Query, State,
        rejection::{PathRejection, QueryRejection},
    },
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{delete, get, post},
};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::{
    AdminRefused, Ending, Glob, HolderSnapshot, LockSnapshot, ServerHandle, WaiterSnapshot,
    audit::rfc3339,
};

/// The configuration the server runs with, as `GET /api/info` shows it.
/// Addresses and paths are as given at startup; `None` means off.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectiveConfig {
    /// The protocol address.
    pub listen: String,
    /// The ops address (`/metrics`, `/healthz`, `/readyz`).
    pub ops_listen: Option<String>,
    /// The admin API address.
    pub admin_listen: Option<String>,
    /// TLS on the protocol port.
    pub tls: bool,
    /// Client certificates required.
    pub mtls: bool,
    /// The ACL file.
    pub acl_file: Option<String>,
    /// The audit log: a path or `-` for stdout.
    pub audit_log: Option<String>,
    /// The io-timeout in milliseconds.
    pub io_timeout_ms: u64,
}

/// `GET /api/info`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerInfo {
    /// The server's crate version.
    pub version: String,
    /// Milliseconds since the server started.
    pub uptime_ms: u64,
    /// The effective configuration.
    pub config: EffectiveConfig,
    /// Locks with a holder.
    pub locks: usize,
    /// Sessions: holders plus waiters.
    pub sessions: usize,
    /// Sessions queued behind a holder.
    #[serde(default)]
    pub waiters: usize,
    /// Open protocol connections (sessions and connections not yet past
    /// their ACQUIRE).
    #[serde(default)]
    pub connections: usize,
}

/// A holder in the API's JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderInfo {
    /// mTLS identity, or empty.
    pub identity: String,
    /// The holder's address as the server sees it.
    pub remote_addr: String,
    /// When it was granted (RFC 3339, UTC).
    pub since: String,
    /// Its lease in milliseconds.
    pub lease_ms: u32,
    /// Its fencing token.
    pub token: u64,
}

/// A waiter in the API's JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaiterInfo {
    /// mTLS identity, or empty.
    pub identity: String,
    /// The waiter's address as the server sees it (the key for a kick).
    pub remote_addr: String,
    /// When its ACQUIRE arrived (RFC 3339, UTC).
    pub queued_at: String,
    /// Its lease in milliseconds.
    pub lease_ms: u32,
}

/// A lock in the API's JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockInfo {
    /// The lock's name.
    pub name: String,
    /// The holder (a lock with waiters always has one).
    pub holder: HolderInfo,
    /// The queue, first in line first.
    pub waiters: Vec<WaiterInfo>,
}

/// `GET /api/locks`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockList {
    /// The locks, by name.
    pub locks: Vec<LockInfo>,
}

/// An error body: `{"error": "..."}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong, for humans.
    pub error: String,
}

impl From<&HolderSnapshot> for HolderInfo {
    fn from(holder: &HolderSnapshot) -> Self {
        Self {
            identity: holder.identity.to_string(),
            remote_addr: holder.remote_addr.to_string(),
            since: rfc3339(holder.since),
            lease_ms: holder.lease.as_millis(),
            token: holder.token,
        }
    }
}

impl From<&WaiterSnapshot> for WaiterInfo {
    fn from(waiter: &WaiterSnapshot) -> Self {
        Self {
            identity: waiter.identity.to_string(),
            remote_addr: waiter.remote_addr.to_string(),
            queued_at: rfc3339(waiter.queued_at),
            lease_ms: waiter.lease.as_millis(),
        }
    }
}

impl From<&LockSnapshot> for LockInfo {
    fn from(lock: &LockSnapshot) -> Self {
        Self {
            name: lock.name.to_string(),
            holder: HolderInfo::from(&lock.holder),
            waiters: lock.waiters.iter().map(WaiterInfo::from).collect(),
        }
    }
}

struct AdminState {
    handle: ServerHandle,
    config: EffectiveConfig,
}

/// The admin API as a router (for embedding or testing without a socket).
pub fn router(handle: ServerHandle, config: EffectiveConfig) -> Router {
    let state = Arc::new(AdminState { handle, config });
    Router::new()
        .route("/api/info", get(info_handler))
        .route("/api/locks", get(locks_handler))
        .route("/api/locks/{name}", get(lock_handler))
        .route("/api/locks/{name}/release", post(release_handler))
        .route(
            "/api/locks/{name}/waiters/{remote_addr}",
            delete(kick_handler),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// Serves the admin API on `listener` (already bound) until `shutdown`
/// resolves. Warns in the log when the address is not loopback: the API has
/// no authentication.
///
/// # Errors
/// The I/O error that stopped the server.
pub async fn serve(
    listener: TcpListener,
    handle: ServerHandle,
    config: EffectiveConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let addr = listener.local_addr()?;
    if addr.ip().is_loopback() {
        info!(%addr, "admin API listening");
    } else {
        warn!(%addr, "admin API listening on a non-loopback address; it has no authentication");
    }
    axum::serve(listener, router(handle, config))
        .with_graceful_shutdown(shutdown)
        .await
}

/// An API error: a status and `{"error": "..."}`.
#[derive(Debug)]
struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(ErrorBody { error: self.1 })).into_response()
    }
}

type ApiResult<T> = Result<Json<T>, ApiError>;

fn bad_path(rejection: PathRejection) -> ApiError {
    ApiError(rejection.status(), rejection.body_text())
}

async fn info_handler(State(state): State<Arc<AdminState>>) -> Json<ServerInfo> {
    let handle = &state.handle;
    let counts = handle.counts();
    Json(ServerInfo {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        uptime_ms: u64::try_from(handle.uptime().as_millis()).unwrap_or(u64::MAX),
        config: state.config.clone(),
        locks: counts.locks,
        sessions: counts.locks + counts.waiters,
        waiters: counts.waiters,
        connections: handle.connections(),
    })
}

#[derive(Deserialize)]
struct LocksQuery {
    #[serde(rename = "match")]
    pattern: Option<String>,
}

async fn locks_handler(
    State(state): State<Arc<AdminState>>,
    query: Result<Query<LocksQuery>, QueryRejection>,
) -> ApiResult<LockList> {
    let Query(query) = query.map_err(|r| ApiError(r.status(), r.body_text()))?;
    let locks = match query.pattern {
        Some(pattern) => {
            let glob = Glob::new(&pattern);
            state.handle.locks(|name| glob.matches(name))
        }
        None => state.handle.locks(|_| true),
    };
    Ok(Json(LockList {
        locks: locks.iter().map(LockInfo::from).collect(),
    }))
}

async fn lock_handler(
    State(state): State<Arc<AdminState>>,
    name: Result<Path<String>, PathRejection>,
) -> ApiResult<LockInfo> {
    let Path(name) = name.map_err(bad_path)?;
    match state.handle.lock(&name) {
        Some(lock) => Ok(Json(LockInfo::from(&lock))),
        None => Err(no_holder(&name)),
    }
}

async fn release_handler(
    State(state): State<Arc<AdminState>>,
    name: Result<Path<String>, PathRejection>,
) -> ApiResult<HolderInfo> {
    let Path(name) = name.map_err(bad_path)?;
    match state.handle.force_release(&name) {
        Ok(holder) => {
            info!(lock = %name, remote_addr = %holder.remote_addr, token = holder.token, "force-released by administrator");
            Ok(Json(HolderInfo::from(&holder)))
        }
        Err(AdminRefused::NotFound) => Err(no_holder(&name)),
        Err(AdminRefused::AlreadyEnding { ending, .. }) => Err(already_ending(&name, ending)),
    }
}

async fn kick_handler(
    State(state): State<Arc<AdminState>>,
    params: Result<Path<(String, String)>, PathRejection>,
) -> ApiResult<WaiterInfo> {
    let Path((name, remote_addr)) = params.map_err(bad_path)?;
    let addr: SocketAddr = remote_addr.parse().map_err(|_| {
        ApiError(
            StatusCode::BAD_REQUEST,
            format!("{remote_addr:?} is not an address (expected IP:PORT as listed)"),
        )
    })?;
    match state.handle.kick_waiter(&name, addr) {
        Ok(waiter) => {
            info!(lock = %name, remote_addr = %addr, "waiter removed by administrator");
            Ok(Json(WaiterInfo::from(&waiter)))
        }
        Err(AdminRefused::NotFound) => Err(ApiError(
            StatusCode::NOT_FOUND,
            format!("lock {name:?} has no waiter at {addr}"),
        )),
        Err(AdminRefused::AlreadyEnding { ending, .. }) => Err(already_ending(&name, ending)),
    }
}

/// 409: the session was ending already; the request changed nothing.
fn already_ending(name: &str, ending: Ending) -> ApiError {
    ApiError(
        StatusCode::CONFLICT,
        format!("lock {name:?}: the session was already ending ({ending}); nothing was done"),
    )
}

fn no_holder(name: &str) -> ApiError {
    ApiError(
        StatusCode::NOT_FOUND,
        format!("lock {name:?} has no holder"),
    )
}

async fn not_found() -> ApiError {
    ApiError(StatusCode::NOT_FOUND, "no such endpoint".to_owned())
}

async fn method_not_allowed() -> ApiError {
    ApiError(
        StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed for this endpoint".to_owned(),
    )
}
