//! CLOCK_MONOTONIC readings that can be compared across processes.
//!
//! Belief intervals are recorded by worker processes and compared by the
//! checker, so every stamp is raw CLOCK_MONOTONIC nanoseconds: one clock for
//! the whole machine, never stepped, and the clock behind both
//! `std::time::Instant` and `tokio::time::Instant` on Linux.

use std::time::Duration;

/// Nanoseconds on CLOCK_MONOTONIC now.
#[allow(unsafe_code)]
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, exclusively borrowed timespec for the whole
    // call; clock_gettime only writes into it. CLOCK_MONOTONIC always exists
    // on Linux, so the call cannot fail.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// The CLOCK_MONOTONIC reading of a tokio instant, by its offset from now
/// (both clocks are CLOCK_MONOTONIC; the offset is exact to the microsecond).
pub fn instant_to_mono_ns(at: tokio::time::Instant) -> u64 {
    let now_instant = tokio::time::Instant::now();
    let now_ns = mono_ns();
    if at >= now_instant {
        now_ns.saturating_add(nanos(at - now_instant))
    } else {
        now_ns.saturating_sub(nanos(now_instant - at))
    }
}

/// A duration in whole nanoseconds, saturating.
pub fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// Milliseconds between two stamps (negative if `to` is before `from`).
pub fn ms_between(from_ns: u64, to_ns: u64) -> f64 {
    (to_ns as f64 - from_ns as f64) / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokio_instants_map_onto_the_monotonic_clock() {
        let before = mono_ns();
        let mapped = instant_to_mono_ns(tokio::time::Instant::now());
        let after = mono_ns();
        assert!(before <= mapped + 1_000 && mapped <= after + 1_000);
        let later = instant_to_mono_ns(tokio::time::Instant::now() + Duration::from_secs(3));
        assert!(later >= before + 2_999_000_000);
        assert!(ms_between(before, later) > 2999.0);
    }
}
