/**
 * Protocol v2: one connection = one session carrying many claims. The
 * driver that owns the socket and feeds the exchange (`exchange.ts`)
 * frames and instants; the protocol rules are all there.
 *
 * The socket's `data` events make it the session's permanent reader
 * (GRANTED and REVOKED are pushed); one `Alarm` fires at the next PING,
 * the session deadline, the end of the wait for OPENED, or the idle close,
 * whichever is first. The end of the session ends every claim in one step:
 * each claim's AbortSignal is aborted with its own `LockLostError`, and
 * every watch with its own.
 *
 * A session asked to (`hello`) writes HELLO with its OPEN and is usable
 * once FEATURES is read: only then does it carry values, watches and
 * lookups. A server without the extension answers OPENED, then ERROR 0x13:
 * `ready()` rejects with `LacksExtension`, and the pool opens a plain
 * session to that address instead.
 *
 * @module
 */
import type net from "node:net";
import type { Address } from "../address.js";
import type { Status } from "../claim.js";
import { ConnectError, LockLostError, ProtocolError } from "../errors.js";
import { Watched } from "../io/watch.js";
import type { Holding, ReleaseEnd } from "../holding.js";
import { type Nanos } from "../schedule.js";
import * as frames from "./frames.js";
/** How long a session with no claims stays open (below the server's
 * `--idle-timeout` default of 60 s, so the client closes first). */
export declare const KEEP_IDLE_MS = 20000;
/** The server answered OPEN with ERROR 0x10: it speaks only protocol v1. */
export declare class SpeaksOnlyV1 extends Error {
    readonly address: Address;
    constructor(address: Address);
}
/** The server answered HELLO with ERROR 0x13: it predates lock values
 * and observers. */
export declare class LacksExtension extends Error {
    readonly address: Address;
    constructor(address: Address);
}
/** Whoever observes a lock through one watch of a session. */
export interface WatchOwner {
    readonly name: string;
    /** A state pushed to the watch (the INITIAL one first). */
    state(state: frames.WireState): void;
    /** The server refused the OBSERVE (the id is free again). */
    refused(code: number, reason: string): void;
    /** The session ended while the watch was in use. */
    lost(loss: LockLostError): void;
}
/** The session ended before OPENED for an ordinary reason (a reset, a
 * shutdown): each waiting claim takes its own loss from `ending`. */
export declare class EndedBeforeOpen extends Error {
    readonly ending: (lockName: string) => LockLostError;
    constructor(ending: (lockName: string) => LockLostError);
}
/** `5 s`, or `1500 ms` when not a whole number of seconds. */
export declare function describeMs(ms: number): string;
/**
 * What a connection that failed before its first answer says about the
 * peer: a connect error naming the address and the problem, or null when
 * it was an ordinary failure of a monolock server.
 */
export declare function wrongPeer(address: Address, tls: boolean, failure: {
    protocol?: ProtocolError;
    cause?: Error;
    eof?: boolean;
}): ConnectError | null;
/** One claim of a v2 session. */
export declare class V2Claim extends Watched implements Holding {
    #private;
    readonly id: number;
    readonly name: string;
    readonly session: V2Session;
    readonly protocol = 2;
    token: bigint | null;
    /** The value the server has for this claim (as of the latest PROCLAIMED). */
    value: string;
    constructor(session: V2Session, id: number, name: string, value: string);
    get address(): Address;
    get leaseMs(): number;
    get signal(): AbortSignal;
    get released(): boolean;
    deadline(): Nanos;
    status(): Status;
    loss(): LockLostError | null;
    release(): Promise<ReleaseEnd>;
    /** PROCLAIM: resolves once the server has the new value. */
    setValue(value: string, raw: Buffer): Promise<void>;
    /** @internal The session's verdict on this claim. */
    settle(status: Status, extra?: {
        token?: bigint;
        loss?: LockLostError;
    }): void;
    /** @internal The release ended: confirmed or not. */
    finishRelease(confirmed: boolean): void;
    /** Whether the owner let go (then the session no longer reports to it). */
    get letGo(): boolean;
}
/** A running v2 session on its connection. */
export declare class V2Session {
    #private;
    readonly address: Address;
    readonly leaseMs: number;
    /** Takes over `socket` and sends OPEN at once. */
    constructor(socket: net.Socket, address: Address, options: {
        leaseMs: number;
        tls: boolean;
        ioTimeout: number;
        /** Ask for values and observers (HELLO with the OPEN). */
        hello: boolean;
        onEnd: (session: V2Session) => void;
    });
    /** Resolves once OPENED (and FEATURES, when asked) is read; rejects
     * with a `ConnectError`, a `SpeaksOnlyV1`, a `LacksExtension`, or the
     * loss that ended the session first. */
    ready(): Promise<void>;
    /** Whether the session is ready for claims (and watches, if it asked). */
    get opened(): boolean;
    /** Whether the session carries values, watches and lookups. */
    get extension(): boolean;
    get ended(): boolean;
    /** Whether this session may take one more claim now (once opened). */
    get hasRoom(): boolean;
    /** The most watches the session may have at once (FEATURES; 0 before). */
    get maxWatches(): number;
    /** Whether this session may take one more watch now (once opened). */
    get hasWatchRoom(): boolean;
    /** Claims in use or asked for. */
    get claims(): number;
    deadline(): Nanos;
    /** The pessimist's check: past the deadline every claim is lost. */
    check(at?: Nanos): void;
    /**
     * Writes an ACQUIRE for `name` (checked bytes), or an ACQUIRE_VALUE when
     * `value` (checked, non-empty) is given, and returns its claim.
     */
    acquire(name: string, rawName: Buffer, mode: frames.Mode, value?: {
        text: string;
        raw: Buffer;
    } | null): V2Claim;
    /** Writes a PROCLAIM for `claim`; resolves once PROCLAIMED is read. */
    proclaim(claim: V2Claim, value: string, raw: Buffer): Promise<void>;
    /** Writes an OBSERVE of `rawName` for `owner`; returns the watch id. */
    observe(owner: WatchOwner, rawName: Buffer): number;
    /** The owner of watch `id` stops it: UNOBSERVE now, or once its OBSERVE
     * is answered. Its owner hears no more of it. */
    unobserve(id: number): void;
    /** Writes a LOOKUP of `rawName`; resolves with the LOCK_STATE. */
    lookup(name: string, rawName: Buffer): Promise<frames.WireState>;
    /** The owner of `claim` let go: RELEASE now, or once its ACQUIRE is answered. */
    release(claim: V2Claim): void;
    /** Closes the session (no claim is lost: it has none). */
    close(): void;
}
