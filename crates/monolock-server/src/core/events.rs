//! What the server tells its observers (audit log, metrics, tests).

use std::{net::SocketAddr, sync::Arc, time::Duration, time::SystemTime};

use monolock_proto::{ErrorCode, Lease, LockName};

/// Who a session is: fixed from its ACQUIRE to its end.
///
/// For protocol version 2 this is one claim of a session: every claim has
/// its own, with [`SessionInfo::claim`] naming the session and the claim.
#[derive(Clone, Debug)]
pub struct SessionInfo {
    /// The lock it claims.
    pub lock: LockName,
    /// Its lease.
    pub lease: Lease,
    /// The client's address as the server sees it.
    pub remote_addr: SocketAddr,
    /// The mTLS identity, or empty.
    pub identity: Arc<str>,
    /// Wall-clock time of its valid ACQUIRE.
    pub queued_at: SystemTime,
    /// For a claim of a protocol version 2 session: the session's id and
    /// the claim's. `None` for a version 1 session (the connection is the
    /// claim).
    pub claim: Option<ClaimRef>,
}

/// Which version 2 claim an event, a holder or a waiter is: the session's
/// id (the server's, from OPENED, unique for the process's life) and the
/// claim id (the client's). Plain data, copied into every record of the
/// claim without allocating.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClaimRef {
    /// The server's id for the session.
    pub session: u64,
    /// The claim id the client chose.
    pub claim: u32,
}

impl SessionInfo {
    /// The protocol version the session speaks: 1, or 2 for a claim of a
    /// version 2 session.
    pub fn protocol(&self) -> u8 {
        if self.claim.is_some() { 2 } else { 1 }
    }
}

/// Why a holder stopped holding. The names are the audit log's `reason`s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReleaseReason {
    /// The client closed its connection.
    Graceful,
    /// The client was silent for longer than its lease.
    Expired,
    /// A write to the client did not complete within io-timeout.
    IoTimeout,
    /// An administrator force-released the lock.
    Force,
    /// The server shut down.
    Shutdown,
    /// The holder sent a bad frame.
    ProtocolError,
}

impl ReleaseReason {
    /// Every reason, for metrics that must show all of them from startup.
    pub const ALL: [Self; 6] = [
        Self::Graceful,
        Self::Expired,
        Self::IoTimeout,
        Self::Force,
        Self::Shutdown,
        Self::ProtocolError,
    ];

    /// The reason's name in the audit log and metric labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Graceful => "graceful",
            Self::Expired => "expired",
            Self::IoTimeout => "io_timeout",
            Self::Force => "force",
            Self::Shutdown => "shutdown",
            Self::ProtocolError => "protocol_error",
        }
    }
}

/// Why the server ended a connection on its own while its client may
/// still count on its held claims (they are kept until its lease would
/// have run out). The names are the metric's `cause` labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ServerEnding {
    /// A write to the client blocked past io-timeout (it does not read).
    WriteTimeout,
    /// A frame the client started was not completed within io-timeout.
    ReadTimeout,
    /// The client sent a bad frame.
    ProtocolError,
}

impl ServerEnding {
    /// Every cause, for metrics that must show all of them from startup.
    pub const ALL: [Self; 3] = [Self::WriteTimeout, Self::ReadTimeout, Self::ProtocolError];

    /// The cause's name in metric labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::WriteTimeout => "write_io_timeout",
            Self::ReadTimeout => "read_io_timeout",
            Self::ProtocolError => "protocol_error",
        }
    }

    /// The reason the kept claims' releases carry.
    pub const fn release_reason(self) -> ReleaseReason {
        match self {
            Self::WriteTimeout | Self::ReadTimeout => ReleaseReason::IoTimeout,
            Self::ProtocolError => ReleaseReason::ProtocolError,
        }
    }
}

/// Something that happened in the server.
///
/// Ownership events (`Granted`, `Released`, `ForceRelease`, `KickWaiter`)
/// are delivered while the lock table is locked, in the order they took
/// effect: for one lock, a `Released` always comes before the next
/// `Granted`. Observers must therefore be quick and must not block (count,
/// or push into a channel).
#[derive(Debug)]
pub enum Event<'a> {
    /// A connection was accepted.
    Accepted,
    /// `accept` failed (e.g. out of descriptors); the server backs off.
    AcceptFailed(&'a std::io::Error),
    /// A TLS handshake failed or did not complete within io-timeout of
    /// accept (the connection is closed; no other connection is affected).
    TlsHandshakeFailed,
    /// A connection over `--max-connections` was refused at once (ERROR
    /// 0x04, then closed); it was never counted as accepted.
    ConnectionRefused,
    /// A connection that had not sent a whole first frame was closed to
    /// free its descriptor (the server ran out of them).
    ConnectionShed,
    /// A claim was refused because the server holds `--max-claims` claims.
    ClaimLimitRefused,
    /// A connection ended (with or without a session).
    Closed,
    /// A session received this many heartbeats in one read.
    Heartbeats(u64),
    /// An ERROR frame with this code is being sent.
    ErrorSent(ErrorCode),
    /// The ACL refused an ACQUIRE.
    Denied(&'a SessionInfo),
    /// A session was granted its lock.
    Granted {
        /// The new holder.
        session: &'a SessionInfo,
        /// The fencing token of the grant.
        token: u64,
        /// Time from its ACQUIRE to this grant.
        wait: Duration,
        /// True when the holder came from the lock's queue (its
        /// `WaiterJoined` came earlier, and no `WaiterLeft` follows).
        queued: bool,
        /// The value its claim carries (empty: none).
        value: &'a str,
    },
    /// A holder replaced the value of its claim (PROCLAIM).
    ValueReplaced {
        /// The holder.
        session: &'a SessionInfo,
        /// The token it holds.
        token: u64,
        /// The new value (empty: none).
        value: &'a str,
    },
    /// A holder stopped holding.
    Released {
        /// The former holder.
        session: &'a SessionInfo,
        /// The token it held.
        token: u64,
        /// How long it held.
        held: Duration,
        /// Why.
        reason: ReleaseReason,
    },
    /// The server closed a holder's connection on its own (a write blocked
    /// past io-timeout, a started frame not completed within io-timeout, a
    /// bad frame). The lock stays held by it for `release_in` more, until
    /// its lease would have run out; then its `Released`, with `reason`,
    /// follows (or earlier, with reason `Force` or `Shutdown`, if an
    /// administrator or a shutdown releases it first).
    EndedByServer {
        /// The holder whose connection was closed.
        session: &'a SessionInfo,
        /// The token it holds.
        token: u64,
        /// Why the server closed it: the reason its release will carry.
        reason: ReleaseReason,
        /// How long the lock stays held: until the session's last frame
        /// plus its lease.
        release_in: Duration,
    },
    /// The server ended a session's connection on its own, once per
    /// connection (its held claims, if any, each have their
    /// `EndedByServer`).
    ConnectionEndedByServer {
        /// Why.
        cause: ServerEnding,
        /// Claims it held, kept until its lease would have run out.
        kept_claims: usize,
    },
    /// An administrator force-released a holder (its `Released` with reason
    /// `Force` comes right before this).
    ForceRelease {
        /// The former holder.
        session: &'a SessionInfo,
        /// The token it held.
        token: u64,
    },
    /// An administrator removed a waiter from a queue.
    KickWaiter(&'a SessionInfo),
    /// A waiter left its queue without being granted (closed, expired, kicked,
    /// shutdown).
    WaiterLeft(&'a SessionInfo),
    /// A waiter joined a queue.
    WaiterJoined(&'a SessionInfo),
    /// A protocol v2 session with no claims was closed (idle timeout, or
    /// descriptors ran out).
    IdleSessionClosed,
    /// A protocol v2 session was opened (its OPEN was read).
    SessionOpened,
    /// Watches were registered (positive) or ended (negative).
    WatchesChanged(i64),
    /// An OBSERVE was refused at a bound.
    WatchRefused(WatchBound),
    /// A session wrote this many STATE pushes, of which `coalesced` were
    /// flagged COALESCED (changes of their watch were dropped).
    StatePushes {
        /// STATE frames written (every flag).
        pushed: u64,
        /// Of which COALESCED.
        coalesced: u64,
    },
}

/// Which bound refused a watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WatchBound {
    /// The session's (`--max-watches-per-session`, REFUSED 0x0b).
    Session,
    /// The server's (`--max-watches`, REFUSED 0x0c).
    Server,
}

impl WatchBound {
    /// Both bounds, for metrics that show each from startup.
    pub const ALL: [Self; 2] = [Self::Session, Self::Server];

    /// The bound's name in metric labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Session => "session",
            Self::Server => "server",
        }
    }
}

/// Receives [`Event`]s. See [`Event`] for the rules an observer must follow.
pub trait Observer: Send + Sync + 'static {
    /// Called for every event.
    fn observe(&self, event: &Event<'_>);
}

/// Ignores everything.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoopObserver;

impl Observer for NoopObserver {
    fn observe(&self, _: &Event<'_>) {}
}

/// Forwards every event to each observer in turn.
pub struct Observers(pub Vec<Arc<dyn Observer>>);

impl Observer for Observers {
    fn observe(&self, event: &Event<'_>) {
        for observer in &self.0 {
            observer.observe(event);
        }
    }
}
