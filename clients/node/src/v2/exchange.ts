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
import { type Nanos, Schedule } from "../schedule.js";
import type { Frame, Mode, WireState } from "./frames.js";

/** REFUSED 0x20: RELEASE of an id not in use. */
export const UNKNOWN_CLAIM = 0x20;
/** ERROR 0x13 (unknown message type): as the answer to HELLO, the server
 * predates the extension. */
export const UNKNOWN_TYPE = 0x13;

type Sent =
  | { readonly kind: "open"; readonly at: Nanos }
  | { readonly kind: "hello"; readonly at: Nanos }
  | { readonly kind: "acquire"; readonly claim: number; readonly at: Nanos }
  | { readonly kind: "release"; readonly claim: number; readonly at: Nanos }
  | { readonly kind: "proclaim"; readonly claim: number; readonly at: Nanos }
  | { readonly kind: "observe"; readonly watch: number; readonly at: Nanos }
  | { readonly kind: "unobserve"; readonly watch: number; readonly at: Nanos }
  | { readonly kind: "lookup"; readonly at: Nanos }
  | { readonly kind: "ping"; readonly at: Nanos };

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
type ClaimState =
  | { readonly kind: "asking"; readonly mode: Mode; release: boolean }
  | { readonly kind: "waiting" }
  | { readonly kind: "held" }
  | { readonly kind: "releasing" };

/** Where a claim id in use or asked for stands. */
export type Standing = ClaimState["kind"];

/** What a frame from the server meant. */
export type Event =
  | { readonly kind: "opened"; readonly maxClaims: number }
  /** PONG, a GRANTED that crossed a RELEASE, REFUSED 0x20 after a REVOKED. */
  | { readonly kind: "nothing" }
  /** `release`: the owner let go while it was asked; write RELEASE now. */
  | { readonly kind: "held"; readonly claim: number; readonly token: bigint; readonly release: boolean }
  | { readonly kind: "queued"; readonly claim: number; readonly release: boolean }
  | { readonly kind: "busy"; readonly claim: number }
  | { readonly kind: "refused"; readonly claim: number; readonly code: number; readonly reason: string }
  | { readonly kind: "released"; readonly claim: number }
  | { readonly kind: "revoked"; readonly claim: number; readonly code: number; readonly reason: string }
  /** ERROR: the session is over, with every claim. */
  | { readonly kind: "ended"; readonly code: number; readonly reason: string }
  /** FEATURES: the bits granted and the session's bound of watches. */
  | { readonly kind: "features"; readonly features: number; readonly maxWatches: number }
  /** OPENED, then ERROR 0x13 answering HELLO: the server lacks the
   * extension, and the session is over (no claim or watch existed yet). */
  | { readonly kind: "unsupported" }
  | { readonly kind: "proclaimed"; readonly claim: number }
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
  | { readonly kind: "observing"; readonly watch: number; readonly unobserve: boolean }
  /** A push for a watch in use (not one on its way out). */
  | { readonly kind: "state"; readonly watch: number; readonly state: WireState }
  | { readonly kind: "unobserved"; readonly watch: number }
  | { readonly kind: "watch_refused"; readonly watch: number; readonly code: number; readonly reason: string }
  | { readonly kind: "lock_state"; readonly state: WireState }
  | { readonly kind: "lookup_refused"; readonly code: number; readonly reason: string };

const NOTHING: Event = { kind: "nothing" };

/** Matching state and timing of one session. */
export class Exchange {
  readonly schedule: Schedule;
  readonly #inFlight: Sent[];
  /** Index of the oldest frame in flight in `#inFlight` (a queue without shifting). */
  #head = 0;
  readonly #claims = new Map<number, ClaimState>();
  readonly #watches = new Map<number, WatchState>();
  /** `S`. */
  #confirmedSend: Nanos;
  /** When the latest reply arrived. */
  #repliedAt: Nanos;
  #opened = false;

  /** The state right after the OPEN went out at `openSent`. */
  constructor(lease: Nanos, openSent: Nanos) {
    this.schedule = new Schedule(lease);
    this.#inFlight = [{ kind: "open", at: openSent }];
    this.#confirmedSend = openSent;
    this.#repliedAt = openSent;
  }

  /** Whether OPENED has been read. */
  get opened(): boolean {
    return this.#opened;
  }

  /** The instant at which the session is given up without a reply. */
  deadline(): Nanos {
    return this.schedule.deadline(this.#confirmedSend);
  }

  /** Frames sent and not answered yet. */
  get inFlight(): number {
    return this.#inFlight.length - this.#head;
  }

  /** When the next PING is due: null while any frame is in flight (its
   * reply will confirm the session). */
  nextPing(): Nanos | null {
    if (this.inFlight > 0) return null;
    return this.schedule.nextSend(this.#confirmedSend, this.#repliedAt);
  }

  /** Claim ids in use or asked for. */
  get claims(): number {
    return this.#claims.size;
  }

  /** Whether `claim` is asked for or in use. */
  knows(claim: number): boolean {
    return this.#claims.has(claim);
  }

  /** Where `claim` stands: asked for (ACQUIRE unanswered), waiting, held,
   * releasing (RELEASE unanswered); null when the id is free. */
  standing(claim: number): Standing | null {
    return this.#claims.get(claim)?.kind ?? null;
  }

  /** Watch ids in use or asked for. */
  get watches(): number {
    return this.#watches.size;
  }

  /** Where `watch` stands: asked for (OBSERVE unanswered), watching,
   * leaving (UNOBSERVE unanswered); null when the id is free. A watch is
   * live (its session's end ends it) while watching or leaving. */
  watchStanding(watch: number): WatchStanding | null {
    return this.#watches.get(watch)?.kind ?? null;
  }

  /** Records a HELLO written at `at` (right behind the OPEN). */
  helloSent(at: Nanos): void {
    this.#push({ kind: "hello", at });
  }

  /** Records a PROCLAIM for `claim` written at `at`. */
  proclaimSent(claim: number, at: Nanos): void {
    this.#push({ kind: "proclaim", claim, at });
  }

  /** Records an OBSERVE of `watch` written at `at`. */
  observeSent(watch: number, at: Nanos): void {
    this.#watches.set(watch, { kind: "asking", lastToken: 0n, stop: false });
    this.#push({ kind: "observe", watch, at });
  }

  /** The owner of `watch` stops it: whether to write an UNOBSERVE now (a
   * watch whose OBSERVE is unanswered is stopped once it is answered). */
  unobserve(watch: number): boolean {
    const state = this.#watches.get(watch);
    if (state?.kind === "asking") state.stop = true;
    return state?.kind === "watching";
  }

  /** Records an UNOBSERVE of `watch` written at `at`. */
  unobserveSent(watch: number, at: Nanos): void {
    const state = this.#watches.get(watch);
    if (state !== undefined) state.kind = "leaving";
    this.#push({ kind: "unobserve", watch, at });
  }

  /** Records a LOOKUP written at `at`. */
  lookupSent(at: Nanos): void {
    this.#push({ kind: "lookup", at });
  }

  /** Records an ACQUIRE of `claim` written at `at`. */
  acquireSent(claim: number, mode: Mode, at: Nanos): void {
    this.#claims.set(claim, { kind: "asking", mode, release: false });
    this.#push({ kind: "acquire", claim, at });
  }

  /** The owner of `claim` let go: whether to write a RELEASE now (else the
   * ACQUIRE's reply says, or the id is already free). */
  release(claim: number): boolean {
    const state = this.#claims.get(claim);
    if (state === undefined) return false;
    if (state.kind === "asking") {
      state.release = true;
      return false;
    }
    return state.kind === "waiting" || state.kind === "held";
  }

  /** Records a RELEASE of `claim` written at `at`. */
  releaseSent(claim: number, at: Nanos): void {
    this.#claims.set(claim, { kind: "releasing" });
    this.#push({ kind: "release", claim, at });
  }

  /** Records a PING written at `at`. */
  pingSent(at: Nanos): void {
    this.#push({ kind: "ping", at });
  }

  /**
   * Interprets one frame that arrived at `now`.
   *
   * @throws ProtocolError when the frame cannot be the next one a version
   * 2 server sends; the caller closes the session.
   */
  onFrame(frame: Frame, now: Nanos): Event {
    switch (frame.type) {
      case "error":
        if (frame.code === UNKNOWN_TYPE && this.#inFlight[this.#head]?.kind === "hello") {
          return { kind: "unsupported" };
        }
        return { kind: "ended", code: frame.code, reason: frame.reason };
      case "state": {
        const watch = this.#watches.get(frame.watch);
        if (watch === undefined || watch.kind === "asking") throw unexpected(frame);
        if (frame.state.token < watch.lastToken) {
          throw new ProtocolError(
            `STATE of watch ${frame.watch} names token ${frame.state.token} after token ${watch.lastToken}`,
          );
        }
        watch.lastToken = frame.state.token;
        if (watch.kind === "leaving") return NOTHING;
        return { kind: "state", watch: frame.watch, state: frame.state };
      }
      case "granted": {
        const state = this.#claims.get(frame.claim);
        if (state?.kind === "waiting") {
          this.#claims.set(frame.claim, { kind: "held" });
          return { kind: "held", claim: frame.claim, token: frame.token, release: false };
        }
        // Granted while its RELEASE is on the way: RELEASED follows.
        if (state?.kind === "releasing") return NOTHING;
        throw unexpected(frame);
      }
      case "revoked": {
        const state = this.#claims.get(frame.claim);
        if (state === undefined || state.kind === "asking") throw unexpected(frame);
        this.#claims.delete(frame.claim);
        return { kind: "revoked", claim: frame.claim, code: frame.code, reason: frame.reason };
      }
      default:
        return this.#onReply(frame, now);
    }
  }

  /** A reply: it answers the oldest frame in flight. */
  #onReply(frame: Frame, now: Nanos): Event {
    const sent = this.#inFlight[this.#head];
    if (sent === undefined) throw unexpected(frame);
    const event = this.#match(sent, frame);
    this.#head += 1;
    if (this.#head > 64 && this.#head * 2 > this.#inFlight.length) {
      this.#inFlight.splice(0, this.#head);
      this.#head = 0;
    }
    this.schedule.observeRtt(now > sent.at ? now - sent.at : 0n);
    if (sent.at > this.#confirmedSend) this.#confirmedSend = sent.at;
    this.#repliedAt = now;
    return event;
  }

  #match(sent: Sent, frame: Frame): Event {
    switch (sent.kind) {
      case "open":
        if (frame.type !== "opened") throw unexpected(frame, "OPEN");
        this.#opened = true;
        return { kind: "opened", maxClaims: frame.maxClaims };
      case "hello":
        if (frame.type !== "features") throw unexpected(frame, "HELLO");
        return { kind: "features", features: frame.features, maxWatches: frame.maxWatches };
      case "ping":
        if (frame.type !== "pong") throw unexpected(frame, "PING");
        return NOTHING;
      case "lookup":
        if (frame.type === "lock_state") return { kind: "lock_state", state: frame.state };
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
  #matchClaim(sent: Sent & { readonly claim: number }, frame: Frame): Event {
    const claimOf = "claim" in frame ? frame.claim : null;
    const answering = `${sent.kind.toUpperCase()} of claim ${sent.claim}`;
    if (claimOf !== sent.claim) throw unexpected(frame, answering);
    const state = this.#claims.get(sent.claim);
    if (sent.kind === "proclaim") {
      if (frame.type === "proclaimed") return { kind: "proclaimed", claim: sent.claim };
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
      if (state?.kind !== "asking") throw unexpected(frame);
      switch (frame.type) {
        case "acquired":
          this.#claims.set(sent.claim, { kind: "held" });
          return { kind: "held", claim: sent.claim, token: frame.token, release: state.release };
        case "waiting":
          if (state.mode !== "wait") throw unexpected(frame, "a try-only ACQUIRE");
          this.#claims.set(sent.claim, { kind: "waiting" });
          return { kind: "queued", claim: sent.claim, release: state.release };
        case "busy":
          if (state.mode !== "try") throw unexpected(frame, "a waiting ACQUIRE");
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
  #matchWatch(sent: Sent & { readonly watch: number }, frame: Frame): Event {
    const answering = `${sent.kind.toUpperCase()} of watch ${sent.watch}`;
    const idOf = frame.type === "refused" ? frame.claim : "watch" in frame ? frame.watch : null;
    if (idOf !== sent.watch) throw unexpected(frame, answering);
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

  #push(sent: Sent): void {
    this.#inFlight.push(sent);
  }
}

function unexpected(frame: Frame, answering?: string): ProtocolError {
  const what =
    frame.type.toUpperCase() +
    ("claim" in frame ? ` of claim ${frame.claim}` : "watch" in frame ? ` of watch ${frame.watch}` : "");
  return new ProtocolError(
    answering === undefined ? `unexpected ${what}` : `unexpected ${what} in reply to ${answering}`,
  );
}
