/**
 * The real `monolock serve` as a child process on free loopback ports, its
 * admin API, and a throwaway PKI for the TLS tests.
 *
 * Environment:
 * - MONOLOCK_BIN: the `monolock` executable (default: target/debug/monolock
 *   of the repository).
 * - MONOLOCK_TEST_PKI: a directory with ca.pem, server.pem, server.key,
 *   clients-ca.pem, client.pem, client.key (the Rust test that runs this
 *   suite writes one). Without it the PKI is made here with the `openssl`
 *   command.
 */

import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

import { type Addresses, Client as BaseClient, type ClientOptions } from "../src/index.js";

/**
 * The protocol every real-server test runs on: 2 (the client's default),
 * or 1 when `MONOLOCK_NODE_PROTOCOL=1` (the `*.v1.test.js` files set it
 * and run the same tests forced to v1).
 */
export const PROTOCOL: 1 | 2 = process.env.MONOLOCK_NODE_PROTOCOL === "1" ? 1 : 2;

/** The package's `Client`, on the protocol of this run unless told. */
export class Client extends BaseClient {
  constructor(addresses?: Addresses | ClientOptions, options: ClientOptions = {}) {
    if (addresses !== null && typeof addresses === "object" && !Array.isArray(addresses)) {
      super({ protocol: PROTOCOL, ...(addresses as ClientOptions) });
    } else {
      super(addresses as Addresses, { protocol: PROTOCOL, ...options });
    }
  }
}

/** The admin API's code of a force-release: v2 REVOKED 0x08, v1 ERROR 0x02. */
export const FORCED_CODE = PROTOCOL === 2 ? 0x08 : 0x02;
/** The ACL's refusal: v2 REFUSED 0x24, v1 ERROR 0x18. */
export const NOT_AUTHORIZED_CODE = PROTOCOL === 2 ? 0x24 : 0x18;

/** Long enough that only a real hang trips it. */
export const PATIENCE = 20_000;

/** The repository root (this file runs from clients/node/dist/test/). */
export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../..");

export function monolockBin(): string {
  return process.env.MONOLOCK_BIN || path.join(REPO, "target", "debug", "monolock");
}

type LogLine = Record<string, unknown> & { message?: string };

/** The lock as the admin API shows it. */
export interface AdminLock {
  name: string;
  holder: { token: number; identity?: string | null; [key: string]: unknown } | null;
  waiters: unknown[];
}

/** `monolock serve --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0`, its
 * addresses learnt from its JSON startup log. */
export class Server {
  readonly proc: ChildProcess;
  addr = "";
  admin = "";
  readonly #log: LogLine[] = [];
  readonly #seen = new Set<() => void>();

  private constructor(extra: string[]) {
    this.proc = spawn(
      monolockBin(),
      [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--log-format",
        "json",
        ...extra,
      ],
      { stdio: ["ignore", "ignore", "pipe"] },
    );
    // A test process that ends early (a failed `before`, a timeout) takes
    // its servers with it.
    const orphaned = (): void => {
      this.proc.kill("SIGKILL");
    };
    process.once("exit", orphaned);
    this.proc.once("exit", () => process.off("exit", orphaned));
    const lines = createInterface({ input: this.proc.stderr! });
    lines.on("line", (raw) => {
      let line: LogLine;
      try {
        line = JSON.parse(raw) as LogLine;
      } catch {
        line = { message: raw };
      }
      this.#log.push(line);
      for (const wake of [...this.#seen]) wake();
    });
  }

  /** Starts a server and waits until both its listeners are up. */
  static async start(...extra: string[]): Promise<Server> {
    const server = new Server(extra);
    const listening = await server.waitLog("listening", (l) => l.message === "listening");
    server.addr = String(listening.addr);
    const admin = await server.waitLog("admin API listening");
    server.admin = String(admin.addr);
    return server;
  }

  /** The first log line (from the start) whose message contains `text`. */
  waitLog(text: string, match?: (line: LogLine) => boolean): Promise<LogLine> {
    const test = match ?? ((l: LogLine) => String(l.message ?? "").includes(text));
    return new Promise((resolve, reject) => {
      const look = (): void => {
        const found = this.#log.find(test);
        if (found !== undefined) {
          done();
          resolve(found);
        }
      };
      const onExit = (): void => {
        done();
        reject(new Error(`the server exited before logging ${JSON.stringify(text)}`));
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`timed out waiting for the log line ${JSON.stringify(text)}`));
      }, PATIENCE);
      const done = (): void => {
        clearTimeout(timer);
        this.#seen.delete(look);
        this.proc.off("exit", onExit);
      };
      this.#seen.add(look);
      this.proc.once("exit", onExit);
      look();
    });
  }

  signal(sig: NodeJS.Signals): void {
    this.proc.kill(sig);
  }

  /** SIGSTOP, resolved once the kernel shows the process stopped (a
   * signal is delivered asynchronously). */
  async pause(): Promise<void> {
    this.proc.kill("SIGSTOP");
    const tasks = `/proc/${this.proc.pid}/task`;
    // Every thread stopped; a state follows the parenthesised command name.
    await eventually("the server stopped", () =>
      readdirSync(tasks).every((task) => {
        const text = readFileSync(path.join(tasks, task, "stat"), "utf8");
        const state = text.charAt(text.lastIndexOf(")") + 2);
        return state === "T" || state === "t";
      }),
    );
  }

  /** Resolves once the process has exited. */
  exited(): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return Promise.resolve();
    return new Promise((resolve) => this.proc.once("exit", () => resolve()));
  }

  async stop(): Promise<void> {
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      const exited = this.exited();
      this.proc.kill("SIGCONT");
      this.proc.kill("SIGKILL");
      await exited;
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  async #request(method: string, route: string): Promise<unknown> {
    const response = await fetch(`http://${this.admin}${route}`, {
      method,
      // The admin API refuses changes without it (a web page cannot send it).
      headers: { "X-Requested-By": "monolock-node-tests" },
      signal: AbortSignal.timeout(PATIENCE),
    });
    if (response.status === 404) {
      await response.body?.cancel();
      return null;
    }
    if (!response.ok) throw new Error(`${method} ${route}: HTTP ${response.status}`);
    return response.json();
  }

  /** The lock's holder and waiters, or null when it has neither. */
  async lock(name: string): Promise<AdminLock | null> {
    return (await this.#request("GET", `/api/locks/${encodeURIComponent(name)}`)) as AdminLock | null;
  }

  async forceRelease(name: string): Promise<unknown> {
    return this.#request("POST", `/api/locks/${encodeURIComponent(name)}/release`);
  }

  async waiters(name: string): Promise<unknown[]> {
    return (await this.lock(name))?.waiters ?? [];
  }

  /** The watches (OBSERVE) of every open session, summed. */
  async watches(): Promise<number> {
    const listed = (await this.sessions()) as { watches?: number }[];
    return listed.reduce((sum, session) => sum + (session.watches ?? 0), 0);
  }

  /** The v2 sessions the admin API lists. */
  async sessions(): Promise<unknown[]> {
    const listed = (await this.#request("GET", "/api/sessions")) as unknown;
    if (Array.isArray(listed)) return listed;
    const inner = (listed as { sessions?: unknown[] } | null)?.sessions;
    return Array.isArray(inner) ? inner : [];
  }
}

/** Polls `condition` (for state only visible by asking, such as the admin
 * API) until it holds, at most PATIENCE. */
export async function eventually(
  what: string,
  condition: () => boolean | Promise<boolean>,
): Promise<void> {
  const end = performance.now() + PATIENCE;
  while (!(await condition())) {
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** The identity in the test client certificate. */
export const CLIENT_IDENTITY = "spiffe://test/node-client";

/** The PKI files: the Rust runner's, or made here with openssl once. */
export interface Pki {
  ca: string;
  serverCert: string;
  serverKey: string;
  clientsCa: string;
  clientCert: string;
  clientKey: string;
}

let pki: Pki | undefined;

export function testPki(): Pki {
  if (pki !== undefined) return pki;
  const dir = process.env.MONOLOCK_TEST_PKI || makePki();
  const file = (name: string): string => path.join(dir, name);
  pki = {
    ca: file("ca.pem"),
    serverCert: file("server.pem"),
    serverKey: file("server.key"),
    clientsCa: file("clients-ca.pem"),
    clientCert: file("client.pem"),
    clientKey: file("client.key"),
  };
  return pki;
}

/** Two CAs (servers, clients) and a leaf of each, ECDSA P-256, by `openssl`. */
function makePki(): string {
  const dir = mkdtempSync(path.join(tmpdir(), "monolock-node-pki-"));
  const run = (...args: string[]): void => {
    execFileSync("openssl", args, { cwd: dir, stdio: ["ignore", "ignore", "pipe"] });
  };
  const key = (name: string): void =>
    run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", name);
  const ca = (name: string, cn: string): void => {
    key(`${name}.key`);
    run("req", "-x509", "-new", "-key", `${name}.key`, "-subj", `/CN=${cn}`, "-days", "2",
      "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign",
      "-out", `${name}.pem`);
  };
  const leaf = (name: string, caName: string, cn: string, ext: string): void => {
    key(`${name}.key`);
    run("req", "-new", "-key", `${name}.key`, "-subj", `/CN=${cn}`, "-out", `${name}.csr`);
    writeFileSync(path.join(dir, `${name}.ext`), ext);
    run("x509", "-req", "-in", `${name}.csr`, "-CA", `${caName}.pem`, "-CAkey", `${caName}.key`,
      "-CAcreateserial", "-days", "2", "-extfile", `${name}.ext`, "-out", `${name}.pem`);
  };
  ca("ca", "node test server CA");
  ca("clients-ca", "node test client CA");
  leaf("server", "ca", "localhost",
    "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n");
  leaf("client", "clients-ca", "node-client",
    `subjectAltName=URI:${CLIENT_IDENTITY}\nextendedKeyUsage=clientAuth\n`);
  return dir;
}

/** The server's TLS flags for the test PKI. */
export function tlsArgs(mutual: boolean): string[] {
  const files = testPki();
  const args = ["--tls-cert", files.serverCert, "--tls-key", files.serverKey];
  if (mutual) args.push("--tls-client-ca", files.clientsCa);
  return args;
}

/** `tls.connect` options trusting the test server CA, with the client
 * certificate if asked. */
export function clientTls(withCertificate: boolean): { ca: Buffer; cert?: Buffer; key?: Buffer } {
  const files = testPki();
  const ca = readFileSync(files.ca);
  return withCertificate
    ? { ca, cert: readFileSync(files.clientCert), key: readFileSync(files.clientKey) }
    : { ca };
}
