/**
 * The held lock.
 *
 * @module
 */
import { inspect } from "node:util";
import { LockLostError } from "./errors.js";
import { toPerformanceMs } from "./io/clock.js";
import { encodeValue } from "./v2/frames.js";
/**
 * A held lock: one claim of a pooled v2 session, or (protocol v1) a
 * connection of its own. While it lives, its connection heartbeats in the
 * background; `release()` (or leaving an `await using` block) resolves
 * once the server has released the lock and handed it to the next waiter.
 *
 * Hand `token` to everything the lock guards (the fencing token), and hand
 * `signal` to the work itself: it is aborted the moment the lock is lost.
 */
export class Lock {
    /** The lock's name. */
    name;
    /**
     * The fencing token of this grant: strictly greater than every token
     * issued before it by the same server process. A `bigint`: tokens are
     * u64. Write it next to whatever the lock protects and refuse writes
     * that carry a smaller one.
     */
    token;
    #session;
    /** @internal */
    constructor(session, token) {
        this.#session = session;
        this.name = session.name;
        this.token = token;
    }
    /** The lease in milliseconds, as sent. */
    get lease() {
        return this.#session.leaseMs;
    }
    /** The protocol version the lock lives on: 2, or 1 when forced or when
     * the server speaks only v1. */
    get protocol() {
        return this.#session.protocol;
    }
    /** The server that granted the lock (`host:port`). */
    get address() {
        return this.#session.address.toString();
    }
    /**
     * When the client gives the claim up unless a reply confirms its
     * connection before, on the `performance.now()` scale: `S + 0.8 x
     * lease`, where `S` is the send instant of the latest request answered.
     * The server cannot expire the session before `S + lease`.
     */
    get deadline() {
        return toPerformanceMs(this.#session.deadline());
    }
    /**
     * An AbortSignal aborted the moment the lock is lost, with the
     * `LockLostError` as its `reason`. Hand it to `fetch`, database drivers,
     * child processes and streams so the guarded work stops by itself.
     * A `release()` does not abort it.
     */
    get signal() {
        return this.#session.signal;
    }
    /**
     * Whether the lock is still held, judged against the monotonic clock now:
     * false once the claim was lost or released, and false as soon as the
     * clock is past `deadline`, even if no timer has fired yet (a process
     * resumed from a pause or a blocked event loop never trusts a stale
     * "held"). Once false, never true again.
     */
    isHeld() {
        return this.#session.status() === "held" && !this.#session.released;
    }
    /**
     * Throws the `LockLostError` (its `reason` says why) unless the lock is
     * held now; after `release()`, one with the reason `"released"`.
     */
    check() {
        if (this.isHeld())
            return;
        throw this.#session.loss() ?? LockLostError.released(this.name);
    }
    /** Why the lock was lost, or null while it is held (checked against the clock). */
    get loss() {
        return this.#session.loss();
    }
    /** The lock's value as the server has it (`""`: none): the one given to
     * `lock()`, or the latest `setValue()` confirmed. */
    get value() {
        return this.#session.value;
    }
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
    async setValue(value) {
        const raw = encodeValue(value);
        await this.#session.setValue(value, raw);
    }
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
    async release() {
        const { loss, confirmed } = await this.#session.release();
        if (loss !== null)
            throw loss;
        return confirmed;
    }
    /**
     * `await using lock = await client.lock(...)`: releases at the end of the
     * block. It never throws; call `release()` to be told of a loss.
     */
    async [Symbol.asyncDispose]() {
        await this.#session.release();
    }
    toString() {
        return `Lock(${JSON.stringify(this.name)}, token ${this.token})`;
    }
    [inspect.custom]() {
        const state = this.#session.released ? "released" : this.isHeld() ? "held" : "lost";
        return `Lock { name: ${JSON.stringify(this.name)}, token: ${this.token}n, ${state} }`;
    }
}
//# sourceMappingURL=lock.js.map