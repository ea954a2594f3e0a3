/**
 * Leader election on one lock, in the shape of client-go's
 * `leaderelection` and Curator's `LeaderLatch`: campaign, lead while the
 * lock is held, learn who leads.
 *
 * @module
 */
import { InvalidArgumentError, MonolockError, UnsupportedError } from "./errors.js";
import { encodeName, leaseMs } from "./v1/frames.js";
import { encodeValue } from "./v2/frames.js";
/** How long an elector waits before it campaigns or observes again after
 * a temporary failure (a refused connection, a lost session), in
 * milliseconds. */
export const DEFAULT_RETRY = 1_000;
/**
 * Campaigns for the lock `name` and tells who leads.
 *
 * ```ts
 * const elector = new LeaderElector(client, "scheduler", {
 *   lease: 5_000,
 *   value: "10.0.0.7:9000",
 *   onStartedLeading: (token, signal) => schedule({ fence: token, signal }),
 *   onStoppedLeading: () => console.log("no longer leading"),
 *   onNewLeader: (leader) => console.log("leader is", leader.value),
 * });
 * await elector.run(AbortSignal.timeout(60_000)); // until stopped
 * ```
 *
 * `run()` observes the lock (to report every new leader) and, once the
 * observation has the lock's first state, waits for the lock in its FIFO
 * queue (with this candidate's value), leads while it holds it, and after
 * losing it campaigns again, until `stop()` or the signal given to
 * `run()`. Stopping, if this candidate leads,
 * aborts the leading signal and calls `onStoppedLeading` first, then
 * releases the lock (so the work stops before the next leader can be
 * granted); it ends the observation, and `stop()` resolves once all that
 * is done.
 *
 * Temporary failures (a server down, a lost session) are retried;
 * `run()` rejects on the others: an `UnsupportedError` against a server
 * without lock values and observers, an ACL refusal, a callback's error.
 */
export class LeaderElector {
    /** The lock campaigned for. */
    name;
    #client;
    #lease;
    #value;
    #retry;
    #callbacks;
    #stop = null;
    #running = null;
    #failure = null;
    #lock = null;
    #leader = null;
    /**
     * @throws InvalidArgumentError on a bad name, lease, value or retry;
     * `UnsupportedError` when the client is forced to protocol v1 (which
     * has no observers).
     */
    constructor(client, name, options = {}) {
        if (client.protocol === 1)
            throw new UnsupportedError(null);
        this.#client = client;
        encodeName(name);
        this.name = name;
        this.#lease = options.lease === undefined ? undefined : leaseMs(options.lease);
        this.#value = options.value ?? "";
        encodeValue(this.#value);
        const retry = options.retry ?? DEFAULT_RETRY;
        if (typeof retry !== "number" || !(retry >= 0) || retry > 0x7fff_ffff) {
            throw new InvalidArgumentError(`retry must be a number of milliseconds >= 0, not ${String(retry)}`);
        }
        this.#retry = retry;
        this.#callbacks = {
            ...(options.onStartedLeading === undefined ? {} : { onStartedLeading: options.onStartedLeading }),
            ...(options.onStoppedLeading === undefined ? {} : { onStoppedLeading: options.onStoppedLeading }),
            ...(options.onNewLeader === undefined ? {} : { onNewLeader: options.onNewLeader }),
        };
    }
    /** Whether this candidate leads now (its lock held, checked against the clock). */
    get isLeader() {
        return this.#lock?.isHeld() ?? false;
    }
    /** The lock while this candidate leads, else null. */
    get lock() {
        return this.#lock;
    }
    /** The latest observed holder (advisory), or null when none is known. */
    get leader() {
        return this.#leader;
    }
    /**
     * Replaces this candidate's value: at once when it leads (resolves once
     * the server has it), and for every later campaign.
     *
     * @throws InvalidArgumentError on a value too long; what `Lock.setValue`
     * throws while leading.
     */
    async setValue(value) {
        encodeValue(value);
        this.#value = value;
        const lock = this.#lock;
        if (lock !== null && lock.isHeld())
            await lock.setValue(value);
    }
    /**
     * Campaigns and leads until `stop()` or `signal`; resolves once stopped
     * (the lock released, the observation ended).
     *
     * @throws what ended the election other than a stop (see the class).
     */
    run(signal) {
        if (this.#running !== null) {
            return Promise.reject(new InvalidArgumentError(`the election of ${JSON.stringify(this.name)} is running already`));
        }
        const stop = new AbortController();
        this.#stop = stop;
        this.#failure = null;
        const onAbort = () => stop.abort();
        if (signal?.aborted)
            stop.abort();
        signal?.addEventListener("abort", onAbort, { once: true });
        this.#running = (async () => {
            try {
                // The campaign starts once the observation has its first state (or
                // failed for a passing reason, or ended): a server without
                // observers never sees this candidate lead.
                let observing = () => { };
                const observed = new Promise((resolve) => {
                    observing = resolve;
                });
                const watch = this.#observe(stop.signal, observing).finally(observing);
                await Promise.all([observed.then(() => this.#campaign(stop.signal)), watch]);
            }
            finally {
                signal?.removeEventListener("abort", onAbort);
                this.#running = null;
                this.#stop = null;
            }
            if (this.#failure !== null)
                throw this.#failure.error;
        })();
        return this.#running;
    }
    /** Stops the election: if this candidate leads, `onStoppedLeading`
     * and then the release of the lock; ends the observation; resolves once
     * done. */
    async stop() {
        const running = this.#running;
        this.#stop?.abort();
        if (running !== null)
            await running.catch(() => { });
    }
    /** Campaign, lead, campaign again: until stopped. */
    async #campaign(stop) {
        while (!stop.aborted) {
            let lock;
            try {
                lock = await this.#client.lock(this.name, {
                    ...(this.#lease === undefined ? {} : { lease: this.#lease }),
                    value: this.#value,
                    signal: stop,
                });
            }
            catch (err) {
                if (stop.aborted)
                    return;
                if (!temporary(err))
                    return this.#fail(err, stop);
                await pause(this.#retry, stop);
                continue;
            }
            if (stop.aborted) {
                await lock.release().catch(() => { });
                return;
            }
            await this.#lead(lock, stop);
        }
    }
    /** Leads while `lock` is held, until it is lost or the election stops. */
    async #lead(lock, stop) {
        this.#lock = lock;
        const leading = new AbortController();
        const ended = new Promise((resolve) => {
            const end = () => {
                lock.signal.removeEventListener("abort", end);
                stop.removeEventListener("abort", end);
                resolve();
            };
            if (lock.signal.aborted || stop.aborted)
                return resolve();
            lock.signal.addEventListener("abort", end, { once: true });
            stop.addEventListener("abort", end, { once: true });
        });
        this.#call(() => this.#callbacks.onStartedLeading?.(lock.token, leading.signal), stop);
        await ended;
        // The work stops before the lock is handed on: a stopping leader is
        // told before the next one can be granted.
        const lost = lock.signal.aborted;
        const why = lost
            ? lock.signal.reason
            : new MonolockError("stopped", `the election of ${JSON.stringify(this.name)} was stopped`);
        leading.abort(why);
        this.#lock = null;
        this.#call(() => this.#callbacks.onStoppedLeading?.(), stop);
        if (!lost)
            await lock.release().catch(() => { });
    }
    /** Observes the lock for `onNewLeader`: until stopped. Calls
     * `observing` at the first state, or once the first attempt failed
     * for a passing reason (the campaign need not wait for it). */
    async #observe(stop, observing) {
        let lastToken = null;
        while (!stop.aborted) {
            try {
                const states = this.#client.observe(this.name, {
                    signal: stop,
                    ...(this.#lease === undefined ? {} : { lease: this.#lease }),
                });
                for await (const state of states) {
                    observing();
                    if (!state.held)
                        continue;
                    this.#leader = state;
                    if (state.token !== lastToken) {
                        lastToken = state.token;
                        this.#call(() => this.#callbacks.onNewLeader?.(state), stop);
                    }
                }
            }
            catch (err) {
                if (stop.aborted)
                    return;
                if (!temporary(err))
                    return this.#fail(err, stop);
                observing();
                await pause(this.#retry, stop);
            }
        }
    }
    /** Runs a callback; its error (thrown or rejected) stops the election. */
    #call(callback, stop) {
        try {
            const result = callback();
            if (result instanceof Promise)
                result.catch((err) => this.#fail(err, stop));
        }
        catch (err) {
            this.#fail(err, stop);
        }
    }
    #fail(error, stop) {
        this.#failure ??= { error };
        if (!stop.aborted)
            this.#stop?.abort();
    }
}
function temporary(err) {
    return err instanceof MonolockError && err.isTemporary;
}
/** Resolves after `ms`, or at once when `stop` fires. */
function pause(ms, stop) {
    return new Promise((resolve) => {
        const done = () => {
            clearTimeout(timer);
            stop.removeEventListener("abort", done);
            resolve();
        };
        const timer = setTimeout(done, ms);
        stop.addEventListener("abort", done, { once: true });
    });
}
//# sourceMappingURL=elector.js.map