/** The client against the real server binary: one server for the file. */

import assert from "node:assert/strict";
import net from "node:net";
import { after, before, describe, it } from "node:test";

import { ConnectError, InvalidArgumentError, LockLostError, NotAcquiredError } from "../src/index.js";
import { Client, eventually, FORCED_CODE, PATIENCE, PROTOCOL, Server } from "./support.js";

let server: Server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  await server.stop();
});

const client = (): Client => new Client(server.addr);

/** A loopback port that refuses connections (a listener opened and closed). */
async function refusingAddress(): Promise<string> {
  const listener = net.createServer();
  await new Promise<void>((resolve) => listener.listen(0, "127.0.0.1", resolve));
  const { port } = listener.address() as net.AddressInfo;
  await new Promise((resolve) => listener.close(resolve));
  return `127.0.0.1:${port}`;
}

describe("lock and release", () => {
  it("tokens strictly increase across holders", async () => {
    const c = client();
    const tokens: bigint[] = [];
    for (let i = 0; i < 5; i++) {
      const lock = await c.lock("tokens", { lease: 5000 });
      assert.ok(lock.isHeld());
      lock.check();
      assert.equal(lock.name, "tokens");
      assert.equal(lock.lease, 5000);
      assert.equal(lock.address, server.addr);
      assert.equal(typeof lock.token, "bigint");
      const seen = await server.lock("tokens");
      assert.equal(BigInt(seen?.holder?.token ?? -1), lock.token);
      tokens.push(lock.token);
      await lock.release();
      assert.equal(lock.isHeld(), false);
      assert.throws(() => lock.check(), (err: unknown) => {
        assert.ok(err instanceof LockLostError);
        assert.equal(err.reason, "released");
        return true;
      });
      assert.equal(lock.signal.aborted, false, "a release is not a loss");
    }
    assert.deepEqual(tokens, [...tokens].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)));
    assert.equal(new Set(tokens).size, tokens.length);
  });

  it("release resolves once the server has let the lock go", async () => {
    const c = client();
    for (let i = 0; i < 20; i++) {
      const lock = await c.lock("released-at-once", { lease: 5000 });
      await lock.release();
      const again = await c.tryLock("released-at-once", { lease: 5000 });
      assert.ok(again !== null, `cycle ${i}: the lock was still held after release()`);
      await again.release();
    }
  });

  it("await using releases at the end of the block", async () => {
    const c = client();
    let token = 0n;
    {
      await using lock = await c.lock("using", { lease: 5000 });
      assert.ok(lock.isHeld());
      token = lock.token;
      assert.equal(BigInt((await server.lock("using"))?.holder?.token ?? -1), token);
    }
    assert.equal(await server.lock("using"), null);
    // A block left by a throw releases too.
    await assert.rejects(async () => {
      await using lock = await c.lock("using", { lease: 5000 });
      assert.ok(lock.token > token);
      throw new Error("the work failed");
    }, /the work failed/);
    assert.equal(await server.lock("using"), null);
  });

  it("waiters are granted in FIFO order", async () => {
    const c = client();
    const holder = await c.lock("fifo", { lease: 5000 });
    const order: number[] = [];
    const tokens: bigint[] = [];
    const waiters: Promise<void>[] = [];
    for (let i = 0; i < 5; i++) {
      waiters.push(
        (async () => {
          await using lock = await c.lock("fifo", { lease: 5000 });
          order.push(i);
          tokens.push(lock.token);
        })(),
      );
      await eventually(`waiter ${i}`, async () => (await server.waiters("fifo")).length === i + 1);
    }
    await holder.release();
    await Promise.all(waiters);
    assert.deepEqual(order, [0, 1, 2, 3, 4]);
    assert.ok(tokens[0]! > holder.token);
    for (let i = 1; i < tokens.length; i++) assert.ok(tokens[i]! > tokens[i - 1]!);
  });

  it("a waiter heartbeats: it outlives its lease in the queue", async () => {
    const c = client();
    const holder = await c.lock("long-wait", { lease: 5000 });
    const waiter = c.lock("long-wait", { lease: 1000 });
    await eventually("the waiter", async () => (await server.waiters("long-wait")).length === 1);
    // The time is what is tested: the server drops a session silent for
    // its lease (1 s), so a waiter still queued three leases later has
    // heartbeated all along.
    await new Promise((resolve) => setTimeout(resolve, 3000));
    assert.equal((await server.waiters("long-wait")).length, 1);
    await holder.release();
    const lock = await waiter;
    assert.ok(lock.isHeld());
    await lock.release();
  });
});

describe("tryLock", () => {
  it("a busy lock is null and leaves no trace in the queue", async () => {
    const c = client();
    const holder = await c.tryLock("busy", { lease: 5000 });
    assert.ok(holder !== null);
    assert.equal(await c.tryLock("busy", { lease: 5000 }), null);
    await eventually("an empty queue", async () => (await server.waiters("busy")).length === 0);
    await holder.release();
    await eventually("the lock forgotten", async () => (await server.lock("busy")) === null);
  });
});

describe("bounded and cancelled waits", () => {
  it("wait bounds the time in the queue with NotAcquiredError", async () => {
    const c = client();
    const holder = await c.lock("wait", { lease: 5000 });
    const start = performance.now();
    await assert.rejects(c.lock("wait", { lease: 5000, wait: 300 }), (err: unknown) => {
      assert.ok(err instanceof NotAcquiredError);
      assert.equal(err.reason, "not_acquired");
      assert.equal(err.wait, 300);
      assert.match(err.message, /"wait" was not acquired within 300ms/);
      return true;
    });
    assert.ok(performance.now() - start >= 299, "gave up early");
    await eventually("an empty queue", async () => (await server.waiters("wait")).length === 0);
    await holder.release();
    await eventually("the lock forgotten", async () => (await server.lock("wait")) === null);
  });

  it("a wait that ends with the grant returns the lock", async () => {
    const c = client();
    const holder = await c.lock("wait-ok", { lease: 5000 });
    const waiter = c.lock("wait-ok", { lease: 5000, wait: PATIENCE });
    await eventually("the waiter", async () => (await server.waiters("wait-ok")).length === 1);
    await holder.release();
    const lock = await waiter;
    assert.ok(lock.isHeld());
    await lock.release();
  });

  it("an AbortSignal cancels the wait and leaves the queue", async () => {
    const c = client();
    const holder = await c.lock("abort", { lease: 5000 });
    const controller = new AbortController();
    const waiter = c.lock("abort", { lease: 5000, signal: controller.signal });
    await eventually("the waiter", async () => (await server.waiters("abort")).length === 1);
    const why = new Error("the deploy was cancelled");
    controller.abort(why);
    await assert.rejects(waiter, (err: unknown) => err === why);
    await eventually("an empty queue", async () => (await server.waiters("abort")).length === 0);
    await holder.release();
    await eventually("the lock forgotten", async () => (await server.lock("abort")) === null);
  });

  it("an AbortSignal aborted already rejects at once with its reason", async () => {
    const aborted = AbortSignal.abort();
    await assert.rejects(client().lock("abort-early", { signal: aborted }), {
      name: "AbortError",
    });
    await assert.rejects(client().tryLock("abort-early", { signal: aborted }), {
      name: "AbortError",
    });
    assert.equal(await server.lock("abort-early"), null);
  });
});

describe("loss", () => {
  it("a force-release aborts lock.signal with the forced reason", async () => {
    const lock = await client().lock("forced", { lease: 5000 });
    const aborted = new Promise<unknown>((resolve) =>
      lock.signal.addEventListener("abort", () => resolve(lock.signal.reason), { once: true }),
    );
    await server.forceRelease("forced");
    const reason = await aborted;
    assert.ok(reason instanceof LockLostError);
    assert.equal(reason.reason, "forced");
    assert.equal(reason.code, FORCED_CODE);
    assert.match(reason.message, /^lock "forced" lost \(forced\): /);
    assert.equal(reason.isTemporary, true);
    assert.equal(lock.isHeld(), false);
    assert.equal(lock.loss, reason);
    assert.throws(() => lock.check(), (err: unknown) => err === reason);
    await assert.rejects(lock.release(), (err: unknown) => err === reason);
  });

  it("a force-release hands the lock to the next waiter", async () => {
    const c = client();
    const holder = await c.lock("kicked", { lease: 5000 });
    const waiter = c.lock("kicked", { lease: 5000 });
    await eventually("the waiter", async () => (await server.waiters("kicked")).length === 1);
    // A force-release ends the holder's claim; the waiter is granted. The
    // two arrive on two connections, in either order.
    const holderLost = new Promise((resolve) =>
      holder.signal.addEventListener("abort", resolve, { once: true }),
    );
    await server.forceRelease("kicked");
    const lock = await waiter;
    assert.ok(lock.token > holder.token);
    await holderLost;
    assert.equal(holder.loss?.reason, "forced");
    await lock.release();
  });
});

describe("arguments and addresses", () => {
  it("bad names, leases and waits are refused before connecting", async () => {
    let connections = 0;
    const listener = net.createServer((socket) => {
      connections++;
      socket.destroy();
    });
    await new Promise<void>((resolve) => listener.listen(0, "127.0.0.1", resolve));
    const { port } = listener.address() as net.AddressInfo;
    const c = new Client(`127.0.0.1:${port}`);
    try {
      for (const name of ["", "n".repeat(256), "é".repeat(128), "\ud800", 42]) {
        await assert.rejects(c.lock(name as string), InvalidArgumentError);
        await assert.rejects(c.tryLock(name as string), InvalidArgumentError);
      }
      for (const lease of [0, -1, NaN, Infinity, 2 ** 32, "1000", 10, 99, 1500.5, 3_600_001]) {
        await assert.rejects(c.lock("ok", { lease: lease as number }), InvalidArgumentError);
        await assert.rejects(c.tryLock("ok", { lease: lease as number }), InvalidArgumentError);
      }
      await assert.rejects(c.lock("ok", { lease: 10 }), {
        message: "lease 10 ms is below the minimum of 100 ms (leases are in milliseconds)",
      });
      await assert.rejects(c.lock("ok", { lease: 3_600_001 }), {
        message: "lease 3600001 ms is above the maximum of 1 hour (leases are in milliseconds)",
      });
      await assert.rejects(c.lock("ok", { lease: 1500.5 }), {
        message: "lease 1500.5 ms is not a whole number of milliseconds (leases are in milliseconds)",
      });
      for (const scheme of ["http", "tcp"]) {
        const written = `${scheme}://127.0.0.1:${port}`;
        assert.throws(() => new Client(written), {
          name: "InvalidArgumentError",
          message: `address "${written}": write host:port, without a scheme`,
        });
      }
      for (const wait of [-1, NaN, "10"]) {
        await assert.rejects(c.lock("ok", { wait: wait as number }), InvalidArgumentError);
      }
      await assert.rejects(
        c.lock("ok", { signal: {} as AbortSignal }),
        InvalidArgumentError,
      );
      assert.throws(() => new Client("nohost"), InvalidArgumentError);
      assert.throws(() => new Client("a:1", { lease: 0 }), InvalidArgumentError);
      assert.throws(() => new Client("a:1", { connectTimeout: -1 }), InvalidArgumentError);
      assert.equal(connections, 0);
    } finally {
      listener.close();
    }
  });

  it("the first address down, the second serves", async () => {
    const down = await refusingAddress();
    for (const addresses of [`${down},${server.addr}`, [down, server.addr]]) {
      const c = new Client(addresses);
      assert.deepEqual(c.addresses, [down, server.addr]);
      await using lock = await c.lock("standby", { lease: 5000 });
      assert.equal(lock.address, server.addr);
    }
  });

  it("$MONOLOCK_ADDRESS names the list", async () => {
    const down = await refusingAddress();
    const saved = process.env.MONOLOCK_ADDRESS;
    process.env.MONOLOCK_ADDRESS = `${down}, ${server.addr}`;
    try {
      const c = new Client();
      assert.deepEqual(c.addresses, [down, server.addr]);
      await using lock = await c.lock("env", { lease: 5000 });
      assert.equal(lock.address, server.addr);
      assert.deepEqual(new Client({ lease: 1000 }).addresses, [down, server.addr]);
    } finally {
      if (saved === undefined) delete process.env.MONOLOCK_ADDRESS;
      else process.env.MONOLOCK_ADDRESS = saved;
    }
  });

  it("every address down: the error names them all", async () => {
    const first = await refusingAddress();
    const second = await refusingAddress();
    await assert.rejects(new Client([first, second]).lock("none"), (err: unknown) => {
      assert.ok(err instanceof ConnectError);
      assert.equal(err.reason, "network");
      assert.deepEqual(err.addresses, [first, second]);
      assert.ok(err.message.includes(first) && err.message.includes(second), err.message);
      assert.match(err.message, /ECONNREFUSED/);
      assert.equal(err.isTemporary, true);
      return true;
    });
  });

  it("the admin port is a connect error naming the address and the problem", async () => {
    for (const attempt of [(c: Client) => c.lock("http"), (c: Client) => c.tryLock("http")]) {
      await assert.rejects(attempt(new Client(server.admin)), (err: unknown) => {
        assert.ok(err instanceof ConnectError, String(err));
        assert.equal(err.reason, "protocol");
        assert.ok(
          err.message.includes(`${server.admin} is not a monolock server: an HTTP server answered`),
          err.message,
        );
        assert.equal(err.isTemporary, false);
        return true;
      });
    }
  });

  it("a port that accepts and never answers is a temporary connect error", async () => {
    const silent = net.createServer(() => {});
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    const { port } = silent.address() as net.AddressInfo;
    const address = `127.0.0.1:${port}`;
    try {
      const start = performance.now();
      await assert.rejects(
        new Client(address, { ioTimeout: 1000 }).lock("silent", { lease: 60_000 }),
        (err: unknown) => {
          assert.ok(err instanceof ConnectError, String(err));
          assert.equal(err.reason, "timeout");
          assert.ok(err.message.includes(`${address} did not answer within 1 s`), err.message);
          assert.equal(err.isTemporary, true);
          return true;
        },
      );
      assert.ok(performance.now() - start >= 999, "gave up before the I/O timeout");
    } finally {
      silent.close();
    }
  });
});
