/**
 * One connection = one claim: the driver that owns the socket and feeds the
 * claim machine bytes and instants.
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
import type { ClaimMachine, Status } from "../claim.js";
import type { LockLostError } from "../errors.js";
import { Alarm, now } from "./clock.js";

/** How long a release waits for the server's FIN before closing anyway. */
const RELEASE_PATIENCE_MS = 1000;

/** How a wait for the claim ended. */
export type WaitEnd = "ready" | "lost" | "timeout" | "aborted";

/** A running claim on its connection. */
export class Session {
  readonly claim: ClaimMachine;
  readonly address: Address;
  readonly #socket: net.Socket;
  readonly #alarm = new Alarm();
  readonly #lost = new AbortController();
  readonly #closed: Promise<void>;
  readonly #watchers = new Set<() => void>();
  #released = false;

  /** Takes over `socket` and sends the claim's ACQUIRE at once. */
  constructor(socket: net.Socket, address: Address, claim: ClaimMachine) {
    this.claim = claim;
    this.address = address;
    this.#socket = socket;
    this.#closed = new Promise((resolve) => socket.once("close", () => resolve()));
    socket.on("data", (data: Buffer) => this.#apply(() => claim.receive(data, now())));
    socket.on("end", () => this.#apply(() => claim.closed()));
    socket.on("error", (err: Error) => this.#apply(() => claim.closed(err)));
    socket.on("close", () => this.#apply(() => claim.closed()));
    socket.write(claim.opening());
    this.#reschedule();
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
   * Waits until `ready(status)`, the loss, `until` (an instant; null: no
   * bound) or `abort`, whichever comes first.
   */
  waitUntil(
    ready: (status: Status) => boolean,
    until: bigint | null,
    abort?: AbortSignal,
  ): Promise<WaitEnd> {
    return new Promise<WaitEnd>((resolve) => {
      const alarm = new Alarm();
      let done = false;
      const finish = (end: WaitEnd): void => {
        if (done) return;
        done = true;
        this.#watchers.delete(look);
        alarm.cancel();
        abort?.removeEventListener("abort", onAbort);
        resolve(end);
      };
      const look = (): void => {
        const status = this.status();
        if (status === "lost") finish("lost");
        else if (ready(status)) finish("ready");
      };
      const onAbort = (): void => finish("aborted");
      if (abort?.aborted) return finish("aborted");
      this.#watchers.add(look);
      abort?.addEventListener("abort", onAbort, { once: true });
      if (until !== null) {
        const check = (): void => {
          if (now() >= until) finish("timeout");
          else alarm.set(until, check);
        };
        alarm.set(until, check);
      }
      look();
    });
  }

  /**
   * Ends the connection: FIN at once, then waits (briefly) for the server to
   * close its side, which it does once it has released the claim. Returns
   * the loss that had ended the claim before, if one had. Idempotent.
   */
  async release(): Promise<LockLostError | null> {
    const loss = this.loss();
    if (!this.#released) {
      this.#released = true;
      this.#alarm.cancel();
      const socket = this.#socket;
      if (!socket.destroyed) {
        socket.end();
        const patience = setTimeout(() => socket.destroy(), RELEASE_PATIENCE_MS);
        patience.unref();
        void this.#closed.then(() => clearTimeout(patience));
      }
      this.#notify();
    }
    await this.#closed;
    return loss;
  }

  /** Closes the connection at once, without waiting for the server. */
  destroy(): void {
    this.#released = true;
    this.#alarm.cancel();
    this.#socket.destroy();
    this.#notify();
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
    this.#notify();
  }

  #notify(): void {
    for (const watcher of [...this.#watchers]) watcher();
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
