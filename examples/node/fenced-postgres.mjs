#!/usr/bin/env node
// A job that takes a lock and writes its result to PostgreSQL, fenced by
// the lock's token: a holder that was paused past its lease and resumed
// after a newer holder wrote finds its write refused (0 rows) and stops.
//
//   cd examples/node && npm ci
//   DATABASE_URL=postgres://app@db.internal/app node examples/node/fenced-postgres.mjs --job nightly-import
//
// Exit codes are those of `monolock exec`: 0 written, 64 usage, 69 lock
// server or database unreachable, 75 busy with --no-wait, 79 the lock was
// lost or the write was fenced off, 1 another database error.

import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { fileURLToPath, pathToFileURL } from "node:url";

import { ADDRESS_ENV, Client, DEFAULT_ADDRESS, MonolockError } from "monolock";
import pg from "pg";

const PROGRAM = "fenced-postgres.mjs";

const USAGE = 64;
const UNAVAILABLE = 69;
const NOT_ACQUIRED = 75;
const LOST = 79;
const FAILURE = 1;

// The statement of the Rust and Python forms, from the same file: $1 job,
// $2 token as decimal text, $3 result.
const FENCED_WRITE = readFileSync(
  fileURLToPath(new URL("../sql/fenced-write.sql", import.meta.url)),
  "utf8",
);

const CONNECT_TIMEOUT_MS = 5_000;

/** Why the job stops: one line for stderr and the exit code. */
class Failure extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

/** Connects to the database; the messages never repeat the URL, which may
 * hold a password. */
export async function connect(url) {
  try {
    new URL(url);
  } catch {
    throw new Failure(USAGE, "invalid DATABASE_URL: expected postgres://USER@HOST:PORT/DATABASE");
  }
  const db = new pg.Client({ connectionString: url, connectionTimeoutMillis: CONNECT_TIMEOUT_MS });
  // A connection that fails later (the server restarts) surfaces in the
  // next query; without a listener the error would end the process.
  db.on("error", () => {});
  try {
    await db.connect();
  } catch (err) {
    throw new Failure(UNAVAILABLE, `cannot connect to the database: ${oneLine(err, url)}`);
  }
  return db;
}

/**
 * Writes `result` for `job` under `token` (a bigint). False: the row holds a
 * newer token, the write was refused and this holder must stop.
 *
 * The token travels as decimal text into a numeric(20,0) column: tokens
 * are u64, PostgreSQL has no unsigned 64-bit type, a bigint stops at
 * 2^63 - 1, and a JavaScript number is exact only below 2^53.
 */
export async function write(db, job, token, result) {
  const { rowCount } = await db.query(FENCED_WRITE, [job, token.toString(), result]);
  return rowCount === 1;
}

async function run(args) {
  // The database first: a job that cannot write should not take the lock.
  if (!args.databaseUrl) {
    throw new Failure(USAGE, "no database to write to: set DATABASE_URL or pass --database-url");
  }
  const db = await connect(args.databaseUrl);
  try {
    const lock = await acquire(args);
    try {
      await holding(args, db, lock);
    } finally {
      // Idempotent and never throws: on the way out of a failure the lock
      // is let go at once (the success path released it and checked).
      await lock[Symbol.asyncDispose]();
    }
  } finally {
    await db.end().catch(() => {});
  }
}

/** The job while it holds the lock: work, check, (pause,) fenced write, release. */
async function holding(args, db, lock) {
  say(`holding ${args.job} under token ${lock.token}`);

  const result = args.result ?? work();
  // Check right before the write, and fence the write anyway: a pause can
  // strike between the check and the write.
  if (!lock.isHeld()) {
    throw new Failure(LOST, `lost the lock before writing: ${lock.loss?.message}`);
  }
  if (!["", "0", "false", "no", "off"].includes((process.env.PAUSE_BEFORE_WRITE ?? "").toLowerCase())) {
    pause();
  }
  let written;
  try {
    written = await write(db, args.job, lock.token, result);
  } catch (err) {
    throw new Failure(FAILURE, `writing ${args.job}: ${oneLine(err, args.databaseUrl)}`);
  }
  if (!written) {
    throw new Failure(
      LOST,
      `fenced off: a newer holder of ${args.job} has written; token ${lock.token} refused`,
    );
  }
  say(`wrote ${args.job} under token ${lock.token}`);
  try {
    await lock.release();
  } catch (err) {
    throw new Failure(
      LOST,
      `the lock was lost before the end (the write itself was fenced): ${err.message}`,
    );
  }
}

/** Queues for the lock (or only tries, with --no-wait). */
async function acquire(args) {
  let lock;
  try {
    const client = new Client(args.server);
    const options = { lease: args.lease };
    lock = args.noWait ? await client.tryLock(args.job, options) : await client.lock(args.job, options);
  } catch (err) {
    if (!(err instanceof MonolockError)) throw err;
    const code = err.isTemporary ? UNAVAILABLE : USAGE;
    throw new Failure(code, `cannot acquire lock ${JSON.stringify(args.job)}: ${err.message}`);
  }
  if (lock === null) throw new Failure(NOT_ACQUIRED, `lock ${JSON.stringify(args.job)} is busy`);
  return lock;
}

/** The job's real work; here, a result to write. */
function work() {
  return `imported by pid ${process.pid}`;
}

/** Stops this process as a GC pause or a suspended VM would; returns once
 * it is continued (kill -CONT). */
function pause() {
  process.stderr.write(`${PROGRAM}: pausing before the write (kill -CONT ${process.pid})\n`);
  process.kill(process.pid, "SIGSTOP");
}

function say(line) {
  process.stdout.write(`${line}\n`);
}

function oneLine(err, secret) {
  const text = String(err?.message ?? err).split(/\s+/).join(" ");
  return secret ? text.replaceAll(secret, "...") : text;
}

/** A duration as `monolock exec --lease` takes it (500ms, 2s, 1m, 1h), in ms. */
function duration(text) {
  const match = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)\s*$/.exec(text);
  if (match === null) throw new Failure(USAGE, `invalid duration ${JSON.stringify(text)} (e.g. 500ms, 2s, 1m)`);
  return Number(match[1]) * { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 }[match[2]];
}

function parse(argv) {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        job: { type: "string", default: "nightly-import" },
        "database-url": { type: "string", default: process.env.DATABASE_URL },
        server: { type: "string", default: process.env[ADDRESS_ENV] || DEFAULT_ADDRESS },
        lease: { type: "string", default: "2s" },
        "no-wait": { type: "boolean", default: false },
        result: { type: "string" },
      },
    }));
  } catch (err) {
    throw new Failure(USAGE, `${err.message} (options: --job, --database-url, --server, --lease, --no-wait, --result)`);
  }
  return {
    job: values.job,
    databaseUrl: values["database-url"],
    server: values.server,
    lease: duration(values.lease),
    noWait: values["no-wait"],
    result: values.result,
  };
}

async function main() {
  try {
    await run(parse(process.argv.slice(2)));
    return 0;
  } catch (err) {
    if (!(err instanceof Failure)) throw err;
    process.stderr.write(`${PROGRAM}: ${err.message}\n`);
    return err.code;
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = await main();
}
