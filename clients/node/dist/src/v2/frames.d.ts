/**
 * The wire format of protocol v2 (docs/protocol.md, "Protocol version 2"),
 * as bytes in and out. No I/O: `decode` takes whole frames only.
 *
 * @module
 */
export declare const VERSION = 2;
export declare const OPEN = 1;
export declare const ACQUIRE = 33;
export declare const RELEASE = 34;
export declare const PING_BYTE = 35;
export declare const OPENED = 48;
export declare const ACQUIRED = 49;
export declare const WAITING = 50;
export declare const BUSY = 51;
export declare const RELEASED = 52;
export declare const PONG = 53;
export declare const REFUSED = 54;
export declare const GRANTED = 55;
export declare const REVOKED = 56;
export declare const ERROR = 19;
/** ACQUIRE modes. */
export type Mode = "wait" | "try";
/** The whole PING frame. */
export declare const PING: Buffer;
/** A frame from a version 2 server. */
export type Frame = {
    readonly type: "opened";
    readonly session: bigint;
    readonly maxClaims: number;
} | {
    readonly type: "acquired";
    readonly claim: number;
    readonly token: bigint;
} | {
    readonly type: "waiting";
    readonly claim: number;
} | {
    readonly type: "busy";
    readonly claim: number;
} | {
    readonly type: "released";
    readonly claim: number;
} | {
    readonly type: "pong";
} | {
    readonly type: "refused";
    readonly claim: number;
    readonly code: number;
    readonly reason: string;
} | {
    readonly type: "granted";
    readonly claim: number;
    readonly token: bigint;
} | {
    readonly type: "revoked";
    readonly claim: number;
    readonly code: number;
    readonly reason: string;
} | {
    readonly type: "error";
    readonly code: number;
    readonly reason: string;
};
/** OPEN with a checked lease in milliseconds. */
export declare function open(leaseMs: number): Buffer;
/** ACQUIRE of a checked name (1 to 255 bytes). */
export declare function acquire(claim: number, mode: Mode, name: Buffer): Buffer;
/** RELEASE of a claim id. */
export declare function release(claim: number): Buffer;
/**
 * The frame at `offset` and its length, or null while it is incomplete.
 *
 * @throws ProtocolError on a byte that starts no v2 server frame; its
 * `peer` names a TLS or HTTP server when that is what answered.
 */
export declare function decode(buf: Buffer, offset?: number): [Frame, number] | null;
