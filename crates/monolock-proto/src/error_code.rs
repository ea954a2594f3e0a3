//! ERROR frame codes and their classes.

use std::fmt;

/// The code carried by an ERROR frame.
///
/// Codes below `0x10` are *server conditions* (the client did nothing wrong:
/// reconnect), codes from `0x10` up are *client errors* (the same bytes will
/// fail the same way: report, do not retry). Unknown codes are classified by
/// the same ranges, so a newer server's codes are handled correctly.
///
/// ```
/// use monolock_proto::{ErrorClass, ErrorCode};
///
/// assert!(ErrorCode::SHUTTING_DOWN.is_temporary());
/// assert_eq!(ErrorCode::NOT_AUTHORIZED.class(), ErrorClass::ClientError);
/// assert_eq!(ErrorCode(0x0e).class(), ErrorClass::ServerCondition);
/// assert_eq!(ErrorCode::NAME_TOO_LONG.to_string(), "0x15");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ErrorCode(pub u8);

/// Which side an error code blames, decided by its range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// `< 0x10`: a server condition. Reconnect (at once after
    /// [`ErrorCode::SHUTTING_DOWN`], with backoff otherwise).
    ServerCondition,
    /// `>= 0x10`: the request itself is wrong. Do not retry it unchanged.
    ClientError,
}

impl ErrorCode {
    /// 0x01: the server is shutting down.
    pub const SHUTTING_DOWN: Self = Self(0x01);
    /// 0x02: closed by an administrator (force-release or kick).
    pub const CLOSED_BY_ADMIN: Self = Self(0x02);
    /// 0x04: the server is at its connection limit, or out of descriptors
    /// and closing connections that have not sent a first frame; reconnect
    /// with backoff.
    pub const TOO_MANY_CONNECTIONS: Self = Self(0x04);
    /// 0x0a: the server holds as many claims (held and waiting, all
    /// sessions) as it may; in ERROR for v1, in REFUSED for a v2 claim.
    pub const SERVER_CLAIM_LIMIT: Self = Self(0x0a);
    /// 0x10: unsupported protocol version.
    pub const UNSUPPORTED_VERSION: Self = Self(0x10);
    /// 0x11: the first message on a connection must be ACQUIRE.
    pub const FIRST_MESSAGE_NOT_ACQUIRE: Self = Self(0x11);
    /// 0x12: a second ACQUIRE on one connection.
    pub const DUPLICATE_ACQUIRE: Self = Self(0x12);
    /// 0x13: unknown message type after ACQUIRE.
    pub const UNKNOWN_MESSAGE_TYPE: Self = Self(0x13);
    /// 0x14: empty lock name.
    pub const EMPTY_NAME: Self = Self(0x14);
    /// 0x15: lock name longer than 255 bytes.
    pub const NAME_TOO_LONG: Self = Self(0x15);
    /// 0x16: lock name is not valid UTF-8.
    pub const NAME_NOT_UTF8: Self = Self(0x16);
    /// 0x17: lease must be positive.
    pub const LEASE_NOT_POSITIVE: Self = Self(0x17);
    /// 0x18: not authorized for this lock by the server's ACL.
    pub const NOT_AUTHORIZED: Self = Self(0x18);

    /// v2 session, 0x03: an idle session (no claims) was closed.
    pub const IDLE_SESSION: Self = Self(0x03);
    /// v2 session, 0x19: a frame out of state (a v1 frame on a v2 session).
    pub const OUT_OF_STATE: Self = Self(0x19);
    /// v2 claim, 0x08: the claim was ended by an administrator.
    pub const CLAIM_REVOKED: Self = Self(0x08);
    /// v2 claim, 0x09: the session has as many claims as it may.
    pub const TOO_MANY_CLAIMS: Self = Self(0x09);
    /// v2 claim, 0x20: no claim in use under this id.
    pub const UNKNOWN_CLAIM: Self = Self(0x20);
    /// v2 claim, 0x21: the claim id is already in use.
    pub const CLAIM_IN_USE: Self = Self(0x21);
    /// v2 claim, 0x22: empty lock name.
    pub const CLAIM_EMPTY_NAME: Self = Self(0x22);
    /// v2 claim, 0x23: lock name is not valid UTF-8.
    pub const CLAIM_NAME_NOT_UTF8: Self = Self(0x23);
    /// v2 claim, 0x24: not authorized for this lock by the server's ACL.
    pub const CLAIM_NOT_AUTHORIZED: Self = Self(0x24);
    /// v2 claim, 0x25: an ACQUIRE mode other than wait (0) or try (1).
    pub const UNKNOWN_MODE: Self = Self(0x25);

    /// v2 extension, 0x0b: the session has as many watches as it may.
    pub const TOO_MANY_WATCHES: Self = Self(0x0b);
    /// v2 extension, 0x0c: the server has as many watches as it may.
    pub const SERVER_WATCH_LIMIT: Self = Self(0x0c);
    /// v2 extension, 0x26: a value longer than 1,024 bytes.
    pub const VALUE_TOO_LONG: Self = Self(0x26);
    /// v2 extension, 0x27: a value that is not valid UTF-8.
    pub const VALUE_NOT_UTF8: Self = Self(0x27);

    /// Every code protocol v1 defines, in ascending order.
    pub const ALL: [Self; 13] = [
        Self::SHUTTING_DOWN,
        Self::CLOSED_BY_ADMIN,
        Self::TOO_MANY_CONNECTIONS,
        Self::SERVER_CLAIM_LIMIT,
        Self::UNSUPPORTED_VERSION,
        Self::FIRST_MESSAGE_NOT_ACQUIRE,
        Self::DUPLICATE_ACQUIRE,
        Self::UNKNOWN_MESSAGE_TYPE,
        Self::EMPTY_NAME,
        Self::NAME_TOO_LONG,
        Self::NAME_NOT_UTF8,
        Self::LEASE_NOT_POSITIVE,
        Self::NOT_AUTHORIZED,
    ];

    /// Every code protocol v2 adds, in ascending order: session codes
    /// (in ERROR) and claim codes (in REFUSED and REVOKED).
    pub const ALL_V2: [Self; 10] = [
        Self::IDLE_SESSION,
        Self::CLAIM_REVOKED,
        Self::TOO_MANY_CLAIMS,
        Self::OUT_OF_STATE,
        Self::UNKNOWN_CLAIM,
        Self::CLAIM_IN_USE,
        Self::CLAIM_EMPTY_NAME,
        Self::CLAIM_NAME_NOT_UTF8,
        Self::CLAIM_NOT_AUTHORIZED,
        Self::UNKNOWN_MODE,
    ];

    /// Every code the version 2 extension (values and observers) adds, in
    /// ascending order (all in REFUSED).
    pub const ALL_EXT: [Self; 4] = [
        Self::TOO_MANY_WATCHES,
        Self::SERVER_WATCH_LIMIT,
        Self::VALUE_TOO_LONG,
        Self::VALUE_NOT_UTF8,
    ];

    /// The class of this code, by range (unknown codes included).
    pub const fn class(self) -> ErrorClass {
        if self.0 < 0x10 {
            ErrorClass::ServerCondition
        } else {
            ErrorClass::ClientError
        }
    }

    /// True for server conditions: the client may reconnect and try again.
    pub const fn is_temporary(self) -> bool {
        matches!(self.class(), ErrorClass::ServerCondition)
    }

    /// A short human description of a known code, or `None` for codes this
    /// version does not define.
    pub const fn description(self) -> Option<&'static str> {
        Some(match self.0 {
            0x01 => "server shutting down",
            0x02 => "closed by administrator",
            0x03 => "idle session closed",
            0x04 => "too many connections",
            0x08 => "claim revoked by administrator",
            0x09 => "too many claims on this session",
            0x0a => "server claim limit reached",
            0x0b => "too many watches on this session",
            0x0c => "server watch limit reached",
            0x10 => "unsupported protocol version",
            0x11 => "first message must be ACQUIRE",
            0x12 => "duplicate ACQUIRE",
            0x13 => "unknown message type",
            0x14 => "empty lock name",
            0x15 => "lock name too long",
            0x16 => "lock name is not valid UTF-8",
            0x17 => "lease must be positive",
            0x18 => "not authorized for lock",
            0x19 => "frame out of state",
            0x20 => "unknown claim id",
            0x21 => "claim id already in use",
            0x22 => "empty lock name (claim)",
            0x23 => "lock name is not valid UTF-8 (claim)",
            0x24 => "not authorized for lock (claim)",
            0x25 => "unknown ACQUIRE mode",
            0x26 => "value longer than 1024 bytes",
            0x27 => "value is not valid UTF-8",
            _ => return None,
        })
    }
}

impl fmt::Display for ErrorCode {
    /// Formats as `0x15`, the form used in logs and metric labels.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:02x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_ranges_for_known_and_unknown_codes() {
        for code in 0..=u8::MAX {
            let code = ErrorCode(code);
            assert_eq!(code.is_temporary(), code.0 < 0x10, "{code}");
        }
        for code in ErrorCode::ALL
            .into_iter()
            .chain(ErrorCode::ALL_V2)
            .chain(ErrorCode::ALL_EXT)
        {
            assert!(code.description().is_some(), "{code}");
        }
        assert_eq!(ErrorCode(0x7f).description(), None);
    }
}
