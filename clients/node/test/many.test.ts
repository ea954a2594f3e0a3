/**
 * Many locks from one process: a few connections on v2, one per lock on v1
 * (each file's own server, so the counts are its own).
 */

import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { after, before, describe, it } from "node:test";

import type { Lock } from "../src/index.js";
import { Client, PROTOCOL, Server } from "./support.js";

let server: Server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  await server.stop();
});

const fds = (): number => readdirSync("/proc/self/fd").length;

describe(`many locks (protocol v${PROTOCOL})`, () => {
  it("v2: 1,000 locks on at most a few connections; v1: one connection per lock", async () => {
    const client = new Client(server.addr);
    const count = PROTOCOL === 2 ? 1000 : 50;
    const before = fds();
    const locks: Lock[] = [];
    try {
      // Half taken one by one, half at once: both share the sessions.
      for (let i = 0; i < count / 2; i++) locks.push(await client.lock(`many/${i}`, { lease: 10_000 }));
      locks.push(
        ...(await Promise.all(
          Array.from({ length: count / 2 }, (_, i) => client.lock(`many/${count / 2 + i}`, { lease: 10_000 })),
        )),
      );
      const grown = fds() - before;
      const sessions = await server.sessions();
      if (PROTOCOL === 2) {
        assert.ok(sessions.length >= 1 && sessions.length <= 4, `${sessions.length} sessions`);
        assert.equal(client.sessions, sessions.length);
        assert.ok(grown <= sessions.length + 4, `${count} locks grew the descriptors by ${grown}`);
        assert.ok(locks.every((lock) => lock.protocol === 2));
      } else {
        assert.equal(sessions.length, 0, "forced to v1, the client opened v2 sessions");
        assert.ok(grown >= count, `v1 holds a connection per lock: grew by ${grown}`);
        assert.ok(locks.every((lock) => lock.protocol === 1));
      }
      for (let i = 0; i < count; i += 97) {
        assert.equal(BigInt((await server.lock(`many/${i}`))?.holder?.token ?? -1), locks[i]!.token);
      }
    } finally {
      await Promise.all(locks.map((lock) => lock.release()));
    }
    for (let i = 0; i < count; i += 97) assert.equal(await server.lock(`many/${i}`), null);
  });

  it("lock, release, tryLock on one name 1,000 times: never busy", async () => {
    const client = new Client(server.addr);
    for (let i = 0; i < 1000; i++) {
      const lock = await client.lock("many/cycle", { lease: 5000 });
      assert.equal(await lock.release(), true, "the release was confirmed");
      const again = await client.tryLock("many/cycle", { lease: 5000 });
      assert.ok(again !== null, `cycle ${i}: busy right after a confirmed release`);
      await again.release();
    }
  });

  it("another client's tryLock right after a release finds the lock free", async () => {
    const holder = new Client(server.addr);
    const other = new Client(server.addr);
    for (let i = 0; i < 200; i++) {
      const lock = await holder.lock("many/handover", { lease: 5000 });
      assert.equal(await other.tryLock("many/handover", { lease: 5000 }), null);
      await lock.release();
      const taken = await other.tryLock("many/handover", { lease: 5000 });
      assert.ok(taken !== null, `cycle ${i}: busy right after a confirmed release`);
      await taken.release();
    }
  });
});
