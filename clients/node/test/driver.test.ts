/** The conformance driver speaks DRIVER.md: a short session over its pipes. */

import assert from "node:assert/strict";
import { type ChildProcessByStdio, spawn } from "node:child_process";
import path from "node:path";
import { createInterface } from "node:readline";
import type { Readable, Writable } from "node:stream";
import { afterEach, describe, it } from "node:test";
import { fileURLToPath } from "node:url";

import { Server } from "./support.js";

const DRIVER = path.join(
  path.dirname(fileURLToPath(import.meta.url)),
  "..",
  "conformance",
  "driver.js",
);

/** Drivers still running: a test that fails midway leaves its driver
 * waiting on stdin, which would keep this file's process alive. */
type Driver = ChildProcessByStdio<Writable, Readable, null>;
const running = new Set<Driver>();

function startDriver(): Driver {
  const driver = spawn(process.execPath, [DRIVER], { stdio: ["pipe", "pipe", "inherit"] });
  running.add(driver);
  driver.once("exit", () => running.delete(driver));
  return driver;
}

describe("the conformance driver", () => {
  afterEach(() => {
    for (const driver of running) driver.kill("SIGKILL");
  });

  for (const forceV1 of [false, true]) {
    it(`answers each command in order, one line each, and exits 0 at the end of input (force_v1: ${forceV1})`, async () => {
      await using server = await Server.start();
      const driver = startDriver();
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

  it("speaks the commands of values, observers and elections", async () => {
    await using server = await Server.start();
    await using doomed = await Server.start();
    const driver = startDriver();
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
    const ok = async (command: Record<string, unknown>): Promise<Record<string, unknown>> => {
      const reply = await send(command);
      assert.equal(reply.ok, true, JSON.stringify(reply));
      const { id: _, ok: __, ...fields } = reply;
      return fields;
    };
    const state = (fields: Record<string, unknown>): Record<string, unknown> => ({
      held: false,
      token: "0",
      value: "",
      event: "free",
      initial: false,
      coalesced: false,
      reason: null,
      ...fields,
    });

    await ok({ cmd: "open", address: server.addr });
    const { token } = await ok({ cmd: "lock", handle: "a", name: "x", lease_ms: 5000, value: "10.0.0.7:9000" });
    assert.deepEqual(await ok({ cmd: "holder", name: "x" }), {
      state: state({ held: true, token, value: "10.0.0.7:9000", event: "held" }),
    });
    assert.deepEqual(await ok({ cmd: "observe", handle: "w", name: "x" }), {
      state: state({ held: true, token, value: "10.0.0.7:9000", event: "held", initial: true }),
    });
    assert.deepEqual(await ok({ cmd: "set_value", handle: "a", value: "10.0.0.7:9001" }), {});
    assert.deepEqual(await ok({ cmd: "next_state", handle: "w", timeout_ms: 20_000 }), {
      state: state({ held: true, token, value: "10.0.0.7:9001", event: "value" }),
    });
    assert.deepEqual(await ok({ cmd: "next_state", handle: "w", timeout_ms: 50 }), { timeout: true });
    await ok({ cmd: "release", handle: "a" });
    // The state that arrived after the timed-out read is not skipped.
    assert.deepEqual(await ok({ cmd: "next_state", handle: "w", timeout_ms: 20_000 }), {
      state: state({ token, event: "released", reason: "released" }),
    });
    assert.deepEqual(await ok({ cmd: "unobserve", handle: "w" }), {});
    assert.equal(((await send({ cmd: "next_state", handle: "w", timeout_ms: 10 })).error as { kind: string }).kind, "unknown_handle");

    await ok({ cmd: "elect", handle: "e", name: "lead", lease_ms: 5000, value: "me" });
    const events: Record<string, unknown>[] = [];
    for (let i = 0; i < 2; i++) {
      events.push((await ok({ cmd: "next_election_event", handle: "e", timeout_ms: 20_000 })).event as Record<string, unknown>);
    }
    const started = events.find((e) => e.kind === "started_leading");
    assert.ok(started !== undefined, JSON.stringify(events));
    assert.deepEqual(events.find((e) => e.kind === "new_leader"), { kind: "new_leader", token: started.token, value: "me" });
    assert.equal(BigInt((await server.lock("lead"))?.holder?.token ?? -1), BigInt(String(started.token)));
    assert.deepEqual(await ok({ cmd: "next_election_event", handle: "e", timeout_ms: 50 }), { timeout: true });
    assert.deepEqual(await ok({ cmd: "resign", handle: "e" }), {});
    assert.equal(await server.lock("lead"), null, "resign released the lock");
    assert.deepEqual(await ok({ cmd: "next_election_event", handle: "e", timeout_ms: 20_000 }), {
      event: { kind: "stopped_leading" },
    });

    // The end of the session ends the observation: lost, with the reason.
    await ok({ cmd: "open", address: doomed.addr });
    await ok({ cmd: "observe", handle: "k", name: "k" });
    doomed.signal("SIGKILL");
    const ended = await send({ cmd: "next_state", handle: "k", timeout_ms: 20_000 });
    assert.deepEqual(
      { ...(ended.error as Record<string, unknown>), message: undefined },
      { kind: "lost", reason: "connection", temporary: true, message: undefined },
    );
    assert.match(String((ended.error as { message: string }).message), /^observation of lock "k" ended \(connection\): /);

    // Forced to v1: unsupported, not temporary.
    await ok({ cmd: "open", address: server.addr, force_v1: true });
    for (const command of [
      { cmd: "lock", handle: "v", name: "x", lease_ms: 5000, value: "x" },
      { cmd: "holder", name: "x" },
      { cmd: "observe", handle: "v", name: "x" },
      { cmd: "elect", handle: "v", name: "x", lease_ms: 5000, value: "x" },
    ]) {
      const refused = (await send(command)).error as Record<string, unknown>;
      assert.deepEqual(
        { kind: refused.kind, temporary: refused.temporary, message: refused.message },
        { kind: "unsupported", temporary: false, message: "protocol version 1 has no lock values or observers" },
      );
    }
    const exited = new Promise<number | null>((resolve) => driver.once("exit", resolve));
    driver.stdin.end();
    assert.equal(await exited, 0);
  });
});
