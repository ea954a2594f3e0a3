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

import { type ConnectError, MonolockError, UnsupportedError } from "./errors.js";
import { now } from "./io/clock.js";
import { connect, type Endpoints } from "./io/connect.js";
import { MS, type Nanos } from "./schedule.js";
import { LacksExtension, SpeaksOnlyV1, V2Session } from "./v2/session.js";

/** How long an address that answered OPEN with ERROR 0x10 is spoken to in v1. */
export const REMEMBER_V1_MS = 5 * 60_000;

/** How long an address that answered HELLO with ERROR 0x13 gets plain sessions. */
export const REMEMBER_PLAIN_MS = 5 * 60_000;

/** Where a claim goes: a session that is open, or protocol v1. */
export type Route = V2Session | "v1";

/** What a request needs of its session. */
export interface Needs {
  /** Values, watches or lookups: a session that asked for them and got them. */
  readonly extension?: boolean;
  /** Room for one more watch (else room for one more claim). */
  readonly watch?: boolean;
}

export class Pool {
  readonly #endpoints: Endpoints;
  readonly #ioTimeout: number;
  /** Sessions per lease, oldest first. */
  readonly #sessions = new Map<number, V2Session[]>();
  /** A dial in progress per lease: concurrent claims wait for it. */
  readonly #dialing = new Map<number, Promise<Route | "again">>();
  /** Addresses that speak only v1, until the instant given. */
  readonly #v1Until = new Map<string, Nanos>();
  /** Addresses that lack values and observers, until the instant given. */
  readonly #plainUntil = new Map<string, Nanos>();

  constructor(endpoints: Endpoints, ioTimeout: number) {
    this.#endpoints = endpoints;
    this.#ioTimeout = ioTimeout;
  }

  /** The sessions open now (for tests and figures). */
  get size(): number {
    let count = 0;
    for (const list of this.#sessions.values()) count += list.length;
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
  async route(leaseMs: number, abort?: AbortSignal, needs: Needs = {}): Promise<Route> {
    const room = (s: V2Session): boolean => (needs.watch === true ? s.hasWatchRoom : s.hasRoom);
    const usable = (s: V2Session): boolean => s.extension || needs.extension !== true;
    for (;;) {
      abort?.throwIfAborted();
      const list = this.#sessions.get(leaseMs) ?? [];
      const open = list.find((s) => s.opened && usable(s) && room(s));
      if (open !== undefined) return open;
      const opening = list.find((s) => !s.opened && room(s));
      if (opening !== undefined) {
        await abortable(opening.ready(), abort).catch((err: unknown) => {
          // The pool's own dial hears of a plain server and dials again.
          if (!(err instanceof LacksExtension)) throw err;
        });
        continue;
      }
      if (needs.extension === true && this.#remembers(this.#plainUntil)) {
        // Every address is known to lack it: no need to dial.
        throw new UnsupportedError(this.#endpoints.addresses[0]?.toString() ?? null);
      }
      if (this.#remembers(this.#v1Until)) {
        if (needs.extension === true) throw new UnsupportedError(this.#endpoints.addresses[0]?.toString() ?? null);
        return "v1";
      }
      let dial = this.#dialing.get(leaseMs);
      if (dial === undefined) {
        dial = this.#dial(leaseMs).finally(() => this.#dialing.delete(leaseMs));
        this.#dialing.set(leaseMs, dial);
      }
      const route = await abortable(dial, abort);
      if (route === "v1") {
        if (needs.extension === true) throw new UnsupportedError(this.#endpoints.addresses[0]?.toString() ?? null);
        return route;
      }
      // A plain session: its address lacks the extension.
      if (route !== "again" && !usable(route)) throw new UnsupportedError(route.address.toString());
      if (route !== "again" && needs.watch === true && route.maxWatches === 0) {
        // No session of that server can take a watch: dialing again would not end.
        throw new MonolockError("server_error", `${route.address} allows no watches on a session (max_watches 0)`);
      }
    }
  }

  /** Addresses that failed to connect are asked for v2 afresh next time. */
  connectFailed(error: unknown): void {
    for (const attempt of (error as Partial<ConnectError>).attempts ?? []) {
      this.#v1Until.delete(attempt.address);
      this.#plainUntil.delete(attempt.address);
    }
  }

  /** Closes every session (their claims are lost). */
  close(): void {
    for (const list of this.#sessions.values()) for (const session of [...list]) session.close();
  }

  /** Whether every address is in `memory` (known to speak only v1, or
   * to lack the extension) until later than now. */
  #remembers(memory: ReadonlyMap<string, Nanos>): boolean {
    const at = now();
    return this.#endpoints.addresses.every((address) => {
      const until = memory.get(address.toString());
      return until !== undefined && at < until;
    });
  }

  /** A new session, ready; "v1" when the server speaks only v1; "again"
   * when it lacks the extension (now remembered: dial again for a plain
   * session). */
  async #dial(leaseMs: number): Promise<Route | "again"> {
    let connected;
    try {
      connected = await connect(this.#endpoints);
    } catch (err) {
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
    } catch (err) {
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
    if (hello && !session.extension) this.#plainUntil.set(address.toString(), now() + BigInt(REMEMBER_PLAIN_MS) * MS);
    return session;
  }

  #forget(leaseMs: number, session: V2Session): void {
    const list = this.#sessions.get(leaseMs);
    if (list === undefined) return;
    const at = list.indexOf(session);
    if (at >= 0) list.splice(at, 1);
    if (list.length === 0) this.#sessions.delete(leaseMs);
  }
}

/** `promise`, or `abort.reason` once `abort` fires first. */
export function abortable<T>(promise: Promise<T>, abort?: AbortSignal): Promise<T> {
  if (abort === undefined) return promise;
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(abort.reason);
    if (abort.aborted) return onAbort();
    abort.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (value) => {
        abort.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (err: unknown) => {
        abort.removeEventListener("abort", onAbort);
        reject(err);
      },
    );
  });
}
