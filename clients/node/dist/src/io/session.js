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
import { UnsupportedError } from "../errors.js";
import { Alarm, now } from "./clock.js";
import { Watched } from "./watch.js";
/** A running claim on its connection. */
export class Session extends Watched {
    claim;
    address;
    protocol = 1;
    #socket;
    #ioTimeout;
    #alarm = new Alarm();
    #lost = new AbortController();
    #closed;
    /** Whether the server closed its side (EOF) before the socket closed. */
    #serverEnded = false;
    #released = false;
    #release = null;
    /** Protocol v1 has no values: what `setValue` throws. */
    noValues = new UnsupportedError(null);
    /** Protocol v1 has no values. */
    value = "";
    /** Takes over `socket` and sends the claim's ACQUIRE at once. */
    constructor(socket, address, claim, ioTimeout) {
        super();
        this.claim = claim;
        this.address = address;
        this.#socket = socket;
        this.#ioTimeout = ioTimeout;
        this.#closed = new Promise((resolve) => socket.once("close", () => resolve()));
        socket.on("data", (data) => this.#apply(() => claim.receive(data, now())));
        socket.on("end", () => {
            this.#serverEnded = true;
            this.#apply(() => claim.closed());
        });
        socket.on("error", (err) => this.#apply(() => claim.closed(err)));
        socket.on("close", () => this.#apply(() => claim.closed()));
        socket.write(claim.opening());
        this.#reschedule();
    }
    get name() {
        return this.claim.name;
    }
    get leaseMs() {
        return this.claim.leaseMs;
    }
    deadline() {
        return this.claim.deadline();
    }
    /** Aborted with the `LockLostError` the moment the claim is lost. */
    get signal() {
        return this.#lost.signal;
    }
    /** Whether `release()` was called. */
    get released() {
        return this.#released;
    }
    /** The status after checking the deadline against the clock now. */
    status() {
        const claim = this.claim;
        if (!this.#released && claim.status !== "lost") {
            claim.check(now());
            if (claim.status === "lost")
                this.#after(false);
        }
        return claim.status;
    }
    /** Why the claim ended (checked against the clock now), or null. */
    loss() {
        this.status();
        return this.claim.loss;
    }
    /**
     * Ends the connection: FIN at once, then reads until the server's EOF,
     * which it sends once its lock table has released the claim. Bounded by
     * the I/O timeout; past it the socket is closed and the release is
     * unconfirmed. Returns the loss that had ended the claim before, if one
     * had. Idempotent.
     */
    release() {
        this.#release ??= this.#doRelease();
        return this.#release;
    }
    async #doRelease() {
        const loss = this.loss();
        this.#released = true;
        this.#alarm.cancel();
        const socket = this.#socket;
        let confirmed = loss === null || this.#serverEnded;
        if (!socket.destroyed) {
            socket.end();
            // Keep reading (and dropping) until the server's EOF.
            socket.resume();
            let timer;
            const late = new Promise((resolve) => {
                timer = setTimeout(() => {
                    confirmed = false;
                    socket.destroy();
                    resolve();
                }, this.#ioTimeout);
                timer.unref();
            });
            await Promise.race([this.#closed, late]);
            clearTimeout(timer);
            if (!this.#serverEnded)
                confirmed = false;
        }
        this.notify();
        await this.#closed;
        return { loss, confirmed };
    }
    /** Protocol v1 has no values. */
    setValue() {
        return Promise.reject(this.noValues);
    }
    /** Closes the connection at once, without waiting for the server. */
    destroy() {
        this.#released = true;
        this.#alarm.cancel();
        this.#socket.destroy();
        this.notify();
    }
    /** Runs a change to the claim, then acts on what it did. */
    #apply(change) {
        if (this.#released)
            return;
        const wasLost = this.claim.status === "lost";
        change();
        this.#after(wasLost);
    }
    /** After the claim changed: close on loss, else look again later; wake watchers. */
    #after(wasLost) {
        if (this.claim.status === "lost") {
            if (!wasLost) {
                this.#alarm.cancel();
                this.#lost.abort(this.claim.loss);
                this.#socket.destroy();
            }
        }
        else {
            this.#reschedule();
        }
        this.notify();
    }
    #reschedule() {
        const wake = this.claim.nextWake();
        if (wake === null)
            this.#alarm.cancel();
        else
            this.#alarm.set(wake, () => this.#onAlarm());
    }
    #onAlarm() {
        this.#apply(() => {
            const at = now();
            const heartbeat = this.claim.heartbeatDue(at);
            if (heartbeat !== null) {
                // The socket buffers: a write never blocks, and a failed one
                // surfaces as an `error` event.
                this.#socket.write(heartbeat);
                this.claim.heartbeatSent(at);
            }
        });
    }
}
//# sourceMappingURL=session.js.map