/**
 * Server addresses: one or several, from the argument or the environment.
 *
 * Several addresses (a primary and its standby) are tried in order when one
 * refuses the connection or does not answer in time. Only the connect step
 * falls through: a claim lives on the one connection that sent its ACQUIRE,
 * and is never moved to another server behind the caller's back.
 *
 * @module
 */

import { InvalidArgumentError } from "./errors.js";

/** The address used when neither an argument nor the environment names one. */
export const DEFAULT_ADDRESS = "127.0.0.1:7070";
/** The environment variable read when no address is given (comma-separated). */
export const ADDRESS_ENV = "MONOLOCK_ADDRESS";

/** A comma-separated string, a list of `host:port` strings, or nothing
 * (`$MONOLOCK_ADDRESS`, else `127.0.0.1:7070`). */
export type Addresses = string | readonly string[] | undefined | null;

/** One `host:port`. */
export class Address {
  constructor(
    readonly host: string,
    readonly port: number,
  ) {}

  toString(): string {
    return this.host.includes(":") ? `[${this.host}]:${this.port}` : `${this.host}:${this.port}`;
  }
}

/** `host:port` or `[v6]:port`. */
export function parseOne(input: string): Address {
  const text = input.trim();
  if (/^[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(text)) {
    throw new InvalidArgumentError(
      `address ${JSON.stringify(text)}: write host:port, without a scheme`,
    );
  }
  const colon = text.lastIndexOf(":");
  let host = colon < 0 ? "" : text.slice(0, colon);
  const port = colon < 0 ? "" : text.slice(colon + 1);
  if (host === "") {
    throw new InvalidArgumentError(`server address ${JSON.stringify(text)} must be host:port`);
  }
  if (host.startsWith("[") && host.endsWith("]")) {
    host = host.slice(1, -1);
  } else if (host.includes(":")) {
    throw new InvalidArgumentError(
      `server address ${JSON.stringify(text)}: write an IPv6 host as [addr]:port`,
    );
  }
  const number = /^[0-9]+$/.test(port) ? Number(port) : -1;
  if (!(number > 0 && number < 65536)) {
    throw new InvalidArgumentError(
      `server address ${JSON.stringify(text)} has an invalid port ${JSON.stringify(port)}: expected 1 to 65535`,
    );
  }
  return new Address(host, number);
}

/** The addresses to try, in order: the argument, else `$MONOLOCK_ADDRESS`,
 * else the default. */
export function parse(addresses: Addresses, env: NodeJS.ProcessEnv = process.env): Address[] {
  let given: string | readonly string[] = addresses ?? (env[ADDRESS_ENV] || DEFAULT_ADDRESS);
  if (typeof given === "string") {
    given = given.split(",").filter((part) => part.trim() !== "");
  } else if (!Array.isArray(given)) {
    throw new InvalidArgumentError(
      `server addresses must be a string or an array of strings, not ${typeof given}`,
    );
  }
  if (given.length === 0) {
    throw new InvalidArgumentError(
      `no server address given: pass "host:port" or set $${ADDRESS_ENV}`,
    );
  }
  return given.map((part) => {
    if (typeof part !== "string") {
      throw new InvalidArgumentError(`a server address must be a string, not ${typeof part}`);
    }
    return parseOne(part);
  });
}
