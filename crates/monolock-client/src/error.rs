//! The client's error type and the reasons a claim can end.

use std::{fmt, io, sync::Arc, time::Duration};

use monolock_proto::{DecodeError, ErrorCode, LockName, NameError, ServerFrame};

/// The shortest lease a client takes: below it, the holder's deadline
/// (0.8 x lease) is shorter than ordinary scheduling stalls.
pub const MIN_LEASE: Duration = Duration::from_millis(100);

/// The longest lease a client takes: above it, a partitioned holder blocks
/// everyone for longer than any operator would accept. A lease is a
/// failure detector, not a work deadline: hold for hours by heartbeating.
pub const MAX_LEASE: Duration = Duration::from_secs(3600);

/// Everything that can go wrong in this crate.
///
/// Use [`Error::is_temporary`] to decide whether trying again (a new
/// connection, at the back of the queue) may succeed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock name is empty or longer than 255 bytes. Checked before
    /// dialing.
    #[error("invalid lock name")]
    InvalidName(#[from] NameError),
    /// The lease is below [`MIN_LEASE`] (100 ms), above [`MAX_LEASE`]
    /// (1 hour), or not a whole number of milliseconds. Checked before
    /// dialing.
    #[error("{}", lease_problem(*lease).unwrap_or_default())]
    InvalidLease {
        /// The lease that was given.
        lease: Duration,
    },
    /// An address is not `host:port`: it has a scheme (`http://...`).
    /// Checked before dialing.
    #[error("address {addr:?}: write host:port, without a scheme")]
    InvalidAddress {
        /// The address as given.
        addr: String,
    },
    /// The TCP connection could not be established, or the TLS handshake
    /// failed. A failed handshake's source is an [`io::Error`] wrapping the
    /// `rustls::Error`: an untrusted server certificate, or the server's
    /// alert refusing the client certificate (or its absence).
    #[error("could not connect to {addr}")]
    Connect {
        /// The server address.
        addr: String,
        /// The underlying failure.
        #[source]
        source: io::Error,
    },
    /// Connecting took longer than the client's connect timeout.
    #[error("connecting to {addr} timed out after {timeout:?}")]
    ConnectTimeout {
        /// The server address.
        addr: String,
        /// The timeout that ran out.
        timeout: Duration,
    },
    /// The connection was made, but what is at `addr` is not a monolock
    /// server as this client speaks to it: an HTTP server (the admin or
    /// ops port), a TLS port dialled in plain text, a plain port dialled
    /// with TLS, or a peer that never answered. A failed connect, never a
    /// lost lock: nothing was held.
    #[error("{addr} {problem}")]
    WrongPeer {
        /// The server address.
        addr: String,
        /// What answered, or that nothing did.
        problem: WrongPeer,
    },
    /// The lock was held and is lost; the message names the lock:
    /// `lock "NAME" lost (REASON): DETAIL`. Returned by
    /// [`LockGuard::check`](crate::LockGuard::check) and by
    /// [`LockGuard::release`](crate::LockGuard::release) of a lost lock.
    #[error(transparent)]
    LockLost(#[from] LockLost),
    /// The session ended before or after the grant: the server closed it
    /// (with or without an ERROR frame), the connection failed, no
    /// heartbeat was confirmed in time, or the server broke the protocol.
    /// One type for every way a claim ends, so that adding a reason
    /// touches [`LossReason`] alone.
    #[error(transparent)]
    Lost(#[from] LossReason),
    /// The value is longer than [`MAX_VALUE_LEN`](crate::MAX_VALUE_LEN)
    /// (1,024 bytes of UTF-8). Checked before dialing.
    #[error("value of {len} bytes is above the maximum of 1024 bytes")]
    InvalidValue {
        /// The value's length in bytes.
        len: usize,
    },
    /// A lock value, `set_value`, an observation or a holder lookup was
    /// asked of a server (or a protocol version) without the extension
    /// for them. Never temporary: upgrade the server, or speak version 2.
    #[error(transparent)]
    Unsupported(#[from] Unsupported),
    /// An observation ended because its session did: the message names
    /// the lock (`observation of lock "NAME" ended (REASON): DETAIL`).
    #[error(transparent)]
    ObservationEnded(#[from] ObservationEnded),
    /// A [`blocking`](crate::blocking) call was made on a thread that runs
    /// an async runtime, where blocking would stall it: use the async
    /// client there.
    #[error("a blocking monolock call was made inside an async runtime; use the async client")]
    BlockingInAsyncContext,
    /// The TLS settings are unusable: a file that cannot be read or holds
    /// no valid PEM, a key that does not match its certificate, no trust
    /// roots, an invalid server name. The source names the file. Invalid
    /// input: never retried.
    #[cfg(feature = "tls")]
    #[error("invalid TLS configuration")]
    Tls(#[from] crate::tls::TlsError),
}

impl Error {
    /// True when trying again later may succeed: server conditions (ERROR
    /// codes below 0x10, unknown ones included), connection failures that
    /// may heal (refused, reset, unreachable, timed out) and heartbeat
    /// timeouts. False for what fails the same way every time: invalid
    /// input (TLS settings included), an address that cannot be parsed, a
    /// TLS handshake that failed on a certificate or on a peer that does
    /// not speak TLS, client-error codes (0x10 and up, e.g. 0x18 not
    /// authorized) and protocol violations (the peer is not a monolock
    /// server: a TLS or HTTP port, say).
    pub fn is_temporary(&self) -> bool {
        match self {
            Self::Connect { source, .. } => !is_permanent_connect_failure(source),
            Self::ConnectTimeout { .. } => true,
            Self::WrongPeer { problem, .. } => matches!(problem, WrongPeer::Silent { .. }),
            Self::Lost(reason) => reason.is_temporary(),
            Self::LockLost(lost) => lost.reason.is_temporary(),
            Self::ObservationEnded(ended) => ended.reason.is_temporary(),
            Self::InvalidName(_)
            | Self::InvalidValue { .. }
            | Self::Unsupported(_)
            | Self::InvalidLease { .. }
            | Self::InvalidAddress { .. }
            | Self::BlockingInAsyncContext => false,
            #[cfg(feature = "tls")]
            Self::Tls(_) => false,
        }
    }

    /// The ERROR code, when the server ended the session with one.
    pub fn server_code(&self) -> Option<ErrorCode> {
        match self {
            Self::Lost(LossReason::Server { code, .. })
            | Self::LockLost(LockLost {
                reason: LossReason::Server { code, .. },
                ..
            }) => Some(*code),
            _ => None,
        }
    }

    /// Whether the server itself answered this attempt (an ERROR frame):
    /// it is up, whatever the code says. Retry policies measure how long
    /// the server has been unreachable from the last such answer.
    pub(crate) fn server_answered(&self) -> bool {
        self.server_code().is_some()
    }
}

/// Why a lease is refused, naming the bound and the unit; `None` for a
/// lease the client takes.
pub(crate) fn lease_problem(lease: Duration) -> Option<String> {
    const UNIT: &str = "(leases are in milliseconds: a Duration of whole milliseconds)";
    let shown = if lease.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{} ms", lease.as_millis())
    } else {
        format!("{lease:?}")
    };
    if lease < MIN_LEASE {
        Some(format!(
            "lease {shown} is below the minimum of 100 ms {UNIT}"
        ))
    } else if lease > MAX_LEASE {
        Some(format!(
            "lease {shown} is above the maximum of 1 hour {UNIT}"
        ))
    } else if !lease.subsec_nanos().is_multiple_of(1_000_000) {
        Some(format!(
            "lease {shown} is not a whole number of milliseconds {UNIT}"
        ))
    } else {
        None
    }
}

/// Whether `addr` is written with a scheme (`http://`, `tcp://`).
pub(crate) fn has_scheme(addr: &str) -> bool {
    addr.contains("://")
}

/// What answered at an address that is not a monolock server, as the
/// client speaks to it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WrongPeer {
    /// An HTTP response came back: monolock's admin or ops port, say.
    #[error(
        "is not a monolock server: an HTTP server answered (the admin or ops port? give the \
         server's --listen address)"
    )]
    Http,
    /// A TLS record came back, or the connection closed before any
    /// reply: a TLS port, dialled in plain text.
    #[error("expects TLS: the server speaks TLS on this port; connect with a TlsConnector")]
    ExpectsTls,
    /// The TLS handshake was answered in plain text: a monolock port
    /// without TLS.
    #[error("does not speak TLS: it answered the TLS handshake in plain text")]
    NoTls,
    /// The connection was accepted and nothing came back in time.
    #[error("did not answer within {}", DisplaySeconds(*within))]
    Silent {
        /// How long the client waited.
        within: Duration,
    },
}

/// A duration as `5 s` or `1.6 s`.
struct DisplaySeconds(Duration);

impl fmt::Display for DisplaySeconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if ms.is_multiple_of(1000) {
            write!(f, "{} s", ms / 1000)
        } else {
            write!(f, "{:.1} s", self.0.as_secs_f64())
        }
    }
}

/// A held lock that is lost: its name and why. Displays as `lock "NAME"
/// lost (REASON): DETAIL`, `REASON` being [`LossReason::name`].
#[derive(Clone, Debug, thiserror::Error)]
#[error("lock {:?} lost ({}): {reason}", name.as_str(), reason.name())]
pub struct LockLost {
    name: LockName,
    #[source]
    reason: LossReason,
}

impl LockLost {
    /// The loss of the lock `name` for `reason`.
    pub fn new(name: LockName, reason: LossReason) -> Self {
        Self { name, reason }
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// Why it was lost.
    pub fn reason(&self) -> &LossReason {
        &self.reason
    }

    /// The reason, owned.
    pub fn into_reason(self) -> LossReason {
        self.reason
    }
}

/// Why lock values and observers are not available.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unsupported {
    /// The server at this address predates the extension (it answered
    /// HELLO with ERROR 0x13, or speaks version 1 only).
    #[error(
        "{addr} does not support lock values and observers (the server is older than this \
         client): upgrade the server"
    )]
    Server {
        /// The server's address.
        addr: String,
    },
    /// The client speaks protocol version 1 ([`Protocol::V1`](crate::Protocol::V1)).
    #[error("protocol version 1 has no lock values or observers")]
    ProtocolV1,
}

/// An observation that ended with its session: its lock's name and why.
/// Displays as `observation of lock "NAME" ended (REASON): DETAIL`.
#[derive(Clone, Debug, thiserror::Error)]
#[error("observation of lock {:?} ended ({}): {reason}", name.as_str(), reason.name())]
pub struct ObservationEnded {
    name: LockName,
    #[source]
    reason: LossReason,
}

impl ObservationEnded {
    /// The end of the observation of `name` for `reason`.
    pub fn new(name: LockName, reason: LossReason) -> Self {
        Self { name, reason }
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// Why the session ended.
    pub fn reason(&self) -> &LossReason {
        &self.reason
    }
}

/// A failed connect that no retry can heal: the address is malformed, or
/// the TLS handshake failed on something other than the network (an
/// untrusted or mismatched certificate, a refused client certificate, a
/// peer that does not speak TLS).
fn is_permanent_connect_failure(err: &io::Error) -> bool {
    if err.kind() == io::ErrorKind::InvalidInput {
        return true;
    }
    #[cfg(feature = "tls")]
    if err
        .get_ref()
        .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some())
    {
        return true;
    }
    false
}

/// Why a claim (held, or a place in the queue) ended.
///
/// Cheap to clone, so that every task awaiting [`LockGuard::lost`] gets
/// its own copy.
///
/// [`LockGuard::lost`]: crate::LockGuard::lost
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LossReason {
    /// No reply confirmed the session within 0.8 x the lease. The client
    /// gave the claim up before the server could hand the lock on.
    #[error("no heartbeat was confirmed within 0.8 x the lease of {lease:?}")]
    HeartbeatTimeout {
        /// The session's lease.
        lease: Duration,
    },
    /// The server closed the connection without an ERROR frame.
    #[error("the server closed the connection")]
    ConnectionClosed,
    /// Reading from or writing to the connection failed.
    #[error("the connection failed")]
    Io(#[source] Arc<io::Error>),
    /// The server ended the session with an ERROR frame: 0x01 when it shuts
    /// down, 0x02 when an administrator force-released the lock.
    #[error("the server ended the session with {}", DisplayCode(*.code, .reason))]
    Server {
        /// The ERROR code.
        code: ErrorCode,
        /// Human-readable detail from the server (may be empty).
        reason: String,
    },
    /// The server sent something a monolock server never sends.
    #[error("protocol violation by the server")]
    ProtocolViolation(#[source] ProtocolViolation),
}

impl LossReason {
    /// True when a new claim may succeed (see [`Error::is_temporary`]).
    pub fn is_temporary(&self) -> bool {
        match self {
            Self::Server { code, .. } => code.is_temporary(),
            Self::HeartbeatTimeout { .. } | Self::ConnectionClosed | Self::Io(_) => true,
            Self::ProtocolViolation(_) => false,
        }
    }

    pub(crate) fn io(err: io::Error) -> Self {
        Self::Io(Arc::new(err))
    }

    /// The reason's name in the vocabulary every monolock client shares:
    /// `expired` (no heartbeat confirmed in time), `forced` (ERROR 0x02 or
    /// v2 REVOKED: an administrator), `shutdown` (ERROR 0x01),
    /// `connection` (EOF, reset, I/O error), `protocol` (the server broke
    /// the protocol), `server_error` (any other ERROR code).
    pub fn name(&self) -> &'static str {
        match self {
            Self::HeartbeatTimeout { .. } => "expired",
            Self::Server { code, .. } if *code == ErrorCode::SHUTTING_DOWN => "shutdown",
            Self::Server { code, .. } if *code == ErrorCode::CLOSED_BY_ADMIN => "forced",
            Self::Server { .. } => "server_error",
            Self::ConnectionClosed | Self::Io(_) => "connection",
            Self::ProtocolViolation(_) => "protocol",
        }
    }
}

/// Bytes from the server that break the protocol (version 1 or 2).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolViolation {
    /// A byte that starts no v1 frame.
    #[error("undecodable frame")]
    Decode(#[from] DecodeError),
    /// An ACQUIRED whose token differs from the session's grant.
    #[error("ACQUIRED carried token {got}, but this session was granted token {expected}")]
    TokenMismatch {
        /// The token of the grant.
        expected: u64,
        /// The token in the offending frame.
        got: u64,
    },
    /// A reply arrived with no request in flight.
    #[error("{frame:?} arrived with no request in flight")]
    Unsolicited {
        /// The frame.
        frame: ServerFrame,
    },
    /// WAITING after the lock was granted (ACQUIRED never returns to WAITING).
    #[error("WAITING arrived after the lock was granted")]
    WaitingAfterGrant,
    /// A byte that starts no protocol version 2 frame.
    #[error("undecodable frame")]
    DecodeV2(#[from] monolock_proto::v2::DecodeError),
    /// Bytes that are no frame of version 2 or its extension (an unknown
    /// type byte, or a state with an unknown event).
    #[error("undecodable frame")]
    DecodeExt(#[from] monolock_proto::ext::DecodeError),
    /// A version 2 frame that does not fit the session's state: a reply
    /// that does not answer the oldest frame in flight, or a push for a
    /// claim that cannot receive it.
    #[error("{frame:?} does not fit the session's state")]
    Unexpected {
        /// The frame.
        frame: monolock_proto::v2::ServerFrame,
    },
    /// A frame of the extension (values and observers) that does not fit
    /// the session's state.
    #[error("{frame} does not fit the session's state")]
    UnexpectedExtension {
        /// The frame, as the client decoded it.
        frame: String,
    },
    /// A STATE named an older holder than one already pushed to the same
    /// watch: the server broke its promise of token order.
    #[error("STATE for watch {watch} carried token {token} after token {last}")]
    StateWentBack {
        /// The watch id.
        watch: u32,
        /// The token of the watch's latest push.
        last: u64,
        /// The token of the offending push.
        token: u64,
    },
    /// A STATE for a watch id not in use.
    #[error("STATE (token {token}) for watch {watch}, which is not in use")]
    UnknownWatch {
        /// The watch id.
        watch: u32,
        /// The token of the push.
        token: u64,
    },
    /// The peer answered with a TLS record: it is a TLS server (a monolock
    /// server with TLS on). Connect with TLS.
    #[error("the server speaks TLS: connect with TLS (monolock exec --tls-ca FILE)")]
    TlsServer,
    /// The peer answered with HTTP: the address is an HTTP port (monolock's
    /// admin or ops port, say), not the lock protocol's.
    #[error(
        "an HTTP server answered: this is not the lock protocol's port (the admin or ops port?)"
    )]
    HttpServer,
}

impl ProtocolViolation {
    /// Names what is on the other end when the first bytes are not
    /// monolock's: a TLS record (alert or handshake) or an HTTP response.
    pub(crate) fn from_decode(err: DecodeError) -> Self {
        match err {
            DecodeError::UnknownType(0x15 | 0x16) => Self::TlsServer,
            DecodeError::UnknownType(b'H') => Self::HttpServer,
            err => Self::Decode(err),
        }
    }

    /// As [`from_decode`](Self::from_decode), for a version 2 session that
    /// may use the extension. An unknown type byte is reported as version
    /// 2's, so that a session without the extension reads as before.
    pub(crate) fn from_decode_ext(err: monolock_proto::ext::DecodeError) -> Self {
        match err {
            monolock_proto::ext::DecodeError::UnknownType(kind) => {
                Self::from_decode_v2(monolock_proto::v2::DecodeError::UnknownType(kind))
            }
            err => Self::DecodeExt(err),
        }
    }

    /// As [`from_decode`](Self::from_decode), for a version 2 session.
    pub(crate) fn from_decode_v2(err: monolock_proto::v2::DecodeError) -> Self {
        match err {
            monolock_proto::v2::DecodeError::UnknownType(0x15 | 0x16) => Self::TlsServer,
            monolock_proto::v2::DecodeError::UnknownType(b'H') => Self::HttpServer,
            err => Self::DecodeV2(err),
        }
    }
}

/// Formats an ERROR code as `0x02 (closed by administrator): reason`.
struct DisplayCode<'a>(ErrorCode, &'a str);

impl fmt::Display for DisplayCode<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self(code, reason) = self;
        write!(f, "{code}")?;
        if let Some(description) = code.description() {
            write!(f, " ({description})")?;
        }
        if !reason.is_empty() {
            write!(f, ": {reason}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn classification_by_range() {
        let server = |code| {
            Error::from(LossReason::Server {
                code: ErrorCode(code),
                reason: String::new(),
            })
        };
        assert!(server(0x01).is_temporary());
        assert!(server(0x02).is_temporary());
        assert!(server(0x0f).is_temporary(), "unknown codes by range");
        assert!(!server(0x18).is_temporary());
        assert!(!server(0x7f).is_temporary(), "unknown codes by range");
        assert!(Error::from(LossReason::ConnectionClosed).is_temporary());
        assert!(!Error::InvalidName(NameError::Empty).is_temporary());
        assert!(
            !Error::from(LossReason::ProtocolViolation(
                ProtocolViolation::WaitingAfterGrant
            ))
            .is_temporary()
        );
        let connect = |source| Error::Connect {
            addr: "x".into(),
            source,
        };
        assert!(connect(io::ErrorKind::ConnectionRefused.into()).is_temporary());
        assert!(!connect(io::ErrorKind::InvalidInput.into()).is_temporary());
        #[cfg(feature = "tls")]
        {
            let cert = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
            let handshake = io::Error::new(io::ErrorKind::InvalidData, cert);
            assert!(!connect(handshake).is_temporary(), "a certificate error");
        }
        assert_eq!(server(0x18).server_code(), Some(ErrorCode::NOT_AUTHORIZED));
    }

    #[test]
    fn messages_and_sources() {
        let err = Error::from(LossReason::Server {
            code: ErrorCode::CLOSED_BY_ADMIN,
            reason: "force-release".into(),
        });
        assert_eq!(
            err.to_string(),
            "the server ended the session with 0x02 (closed by administrator): force-release"
        );
        let err = Error::from(LossReason::io(io::Error::other("boom")));
        assert_eq!(err.source().map(|s| s.to_string()), Some("boom".into()));
        let err = Error::from(LossReason::ProtocolViolation(
            DecodeError::UnknownType(0x7f).into(),
        ));
        let inner = err.source().and_then(|s| s.source()).map(|s| s.to_string());
        assert_eq!(
            inner.as_deref(),
            Some("unexpected message type 0x7f from server")
        );
        assert!(Error::InvalidName(NameError::Empty).source().is_some());
        for (byte, says) in [(0x15, "speaks TLS"), (0x16, "speaks TLS"), (b'H', "HTTP")] {
            let violation = ProtocolViolation::from_decode(DecodeError::UnknownType(byte));
            assert!(violation.to_string().contains(says), "{violation}");
        }
    }
}
