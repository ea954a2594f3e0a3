//! The version 2 extension: lock values and observers.
//!
//! The layouts are those of docs/protocol.md ("Version 2 extension:
//! values and observers"). A client asks for the extension with
//! [`ClientFrame::Hello`], the first frame after OPEN; the server answers
//! [`ServerFrame::Features`] (or, when it predates the extension, OPENED
//! then ERROR `0x13`). The extension's frames then share the session with
//! version 2's: [`decode_request`] and [`decode_response`] decode both,
//! handing version 2's frames on as [`Request::Base`] and
//! [`Response::Base`], so a session has one decoder whichever frames it
//! uses.
//!
//! ```
//! use monolock_proto::{LockName, ext, v2};
//!
//! let frame = ext::ClientFrame::Observe { watch: 7, name: LockName::new("deploy").unwrap() };
//! let bytes = frame.to_bytes();
//! assert_eq!(bytes, [0x27, 0, 0, 0, 7, 6, b'd', b'e', b'p', b'l', b'o', b'y']);
//! let (request, used) = ext::decode_request(&bytes).unwrap().unwrap();
//! assert_eq!((request, used), (ext::Request::Observe { watch: 7, name: "deploy" }, 12));
//!
//! // Version 2's frames decode through the same function.
//! let (request, _) = ext::decode_request(&[0x23]).unwrap().unwrap();
//! assert_eq!(request, ext::Request::Base(v2::Request::Ping));
//! ```

use std::fmt;

use crate::{ErrorCode, LockName, RequestError, v2, v2::Mode, v2::u32_at};

/// The feature bit of values and observers in HELLO and FEATURES.
pub const FEATURE_VALUES_AND_OBSERVERS: u32 = 0x0000_0001;

/// The most bytes a value may have (of UTF-8 text).
pub const MAX_VALUE_LEN: usize = 1024;

/// The most watches a session may have unless the server says otherwise
/// (`--max-watches-per-session`).
pub const DEFAULT_MAX_WATCHES: u32 = 1024;

/// Bytes of a HELLO.
pub const HELLO_LEN: usize = 5;

/// Bytes of a FEATURES.
pub const FEATURES_LEN: usize = 9;

/// Bytes of a state before its value: event, flags, token, since_ms,
/// reason, value_len.
pub const STATE_HEADER_LEN: usize = 21;

/// Message type bytes of the extension.
pub mod msg {
    /// Client -> server, first frame after OPEN: ask for features.
    pub const HELLO: u8 = 0x24;
    /// Client -> server: ACQUIRE with a value.
    pub const ACQUIRE_VALUE: u8 = 0x25;
    /// Client -> server: replace a claim's value.
    pub const PROCLAIM: u8 = 0x26;
    /// Client -> server: observe a lock under a watch id.
    pub const OBSERVE: u8 = 0x27;
    /// Client -> server: end a watch.
    pub const UNOBSERVE: u8 = 0x28;
    /// Client -> server: who holds a lock now.
    pub const LOOKUP: u8 = 0x29;
    /// Server -> client, reply to HELLO.
    pub const FEATURES: u8 = 0x39;
    /// Server -> client, reply to PROCLAIM.
    pub const PROCLAIMED: u8 = 0x3a;
    /// Server -> client, reply to OBSERVE.
    pub const OBSERVING: u8 = 0x3b;
    /// Server -> client, reply to UNOBSERVE.
    pub const UNOBSERVED: u8 = 0x3c;
    /// Server -> client, reply to LOOKUP.
    pub const LOCK_STATE: u8 = 0x3d;
    /// Server -> client, push: a watched lock's state or change.
    pub const STATE: u8 = 0x3e;
}

/// What a state says happened, or where the lock stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StateEvent {
    /// Nobody holds the lock (a state).
    Free,
    /// Held under the token, since `since_ms`, with the value (a state).
    Held,
    /// Change: granted under the token, with the value.
    Granted,
    /// Change: the holder of the token replaced its value.
    Value,
    /// Change: the claim holding the token ended, for its reason.
    Released,
}

impl StateEvent {
    /// The event's byte on the wire.
    pub const fn byte(self) -> u8 {
        match self {
            Self::Free => 0x00,
            Self::Held => 0x01,
            Self::Granted => 0x02,
            Self::Value => 0x03,
            Self::Released => 0x04,
        }
    }

    /// The event of a byte, if it is one.
    pub const fn from_byte(byte: u8) -> Option<Self> {
        Some(match byte {
            0x00 => Self::Free,
            0x01 => Self::Held,
            0x02 => Self::Granted,
            0x03 => Self::Value,
            0x04 => Self::Released,
            _ => return None,
        })
    }

    /// Whether the lock is held after this event.
    pub const fn held(self) -> bool {
        matches!(self, Self::Held | Self::Granted | Self::Value)
    }

    /// The event's name in JSON and the shared client vocabulary.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Free => "free",
            Self::Held => "held",
            Self::Granted => "granted",
            Self::Value => "value",
            Self::Released => "released",
        }
    }
}

/// Why a claim observed by a watch ended (RELEASED only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReleaseReason {
    /// Its holder: a RELEASE, or its connection closed or reset.
    Released,
    /// A lease of silence.
    Expired,
    /// An administrator's force-release.
    Forced,
    /// The server ended the session; the kept claim was released at its
    /// last frame + lease.
    EndedByServer,
}

impl ReleaseReason {
    /// The reason's byte on the wire.
    pub const fn byte(self) -> u8 {
        match self {
            Self::Released => 0x01,
            Self::Expired => 0x02,
            Self::Forced => 0x03,
            Self::EndedByServer => 0x04,
        }
    }

    /// The reason of a byte, if it is one (`0` is none).
    pub const fn from_byte(byte: u8) -> Option<Self> {
        Some(match byte {
            0x01 => Self::Released,
            0x02 => Self::Expired,
            0x03 => Self::Forced,
            0x04 => Self::EndedByServer,
            _ => return None,
        })
    }

    /// The reason's name in JSON and the shared client vocabulary.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Released => "released",
            Self::Expired => "expired",
            Self::Forced => "forced",
            Self::EndedByServer => "ended_by_server",
        }
    }
}

/// The INITIAL flag: the first push of a watch.
pub const FLAG_INITIAL: u8 = 0x01;
/// The COALESCED flag: changes were dropped; this is the state now.
pub const FLAG_COALESCED: u8 = 0x02;

/// A lock's state or change, as STATE and LOCK_STATE carry it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockState {
    /// What happened, or where the lock stands.
    pub event: StateEvent,
    /// The flag bits ([`FLAG_INITIAL`], [`FLAG_COALESCED`]; others kept as read).
    pub flags: u8,
    /// The holder's token, the released token, or the last known (FREE; 0 if unknown).
    pub token: u64,
    /// The server's wall clock (Unix ms) of the grant or the release; 0 if unknown.
    pub since_ms: u64,
    /// Why the claim ended (RELEASED); `None` otherwise or for an unknown byte.
    pub reason: Option<ReleaseReason>,
    /// The holder's value; empty when free.
    pub value: String,
}

impl LockState {
    /// Whether the lock is held in this state.
    pub const fn held(&self) -> bool {
        self.event.held()
    }

    /// Whether this is the first push of its watch.
    pub const fn initial(&self) -> bool {
        self.flags & FLAG_INITIAL != 0
    }

    /// Whether changes before this push were dropped.
    pub const fn coalesced(&self) -> bool {
        self.flags & FLAG_COALESCED != 0
    }

    /// Appends the state's bytes (without a type byte or watch id).
    pub fn encode(&self, out: &mut Vec<u8>) {
        encode_state(
            out,
            self.event,
            self.flags,
            self.token,
            self.since_ms,
            self.reason,
            self.value.as_bytes(),
        );
    }
}

/// Appends a state's bytes to `out`, borrowing the value (the server
/// encodes pushes this way, without building a [`LockState`]). A value
/// longer than `u16::MAX` bytes cannot occur: values are checked against
/// [`MAX_VALUE_LEN`] when they are accepted; it is cut if it ever did.
pub fn encode_state(
    out: &mut Vec<u8>,
    event: StateEvent,
    flags: u8,
    token: u64,
    since_ms: u64,
    reason: Option<ReleaseReason>,
    value: &[u8],
) {
    let value = &value[..value.len().min(usize::from(u16::MAX))];
    out.reserve(STATE_HEADER_LEN + value.len());
    out.push(event.byte());
    out.push(flags);
    out.extend_from_slice(&token.to_be_bytes());
    out.extend_from_slice(&since_ms.to_be_bytes());
    out.push(reason.map_or(0, ReleaseReason::byte));
    // Cut to u16::MAX above: the cast cannot truncate.
    out.extend_from_slice(&(value.len() as u16).to_be_bytes());
    out.extend_from_slice(value);
}

/// Appends a whole STATE push (type, watch, state) to `out`.
#[allow(clippy::too_many_arguments)]
pub fn encode_state_push(
    out: &mut Vec<u8>,
    watch: u32,
    event: StateEvent,
    flags: u8,
    token: u64,
    since_ms: u64,
    reason: Option<ReleaseReason>,
    value: &[u8],
) {
    out.push(msg::STATE);
    out.extend_from_slice(&watch.to_be_bytes());
    encode_state(out, event, flags, token, since_ms, reason, value);
}

/// A client frame of the extension, owned (clients and tests encode these).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientFrame {
    /// Ask for features (the first frame after OPEN).
    Hello {
        /// The feature bits asked for.
        features: u32,
    },
    /// ACQUIRE with a value.
    AcquireValue {
        /// The claim id.
        claim: u32,
        /// Wait or try.
        mode: Mode,
        /// The lock.
        name: LockName,
        /// The value (at most [`MAX_VALUE_LEN`] bytes; not checked here,
        /// so tests can send a longer one).
        value: String,
    },
    /// Replace a claim's value.
    Proclaim {
        /// The claim id.
        claim: u32,
        /// The new value.
        value: String,
    },
    /// Observe a lock.
    Observe {
        /// The watch id, chosen by the client.
        watch: u32,
        /// The lock.
        name: LockName,
    },
    /// End a watch.
    Unobserve {
        /// The watch id.
        watch: u32,
    },
    /// Who holds a lock now.
    Lookup {
        /// The lock.
        name: LockName,
    },
}

fn push_value(out: &mut Vec<u8>, value: &[u8]) {
    let value = &value[..value.len().min(usize::from(u16::MAX))];
    // Cut to u16::MAX above: the cast cannot truncate.
    out.extend_from_slice(&(value.len() as u16).to_be_bytes());
    out.extend_from_slice(value);
}

fn push_name(out: &mut Vec<u8>, name: &LockName) {
    // A LockName is at most 255 bytes: the u8 cannot truncate.
    out.push(name.len() as u8);
    out.extend_from_slice(name.as_bytes());
}

impl ClientFrame {
    /// Appends the frame's bytes to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Hello { features } => {
                out.push(msg::HELLO);
                out.extend_from_slice(&features.to_be_bytes());
            }
            Self::AcquireValue {
                claim,
                mode,
                name,
                value,
            } => {
                out.push(msg::ACQUIRE_VALUE);
                out.extend_from_slice(&claim.to_be_bytes());
                out.push(mode.byte());
                push_name(out, name);
                push_value(out, value.as_bytes());
            }
            Self::Proclaim { claim, value } => {
                out.push(msg::PROCLAIM);
                out.extend_from_slice(&claim.to_be_bytes());
                push_value(out, value.as_bytes());
            }
            Self::Observe { watch, name } => {
                out.push(msg::OBSERVE);
                out.extend_from_slice(&watch.to_be_bytes());
                push_name(out, name);
            }
            Self::Unobserve { watch } => {
                out.push(msg::UNOBSERVE);
                out.extend_from_slice(&watch.to_be_bytes());
            }
            Self::Lookup { name } => {
                out.push(msg::LOOKUP);
                push_name(out, name);
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

impl fmt::Display for ClientFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Hello { features } => write!(f, "HELLO features=0x{features:08x}"),
            Self::AcquireValue {
                claim,
                mode,
                name,
                value,
            } => write!(f, "ACQUIRE_VALUE claim={claim} {mode:?} {name:?} {value:?}"),
            Self::Proclaim { claim, value } => write!(f, "PROCLAIM claim={claim} {value:?}"),
            Self::Observe { watch, name } => write!(f, "OBSERVE watch={watch} {name:?}"),
            Self::Unobserve { watch } => write!(f, "UNOBSERVE watch={watch}"),
            Self::Lookup { name } => write!(f, "LOOKUP {name:?}"),
        }
    }
}

/// A frame the server reads on a session that may use the extension:
/// version 2's frames, or the extension's (names and values borrowed from
/// the input).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// A version 2 frame (ACQUIRE, RELEASE, PING, or a bad ACQUIRE).
    Base(v2::Request<'a>),
    /// HELLO.
    Hello {
        /// The feature bits asked for.
        features: u32,
    },
    /// A valid ACQUIRE_VALUE.
    AcquireValue {
        /// The claim id.
        claim: u32,
        /// Wait or try.
        mode: Mode,
        /// The lock name: valid (1..=255 bytes of UTF-8).
        name: &'a str,
        /// The value: valid (at most [`MAX_VALUE_LEN`] bytes of UTF-8).
        value: &'a str,
    },
    /// A valid PROCLAIM.
    Proclaim {
        /// The claim id.
        claim: u32,
        /// The value: valid.
        value: &'a str,
    },
    /// A valid OBSERVE.
    Observe {
        /// The watch id.
        watch: u32,
        /// The lock name: valid.
        name: &'a str,
    },
    /// UNOBSERVE.
    Unobserve {
        /// The watch id.
        watch: u32,
    },
    /// A valid LOOKUP.
    Lookup {
        /// The lock name: valid.
        name: &'a str,
    },
    /// A well-framed extension frame to refuse for its id only (REFUSED,
    /// naming `id`: the claim, the watch, or 0 for LOOKUP).
    Refuse {
        /// The frame's type byte.
        kind: u8,
        /// The id to name in REFUSED.
        id: u32,
        /// The claim code to answer with.
        code: ErrorCode,
        /// What is wrong, for the REFUSED reason.
        reason: &'static str,
    },
}

impl Request<'_> {
    /// Whether this frame belongs to the extension (a session that was
    /// not granted it answers ERROR `0x13`, as a server without it would).
    pub const fn is_extension(&self) -> bool {
        !matches!(self, Self::Base(_))
    }
}

/// A lock name as the extension's frames check it: empty `0x22`, not
/// UTF-8 `0x23`.
fn check_name(name: &[u8]) -> Result<&str, (ErrorCode, &'static str)> {
    if name.is_empty() {
        return Err((ErrorCode::CLAIM_EMPTY_NAME, "lock name is empty"));
    }
    std::str::from_utf8(name).map_err(|_| {
        (
            ErrorCode::CLAIM_NAME_NOT_UTF8,
            "lock name is not valid UTF-8",
        )
    })
}

/// A value as the extension's frames check it: too long `0x26`, not
/// UTF-8 `0x27`.
fn check_value(value: &[u8]) -> Result<&str, (ErrorCode, &'static str)> {
    if value.len() > MAX_VALUE_LEN {
        return Err((ErrorCode::VALUE_TOO_LONG, "value is longer than 1024 bytes"));
    }
    std::str::from_utf8(value).map_err(|_| (ErrorCode::VALUE_NOT_UTF8, "value is not valid UTF-8"))
}

/// `buf[at..]` as a u8-length-prefixed field: the bytes and the end.
fn short_field(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let len = usize::from(*buf.get(at)?);
    buf.get(at + 1..at + 1 + len).map(|b| (b, at + 1 + len))
}

/// `buf[at..]` as a u16-length-prefixed field: the bytes and the end.
fn long_field(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let len = buf.get(at..at + 2)?;
    let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
    buf.get(at + 2..at + 2 + len).map(|b| (b, at + 2 + len))
}

fn refuse(kind: u8, id: u32, (code, reason): (ErrorCode, &'static str)) -> Request<'static> {
    Request::Refuse {
        kind,
        id,
        code,
        reason,
    }
}

/// Decodes the next client frame of an open session, server side, with
/// the extension's frames: version 2's are decoded by
/// [`v2::decode_request`] and returned as [`Request::Base`].
///
/// `Ok(None)` while more bytes are needed. A well-framed extension frame
/// that must be refused for its id decodes as [`Request::Refuse`], checked
/// in the order of docs/protocol.md (ACQUIRE_VALUE: mode, name, value;
/// PROCLAIM: value; OBSERVE and LOOKUP: name). Whether the session may use
/// the extension, and whether a HELLO comes first, is the caller's to
/// check ([`Request::is_extension`]).
///
/// ```
/// use monolock_proto::{ErrorCode, ext};
///
/// let (request, used) = ext::decode_request(&[0x24, 0, 0, 0, 1]).unwrap().unwrap();
/// assert_eq!((request, used), (ext::Request::Hello { features: 1 }, 5));
/// assert_eq!(ext::decode_request(&[0x26, 0, 0, 0, 1, 0, 3, b'a']).unwrap(), None);
/// let (request, _) = ext::decode_request(&[0x26, 0, 0, 0, 1, 0, 1, 0xff]).unwrap().unwrap();
/// assert!(matches!(request, ext::Request::Refuse { code: ErrorCode::VALUE_NOT_UTF8, id: 1, .. }));
/// ```
///
/// # Errors
/// The [`RequestError`]s of [`v2::decode_request`] for unknown type bytes
/// and version 1 frames.
pub fn decode_request(buf: &[u8]) -> Result<Option<(Request<'_>, usize)>, RequestError> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    Ok(match kind {
        msg::HELLO => u32_at(buf, 1).map(|features| (Request::Hello { features }, HELLO_LEN)),
        msg::UNOBSERVE => u32_at(buf, 1).map(|watch| (Request::Unobserve { watch }, 5)),
        msg::ACQUIRE_VALUE => {
            let (Some(claim), Some(&mode)) = (u32_at(buf, 1), buf.get(5)) else {
                return Ok(None);
            };
            let Some((name, end)) = short_field(buf, 6) else {
                return Ok(None);
            };
            let Some((value, end)) = long_field(buf, end) else {
                return Ok(None);
            };
            let request = match Mode::from_byte(mode) {
                None => refuse(
                    kind,
                    claim,
                    (
                        ErrorCode::UNKNOWN_MODE,
                        "unknown ACQUIRE mode: expected 0 (wait) or 1 (try)",
                    ),
                ),
                Some(mode) => match check_name(name).and_then(|n| Ok((n, check_value(value)?))) {
                    Ok((name, value)) => Request::AcquireValue {
                        claim,
                        mode,
                        name,
                        value,
                    },
                    Err(why) => refuse(kind, claim, why),
                },
            };
            Some((request, end))
        }
        msg::PROCLAIM => {
            let Some(claim) = u32_at(buf, 1) else {
                return Ok(None);
            };
            long_field(buf, 5).map(|(value, end)| {
                let request = match check_value(value) {
                    Ok(value) => Request::Proclaim { claim, value },
                    Err(why) => refuse(kind, claim, why),
                };
                (request, end)
            })
        }
        msg::OBSERVE => {
            let Some(watch) = u32_at(buf, 1) else {
                return Ok(None);
            };
            short_field(buf, 5).map(|(name, end)| {
                let request = match check_name(name) {
                    Ok(name) => Request::Observe { watch, name },
                    Err(why) => refuse(kind, watch, why),
                };
                (request, end)
            })
        }
        msg::LOOKUP => short_field(buf, 1).map(|(name, end)| {
            let request = match check_name(name) {
                Ok(name) => Request::Lookup { name },
                Err(why) => refuse(kind, 0, why),
            };
            (request, end)
        }),
        _ => v2::decode_request(buf)?.map(|(request, used)| (Request::Base(request), used)),
    })
}

/// A server frame of the extension.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerFrame {
    /// Reply to HELLO.
    Features {
        /// The feature bits granted.
        features: u32,
        /// The most watches this session may have at once.
        max_watches: u32,
    },
    /// Reply to PROCLAIM: the server has the new value.
    Proclaimed {
        /// The claim id.
        claim: u32,
    },
    /// Reply to OBSERVE: the watch is registered; its INITIAL STATE follows.
    Observing {
        /// The watch id.
        watch: u32,
    },
    /// Reply to UNOBSERVE: no STATE of the watch follows.
    Unobserved {
        /// The watch id.
        watch: u32,
    },
    /// Reply to LOOKUP.
    LockState(LockState),
    /// Push: a watched lock's state or change.
    State {
        /// The watch id.
        watch: u32,
        /// The state.
        state: LockState,
    },
}

impl ServerFrame {
    /// Whether this frame is a reply (every frame but STATE).
    pub const fn is_reply(&self) -> bool {
        !matches!(self, Self::State { .. })
    }

    /// Appends the frame's bytes to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let id_frame = |out: &mut Vec<u8>, kind: u8, id: u32| {
            out.push(kind);
            out.extend_from_slice(&id.to_be_bytes());
        };
        match self {
            Self::Features {
                features,
                max_watches,
            } => out.extend_from_slice(&features_frame(*features, *max_watches)),
            Self::Proclaimed { claim } => id_frame(out, msg::PROCLAIMED, *claim),
            Self::Observing { watch } => id_frame(out, msg::OBSERVING, *watch),
            Self::Unobserved { watch } => id_frame(out, msg::UNOBSERVED, *watch),
            Self::LockState(state) => {
                out.push(msg::LOCK_STATE);
                state.encode(out);
            }
            Self::State { watch, state } => {
                id_frame(out, msg::STATE, *watch);
                state.encode(out);
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

/// The 9 bytes of a FEATURES.
pub const fn features_frame(features: u32, max_watches: u32) -> [u8; FEATURES_LEN] {
    let f = features.to_be_bytes();
    let m = max_watches.to_be_bytes();
    [
        msg::FEATURES,
        f[0],
        f[1],
        f[2],
        f[3],
        m[0],
        m[1],
        m[2],
        m[3],
    ]
}

/// A server frame of a session that may use the extension.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    /// A version 2 frame.
    Base(v2::ServerFrame),
    /// An extension frame.
    Ext(ServerFrame),
}

impl Response {
    /// Whether this frame is a reply rather than a push or ERROR.
    pub const fn is_reply(&self) -> bool {
        match self {
            Self::Base(frame) => frame.is_reply(),
            Self::Ext(frame) => frame.is_reply(),
        }
    }
}

/// A server sent bytes that are not a frame of version 2 or its extension.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The type byte is not one of the server's frames.
    #[error("unexpected message type 0x{0:02x} from server (protocol v2)")]
    UnknownType(u8),
    /// A state's event byte is not one of the five events.
    #[error("unknown state event 0x{0:02x} from server")]
    UnknownEvent(u8),
}

fn u64_at(buf: &[u8], at: usize) -> Option<u64> {
    let b = buf.get(at..at + 8)?;
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(b);
    Some(u64::from_be_bytes(bytes))
}

/// Decodes a state starting at `buf[at]`: the state and the end.
fn decode_state(buf: &[u8], at: usize) -> Result<Option<(LockState, usize)>, DecodeError> {
    let Some(header) = buf.get(at..at + STATE_HEADER_LEN) else {
        return Ok(None);
    };
    let event = StateEvent::from_byte(header[0]).ok_or(DecodeError::UnknownEvent(header[0]))?;
    let (Some(token), Some(since_ms)) = (u64_at(header, 2), u64_at(header, 10)) else {
        return Ok(None);
    };
    let reason = ReleaseReason::from_byte(header[18]);
    Ok(long_field(buf, at + 19).map(|(value, end)| {
        let state = LockState {
            event,
            flags: header[1],
            token,
            since_ms,
            reason,
            value: String::from_utf8_lossy(value).into_owned(),
        };
        (state, end)
    }))
}

/// Decodes the next server frame of a session that may use the
/// extension, client side: version 2's frames through
/// [`v2::decode_response`], as [`Response::Base`].
///
/// `Ok(None)` while more bytes are needed. Values that are not UTF-8 are
/// decoded lossily (the server sends only UTF-8).
///
/// ```
/// use monolock_proto::ext::{self, Response, ServerFrame};
///
/// let bytes = ext::features_frame(1, 1024);
/// assert_eq!(
///     ext::decode_response(&bytes).unwrap(),
///     Some((Response::Ext(ServerFrame::Features { features: 1, max_watches: 1024 }), 9))
/// );
/// assert_eq!(ext::decode_response(&bytes[..4]).unwrap(), None);
/// ```
///
/// # Errors
/// [`DecodeError::UnknownType`] for any other type byte,
/// [`DecodeError::UnknownEvent`] for a state with an unknown event.
pub fn decode_response(buf: &[u8]) -> Result<Option<(Response, usize)>, DecodeError> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    let ext = |frame: Option<(ServerFrame, usize)>| frame.map(|(f, used)| (Response::Ext(f), used));
    Ok(match kind {
        msg::FEATURES => ext(u32_at(buf, 1)
            .zip(u32_at(buf, 5))
            .map(|(features, max_watches)| {
                (
                    ServerFrame::Features {
                        features,
                        max_watches,
                    },
                    FEATURES_LEN,
                )
            })),
        msg::PROCLAIMED => ext(u32_at(buf, 1).map(|claim| (ServerFrame::Proclaimed { claim }, 5))),
        msg::OBSERVING => ext(u32_at(buf, 1).map(|watch| (ServerFrame::Observing { watch }, 5))),
        msg::UNOBSERVED => ext(u32_at(buf, 1).map(|watch| (ServerFrame::Unobserved { watch }, 5))),
        msg::LOCK_STATE => {
            ext(decode_state(buf, 1)?.map(|(s, end)| (ServerFrame::LockState(s), end)))
        }
        msg::STATE => {
            let Some(watch) = u32_at(buf, 1) else {
                return Ok(None);
            };
            ext(decode_state(buf, 5)?
                .map(|(state, end)| (ServerFrame::State { watch, state }, end)))
        }
        _ => v2::decode_response(buf)
            .map_err(|v2::DecodeError::UnknownType(t)| DecodeError::UnknownType(t))?
            .map(|(frame, used)| (Response::Base(frame), used)),
    })
}

#[cfg(test)]
mod tests;
