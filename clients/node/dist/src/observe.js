/**
 * Observing a lock: the states a watch is pushed, as an async iterator.
 *
 * @module
 */
import { LockLostError, TOO_MANY_WATCHES } from "./errors.js";
/** @internal The public state of a wire state. */
export function lockState(wire) {
    const held = wire.event === "held" || wire.event === "granted" || wire.event === "value";
    return {
        held,
        token: wire.token,
        value: held ? wire.value : "",
        since: wire.sinceMs === 0n ? null : new Date(Number(wire.sinceMs)),
        event: wire.event,
        initial: wire.initial,
        coalesced: wire.coalesced,
        reason: wire.reason,
    };
}
/**
 * States an observer keeps unread at most: past it the unread ones are
 * replaced by the latest, flagged `coalesced` (as the server does for a
 * slow connection), so a consumer that stops reading costs bounded memory.
 */
export const MAX_UNREAD_STATES = 256;
/**
 * An observation of one lock: `for await (const state of observation)`.
 *
 * The first state is the lock's state when the watch began (`initial`),
 * then one per change, in the server's order: never an older holder after
 * a newer one. Breaking out of the loop, `return()`, or aborting the
 * signal given to `client.observe()` ends it cleanly (the watch is
 * removed from the server). The end of its session ends it with a
 * `LockLostError` (`observation of lock "NAME" ended (REASON): DETAIL`).
 */
export class Observation {
    /** The observed lock's name. */
    name;
    #rawName;
    #route;
    #signal;
    /** Aborted when the observation stops: gives up a route in progress. */
    #stopping = new AbortController();
    #unread = [];
    #readers = [];
    #started = false;
    /** Set once: `done` when stopped cleanly, else the error it ended with. */
    #end = null;
    #errorTaken = false;
    #session = null;
    #watch = 0;
    #onAbort = () => {
        this.#stop();
    };
    /** @internal */
    constructor(name, rawName, route, signal) {
        this.name = name;
        this.#rawName = rawName;
        this.#route = route;
        this.#signal = signal;
    }
    [Symbol.asyncIterator]() {
        return this;
    }
    /** The next state; done once stopped; rejects with the error that ended
     * the observation (once, then done). */
    next() {
        this.#start();
        const state = this.#unread.shift();
        if (state !== undefined)
            return Promise.resolve({ value: state, done: false });
        const ended = this.#ended();
        if (ended !== null)
            return ended;
        return new Promise((resolve, reject) => this.#readers.push({ resolve, reject }));
    }
    /** Stops the observation (UNOBSERVE); unread states are dropped. */
    return() {
        this.#stop();
        this.#unread.length = 0;
        return Promise.resolve({ value: undefined, done: true });
    }
    /** Stops the observation, as `return()`. */
    async [Symbol.asyncDispose]() {
        await this.return();
    }
    /** @internal */
    state(wire) {
        if (this.#end !== null)
            return;
        const state = lockState(wire);
        const reader = this.#readers.shift();
        if (reader !== undefined) {
            reader.resolve({ value: state, done: false });
            return;
        }
        if (this.#unread.length >= MAX_UNREAD_STATES) {
            // The latest state stands for every unread one.
            this.#unread.length = 0;
            this.#unread.push({
                ...state,
                event: state.held ? "held" : "free",
                initial: false,
                coalesced: true,
                reason: null,
            });
            return;
        }
        this.#unread.push(state);
    }
    /** @internal */
    refused(code, reason) {
        this.#session = null;
        if (this.#end !== null)
            return;
        if (code === TOO_MANY_WATCHES) {
            // That session is full: ask again, on another.
            this.#register();
            return;
        }
        this.#fail(LockLostError.observationEnded(LockLostError.server(this.name, code, reason), this.name));
    }
    /** @internal */
    lost(loss) {
        this.#session = null;
        this.#fail(LockLostError.observationEnded(loss, this.name));
    }
    #start() {
        if (this.#started)
            return;
        this.#started = true;
        if (this.#signal?.aborted) {
            this.#stop();
            return;
        }
        this.#signal?.addEventListener("abort", this.#onAbort, { once: true });
        this.#register();
    }
    #register() {
        this.#route(this.#stopping.signal).then((session) => {
            if (this.#end !== null)
                return;
            this.#session = session;
            this.#watch = session.observe(this, this.#rawName);
        }, (err) => {
            if (this.#end === null)
                this.#fail(err);
        });
    }
    #stop() {
        if (this.#end !== null)
            return;
        this.#finish("done");
        this.#stopping.abort();
        this.#session?.unobserve(this.#watch);
        this.#session = null;
    }
    #fail(error) {
        if (this.#end !== null)
            return;
        this.#finish({ error });
    }
    #finish(end) {
        this.#end = end;
        this.#signal?.removeEventListener("abort", this.#onAbort);
        for (const reader of this.#readers.splice(0)) {
            const ended = this.#ended();
            if (ended !== null)
                ended.then(reader.resolve, reader.reject);
        }
    }
    /** What a read after the end gets: the error once, then done. */
    #ended() {
        const end = this.#end;
        if (end === null)
            return null;
        if (end !== "done" && !this.#errorTaken) {
            this.#errorTaken = true;
            return Promise.reject(end.error);
        }
        return Promise.resolve({ value: undefined, done: true });
    }
}
//# sourceMappingURL=observe.js.map