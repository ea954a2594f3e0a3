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

mod acl;
pub mod admin;
mod admin_auth;
mod audit;
mod config;
mod dashboard;
mod events;
mod glob;
mod grace;
mod https;
mod leases;
mod limits;
mod listen;
mod live;
mod metrics;
pub mod ops;
mod reload;
mod server;
mod service;
mod session;
mod session_v2;
mod slot;
mod table;
mod tls;
mod token;
mod token_floor;

pub use acl::{Acl, AclError, AclFileAuthorizer, AclRule};
pub use admin_auth::{AdminToken, AdminTokenError};
pub use audit::{
    AUDIT_BLOCK_MAX, AUDIT_QUEUE_CAPACITY, AUDIT_STOP_TIMEOUT, AuditError, AuditLog, AuditOptions,
    AuditOverflow, AuditTarget, rfc3339,
};
pub use config::{
    Authorizer, DEFAULT_IDLE_TIMEOUT, DEFAULT_IO_TIMEOUT, DEFAULT_MAX_CLAIMS_PER_SESSION,
    ERROR_DRAIN_TIMEOUT, ServerConfig,
};
pub use events::{Event, NoopObserver, Observer, Observers, ReleaseReason, SessionInfo};
pub use glob::Glob;
pub use grace::GraceStatus;
pub use https::{HANDSHAKE_TIMEOUT, TlsListener};
pub use limits::raise_fd_limit;
pub use listen::{LISTEN_BACKLOG, bind};
pub use live::{
    Batching, EventHub, FLUSH_INTERVAL, KEEPALIVE_INTERVAL, MAX_BATCH_BYTES, MAX_PENDING_EVENTS,
    SUBSCRIBER_BUFFER, Subscription,
};
pub use metrics::{
    METRICS_CONTENT_TYPE, Metrics, SUMMARY_MAX_AGE, SUMMARY_MAX_SAMPLES, SUMMARY_QUANTILES, Summary,
};
pub use reload::{ReloadReport, Reloader};
pub use server::{ACCEPT_BACKOFF_MAX, ACCEPT_BACKOFF_MIN, Server, ServerHandle, run};
pub use service::{Listeners, Service};
pub use table::{AdminRefused, Ending, HolderSnapshot, LockSnapshot, TableCounts, WaiterSnapshot};
pub use tls::{ServerTls, TlsError, TlsFiles, identity_of_certificate};
pub use token::{SystemWallClock, WallClock};
pub use token_floor::{TOKEN_FLOOR_RESERVE_AHEAD, TokenFloor, TokenFloorError};
