//! The client: an address, a connector and options.

use std::{fmt, future::Future, sync::Arc, time::Duration};

use monolock_proto::{Lease, LockName};
use tokio::time::timeout;

use crate::{
    connector::{Connection, Connector, TcpConnector},
    error::{Error, LossReason},
    guard::{Enqueued, LockGuard},
    retry::RetryPolicy,
    scoped::{LockContext, Outcome, run_scoped},
    session::{Session, Status},
};

/// How long dialing the server may take.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A monolock client: where the server is and how to reach it.
///
/// Cheap to clone (two reference counts and a few durations); clones share
/// nothing else. Each claim opens its own connection, because on monolock
/// **the connection is the claim**.
///
/// ```
/// use std::time::Duration;
/// use monolock_client::{Client, RetryPolicy};
///
/// let client = Client::new("127.0.0.1:7070")
///     .with_connect_timeout(Duration::from_secs(2))
///     .with_retry_policy(RetryPolicy::new().with_max_attempts(5));
/// assert_eq!(client.addr(), "127.0.0.1:7070");
/// ```
pub struct Client<C = TcpConnector> {
    addr: Arc<str>,
    connector: Arc<C>,
    connect_timeout: Duration,
    retry: RetryPolicy,
}

impl<C> Clone for Client<C> {
    fn clone(&self) -> Self {
        Self {
            addr: self.addr.clone(),
            connector: self.connector.clone(),
            connect_timeout: self.connect_timeout,
            retry: self.retry.clone(),
        }
    }
}

impl<C> fmt::Debug for Client<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("addr", &self.addr)
            .field("connect_timeout", &self.connect_timeout)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

impl Client<TcpConnector> {
    /// A client for the server at `addr` (`host:port`; names are resolved
    /// on every connect), over plain TCP.
    pub fn new(addr: impl Into<String>) -> Self {
        Self {
            addr: Arc::from(addr.into()),
            connector: Arc::new(TcpConnector),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            retry: RetryPolicy::default(),
        }
    }
}

impl<C: Connector> Client<C> {
    /// The same client over another transport (TLS, a test double).
    pub fn with_connector<D: Connector>(self, connector: D) -> Client<D> {
        Client {
            addr: self.addr,
            connector: Arc::new(connector),
            connect_timeout: self.connect_timeout,
            retry: self.retry,
        }
    }

    /// Sets how long dialing may take (default [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the policy of the `*_retrying` methods.
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// The server address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The connect timeout.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The retry policy.
    pub fn retry_policy(&self) -> &RetryPolicy {
        &self.retry
    }

    /// Waits for the lock `name` in its FIFO queue and returns the guard
    /// once the server grants it (promotion is pushed: no polling).
    ///
    /// `lease` is the failure detector, not a work deadline: the guard
    /// heartbeats about four times per lease and may be held for hours. A
    /// shorter lease hands the lock on sooner after a crash or a partition,
    /// at the cost of more heartbeats. It is sent in whole milliseconds.
    ///
    /// # Errors
    /// [`Error::InvalidName`] and [`Error::InvalidLease`] before dialing;
    /// connection failures ([`Error::Connect`], a failed TLS handshake
    /// included); [`Error::Server`] when the server refuses the
    /// claim or ends it while waiting; [`Error::HeartbeatTimeout`] when the
    /// server stops answering.
    ///
    /// # Cancel safety
    /// Dropping the future before it completes closes its connection and
    /// gives its place in the queue up, like dropping a pending
    /// `tokio::sync::Mutex::lock`. A grant that races with the drop is
    /// released at once.
    pub async fn acquire(
        &self,
        name: impl AsRef<str>,
        lease: Duration,
    ) -> Result<LockGuard, Error> {
        match self.enqueue(name, lease).await? {
            Enqueued::Acquired(guard) => Ok(guard),
            Enqueued::Waiting(waiter) => waiter.granted().await,
        }
    }

    /// Takes the lock if it is free; `Ok(None)` if someone holds it (the
    /// server answered WAITING), in which case the connection is closed and
    /// leaves no trace in the queue.
    ///
    /// # Errors
    /// As for [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// As for [`acquire`](Self::acquire).
    pub async fn try_acquire(
        &self,
        name: impl AsRef<str>,
        lease: Duration,
    ) -> Result<Option<LockGuard>, Error> {
        Ok(match self.enqueue(name, lease).await? {
            Enqueued::Acquired(guard) => Some(guard),
            Enqueued::Waiting(_) => None,
        })
    }

    /// Like [`acquire`](Self::acquire), but gives up after `max_wait` in
    /// all (connecting included) with `Ok(None)`: the place in the queue is
    /// given up.
    ///
    /// # Errors
    /// As for [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// As for [`acquire`](Self::acquire).
    pub async fn acquire_timeout(
        &self,
        name: impl AsRef<str>,
        lease: Duration,
        max_wait: Duration,
    ) -> Result<Option<LockGuard>, Error> {
        timeout(max_wait, self.acquire(name, lease))
            .await
            .map_or(Ok(None), |result| result.map(Some))
    }

    /// Like [`acquire`](Self::acquire), retrying temporary failures (server
    /// conditions, connection failures) under the client's
    /// [`RetryPolicy`]. Every retry is a new connection at the back of the
    /// queue.
    ///
    /// # Errors
    /// The first permanent error (invalid input, a client-error code such
    /// as 0x18, a protocol violation), or the last error once the policy's
    /// attempts are used up.
    ///
    /// # Cancel safety
    /// As for [`acquire`](Self::acquire).
    pub async fn acquire_retrying(
        &self,
        name: impl AsRef<str>,
        lease: Duration,
    ) -> Result<LockGuard, Error> {
        let name = LockName::new(name.as_ref())?;
        self.retry.retry(|| self.acquire(&name, lease)).await
    }

    /// Sends the ACQUIRE and returns after the server's first reply: the
    /// lock itself, or a place in its queue to wait on with
    /// [`Waiter::granted`](crate::Waiter::granted).
    ///
    /// # Errors
    /// As for [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// Dropping the future closes its connection; so does dropping the
    /// returned guard or waiter.
    pub async fn enqueue(&self, name: impl AsRef<str>, lease: Duration) -> Result<Enqueued, Error> {
        let name = LockName::new(name.as_ref())?;
        let lease_ms = Lease::from_duration(lease).ok_or(Error::InvalidLease { lease })?;
        let session = Session::start(self.connect().await?, name.clone(), lease_ms);
        let token = session
            .shared()
            .wait_until(|status| match status {
                Status::Held(token) => Some(Some(*token)),
                Status::Waiting => Some(None),
                Status::Unanswered | Status::Lost(_) => None,
            })
            .await
            .map_err(|reason| self.unanswered(reason))?;
        Ok(match token {
            Some(token) => Enqueued::Acquired(LockGuard::new(session, name, token)),
            None => Enqueued::Waiting(crate::Waiter::new(session, name)),
        })
    }

    /// Waits for the lock, runs `work` while holding it, and releases it.
    ///
    /// The work gets a [`LockContext`] with the fencing token and a
    /// cancellation token that is cancelled the moment ownership stops
    /// being confirmed. The work runs on its own task (hence `Send +
    /// 'static`); the result carries its output and, if the lock was lost
    /// before it returned, why — even when the work succeeded.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), monolock_client::Error> {
    /// use std::time::Duration;
    /// use monolock_client::Client;
    ///
    /// let client = Client::new("127.0.0.1:7070");
    /// let outcome = client
    ///     .run_locked("reports/daily", Duration::from_secs(2), |lock| async move {
    ///         tokio::select! {
    ///             () = lock.cancelled() => Err("lock lost; stopped early"),
    ///             () = tokio::time::sleep(Duration::from_secs(30)) => Ok(lock.token()),
    ///         }
    ///     })
    ///     .await?;
    /// if let Some(loss) = &outcome.loss {
    ///     eprintln!("the lock was lost during the work: {loss}");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As for [`acquire`](Self::acquire); the work has not run then.
    /// [`Error::WorkCancelled`] if the runtime cancelled the work's task. A
    /// panic in the work is resumed in the caller.
    ///
    /// # Cancel safety
    /// Dropping the future while it waits gives up the place in the queue.
    /// Dropping it while the work runs cancels the context's token (asking
    /// the work to stop) but keeps the lock, heartbeats included, until the
    /// work actually returns.
    pub async fn run_locked<F, Fut, T>(
        &self,
        name: impl AsRef<str>,
        lease: Duration,
        work: F,
    ) -> Result<Outcome<T>, Error>
    where
        F: FnOnce(LockContext) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        run_scoped(self.acquire(name, lease).await?, work).await
    }

    /// [`run_locked`](Self::run_locked) with the acquire step retried as by
    /// [`acquire_retrying`](Self::acquire_retrying). The work runs at most
    /// once: a loss during the work is reported in the [`Outcome`], never
    /// retried.
    ///
    /// # Errors
    /// As for [`acquire_retrying`](Self::acquire_retrying) and
    /// [`run_locked`](Self::run_locked).
    ///
    /// # Cancel safety
    /// As for [`run_locked`](Self::run_locked).
    pub async fn run_locked_retrying<F, Fut, T>(
        &self,
        name: impl AsRef<str>,
        lease: Duration,
        work: F,
    ) -> Result<Outcome<T>, Error>
    where
        F: FnOnce(LockContext) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        run_scoped(self.acquire_retrying(name, lease).await?, work).await
    }

    /// The error for a claim that ended before the server's first reply.
    /// A TLS alert then is the server refusing the handshake: a failed
    /// connect, not a failed session.
    fn unanswered(&self, reason: LossReason) -> Error {
        #[cfg(feature = "tls")]
        if let LossReason::Io(err) = &reason
            && let Some(source) = crate::tls::refused_handshake(err)
        {
            return Error::Connect {
                addr: self.addr.to_string(),
                source,
            };
        }
        reason.into()
    }

    async fn connect(&self) -> Result<Connection<C::Stream>, Error> {
        match timeout(self.connect_timeout, self.connector.connect(&self.addr)).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(source)) => Err(Error::Connect {
                addr: self.addr.to_string(),
                source,
            }),
            Err(_) => Err(Error::ConnectTimeout {
                addr: self.addr.to_string(),
                timeout: self.connect_timeout,
            }),
        }
    }
}
