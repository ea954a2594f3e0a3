/**
 * Uncontended lock cycle, side by side in one run against one server: this
 * client (`lock` + `release`, and `tryLock` + `await using`), the Python
 * client's sync and asyncio cycles from clients/python/bench/cycle.py, and
 * `redlock` against one Redis when both are at hand.
 *
 * The Node rows run on the client's default protocol (v2: ACQUIRE,
 * ACQUIRED, RELEASE, RELEASED on a pooled session; `bench/v1v2.ts` sets it
 * against v1). `release()` resolves once the server has confirmed it.
 *
 * Usage: MONOLOCK_BIN=target/release/monolock node dist/bench/cycle.js [--cycles N]
 * (`npm run bench -- --cycles N` in clients/node). Without python3 the
 * Python rows are left out. The redlock row needs `redis-server` (Debian's
 * package) and `npm install --no-save redlock@5.0.0-beta.2 ioredis@5` in
 * clients/node (kept out of package.json: the client's dependencies stay
 * what the client needs); without them it is left out.
 *
 * A redlock cycle is `acquire([name], ttl)` (SET NX PX, no retries) and
 * `release()` (its release script) on one ioredis connection opened once,
 * as redlock users run it.
 */

import { spawn, spawnSync } from "node:child_process";
import net from "node:net";
import path from "node:path";

import { Client } from "../src/index.js";
import { REPO, Server } from "../test/support.js";

const WARM_UP = 200;
const NAME = "bench/cycle";

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))] ?? NaN;
}

interface Row {
  name: string;
  p50: number;
  p99: number;
  perSecond?: number;
}

async function nodeCycles(
  addr: string,
  cycles: number,
  name: string,
  cycle: (client: Client) => Promise<void>,
): Promise<Row> {
  const client = new Client(addr);
  const samples: number[] = [];
  let measured = 0;
  for (let i = 0; i < WARM_UP + cycles; i++) {
    const start = performance.now();
    await cycle(client);
    const took = performance.now() - start;
    if (i >= WARM_UP) {
      samples.push(took * 1000);
      measured += took;
    }
  }
  samples.sort((a, b) => a - b);
  return {
    name,
    p50: percentile(samples, 50),
    p99: percentile(samples, 99),
    perSecond: (cycles / measured) * 1000,
  };
}

/** The Python client's rows, measured by its own bench functions. */
function pythonRows(addr: string, cycles: number): Row[] {
  const bench = path.join(REPO, "clients", "python", "bench");
  const script = [
    "import sys, cycle",
    `for f in (cycle.python_sync, cycle.python_asyncio): print(*f(${JSON.stringify(addr)}, ${cycles}))`,
  ].join("\n");
  const run = spawnSync("python3", ["-c", script], {
    cwd: bench,
    env: { ...process.env, PYTHONPATH: bench },
    encoding: "utf8",
  });
  if (run.status !== 0) {
    console.log(`Python rows left out: ${run.error?.message ?? run.stderr.trim().split("\n").pop()}`);
    return [];
  }
  const lines = run.stdout.trim().split("\n");
  return ["Python client, sync", "Python client, asyncio"].map((name, i) => {
    const [p50, p99] = (lines[i] ?? "").split(" ").map(Number);
    return { name, p50: p50 ?? NaN, p99: p99 ?? NaN };
  });
}

/** A loopback port free right now. */
async function freePort(): Promise<number> {
  const listener = net.createServer();
  await new Promise<void>((resolve) => listener.listen(0, "127.0.0.1", resolve));
  const { port } = listener.address() as net.AddressInfo;
  await new Promise((resolve) => listener.close(resolve));
  return port;
}

/** The redlock row, or null (with why) when redis-server or redlock is missing. */
async function redlockRow(cycles: number): Promise<Row | null> {
  const which = spawnSync("sh", ["-c", "command -v redis-server"], { encoding: "utf8" });
  const redisServer = which.stdout.trim();
  let Redlock: any;
  let Redis: any;
  try {
    // Variable specifiers: these packages are not dependencies of the client.
    const redlockName = "redlock";
    const ioredisName = "ioredis";
    Redlock = (await import(redlockName)).default;
    Redis = (await import(ioredisName)).default;
  } catch {
    console.log("redlock row left out: npm install --no-save redlock@5.0.0-beta.2 ioredis@5");
    return null;
  }
  if (redisServer === "") {
    console.log("redlock row left out: no redis-server (apt-get install redis-server)");
    return null;
  }
  const port = await freePort();
  const redis = spawn(
    redisServer,
    ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
    { stdio: "ignore" },
  );
  const client = new Redis({ host: "127.0.0.1", port, retryStrategy: (n: number) => (n > 100 ? null : 50) });
  client.on("error", () => {}); // refused until redis-server listens; ioredis retries
  try {
    await client.ping();
    const redlock = new Redlock([client], { retryCount: 0 });
    const samples: number[] = [];
    let measured = 0;
    for (let i = 0; i < WARM_UP + cycles; i++) {
      const start = performance.now();
      const lock = await redlock.acquire([NAME], 60_000);
      await lock.release();
      const took = performance.now() - start;
      if (i >= WARM_UP) {
        samples.push(took * 1000);
        measured += took;
      }
    }
    samples.sort((a, b) => a - b);
    return {
      name: "redlock 5.0.0-beta.2 on ioredis (SET NX PX + release script)",
      p50: percentile(samples, 50),
      p99: percentile(samples, 99),
      perSecond: (cycles / measured) * 1000,
    };
  } finally {
    client.disconnect();
    redis.kill("SIGTERM");
  }
}

const at = process.argv.indexOf("--cycles");
const cycles = at >= 0 ? Number(process.argv[at + 1]) : 5000;
if (!(cycles > 0)) throw new Error("--cycles takes a positive number");

const server = await Server.start();
const rows: Row[] = [];
try {
  rows.push(
    await nodeCycles(server.addr, cycles, "Node client, `lock` + `release`", async (client) => {
      const lock = await client.lock(NAME, { lease: 60_000 });
      await lock.release();
    }),
  );
  rows.push(
    await nodeCycles(server.addr, cycles, "Node client, `tryLock` + `await using`", async (client) => {
      await using lock = await client.tryLock(NAME, { lease: 60_000 });
      if (lock === null) throw new Error("the lock was busy");
    }),
  );
  rows.push(...pythonRows(server.addr, cycles));
} finally {
  await server.stop();
}
const redlock = await redlockRow(cycles);
if (redlock !== null) rows.push(redlock);

const base = rows[0]?.p50 ?? NaN;
console.log(
  `node ${process.version}, server ${process.env.MONOLOCK_BIN ?? "(default)"}, ` +
    `${cycles} cycles each after ${WARM_UP} warm-up, one at a time`,
);
console.log("| client | cycle p50 | cycle p99 | cycles/s | p50 / Node client |");
console.log("|---|---|---|---|---|");
for (const row of rows) {
  const perSecond = row.perSecond === undefined ? "—" : row.perSecond.toFixed(0);
  console.log(
    `| ${row.name} | ${row.p50.toFixed(0)} µs | ${row.p99.toFixed(0)} µs | ${perSecond} | ${(row.p50 / base).toFixed(2)} |`,
  );
}
