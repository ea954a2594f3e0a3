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
//! With an [`AdminToken`], every request but the page's static shell needs
//! `Authorization: Bearer <token>` (401 otherwise); without one, bind the
//! listener to loopback.
//!
//! Served on a socket ([`serve_with`]), the API is behind a [`WebGuard`]:
//! a `Host` that does not name the listener is refused (DNS rebinding), and
//! so is a change (`POST`, `DELETE`) that a web page could have sent from
//! another site; a change needs `X-Requested-By` ([`crate::REQUEST_HEADER`]).

use std::{collections::HashMap, future::Future, io, net::SocketAddr, sync::Arc};

use axum::{
    Json, Router,
    extract::{
        Path, Query, Request, State,
        rejection::{PathRejection, QueryRejection},
    },
    http::{HeaderValue, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::{delete, get, post},
};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::{
    AdminIdentities, AdminRefused, AdminToken, AllowedHosts, ClaimRef, ClientIdentity, Ending,
    EventHub, Glob, GraceStatus, HolderSnapshot, HostCheck, LockSnapshot, ServerHandle, ServerTls,
    WaiterSnapshot, WebGuard,
    ops::dashboard,
    ops::http_conn::{self, HttpLimits, HttpStats},
    ops::live,
    ops::record::rfc3339,
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
    /// The git commit the binary was built from (`unknown` if not known).
    #[serde(default)]
    pub commit: String,
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
    /// Open protocol version 2 sessions (their claims count in `locks`,
    /// `sessions` and `waiters` like version 1 sessions).
    #[serde(default)]
    pub v2_sessions: usize,
    /// The startup grace (`--startup-grace`).
    #[serde(default)]
    pub startup_grace: GraceInfo,
    /// The token floor file (`--token-floor`), if any.
    #[serde(default)]
    pub token_floor: Option<String>,
}

/// The startup grace in the API's JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraceInfo {
    /// The configured grace in milliseconds (0: none).
    pub grace_ms: u64,
    /// True while nothing is granted yet.
    pub running: bool,
    /// Milliseconds until grants begin (0 once over).
    pub remaining_ms: u64,
    /// Sessions waiting for the grace to end.
    pub held: usize,
}

impl From<GraceStatus> for GraceInfo {
    fn from(status: GraceStatus) -> Self {
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Self {
            grace_ms: ms(status.configured),
            running: status.running,
            remaining_ms: ms(status.remaining),
            held: status.held,
        }
    }
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
    /// Its session and claim, for a version 2 claim.
    #[serde(flatten)]
    pub v2: ClaimFields,
}

/// The fields that name a protocol version 2 claim in the API's JSON (as
/// in the audit log): all three for a v2 claim, none for version 1.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimFields {
    /// `2` for a claim of a version 2 session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<u8>,
    /// The version 2 session's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<u64>,
    /// The version 2 claim's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<u32>,
}

impl From<Option<ClaimRef>> for ClaimFields {
    fn from(claim: Option<ClaimRef>) -> Self {
        Self {
            protocol: claim.map(|_| 2),
            session: claim.map(|c| c.session),
            claim: claim.map(|c| c.claim),
        }
    }
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
    /// Its session and claim, for a version 2 claim (the claim id is the
    /// key for a kick, with the address).
    #[serde(flatten)]
    pub v2: ClaimFields,
}

/// An open version 2 session in `GET /api/sessions`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionEntry {
    /// The server's id for the session (as in OPENED and its claims'
    /// events).
    pub session: u64,
    /// The client's address as the server sees it.
    pub remote_addr: String,
    /// mTLS identity, or empty.
    pub identity: String,
    /// The session's lease in milliseconds.
    pub lease_ms: u32,
    /// When its OPEN was read (RFC 3339, UTC).
    pub opened_at: String,
    /// Claims holding a lock.
    pub held: usize,
    /// Claims waiting in a queue.
    pub waiting: usize,
    /// `open`, or `ended` for a session the server ended on its own while
    /// it keeps its held claims until its lease's end. Sent only when
    /// `ended`: the JSON of an open session is as it always was.
    #[serde(default = "open_state", skip_serializing_if = "is_open")]
    pub state: String,
    /// For an ended session: why the server ended it (the release reason
    /// its kept claims will carry, e.g. `io_timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// For an ended session: when its kept claims are released (RFC 3339,
    /// UTC), unless an administrator or a shutdown releases them first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_at: Option<String>,
}

/// [`SessionEntry::state`] of an open session (and of one from a server
/// that did not name the state).
fn open_state() -> String {
    "open".to_owned()
}

fn is_open(state: &str) -> bool {
    state == "open"
}

/// `GET /api/sessions`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionList {
    /// The open version 2 sessions, and those the server ended whose held
    /// claims it still keeps, by id.
    pub sessions: Vec<SessionEntry>,
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

/// A refused conditional release: `{"error": "...", "holder": {...}}` (409).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConflictBody {
    /// What went wrong, for humans.
    pub error: String,
    /// The grant that holds the lock now.
    pub holder: HolderInfo,
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
            v2: holder.claim.into(),
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
            v2: waiter.claim.into(),
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

/// What the admin listener serves, beyond the lock table itself.
#[derive(Clone)]
pub struct AdminOptions {
    handle: ServerHandle,
    config: EffectiveConfig,
    commit: String,
    events: Option<Arc<EventHub>>,
    token: Option<Arc<AdminToken>>,
    tls: Option<Arc<ServerTls>>,
    allowed_hosts: Arc<AllowedHosts>,
    http_limits: HttpLimits,
    http_stats: Arc<HttpStats>,
    identities: Option<Arc<AdminIdentities>>,
}

impl std::fmt::Debug for AdminOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminOptions")
            .field("config", &self.config)
            .field("events", &self.events.is_some())
            .field("token", &self.token.as_ref().map(|token| token.path()))
            .field("tls", &self.tls.as_ref().map(|tls| tls.is_mutual()))
            .field("allowed_hosts", &self.allowed_hosts)
            .field("http_limits", &self.http_limits)
            .finish_non_exhaustive()
    }
}

impl AdminOptions {
    /// The API over `handle`, showing `config` in `/api/info`; no event
    /// stream, no authentication.
    pub fn new(handle: ServerHandle, config: EffectiveConfig) -> Self {
        Self {
            handle,
            config,
            commit: "unknown".to_owned(),
            events: None,
            token: None,
            tls: None,
            allowed_hosts: Arc::default(),
            http_limits: HttpLimits::default(),
            http_stats: Arc::default(),
            identities: None,
        }
    }

    /// Without a token, only client certificates whose identity
    /// `identities` names are administrators (mTLS; see
    /// [`AdminIdentities`]). With a token, the token decides.
    #[must_use]
    pub fn with_admin_identities(mut self, identities: Arc<AdminIdentities>) -> Self {
        self.identities = Some(identities);
        self
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

    /// Serves `GET /api/events` and the dashboard from `events` (which must
    /// also be one of the server's observers).
    #[must_use]
    pub fn with_events(mut self, events: Arc<EventHub>) -> Self {
        self.events = Some(events);
        self
    }

    /// Requires `Authorization: Bearer <token>` on every request.
    #[must_use]
    pub fn with_token(mut self, token: Arc<AdminToken>) -> Self {
        self.token = Some(token);
        self
    }

    /// Serves HTTPS with `tls` (the protocol's certificate; with its client
    /// CA, every admin client must present a certificate: mTLS).
    #[must_use]
    pub fn with_tls(mut self, tls: Arc<ServerTls>) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Serves these names in `Host` (and as a page's origin) besides the
    /// listener's own (`--admin-allowed-host`); see [`WebGuard`].
    #[must_use]
    pub fn with_allowed_hosts(mut self, allowed: Arc<AllowedHosts>) -> Self {
        self.allowed_hosts = allowed;
        self
    }

    /// The commit `/api/info` names.
    #[must_use]
    pub fn with_commit(mut self, commit: impl Into<String>) -> Self {
        self.commit = commit.into();
        self
    }
}

struct AdminState {
    options: AdminOptions,
    /// Ends every event stream when the listener shuts down (a stream
    /// would otherwise hold graceful shutdown open forever).
    stop: CancellationToken,
}

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

async fn authenticate(
    State(token): State<Arc<AdminToken>>,
    request: Request,
    next: Next,
) -> Response {
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    if token.check(authorization) {
        return next.run(request).await;
    }
    let mut response = ApiError(
        StatusCode::UNAUTHORIZED,
        "missing or wrong admin token (send Authorization: Bearer <token>)".to_owned(),
    )
    .into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"monolock admin\""),
    );
    response
}

/// Lets through a request whose client certificate names an
/// administrator; refuses (403) and logs any other, with its identity.
async fn require_admin_identity(
    State(identities): State<Arc<AdminIdentities>>,
    request: Request,
    next: Next,
) -> Response {
    let identity = request
        .extensions()
        .get::<ClientIdentity>()
        .map(|identity| Arc::clone(&identity.0));
    let identity = identity.as_deref().unwrap_or("");
    if identities.allows(identity) {
        return next.run(request).await;
    }
    warn!(
        identity,
        method = %request.method(),
        path = request.uri().path(),
        "admin request refused: the client certificate's identity is not an administrator (--admin-identity, or the ACL file's admin list)"
    );
    ApiError(
        StatusCode::FORBIDDEN,
        format!(
            "the certificate identity {identity:?} is not an administrator of this server (it needs --admin-identity or the ACL file's admin list)"
        ),
    )
    .into_response()
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

fn bad_query(rejection: QueryRejection) -> ApiError {
    ApiError(rejection.status(), rejection.body_text())
}

async fn info_handler(State(state): State<Arc<AdminState>>) -> Json<ServerInfo> {
    let handle = &state.options.handle;
    let counts = handle.counts();
    Json(ServerInfo {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        commit: state.options.commit.clone(),
        uptime_ms: u64::try_from(handle.uptime().as_millis()).unwrap_or(u64::MAX),
        config: state.options.config.clone(),
        locks: counts.locks,
        sessions: counts.locks + counts.waiters,
        waiters: counts.waiters,
        connections: handle.connections(),
        v2_sessions: handle.sessions_v2(),
        startup_grace: handle.startup_grace().into(),
        token_floor: handle
            .config()
            .token_floor
            .as_ref()
            .map(|floor| floor.path().display().to_string()),
    })
}

/// `/api/locks` and `/api/events` take `match` alone; any other parameter
/// is refused rather than ignored.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MatchQuery {
    #[serde(rename = "match")]
    pattern: Option<String>,
}

/// The longest `?match=` pattern, in bytes. Lock names are at most 255
/// bytes, so no longer pattern is useful, and matching costs the pattern's
/// length for every name (every event, on a stream).
pub const MAX_MATCH_BYTES: usize = 1024;

impl MatchQuery {
    /// The pattern, checked.
    fn pattern(&self) -> Result<Option<&str>, ApiError> {
        match self.pattern.as_deref() {
            Some(pattern) if pattern.len() > MAX_MATCH_BYTES => Err(ApiError(
                StatusCode::BAD_REQUEST,
                format!(
                    "the match pattern is {} bytes long: at most {MAX_MATCH_BYTES} \
                     (lock names are at most 255 bytes)",
                    pattern.len()
                ),
            )),
            pattern => Ok(pattern),
        }
    }
}

fn matching_locks(handle: &ServerHandle, pattern: Option<&str>) -> Vec<LockSnapshot> {
    match pattern {
        Some(pattern) => {
            let glob = Glob::new(pattern);
            handle.locks(|name| glob.matches(name))
        }
        None => handle.locks(|_| true),
    }
}

fn lock_list(locks: &[LockSnapshot]) -> LockList {
    LockList {
        locks: locks.iter().map(LockInfo::from).collect(),
    }
}

async fn locks_handler(
    State(state): State<Arc<AdminState>>,
    query: Result<Query<MatchQuery>, QueryRejection>,
) -> ApiResult<LockList> {
    let Query(query) = query.map_err(bad_query)?;
    let locks = matching_locks(&state.options.handle, query.pattern()?);
    Ok(Json(lock_list(&locks)))
}

/// `GET /api/events`: subscribe first, then snapshot, so no change falls
/// between the two (see [`crate::EventHub`] on applying events).
async fn events_handler(
    State(state): State<Arc<AdminState>>,
    query: Result<Query<MatchQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(bad_query)?;
    let Some(hub) = &state.options.events else {
        return Err(ApiError(
            StatusCode::NOT_FOUND,
            "this server does not stream events".to_owned(),
        ));
    };
    let pattern = query.pattern()?;
    let subscription = hub.subscribe_matching(pattern.map(Glob::new));
    let snapshot = lock_list(&matching_locks(&state.options.handle, pattern));
    let json = serde_json::to_vec(&snapshot).map_err(|err| {
        ApiError(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the snapshot: {err}"),
        )
    })?;
    Ok(live::sse_response(
        subscription,
        &json,
        hub.keepalive(),
        state.stop.clone(),
    ))
}

async fn lock_handler(
    State(state): State<Arc<AdminState>>,
    name: Result<Path<String>, PathRejection>,
) -> ApiResult<LockInfo> {
    let Path(name) = name.map_err(bad_path)?;
    match state.options.handle.lock(&name) {
        Some(lock) => Ok(Json(LockInfo::from(&lock))),
        None => Err(no_holder(&name)),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReleaseQuery {
    token: Option<u64>,
}

async fn release_handler(
    State(state): State<Arc<AdminState>>,
    name: Result<Path<String>, PathRejection>,
    query: Result<Query<ReleaseQuery>, QueryRejection>,
) -> Result<Json<HolderInfo>, Response> {
    let Path(name) = name.map_err(|r| bad_path(r).into_response())?;
    let Query(query) = query.map_err(|r| bad_query(r).into_response())?;
    let handle = &state.options.handle;
    let released = match query.token {
        Some(token) => handle.force_release_token(&name, token),
        None => handle.force_release(&name),
    };
    match released {
        Ok(holder) => {
            match holder.claim {
                Some(c) => {
                    info!(lock = %name, remote_addr = %holder.remote_addr, token = holder.token, session = c.session, claim = c.claim, "force-released by administrator");
                }
                None => {
                    info!(lock = %name, remote_addr = %holder.remote_addr, token = holder.token, "force-released by administrator");
                }
            }
            Ok(Json(HolderInfo::from(&holder)))
        }
        Err(AdminRefused::NotFound) => Err(no_holder(&name).into_response()),
        Err(AdminRefused::AlreadyEnding { ending, .. }) => {
            Err(already_ending(&name, ending).into_response())
        }
        Err(AdminRefused::OtherToken { current }) => {
            let holder = HolderInfo::from(&current);
            let body = ConflictBody {
                error: format!(
                    "lock {name:?} is held by token {} ({}), not token {}; nothing released",
                    holder.token,
                    holder.remote_addr,
                    query.token.unwrap_or_default()
                ),
                holder,
            };
            Err((StatusCode::CONFLICT, Json(body)).into_response())
        }
    }
}

/// `GET /api/sessions`: the open version 2 sessions, each with its
/// claims counted from one snapshot of the table (an admin-path cost, as
/// `/api/locks`).
async fn sessions_handler(State(state): State<Arc<AdminState>>) -> Json<SessionList> {
    let handle = &state.options.handle;
    let sessions = handle.v2_sessions();
    let mut counts: HashMap<u64, (usize, usize)> = HashMap::with_capacity(sessions.len());
    if !sessions.is_empty() {
        for lock in handle.locks(|_| true) {
            if let Some(claim) = lock.holder.claim {
                counts.entry(claim.session).or_default().0 += 1;
            }
            for waiter in &lock.waiters {
                if let Some(claim) = waiter.claim {
                    counts.entry(claim.session).or_default().1 += 1;
                }
            }
        }
    }
    let sessions = sessions
        .iter()
        .map(|session| {
            let (held, waiting) = counts.get(&session.id).copied().unwrap_or_default();
            SessionEntry {
                session: session.id,
                remote_addr: session.remote_addr.to_string(),
                identity: session.identity.to_string(),
                lease_ms: session.lease.as_millis(),
                opened_at: rfc3339(session.opened_at),
                held,
                waiting,
                state: if session.ended.is_some() {
                    "ended"
                } else {
                    "open"
                }
                .to_owned(),
                reason: session.ended.map(|ended| ended.reason.as_str().to_owned()),
                release_at: session.ended.map(|ended| rfc3339(ended.release_at)),
            }
        })
        .collect();
    Json(SessionList { sessions })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KickQuery {
    claim: Option<u32>,
}

async fn kick_handler(
    State(state): State<Arc<AdminState>>,
    params: Result<Path<(String, String)>, PathRejection>,
    query: Result<Query<KickQuery>, QueryRejection>,
) -> ApiResult<WaiterInfo> {
    let Path((name, remote_addr)) = params.map_err(bad_path)?;
    let Query(query) = query.map_err(bad_query)?;
    let addr: SocketAddr = remote_addr.parse().map_err(|_| {
        ApiError(
            StatusCode::BAD_REQUEST,
            format!("{remote_addr:?} is not an address (expected IP:PORT as listed)"),
        )
    })?;
    let handle = &state.options.handle;
    let kicked = match query.claim {
        Some(claim) => handle.kick_claim(&name, addr, claim),
        None => handle.kick_waiter(&name, addr),
    };
    let whom = match query.claim {
        Some(claim) => format!("at {addr} with claim {claim}"),
        None => format!("at {addr}"),
    };
    match kicked {
        Ok(waiter) => {
            match waiter.claim {
                Some(c) => {
                    info!(lock = %name, remote_addr = %addr, session = c.session, claim = c.claim, "waiter removed by administrator");
                }
                None => info!(lock = %name, remote_addr = %addr, "waiter removed by administrator"),
            }
            Ok(Json(WaiterInfo::from(&waiter)))
        }
        Err(AdminRefused::NotFound) => Err(ApiError(
            StatusCode::NOT_FOUND,
            format!("lock {name:?} has no waiter {whom}"),
        )),
        Err(AdminRefused::AlreadyEnding { ending, .. }) => Err(already_ending(&name, ending)),
        Err(AdminRefused::OtherToken { .. }) => Err(ApiError(
            StatusCode::CONFLICT,
            format!("lock {name:?}: the waiter at {addr} is another session; nothing was done"),
        )),
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
