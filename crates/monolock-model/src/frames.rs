//! The frames of protocol version 2 as the models see them: what a
//! session sends and what it reads.

use std::fmt;

/// A version 2 frame, client to server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Frame {
    /// OPEN: the session starts.
    Open,
    /// ACQUIRE, mode wait.
    Acquire {
        /// The claim id.
        claim: u8,
        /// The lock (0: `A`, 1: `B`).
        lock: u8,
    },
    /// RELEASE.
    Release {
        /// The claim id.
        claim: u8,
    },
    /// PING.
    Ping,
    /// The client closes the connection (FIN, after what it wrote).
    Close,
}

/// A version 2 frame, server to client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Answer {
    /// OPENED, the reply to OPEN.
    Opened,
    /// ACQUIRED, a reply.
    Acquired {
        /// The claim id.
        claim: u8,
        /// Its fencing token.
        token: u32,
    },
    /// WAITING, a reply.
    Waiting {
        /// The claim id.
        claim: u8,
    },
    /// RELEASED, a reply.
    Released {
        /// The claim id.
        claim: u8,
    },
    /// REFUSED `0x20` (unknown claim id), the reply to a RELEASE that
    /// crossed a REVOKED.
    Refused {
        /// The claim id.
        claim: u8,
    },
    /// PONG, a reply.
    Pong,
    /// GRANTED, a push.
    Granted {
        /// The claim id.
        claim: u8,
        /// Its fencing token.
        token: u32,
    },
    /// REVOKED `0x08`, a push.
    Revoked {
        /// The claim id.
        claim: u8,
    },
    /// The server closed the connection without a frame (lease expiry).
    Closed,
}

pub(crate) fn lock_name(lock: u8) -> char {
    char::from(b'A' + lock)
}

impl fmt::Display for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Open => write!(f, "OPEN"),
            Self::Acquire { claim, lock } => {
                write!(f, "ACQUIRE claim={claim} {}", lock_name(*lock))
            }
            Self::Release { claim } => write!(f, "RELEASE claim={claim}"),
            Self::Ping => write!(f, "PING"),
            Self::Close => write!(f, "close"),
        }
    }
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Opened => write!(f, "OPENED"),
            Self::Acquired { claim, token } => write!(f, "ACQUIRED claim={claim} token={token}"),
            Self::Waiting { claim } => write!(f, "WAITING claim={claim}"),
            Self::Released { claim } => write!(f, "RELEASED claim={claim}"),
            Self::Refused { claim } => write!(f, "REFUSED claim={claim} 0x20"),
            Self::Pong => write!(f, "PONG"),
            Self::Granted { claim, token } => write!(f, "GRANTED claim={claim} token={token}"),
            Self::Revoked { claim } => write!(f, "REVOKED claim={claim}"),
            Self::Closed => write!(f, "EOF (server closed)"),
        }
    }
}
