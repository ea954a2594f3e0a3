//! The scoped form: hold a lock for exactly the duration of some work.

use std::{fmt, future::Future, sync::Arc};

use monolock_proto::LockName;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};
use tracing::debug;

use crate::{
    error::LossReason,
    guard::LockGuard,
    session::{Shared, Status},
};

/// What guarded work gets: the fencing token, and a cancellation token
/// that is cancelled the moment ownership stops being confirmed.
#[derive(Clone)]
pub struct LockContext {
    name: LockName,
    token: u64,
    cancel: CancellationToken,
    shared: Arc<Shared>,
}

impl LockContext {
    /// The fencing token of the grant. Send it with every write the lock
    /// guards.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// Whether the lock is still held, judged against the clock now (see
    /// [`LockGuard::is_held`]).
    pub fn is_held(&self) -> bool {
        matches!(self.shared.status(), Status::Held(_))
    }

    /// Cancelled when the lock is lost.
    pub fn cancellation_token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Resolves when the work must stop (see
    /// [`cancellation_token`](Self::cancellation_token)).
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.cancel.cancelled()
    }

    /// Whether the work has been asked to stop.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }
}

impl fmt::Debug for LockContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockContext")
            .field("name", &self.name)
            .field("token", &self.token)
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// The result of guarded work.
#[derive(Debug)]
#[must_use = "check `loss`: the work may have run without the lock"]
pub struct Outcome<T> {
    /// What the work returned.
    pub output: T,
    /// The fencing token the work ran under.
    pub token: u64,
    /// Why the lock was lost before the work returned, if it was. Set even
    /// when the work itself succeeded: its later steps ran unprotected (the
    /// fencing token is what keeps their writes from doing harm).
    pub loss: Option<LossReason>,
}

impl<T> Outcome<T> {
    /// True if the lock was held until the work returned.
    pub fn held_throughout(&self) -> bool {
        self.loss.is_none()
    }
}

/// Runs `work` under `guard`; see
/// [`Client::run_locked`](crate::Client::run_locked).
pub(crate) async fn run_scoped<F, Fut, T>(guard: LockGuard, work: F) -> Outcome<T>
where
    F: FnOnce(LockContext) -> Fut,
    Fut: Future<Output = T>,
{
    let token = guard.token();
    let context = LockContext {
        name: guard.name().clone(),
        token,
        // A child: the work may cancel its own token without touching the
        // guard's.
        cancel: guard.loss_token().child_token(),
        shared: guard.shared().clone(),
    };
    // The work runs in this future: dropping the future drops the work,
    // then the guard (declared first, dropped last), which releases.
    let output = work(context).await;
    let loss = guard.loss();
    if loss.is_none()
        && let Err(err) = guard.release().await
    {
        debug!(error = %err, "release after guarded work failed");
    }
    Outcome {
        output,
        token,
        loss,
    }
}
