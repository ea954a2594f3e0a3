//! The client: an address, a connector and options.

use std::{fmt, future::Future, io, sync::Arc, time::Duration};

use monolock_proto::{ErrorCode, Lease, LockName, v2::Mode};
use tokio::time::timeout;
use tracing::debug;

use crate::{
    connector::{Connection, Connector, TcpConnector},
    error::{
        Error, LossReason, ProtocolViolation, Unsupported, WrongPeer, has_scheme, lease_problem,
    },
    guard::{Claim, Enqueued, LockGuard},
    observe::{Observation, request_error, watch_error},
    retry::RetryPolicy,
    scoped::{LockContext, Outcome, run_scoped},
    session::{Retry, Session, Status},
    state::{LockState, checked_value},
    v2::{
        pool::{MAX_SESSIONS, Pool},
        session::{self as v2_session, RequestFailed, SessionHandle, Starter},
        watch::{Mailbox, WatchEnd},
    },
};

/// How long dialing the server may take.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The lease used when a call passes `None` and the client has no
/// [`with_default_lease`](Client::with_default_lease).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(2);

/// How long [`LockGuard::release`] waits for the server's confirmation
/// (protocol version 2) before it closes the session instead: the server's
/// own default io-timeout.
pub const DEFAULT_IO_TIMEOUT: Duration = Duration::from_secs(5);

/// How many sessions one claim may be offered to before the client gives
/// up: each refusal (a full or closing session) moves it to another.
const MAX_PLACEMENTS: usize = 8;

/// Which version of the protocol a client speaks.
///
/// ```
/// use monolock_client::{Client, Protocol};
///
/// // Behind a TCP proxy that must see one connection per claim:
/// let client = Client::new("127.0.0.1:7070").with_protocol(Protocol::V1);
/// assert_eq!(client.protocol(), Protocol::V1);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Protocol {
    /// Version 2 sessions, many claims per connection (the default). An
    /// address whose server answers the OPEN with ERROR 0x10 (it speaks
    /// version 1 only) is spoken to in version 1, transparently.
    #[default]
    V2,
    /// Version 1 only: one connection per claim, the connection is the
    /// claim. Pick it when something between the client and the server
    /// must see one connection per claim (a TCP proxy or load balancer
    /// that routes or accounts per connection), or when a version 1 server
    /// hides behind a load balancer that may also route to newer ones.
    V1,
}

/// A monolock client: where the server is and how to reach it.
///
/// Cheap to clone (a few reference counts and durations); clones share
/// their sessions. By default the client speaks protocol version 2: one
/// connection per lease in use carries many claims (see [`Protocol`]), and
/// a session the client no longer uses is closed after 20 s without
/// claims. With [`Protocol::V1`] each claim opens its own connection, and
/// **the connection is the claim**.
///
/// Every call takes a lease: a `Duration`, or `None` for the client's
/// default ([`with_default_lease`](Self::with_default_lease), else
/// [`DEFAULT_LEASE`]).
///
/// The address may be a comma-separated list (`"a:7070,b:7070"`): a
/// primary and its standbys. Each new connection tries them in order and
/// moves on when one refuses or times out. A claim lives on exactly one
/// connection, so no address is tried while a claim is alive on another.
///
/// ```
/// use std::time::Duration;
/// use monolock_client::{Client, RetryPolicy};
///
/// let client = Client::new("127.0.0.1:7070,127.0.0.1:7071")
///     .with_connect_timeout(Duration::from_secs(2))
///     .with_default_lease(Duration::from_secs(5))
///     .with_retry_policy(RetryPolicy::new().with_max_attempts(5));
/// assert_eq!(client.addrs().collect::<Vec<_>>(), ["127.0.0.1:7070", "127.0.0.1:7071"]);
/// assert_eq!(client.default_lease(), Duration::from_secs(5));
/// ```
pub struct Client<C = TcpConnector> {
    addr: Arc<str>,
    connector: Arc<C>,
    connect_timeout: Duration,
    io_timeout: Duration,
    default_lease: Duration,
    retry: RetryPolicy,
    protocol: Protocol,
    pool: Arc<Pool>,
}

impl<C> Clone for Client<C> {
    fn clone(&self) -> Self {
        Self {
            addr: self.addr.clone(),
            connector: self.connector.clone(),
            connect_timeout: self.connect_timeout,
            io_timeout: self.io_timeout,
            default_lease: self.default_lease,
            retry: self.retry.clone(),
            protocol: self.protocol,
            pool: self.pool.clone(),
        }
    }
}

impl<C> fmt::Debug for Client<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("addr", &self.addr)
            .field("connect_timeout", &self.connect_timeout)
            .field("io_timeout", &self.io_timeout)
            .field("default_lease", &self.default_lease)
            .field("protocol", &self.protocol)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

impl Client<TcpConnector> {
    /// A client for the server at `addr` (`host:port`, or several
    /// separated by commas, tried in order; names are resolved on every
    /// connect), over plain TCP.
    pub fn new(addr: impl Into<String>) -> Self {
        Self {
            addr: Arc::from(addr.into()),
            connector: Arc::new(TcpConnector),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            io_timeout: DEFAULT_IO_TIMEOUT,
            default_lease: DEFAULT_LEASE,
            retry: RetryPolicy::default(),
            protocol: Protocol::default(),
            pool: Arc::default(),
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
            io_timeout: self.io_timeout,
            default_lease: self.default_lease,
            retry: self.retry,
            protocol: self.protocol,
            // Sessions belong to a transport: a new one starts empty.
            pool: Arc::default(),
        }
    }

    /// Sets the protocol version spoken (default [`Protocol::V2`], which
    /// falls back to version 1 per address). Clones made before keep
    /// theirs; a client with another protocol shares no sessions.
    pub fn with_protocol(mut self, protocol: Protocol) -> Self {
        if protocol != self.protocol {
            self.pool = Arc::default();
        }
        self.protocol = protocol;
        self
    }

    /// The protocol version spoken.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// Sets how long [`LockGuard::release`] waits for the server to confirm
    /// a release (default [`DEFAULT_IO_TIMEOUT`]) before it closes the
    /// session, which releases every claim on it. Keep it well above the
    /// round trip to the server: with a bound shorter than that (zero, say)
    /// every release closes its session, and the other locks on that
    /// session are lost with it.
    pub fn with_io_timeout(mut self, timeout: Duration) -> Self {
        self.io_timeout = timeout;
        self
    }

    /// The I/O timeout.
    pub fn io_timeout(&self) -> Duration {
        self.io_timeout
    }

    /// The same client with sessions of its own (the blocking client's
    /// runtime runs them, not the caller's).
    pub(crate) fn with_own_sessions(mut self) -> Self {
        self.pool = Arc::default();
        self
    }

    /// Protocol version 2 sessions open now (0 with [`Protocol::V1`]), and
    /// the claims each carries: for figures and tests.
    pub fn session_loads(&self) -> Vec<u32> {
        self.pool.loads()
    }

    /// Sets the lease of every call that passes `None` (default
    /// [`DEFAULT_LEASE`]).
    pub fn with_default_lease(mut self, lease: Duration) -> Self {
        self.default_lease = lease;
        self
    }

    /// The lease of calls that pass `None`.
    pub fn default_lease(&self) -> Duration {
        self.default_lease
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

    /// The server address, as given (a comma-separated list if several).
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The server addresses, in the order they are tried.
    pub fn addrs(&self) -> impl Iterator<Item = &str> {
        self.addr
            .split(',')
            .map(str::trim)
            .filter(|addr| !addr.is_empty())
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
    /// `lease` (`None`: the client's default) is the failure detector, not
    /// a work deadline: the guard heartbeats about four times per lease and
    /// may be held for hours. A shorter lease hands the lock on sooner after
    /// a crash or a partition, at the cost of more heartbeats. It must be
    /// 100 ms to 1 hour, in whole milliseconds
    /// ([`MIN_LEASE`](crate::MIN_LEASE), [`MAX_LEASE`](crate::MAX_LEASE)).
    ///
    /// # Errors
    /// [`Error::InvalidName`], [`Error::InvalidLease`] and
    /// [`Error::InvalidAddress`] before dialing; connection failures
    /// ([`Error::Connect`], a failed TLS handshake included);
    /// [`Error::WrongPeer`] when what answered is not a monolock server (an
    /// HTTP port, a TLS mismatch, no answer within the connect timeout);
    /// [`Error::Lost`] when the server refuses the claim or ends it while
    /// waiting ([`LossReason::Server`]), or stops answering
    /// ([`LossReason::HeartbeatTimeout`]).
    ///
    /// # Cancel safety
    /// Dropping the future before it completes gives its place in the
    /// queue up (a RELEASE of the waiting claim; version 1: its connection
    /// closed), like dropping a pending `tokio::sync::Mutex::lock`. A grant
    /// that races with the drop is released at once.
    pub async fn acquire(
        &self,
        name: impl AsRef<str>,
        lease: impl Into<Option<Duration>>,
    ) -> Result<LockGuard, Error> {
        self.acquire_with_value(name, lease, "").await
    }

    /// [`acquire`](Self::acquire), the claim carrying `value`: a short text
    /// chosen by the holder (its `host:port`, a JSON blob), at most
    /// [`MAX_VALUE_LEN`](crate::MAX_VALUE_LEN) bytes, that observers of
    /// the lock are told with the grant ([`observe`](Self::observe),
    /// [`holder`](Self::holder)) and that `monolock locks` shows. An empty
    /// value is no value. Replace it while holding with
    /// [`LockGuard::set_value`]; it is gone when the claim ends.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), monolock_client::Error> {
    /// use std::time::Duration;
    /// use monolock_client::Client;
    ///
    /// let client = Client::new("127.0.0.1:7070");
    /// let lock = client
    ///     .acquire_with_value("service/leader", Duration::from_secs(2), "10.0.0.7:9000")
    ///     .await?;
    /// let holder = client.holder("service/leader").await?;
    /// assert_eq!((holder.token, holder.value.as_str()), (lock.token(), "10.0.0.7:9000"));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As for [`acquire`](Self::acquire); [`Error::InvalidValue`] before
    /// dialing for a value above 1,024 bytes; [`Error::Unsupported`] for a
    /// non-empty value when the server predates lock values (or the client
    /// speaks [`Protocol::V1`]).
    ///
    /// # Cancel safety
    /// As for [`acquire`](Self::acquire).
    pub async fn acquire_with_value(
        &self,
        name: impl AsRef<str>,
        lease: impl Into<Option<Duration>>,
        value: impl AsRef<str>,
    ) -> Result<LockGuard, Error> {
        match self.enqueue_with_value(name, lease, value).await? {
            Enqueued::Acquired(guard) => Ok(guard),
            Enqueued::Waiting(waiter) => waiter.granted().await,
        }
    }

    /// Takes the lock if it is free; `Ok(None)` if someone holds it. Leaves
    /// no trace in the queue: version 2 asks in try-only mode (BUSY);
    /// version 1 leaves the queue the server put it in as a release does
    /// (half-close, then the server's EOF) before it returns.
    ///
    /// # Errors
    /// As for [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// As for [`acquire`](Self::acquire).
    pub async fn try_acquire(
        &self,
        name: impl AsRef<str>,
        lease: impl Into<Option<Duration>>,
    ) -> Result<Option<LockGuard>, Error> {
        self.try_acquire_with_value(name, lease, "").await
    }

    /// [`try_acquire`](Self::try_acquire), the claim carrying `value`
    /// (see [`acquire_with_value`](Self::acquire_with_value)).
    ///
    /// # Errors
    /// As for [`acquire_with_value`](Self::acquire_with_value).
    ///
    /// # Cancel safety
    /// As for [`acquire`](Self::acquire).
    pub async fn try_acquire_with_value(
        &self,
        name: impl AsRef<str>,
        lease: impl Into<Option<Duration>>,
        value: impl AsRef<str>,
    ) -> Result<Option<LockGuard>, Error> {
        let name = LockName::new(name.as_ref())?;
        let value = checked_value(value.as_ref())?;
        Ok(
            match self
                .claim(name, self.lease(lease), Mode::Try, value)
                .await?
            {
                Some(Enqueued::Acquired(guard)) => Some(guard),
                Some(Enqueued::Waiting(_)) | None => None,
            },
        )
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
        lease: impl Into<Option<Duration>>,
        max_wait: Duration,
    ) -> Result<Option<LockGuard>, Error> {
        timeout(max_wait, self.acquire(name, lease))
            .await
            .map_or(Ok(None), |result| result.map(Some))
    }

    /// Like [`acquire`](Self::acquire), retrying temporary failures (server
    /// conditions, connection failures) under the client's
    /// [`RetryPolicy`]. Every retry is a new claim at the back of the
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
        lease: impl Into<Option<Duration>>,
    ) -> Result<LockGuard, Error> {
        let name = LockName::new(name.as_ref())?;
        let lease = self.lease(lease);
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
    /// Dropping the future gives the claim up; so does dropping the
    /// returned guard or waiter.
    pub async fn enqueue(
        &self,
        name: impl AsRef<str>,
        lease: impl Into<Option<Duration>>,
    ) -> Result<Enqueued, Error> {
        self.enqueue_with_value(name, lease, "").await
    }

    /// [`enqueue`](Self::enqueue), the claim carrying `value` (see
    /// [`acquire_with_value`](Self::acquire_with_value)).
    ///
    /// # Errors
    /// As for [`acquire_with_value`](Self::acquire_with_value).
    ///
    /// # Cancel safety
    /// As for [`enqueue`](Self::enqueue).
    pub async fn enqueue_with_value(
        &self,
        name: impl AsRef<str>,
        lease: impl Into<Option<Duration>>,
        value: impl AsRef<str>,
    ) -> Result<Enqueued, Error> {
        let name = LockName::new(name.as_ref())?;
        let value = checked_value(value.as_ref())?;
        let claimed = self
            .claim(name, self.lease(lease), Mode::Wait, value)
            .await?;
        claimed.ok_or_else(|| {
            // A waiting ACQUIRE is never answered BUSY: the exchange refuses
            // that as a protocol violation first.
            Error::Lost(LossReason::ConnectionClosed)
        })
    }

    /// Places one claim and waits for the server's first reply: `None` when
    /// a try-only claim found the lock busy.
    async fn claim(
        &self,
        name: LockName,
        lease: Duration,
        mode: Mode,
        value: Option<&str>,
    ) -> Result<Option<Enqueued>, Error> {
        let lease_ms = check_lease(lease)?;
        self.check_addrs()?;
        if value.is_some() {
            self.check_extension()?;
        }
        for _ in 0..MAX_PLACEMENTS {
            let (session, id, starter) = match self.place(lease_ms, value.is_some()).await? {
                Placement::V1(_, addr) if value.is_some() => {
                    return Err(Unsupported::Server {
                        addr: addr.to_string(),
                    }
                    .into());
                }
                Placement::V1(conn, addr) => {
                    let forced = self.protocol == Protocol::V1;
                    return self
                        .claim_v1(conn, addr, name, lease_ms, mode, forced)
                        .await;
                }
                Placement::V2(session, id) => (session, id, None),
                Placement::New(session, id, starter) => (session, id, Some(starter)),
            };
            let addr = session.addr().clone();
            let new_session = starter.is_some().then(|| session.clone());
            let claim =
                v2_session::Claim::start(session, id, name.clone(), mode, value.map(str::to_owned));
            // Placed before the task starts: the first ACQUIRE goes out in
            // the first write the session may make.
            if let Some(starter) = starter {
                starter.start();
            }
            let first_reply = claim.shared().wait_until(|status| match status {
                Status::Held(token) => Some(Reply::Held(*token)),
                Status::Waiting => Some(Reply::Waiting),
                Status::Busy => Some(Reply::Busy),
                Status::Retry(retry) => Some(Reply::Retry(retry.clone())),
                Status::Unanswered | Status::Released | Status::Lost(_) => None,
            });
            let reply = match timeout(self.connect_timeout, first_reply).await {
                Ok(reply) => reply.map_err(|reason| self.unanswered(reason, &addr))?,
                Err(_) => {
                    // A silent new session is nobody's: close it, so that
                    // no later claim is placed on it.
                    if let Some(session) = new_session {
                        session.close();
                    }
                    return Err(self.silent(&addr));
                }
            };
            let claim = Claim::V2 {
                claim,
                io_timeout: self.io_timeout,
            };
            match reply {
                Reply::Held(token) => {
                    return Ok(Some(Enqueued::Acquired(LockGuard::new(claim, name, token))));
                }
                Reply::Waiting => {
                    return Ok(Some(Enqueued::Waiting(crate::Waiter::new(claim, name))));
                }
                Reply::Busy => return Ok(None),
                Reply::Retry(Retry::V1Only(addr)) => {
                    debug!(%addr, "the server speaks protocol version 1 only");
                    self.pool.remember_v1_only(addr);
                }
                Reply::Retry(Retry::NoExtension(addr)) => {
                    debug!(%addr, "the server lacks lock values and observers");
                    self.pool.remember_plain(addr.clone());
                    if value.is_some() {
                        return Err(Unsupported::Server {
                            addr: addr.to_string(),
                        }
                        .into());
                    }
                }
                Reply::Retry(Retry::Elsewhere) => {}
            }
        }
        Err(too_many_claims())
    }

    /// Refuses, before dialing, what needs values and observers when the
    /// client speaks version 1, or when every address is known to lack
    /// them.
    fn check_extension(&self) -> Result<(), Error> {
        if self.protocol == Protocol::V1 {
            return Err(Unsupported::ProtocolV1.into());
        }
        let mut addrs = self.addrs().peekable();
        let first = addrs.peek().map(|addr| (*addr).to_owned());
        let lacking = addrs.all(|addr| self.pool.is_plain_only(addr) || self.pool.is_v1_only(addr));
        match first {
            Some(addr) if lacking => Err(Unsupported::Server { addr }.into()),
            _ => Ok(()),
        }
    }

    /// Refuses an address written with a scheme, before dialing.
    fn check_addrs(&self) -> Result<(), Error> {
        match self.addrs().find(|addr| has_scheme(addr)) {
            Some(addr) => Err(Error::InvalidAddress {
                addr: addr.to_owned(),
            }),
            None => Ok(()),
        }
    }

    /// Observes the lock `name` without claiming it: the stream yields its
    /// state when the server registered the watch (`initial`), then one
    /// state per change (granted, value replaced, released with its
    /// reason), **in token order**: never an older holder after a newer
    /// one. A reader that falls behind is told the state now, flagged
    /// `coalesced`, instead of every change. What it names is advisory:
    /// find the holder with it (its value), fence writes with the token.
    ///
    /// The stream implements `futures_core::Stream`; [`Observation::next`]
    /// reads it without any extension trait. Dropping it ends the watch.
    /// It ends with [`Error::ObservationEnded`] when its session ends (the
    /// server shut down, the connection failed): observe again.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), monolock_client::Error> {
    /// use monolock_client::Client;
    ///
    /// let client = Client::new("127.0.0.1:7070");
    /// let mut leader = client.observe("service/leader").await?;
    /// while let Some(state) = leader.next().await {
    ///     let state = state?;
    ///     if state.held {
    ///         println!("leader is {} (token {})", state.value, state.token);
    ///     } else {
    ///         println!("no leader right now");
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidName`] and [`Error::InvalidAddress`] before dialing;
    /// connection failures as for [`acquire`](Self::acquire);
    /// [`Error::Unsupported`] when the server predates observers (or the
    /// client speaks [`Protocol::V1`]); [`Error::Lost`] with the server's
    /// code when it refuses the watch (its bounds, the ACL).
    ///
    /// # Cancel safety
    /// Dropping the future ends the watch, if it was placed.
    pub async fn observe(&self, name: impl AsRef<str>) -> Result<Observation, Error> {
        let name = LockName::new(name.as_ref())?;
        for _ in 0..MAX_PLACEMENTS {
            let (session, watch, starter) = self.extended_session(true).await?;
            let Some(watch) = watch else {
                continue;
            };
            let mailbox = Arc::new(Mailbox::new());
            session.observe(watch, name.clone(), mailbox.clone());
            if let Some(starter) = starter {
                starter.start();
            }
            let addr = session.addr().clone();
            let observation = Observation::new(name.clone(), session, watch, mailbox);
            let opened = std::future::poll_fn(|cx| observation.mailbox().poll_opened(cx));
            match timeout(self.connect_timeout, opened).await {
                Ok(Ok(())) => return Ok(observation),
                Ok(Err(WatchEnd::Retry)) => {}
                Ok(Err(end)) => return Err(watch_error(&name, end, &addr)),
                Err(_) => return Err(self.silent(&addr)),
            }
        }
        Err(too_many_claims())
    }

    /// Campaigns for leadership of `name` in the background, in the shape
    /// of client-go's `leaderelection`: waits in the lock's FIFO queue with
    /// `value` (this candidate's address, say), holds the lock while it
    /// leads, campaigns again after a loss, and observes the lock to name
    /// every new leader. See [`Election`](crate::Election) and
    /// [`ElectionEvent`](crate::ElectionEvent).
    ///
    /// ```no_run
    /// # async fn serve_as_leader(_token: u64) {}
    /// # async fn demo() -> Result<(), monolock_client::Error> {
    /// use std::time::Duration;
    /// use monolock_client::{Client, ElectionEvent};
    ///
    /// let client = Client::new("127.0.0.1:7070");
    /// let mut election = client.elect("service/leader", Duration::from_secs(2), "10.0.0.7:9000")?;
    /// while let Some(event) = election.next().await {
    ///     match event? {
    ///         ElectionEvent::StartedLeading(term) => {
    ///             tokio::select! {
    ///                 () = serve_as_leader(term.token()) => {}
    ///                 () = term.ended() => {} // lost: StoppedLeading follows
    ///             }
    ///         }
    ///         ElectionEvent::StoppedLeading => println!("no longer leading"),
    ///         ElectionEvent::NewLeader(leader) => println!("forward writes to {}", leader.value),
    ///         _ => {}
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidName`], [`Error::InvalidLease`],
    /// [`Error::InvalidValue`] and [`Error::InvalidAddress`] at once, and
    /// [`Error::Unsupported`] when the client speaks version 1 (or the
    /// address is known to lack observers); later failures come through
    /// the election's stream.
    ///
    /// # Panics
    /// Outside a tokio runtime (the election runs on a task of its own).
    pub fn elect(
        &self,
        name: impl AsRef<str>,
        lease: impl Into<Option<Duration>>,
        value: impl Into<String>,
    ) -> Result<crate::Election, Error> {
        let name = LockName::new(name.as_ref())?;
        let lease = self.lease(lease);
        check_lease(lease)?;
        let value = value.into();
        checked_value(&value)?;
        self.check_addrs()?;
        // An election observes its lock: nothing to start without that.
        self.check_extension()?;
        Ok(crate::election::start(
            self.clone(),
            name.as_str().to_owned(),
            lease,
            value,
        ))
    }

    /// Who holds the lock `name` now, asked once (no watch is left
    /// behind): a state with event `Free` or `Held`, the holder's token
    /// and value. Advisory, as [`observe`](Self::observe)'s states.
    ///
    /// # Errors
    /// As for [`observe`](Self::observe).
    ///
    /// # Cancel safety
    /// Dropping the future drops the answer; nothing else changes.
    pub async fn holder(&self, name: impl AsRef<str>) -> Result<LockState, Error> {
        let name = LockName::new(name.as_ref())?;
        for _ in 0..MAX_PLACEMENTS {
            let (session, _, starter) = self.extended_session(false).await?;
            let answer = session.lookup(name.clone());
            if let Some(starter) = starter {
                starter.start();
            }
            let addr = session.addr().clone();
            match timeout(self.connect_timeout, answer).await {
                Ok(Ok(Ok(state))) => return Ok(state),
                Ok(Ok(Err(RequestFailed::Retry))) | Ok(Err(_)) => {}
                Ok(Ok(Err(failed))) => return Err(request_error(failed, &addr)),
                Err(_) => return Err(self.silent(&addr)),
            }
        }
        Err(too_many_claims())
    }

    /// A session that has (or may have) the extension, for a watch (with
    /// its id) or a lookup: a live one, else a new one of the default
    /// lease.
    async fn extended_session(
        &self,
        watch: bool,
    ) -> Result<(Arc<SessionHandle>, Option<u32>, Option<Starter<C::Stream>>), Error> {
        self.check_addrs()?;
        self.check_extension()?;
        let lease = check_lease(self.default_lease)?;
        if let Some((session, id)) = self.pool.pick_extended(watch) {
            return Ok((session, id, None));
        }
        let _opening = self.pool.opening.lock().await;
        if let Some((session, id)) = self.pool.pick_extended(watch) {
            return Ok((session, id, None));
        }
        if self.pool.open_sessions() >= MAX_SESSIONS {
            return Err(too_many_claims());
        }
        let (conn, addr) = self.connect().await?;
        if self.pool.is_v1_only(&addr) || self.pool.is_plain_only(&addr) {
            return Err(Unsupported::Server {
                addr: addr.to_string(),
            }
            .into());
        }
        let (session, starter) =
            SessionHandle::new(conn, addr, lease, true, Arc::downgrade(&self.pool));
        let id = if watch {
            Some(session.take_watch_slot().ok_or_else(too_many_claims)?)
        } else {
            None
        };
        self.pool.insert(session.clone());
        Ok((session, id, Some(starter)))
    }

    /// A claim on its own version 1 connection: `None` when a try-only
    /// claim found the lock held. Version 1 has no try-only mode: the
    /// server queues the claim (WAITING), and the client leaves the queue
    /// as it releases, half-closing and reading until the server's EOF, so
    /// that no trace of it is left when this returns.
    async fn claim_v1<S: crate::connector::Transport>(
        &self,
        conn: Connection<S>,
        addr: Arc<str>,
        name: LockName,
        lease: Lease,
        mode: Mode,
        forced: bool,
    ) -> Result<Option<Enqueued>, Error> {
        let unsupported = if forced {
            Unsupported::ProtocolV1
        } else {
            Unsupported::Server {
                addr: addr.to_string(),
            }
        };
        let mut session = Session::start(conn, name.clone(), lease, self.io_timeout);
        let first_reply = session.shared().wait_until(|status| match status {
            Status::Held(token) => Some(Some(*token)),
            Status::Waiting => Some(None),
            _ => None,
        });
        let token = match timeout(self.connect_timeout, first_reply).await {
            Ok(token) => token.map_err(|reason| self.unanswered(reason, &addr))?,
            Err(_) => return Err(self.silent(&addr)),
        };
        if token.is_none() && mode == Mode::Try {
            // Whether or not the server confirmed it, the claim is gone
            // for this caller; the busy answer stands.
            if let Err(err) = session.release().await {
                debug!(error = %err, "leaving the queue after a busy try was not confirmed");
            }
            return Ok(None);
        }
        let claim = Claim::V1(session, unsupported);
        Ok(Some(match token {
            Some(token) => Enqueued::Acquired(LockGuard::new(claim, name, token)),
            None => Enqueued::Waiting(crate::Waiter::new(claim, name)),
        }))
    }

    /// Where a new claim goes: a session with room for it (opened if
    /// need be), or its own connection when the client speaks version 1 or
    /// the address does.
    ///
    /// `extension`: the claim needs values and observers (a value).
    async fn place(&self, lease: Lease, extension: bool) -> Result<Placement<C::Stream>, Error> {
        if self.protocol == Protocol::V1 {
            let (conn, addr) = self.connect().await?;
            return Ok(Placement::V1(conn, addr));
        }
        if let Some((session, id)) = self.pool.pick(lease, extension) {
            return Ok(Placement::V2(session, id));
        }
        // Every address speaks version 1: no session to share or open.
        if self.addrs().all(|addr| self.pool.is_v1_only(addr)) {
            let (conn, addr) = self.connect().await?;
            if self.pool.is_v1_only(&addr) {
                return Ok(Placement::V1(conn, addr));
            }
            return self.open_session(conn, addr, lease);
        }
        let _opening = self.pool.opening.lock().await;
        if let Some((session, id)) = self.pool.pick(lease, extension) {
            return Ok(Placement::V2(session, id));
        }
        if self.pool.open_sessions() >= MAX_SESSIONS {
            return Err(too_many_claims());
        }
        let (conn, addr) = self.connect().await?;
        if self.pool.is_v1_only(&addr) {
            return Ok(Placement::V1(conn, addr));
        }
        self.open_session(conn, addr, lease)
    }

    /// A new session over `conn`, asking for the extension unless `addr`
    /// is known to lack it.
    fn open_session(
        &self,
        conn: Connection<C::Stream>,
        addr: Arc<str>,
        lease: Lease,
    ) -> Result<Placement<C::Stream>, Error> {
        let hello = !self.pool.is_plain_only(&addr);
        let (session, starter) =
            SessionHandle::new(conn, addr, lease, hello, Arc::downgrade(&self.pool));
        let id = session.take_slot().ok_or_else(too_many_claims)?;
        self.pool.insert(session.clone());
        Ok(Placement::New(session, id, starter))
    }

    /// Waits for the lock, runs `work` while holding it, and releases it.
    ///
    /// The work gets a [`LockContext`] with the fencing token and a
    /// cancellation token that is cancelled the moment ownership stops
    /// being confirmed. The work runs in this future, so it may borrow
    /// local state (no `Send` or `'static` needed); heartbeats run on their
    /// own task meanwhile. The result carries its output and, if the lock
    /// was lost before it returned, why — even when the work succeeded.
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
    ///
    /// # Cancel safety
    /// Dropping the future while it waits gives up the place in the queue.
    /// Dropping it while the work runs drops the work first and then
    /// releases the lock: nothing of the work runs after the release.
    pub async fn run_locked<F, Fut, T>(
        &self,
        name: impl AsRef<str>,
        lease: impl Into<Option<Duration>>,
        work: F,
    ) -> Result<Outcome<T>, Error>
    where
        F: FnOnce(LockContext) -> Fut,
        Fut: Future<Output = T>,
    {
        Ok(run_scoped(self.acquire(name, lease).await?, work).await)
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
        lease: impl Into<Option<Duration>>,
        work: F,
    ) -> Result<Outcome<T>, Error>
    where
        F: FnOnce(LockContext) -> Fut,
        Fut: Future<Output = T>,
    {
        Ok(run_scoped(self.acquire_retrying(name, lease).await?, work).await)
    }

    fn lease(&self, lease: impl Into<Option<Duration>>) -> Duration {
        lease.into().unwrap_or(self.default_lease)
    }

    /// The error for a claim that ended before the server's first reply
    /// from `addr`: nothing was held, so what is a connect failure is
    /// reported as one, never as a loss. A TLS alert then is the server
    /// refusing the handshake; the first bytes of HTTP or TLS show the
    /// wrong port; a deadline that ran out unanswered is a silent peer.
    fn unanswered(&self, reason: LossReason, addr: &str) -> Error {
        #[cfg(feature = "tls")]
        if let LossReason::Io(err) = &reason
            && let Some(source) = crate::tls::refused_handshake(err)
        {
            return Error::Connect {
                addr: addr.to_owned(),
                source,
            };
        }
        let problem = match &reason {
            LossReason::ProtocolViolation(ProtocolViolation::HttpServer) => WrongPeer::Http,
            LossReason::ProtocolViolation(ProtocolViolation::TlsServer) => WrongPeer::ExpectsTls,
            LossReason::HeartbeatTimeout { lease } => WrongPeer::Silent {
                within: *lease * 4 / 5,
            },
            _ => return reason.into(),
        };
        Error::WrongPeer {
            addr: addr.to_owned(),
            problem,
        }
    }

    /// The error for a connection accepted at `addr` that gave no first
    /// reply within the connect timeout.
    fn silent(&self, addr: &str) -> Error {
        Error::WrongPeer {
            addr: addr.to_owned(),
            problem: WrongPeer::Silent {
                within: self.connect_timeout,
            },
        }
    }

    /// Dials the addresses in order until one answers; the last failure
    /// if none does. A permanent failure (a malformed address, a
    /// certificate the client cannot accept) stops at once: the next
    /// address is tried only when this one refused or timed out.
    async fn connect(&self) -> Result<(Connection<C::Stream>, Arc<str>), Error> {
        let mut last = None;
        for addr in self.addrs() {
            let err = match timeout(self.connect_timeout, self.connector.connect(addr)).await {
                Ok(Ok(conn)) => return Ok((conn, Arc::from(addr))),
                #[cfg(feature = "tls")]
                Ok(Err(source)) if crate::tls::answered_in_plain_text(&source) => {
                    Error::WrongPeer {
                        addr: addr.to_owned(),
                        problem: WrongPeer::NoTls,
                    }
                }
                Ok(Err(source)) => Error::Connect {
                    addr: addr.to_owned(),
                    source,
                },
                Err(_) => Error::ConnectTimeout {
                    addr: addr.to_owned(),
                    timeout: self.connect_timeout,
                },
            };
            // Tried anew: a server that answers again may be another one.
            self.pool.forget(addr);
            if !err.is_temporary() {
                return Err(err);
            }
            debug!(error = %err, "trying the next address");
            last = Some(err);
        }
        Err(last.unwrap_or_else(|| Error::Connect {
            addr: self.addr.to_string(),
            source: io::Error::new(io::ErrorKind::InvalidInput, "no server address given"),
        }))
    }
}

/// Where a claim goes.
enum Placement<S> {
    /// Its own version 1 connection, to this address.
    V1(Connection<S>, Arc<str>),
    /// This session, under this claim id.
    V2(Arc<SessionHandle>, u32),
    /// A new session, under this claim id; its task starts once the claim
    /// is placed.
    New(Arc<SessionHandle>, u32, Starter<S>),
}

/// The lease on the wire, or why the client refuses it (checked before
/// dialing).
fn check_lease(lease: Duration) -> Result<Lease, Error> {
    if lease_problem(lease).is_some() {
        return Err(Error::InvalidLease { lease });
    }
    Lease::from_duration(lease).ok_or(Error::InvalidLease { lease })
}

/// The first reply to a version 2 claim, as the caller needs it.
enum Reply {
    Held(u64),
    Waiting,
    Busy,
    Retry(Retry),
}

/// No session could take one more claim: the client's bound on sessions
/// times the server's bound on claims per session. A server condition:
/// it passes when claims end.
fn too_many_claims() -> Error {
    Error::Lost(LossReason::Server {
        code: ErrorCode::TOO_MANY_CLAIMS,
        reason: format!(
            "every session is at its claim bound ({MAX_SESSIONS} sessions at most per client)"
        ),
    })
}
