/**
 * Protocol v1: one connection = one claim. The driver that owns the socket
 * and feeds the claim machine bytes and instants.
 *
 * The socket's `data` events make it the connection's permanent reader
 * (promotion is pushed); one `Alarm` fires at the next heartbeat or the
 * deadline, whichever is first. The loss aborts the claim's AbortSignal and
 * destroys the socket in the same step. The protocol logic is all in the
 * claim machine; nothing here knows a frame.
 *
 * @module
 */
import type net from "node:net";
import type { Address } from "../address.js";
import type { Status } from "../claim.js";
import { type LockLostError, UnsupportedError } from "../errors.js";
import type { Holding, ReleaseEnd } from "../holding.js";
import type { Nanos } from "../schedule.js";
import type { Claim } from "../v1/claim.js";
import { Watched } from "./watch.js";
export type { WaitEnd } from "./watch.js";
/** A running claim on its connection. */
export declare class Session extends Watched implements Holding {
    #private;
    readonly claim: Claim;
    readonly address: Address;
    readonly protocol = 1;
    /** Protocol v1 has no values: what `setValue` throws. */
    noValues: UnsupportedError;
    /** Protocol v1 has no values. */
    readonly value = "";
    /** Takes over `socket` and sends the claim's ACQUIRE at once. */
    constructor(socket: net.Socket, address: Address, claim: Claim, ioTimeout: number);
    get name(): string;
    get leaseMs(): number;
    deadline(): Nanos;
    /** Aborted with the `LockLostError` the moment the claim is lost. */
    get signal(): AbortSignal;
    /** Whether `release()` was called. */
    get released(): boolean;
    /** The status after checking the deadline against the clock now. */
    status(): Status;
    /** Why the claim ended (checked against the clock now), or null. */
    loss(): LockLostError | null;
    /**
     * Ends the connection: FIN at once, then reads until the server's EOF,
     * which it sends once its lock table has released the claim. Bounded by
     * the I/O timeout; past it the socket is closed and the release is
     * unconfirmed. Returns the loss that had ended the claim before, if one
     * had. Idempotent.
     */
    release(): Promise<ReleaseEnd>;
    /** Protocol v1 has no values. */
    setValue(): Promise<void>;
    /** Closes the connection at once, without waiting for the server. */
    destroy(): void;
}
