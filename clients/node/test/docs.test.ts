/**
 * Every example of docs/client-node.md, the README's Node snippet and the
 * client README's part on values, observers and elections, run
 * as written against the real server: each fenced block marked with a
 * language is a program (`ts`: compiled with the `json` block, the
 * tsconfig.json the doc gives; `mjs`: run as it is), in a fresh project
 * that installs the package from its directory. Blocks without a language
 * are settings or shell lines, not programs.
 */

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";

import { PATIENCE, REPO, Server } from "./support.js";

const run = promisify(execFile);
const PACKAGE = path.join(REPO, "clients", "node");

interface Block {
  readonly language: string;
  readonly code: string;
  readonly where: string;
}

/** The fenced blocks of `text` (which starts at line `firstLine` of
 * `file`) that are marked with a language. */
function blocks(text: string, file: string, firstLine = 1): Block[] {
  const found: Block[] = [];
  const fence = /^```([A-Za-z0-9]+)\n([\s\S]*?)^```$/gm;
  for (const match of text.matchAll(fence)) {
    const line = text.slice(0, match.index).split("\n").length + firstLine - 1;
    found.push({ language: match[1]!, code: match[2]!, where: `${file}:${line}` });
  }
  return found;
}

const doc = readFileSync(path.join(REPO, "docs", "client-node.md"), "utf8");
const readme = readFileSync(path.join(REPO, "README.md"), "utf8");
const nodeSection = readme.slice(readme.indexOf("## From Node.js"));
const clientReadme = readFileSync(path.join(PACKAGE, "README.md"), "utf8");
const EXTENSION_HEADING = "## Lock values, observers and leader election";
const examples = [
  ...blocks(doc, "docs/client-node.md"),
  ...blocks(nodeSection.slice(0, nodeSection.indexOf("\n## ", 3)), "README.md"),
  ...blocks(
    clientReadme.slice(clientReadme.indexOf(EXTENSION_HEADING)),
    "clients/node/README.md",
    clientReadme.slice(0, clientReadme.indexOf(EXTENSION_HEADING)).split("\n").length,
  ),
];

let server: Server;
let project: string;
before(async () => {
  server = await Server.start();
  project = mkdtempSync(path.join(tmpdir(), "monolock-node-docs-"));
  mkdirSync(path.join(project, "node_modules", "@types"), { recursive: true });
  symlinkSync(PACKAGE, path.join(project, "node_modules", "monolock"));
  symlinkSync(
    path.join(PACKAGE, "node_modules", "@types", "node"),
    path.join(project, "node_modules", "@types", "node"),
  );
  writeFileSync(path.join(project, "package.json"), JSON.stringify({ type: "module", private: true }));
});
after(async () => {
  await server.stop();
  rmSync(project, { recursive: true, force: true });
});

describe("documented examples", () => {
  it("are all programs of a known language, with one tsconfig.json", () => {
    for (const block of examples) {
      assert.ok(["ts", "mjs", "json"].includes(block.language), `${block.where}: ${block.language}`);
    }
    assert.equal(examples.filter((b) => b.language === "json").length, 1);
    assert.ok(examples.filter((b) => b.language === "ts").length >= 5);
    assert.ok(examples.some((b) => b.language === "mjs"));
    assert.ok(examples.some((b) => b.where.startsWith("README.md")), "the README's Node snippet");
    assert.ok(clientReadme.includes(EXTENSION_HEADING));
    assert.equal(
      examples.filter((b) => b.where.startsWith("clients/node/README.md")).length,
      4,
      "one example each: a value, holder(), observe(), LeaderElector",
    );
  });

  it("compile with the documented tsconfig.json and run against the server", async () => {
    const tsconfig = examples.find((b) => b.language === "json")!;
    writeFileSync(path.join(project, "tsconfig.json"), tsconfig.code);
    const programs: { file: string; where: string }[] = [];
    examples.forEach((block, i) => {
      if (block.language === "json") return;
      const name = `example${i}.${block.language}`;
      writeFileSync(path.join(project, name), block.code);
      programs.push({ file: block.language === "ts" ? `example${i}.js` : name, where: block.where });
    });
    const tsc = path.join(PACKAGE, "node_modules", "typescript", "bin", "tsc");
    await run(process.execPath, [tsc, "-p", project], { cwd: project, timeout: 120_000 }).catch(
      (err: { stdout?: string }) => assert.fail(`tsc failed:\n${err.stdout ?? String(err)}`),
    );
    for (const program of programs) {
      const { stdout } = await run(process.execPath, [program.file], {
        cwd: project,
        timeout: PATIENCE,
        env: { ...process.env, MONOLOCK_ADDRESS: server.addr },
      }).catch((err: { stderr?: string }) => assert.fail(`${program.where} failed:\n${err.stderr ?? String(err)}`));
      assert.notEqual(stdout, "", `${program.where} printed nothing`);
    }
  });
});
