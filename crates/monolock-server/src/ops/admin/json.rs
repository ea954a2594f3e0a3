//! The admin API's JSON: what each endpoint answers, as types a client
//! can deserialize too.

use serde::{Deserialize, Serialize};

use crate::{
    ClaimRef, GraceStatus, HolderSnapshot, LockSnapshot, WaiterSnapshot, ops::record::rfc3339,
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
    /// The value it announced (`""`: none).
    #[serde(default)]
    pub value: String,
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
    /// The value its grant will show (`""`: none).
    #[serde(default)]
    pub value: String,
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
    /// Its claims, by lock name then claim id, each with its value.
    #[serde(default)]
    pub claims: Vec<SessionClaim>,
    /// Its watches (OBSERVE, the values-and-observers extension).
    #[serde(default)]
    pub watches: usize,
}

/// A claim of a version 2 session in `GET /api/sessions`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionClaim {
    /// The claim id the client chose.
    pub claim: u32,
    /// The lock it claims.
    pub lock: String,
    /// `held` or `waiting`.
    pub state: String,
    /// The fencing token of a held claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    /// Its value (`""`: none).
    pub value: String,
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
            value: holder.value.to_string(),
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
            value: waiter.value.to_string(),
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
