/**
 * The wire format of protocol v1 (docs/protocol.md), as bytes in and out.
 *
 * No I/O here: the session reads bytes and hands them to `decode`, which
 * takes whole frames only (one read may hold half a frame or three).
 *
 * @module
 */
import { InvalidArgumentError, ProtocolError } from "../errors.js";
export const VERSION = 1;
export const ACQUIRE = 0x01;
export const HEARTBEAT_BYTE = 0x02;
export const WAITING = 0x11;
export const ACQUIRED = 0x12;
export const ERROR = 0x13;
/** The longest lock name, in UTF-8 bytes (a protocol constant). */
export const MAX_NAME_BYTES = 255;
/** The whole HEARTBEAT frame. */
export const HEARTBEAT = Buffer.from([HEARTBEAT_BYTE]);
const WAITING_FRAME = { type: "waiting" };
/** A string that `Buffer.from(s, "utf8")` would not keep as written: a lone surrogate. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
/** The name's UTF-8 bytes, checked as the server checks them. */
export function encodeName(name) {
    if (typeof name !== "string") {
        throw new InvalidArgumentError(`lock name must be a string, not ${describe(name)}`);
    }
    if (LONE_SURROGATE.test(name)) {
        throw new InvalidArgumentError(`lock name ${JSON.stringify(name)} is not valid UTF-8 (it has a lone surrogate)`);
    }
    const raw = Buffer.from(name, "utf8");
    if (raw.length === 0) {
        throw new InvalidArgumentError("lock name is empty: give 1 to 255 UTF-8 bytes");
    }
    if (raw.length > MAX_NAME_BYTES) {
        throw new InvalidArgumentError(`lock name is ${raw.length} bytes long: at most ${MAX_NAME_BYTES} UTF-8 bytes`);
    }
    return raw;
}
/** The shortest lease a client takes, in milliseconds: below it the
 * `0.8 x lease` deadline is shorter than ordinary scheduling stalls. */
export const MIN_LEASE_MS = 100;
/** The longest lease a client takes, in milliseconds (one hour): above it a
 * partitioned holder blocks everyone for longer than an operator accepts. */
export const MAX_LEASE_MS = 3_600_000;
/**
 * The lease, checked before connecting: a whole number of milliseconds from
 * 100 ms to 1 hour. The bounds also catch the usual unit mistake (`lease:
 * 10` meant as seconds).
 */
export function leaseMs(lease) {
    const unit = "(leases are in milliseconds)";
    if (typeof lease !== "number") {
        throw new InvalidArgumentError(`lease must be a number of milliseconds, not ${describe(lease)}`);
    }
    if (!Number.isFinite(lease)) {
        throw new InvalidArgumentError(`lease ${lease} is not a finite number of milliseconds ${unit}`);
    }
    if (!Number.isInteger(lease)) {
        throw new InvalidArgumentError(`lease ${lease} ms is not a whole number of milliseconds ${unit}`);
    }
    if (lease < MIN_LEASE_MS) {
        throw new InvalidArgumentError(`lease ${lease} ms is below the minimum of ${MIN_LEASE_MS} ms ${unit}`);
    }
    if (lease > MAX_LEASE_MS) {
        throw new InvalidArgumentError(`lease ${lease} ms is above the maximum of 1 hour ${unit}`);
    }
    return lease;
}
/** An ACQUIRE frame for a checked name and lease. */
export function acquire(name, lease) {
    const frame = Buffer.allocUnsafe(8 + name.length);
    frame[0] = ACQUIRE;
    frame[1] = VERSION;
    frame.writeUInt32BE(lease, 2);
    frame.writeUInt16BE(name.length, 6);
    name.copy(frame, 8);
    return frame;
}
/**
 * The frame at `offset` and its length, or null while it is incomplete.
 *
 * @throws ProtocolError on a byte that starts no v1 server frame; the
 * message names a TLS or HTTP server when that is what answered.
 */
export function decode(buf, offset = 0) {
    if (buf.length <= offset)
        return null;
    const kind = buf[offset];
    switch (kind) {
        case WAITING:
            return [WAITING_FRAME, 1];
        case ACQUIRED:
            if (buf.length < offset + 9)
                return null;
            return [{ type: "acquired", token: buf.readBigUInt64BE(offset + 1) }, 9];
        case ERROR: {
            if (buf.length < offset + 3)
                return null;
            const code = buf[offset + 1];
            const length = buf[offset + 2];
            if (buf.length < offset + 3 + length)
                return null;
            const reason = buf.toString("utf8", offset + 3, offset + 3 + length);
            return [{ type: "error", code, reason }, 3 + length];
        }
        case 0x15:
        case 0x16:
            throw new ProtocolError("the server expects TLS: connect with TLS (new Client(addresses, { tls: { ca } }))", "tls");
        case 0x48: // 'H'
            throw new ProtocolError("an HTTP server answered (the admin or ops port?)", "http");
        default:
            throw new ProtocolError(`unexpected message type 0x${kind.toString(16).padStart(2, "0")} from server`);
    }
}
export function describe(value) {
    if (value === null)
        return "null";
    if (typeof value === "string")
        return JSON.stringify(value);
    if (typeof value === "number" || typeof value === "bigint" || typeof value === "boolean") {
        return `${typeof value} ${String(value)}`;
    }
    return typeof value;
}
//# sourceMappingURL=frames.js.map