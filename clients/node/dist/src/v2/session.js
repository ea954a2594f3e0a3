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
import { ConnectError, describeCode, IDLE_CLOSED, LockLostError, MonolockError, ProtocolError, TOO_MANY_CLAIMS, TOO_MANY_WATCHES, UnsupportedError, UNSUPPORTED_VERSION, } from "../errors.js";
import { Alarm, now } from "../io/clock.js";
import { isTlsError } from "../io/connect.js";
import { Watched } from "../io/watch.js";
import { MS } from "../schedule.js";
import { Exchange } from "./exchange.js";
import * as frames from "./frames.js";
/** How long a session with no claims stays open (below the server's
 * `--idle-timeout` default of 60 s, so the client closes first). */
export const KEEP_IDLE_MS = 20_000;
/** The largest claim or watch id; ids wrap around and skip those in use. */
const MAX_CLAIM_ID = 0xffff_ffff;
const EMPTY = Buffer.alloc(0);
/** The server answered OPEN with ERROR 0x10: it speaks only protocol v1. */
export class SpeaksOnlyV1 extends Error {
    address;
    constructor(address) {
        super(`${address} speaks only protocol v1`);
        this.address = address;
    }
}
/** The server answered HELLO with ERROR 0x13: it predates lock values
 * and observers. */
export class LacksExtension extends Error {
    address;
    constructor(address) {
        super(`${address} lacks lock values and observers`);
        this.address = address;
    }
}
/** The session ended before OPENED for an ordinary reason (a reset, a
 * shutdown): each waiting claim takes its own loss from `ending`. */
export class EndedBeforeOpen extends Error {
    ending;
    constructor(ending) {
        super("the session ended before it opened");
        this.ending = ending;
    }
}
/** `5 s`, or `1500 ms` when not a whole number of seconds. */
export function describeMs(ms) {
    return ms % 1000 === 0 ? `${ms / 1000} s` : `${ms} ms`;
}
/**
 * What a connection that failed before its first answer says about the
 * peer: a connect error naming the address and the problem, or null when
 * it was an ordinary failure of a monolock server.
 */
export function wrongPeer(address, tls, failure) {
    const where = address.toString();
    const one = (message, kind, cause) => new ConnectError([{ address: where, error: new Error(message, { cause }) }], kind);
    const peer = failure.protocol?.peer ?? null;
    if (peer === "http") {
        return one(`${where} is not a monolock server: an HTTP server answered`, "protocol", failure.protocol);
    }
    if (!tls && (peer === "tls" || failure.eof === true)) {
        return one(`${where} expects TLS: it ${peer === "tls" ? "answered with a TLS record" : "closed the connection without answering"} (connect with the tls option, or check the port)`, "protocol", failure.protocol);
    }
    const cause = failure.cause;
    if (tls && cause !== undefined && isTlsError(cause)) {
        // A TLS alert on the first read: the server refused the handshake
        // (TLS 1.3 clients learn it here, e.g. an mTLS server that wants a
        // client certificate).
        return one(`${where}: the server refused the TLS handshake: ${cause.message}`, "tls", cause);
    }
    return null;
}
/** One claim of a v2 session. */
export class V2Claim extends Watched {
    id;
    name;
    session;
    protocol = 2;
    #status = "unanswered";
    token = null;
    #loss = null;
    #lost = new AbortController();
    #released = false;
    #release = null;
    #releaseDone = null;
    /** The value the server has for this claim (as of the latest PROCLAIMED). */
    value;
    constructor(session, id, name, value) {
        super();
        this.session = session;
        this.id = id;
        this.name = name;
        this.value = value;
    }
    get address() {
        return this.session.address;
    }
    get leaseMs() {
        return this.session.leaseMs;
    }
    get signal() {
        return this.#lost.signal;
    }
    get released() {
        return this.#released;
    }
    deadline() {
        return this.session.deadline();
    }
    status() {
        if (this.#status !== "lost" && !this.#released)
            this.session.check();
        return this.#status;
    }
    loss() {
        this.status();
        return this.#loss;
    }
    release() {
        this.#release ??= this.#doRelease();
        return this.#release;
    }
    /** PROCLAIM: resolves once the server has the new value. */
    async setValue(value, raw) {
        if (!this.session.extension)
            throw new UnsupportedError(this.address.toString());
        if (this.#released)
            throw this.loss() ?? LockLostError.released(this.name);
        const status = this.status();
        if (status !== "held" && status !== "waiting") {
            throw this.loss() ?? LockLostError.released(this.name);
        }
        await this.session.proclaim(this, value, raw);
    }
    async #doRelease() {
        const loss = this.loss();
        this.#released = true;
        if (this.#status !== "held" && this.#status !== "waiting" && this.#status !== "unanswered") {
            this.notify();
            return { loss, confirmed: loss === null };
        }
        const done = new Promise((resolve) => {
            this.#releaseDone = resolve;
        });
        this.session.release(this);
        const confirmed = await done;
        this.notify();
        return { loss, confirmed };
    }
    /** @internal The session's verdict on this claim. */
    settle(status, extra = {}) {
        if (this.#status === "lost")
            return;
        if (extra.token !== undefined)
            this.token = extra.token;
        this.#status = status;
        if (status === "lost" && extra.loss !== undefined) {
            this.#loss = extra.loss;
            if (!this.#released)
                this.#lost.abort(extra.loss);
        }
        if (status !== "held" && status !== "waiting" && status !== "unanswered") {
            this.finishRelease(status === "busy" || status === "retry" || status === "lost");
        }
        this.notify();
    }
    /** @internal The release ended: confirmed or not. */
    finishRelease(confirmed) {
        const done = this.#releaseDone;
        this.#releaseDone = null;
        done?.(confirmed);
    }
    /** Whether the owner let go (then the session no longer reports to it). */
    get letGo() {
        return this.#released;
    }
}
/** A running v2 session on its connection. */
export class V2Session {
    address;
    leaseMs;
    #tls;
    #ioTimeout;
    #socket;
    #exchange;
    #alarm = new Alarm();
    #owners = new Map();
    /** Claims whose RELEASE is out, waiting for RELEASED. */
    #releasing = new Map();
    #openedAt;
    #onEnd;
    #pending = EMPTY;
    #nextId = 1;
    #maxClaims = 0;
    /** Set after REFUSED 0x09 until a claim of this session ends. */
    #full = false;
    /** Whether HELLO went out with the OPEN. */
    #hello;
    /** Whether FEATURES granted values and observers. */
    #extension = false;
    /** Whether the session is usable: OPENED read, and FEATURES if asked. */
    #usable = false;
    #maxWatches = 0;
    /** Set after REFUSED 0x0b until a watch of this session ends. */
    #watchesFull = false;
    #nextWatchId = 1;
    #watchOwners = new Map();
    /** PROCLAIMs and LOOKUPs in flight, each in the order written (their
     * replies come in that order). */
    #proclaims = [];
    #lookups = [];
    #ended = null;
    #idleSince;
    #ready;
    #settleReady = null;
    #corked = false;
    /** Takes over `socket` and sends OPEN at once. */
    constructor(socket, address, options) {
        this.address = address;
        this.leaseMs = options.leaseMs;
        this.#tls = options.tls;
        this.#ioTimeout = options.ioTimeout;
        this.#onEnd = options.onEnd;
        this.#socket = socket;
        const at = now();
        this.#openedAt = at;
        this.#idleSince = at;
        this.#exchange = new Exchange(BigInt(options.leaseMs) * MS, at);
        this.#ready = new Promise((resolve, reject) => {
            this.#settleReady = (error) => (error === null ? resolve() : reject(error));
        });
        // Nobody may be waiting yet; the rejection is handled by whoever asks.
        this.#ready.catch(() => { });
        socket.on("data", (data) => this.#receive(data));
        socket.on("end", () => this.#closed(undefined, true));
        socket.on("error", (err) => this.#closed(err, false));
        socket.on("close", () => this.#closed(undefined, false));
        this.#hello = options.hello;
        if (options.hello) {
            // One write: the two replies come in one read, no extra round trip.
            socket.write(Buffer.concat([frames.open(options.leaseMs), frames.hello(frames.VALUES_AND_OBSERVERS)]));
            this.#exchange.helloSent(at);
        }
        else {
            socket.write(frames.open(options.leaseMs));
        }
        this.#reschedule();
    }
    /** Resolves once OPENED (and FEATURES, when asked) is read; rejects
     * with a `ConnectError`, a `SpeaksOnlyV1`, a `LacksExtension`, or the
     * loss that ended the session first. */
    ready() {
        return this.#ready;
    }
    /** Whether the session is ready for claims (and watches, if it asked). */
    get opened() {
        return this.#usable;
    }
    /** Whether the session carries values, watches and lookups. */
    get extension() {
        return this.#extension;
    }
    get ended() {
        return this.#ended !== null;
    }
    /** Whether this session may take one more claim now (once opened). */
    get hasRoom() {
        if (this.#ended !== null || this.#full)
            return false;
        return !this.opened || this.#exchange.claims < this.#maxClaims;
    }
    /** The most watches the session may have at once (FEATURES; 0 before). */
    get maxWatches() {
        return this.#maxWatches;
    }
    /** Whether this session may take one more watch now (once opened). */
    get hasWatchRoom() {
        if (this.#ended !== null || this.#watchesFull)
            return false;
        if (!this.opened)
            return this.#hello;
        return this.#extension && this.#exchange.watches < this.#maxWatches;
    }
    /** Claims in use or asked for. */
    get claims() {
        return this.#exchange.claims;
    }
    deadline() {
        return this.#exchange.deadline();
    }
    /** The pessimist's check: past the deadline every claim is lost. */
    check(at = now()) {
        if (this.#ended === null && at >= this.#exchange.deadline()) {
            const leaseMs = this.leaseMs;
            this.#end((name) => LockLostError.expired(name, leaseMs));
        }
    }
    /**
     * Writes an ACQUIRE for `name` (checked bytes), or an ACQUIRE_VALUE when
     * `value` (checked, non-empty) is given, and returns its claim.
     */
    acquire(name, rawName, mode, value = null) {
        const id = this.#freeId();
        const claim = new V2Claim(this, id, name, value?.text ?? "");
        if (this.#ended !== null) {
            claim.settle("lost", { loss: this.#ended(name) });
            return claim;
        }
        this.#owners.set(id, claim);
        this.#inUse();
        this.#write(value === null ? frames.acquire(id, mode, rawName) : frames.acquireValue(id, mode, rawName, value.raw));
        this.#exchange.acquireSent(id, mode, now());
        this.#reschedule();
        return claim;
    }
    /** Writes a PROCLAIM for `claim`; resolves once PROCLAIMED is read. */
    proclaim(claim, value, raw) {
        if (this.#ended !== null)
            return Promise.reject(claim.loss() ?? this.#ended(claim.name));
        return new Promise((resolve, reject) => {
            this.#proclaims.push({ claim, value, resolve, reject });
            this.#write(frames.proclaim(claim.id, raw));
            this.#exchange.proclaimSent(claim.id, now());
            this.#reschedule();
        });
    }
    /** Writes an OBSERVE of `rawName` for `owner`; returns the watch id. */
    observe(owner, rawName) {
        const id = this.#freeWatchId();
        if (this.#ended !== null) {
            owner.lost(this.#ended(owner.name));
            return id;
        }
        this.#watchOwners.set(id, owner);
        this.#inUse();
        this.#write(frames.observe(id, rawName));
        this.#exchange.observeSent(id, now());
        this.#reschedule();
        return id;
    }
    /** The owner of watch `id` stops it: UNOBSERVE now, or once its OBSERVE
     * is answered. Its owner hears no more of it. */
    unobserve(id) {
        if (!this.#watchOwners.delete(id))
            return;
        if (this.#ended !== null)
            return;
        if (this.#exchange.unobserve(id))
            this.#sendUnobserve(id);
        this.#watchesFull = false;
        this.#maybeIdle();
        this.#reschedule();
    }
    /** Writes a LOOKUP of `rawName`; resolves with the LOCK_STATE. */
    lookup(name, rawName) {
        if (this.#ended !== null) {
            return Promise.reject(LockLostError.observationEnded(this.#ended(name), name, "holder lookup"));
        }
        return new Promise((resolve, reject) => {
            this.#lookups.push({ name, resolve, reject });
            this.#inUse();
            this.#write(frames.lookup(rawName));
            this.#exchange.lookupSent(now());
            this.#reschedule();
        });
    }
    /** The owner of `claim` let go: RELEASE now, or once its ACQUIRE is answered. */
    release(claim) {
        if (this.#ended !== null || !this.#exchange.knows(claim.id)) {
            claim.finishRelease(false);
            return;
        }
        this.#releasing.set(claim.id, { claim, until: now() + BigInt(this.#ioTimeout) * MS });
        if (this.#exchange.release(claim.id))
            this.#sendRelease(claim.id);
        this.#reschedule();
    }
    /** Closes the session (no claim is lost: it has none). */
    close() {
        if (this.#ended === null) {
            const address = this.address;
            this.#end((name) => LockLostError.connection(name, new Error(`the session to ${address} was closed`)));
        }
    }
    #sendUnobserve(id) {
        this.#write(frames.unobserve(id));
        this.#exchange.unobserveSent(id, now());
    }
    /** Something of the caller's rides on the session: not idle, and it
     * keeps the process alive (an idle session does not). */
    #inUse() {
        this.#idleSince = null;
        this.#socket.ref();
    }
    /** Idle from now on when nothing rides on the session any more. */
    #maybeIdle() {
        if (this.#idleSince !== null)
            return;
        if (this.#owners.size > 0 || this.#exchange.claims > 0)
            return;
        if (this.#watchOwners.size > 0 || this.#exchange.watches > 0 || this.#lookups.length > 0)
            return;
        this.#idleSince = now();
        this.#socket.unref();
    }
    #sendRelease(id) {
        this.#write(frames.release(id));
        this.#exchange.releaseSent(id, now());
    }
    /** Frames written in one tick go out in one segment. */
    #write(frame) {
        if (!this.#corked) {
            this.#corked = true;
            this.#socket.cork();
            process.nextTick(() => {
                this.#corked = false;
                this.#socket.uncork();
            });
        }
        this.#socket.write(frame);
    }
    #freeWatchId() {
        for (;;) {
            const id = this.#nextWatchId;
            this.#nextWatchId = id >= MAX_CLAIM_ID ? 0 : id + 1;
            if (this.#exchange.watchStanding(id) === null && !this.#watchOwners.has(id))
                return id;
        }
    }
    #freeId() {
        for (;;) {
            const id = this.#nextId;
            this.#nextId = id >= MAX_CLAIM_ID ? 0 : id + 1;
            if (!this.#exchange.knows(id) && !this.#owners.has(id))
                return id;
        }
    }
    #receive(data) {
        if (this.#ended !== null)
            return;
        const at = now();
        this.check(at);
        if (this.#ended !== null)
            return;
        const buf = this.#pending.length === 0 ? data : Buffer.concat([this.#pending, data]);
        let used = 0;
        try {
            while (this.#ended === null) {
                const decoded = frames.decode(buf, used);
                if (decoded === null)
                    break;
                const [frame, length] = decoded;
                used += length;
                this.#apply(this.#exchange.onFrame(frame, at));
            }
        }
        catch (err) {
            if (!(err instanceof ProtocolError))
                throw err;
            if (!this.#exchange.opened)
                this.#failOpen(wrongPeer(this.address, this.#tls, { protocol: err }));
            this.#end((name) => LockLostError.protocol(name, err));
            return;
        }
        // Copy the rest: `data` is the socket's buffer, not ours to keep.
        this.#pending = used >= buf.length ? EMPTY : Buffer.from(buf.subarray(used));
        this.#reschedule();
    }
    #apply(event) {
        switch (event.kind) {
            case "opened":
                this.#maxClaims = event.maxClaims;
                if (!this.#hello)
                    this.#becomeUsable();
                return;
            case "features":
                this.#extension = (event.features & frames.VALUES_AND_OBSERVERS) !== 0;
                this.#maxWatches = event.maxWatches;
                this.#becomeUsable();
                return;
            case "unsupported": {
                this.#failOpen(new LacksExtension(this.address));
                const where = this.address.toString();
                this.#end((name) => LockLostError.connection(name, new Error(`${where} lacks lock values and observers`)));
                return;
            }
            case "proclaimed":
            case "proclaim_refused": {
                const proclaiming = this.#proclaims.shift();
                if (proclaiming === undefined)
                    return;
                if (event.kind === "proclaimed") {
                    proclaiming.claim.value = proclaiming.value;
                    proclaiming.resolve();
                    return;
                }
                // Refused 0x20: the claim ended first (its REVOKED came before).
                const claim = proclaiming.claim;
                proclaiming.reject(claim.loss() ??
                    new MonolockError("server_error", `the server refused the value of lock ${JSON.stringify(claim.name)}: ` +
                        describeCode(event.code, event.reason)));
                return;
            }
            case "observing":
                if (event.unobserve)
                    this.#sendUnobserve(event.watch);
                return;
            case "state":
                this.#watchOwners.get(event.watch)?.state(event.state);
                return;
            case "unobserved":
                this.#maybeIdle();
                return;
            case "watch_refused": {
                const owner = this.#watchOwners.get(event.watch);
                this.#watchOwners.delete(event.watch);
                if (event.code === TOO_MANY_WATCHES)
                    this.#watchesFull = true;
                this.#maybeIdle();
                owner?.refused(event.code, event.reason);
                return;
            }
            case "lock_state":
            case "lookup_refused": {
                const lookup = this.#lookups.shift();
                this.#maybeIdle();
                if (lookup === undefined)
                    return;
                if (event.kind === "lock_state")
                    lookup.resolve(event.state);
                else {
                    lookup.reject(LockLostError.observationEnded(LockLostError.server(lookup.name, event.code, event.reason), lookup.name, "holder lookup"));
                }
                return;
            }
            case "nothing":
                return;
            case "held":
            case "queued": {
                if (event.release) {
                    this.#sendRelease(event.claim);
                    return;
                }
                const claim = this.#owners.get(event.claim);
                if (event.kind === "held")
                    claim?.settle("held", { token: event.token });
                else
                    claim?.settle("waiting");
                return;
            }
            case "busy":
                this.#forget(event.claim)?.settle("busy");
                return;
            case "refused": {
                const claim = this.#forget(event.claim);
                if (event.code === TOO_MANY_CLAIMS) {
                    this.#full = true;
                    claim?.settle("retry");
                }
                else {
                    claim?.settle("lost", { loss: LockLostError.server(claim.name, event.code, event.reason) });
                }
                return;
            }
            case "released":
                this.#forget(event.claim)?.finishRelease(true);
                return;
            case "revoked": {
                const claim = this.#forget(event.claim);
                // A revoked claim is gone: a release waiting for it is answered.
                claim?.settle("lost", {
                    loss: LockLostError.server(claim.name, event.code, event.reason, true),
                });
                return;
            }
            case "ended": {
                const { code, reason } = event;
                if (!this.#exchange.opened && code === UNSUPPORTED_VERSION) {
                    this.#failOpen(new SpeaksOnlyV1(this.address));
                }
                this.#end((name) => LockLostError.server(name, code, reason));
                return;
            }
        }
    }
    /** OPENED (and FEATURES, when asked) read: claims may ride on it. */
    #becomeUsable() {
        this.#usable = true;
        // Nothing rides on it yet (its caller gave up meanwhile): idle from now on.
        if (this.#owners.size === 0 && this.#watchOwners.size === 0 && this.#lookups.length === 0) {
            this.#socket.unref();
        }
        this.#settleReady?.(null);
        this.#settleReady = null;
    }
    /** The id is free: its owner hears no more of this session. */
    #forget(id) {
        const claim = this.#owners.get(id);
        this.#owners.delete(id);
        this.#releasing.delete(id);
        this.#full = false;
        this.#maybeIdle();
        return claim;
    }
    #closed(cause, eof) {
        if (this.#ended !== null)
            return;
        if (!this.#exchange.opened) {
            this.#failOpen(wrongPeer(this.address, this.#tls, cause === undefined ? { eof } : { cause, eof }));
        }
        this.#end((name) => LockLostError.connection(name, cause));
    }
    /** The wait for OPENED failed: with `error` when it says more than the loss. */
    #failOpen(error) {
        if (error !== null) {
            this.#settleReady?.(error);
            this.#settleReady = null;
        }
    }
    /** Ends the session and every claim, each with its own loss. */
    #end(ending) {
        if (this.#ended !== null)
            return;
        this.#ended = ending;
        this.#alarm.cancel();
        this.#socket.destroy();
        if (this.#settleReady !== null) {
            this.#settleReady(new EndedBeforeOpen(ending));
            this.#settleReady = null;
        }
        const owners = [...this.#owners.values()];
        this.#owners.clear();
        this.#releasing.clear();
        for (const claim of owners) {
            claim.finishRelease(false);
            const loss = ending(claim.name);
            // Closed as idle before its ACQUIRE was answered: ask again elsewhere.
            if (claim.status() === "unanswered" && loss.code === IDLE_CLOSED)
                claim.settle("retry");
            else
                claim.settle("lost", { loss });
        }
        for (const { claim, reject } of this.#proclaims.splice(0))
            reject(claim.loss() ?? ending(claim.name));
        for (const { name, reject } of this.#lookups.splice(0)) {
            reject(LockLostError.observationEnded(ending(name), name, "holder lookup"));
        }
        // After the claims, in ascending watch id.
        const watches = [...this.#watchOwners.entries()].sort(([a], [b]) => a - b);
        this.#watchOwners.clear();
        for (const [, owner] of watches)
            owner.lost(ending(owner.name));
        this.#onEnd(this);
    }
    #reschedule() {
        if (this.#ended !== null)
            return;
        let wake = this.#exchange.deadline();
        const ping = this.#exchange.nextPing();
        if (ping !== null && ping < wake)
            wake = ping;
        if (!this.#usable) {
            const answerBy = this.#openedAt + BigInt(this.#ioTimeout) * MS;
            if (answerBy < wake)
                wake = answerBy;
        }
        for (const { until } of this.#releasing.values())
            if (until < wake)
                wake = until;
        if (this.#idleSince !== null) {
            const idleEnd = this.#idleSince + BigInt(KEEP_IDLE_MS) * MS;
            if (idleEnd < wake)
                wake = idleEnd;
        }
        this.#alarm.set(wake, () => this.#onAlarm());
    }
    #onAlarm() {
        if (this.#ended !== null)
            return;
        const at = now();
        if (!this.#usable && at >= this.#openedAt + BigInt(this.#ioTimeout) * MS) {
            const where = this.address.toString();
            this.#failOpen(new ConnectError([{ address: where, error: new Error(`${where} did not answer within ${describeMs(this.#ioTimeout)}`) }], "timeout"));
            this.#end((name) => LockLostError.connection(name, new Error(`${where} did not answer`)));
            return;
        }
        for (const { until } of this.#releasing.values()) {
            if (at >= until) {
                const ms = this.#ioTimeout;
                this.#end((name) => LockLostError.connection(name, new Error(`a release was not confirmed within ${describeMs(ms)}`)));
                return;
            }
        }
        this.check(at);
        if (this.#ended !== null)
            return;
        if (this.#idleSince !== null && at >= this.#idleSince + BigInt(KEEP_IDLE_MS) * MS) {
            this.close();
            return;
        }
        const ping = this.#exchange.nextPing();
        if (ping !== null && ping <= at) {
            this.#write(frames.PING);
            this.#exchange.pingSent(at);
        }
        this.#reschedule();
    }
}
//# sourceMappingURL=session.js.map