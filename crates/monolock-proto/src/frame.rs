//! Frames in both directions, their encoding and incremental decoding.

use std::{fmt, num::NonZeroU32, time::Duration};

use crate::{ErrorCode, LockName, NameError, name::check_len};

/// The protocol version this crate speaks.
pub const PROTOCOL_VERSION: u8 = 1;

/// Bytes of an ACQUIRE before the name: type, version, lease u32, name_len u16.
pub const ACQUIRE_HEADER_LEN: usize = 8;

/// The longest reason an ERROR frame can carry (its length is one byte).
pub const MAX_ERROR_REASON_LEN: usize = u8::MAX as usize;

/// Message type bytes.
pub mod msg {
    /// Client -> server: claim a lock (first frame, exactly once).
    pub const ACQUIRE: u8 = 0x01;
    /// Client -> server: "still alive", answered with the session's state.
    pub const HEARTBEAT: u8 = 0x02;
    /// Server -> client: queued behind the holder.
    pub const WAITING: u8 = 0x11;
    /// Server -> client: the lock is yours; followed by the u64 token.
    pub const ACQUIRED: u8 = 0x12;
    /// Server -> client: code, reason length, reason; then the server closes.
    pub const ERROR: u8 = 0x13;
}

/// A lease: the window of silence after which the server drops a session.
///
/// Always positive; fixed for the life of a connection.
///
/// ```
/// use std::time::Duration;
/// use monolock_proto::Lease;
///
/// let lease = Lease::from_duration(Duration::from_secs(2)).unwrap();
/// assert_eq!(lease.as_millis(), 2000);
/// assert!(Lease::from_millis(0).is_none());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Lease(NonZeroU32);

impl Lease {
    /// A lease of `ms` milliseconds, or `None` for zero.
    pub const fn from_millis(ms: u32) -> Option<Self> {
        match NonZeroU32::new(ms) {
            Some(ms) => Some(Self(ms)),
            None => None,
        }
    }

    /// A lease from a duration, or `None` if it rounds down to zero
    /// milliseconds or does not fit in a u32 of milliseconds (~49 days).
    pub fn from_duration(duration: Duration) -> Option<Self> {
        u32::try_from(duration.as_millis())
            .ok()
            .and_then(Self::from_millis)
    }

    /// The lease in milliseconds, as on the wire.
    pub const fn as_millis(self) -> u32 {
        self.0.get()
    }

    /// The lease as a duration.
    pub const fn as_duration(self) -> Duration {
        Duration::from_millis(self.0.get() as u64)
    }
}

/// A frame sent by a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientFrame {
    /// Claim `name`, staying alive by speaking at least once per `lease`.
    Acquire {
        /// The session's lease.
        lease: Lease,
        /// The lock.
        name: LockName,
    },
    /// A heartbeat.
    Heartbeat,
}

impl ClientFrame {
    /// Shorthand for [`ClientFrame::Acquire`].
    pub fn acquire(lease: Lease, name: LockName) -> Self {
        Self::Acquire { lease, name }
    }

    /// Appends the frame's bytes to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Acquire { lease, name } => {
                out.reserve(ACQUIRE_HEADER_LEN + name.len());
                out.push(msg::ACQUIRE);
                out.push(PROTOCOL_VERSION);
                out.extend_from_slice(&lease.as_millis().to_be_bytes());
                // A LockName is at most 255 bytes, so the u16 cannot truncate.
                out.extend_from_slice(&(name.len() as u16).to_be_bytes());
                out.extend_from_slice(name.as_bytes());
            }
            Self::Heartbeat => out.push(msg::HEARTBEAT),
        }
    }

    /// The frame's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
}

/// A frame sent by a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerFrame {
    /// Queued: someone else holds the lock.
    Waiting,
    /// The lock is held by this session, under this fencing token.
    Acquired {
        /// The fencing token of the grant.
        token: u64,
    },
    /// The session is over; the server closes after sending this.
    Error {
        /// What happened, classified by range.
        code: ErrorCode,
        /// Human-readable detail (may be empty).
        reason: String,
    },
}

/// The nine bytes of an ACQUIRED frame, built without allocating.
///
/// ```
/// assert_eq!(monolock_proto::acquired_frame(1), [0x12, 0, 0, 0, 0, 0, 0, 0, 1]);
/// ```
pub const fn acquired_frame(token: u64) -> [u8; 9] {
    let t = token.to_be_bytes();
    [
        msg::ACQUIRED,
        t[0],
        t[1],
        t[2],
        t[3],
        t[4],
        t[5],
        t[6],
        t[7],
    ]
}

/// The one byte of a WAITING frame, built without allocating (the
/// counterpart of [`acquired_frame`]).
///
/// ```
/// assert_eq!(monolock_proto::waiting_frame(), [0x11]);
/// ```
pub const fn waiting_frame() -> [u8; 1] {
    [msg::WAITING]
}

impl ServerFrame {
    /// Appends the frame's bytes to `out`. An ERROR reason longer than
    /// [`MAX_ERROR_REASON_LEN`] bytes is cut at a character boundary.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Waiting => out.extend_from_slice(&waiting_frame()),
            Self::Acquired { token } => out.extend_from_slice(&acquired_frame(*token)),
            Self::Error { code, reason } => {
                let mut end = reason.len().min(MAX_ERROR_REASON_LEN);
                while !reason.is_char_boundary(end) {
                    end -= 1;
                }
                out.push(msg::ERROR);
                out.push(code.0);
                out.push(end as u8);
                out.extend_from_slice(&reason.as_bytes()[..end]);
            }
        }
    }

    /// The frame's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
}

/// Where a server-side connection is in its life: before or after its one
/// ACQUIRE. The same byte means different things in each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Nothing valid received yet: the next frame must be ACQUIRE.
    AwaitingAcquire,
    /// ACQUIRE accepted: only heartbeats are valid now.
    Established,
}

/// A request the server must refuse with an ERROR frame (then close).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {reason}")]
pub struct RequestError {
    /// The code to send.
    pub code: ErrorCode,
    /// Detail for the ERROR frame's reason, e.g. `unknown message type: 0x7f`.
    pub reason: String,
}

impl RequestError {
    fn new(code: ErrorCode, reason: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.into(),
        }
    }
}

impl From<NameError> for RequestError {
    fn from(err: NameError) -> Self {
        Self::new(err.code(), err.to_string())
    }
}

/// Decodes the next client frame at the start of `buf`, server side.
///
/// Returns `Ok(None)` while more bytes are needed, `Ok(Some((frame, used)))`
/// once a whole frame is present, and an error as soon as the bytes seen so
/// far are enough to refuse the request. Checks follow the protocol's order:
/// type byte, version, lease, name length (an oversized name is refused
/// before its bytes arrive), UTF-8. Authorization is the server's business.
///
/// ```
/// use monolock_proto::{decode_request, ClientFrame, ErrorCode, Phase};
///
/// assert_eq!(decode_request(&[0x02], Phase::Established).unwrap(), Some((ClientFrame::Heartbeat, 1)));
/// let err = decode_request(&[0x02], Phase::AwaitingAcquire).unwrap_err();
/// assert_eq!(err.code, ErrorCode::FIRST_MESSAGE_NOT_ACQUIRE);
/// // A name length of 300 is refused from the header alone.
/// let err = decode_request(&[1, 1, 0, 0, 0, 9, 0x01, 0x2c], Phase::AwaitingAcquire).unwrap_err();
/// assert_eq!(err.code, ErrorCode::NAME_TOO_LONG);
/// ```
///
/// # Errors
/// A [`RequestError`] carrying the code the server must answer with.
pub fn decode_request(
    buf: &[u8],
    phase: Phase,
) -> Result<Option<(ClientFrame, usize)>, RequestError> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    match phase {
        Phase::Established => match kind {
            msg::HEARTBEAT => Ok(Some((ClientFrame::Heartbeat, 1))),
            msg::ACQUIRE => Err(RequestError::new(
                ErrorCode::DUPLICATE_ACQUIRE,
                "duplicate ACQUIRE: one connection holds one claim",
            )),
            other => Err(RequestError::new(
                ErrorCode::UNKNOWN_MESSAGE_TYPE,
                format!("unknown message type: 0x{other:02x}"),
            )),
        },
        Phase::AwaitingAcquire => decode_acquire(buf),
    }
}

/// The fixed-size start of a valid ACQUIRE: everything but the name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcquireHeader {
    /// The session's lease.
    pub lease: Lease,
    /// How many name bytes follow the header (1..=255).
    pub name_len: usize,
}

/// Validates the first [`ACQUIRE_HEADER_LEN`] bytes of a connection, server
/// side, with the same checks and order as [`decode_request`]; the name
/// itself (and its UTF-8 check, [`LockName::from_bytes`]) comes after.
///
/// Lets a server read the name straight into its own allocation instead of
/// buffering a whole frame.
///
/// ```
/// use monolock_proto::{decode_acquire_header, ErrorCode};
///
/// let header = decode_acquire_header(&[1, 1, 0, 0, 0x07, 0xd0, 0, 6]).unwrap().unwrap();
/// assert_eq!((header.lease.as_millis(), header.name_len), (2000, 6));
/// assert_eq!(decode_acquire_header(&[1, 1, 0]).unwrap(), None);
/// assert_eq!(decode_acquire_header(&[2]).unwrap_err().code, ErrorCode::FIRST_MESSAGE_NOT_ACQUIRE);
/// ```
///
/// # Errors
/// A [`RequestError`] carrying the code the server must answer with.
pub fn decode_acquire_header(buf: &[u8]) -> Result<Option<AcquireHeader>, RequestError> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    if kind != msg::ACQUIRE {
        return Err(RequestError::new(
            ErrorCode::FIRST_MESSAGE_NOT_ACQUIRE,
            format!("first message must be ACQUIRE, got type 0x{kind:02x}"),
        ));
    }
    let Some(&version) = buf.get(1) else {
        return Ok(None);
    };
    if version != PROTOCOL_VERSION {
        return Err(RequestError::new(
            ErrorCode::UNSUPPORTED_VERSION,
            format!(
                "unsupported protocol version {version}; this server speaks {PROTOCOL_VERSION}"
            ),
        ));
    }
    let Some(lease_bytes) = buf.get(2..6) else {
        return Ok(None);
    };
    let lease_ms = u32::from_be_bytes([
        lease_bytes[0],
        lease_bytes[1],
        lease_bytes[2],
        lease_bytes[3],
    ]);
    let Some(lease) = Lease::from_millis(lease_ms) else {
        return Err(RequestError::new(
            ErrorCode::LEASE_NOT_POSITIVE,
            "lease must be positive",
        ));
    };
    let Some(len_bytes) = buf.get(6..8) else {
        return Ok(None);
    };
    let name_len = usize::from(u16::from_be_bytes([len_bytes[0], len_bytes[1]]));
    check_len(name_len)?;
    Ok(Some(AcquireHeader { lease, name_len }))
}

fn decode_acquire(buf: &[u8]) -> Result<Option<(ClientFrame, usize)>, RequestError> {
    let Some(AcquireHeader { lease, name_len }) = decode_acquire_header(buf)? else {
        return Ok(None);
    };
    let Some(name_bytes) = buf.get(ACQUIRE_HEADER_LEN..ACQUIRE_HEADER_LEN + name_len) else {
        return Ok(None);
    };
    let name = LockName::from_bytes(name_bytes)?;
    Ok(Some((
        ClientFrame::Acquire { lease, name },
        ACQUIRE_HEADER_LEN + name_len,
    )))
}

/// A server sent bytes that are not a protocol v1 frame.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The type byte is not WAITING, ACQUIRED or ERROR.
    #[error("unexpected message type 0x{0:02x} from server")]
    UnknownType(u8),
}

/// Decodes the next server frame at the start of `buf`, client side.
///
/// Returns `Ok(None)` while more bytes are needed. An ERROR reason that is
/// not valid UTF-8 is decoded lossily: it is for humans only.
///
/// ```
/// use monolock_proto::{decode_response, ServerFrame};
///
/// assert_eq!(decode_response(&[0x11]).unwrap(), Some((ServerFrame::Waiting, 1)));
/// assert_eq!(decode_response(&[0x12, 0, 0]).unwrap(), None);
/// assert!(decode_response(&[0x7f]).is_err());
/// ```
///
/// # Errors
/// [`DecodeError::UnknownType`] for a type byte protocol v1 does not define.
pub fn decode_response(buf: &[u8]) -> Result<Option<(ServerFrame, usize)>, DecodeError> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    match kind {
        msg::WAITING => Ok(Some((ServerFrame::Waiting, 1))),
        msg::ACQUIRED => Ok(buf.get(1..9).map(|t| {
            let mut token = [0u8; 8];
            token.copy_from_slice(t);
            (
                ServerFrame::Acquired {
                    token: u64::from_be_bytes(token),
                },
                9,
            )
        })),
        msg::ERROR => {
            let (Some(&code), Some(&len)) = (buf.get(1), buf.get(2)) else {
                return Ok(None);
            };
            let end = 3 + usize::from(len);
            Ok(buf.get(3..end).map(|reason| {
                (
                    ServerFrame::Error {
                        code: ErrorCode(code),
                        reason: String::from_utf8_lossy(reason).into_owned(),
                    },
                    end,
                )
            }))
        }
        other => Err(DecodeError::UnknownType(other)),
    }
}

impl fmt::Display for ClientFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Acquire { lease, name } => {
                write!(f, "ACQUIRE {name:?} lease={}ms", lease.as_millis())
            }
            Self::Heartbeat => f.write_str("HEARTBEAT"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acquire_bytes(version: u8, lease: u32, name: &[u8]) -> Vec<u8> {
        let mut out = vec![msg::ACQUIRE, version];
        out.extend_from_slice(&lease.to_be_bytes());
        out.extend_from_slice(&(name.len() as u16).to_be_bytes());
        out.extend_from_slice(name);
        out
    }

    fn code_of(bytes: &[u8]) -> ErrorCode {
        decode_request(bytes, Phase::AwaitingAcquire)
            .unwrap_err()
            .code
    }

    #[test]
    fn validation_order_matches_the_protocol() {
        // Every check fails at once: the earliest in the order wins.
        assert_eq!(
            code_of(&[0x02, 9, 0, 0, 0, 0]),
            ErrorCode::FIRST_MESSAGE_NOT_ACQUIRE
        );
        assert_eq!(
            code_of(&acquire_bytes(2, 0, b"")),
            ErrorCode::UNSUPPORTED_VERSION
        );
        assert_eq!(
            code_of(&acquire_bytes(1, 0, b"")),
            ErrorCode::LEASE_NOT_POSITIVE
        );
        assert_eq!(code_of(&acquire_bytes(1, 5, b"")), ErrorCode::EMPTY_NAME);
        assert_eq!(
            code_of(&acquire_bytes(1, 5, &[0xff; 256])),
            ErrorCode::NAME_TOO_LONG
        );
        assert_eq!(
            code_of(&acquire_bytes(1, 5, &[0xff])),
            ErrorCode::NAME_NOT_UTF8
        );
    }

    #[test]
    fn errors_come_as_soon_as_the_header_allows() {
        assert_eq!(code_of(&[0x01, 0x07]), ErrorCode::UNSUPPORTED_VERSION);
        assert_eq!(
            code_of(&[0x01, 0x01, 0, 0, 0, 0]),
            ErrorCode::LEASE_NOT_POSITIVE
        );
        assert_eq!(
            code_of(&[0x01, 0x01, 0, 0, 0, 1, 0xff, 0xff]),
            ErrorCode::NAME_TOO_LONG
        );
        assert_eq!(
            decode_request(
                &[0x01, 0x01, 0, 0, 0, 1, 0, 3, b'a'],
                Phase::AwaitingAcquire
            ),
            Ok(None)
        );
    }

    #[test]
    fn established_phase_codes() {
        let dup = decode_request(&[0x01], Phase::Established).unwrap_err();
        assert_eq!(dup.code, ErrorCode::DUPLICATE_ACQUIRE);
        let unknown = decode_request(&[0x7f], Phase::Established).unwrap_err();
        assert_eq!(unknown.code, ErrorCode::UNKNOWN_MESSAGE_TYPE);
        assert_eq!(unknown.reason, "unknown message type: 0x7f");
    }

    #[test]
    fn error_reason_is_cut_on_a_char_boundary() {
        let frame = ServerFrame::Error {
            code: ErrorCode::SHUTTING_DOWN,
            reason: "é".repeat(200),
        };
        let bytes = frame.to_bytes();
        assert_eq!(bytes[2], 254);
        let (decoded, used) = decode_response(&bytes).unwrap().unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!(
            decoded,
            ServerFrame::Error {
                code: ErrorCode::SHUTTING_DOWN,
                reason: "é".repeat(127)
            }
        );
    }
}
