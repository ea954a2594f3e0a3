/**
 * The client: where the servers are, how to reach them, and the calls that
 * make claims.
 *
 * @module
 */
import { parse } from "./address.js";
import { ConnectError, InvalidArgumentError, LockLostError, NotAcquiredError, ProtocolError, UnsupportedError, } from "./errors.js";
import { now } from "./io/clock.js";
import { connect } from "./io/connect.js";
import { Session } from "./io/session.js";
import { Lock } from "./lock.js";
import { lockState, Observation } from "./observe.js";
import { abortable, Pool } from "./pool.js";
import { MS } from "./schedule.js";
import { Claim } from "./v1/claim.js";
import * as frames from "./v1/frames.js";
import { encodeValue } from "./v2/frames.js";
import { describeMs, EndedBeforeOpen, wrongPeer } from "./v2/session.js";
/** The lease of calls that give none, in milliseconds. */
export const DEFAULT_LEASE = 10_000;
/** How long dialing one server (TCP and TLS handshake) may take, in milliseconds. */
export const DEFAULT_CONNECT_TIMEOUT = 5_000;
/** How long the server may take to answer the first frame, and to confirm a
 * release, in milliseconds. */
export const DEFAULT_IO_TIMEOUT = 5_000;
/**
 * A monolock client: where the servers are and how to reach them.
 *
 * ```ts
 * const client = new Client("127.0.0.1:7070");     // or $MONOLOCK_ADDRESS
 * await using lock = await client.lock("deploy", { lease: 10_000 });
 * await deploy({ fence: lock.token, signal: lock.signal });
 * ```
 *
 * On protocol v2 (the default) the client keeps a few sessions, one
 * connection each, pooled per lease: every claim of the client rides on
 * one of them, up to the server's bound of claims per session. The end of
 * a session (its connection closed, its deadline passed) ends every claim
 * on it; an administrator's force-release ends one. A session with no
 * claims is closed after 20 s and keeps no process alive. Forced to v1
 * (`{ protocol: 1 }`), or against a server that speaks only v1, each
 * claim has a connection of its own.
 *
 * Several addresses (`"a:7070,b:7070"` or an array) are a primary and its
 * standbys: each new connection tries them in order and moves on when one
 * refuses or times out. A claim lives on exactly one connection.
 */
export class Client {
    #endpoints;
    #lease;
    #ioTimeout;
    #protocol;
    #pool;
    /**
     * @param addresses a comma-separated string or an array of `host:port`
     * (`[v6]:port`); absent: `$MONOLOCK_ADDRESS`, else `127.0.0.1:7070`.
     * @throws InvalidArgumentError on an address, lease, timeout or protocol
     * that is not usable.
     */
    constructor(addresses, options = {}) {
        if (addresses !== null && typeof addresses === "object" && !Array.isArray(addresses)) {
            options = addresses;
            addresses = undefined;
        }
        const connectTimeout = checkTimeout("connectTimeout", options.connectTimeout ?? DEFAULT_CONNECT_TIMEOUT);
        this.#ioTimeout = checkTimeout("ioTimeout", options.ioTimeout ?? DEFAULT_IO_TIMEOUT);
        const protocol = options.protocol ?? 2;
        if (protocol !== 1 && protocol !== 2) {
            throw new InvalidArgumentError(`protocol must be 1 or 2, not ${String(protocol)}`);
        }
        this.#protocol = protocol;
        const tlsOptions = options.tls;
        this.#endpoints = {
            addresses: parse(addresses),
            tls: tlsOptions === undefined || tlsOptions === false
                ? null
                : tlsOptions === true
                    ? {}
                    : { ...tlsOptions },
            connectTimeout,
        };
        this.#lease = frames.leaseMs(options.lease ?? DEFAULT_LEASE);
        this.#pool = new Pool(this.#endpoints, this.#ioTimeout);
    }
    /** The server addresses, in the order they are tried. */
    get addresses() {
        return this.#endpoints.addresses.map(String);
    }
    /** The protocol version new claims ask for first (1 when forced). */
    get protocol() {
        return this.#protocol;
    }
    /** The v2 sessions open now (each is one connection). */
    get sessions() {
        return this.#pool.size;
    }
    /**
     * Waits for the lock `name` in its FIFO queue and resolves once the
     * server grants it (promotion is pushed: no polling).
     *
     * @throws InvalidArgumentError on a bad name, lease or wait (before
     * connecting); `ConnectError` when no address could be reached, or what
     * answered is not a monolock server; `NotAcquiredError` when `wait` ran
     * out; `signal.reason` when `signal` was aborted; `LockLostError` when
     * the server refused the claim (ACL: reason `"server_error"`) or ended it
     * while it waited.
     */
    async lock(name, options = {}) {
        const lock = await this.#acquire(name, options, false);
        // A wait that ends with the lock always ends with a Lock.
        return lock;
    }
    /**
     * Takes the lock if it is free; null if someone holds it, leaving no
     * trace in the queue by the time it resolves.
     *
     * @throws as `lock()` does (but never `NotAcquiredError`).
     */
    async tryLock(name, options = {}) {
        return this.#acquire(name, options, true);
    }
    /**
     * Takes the lock, runs `fn(lock)` and releases the lock however `fn`
     * ends; resolves with what `fn` returned. Hand `lock.signal` to the work
     * so that it stops if the lock is lost. With `{ try: true }`, resolves
     * `undefined` without calling `fn` when the lock is busy.
     *
     * ```ts
     * const rows = await client.withLock("report", { lease: 10_000 }, async (lock) =>
     *   writeReport({ fence: lock.token, signal: lock.signal }),
     * );
     * ```
     *
     * @throws what `lock()` throws; what `fn` throws (after the release); a
     * `LockLostError` when `fn` returned but the lock had been lost meanwhile
     * (its work may have run unprotected).
     */
    async withLock(name, options, fn) {
        if (typeof fn !== "function") {
            throw new InvalidArgumentError("withLock(name, options, fn): fn must be a function");
        }
        const { try: tryOnly, ...rest } = options ?? {};
        const lock = tryOnly === true ? await this.tryLock(name, rest) : await this.lock(name, rest);
        if (lock === null)
            return undefined;
        let result;
        try {
            result = await fn(lock);
        }
        catch (err) {
            await lock[Symbol.asyncDispose]();
            throw err;
        }
        await lock.release();
        return result;
    }
    /**
     * Observes the lock `name` without claiming it: an async iterator of its
     * states, the current one first (`initial`), then one per change in the
     * server's order (a hand-on is `released` with the old token, then
     * `granted` with the new one; never an older holder after a newer one).
     *
     * ```ts
     * for await (const state of client.observe("leader", { signal })) {
     *   if (state.held) forwardTo(state.value);
     * }
     * ```
     *
     * Breaking out of the loop or aborting `signal` ends it cleanly. What it
     * says is advisory (see `LockState`): writes stay fenced by the token.
     * Registering starts at the first `next()`.
     *
     * @throws (from the iteration) InvalidArgumentError on a bad name (from
     * `observe()` itself, before connecting); `UnsupportedError` when the
     * server lacks observers or the client is forced to protocol v1;
     * `ConnectError`; `LockLostError` when its session ended
     * (`observation of lock "NAME" ended (REASON): DETAIL`) or the server
     * refused the watch (ACL: reason `"server_error"`).
     */
    observe(name, options = {}) {
        const rawName = frames.encodeName(name);
        const lease = frames.leaseMs(options.lease ?? this.#lease);
        const signal = checkSignal(options.signal);
        return new Observation(name, rawName, async (abort) => this.#extensionSession(name, lease, abort, true), signal);
    }
    /**
     * Who holds the lock `name` now (LOOKUP): a state with `event` `"held"`
     * (token, value, since) or `"free"`. Advisory, as an observation is.
     *
     * @throws InvalidArgumentError on a bad name (before connecting);
     * `UnsupportedError` when the server lacks lookups or the client is
     * forced to protocol v1; `ConnectError`; `LockLostError` when the
     * session ended first or the server refused (ACL).
     */
    async holder(name, options = {}) {
        const rawName = frames.encodeName(name);
        const lease = frames.leaseMs(options.lease ?? this.#lease);
        const signal = checkSignal(options.signal);
        signal?.throwIfAborted();
        const session = await this.#extensionSession(name, lease, signal, false);
        return lockState(await abortable(session.lookup(name, rawName), signal));
    }
    /** Closes every pooled session now: claims still held on them are lost,
     * observations end. Not needed before exit (an idle session keeps no
     * process alive). */
    close() {
        this.#pool.close();
    }
    /** A session that carries values and observers, with room for a watch
     * when `watch`. */
    async #extensionSession(name, lease, signal, watch) {
        if (this.#protocol === 1)
            throw new UnsupportedError(null);
        let route;
        try {
            route = await this.#pool.route(lease, signal, { extension: true, watch });
        }
        catch (err) {
            if (err instanceof EndedBeforeOpen) {
                throw LockLostError.observationEnded(err.ending(name), name, watch ? "observation" : "holder lookup");
            }
            throw err;
        }
        // The pool throws UnsupportedError rather than route a value to v1.
        if (route === "v1")
            throw new UnsupportedError(this.addresses[0] ?? null);
        return route;
    }
    async #acquire(name, options, tryOnly) {
        const rawName = frames.encodeName(name);
        const lease = frames.leaseMs(options.lease ?? this.#lease);
        const wait = checkWait(options.wait);
        const signal = checkSignal(options.signal);
        const text = options.value ?? "";
        const rawValue = encodeValue(text);
        // An empty value is none: a plain ACQUIRE.
        const value = rawValue.length === 0 ? null : { text, raw: rawValue };
        signal?.throwIfAborted();
        const start = now();
        const until = wait === null ? null : start + BigInt(Math.ceil(wait * 1e6));
        if (this.#protocol === 1) {
            if (value !== null)
                throw new UnsupportedError(null);
            return this.#acquireV1(name, rawName, lease, until, wait, signal, tryOnly);
        }
        for (;;) {
            let route;
            try {
                route = await this.#pool.route(lease, signal, { extension: value !== null });
            }
            catch (err) {
                if (err instanceof EndedBeforeOpen)
                    throw err.ending(name);
                throw err;
            }
            if (route === "v1")
                return this.#acquireV1(name, rawName, lease, until, wait, signal, tryOnly);
            const claim = route.acquire(name, rawName, tryOnly ? "try" : "wait", value);
            const lock = await this.#awaitV2(claim, until, wait, signal, tryOnly);
            if (lock !== "retry")
                return lock;
        }
    }
    async #awaitV2(claim, until, wait, signal, tryOnly) {
        let end = await claim.waitUntil((s) => s !== "unanswered", null, signal);
        if (end === "ready" && claim.status() === "waiting" && !tryOnly) {
            end = await claim.waitUntil((s) => s !== "waiting", until, signal);
        }
        const status = claim.status();
        if (end === "ready") {
            if (status === "held" && claim.token !== null)
                return new Lock(claim, claim.token);
            if (status === "busy")
                return null;
            if (status === "retry")
                return "retry";
        }
        // Give the place in the queue up; confirmed before the call ends.
        await claim.release();
        if (end === "timeout")
            throw new NotAcquiredError(claim.name, wait ?? 0);
        if (end === "aborted")
            throw signal?.reason;
        throw claim.loss() ?? new Error("the claim ended without a reason");
    }
    async #acquireV1(name, rawName, lease, until, wait, signal, tryOnly) {
        let connected;
        try {
            connected = await connect(this.#endpoints, signal);
        }
        catch (err) {
            this.#pool.connectFailed(err);
            throw err;
        }
        const { socket, address } = connected;
        const claim = new Claim(name, rawName, lease, now());
        const session = new Session(socket, address, claim, this.#ioTimeout);
        // Values need protocol v2 with the extension.
        session.noValues = new UnsupportedError(this.#protocol === 1 ? null : address.toString());
        try {
            // A monolock server answers an ACQUIRE at once (WAITING or ACQUIRED).
            const answerBy = now() + BigInt(this.#ioTimeout) * MS;
            let end = await session.waitUntil((s) => s !== "unanswered", answerBy, signal);
            if (end === "timeout") {
                const where = address.toString();
                const error = new Error(`${where} did not answer within ${describeMs(this.#ioTimeout)}`);
                throw new ConnectError([{ address: where, error }], "timeout");
            }
            if (end === "ready" && claim.status === "waiting") {
                if (tryOnly) {
                    // Leave the queue: half-close and wait for the server's EOF.
                    await session.release();
                    return null;
                }
                end = await session.waitUntil((s) => s === "held", until, signal);
            }
            switch (end) {
                case "ready": {
                    const token = claim.token;
                    if (claim.status === "held" && token !== null)
                        return new Lock(session, token);
                    break;
                }
                case "timeout":
                    await session.release();
                    throw new NotAcquiredError(name, wait ?? 0);
                case "aborted":
                    throw signal?.reason;
                case "lost":
                    break;
            }
            const loss = session.loss();
            if (loss !== null && !claim.answered) {
                const cause = loss.cause;
                const wrong = wrongPeer(address, this.#endpoints.tls !== null, {
                    ...(cause instanceof ProtocolError ? { protocol: cause } : {}),
                    ...(cause instanceof Error && !(cause instanceof ProtocolError) ? { cause } : {}),
                    eof: loss.reason === "connection" && cause === undefined,
                });
                if (wrong !== null)
                    throw wrong;
            }
            throw loss ?? new Error("the claim ended without a reason");
        }
        catch (err) {
            session.destroy();
            throw err;
        }
    }
}
function checkTimeout(what, value) {
    if (typeof value !== "number" || !(value > 0) || value > 0x7fff_ffff) {
        throw new InvalidArgumentError(`${what} must be a positive number of milliseconds, not ${String(value)}`);
    }
    return value;
}
function checkWait(wait) {
    if (wait === undefined || wait === null || wait === Infinity)
        return null;
    if (typeof wait !== "number" || Number.isNaN(wait) || wait < 0) {
        throw new InvalidArgumentError(`wait must be a number of milliseconds >= 0 (or null to wait as long as it takes), not ${String(wait)}`);
    }
    return wait;
}
function checkSignal(signal) {
    if (signal === undefined || signal === null)
        return undefined;
    if (!(signal instanceof AbortSignal)) {
        throw new InvalidArgumentError("signal must be an AbortSignal");
    }
    return signal;
}
//# sourceMappingURL=client.js.map