/**
 * One protocol v1 connection = one claim, as a sans-I/O machine: bytes and
 * instants in; status, deadline, the next wake-up and "send a heartbeat
 * now" out. The session (`io/session.ts`) owns the socket and the clock and
 * feeds it; it holds no protocol logic of its own.
 *
 * The port of the Python client's `_claim.py` over the Rust client's
 * exchange and schedule.
 *
 * @module
 */
import { LockLostError, ProtocolError } from "../errors.js";
import { MS } from "../schedule.js";
import { Exchange } from "./exchange.js";
import * as frames from "./frames.js";
const EMPTY = Buffer.alloc(0);
/** The state of one v1 claim. */
export class Claim {
    name;
    leaseMs;
    status = "unanswered";
    token = null;
    loss = null;
    #exchange;
    #acquire;
    /** Whether a whole frame has arrived (a wrong port shows before one). */
    answered = false;
    /** Bytes of a frame not complete yet. */
    #pending = EMPTY;
    /**
     * @param rawName the name's checked UTF-8 bytes (`frames.encodeName`)
     * @param leaseMs the checked lease (`frames.leaseMs`)
     * @param acquireSent the instant the ACQUIRE goes out
     */
    constructor(name, rawName, leaseMs, acquireSent) {
        this.name = name;
        this.leaseMs = leaseMs;
        this.#exchange = new Exchange(BigInt(leaseMs) * MS, acquireSent);
        this.#acquire = frames.acquire(rawName, leaseMs);
    }
    opening() {
        return this.#acquire;
    }
    deadline() {
        return this.#exchange.deadline();
    }
    lose(loss) {
        if (this.status === "lost")
            return false;
        this.status = "lost";
        this.loss = loss;
        return true;
    }
    check(now) {
        if (this.status !== "lost" && now >= this.deadline()) {
            this.lose(LockLostError.expired(this.name, this.leaseMs));
        }
    }
    receive(data, now) {
        this.check(now);
        if (this.status === "lost")
            return;
        const buf = this.#pending.length === 0 ? data : Buffer.concat([this.#pending, data]);
        let used = 0;
        try {
            while (this.status !== "lost") {
                const decoded = frames.decode(buf, used);
                if (decoded === null)
                    break;
                const [frame, length] = decoded;
                used += length;
                this.answered = true;
                const event = this.#exchange.onFrame(frame, now);
                if (event === "queued") {
                    this.status = "waiting";
                }
                else if (event === "granted") {
                    this.status = "held";
                    this.token = this.#exchange.token;
                }
                else if (event === "closed" && frame.type === "error") {
                    this.lose(LockLostError.server(this.name, frame.code, frame.reason));
                }
            }
        }
        catch (err) {
            if (!(err instanceof ProtocolError))
                throw err;
            this.lose(LockLostError.protocol(this.name, err));
        }
        // Copy the rest: `data` is the socket's buffer, not ours to keep.
        this.#pending = used >= buf.length ? EMPTY : Buffer.from(buf.subarray(used));
    }
    closed(cause) {
        this.lose(LockLostError.connection(this.name, cause));
    }
    heartbeatDue(now) {
        this.check(now);
        if (this.status === "lost")
            return null;
        const due = this.#exchange.nextHeartbeat();
        return due !== null && due <= now ? frames.HEARTBEAT : null;
    }
    /** When the next heartbeat is due: null while a request is in flight or
     * once the claim has ended. */
    nextHeartbeat() {
        return this.status === "lost" ? null : this.#exchange.nextHeartbeat();
    }
    heartbeatSent(at) {
        this.#exchange.heartbeatSent(at);
    }
    nextWake() {
        if (this.status === "lost")
            return null;
        const deadline = this.deadline();
        const due = this.#exchange.nextHeartbeat();
        return due === null || deadline < due ? deadline : due;
    }
}
//# sourceMappingURL=claim.js.map