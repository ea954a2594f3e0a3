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
/** The monotonic clock now. */
export const now = () => process.hrtime.bigint();
/** The same instant on the `performance.now()` scale (milliseconds). */
const PERF_OFFSET_MS = performance.now() - Number(process.hrtime.bigint()) / 1e6;
export const toPerformanceMs = (instant) => Number(instant) / 1e6 + PERF_OFFSET_MS;
/** The longest delay `setTimeout` takes as given (larger ones fire after 1 ms). */
const MAX_TIMER_MS = 0x7fff_ffff;
/**
 * One pending wake-up at an instant, re-armed as often as needed: Node's
 * timers take at most 2^31 - 1 ms and may fire up to a millisecond early,
 * so the callback's owner re-checks the clock anyway.
 */
export class Alarm {
    #timer = null;
    /** Calls `fire` at `at` (replacing any pending wake-up). */
    set(at, fire) {
        this.cancel();
        const delay = Math.max(0, Math.ceil(Number(at - now()) / 1e6));
        if (delay > MAX_TIMER_MS) {
            this.#timer = setTimeout(() => this.set(at, fire), MAX_TIMER_MS);
        }
        else {
            this.#timer = setTimeout(() => {
                this.#timer = null;
                fire();
            }, delay);
        }
        this.#timer.unref();
    }
    /** Drops the pending wake-up, if any. */
    cancel() {
        if (this.#timer !== null) {
            clearTimeout(this.#timer);
            this.#timer = null;
        }
    }
}
//# sourceMappingURL=clock.js.map