package dev.monolock;

/**
 * The heartbeat schedule and client deadline of docs/protocol.md
 * ("Heartbeats: the client's schedule"), as pure arithmetic on instants in
 * nanoseconds of {@link System#nanoTime()}: no clock, no timer, so every rule
 * is tested on exact numbers.
 *
 * <ul>
 *   <li>{@code base = lease / 4}</li>
 *   <li>{@code srtt}: moving average of round trips, alpha 0.2; the first
 *       sample is taken as it is</li>
 *   <li>{@code interval = clamp(base - 2 srtt, floor, base)} with
 *       {@code floor = min(100 ms, base / 4)}</li>
 *   <li>send to send, at most one in flight; when {@code 2 srtt >= base} the
 *       next goes as soon as the previous reply arrives</li>
 *   <li>{@code deadline = S + 0.8 lease}</li>
 * </ul>
 */
final class Schedule {
    static final long MS = 1_000_000L;
    /** The largest floor between two heartbeats. */
    static final long MAX_FLOOR = 100 * MS;
    /** A new round-trip sample weighs 1/SRTT_WEIGHT in the smoothed one. */
    static final long SRTT_WEIGHT = 5;

    private final long lease;
    private final long base;
    private final long floor;
    private long srtt = -1;

    Schedule(long leaseNanos) {
        this.lease = leaseNanos;
        this.base = leaseNanos / 4;
        this.floor = Math.min(MAX_FLOOR, base / 4);
    }

    /** Folds one round trip into the smoothed round trip. */
    void observeRtt(long sample) {
        srtt = srtt < 0 ? sample : (srtt * (SRTT_WEIGHT - 1) + sample) / SRTT_WEIGHT;
    }

    /** The smoothed round trip, or -1 before any sample. */
    long srtt() {
        return srtt;
    }

    /** The send-to-send interval: {@code clamp(base - 2 srtt, floor, base)}. */
    long interval() {
        long correction = 2 * Math.max(srtt, 0);
        return Math.min(Math.max(base - correction, floor), base);
    }

    /**
     * When the next heartbeat goes out, given the send instant of the request
     * just answered and the arrival of its reply.
     */
    long nextSend(long lastSend, long replyAt) {
        if (2 * Math.max(srtt, 0) >= base) {
            return replyAt;
        }
        return Math.max(lastSend + interval(), replyAt);
    }

    /** The client deadline: {@code confirmedSend + 0.8 lease}. */
    long deadline(long confirmedSend) {
        return confirmedSend + lease * 4 / 5;
    }
}
