//! The admin API's handlers, and the checks of its credentials.

use std::{collections::HashMap, net::SocketAddr, sync::Arc};

use axum::{
    Json,
    extract::{
        Path, Query, Request, State,
        rejection::{PathRejection, QueryRejection},
    },
    http::{HeaderValue, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{json::*, options::AdminOptions};
use crate::{
    AdminIdentities, AdminRefused, AdminToken, ClientIdentity, Ending, Glob, LockSnapshot,
    ServerHandle, ops::live, ops::record::rfc3339,
};

pub(super) struct AdminState {
    pub(super) options: AdminOptions,
    /// Ends every event stream when the listener shuts down (a stream
    /// would otherwise hold graceful shutdown open forever).
    pub(super) stop: CancellationToken,
}

pub(super) async fn authenticate(
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
pub(super) async fn require_admin_identity(
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
pub(super) struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(ErrorBody { error: self.1 })).into_response()
    }
}

pub(super) type ApiResult<T> = Result<Json<T>, ApiError>;

fn bad_path(rejection: PathRejection) -> ApiError {
    ApiError(rejection.status(), rejection.body_text())
}

fn bad_query(rejection: QueryRejection) -> ApiError {
    ApiError(rejection.status(), rejection.body_text())
}

pub(super) async fn info_handler(State(state): State<Arc<AdminState>>) -> Json<ServerInfo> {
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
pub(super) struct MatchQuery {
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

pub(super) async fn locks_handler(
    State(state): State<Arc<AdminState>>,
    query: Result<Query<MatchQuery>, QueryRejection>,
) -> ApiResult<LockList> {
    let Query(query) = query.map_err(bad_query)?;
    let locks = matching_locks(&state.options.handle, query.pattern()?);
    Ok(Json(lock_list(&locks)))
}

/// `GET /api/events`: subscribe first, then snapshot, so no change falls
/// between the two (see [`crate::EventHub`] on applying events).
pub(super) async fn events_handler(
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

pub(super) async fn lock_handler(
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
pub(super) struct ReleaseQuery {
    token: Option<u64>,
}

pub(super) async fn release_handler(
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
pub(super) async fn sessions_handler(State(state): State<Arc<AdminState>>) -> Json<SessionList> {
    let handle = &state.options.handle;
    let sessions = handle.v2_sessions();
    let mut claims: HashMap<u64, Vec<SessionClaim>> = HashMap::with_capacity(sessions.len());
    if !sessions.is_empty() {
        for lock in handle.locks(|_| true) {
            if let Some(claim) = lock.holder.claim {
                claims.entry(claim.session).or_default().push(SessionClaim {
                    claim: claim.claim,
                    lock: lock.name.to_string(),
                    state: "held".to_owned(),
                    token: Some(lock.holder.token),
                    value: lock.holder.value.to_string(),
                });
            }
            for waiter in &lock.waiters {
                if let Some(claim) = waiter.claim {
                    claims.entry(claim.session).or_default().push(SessionClaim {
                        claim: claim.claim,
                        lock: lock.name.to_string(),
                        state: "waiting".to_owned(),
                        token: None,
                        value: waiter.value.to_string(),
                    });
                }
            }
        }
    }
    let sessions = sessions
        .iter()
        .map(|session| {
            let mut claims = claims.remove(&session.id).unwrap_or_default();
            claims.sort_by(|a, b| (&a.lock, a.claim).cmp(&(&b.lock, b.claim)));
            let held = claims.iter().filter(|c| c.token.is_some()).count();
            let waiting = claims.len() - held;
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
                claims,
                watches: session.watches,
            }
        })
        .collect();
    Json(SessionList { sessions })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct KickQuery {
    claim: Option<u32>,
}

pub(super) async fn kick_handler(
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

pub(super) async fn not_found() -> ApiError {
    ApiError(StatusCode::NOT_FOUND, "no such endpoint".to_owned())
}

pub(super) async fn method_not_allowed() -> ApiError {
    ApiError(
        StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed for this endpoint".to_owned(),
    )
}
