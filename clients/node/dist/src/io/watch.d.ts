/**
 * Waiting for a claim's status to change: the driver wakes its watchers
 * whenever anything happens, and each waiter looks again.
 *
 * @module
 */
import type { Status } from "../claim.js";
import type { Nanos } from "../schedule.js";
/** How a wait for the claim ended. */
export type WaitEnd = "ready" | "lost" | "timeout" | "aborted";
/** Something with a status (checked against the clock) and watchers. */
export declare abstract class Watched {
    #private;
    /** The status now. */
    abstract status(): Status;
    /** Wakes every waiter. */
    protected notify(): void;
    /**
     * Waits until `ready(status)`, the loss, `until` (an instant; null: no
     * bound) or `abort`, whichever comes first.
     */
    waitUntil(ready: (status: Status) => boolean, until: Nanos | null, abort?: AbortSignal): Promise<WaitEnd>;
}
