/** Protocol v2 sessions against the real server: the pool, the claim
 * bound, idle sessions, per-claim loss and the v1 fallback. */

import assert from "node:assert/strict";
import net from "node:net";
import { describe, it } from "node:test";

import { Client, LockLostError, UnsupportedError } from "../src/index.js";
import { eventually, Server } from "./support.js";

/**
 * A server that speaks only v1, as an old one does: a proxy to the real
 * server that answers an OPEN with ERROR 0x10 and closes, and passes v1
 * connections through.
 */
async function v1Only(upstream: string): Promise<{ address: string; opens: () => number; close: () => void }> {
  let opens = 0;
  const [host, port] = [upstream.slice(0, upstream.lastIndexOf(":")), Number(upstream.slice(upstream.lastIndexOf(":") + 1))];
  const sockets = new Set<net.Socket>();
  // Half-open both ways: a client's FIN reaches the server, and the
  // server's EOF (its release) reaches the client, in that order.
  const proxy = net.createServer({ allowHalfOpen: true }, (client) => {
    sockets.add(client);
    client.once("close", () => sockets.delete(client));
    client.once("data", (first: Buffer) => {
      if (first[0] === 0x01 && first[1] === 0x02) {
        opens += 1;
        client.end(Buffer.from([0x13, 0x10, 0x00]));
        return;
      }
      const server = net.connect({ host, port, allowHalfOpen: true });
      sockets.add(server);
      server.once("close", () => sockets.delete(server));
      server.write(first);
      client.pipe(server);
      server.pipe(client);
      client.on("error", () => server.destroy());
      server.on("error", () => client.destroy());
    });
    client.on("error", () => {});
  });
  await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
  const { port: proxyPort } = proxy.address() as net.AddressInfo;
  return {
    address: `127.0.0.1:${proxyPort}`,
    opens: () => opens,
    close: () => {
      proxy.close();
      for (const socket of sockets) socket.destroy();
    },
  };
}

describe("v2 sessions", () => {
  it("a server that answers OPEN with ERROR 0x10 is spoken to in v1, and remembered", async () => {
    await using server = await Server.start();
    const old = await v1Only(server.addr);
    try {
      const client = new Client(old.address);
      for (let i = 0; i < 5; i++) {
        const lock = await client.lock("fallback", { lease: 5000 });
        assert.equal(lock.protocol, 1);
        assert.equal(BigInt((await server.lock("fallback"))?.holder?.token ?? -1), lock.token);
        assert.equal(await lock.release(), true);
        assert.equal(await server.lock("fallback"), null, "the v1 release was confirmed");
      }
      assert.equal(old.opens(), 1, "one OPEN, then the address is remembered as v1");
      // Protocol v1 has no values or observers: unsupported, naming the address.
      for (const attempt of [
        () => client.lock("fallback", { lease: 5000, value: "x" }),
        () => client.holder("fallback"),
        () => client.observe("fallback").next(),
      ]) {
        await assert.rejects(attempt(), (err: unknown) => {
          assert.ok(err instanceof UnsupportedError);
          assert.equal(err.isTemporary, false);
          assert.match(err.message, new RegExp(`^${old.address} does not support lock values and observers`));
          return true;
        });
      }
      const plain = await client.lock("fallback", { lease: 5000 });
      await assert.rejects(plain.setValue("x"), (err: unknown) => err instanceof UnsupportedError);
      await plain.release();
      assert.equal(client.sessions, 0);
      assert.equal((await server.sessions()).length, 0);
    } finally {
      old.close();
    }
  });

  it("a claim refused for the session's bound goes to another session", async () => {
    await using server = await Server.start("--max-claims-per-session", "3");
    const client = new Client(server.addr);
    const locks = await Promise.all(
      Array.from({ length: 7 }, (_, i) => client.lock(`bound/${i}`, { lease: 5000 })),
    );
    assert.ok(locks.every((lock) => lock.isHeld() && lock.protocol === 2));
    assert.equal(client.sessions, 3);
    assert.equal((await server.sessions()).length, 3);
    // One by one, too, once the sessions are full.
    const more = await client.lock("bound/7", { lease: 5000 });
    assert.ok(more.isHeld());
    assert.equal(client.sessions, 3);
    await Promise.all([...locks, more].map((lock) => lock.release()));
  });

  it("a revoked claim ends alone; the session and its other claims live on", async () => {
    await using server = await Server.start();
    const client = new Client(server.addr);
    const kept = await client.lock("revoke/kept", { lease: 5000 });
    const forced = await client.lock("revoke/forced", { lease: 5000 });
    assert.equal(client.sessions, 1);
    const lost = new Promise<unknown>((resolve) =>
      forced.signal.addEventListener("abort", () => resolve(forced.signal.reason), { once: true }),
    );
    await server.forceRelease("revoke/forced");
    const reason = await lost;
    assert.ok(reason instanceof LockLostError);
    assert.equal(reason.reason, "forced");
    assert.equal(reason.code, 0x08);
    assert.match(reason.message, /^lock "revoke\/forced" lost \(forced\): /);
    assert.ok(kept.isHeld());
    assert.equal(kept.signal.aborted, false);
    assert.equal(BigInt((await server.lock("revoke/kept"))?.holder?.token ?? -1), kept.token);
    await assert.rejects(forced.release(), (err: unknown) => err === reason);
    assert.equal(await kept.release(), true);
  });

  it("a session the server closed as idle is replaced on the next claim", async () => {
    await using server = await Server.start("--idle-timeout", "200ms");
    const client = new Client(server.addr);
    const first = await client.lock("idle", { lease: 5000 });
    await first.release();
    await eventually("the server closing the idle session", async () => (await server.sessions()).length === 0);
    await eventually("the client forgetting it", () => client.sessions === 0);
    const second = await client.lock("idle", { lease: 5000 });
    assert.ok(second.token > first.token);
    assert.equal(client.sessions, 1);
    await second.release();
  });

  it("the end of a session ends every claim on it, each naming its lock", async () => {
    await using server = await Server.start();
    const client = new Client(server.addr);
    const locks = await Promise.all(["end/a", "end/b", "end/c"].map((name) => client.lock(name, { lease: 5000 })));
    assert.equal(client.sessions, 1);
    const losses = locks.map(
      (lock) =>
        new Promise<unknown>((resolve) =>
          lock.signal.addEventListener("abort", () => resolve(lock.signal.reason), { once: true }),
        ),
    );
    server.signal("SIGTERM");
    const reasons = await Promise.all(losses);
    reasons.forEach((reason, i) => {
      assert.ok(reason instanceof LockLostError);
      assert.equal(reason.reason, "shutdown");
      assert.match(reason.message, new RegExp(`^lock "${locks[i]!.name}" lost \\(shutdown\\): `));
    });
  });

  it("sessions are pooled per lease", async () => {
    await using server = await Server.start();
    const client = new Client(server.addr);
    const short = await client.lock("lease/a", { lease: 1000 });
    const long = await client.lock("lease/b", { lease: 60_000 });
    const again = await client.lock("lease/c", { lease: 1000 });
    assert.equal(client.sessions, 2);
    const listed = (await server.sessions()) as { lease_ms?: number }[];
    assert.equal(listed.length, 2);
    await Promise.all([short, long, again].map((lock) => lock.release()));
  });
});
