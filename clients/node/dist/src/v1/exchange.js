/**
 * Reply matching for one protocol v1 connection, as a pure state machine
 * fed frames and instants.
 *
 * Every ACQUIRE and HEARTBEAT gets exactly one reply, in order, and a
 * promotion adds exactly one unsolicited ACQUIRED. The client keeps at most
 * one request in flight, so a reply always answers that request, except for
 * the one push: while WAITING, the first ACQUIRED is the push (a heartbeat
 * in flight stays in flight; its own ACQUIRED follows). A push confirms
 * nothing. Anything else is a protocol violation.
 *
 * The port of `crates/monolock-client/src/exchange.rs`.
 *
 * @module
 */
import { ProtocolError } from "../errors.js";
import { Schedule } from "../schedule.js";
/** Matching state and timing for one connection. */
export class Exchange {
    schedule;
    standing = "unanswered";
    token = null;
    /** Send instant of the request in flight. */
    #inFlight;
    /** `S`: send instant of the latest request whose reply arrived (before
     * the first reply: the ACQUIRE's). */
    #confirmedSend;
    #nextHeartbeat = null;
    /** The state right after the ACQUIRE went out at `acquireSent`. */
    constructor(lease, acquireSent) {
        this.schedule = new Schedule(lease);
        this.#inFlight = acquireSent;
        this.#confirmedSend = acquireSent;
    }
    /** The instant at which the claim is abandoned without a confirmation. */
    deadline() {
        return this.schedule.deadline(this.#confirmedSend);
    }
    /** When the next heartbeat is due; null while a request is in flight. */
    nextHeartbeat() {
        return this.#inFlight !== null ? null : this.#nextHeartbeat;
    }
    /** Records a heartbeat sent at `at`. */
    heartbeatSent(at) {
        if (this.#inFlight !== null)
            throw new Error("one request in flight at most");
        this.#inFlight = at;
        this.#nextHeartbeat = null;
    }
    /**
     * Interprets one frame that arrived at `now`.
     *
     * @throws ProtocolError when the frame cannot be the next one a v1 server
     * sends; the caller closes the connection.
     */
    onFrame(frame, now) {
        switch (frame.type) {
            case "error":
                return "closed";
            case "waiting":
                if (this.standing === "held") {
                    throw new ProtocolError("WAITING arrived after the lock was granted");
                }
                this.#confirm(now, "WAITING");
                if (this.standing === "unanswered") {
                    this.standing = "waiting";
                    return "queued";
                }
                return "confirmed";
            case "acquired":
                if (this.standing === "unanswered") {
                    this.#confirm(now, "ACQUIRED");
                    this.standing = "held";
                    this.token = frame.token;
                    return "granted";
                }
                if (this.standing === "waiting") {
                    // The push: confirms nothing; a heartbeat in flight stays so.
                    this.standing = "held";
                    this.token = frame.token;
                    return "granted";
                }
                if (frame.token !== this.token) {
                    throw new ProtocolError(`ACQUIRED carried token ${frame.token}, but this session was granted token ${this.token}`);
                }
                this.#confirm(now, "ACQUIRED");
                return "confirmed";
        }
    }
    /** Takes the request in flight as answered at `now`. */
    #confirm(now, what) {
        const sentAt = this.#inFlight;
        if (sentAt === null)
            throw new ProtocolError(`${what} arrived with no request in flight`);
        this.#inFlight = null;
        this.schedule.observeRtt(now > sentAt ? now - sentAt : 0n);
        this.#confirmedSend = sentAt;
        this.#nextHeartbeat = this.schedule.nextSend(sentAt, now);
    }
}
//# sourceMappingURL=exchange.js.map