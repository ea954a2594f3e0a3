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
import { MonolockError, UnsupportedError } from "./errors.js";
import { now } from "./io/clock.js";
import { connect } from "./io/connect.js";
import { MS } from "./schedule.js";
import { LacksExtension, SpeaksOnlyV1, V2Session } from "./v2/session.js";
/** How long an address that answered OPEN with ERROR 0x10 is spoken to in v1. */
export const REMEMBER_V1_MS = 5 * 60_000;
/** How long an address that answered HELLO with ERROR 0x13 gets plain sessions. */
export const REMEMBER_PLAIN_MS = 5 * 60_000;
export class Pool {
    #endpoints;
    #ioTimeout;
    /** Sessions per lease, oldest first. */
    #sessions = new Map();
    /** A dial in progress per lease: concurrent claims wait for it. */
    #dialing = new Map();
    /** Addresses that speak only v1, until the instant given. */
    #v1Until = new Map();
    /** Addresses that lack values and observers, until the instant given. */
    #plainUntil = new Map();
    constructor(endpoints, ioTimeout) {
        this.#endpoints = endpoints;
        this.#ioTimeout = ioTimeout;
    }
    /** The sessions open now (for tests and figures). */
    get size() {
        let count = 0;
        for (const list of this.#sessions.values())
            count += list.length;
        return count;
    }
    /**
     * An open session with room for one more claim (or watch) of `leaseMs`,
     * or "v1" when the server speaks only v1.
     *
     * @throws ConnectError when no address could be reached or what answered
     * is not a monolock server; `abort.reason` on abort; `EndedBeforeOpen`;
     * `UnsupportedError` when `needs.extension` and the server lacks values
     * and observers.
     */
    async route(leaseMs, abort, needs = {}) {
        const room = (s) => (needs.watch === true ? s.hasWatchRoom : s.hasRoom);
        const usable = (s) => s.extension || needs.extension !== true;
        for (;;) {
            abort?.throwIfAborted();
            const list = this.#sessions.get(leaseMs) ?? [];
            const open = list.find((s) => s.opened && usable(s) && room(s));
            if (open !== undefined)
                return open;
            const opening = list.find((s) => !s.opened && room(s));
            if (opening !== undefined) {
                await abortable(opening.ready(), abort).catch((err) => {
                    // The pool's own dial hears of a plain server and dials again.
                    if (!(err instanceof LacksExtension))
                        throw err;
                });
                continue;
            }
            if (needs.extension === true && this.#remembers(this.#plainUntil)) {
                // Every address is known to lack it: no need to dial.
                throw new UnsupportedError(this.#endpoints.addresses[0]?.toString() ?? null);
            }
            if (this.#remembers(this.#v1Until)) {
                if (needs.extension === true)
                    throw new UnsupportedError(this.#endpoints.addresses[0]?.toString() ?? null);
                return "v1";
            }
            let dial = this.#dialing.get(leaseMs);
            if (dial === undefined) {
                dial = this.#dial(leaseMs).finally(() => this.#dialing.delete(leaseMs));
                this.#dialing.set(leaseMs, dial);
            }
            const route = await abortable(dial, abort);
            if (route === "v1") {
                if (needs.extension === true)
                    throw new UnsupportedError(this.#endpoints.addresses[0]?.toString() ?? null);
                return route;
            }
            // A plain session: its address lacks the extension.
            if (route !== "again" && !usable(route))
                throw new UnsupportedError(route.address.toString());
            if (route !== "again" && needs.watch === true && route.maxWatches === 0) {
                // No session of that server can take a watch: dialing again would not end.
                throw new MonolockError("server_error", `${route.address} allows no watches on a session (max_watches 0)`);
            }
        }
    }
    /** Addresses that failed to connect are asked for v2 afresh next time. */
    connectFailed(error) {
        for (const attempt of error.attempts ?? []) {
            this.#v1Until.delete(attempt.address);
            this.#plainUntil.delete(attempt.address);
        }
    }
    /** Closes every session (their claims are lost). */
    close() {
        for (const list of this.#sessions.values())
            for (const session of [...list])
                session.close();
    }
    /** Whether every address is in `memory` (known to speak only v1, or
     * to lack the extension) until later than now. */
    #remembers(memory) {
        const at = now();
        return this.#endpoints.addresses.every((address) => {
            const until = memory.get(address.toString());
            return until !== undefined && at < until;
        });
    }
    /** A new session, ready; "v1" when the server speaks only v1; "again"
     * when it lacks the extension (now remembered: dial again for a plain
     * session). */
    async #dial(leaseMs) {
        let connected;
        try {
            connected = await connect(this.#endpoints);
        }
        catch (err) {
            this.connectFailed(err);
            throw err;
        }
        const { socket, address } = connected;
        const until = this.#v1Until.get(address.toString());
        if (until !== undefined && now() < until) {
            socket.destroy();
            return "v1";
        }
        const plainUntil = this.#plainUntil.get(address.toString());
        const hello = plainUntil === undefined || now() >= plainUntil;
        const session = new V2Session(socket, address, {
            leaseMs,
            tls: this.#endpoints.tls !== null,
            ioTimeout: this.#ioTimeout,
            hello,
            onEnd: (ended) => this.#forget(leaseMs, ended),
        });
        const list = this.#sessions.get(leaseMs) ?? [];
        list.push(session);
        this.#sessions.set(leaseMs, list);
        try {
            await session.ready();
        }
        catch (err) {
            if (err instanceof SpeaksOnlyV1) {
                this.#v1Until.set(address.toString(), now() + BigInt(REMEMBER_V1_MS) * MS);
                return "v1";
            }
            if (err instanceof LacksExtension) {
                this.#plainUntil.set(address.toString(), now() + BigInt(REMEMBER_PLAIN_MS) * MS);
                return "again";
            }
            throw err;
        }
        // FEATURES without the bit: a plain session, and an address to remember.
        if (hello && !session.extension)
            this.#plainUntil.set(address.toString(), now() + BigInt(REMEMBER_PLAIN_MS) * MS);
        return session;
    }
    #forget(leaseMs, session) {
        const list = this.#sessions.get(leaseMs);
        if (list === undefined)
            return;
        const at = list.indexOf(session);
        if (at >= 0)
            list.splice(at, 1);
        if (list.length === 0)
            this.#sessions.delete(leaseMs);
    }
}
/** `promise`, or `abort.reason` once `abort` fires first. */
export function abortable(promise, abort) {
    if (abort === undefined)
        return promise;
    return new Promise((resolve, reject) => {
        const onAbort = () => reject(abort.reason);
        if (abort.aborted)
            return onAbort();
        abort.addEventListener("abort", onAbort, { once: true });
        promise.then((value) => {
            abort.removeEventListener("abort", onAbort);
            resolve(value);
        }, (err) => {
            abort.removeEventListener("abort", onAbort);
            reject(err);
        });
    });
}
//# sourceMappingURL=pool.js.map