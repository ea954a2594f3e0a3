/**
 * The wire format of protocol v2 (docs/protocol.md, "Protocol version 2"),
 * as bytes in and out. No I/O: `decode` takes whole frames only.
 *
 * @module
 */
import { ProtocolError } from "../errors.js";
export const VERSION = 2;
export const OPEN = 0x01;
export const ACQUIRE = 0x21;
export const RELEASE = 0x22;
export const PING_BYTE = 0x23;
export const OPENED = 0x30;
export const ACQUIRED = 0x31;
export const WAITING = 0x32;
export const BUSY = 0x33;
export const RELEASED = 0x34;
export const PONG = 0x35;
export const REFUSED = 0x36;
export const GRANTED = 0x37;
export const REVOKED = 0x38;
export const ERROR = 0x13;
/** The whole PING frame. */
export const PING = Buffer.from([PING_BYTE]);
/** OPEN with a checked lease in milliseconds. */
export function open(leaseMs) {
    const frame = Buffer.allocUnsafe(6);
    frame[0] = OPEN;
    frame[1] = VERSION;
    frame.writeUInt32BE(leaseMs, 2);
    return frame;
}
/** ACQUIRE of a checked name (1 to 255 bytes). */
export function acquire(claim, mode, name) {
    const frame = Buffer.allocUnsafe(7 + name.length);
    frame[0] = ACQUIRE;
    frame.writeUInt32BE(claim, 1);
    frame[5] = mode === "wait" ? 0x00 : 0x01;
    frame[6] = name.length;
    name.copy(frame, 7);
    return frame;
}
/** RELEASE of a claim id. */
export function release(claim) {
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
export function decode(buf, offset = 0) {
    const left = buf.length - offset;
    if (left <= 0)
        return null;
    const kind = buf[offset];
    const claim = () => buf.readUInt32BE(offset + 1);
    switch (kind) {
        case OPENED:
            if (left < 13)
                return null;
            return [
                { type: "opened", session: buf.readBigUInt64BE(offset + 1), maxClaims: buf.readUInt32BE(offset + 9) },
                13,
            ];
        case ACQUIRED:
        case GRANTED:
            if (left < 13)
                return null;
            return [
                { type: kind === ACQUIRED ? "acquired" : "granted", claim: claim(), token: buf.readBigUInt64BE(offset + 5) },
                13,
            ];
        case WAITING:
        case BUSY:
        case RELEASED:
            if (left < 5)
                return null;
            return [
                { type: kind === WAITING ? "waiting" : kind === BUSY ? "busy" : "released", claim: claim() },
                5,
            ];
        case PONG:
            return [{ type: "pong" }, 1];
        case REFUSED:
        case REVOKED: {
            if (left < 7)
                return null;
            const length = buf[offset + 6];
            if (left < 7 + length)
                return null;
            return [
                {
                    type: kind === REFUSED ? "refused" : "revoked",
                    claim: claim(),
                    code: buf[offset + 5],
                    reason: buf.toString("utf8", offset + 7, offset + 7 + length),
                },
                7 + length,
            ];
        }
        case ERROR: {
            if (left < 3)
                return null;
            const length = buf[offset + 2];
            if (left < 3 + length)
                return null;
            return [
                {
                    type: "error",
                    code: buf[offset + 1],
                    reason: buf.toString("utf8", offset + 3, offset + 3 + length),
                },
                3 + length,
            ];
        }
        case 0x15:
        case 0x16:
            throw new ProtocolError("the server expects TLS", "tls");
        case 0x48: // 'H'
            throw new ProtocolError("an HTTP server answered", "http");
        default:
            throw new ProtocolError(`unexpected message type 0x${kind.toString(16).padStart(2, "0")} from server`);
    }
}
//# sourceMappingURL=frames.js.map