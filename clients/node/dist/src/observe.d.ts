/**
 * Observing a lock: the states a watch is pushed, as an async iterator.
 *
 * @module
 */
import { LockLostError } from "./errors.js";
import type { ReleaseReason, StateEvent, WireState } from "./v2/frames.js";
import type { V2Session, WatchOwner } from "./v2/session.js";
export type { ReleaseReason, StateEvent } from "./v2/frames.js";
/**
 * A lock's state, as an observation or a holder lookup reports it.
 *
 * Advisory: the holder it names may already have lost the lock (a silent
 * holder past its own deadline stays named until the server's lease runs
 * out), and any state is old by the time it is read. Use `value` to find
 * the holder (to forward a request, to page it), never as a permission:
 * writes stay fenced by the holder's token.
 */
export interface LockState {
    /** Whether someone holds the lock: true after `held`, `granted` and
     * `value`; false after `free` and `released`. */
    readonly held: boolean;
    /**
     * The holder's fencing token (`held`, `granted`, `value`), the token
     * whose claim ended (`released`), or for `free` the last holder's when
     * the server still knows it, else `0n`.
     */
    readonly token: bigint;
    /** The holder's value; `""` when the lock is not held or has none. */
    readonly value: string;
    /** When the lock was granted (held) or became free, by the server's
     * clock; null when the server does not know. For display only. */
    readonly since: Date | null;
    /**
     * What the server pushed: a state (`free`, `held`: the first push of an
     * observation, a coalesced push, a lookup) or a change (`granted`,
     * `value`: the holder replaced its value, `released`).
     */
    readonly event: StateEvent;
    /** The first state of an observation: the lock when the watch began. */
    readonly initial: boolean;
    /** Changes were dropped (a slow reader): this is the state now. */
    readonly coalesced: boolean;
    /** For `released`, how the claim ended: `released` (by its holder),
     * `expired`, `forced` or `ended_by_server`; null otherwise. */
    readonly reason: ReleaseReason | null;
}
/** @internal The public state of a wire state. */
export declare function lockState(wire: WireState): LockState;
/**
 * States an observer keeps unread at most: past it the unread ones are
 * replaced by the latest, flagged `coalesced` (as the server does for a
 * slow connection), so a consumer that stops reading costs bounded memory.
 */
export declare const MAX_UNREAD_STATES = 256;
/** @internal Where a watch can ride: a session with room for one more,
 * found (or opened) by the client's pool. */
export type WatchRoute = (abort: AbortSignal) => Promise<V2Session>;
/**
 * An observation of one lock: `for await (const state of observation)`.
 *
 * The first state is the lock's state when the watch began (`initial`),
 * then one per change, in the server's order: never an older holder after
 * a newer one. Breaking out of the loop, `return()`, or aborting the
 * signal given to `client.observe()` ends it cleanly (the watch is
 * removed from the server). The end of its session ends it with a
 * `LockLostError` (`observation of lock "NAME" ended (REASON): DETAIL`).
 */
export declare class Observation implements AsyncIterableIterator<LockState>, AsyncDisposable, WatchOwner {
    #private;
    /** The observed lock's name. */
    readonly name: string;
    /** @internal */
    constructor(name: string, rawName: Buffer, route: WatchRoute, signal?: AbortSignal);
    [Symbol.asyncIterator](): this;
    /** The next state; done once stopped; rejects with the error that ended
     * the observation (once, then done). */
    next(): Promise<IteratorResult<LockState>>;
    /** Stops the observation (UNOBSERVE); unread states are dropped. */
    return(): Promise<IteratorResult<LockState>>;
    /** Stops the observation, as `return()`. */
    [Symbol.asyncDispose](): Promise<void>;
    /** @internal */
    state(wire: WireState): void;
    /** @internal */
    refused(code: number, reason: string): void;
    /** @internal */
    lost(loss: LockLostError): void;
}
