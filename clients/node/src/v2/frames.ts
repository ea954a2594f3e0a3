/**
 * The wire format of protocol v2 (docs/protocol.md, "Protocol version 2",
 * and its extension "Version 2 extension: values and observers"), as bytes
 * in and out. No I/O: `decode` takes whole frames only.
 *
 * @module
 */

import { InvalidArgumentError, ProtocolError } from "../errors.js";

export const VERSION = 2;
export const OPEN = 0x01;
export const ACQUIRE = 0x21;
export const RELEASE = 0x22;
export const PING_BYTE = 0x23;
export const HELLO = 0x24;
export const ACQUIRE_VALUE = 0x25;
export const PROCLAIM = 0x26;
export const OBSERVE = 0x27;
export const UNOBSERVE = 0x28;
export const LOOKUP = 0x29;

export const OPENED = 0x30;
export const ACQUIRED = 0x31;
export const WAITING = 0x32;
export const BUSY = 0x33;
export const RELEASED = 0x34;
export const PONG = 0x35;
export const REFUSED = 0x36;
export const GRANTED = 0x37;
export const REVOKED = 0x38;
export const FEATURES = 0x39;
export const PROCLAIMED = 0x3a;
export const OBSERVING = 0x3b;
export const UNOBSERVED = 0x3c;
export const LOCK_STATE = 0x3d;
export const STATE = 0x3e;
export const ERROR = 0x13;

/** HELLO's bit 0: values and observers. */
export const VALUES_AND_OBSERVERS = 0x0000_0001;
/** The longest value, in UTF-8 bytes (a protocol constant). */
export const MAX_VALUE_BYTES = 1024;

/** STATE's `event` byte, by name. */
export type StateEvent = "free" | "held" | "granted" | "value" | "released";
const STATE_EVENTS: readonly StateEvent[] = ["free", "held", "granted", "value", "released"];

/** Why a claim ended, in a RELEASED state. */
export type ReleaseReason = "released" | "expired" | "forced" | "ended_by_server";
const RELEASE_REASONS: readonly ReleaseReason[] = ["released", "expired", "forced", "ended_by_server"];

const INITIAL_FLAG = 0x01;
const COALESCED_FLAG = 0x02;

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
export const PING: Buffer = Buffer.from([PING_BYTE]);

/** A frame from a version 2 server. */
export type Frame =
  | { readonly type: "opened"; readonly session: bigint; readonly maxClaims: number }
  | { readonly type: "acquired"; readonly claim: number; readonly token: bigint }
  | { readonly type: "waiting"; readonly claim: number }
  | { readonly type: "busy"; readonly claim: number }
  | { readonly type: "released"; readonly claim: number }
  | { readonly type: "pong" }
  | { readonly type: "refused"; readonly claim: number; readonly code: number; readonly reason: string }
  | { readonly type: "granted"; readonly claim: number; readonly token: bigint }
  | { readonly type: "revoked"; readonly claim: number; readonly code: number; readonly reason: string }
  | { readonly type: "error"; readonly code: number; readonly reason: string }
  | { readonly type: "features"; readonly features: number; readonly maxWatches: number }
  | { readonly type: "proclaimed"; readonly claim: number }
  | { readonly type: "observing"; readonly watch: number }
  | { readonly type: "unobserved"; readonly watch: number }
  | { readonly type: "lock_state"; readonly state: WireState }
  | { readonly type: "state"; readonly watch: number; readonly state: WireState };

/** A string that `Buffer.from(s, "utf8")` would not keep as written: a lone surrogate. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/**
 * A value's UTF-8 bytes, checked before connecting: text of at most 1,024
 * bytes. Empty means no value.
 *
 * @throws InvalidArgumentError when it is not a string, not valid UTF-8
 * (a lone surrogate) or longer than 1,024 bytes.
 */
export function encodeValue(value: unknown): Buffer {
  if (typeof value !== "string") {
    throw new InvalidArgumentError(`value must be a string, not ${value === null ? "null" : typeof value}`);
  }
  if (LONE_SURROGATE.test(value)) {
    throw new InvalidArgumentError("value is not valid UTF-8 (it has a lone surrogate)");
  }
  const raw = Buffer.from(value, "utf8");
  if (raw.length > MAX_VALUE_BYTES) {
    throw new InvalidArgumentError(`value of ${raw.length} bytes is above the maximum of ${MAX_VALUE_BYTES} bytes`);
  }
  return raw;
}

/** OPEN with a checked lease in milliseconds. */
export function open(leaseMs: number): Buffer {
  const frame = Buffer.allocUnsafe(6);
  frame[0] = OPEN;
  frame[1] = VERSION;
  frame.writeUInt32BE(leaseMs, 2);
  return frame;
}

/** ACQUIRE of a checked name (1 to 255 bytes). */
export function acquire(claim: number, mode: Mode, name: Buffer): Buffer {
  const frame = Buffer.allocUnsafe(7 + name.length);
  frame[0] = ACQUIRE;
  frame.writeUInt32BE(claim, 1);
  frame[5] = mode === "wait" ? 0x00 : 0x01;
  frame[6] = name.length;
  name.copy(frame, 7);
  return frame;
}

/** HELLO asking for `features`. */
export function hello(features: number): Buffer {
  const frame = Buffer.allocUnsafe(5);
  frame[0] = HELLO;
  frame.writeUInt32BE(features, 1);
  return frame;
}

/** ACQUIRE_VALUE of a checked name and value (at most 1,024 bytes). */
export function acquireValue(claim: number, mode: Mode, name: Buffer, value: Buffer): Buffer {
  const frame = Buffer.allocUnsafe(9 + name.length + value.length);
  frame[0] = ACQUIRE_VALUE;
  frame.writeUInt32BE(claim, 1);
  frame[5] = mode === "wait" ? 0x00 : 0x01;
  frame[6] = name.length;
  name.copy(frame, 7);
  frame.writeUInt16BE(value.length, 7 + name.length);
  value.copy(frame, 9 + name.length);
  return frame;
}

/** PROCLAIM of a checked value for a claim id. */
export function proclaim(claim: number, value: Buffer): Buffer {
  const frame = Buffer.allocUnsafe(7 + value.length);
  frame[0] = PROCLAIM;
  frame.writeUInt32BE(claim, 1);
  frame.writeUInt16BE(value.length, 5);
  value.copy(frame, 7);
  return frame;
}

/** OBSERVE of a checked name under a watch id. */
export function observe(watch: number, name: Buffer): Buffer {
  const frame = Buffer.allocUnsafe(6 + name.length);
  frame[0] = OBSERVE;
  frame.writeUInt32BE(watch, 1);
  frame[5] = name.length;
  name.copy(frame, 6);
  return frame;
}

/** UNOBSERVE of a watch id. */
export function unobserve(watch: number): Buffer {
  const frame = Buffer.allocUnsafe(5);
  frame[0] = UNOBSERVE;
  frame.writeUInt32BE(watch, 1);
  return frame;
}

/** LOOKUP of a checked name. */
export function lookup(name: Buffer): Buffer {
  const frame = Buffer.allocUnsafe(2 + name.length);
  frame[0] = LOOKUP;
  frame[1] = name.length;
  name.copy(frame, 2);
  return frame;
}

/** RELEASE of a claim id. */
export function release(claim: number): Buffer {
  const frame = Buffer.allocUnsafe(5);
  frame[0] = RELEASE;
  frame.writeUInt32BE(claim, 1);
  return frame;
}

/**
 * The frame at `offset` and its length, or null while it is incomplete.
 *
 * @throws ProtocolError on a byte that starts no v2 server frame; its
 * `peer` names a TLS or HTTP server when that is what answered.
 */
export function decode(buf: Buffer, offset = 0): [Frame, number] | null {
  const left = buf.length - offset;
  if (left <= 0) return null;
  const kind = buf[offset] as number;
  const claim = (): number => buf.readUInt32BE(offset + 1);
  switch (kind) {
    case OPENED:
      if (left < 13) return null;
      return [
        { type: "opened", session: buf.readBigUInt64BE(offset + 1), maxClaims: buf.readUInt32BE(offset + 9) },
        13,
      ];
    case ACQUIRED:
    case GRANTED:
      if (left < 13) return null;
      return [
        { type: kind === ACQUIRED ? "acquired" : "granted", claim: claim(), token: buf.readBigUInt64BE(offset + 5) },
        13,
      ];
    case WAITING:
    case BUSY:
    case RELEASED:
      if (left < 5) return null;
      return [
        { type: kind === WAITING ? "waiting" : kind === BUSY ? "busy" : "released", claim: claim() },
        5,
      ];
    case PONG:
      return [{ type: "pong" }, 1];
    case REFUSED:
    case REVOKED: {
      if (left < 7) return null;
      const length = buf[offset + 6] as number;
      if (left < 7 + length) return null;
      return [
        {
          type: kind === REFUSED ? "refused" : "revoked",
          claim: claim(),
          code: buf[offset + 5] as number,
          reason: buf.toString("utf8", offset + 7, offset + 7 + length),
        },
        7 + length,
      ];
    }
    case ERROR: {
      if (left < 3) return null;
      const length = buf[offset + 2] as number;
      if (left < 3 + length) return null;
      return [
        {
          type: "error",
          code: buf[offset + 1] as number,
          reason: buf.toString("utf8", offset + 3, offset + 3 + length),
        },
        3 + length,
      ];
    }
    case FEATURES:
      if (left < 9) return null;
      return [
        { type: "features", features: buf.readUInt32BE(offset + 1), maxWatches: buf.readUInt32BE(offset + 5) },
        9,
      ];
    case PROCLAIMED:
      if (left < 5) return null;
      return [{ type: "proclaimed", claim: claim() }, 5];
    case OBSERVING:
    case UNOBSERVED:
      if (left < 5) return null;
      return [{ type: kind === OBSERVING ? "observing" : "unobserved", watch: claim() }, 5];
    case LOCK_STATE: {
      const state = decodeState(buf, offset + 1);
      if (state === null) return null;
      return [{ type: "lock_state", state: state[0] }, 1 + state[1]];
    }
    case STATE: {
      if (left < 5) return null;
      const state = decodeState(buf, offset + 5);
      if (state === null) return null;
      return [{ type: "state", watch: claim(), state: state[0] }, 5 + state[1]];
    }
    case 0x15:
    case 0x16:
      throw new ProtocolError("the server expects TLS", "tls");
    case 0x48: // 'H'
      throw new ProtocolError("an HTTP server answered", "http");
    default:
      throw new ProtocolError(
        `unexpected message type 0x${kind.toString(16).padStart(2, "0")} from server`,
      );
  }
}

/** A state at `offset` (`event u8 · flags u8 · token u64 · since_ms u64 ·
 * reason u8 · value_len u16 · value`) and its length, or null while it is
 * incomplete. */
function decodeState(buf: Buffer, offset: number): [WireState, number] | null {
  if (buf.length - offset < 21) return null;
  const length = 21 + buf.readUInt16BE(offset + 19);
  if (buf.length - offset < length) return null;
  const eventByte = buf[offset] as number;
  const event = STATE_EVENTS[eventByte];
  if (event === undefined) {
    throw new ProtocolError(`unknown state event 0x${eventByte.toString(16).padStart(2, "0")} from server`);
  }
  const flags = buf[offset + 1] as number;
  // 0 is none; a byte this client does not know is none too.
  const reason = RELEASE_REASONS[(buf[offset + 18] as number) - 1] ?? null;
  return [
    {
      event,
      initial: (flags & INITIAL_FLAG) !== 0,
      coalesced: (flags & COALESCED_FLAG) !== 0,
      token: buf.readBigUInt64BE(offset + 2),
      sinceMs: buf.readBigUInt64BE(offset + 10),
      reason,
      value: buf.toString("utf8", offset + 21, offset + length),
    },
    length,
  ];
}
