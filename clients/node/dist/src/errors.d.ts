/**
 * The errors of the client. Every class has a `reason`, a short string to
 * branch on, and `isTemporary`: whether a new attempt (a new claim, at the
 * back of the queue) may succeed.
 *
 * @module
 */
/** ERROR codes below this are server conditions; from it up, client errors. */
export declare const CLIENT_ERROR_CODES = 16;
/** ERROR 0x01: the server is shutting down. */
export declare const SHUTTING_DOWN = 1;
/** ERROR 0x02: an administrator force-released the lock or removed the waiter. */
export declare const CLOSED_BY_ADMIN = 2;
/** ERROR 0x18: the ACL refuses this identity for this lock. */
export declare const NOT_AUTHORIZED = 24;
/** v2 session ERROR 0x03: the server closed an idle session. */
export declare const IDLE_CLOSED = 3;
/** v2 ERROR 0x10 in reply to OPEN: the server speaks only protocol v1. */
export declare const UNSUPPORTED_VERSION = 16;
/** v2 REFUSED 0x09: the session has as many claims as the server allows. */
export declare const TOO_MANY_CLAIMS = 9;
/** v2 REFUSED 0x0b: the session has as many watches as the server allows. */
export declare const TOO_MANY_WATCHES = 11;
/** `0x02 (closed by administrator): detail`. */
export declare function describeCode(code: number, detail?: string): string;
/** The base class of every error this package throws. */
export declare class MonolockError extends Error {
    /** A short string to branch on; each subclass documents its values. */
    readonly reason: string;
    constructor(reason: string, message: string, options?: {
        cause?: unknown;
    });
    get name(): string;
    /** True when trying again later (a new claim) may succeed. */
    get isTemporary(): boolean;
}
/**
 * A bad lock name, lease, wait or address: thrown before any connection is
 * made. `reason` is always `"invalid_argument"`.
 */
export declare class InvalidArgumentError extends MonolockError {
    constructor(message: string);
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
export declare class ConnectError extends MonolockError {
    readonly reason: "network" | "timeout" | "tls" | "protocol";
    /** Every attempt, in the order the addresses were tried. */
    readonly attempts: readonly ConnectAttempt[];
    constructor(attempts: readonly ConnectAttempt[], reason: "network" | "timeout" | "tls" | "protocol");
    /** The addresses tried, in order. */
    get addresses(): string[];
    get isTemporary(): boolean;
}
/**
 * The server at an address lacks lock values and observers (it predates
 * them: it answered HELLO with ERROR 0x13), or the client is forced to
 * protocol v1, which has none. `reason` is always `"unsupported"`; never
 * temporary: upgrade the server, or let the client speak protocol v2.
 * Plain locks go on working on that server.
 */
export declare class UnsupportedError extends MonolockError {
    /** The address that lacks them; null under forced protocol v1. */
    readonly address: string | null;
    constructor(address: string | null);
}
/**
 * `wait` ran out before the lock was granted; the place in the queue was
 * given up. `reason` is always `"not_acquired"`.
 */
export declare class NotAcquiredError extends MonolockError {
    /** The lock's name. */
    readonly lockName: string;
    /** The bound that ran out, in milliseconds. */
    readonly wait: number;
    constructor(lockName: string, wait: number);
    get isTemporary(): boolean;
}
/** Why a claim (the lock, or a place in its queue) ended. */
export type LossReason = 
/** No reply confirmed the session within 0.8 x lease: the client gave the
 * claim up before the server could hand the lock on. */
"expired"
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
export declare class LockLostError extends MonolockError {
    #private;
    readonly reason: LossReason;
    /** The ERROR code, when the server ended the session with one. */
    readonly code: number | undefined;
    /** The ERROR frame's text (may be empty). */
    readonly detail: string;
    constructor(reason: LossReason, message: string, extra?: {
        code?: number;
        detail?: string;
        cause?: unknown;
    });
    get isTemporary(): boolean;
    /** @internal */
    static expired(lockName: string, leaseMs: number): LockLostError;
    /** @internal An ERROR that ended the connection, or a v2 REFUSED or
     * REVOKED that ended one claim (`revoked`: an administrator's act). */
    static server(lockName: string, code: number, detail: string, revoked?: boolean): LockLostError;
    /** @internal */
    static connection(lockName: string, cause?: Error): LockLostError;
    /** @internal */
    static protocol(lockName: string, cause: ProtocolError): LockLostError;
    /**
     * @internal The end of an observation (or of a holder lookup) for
     * `loss`, the loss its session's end gave the lock `lockName`: the same
     * reason, code and cause, `observation of lock "NAME" ended (REASON): DETAIL`.
     */
    static observationEnded(loss: LockLostError, lockName: string, what?: "observation" | "holder lookup"): LockLostError;
    /** @internal */
    static released(lockName: string): LockLostError;
}
/** The server sent something a monolock server never sends. */
export declare class ProtocolError extends MonolockError {
    /** What answered instead of a monolock server, when its first byte says. */
    readonly peer: "http" | "tls" | null;
    constructor(message: string, peer?: "http" | "tls" | null);
}
