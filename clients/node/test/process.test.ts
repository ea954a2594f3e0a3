/** What the client leaves in the process: nothing once no lock is held. */

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";

import { Client, eventually, PATIENCE, Server } from "./support.js";

/** How long a child may take to exit once it has nothing left to do. */
const EXIT_WITHIN = 10_000;

const CHILD = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures", "child.js");

let server: Server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  await server.stop();
});

interface Run {
  /** Resolves with each line the child prints, in order. */
  line(): Promise<string>;
  /** Resolves with the exit code; fails if the child is still running EXIT_WITHIN after. */
  exit(): Promise<number | null>;
}

function runChild(mode: string): Run {
  const child = spawn(process.execPath, [CHILD, server.addr, mode], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const lines: string[] = [];
  const wakers: (() => void)[] = [];
  let rest = "";
  child.stdout.setEncoding("utf8");
  child.stdout.on("data", (chunk: string) => {
    rest += chunk;
    const parts = rest.split("\n");
    rest = parts.pop() ?? "";
    lines.push(...parts);
    for (const wake of wakers.splice(0)) wake();
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
  return {
    async line() {
      const end = performance.now() + PATIENCE;
      while (lines.length === 0) {
        if (performance.now() > end || child.exitCode !== null) {
          throw new Error(`the child printed nothing more (mode ${mode})`);
        }
        await Promise.race([
          new Promise<void>((resolve) => wakers.push(resolve)),
          exited,
          new Promise((resolve) => setTimeout(resolve, 100)),
        ]);
      }
      return lines.shift() as string;
    },
    async exit() {
      // The child's lease is 60 s, so a heartbeat timer left armed would
      // fire 15 s after the grant: an exit well before that is the client
      // letting go of the event loop, not a timer running out.
      const since = performance.now();
      const timer = setTimeout(() => child.kill("SIGKILL"), EXIT_WITHIN);
      const code = await exited;
      clearTimeout(timer);
      assert.notEqual(
        child.signalCode,
        "SIGKILL",
        `the child (mode ${mode}) was still running ${EXIT_WITHIN} ms after its last line`,
      );
      assert.ok(performance.now() - since < EXIT_WITHIN);
      return code;
    },
  };
}

describe("the process", () => {
  it("exits by itself once its lock is released", async () => {
    const child = runChild("release");
    assert.equal(await child.line(), "held");
    assert.equal(await child.line(), "released");
    assert.equal(await child.exit(), 0);
  });

  it("stays up while it holds a lock, and exits by itself once it is lost", async () => {
    const child = runChild("lost");
    assert.equal(await child.line(), "held");
    await eventually("the child's lock", async () => (await server.lock("exit/lost")) !== null);
    await server.forceRelease("exit/lost");
    assert.equal(await child.line(), "lost forced");
    assert.equal(await child.exit(), 0);
  });

  it("exits by itself after a wait that gave up", async () => {
    const holder = await new Client(server.addr).lock("exit/busy", { lease: 60_000 });
    try {
      const child = runChild("gave-up");
      assert.equal(await child.line(), "not acquired");
      assert.equal(await child.exit(), 0);
    } finally {
      await holder.release();
    }
  });
});
