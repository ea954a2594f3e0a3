//! The Rust client for monolock: named, exclusive locks whose guard is the
//! claim, over protocol version 2 sessions (many claims per connection) or,
//! against a server that speaks only version 1, one connection per claim.
//!
//! [`Client::acquire`] waits in the lock's FIFO queue and returns a
//! [`LockGuard`]. The guard *is* the lock: it heartbeats in the background,
//! carries the fencing [`token`](LockGuard::token), tells you through
//! [`lost`](LockGuard::lost) the moment ownership can no longer be
//! confirmed, and releases the lock the instant it is dropped.
//!
//! ```no_run
//! use std::time::Duration;
//! use monolock_client::{Client, Error};
//!
//! # async fn import_batch(_token: u64) {}
//! #[tokio::main]
//! async fn main() -> Result<(), Error> {
//!     let client = Client::new("127.0.0.1:7070");
//!     let lock = client.acquire("nightly/import", Duration::from_secs(2)).await?;
//!     println!("holding {} under token {}", lock.name(), lock.token());
//!
//!     tokio::select! {
//!         () = import_batch(lock.token()) => {}
//!         reason = lock.lost() => {
//!             // Stop touching the resource: someone else may hold the lock now.
//!             eprintln!("lost {}: {reason}", lock.name());
//!             return Err(reason.into());
//!         }
//!     }
//!     lock.release().await // or just drop it
//! }
//! ```
//!
//! # How a claim stays alive
//!
//! Claims of one lease share a session (protocol version 2): one
//! connection and one background task that is its permanent reader, opened
//! on the first claim and closed 20 s after the last one ends. It
//! heartbeats on a schedule derived from the lease (a quarter lease,
//! shortened by twice the smoothed round trip) and gives every claim on it
//! up when no reply has confirmed the session for 0.8 x the lease: the
//! server cannot expire the session sooner than one full lease after a
//! frame it answered, so **the holder always learns of a loss before the
//! server hands the lock on**. [`Protocol::V1`] gives each claim its own
//! connection instead, as does a server that answers version 2 with ERROR
//! 0x10 (the fallback is automatic, per address). [`LockGuard::is_held`] compares
//! that deadline with the clock each time it is called, so a process that
//! was paused (GC, swap, SIGSTOP, a suspended VM) reads `false` on resuming,
//! before any timer has had a chance to run.
//!
//! # Fencing tokens
//!
//! A lease cannot stop a holder that is paused *between* checking the lock
//! and writing. The token can: it strictly increases with every grant, so
//! the resource refuses a write carrying a token older than one it has
//! seen. Store it next to the data and make every guarded write
//! conditional on it. Tokens are u64: in PostgreSQL, which has no unsigned
//! 64-bit type, keep them in a `numeric(20,0)` column and pass them as
//! decimal text (a `bigint` stops at 2^63 - 1, and `token as i64` turns
//! larger tokens negative), as `examples/sql/fenced-write.sql` does:
//!
//! ```sql
//! -- fence_token numeric(20,0) NOT NULL DEFAULT 0
//! UPDATE invoices
//!    SET status = 'sent', fence_token = $1::text::numeric
//!  WHERE id = $2 AND fence_token <= $1::text::numeric;
//! -- 0 rows updated: a newer holder has written; stop.
//! ```
//!
//! ```no_run
//! # async fn db_execute(_sql: &str, _args: (String, i64)) -> Result<u64, std::io::Error> { Ok(1) }
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use monolock_client::Client;
//!
//! let client = Client::new("127.0.0.1:7070");
//! let lock = client.acquire("invoices/send", Duration::from_secs(2)).await?;
//! let updated = db_execute(
//!     "UPDATE invoices SET status = 'sent', fence_token = $1::text::numeric \
//!      WHERE id = $2 AND fence_token <= $1::text::numeric",
//!     (lock.token().to_string(), 42),
//! )
//! .await?;
//! if updated == 0 {
//!     // A later holder got there first: this process lost the lock.
//!     return Ok(());
//! }
//! # Ok(()) }
//! ```
//!
//! Tokens of different locks are not comparable: use one lock per guarded
//! resource.
//!
//! # Other forms
//!
//! - [`Client::try_acquire`]: `Ok(None)` if the lock is busy, leaving no
//!   trace in its queue.
//! - [`Client::acquire_timeout`]: wait at most a given time.
//! - [`Client::enqueue`]: return after the first reply, with the lock or a
//!   [`Waiter`] holding the place in the queue.
//! - [`Client::run_locked`]: run work while holding the lock; the work gets
//!   the token and a cancellation token cancelled on loss, and the result
//!   reports any loss.
//! - [`Client::acquire_retrying`], [`Client::run_locked_retrying`]: retry
//!   the acquire step on server conditions and connection failures, with
//!   exponential backoff and jitter, for at most 30 s of an unreachable
//!   server ([`RetryPolicy`]). Work is never re-run.
//! - [`blocking::Client`]: the same for synchronous programs.
//!
//! Every call takes a lease, or `None` for the client's default
//! ([`Client::with_default_lease`]). The address may list standbys:
//! `"a:7070,b:7070"` is tried in order on each new connection.
//!
//! # Values, observers and leader election
//!
//! With a server that has the version 2 extension (the client asks on
//! every session, and falls back per address against an older one):
//!
//! - [`Client::acquire_with_value`] (and `try_`/`enqueue_` forms): the
//!   claim carries a short value (its holder's `host:port`, say), replaced
//!   with [`LockGuard::set_value`].
//! - [`Client::observe`]: an [`Observation`], a `futures_core::Stream` of
//!   [`LockState`]s: the lock's state, then every change, in token order.
//! - [`Client::holder`]: who holds a lock now, asked once.
//! - [`Client::elect`]: leader election in the shape of client-go's
//!   `leaderelection`, as an [`Election`] stream of [`ElectionEvent`]s.
//!
//! What an observer is told is advisory (the holder may already have lost
//! the lock): find the holder with it, fence writes with the token. An
//! older server makes these fail with [`Error::Unsupported`], never a
//! loss; plain locks work there as before.
//!
//! # Cancel safety
//!
//! Every future in this crate may be dropped at any point. Dropping a
//! pending [`Client::acquire`] (or `try_acquire`, `enqueue`, ...) gives up
//! its place in the queue (a RELEASE of the waiting claim; with version 1,
//! its connection closed), exactly like dropping a pending
//! `tokio::sync::Mutex::lock`. Dropping a [`LockGuard`] or a [`Waiter`]
//! ends the claim without blocking: the session's task writes its RELEASE
//! (version 1: the socket is shut down inside `Drop`), so the server
//! promotes the next waiter at once. [`LockGuard::lost`] is cancel safe and may be awaited
//! by several tasks at once.
//!
//! # Transports
//!
//! [`Client::new`] speaks plain TCP. The protocol runs over any
//! `AsyncRead + AsyncWrite` stream: implement [`Connector`] (dial, keep a
//! [`SocketShutdown`] of the socket, then wrap the stream) and pass it to
//! [`Client::with_connector`].
//!
//! # TLS and mTLS
//!
//! `TlsConnector` (feature `tls`, on by default) speaks TLS through
//! rustls with the `ring` provider. Give it the CA that signed the server's
//! certificate, and for mutual TLS a client certificate and key: the
//! server takes the client's identity (first URI SAN, else first DNS SAN,
//! else the Common Name) from that certificate for its ACL and audit log.
//!
//! ```no_run
//! # #[cfg(feature = "tls")]
//! # async fn demo() -> Result<(), monolock_client::Error> {
//! use std::time::Duration;
//! use monolock_client::{Client, TlsConnector};
//!
//! let tls = TlsConnector::builder()
//!     .with_ca_file("/etc/monolock/ca.pem")
//!     .with_client_cert_files("/etc/monolock/worker.pem", "/etc/monolock/worker.key")
//!     .build()?; // Error::Tls, naming the file, if one is unusable
//! let client = Client::new("locks.internal:7070").with_connector(tls);
//! let lock = client.acquire("nightly/import", Duration::from_secs(2)).await?;
//! println!("holding under token {}", lock.token());
//! # Ok(()) }
//! ```
//!
//! The server name checked against the server's certificate is the host of
//! the address (an IP literal is checked as an IP address) unless
//! `with_server_name` says otherwise; `TlsConnector::from_config` takes a
//! whole `rustls::ClientConfig` (the crate re-exports its `rustls`). A
//! failed handshake is an [`Error::Connect`]; one that failed on a
//! certificate is permanent and not retried. A peer that answers the
//! handshake in plain text (a monolock port without TLS) is an
//! [`Error::WrongPeer`] (`does not speak TLS`), permanent too. Unusable TLS settings are `Error::Tls`, invalid input. Dropping
//! a guard still shuts the TCP socket down inside `Drop`.
//!
//! Dropping an [`Observation`] ends its watch, without blocking; an
//! [`Election`] dropped stops at once, releasing the lock if it leads.
//!
//! # Feature flags
//!
//! - `tls` (default): `TlsConnector`, `TlsError` and `Error::Tls`; pulls
//!   in rustls (ring provider) and tokio-rustls.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod blocking;
mod client;
mod connector;
mod election;
mod error;
mod exchange;
mod guard;
mod observe;
mod retry;
mod schedule;
mod scoped;
mod session;
mod state;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_v2;
#[cfg(feature = "tls")]
mod tls;
mod v2;
#[cfg(any(test, feature = "mutations"))]
#[doc(hidden)]
pub mod vectors;

pub use client::{Client, DEFAULT_CONNECT_TIMEOUT, DEFAULT_IO_TIMEOUT, DEFAULT_LEASE, Protocol};
pub use connector::{Connection, Connector, SocketShutdown, TcpConnector, Transport};
pub use election::{Election, ElectionEvent, Leadership};
pub use error::{
    Error, LockLost, LossReason, MAX_LEASE, MIN_LEASE, ObservationEnded, ProtocolViolation,
    Unsupported, WrongPeer,
};
#[cfg(feature = "mutations")]
#[doc(hidden)]
pub use guard::BeliefProbe;
pub use guard::{Enqueued, LockGuard, Waiter};
pub use monolock_proto::{ErrorClass, ErrorCode, LockName, MAX_NAME_LEN, NameError};
pub use observe::Observation;
pub use retry::{DEFAULT_INITIAL_BACKOFF, DEFAULT_MAX_BACKOFF, DEFAULT_RETRY_FOR, RetryPolicy};
/// The rustls this crate was built with, for [`TlsConnector::from_config`]
/// and the certificate types of the builder.
#[cfg(feature = "tls")]
pub use rustls;
pub use scoped::{LockContext, Outcome};
pub use state::{LockState, MAX_VALUE_LEN, ReleaseReason, StateEvent};
#[cfg(feature = "tls")]
pub use tls::{TlsConnector, TlsConnectorBuilder, TlsError};
