//! Why a scenario stopped before its end.
//!
//! A scenario that finds a violation keeps going and lists it in its
//! [`Report`](super::Report); an error is for the harness itself failing
//! (an expected event never came, a process would not start), after which
//! the scenario cannot go on. [`Scenario::run`](super::Scenario::run) turns
//! it into an `aborted: ...` problem, so either way the run fails.

use std::io;

use crate::{checker::WaitTimeout, probe::ProbeError, process::ProcessError};

/// A scenario could not go on.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// An event the scenario waits for did not come in time.
    #[error(transparent)]
    Wait(#[from] WaitTimeout),
    /// The same, with what the harness saw at that moment.
    #[error("{source}; {context}")]
    Stalled {
        /// The wait that ran out.
        source: WaitTimeout,
        /// The server's and the journal's view, for the diagnosis.
        context: String,
    },
    /// A process of the harness (the server, a worker, a proxy, a runtime)
    /// could not be started or signalled.
    #[error("{what}: {source}")]
    Io {
        /// What the harness was doing.
        what: String,
        /// The OS error.
        source: io::Error,
    },
    /// The `monolock` server child could not be found or started.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// The scenario needs the `monolock` binary and none was given.
    #[error("this scenario needs the monolock binary")]
    NoServerBinary,
    /// A worker the scenario acts on has already exited.
    #[error("worker {0} is gone")]
    WorkerGone(String),
    /// A raw-protocol probe failed.
    #[error("{what}: {source}")]
    Probe {
        /// Which probe.
        what: String,
        /// How it failed.
        source: ProbeError,
    },
    /// A client of the client library failed.
    #[error("{what}: {source}")]
    Client {
        /// Which client.
        what: &'static str,
        /// How it failed (boxed: the client's error is large, and every
        /// step of every scenario returns this type).
        source: Box<monolock_client::Error>,
    },
    /// The server or the proxy did something the scenario rules out.
    #[error("{0}")]
    Unexpected(String),
}

impl ScenarioError {
    /// `map_err` for an I/O step: `.map_err(ScenarioError::io("starting x"))`.
    pub fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> Self {
        let what = what.into();
        move |source| Self::Io { what, source }
    }
}

/// What every scenario step returns.
pub type Result<T, E = ScenarioError> = std::result::Result<T, E>;
