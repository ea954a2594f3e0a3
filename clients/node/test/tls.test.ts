/** TLS and mTLS through `tls.connect` options, with a throwaway PKI. */

import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, it } from "node:test";

import { ConnectError, LockLostError } from "../src/index.js";
import { Client, CLIENT_IDENTITY, clientTls, NOT_AUTHORIZED_CODE, Server, tlsArgs } from "./support.js";

describe("TLS", () => {
  it("locks over TLS, checked against the address's host or servername", async () => {
    await using server = await Server.start(...tlsArgs(false));
    const client = new Client(server.addr, { tls: clientTls(false) });
    const first = await client.lock("tls", { lease: 5000 });
    assert.ok(first.isHeld());
    assert.equal(BigInt((await server.lock("tls"))?.holder?.token ?? -1), first.token);
    await first.release();
    const named = new Client(server.addr, { tls: { ...clientTls(false), servername: "localhost" } });
    await using second = await named.lock("tls", { lease: 5000 });
    assert.ok(second.token > first.token);
  });

  it("an untrusted or misnamed server is a TLS ConnectError naming the address", async () => {
    await using server = await Server.start(...tlsArgs(false));
    for (const options of [
      true, // Node's default roots only
      { ...clientTls(false), servername: "elsewhere" },
    ]) {
      await assert.rejects(new Client(server.addr, { tls: options }).lock("tls"), (err: unknown) => {
        assert.ok(err instanceof ConnectError, String(err));
        assert.equal(err.reason, "tls");
        assert.equal(err.isTemporary, false);
        assert.ok(err.message.includes(server.addr), err.message);
        return true;
      });
    }
  });

  it("a plain client on a TLS port is a connect error: the port expects TLS", async () => {
    await using server = await Server.start(...tlsArgs(false));
    for (const attempt of [(c: Client) => c.lock("plain"), (c: Client) => c.tryLock("plain")]) {
      await assert.rejects(attempt(new Client(server.addr)), (err: unknown) => {
        assert.ok(err instanceof ConnectError, String(err));
        assert.equal(err.reason, "protocol");
        assert.ok(err.message.includes(`${server.addr} expects TLS`), err.message);
        assert.equal(err.isTemporary, false);
        return true;
      });
    }
  });

  it("a TLS client on a plain port fails its handshake with a hint", async () => {
    await using server = await Server.start();
    await assert.rejects(
      new Client(server.addr, { tls: clientTls(false) }).lock("tls"),
      (err: unknown) => {
        assert.ok(err instanceof ConnectError, String(err));
        assert.equal(err.reason, "tls");
        assert.ok(err.message.includes(`${server.addr} does not speak TLS`), err.message);
        assert.equal(err.isTemporary, false);
        return true;
      },
    );
  });
});

describe("mTLS", () => {
  it("the client certificate is the identity; none is refused as a TLS failure", async () => {
    await using server = await Server.start(...tlsArgs(true));
    const client = new Client(server.addr, { tls: clientTls(true) });
    await using lock = await client.lock("mtls", { lease: 5000 });
    const seen = await server.lock("mtls");
    assert.equal(seen?.holder?.identity, CLIENT_IDENTITY);
    assert.equal(BigInt(seen?.holder?.token ?? -1), lock.token);
    const anonymous = new Client(server.addr, { tls: clientTls(false) });
    await assert.rejects(anonymous.lock("mtls-anonymous", { lease: 5000 }), (err: unknown) => {
      assert.ok(err instanceof ConnectError, String(err));
      assert.equal(err.reason, "tls");
      assert.ok(err.message.includes(server.addr), err.message);
      return true;
    });
  });

  it("an ACL refusal is a permanent LockLostError with code 0x18", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), "monolock-node-acl-"));
    const acl = path.join(dir, "acl.json");
    writeFileSync(acl, JSON.stringify({ rules: [{ identity: CLIENT_IDENTITY, locks: ["allowed/*"] }] }));
    await using server = await Server.start(...tlsArgs(true), "--acl-file", acl);
    const client = new Client(server.addr, { tls: clientTls(true) });
    const lock = await client.lock("allowed/job", { lease: 5000 });
    assert.ok(lock.isHeld());
    await lock.release();
    await assert.rejects(client.lock("denied", { lease: 5000 }), (err: unknown) => {
      assert.ok(err instanceof LockLostError, String(err));
      assert.equal(err.reason, "server_error");
      assert.equal(err.code, NOT_AUTHORIZED_CODE);
      assert.equal(err.isTemporary, false);
      assert.match(err.message, /^lock "denied" lost \(server_error\): .*\(not authorized for lock\)/);
      return true;
    });
  });
});
