//! Fencing tokens: one strictly increasing sequence per process, starting
//! above every token an earlier process could have issued.
//!
//! The layout is docs/protocol.md's: `max(previous + 1, unix_seconds << 20)`.
//! A process that restarts in the same second as its predecessor's last
//! grant would begin that second's sequence again, below the old tokens. So
//! a process starts one second ahead, at `(t + 1) · 2^20` for its start time
//! `t` in fractional seconds. An earlier process that issued fewer than 2^20
//! tokens a second (about a million grants a second: in practice always)
//! never got past `(t' + 1) · 2^20` by its own time `t'`, so a later start on
//! a clock that is not behind is above all of its tokens, however quick the
//! restart (a crash loop included). With a [`TokenFloor`] the start is also
//! above every token the file has reserved, which holds even when the clock
//! stepped back.

use std::sync::Arc;

use monolock_proto::token_floor_for_unix_seconds;

use crate::core::{
    clock::{WallClock, start_after_restart},
    token_floor::TokenFloor,
};

/// Issues `max(previous + 1, unix_seconds << 20)`.
///
/// Lives inside the lock table's mutex, so a token is decided in the same
/// step as the grant it belongs to.
pub(crate) struct TokenIssuer {
    last: u64,
    floor: Option<Arc<TokenFloor>>,
}

impl TokenIssuer {
    /// An issuer whose first token is above every token an earlier process
    /// could have issued (see the module doc).
    pub(crate) fn new(clock: &dyn WallClock, floor: Option<Arc<TokenFloor>>) -> Self {
        let start = start_after_restart(clock.unix_time());
        let start = floor
            .as_ref()
            .map_or(start, |floor| floor.start().max(start));
        Self {
            last: start.saturating_sub(1),
            floor,
        }
    }

    /// The next token. Strictly greater than every earlier one, whatever the
    /// wall clock does; with a floor file, below the reservation on disk.
    pub(crate) fn issue(&mut self, clock: &dyn WallClock) -> u64 {
        let wanted = token_floor_for_unix_seconds(clock.unix_seconds()).max(self.last + 1);
        self.last = match &self.floor {
            None => wanted,
            Some(floor) => floor.admit(self.last, wanted),
        };
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::{
        sync::atomic::{AtomicU64, Ordering},
        time::Duration,
    };

    struct Fixed(AtomicU64);
    impl WallClock for Fixed {
        fn unix_seconds(&self) -> u64 {
            self.0.load(Ordering::Relaxed)
        }
    }

    #[test]
    fn strictly_increasing_when_the_clock_steps_back() {
        let clock = Fixed(AtomicU64::new(1_799_999_999));
        let mut issuer = TokenIssuer::new(&clock, None);
        clock.0.store(1_800_000_000, Ordering::Relaxed);
        let first = issuer.issue(&clock);
        assert_eq!(first, 1_800_000_000 << 20);
        assert_eq!(issuer.issue(&clock), first + 1);
        clock.0.store(1_700_000_000, Ordering::Relaxed);
        assert_eq!(issuer.issue(&clock), first + 2);
        clock.0.store(1_800_000_001, Ordering::Relaxed);
        assert_eq!(issuer.issue(&clock), 1_800_000_001 << 20);
    }

    struct Precise(Duration);
    impl WallClock for Precise {
        fn unix_seconds(&self) -> u64 {
            self.0.as_secs()
        }
        fn unix_time(&self) -> Duration {
            self.0
        }
    }

    /// The regression: a restart within the second of the old process's
    /// last grant started that second's sequence again, below it.
    #[test]
    fn a_restart_in_the_same_second_issues_above_the_old_process() {
        let start = Duration::from_secs(1_800_000_000);
        // A crash loop: each process starts 10 ms after the previous one,
        // issues 10,000 tokens (a million a second) and dies.
        let mut highest = 0;
        for restart in 0..300u32 {
            let clock = Precise(start + Duration::from_millis(10) * restart);
            let mut issuer = TokenIssuer::new(&clock, None);
            let first = issuer.issue(&clock);
            assert!(first > highest, "restart {restart}: {first} <= {highest}");
            for _ in 0..10_000 {
                highest = issuer.issue(&clock);
            }
            assert_eq!(first >> 20, clock.0.as_secs() + 1, "the layout is kept");
        }
    }
}
