//! Test support shared by the monolock crates' tests, the bench and the
//! fault suite (never a dependency of the server, the clients or the
//! `monolock` binary), one module per concept:
//!
//! - [`patience`]: the one bound on waiting for an event, `eventually`.
//! - [`server`]: an in-process server on a free port and how to stop it.
//! - [`peers`]: etcd and ZooKeeper as child processes on loopback, for
//!   the bench and the fault suite (commands and readiness probes only).
//! - [`peer`]: a raw-bytes protocol peer over TCP or an in-memory pipe.
//! - [`sse`]: a Server-Sent Events reader for `/api/events`.
//! - [`http`]: raw HTTP requests over a blocking socket.
//! - [`pki`]: a lab PKI made at test time with rcgen, the server's TLS
//!   files on disk, rustls clients.
//! - [`v2`]: a raw protocol v2 client (sessions carrying many claims),
//!   async or over a blocking socket.
//! - [`process`]: the real `monolock serve` as a child process, its ports
//!   learnt from the lines announcing its listeners, on a thread or on
//!   tokio.
//! - [`sys`]: signals, child set-up between fork and exec, CPU pinning and
//!   priorities, CPU time, the descriptor limit, and the `/proc` readers,
//!   for the tests, the bench and the fault suite.
//! - `zk_lock` (feature `zookeeper`): ZooKeeper's lock recipe, for the
//!   bench and the fault suite.
#![deny(unsafe_code)]

pub mod http;
pub mod patience;
pub mod peer;
pub mod peers;
pub mod pki;
pub mod process;
pub mod server;
pub mod sse;
pub mod sys;
pub mod v2;
#[cfg(feature = "zookeeper")]
pub mod zk_lock;

pub use patience::{PATIENCE, eventually, within};
pub use peer::{Peer, acquire_bytes};
pub use server::{TestServer, spawn_server};
