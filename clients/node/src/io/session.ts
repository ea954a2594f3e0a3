/**
 * Protocol v1: one connection = one claim. The driver that owns the socket
 * and feeds the claim machine bytes and instants.
 *
 * The socket's `data` events make it the connection's permanent reader
 * (promotion is pushed); one `Alarm` fires at the next heartbeat or the
 * deadline, whichever is first. The loss aborts the claim's AbortSignal and
 * destroys the socket in the same step. The protocol logic is all in the
 * claim machine; nothing here knows a frame.
 *
 * @module
 */

import type net from "node:net";

import type { Address } from "../address.js";
import type { Status } from "../claim.js";
import { type LockLostError, UnsupportedError } from "../errors.js";
import type { Holding, ReleaseEnd } from "../holding.js";
import type { Nanos } from "../schedule.js";
import type { Claim } from "../v1/claim.js";
import { Alarm, now } from "./clock.js";
import { Watched } from "./watch.js";

export type { WaitEnd } from "./watch.js";

/** A running claim on its connection. */
export class Session extends Watched implements Holding {
  readonly claim: Claim;
  readonly address: Address;
  readonly protocol = 1;
  readonly #socket: net.Socket;
  readonly #ioTimeout: number;
  readonly #alarm = new Alarm();
  readonly #lost = new AbortController();
  readonly #closed: Promise<void>;
  /** Whether the server closed its side (EOF) before the socket closed. */
  #serverEnded = false;
  #released = false;
  #release: Promise<ReleaseEnd> | null = null;
  /** Protocol v1 has no values: what `setValue` throws. */
  noValues: UnsupportedError = new UnsupportedError(null);
  /** Protocol v1 has no values. */
  readonly value = "";

  /** Takes over `socket` and sends the claim's ACQUIRE at once. */
  constructor(socket: net.Socket, address: Address, claim: Claim, ioTimeout: number) {
    super();
    this.claim = claim;
    this.address = address;
    this.#socket = socket;
    this.#ioTimeout = ioTimeout;
    this.#closed = new Promise((resolve) => socket.once("close", () => resolve()));
    socket.on("data", (data: Buffer) => this.#apply(() => claim.receive(data, now())));
    socket.on("end", () => {
      this.#serverEnded = true;
      this.#apply(() => claim.closed());
    });
    socket.on("error", (err: Error) => this.#apply(() => claim.closed(err)));
    socket.on("close", () => this.#apply(() => claim.closed()));
    socket.write(claim.opening());
    this.#reschedule();
  }

  get name(): string {
    return this.claim.name;
  }

  get leaseMs(): number {
    return this.claim.leaseMs;
  }

  deadline(): Nanos {
    return this.claim.deadline();
  }

  /** Aborted with the `LockLostError` the moment the claim is lost. */
  get signal(): AbortSignal {
    return this.#lost.signal;
  }

  /** Whether `release()` was called. */
  get released(): boolean {
    return this.#released;
  }

  /** The status after checking the deadline against the clock now. */
  status(): Status {
    const claim = this.claim;
    if (!this.#released && claim.status !== "lost") {
      claim.check(now());
      if ((claim.status as Status) === "lost") this.#after(false);
    }
    return claim.status;
  }

  /** Why the claim ended (checked against the clock now), or null. */
  loss(): LockLostError | null {
    this.status();
    return this.claim.loss;
  }

  /**
   * Ends the connection: FIN at once, then reads until the server's EOF,
   * which it sends once its lock table has released the claim. Bounded by
   * the I/O timeout; past it the socket is closed and the release is
   * unconfirmed. Returns the loss that had ended the claim before, if one
   * had. Idempotent.
   */
  release(): Promise<ReleaseEnd> {
    this.#release ??= this.#doRelease();
    return this.#release;
  }

  async #doRelease(): Promise<ReleaseEnd> {
    const loss = this.loss();
    this.#released = true;
    this.#alarm.cancel();
    const socket = this.#socket;
    let confirmed = loss === null || this.#serverEnded;
    if (!socket.destroyed) {
      socket.end();
      // Keep reading (and dropping) until the server's EOF.
      socket.resume();
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<void>((resolve) => {
        timer = setTimeout(() => {
          confirmed = false;
          socket.destroy();
          resolve();
        }, this.#ioTimeout);
        timer.unref();
      });
      await Promise.race([this.#closed, late]);
      clearTimeout(timer);
      if (!this.#serverEnded) confirmed = false;
    }
    this.notify();
    await this.#closed;
    return { loss, confirmed };
  }

  /** Protocol v1 has no values. */
  setValue(): Promise<void> {
    return Promise.reject(this.noValues);
  }

  /** Closes the connection at once, without waiting for the server. */
  destroy(): void {
    this.#released = true;
    this.#alarm.cancel();
    this.#socket.destroy();
    this.notify();
  }

  /** Runs a change to the claim, then acts on what it did. */
  #apply(change: () => void): void {
    if (this.#released) return;
    const wasLost = this.claim.status === "lost";
    change();
    this.#after(wasLost);
  }

  /** After the claim changed: close on loss, else look again later; wake watchers. */
  #after(wasLost: boolean): void {
    if (this.claim.status === "lost") {
      if (!wasLost) {
        this.#alarm.cancel();
        this.#lost.abort(this.claim.loss);
        this.#socket.destroy();
      }
    } else {
      this.#reschedule();
    }
    this.notify();
  }

  #reschedule(): void {
    const wake = this.claim.nextWake();
    if (wake === null) this.#alarm.cancel();
    else this.#alarm.set(wake, () => this.#onAlarm());
  }

  #onAlarm(): void {
    this.#apply(() => {
      const at = now();
      const heartbeat = this.claim.heartbeatDue(at);
      if (heartbeat !== null) {
        // The socket buffers: a write never blocks, and a failed one
        // surfaces as an `error` event.
        this.#socket.write(heartbeat);
        this.claim.heartbeatSent(at);
      }
    });
  }
}
