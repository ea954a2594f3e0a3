//! The record of an ownership event, shared by the audit log and the live
//! event stream: what happened to whose connection and when, as one JSON
//! object (the audit log's line, the live stream's `data:`).
//!
//! [`Fact::of_event`] copies an [`Event`] out of the lock table's critical
//! section as plain data; [`Record`] keeps the lock name and identity
//! beside it for the audit log's queue, while the live stream copies the
//! two strings into its own inbox.

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, SystemTime},
};

use monolock_proto::LockName;
use serde::Serialize;

use crate::{ClaimRef, Event, ReleaseReason, SessionInfo};

/// An ownership event, copied out of the table's critical section (also
/// what the live event stream sends, as the same JSON).
pub(crate) struct Record {
    fact: Fact,
    lock: LockName,
    identity: Arc<str>,
    /// The claim's value on `granted` and `value` records (empty: none;
    /// allocated only when there is one).
    value: String,
}

/// What happened, when, and to whose connection: a record without its two
/// strings. Plain data, so the live stream can hand it to another thread
/// with the strings copied beside it, sharing no reference count with the
/// protocol path.
#[derive(Clone, Copy)]
pub(crate) struct Fact {
    time: SystemTime,
    remote_addr: SocketAddr,
    /// The session and claim of a version 2 claim (plain data: copied).
    claim: Option<ClaimRef>,
    kind: Kind,
}

#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Granted {
        token: u64,
        wait: Duration,
        /// The holder's lease: read from the session the event already
        /// points at, so it costs the observer one load.
        lease_ms: u32,
    },
    Released {
        token: u64,
        held: Duration,
        reason: ReleaseReason,
    },
    /// The server closed the holder's connection; the lock stays held for
    /// `release_in`, then its `Released` follows.
    EndedByServer {
        token: u64,
        reason: ReleaseReason,
        release_in: Duration,
    },
    Denied,
    ForceRelease {
        token: u64,
    },
    KickWaiter,
    /// The holder of `token` replaced its claim's value.
    Value {
        token: u64,
    },
    /// A waiter joined a queue (live stream only), with its lease.
    Queued {
        lease_ms: u32,
    },
    /// A waiter left a queue without being granted (live stream only).
    Dequeued,
}

/// The JSON shape of one line; fields in this order.
#[derive(Serialize)]
struct Line<'a> {
    time: String,
    event: &'static str,
    lock: &'a str,
    identity: &'a str,
    remote_addr: SocketAddr,
    /// `2` on a version 2 claim's line; absent (version 1) otherwise, so a
    /// version 1 line is what it always was.
    #[serde(skip_serializing_if = "Option::is_none")]
    protocol: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    claim: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<u64>,
    /// The claim's value: on a `value` line always, on a `granted` line
    /// when it has one (so a line without a value is what it always was).
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wait_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease_ms: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    held_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
    /// On an `ended_by_server` line only: how long the lock stays held.
    #[serde(skip_serializing_if = "Option::is_none")]
    release_in_ms: Option<u64>,
}

impl Record {
    /// The record of `event`, if it is one the audit log or the live stream
    /// reports (`queued` and `dequeued` only the stream).
    pub(crate) fn of_event(event: &Event<'_>) -> Option<Self> {
        Fact::of_event(event).map(|(fact, session, value)| Self::new(session, fact, value))
    }

    fn new(session: &SessionInfo, fact: Fact, value: &str) -> Self {
        Self {
            fact,
            lock: session.lock.clone(),
            identity: Arc::clone(&session.identity),
            value: value.to_owned(),
        }
    }

    /// When the event happened.
    pub(crate) fn time(&self) -> SystemTime {
        self.fact.time
    }

    /// The JSON object and a newline.
    pub(crate) fn write_json(&self, out: &mut Vec<u8>) {
        self.fact
            .write_json(self.lock.as_str(), &self.identity, &self.value, out);
    }
}

impl Fact {
    /// The fact of `event`, the session it is about and the claim's value
    /// (empty but on `granted` and `value`), if the event is one the audit
    /// log or the live stream reports.
    pub(crate) fn of_event<'e>(event: &'e Event<'_>) -> Option<(Self, &'e SessionInfo, &'e str)> {
        let mut claim_value = "";
        let (session, kind) = match *event {
            Event::Granted {
                session,
                token,
                wait,
                value,
                ..
            } => (session, {
                claim_value = value;
                Kind::Granted {
                    token,
                    wait,
                    lease_ms: session.lease.as_millis(),
                }
            }),
            Event::ValueReplaced {
                session,
                token,
                value,
            } => {
                claim_value = value;
                (session, Kind::Value { token })
            }
            Event::Released {
                session,
                token,
                held,
                reason,
            } => (
                session,
                Kind::Released {
                    token,
                    held,
                    reason,
                },
            ),
            Event::EndedByServer {
                session,
                token,
                reason,
                release_in,
            } => (
                session,
                Kind::EndedByServer {
                    token,
                    reason,
                    release_in,
                },
            ),
            Event::Denied(session) => (session, Kind::Denied),
            Event::ForceRelease { session, token } => (session, Kind::ForceRelease { token }),
            Event::KickWaiter(session) => (session, Kind::KickWaiter),
            Event::WaiterJoined(session) => (
                session,
                Kind::Queued {
                    lease_ms: session.lease.as_millis(),
                },
            ),
            Event::WaiterLeft(session) => (session, Kind::Dequeued),
            _ => return None,
        };
        let fact = Self {
            time: SystemTime::now(),
            remote_addr: session.remote_addr,
            claim: session.claim,
            kind,
        };
        Some((fact, session, claim_value))
    }

    /// The audit log's `event` name of this fact.
    pub(crate) fn event_name(&self) -> &'static str {
        match self.kind {
            Kind::Granted { .. } => "granted",
            Kind::Released { .. } => "released",
            Kind::EndedByServer { .. } => "ended_by_server",
            Kind::Denied => "denied",
            Kind::ForceRelease { .. } => "force_release",
            Kind::KickWaiter => "kick_waiter",
            Kind::Value { .. } => "value",
            Kind::Queued { .. } => "queued",
            Kind::Dequeued => "dequeued",
        }
    }

    /// The JSON object of this fact about `lock`, `identity` and the
    /// claim's `value`, and a newline.
    pub(crate) fn write_json(&self, lock: &str, identity: &str, value: &str, out: &mut Vec<u8>) {
        let release_in_ms = match self.kind {
            Kind::EndedByServer { release_in, .. } => Some(millis(release_in)),
            _ => None,
        };
        let (token, wait_ms, lease_ms, held_ms, reason) = match self.kind {
            Kind::Granted {
                token,
                wait,
                lease_ms,
            } => (Some(token), Some(millis(wait)), Some(lease_ms), None, None),
            Kind::Released {
                token,
                held,
                reason,
            } => (
                Some(token),
                None,
                None,
                Some(millis(held)),
                Some(reason.as_str()),
            ),
            Kind::EndedByServer { token, reason, .. } => {
                (Some(token), None, None, None, Some(reason.as_str()))
            }
            Kind::ForceRelease { token } | Kind::Value { token } => {
                (Some(token), None, None, None, None)
            }
            Kind::Queued { lease_ms } => (None, None, Some(lease_ms), None, None),
            Kind::Denied | Kind::KickWaiter | Kind::Dequeued => (None, None, None, None, None),
        };
        let line = Line {
            time: rfc3339(self.time),
            event: self.event_name(),
            lock,
            identity,
            remote_addr: self.remote_addr,
            protocol: self.claim.map(|_| 2),
            session: self.claim.map(|c| c.session),
            claim: self.claim.map(|c| c.claim),
            token,
            value: match self.kind {
                Kind::Value { .. } => Some(value),
                Kind::Granted { .. } if !value.is_empty() => Some(value),
                _ => None,
            },
            wait_ms,
            lease_ms,
            held_ms,
            reason,
            release_in_ms,
        };
        // Serialising plain strings and integers into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, &line);
        out.push(b'\n');
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A wall-clock time as RFC 3339 in UTC, to the millisecond
/// (`2026-08-08T12:00:00.123Z`): the format of the audit log and the admin API.
pub fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}
