//! An observation of a lock: the stream of its states
//! ([`Client::observe`](crate::Client::observe)).

use std::{
    fmt,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use monolock_proto::LockName;

use crate::{
    error::{Error, LossReason, ObservationEnded},
    state::LockState,
    v2::{
        session::{RequestFailed, SessionHandle},
        watch::{Mailbox, WatchEnd},
    },
};

/// The states of one lock, pushed by the server: the state when the watch
/// was registered (`initial`), then one per change, in token order. A
/// `futures_core::Stream` of `Result<LockState, Error>`; [`next`](Self::next)
/// reads it without an extension trait.
///
/// Dropping it ends the watch (an UNOBSERVE, written without blocking).
/// The stream ends with one [`Error::ObservationEnded`] when its session
/// ends, and then yields nothing more.
#[must_use = "dropping an observation ends it"]
pub struct Observation {
    name: LockName,
    session: Arc<SessionHandle>,
    watch: u32,
    mailbox: Arc<Mailbox>,
}

impl Observation {
    pub(crate) fn new(
        name: LockName,
        session: Arc<SessionHandle>,
        watch: u32,
        mailbox: Arc<Mailbox>,
    ) -> Self {
        Self {
            name,
            session,
            watch,
            mailbox,
        }
    }

    pub(crate) fn mailbox(&self) -> &Mailbox {
        &self.mailbox
    }

    /// The observed lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The next state, or the error that ended the observation (once),
    /// then `None`.
    ///
    /// # Cancel safety
    /// Cancel safe: a state is taken only when it is returned.
    pub async fn next(&mut self) -> Option<Result<LockState, Error>> {
        std::future::poll_fn(|cx| self.poll_state(cx)).await
    }

    fn poll_state(&self, cx: &mut Context<'_>) -> Poll<Option<Result<LockState, Error>>> {
        let addr = self.session.addr();
        self.mailbox
            .poll_next(cx)
            .map(|next| next.map(|item| item.map_err(|end| watch_error(&self.name, end, addr))))
    }
}

impl futures_core::Stream for Observation {
    type Item = Result<LockState, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.poll_state(cx)
    }
}

impl Drop for Observation {
    fn drop(&mut self) {
        if !self.mailbox.is_ended() {
            self.session.unobserve(self.watch);
        }
    }
}

impl fmt::Debug for Observation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observation")
            .field("name", &self.name)
            .field("watch", &self.watch)
            .finish_non_exhaustive()
    }
}

/// The error for a watch that ended (or never started) on `addr`.
pub(crate) fn watch_error(name: &LockName, end: WatchEnd, addr: &str) -> Error {
    match end {
        WatchEnd::Refused { code, reason } => Error::Lost(LossReason::Server { code, reason }),
        WatchEnd::Lost(reason) => ObservationEnded::new(name.clone(), reason).into(),
        WatchEnd::Unsupported(unsupported) => unsupported.into(),
        // Only while placing, which retries it; if it ever surfaces, it
        // is the session that closed.
        WatchEnd::Retry => Error::Connect {
            addr: addr.to_owned(),
            source: std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "the session closed before the request was written",
            ),
        },
    }
}

/// The error for a one-off request (PROCLAIM, LOOKUP) that failed.
pub(crate) fn request_error(failed: RequestFailed, addr: &str) -> Error {
    match failed {
        RequestFailed::Refused { code, reason } => Error::Lost(LossReason::Server { code, reason }),
        RequestFailed::Lost(reason) => Error::Lost(reason),
        RequestFailed::Unsupported(unsupported) => unsupported.into(),
        RequestFailed::Retry => Error::Connect {
            addr: addr.to_owned(),
            source: std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "the session closed before the request was written",
            ),
        },
    }
}
