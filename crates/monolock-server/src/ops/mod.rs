//! The operations side: everything an operator reaches around the core.
//!
//! The admin API and its dashboard ([`admin`]), the live event stream, the
//! audit log, Prometheus metrics and the health endpoints served here
//! ([`router`], [`serve`], [`serve_tls`]), what SIGHUP reloads, and
//! [`Service`](crate::Service), which runs all of it with the shutdown
//! order. Also what the core is configured from: TLS files
//! ([`ServerTls`](crate::ServerTls), the core's
//! [`ProtocolTls`](crate::ProtocolTls)), the ACL file and its globs (an
//! [`Authorizer`](crate::Authorizer)), bounded config files, listeners and
//! the descriptor limit. Each piece observes the core through an
//! [`Observer`](crate::Observer), reads it through a
//! [`ServerHandle`](crate::ServerHandle) or plugs into one of its traits;
//! the core imports none of it.

pub(crate) mod acl;
pub mod admin;
pub(crate) mod admin_auth;
pub(crate) mod audit;
pub(crate) mod config_file;
pub(crate) mod dashboard;
mod endpoints;
pub(crate) mod glob;
pub(crate) mod http_conn;
pub(crate) mod https;
pub(crate) mod limits;
pub(crate) mod listen;
pub(crate) mod live;
pub(crate) mod metrics;
pub(crate) mod record;
pub(crate) mod reload;
pub(crate) mod service;
pub(crate) mod tls;
pub(crate) mod web_guard;

pub use endpoints::{OPS_SHUTDOWN_GRACE, OpsOptions, router, serve, serve_tls, serve_with};
