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
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod config;
mod events;
mod limits;
mod server;
mod session;
mod table;
mod token;

pub use config::{Authorizer, DEFAULT_IO_TIMEOUT, ERROR_DRAIN_TIMEOUT, ServerConfig};
pub use events::{Event, NoopObserver, Observer, Observers, ReleaseReason, SessionInfo};
pub use limits::raise_fd_limit;
pub use server::{ACCEPT_BACKOFF_MAX, ACCEPT_BACKOFF_MIN, Server, ServerHandle, run};
pub use table::{HolderSnapshot, LockSnapshot, TableCounts, WaiterSnapshot};
pub use token::{SystemWallClock, WallClock};
