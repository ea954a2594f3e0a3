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
import { ProtocolError } from "../errors.js";
import { Schedule } from "../schedule.js";
/** REFUSED 0x20: RELEASE of an id not in use. */
export const UNKNOWN_CLAIM = 0x20;
/** ERROR 0x13 (unknown message type): as the answer to HELLO, the server
 * predates the extension. */
export const UNKNOWN_TYPE = 0x13;
const NOTHING = { kind: "nothing" };
/** Matching state and timing of one session. */
export class Exchange {
    schedule;
    #inFlight;
    /** Index of the oldest frame in flight in `#inFlight` (a queue without shifting). */
    #head = 0;
    #claims = new Map();
    #watches = new Map();
    /** `S`. */
    #confirmedSend;
    /** When the latest reply arrived. */
    #repliedAt;
    #opened = false;
    /** The state right after the OPEN went out at `openSent`. */
    constructor(lease, openSent) {
        this.schedule = new Schedule(lease);
        this.#inFlight = [{ kind: "open", at: openSent }];
        this.#confirmedSend = openSent;
        this.#repliedAt = openSent;
    }
    /** Whether OPENED has been read. */
    get opened() {
        return this.#opened;
    }
    /** The instant at which the session is given up without a reply. */
    deadline() {
        return this.schedule.deadline(this.#confirmedSend);
    }
    /** Frames sent and not answered yet. */
    get inFlight() {
        return this.#inFlight.length - this.#head;
    }
    /** When the next PING is due: null while any frame is in flight (its
     * reply will confirm the session). */
    nextPing() {
        if (this.inFlight > 0)
            return null;
        return this.schedule.nextSend(this.#confirmedSend, this.#repliedAt);
    }
    /** Claim ids in use or asked for. */
    get claims() {
        return this.#claims.size;
    }
    /** Whether `claim` is asked for or in use. */
    knows(claim) {
        return this.#claims.has(claim);
    }
    /** Where `claim` stands: asked for (ACQUIRE unanswered), waiting, held,
     * releasing (RELEASE unanswered); null when the id is free. */
    standing(claim) {
        return this.#claims.get(claim)?.kind ?? null;
    }
    /** Watch ids in use or asked for. */
    get watches() {
        return this.#watches.size;
    }
    /** Where `watch` stands: asked for (OBSERVE unanswered), watching,
     * leaving (UNOBSERVE unanswered); null when the id is free. A watch is
     * live (its session's end ends it) while watching or leaving. */
    watchStanding(watch) {
        return this.#watches.get(watch)?.kind ?? null;
    }
    /** Records a HELLO written at `at` (right behind the OPEN). */
    helloSent(at) {
        this.#push({ kind: "hello", at });
    }
    /** Records a PROCLAIM for `claim` written at `at`. */
    proclaimSent(claim, at) {
        this.#push({ kind: "proclaim", claim, at });
    }
    /** Records an OBSERVE of `watch` written at `at`. */
    observeSent(watch, at) {
        this.#watches.set(watch, { kind: "asking", lastToken: 0n, stop: false });
        this.#push({ kind: "observe", watch, at });
    }
    /** The owner of `watch` stops it: whether to write an UNOBSERVE now (a
     * watch whose OBSERVE is unanswered is stopped once it is answered). */
    unobserve(watch) {
        const state = this.#watches.get(watch);
        if (state?.kind === "asking")
            state.stop = true;
        return state?.kind === "watching";
    }
    /** Records an UNOBSERVE of `watch` written at `at`. */
    unobserveSent(watch, at) {
        const state = this.#watches.get(watch);
        if (state !== undefined)
            state.kind = "leaving";
        this.#push({ kind: "unobserve", watch, at });
    }
    /** Records a LOOKUP written at `at`. */
    lookupSent(at) {
        this.#push({ kind: "lookup", at });
    }
    /** Records an ACQUIRE of `claim` written at `at`. */
    acquireSent(claim, mode, at) {
        this.#claims.set(claim, { kind: "asking", mode, release: false });
        this.#push({ kind: "acquire", claim, at });
    }
    /** The owner of `claim` let go: whether to write a RELEASE now (else the
     * ACQUIRE's reply says, or the id is already free). */
    release(claim) {
        const state = this.#claims.get(claim);
        if (state === undefined)
            return false;
        if (state.kind === "asking") {
            state.release = true;
            return false;
        }
        return state.kind === "waiting" || state.kind === "held";
    }
    /** Records a RELEASE of `claim` written at `at`. */
    releaseSent(claim, at) {
        this.#claims.set(claim, { kind: "releasing" });
        this.#push({ kind: "release", claim, at });
    }
    /** Records a PING written at `at`. */
    pingSent(at) {
        this.#push({ kind: "ping", at });
    }
    /**
     * Interprets one frame that arrived at `now`.
     *
     * @throws ProtocolError when the frame cannot be the next one a version
     * 2 server sends; the caller closes the session.
     */
    onFrame(frame, now) {
        switch (frame.type) {
            case "error":
                if (frame.code === UNKNOWN_TYPE && this.#inFlight[this.#head]?.kind === "hello") {
                    return { kind: "unsupported" };
                }
                return { kind: "ended", code: frame.code, reason: frame.reason };
            case "state": {
                const watch = this.#watches.get(frame.watch);
                if (watch === undefined || watch.kind === "asking")
                    throw unexpected(frame);
                if (frame.state.token < watch.lastToken) {
                    throw new ProtocolError(`STATE of watch ${frame.watch} names token ${frame.state.token} after token ${watch.lastToken}`);
                }
                watch.lastToken = frame.state.token;
                if (watch.kind === "leaving")
                    return NOTHING;
                return { kind: "state", watch: frame.watch, state: frame.state };
            }
            case "granted": {
                const state = this.#claims.get(frame.claim);
                if (state?.kind === "waiting") {
                    this.#claims.set(frame.claim, { kind: "held" });
                    return { kind: "held", claim: frame.claim, token: frame.token, release: false };
                }
                // Granted while its RELEASE is on the way: RELEASED follows.
                if (state?.kind === "releasing")
                    return NOTHING;
                throw unexpected(frame);
            }
            case "revoked": {
                const state = this.#claims.get(frame.claim);
                if (state === undefined || state.kind === "asking")
                    throw unexpected(frame);
                this.#claims.delete(frame.claim);
                return { kind: "revoked", claim: frame.claim, code: frame.code, reason: frame.reason };
            }
            default:
                return this.#onReply(frame, now);
        }
    }
    /** A reply: it answers the oldest frame in flight. */
    #onReply(frame, now) {
        const sent = this.#inFlight[this.#head];
        if (sent === undefined)
            throw unexpected(frame);
        const event = this.#match(sent, frame);
        this.#head += 1;
        if (this.#head > 64 && this.#head * 2 > this.#inFlight.length) {
            this.#inFlight.splice(0, this.#head);
            this.#head = 0;
        }
        this.schedule.observeRtt(now > sent.at ? now - sent.at : 0n);
        if (sent.at > this.#confirmedSend)
            this.#confirmedSend = sent.at;
        this.#repliedAt = now;
        return event;
    }
    #match(sent, frame) {
        switch (sent.kind) {
            case "open":
                if (frame.type !== "opened")
                    throw unexpected(frame, "OPEN");
                this.#opened = true;
                return { kind: "opened", maxClaims: frame.maxClaims };
            case "hello":
                if (frame.type !== "features")
                    throw unexpected(frame, "HELLO");
                return { kind: "features", features: frame.features, maxWatches: frame.maxWatches };
            case "ping":
                if (frame.type !== "pong")
                    throw unexpected(frame, "PING");
                return NOTHING;
            case "lookup":
                if (frame.type === "lock_state")
                    return { kind: "lock_state", state: frame.state };
                if (frame.type === "refused" && frame.claim === 0) {
                    return { kind: "lookup_refused", code: frame.code, reason: frame.reason };
                }
                throw unexpected(frame, "LOOKUP");
            case "observe":
            case "unobserve":
                return this.#matchWatch(sent, frame);
            default:
                return this.#matchClaim(sent, frame);
        }
    }
    /** The reply to an ACQUIRE, RELEASE or PROCLAIM. */
    #matchClaim(sent, frame) {
        const claimOf = "claim" in frame ? frame.claim : null;
        const answering = `${sent.kind.toUpperCase()} of claim ${sent.claim}`;
        if (claimOf !== sent.claim)
            throw unexpected(frame, answering);
        const state = this.#claims.get(sent.claim);
        if (sent.kind === "proclaim") {
            if (frame.type === "proclaimed")
                return { kind: "proclaimed", claim: sent.claim };
            if (frame.type === "refused") {
                return {
                    kind: "proclaim_refused",
                    claim: sent.claim,
                    code: frame.code,
                    reason: frame.reason,
                    gone: frame.code === UNKNOWN_CLAIM && state === undefined,
                };
            }
            throw unexpected(frame, answering);
        }
        if (sent.kind === "acquire") {
            if (state?.kind !== "asking")
                throw unexpected(frame);
            switch (frame.type) {
                case "acquired":
                    this.#claims.set(sent.claim, { kind: "held" });
                    return { kind: "held", claim: sent.claim, token: frame.token, release: state.release };
                case "waiting":
                    if (state.mode !== "wait")
                        throw unexpected(frame, "a try-only ACQUIRE");
                    this.#claims.set(sent.claim, { kind: "waiting" });
                    return { kind: "queued", claim: sent.claim, release: state.release };
                case "busy":
                    if (state.mode !== "try")
                        throw unexpected(frame, "a waiting ACQUIRE");
                    this.#claims.delete(sent.claim);
                    return { kind: "busy", claim: sent.claim };
                case "refused":
                    this.#claims.delete(sent.claim);
                    return { kind: "refused", claim: sent.claim, code: frame.code, reason: frame.reason };
                default:
                    throw unexpected(frame, "ACQUIRE");
            }
        }
        // A RELEASE.
        if (frame.type === "released" && state?.kind === "releasing") {
            this.#claims.delete(sent.claim);
            return { kind: "released", claim: sent.claim };
        }
        // The RELEASE crossed a REVOKED: the claim was already gone.
        if (frame.type === "refused" && frame.code === UNKNOWN_CLAIM && state === undefined) {
            return NOTHING;
        }
        throw unexpected(frame, "RELEASE");
    }
    /** The reply to an OBSERVE or UNOBSERVE: OBSERVING, UNOBSERVED or
     * REFUSED carrying the watch id. */
    #matchWatch(sent, frame) {
        const answering = `${sent.kind.toUpperCase()} of watch ${sent.watch}`;
        const idOf = frame.type === "refused" ? frame.claim : "watch" in frame ? frame.watch : null;
        if (idOf !== sent.watch)
            throw unexpected(frame, answering);
        const state = this.#watches.get(sent.watch);
        if (frame.type === "refused") {
            this.#watches.delete(sent.watch);
            return { kind: "watch_refused", watch: sent.watch, code: frame.code, reason: frame.reason };
        }
        if (sent.kind === "observe" && frame.type === "observing" && state?.kind === "asking") {
            state.kind = "watching";
            return { kind: "observing", watch: sent.watch, unobserve: state.stop };
        }
        if (sent.kind === "unobserve" && frame.type === "unobserved" && state?.kind === "leaving") {
            this.#watches.delete(sent.watch);
            return { kind: "unobserved", watch: sent.watch };
        }
        throw unexpected(frame, answering);
    }
    #push(sent) {
        this.#inFlight.push(sent);
    }
}
function unexpected(frame, answering) {
    const what = frame.type.toUpperCase() +
        ("claim" in frame ? ` of claim ${frame.claim}` : "watch" in frame ? ` of watch ${frame.watch}` : "");
    return new ProtocolError(answering === undefined ? `unexpected ${what}` : `unexpected ${what} in reply to ${answering}`);
}
//# sourceMappingURL=exchange.js.map