//! Fencing tokens: one strictly increasing sequence per process.

use std::time::{SystemTime, UNIX_EPOCH};

use monolock_proto::token_floor_for_unix_seconds;

/// The wall clock, read for one thing only: the epoch of new tokens.
///
/// Injectable so tests can step it backwards.
pub trait WallClock: Send + Sync + 'static {
    /// Seconds since the unix epoch (0 if the clock is before it).
    fn unix_seconds(&self) -> u64;
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
}

/// Issues `max(previous + 1, unix_seconds << 20)`.
///
/// Lives inside the lock table's mutex, so a token is decided in the same
/// step as the grant it belongs to.
pub(crate) struct TokenIssuer {
    last: u64,
}

impl TokenIssuer {
    pub(crate) const fn new() -> Self {
        Self { last: 0 }
    }

    /// The next token. Strictly greater than every earlier one, whatever the
    /// wall clock does.
    pub(crate) fn issue(&mut self, clock: &dyn WallClock) -> u64 {
        let floor = token_floor_for_unix_seconds(clock.unix_seconds());
        self.last = floor.max(self.last.saturating_add(1));
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    struct Fixed(AtomicU64);
    impl WallClock for Fixed {
        fn unix_seconds(&self) -> u64 {
            self.0.load(Ordering::Relaxed)
        }
    }

    #[test]
    fn strictly_increasing_when_the_clock_steps_back() {
        let clock = Fixed(AtomicU64::new(1_800_000_000));
        let mut issuer = TokenIssuer::new();
        let first = issuer.issue(&clock);
        assert_eq!(first, 1_800_000_000 << 20);
        assert_eq!(issuer.issue(&clock), first + 1);
        clock.0.store(1_700_000_000, Ordering::Relaxed);
        assert_eq!(issuer.issue(&clock), first + 2);
        clock.0.store(1_800_000_001, Ordering::Relaxed);
        assert_eq!(issuer.issue(&clock), 1_800_000_001 << 20);
    }
}
