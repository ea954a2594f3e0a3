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
import { type Nanos, Schedule } from "../schedule.js";
import type { Frame } from "./frames.js";
/** Where the claim stands. */
export type Standing = "unanswered" | "waiting" | "held";
/** What a frame from the server meant. */
export type Event = "queued" | "granted" | "confirmed" | "closed";
/** Matching state and timing for one connection. */
export declare class Exchange {
    #private;
    readonly schedule: Schedule;
    standing: Standing;
    token: bigint | null;
    /** The state right after the ACQUIRE went out at `acquireSent`. */
    constructor(lease: Nanos, acquireSent: Nanos);
    /** The instant at which the claim is abandoned without a confirmation. */
    deadline(): Nanos;
    /** When the next heartbeat is due; null while a request is in flight. */
    nextHeartbeat(): Nanos | null;
    /** Records a heartbeat sent at `at`. */
    heartbeatSent(at: Nanos): void;
    /**
     * Interprets one frame that arrived at `now`.
     *
     * @throws ProtocolError when the frame cannot be the next one a v1 server
     * sends; the caller closes the connection.
     */
    onFrame(frame: Frame, now: Nanos): Event;
}
