/**
 * The monotonic clock and one-shot alarms on it.
 *
 * Instants are bigint nanoseconds of `process.hrtime.bigint()` (the clock
 * `performance.now()` reads too). Every timer is `unref()`ed: a claim's
 * socket keeps the process alive while the claim lives, and nothing else
 * does.
 *
 * @module
 */
import type { Nanos } from "../schedule.js";
/** The monotonic clock now. */
export declare const now: () => Nanos;
export declare const toPerformanceMs: (instant: Nanos) => number;
/**
 * One pending wake-up at an instant, re-armed as often as needed: Node's
 * timers take at most 2^31 - 1 ms and may fire up to a millisecond early,
 * so the callback's owner re-checks the clock anyway.
 */
export declare class Alarm {
    #private;
    /** Calls `fire` at `at` (replacing any pending wake-up). */
    set(at: Nanos, fire: () => void): void;
    /** Drops the pending wake-up, if any. */
    cancel(): void;
}
