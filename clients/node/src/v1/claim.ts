/**
 * One protocol v1 connection = one claim, as a sans-I/O machine: bytes and
 * instants in; status, deadline, the next wake-up and "send a heartbeat
 * now" out. The session (`io/session.ts`) owns the socket and the clock and
 * feeds it; it holds no protocol logic of its own.
 *
 * The port of the Python client's `_claim.py` over the Rust client's
 * exchange and schedule.
 *
 * @module
 */

import type { ClaimMachine, Status } from "../claim.js";
import { LockLostError, ProtocolError } from "../errors.js";
import { MS, type Nanos } from "../schedule.js";
import { Exchange } from "./exchange.js";
import * as frames from "./frames.js";

const EMPTY = Buffer.alloc(0);

/** The state of one v1 claim. */
export class Claim implements ClaimMachine {
  readonly name: string;
  readonly leaseMs: number;
  status: Status = "unanswered";
  token: bigint | null = null;
  loss: LockLostError | null = null;
  readonly #exchange: Exchange;
  readonly #acquire: Buffer;
  /** Whether a whole frame has arrived (a wrong port shows before one). */
  answered = false;
  /** Bytes of a frame not complete yet. */
  #pending: Buffer = EMPTY;

  /**
   * @param rawName the name's checked UTF-8 bytes (`frames.encodeName`)
   * @param leaseMs the checked lease (`frames.leaseMs`)
   * @param acquireSent the instant the ACQUIRE goes out
   */
  constructor(name: string, rawName: Buffer, leaseMs: number, acquireSent: Nanos) {
    this.name = name;
    this.leaseMs = leaseMs;
    this.#exchange = new Exchange(BigInt(leaseMs) * MS, acquireSent);
    this.#acquire = frames.acquire(rawName, leaseMs);
  }

  opening(): Buffer {
    return this.#acquire;
  }

  deadline(): Nanos {
    return this.#exchange.deadline();
  }

  lose(loss: LockLostError): boolean {
    if (this.status === "lost") return false;
    this.status = "lost";
    this.loss = loss;
    return true;
  }

  check(now: Nanos): void {
    if (this.status !== "lost" && now >= this.deadline()) {
      this.lose(LockLostError.expired(this.name, this.leaseMs));
    }
  }

  receive(data: Buffer, now: Nanos): void {
    this.check(now);
    if (this.status === "lost") return;
    const buf = this.#pending.length === 0 ? data : Buffer.concat([this.#pending, data]);
    let used = 0;
    try {
      while ((this.status as Status) !== "lost") {
        const decoded = frames.decode(buf, used);
        if (decoded === null) break;
        const [frame, length] = decoded;
        used += length;
        this.answered = true;
        const event = this.#exchange.onFrame(frame, now);
        if (event === "queued") {
          this.status = "waiting";
        } else if (event === "granted") {
          this.status = "held";
          this.token = this.#exchange.token;
        } else if (event === "closed" && frame.type === "error") {
          this.lose(LockLostError.server(this.name, frame.code, frame.reason));
        }
      }
    } catch (err) {
      if (!(err instanceof ProtocolError)) throw err;
      this.lose(LockLostError.protocol(this.name, err));
    }
    // Copy the rest: `data` is the socket's buffer, not ours to keep.
    this.#pending = used >= buf.length ? EMPTY : Buffer.from(buf.subarray(used));
  }

  closed(cause?: Error): void {
    this.lose(LockLostError.connection(this.name, cause));
  }

  heartbeatDue(now: Nanos): Buffer | null {
    this.check(now);
    if (this.status === "lost") return null;
    const due = this.#exchange.nextHeartbeat();
    return due !== null && due <= now ? frames.HEARTBEAT : null;
  }

  /** When the next heartbeat is due: null while a request is in flight or
   * once the claim has ended. */
  nextHeartbeat(): Nanos | null {
    return this.status === "lost" ? null : this.#exchange.nextHeartbeat();
  }

  heartbeatSent(at: Nanos): void {
    this.#exchange.heartbeatSent(at);
  }

  nextWake(): Nanos | null {
    if (this.status === "lost") return null;
    const deadline = this.deadline();
    const due = this.#exchange.nextHeartbeat();
    return due === null || deadline < due ? deadline : due;
  }
}
