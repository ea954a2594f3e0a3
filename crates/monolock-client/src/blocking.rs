//! A blocking facade for synchronous programs, with the same guard
//! semantics as the async client.
//!
//! The [`Client`] here owns a small tokio runtime (one worker thread) that
//! runs every claim's heartbeats in the background, so a [`LockGuard`]
//! stays alive while the calling thread does blocking work. Dropping a
//! guard releases the lock at once, exactly as in the async client.
//!
//! ```no_run
//! use std::time::Duration;
//! use monolock_client::blocking::Client;
//!
//! # fn main() -> Result<(), monolock_client::Error> {
//! let client = Client::new("127.0.0.1:7070")?.with_default_lease(Duration::from_secs(2));
//! let lock = client.acquire("nightly/import", None)?;
//! println!("holding under token {}", lock.token());
//! // ... work, checking lock.is_held() before each guarded write ...
//! lock.release()
//! # }
//! ```
//!
//! Calls block the calling thread; made on a thread that runs an async
//! runtime they return [`Error::BlockingInAsyncContext`] instead of
//! stalling it.

use std::{fmt, sync::Arc, time::Duration};

use monolock_proto::LockName;
use tokio::runtime::{Handle, Runtime};
use tracing::debug;

use crate::{
    client,
    connector::{Connector, TcpConnector},
    error::{Error, LossReason},
    guard,
    retry::RetryPolicy,
    scoped::Outcome,
    state::LockState,
};

/// A blocking monolock client; see the [module](self) documentation.
pub struct Client<C = TcpConnector> {
    inner: client::Client<C>,
    runtime: Arc<Runtime>,
}

impl<C> Clone for Client<C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            runtime: self.runtime.clone(),
        }
    }
}

impl<C> fmt::Debug for Client<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl Client<TcpConnector> {
    /// A client for `addr` (as [`crate::Client::new`]) with its own
    /// runtime.
    ///
    /// # Errors
    /// [`Error::Connect`] if the runtime's thread cannot be started.
    pub fn new(addr: impl Into<String>) -> Result<Self, Error> {
        Self::from_async(client::Client::new(addr))
    }
}

impl<C: Connector> Client<C> {
    /// Wraps an async client (any connector, TLS included), starting the
    /// runtime that will run its claims.
    ///
    /// # Errors
    /// [`Error::Connect`] if the runtime's thread cannot be started.
    pub fn from_async(inner: client::Client<C>) -> Result<Self, Error> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("monolock-client")
            .enable_all()
            .build()
            .map_err(|source| Error::Connect {
                addr: inner.addr().to_owned(),
                source,
            })?;
        Ok(Self {
            // Sessions run on the runtime that opened them: this client's.
            inner: inner.with_own_sessions(),
            runtime: Arc::new(runtime),
        })
    }

    /// Sets the lease of calls that pass `None`.
    pub fn with_default_lease(mut self, lease: Duration) -> Self {
        self.inner = self.inner.with_default_lease(lease);
        self
    }

    /// Sets the protocol version spoken (see [`crate::Protocol`]).
    pub fn with_protocol(mut self, protocol: crate::Protocol) -> Self {
        self.inner = self.inner.with_protocol(protocol);
        self
    }

    /// Sets the policy of [`acquire_retrying`](Self::acquire_retrying).
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.inner = self.inner.with_retry_policy(policy);
        self
    }

    /// The async client underneath.
    pub fn as_async(&self) -> &client::Client<C> {
        &self.inner
    }

    /// Blocks until the lock is granted; see [`crate::Client::acquire`].
    ///
    /// # Errors
    /// As for [`crate::Client::acquire`], and
    /// [`Error::BlockingInAsyncContext`].
    pub fn acquire(
        &self,
        name: impl AsRef<str>,
        lease: impl Into<Option<Duration>>,
    ) -> Result<LockGuard, Error> {
        let guard = self.block_on(self.inner.acquire(name, lease))??;
        Ok(self.wrap(guard))
    }

    /// [`acquire`](Self::acquire), the claim carrying `value`; see
    /// [`crate::Client::acquire_with_value`].
    ///
    /// # Errors
    /// As for [`crate::Client::acquire_with_value`], and
    /// [`Error::BlockingInAsyncContext`].
    pub fn acquire_with_value(
        &self,
        name: impl AsRef<str>,
        lease: impl Into<Option<Duration>>,
        value: impl AsRef<str>,
    ) -> Result<LockGuard, Error> {
        let guard = self.block_on(self.inner.acquire_with_value(name, lease, value))??;
        Ok(self.wrap(guard))
    }

    /// [`try_acquire`](Self::try_acquire), the claim carrying `value`.
    ///
    /// # Errors
    /// As for [`acquire_with_value`](Self::acquire_with_value).
    pub fn try_acquire_with_value(
        &self,
        name: impl AsRef<str>,
        lease: impl Into<Option<Duration>>,
        value: impl AsRef<str>,
    ) -> Result<Option<LockGuard>, Error> {
        let guard = self.block_on(self.inner.try_acquire_with_value(name, lease, value))??;
        Ok(guard.map(|guard| self.wrap(guard)))
    }

    /// Observes `name`: an iterator of its states; see
    /// [`crate::Client::observe`]. Dropping it ends the watch.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), monolock_client::Error> {
    /// let client = monolock_client::blocking::Client::new("127.0.0.1:7070")?;
    /// for state in client.observe("service/leader")? {
    ///     let state = state?;
    ///     println!("held: {}, leader: {:?}", state.held, state.value);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As for [`crate::Client::observe`], and
    /// [`Error::BlockingInAsyncContext`].
    pub fn observe(&self, name: impl AsRef<str>) -> Result<Observation, Error> {
        let inner = self.block_on(self.inner.observe(name))??;
        Ok(Observation {
            inner,
            runtime: self.runtime.clone(),
        })
    }

    /// Campaigns for leadership of `name` in the background; see
    /// [`crate::Client::elect`]. The events are an iterator.
    ///
    /// # Errors
    /// As for [`crate::Client::elect`].
    pub fn elect(
        &self,
        name: impl AsRef<str>,
        lease: impl Into<Option<Duration>>,
        value: impl Into<String>,
    ) -> Result<Election, Error> {
        // The election's task runs on this client's runtime.
        let _entered = self.runtime.enter();
        let inner = self.inner.elect(name, lease, value)?;
        Ok(Election {
            inner,
            runtime: self.runtime.clone(),
        })
    }

    /// Who holds `name` now; see [`crate::Client::holder`].
    ///
    /// # Errors
    /// As for [`crate::Client::holder`], and
    /// [`Error::BlockingInAsyncContext`].
    pub fn holder(&self, name: impl AsRef<str>) -> Result<LockState, Error> {
        self.block_on(self.inner.holder(name))?
    }

    /// Takes the lock if it is free; `Ok(None)` if it is held.
    ///
    /// # Errors
    /// As for [`acquire`](Self::acquire).
    pub fn try_acquire(
        &self,
        name: impl AsRef<str>,
        lease: impl Into<Option<Duration>>,
    ) -> Result<Option<LockGuard>, Error> {
        let guard = self.block_on(self.inner.try_acquire(name, lease))??;
        Ok(guard.map(|guard| self.wrap(guard)))
    }

    /// Waits at most `max_wait`; `Ok(None)` if the lock was not granted.
    ///
    /// # Errors
    /// As for [`acquire`](Self::acquire).
    pub fn acquire_timeout(
        &self,
        name: impl AsRef<str>,
        lease: impl Into<Option<Duration>>,
        max_wait: Duration,
    ) -> Result<Option<LockGuard>, Error> {
        let guard = self.block_on(self.inner.acquire_timeout(name, lease, max_wait))??;
        Ok(guard.map(|guard| self.wrap(guard)))
    }

    /// [`acquire`](Self::acquire), retrying temporary failures under the
    /// client's [`RetryPolicy`] (bounded in time by default).
    ///
    /// # Errors
    /// As for [`crate::Client::acquire_retrying`].
    pub fn acquire_retrying(
        &self,
        name: impl AsRef<str>,
        lease: impl Into<Option<Duration>>,
    ) -> Result<LockGuard, Error> {
        let guard = self.block_on(self.inner.acquire_retrying(name, lease))??;
        Ok(self.wrap(guard))
    }

    /// Waits for the lock, runs `work` on this thread while holding it
    /// (heartbeats go on in the background), and releases it. As
    /// [`crate::Client::run_locked`], the [`Outcome`] reports a loss even
    /// when the work succeeded; the work should check
    /// [`LockGuard::is_held`] before each guarded write.
    ///
    /// # Errors
    /// As for [`acquire`](Self::acquire); the work has not run then.
    pub fn run_locked<T>(
        &self,
        name: impl AsRef<str>,
        lease: impl Into<Option<Duration>>,
        work: impl FnOnce(&LockGuard) -> T,
    ) -> Result<Outcome<T>, Error> {
        let guard = self.acquire(name, lease)?;
        let token = guard.token();
        let output = work(&guard);
        let loss = guard.loss();
        if loss.is_none()
            && let Err(err) = guard.release()
        {
            debug!(error = %err, "release after guarded work failed");
        }
        Ok(Outcome {
            output,
            token,
            loss,
        })
    }

    /// Runs `f` on a runtime thread's behalf, refusing to block a thread
    /// that is itself running async code.
    fn block_on<F: Future>(&self, future: F) -> Result<F::Output, Error> {
        if Handle::try_current().is_ok() {
            return Err(Error::BlockingInAsyncContext);
        }
        Ok(self.runtime.block_on(future))
    }

    fn wrap(&self, inner: guard::LockGuard) -> LockGuard {
        LockGuard {
            inner,
            runtime: self.runtime.clone(),
        }
    }
}

/// A held lock; see [`crate::LockGuard`]. Heartbeats run on the client's
/// runtime; dropping the guard releases the lock at once.
#[must_use = "dropping the guard releases the lock"]
pub struct LockGuard {
    // Declared first so that it is dropped (and the lock released) before
    // this guard's reference to the runtime goes.
    inner: guard::LockGuard,
    runtime: Arc<Runtime>,
}

impl LockGuard {
    /// The fencing token of the grant.
    pub fn token(&self) -> u64 {
        self.inner.token()
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        self.inner.name()
    }

    /// Whether the lock is still held, judged against the clock now. Once
    /// this returns false the claim is given up for good (see
    /// [`crate::LockGuard::is_held`]).
    pub fn is_held(&self) -> bool {
        self.inner.is_held()
    }

    /// Why the lock was lost, or `None` while it is held.
    pub fn loss(&self) -> Option<LossReason> {
        self.inner.loss()
    }

    /// Blocks until the lock is lost and says why (to be called from a
    /// watcher thread).
    ///
    /// # Errors
    /// [`Error::BlockingInAsyncContext`] on a thread running async code.
    pub fn wait_lost(&self) -> Result<LossReason, Error> {
        if Handle::try_current().is_ok() {
            return Err(Error::BlockingInAsyncContext);
        }
        Ok(self.runtime.block_on(self.inner.lost()))
    }

    /// Replaces the claim's value; see [`crate::LockGuard::set_value`].
    ///
    /// # Errors
    /// As for [`crate::LockGuard::set_value`], and
    /// [`Error::BlockingInAsyncContext`].
    pub fn set_value(&self, value: impl AsRef<str>) -> Result<(), Error> {
        if Handle::try_current().is_ok() {
            return Err(Error::BlockingInAsyncContext);
        }
        self.runtime.block_on(self.inner.set_value(value))
    }

    /// Releases the lock, waiting until the server has been told.
    ///
    /// # Errors
    /// As for [`crate::LockGuard::release`], and
    /// [`Error::BlockingInAsyncContext`] (the lock is released anyway).
    pub fn release(self) -> Result<(), Error> {
        let Self { inner, runtime } = self;
        if Handle::try_current().is_ok() {
            drop(inner);
            return Err(Error::BlockingInAsyncContext);
        }
        runtime.block_on(inner.release())
    }
}

/// The states of one lock; see [`crate::Observation`]. Each `next`
/// blocks until the next state; the iterator ends after the error that
/// ended the observation.
#[must_use = "dropping an observation ends it"]
pub struct Observation {
    // Dropped first: its UNOBSERVE goes out on the runtime.
    inner: crate::Observation,
    runtime: Arc<Runtime>,
}

impl Iterator for Observation {
    type Item = Result<LockState, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if Handle::try_current().is_ok() {
            return Some(Err(Error::BlockingInAsyncContext));
        }
        self.runtime.block_on(self.inner.next())
    }
}

/// A running election; see [`crate::Election`]. Each `next` blocks until
/// the next event; dropping it stops the election.
#[must_use = "dropping an election stops it"]
pub struct Election {
    // Dropped first: its task is aborted on the runtime.
    inner: crate::Election,
    runtime: Arc<Runtime>,
}

impl Election {
    /// Replaces the candidate's value; see [`crate::Election::set_value`].
    ///
    /// # Errors
    /// As for [`crate::Election::set_value`], and
    /// [`Error::BlockingInAsyncContext`].
    pub fn set_value(&self, value: impl Into<String>) -> Result<(), Error> {
        if Handle::try_current().is_ok() {
            return Err(Error::BlockingInAsyncContext);
        }
        self.runtime.block_on(self.inner.set_value(value))
    }

    /// Stops the election; see [`crate::Election::resign`].
    ///
    /// # Errors
    /// [`Error::BlockingInAsyncContext`] (the election stops anyway once
    /// dropped).
    pub fn resign(&mut self) -> Result<(), Error> {
        if Handle::try_current().is_ok() {
            return Err(Error::BlockingInAsyncContext);
        }
        self.runtime.block_on(self.inner.resign());
        Ok(())
    }
}

impl Iterator for Election {
    type Item = Result<crate::ElectionEvent, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if Handle::try_current().is_ok() {
            return Some(Err(Error::BlockingInAsyncContext));
        }
        self.runtime.block_on(self.inner.next())
    }
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl fmt::Debug for Observation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}
