package dev.monolock;

import dev.monolock.Arguments.Address;
import dev.monolock.Frames.Frame;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.security.cert.CertificateException;
import java.time.Duration;
import java.util.List;
import javax.net.ssl.SNIHostName;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLException;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;

/**
 * Opens a connection (plain or TLS), writes the first frame and reads the
 * server's first whole frame, telling a monolock server from the wrong
 * thing: an HTTP server, a TLS port spoken to in plain, a plain port spoken
 * to in TLS, a port that never answers. Blocking, in the caller's thread.
 */
final class Connector {
    private final SSLContext tls;
    private final String serverName;
    private final Duration ioTimeout;

    Connector(SSLContext tls, String serverName, Duration ioTimeout) {
        this.tls = tls;
        this.serverName = serverName;
        this.ioTimeout = ioTimeout;
    }

    Duration ioTimeout() {
        return ioTimeout;
    }

    /** An open connection and what has been read of it so far. */
    static final class Connection {
        final Address address;
        final Socket socket;
        final InputStream in;
        final OutputStream out;
        final Frames.Decoder decoder = new Frames.Decoder();

        Connection(Address address, Socket socket) throws IOException {
            this.address = address;
            this.socket = socket;
            this.in = socket.getInputStream();
            this.out = socket.getOutputStream();
        }

        void close() {
            try {
                socket.close();
            } catch (IOException ignored) {
                // Closing is the last thing done with it; nothing to report.
            }
        }
    }

    /** The first frame the server sent, and when it was sent and read. */
    record Answer(Connection connection, Frame frame, long sentAt, long readAt) {}

    /** One address could not be used; {@code tls} says whether TLS was the problem. */
    static final class Refusal extends Exception {
        private static final long serialVersionUID = 1L;
        final boolean temporary;
        final boolean tls;

        Refusal(String message, boolean temporary, boolean tls, Throwable cause) {
            super(message, cause);
            this.temporary = temporary;
            this.tls = tls;
        }
    }

    /** Connects to {@code address}, writes {@code first} and reads the answer. */
    Answer open(Address address, byte[] first) throws Refusal {
        int timeoutMs = (int) Math.max(1, ioTimeout.toMillis());
        Socket raw = new Socket();
        Connection connection = null;
        try {
            try {
                raw.setTcpNoDelay(true);
                raw.connect(new InetSocketAddress(address.host(), address.port()), timeoutMs);
            } catch (SocketTimeoutException err) {
                throw new Refusal(address + ": did not accept the connection within " + seconds(), true, false, err);
            } catch (IOException err) {
                throw new Refusal(address + ": " + describe(err), true, false, err);
            }
            Socket socket = raw;
            raw.setSoTimeout(timeoutMs);
            if (tls != null) {
                socket = handshake(raw, address);
            }
            connection = new Connection(address, socket);
            long sentAt = System.nanoTime();
            Frame frame;
            try {
                connection.out.write(first);
                connection.out.flush();
                frame = readFirst(connection);
            } catch (SocketTimeoutException | SSLException err) {
                throw err;
            } catch (IOException err) {
                if (tls == null) {
                    throw err;
                }
                throw tlsRejection(connection, err);
            }
            long readAt = System.nanoTime();
            socket.setSoTimeout(0);
            return new Answer(connection, frame, sentAt, readAt);
        } catch (Refusal refusal) {
            closeQuietly(connection, raw);
            throw refusal;
        } catch (SocketTimeoutException err) {
            closeQuietly(connection, raw);
            throw new Refusal(address + " did not answer within " + seconds()
                    + " (is it a monolock server?)", true, false, err);
        } catch (SSLException err) {
            closeQuietly(connection, raw);
            throw tlsRefusal(address, err);
        } catch (IOException err) {
            closeQuietly(connection, raw);
            throw new Refusal(address + ": " + describe(err), true, false, err);
        }
    }

    /**
     * Reads the server's next whole frame on a connection whose first
     * answer {@link #open} has read (the answer to HELLO after OPENED),
     * within the I/O timeout.
     */
    Answer next(Connection connection, long sentAt) throws Refusal {
        byte[] buffer = new byte[512];
        try {
            connection.socket.setSoTimeout((int) Math.max(1, ioTimeout.toMillis()));
            while (true) {
                Frame frame = connection.decoder.next();
                if (frame != null) {
                    connection.socket.setSoTimeout(0);
                    return new Answer(connection, frame, sentAt, System.nanoTime());
                }
                int n = connection.in.read(buffer);
                if (n < 0) {
                    throw new Refusal(connection.address + " closed the connection after OPENED, before its answer"
                            + " to HELLO", true, false, null);
                }
                connection.decoder.feed(buffer, 0, n);
            }
        } catch (Frames.MalformedFrame err) {
            throw new Refusal(connection.address + " broke the protocol after OPENED: " + err.getMessage(),
                    false, false, err);
        } catch (SocketTimeoutException err) {
            throw new Refusal(connection.address + " did not answer HELLO within " + seconds(), true, false, err);
        } catch (IOException err) {
            throw new Refusal(connection.address + ": " + describe(err), true, false, err);
        }
    }

    private SSLSocket handshake(Socket raw, Address address) throws Refusal, IOException {
        String name = serverName != null ? serverName : address.host();
        SSLSocket socket = (SSLSocket) tls.getSocketFactory().createSocket(raw, name, address.port(), true);
        SSLParameters parameters = socket.getSSLParameters();
        parameters.setEndpointIdentificationAlgorithm("HTTPS");
        if (!name.isEmpty() && Character.isLetter(name.charAt(name.length() - 1))) {
            parameters.setServerNames(List.of(new SNIHostName(name)));
        }
        socket.setSSLParameters(parameters);
        try {
            socket.startHandshake();
        } catch (SocketTimeoutException err) {
            throw new Refusal(address + " did not complete the TLS handshake within " + seconds(), true, true, err);
        } catch (SSLException err) {
            throw tlsRefusal(address, err);
        } catch (EOFException err) {
            throw new Refusal(address + " closed the connection during the TLS handshake: it does not speak TLS",
                    false, true, err);
        }
        return socket;
    }

    /**
     * A TLS connection that fails right after the handshake: with TLS 1.3
     * the server checks the client's certificate after the client has
     * finished, and its alert may race the client's first write. Reads the
     * alert when it is there.
     */
    private Refusal tlsRejection(Connection connection, IOException err) {
        try {
            connection.in.read();
        } catch (SSLException alert) {
            return tlsRefusal(connection.address, alert);
        } catch (IOException ignored) {
            // No alert to read: the failure below says what is known.
        }
        return new Refusal(connection.address + " closed the TLS connection before answering"
                + " (was a client certificate required or refused?): " + err.getMessage(), false, true, err);
    }

    private Refusal tlsRefusal(Address address, SSLException err) {
        for (Throwable cause = err; cause != null; cause = cause.getCause()) {
            if (cause instanceof CertificateException) {
                return new Refusal(address + ": TLS certificate verification failed: " + cause.getMessage(),
                        false, true, err);
            }
        }
        String text = String.valueOf(err.getMessage());
        if (text.contains("nrecognized SSL message") || text.contains("plaintext")
                || text.contains("Remote host terminated") || text.contains("Unsupported")) {
            return new Refusal(address + " does not speak TLS (" + text + ")", false, true, err);
        }
        return new Refusal(address + ": TLS failed: " + text, false, true, err);
    }

    /** Reads until one whole frame is in, refusing what is no monolock server. */
    private Frame readFirst(Connection connection) throws IOException, Refusal {
        byte[] buffer = new byte[512];
        byte[] seen = new byte[0];
        while (true) {
            int n = connection.in.read(buffer);
            if (n < 0) {
                if (seen.length == 0 && tls == null) {
                    throw new Refusal(connection.address + " closed the connection without answering:"
                            + " it expects TLS, or is not a monolock server", false, false, null);
                }
                throw new Refusal(connection.address + " closed the connection in the middle of its answer",
                        true, false, null);
            }
            if (seen.length < 8) {
                byte[] grown = new byte[Math.min(8, seen.length + n)];
                System.arraycopy(seen, 0, grown, 0, seen.length);
                System.arraycopy(buffer, 0, grown, seen.length, grown.length - seen.length);
                seen = grown;
            }
            if (seen.length > 0 && seen[0] == 'H') {
                throw new Refusal(connection.address + " is not a monolock server: an HTTP server answered",
                        false, false, null);
            }
            if (seen.length > 0 && seen[0] == 0x15 && tls == null) {
                throw new Refusal(connection.address + " answered with a TLS alert: it expects TLS",
                        false, false, null);
            }
            connection.decoder.feed(buffer, 0, n);
            try {
                Frame frame = connection.decoder.next();
                if (frame != null) {
                    return frame;
                }
            } catch (Frames.MalformedFrame err) {
                throw new Refusal(connection.address + " is not a monolock server: " + err.getMessage(),
                        false, false, err);
            }
        }
    }

    private String seconds() {
        long ms = ioTimeout.toMillis();
        return ms % 1000 == 0 ? (ms / 1000) + " s" : ms + " ms";
    }

    private static String describe(IOException err) {
        String message = err.getMessage();
        if (err instanceof java.net.ConnectException) {
            return "connection refused" + (message != null && !message.contains("refused") ? " (" + message + ")" : "");
        }
        if (err instanceof java.net.UnknownHostException) {
            return "unknown host";
        }
        return message == null ? err.getClass().getSimpleName() : message;
    }

    private static void closeQuietly(Connection connection, Socket raw) {
        if (connection != null) {
            connection.close();
        }
        try {
            raw.close();
        } catch (IOException ignored) {
            // Giving up on this address; the refusal says why.
        }
    }
}
