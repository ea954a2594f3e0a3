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
import { ConnectError } from "../errors.js";
/** A failure of one attempt, with whether it happened in the TLS handshake. */
class AttemptError extends Error {
    kind;
    constructor(message, kind, options) {
        super(message, options);
        this.kind = kind;
    }
}
/**
 * Dials the addresses in order.
 *
 * @throws ConnectError naming every address tried, or `abort.reason` when
 * `abort` fires first.
 */
export async function connect(endpoints, abort) {
    const attempts = [];
    let kind = "network";
    for (const address of endpoints.addresses) {
        abort?.throwIfAborted();
        try {
            const socket = await dial(endpoints, address, abort);
            return { socket, address };
        }
        catch (err) {
            if (abort?.aborted)
                throw abort.reason;
            const error = err instanceof AttemptError ? err : new AttemptError(String(err), "network");
            attempts.push({ address: address.toString(), error });
            kind = error.kind;
        }
    }
    throw new ConnectError(attempts, kind);
}
function dial(endpoints, address, abort) {
    const options = endpoints.tls;
    const socket = options === null
        ? net.connect({ host: address.host, port: address.port, noDelay: true })
        : tls.connect({ ...options, host: address.host, port: address.port });
    if (options !== null)
        socket.setNoDelay(true);
    return new Promise((resolve, reject) => {
        let tcpUp = false;
        const settle = (err) => {
            clearTimeout(timer);
            socket.off("connect", onConnect);
            socket.off("secureConnect", onReady);
            socket.off("error", onError);
            abort?.removeEventListener("abort", onAbort);
            if (err === null) {
                resolve(socket);
            }
            else {
                socket.destroy();
                reject(err);
            }
        };
        const onConnect = () => {
            tcpUp = true;
            if (options === null)
                settle(null);
        };
        const onReady = () => settle(null);
        const onError = (err) => {
            if (options !== null && (tcpUp || isTlsError(err))) {
                settle(new AttemptError(tlsMessage(address, err), "tls", { cause: err }));
            }
            else {
                settle(new AttemptError(err.message, "network", { cause: err }));
            }
        };
        const onAbort = () => settle(abort?.reason);
        const timer = setTimeout(() => {
            settle(new AttemptError(`no connection within the connect timeout of ${endpoints.connectTimeout}ms`, "timeout"));
        }, endpoints.connectTimeout);
        timer.unref();
        socket.on("connect", onConnect);
        socket.on("secureConnect", onReady);
        socket.on("error", onError);
        abort?.addEventListener("abort", onAbort, { once: true });
    });
}
/** Whether a socket error is OpenSSL's or the certificate check's. */
export function isTlsError(err) {
    if (!(err instanceof Error))
        return false;
    const code = err.code ?? "";
    return (code.startsWith("ERR_SSL_") ||
        code.startsWith("ERR_TLS_") ||
        code.startsWith("CERT_") ||
        code.includes("CERT") ||
        code.startsWith("UNABLE_TO_") ||
        code === "DEPTH_ZERO_SELF_SIGNED_CERT" ||
        code === "SELF_SIGNED_CERT_IN_CHAIN" ||
        "library" in err);
}
function tlsMessage(address, err) {
    const code = err.code;
    if (code === "ECONNRESET" ||
        code === "ERR_SSL_WRONG_VERSION_NUMBER" ||
        code === "ERR_SSL_PACKET_LENGTH_TOO_LONG" ||
        code === "EPIPE" ||
        /wrong version number|packet length too long|socket disconnected before secure/i.test(err.message)) {
        return `${address} does not speak TLS: the TLS handshake failed (${err.message}); connect without TLS, or check the port`;
    }
    return `the TLS handshake failed: ${err.message}`;
}
//# sourceMappingURL=connect.js.map