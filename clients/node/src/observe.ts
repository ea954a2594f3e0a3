/**
 * Observing a lock: the states a watch is pushed, as an async iterator.
 *
 * @module
 */

import { LockLostError, TOO_MANY_WATCHES } from "./errors.js";
import type { ReleaseReason, StateEvent, WireState } from "./v2/frames.js";
import type { V2Session, WatchOwner } from "./v2/session.js";

export type { ReleaseReason, StateEvent } from "./v2/frames.js";

/**
 * A lock's state, as an observation or a holder lookup reports it.
 *
 * Advisory: the holder it names may already have lost the lock (a silent
 * holder past its own deadline stays named until the server's lease runs
 * out), and any state is old by the time it is read. Use `value` to find
 * the holder (to forward a request, to page it), never as a permission:
 * writes stay fenced by the holder's token.
 */
export interface LockState {
  /** Whether someone holds the lock: true after `held`, `granted` and
   * `value`; false after `free` and `released`. */
  readonly held: boolean;
  /**
   * The holder's fencing token (`held`, `granted`, `value`), the token
   * whose claim ended (`released`), or for `free` the last holder's when
   * the server still knows it, else `0n`.
   */
  readonly token: bigint;
  /** The holder's value; `""` when the lock is not held or has none. */
  readonly value: string;
  /** When the lock was granted (held) or became free, by the server's
   * clock; null when the server does not know. For display only. */
  readonly since: Date | null;
  /**
   * What the server pushed: a state (`free`, `held`: the first push of an
   * observation, a coalesced push, a lookup) or a change (`granted`,
   * `value`: the holder replaced its value, `released`).
   */
  readonly event: StateEvent;
  /** The first state of an observation: the lock when the watch began. */
  readonly initial: boolean;
  /** Changes were dropped (a slow reader): this is the state now. */
  readonly coalesced: boolean;
  /** For `released`, how the claim ended: `released` (by its holder),
   * `expired`, `forced` or `ended_by_server`; null otherwise. */
  readonly reason: ReleaseReason | null;
}

/** @internal The public state of a wire state. */
export function lockState(wire: WireState): LockState {
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

/** @internal Where a watch can ride: a session with room for one more,
 * found (or opened) by the client's pool. */
export type WatchRoute = (abort: AbortSignal) => Promise<V2Session>;

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
export class Observation implements AsyncIterableIterator<LockState>, AsyncDisposable, WatchOwner {
  /** The observed lock's name. */
  readonly name: string;
  readonly #rawName: Buffer;
  readonly #route: WatchRoute;
  readonly #signal: AbortSignal | undefined;
  /** Aborted when the observation stops: gives up a route in progress. */
  readonly #stopping = new AbortController();
  readonly #unread: LockState[] = [];
  readonly #readers: {
    resolve: (result: IteratorResult<LockState>) => void;
    reject: (error: unknown) => void;
  }[] = [];
  #started = false;
  /** Set once: `done` when stopped cleanly, else the error it ended with. */
  #end: { error: unknown } | "done" | null = null;
  #errorTaken = false;
  #session: V2Session | null = null;
  #watch = 0;
  readonly #onAbort = (): void => {
    this.#stop();
  };

  /** @internal */
  constructor(name: string, rawName: Buffer, route: WatchRoute, signal?: AbortSignal) {
    this.name = name;
    this.#rawName = rawName;
    this.#route = route;
    this.#signal = signal;
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  /** The next state; done once stopped; rejects with the error that ended
   * the observation (once, then done). */
  next(): Promise<IteratorResult<LockState>> {
    this.#start();
    const state = this.#unread.shift();
    if (state !== undefined) return Promise.resolve({ value: state, done: false });
    const ended = this.#ended();
    if (ended !== null) return ended;
    return new Promise((resolve, reject) => this.#readers.push({ resolve, reject }));
  }

  /** Stops the observation (UNOBSERVE); unread states are dropped. */
  return(): Promise<IteratorResult<LockState>> {
    this.#stop();
    this.#unread.length = 0;
    return Promise.resolve({ value: undefined, done: true });
  }

  /** Stops the observation, as `return()`. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.return();
  }

  /** @internal */
  state(wire: WireState): void {
    if (this.#end !== null) return;
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
  refused(code: number, reason: string): void {
    this.#session = null;
    if (this.#end !== null) return;
    if (code === TOO_MANY_WATCHES) {
      // That session is full: ask again, on another.
      this.#register();
      return;
    }
    this.#fail(LockLostError.observationEnded(LockLostError.server(this.name, code, reason), this.name));
  }

  /** @internal */
  lost(loss: LockLostError): void {
    this.#session = null;
    this.#fail(LockLostError.observationEnded(loss, this.name));
  }

  #start(): void {
    if (this.#started) return;
    this.#started = true;
    if (this.#signal?.aborted) {
      this.#stop();
      return;
    }
    this.#signal?.addEventListener("abort", this.#onAbort, { once: true });
    this.#register();
  }

  #register(): void {
    this.#route(this.#stopping.signal).then(
      (session) => {
        if (this.#end !== null) return;
        this.#session = session;
        this.#watch = session.observe(this, this.#rawName);
      },
      (err: unknown) => {
        if (this.#end === null) this.#fail(err);
      },
    );
  }

  #stop(): void {
    if (this.#end !== null) return;
    this.#finish("done");
    this.#stopping.abort();
    this.#session?.unobserve(this.#watch);
    this.#session = null;
  }

  #fail(error: unknown): void {
    if (this.#end !== null) return;
    this.#finish({ error });
  }

  #finish(end: { error: unknown } | "done"): void {
    this.#end = end;
    this.#signal?.removeEventListener("abort", this.#onAbort);
    for (const reader of this.#readers.splice(0)) {
      const ended = this.#ended();
      if (ended !== null) ended.then(reader.resolve, reader.reject);
    }
  }

  /** What a read after the end gets: the error once, then done. */
  #ended(): Promise<IteratorResult<LockState>> | null {
    const end = this.#end;
    if (end === null) return null;
    if (end !== "done" && !this.#errorTaken) {
      this.#errorTaken = true;
      return Promise.reject(end.error);
    }
    return Promise.resolve({ value: undefined, done: true });
  }
}
