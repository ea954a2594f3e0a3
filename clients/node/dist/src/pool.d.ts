/**
 * The v2 sessions of one client, pooled per lease (the client fixes the
 * addresses and the TLS settings): many claims per session up to the
 * server's bound, a new session when every one is full, and the v1
 * fallback per address. Every session asks for values and observers
 * (HELLO); an address that lacks them (OPENED, then ERROR 0x13) is
 * remembered as the v1 fallback is, and gets plain sessions.
 *
 * @module
 */
import { type Endpoints } from "./io/connect.js";
import { V2Session } from "./v2/session.js";
/** How long an address that answered OPEN with ERROR 0x10 is spoken to in v1. */
export declare const REMEMBER_V1_MS: number;
/** How long an address that answered HELLO with ERROR 0x13 gets plain sessions. */
export declare const REMEMBER_PLAIN_MS: number;
/** Where a claim goes: a session that is open, or protocol v1. */
export type Route = V2Session | "v1";
/** What a request needs of its session. */
export interface Needs {
    /** Values, watches or lookups: a session that asked for them and got them. */
    readonly extension?: boolean;
    /** Room for one more watch (else room for one more claim). */
    readonly watch?: boolean;
}
export declare class Pool {
    #private;
    constructor(endpoints: Endpoints, ioTimeout: number);
    /** The sessions open now (for tests and figures). */
    get size(): number;
    /**
     * An open session with room for one more claim (or watch) of `leaseMs`,
     * or "v1" when the server speaks only v1.
     *
     * @throws ConnectError when no address could be reached or what answered
     * is not a monolock server; `abort.reason` on abort; `EndedBeforeOpen`;
     * `UnsupportedError` when `needs.extension` and the server lacks values
     * and observers.
     */
    route(leaseMs: number, abort?: AbortSignal, needs?: Needs): Promise<Route>;
    /** Addresses that failed to connect are asked for v2 afresh next time. */
    connectFailed(error: unknown): void;
    /** Closes every session (their claims are lost). */
    close(): void;
}
/** `promise`, or `abort.reason` once `abort` fires first. */
export declare function abortable<T>(promise: Promise<T>, abort?: AbortSignal): Promise<T>;
