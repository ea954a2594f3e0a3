//! Protocol version 2: one connection is a session carrying many claims.
//!
//! The layouts are those of docs/protocol.md ("Protocol version 2"). A
//! session opens with [`ClientFrame::Open`] (type `0x01`, version `0x02`,
//! so a server that speaks only version 1 answers ERROR `0x10`); then
//! every frame names its claim by a `u32` the client picks. Every client
//! frame gets exactly one reply (types `0x30`-`0x36`), in order; GRANTED
//! and REVOKED are pushes, told apart by their type byte alone.
//!
//! Decoding is incremental, as in version 1: `Ok(None)` while more bytes
//! are needed, and no input makes a decoder panic. The server side
//! ([`decode_request`]) borrows the name from the input, so a refused
//! ACQUIRE costs no allocation; a well-framed ACQUIRE that must be refused
//! for its claim only (empty name, bad UTF-8, unknown mode) decodes as
//! [`Request::BadAcquire`], and only what breaks the framing or the
//! session's state is a [`RequestError`] that ends the session.
//!
//! ```
//! use monolock_proto::{Lease, LockName, v2};
//!
//! let mut bytes = v2::ClientFrame::Open { lease: Lease::from_millis(2000).unwrap() }.to_bytes();
//! assert_eq!(bytes, [0x01, 0x02, 0, 0, 0x07, 0xd0]);
//! assert_eq!(v2::decode_open(&bytes).unwrap(), Some((Lease::from_millis(2000).unwrap(), 6)));
//!
//! bytes = v2::ClientFrame::Acquire {
//!     claim: 1,
//!     mode: v2::Mode::Wait,
//!     name: LockName::new("deploy").unwrap(),
//! }
//! .to_bytes();
//! let (request, used) = v2::decode_request(&bytes).unwrap().unwrap();
//! assert_eq!(used, bytes.len());
//! assert_eq!(request, v2::Request::Acquire { claim: 1, mode: v2::Mode::Wait, name: "deploy" });
//! ```

use std::fmt;

use crate::{ErrorCode, Lease, LockName, MAX_ERROR_REASON_LEN, RequestError, frame::msg as v1};

/// The version byte of an OPEN.
pub const VERSION: u8 = 2;

/// Bytes of an OPEN: type, version, lease u32.
pub const OPEN_LEN: usize = 6;

/// Bytes of an ACQUIRE before the name: type, claim u32, mode, name_len.
pub const ACQUIRE_HEADER_LEN: usize = 7;

/// The most claims a session may have at once unless the server says
/// otherwise (`--max-claims-per-session`).
pub const DEFAULT_MAX_CLAIMS: u32 = 1024;

/// Message type bytes of version 2.
pub mod msg {
    /// Client -> server, first frame: open a session (same byte as v1's ACQUIRE).
    pub const OPEN: u8 = 0x01;
    /// Client -> server: claim a lock under a claim id.
    pub const ACQUIRE: u8 = 0x21;
    /// Client -> server: end a claim (held or waiting).
    pub const RELEASE: u8 = 0x22;
    /// Client -> server: a heartbeat for the whole session.
    pub const PING: u8 = 0x23;
    /// Reply to OPEN: session id and claim bound.
    pub const OPENED: u8 = 0x30;
    /// Reply to ACQUIRE: granted, with the token.
    pub const ACQUIRED: u8 = 0x31;
    /// Reply to ACQUIRE (wait): queued.
    pub const WAITING: u8 = 0x32;
    /// Reply to ACQUIRE (try): the lock is held; nothing queued.
    pub const BUSY: u8 = 0x33;
    /// Reply to RELEASE: released and handed on.
    pub const RELEASED: u8 = 0x34;
    /// Reply to PING.
    pub const PONG: u8 = 0x35;
    /// Reply to ACQUIRE or RELEASE: refused for this claim only.
    pub const REFUSED: u8 = 0x36;
    /// Push: a waiting claim was granted.
    pub const GRANTED: u8 = 0x37;
    /// Push: a claim was ended by the server (an administrator).
    pub const REVOKED: u8 = 0x38;
    /// The session is over (v1's ERROR byte); the server closes after it.
    pub const ERROR: u8 = super::v1::ERROR;
}

/// How an ACQUIRE waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Queue behind the holder (FIFO) and be pushed GRANTED.
    Wait,
    /// Take the lock only if it is free now; BUSY otherwise.
    Try,
}

impl Mode {
    /// The mode's byte on the wire.
    pub const fn byte(self) -> u8 {
        match self {
            Self::Wait => 0,
            Self::Try => 1,
        }
    }

    /// The mode of a byte, if it is one.
    pub const fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            0 => Some(Self::Wait),
            1 => Some(Self::Try),
            _ => None,
        }
    }
}

/// A client frame of version 2, owned (clients and tests encode these).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientFrame {
    /// The first frame: open a session with this lease.
    Open {
        /// The session's lease, fixed for its life.
        lease: Lease,
    },
    /// Claim `name` under `claim`.
    Acquire {
        /// The claim id, chosen by the client.
        claim: u32,
        /// Wait in the queue, or try only.
        mode: Mode,
        /// The lock.
        name: LockName,
    },
    /// End the claim `claim`.
    Release {
        /// The claim id.
        claim: u32,
    },
    /// A heartbeat.
    Ping,
}

impl ClientFrame {
    /// Appends the frame's bytes to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Open { lease } => {
                out.extend_from_slice(&[msg::OPEN, VERSION]);
                out.extend_from_slice(&lease.as_millis().to_be_bytes());
            }
            Self::Acquire { claim, mode, name } => {
                out.reserve(ACQUIRE_HEADER_LEN + name.len());
                out.push(msg::ACQUIRE);
                out.extend_from_slice(&claim.to_be_bytes());
                out.push(mode.byte());
                // A LockName is at most 255 bytes: the u8 cannot truncate.
                out.push(name.len() as u8);
                out.extend_from_slice(name.as_bytes());
            }
            Self::Release { claim } => out.extend_from_slice(&release_frame(*claim)),
            Self::Ping => out.push(msg::PING),
        }
    }

    /// The frame's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
}

/// The five bytes of a RELEASE, built without allocating.
///
/// ```
/// assert_eq!(monolock_proto::v2::release_frame(7), [0x22, 0, 0, 0, 7]);
/// ```
pub const fn release_frame(claim: u32) -> [u8; 5] {
    claim_frame(msg::RELEASE, claim)
}

const fn claim_frame(kind: u8, claim: u32) -> [u8; 5] {
    let c = claim.to_be_bytes();
    [kind, c[0], c[1], c[2], c[3]]
}

const fn claim_token_frame(kind: u8, claim: u32, token: u64) -> [u8; 13] {
    let c = claim.to_be_bytes();
    let t = token.to_be_bytes();
    [
        kind, c[0], c[1], c[2], c[3], t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7],
    ]
}

/// A server frame of version 2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerFrame {
    /// Reply to OPEN.
    Opened {
        /// The server's id for the session (never 0).
        session: u64,
        /// The most claims the session may have at once.
        max_claims: u32,
    },
    /// Reply to ACQUIRE: the claim holds the lock.
    Acquired {
        /// The claim id.
        claim: u32,
        /// The fencing token of the grant.
        token: u64,
    },
    /// Reply to ACQUIRE (wait): queued.
    Waiting {
        /// The claim id.
        claim: u32,
    },
    /// Reply to ACQUIRE (try): held by someone; the id stays free.
    Busy {
        /// The claim id.
        claim: u32,
    },
    /// Reply to RELEASE: released, and handed to the next waiter if any.
    Released {
        /// The claim id.
        claim: u32,
    },
    /// Reply to PING.
    Pong,
    /// Reply to ACQUIRE or RELEASE: refused for this claim; the session
    /// lives on.
    Refused {
        /// The claim id the frame named.
        claim: u32,
        /// Why, by the claim codes of docs/protocol.md.
        code: ErrorCode,
        /// Human-readable detail (may be empty).
        reason: String,
    },
    /// Push: a waiting claim was granted.
    Granted {
        /// The claim id.
        claim: u32,
        /// The fencing token of the grant.
        token: u64,
    },
    /// Push: the claim was ended by the server; the id is free.
    Revoked {
        /// The claim id.
        claim: u32,
        /// Why (0x08: an administrator).
        code: ErrorCode,
        /// Human-readable detail (may be empty).
        reason: String,
    },
    /// The session is over, with every claim; the server closes after it.
    Error {
        /// What happened, classified by range.
        code: ErrorCode,
        /// Human-readable detail (may be empty).
        reason: String,
    },
}

impl ServerFrame {
    /// Whether this frame is a reply (answers the oldest unanswered client
    /// frame) rather than a push or the session's end.
    pub const fn is_reply(&self) -> bool {
        !matches!(
            self,
            Self::Granted { .. } | Self::Revoked { .. } | Self::Error { .. }
        )
    }

    /// Appends the frame's bytes to `out`. A reason longer than
    /// [`MAX_ERROR_REASON_LEN`] bytes is cut at a character boundary.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Opened {
                session,
                max_claims,
            } => out.extend_from_slice(&opened_frame(*session, *max_claims)),
            Self::Acquired { claim, token } => {
                out.extend_from_slice(&acquired_frame(*claim, *token));
            }
            Self::Waiting { claim } => out.extend_from_slice(&waiting_frame(*claim)),
            Self::Busy { claim } => out.extend_from_slice(&busy_frame(*claim)),
            Self::Released { claim } => out.extend_from_slice(&released_frame(*claim)),
            Self::Pong => out.push(msg::PONG),
            Self::Refused {
                claim,
                code,
                reason,
            } => encode_claim_error(out, msg::REFUSED, *claim, *code, reason),
            Self::Granted { claim, token } => {
                out.extend_from_slice(&granted_frame(*claim, *token));
            }
            Self::Revoked {
                claim,
                code,
                reason,
            } => encode_claim_error(out, msg::REVOKED, *claim, *code, reason),
            Self::Error { code, reason } => {
                let reason = cut(reason);
                out.extend_from_slice(&[msg::ERROR, code.0, reason.len() as u8]);
                out.extend_from_slice(reason.as_bytes());
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

/// `reason` cut to at most [`MAX_ERROR_REASON_LEN`] bytes on a character
/// boundary.
fn cut(reason: &str) -> &str {
    let mut end = reason.len().min(MAX_ERROR_REASON_LEN);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    &reason[..end]
}

/// Appends a REFUSED or REVOKED frame (`kind`) to `out`, without
/// allocating beyond `out`'s own growth.
pub fn encode_claim_error(out: &mut Vec<u8>, kind: u8, claim: u32, code: ErrorCode, reason: &str) {
    let reason = cut(reason);
    out.extend_from_slice(&claim_frame(kind, claim));
    out.extend_from_slice(&[code.0, reason.len() as u8]);
    out.extend_from_slice(reason.as_bytes());
}

/// The 13 bytes of an OPENED.
pub const fn opened_frame(session: u64, max_claims: u32) -> [u8; 13] {
    let s = session.to_be_bytes();
    let m = max_claims.to_be_bytes();
    [
        msg::OPENED,
        s[0],
        s[1],
        s[2],
        s[3],
        s[4],
        s[5],
        s[6],
        s[7],
        m[0],
        m[1],
        m[2],
        m[3],
    ]
}

/// The 13 bytes of an ACQUIRED (reply).
///
/// ```
/// assert_eq!(
///     monolock_proto::v2::acquired_frame(1, 2),
///     [0x31, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2]
/// );
/// ```
pub const fn acquired_frame(claim: u32, token: u64) -> [u8; 13] {
    claim_token_frame(msg::ACQUIRED, claim, token)
}

/// The 13 bytes of a GRANTED (push).
pub const fn granted_frame(claim: u32, token: u64) -> [u8; 13] {
    claim_token_frame(msg::GRANTED, claim, token)
}

/// The 5 bytes of a WAITING.
pub const fn waiting_frame(claim: u32) -> [u8; 5] {
    claim_frame(msg::WAITING, claim)
}

/// The 5 bytes of a BUSY.
pub const fn busy_frame(claim: u32) -> [u8; 5] {
    claim_frame(msg::BUSY, claim)
}

/// The 5 bytes of a RELEASED.
pub const fn released_frame(claim: u32) -> [u8; 5] {
    claim_frame(msg::RELEASED, claim)
}

/// Validates the first frame of a version 2 connection, server side:
/// type byte (`0x11` if not `0x01`), version (`0x10` if not 2), lease
/// (`0x17` if zero). Returns the lease and the bytes used (always
/// [`OPEN_LEN`]).
///
/// ```
/// use monolock_proto::{ErrorCode, v2};
///
/// assert_eq!(v2::decode_open(&[1, 2, 0]).unwrap(), None);
/// assert_eq!(v2::decode_open(&[1, 3]).unwrap_err().code, ErrorCode::UNSUPPORTED_VERSION);
/// assert_eq!(v2::decode_open(&[1, 2, 0, 0, 0, 0]).unwrap_err().code, ErrorCode::LEASE_NOT_POSITIVE);
/// ```
///
/// # Errors
/// A [`RequestError`] carrying the code the server must answer with.
pub fn decode_open(buf: &[u8]) -> Result<Option<(Lease, usize)>, RequestError> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    if kind != msg::OPEN {
        return Err(RequestError {
            code: ErrorCode::FIRST_MESSAGE_NOT_ACQUIRE,
            reason: format!(
                "first message must be ACQUIRE (v1) or OPEN (v2), got type 0x{kind:02x}"
            ),
        });
    }
    let Some(&version) = buf.get(1) else {
        return Ok(None);
    };
    if version != VERSION {
        return Err(RequestError {
            code: ErrorCode::UNSUPPORTED_VERSION,
            reason: format!("unsupported protocol version {version}; this server speaks 1 and 2"),
        });
    }
    let Some(lease) = buf.get(2..OPEN_LEN) else {
        return Ok(None);
    };
    let lease = u32::from_be_bytes([lease[0], lease[1], lease[2], lease[3]]);
    match Lease::from_millis(lease) {
        Some(lease) => Ok(Some((lease, OPEN_LEN))),
        None => Err(RequestError {
            code: ErrorCode::LEASE_NOT_POSITIVE,
            reason: "lease must be positive".to_owned(),
        }),
    }
}

/// A client frame of an open session, as the server reads it (the name
/// borrowed from the input).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// A valid ACQUIRE.
    Acquire {
        /// The claim id.
        claim: u32,
        /// Wait or try.
        mode: Mode,
        /// The lock name: valid (1..=255 bytes of UTF-8).
        name: &'a str,
    },
    /// A well-framed ACQUIRE to refuse for its claim only (REFUSED).
    BadAcquire {
        /// The claim id it named.
        claim: u32,
        /// The claim code to answer with.
        code: ErrorCode,
        /// What is wrong, for the REFUSED reason.
        reason: &'static str,
    },
    /// A RELEASE.
    Release {
        /// The claim id.
        claim: u32,
    },
    /// A PING.
    Ping,
}

pub(crate) fn u32_at(buf: &[u8], at: usize) -> Option<u32> {
    let b = buf.get(at..at + 4)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Decodes the next client frame of an open session, server side.
///
/// `Ok(None)` while more bytes are needed; `Ok(Some((request, used)))`
/// once a whole frame is there. An ACQUIRE with a bad mode, an empty name
/// or a name that is not UTF-8 is still a whole frame: it decodes as
/// [`Request::BadAcquire`] (checked in that order).
///
/// ```
/// use monolock_proto::{ErrorCode, v2};
///
/// assert_eq!(v2::decode_request(&[0x23]).unwrap(), Some((v2::Request::Ping, 1)));
/// assert_eq!(v2::decode_request(&[0x22, 0, 0]).unwrap(), None);
/// assert_eq!(v2::decode_request(&[0x02]).unwrap_err().code, ErrorCode::OUT_OF_STATE);
/// assert_eq!(v2::decode_request(&[0x7f]).unwrap_err().code, ErrorCode::UNKNOWN_MESSAGE_TYPE);
/// ```
///
/// # Errors
/// A [`RequestError`] that ends the session: `0x19` for a version 1 frame
/// (`0x01`, `0x02`), `0x13` for any other unknown type byte.
pub fn decode_request(buf: &[u8]) -> Result<Option<(Request<'_>, usize)>, RequestError> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    match kind {
        msg::PING => Ok(Some((Request::Ping, 1))),
        msg::RELEASE => Ok(u32_at(buf, 1).map(|claim| (Request::Release { claim }, 5))),
        msg::ACQUIRE => {
            let (Some(claim), Some(&mode), Some(&len)) = (u32_at(buf, 1), buf.get(5), buf.get(6))
            else {
                return Ok(None);
            };
            let end = ACQUIRE_HEADER_LEN + usize::from(len);
            let Some(name) = buf.get(ACQUIRE_HEADER_LEN..end) else {
                return Ok(None);
            };
            let request = match (Mode::from_byte(mode), std::str::from_utf8(name)) {
                (None, _) => Request::BadAcquire {
                    claim,
                    code: ErrorCode::UNKNOWN_MODE,
                    reason: "unknown ACQUIRE mode: expected 0 (wait) or 1 (try)",
                },
                (Some(_), _) if name.is_empty() => Request::BadAcquire {
                    claim,
                    code: ErrorCode::CLAIM_EMPTY_NAME,
                    reason: "lock name is empty",
                },
                (Some(_), Err(_)) => Request::BadAcquire {
                    claim,
                    code: ErrorCode::CLAIM_NAME_NOT_UTF8,
                    reason: "lock name is not valid UTF-8",
                },
                (Some(mode), Ok(name)) => Request::Acquire { claim, mode, name },
            };
            Ok(Some((request, end)))
        }
        v1::ACQUIRE | v1::HEARTBEAT => Err(RequestError {
            code: ErrorCode::OUT_OF_STATE,
            reason: format!(
                "frame out of state: type 0x{kind:02x} is a version 1 frame (or a second OPEN) on a version 2 session"
            ),
        }),
        other => Err(RequestError {
            code: ErrorCode::UNKNOWN_MESSAGE_TYPE,
            reason: format!("unknown message type: 0x{other:02x}"),
        }),
    }
}

/// A server sent bytes that are not a version 2 frame.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The type byte is not one of version 2's server frames.
    #[error("unexpected message type 0x{0:02x} from server (protocol v2)")]
    UnknownType(u8),
}

/// Decodes the next server frame of a version 2 session, client side.
///
/// `Ok(None)` while more bytes are needed. Reasons that are not UTF-8 are
/// decoded lossily: they are for humans only.
///
/// ```
/// use monolock_proto::v2::{decode_response, ServerFrame};
///
/// assert_eq!(decode_response(&[0x35]).unwrap(), Some((ServerFrame::Pong, 1)));
/// assert_eq!(decode_response(&[0x34, 0, 0, 0]).unwrap(), None);
/// assert!(decode_response(&[0x11]).is_err());
/// ```
///
/// # Errors
/// [`DecodeError::UnknownType`] for any other type byte.
pub fn decode_response(buf: &[u8]) -> Result<Option<(ServerFrame, usize)>, DecodeError> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    let token_at = |at: usize| {
        buf.get(at..at + 8).map(|t| {
            let mut token = [0u8; 8];
            token.copy_from_slice(t);
            u64::from_be_bytes(token)
        })
    };
    let reason_at = |at: usize| {
        let len = usize::from(*buf.get(at)?);
        buf.get(at + 1..at + 1 + len)
            .map(|r| (String::from_utf8_lossy(r).into_owned(), at + 1 + len))
    };
    Ok(match kind {
        msg::OPENED => token_at(1)
            .zip(u32_at(buf, 9))
            .map(|(session, max_claims)| {
                (
                    ServerFrame::Opened {
                        session,
                        max_claims,
                    },
                    13,
                )
            }),
        msg::ACQUIRED | msg::GRANTED => u32_at(buf, 1).zip(token_at(5)).map(|(claim, token)| {
            let frame = if kind == msg::ACQUIRED {
                ServerFrame::Acquired { claim, token }
            } else {
                ServerFrame::Granted { claim, token }
            };
            (frame, 13)
        }),
        msg::WAITING => u32_at(buf, 1).map(|claim| (ServerFrame::Waiting { claim }, 5)),
        msg::BUSY => u32_at(buf, 1).map(|claim| (ServerFrame::Busy { claim }, 5)),
        msg::RELEASED => u32_at(buf, 1).map(|claim| (ServerFrame::Released { claim }, 5)),
        msg::PONG => Some((ServerFrame::Pong, 1)),
        msg::REFUSED | msg::REVOKED => {
            let (Some(claim), Some(&code)) = (u32_at(buf, 1), buf.get(5)) else {
                return Ok(None);
            };
            reason_at(6).map(|(reason, end)| {
                let code = ErrorCode(code);
                let frame = if kind == msg::REFUSED {
                    ServerFrame::Refused {
                        claim,
                        code,
                        reason,
                    }
                } else {
                    ServerFrame::Revoked {
                        claim,
                        code,
                        reason,
                    }
                };
                (frame, end)
            })
        }
        msg::ERROR => {
            let Some(&code) = buf.get(1) else {
                return Ok(None);
            };
            reason_at(2).map(|(reason, end)| {
                (
                    ServerFrame::Error {
                        code: ErrorCode(code),
                        reason,
                    },
                    end,
                )
            })
        }
        other => return Err(DecodeError::UnknownType(other)),
    })
}

impl fmt::Display for ClientFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Open { lease } => write!(f, "OPEN lease={}ms", lease.as_millis()),
            Self::Acquire { claim, mode, name } => {
                write!(f, "ACQUIRE claim={claim} {mode:?} {name:?}")
            }
            Self::Release { claim } => write!(f, "RELEASE claim={claim}"),
            Self::Ping => f.write_str("PING"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(ms: u32) -> Lease {
        Lease::from_millis(ms).expect("positive")
    }

    fn name(text: &str) -> LockName {
        LockName::new(text).expect("valid name")
    }

    /// The worked exchange of docs/protocol.md, byte for byte.
    #[test]
    fn the_documented_exchange_encodes_as_written() {
        let hex = |bytes: Vec<u8>| {
            bytes
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let token = 0x0006_b49d_2000_0000;
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                ClientFrame::Open { lease: lease(2000) }.to_bytes(),
                "01 02 00 00 07 d0",
            ),
            (
                ServerFrame::Opened {
                    session: 1,
                    max_claims: 1024,
                }
                .to_bytes(),
                "30 00 00 00 00 00 00 00 01 00 00 04 00",
            ),
            (
                ClientFrame::Acquire {
                    claim: 1,
                    mode: Mode::Wait,
                    name: name("deploy"),
                }
                .to_bytes(),
                "21 00 00 00 01 00 06 64 65 70 6c 6f 79",
            ),
            (
                ServerFrame::Acquired { claim: 1, token }.to_bytes(),
                "31 00 00 00 01 00 06 b4 9d 20 00 00 00",
            ),
            (
                ClientFrame::Acquire {
                    claim: 2,
                    mode: Mode::Try,
                    name: name("deploy"),
                }
                .to_bytes(),
                "21 00 00 00 02 01 06 64 65 70 6c 6f 79",
            ),
            (ServerFrame::Busy { claim: 2 }.to_bytes(), "33 00 00 00 02"),
            (
                ServerFrame::Waiting { claim: 3 }.to_bytes(),
                "32 00 00 00 03",
            ),
            (ClientFrame::Ping.to_bytes(), "23"),
            (ServerFrame::Pong.to_bytes(), "35"),
            (
                ServerFrame::Granted {
                    claim: 3,
                    token: token + 2,
                }
                .to_bytes(),
                "37 00 00 00 03 00 06 b4 9d 20 00 00 02",
            ),
            (
                ClientFrame::Release { claim: 1 }.to_bytes(),
                "22 00 00 00 01",
            ),
            (
                ServerFrame::Released { claim: 1 }.to_bytes(),
                "34 00 00 00 01",
            ),
            (
                ServerFrame::Refused {
                    claim: 9,
                    code: ErrorCode::UNKNOWN_CLAIM,
                    reason: "unknown claim id: 9".into(),
                }
                .to_bytes(),
                "36 00 00 00 09 20 13 75 6e 6b 6e 6f 77 6e 20 63 6c 61 69 6d 20 69 64 3a 20 39",
            ),
            (
                ServerFrame::Revoked {
                    claim: 3,
                    code: ErrorCode::CLAIM_REVOKED,
                    reason: "force-release".into(),
                }
                .to_bytes(),
                "38 00 00 00 03 08 0d 66 6f 72 63 65 2d 72 65 6c 65 61 73 65",
            ),
        ];
        for (bytes, expected) in cases {
            assert_eq!(hex(bytes), expected);
        }
    }

    /// What a server that speaks only version 1 does with an OPEN: its
    /// decoder answers 0x10, the client's signal to fall back to v1.
    #[test]
    fn a_v1_decoder_answers_an_open_with_unsupported_version() {
        let open = ClientFrame::Open { lease: lease(2000) }.to_bytes();
        let err = crate::decode_request(&open, crate::Phase::AwaitingAcquire).unwrap_err();
        assert_eq!(err.code, ErrorCode::UNSUPPORTED_VERSION);
        let err = crate::decode_acquire_header(&open[..2]).unwrap_err();
        assert_eq!(err.code, ErrorCode::UNSUPPORTED_VERSION);
    }

    #[test]
    fn open_is_checked_in_the_documented_order() {
        let code = |bytes: &[u8]| decode_open(bytes).unwrap_err().code;
        assert_eq!(
            code(&[0x02, 2, 0, 0, 0, 0]),
            ErrorCode::FIRST_MESSAGE_NOT_ACQUIRE
        );
        assert_eq!(code(&[0x01, 1, 0, 0, 0, 0]), ErrorCode::UNSUPPORTED_VERSION);
        assert_eq!(code(&[0x01, 9, 0, 0, 0, 0]), ErrorCode::UNSUPPORTED_VERSION);
        assert_eq!(code(&[0x01, 2, 0, 0, 0, 0]), ErrorCode::LEASE_NOT_POSITIVE);
        for len in 0..OPEN_LEN {
            assert_eq!(decode_open(&[1, 2, 0, 0, 0, 5][..len]), Ok(None), "{len}");
        }
        assert_eq!(
            decode_open(&[1, 2, 0xff, 0xff, 0xff, 0xff, 0x23]),
            Ok(Some((lease(u32::MAX), 6)))
        );
    }

    #[test]
    fn every_prefix_of_a_request_needs_more() {
        let frames = [
            ClientFrame::Acquire {
                claim: u32::MAX,
                mode: Mode::Try,
                name: name(&"é".repeat(127)),
            }
            .to_bytes(),
            ClientFrame::Release { claim: 0 }.to_bytes(),
        ];
        for bytes in frames {
            for len in 0..bytes.len() {
                assert_eq!(decode_request(&bytes[..len]), Ok(None), "{len}");
            }
            let (_, used) = decode_request(&bytes).unwrap().unwrap();
            assert_eq!(used, bytes.len());
        }
    }

    #[test]
    fn bad_acquires_are_refused_for_their_claim_only() {
        let acquire = |mode: u8, name: &[u8]| {
            let mut bytes = vec![msg::ACQUIRE, 0, 0, 1, 0, mode, name.len() as u8];
            bytes.extend_from_slice(name);
            match decode_request(&bytes).unwrap().unwrap() {
                (Request::BadAcquire { claim, code, .. }, used) => {
                    assert_eq!((claim, used), (256, bytes.len()));
                    code
                }
                other => panic!("{other:?}"),
            }
        };
        // Checked in order: mode, then empty, then UTF-8.
        assert_eq!(acquire(2, b""), ErrorCode::UNKNOWN_MODE);
        assert_eq!(acquire(0, b""), ErrorCode::CLAIM_EMPTY_NAME);
        assert_eq!(acquire(1, &[0xff]), ErrorCode::CLAIM_NAME_NOT_UTF8);
        assert_eq!(
            decode_request(&[msg::ACQUIRE, 0, 0, 0, 7, 1, 1, b'a', 0x23]).unwrap(),
            Some((
                Request::Acquire {
                    claim: 7,
                    mode: Mode::Try,
                    name: "a"
                },
                8
            ))
        );
    }

    #[test]
    fn session_ending_type_bytes() {
        for kind in [0x01, 0x02] {
            assert_eq!(
                decode_request(&[kind]).unwrap_err().code,
                ErrorCode::OUT_OF_STATE
            );
        }
        for kind in (0..=u8::MAX).filter(|k| ![0x01, 0x02, 0x21, 0x22, 0x23].contains(k)) {
            let err = decode_request(&[kind]).unwrap_err();
            assert_eq!(err.code, ErrorCode::UNKNOWN_MESSAGE_TYPE, "{kind:#x}");
            assert!(!err.code.is_temporary());
        }
    }

    #[test]
    fn server_frames_round_trip_and_every_prefix_needs_more() {
        let frames = [
            ServerFrame::Opened {
                session: u64::MAX,
                max_claims: 3,
            },
            ServerFrame::Acquired {
                claim: 1,
                token: 99,
            },
            ServerFrame::Waiting { claim: 2 },
            ServerFrame::Busy { claim: 3 },
            ServerFrame::Released { claim: 4 },
            ServerFrame::Pong,
            ServerFrame::Refused {
                claim: 5,
                code: ErrorCode::CLAIM_IN_USE,
                reason: "claim id 5 is in use".into(),
            },
            ServerFrame::Granted {
                claim: 6,
                token: u64::MAX,
            },
            ServerFrame::Revoked {
                claim: 7,
                code: ErrorCode::CLAIM_REVOKED,
                reason: String::new(),
            },
            ServerFrame::Error {
                code: ErrorCode::IDLE_SESSION,
                reason: "idle".into(),
            },
        ];
        for frame in frames {
            let bytes = frame.to_bytes();
            for len in 0..bytes.len() {
                assert_eq!(decode_response(&bytes[..len]), Ok(None), "{frame:?} {len}");
            }
            let mut longer = bytes.clone();
            longer.push(0x35);
            assert_eq!(
                decode_response(&longer),
                Ok(Some((frame.clone(), bytes.len())))
            );
            assert_eq!(frame.is_reply(), (0x30..=0x36).contains(&bytes[0]));
        }
        assert_eq!(
            decode_response(&[0x12]),
            Err(DecodeError::UnknownType(0x12))
        );
    }

    #[test]
    fn long_reasons_are_cut_on_a_char_boundary() {
        let frame = ServerFrame::Revoked {
            claim: 1,
            code: ErrorCode::CLAIM_REVOKED,
            reason: "é".repeat(200),
        };
        let bytes = frame.to_bytes();
        assert_eq!(bytes[6], 254);
        let (decoded, _) = decode_response(&bytes).unwrap().unwrap();
        assert_eq!(
            decoded,
            ServerFrame::Revoked {
                claim: 1,
                code: ErrorCode::CLAIM_REVOKED,
                reason: "é".repeat(127)
            }
        );
    }
}
