/**
 * Protocol v2: one connection = one session carrying many claims. The
 * driver that owns the socket and feeds the exchange (`exchange.ts`)
 * frames and instants; the protocol rules are all there.
 *
 * The socket's `data` events make it the session's permanent reader
 * (GRANTED and REVOKED are pushed); one `Alarm` fires at the next PING,
 * the session deadline, the end of the wait for OPENED, or the idle close,
 * whichever is first. The end of the session ends every claim in one step:
 * each claim's AbortSignal is aborted with its own `LockLostError`.
 *
 * @module
 */
import { ConnectError, IDLE_CLOSED, LockLostError, ProtocolError, TOO_MANY_CLAIMS, UNSUPPORTED_VERSION, } from "../errors.js";
import { Alarm, now } from "../io/clock.js";
import { isTlsError } from "../io/connect.js";
import { Watched } from "../io/watch.js";
import { MS } from "../schedule.js";
import { Exchange } from "./exchange.js";
import * as frames from "./frames.js";
/** How long a session with no claims stays open (below the server's
 * `--idle-timeout` default of 60 s, so the client closes first). */
export const KEEP_IDLE_MS = 20_000;
/** The largest claim id; ids wrap around and skip those in use. */
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
    constructor(session, id, name) {
        super();
        this.session = session;
        this.id = id;
        this.name = name;
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
        socket.write(frames.open(options.leaseMs));
        this.#reschedule();
    }
    /** Resolves once OPENED is read; rejects with a `ConnectError`, a
     * `SpeaksOnlyV1`, or the loss that ended the session first. */
    ready() {
        return this.#ready;
    }
    get opened() {
        return this.#exchange.opened;
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
    /** Writes an ACQUIRE for `name` (checked bytes) and returns its claim. */
    acquire(name, rawName, mode) {
        const id = this.#freeId();
        const claim = new V2Claim(this, id, name);
        if (this.#ended !== null) {
            claim.settle("lost", { loss: this.#ended(name) });
            return claim;
        }
        this.#owners.set(id, claim);
        this.#idleSince = null;
        // A session with claims keeps the process alive; an idle one does not.
        this.#socket.ref();
        this.#write(frames.acquire(id, mode, rawName));
        this.#exchange.acquireSent(id, mode, now());
        this.#reschedule();
        return claim;
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
            if (!this.opened)
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
                // No claim yet (its caller gave up meanwhile): idle from now on.
                if (this.#owners.size === 0)
                    this.#socket.unref();
                this.#settleReady?.(null);
                this.#settleReady = null;
                return;
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
                if (!this.opened && code === UNSUPPORTED_VERSION) {
                    this.#failOpen(new SpeaksOnlyV1(this.address));
                }
                this.#end((name) => LockLostError.server(name, code, reason));
                return;
            }
        }
    }
    /** The id is free: its owner hears no more of this session. */
    #forget(id) {
        const claim = this.#owners.get(id);
        this.#owners.delete(id);
        this.#releasing.delete(id);
        this.#full = false;
        if (this.#owners.size === 0 && this.#exchange.claims === 0) {
            this.#idleSince = now();
            this.#socket.unref();
        }
        return claim;
    }
    #closed(cause, eof) {
        if (this.#ended !== null)
            return;
        if (!this.opened) {
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
        this.#onEnd(this);
    }
    #reschedule() {
        if (this.#ended !== null)
            return;
        let wake = this.#exchange.deadline();
        const ping = this.#exchange.nextPing();
        if (ping !== null && ping < wake)
            wake = ping;
        if (!this.opened) {
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
        if (!this.opened && at >= this.#openedAt + BigInt(this.#ioTimeout) * MS) {
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