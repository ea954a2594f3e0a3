/**
 * Leader election on one lock, in the shape of client-go's
 * `leaderelection` and Curator's `LeaderLatch`: campaign, lead while the
 * lock is held, learn who leads.
 *
 * @module
 */
import type { Client } from "./client.js";
import type { Lock } from "./lock.js";
import type { LockState } from "./observe.js";
/** How long an elector waits before it campaigns or observes again after
 * a temporary failure (a refused connection, a lost session), in
 * milliseconds. */
export declare const DEFAULT_RETRY = 1000;
/** Settings and callbacks of a `LeaderElector`. */
export interface LeaderElectorOptions {
    /** The lease in milliseconds (default: the client's): how soon a
     * crashed or partitioned leader is replaced. */
    lease?: number;
    /** This candidate's value while it leads (its `host:port`, say): what
     * every `onNewLeader` is told. */
    value?: string;
    /**
     * This candidate leads: `token` is its fencing token (hand it to every
     * write), `signal` is aborted the moment it stops leading (the lock lost,
     * or `stop()`), with the reason. Leadership does not end when the
     * callback returns: it ends with the lock. A callback that throws (or
     * whose promise rejects) stops the elector, and `run()` rejects with it.
     */
    onStartedLeading?: (token: bigint, signal: AbortSignal) => void | Promise<void>;
    /** This candidate stopped leading, for any reason (called once after
     * each `onStartedLeading`, before any next one). */
    onStoppedLeading?: () => void;
    /** The observed holder changed to a new token (this candidate
     * included), with its value. Not called for a free lock. */
    onNewLeader?: (state: LockState) => void;
    /** Milliseconds to wait before trying again after a temporary failure
     * (default 1000). */
    retry?: number;
}
/**
 * Campaigns for the lock `name` and tells who leads.
 *
 * ```ts
 * const elector = new LeaderElector(client, "scheduler", {
 *   lease: 5_000,
 *   value: "10.0.0.7:9000",
 *   onStartedLeading: (token, signal) => schedule({ fence: token, signal }),
 *   onStoppedLeading: () => console.log("no longer leading"),
 *   onNewLeader: (leader) => console.log("leader is", leader.value),
 * });
 * await elector.run(AbortSignal.timeout(60_000)); // until stopped
 * ```
 *
 * `run()` observes the lock (to report every new leader) and, once the
 * observation has the lock's first state, waits for the lock in its FIFO
 * queue (with this candidate's value), leads while it holds it, and after
 * losing it campaigns again, until `stop()` or the signal given to
 * `run()`. Stopping, if this candidate leads,
 * aborts the leading signal and calls `onStoppedLeading` first, then
 * releases the lock (so the work stops before the next leader can be
 * granted); it ends the observation, and `stop()` resolves once all that
 * is done.
 *
 * Temporary failures (a server down, a lost session) are retried;
 * `run()` rejects on the others: an `UnsupportedError` against a server
 * without lock values and observers, an ACL refusal, a callback's error.
 */
export declare class LeaderElector {
    #private;
    /** The lock campaigned for. */
    readonly name: string;
    /**
     * @throws InvalidArgumentError on a bad name, lease, value or retry;
     * `UnsupportedError` when the client is forced to protocol v1 (which
     * has no observers).
     */
    constructor(client: Client, name: string, options?: LeaderElectorOptions);
    /** Whether this candidate leads now (its lock held, checked against the clock). */
    get isLeader(): boolean;
    /** The lock while this candidate leads, else null. */
    get lock(): Lock | null;
    /** The latest observed holder (advisory), or null when none is known. */
    get leader(): LockState | null;
    /**
     * Replaces this candidate's value: at once when it leads (resolves once
     * the server has it), and for every later campaign.
     *
     * @throws InvalidArgumentError on a value too long; what `Lock.setValue`
     * throws while leading.
     */
    setValue(value: string): Promise<void>;
    /**
     * Campaigns and leads until `stop()` or `signal`; resolves once stopped
     * (the lock released, the observation ended).
     *
     * @throws what ended the election other than a stop (see the class).
     */
    run(signal?: AbortSignal): Promise<void>;
    /** Stops the election: if this candidate leads, `onStoppedLeading`
     * and then the release of the lock; ends the observation; resolves once
     * done. */
    stop(): Promise<void>;
}
