//! The lock guard, and a place in a lock's queue.

use std::{convert::Infallible, fmt, sync::Arc, time::Duration};

use monolock_proto::LockName;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::{
    error::{Error, LockLost, LossReason, Unsupported},
    observe::request_error,
    session::{Session, Shared, Status},
    state::checked_value,
    v2::{self, session::RequestFailed},
};

/// A claim of either protocol version.
#[derive(Debug)]
pub(crate) enum Claim {
    /// Its own connection; values are unsupported, for this reason.
    V1(Session, Unsupported),
    /// A claim on a shared session; `release` waits at most `io_timeout`
    /// for RELEASED.
    V2 {
        claim: v2::session::Claim,
        io_timeout: Duration,
    },
}

impl Claim {
    fn shared(&self) -> &Arc<Shared> {
        match self {
            Self::V1(session, _) => session.shared(),
            Self::V2 { claim, .. } => claim.shared(),
        }
    }

    async fn release(&mut self) -> Result<(), LossReason> {
        match self {
            Self::V1(session, _) => session.release().await,
            Self::V2 { claim, io_timeout } => claim.release(*io_timeout).await,
        }
    }
}

/// A held lock. **The guard is the claim**: while it lives, its session
/// heartbeats; when it is dropped, the claim ends at once without blocking
/// the caller (protocol version 2: the session's task writes a RELEASE;
/// version 1: the connection is shut down on the spot), and the server
/// hands the lock to the next waiter.
///
/// Hand [`token`](Self::token) to everything the lock guards (the fencing
/// token), and stop the guarded work when [`lost`](Self::lost) resolves.
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    session: Claim,
    name: LockName,
    token: u64,
}

impl LockGuard {
    pub(crate) fn new(session: Claim, name: LockName, token: u64) -> Self {
        Self {
            session,
            name,
            token,
        }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        self.session.shared()
    }

    /// The fencing token of this grant: strictly greater than every token
    /// issued before it by the same server process. Write it next to
    /// whatever the lock protects and refuse writes that carry a smaller
    /// one.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The session's lease.
    pub fn lease(&self) -> Duration {
        self.session.shared().lease()
    }

    /// Whether the lock is still held, judged against the clock now: false
    /// once the claim was lost, and false as soon as the monotonic clock is
    /// past [`deadline`](Self::deadline), even if no timer has fired yet (a
    /// process resumed after a pause never trusts a stale "held").
    ///
    /// **Once this returns false, the claim is given up for good**: the
    /// client stops heartbeating and closes the connection, and a later
    /// call never returns true again, even if the server would still have
    /// answered. Stop touching the guarded resource and acquire anew.
    pub fn is_held(&self) -> bool {
        matches!(self.session.shared().status(), Status::Held(_))
    }

    /// The instant at which the client gives the claim up unless a
    /// heartbeat is confirmed before: `S + 0.8 x lease`, where `S` is the
    /// send instant of the latest confirmed frame of the claim's session
    /// (version 2: shared by every claim on it; version 1: its ACQUIRE or
    /// HEARTBEAT). The server cannot expire the session before `S + lease`.
    pub fn deadline(&self) -> Instant {
        self.session.shared().deadline()
    }

    /// Resolves when the lock is lost, with the reason: the server ended
    /// the session (ERROR code and reason), the connection closed or
    /// failed, no heartbeat was confirmed in time, or the server broke the
    /// protocol. Never resolves while the lock is held.
    ///
    /// Takes `&self`, so it can sit in a `tokio::select!` next to the
    /// guarded work, and several tasks can await it at once.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future changes nothing.
    pub async fn lost(&self) -> LossReason {
        match self
            .session
            .shared()
            .wait_until(|_| None::<Infallible>)
            .await
        {
            Ok(never) => match never {},
            Err(reason) => reason,
        }
    }

    /// The reason the lock was lost, or `None` while it is held. Checks
    /// the deadline against the clock, like [`is_held`](Self::is_held).
    pub fn loss(&self) -> Option<LossReason> {
        self.session.shared().loss()
    }

    /// `Ok` while the lock is held; once it is lost, the loss with a
    /// message naming the lock (`lock "NAME" lost (REASON): DETAIL`).
    /// Checks the deadline against the clock, like
    /// [`is_held`](Self::is_held).
    ///
    /// # Errors
    /// [`LockLost`] once the lock is lost.
    pub fn check(&self) -> Result<(), LockLost> {
        match self.loss() {
            None => Ok(()),
            Some(reason) => Err(LockLost::new(self.name.clone(), reason)),
        }
    }

    /// A token that is cancelled the moment the lock is lost. Hand clones
    /// to tasks that must stop then.
    pub fn loss_token(&self) -> CancellationToken {
        self.session.shared().lost_token().clone()
    }

    /// Replaces the value the claim carries (see
    /// [`Client::acquire_with_value`](crate::Client::acquire_with_value))
    /// and returns once the server has it: every observer is told
    /// (a `value` state) and every state written from then on carries it.
    /// An empty value clears it.
    ///
    /// # Errors
    /// [`Error::InvalidValue`] above 1,024 bytes; [`Error::LockLost`] if
    /// the lock was lost; [`Error::Unsupported`] when the server predates
    /// lock values (or the claim speaks version 1).
    ///
    /// # Cancel safety
    /// Dropping the future leaves the server with the old value or the
    /// new one; the lock is unaffected.
    pub async fn set_value(&self, value: impl AsRef<str>) -> Result<(), Error> {
        let value = checked_value(value.as_ref())?.unwrap_or_default();
        self.check()?;
        match &self.session {
            Claim::V1(_, unsupported) => Err(unsupported.clone().into()),
            Claim::V2 { claim, io_timeout } => {
                match claim.proclaim(value.to_owned(), *io_timeout).await {
                    Ok(()) => Ok(()),
                    Err(RequestFailed::Lost(reason)) => {
                        let reason = self.loss().unwrap_or(reason);
                        Err(LockLost::new(self.name.clone(), reason).into())
                    }
                    Err(failed) => {
                        if let Some(reason) = self.loss() {
                            return Err(LockLost::new(self.name.clone(), reason).into());
                        }
                        Err(request_error(failed, claim.addr()))
                    }
                }
            }
        }
    }

    /// Releases the lock and returns once the server has released it, so
    /// the lock is free (or handed to the next waiter) when it returns: a
    /// `try_acquire` of the same name right after, from any process,
    /// succeeds at the first attempt when nobody waits. Version 2 reads the
    /// server's RELEASED; version 1, which has no release frame, shuts its
    /// write side down and reads until the server's EOF (the server
    /// releases before it closes). The wait is bounded by the client's I/O
    /// timeout; past it the connection is closed (version 2: the session,
    /// which releases every claim on it, each guard reporting its loss) and
    /// the release is reported as unconfirmed.
    ///
    /// # Errors
    /// [`Error::LockLost`] if the lock had been lost before the release
    /// (so a caller learns that its work may have run unprotected); or
    /// [`Error::Lost`] with the error of closing the stream, or the
    /// timeout of an unconfirmed release.
    ///
    /// # Cancel safety
    /// Dropping the future drops the guard, which releases the lock at once.
    pub async fn release(mut self) -> Result<(), Error> {
        self.check()?;
        self.session.release().await.map_err(Error::from)
    }
}

/// What the owner of a claim may believe, read apart from its guard, so
/// that the simulation (`monolock-sim`) can watch a belief while the guard
/// is being released. Not part of the client's interface.
#[cfg(feature = "mutations")]
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct BeliefProbe(Arc<Shared>);

#[cfg(feature = "mutations")]
impl BeliefProbe {
    /// The token the owner may believe it holds the lock under now: none
    /// once the claim is lost, past its deadline, or its RELEASE written
    /// (version 2).
    pub fn believed(&self) -> Option<u64> {
        self.0.believed()
    }
}

#[cfg(feature = "mutations")]
impl LockGuard {
    /// A probe of this claim's belief that outlives the guard.
    #[doc(hidden)]
    pub fn belief_probe(&self) -> BeliefProbe {
        BeliefProbe(self.shared().clone())
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name)
            .field("token", &self.token)
            .field("held", &self.is_held())
            .finish()
    }
}

/// The answer to [`Client::enqueue`](crate::Client::enqueue): the lock at
/// once, or a place in its queue.
#[derive(Debug)]
#[must_use = "dropping the lock or the place in the queue gives it up"]
pub enum Enqueued {
    /// The lock was free and is now held.
    Acquired(LockGuard),
    /// Someone holds the lock; the server queued this claim.
    Waiting(Waiter),
}

/// A place in a lock's FIFO queue. It heartbeats while it waits (a waiter
/// silent for a lease is dropped by the server); dropping it gives the
/// place up (a RELEASE; version 1: the connection closed).
#[must_use = "dropping a waiter gives up its place in the queue"]
pub struct Waiter {
    session: Claim,
    name: LockName,
}

impl Waiter {
    pub(crate) fn new(session: Claim, name: LockName) -> Self {
        Self { session, name }
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// Waits until the server promotes this claim (pushed: no polling).
    ///
    /// # Errors
    /// Why the place in the queue was lost: the server ended the session
    /// (e.g. 0x02 when an administrator removed the waiter, 0x01 on
    /// shutdown), the connection failed, or heartbeats went unconfirmed.
    ///
    /// # Cancel safety
    /// Dropping the future drops the waiter: the claim is released and
    /// its place in the queue given up.
    pub async fn granted(self) -> Result<LockGuard, Error> {
        let token = self
            .session
            .shared()
            .wait_until(|status| match status {
                Status::Held(token) => Some(*token),
                _ => None,
            })
            .await?;
        Ok(LockGuard::new(self.session, self.name, token))
    }
}

impl fmt::Debug for Waiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waiter").field("name", &self.name).finish()
    }
}
