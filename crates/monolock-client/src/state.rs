//! What an observer is told of a lock: [`LockState`], one per push of a
//! watch (docs/protocol.md, "Version 2 extension: values and observers"),
//! and the bound on a claim's value.

use std::time::{Duration, SystemTime};

use monolock_proto::ext::{self};
pub use monolock_proto::ext::{MAX_VALUE_LEN, ReleaseReason, StateEvent};

use crate::error::Error;

/// Refuses a value above [`MAX_VALUE_LEN`] before anything is dialed; an
/// empty value is no value.
pub(crate) fn checked_value(value: &str) -> Result<Option<&str>, Error> {
    if value.len() > MAX_VALUE_LEN {
        return Err(Error::InvalidValue { len: value.len() });
    }
    Ok((!value.is_empty()).then_some(value))
}

/// A lock's state as the server pushed it to a watch (or answered a
/// lookup).
///
/// **Advisory**: the holder it names may already have lost the lock (its
/// session silent, the server still waiting for the lease to run out), and
/// any push is old by the time it is read. Use the value to *find* the
/// holder (to forward a request to it), never as a permission: the
/// holder's writes stay fenced by its token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockState {
    /// What happened (or, for `Free` and `Held`, the state as it is).
    pub event: StateEvent,
    /// Whether the lock is held after this event.
    pub held: bool,
    /// The holder's token (held), the token whose claim ended (released),
    /// the last holder's if the server knows it (free), else 0.
    pub token: u64,
    /// The holder's value; empty when the lock is not held.
    pub value: String,
    /// The server's wall clock when the lock was granted (held) or became
    /// free; `None` if unknown. For display only: nothing orders by it.
    pub since: Option<SystemTime>,
    /// The first state of an observation: the state when the server
    /// registered it.
    pub initial: bool,
    /// Changes were dropped (a slow reader): this is the state now.
    pub coalesced: bool,
    /// For [`StateEvent::Released`]: why the claim ended.
    pub reason: Option<ReleaseReason>,
}

impl LockState {
    /// A state from its wire fields; `since_ms` 0 is unknown.
    pub(crate) fn new(
        event: StateEvent,
        token: u64,
        since_ms: u64,
        reason: Option<ReleaseReason>,
        value: String,
    ) -> Self {
        Self {
            event,
            held: event.held(),
            token,
            value,
            since: (since_ms != 0)
                .then(|| SystemTime::UNIX_EPOCH + Duration::from_millis(since_ms)),
            initial: false,
            coalesced: false,
            reason,
        }
    }

    /// The state a frame carries.
    pub(crate) fn from_wire(wire: ext::LockState) -> Self {
        let (initial, coalesced) = (wire.initial(), wire.coalesced());
        let mut state = Self::new(
            wire.event,
            wire.token,
            wire.since_ms,
            wire.reason.filter(|_| wire.event == StateEvent::Released),
            wire.value,
        );
        state.initial = initial;
        state.coalesced = coalesced;
        state
    }

    /// Where the lock stands after this state: a change made a state
    /// (RELEASED is FREE with the released token, GRANTED and VALUE are
    /// HELD), flagged coalesced. What a reader that fell behind is told.
    pub(crate) fn coalesced_now(&self) -> Self {
        let event = if self.held {
            StateEvent::Held
        } else {
            StateEvent::Free
        };
        Self {
            event,
            held: self.held,
            token: self.token,
            value: if self.held {
                self.value.clone()
            } else {
                String::new()
            },
            since: self.since,
            initial: false,
            coalesced: true,
            reason: None,
        }
    }

    /// `since` as milliseconds since the Unix epoch (0 when unknown).
    pub fn since_ms(&self) -> u64 {
        self.since
            .and_then(|since| since.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0, |since| {
                u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_bounded_in_bytes_and_empty_is_none() {
        assert_eq!(checked_value("").ok(), Some(None));
        let most = "é".repeat(MAX_VALUE_LEN / 2);
        assert_eq!(checked_value(&most).ok(), Some(Some(most.as_str())));
        let err = checked_value(&format!("{most}x")).expect_err("1025 bytes");
        assert_eq!(
            err.to_string(),
            "value of 1025 bytes is above the maximum of 1024 bytes"
        );
        assert!(!err.is_temporary());
    }

    #[test]
    fn since_round_trips_and_zero_is_unknown() {
        let state = LockState::new(StateEvent::Held, 7, 1_796_300_000_000, None, "a".into());
        assert!(state.held);
        assert_eq!(state.since_ms(), 1_796_300_000_000);
        let free = LockState::new(StateEvent::Free, 0, 0, None, String::new());
        assert_eq!((free.held, free.since, free.since_ms()), (false, None, 0));
    }
}
