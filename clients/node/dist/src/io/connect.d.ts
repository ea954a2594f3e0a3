/**
 * Dialing: the addresses in order, TCP or TLS, each bounded by the connect
 * timeout and by the caller's abort signal. The first that connects (and
 * completes the TLS handshake) wins; only this step falls through to the
 * next address.
 *
 * @module
 */
import net from "node:net";
import tls from "node:tls";
import type { Address } from "../address.js";
/** Where the servers are and how to reach them. */
export interface Endpoints {
    readonly addresses: readonly Address[];
    /** `tls.connect` options; null for plain TCP. */
    readonly tls: tls.ConnectionOptions | null;
    /** Milliseconds one address may take (TCP and TLS handshake). */
    readonly connectTimeout: number;
}
/** A socket connected to one address. */
export interface Connected {
    readonly socket: net.Socket;
    readonly address: Address;
}
/**
 * Dials the addresses in order.
 *
 * @throws ConnectError naming every address tried, or `abort.reason` when
 * `abort` fires first.
 */
export declare function connect(endpoints: Endpoints, abort?: AbortSignal): Promise<Connected>;
/** Whether a socket error is OpenSSL's or the certificate check's. */
export declare function isTlsError(err: unknown): boolean;
