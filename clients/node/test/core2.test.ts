/**
 * The protocol v2 core on exact instants: frames and reply matching (the
 * Rust client's `v2/exchange.rs` tests, ported, and more).
 */

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { ProtocolError } from "../src/errors.js";
import { MAX_UNREAD_STATES, Observation } from "../src/observe.js";
import { type Event, Exchange } from "../src/v2/exchange.js";
import * as frames from "../src/v2/frames.js";

const MS = 1_000_000n;
const LEASE = 2000n * MS;
const T0 = 10_000n * MS;
const ms = (n: number): bigint => BigInt(n) * MS;

function opened(at: bigint): Exchange {
  const ex = new Exchange(LEASE, T0);
  assert.deepEqual(ex.onFrame({ type: "opened", session: 1n, maxClaims: 8 }, T0 + at), {
    kind: "opened",
    maxClaims: 8,
  } satisfies Event);
  return ex;
}

const violation = (fn: () => unknown, what: string): void => {
  assert.throws(fn, ProtocolError, what);
};

describe("v2 frames", () => {
  it("writes OPEN, ACQUIRE, RELEASE and PING as docs/protocol.md shows them", () => {
    assert.equal(frames.open(2000).toString("hex"), "0102000007d0");
    assert.equal(
      frames.acquire(1, "wait", Buffer.from("deploy")).toString("hex"),
      "21000000010006" + Buffer.from("deploy").toString("hex"),
    );
    assert.equal(frames.acquire(2, "try", Buffer.from("deploy")).toString("hex").slice(0, 14), "21000000020106");
    assert.equal(frames.release(9).toString("hex"), "2200000009");
    assert.equal(frames.PING.toString("hex"), "23");
  });

  it("reads every server frame, whole frames only", () => {
    const cases: [string, frames.Frame][] = [
      ["30000000000000000100000400", { type: "opened", session: 1n, maxClaims: 1024 }],
      ["310000000100 06b49d20000000".replace(" ", ""), { type: "acquired", claim: 1, token: 0x0006b49d20000000n }],
      ["3200000003", { type: "waiting", claim: 3 }],
      ["3300000002", { type: "busy", claim: 2 }],
      ["3400000001", { type: "released", claim: 1 }],
      ["35", { type: "pong" }],
      ["36000000092013" + Buffer.from("unknown claim id: 9").toString("hex"), { type: "refused", claim: 9, code: 0x20, reason: "unknown claim id: 9" }],
      ["37000000030006b49d20000002", { type: "granted", claim: 3, token: 0x0006b49d20000002n }],
      ["38000000030800", { type: "revoked", claim: 3, code: 8, reason: "" }],
      ["130100", { type: "error", code: 1, reason: "" }],
    ];
    for (const [hex, frame] of cases) {
      const bytes = Buffer.from(hex, "hex");
      assert.deepEqual(frames.decode(bytes), [frame, bytes.length], hex);
      for (let cut = 0; cut < bytes.length; cut++) {
        assert.equal(frames.decode(bytes.subarray(0, cut)), null, `${hex} cut at ${cut}`);
      }
      // At an offset, after another frame.
      assert.deepEqual(frames.decode(Buffer.concat([Buffer.from([0x35]), bytes]), 1), [frame, bytes.length]);
    }
  });

  it("names what answered when it is not a monolock server", () => {
    for (const [bytes, peer] of [
      [Buffer.from([0x15, 3, 3]), "tls"],
      [Buffer.from([0x16, 3, 1]), "tls"],
      [Buffer.from("HTTP/1.1 400 Bad Request"), "http"],
    ] as const) {
      assert.throws(() => frames.decode(bytes), (err: unknown) => {
        assert.ok(err instanceof ProtocolError);
        assert.equal(err.peer, peer);
        return true;
      });
    }
    assert.throws(() => frames.decode(Buffer.from([0x7f])), /unexpected message type 0x7f/);
  });
});

describe("v2 reply matching", () => {
  it("every reply confirms its send instant, and a push confirms nothing", () => {
    const ex = opened(ms(10));
    assert.equal(ex.deadline(), T0 + ms(1600));
    ex.acquireSent(1, "wait", T0 + ms(100));
    assert.equal(ex.nextPing(), null, "a frame is in flight");
    assert.deepEqual(ex.onFrame({ type: "waiting", claim: 1 }, T0 + ms(110)), {
      kind: "queued",
      claim: 1,
      release: false,
    });
    assert.equal(ex.deadline(), T0 + ms(100) + ms(1600));
    // srtt 10 ms: base 500 - 20 = 480, from the latest confirmed send.
    assert.equal(ex.nextPing(), T0 + ms(100) + ms(480));
    ex.pingSent(T0 + ms(580));
    assert.deepEqual(ex.onFrame({ type: "granted", claim: 1, token: 9n }, T0 + ms(585)), {
      kind: "held",
      claim: 1,
      token: 9n,
      release: false,
    });
    assert.equal(ex.deadline(), T0 + ms(1700), "a push confirms nothing");
    assert.deepEqual(ex.onFrame({ type: "pong" }, T0 + ms(590)), { kind: "nothing" });
    assert.equal(ex.deadline(), T0 + ms(580) + ms(1600));
  });

  it("before OPENED the deadline runs from the OPEN's send instant", () => {
    const ex = new Exchange(LEASE, T0);
    assert.equal(ex.opened, false);
    assert.equal(ex.deadline(), T0 + ms(1600));
    assert.equal(ex.nextPing(), null, "the OPEN is in flight");
  });

  it("a late reply confirms the earlier send, not its arrival", () => {
    const ex = opened(ms(1));
    ex.acquireSent(1, "try", T0 + ms(200));
    ex.onFrame({ type: "acquired", claim: 1, token: 5n }, T0 + ms(1500));
    assert.equal(ex.deadline(), T0 + ms(200) + ms(1600));
    // The slow round trip (1.3 s, srtt past half the base) sends the next
    // PING on the reply.
    assert.equal(ex.nextPing(), T0 + ms(1500));
  });

  it("replies answer frames in the order they were sent", () => {
    const ex = opened(ms(1));
    ex.acquireSent(1, "wait", T0 + ms(10));
    ex.acquireSent(2, "try", T0 + ms(20));
    ex.pingSent(T0 + ms(30));
    assert.equal(ex.inFlight, 3);
    assert.equal(ex.onFrame({ type: "acquired", claim: 1, token: 1n }, T0 + ms(40)).kind, "held");
    assert.equal(ex.deadline(), T0 + ms(10) + ms(1600));
    assert.equal(ex.onFrame({ type: "busy", claim: 2 }, T0 + ms(41)).kind, "busy");
    assert.equal(ex.deadline(), T0 + ms(20) + ms(1600));
    assert.equal(ex.onFrame({ type: "pong" }, T0 + ms(42)).kind, "nothing");
    assert.equal(ex.deadline(), T0 + ms(30) + ms(1600));
    assert.equal(ex.inFlight, 0);
    assert.equal(ex.claims, 1, "claim 2 found the lock busy: its id is free");
  });

  it("a release is confirmed by RELEASED, which frees the id", () => {
    const ex = opened(ms(1));
    ex.acquireSent(4, "try", T0);
    assert.equal(ex.onFrame({ type: "acquired", claim: 4, token: 2n }, T0).kind, "held");
    assert.equal(ex.release(4), true);
    ex.releaseSent(4, T0 + ms(5));
    assert.equal(ex.release(4), false, "already on its way");
    assert.deepEqual(ex.onFrame({ type: "released", claim: 4 }, T0 + ms(6)), { kind: "released", claim: 4 });
    assert.equal(ex.claims, 0);
    assert.equal(ex.release(4), false, "a free id");
    assert.equal(ex.deadline(), T0 + ms(5) + ms(1600), "a RELEASE counts as a heartbeat");
  });

  it("a release asked before the ACQUIRE's reply goes out after it", () => {
    const ex = opened(ms(1));
    ex.acquireSent(1, "wait", T0);
    ex.acquireSent(2, "try", T0);
    ex.acquireSent(3, "try", T0);
    assert.equal(ex.release(1), false);
    assert.equal(ex.release(2), false);
    assert.equal(ex.release(3), false);
    assert.deepEqual(ex.onFrame({ type: "waiting", claim: 1 }, T0), { kind: "queued", claim: 1, release: true });
    assert.deepEqual(ex.onFrame({ type: "busy", claim: 2 }, T0), { kind: "busy", claim: 2 });
    assert.equal(ex.knows(2), false, "a busy id is free: nothing to release");
    assert.deepEqual(ex.onFrame({ type: "acquired", claim: 3, token: 4n }, T0), {
      kind: "held",
      claim: 3,
      token: 4n,
      release: true,
    });
  });

  it("a grant may cross a release, and a revoke comes first", () => {
    const ex = opened(ms(1));
    ex.acquireSent(1, "wait", T0);
    ex.acquireSent(2, "wait", T0);
    ex.onFrame({ type: "waiting", claim: 1 }, T0);
    ex.onFrame({ type: "acquired", claim: 2, token: 5n }, T0);
    ex.releaseSent(1, T0);
    ex.releaseSent(2, T0);
    assert.deepEqual(ex.onFrame({ type: "granted", claim: 1, token: 6n }, T0), { kind: "nothing" });
    assert.deepEqual(ex.onFrame({ type: "revoked", claim: 2, code: 8, reason: "force-release" }, T0), {
      kind: "revoked",
      claim: 2,
      code: 8,
      reason: "force-release",
    });
    assert.deepEqual(ex.onFrame({ type: "released", claim: 1 }, T0), { kind: "released", claim: 1 });
    assert.deepEqual(ex.onFrame({ type: "refused", claim: 2, code: 0x20, reason: "" }, T0), { kind: "nothing" });
    assert.equal(ex.claims, 0);
  });

  it("REFUSED frees the id and says why", () => {
    const ex = opened(ms(1));
    ex.acquireSent(7, "wait", T0);
    assert.deepEqual(ex.onFrame({ type: "refused", claim: 7, code: 0x09, reason: "too many" }, T0), {
      kind: "refused",
      claim: 7,
      code: 0x09,
      reason: "too many",
    });
    assert.equal(ex.knows(7), false);
  });

  it("violations", () => {
    violation(() => new Exchange(LEASE, T0).onFrame({ type: "pong" }, T0), "PONG answering an OPEN");
    violation(() => opened(ms(1)).onFrame({ type: "pong" }, T0), "nothing in flight");
    let ex = opened(ms(1));
    ex.acquireSent(1, "wait", T0);
    violation(() => ex.onFrame({ type: "waiting", claim: 2 }, T0), "another claim's reply");
    ex = opened(ms(1));
    ex.acquireSent(1, "wait", T0);
    violation(() => ex.onFrame({ type: "busy", claim: 1 }, T0), "BUSY for a waiting ACQUIRE");
    ex = opened(ms(1));
    ex.acquireSent(1, "try", T0);
    violation(() => ex.onFrame({ type: "waiting", claim: 1 }, T0), "WAITING for a try-only ACQUIRE");
    violation(() => opened(ms(1)).onFrame({ type: "granted", claim: 3, token: 1n }, T0), "GRANTED unknown");
    violation(() => opened(ms(1)).onFrame({ type: "revoked", claim: 3, code: 8, reason: "" }, T0), "REVOKED unknown");
    ex = opened(ms(1));
    ex.acquireSent(1, "wait", T0);
    ex.onFrame({ type: "acquired", claim: 1, token: 1n }, T0);
    violation(() => ex.onFrame({ type: "granted", claim: 1, token: 1n }, T0), "a second grant");
    ex = opened(ms(1));
    ex.acquireSent(1, "wait", T0);
    ex.onFrame({ type: "acquired", claim: 1, token: 1n }, T0);
    ex.releaseSent(1, T0);
    violation(() => ex.onFrame({ type: "refused", claim: 1, code: 0x20, reason: "" }, T0), "0x20 for a live claim");
    ex = opened(ms(1));
    ex.pingSent(T0);
    violation(() => ex.onFrame({ type: "opened", session: 2n, maxClaims: 1 }, T0), "a second OPENED");
  });

  it("ERROR ends the session in any state", () => {
    const ex = new Exchange(LEASE, T0);
    assert.deepEqual(ex.onFrame({ type: "error", code: 0x10, reason: "" }, T0), {
      kind: "ended",
      code: 0x10,
      reason: "",
    });
    assert.equal(ex.opened, false);
  });

  it("keeps up with many frames in flight", () => {
    const ex = opened(ms(1));
    for (let id = 0; id < 5000; id++) ex.acquireSent(id, "try", T0 + BigInt(id));
    for (let id = 0; id < 5000; id++) {
      assert.equal(ex.onFrame({ type: "acquired", claim: id, token: BigInt(id) }, T0 + ms(1)).kind, "held");
    }
    assert.equal(ex.inFlight, 0);
    assert.equal(ex.claims, 5000);
    assert.equal(ex.deadline(), T0 + 4999n + ms(1600));
  });
});

describe("extension frames (values and observers)", () => {
  const hex = (text: string): string => Buffer.from(text).toString("hex");

  it("writes HELLO, ACQUIRE_VALUE, PROCLAIM, OBSERVE, UNOBSERVE and LOOKUP as docs/protocol.md's worked exchange", () => {
    assert.equal(frames.hello(frames.VALUES_AND_OBSERVERS).toString("hex"), "2400000001");
    assert.equal(
      frames.acquireValue(1, "wait", Buffer.from("deploy"), Buffer.from("10.0.0.7:9000")).toString("hex"),
      "25000000010006" + hex("deploy") + "000d" + hex("10.0.0.7:9000"),
    );
    assert.equal(
      frames.proclaim(1, Buffer.from("10.0.0.7:9001")).toString("hex"),
      "2600000001000d" + hex("10.0.0.7:9001"),
    );
    assert.equal(frames.observe(7, Buffer.from("deploy")).toString("hex"), "270000000706" + hex("deploy"));
    assert.equal(frames.unobserve(7).toString("hex"), "2800000007");
    assert.equal(frames.lookup(Buffer.from("deploy")).toString("hex"), "2906" + hex("deploy"));
  });

  it("reads FEATURES, PROCLAIMED, OBSERVING, UNOBSERVED, STATE and LOCK_STATE, whole frames only", () => {
    const held: frames.WireState = {
      event: "held",
      initial: true,
      coalesced: false,
      token: 0x0006b49d20000000n,
      sinceMs: 1796300000000n,
      reason: null,
      value: "10.0.0.7:9000",
    };
    const cases: [string, frames.Frame][] = [
      ["390000000100000400", { type: "features", features: 1, maxWatches: 1024 }],
      ["3a00000001", { type: "proclaimed", claim: 1 }],
      ["3b00000007", { type: "observing", watch: 7 }],
      ["3c00000007", { type: "unobserved", watch: 7 }],
      ["3e00000007" + "0101" + "0006b49d20000000" + "000001a23bd2cb00" + "00" + "000d" + hex("10.0.0.7:9000"), { type: "state", watch: 7, state: held }],
      [
        "3e00000007" + "0400" + "0006b49d20000000" + "000001a23bd2d0dc" + "01" + "0000",
        {
          type: "state",
          watch: 7,
          state: { event: "released", initial: false, coalesced: false, token: 0x0006b49d20000000n, sinceMs: 1796300001500n, reason: "released", value: "" },
        },
      ],
      [
        "3d" + "0100" + "0006b49d20000001" + "000001a23bd2d0dc" + "00" + "000d" + hex("10.0.0.8:9000"),
        {
          type: "lock_state",
          state: { event: "held", initial: false, coalesced: false, token: 0x0006b49d20000001n, sinceMs: 1796300001500n, reason: null, value: "10.0.0.8:9000" },
        },
      ],
      // COALESCED, an unknown flag bit and an unknown reason byte are read, not refused.
      [
        "3d0082" + "0000000000000005" + "0000000000000000" + "09" + "0000",
        {
          type: "lock_state",
          state: { event: "free", initial: false, coalesced: true, token: 5n, sinceMs: 0n, reason: null, value: "" },
        },
      ],
    ];
    for (const [text, frame] of cases) {
      const bytes = Buffer.from(text, "hex");
      assert.deepEqual(frames.decode(bytes), [frame, bytes.length], text);
      for (let cut = 0; cut < bytes.length; cut++) {
        assert.equal(frames.decode(bytes.subarray(0, cut)), null, `${text} cut at ${cut}`);
      }
    }
    assert.throws(
      () => frames.decode(Buffer.from("3d05000000000000000000000000000000000000000000", "hex")),
      /unknown state event 0x05/,
    );
  });

  it("checks a value before anything is sent: UTF-8 text of at most 1,024 bytes", () => {
    assert.equal(frames.encodeValue("").length, 0);
    assert.equal(frames.encodeValue("é".repeat(512)).length, 1024);
    assert.throws(() => frames.encodeValue("é".repeat(512) + "a"), {
      name: "InvalidArgumentError",
      message: "value of 1025 bytes is above the maximum of 1024 bytes",
    });
    assert.throws(() => frames.encodeValue("\ud800"), /not valid UTF-8/);
    assert.throws(() => frames.encodeValue(7), /value must be a string, not number/);
  });
});

describe("an observation's unread states", () => {
  const wire = (token: bigint, value: string): frames.WireState => ({
    event: "value",
    initial: false,
    coalesced: false,
    token,
    sinceMs: 1796300000000n,
    reason: null,
    value,
  });

  it("are bounded: past the bound the latest stands for them all, flagged coalesced", async () => {
    // Never routed: the states are handed to it as its session would.
    const observation = new Observation("x", Buffer.from("x"), () => new Promise(() => {}));
    const first = observation.next();
    observation.state({ ...wire(1n, "v0"), event: "held", initial: true });
    assert.equal((await first).value?.initial, true);
    const pushed = MAX_UNREAD_STATES + 44;
    for (let i = 1; i <= pushed; i++) observation.state(wire(1n, `v${i}`));
    const unread = [];
    for (let i = 0; i < 44; i++) unread.push((await observation.next()).value);
    // The 257th found the bound: one coalesced state, then 43 more as pushed.
    assert.deepEqual(
      { ...unread[0], since: undefined },
      { held: true, token: 1n, value: `v${MAX_UNREAD_STATES + 1}`, since: undefined, event: "held", initial: false, coalesced: true, reason: null },
    );
    assert.deepEqual(
      unread.slice(1).map((state) => [state?.event, state?.coalesced, state?.value]),
      Array.from({ length: 43 }, (_, i) => ["value", false, `v${MAX_UNREAD_STATES + 2 + i}`]),
    );
    assert.deepEqual(await observation.return(), { value: undefined, done: true });
    assert.deepEqual(await observation.next(), { value: undefined, done: true });
  });
});
