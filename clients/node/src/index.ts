/**
 * monolock for Node.js: named locks where the TCP connection is the claim.
 *
 * ```ts
 * import { Client } from "monolock";
 *
 * const client = new Client("127.0.0.1:7070");
 * await using lock = await client.lock("deploy", { lease: 10_000 });
 * await writeWithFence(lock.token, { signal: lock.signal });
 * ```
 *
 * Lock values, observers and leader election (`lock(name, { value })`,
 * `lock.setValue()`, `client.observe()`, `client.holder()`,
 * `LeaderElector`) need a server with the protocol's extension "values
 * and observers"; against an older one they fail with `UnsupportedError`
 * and plain locks go on working.
 *
 * The same client contract as the Rust client (docs/protocol.md):
 * heartbeats every ~lease/4, the claim given up at `S + 0.8 x lease` on the
 * monotonic clock, where S is the send instant of the latest confirmed
 * ACQUIRE or heartbeat, so the holder always learns of a loss before the
 * server could hand the lock on.
 *
 * @module
 */

// Node 20.0 to 20.3 predate Symbol.asyncDispose; `await using` needs it.
(Symbol as { asyncDispose?: symbol }).asyncDispose ??= Symbol.for("nodejs.asyncDispose");

export { ADDRESS_ENV, DEFAULT_ADDRESS, type Addresses } from "./address.js";
export {
  Client,
  type ClientOptions,
  DEFAULT_CONNECT_TIMEOUT,
  DEFAULT_IO_TIMEOUT,
  DEFAULT_LEASE,
  type HolderOptions,
  type LockOptions,
  type ObserveOptions,
  type TryLockOptions,
  type WithLockOptions,
} from "./client.js";
export { DEFAULT_RETRY, LeaderElector, type LeaderElectorOptions } from "./elector.js";
export {
  type ConnectAttempt,
  ConnectError,
  InvalidArgumentError,
  LockLostError,
  type LossReason,
  MonolockError,
  NotAcquiredError,
  ProtocolError,
  UnsupportedError,
} from "./errors.js";
export { Lock } from "./lock.js";
export {
  type LockState,
  MAX_UNREAD_STATES,
  Observation,
  type ReleaseReason,
  type StateEvent,
} from "./observe.js";
export { MAX_VALUE_BYTES } from "./v2/frames.js";
export { MAX_LEASE_MS, MAX_NAME_BYTES, MIN_LEASE_MS } from "./v1/frames.js";
