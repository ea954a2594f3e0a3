//! The protocol core: what a connection, a claim and a lock are, and the
//! rules between them. Nothing here knows the admin API, the audit log,
//! metrics or the dashboard: those observe the core through
//! [`Observer`](events::Observer) and read it through
//! [`ServerHandle`](server::ServerHandle).

pub(crate) mod acl;
pub(crate) mod config;
pub(crate) mod events;
pub(crate) mod glob;
pub(crate) mod grace;
pub(crate) mod leases;
pub(crate) mod limits;
pub(crate) mod listen;
pub(crate) mod server;
pub(crate) mod session;
pub(crate) mod slot;
pub(crate) mod table;
pub(crate) mod tls;
pub(crate) mod token;
pub(crate) mod token_floor;
