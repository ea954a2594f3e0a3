//! The wall clock that places fencing tokens, and where the first token of
//! a process falls on it (the reasoning is in `token.rs`'s module doc).
//!
//! Both the token issuer and the token floor file read it, so it lives
//! apart from either.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use monolock_proto::{TOKEN_TIME_SHIFT, token_floor_for_unix_seconds};

/// The wall clock, read for one thing only: the epoch of new tokens.
///
/// Injectable so tests can step it backwards.
pub trait WallClock: Send + Sync + 'static {
    /// Seconds since the unix epoch (0 if the clock is before it).
    fn unix_seconds(&self) -> u64;

    /// Time since the unix epoch, as precisely as the clock knows it (zero
    /// if the clock is before it). Read once, at startup, to place the
    /// first token; by default the whole seconds of
    /// [`unix_seconds`](Self::unix_seconds).
    fn unix_time(&self) -> Duration {
        Duration::from_secs(self.unix_seconds())
    }
}

/// The system's real-time clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemWallClock;

impl WallClock for SystemWallClock {
    fn unix_seconds(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    }

    fn unix_time(&self) -> Duration {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
    }
}

/// The first token of a process that starts at `now` (since the unix
/// epoch): `(now + 1 s) · 2^20`, the fraction of the second included.
pub(crate) fn start_after_restart(now: Duration) -> u64 {
    let second = token_floor_for_unix_seconds(now.as_secs().saturating_add(1));
    let fraction = (u64::from(now.subsec_nanos()) << TOKEN_TIME_SHIFT) / 1_000_000_000;
    second.saturating_add(fraction)
}
