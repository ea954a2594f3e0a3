/**
 * The wire format of protocol v1 (docs/protocol.md), as bytes in and out.
 *
 * No I/O here: the session reads bytes and hands them to `decode`, which
 * takes whole frames only (one read may hold half a frame or three).
 *
 * @module
 */
export declare const VERSION = 1;
export declare const ACQUIRE = 1;
export declare const HEARTBEAT_BYTE = 2;
export declare const WAITING = 17;
export declare const ACQUIRED = 18;
export declare const ERROR = 19;
/** The longest lock name, in UTF-8 bytes (a protocol constant). */
export declare const MAX_NAME_BYTES = 255;
/** The whole HEARTBEAT frame. */
export declare const HEARTBEAT: Buffer;
/** A frame from the server. */
export type Frame = {
    readonly type: "waiting";
} | {
    readonly type: "acquired";
    readonly token: bigint;
} | {
    readonly type: "error";
    readonly code: number;
    readonly reason: string;
};
/** The name's UTF-8 bytes, checked as the server checks them. */
export declare function encodeName(name: unknown): Buffer;
/** The shortest lease a client takes, in milliseconds: below it the
 * `0.8 x lease` deadline is shorter than ordinary scheduling stalls. */
export declare const MIN_LEASE_MS = 100;
/** The longest lease a client takes, in milliseconds (one hour): above it a
 * partitioned holder blocks everyone for longer than an operator accepts. */
export declare const MAX_LEASE_MS = 3600000;
/**
 * The lease, checked before connecting: a whole number of milliseconds from
 * 100 ms to 1 hour. The bounds also catch the usual unit mistake (`lease:
 * 10` meant as seconds).
 */
export declare function leaseMs(lease: unknown): number;
/** An ACQUIRE frame for a checked name and lease. */
export declare function acquire(name: Buffer, lease: number): Buffer;
/**
 * The frame at `offset` and its length, or null while it is incomplete.
 *
 * @throws ProtocolError on a byte that starts no v1 server frame; the
 * message names a TLS or HTTP server when that is what answered.
 */
export declare function decode(buf: Buffer, offset?: number): [Frame, number] | null;
export declare function describe(value: unknown): string;
