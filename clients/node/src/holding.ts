/**
 * What a `Lock` needs of the claim behind it, whatever the protocol
 * version: a v1 connection of its own (`io/session.ts`) or one claim of a
 * pooled v2 session (`v2/session.ts`).
 *
 * @module
 */

import type { Address } from "./address.js";
import type { Status } from "./claim.js";
import type { LockLostError } from "./errors.js";
import type { Nanos } from "./schedule.js";

/** How a release ended. */
export interface ReleaseEnd {
  /** The loss that had ended the claim before the release, if one had. */
  readonly loss: LockLostError | null;
  /** Whether the server confirmed the release (v2: RELEASED; v1: its
   * close) within the I/O timeout. Unconfirmed, the connection was closed:
   * the lock is gone for the caller all the same. */
  readonly confirmed: boolean;
}

/** A granted claim as its `Lock` sees it. */
export interface Holding {
  readonly name: string;
  readonly leaseMs: number;
  readonly address: Address;
  /** Aborted with the `LockLostError` the moment the claim is lost. */
  readonly signal: AbortSignal;
  /** Whether `release()` was called. */
  readonly released: boolean;
  /** The protocol version the claim lives on. */
  readonly protocol: 1 | 2;
  /** The status, checked against the clock now. */
  status(): Status;
  /** Why the claim ended (checked against the clock now), or null. */
  loss(): LockLostError | null;
  /** `S + 0.8 x lease`. */
  deadline(): Nanos;
  /** Releases and waits for the server's confirmation (bounded). Idempotent. */
  release(): Promise<ReleaseEnd>;
  /** The claim's value, as the server has it. */
  readonly value: string;
  /** Replaces the value (checked `raw` bytes of `value`); resolves once the
   * server has it. */
  setValue(value: string, raw: Buffer): Promise<void>;
}
