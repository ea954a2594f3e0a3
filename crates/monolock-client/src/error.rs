//! The client's error type and the reasons a claim can end.

use std::{fmt, io, sync::Arc, time::Duration};

use monolock_proto::{DecodeError, ErrorCode, NameError, ServerFrame};

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
    /// The lease is zero milliseconds or longer than `u32::MAX` ms. Checked
    /// before dialing.
    #[error("invalid lease {lease:?}: it must be between 1ms and {max_ms}ms", max_ms = u32::MAX)]
    InvalidLease {
        /// The lease that was given.
        lease: Duration,
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
    /// The server ended the session with an ERROR frame.
    #[error("the server ended the session with {}", DisplayCode(*.code, .reason))]
    Server {
        /// The ERROR code; its range says whose fault it was.
        code: ErrorCode,
        /// Human-readable detail from the server (may be empty).
        reason: String,
    },
    /// Reading from or writing to the connection failed.
    #[error("the connection failed")]
    Io(#[source] Arc<io::Error>),
    /// The server closed the connection without an ERROR frame.
    #[error("the server closed the connection")]
    ConnectionClosed,
    /// No reply confirmed the session within 0.8 x the lease: the client
    /// abandoned the claim (or its place in the queue).
    #[error("no heartbeat was confirmed within 0.8 x the lease of {lease:?}")]
    HeartbeatTimeout {
        /// The session's lease.
        lease: Duration,
    },
    /// The server sent something a protocol v1 server never sends.
    #[error("protocol violation by the server")]
    ProtocolViolation(#[source] ProtocolViolation),
    /// The task running guarded work was cancelled from outside (the
    /// runtime shutting down) before the work finished.
    #[error("the task running the guarded work was cancelled")]
    WorkCancelled,
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
    /// codes below 0x10, unknown ones included), connection failures (a
    /// failed TLS handshake included) and heartbeat timeouts. False for
    /// invalid input (TLS settings included), client-error codes
    /// (0x10 and up: the same request fails the same way) and protocol
    /// violations (the peer is not a v1 server).
    pub fn is_temporary(&self) -> bool {
        match self {
            Self::Server { code, .. } => code.is_temporary(),
            Self::Connect { .. }
            | Self::ConnectTimeout { .. }
            | Self::Io(_)
            | Self::ConnectionClosed
            | Self::HeartbeatTimeout { .. } => true,
            Self::InvalidName(_)
            | Self::InvalidLease { .. }
            | Self::ProtocolViolation(_)
            | Self::WorkCancelled => false,
            #[cfg(feature = "tls")]
            Self::Tls(_) => false,
        }
    }

    /// The ERROR code, when the server ended the session with one.
    pub fn server_code(&self) -> Option<ErrorCode> {
        match self {
            Self::Server { code, .. } => Some(*code),
            _ => None,
        }
    }
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
    /// The server sent something a protocol v1 server never sends.
    #[error("protocol violation by the server")]
    ProtocolViolation(#[source] ProtocolViolation),
}

impl LossReason {
    /// True when a new claim may succeed (see [`Error::is_temporary`]).
    pub fn is_temporary(&self) -> bool {
        Error::from(self.clone()).is_temporary()
    }

    pub(crate) fn io(err: io::Error) -> Self {
        Self::Io(Arc::new(err))
    }
}

impl From<LossReason> for Error {
    fn from(reason: LossReason) -> Self {
        match reason {
            LossReason::HeartbeatTimeout { lease } => Self::HeartbeatTimeout { lease },
            LossReason::ConnectionClosed => Self::ConnectionClosed,
            LossReason::Io(err) => Self::Io(err),
            LossReason::Server { code, reason } => Self::Server { code, reason },
            LossReason::ProtocolViolation(v) => Self::ProtocolViolation(v),
        }
    }
}

/// Bytes from the server that break protocol v1.
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
        let server = |code| Error::Server {
            code: ErrorCode(code),
            reason: String::new(),
        };
        assert!(server(0x01).is_temporary());
        assert!(server(0x02).is_temporary());
        assert!(server(0x0f).is_temporary(), "unknown codes by range");
        assert!(!server(0x18).is_temporary());
        assert!(!server(0x7f).is_temporary(), "unknown codes by range");
        assert!(Error::ConnectionClosed.is_temporary());
        assert!(!Error::InvalidName(NameError::Empty).is_temporary());
        assert!(!Error::ProtocolViolation(ProtocolViolation::WaitingAfterGrant).is_temporary());
        assert_eq!(server(0x18).server_code(), Some(ErrorCode::NOT_AUTHORIZED));
    }

    #[test]
    fn messages_and_sources() {
        let err = Error::Server {
            code: ErrorCode::CLOSED_BY_ADMIN,
            reason: "force-release".into(),
        };
        assert_eq!(
            err.to_string(),
            "the server ended the session with 0x02 (closed by administrator): force-release"
        );
        let err = Error::from(LossReason::io(io::Error::other("boom")));
        assert_eq!(err.source().map(|s| s.to_string()), Some("boom".into()));
        let err = Error::ProtocolViolation(DecodeError::UnknownType(0x7f).into());
        let inner = err.source().and_then(|s| s.source()).map(|s| s.to_string());
        assert_eq!(
            inner.as_deref(),
            Some("unexpected message type 0x7f from server")
        );
        assert!(Error::InvalidName(NameError::Empty).source().is_some());
    }
}
