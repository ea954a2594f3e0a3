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
/** An instant or a duration, in nanoseconds of `process.hrtime.bigint()`. */
export type Nanos = bigint;
/** One millisecond in nanoseconds. */
export declare const MS: Nanos;
/** The largest floor between two heartbeats. */
export declare const MAX_FLOOR: Nanos;
/** Heartbeat timing for one connection. */
export declare class Schedule {
    readonly lease: Nanos;
    readonly base: Nanos;
    readonly floor: Nanos;
    /** The smoothed round trip, once a reply has arrived. */
    srtt: Nanos | null;
    constructor(lease: Nanos);
    /** Folds one round trip into the smoothed RTT; the first sample is taken as it is. */
    observeRtt(sample: Nanos): void;
    /** The send-to-send interval: `clamp(base - 2*srtt, floor, base)`. */
    interval(): Nanos;
    /**
     * When the next heartbeat goes out, given the send instant of the request
     * just answered and the arrival of its reply (whose RTT sample is already
     * observed).
     */
    nextSend(lastSend: Nanos, replyAt: Nanos): Nanos;
    /** The client's deadline: `confirmedSend + 0.8 x lease`. */
    deadline(confirmedSend: Nanos): Nanos;
}
