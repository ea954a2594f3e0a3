/**
 * The client: where the servers are, how to reach them, and the calls that
 * make claims.
 *
 * @module
 */

import type tls from "node:tls";

import { type Addresses, parse } from "./address.js";
import { ConnectError, InvalidArgumentError, NotAcquiredError } from "./errors.js";
import { now } from "./io/clock.js";
import { connect, type Endpoints, isTlsError } from "./io/connect.js";
import { Session } from "./io/session.js";
import { Lock } from "./lock.js";
import { Claim } from "./v1/claim.js";
import * as frames from "./v1/frames.js";

/** The lease of calls that give none, in milliseconds. */
export const DEFAULT_LEASE = 10_000;
/** How long dialing one server (TCP and TLS handshake) may take, in milliseconds. */
export const DEFAULT_CONNECT_TIMEOUT = 5_000;

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
}

/** Options of `client.tryLock()`. */
export interface TryLockOptions {
  /** The lease in milliseconds (default: the client's). */
  lease?: number;
  /** Aborting it abandons the attempt; the call rejects with `signal.reason`. */
  signal?: AbortSignal;
}

/**
 * A monolock client: where the servers are and how to reach them. It holds
 * no connection itself: each claim opens its own, because on monolock
 * **the connection is the claim**.
 *
 * ```ts
 * const client = new Client("127.0.0.1:7070");     // or $MONOLOCK_ADDRESS
 * await using lock = await client.lock("deploy", { lease: 10_000 });
 * await deploy({ fence: lock.token, signal: lock.signal });
 * ```
 *
 * Several addresses (`"a:7070,b:7070"` or an array) are a primary and its
 * standbys: each new connection tries them in order and moves on when one
 * refuses or times out. A claim lives on exactly one connection.
 */
export class Client {
  readonly #endpoints: Endpoints;
  readonly #lease: number;

  /**
   * @param addresses a comma-separated string or an array of `host:port`
   * (`[v6]:port`); absent: `$MONOLOCK_ADDRESS`, else `127.0.0.1:7070`.
   * @throws InvalidArgumentError on an address, lease or timeout that is
   * not usable.
   */
  constructor(addresses?: Addresses | ClientOptions, options: ClientOptions = {}) {
    if (addresses !== null && typeof addresses === "object" && !Array.isArray(addresses)) {
      options = addresses as ClientOptions;
      addresses = undefined;
    }
    const connectTimeout = options.connectTimeout ?? DEFAULT_CONNECT_TIMEOUT;
    if (typeof connectTimeout !== "number" || !(connectTimeout > 0) || connectTimeout > 0x7fff_ffff) {
      throw new InvalidArgumentError(
        `connectTimeout must be a positive number of milliseconds, not ${String(connectTimeout)}`,
      );
    }
    const tlsOptions = options.tls;
    this.#endpoints = {
      addresses: parse(addresses as Addresses),
      tls:
        tlsOptions === undefined || tlsOptions === false
          ? null
          : tlsOptions === true
            ? {}
            : { ...tlsOptions },
      connectTimeout,
    };
    this.#lease = frames.leaseMs(options.lease ?? DEFAULT_LEASE);
  }

  /** The server addresses, in the order they are tried. */
  get addresses(): string[] {
    return this.#endpoints.addresses.map(String);
  }

  /**
   * Waits for the lock `name` in its FIFO queue and resolves once the
   * server grants it (promotion is pushed: no polling).
   *
   * @throws InvalidArgumentError on a bad name, lease or wait (before
   * connecting); `ConnectError` when no address could be reached;
   * `NotAcquiredError` when `wait` ran out; `signal.reason` when `signal`
   * was aborted; `LockLostError` when the server refused the claim (ACL:
   * reason `"server_error"`, code 0x18) or ended it while it waited.
   */
  async lock(name: string, options: LockOptions = {}): Promise<Lock> {
    const lock = await this.#acquire(name, options, false);
    // A wait that ends with the lock always ends with a Lock.
    return lock as Lock;
  }

  /**
   * Takes the lock if it is free; null if someone holds it, in which case
   * the connection is closed and leaves no trace in the queue.
   *
   * @throws as `lock()` does (but never `NotAcquiredError`).
   */
  async tryLock(name: string, options: TryLockOptions = {}): Promise<Lock | null> {
    return this.#acquire(name, options, true);
  }

  async #acquire(
    name: string,
    options: LockOptions,
    tryOnly: boolean,
  ): Promise<Lock | null> {
    const rawName = frames.encodeName(name);
    const lease = frames.leaseMs(options.lease ?? this.#lease);
    const wait = checkWait(options.wait);
    const signal = checkSignal(options.signal);
    signal?.throwIfAborted();
    const start = now();
    const { socket, address } = await connect(this.#endpoints, signal);
    const session = new Session(socket, address, new Claim(name, rawName, lease, now()));
    try {
      let end = await session.waitUntil((s) => s !== "unanswered", null, signal);
      if (end === "ready" && session.claim.status === "waiting") {
        if (tryOnly) {
          session.destroy();
          return null;
        }
        const until = wait === null ? null : start + BigInt(Math.ceil(wait * 1e6));
        end = await session.waitUntil((s) => s === "held", until, signal);
      }
      switch (end) {
        case "ready": {
          const token = session.claim.token;
          if (session.claim.status === "held" && token !== null) {
            return new Lock(session, name, token);
          }
          break;
        }
        case "timeout":
          throw new NotAcquiredError(name, wait ?? 0);
        case "aborted":
          throw signal?.reason;
        case "lost":
          break;
      }
      const loss = session.loss();
      // A TLS alert before the first reply is the server refusing the
      // handshake (TLS 1.3 clients learn it on their first read, e.g. an
      // mTLS server that wants a client certificate): a failed connect.
      if (loss?.reason === "connection" && isTlsError(loss.cause)) {
        const error = loss.cause as Error;
        throw new ConnectError(
          [
            {
              address: address.toString(),
              error: new Error(`the server refused the TLS handshake: ${error.message}`, {
                cause: error,
              }),
            },
          ],
          "tls",
        );
      }
      throw loss ?? new Error("the claim ended without a reason");
    } catch (err) {
      session.destroy();
      throw err;
    }
  }
}

function checkWait(wait: unknown): number | null {
  if (wait === undefined || wait === null || wait === Infinity) return null;
  if (typeof wait !== "number" || Number.isNaN(wait) || wait < 0) {
    throw new InvalidArgumentError(
      `wait must be a number of milliseconds >= 0 (or null to wait as long as it takes), not ${String(wait)}`,
    );
  }
  return wait;
}

function checkSignal(signal: unknown): AbortSignal | undefined {
  if (signal === undefined || signal === null) return undefined;
  if (!(signal instanceof AbortSignal)) {
    throw new InvalidArgumentError("signal must be an AbortSignal");
  }
  return signal;
}
