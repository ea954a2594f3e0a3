/**
 * The client: where the servers are, how to reach them, and the calls that
 * make claims.
 *
 * @module
 */
import type tls from "node:tls";
import { type Addresses } from "./address.js";
import { Lock } from "./lock.js";
import { type LockState, Observation } from "./observe.js";
/** The lease of calls that give none, in milliseconds. */
export declare const DEFAULT_LEASE = 10000;
/** How long dialing one server (TCP and TLS handshake) may take, in milliseconds. */
export declare const DEFAULT_CONNECT_TIMEOUT = 5000;
/** How long the server may take to answer the first frame, and to confirm a
 * release, in milliseconds. */
export declare const DEFAULT_IO_TIMEOUT = 5000;
/** Settings of a `Client`. */
export interface ClientOptions {
    /**
     * TLS: `tls.connect` options (`ca`, and `cert` + `key` for mTLS,
     * `servername` to check another name than the address's host), or `true`
     * for Node's default root certificates. Plain TCP when absent.
     */
    tls?: tls.ConnectionOptions | boolean;
    /** The lease of calls that give none, in milliseconds (default 10000). */
    lease?: number;
    /** How long dialing one address may take, in milliseconds (default 5000). */
    connectTimeout?: number;
    /**
     * How long the server may take to answer a new connection's first frame
     * and to confirm a release, in milliseconds (default 5000). Past it a
     * new connection is a `ConnectError` ("did not answer"), and a release
     * closes the connection and resolves unconfirmed.
     */
    ioTimeout?: number;
    /**
     * The protocol version: 2 (the default: sessions carrying many claims,
     * with v1 fallback per address when a server answers ERROR 0x10) or 1
     * (force v1: one connection per lock).
     */
    protocol?: 1 | 2;
}
/** Options of `client.lock()`. */
export interface LockOptions {
    /**
     * The lease in milliseconds (default: the client's). The failure
     * detector, not a work deadline: the lock heartbeats about four times per
     * lease and may be held for hours. A shorter lease hands the lock on
     * sooner after a crash or a partition, for more heartbeats.
     */
    lease?: number;
    /**
     * The longest time to wait for the lock, in milliseconds from the call:
     * past it the place in the queue is given up and the call throws
     * `NotAcquiredError`. Absent, null or Infinity: wait as long as it takes.
     */
    wait?: number | null;
    /** Aborting it gives the place in the queue up; the call rejects with
     * `signal.reason`. */
    signal?: AbortSignal;
    /**
     * The lock's value while this process holds it: UTF-8 text of at most
     * 1,024 bytes (the leader's `host:port`, a JSON blob), shown with the
     * holder to observers, `holder()`, `monolock locks` and the admin API.
     * Empty or absent: none. Needs a server with lock values
     * (`UnsupportedError` otherwise).
     */
    value?: string;
}
/** Options of `client.withLock()`: those of `lock()`, or of `tryLock()`
 * with `try: true` (then `fn` is not called when the lock is busy, and
 * `withLock` resolves `undefined`). */
export interface WithLockOptions extends LockOptions {
    /** Take the lock only if it is free now. */
    try?: boolean;
}
/** Options of `client.tryLock()`. */
export interface TryLockOptions {
    /** The lease in milliseconds (default: the client's). */
    lease?: number;
    /** Aborting it abandons the attempt; the call rejects with `signal.reason`. */
    signal?: AbortSignal;
    /** The lock's value while held, as `lock()` takes it. */
    value?: string;
}
/** Options of `client.observe()`. */
export interface ObserveOptions {
    /** Aborting it ends the observation cleanly (the loop ends). */
    signal?: AbortSignal;
    /** The lease of the session that carries the watch, in milliseconds
     * (default: the client's). */
    lease?: number;
}
/** Options of `client.holder()`. */
export interface HolderOptions {
    /** Aborting it abandons the lookup; the call rejects with `signal.reason`. */
    signal?: AbortSignal;
    /** The lease of the session that carries the lookup, in milliseconds
     * (default: the client's). */
    lease?: number;
}
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
export declare class Client {
    #private;
    /**
     * @param addresses a comma-separated string or an array of `host:port`
     * (`[v6]:port`); absent: `$MONOLOCK_ADDRESS`, else `127.0.0.1:7070`.
     * @throws InvalidArgumentError on an address, lease, timeout or protocol
     * that is not usable.
     */
    constructor(addresses?: Addresses | ClientOptions, options?: ClientOptions);
    /** The server addresses, in the order they are tried. */
    get addresses(): string[];
    /** The protocol version new claims ask for first (1 when forced). */
    get protocol(): 1 | 2;
    /** The v2 sessions open now (each is one connection). */
    get sessions(): number;
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
    lock(name: string, options?: LockOptions): Promise<Lock>;
    /**
     * Takes the lock if it is free; null if someone holds it, leaving no
     * trace in the queue by the time it resolves.
     *
     * @throws as `lock()` does (but never `NotAcquiredError`).
     */
    tryLock(name: string, options?: TryLockOptions): Promise<Lock | null>;
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
    withLock<T>(name: string, options: WithLockOptions, fn: (lock: Lock) => T | Promise<T>): Promise<T | undefined>;
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
    observe(name: string, options?: ObserveOptions): Observation;
    /**
     * Who holds the lock `name` now (LOOKUP): a state with `event` `"held"`
     * (token, value, since) or `"free"`. Advisory, as an observation is.
     *
     * @throws InvalidArgumentError on a bad name (before connecting);
     * `UnsupportedError` when the server lacks lookups or the client is
     * forced to protocol v1; `ConnectError`; `LockLostError` when the
     * session ended first or the server refused (ACL).
     */
    holder(name: string, options?: HolderOptions): Promise<LockState>;
    /** Closes every pooled session now: claims still held on them are lost,
     * observations end. Not needed before exit (an idle session keeps no
     * process alive). */
    close(): void;
}
