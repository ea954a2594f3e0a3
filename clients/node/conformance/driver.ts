/**
 * The conformance driver of the Node client (clients/conformance/DRIVER.md):
 * one JSON command per line on stdin, one JSON reply per line on stdout, in
 * order. A thin shell around the public API: no protocol logic here.
 *
 * Run: `npm run build` in clients/node, then `node dist/conformance/driver.js`.
 */

import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import type tls from "node:tls";

import {
  Client,
  ConnectError,
  InvalidArgumentError,
  LeaderElector,
  type Lock,
  LockLostError,
  type LockState,
  MonolockError,
  NotAcquiredError,
  type Observation,
  UnsupportedError,
} from "../src/index.js";

type Command = Record<string, unknown> & { id?: unknown; cmd?: unknown };
type Reply = Record<string, unknown>;

/** A failed command, as the reply's `error`. */
class Failure extends Error {
  constructor(
    readonly kind: string,
    message: string,
    readonly reason: string | null = null,
    /** The client's own flag, when the failure passes a client error on. */
    readonly temporary = false,
  ) {
    super(message);
  }
}

let client: Client | null = null;
const handles = new Map<string, Lock>();

/** An observation and the read in progress (a `next_state` that timed out
 * leaves it for the next one, so no state is skipped). */
interface Watch {
  readonly observation: Observation;
  pending: Promise<IteratorResult<LockState>> | null;
}
const watches = new Map<string, Watch>();

/** An election running in the background and its callbacks' events, in
 * the order they fired. */
interface Election {
  readonly elector: LeaderElector;
  readonly events: Reply[];
  /** Wakes a `next_election_event` waiting for an event. */
  wake: (() => void) | null;
  /** What ended `run()` other than a stop. */
  failure: { error: unknown } | null;
}
const elections = new Map<string, Election>();

interface ErrorReply {
  kind: string;
  reason: string | null;
  message: string;
  /** The client's own `isTemporary`. */
  temporary: boolean;
}

function describeError(err: unknown): ErrorReply {
  const message = err instanceof Error ? err.message : String(err);
  const temporary = err instanceof MonolockError ? err.isTemporary : err instanceof Failure ? err.temporary : false;
  const reply = (kind: string, reason: string | null = null): ErrorReply => ({
    kind,
    reason,
    message,
    temporary,
  });
  if (err instanceof Failure) return reply(err.kind, err.reason);
  if (err instanceof InvalidArgumentError) return reply("invalid_argument");
  if (err instanceof UnsupportedError) return reply("unsupported");
  if (err instanceof NotAcquiredError) return reply("not_acquired");
  // An HTTP server or a TLS port reached without TLS is `connect`; a failed
  // TLS handshake is `tls`.
  if (err instanceof ConnectError) return reply(err.reason === "tls" ? "tls" : "connect");
  if (err instanceof LockLostError) {
    if (err.reason === "server_error") return reply("server");
    return reply("lost", err.reason);
  }
  return reply("other");
}

/** A state as the driver protocol writes it (`since` is not sent). */
function stateReply(state: LockState): Reply {
  return {
    held: state.held,
    token: String(state.token),
    value: state.value,
    event: state.event,
    initial: state.initial,
    coalesced: state.coalesced,
    reason: state.reason,
  };
}

/** An optional string field (the value of `lock` and `try_lock`). */
function optionalText(command: Command, field: string): string | undefined {
  const value = command[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string") throw new Failure("other", `"${field}" must be a string`);
  return value;
}

/** A handle name not taken by a lock, a watch or an election. */
function freeHandle(command: Command): string {
  const name = text(command, "handle");
  if (handles.has(name) || watches.has(name) || elections.has(name)) {
    throw new Failure("other", `handle ${JSON.stringify(name)} is in use`);
  }
  return name;
}

/** Resolves with `promise`'s outcome, or "timeout" after `ms`. */
async function within<T>(promise: Promise<T>, ms: number): Promise<{ value: T } | "timeout"> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<"timeout">((resolve) => {
    timer = setTimeout(() => resolve("timeout"), ms);
  });
  try {
    return await Promise.race([promise.then((value) => ({ value })), late]);
  } finally {
    clearTimeout(timer);
  }
}

function text(command: Command, field: string): string {
  const value = command[field];
  if (typeof value !== "string") throw new Failure("other", `"${field}" must be a string`);
  return value;
}

function optionalNumber(command: Command, field: string): number | undefined {
  const value = command[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "number") throw new Failure("other", `"${field}" must be a number`);
  return value;
}

function theClient(): Client {
  if (client === null) throw new Failure("other", "no client: send `open` first");
  return client;
}

function handle(command: Command): Lock {
  const name = text(command, "handle");
  const lock = handles.get(name);
  if (lock === undefined) throw new Failure("unknown_handle", `no handle ${JSON.stringify(name)}`);
  return lock;
}

function tlsOptions(spec: unknown): tls.ConnectionOptions | undefined {
  if (spec === undefined || spec === null) return undefined;
  if (typeof spec !== "object") throw new Failure("other", '"tls" must be an object');
  const { ca, cert, key, server_name: servername } = spec as Record<string, unknown>;
  const options: tls.ConnectionOptions = {};
  const file = (path: unknown): Buffer => {
    if (typeof path !== "string") throw new Failure("other", "TLS file paths must be strings");
    return readFileSync(path);
  };
  if (ca !== undefined && ca !== null) options.ca = file(ca);
  if (cert !== undefined && cert !== null) options.cert = file(cert);
  if (key !== undefined && key !== null) options.key = file(key);
  if (typeof servername === "string") options.servername = servername;
  return options;
}

async function releaseAll(): Promise<void> {
  const locks = [...handles.values()];
  handles.clear();
  const observations = [...watches.values()];
  watches.clear();
  const electors = [...elections.values()];
  elections.clear();
  await Promise.all([
    ...locks.map((lock) => lock.release().catch(() => {})),
    ...observations.map((watch) => watch.observation.return()),
    ...electors.map((election) => election.elector.stop()),
  ]);
}

function watch(command: Command): Watch {
  const name = text(command, "handle");
  const found = watches.get(name);
  if (found === undefined) throw new Failure("unknown_handle", `no watch handle ${JSON.stringify(name)}`);
  return found;
}

function election(command: Command): Election {
  const name = text(command, "handle");
  const found = elections.get(name);
  if (found === undefined) throw new Failure("unknown_handle", `no election handle ${JSON.stringify(name)}`);
  return found;
}

/** Starts an election in the background, its events queued. */
function elect(command: Command): void {
  const name = freeHandle(command);
  const value = optionalText(command, "value");
  // The callbacks fire only once `run()` has started, after `entry` is set.
  const queue = (event: Reply): void => {
    entry.events.push(event);
    entry.wake?.();
  };
  const elector = new LeaderElector(theClient(), text(command, "name"), {
    lease: command.lease_ms as number,
    ...(value === undefined ? {} : { value }),
    onStartedLeading: (token) => queue({ kind: "started_leading", token: String(token) }),
    onStoppedLeading: () => queue({ kind: "stopped_leading" }),
    onNewLeader: (state) => queue({ kind: "new_leader", token: String(state.token), value: state.value }),
  });
  const entry: Election = { elector, events: [], wake: null, failure: null };
  elections.set(name, entry);
  elector.run().catch((error: unknown) => {
    entry.failure = { error };
    entry.wake?.();
  });
}

async function nextElectionEvent(command: Command): Promise<Reply> {
  const entry = election(command);
  const timeout = optionalNumber(command, "timeout_ms") ?? 0;
  const arrived = new Promise<void>((resolve) => {
    if (entry.events.length > 0 || entry.failure !== null) return resolve();
    entry.wake = resolve;
  });
  const end = await within(arrived, timeout);
  entry.wake = null;
  const event = entry.events.shift();
  if (event !== undefined) return { event };
  if (entry.failure !== null) throw entry.failure.error;
  if (end === "timeout") return { timeout: true };
  throw new Failure("other", "the election ended without an event");
}

async function nextState(command: Command): Promise<Reply> {
  const entry = watch(command);
  const timeout = optionalNumber(command, "timeout_ms") ?? 0;
  entry.pending ??= entry.observation.next();
  let end;
  try {
    end = await within(entry.pending, timeout);
  } catch (err) {
    entry.pending = null;
    // The end of the observation is the loss error, whatever its reason.
    if (err instanceof LockLostError) throw new Failure("lost", err.message, err.reason, err.isTemporary);
    throw err;
  }
  if (end === "timeout") return { timeout: true };
  entry.pending = null;
  if (end.value.done === true) throw new Failure("other", "the observation was stopped");
  return { state: stateReply(end.value.value) };
}

/** Runs one command; resolves with the reply's fields on success. */
async function run(command: Command): Promise<Reply> {
  switch (command.cmd) {
    case "open": {
      const tls = tlsOptions(command.tls);
      const forceV1 = command.force_v1;
      if (forceV1 !== undefined && forceV1 !== null && typeof forceV1 !== "boolean") {
        throw new Failure("other", '"force_v1" must be a boolean');
      }
      client = new Client(text(command, "address"), {
        ...(tls === undefined ? {} : { tls }),
        protocol: forceV1 === true ? 1 : 2,
      });
      return {};
    }
    case "lock": {
      const name = text(command, "handle");
      const wait = optionalNumber(command, "wait_ms");
      const value = optionalText(command, "value");
      const lock = await theClient().lock(command.name as string, {
        lease: command.lease_ms as number,
        wait: wait ?? null,
        ...(value === undefined ? {} : { value }),
      });
      handles.set(name, lock);
      return { token: String(lock.token) };
    }
    case "try_lock": {
      const name = text(command, "handle");
      const value = optionalText(command, "value");
      const lock = await theClient().tryLock(command.name as string, {
        lease: command.lease_ms as number,
        ...(value === undefined ? {} : { value }),
      });
      if (lock === null) return { acquired: false };
      handles.set(name, lock);
      return { acquired: true, token: String(lock.token) };
    }
    case "release": {
      const lock = handle(command);
      handles.delete(text(command, "handle"));
      await lock.release();
      return {};
    }
    case "is_held":
      return { held: handle(command).isHeld() };
    case "check":
      handle(command).check();
      return {};
    case "token":
      return { token: String(handle(command).token) };
    case "wait_lost": {
      const signal = handle(command).signal;
      const timeout = optionalNumber(command, "timeout_ms") ?? 0;
      const lost = await new Promise<boolean>((resolve) => {
        if (signal.aborted) return resolve(true);
        const timer = setTimeout(() => {
          signal.removeEventListener("abort", onAbort);
          resolve(false);
        }, timeout);
        const onAbort = (): void => {
          clearTimeout(timer);
          resolve(true);
        };
        signal.addEventListener("abort", onAbort, { once: true });
      });
      if (!lost) return { lost: false };
      const loss = signal.reason instanceof LockLostError ? signal.reason : null;
      return {
        lost: true,
        reason: loss?.reason ?? "connection",
        message: loss?.message ?? String(signal.reason),
      };
    }
    case "set_value":
      await handle(command).setValue(text(command, "value"));
      return {};
    case "observe": {
      const name = freeHandle(command);
      const observation = theClient().observe(text(command, "name"));
      const first = await observation.next();
      if (first.done === true) throw new Failure("other", "the observation ended at once");
      watches.set(name, { observation, pending: null });
      return { state: stateReply(first.value) };
    }
    case "next_state":
      return nextState(command);
    case "unobserve": {
      const entry = watch(command);
      watches.delete(text(command, "handle"));
      await entry.observation.return();
      return {};
    }
    case "holder":
      return { state: stateReply(await theClient().holder(text(command, "name"))) };
    case "elect":
      elect(command);
      return {};
    case "next_election_event":
      return nextElectionEvent(command);
    case "resign":
      // The handle stays: the events queued before (`stopped_leading`
      // among them) stay readable.
      await election(command).elector.stop();
      return {};
    case "cycles": {
      const c = theClient();
      const count = optionalNumber(command, "count") ?? 0;
      for (let i = 0; i < count; i++) {
        const lock = await c.lock(command.name as string, { lease: command.lease_ms as number });
        await lock.release();
      }
      return { count };
    }
    case "stats": {
      let fds: number | undefined;
      try {
        const { readdirSync } = await import("node:fs");
        fds = readdirSync("/proc/self/fd").length;
      } catch {
        fds = undefined;
      }
      return {
        ...(fds === undefined ? {} : { fds }),
        handles: process.getActiveResourcesInfo().length,
      };
    }
    case "exit":
      await releaseAll();
      return {};
    default:
      throw new Failure("other", `unknown command ${JSON.stringify(command.cmd)}`);
  }
}

function write(reply: Reply): void {
  // Writes to a pipe are synchronous on Linux: each line is out before the next read.
  process.stdout.write(`${JSON.stringify(reply)}\n`);
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (line.trim() === "") continue;
  let command: Command;
  try {
    command = JSON.parse(line) as Command;
  } catch (err) {
    write({ id: null, ok: false, error: describeError(new Failure("other", `bad JSON: ${String(err)}`)) });
    continue;
  }
  try {
    write({ id: command.id ?? null, ok: true, ...(await run(command)) });
  } catch (err) {
    write({ id: command.id ?? null, ok: false, error: describeError(err) });
  }
  if (command.cmd === "exit") break;
}
await releaseAll();
process.exit(0);
