//! The heartbeat schedule of the client contract (docs/protocol.md,
//! "Heartbeats: the client's schedule"), as pure arithmetic on instants: no
//! I/O, no timers, so every rule is tested with exact numbers.
//!
//! - `base = lease / 4`
//! - `srtt` = EWMA of round trips, alpha 0.2 (the ACQUIRE round trip counts)
//! - `interval = clamp(base - 2*srtt, floor, base)`, `floor = min(100ms, base/4)`
//! - send-to-send, at most one heartbeat in flight; when `2*srtt >= base`
//!   the next heartbeat goes as soon as the previous reply arrives
//! - `deadline = S + 0.8 x lease`, `S` = send instant of the latest request
//!   whose reply has arrived

use std::time::Duration;

use tokio::time::Instant;

/// The largest floor between two heartbeats.
pub(crate) const MAX_FLOOR: Duration = Duration::from_millis(100);

/// A new round-trip sample weighs `1 / SRTT_WEIGHT` in the smoothed RTT
/// (alpha 0.2), computed in integer nanoseconds so it is exact.
const SRTT_WEIGHT: u32 = 5;

/// Heartbeat timing for one connection.
#[derive(Clone, Debug)]
pub(crate) struct Schedule {
    lease: Duration,
    base: Duration,
    floor: Duration,
    srtt: Option<Duration>,
}

impl Schedule {
    /// The schedule for a lease (the lease is positive: checked by the caller).
    pub(crate) fn new(lease: Duration) -> Self {
        let base = lease / 4;
        Self {
            lease,
            base,
            floor: MAX_FLOOR.min(base / 4),
            srtt: None,
        }
    }

    /// Folds one round trip into the smoothed RTT. The first sample is
    /// taken as it is.
    pub(crate) fn observe_rtt(&mut self, sample: Duration) {
        self.srtt = Some(match self.srtt {
            None => sample,
            Some(srtt) => srtt.saturating_mul(SRTT_WEIGHT - 1).saturating_add(sample) / SRTT_WEIGHT,
        });
    }

    /// The smoothed round trip so far, if any reply has arrived.
    #[cfg(test)]
    pub(crate) fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// The send-to-send interval: `clamp(base - 2*srtt, floor, base)`.
    pub(crate) fn interval(&self) -> Duration {
        let correction = self.srtt.unwrap_or_default().saturating_mul(2);
        self.base
            .saturating_sub(correction)
            .clamp(self.floor, self.base)
    }

    /// When the next heartbeat goes out, given the send instant of the
    /// request just answered and the instant its reply arrived (the RTT
    /// sample of that reply must already be observed).
    pub(crate) fn next_send(&self, last_send: Instant, reply_at: Instant) -> Instant {
        let correction = self.srtt.unwrap_or_default().saturating_mul(2);
        if correction >= self.base {
            return reply_at;
        }
        (last_send + self.interval()).max(reply_at)
    }

    /// The client's deadline: `confirmed_send + 0.8 x lease`.
    pub(crate) fn deadline(&self, confirmed_send: Instant) -> Instant {
        confirmed_send + self.lease * 4 / 5
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn base_interval_without_rtt_is_a_quarter_lease() {
        let s = Schedule::new(ms(2000));
        assert_eq!(s.interval(), ms(500));
        assert_eq!(s.srtt(), None);
    }

    #[test]
    fn rtt_shortens_the_interval_by_twice_the_srtt() {
        let mut s = Schedule::new(ms(2000));
        s.observe_rtt(ms(50));
        assert_eq!(s.srtt(), Some(ms(50)));
        assert_eq!(s.interval(), ms(400));
        // EWMA with alpha 0.2: 0.8 * 50 + 0.2 * 100 = 60.
        s.observe_rtt(ms(100));
        assert_eq!(s.srtt(), Some(ms(60)));
        assert_eq!(s.interval(), ms(380));
    }

    #[test]
    fn interval_never_drops_below_the_floor() {
        // lease 2s: base 500ms, floor min(100ms, 125ms) = 100ms.
        let mut s = Schedule::new(ms(2000));
        s.observe_rtt(ms(210));
        assert_eq!(s.interval(), ms(100));
        // lease 200ms: base 50ms, floor min(100ms, 12.5ms) = 12.5ms.
        let mut s = Schedule::new(ms(200));
        s.observe_rtt(ms(20));
        assert_eq!(s.interval(), Duration::from_micros(12_500));
    }

    #[tokio::test(start_paused = true)]
    async fn intervals_are_send_to_send() {
        let mut s = Schedule::new(ms(2000));
        let sent = Instant::now();
        s.observe_rtt(ms(50));
        // The reply arrived 50ms after the send; the next send is 400ms
        // after the previous send, not after the reply.
        assert_eq!(s.next_send(sent, sent + ms(50)), sent + ms(400));
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_reply_sends_the_next_heartbeat_at_once() {
        let mut s = Schedule::new(ms(2000));
        let sent = Instant::now();
        s.observe_rtt(ms(10));
        // A reply that arrives after the interval has passed (one in flight
        // at most) releases the next heartbeat immediately.
        assert_eq!(s.next_send(sent, sent + ms(700)), sent + ms(700));
    }

    #[tokio::test(start_paused = true)]
    async fn slow_round_trips_send_on_every_reply() {
        // lease 400ms: base 100ms; srtt 50ms makes 2*srtt == base.
        let mut s = Schedule::new(ms(400));
        let sent = Instant::now();
        s.observe_rtt(ms(50));
        assert_eq!(s.next_send(sent, sent + ms(50)), sent + ms(50));
        // Just below the limit the floor-clamped interval still applies.
        let mut s = Schedule::new(ms(400));
        s.observe_rtt(ms(49));
        assert_eq!(s.interval(), ms(25)); // floor = min(100, 25)
        assert_eq!(s.next_send(sent, sent + ms(10)), sent + ms(25));
    }

    #[tokio::test(start_paused = true)]
    async fn deadline_is_four_fifths_of_the_lease_after_the_confirmed_send() {
        let s = Schedule::new(ms(2000));
        let sent = Instant::now();
        assert_eq!(s.deadline(sent), sent + ms(1600));
        let s = Schedule::new(ms(1));
        assert_eq!(s.deadline(sent), sent + Duration::from_micros(800));
    }

    #[test]
    fn tiny_leases_keep_a_positive_floor() {
        let s = Schedule::new(ms(1));
        assert_eq!(s.interval(), Duration::from_micros(250));
    }
}
