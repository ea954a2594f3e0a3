//! The monolock lock server as a library.
//!
//! A lock is claimed by a TCP connection: the claim lives exactly as long as
//! the connection and its lease (a sliding window of silence that every
//! heartbeat restarts). Waiters queue in strict FIFO order and are pushed
//! the lock; every grant carries a strictly increasing fencing token.
//!
//! The server takes an already-bound listener, so tests bind port 0 and run
//! many servers at once:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! use monolock_server::{Server, ServerConfig};
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let addr = listener.local_addr()?;
//! let server = Server::new(ServerConfig::default());
//! let handle = server.handle();
//! let task = tokio::spawn(server.run(listener));
//! // ... clients connect to `addr` ...
//! assert_eq!(handle.counts().locks, 0);
//! handle.shutdown();
//! task.await.expect("server task")?;
//! # let _ = addr;
//! # Ok(())
//! # }
//! ```
//!
//! Around the core, the operations pieces, each optional and each plugged in
//! through [`ServerConfig`] or a handle:
//!
//! - [`ServerTls`]: TLS or mTLS on the protocol port, reloadable; the client
//!   identity comes from [`identity_of_certificate`];
//! - [`AclFileAuthorizer`]: the ACL ([`Acl`], [`Glob`]), reloadable;
//! - [`AuditLog`]: ownership events as JSON lines (an [`Observer`]);
//! - [`Metrics`]: Prometheus metrics (an [`Observer`]), served by [`ops`]
//!   with `/healthz` and `/readyz`;
//! - [`admin`]: the admin HTTP API and the live dashboard, fed by an
//!   [`EventHub`] (an [`Observer`]) and guarded by an [`AdminToken`];
//! - [`Reloader`]: what SIGHUP does;
//! - [`TokenFloor`]: tokens that survive a restart on a clock that stepped
//!   back, and [`ServerConfig::startup_grace`]: no grant until a failed
//!   primary's holders have given up (high availability, docs/ha.md).
//! - [`Service`]: all of it together, with the shutdown order.
#![deny(unsafe_code)]
#![warn(missing_docs)]

// The protocol core: the wire side (connections, v1 and v2 sessions) and
// the table side (the lock table, leases, grace, tokens). It never imports
// the operations side (tests/layering.rs holds it to that).
mod core;
// The operations side: admin API and dashboard, live events, audit log,
// metrics and the ops endpoints, TLS files, the ACL, config files,
// listeners and process limits, reload, and the service that runs it all.
pub mod ops;

pub use crate::ops::admin;

pub use crate::core::admission::{
    DEFAULT_MAX_CONNECTIONS, MAX_REFUSALS_IN_FLIGHT, RESERVED_DESCRIPTORS, connections_within,
};
pub use crate::core::clock::{SystemWallClock, WallClock};
pub use crate::core::config::{
    Authorizer, DEFAULT_IDLE_TIMEOUT, DEFAULT_IO_TIMEOUT, DEFAULT_MAX_CLAIMS,
    DEFAULT_MAX_CLAIMS_PER_SESSION, DEFAULT_MAX_WATCHES, DEFAULT_MAX_WATCHES_PER_SESSION,
    ProtocolTls, ServerConfig,
};
pub use crate::core::events::{
    ClaimRef, Event, NoopObserver, Observer, Observers, ReleaseReason, ServerEnding, SessionInfo,
    WatchBound,
};
pub use crate::core::grace::GraceStatus;
pub use crate::core::server::{Server, ServerHandle, SessionEnded, V2SessionSnapshot, run};
pub use crate::core::table::{
    AdminRefused, Ending, HolderSnapshot, LockSnapshot, TableCounts, WaiterSnapshot,
};
pub use crate::core::token_floor::{TOKEN_FLOOR_RESERVE_AHEAD, TokenFloor, TokenFloorError};
pub use crate::ops::acl::{Acl, AclError, AclFileAuthorizer, AclRule};
pub use crate::ops::admin_auth::{AdminIdentities, AdminToken, AdminTokenError};
pub use crate::ops::audit::{
    AUDIT_QUEUE_CAPACITY, AuditError, AuditLog, AuditOptions, AuditOverflow, AuditTarget,
};
pub use crate::ops::config_file::MAX_CONFIG_FILE_BYTES;
pub use crate::ops::glob::Glob;
pub use crate::ops::http_conn::{
    ClientIdentity, DEFAULT_HTTP_HEADER_TIMEOUT, DEFAULT_HTTP_IDLE_TIMEOUT,
    DEFAULT_HTTP_MAX_CONNECTIONS, HttpLimits, HttpStats,
};
pub use crate::ops::https::TlsListener;
pub use crate::ops::limits::raise_fd_limit;
pub use crate::ops::listen::{LISTEN_BACKLOG, bind};
pub use crate::ops::live::{Batching, EventHub, Subscription};
pub use crate::ops::metrics::{METRICS_CONTENT_TYPE, Metrics};
pub use crate::ops::reload::{ReloadReport, Reloader};
pub use crate::ops::service::{Listeners, Service, ServiceBuilder};
pub use crate::ops::tls::{ServerTls, TlsError, TlsFiles, identity_of_certificate};
pub use crate::ops::web_guard::{
    AllowedHostError, AllowedHosts, HostCheck, REQUEST_HEADER, WebGuard,
};
