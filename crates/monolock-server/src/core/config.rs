//! Server settings. Defaults are named constants next to the type.

use std::{sync::Arc, time::Duration};

use monolock_proto::LockName;

use crate::core::{clock::WallClock, events::Observer, token_floor::TokenFloor};

/// Decides whether an identity may claim a lock (the ACL).
///
/// Called once per ACQUIRE, after the frame is validated. Implementations
/// that can be reloaded swap their rules internally; a session already
/// admitted is never re-checked.
pub trait Authorizer: Send + Sync + 'static {
    /// True if `identity` (empty without mTLS) may claim `lock`.
    fn allows(&self, identity: &str, lock: &LockName) -> bool;
}

/// The reason of an ACL refusal, naming the lock and the identity (quoted
/// and escaped, so a control character in either is shown, not sent raw).
/// The lock comes first: a reason is cut at 255 bytes on the wire.
pub(crate) fn refusal(identity: &str, lock: &str) -> String {
    if identity.is_empty() {
        format!("lock {lock:?} is not allowed without a client identity")
    } else {
        format!("lock {lock:?} is not allowed for identity {identity:?}")
    }
}

/// TLS (or mTLS) on the protocol port, as the accept loop needs it: an
/// acceptor for each new connection, and the identity a client
/// certificate carries. `ServerTls` (the operations side: files,
/// reloading, the identity rules) implements it.
pub trait ProtocolTls: Send + Sync + std::fmt::Debug + 'static {
    /// The acceptor for the next connection (a reload swaps what it
    /// returns; connections already accepted keep theirs).
    fn acceptor(&self) -> tokio_rustls::TlsAcceptor;

    /// The identity of the client certificate `der` (its leaf), or empty
    /// if it names none.
    fn identity_of_certificate(&self, der: &[u8]) -> String;
}

/// Default for [`ServerConfig::io_timeout`].
pub const DEFAULT_IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Default for [`ServerConfig::max_claims_per_session`] (protocol v2).
pub const DEFAULT_MAX_CLAIMS_PER_SESSION: u32 = monolock_proto::v2::DEFAULT_MAX_CLAIMS;

/// Default for [`ServerConfig::idle_timeout`] (protocol v2).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Default for [`ServerConfig::max_watches_per_session`] (the version 2
/// extension, values and observers).
pub const DEFAULT_MAX_WATCHES_PER_SESSION: u32 = monolock_proto::ext::DEFAULT_MAX_WATCHES;

/// Default for [`ServerConfig::max_watches`].
pub const DEFAULT_MAX_WATCHES: usize = 100_000;

/// Default for [`ServerConfig::max_claims`]: a million claims of the
/// longest names take about a gigabyte (docs/operations.md, "Limits").
pub const DEFAULT_MAX_CLAIMS: usize = 1_000_000;

/// How long a connection is drained after an ERROR frame (write side shut
/// down, input discarded) before it is closed, so the ERROR is not lost to a
/// reset when unread input remains.
pub const ERROR_DRAIN_TIMEOUT: Duration = Duration::from_millis(500);

/// Everything the lock service needs besides its listener.
///
/// ```
/// use std::time::Duration;
/// let config = monolock_server::ServerConfig::default().with_io_timeout(Duration::from_secs(2));
/// assert_eq!(config.io_timeout, Duration::from_secs(2));
/// ```
#[derive(Clone)]
pub struct ServerConfig {
    /// The server's one I/O policy: bound on the first ACQUIRE after accept,
    /// on a started frame, and on every write.
    pub io_timeout: Duration,
    /// The wall clock read for token epochs (injectable for tests).
    pub wall_clock: Arc<dyn WallClock>,
    /// Receives ownership and connection events (audit, metrics).
    pub observer: Arc<dyn Observer>,
    /// The ACL; `None` allows every lock.
    pub authorizer: Option<Arc<dyn Authorizer>>,
    /// TLS (or mTLS) on the protocol port; `None` serves plaintext.
    pub tls: Option<Arc<dyn ProtocolTls>>,
    /// The token floor file, through which tokens survive a restart on a
    /// clock that stepped back; `None` keeps tokens in memory only.
    pub token_floor: Option<Arc<TokenFloor>>,
    /// How long after start nothing is granted: sessions are accepted,
    /// queued in FIFO order and answered WAITING. A standby started with a
    /// grace at least as long as the longest lease in use grants nothing
    /// before every holder of the failed primary has given up its claim.
    pub startup_grace: Duration,
    /// Protocol v2: the most claims (held or waiting) one session may have
    /// at once; one more ACQUIRE is refused (REFUSED 0x09), the session
    /// lives on.
    pub max_claims_per_session: u32,
    /// Protocol v2: how long a session may stay open with no claim before
    /// it is closed (ERROR 0x03). [`Duration::MAX`] never closes one
    /// (`--idle-timeout 0`).
    pub idle_timeout: Duration,
    /// The most protocol connections open at once (with or without a
    /// session); one more is told ERROR 0x04 and closed at once.
    pub max_connections: usize,
    /// The most claims, held and waiting, over all sessions of both
    /// protocol versions; one more ACQUIRE is refused with code 0x0a
    /// (REFUSED in v2, where the session lives on; ERROR in v1).
    pub max_claims: usize,
    /// Protocol v2 extension: the most watches one session may have at
    /// once (announced in FEATURES); one more OBSERVE is refused (REFUSED
    /// 0x0b), the session lives on.
    pub max_watches_per_session: u32,
    /// The most watches over all sessions; one more OBSERVE is refused
    /// with code 0x0c.
    pub max_watches: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            io_timeout: DEFAULT_IO_TIMEOUT,
            wall_clock: Arc::new(crate::core::clock::SystemWallClock),
            observer: Arc::new(crate::core::events::NoopObserver),
            authorizer: None,
            tls: None,
            token_floor: None,
            startup_grace: Duration::ZERO,
            max_claims_per_session: DEFAULT_MAX_CLAIMS_PER_SESSION,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: crate::core::admission::DEFAULT_MAX_CONNECTIONS,
            max_claims: DEFAULT_MAX_CLAIMS,
            max_watches_per_session: DEFAULT_MAX_WATCHES_PER_SESSION,
            max_watches: DEFAULT_MAX_WATCHES,
        }
    }
}

impl ServerConfig {
    /// Sets [`ServerConfig::io_timeout`].
    #[must_use]
    pub fn with_io_timeout(mut self, io_timeout: Duration) -> Self {
        self.io_timeout = io_timeout;
        self
    }

    /// Sets [`ServerConfig::wall_clock`].
    #[must_use]
    pub fn with_wall_clock(mut self, clock: Arc<dyn WallClock>) -> Self {
        self.wall_clock = clock;
        self
    }

    /// Sets [`ServerConfig::authorizer`].
    #[must_use]
    pub fn with_authorizer(mut self, authorizer: Arc<dyn Authorizer>) -> Self {
        self.authorizer = Some(authorizer);
        self
    }

    /// Sets [`ServerConfig::observer`].
    #[must_use]
    pub fn with_observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = observer;
        self
    }

    /// Sets [`ServerConfig::token_floor`].
    #[must_use]
    pub fn with_token_floor(mut self, floor: Arc<TokenFloor>) -> Self {
        self.token_floor = Some(floor);
        self
    }

    /// Sets [`ServerConfig::startup_grace`].
    #[must_use]
    pub fn with_startup_grace(mut self, grace: Duration) -> Self {
        self.startup_grace = grace;
        self
    }

    /// Sets [`ServerConfig::max_claims_per_session`].
    #[must_use]
    pub fn with_max_claims_per_session(mut self, max: u32) -> Self {
        self.max_claims_per_session = max;
        self
    }

    /// Sets [`ServerConfig::idle_timeout`].
    #[must_use]
    pub fn with_idle_timeout(mut self, idle_timeout: Duration) -> Self {
        self.idle_timeout = idle_timeout;
        self
    }

    /// Sets [`ServerConfig::max_connections`].
    #[must_use]
    pub fn with_max_connections(mut self, max: usize) -> Self {
        self.max_connections = max;
        self
    }

    /// Sets [`ServerConfig::max_claims`].
    #[must_use]
    pub fn with_max_claims(mut self, max: usize) -> Self {
        self.max_claims = max;
        self
    }

    /// Sets [`ServerConfig::max_watches_per_session`].
    #[must_use]
    pub fn with_max_watches_per_session(mut self, max: u32) -> Self {
        self.max_watches_per_session = max;
        self
    }

    /// Sets [`ServerConfig::max_watches`].
    #[must_use]
    pub fn with_max_watches(mut self, max: usize) -> Self {
        self.max_watches = max;
        self
    }

    /// Sets [`ServerConfig::tls`].
    #[must_use]
    pub fn with_tls(mut self, tls: Arc<dyn ProtocolTls>) -> Self {
        self.tls = Some(tls);
        self
    }
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("io_timeout", &self.io_timeout)
            .field("tls", &self.tls)
            .field("acl", &self.authorizer.is_some())
            .field("token_floor", &self.token_floor)
            .field("startup_grace", &self.startup_grace)
            .field("max_claims_per_session", &self.max_claims_per_session)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_connections", &self.max_connections)
            .field("max_claims", &self.max_claims)
            .field("max_watches_per_session", &self.max_watches_per_session)
            .field("max_watches", &self.max_watches)
            .finish_non_exhaustive()
    }
}
