/** The conformance driver speaks DRIVER.md: a short session over its pipes. */

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import path from "node:path";
import { createInterface } from "node:readline";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";

import { Server } from "./support.js";

const DRIVER = path.join(
  path.dirname(fileURLToPath(import.meta.url)),
  "..",
  "conformance",
  "driver.js",
);

describe("the conformance driver", () => {
  for (const forceV1 of [false, true]) {
    it(`answers each command in order, one line each, and exits 0 at the end of input (force_v1: ${forceV1})`, async () => {
      await using server = await Server.start();
      const driver = spawn(process.execPath, [DRIVER], { stdio: ["pipe", "pipe", "inherit"] });
      const replies = createInterface({ input: driver.stdout })[Symbol.asyncIterator]();
      let id = 0;
      const send = async (command: Record<string, unknown>): Promise<Record<string, unknown>> => {
        id += 1;
        driver.stdin.write(`${JSON.stringify({ id, ...command })}\n`);
        const { value } = await replies.next();
        const reply = JSON.parse(String(value)) as Record<string, unknown>;
        assert.equal(reply.id, id);
        return reply;
      };
      assert.deepEqual(await send({ cmd: "open", address: server.addr, force_v1: forceV1 }), { id: 1, ok: true });
      const locked = await send({ cmd: "lock", handle: "a", name: "d", lease_ms: 5000 });
      assert.equal(locked.ok, true);
      assert.equal((await server.sessions()).length, forceV1 ? 0 : 1, "v2 unless forced to v1");
      assert.match(String(locked.token), /^[0-9]+$/);
      assert.equal(BigInt((await server.lock("d"))?.holder?.token ?? -1), BigInt(String(locked.token)));
      assert.deepEqual(await send({ cmd: "try_lock", handle: "b", name: "d", lease_ms: 5000 }), {
        id: 3,
        ok: true,
        acquired: false,
      });
      const late = await send({ cmd: "lock", handle: "c", name: "d", lease_ms: 5000, wait_ms: 50 });
      assert.deepEqual(
        { kind: (late.error as { kind: string }).kind, temporary: (late.error as { temporary: boolean }).temporary },
        { kind: "not_acquired", temporary: true },
      );
      await server.forceRelease("d");
      const lost = await send({ cmd: "wait_lost", handle: "a", timeout_ms: 20_000 });
      assert.deepEqual({ ...lost, message: undefined }, {
        id: 5,
        ok: true,
        lost: true,
        reason: "forced",
        message: undefined,
      });
      assert.match(String(lost.message), /^lock "d" lost \(forced\): /);
      const check = await send({ cmd: "check", handle: "a" });
      assert.deepEqual(
        { kind: (check.error as { kind: string }).kind, reason: (check.error as { reason: string }).reason },
        { kind: "lost", reason: "forced" },
      );
      assert.equal(((await send({ cmd: "check", handle: "zz" })).error as { kind: string }).kind, "unknown_handle");
      const bad = await send({ cmd: "lock", handle: "e", name: "", lease_ms: 5000 });
      assert.equal((bad.error as { kind: string }).kind, "invalid_argument");
      assert.equal((bad.error as { temporary: boolean }).temporary, false);
      assert.deepEqual(await send({ cmd: "cycles", name: "c", lease_ms: 5000, count: 50 }), {
        id: 9,
        ok: true,
        count: 50,
      });
      assert.equal(((await send({ cmd: "nope" })).error as { kind: string }).kind, "other");
      assert.equal((await send({ cmd: "lock", handle: "f", name: "held", lease_ms: 5000 })).ok, true);
      const exited = new Promise<number | null>((resolve) => driver.once("exit", resolve));
      driver.stdin.end();
      assert.equal(await exited, 0);
      assert.equal(await server.lock("held"), null, "the end of input released every handle");
    });
  }
});
