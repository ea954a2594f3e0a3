/**
 * The sans-I/O core on exact instants: frames, the heartbeat schedule,
 * reply matching and the claim machine (the Rust and Python clients' unit
 * tests, ported).
 */

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { Address, parse } from "../src/address.js";
import { InvalidArgumentError, LockLostError, ProtocolError } from "../src/errors.js";
import { Schedule } from "../src/schedule.js";
import { Claim } from "../src/v1/claim.js";
import { Exchange } from "../src/v1/exchange.js";
import * as frames from "../src/v1/frames.js";

const MS = 1_000_000n;
const US = 1_000n;
const LEASE = 2000n * MS;
const T0 = 10_000n * MS;

const acquired = (token: bigint): Buffer => {
  const frame = Buffer.alloc(9);
  frame[0] = 0x12;
  frame.writeBigUInt64BE(token, 1);
  return frame;
};
const waiting = { type: "waiting" } as const;
const granted = (token: bigint) => ({ type: "acquired", token }) as const;
const claim = (): Claim => new Claim("x", Buffer.from("x"), 2000, T0);

describe("frames", () => {
  it("the ACQUIRE bytes match the protocol page", () => {
    const frame = frames.acquire(frames.encodeName("deploy"), 2000);
    assert.equal(frame.toString("hex"), "01010000 07d0 0006 6465706c6f79".replaceAll(" ", ""));
  });

  it("decodes whole frames only", () => {
    assert.equal(frames.decode(Buffer.alloc(0)), null);
    assert.deepEqual(frames.decode(Buffer.from([0x11])), [waiting, 1]);
    assert.equal(frames.decode(acquired(7n).subarray(0, 5)), null);
    assert.deepEqual(frames.decode(acquired(7n)), [granted(7n), 9]);
    assert.deepEqual(frames.decode(acquired(2n ** 64n - 1n)), [granted(2n ** 64n - 1n), 9]);
    assert.equal(frames.decode(Buffer.from("\x13\x02\x03ab", "latin1")), null);
    assert.deepEqual(frames.decode(Buffer.from("\x13\x02\x03abc", "latin1")), [
      { type: "error", code: 2, reason: "abc" },
      6,
    ]);
    assert.deepEqual(frames.decode(Buffer.from([0x13, 0x01, 0x00])), [
      { type: "error", code: 1, reason: "" },
      3,
    ]);
    assert.deepEqual(frames.decode(Buffer.from([0x11, 0x11]), 1), [waiting, 1]);
    assert.throws(() => frames.decode(Buffer.from([0x7f])), /unexpected message type 0x7f/);
  });

  it("names a TLS or an HTTP server on the other end", () => {
    for (const byte of [0x15, 0x16]) {
      assert.throws(() => frames.decode(Buffer.from([byte, 3, 3])), (err: unknown) => {
        assert.ok(err instanceof ProtocolError);
        assert.equal(err.peer, "tls");
        assert.match(err.message, /expects TLS: connect with TLS/);
        return true;
      });
    }
    assert.throws(() => frames.decode(Buffer.from("HTTP/1.1 400")), /an HTTP server answered/);
  });

  it("checks names and leases as the server does", () => {
    assert.equal(frames.encodeName("a".repeat(255)).length, 255);
    assert.deepEqual(frames.encodeName(" a"), Buffer.from(" a"));
    assert.equal(frames.encodeName("é".repeat(127)).length, 254);
    for (const bad of ["", "a".repeat(256), "é".repeat(128), "\ud800", "a\udc00b", 7, null]) {
      assert.throws(() => frames.encodeName(bad), InvalidArgumentError, JSON.stringify(bad));
    }
    assert.equal(frames.leaseMs(100), 100);
    assert.equal(frames.leaseMs(4350), 4350);
    assert.equal(frames.leaseMs(3_600_000), 3_600_000);
    for (const bad of [0, 10, 99, 99.9, 4350.9, -1, 3_600_001, 0x1_0000_0000, NaN, Infinity, "1000", 1000n, true]) {
      assert.throws(() => frames.leaseMs(bad), InvalidArgumentError, String(bad));
    }
  });
});

describe("addresses", () => {
  it("takes lists, brackets and the environment", () => {
    assert.deepEqual(parse("a:1,b:2"), [new Address("a", 1), new Address("b", 2)]);
    assert.deepEqual(parse(["a:1", "[::1]:2"]), [new Address("a", 1), new Address("::1", 2)]);
    assert.equal(String(new Address("::1", 2)), "[::1]:2");
    assert.deepEqual(parse(undefined, { MONOLOCK_ADDRESS: "x:1, y:2" }), [
      new Address("x", 1),
      new Address("y", 2),
    ]);
    assert.deepEqual(parse(undefined, {}), [new Address("127.0.0.1", 7070)]);
    for (const bad of ["a", "a:0", "a:x", ":1", "::1:2", "a:70000", "", " , "]) {
      assert.throws(() => parse(bad), InvalidArgumentError, bad);
    }
  });
});

describe("schedule", () => {
  it("the base interval without an RTT is a quarter lease", () => {
    assert.equal(new Schedule(LEASE).interval(), 500n * MS);
  });

  it("the RTT shortens the interval by twice the SRTT", () => {
    const s = new Schedule(LEASE);
    s.observeRtt(50n * MS);
    assert.equal(s.interval(), 400n * MS);
    s.observeRtt(100n * MS); // EWMA alpha 0.2: 0.8*50 + 0.2*100 = 60
    assert.equal(s.srtt, 60n * MS);
    assert.equal(s.interval(), 380n * MS);
  });

  it("the interval never drops below the floor", () => {
    let s = new Schedule(LEASE);
    s.observeRtt(210n * MS);
    assert.equal(s.interval(), 100n * MS);
    s = new Schedule(200n * MS);
    s.observeRtt(20n * MS);
    assert.equal(s.interval(), 12_500n * US);
    assert.equal(new Schedule(1n * MS).interval(), 250n * US);
  });

  it("intervals are send to send", () => {
    const s = new Schedule(LEASE);
    s.observeRtt(50n * MS);
    assert.equal(s.nextSend(T0, T0 + 50n * MS), T0 + 400n * MS);
    // A reply later than the interval releases the next heartbeat at once.
    assert.equal(s.nextSend(T0, T0 + 700n * MS), T0 + 700n * MS);
  });

  it("slow round trips send on every reply", () => {
    let s = new Schedule(400n * MS);
    s.observeRtt(50n * MS);
    assert.equal(s.nextSend(T0, T0 + 50n * MS), T0 + 50n * MS);
    s = new Schedule(400n * MS);
    s.observeRtt(49n * MS);
    assert.equal(s.interval(), 25n * MS);
    assert.equal(s.nextSend(T0, T0 + 10n * MS), T0 + 25n * MS);
  });

  it("the deadline is four fifths of the lease after the confirmed send", () => {
    assert.equal(new Schedule(LEASE).deadline(T0), T0 + 1600n * MS);
    assert.equal(new Schedule(1n * MS).deadline(T0), T0 + 800n * US);
    const longest = BigInt(frames.MAX_LEASE_MS) * MS;
    assert.equal(new Schedule(longest).deadline(0n), (longest * 4n) / 5n);
  });
});

describe("reply matching", () => {
  it("the ACQUIRE's reply grants and is an RTT sample", () => {
    const ex = new Exchange(LEASE, T0);
    assert.equal(ex.deadline(), T0 + 1600n * MS);
    assert.equal(ex.nextHeartbeat(), null);
    assert.equal(ex.onFrame(granted(7n), T0 + 20n * MS), "granted");
    assert.equal(ex.schedule.srtt, 20n * MS);
    assert.equal(ex.standing, "held");
    assert.equal(ex.token, 7n);
    assert.equal(ex.nextHeartbeat(), T0 + 460n * MS);
    assert.equal(ex.deadline(), T0 + 1600n * MS);
  });

  it("a heartbeat's reply moves the deadline to its send instant", () => {
    const ex = new Exchange(LEASE, T0);
    ex.onFrame(granted(7n), T0 + 10n * MS);
    ex.heartbeatSent(T0 + 480n * MS);
    assert.equal(ex.nextHeartbeat(), null);
    assert.equal(ex.onFrame(granted(7n), T0 + 500n * MS), "confirmed");
    assert.equal(ex.deadline(), T0 + 480n * MS + 1600n * MS);
  });

  it("a push while a heartbeat is in flight confirms nothing", () => {
    const ex = new Exchange(LEASE, T0);
    assert.equal(ex.onFrame(waiting, T0 + 10n * MS), "queued");
    ex.heartbeatSent(T0 + 480n * MS);
    assert.equal(ex.onFrame(granted(9n), T0 + 490n * MS), "granted");
    assert.equal(ex.deadline(), T0 + 1600n * MS, "a push confirms nothing");
    assert.equal(ex.nextHeartbeat(), null, "the heartbeat is still in flight");
    assert.equal(ex.onFrame(granted(9n), T0 + 500n * MS), "confirmed");
    assert.equal(ex.deadline(), T0 + 480n * MS + 1600n * MS);
  });

  it("a WAITING reply to a heartbeat, then the push", () => {
    const ex = new Exchange(LEASE, T0);
    ex.onFrame(waiting, T0 + 10n * MS);
    ex.heartbeatSent(T0 + 480n * MS);
    assert.equal(ex.onFrame(waiting, T0 + 490n * MS), "confirmed");
    assert.equal(ex.onFrame(granted(3n), T0 + 600n * MS), "granted");
    assert.throws(() => ex.onFrame(granted(3n), T0 + 610n * MS), ProtocolError);
  });

  it("violations", () => {
    let ex = new Exchange(LEASE, T0);
    ex.onFrame(granted(5n), T0);
    assert.throws(() => ex.onFrame(granted(5n), T0), /no request in flight/);
    ex.heartbeatSent(T0 + 400n * MS);
    assert.throws(() => ex.onFrame(granted(6n), T0 + 401n * MS), /token 6, but .* token 5/);
    assert.throws(() => ex.onFrame(waiting, T0 + 401n * MS), /WAITING arrived after/);
    ex = new Exchange(LEASE, T0);
    ex.onFrame(waiting, T0);
    assert.throws(() => ex.onFrame(waiting, T0), ProtocolError);
  });

  it("ERROR frames end the session in any state", () => {
    const frame = { type: "error", code: 1, reason: "bye" } as const;
    assert.equal(new Exchange(LEASE, T0).onFrame(frame, T0), "closed");
  });
});

describe("the claim machine", () => {
  it("takes split and coalesced frames", () => {
    const c = claim();
    c.receive(Buffer.concat([Buffer.from([0x11]), acquired(4n).subarray(0, 3)]), T0 + MS);
    assert.equal(c.status, "waiting");
    c.receive(acquired(4n).subarray(3), T0 + 2n * MS);
    assert.equal(c.status, "held");
    assert.equal(c.token, 4n);
    assert.equal(c.deadline(), T0 + 1600n * MS, "the push confirmed nothing");
  });

  it("does not keep the socket's buffer", () => {
    const c = claim();
    const data = acquired(4n);
    c.receive(data.subarray(0, 4), T0 + MS);
    data.fill(0xff); // the socket reuses its memory
    c.receive(acquired(4n).subarray(4), T0 + MS);
    assert.equal(c.token, 4n);
  });

  it("the heartbeat timer and the deadline", () => {
    const c = claim();
    assert.deepEqual(c.opening(), frames.acquire(Buffer.from("x"), 2000));
    c.receive(acquired(4n), T0 + 10n * MS);
    assert.equal(c.nextWake(), T0 + 480n * MS);
    assert.equal(c.heartbeatDue(T0 + 479n * MS), null);
    assert.deepEqual(c.heartbeatDue(T0 + 480n * MS), Buffer.from([0x02]));
    c.heartbeatSent(T0 + 480n * MS);
    assert.equal(c.nextWake(), T0 + 1600n * MS, "in flight: only the deadline");
    c.check(T0 + 1600n * MS - 1n);
    assert.equal(c.status, "held");
    c.check(T0 + 1600n * MS);
    assert.equal(c.status, "lost");
    assert.equal(c.loss?.reason, "expired");
    assert.equal(c.nextWake(), null);
  });

  it("a reply read after the deadline brings nothing back", () => {
    const c = claim();
    c.receive(acquired(4n), T0 + 1600n * MS);
    assert.equal(c.status, "lost");
    assert.equal(c.loss?.reason, "expired");
  });

  it("ERROR codes and violations give their reasons", () => {
    const cases: [Buffer, string, number | undefined][] = [
      [Buffer.from("\x13\x02\x05force", "latin1"), "forced", 2],
      [Buffer.from([0x13, 0x01, 0x00]), "shutdown", 1],
      [Buffer.from([0x13, 0x18, 0x00]), "server_error", 0x18],
      [Buffer.from([0x7f]), "protocol", undefined],
    ];
    for (const [data, reason, code] of cases) {
      const c = claim();
      c.receive(data, T0 + MS);
      assert.ok(c.loss instanceof LockLostError);
      assert.equal(c.loss.reason, reason);
      assert.equal(c.loss.code, code);
    }
    let c = claim();
    c.receive(Buffer.from([0x13, 0x18, 0x00]), T0);
    assert.equal(c.loss?.isTemporary, false);
    c = claim();
    c.receive(Buffer.concat([acquired(1n), Buffer.from([0x13, 0x02, 0x00])]), T0);
    assert.equal(c.loss?.isTemporary, true);
    assert.match(String(c.loss?.message), /0x02 \(closed by administrator\)/);
  });

  it("the first reason wins", () => {
    const c = claim();
    c.receive(Buffer.concat([acquired(1n), Buffer.from([0x13, 0x01, 0x00])]), T0);
    c.closed();
    c.closed(new Error("reset"));
    assert.equal(c.loss?.reason, "shutdown");
  });

  it("a connection that ends is the connection reason, with its cause", () => {
    const c = claim();
    const cause = new Error("read ECONNRESET");
    c.closed(cause);
    assert.equal(c.loss?.reason, "connection");
    assert.equal(c.loss?.cause, cause);
    assert.equal(c.loss?.isTemporary, true);
  });
});
