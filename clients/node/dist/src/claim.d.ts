/**
 * What the I/O session needs of a claim, whatever the protocol version: a
 * sans-I/O machine fed bytes and instants that says where the claim is,
 * when to look again, and when a heartbeat is due. Protocol v1's is
 * `v1/claim.ts`; another version brings its own behind the same shape.
 *
 * @module
 */
import type { LockLostError } from "./errors.js";
import type { Nanos } from "./schedule.js";
/**
 * Where a claim is, as its owner sees it. Protocol v2 adds two ends of a
 * claim that never held anything: `busy` (a try-only ACQUIRE found the
 * lock held) and `retry` (the session had no room, REFUSED 0x09, or was
 * closed as idle before the ACQUIRE was answered: ask another session).
 */
export type Status = "unanswered" | "waiting" | "held" | "lost" | "busy" | "retry";
/** One claim's protocol state, from the ACQUIRE's send instant on. */
export interface ClaimMachine {
    /** Where the claim is (as of the last call that took an instant). */
    readonly status: Status;
    /** The fencing token, once granted. */
    readonly token: bigint | null;
    /** Why the claim ended, once it has. */
    readonly loss: LockLostError | null;
    /** The lease, in milliseconds, as sent. */
    readonly leaseMs: number;
    /** `S + 0.8 x lease`. */
    deadline(): Nanos;
    /** The first request's bytes (the ACQUIRE). */
    opening(): Buffer;
    /** The pessimist's check: past the deadline the claim is lost, whatever
     * timer has not fired yet. */
    check(now: Nanos): void;
    /** Applies bytes read at `now`. */
    receive(data: Buffer, now: Nanos): void;
    /** The connection ended: EOF when `cause` is undefined, else a failure. */
    closed(cause?: Error): void;
    /** Ends the claim for `loss` unless it already ended (the first reason wins). */
    lose(loss: LockLostError): boolean;
    /** The heartbeat's bytes when one is due at `now` (the deadline is checked
     * first), else null. The caller sends them and calls `heartbeatSent`. */
    heartbeatDue(now: Nanos): Buffer | null;
    /** Records a heartbeat whose send started at `at`. */
    heartbeatSent(at: Nanos): void;
    /** When to look again without input: the next heartbeat or the deadline,
     * whichever is first; null once the claim has ended. */
    nextWake(): Nanos | null;
}
