/**
 * Protocol v1 against v2, side by side in one run, against one server
 * (and one TLS server) started here: the same client, once forced to v1
 * (`{ protocol: 1 }`) and once on its default (v2).
 *
 * - cycle p50 and cycles/s with 1 task: `lock` + `release` on one name,
 *   uncontended (each release confirmed by the server);
 * - cycles/s with 16 concurrent tasks, each on its own name, one client;
 * - 1,000 locks held by one client: connections (v2: the admin API's
 *   `/api/sessions`; v1: one per lock), descriptors added to the process
 *   (/proc/self/fd) and the client's CPU time over 3 s of holding (lease
 *   10 s: heartbeats only);
 * - cycles/s with 1 task over TLS.
 *
 * Usage: MONOLOCK_BIN=target/release/monolock node dist/bench/v1v2.js
 * [--cycles N] (`npm run bench:v1v2 -- --cycles N` in clients/node). The
 * TLS server takes the test PKI ($MONOLOCK_TEST_PKI, else one made with
 * the `openssl` command).
 */

import { readdirSync } from "node:fs";

import { Client, type ClientOptions, type Lock } from "../src/index.js";
import { clientTls, Server, tlsArgs } from "../test/support.js";

const WARM_UP = 200;
const LEASE = 10_000;
const HELD = 1000;
const HOLD_MS = 3000;
const TASKS = 16;

const at = process.argv.indexOf("--cycles");
const CYCLES = at >= 0 ? Number(process.argv[at + 1]) : 3000;
if (!(CYCLES > 0)) throw new Error("--cycles takes a positive number");

const fds = (): number => readdirSync("/proc/self/fd").length;

interface Figures {
  p50: number;
  perSecond1: number;
  perSecond16: number;
  connections: number;
  descriptors: number;
  cpuMs: number;
  tlsPerSecond: number;
}

/** `count` cycles on one client after a warm-up: p50 in µs and cycles/s. */
async function cycles(client: Client, name: string, count: number): Promise<{ p50: number; perSecond: number }> {
  for (let i = 0; i < WARM_UP; i++) await (await client.lock(name, { lease: LEASE })).release();
  const samples: number[] = [];
  const start = performance.now();
  for (let i = 0; i < count; i++) {
    const began = performance.now();
    const lock = await client.lock(name, { lease: LEASE });
    await lock.release();
    samples.push((performance.now() - began) * 1000);
  }
  const elapsed = performance.now() - start;
  samples.sort((a, b) => a - b);
  return { p50: samples[Math.floor(samples.length / 2)] ?? NaN, perSecond: (count / elapsed) * 1000 };
}

async function concurrent(client: Client, count: number): Promise<number> {
  const perTask = Math.ceil(count / TASKS);
  const task = async (t: number): Promise<void> => {
    for (let i = 0; i < perTask; i++) await (await client.lock(`bench/task/${t}`, { lease: LEASE })).release();
  };
  await Promise.all(Array.from({ length: TASKS }, (_, t) => task(t)));
  const start = performance.now();
  await Promise.all(Array.from({ length: TASKS }, (_, t) => task(t)));
  return ((perTask * TASKS) / (performance.now() - start)) * 1000;
}

async function held(server: Server, options: ClientOptions): Promise<Pick<Figures, "connections" | "descriptors" | "cpuMs">> {
  const client = new Client(server.addr, options);
  const before = fds();
  const locks: Lock[] = [];
  for (let i = 0; i < HELD; i += 100) {
    locks.push(...(await Promise.all(Array.from({ length: 100 }, (_, j) => client.lock(`bench/held/${i + j}`, { lease: LEASE })))));
  }
  const descriptors = fds() - before;
  const sessions = (await (await fetch(`http://${server.admin}/api/sessions`)).json()) as unknown;
  const listed = Array.isArray(sessions) ? sessions.length : ((sessions as { sessions?: unknown[] }).sessions?.length ?? 0);
  // v1: a connection per lock (each lock's own); v2: the sessions the server lists.
  const connections = options.protocol === 1 ? locks.filter((l) => l.protocol === 1).length : listed;
  if (options.protocol !== 1 && listed !== client.sessions) {
    throw new Error(`the server lists ${listed} sessions, the client has ${client.sessions}`);
  }
  const cpu = process.cpuUsage();
  await new Promise((resolve) => setTimeout(resolve, HOLD_MS));
  const used = process.cpuUsage(cpu);
  const cpuMs = (used.user + used.system) / 1000;
  if (!locks.every((lock) => lock.isHeld())) throw new Error("a lock was lost while held");
  await Promise.all(locks.map((lock) => lock.release()));
  client.close();
  return { connections, descriptors, cpuMs };
}

async function measure(plain: Server, secure: Server, protocol: 1 | 2): Promise<Figures> {
  // Each client's sessions are closed after its row: the next row counts its own.
  const client = new Client(plain.addr, { protocol });
  const one = await cycles(client, `bench/one/v${protocol}`, CYCLES);
  const perSecond16 = await concurrent(client, CYCLES * 2);
  client.close();
  const holding = await held(plain, { protocol });
  const overTls = new Client(secure.addr, { protocol, tls: clientTls(false) });
  const tls = await cycles(overTls, `bench/tls/v${protocol}`, Math.ceil(CYCLES / 2));
  overTls.close();
  return { p50: one.p50, perSecond1: one.perSecond, perSecond16, ...holding, tlsPerSecond: tls.perSecond };
}

await using plain = await Server.start();
await using secure = await Server.start(...tlsArgs(false));
const v1 = await measure(plain, secure, 1);
const v2 = await measure(plain, secure, 2);

const rows: [string, (f: Figures) => number, string][] = [
  ["cycle p50 (µs), 1 task", (f) => f.p50, "µs"],
  ["cycles/s, 1 task", (f) => f.perSecond1, ""],
  [`cycles/s, ${TASKS} tasks`, (f) => f.perSecond16, ""],
  [`connections, ${HELD} locks held`, (f) => f.connections, ""],
  [`descriptors added, ${HELD} locks held`, (f) => f.descriptors, ""],
  [`client CPU ms over ${HOLD_MS / 1000} s, ${HELD} locks held`, (f) => f.cpuMs, ""],
  ["TLS cycles/s, 1 task", (f) => f.tlsPerSecond, ""],
];
console.log(`${CYCLES} cycles per row after ${WARM_UP} warm-up, lease ${LEASE} ms, Node ${process.version}`);
console.log("| figure | v1 (`{ protocol: 1 }`) | v2 (default) | v2 / v1 |");
console.log("|---|---|---|---|");
for (const [label, pick] of rows) {
  const a = pick(v1);
  const b = pick(v2);
  const format = (n: number): string =>
    n >= 100 || Number.isInteger(n) ? Math.round(n).toLocaleString("en-US") : n.toFixed(1);
  console.log(`| ${label} | ${format(a)} | ${format(b)} | ${(b / a).toFixed(2)} |`);
}
