/**
 * The package installs with no compiler and no network: `npm pack`, then
 * the tarball (and the directory) installed into fresh projects with an
 * empty cache, npm offline and an unreachable registry, and an example run
 * there against the real server.
 */

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";

import { REPO, Server } from "./support.js";

const run = promisify(execFile);
const PACKAGE = path.join(REPO, "clients", "node");
/** npm may be slow on a loaded machine; only a hang trips this. */
const NPM_PATIENCE = 180_000;

let server: Server;
let scratch: string;
before(async () => {
  server = await Server.start();
  scratch = mkdtempSync(path.join(tmpdir(), "monolock-node-pack-"));
});
after(async () => {
  await server.stop();
  rmSync(scratch, { recursive: true, force: true });
});

/** npm with an empty cache, offline, and a registry nothing answers on. */
function npm(args: string[], cwd: string): Promise<{ stdout: string; stderr: string }> {
  const cache = path.join(scratch, "empty-cache");
  mkdirSync(cache, { recursive: true });
  return run("npm", args, {
    cwd,
    timeout: NPM_PATIENCE,
    env: {
      ...process.env,
      npm_config_cache: cache,
      npm_config_offline: "true",
      npm_config_registry: "http://127.0.0.1:9/",
      npm_config_audit: "false",
      npm_config_fund: "false",
      npm_config_update_notifier: "false",
    },
  });
}

/** A fresh project that installs `spec` and runs a plain-JavaScript example. */
async function installAndRun(name: string, spec: string): Promise<string> {
  const app = path.join(scratch, name);
  mkdirSync(app);
  writeFileSync(
    path.join(app, "package.json"),
    JSON.stringify({ name, version: "1.0.0", private: true, type: "module" }),
  );
  await npm(["install", "--no-save", spec], app);
  writeFileSync(
    path.join(app, "example.mjs"),
    [
      'import { Client } from "monolock";',
      "const client = new Client();",
      'const token = await client.withLock("installed", { lease: 10_000 }, async (lock) => lock.token);',
      "console.log(`held with token ${token}`);",
      "",
    ].join("\n"),
  );
  const { stdout } = await run(process.execPath, ["example.mjs"], {
    cwd: app,
    timeout: NPM_PATIENCE,
    env: { ...process.env, MONOLOCK_ADDRESS: server.addr },
  });
  return stdout;
}

describe("packaging", () => {
  it("the packed tarball ships dist and installs offline with no build step", async () => {
    const { stdout } = await npm(["pack", "--pack-destination", scratch], PACKAGE);
    const tarball = path.join(scratch, stdout.trim().split("\n").pop() ?? "");
    const { stdout: listing } = await run("tar", ["-tzf", tarball]);
    const files = listing.split("\n").filter((line) => line !== "");
    for (const shipped of ["package/dist/src/index.js", "package/dist/src/index.d.ts", "package/package.json"]) {
      assert.ok(files.includes(shipped), `${shipped} is not in the tarball`);
    }
    assert.ok(!files.some((file) => file.startsWith("package/dist/test/")), "tests were packed");
    const manifest = JSON.parse(readFileSync(path.join(PACKAGE, "package.json"), "utf8")) as {
      scripts?: Record<string, string>;
      dependencies?: Record<string, string>;
    };
    for (const hook of ["prepare", "preinstall", "install", "postinstall"]) {
      assert.equal(manifest.scripts?.[hook], undefined, `a ${hook} script runs at install time`);
    }
    assert.equal(manifest.dependencies, undefined, "no runtime dependencies");
    assert.match(await installAndRun("from-tarball", tarball), /^held with token \d+\n$/);
  });

  it("the directory installs offline too", async () => {
    assert.match(await installAndRun("from-path", PACKAGE), /^held with token \d+\n$/);
  });
});
