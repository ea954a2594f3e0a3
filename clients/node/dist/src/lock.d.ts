/**
 * The held lock.
 *
 * @module
 */
import { inspect } from "node:util";
import { LockLostError } from "./errors.js";
import type { Holding } from "./holding.js";
/**
 * A held lock: one claim of a pooled v2 session, or (protocol v1) a
 * connection of its own. While it lives, its connection heartbeats in the
 * background; `release()` (or leaving an `await using` block) resolves
 * once the server has released the lock and handed it to the next waiter.
 *
 * Hand `token` to everything the lock guards (the fencing token), and hand
 * `signal` to the work itself: it is aborted the moment the lock is lost.
 */
export declare class Lock implements AsyncDisposable {
    #private;
    /** The lock's name. */
    readonly name: string;
    /**
     * The fencing token of this grant: strictly greater than every token
     * issued before it by the same server process. A `bigint`: tokens are
     * u64. Write it next to whatever the lock protects and refuse writes
     * that carry a smaller one.
     */
    readonly token: bigint;
    /** @internal */
    constructor(session: Holding, token: bigint);
    /** The lease in milliseconds, as sent. */
    get lease(): number;
    /** The protocol version the lock lives on: 2, or 1 when forced or when
     * the server speaks only v1. */
    get protocol(): 1 | 2;
    /** The server that granted the lock (`host:port`). */
    get address(): string;
    /**
     * When the client gives the claim up unless a reply confirms its
     * connection before, on the `performance.now()` scale: `S + 0.8 x
     * lease`, where `S` is the send instant of the latest request answered.
     * The server cannot expire the session before `S + lease`.
     */
    get deadline(): number;
    /**
     * An AbortSignal aborted the moment the lock is lost, with the
     * `LockLostError` as its `reason`. Hand it to `fetch`, database drivers,
     * child processes and streams so the guarded work stops by itself.
     * A `release()` does not abort it.
     */
    get signal(): AbortSignal;
    /**
     * Whether the lock is still held, judged against the monotonic clock now:
     * false once the claim was lost or released, and false as soon as the
     * clock is past `deadline`, even if no timer has fired yet (a process
     * resumed from a pause or a blocked event loop never trusts a stale
     * "held"). Once false, never true again.
     */
    isHeld(): boolean;
    /**
     * Throws the `LockLostError` (its `reason` says why) unless the lock is
     * held now; after `release()`, one with the reason `"released"`.
     */
    check(): void;
    /** Why the lock was lost, or null while it is held (checked against the clock). */
    get loss(): LockLostError | null;
    /** The lock's value as the server has it (`""`: none): the one given to
     * `lock()`, or the latest `setValue()` confirmed. */
    get value(): string;
    /**
     * Replaces the lock's value while holding it (etcd's Proclaim), and
     * resolves once the server has it: every state observers are pushed
     * after that carries it. UTF-8 text of at most 1,024 bytes; `""` clears it.
     *
     * @throws InvalidArgumentError on a value too long (before anything is
     * sent); `LockLostError` when the lock was lost (or released) before
     * the server had the value; `UnsupportedError` on protocol v1 or a
     * server without lock values.
     */
    setValue(value: string): Promise<void>;
    /**
     * Releases the lock and resolves once the server has confirmed it (v2:
     * RELEASED; v1: the server's close after ours), so the lock is free, or
     * handed on, when it resolves: a `tryLock` by anyone then succeeds.
     * Bounded by the client's `ioTimeout`: past it the connection is closed
     * and the release resolves `false` (unconfirmed; the lock is gone for
     * this process all the same). Resolves `true` when confirmed.
     *
     * @throws LockLostError when the lock had been lost before the release,
     * so the caller learns that its work may have run unprotected.
     */
    release(): Promise<boolean>;
    /**
     * `await using lock = await client.lock(...)`: releases at the end of the
     * block. It never throws; call `release()` to be told of a loss.
     */
    [Symbol.asyncDispose](): Promise<void>;
    toString(): string;
    [inspect.custom](): string;
}
