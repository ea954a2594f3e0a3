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
/** v2 session ERROR 0x03: the server closed an idle session. */
export const IDLE_CLOSED = 0x03;
/** v2 ERROR 0x10 in reply to OPEN: the server speaks only protocol v1. */
export const UNSUPPORTED_VERSION = 0x10;
/** v2 REFUSED 0x09: the session has as many claims as the server allows. */
export const TOO_MANY_CLAIMS = 0x09;
/** v2 REFUSED 0x0b: the session has as many watches as the server allows. */
export const TOO_MANY_WATCHES = 0x0b;

const CODE_NAMES: ReadonlyMap<number, string> = new Map([
  [0x01, "server shutting down"],
  [0x02, "closed by administrator"],
  [0x03, "idle session closed"],
  [0x08, "claim revoked by administrator"],
  [0x09, "too many claims on this session"],
  [0x0b, "too many watches on this session"],
  [0x0c, "server watch limit reached"],
  [0x10, "unsupported protocol version"],
  [0x11, "first message must be ACQUIRE"],
  [0x12, "duplicate ACQUIRE"],
  [0x13, "unknown message type"],
  [0x14, "empty lock name"],
  [0x15, "lock name too long"],
  [0x16, "lock name is not valid UTF-8"],
  [0x17, "lease must be positive"],
  [0x18, "not authorized for lock"],
  [0x19, "frame out of state"],
  [0x20, "unknown claim id"],
  [0x21, "claim id already in use"],
  [0x22, "empty lock name"],
  [0x23, "lock name is not valid UTF-8"],
  [0x24, "not authorized for lock"],
  [0x25, "unknown ACQUIRE mode"],
  [0x26, "value longer than 1024 bytes"],
  [0x27, "value is not valid UTF-8"],
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
 * No address could be reached, or what answered is not a monolock server
 * speaking as asked. The message names the address and the problem;
 * `attempts` has each address's error and `cause` is the last.
 *
 * `reason`: `"tls"` when the TLS handshake failed (an untrusted or
 * mismatched certificate, a client certificate refused or missing, or a
 * port that does not speak TLS), `"protocol"` when what answered is not a
 * monolock server speaking as asked (an HTTP server, a TLS port reached
 * without TLS), `"timeout"` when it did not connect or answer in time,
 * else `"network"`.
 *
 * `isTemporary`: true for `"network"` and `"timeout"` (refused,
 * unreachable, too slow: it may heal), false for `"tls"` and `"protocol"`
 * (the same attempt fails the same way again).
 */
export class ConnectError extends MonolockError {
  declare readonly reason: "network" | "timeout" | "tls" | "protocol";
  /** Every attempt, in the order the addresses were tried. */
  readonly attempts: readonly ConnectAttempt[];

  constructor(
    attempts: readonly ConnectAttempt[],
    reason: "network" | "timeout" | "tls" | "protocol",
  ) {
    // An attempt whose message names its address already stands alone.
    const tried = attempts
      .map((a) => (a.error.message.startsWith(a.address) ? a.error.message : `${a.address}: ${a.error.message}`))
      .join("; ");
    super(reason, `could not connect: ${tried || "no address"}`, {
      cause: attempts[attempts.length - 1]?.error,
    });
    this.attempts = attempts;
  }

  /** The addresses tried, in order. */
  get addresses(): string[] {
    return this.attempts.map((a) => a.address);
  }

  override get isTemporary(): boolean {
    return this.reason === "network" || this.reason === "timeout";
  }
}

/**
 * The server at an address lacks lock values and observers (it predates
 * them: it answered HELLO with ERROR 0x13), or the client is forced to
 * protocol v1, which has none. `reason` is always `"unsupported"`; never
 * temporary: upgrade the server, or let the client speak protocol v2.
 * Plain locks go on working on that server.
 */
export class UnsupportedError extends MonolockError {
  /** The address that lacks them; null under forced protocol v1. */
  readonly address: string | null;

  constructor(address: string | null) {
    super(
      "unsupported",
      address === null
        ? "protocol version 1 has no lock values or observers"
        : `${address} does not support lock values and observers (the server is older than this client): upgrade the server`,
    );
    this.address = address;
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
  static expired(lockName: string, leaseMs: number): LockLostError {
    return LockLostError.#lost(
      lockName,
      "expired",
      `no reply confirmed the connection within 0.8 x the lease of ${leaseMs} ms`,
    );
  }

  /** @internal An ERROR that ended the connection, or a v2 REFUSED or
   * REVOKED that ended one claim (`revoked`: an administrator's act). */
  static server(lockName: string, code: number, detail: string, revoked = false): LockLostError {
    const reason: LossReason = revoked
      ? "forced"
      : code === SHUTTING_DOWN
        ? "shutdown"
        : code === CLOSED_BY_ADMIN
          ? "forced"
          : "server_error";
    return LockLostError.#lost(lockName, reason, `the server sent ${describeCode(code, detail)}`, {
      code,
      detail,
    });
  }

  /** @internal */
  static connection(lockName: string, cause?: Error): LockLostError {
    if (cause === undefined) {
      return LockLostError.#lost(lockName, "connection", "the server closed the connection");
    }
    return LockLostError.#lost(lockName, "connection", `the connection failed: ${cause.message}`, {
      cause,
    });
  }

  /** @internal */
  static protocol(lockName: string, cause: ProtocolError): LockLostError {
    return LockLostError.#lost(lockName, "protocol", `protocol violation by the server: ${cause.message}`, {
      cause,
    });
  }

  /**
   * @internal The end of an observation (or of a holder lookup) for
   * `loss`, the loss its session's end gave the lock `lockName`: the same
   * reason, code and cause, `observation of lock "NAME" ended (REASON): DETAIL`.
   */
  static observationEnded(
    loss: LockLostError,
    lockName: string,
    what: "observation" | "holder lookup" = "observation",
  ): LockLostError {
    const prefix = `lock ${JSON.stringify(lockName)} lost (${loss.reason}): `;
    const detail = loss.message.startsWith(prefix) ? loss.message.slice(prefix.length) : loss.message;
    const verb = what === "observation" ? "ended" : "failed";
    return new LockLostError(
      loss.reason,
      `${what} of lock ${JSON.stringify(lockName)} ${verb} (${loss.reason}): ${detail}`,
      {
        ...(loss.code === undefined ? {} : { code: loss.code }),
        detail: loss.detail,
        ...(loss.cause === undefined ? {} : { cause: loss.cause }),
      },
    );
  }

  /** @internal */
  static released(lockName: string): LockLostError {
    return new LockLostError("released", `lock ${JSON.stringify(lockName)} was released`);
  }

  /** `lock "NAME" lost (REASON): DETAIL`. */
  static #lost(
    lockName: string,
    reason: LossReason,
    detail: string,
    extra: { code?: number; detail?: string; cause?: unknown } = {},
  ): LockLostError {
    return new LockLostError(
      reason,
      `lock ${JSON.stringify(lockName)} lost (${reason}): ${detail}`,
      extra,
    );
  }
}

/** The server sent something a monolock server never sends. */
export class ProtocolError extends MonolockError {
  /** What answered instead of a monolock server, when its first byte says. */
  readonly peer: "http" | "tls" | null;

  constructor(message: string, peer: "http" | "tls" | null = null) {
    super("protocol", message);
    this.peer = peer;
  }
}
