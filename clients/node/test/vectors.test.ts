/**
 * The shared protocol vectors (clients/conformance/vectors, format in its
 * README.md), replayed through this client's sans-I/O cores: the v1 claim
 * machine (`v1/claim.ts` over `v1/exchange.ts`) and the v2 exchange
 * (`v2/exchange.ts`), with the extension's (`v2x-…`) values, watches and
 * lookups. The replayer is the thinnest driver: it writes what
 * the driver would write (with the client's own encoders), does the
 * driver's duties (a heartbeat when due, a loss for each end, the buffer
 * that keeps a partial v2 frame) and compares every output and check with
 * the vector.
 *
 * `MONOLOCK_VECTORS` names another vectors directory (a checkout being
 * written); without it, the repository's.
 */

import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";

import { LockLostError, ProtocolError } from "../src/errors.js";
import { MS, type Nanos } from "../src/schedule.js";
import { Claim } from "../src/v1/claim.js";
import * as frames1 from "../src/v1/frames.js";
import { type Event, Exchange } from "../src/v2/exchange.js";
import * as frames2 from "../src/v2/frames.js";

/** Where a vector's instant 0 falls on the core's clock: not zero, so that
 * no rule can lean on instants being small. */
const ORIGIN: Nanos = 1_000_000n * MS;

const VECTORS =
  process.env.MONOLOCK_VECTORS ||
  path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../conformance/vectors");

interface Vector {
  readonly name: string;
  readonly protocol: number;
  readonly lease_ms: number;
  readonly steps: readonly Step[];
}

/** One step: its kind and the fields that kind uses. */
interface Step {
  readonly step: string;
  readonly [field: string]: unknown;
}

/** An output step, or one the core produced: compared field by field. */
type Output = Record<string, unknown>;

function vectorFiles(): string[] {
  if (!existsSync(VECTORS)) return [];
  return readdirSync(VECTORS)
    .filter((file) => file.endsWith(".json"))
    .sort();
}

describe("shared protocol vectors", () => {
  const files = vectorFiles();
  it("are found", () => {
    assert.ok(
      files.length > 0,
      `no protocol vectors (*.json) in ${VECTORS}: they are part of the repository (MONOLOCK_VECTORS names another directory)`,
    );
  });
  for (const file of files) {
    it(file.replace(/\.json$/, ""), () => {
      const vector = JSON.parse(readFileSync(path.join(VECTORS, file), "utf8")) as Vector;
      assert.equal(vector.name, file.replace(/\.json$/, ""), `the vector in ${file} is named so`);
      replay(vector);
    });
  }
});

function replay(vector: Vector): void {
  assert.ok(vector.protocol === 1 || vector.protocol === 2, `protocol ${vector.protocol}: 1 or 2`);
  assert.ok(Number.isInteger(vector.lease_ms) && vector.lease_ms > 0, "lease_ms");
  assert.ok(Array.isArray(vector.steps) && vector.steps.length > 0, "steps");
  const core: Replayer = vector.protocol === 1 ? new V1Replayer(vector.lease_ms) : new V2Replayer(vector.lease_ms);
  vector.steps.forEach((step, index) => {
    const where = `step ${index} (${JSON.stringify(step)})`;
    switch (step.step) {
      case "call":
      case "recv":
      case "eof":
      case "advance":
        core.noneLeft(where);
        if (step.step === "advance") {
          const to = step.to;
          assert.ok(typeof to === "number" && Number.isInteger(to) && BigInt(to) * MS >= core.now, `${where}: "to"`);
          core.now = BigInt(to) * MS;
        }
        core.input(step, where);
        return;
      case "send":
      case "half_close":
        expect(core.writes, step, where, "write");
        return;
      case "event":
        expect(core.events, step, where, "event");
        return;
      case "belief":
      case "deadline":
      case "next_heartbeat":
        core.check(step, where);
        return;
      default:
        assert.fail(`${where}: unknown step kind ${JSON.stringify(step.step)}`);
    }
  });
  core.noneLeft("at the end");
}

function expect(pending: Output[], want: Step, where: string, group: string): void {
  const got = pending.shift();
  assert.ok(got !== undefined, `${where}: expected this ${group}, but the core produced none`);
  assert.deepStrictEqual(got, { ...want }, `${where}: the core produced ${JSON.stringify(got)}`);
}

/** A token as JSON writes it (vectors keep tokens below 2^53). */
function tokenOf(token: bigint | null): number | string {
  if (token === null) return "none";
  return token <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(token) : token.toString();
}

/** An instant of the core's clock in the vector's milliseconds. */
function shown(at: Nanos | null): number | null {
  if (at === null) return null;
  const since = at - ORIGIN;
  return since % MS === 0n ? Number(since / MS) : Number(since) / 1e6;
}

/** A state's fields as the `state` and `lock_state` events name them. */
function stateFields(state: frames2.WireState): Output {
  return {
    state_event: state.event,
    initial: state.initial,
    coalesced: state.coalesced,
    token: tokenOf(state.token),
    since_ms: tokenOf(state.sinceMs),
    reason: state.reason,
    value: state.value,
  };
}

function idOf(step: Step, field: "claim" | "watch", where: string): number {
  const id = step[field];
  assert.ok(typeof id === "number" && Number.isInteger(id), `${where}: "${field}"`);
  return id;
}

function instant(step: Step, where: string): number | null {
  const at = step.at;
  assert.ok(at === null || (typeof at === "number" && Number.isInteger(at)), `${where}: "at" is an instant or null`);
  return at;
}

function hexOf(step: Step, where: string): Buffer {
  const hex = step.hex;
  assert.ok(typeof hex === "string" && /^([0-9a-f]{2})+$/.test(hex), `${where}: "hex"`);
  return Buffer.from(hex, "hex");
}

abstract class Replayer {
  now: Nanos = 0n;
  /** Outputs produced and not matched yet, each group in the order they arose. */
  readonly writes: Output[] = [];
  readonly events: Output[] = [];

  constructor(readonly leaseMs: number) {}

  get at(): Nanos {
    return ORIGIN + this.now;
  }

  write(frame: Buffer): void {
    this.writes.push({ step: "send", hex: frame.toString("hex") });
  }

  event(fields: Output): void {
    this.events.push({ step: "event", ...fields });
  }

  noneLeft(where: string): void {
    assert.deepStrictEqual(
      { writes: this.writes, events: this.events },
      { writes: [], events: [] },
      `${where}: the core produced outputs the vector does not list`,
    );
  }

  abstract input(step: Step, where: string): void;
  abstract check(step: Step, where: string): void;
}

/** Version 1: one claim machine, driven as `io/session.ts` drives it. */
class V1Replayer extends Replayer {
  #claim: Claim | null = null;
  /** The owner let go: the write side is shut and the server's EOF confirms. */
  #releasing = false;
  /** The connection is over (lost, or the release confirmed). */
  #over = false;

  #the(where: string): Claim {
    assert.ok(this.#claim !== null, `${where}: before the acquire`);
    return this.#claim;
  }

  input(step: Step, where: string): void {
    if (step.step === "call" && step.call === "acquire") {
      assert.ok(this.#claim === null && step.mode === "wait" && !("claim" in step), `${where}: one wait acquire`);
      const name = String(step.lock);
      this.#claim = new Claim(name, frames1.encodeName(name), frames1.leaseMs(this.leaseMs), this.at);
      this.write(this.#claim.opening());
      return;
    }
    if (step.step === "advance" && this.#claim === null) return; // no connection yet: only the clock moves
    const claim = this.#the(where);
    if (step.step !== "advance") assert.ok(!this.#over, `${where}: after the client gave the connection up`);
    const before = claim.status;
    switch (step.step) {
      case "call":
        assert.equal(step.call, "release", `${where}: a version 1 call`);
        assert.ok(!this.#releasing, `${where}: a second release`);
        // The driver shuts its write side down and reads until EOF.
        this.#releasing = true;
        this.writes.push({ step: "half_close" });
        return;
      case "recv":
        claim.receive(hexOf(step, where), this.at);
        break;
      case "eof":
        if (this.#releasing && claim.status !== "lost") {
          // EOF after the half-close confirms the release.
          this.#over = true;
          this.event({ event: "released" });
          return;
        }
        claim.closed();
        break;
      case "advance": {
        // After the release call the driver only waits for the EOF
        // (bounded by its I/O timeout): no heartbeat, no deadline.
        if (this.#over || this.#releasing) return;
        const heartbeat = claim.heartbeatDue(this.at); // checks the deadline first
        if (heartbeat !== null) {
          claim.heartbeatSent(this.at);
          this.write(heartbeat);
        }
        break;
      }
      default:
        assert.fail(`${where}: unknown input`);
    }
    this.#reportChange(claim, before);
  }

  /** What the input changed for the owner. */
  #reportChange(claim: Claim, before: string): void {
    if (claim.status === before) return;
    switch (claim.status) {
      case "waiting":
        this.event({ event: "waiting" });
        return;
      case "held":
        this.event({ event: "granted", token: tokenOf(claim.token) });
        return;
      case "lost":
        this.#over = true;
        if (!this.#releasing) this.event({ event: "lost", reason: claim.loss?.reason });
        return;
    }
  }

  check(step: Step, where: string): void {
    const claim = this.#the(where);
    switch (step.step) {
      case "belief":
        if (!this.#releasing) claim.check(this.at);
        assert.equal(
          claim.status === "held" && !this.#releasing,
          step.held,
          `${where}: status ${claim.status}, releasing ${this.#releasing}, deadline ${shown(claim.deadline())}`,
        );
        return;
      case "deadline":
        assert.equal(shown(claim.deadline()), instant(step, where), `${where}: the deadline`);
        return;
      case "next_heartbeat":
        assert.equal(shown(claim.nextHeartbeat()), instant(step, where), `${where}: the next heartbeat`);
        return;
    }
  }
}

/** Version 2: the session's exchange, driven as `v2/session.ts` drives it. */
class V2Replayer extends Replayer {
  #exchange: Exchange | null = null;
  /** Bytes of a frame not complete yet. */
  #pending: Buffer = Buffer.alloc(0);
  /** Why the session ended, once it has. */
  #ended: LockLostError | null = null;
  /** Every claim id asked for. */
  readonly #asked: number[] = [];
  /** Every watch id asked for. */
  readonly #watched: number[] = [];

  #the(where: string): Exchange {
    assert.ok(this.#exchange !== null, `${where}: before the open`);
    return this.#exchange;
  }

  input(step: Step, where: string): void {
    if (step.step === "call" && step.call === "open") {
      assert.ok(this.#exchange === null, `${where}: a second open`);
      this.#exchange = new Exchange(BigInt(frames1.leaseMs(this.leaseMs)) * MS, this.at);
      this.write(frames2.open(this.leaseMs));
      if ("features" in step) {
        assert.equal(step.features, frames2.VALUES_AND_OBSERVERS, `${where}: "features"`);
        this.write(frames2.hello(frames2.VALUES_AND_OBSERVERS));
        this.#exchange.helloSent(this.at);
      }
      return;
    }
    if (step.step === "advance" && this.#exchange === null) return; // no session yet: only the clock moves
    const exchange = this.#the(where);
    if (step.step !== "advance") assert.ok(this.#ended === null, `${where}: after the client gave the session up`);
    switch (step.step) {
      case "call":
        this.#call(exchange, step, where);
        return;
      case "recv":
        this.#receive(exchange, hexOf(step, where));
        return;
      case "eof":
        this.#end(LockLostError.connection("vector"));
        return;
      case "advance":
        if (this.#ended !== null) return;
        if (!this.#checkDeadline(exchange)) return;
        {
          const ping = exchange.nextPing();
          if (ping !== null && ping <= this.at) {
            this.write(frames2.PING);
            exchange.pingSent(this.at);
          }
        }
        return;
      default:
        assert.fail(`${where}: unknown input`);
    }
  }

  #call(exchange: Exchange, step: Step, where: string): void {
    switch (step.call) {
      case "observe": {
        const watch = idOf(step, "watch", where);
        assert.equal(exchange.watchStanding(watch), null, `${where}: a watch id in use`);
        this.#watched.push(watch);
        this.write(frames2.observe(watch, frames1.encodeName(String(step.lock))));
        exchange.observeSent(watch, this.at);
        return;
      }
      case "unobserve": {
        const watch = idOf(step, "watch", where);
        if (exchange.unobserve(watch)) this.#sendUnobserve(exchange, watch);
        return;
      }
      case "lookup":
        this.write(frames2.lookup(frames1.encodeName(String(step.lock))));
        exchange.lookupSent(this.at);
        return;
    }
    const claim = idOf(step, "claim", where);
    switch (step.call) {
      case "acquire": {
        const mode = step.mode;
        assert.ok((mode === "wait" || mode === "try") && !exchange.knows(claim), `${where}: acquire`);
        this.#asked.push(claim);
        const name = frames1.encodeName(String(step.lock));
        // With the field, even empty: ACQUIRE_VALUE (the core is told to use the frame).
        this.write(
          "value" in step
            ? frames2.acquireValue(claim, mode, name, frames2.encodeValue(step.value))
            : frames2.acquire(claim, mode, name),
        );
        exchange.acquireSent(claim, mode, this.at);
        return;
      }
      case "proclaim":
        assert.ok(exchange.knows(claim), `${where}: a claim in use`);
        this.write(frames2.proclaim(claim, frames2.encodeValue(step.value)));
        exchange.proclaimSent(claim, this.at);
        return;
      case "release":
        if (exchange.release(claim)) this.#sendRelease(exchange, claim);
        return;
      default:
        assert.fail(`${where}: a version 2 call`);
    }
  }

  #sendUnobserve(exchange: Exchange, watch: number): void {
    this.write(frames2.unobserve(watch));
    exchange.unobserveSent(watch, this.at);
  }

  #sendRelease(exchange: Exchange, claim: number): void {
    this.write(frames2.release(claim));
    exchange.releaseSent(claim, this.at);
  }

  /** The deadline, as the driver checks it before anything else: false
   * when it ended the session. */
  #checkDeadline(exchange: Exchange): boolean {
    if (this.at >= exchange.deadline()) {
      const leaseMs = this.leaseMs;
      this.#end(LockLostError.expired("vector", leaseMs));
      return false;
    }
    return true;
  }

  #receive(exchange: Exchange, data: Buffer): void {
    if (!this.#checkDeadline(exchange)) return;
    const buf = this.#pending.length === 0 ? data : Buffer.concat([this.#pending, data]);
    let used = 0;
    try {
      while (this.#ended === null) {
        const decoded = frames2.decode(buf, used);
        if (decoded === null) break;
        const [frame, length] = decoded;
        used += length;
        this.#apply(exchange, exchange.onFrame(frame, this.at));
      }
    } catch (err) {
      if (!(err instanceof ProtocolError)) throw err;
      this.#end(LockLostError.protocol("vector", err));
      return;
    }
    this.#pending = Buffer.from(buf.subarray(used));
  }

  #apply(exchange: Exchange, event: Event): void {
    switch (event.kind) {
      case "opened":
      case "nothing":
        return;
      case "held":
      case "queued":
        if (event.kind === "held") this.event({ event: "granted", claim: event.claim, token: tokenOf(event.token) });
        else this.event({ event: "waiting", claim: event.claim });
        // The owner let go before the reply, which left the id in use: the
        // RELEASE goes out now.
        if (event.release) this.#sendRelease(exchange, event.claim);
        return;
      case "busy":
        this.event({ event: "busy", claim: event.claim });
        return;
      case "refused":
        this.event({ event: "refused", claim: event.claim, code: event.code });
        return;
      case "released":
        this.event({ event: "released", claim: event.claim });
        return;
      case "revoked":
        this.event({
          event: "lost",
          claim: event.claim,
          reason: LockLostError.server("vector", event.code, event.reason, true).reason,
        });
        return;
      case "ended":
        this.#end(LockLostError.server("vector", event.code, event.reason));
        return;
      case "features":
        this.event({ event: "features", features: event.features, max_watches: event.maxWatches });
        return;
      case "unsupported":
        // The session is over; no claim or watch existed yet.
        this.event({ event: "unsupported" });
        this.#ended = LockLostError.connection("vector");
        return;
      case "proclaimed":
        this.event({ event: "proclaimed", claim: event.claim });
        return;
      case "proclaim_refused":
        if (!event.gone) this.event({ event: "refused", claim: event.claim, code: event.code });
        return;
      case "observing":
        this.event({ event: "observing", watch: event.watch });
        if (event.unobserve) this.#sendUnobserve(exchange, event.watch);
        return;
      case "state":
        this.event({ event: "state", watch: event.watch, ...stateFields(event.state) });
        return;
      case "unobserved":
        this.event({ event: "unobserved", watch: event.watch });
        return;
      case "watch_refused":
        this.event({ event: "refused", watch: event.watch, code: event.code });
        return;
      case "lock_state": {
        const { state_event, token, since_ms, value } = stateFields(event.state);
        this.event({ event: "lock_state", state_event, token, since_ms, value });
        return;
      }
      case "lookup_refused":
        this.event({ event: "refused", lookup: true, code: event.code });
        return;
    }
  }

  /** The session ends: every claim still in use is lost, in ascending id. */
  #end(loss: LockLostError): void {
    if (this.#ended !== null) return;
    this.#ended = loss;
    const exchange = this.#exchange;
    if (exchange === null) return;
    for (const claim of [...this.#asked].sort((a, b) => a - b)) {
      if (exchange.knows(claim)) this.event({ event: "lost", claim, reason: loss.reason });
    }
    // Then every live watch (watching, or leaving until its UNOBSERVED).
    for (const watch of [...this.#watched].sort((a, b) => a - b)) {
      const standing = exchange.watchStanding(watch);
      if (standing === "watching" || standing === "leaving") {
        this.event({ event: "watch_lost", watch, reason: loss.reason });
      }
    }
  }

  check(step: Step, where: string): void {
    const exchange = this.#the(where);
    switch (step.step) {
      case "belief": {
        const claim = step.claim;
        assert.ok(typeof claim === "number", `${where}: "claim"`);
        if (this.#ended === null) this.#checkDeadline(exchange);
        const standing = exchange.standing(claim);
        assert.equal(
          this.#ended === null && standing === "held",
          step.held,
          `${where}: standing ${standing}, ended ${this.#ended?.reason ?? "no"}`,
        );
        return;
      }
      case "deadline":
        assert.equal(shown(exchange.deadline()), instant(step, where), `${where}: the deadline`);
        return;
      case "next_heartbeat":
        assert.equal(shown(exchange.nextPing()), instant(step, where), `${where}: the next PING`);
        return;
    }
  }
}
