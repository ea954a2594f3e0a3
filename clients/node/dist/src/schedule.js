/**
 * The heartbeat schedule of the client contract (docs/protocol.md, "The
 * client's schedule"), as pure arithmetic on instants in bigint nanoseconds
 * of `process.hrtime.bigint()`: no I/O, no timers, so every rule is tested
 * on exact numbers.
 *
 * - `base = lease / 4`
 * - `srtt` = EWMA of round trips, alpha 0.2 (the ACQUIRE round trip counts)
 * - `interval = clamp(base - 2*srtt, floor, base)`, `floor = min(100ms, base/4)`
 * - send-to-send, at most one heartbeat in flight; when `2*srtt >= base`
 *   the next heartbeat goes as soon as the previous reply arrives
 * - `deadline = S + 0.8 x lease`, `S` = send instant of the latest request
 *   whose reply has arrived
 *
 * The port of `crates/monolock-client/src/schedule.rs`, integer for integer.
 *
 * @module
 */
/** One millisecond in nanoseconds. */
export const MS = 1000000n;
/** The largest floor between two heartbeats. */
export const MAX_FLOOR = 100n * MS;
/** A new round-trip sample weighs 1 / SRTT_WEIGHT in the smoothed RTT (alpha 0.2). */
const SRTT_WEIGHT = 5n;
const min = (a, b) => (a < b ? a : b);
const max = (a, b) => (a > b ? a : b);
/** Heartbeat timing for one connection. */
export class Schedule {
    lease;
    base;
    floor;
    /** The smoothed round trip, once a reply has arrived. */
    srtt = null;
    constructor(lease) {
        this.lease = lease;
        this.base = lease / 4n;
        this.floor = min(MAX_FLOOR, this.base / 4n);
    }
    /** Folds one round trip into the smoothed RTT; the first sample is taken as it is. */
    observeRtt(sample) {
        this.srtt =
            this.srtt === null ? sample : (this.srtt * (SRTT_WEIGHT - 1n) + sample) / SRTT_WEIGHT;
    }
    /** The send-to-send interval: `clamp(base - 2*srtt, floor, base)`. */
    interval() {
        const correction = 2n * (this.srtt ?? 0n);
        return min(max(this.base - correction, this.floor), this.base);
    }
    /**
     * When the next heartbeat goes out, given the send instant of the request
     * just answered and the arrival of its reply (whose RTT sample is already
     * observed).
     */
    nextSend(lastSend, replyAt) {
        if (2n * (this.srtt ?? 0n) >= this.base)
            return replyAt;
        return max(lastSend + this.interval(), replyAt);
    }
    /** The client's deadline: `confirmedSend + 0.8 x lease`. */
    deadline(confirmedSend) {
        return confirmedSend + (this.lease * 4n) / 5n;
    }
}
//# sourceMappingURL=schedule.js.map