//! Ownership events as the server reports them, and their check: for each
//! lock, `granted` and `released` strictly alternate with matching tokens,
//! and each grant's token is greater than the one before.
//!
//! Events come from the audit log (`--audit-log PATH`, JSON lines) of a
//! child server, or from an [`EventRecorder`] installed as the observer of
//! an in-process server.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, PoisonError},
};

use monolock_server::{Event, Observer};

use crate::clock::mono_ns;

/// One ownership event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnershipEvent {
    /// `granted` or `released`.
    pub kind: EventKind,
    /// The lock.
    pub lock: String,
    /// The token of the grant concerned.
    pub token: u64,
    /// For releases: the reason (`graceful`, `expired`, ...).
    pub reason: Option<String>,
    /// CLOCK_MONOTONIC when recorded (0 when parsed from a file).
    pub at_ns: u64,
}

/// Grant or release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// The lock was granted under a new token.
    Granted,
    /// The holder stopped holding.
    Released,
}

/// Parses one audit-log line; `Ok(None)` for events other than `granted`
/// and `released` (`denied`, `force_release`, `kick_waiter`).
///
/// # Errors
/// A description of what is wrong with the line.
pub fn parse_audit_line(line: &str) -> Result<Option<OwnershipEvent>, String> {
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|err| format!("not JSON ({err}): {line}"))?;
    let field = |name: &str| {
        value
            .get(name)
            .ok_or_else(|| format!("no {name:?}: {line}"))
    };
    let kind = match field("event")?.as_str() {
        Some("granted") => EventKind::Granted,
        Some("released") => EventKind::Released,
        Some(_) => return Ok(None),
        None => return Err(format!("\"event\" is not a string: {line}")),
    };
    let lock = field("lock")?
        .as_str()
        .ok_or_else(|| format!("\"lock\" is not a string: {line}"))?
        .to_owned();
    let token = field("token")?
        .as_u64()
        .ok_or_else(|| format!("\"token\" is not an integer: {line}"))?;
    let reason = value
        .get("reason")
        .and_then(|r| r.as_str())
        .map(str::to_owned);
    if kind == EventKind::Released && reason.is_none() {
        return Err(format!("a release without a reason: {line}"));
    }
    Ok(Some(OwnershipEvent {
        kind,
        lock,
        token,
        reason,
        at_ns: 0,
    }))
}

/// Checks strict alternation per lock: `granted T`, `released T`,
/// `granted T'` with `T' > T`, ... A lock may end granted (the server was
/// killed). Returns the violations.
pub fn alternation_problems(events: &[OwnershipEvent]) -> Vec<String> {
    #[derive(Default)]
    struct LockState {
        holding: Option<u64>,
        last_token: Option<u64>,
    }
    let mut locks: BTreeMap<&str, LockState> = BTreeMap::new();
    let mut problems = Vec::new();
    for (i, e) in events.iter().enumerate() {
        let state = locks.entry(&e.lock).or_default();
        match e.kind {
            EventKind::Granted => {
                if let Some(held) = state.holding {
                    problems.push(format!(
                        "event {i}: lock {:?} granted under {} while {held} still held it",
                        e.lock, e.token
                    ));
                }
                if let Some(last) = state.last_token.filter(|&last| e.token <= last) {
                    problems.push(format!(
                        "event {i}: lock {:?} granted under {} after {last}",
                        e.lock, e.token
                    ));
                }
                state.holding = Some(e.token);
                state.last_token = Some(e.token);
            }
            EventKind::Released => {
                if state.holding != Some(e.token) {
                    problems.push(format!(
                        "event {i}: lock {:?} released under {} while the holder was {:?}",
                        e.lock, e.token, state.holding
                    ));
                }
                state.holding = None;
            }
        }
    }
    problems
}

/// An [`Observer`] that records grants and releases, in order, with
/// CLOCK_MONOTONIC stamps. Cheap: one short mutex hold per event (the
/// observer is called with the lock table locked, so it must not block).
#[derive(Clone, Default)]
pub struct EventRecorder {
    events: Arc<Mutex<Vec<OwnershipEvent>>>,
}

impl EventRecorder {
    /// Everything recorded so far.
    pub fn events(&self) -> Vec<OwnershipEvent> {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Observer for EventRecorder {
    fn observe(&self, event: &Event<'_>) {
        let recorded = match event {
            Event::Granted { session, token, .. } => OwnershipEvent {
                kind: EventKind::Granted,
                lock: session.lock.to_string(),
                token: *token,
                reason: None,
                at_ns: mono_ns(),
            },
            Event::Released {
                session,
                token,
                reason,
                ..
            } => OwnershipEvent {
                kind: EventKind::Released,
                lock: session.lock.to_string(),
                token: *token,
                reason: Some(reason.as_str().to_owned()),
                at_ns: mono_ns(),
            },
            _ => return,
        };
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(recorded);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: EventKind, token: u64) -> OwnershipEvent {
        OwnershipEvent {
            kind,
            lock: "l".into(),
            token,
            reason: None,
            at_ns: 0,
        }
    }

    #[test]
    fn parses_the_audit_shape() {
        let line = r#"{"time":"2026-08-08T12:00:00Z","event":"released","lock":"a/b","identity":"","remote_addr":"127.0.0.1:5","token":42,"held_ms":3,"reason":"expired"}"#;
        let e = parse_audit_line(line).unwrap().unwrap();
        assert_eq!(e.kind, EventKind::Released);
        assert_eq!((e.lock.as_str(), e.token), ("a/b", 42));
        assert_eq!(e.reason.as_deref(), Some("expired"));
        assert_eq!(
            parse_audit_line(r#"{"event":"denied","lock":"x"}"#),
            Ok(None)
        );
        assert!(parse_audit_line(r#"{"event":"granted","lock":"x"}"#).is_err());
    }

    #[test]
    fn alternation() {
        use EventKind::*;
        let good = [ev(Granted, 1), ev(Released, 1), ev(Granted, 2)];
        assert!(alternation_problems(&good).is_empty());
        let overlapping = [ev(Granted, 1), ev(Granted, 2)];
        assert_eq!(alternation_problems(&overlapping).len(), 1);
        let wrong_token = [ev(Granted, 1), ev(Released, 2)];
        assert_eq!(alternation_problems(&wrong_token).len(), 1);
        let backwards = [ev(Granted, 3), ev(Released, 3), ev(Granted, 2)];
        assert_eq!(alternation_problems(&backwards).len(), 1);
    }
}
