/**
 * Lock values, observers, holder lookups and the leader elector against
 * the real server (docs/protocol.md, "Version 2 extension: values and
 * observers"), and against a small fake of an older server.
 */

import assert from "node:assert/strict";
import net from "node:net";
import { describe, it } from "node:test";

import {
  Client,
  InvalidArgumentError,
  LeaderElector,
  LockLostError,
  type LockState,
  UnsupportedError,
} from "../src/index.js";
import { eventually, PATIENCE, Server } from "./support.js";

/** ERROR 0x13 as a server that predates the extension answers HELLO. */
const UNKNOWN_TYPE_ERROR = Buffer.concat([
  Buffer.from([0x13, 0x13, 26]),
  Buffer.from("unknown message type: 0x24"),
]);

/**
 * A proxy in front of the real server that keeps every byte clients
 * write. With `older`, it answers a session that opens with HELLO as a
 * server without the extension does: the server's OPENED, then ERROR 0x13,
 * and the close; a session without HELLO goes through untouched. With
 * `grantNothing`, it passes HELLO on but the FEATURES that answers it
 * grants no feature bit.
 */
async function proxy(
  upstream: string,
  { older, grantNothing = false }: { older: boolean; grantNothing?: boolean },
): Promise<{ address: string; hellos: () => number; written: () => Buffer; close: () => void }> {
  const colon = upstream.lastIndexOf(":");
  const [host, port] = [upstream.slice(0, colon), Number(upstream.slice(colon + 1))];
  const sockets = new Set<net.Socket>();
  const written: Buffer[] = [];
  let hellos = 0;
  const listener = net.createServer((client) => {
    const server = net.connect({ host, port });
    for (const socket of [client, server]) {
      sockets.add(socket);
      socket.once("close", () => sockets.delete(socket));
      socket.on("error", () => {
        client.destroy();
        server.destroy();
      });
    }
    client.on("end", () => server.end());
    server.on("end", () => client.end());
    let head = Buffer.alloc(0);
    let decided = false;
    let answering = false;
    let toClient = 0;
    const refuseHello = (): void => {
      // After the 13 bytes of the server's OPENED.
      if (answering && toClient >= 13) {
        client.end(UNKNOWN_TYPE_ERROR);
        server.destroy();
      }
    };
    let asked = false;
    server.on("data", (data: Buffer) => {
      if (asked && grantNothing) {
        // FEATURES (bytes 13 to 21 of the stream, after OPENED): features 0.
        for (let at = Math.max(14, toClient); at < Math.min(18, toClient + data.length); at++) data[at - toClient] = 0;
      }
      client.write(data);
      toClient += data.length;
      refuseHello();
    });
    client.on("data", (data: Buffer) => {
      written.push(Buffer.from(data));
      if (decided) {
        server.write(data);
        return;
      }
      const before = head.length;
      head = Buffer.concat([head, data]);
      // The OPEN goes on at once; what follows it decides.
      if (before < 6 && head.length >= 6) server.write(head.subarray(0, 6));
      if (head.length < 7) return;
      decided = true;
      asked = head[0] === 0x01 && head[1] === 0x02 && head[6] === 0x24;
      if (asked && grantNothing) hellos += 1;
      if (older && asked) {
        hellos += 1;
        answering = true;
        refuseHello();
        return;
      }
      server.write(head.subarray(6));
    });
  });
  await new Promise<void>((resolve) => listener.listen(0, "127.0.0.1", resolve));
  const { port: listening } = listener.address() as net.AddressInfo;
  return {
    address: `127.0.0.1:${listening}`,
    hellos: () => hellos,
    written: () => Buffer.concat(written),
    close: () => {
      listener.close();
      for (const socket of sockets) socket.destroy();
    },
  };
}

/** Reads the next state, bounded by PATIENCE. */
async function next(states: AsyncIterator<LockState>): Promise<LockState> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error("no state within PATIENCE")), PATIENCE);
  });
  try {
    const result = await Promise.race([states.next(), late]);
    assert.equal(result.done, false, "the observation went on");
    return result.value as LockState;
  } finally {
    clearTimeout(timer);
  }
}

/** The fields a test compares (not `since`, a wall-clock instant). */
function shape(state: LockState): Record<string, unknown> {
  return {
    event: state.event,
    held: state.held,
    token: state.token,
    value: state.value,
    initial: state.initial,
    coalesced: state.coalesced,
    reason: state.reason,
  };
}

/** Callback events of electors, in the order they fired, and waits on them. */
class Recorder {
  readonly events: { who: string; kind: string; token?: bigint; value?: string }[] = [];
  readonly #wakers = new Set<() => void>();

  push(event: { who: string; kind: string; token?: bigint; value?: string }): void {
    this.events.push(event);
    for (const wake of [...this.#wakers]) wake();
  }

  /** The index of the first event (from `from`) that matches, once there is one. */
  async waitFor(what: string, match: (event: Recorder["events"][number]) => boolean, from = 0): Promise<number> {
    return new Promise((resolve, reject) => {
      const look = (): void => {
        const found = this.events.findIndex((event, i) => i >= from && match(event));
        if (found >= 0) {
          done();
          resolve(found);
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`timed out waiting for ${what}: ${JSON.stringify(this.events, (_, v: unknown) => (typeof v === "bigint" ? String(v) : v))}`));
      }, PATIENCE);
      const done = (): void => {
        clearTimeout(timer);
        this.#wakers.delete(look);
      };
      this.#wakers.add(look);
      look();
    });
  }
}

describe("lock values", () => {
  it("a value is seen through a second client's holder(), and is gone with the claim", async () => {
    await using server = await Server.start();
    const holder = new Client(server.addr);
    const follower = new Client(server.addr);
    try {
      const lock = await holder.lock("values/leader", { lease: 5000, value: "10.0.0.7:9000" });
      assert.equal(lock.value, "10.0.0.7:9000");
      const seen = await follower.holder("values/leader");
      assert.deepEqual(shape(seen), {
        event: "held",
        held: true,
        token: lock.token,
        value: "10.0.0.7:9000",
        initial: false,
        coalesced: false,
        reason: null,
      });
      assert.ok(seen.since instanceof Date);
      assert.equal(await lock.release(), true);
      const free = await follower.holder("values/leader");
      assert.equal(free.event, "free");
      assert.equal(free.held, false);
      assert.equal(free.value, "");
      // A lock nobody has held: free, token 0.
      assert.deepEqual(shape(await follower.holder("values/never")), {
        event: "free",
        held: false,
        token: 0n,
        value: "",
        initial: false,
        coalesced: false,
        reason: null,
      });
    } finally {
      holder.close();
      follower.close();
    }
  });

  it("setValue is seen by an observer, after the value the lock was taken with", async () => {
    await using server = await Server.start();
    const holder = new Client(server.addr);
    const observer = new Client(server.addr);
    try {
      const lock = await holder.tryLock("values/proclaim", { lease: 5000, value: "first" });
      assert.ok(lock !== null);
      const states = observer.observe("values/proclaim");
      const initial = await next(states);
      assert.deepEqual(shape(initial), {
        event: "held",
        held: true,
        token: lock.token,
        value: "first",
        initial: true,
        coalesced: false,
        reason: null,
      });
      await lock.setValue("second");
      assert.equal(lock.value, "second");
      assert.deepEqual(shape(await next(states)), {
        event: "value",
        held: true,
        token: lock.token,
        value: "second",
        initial: false,
        coalesced: false,
        reason: null,
      });
      // The server has it: a lookup after setValue returned sees it.
      assert.equal((await observer.holder("values/proclaim")).value, "second");
      await states.return();
      await lock.release();
      await assert.rejects(lock.setValue("third"), (err: unknown) => {
        assert.ok(err instanceof LockLostError);
        assert.equal(err.reason, "released");
        return true;
      });
    } finally {
      holder.close();
      observer.close();
    }
  });

  it("setValue on a lost lock fails with the loss", async () => {
    await using server = await Server.start();
    const client = new Client(server.addr);
    try {
      const lock = await client.lock("values/lost", { lease: 5000, value: "a" });
      const lost = new Promise((resolve) => lock.signal.addEventListener("abort", resolve, { once: true }));
      await server.forceRelease("values/lost");
      await lost;
      await assert.rejects(lock.setValue("b"), (err: unknown) => {
        assert.ok(err instanceof LockLostError);
        assert.equal(err.reason, "forced");
        assert.match(err.message, /^lock "values\/lost" lost \(forced\): /);
        return true;
      });
    } finally {
      client.close();
    }
  });

  it("a value over 1,024 UTF-8 bytes is an invalid argument, before connecting", async () => {
    let connections = 0;
    const listener = net.createServer((socket) => {
      connections += 1;
      socket.destroy();
    });
    await new Promise<void>((resolve) => listener.listen(0, "127.0.0.1", resolve));
    const { port } = listener.address() as net.AddressInfo;
    try {
      const client = new Client(`127.0.0.1:${port}`);
      // 1,025 bytes in 513 characters: the bound counts bytes.
      const long = "é".repeat(512) + "a";
      for (const attempt of [
        () => client.lock("x", { value: long }),
        () => client.tryLock("x", { value: long }),
      ]) {
        await assert.rejects(attempt(), (err: unknown) => {
          assert.ok(err instanceof InvalidArgumentError);
          assert.equal(err.message, "value of 1025 bytes is above the maximum of 1024 bytes");
          assert.equal(err.isTemporary, false);
          return true;
        });
      }
      assert.throws(
        () => new LeaderElector(client, "x", { value: long }),
        (err: unknown) => err instanceof InvalidArgumentError,
      );
      assert.equal(connections, 0);
    } finally {
      listener.close();
    }
  });
});

describe("observe", () => {
  it("tells every hand-on in token order: RELEASED of the old token, then GRANTED of the new", async () => {
    await using server = await Server.start();
    const observer = new Client(server.addr);
    const holders = ["a", "b", "c"].map(() => new Client(server.addr));
    try {
      const first = await holders[0]!.lock("observe/order", { lease: 5000, value: "a" });
      const states = observer.observe("observe/order");
      assert.deepEqual(shape(await next(states)), {
        event: "held",
        held: true,
        token: first.token,
        value: "a",
        initial: true,
        coalesced: false,
        reason: null,
      });
      // b then c queue behind a, in that order.
      const second = holders[1]!.lock("observe/order", { lease: 5000, value: "b" });
      await eventually("b waiting", async () => (await server.waiters("observe/order")).length === 1);
      const third = holders[2]!.lock("observe/order", { lease: 5000, value: "c" });
      await eventually("c waiting", async () => (await server.waiters("observe/order")).length === 2);
      await first.release();
      const b = await second;
      await b.release();
      const c = await third;
      await c.release();
      assert.ok(first.token < b.token && b.token < c.token);
      const seen = [];
      for (let i = 0; i < 5; i++) seen.push(shape(await next(states)));
      const change = (event: string, token: bigint, value: string, reason: string | null): Record<string, unknown> => ({
        event,
        held: event !== "released",
        token,
        value,
        initial: false,
        coalesced: false,
        reason,
      });
      assert.deepEqual(seen, [
        change("released", first.token, "", "released"),
        change("granted", b.token, "b", null),
        change("released", b.token, "", "released"),
        change("granted", c.token, "c", null),
        change("released", c.token, "", "released"),
      ]);
      await states.return();
    } finally {
      observer.close();
      for (const client of holders) client.close();
    }
  });

  it("tells why a claim ended: forced by the admin API, released when its holder's connection closes", async () => {
    await using server = await Server.start();
    const observer = new Client(server.addr);
    const holder = new Client(server.addr);
    try {
      const states = observer.observe("observe/reasons");
      assert.equal((await next(states)).event, "free");
      const forced = await holder.lock("observe/reasons", { lease: 5000, value: "f" });
      const first = await next(states);
      assert.deepEqual([first.event, first.token, first.value], ["granted", forced.token, "f"]);
      await server.forceRelease("observe/reasons");
      assert.deepEqual(shape(await next(states)), {
        event: "released",
        held: false,
        token: forced.token,
        value: "",
        initial: false,
        coalesced: false,
        reason: "forced",
      });
      const closed = await holder.lock("observe/reasons", { lease: 5000, value: "c" });
      const granted = await next(states);
      assert.deepEqual([granted.event, granted.token, granted.value], ["granted", closed.token, "c"]);
      holder.close();
      const released = await next(states);
      assert.deepEqual([released.event, released.token, released.reason], ["released", closed.token, "released"]);
      await states.return();
    } finally {
      observer.close();
      holder.close();
    }
  });

  it("ends with an error naming the lock when the server is killed", async () => {
    await using server = await Server.start();
    const client = new Client(server.addr);
    const states = client.observe("observe/killed");
    assert.equal((await next(states)).event, "free");
    const ended = states.next();
    server.signal("SIGKILL");
    await assert.rejects(ended, (err: unknown) => {
      assert.ok(err instanceof LockLostError);
      assert.equal(err.reason, "connection");
      assert.match(err.message, /^observation of lock "observe\/killed" ended \(connection\): /);
      return true;
    });
    assert.deepEqual(await states.next(), { value: undefined, done: true }, "then it is over");
  });

  it("aborting the signal or breaking out of the loop ends it cleanly and writes UNOBSERVE", async () => {
    await using server = await Server.start();
    const watched = await proxy(server.addr, { older: false });
    const client = new Client(watched.address);
    const holder = new Client(server.addr);
    try {
      const stop = new AbortController();
      const seen: string[] = [];
      for await (const state of client.observe("observe/stop", { signal: stop.signal })) {
        seen.push(state.event);
        if (state.event === "free") {
          // Take the lock: the loop is told, then stops.
          await (await holder.lock("observe/stop", { lease: 5000 })).release();
        } else if (state.event === "released") {
          stop.abort();
        }
      }
      assert.deepEqual(seen, ["free", "granted", "released"]);
      for await (const state of client.observe("observe/stop")) {
        assert.equal(state.event, "free");
        break;
      }
      // Watch ids 1 then 2 on the client's one session: each was unobserved.
      await eventually("both UNOBSERVE frames", () => {
        const bytes = watched.written();
        return bytes.includes(Buffer.from("2800000001", "hex")) && bytes.includes(Buffer.from("2800000002", "hex"));
      });
      assert.equal(client.sessions, 1);
    } finally {
      client.close();
      holder.close();
      watched.close();
    }
  });
});

describe("watch bounds", () => {
  it("a session's bound moves a watch to another session; the server's refuses it, and frees with an UNOBSERVE", async () => {
    await using server = await Server.start("--max-watches-per-session", "2", "--max-watches", "3");
    const client = new Client(server.addr);
    const holder = new Client(server.addr);
    try {
      const observations = ["bound/a", "bound/b", "bound/c"].map((name) => client.observe(name));
      for (const states of observations) assert.equal((await next(states)).event, "free");
      assert.equal(client.sessions, 2, "FEATURES said 2 watches a session: the third went to a second session");
      assert.equal(await server.watches(), 3);
      await assert.rejects(client.observe("bound/d").next(), (err: unknown) => {
        assert.ok(err instanceof LockLostError, String(err));
        assert.equal(err.reason, "server_error");
        assert.equal(err.code, 0x0c);
        assert.equal(err.isTemporary, true);
        assert.match(err.message, /^observation of lock "bound\/d" ended \(server_error\): /);
        return true;
      });
      // The others are still told.
      const lock = await holder.lock("bound/b", { lease: 5000, value: "b" });
      const granted = await next(observations[1]!);
      assert.deepEqual([granted.event, granted.token, granted.value], ["granted", lock.token, "b"]);
      await lock.release();
      await observations[0]!.return();
      await eventually("the server counting 2 watches", async () => (await server.watches()) === 2);
      const again = client.observe("bound/d");
      assert.equal((await next(again)).event, "free");
      await again.return();
    } finally {
      client.close();
      holder.close();
    }
  });
});

describe("LeaderElector", () => {
  it("fails over between electors: the next leads only after the last stopped, and every elector hears of each new leader", async () => {
    await using server = await Server.start();
    const clients = [new Client(server.addr), new Client(server.addr), new Client(server.addr)];
    const log = new Recorder();
    const names = ["e1", "e2", "e3"];
    const electors = names.map(
      (who, i) =>
        new LeaderElector(clients[i]!, "elect/failover", {
          lease: 5000,
          value: `${who}:9000`,
          retry: 50,
          onStartedLeading: (token, signal) => {
            log.push({ who, kind: "started", token });
            signal.addEventListener("abort", () => log.push({ who, kind: "signal" }), { once: true });
          },
          onStoppedLeading: () => log.push({ who, kind: "stopped" }),
          onNewLeader: (state) => log.push({ who, kind: "leader", token: state.token, value: state.value }),
        }),
    );
    const runs: Promise<void>[] = [];
    try {
      runs.push(electors[0]!.run());
      const t1 = log.events[await log.waitFor("e1 leading", (e) => e.who === "e1" && e.kind === "started")]!.token!;
      runs.push(electors[1]!.run());
      await eventually("e2 waiting", async () => (await server.waiters("elect/failover")).length === 1);
      runs.push(electors[2]!.run());
      await eventually("e3 waiting", async () => (await server.waiters("elect/failover")).length === 2);
      for (const who of names) {
        await log.waitFor(`${who} told e1 leads`, (e) => e.who === who && e.kind === "leader" && e.token === t1);
      }
      assert.equal(log.events.find((e) => e.kind === "leader" && e.token === t1)?.value, "e1:9000");
      assert.equal(electors[0]!.isLeader, true);
      assert.equal(electors[0]!.leader?.value, "e1:9000");

      // Stopped: e1 releases; e2 is next in the queue.
      await electors[0]!.stop();
      const e1Stopped = log.events.findIndex((e) => e.who === "e1" && e.kind === "stopped");
      assert.ok(e1Stopped >= 0, "stop() resolves after onStoppedLeading");
      await runs[0];
      const e2Started = await log.waitFor("e2 leading", (e) => e.who === "e2" && e.kind === "started");
      assert.ok(e1Stopped < e2Started);
      const t2 = log.events[e2Started]!.token!;
      assert.ok(t2 > t1);
      for (const who of ["e2", "e3"]) {
        await log.waitFor(`${who} told e2 leads`, (e) => e.who === who && e.kind === "leader" && e.token === t2);
      }

      // e2's connection closed: it loses (its signal aborted), e3 leads.
      clients[1]!.close();
      const e2Stopped = await log.waitFor("e2 stopped", (e) => e.who === "e2" && e.kind === "stopped");
      assert.ok(log.events.findIndex((e) => e.who === "e2" && e.kind === "signal") < e2Stopped);
      const e3Started = await log.waitFor("e3 leading", (e) => e.who === "e3" && e.kind === "started");
      assert.ok(e2Stopped < e3Started);
      const t3 = log.events[e3Started]!.token!;
      assert.ok(t3 > t2);
      // e2 observes again (a new session) and campaigns again.
      for (const who of ["e2", "e3"]) {
        await log.waitFor(`${who} told e3 leads`, (e) => e.who === who && e.kind === "leader" && e.token === t3);
      }
      assert.equal(log.events.find((e) => e.kind === "leader" && e.token === t3)?.value, "e3:9000");

      // Never two leaders at once; every start has its stop before the next.
      await Promise.all(electors.map((elector) => elector.stop()));
      await Promise.all(runs);
      let leading: string | null = null;
      for (const event of log.events) {
        if (event.kind === "started") {
          assert.equal(leading, null, `${event.who} started while ${leading} led`);
          leading = event.who;
        } else if (event.kind === "stopped") {
          assert.equal(leading, event.who);
          leading = null;
        }
      }
      assert.equal(leading, null);
      assert.equal(await server.lock("elect/failover"), null, "stopping released the lock");
    } finally {
      for (const client of clients) client.close();
    }
  });
});

describe("against a server without the extension", () => {
  it("values, observers and lookups are unsupported (not temporary); plain locks work, HELLO is asked once", async () => {
    await using server = await Server.start();
    const older = await proxy(server.addr, { older: true });
    const client = new Client(older.address);
    try {
      const unsupported = (err: unknown): boolean => {
        assert.ok(err instanceof UnsupportedError, String(err));
        assert.equal(err.reason, "unsupported");
        assert.equal(err.isTemporary, false);
        assert.equal(
          err.message,
          `${older.address} does not support lock values and observers (the server is older than this client): upgrade the server`,
        );
        return true;
      };
      await assert.rejects(client.lock("old/a", { lease: 5000, value: "x" }), unsupported);
      const lock = await client.lock("old/a", { lease: 5000 });
      assert.equal(lock.protocol, 2);
      assert.equal(BigInt((await server.lock("old/a"))?.holder?.token ?? -1), lock.token);
      // An empty value is none: a plain ACQUIRE.
      assert.equal(await client.tryLock("old/b", { lease: 5000, value: "" }).then((l) => l?.release()), true);
      await assert.rejects(lock.setValue("x"), unsupported);
      await assert.rejects(client.holder("old/a"), unsupported);
      await assert.rejects(client.observe("old/a").next(), unsupported);
      const elector = new LeaderElector(client, "old/elect", { lease: 5000, value: "me" });
      await assert.rejects(elector.run(), unsupported);
      // Without a value too: it never leads on a server it cannot observe.
      let led = false;
      const plain = new LeaderElector(client, "old/elect", {
        lease: 5000,
        onStartedLeading: () => {
          led = true;
        },
      });
      await assert.rejects(plain.run(), unsupported);
      assert.equal(led, false);
      assert.equal(await server.lock("old/elect"), null);
      assert.equal(await lock.release(), true);
      assert.equal(older.hellos(), 1, "the address is remembered as lacking the extension");
    } finally {
      client.close();
      older.close();
    }
  });

  it("a FEATURES that grants no bit is unsupported too, remembered, and the session carries plain locks", async () => {
    await using server = await Server.start();
    const stingy = await proxy(server.addr, { older: false, grantNothing: true });
    const client = new Client(stingy.address);
    try {
      for (const attempt of [
        () => client.lock("stingy/a", { lease: 5000, value: "x" }),
        () => client.holder("stingy/a"),
        () => client.observe("stingy/a").next(),
      ]) {
        await assert.rejects(attempt(), (err: unknown) => err instanceof UnsupportedError && !err.isTemporary);
      }
      const lock = await client.lock("stingy/a", { lease: 5000 });
      assert.equal(BigInt((await server.lock("stingy/a"))?.holder?.token ?? -1), lock.token);
      assert.equal(await lock.release(), true);
      assert.equal(client.sessions, 1);
      assert.equal(stingy.hellos(), 1);
    } finally {
      client.close();
      stingy.close();
    }
  });

  it("forced to protocol v1, values, observers and lookups are unsupported", async () => {
    await using server = await Server.start();
    const client = new Client(server.addr, { protocol: 1 });
    const unsupported = (err: unknown): boolean => {
      assert.ok(err instanceof UnsupportedError, String(err));
      assert.equal(err.isTemporary, false);
      assert.equal(err.message, "protocol version 1 has no lock values or observers");
      return true;
    };
    await assert.rejects(client.lock("v1/a", { lease: 5000, value: "x" }), unsupported);
    await assert.rejects(client.holder("v1/a"), unsupported);
    await assert.rejects(client.observe("v1/a").next(), unsupported);
    assert.throws(() => new LeaderElector(client, "v1/a", { value: "x" }), unsupported);
    const lock = await client.lock("v1/a", { lease: 5000 });
    assert.equal(lock.protocol, 1);
    await assert.rejects(lock.setValue("x"), unsupported);
    assert.equal(await lock.release(), true);
  });
});
