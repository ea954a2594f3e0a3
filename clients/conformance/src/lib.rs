//! The cross-language conformance suite: one list of scenarios that every
//! monolock client passes, checked from outside the client.
//!
//! Each client has a small **driver** program in its own language
//! (`DRIVER.md` next to this crate is the contract): it reads commands as
//! JSON lines on stdin and answers each with one JSON line on stdout. The
//! runner ([`run`], the `conformance` test of this crate) starts the real
//! `monolock` binary for every scenario, drives the clients through their
//! drivers, and judges what they report against the server's admin API, its
//! signals and the clock, so that a new client cannot quietly get the
//! safety rules wrong.
//!
//! - [`clients`]: the one table of clients (how to prepare each once, how to
//!   start its driver).
//! - [`scenarios`]: the list of scenarios and what each asserts.
//! - [`driver`], [`server`], [`admin`], [`pki`]: the processes and files a
//!   scenario works with; [`older`], a small server speaking the protocol
//!   as it was before the extension "values and observers".
//! - [`report`]: one line per client and scenario, and the summary.
// Denied, not forbidden: signals to child processes go through kill(2).
#![deny(unsafe_code)]

pub mod admin;
pub mod clients;
pub mod driver;
pub mod older;
pub mod pki;
pub mod report;
pub mod scenarios;
pub mod server;

use std::{
    fmt,
    path::{Path, PathBuf},
    time::Duration,
};

pub use report::{Setup, run};

/// Long enough that only a hang trips it: the bound on every wait for a
/// reply, a log line or a state of the admin API.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// Why a scenario failed, and which client's driver it concerns (`None`
/// when it cannot be pinned on one client: the server, the runner's own
/// setup).
#[derive(Debug)]
pub struct Failure {
    /// The client whose behaviour failed the check.
    pub client: Option<&'static str>,
    /// What happened and what was expected.
    pub message: String,
}

impl Failure {
    /// A failure not pinned on a client.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            client: None,
            message: message.into(),
        }
    }

    /// A failure of `client`.
    pub fn of(client: &'static str, message: impl Into<String>) -> Self {
        Self {
            client: Some(client),
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The result of a scenario or a step of one.
pub type Check<T = ()> = Result<T, Failure>;

/// Fails the scenario with a formatted message (not pinned on a client).
#[macro_export]
macro_rules! fail {
    ($($arg:tt)*) => {
        return Err($crate::Failure::new(format!($($arg)*)))
    };
}

/// Fails the scenario with a message pinned on `client` unless `cond`.
#[macro_export]
macro_rules! ensure {
    ($client:expr, $cond:expr, $($arg:tt)*) => {
        if !$cond {
            return Err($crate::Failure::of($client, format!($($arg)*)));
        }
    };
}

/// What every scenario shares: the server binary, the lab PKI, the
/// repository and a scratch directory.
pub struct Lab {
    /// The `monolock` executable under test.
    pub monolock: PathBuf,
    /// The repository's root.
    pub repo: PathBuf,
    /// The Rust client's driver (built by Cargo with this crate).
    pub rust_driver: PathBuf,
    /// Certificates and keys for the TLS and mTLS scenarios.
    pub pki: pki::LabPki,
    /// Scratch space for built drivers; removed at the end.
    pub scratch: tempfile::TempDir,
}

impl Lab {
    /// A path inside the repository.
    pub fn repo_path(&self, relative: impl AsRef<Path>) -> PathBuf {
        self.repo.join(relative)
    }
}
