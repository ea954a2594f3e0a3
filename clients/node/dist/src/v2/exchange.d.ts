/**
 * Reply matching and timing for one protocol v2 session (docs/protocol.md,
 * "Writing a version 2 client: checklist"), as a pure state machine fed
 * the frames sent and received with their instants. No sockets, no timers:
 * every rule is tested at exact instants.
 *
 * - Every frame sent gets exactly one reply, in order: a FIFO of frames in
 *   flight, each reply checked against the oldest (type and claim id).
 *   GRANTED and REVOKED are pushes and answer nothing.
 * - Each claim id: asking (ACQUIRE sent) -> waiting | held -> releasing
 *   (RELEASE sent) -> free on RELEASED. A GRANTED may cross a RELEASE;
 *   REFUSED 0x20 answers a RELEASE that crossed a REVOKED.
 * - `S` is the send instant of the latest frame whose reply arrived
 *   (before the first reply: the OPEN's); the session is given up at
 *   `S + 0.8 x lease`. A push moves nothing.
 * - PING on the version 1 schedule, only when nothing is in flight: any
 *   reply confirms the session, so a busy session never pings.
 * - The extension (values and observers): HELLO right behind the OPEN,
 *   answered FEATURES, or ERROR 0x13 from a server without it. Watch ids
 *   live apart from claim ids: asking (OBSERVE sent) -> watching ->
 *   leaving (UNOBSERVE sent) -> free on UNOBSERVED. Each watch keeps the
 *   highest token pushed to it: a STATE below it, or for a watch not in
 *   use, is a protocol violation. STATE pushes while leaving say nothing.
 *
 * The port of `crates/monolock-client/src/v2/exchange.rs`.
 *
 * @module
 */
import { type Nanos, Schedule } from "../schedule.js";
import type { Frame, Mode, WireState } from "./frames.js";
/** REFUSED 0x20: RELEASE of an id not in use. */
export declare const UNKNOWN_CLAIM = 32;
/** ERROR 0x13 (unknown message type): as the answer to HELLO, the server
 * predates the extension. */
export declare const UNKNOWN_TYPE = 19;
/** Where one watch id stands, and the highest token pushed to it. */
interface WatchState {
    kind: "asking" | "watching" | "leaving";
    lastToken: bigint;
    /** Its owner stopped it while its OBSERVE was unanswered. */
    stop: boolean;
}
/** Where a watch id in use or asked for stands. */
export type WatchStanding = WatchState["kind"];
/** Where one claim id stands; `release`: its owner let go while it was asked. */
type ClaimState = {
    readonly kind: "asking";
    readonly mode: Mode;
    release: boolean;
} | {
    readonly kind: "waiting";
} | {
    readonly kind: "held";
} | {
    readonly kind: "releasing";
};
/** Where a claim id in use or asked for stands. */
export type Standing = ClaimState["kind"];
/** What a frame from the server meant. */
export type Event = {
    readonly kind: "opened";
    readonly maxClaims: number;
}
/** PONG, a GRANTED that crossed a RELEASE, REFUSED 0x20 after a REVOKED. */
 | {
    readonly kind: "nothing";
}
/** `release`: the owner let go while it was asked; write RELEASE now. */
 | {
    readonly kind: "held";
    readonly claim: number;
    readonly token: bigint;
    readonly release: boolean;
} | {
    readonly kind: "queued";
    readonly claim: number;
    readonly release: boolean;
} | {
    readonly kind: "busy";
    readonly claim: number;
} | {
    readonly kind: "refused";
    readonly claim: number;
    readonly code: number;
    readonly reason: string;
} | {
    readonly kind: "released";
    readonly claim: number;
} | {
    readonly kind: "revoked";
    readonly claim: number;
    readonly code: number;
    readonly reason: string;
}
/** ERROR: the session is over, with every claim. */
 | {
    readonly kind: "ended";
    readonly code: number;
    readonly reason: string;
}
/** FEATURES: the bits granted and the session's bound of watches. */
 | {
    readonly kind: "features";
    readonly features: number;
    readonly maxWatches: number;
}
/** OPENED, then ERROR 0x13 answering HELLO: the server lacks the
 * extension, and the session is over (no claim or watch existed yet). */
 | {
    readonly kind: "unsupported";
} | {
    readonly kind: "proclaimed";
    readonly claim: number;
}
/** `gone`: REFUSED 0x20 for a claim no longer in use (the PROCLAIM crossed
 * its REVOKED): nothing for the owner, whose claim was already lost. */
 | {
    readonly kind: "proclaim_refused";
    readonly claim: number;
    readonly code: number;
    readonly reason: string;
    readonly gone: boolean;
}
/** `unobserve`: the owner stopped it while it was asked; write UNOBSERVE now. */
 | {
    readonly kind: "observing";
    readonly watch: number;
    readonly unobserve: boolean;
}
/** A push for a watch in use (not one on its way out). */
 | {
    readonly kind: "state";
    readonly watch: number;
    readonly state: WireState;
} | {
    readonly kind: "unobserved";
    readonly watch: number;
} | {
    readonly kind: "watch_refused";
    readonly watch: number;
    readonly code: number;
    readonly reason: string;
} | {
    readonly kind: "lock_state";
    readonly state: WireState;
} | {
    readonly kind: "lookup_refused";
    readonly code: number;
    readonly reason: string;
};
/** Matching state and timing of one session. */
export declare class Exchange {
    #private;
    readonly schedule: Schedule;
    /** The state right after the OPEN went out at `openSent`. */
    constructor(lease: Nanos, openSent: Nanos);
    /** Whether OPENED has been read. */
    get opened(): boolean;
    /** The instant at which the session is given up without a reply. */
    deadline(): Nanos;
    /** Frames sent and not answered yet. */
    get inFlight(): number;
    /** When the next PING is due: null while any frame is in flight (its
     * reply will confirm the session). */
    nextPing(): Nanos | null;
    /** Claim ids in use or asked for. */
    get claims(): number;
    /** Whether `claim` is asked for or in use. */
    knows(claim: number): boolean;
    /** Where `claim` stands: asked for (ACQUIRE unanswered), waiting, held,
     * releasing (RELEASE unanswered); null when the id is free. */
    standing(claim: number): Standing | null;
    /** Watch ids in use or asked for. */
    get watches(): number;
    /** Where `watch` stands: asked for (OBSERVE unanswered), watching,
     * leaving (UNOBSERVE unanswered); null when the id is free. A watch is
     * live (its session's end ends it) while watching or leaving. */
    watchStanding(watch: number): WatchStanding | null;
    /** Records a HELLO written at `at` (right behind the OPEN). */
    helloSent(at: Nanos): void;
    /** Records a PROCLAIM for `claim` written at `at`. */
    proclaimSent(claim: number, at: Nanos): void;
    /** Records an OBSERVE of `watch` written at `at`. */
    observeSent(watch: number, at: Nanos): void;
    /** The owner of `watch` stops it: whether to write an UNOBSERVE now (a
     * watch whose OBSERVE is unanswered is stopped once it is answered). */
    unobserve(watch: number): boolean;
    /** Records an UNOBSERVE of `watch` written at `at`. */
    unobserveSent(watch: number, at: Nanos): void;
    /** Records a LOOKUP written at `at`. */
    lookupSent(at: Nanos): void;
    /** Records an ACQUIRE of `claim` written at `at`. */
    acquireSent(claim: number, mode: Mode, at: Nanos): void;
    /** The owner of `claim` let go: whether to write a RELEASE now (else the
     * ACQUIRE's reply says, or the id is already free). */
    release(claim: number): boolean;
    /** Records a RELEASE of `claim` written at `at`. */
    releaseSent(claim: number, at: Nanos): void;
    /** Records a PING written at `at`. */
    pingSent(at: Nanos): void;
    /**
     * Interprets one frame that arrived at `now`.
     *
     * @throws ProtocolError when the frame cannot be the next one a version
     * 2 server sends; the caller closes the session.
     */
    onFrame(frame: Frame, now: Nanos): Event;
}
export {};
