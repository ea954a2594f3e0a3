/** No handle, timer or descriptor left behind by many cycles (a server of
 * its own and nothing else running in this file, so the counts are exact). */

import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { after, before, describe, it } from "node:test";

import { UnsupportedError } from "../src/index.js";
import { Client, eventually, PROTOCOL, Server } from "./support.js";

let server: Server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  await server.stop();
});

describe("many cycles", () => {
  it("leaves no handle, timer or descriptor behind after 1000 lock cycles", async () => {
    const client = new Client(server.addr);
    // Resources by kind (TCPSocketWrap, Timeout, ...). The test runner's
    // own timers may end meanwhile, so a kind may only shrink; sockets may not.
    const resources = (): Map<string, number> => {
      const counts = new Map<string, number>();
      for (const kind of process.getActiveResourcesInfo()) {
        counts.set(kind, (counts.get(kind) ?? 0) + 1);
      }
      return counts;
    };
    const fds = (): number => readdirSync("/proc/self/fd").length;
    const warm = await client.lock("cycles", { lease: 5000 });
    await warm.release();
    const before = { resources: resources(), fds: fds() };
    for (let i = 0; i < 1000; i++) {
      await using lock = await client.lock("cycles", { lease: 5000 });
      assert.ok(lock.isHeld());
    }
    // A busy try leaves no trace in the queue, and a release is
    // confirmed: the next try finds the lock free, v1 and v2.
    for (let i = 0; i < 200; i++) {
      const busy = await client.lock("cycles", { lease: 5000 });
      assert.equal(await client.tryLock("cycles", { lease: 5000 }), null);
      await busy.release();
      const free = await client.tryLock("cycles", { lease: 5000 });
      assert.ok(free !== null, `cycle ${i}: busy after a confirmed release`);
      await free.release();
    }
    // A handle closes on a later turn of the loop than its last event.
    await eventually("the descriptors closed", () => fds() <= before.fds).catch(() => {});
    const left = resources();
    assert.equal(left.get("TCPSocketWrap") ?? 0, before.resources.get("TCPSocketWrap") ?? 0);
    for (const [kind, count] of left) {
      assert.ok(count <= (before.resources.get(kind) ?? 0), `${count} x ${kind} left`);
    }
    assert.equal(fds(), before.fds);
  });

  it("leaves no handle, timer or descriptor behind after 500 observations and lookups", async () => {
    const client = new Client(server.addr);
    if (PROTOCOL === 1) {
      await assert.rejects(client.observe("watched").next(), UnsupportedError);
      return;
    }
    const resources = (): Map<string, number> => {
      const counts = new Map<string, number>();
      for (const kind of process.getActiveResourcesInfo()) counts.set(kind, (counts.get(kind) ?? 0) + 1);
      return counts;
    };
    const fds = (): number => readdirSync("/proc/self/fd").length;
    await client.holder("watched");
    // The admin API's kept-alive connection is open before, as after.
    assert.equal(await server.watches(), 0);
    const before = { resources: resources(), fds: fds() };
    for (let i = 0; i < 500; i++) {
      const states = client.observe("watched");
      assert.equal((await states.next()).value?.event, "free");
      await states.return();
      assert.equal((await client.holder("watched")).event, "free");
    }
    await eventually("the server counting no watch", async () => (await server.watches()) === 0);
    assert.equal(client.sessions, 1, "every watch and lookup rode on the one session");
    // The last UNOBSERVED read, the idle session keeps the process alive no more.
    const sockets = before.resources.get("TCPSocketWrap") ?? 0;
    await eventually("the session idle", () => (resources().get("TCPSocketWrap") ?? 0) === sockets);
    const left = resources();
    for (const [kind, count] of left) {
      assert.ok(count <= (before.resources.get(kind) ?? 0), `${count} x ${kind} left`);
    }
    assert.equal(fds(), before.fds);
    client.close();
  });
});
