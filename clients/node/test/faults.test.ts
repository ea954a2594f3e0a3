/** Server faults, each with a server of its own: a stopped server, a
 * blocked event loop, a shutdown. */

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { LockLostError } from "../src/index.js";
import { Client, eventually, PATIENCE, Server } from "./support.js";

/** Resolves with the abort reason and the instant of the abort. */
function aborted(signal: AbortSignal): Promise<[unknown, number]> {
  return new Promise((resolve) =>
    signal.addEventListener("abort", () => resolve([signal.reason, performance.now()]), {
      once: true,
    }),
  );
}

describe("server faults", () => {
  it("a stopped server is given up within 0.8 x lease, before it could expire the session", async () => {
    await using server = await Server.start();
    const lease = 1500;
    const lock = await new Client(server.addr).lock("silent", { lease });
    // Stop the server right after a confirmed heartbeat, so that S is
    // bounded without trusting the client's arithmetic: the confirmed
    // heartbeat's reply arrived between the last look that saw the old
    // deadline and the first that saw the new one, so S is before the
    // latter and at most a round trip before the former.
    const first = lock.deadline;
    let seenOld = performance.now();
    let seenNew = seenOld;
    await eventually("a confirmed heartbeat", () => {
      const before = performance.now();
      if (lock.deadline !== first) {
        seenNew = before;
        return true;
      }
      seenOld = before;
      return false;
    });
    const loss = aborted(lock.signal);
    server.signal("SIGSTOP");
    try {
      const [reason, lostAt] = await loss;
      assert.ok(reason instanceof LockLostError);
      assert.equal(reason.reason, "expired");
      assert.equal(lock.isHeld(), false);
      const lastConfirmedSend = lock.deadline - 0.8 * lease;
      assert.ok(lastConfirmedSend <= seenNew, "the client's S is after its reply was seen");
      assert.ok(lostAt - lastConfirmedSend >= 0.8 * lease - 1, "gave up early");
      assert.ok(lostAt - lastConfirmedSend < lease, "gave up after the server could expire it");
      assert.ok(lostAt - seenOld < 0.9 * lease, "gave up too late");
    } finally {
      server.signal("SIGCONT");
    }
  });

  it("a release the server does not confirm within the I/O timeout resolves false", async () => {
    await using server = await Server.start();
    const client = new Client(server.addr, { ioTimeout: 500 });
    const lock = await client.lock("unconfirmed", { lease: 60_000 });
    await server.pause();
    try {
      const start = performance.now();
      assert.equal(await lock.release(), false);
      assert.ok(performance.now() - start >= 499, "gave up before the I/O timeout");
      assert.equal(lock.isHeld(), false);
      assert.equal(lock.signal.aborted, false, "a release is not a loss");
    } finally {
      server.signal("SIGCONT");
    }
    // The connection was closed: the server lets the lock go.
    await eventually("the lock released", async () => (await server.lock("unconfirmed")) === null);
  });

  it("a blocked event loop reads not held once past the deadline", async () => {
    await using server = await Server.start();
    const lock = await new Client(server.addr).lock("blocked", { lease: 500 });
    assert.ok(lock.isHeld());
    const deadline = lock.deadline;
    // The fault: the loop blocked for a whole lease, no timer can run.
    while (performance.now() <= deadline + 1) {
      // spin
    }
    // Checked before the loop runs any timer or reads any reply.
    assert.equal(lock.isHeld(), false);
    assert.equal(lock.loss?.reason, "expired");
    assert.ok(lock.signal.aborted);
  });

  it("SIGTERM gives the holder and the waiter the shutdown reason", async () => {
    await using server = await Server.start();
    const client = new Client(server.addr);
    const holder = await client.lock("bye", { lease: 5000 });
    const waiter = client.lock("bye", { lease: 5000 }).then(
      () => assert.fail("the waiter was granted"),
      (err: unknown) => err,
    );
    await eventually("the waiter", async () => (await server.waiters("bye")).length === 1);
    const loss = aborted(holder.signal);
    server.signal("SIGTERM");
    const [reason] = await loss;
    assert.ok(reason instanceof LockLostError);
    assert.equal(reason.reason, "shutdown");
    assert.equal(reason.code, 0x01);
    assert.equal(reason.isTemporary, true);
    const refused = await waiter;
    assert.ok(refused instanceof LockLostError);
    assert.equal(refused.reason, "shutdown");
  });

  it("a claim is never moved to the next server", async () => {
    await using primary = await Server.start();
    await using standby = await Server.start();
    const client = new Client([primary.addr, standby.addr]);
    const lock = await client.lock("moved", { lease: 5000 });
    assert.equal(lock.address, primary.addr);
    const loss = aborted(lock.signal);
    primary.signal("SIGTERM");
    assert.equal(((await loss)[0] as LockLostError).reason, "shutdown");
    assert.equal(await standby.lock("moved"), null, "nothing re-acquired behind the caller");
    await primary.exited();
    await using again = await client.lock("moved", { lease: 5000, wait: PATIENCE });
    assert.equal(again.address, standby.addr);
  });
});
