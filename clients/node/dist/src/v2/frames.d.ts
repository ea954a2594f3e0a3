/**
 * The wire format of protocol v2 (docs/protocol.md, "Protocol version 2",
 * and its extension "Version 2 extension: values and observers"), as bytes
 * in and out. No I/O: `decode` takes whole frames only.
 *
 * @module
 */
export declare const VERSION = 2;
export declare const OPEN = 1;
export declare const ACQUIRE = 33;
export declare const RELEASE = 34;
export declare const PING_BYTE = 35;
export declare const HELLO = 36;
export declare const ACQUIRE_VALUE = 37;
export declare const PROCLAIM = 38;
export declare const OBSERVE = 39;
export declare const UNOBSERVE = 40;
export declare const LOOKUP = 41;
export declare const OPENED = 48;
export declare const ACQUIRED = 49;
export declare const WAITING = 50;
export declare const BUSY = 51;
export declare const RELEASED = 52;
export declare const PONG = 53;
export declare const REFUSED = 54;
export declare const GRANTED = 55;
export declare const REVOKED = 56;
export declare const FEATURES = 57;
export declare const PROCLAIMED = 58;
export declare const OBSERVING = 59;
export declare const UNOBSERVED = 60;
export declare const LOCK_STATE = 61;
export declare const STATE = 62;
export declare const ERROR = 19;
/** HELLO's bit 0: values and observers. */
export declare const VALUES_AND_OBSERVERS = 1;
/** The longest value, in UTF-8 bytes (a protocol constant). */
export declare const MAX_VALUE_BYTES = 1024;
/** STATE's `event` byte, by name. */
export type StateEvent = "free" | "held" | "granted" | "value" | "released";
/** Why a claim ended, in a RELEASED state. */
export type ReleaseReason = "released" | "expired" | "forced" | "ended_by_server";
/** A lock's state as STATE and LOCK_STATE carry it. */
export interface WireState {
    readonly event: StateEvent;
    readonly initial: boolean;
    readonly coalesced: boolean;
    readonly token: bigint;
    /** The server's wall clock, ms since the Unix epoch; 0 when unknown. */
    readonly sinceMs: bigint;
    /** RELEASED only; null otherwise. */
    readonly reason: ReleaseReason | null;
    readonly value: string;
}
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
} | {
    readonly type: "features";
    readonly features: number;
    readonly maxWatches: number;
} | {
    readonly type: "proclaimed";
    readonly claim: number;
} | {
    readonly type: "observing";
    readonly watch: number;
} | {
    readonly type: "unobserved";
    readonly watch: number;
} | {
    readonly type: "lock_state";
    readonly state: WireState;
} | {
    readonly type: "state";
    readonly watch: number;
    readonly state: WireState;
};
/**
 * A value's UTF-8 bytes, checked before connecting: text of at most 1,024
 * bytes. Empty means no value.
 *
 * @throws InvalidArgumentError when it is not a string, not valid UTF-8
 * (a lone surrogate) or longer than 1,024 bytes.
 */
export declare function encodeValue(value: unknown): Buffer;
/** OPEN with a checked lease in milliseconds. */
export declare function open(leaseMs: number): Buffer;
/** ACQUIRE of a checked name (1 to 255 bytes). */
export declare function acquire(claim: number, mode: Mode, name: Buffer): Buffer;
/** HELLO asking for `features`. */
export declare function hello(features: number): Buffer;
/** ACQUIRE_VALUE of a checked name and value (at most 1,024 bytes). */
export declare function acquireValue(claim: number, mode: Mode, name: Buffer, value: Buffer): Buffer;
/** PROCLAIM of a checked value for a claim id. */
export declare function proclaim(claim: number, value: Buffer): Buffer;
/** OBSERVE of a checked name under a watch id. */
export declare function observe(watch: number, name: Buffer): Buffer;
/** UNOBSERVE of a watch id. */
export declare function unobserve(watch: number): Buffer;
/** LOOKUP of a checked name. */
export declare function lookup(name: Buffer): Buffer;
/** RELEASE of a claim id. */
export declare function release(claim: number): Buffer;
/**
 * The frame at `offset` and its length, or null while it is incomplete.
 *
 * @throws ProtocolError on a byte that starts no v2 server frame; its
 * `peer` names a TLS or HTTP server when that is what answered.
 */
export declare function decode(buf: Buffer, offset?: number): [Frame, number] | null;
