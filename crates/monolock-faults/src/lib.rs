//! Fault injection for monolock: the pieces that prove the lock safe when
//! processes crash and pause, networks partition, servers restart or fail
//! over, and clients misbehave.
//!
//! - [`resource`]: the fenced resource, which refuses writes under an old
//!   token and records every decision;
//! - [`belief`]: belief intervals and the no-overlap check;
//! - [`audit`]: grant/release events (audit log or in-process observer) and
//!   their strict alternation;
//! - [`checker`]: the loopback service workers report to and write through;
//! - [`proxy`]: a TCP proxy that delays, holds, drops and resets traffic,
//!   and fails over between backends;
//! - [`process`]: the `monolock` server and the workers as child processes;
//! - [`probe`]: raw-protocol clients (heartbeat probes and hostile peers);
//! - [`scenarios`]: the fault scenarios and their reports;
//! - [`cli`]: the runners' seed, runtime and exit status;
//! - [`peers`]: the same faults against etcd, ZooKeeper and Redis beside
//!   monolock.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod audit;
pub mod belief;
pub mod checker;
pub mod checker_link;
pub mod cli;
pub mod clock;
pub mod messages;
pub mod peers;
pub mod probe;
pub mod process;
pub mod proxy;
pub mod resource;
pub mod scenarios;
pub mod task;
