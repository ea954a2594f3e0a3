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
/** The address used when neither an argument nor the environment names one. */
export declare const DEFAULT_ADDRESS = "127.0.0.1:7070";
/** The environment variable read when no address is given (comma-separated). */
export declare const ADDRESS_ENV = "MONOLOCK_ADDRESS";
/** A comma-separated string, a list of `host:port` strings, or nothing
 * (`$MONOLOCK_ADDRESS`, else `127.0.0.1:7070`). */
export type Addresses = string | readonly string[] | undefined | null;
/** One `host:port`. */
export declare class Address {
    readonly host: string;
    readonly port: number;
    constructor(host: string, port: number);
    toString(): string;
}
/** `host:port` or `[v6]:port`. */
export declare function parseOne(input: string): Address;
/** The addresses to try, in order: the argument, else `$MONOLOCK_ADDRESS`,
 * else the default. */
export declare function parse(addresses: Addresses, env?: NodeJS.ProcessEnv): Address[];
