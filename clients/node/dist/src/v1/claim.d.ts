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
import type { ClaimMachine, Status } from "../claim.js";
import { LockLostError } from "../errors.js";
import { type Nanos } from "../schedule.js";
/** The state of one v1 claim. */
export declare class Claim implements ClaimMachine {
    #private;
    readonly name: string;
    readonly leaseMs: number;
    status: Status;
    token: bigint | null;
    loss: LockLostError | null;
    /** Whether a whole frame has arrived (a wrong port shows before one). */
    answered: boolean;
    /**
     * @param rawName the name's checked UTF-8 bytes (`frames.encodeName`)
     * @param leaseMs the checked lease (`frames.leaseMs`)
     * @param acquireSent the instant the ACQUIRE goes out
     */
    constructor(name: string, rawName: Buffer, leaseMs: number, acquireSent: Nanos);
    opening(): Buffer;
    deadline(): Nanos;
    lose(loss: LockLostError): boolean;
    check(now: Nanos): void;
    receive(data: Buffer, now: Nanos): void;
    closed(cause?: Error): void;
    heartbeatDue(now: Nanos): Buffer | null;
    /** When the next heartbeat is due: null while a request is in flight or
     * once the claim has ended. */
    nextHeartbeat(): Nanos | null;
    heartbeatSent(at: Nanos): void;
    nextWake(): Nanos | null;
}
