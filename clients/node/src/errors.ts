/**
 * The errors of the client. Every class has a `reason`, a short string to
 * branch on, and `isTemporary`: whether a new attempt (a new claim, at the
 * back of the queue) may succeed.
 *
 * @module
 */

/** ERROR codes below this are server conditions; from it up, client errors. */
export const CLIENT_ERROR_CODES = 0x10;
/** ERROR 0x01: the server is shutting down. */
export const SHUTTING_DOWN = 0x01;
/** ERROR 0x02: an administrator force-released the lock or removed the waiter. */
export const CLOSED_BY_ADMIN = 0x02;
/** ERROR 0x18: the ACL refuses this identity for this lock. */
export const NOT_AUTHORIZED = 0x18;

const CODE_NAMES: ReadonlyMap<number, string> = new Map([
  [0x01, "server shutting down"],
  [0x02, "closed by administrator"],
  [0x10, "unsupported protocol version"],
  [0x11, "first message must be ACQUIRE"],
  [0x12, "duplicate ACQUIRE"],
  [0x13, "unknown message type"],
  [0x14, "empty lock name"],
  [0x15, "lock name too long"],
  [0x16, "lock name is not valid UTF-8"],
  [0x17, "lease must be positive"],
  [0x18, "not authorized for lock"],
]);

/** `0x02 (closed by administrator): detail`. */
export function describeCode(code: number, detail = ""): string {
  let text = `0x${code.toString(16).padStart(2, "0")}`;
  const name = CODE_NAMES.get(code);
  if (name !== undefined) text += ` (${name})`;
  if (detail !== "") text += `: ${detail}`;
  return text;
}

/** The base class of every error this package throws. */
export class MonolockError extends Error {
  /** A short string to branch on; each subclass documents its values. */
  readonly reason: string;

  constructor(reason: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.reason = reason;
  }

  override get name(): string {
    return this.constructor.name;
  }

  /** True when trying again later (a new claim) may succeed. */
  get isTemporary(): boolean {
    return false;
  }
}

/**
 * A bad lock name, lease, wait or address: thrown before any connection is
 * made. `reason` is always `"invalid_argument"`.
 */
export class InvalidArgumentError extends MonolockError {
  constructor(message: string) {
    super("invalid_argument", message);
  }
}

/** One failed attempt to reach one address. */
export interface ConnectAttempt {
  /** The address, as `host:port`. */
  readonly address: string;
  /** What went wrong there. */
  readonly error: Error;
}

/**
 * No address could be reached (refused, unreachable, timed out, or the TLS
 * handshake failed). The message names every address tried, in order;
 * `attempts` has each one's error and `cause` is the last.
 *
 * `reason`: `"tls"` when the last attempt failed in the TLS handshake (an
 * untrusted or mismatched certificate, a client certificate refused or
 * missing), `"timeout"` when it did not answer within the connect timeout,
 * else `"network"`.
 */
export class ConnectError extends MonolockError {
  declare readonly reason: "network" | "timeout" | "tls";
  /** Every attempt, in the order the addresses were tried. */
  readonly attempts: readonly ConnectAttempt[];

  constructor(attempts: readonly ConnectAttempt[], reason: "network" | "timeout" | "tls") {
    const tried = attempts.map((a) => `${a.address}: ${a.error.message}`).join("; ");
    super(reason, `could not connect to ${tried || "any address"}`, {
      cause: attempts[attempts.length - 1]?.error,
    });
    this.attempts = attempts;
  }

  /** The addresses tried, in order. */
  get addresses(): string[] {
    return this.attempts.map((a) => a.address);
  }

  /** A network failure may heal; a TLS failure fails the same way again. */
  override get isTemporary(): boolean {
    return this.reason !== "tls";
  }
}

/**
 * `wait` ran out before the lock was granted; the place in the queue was
 * given up. `reason` is always `"not_acquired"`.
 */
export class NotAcquiredError extends MonolockError {
  /** The lock's name. */
  readonly lockName: string;
  /** The bound that ran out, in milliseconds. */
  readonly wait: number;

  constructor(lockName: string, wait: number) {
    super("not_acquired", `lock ${JSON.stringify(lockName)} was not acquired within ${wait}ms`);
    this.lockName = lockName;
    this.wait = wait;
  }

  override get isTemporary(): boolean {
    return true;
  }
}

/** Why a claim (the lock, or a place in its queue) ended. */
export type LossReason =
  /** No reply confirmed the session within 0.8 x lease: the client gave the
   * claim up before the server could hand the lock on. */
  | "expired"
  /** ERROR 0x02: an administrator force-released the lock (or removed the waiter). */
  | "forced"
  /** ERROR 0x01: the server is shutting down. */
  | "shutdown"
  /** Another ERROR code (0x18: the ACL refuses this lock, for example). */
  | "server_error"
  /** The connection closed or failed without an ERROR frame. */
  | "connection"
  /** The server broke protocol v1 (or is not a monolock server); the connection was closed. */
  | "protocol"
  /** This process released the lock (thrown by `check()` after `release()`). */
  | "released";

/**
 * The claim ended: the lock is no longer held or, thrown by
 * `client.lock()`, the place in the queue was lost before the grant.
 * `reason` says why; `code` and `detail` carry the server's ERROR frame
 * when there was one.
 */
export class LockLostError extends MonolockError {
  declare readonly reason: LossReason;
  /** The ERROR code, when the server ended the session with one. */
  readonly code: number | undefined;
  /** The ERROR frame's text (may be empty). */
  readonly detail: string;

  constructor(
    reason: LossReason,
    message: string,
    extra: { code?: number; detail?: string; cause?: unknown } = {},
  ) {
    super(reason, message, extra.cause === undefined ? undefined : { cause: extra.cause });
    this.code = extra.code;
    this.detail = extra.detail ?? "";
  }

  override get isTemporary(): boolean {
    if (this.reason === "protocol") return false;
    if (this.code !== undefined) return this.code < CLIENT_ERROR_CODES;
    return true;
  }

  /** @internal */
  static expired(leaseMs: number): LockLostError {
    return new LockLostError(
      "expired",
      `no heartbeat was confirmed within 0.8 x the lease of ${leaseMs}ms`,
    );
  }

  /** @internal */
  static server(code: number, detail: string): LockLostError {
    const reason: LossReason =
      code === SHUTTING_DOWN ? "shutdown" : code === CLOSED_BY_ADMIN ? "forced" : "server_error";
    return new LockLostError(
      reason,
      `the server ended the session with ${describeCode(code, detail)}`,
      { code, detail },
    );
  }

  /** @internal */
  static connection(cause?: Error): LockLostError {
    if (cause === undefined) {
      return new LockLostError("connection", "the server closed the connection");
    }
    return new LockLostError("connection", `the connection failed: ${cause.message}`, { cause });
  }

  /** @internal */
  static protocol(cause: ProtocolError): LockLostError {
    return new LockLostError("protocol", `protocol violation by the server: ${cause.message}`, {
      cause,
    });
  }

  /** @internal */
  static released(): LockLostError {
    return new LockLostError("released", "the lock was released");
  }
}

/** The server sent something a protocol v1 server never sends. */
export class ProtocolError extends MonolockError {
  constructor(message: string) {
    super("protocol", message);
  }
}
