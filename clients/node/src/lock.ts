/**
 * The held lock.
 *
 * @module
 */

import { inspect } from "node:util";

import { LockLostError } from "./errors.js";
import { toPerformanceMs } from "./io/clock.js";
import type { Session } from "./io/session.js";

/**
 * A held lock. **The lock is its connection**: while it lives, it
 * heartbeats in the background; `release()` (or leaving an `await using`
 * block) closes the connection and the server hands the lock to the next
 * waiter at once.
 *
 * Hand `token` to everything the lock guards (the fencing token), and hand
 * `signal` to the work itself: it is aborted the moment the lock is lost.
 */
export class Lock implements AsyncDisposable {
  /** The lock's name. */
  readonly name: string;
  /**
   * The fencing token of this grant: strictly greater than every token
   * issued before it by the same server process. A `bigint`: tokens are
   * u64. Write it next to whatever the lock protects and refuse writes
   * that carry a smaller one.
   */
  readonly token: bigint;
  readonly #session: Session;

  /** @internal */
  constructor(session: Session, name: string, token: bigint) {
    this.#session = session;
    this.name = name;
    this.token = token;
  }

  /** The session's lease in milliseconds, as sent. */
  get lease(): number {
    return this.#session.claim.leaseMs;
  }

  /** The server that granted the lock (`host:port`). */
  get address(): string {
    return this.#session.address.toString();
  }

  /**
   * When the client gives the claim up unless a heartbeat is confirmed
   * before, on the `performance.now()` scale: `S + 0.8 x lease`, where `S`
   * is the send instant of the latest confirmed ACQUIRE or HEARTBEAT. The
   * server cannot expire the session before `S + lease`.
   */
  get deadline(): number {
    return toPerformanceMs(this.#session.claim.deadline());
  }

  /**
   * An AbortSignal aborted the moment the lock is lost, with the
   * `LockLostError` as its `reason`. Hand it to `fetch`, database drivers,
   * child processes and streams so the guarded work stops by itself.
   * A `release()` does not abort it.
   */
  get signal(): AbortSignal {
    return this.#session.signal;
  }

  /**
   * Whether the lock is still held, judged against the monotonic clock now:
   * false once the claim was lost or released, and false as soon as the
   * clock is past `deadline`, even if no timer has fired yet (a process
   * resumed from a pause or a blocked event loop never trusts a stale
   * "held"). Once false, never true again.
   */
  isHeld(): boolean {
    return this.#session.status() === "held" && !this.#session.released;
  }

  /**
   * Throws the `LockLostError` (its `reason` says why) unless the lock is
   * held now; after `release()`, one with the reason `"released"`.
   */
  check(): void {
    if (this.isHeld()) return;
    throw this.#session.claim.loss ?? LockLostError.released();
  }

  /** Why the lock was lost, or null while it is held (checked against the clock). */
  get loss(): LockLostError | null {
    return this.#session.loss();
  }

  /**
   * Releases the lock: closes the connection and resolves once the server
   * has closed its side (so the lock is free, or handed on, when it
   * resolves), or after a second if the server does not answer.
   *
   * @throws LockLostError when the lock had been lost before the release,
   * so the caller learns that its work may have run unprotected.
   */
  async release(): Promise<void> {
    const loss = await this.#session.release();
    if (loss !== null) throw loss;
  }

  /**
   * `await using lock = await client.lock(...)`: releases at the end of the
   * block. It never throws; call `release()` to be told of a loss.
   */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.#session.release();
  }

  toString(): string {
    return `Lock(${JSON.stringify(this.name)}, token ${this.token})`;
  }

  [inspect.custom](): string {
    const state = this.#session.released ? "released" : this.isHeld() ? "held" : "lost";
    return `Lock { name: ${JSON.stringify(this.name)}, token: ${this.token}n, ${state} }`;
  }
}
