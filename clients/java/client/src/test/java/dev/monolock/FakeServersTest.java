package dev.monolock;

import static dev.monolock.TestServer.PATIENCE;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/**
 * What a real server does not do on demand: answer OPEN as a version 1
 * server does (ERROR 0x10), or break the protocol.
 */
class FakeServersTest {
    static final Duration LEASE = Duration.ofSeconds(5);

    /**
     * A version 1 server in front of the real one: OPEN is answered ERROR
     * 0x10 and closed; a version 1 connection is piped to the real server,
     * half-closes included.
     */
    static final class V1OnlyProxy implements AutoCloseable {
        final ServerSocket socket;
        final AtomicInteger opens = new AtomicInteger();
        final AtomicInteger piped = new AtomicInteger();
        private final String upstream;

        V1OnlyProxy(String upstream) throws IOException {
            this.upstream = upstream;
            socket = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
            daemon(this::accept);
        }

        String address() {
            return "127.0.0.1:" + socket.getLocalPort();
        }

        private void accept() {
            try {
                while (true) {
                    Socket client = socket.accept();
                    daemon(() -> serve(client));
                }
            } catch (IOException closed) {
                // The test is over.
            }
        }

        private void serve(Socket client) {
            try {
                DataInputStream in = new DataInputStream(client.getInputStream());
                byte[] head = new byte[2];
                in.readFully(head);
                if (head[1] == 0x02) {
                    // The OPEN, and the HELLO the client writes with it (read, so that the close is no reset).
                    in.readFully(new byte[4 + 5]);
                    opens.incrementAndGet();
                    byte[] reason = "unsupported protocol version".getBytes(StandardCharsets.UTF_8);
                    OutputStream out = client.getOutputStream();
                    out.write(new byte[] {0x13, 0x10, (byte) reason.length});
                    out.write(reason);
                    out.flush();
                    client.close();
                    return;
                }
                piped.incrementAndGet();
                String[] parts = upstream.split(":");
                Socket server = new Socket(parts[0], Integer.parseInt(parts[1]));
                server.getOutputStream().write(head);
                daemon(() -> pipe(client, server));
                pipe(server, client);
            } catch (IOException err) {
                // A connection of the test ended.
            }
        }

        private static void pipe(Socket from, Socket to) {
            byte[] buffer = new byte[4096];
            try {
                InputStream in = from.getInputStream();
                OutputStream out = to.getOutputStream();
                int n;
                while ((n = in.read(buffer)) >= 0) {
                    out.write(buffer, 0, n);
                    out.flush();
                }
                to.shutdownOutput();
                if (from.isOutputShutdown() || to.isInputShutdown()) {
                    from.close();
                    to.close();
                }
            } catch (IOException err) {
                try {
                    from.close();
                    to.close();
                } catch (IOException ignored) {
                    // Already closed.
                }
            }
        }

        @Override
        public void close() throws IOException {
            socket.close();
        }
    }

    static void daemon(Runnable task) {
        Thread thread = new Thread(task, "fake-server");
        thread.setDaemon(true);
        thread.start();
    }

    @Test
    void anOpenAnsweredWithError0x10FallsBackToV1AndIsRemembered() throws Exception {
        try (TestServer server = TestServer.start(); V1OnlyProxy proxy = new V1OnlyProxy(server.address);
                MonolockClient client = MonolockClient.create(proxy.address());
                MonolockClient other = MonolockClient.create(server.address)) {
            for (int round = 0; round < 3; round++) {
                MonolockLock lock = client.lock("java/fallback", LEASE);
                assertEquals(server.holderToken("java/fallback"), lock.token());
                assertTrue(lock.release(), "a v1 release is confirmed by the server's EOF");
                other.tryLock("java/fallback", LEASE).orElseThrow().close();
            }
            assertEquals(1, proxy.opens.get(), "the address is remembered as version 1");
            assertEquals(3, proxy.piped.get());
        }
    }

    /** A server that grants, then sends a frame nothing asked for. */
    static final class RudeServer implements AutoCloseable {
        final ServerSocket socket;

        RudeServer(boolean v2) throws IOException {
            socket = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
            daemon(() -> {
                try (Socket client = socket.accept()) {
                    DataInputStream in = new DataInputStream(client.getInputStream());
                    OutputStream out = client.getOutputStream();
                    byte[] token = {0, 6, (byte) 0xb4, (byte) 0x9d, 0x20, 0, 0, 0};
                    if (v2) {
                        in.readFully(new byte[6 + 5]);
                        out.write(FramesTest.hex("30 00 00 00 00 00 00 00 01 00 00 04 00"));
                        out.write(FramesTest.hex("39 00 00 00 01 00 00 04 00"));
                        byte[] head = new byte[7];
                        in.readFully(head);
                        in.readFully(new byte[head[6] & 0xff]);
                        out.write(new byte[] {0x31, head[1], head[2], head[3], head[4]});
                        out.write(token);
                        out.write(0x35);
                    } else {
                        byte[] head = new byte[8];
                        in.readFully(head);
                        in.readFully(new byte[((head[6] & 0xff) << 8) | (head[7] & 0xff)]);
                        out.write(0x12);
                        out.write(token);
                        out.write(0x12);
                        out.write(token);
                    }
                    out.flush();
                    in.read();
                } catch (IOException err) {
                    // The client closed, as it must.
                }
            });
        }

        String address() {
            return "127.0.0.1:" + socket.getLocalPort();
        }

        @Override
        public void close() throws IOException {
            socket.close();
        }
    }

    /**
     * A server whose OPENED (and FEATURES) comes a whole lease after it read the OPEN (and HELLO), on
     * its first {@code lateSessions} connections: the client's deadline for
     * the session (0.8 x lease after its send) has passed before the answer
     * is read. The delay is what the test is about, not a wait for anything.
     * Later connections are answered at once and served: ACQUIRE is
     * answered ACQUIRED (token 42), RELEASE RELEASED, PING PONG.
     */
    static final class LateServer implements AutoCloseable {
        static final long TOKEN = 42;
        final ServerSocket socket;
        final AtomicInteger sessions = new AtomicInteger();
        /** Bytes read after the OPEN on the late sessions, counted until the client closed each. */
        final AtomicInteger bytesOnLateSessions = new AtomicInteger();
        final CountDownLatch lateSessionsClosed;

        LateServer(Duration late, int lateSessions) throws IOException {
            socket = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
            lateSessionsClosed = new CountDownLatch(lateSessions);
            daemon(() -> {
                try {
                    while (true) {
                        Socket client = socket.accept();
                        boolean isLate = sessions.incrementAndGet() <= lateSessions;
                        daemon(() -> serve(client, isLate, late));
                    }
                } catch (IOException closed) {
                    // The test is over.
                }
            });
        }

        private void serve(Socket client, boolean isLate, Duration late) {
            try (client) {
                DataInputStream in = new DataInputStream(client.getInputStream());
                OutputStream out = client.getOutputStream();
                // OPEN and HELLO, in one write.
                in.readFully(new byte[6 + 5]);
                if (isLate) {
                    Thread.sleep(late.toMillis());
                }
                out.write(FramesTest.hex("30 00 00 00 00 00 00 00 01 00 00 04 00"));
                out.write(FramesTest.hex("39 00 00 00 01 00 00 04 00"));
                if (isLate) {
                    while (in.read() >= 0) {
                        bytesOnLateSessions.incrementAndGet();
                    }
                    return;
                }
                while (true) {
                    int type = in.read();
                    byte[] claim = new byte[4];
                    if (type == 0x21) {
                        in.readFully(claim);
                        in.readUnsignedByte();
                        in.readFully(new byte[in.readUnsignedByte()]);
                        out.write(0x31);
                        out.write(claim);
                        out.write(ByteBuffer.allocate(8).putLong(TOKEN).array());
                    } else if (type == 0x22) {
                        in.readFully(claim);
                        out.write(0x34);
                        out.write(claim);
                    } else if (type == 0x23) {
                        out.write(0x35);
                    } else {
                        return;
                    }
                }
            } catch (IOException | InterruptedException err) {
                // The client closed, as it must.
            } finally {
                if (isLate) {
                    lateSessionsClosed.countDown();
                }
            }
        }

        String address() {
            return "127.0.0.1:" + socket.getLocalPort();
        }

        @Override
        public void close() throws IOException {
            socket.close();
        }
    }

    @Test
    void aSessionPastItsDeadlineOnArrivalIsReplacedOnceAndCarriesNoClaim() throws Exception {
        Duration lease = Duration.ofSeconds(1);
        try (LateServer server = new LateServer(lease, 1);
                MonolockClient client = MonolockClient.create(server.address())) {
            MonolockLock lock = client.lock("late", lease);
            assertEquals(LateServer.TOKEN, lock.token());
            assertTrue(lock.release(), "RELEASED confirms it");
            assertEquals(2, server.sessions.get(), "the late session, then a fresh one");
            assertTrue(server.lateSessionsClosed.await(PATIENCE.toMillis(), TimeUnit.MILLISECONDS),
                    "the client closed the late session");
            assertEquals(0, server.bytesOnLateSessions.get(), "no ACQUIRE went on the late session");
        }
    }

    @Test
    void sessionsPastTheirDeadlineOnArrivalAreATemporaryConnectErrorThatSaysSo() throws Exception {
        Duration lease = Duration.ofMillis(100);
        try (LateServer server = new LateServer(lease, MonolockClient.NEW_SESSION_ATTEMPTS);
                MonolockClient client = MonolockClient.create(server.address())) {
            ConnectFailedException err = assertThrows(ConnectFailedException.class, () -> client.lock("late", lease));
            assertTrue(err.isTemporary(), "a late answer may be on time next time");
            assertEquals(server.address() + ": the new session ended before the claim could be written (expired: "
                    + V2Session.DEADLINE_PASSED + ")", err.getMessage());
            assertEquals(MonolockClient.NEW_SESSION_ATTEMPTS, server.sessions.get(), "one session, then one more");
            assertTrue(server.lateSessionsClosed.await(PATIENCE.toMillis(), TimeUnit.MILLISECONDS),
                    "the client closed both sessions");
            assertEquals(0, server.bytesOnLateSessions.get(), "no ACQUIRE went on an expired session");
        }
    }

    @Test
    void anUnsolicitedReplyIsAProtocolLossInV2() throws Exception {
        try (RudeServer rude = new RudeServer(true); MonolockClient client = MonolockClient.create(rude.address())) {
            MonolockLock lock = client.lock("rude", LEASE);
            LockLostException loss = lock.lost().get(PATIENCE.toMillis(), TimeUnit.MILLISECONDS);
            assertEquals(LossReason.PROTOCOL, loss.reason());
            assertTrue(loss.getMessage().startsWith("lock \"rude\" lost (protocol): "), loss.getMessage());
        }
    }

    @Test
    void anUnsolicitedAcquiredIsAProtocolLossInV1() throws Exception {
        try (RudeServer rude = new RudeServer(false);
                MonolockClient client = MonolockClient.builder(rude.address()).forceV1().build()) {
            MonolockLock lock = client.lock("rude", LEASE);
            LockLostException loss = lock.lost().get(PATIENCE.toMillis(), TimeUnit.MILLISECONDS);
            assertEquals(LossReason.PROTOCOL, loss.reason());
        }
    }

    /**
     * A server older than the extension "values and observers": OPEN is
     * answered OPENED; a HELLO right behind it ERROR 0x13 ("unknown message
     * type") and the close, as such a server does. A session without HELLO
     * is served: ACQUIRE is ACQUIRED (tokens from 100), RELEASE RELEASED,
     * PING PONG; any frame of the extension would be ERROR 0x13 too, and is
     * counted.
     */
    static final class OlderServer implements AutoCloseable {
        final ServerSocket socket;
        final AtomicInteger sessions = new AtomicInteger();
        final AtomicInteger hellos = new AtomicInteger();
        final AtomicInteger extensionFrames = new AtomicInteger();
        final AtomicLong tokens = new AtomicLong(100);

        OlderServer() throws IOException {
            socket = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
            daemon(() -> {
                try {
                    while (true) {
                        Socket client = socket.accept();
                        daemon(() -> serve(client));
                    }
                } catch (IOException closed) {
                    // The test is over.
                }
            });
        }

        private void serve(Socket client) {
            try (client) {
                DataInputStream in = new DataInputStream(client.getInputStream());
                OutputStream out = client.getOutputStream();
                in.readFully(new byte[6]);
                sessions.incrementAndGet();
                out.write(FramesTest.hex("30 00 00 00 00 00 00 00 01 00 00 04 00"));
                out.flush();
                while (true) {
                    int type = in.read();
                    byte[] claim = new byte[4];
                    if (type == 0x21) {
                        in.readFully(claim);
                        in.readUnsignedByte();
                        in.readFully(new byte[in.readUnsignedByte()]);
                        out.write(0x31);
                        out.write(claim);
                        out.write(ByteBuffer.allocate(8).putLong(tokens.getAndIncrement()).array());
                    } else if (type == 0x22) {
                        in.readFully(claim);
                        out.write(0x34);
                        out.write(claim);
                    } else if (type == 0x23) {
                        out.write(0x35);
                    } else {
                        if (type == 0x24) {
                            hellos.incrementAndGet();
                        } else if (type >= 0x25 && type <= 0x29) {
                            extensionFrames.incrementAndGet();
                        }
                        byte[] reason = "unknown message type".getBytes(StandardCharsets.UTF_8);
                        out.write(new byte[] {0x13, 0x13, (byte) reason.length});
                        out.write(reason);
                        out.flush();
                        return;
                    }
                    out.flush();
                }
            } catch (IOException err) {
                // The client closed.
            }
        }

        String address() {
            return "127.0.0.1:" + socket.getLocalPort();
        }

        @Override
        public void close() throws IOException {
            socket.close();
        }
    }

    @Test
    void aServerOlderThanValuesAndObserversIsUnsupportedForThemAndServesPlainLocks() throws Exception {
        try (OlderServer older = new OlderServer(); MonolockClient client = MonolockClient.create(older.address())) {
            String unsupported = older.address() + " does not support lock values and observers"
                    + " (the server is older than this client): upgrade the server";
            UnsupportedFeatureException value = assertThrows(UnsupportedFeatureException.class,
                    () -> client.lock("older", LEASE, "10.0.0.7:9000"));
            assertEquals(unsupported, value.getMessage());
            assertFalse(value.isTemporary(), "upgrading the server is the only way");
            UnsupportedFeatureException observe = assertThrows(UnsupportedFeatureException.class,
                    () -> client.observe("older"));
            assertEquals(unsupported, observe.getMessage());
            assertThrows(UnsupportedFeatureException.class, () -> client.holder("older"));
            assertThrows(UnsupportedFeatureException.class, () -> client.tryLock("older", LEASE, "x"));

            MonolockLock plain = client.lock("older", LEASE);
            assertEquals(100, plain.token(), "a plain lock works as ever");
            UnsupportedFeatureException set = assertThrows(UnsupportedFeatureException.class,
                    () -> plain.setValue("10.0.0.7:9000"));
            assertEquals(unsupported, set.getMessage());
            assertTrue(plain.isHeld(), "unsupported is never a loss");
            assertTrue(plain.release());
            MonolockLock emptyValue = client.lock("older", LEASE, "");
            assertEquals(101, emptyValue.token(), "an empty value is no value: a plain ACQUIRE");
            assertTrue(emptyValue.release());

            assertEquals(1, older.hellos.get(), "the address is remembered as lacking the extension");
            assertEquals(2, older.sessions.get(), "the session that asked, then one plain session for everything");
            assertEquals(0, older.extensionFrames.get(), "no frame of the extension was ever written");
        }
    }

    /** A port nothing listens on: a call that connected would fail with a connect error instead. */
    static String closedPort() throws IOException {
        try (ServerSocket socket = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return "127.0.0.1:" + socket.getLocalPort();
        }
    }

    @Test
    void forcedToVersionOneValuesAndObserversAreUnsupportedBeforeConnecting() throws Exception {
        try (MonolockClient client = MonolockClient.builder(closedPort()).forceV1().build()) {
            for (Executable call : List.<Executable>of(
                    () -> client.lock("v1", LEASE, "10.0.0.7:9000"),
                    () -> client.tryLock("v1", LEASE, "10.0.0.7:9000"),
                    () -> client.observe("v1"),
                    () -> client.holder("v1"))) {
                UnsupportedFeatureException err = assertThrows(UnsupportedFeatureException.class, call);
                assertEquals("protocol version 1 has no lock values or observers", err.getMessage());
                assertFalse(err.isTemporary());
            }
        }
    }

    @Test
    void aValueOverOneKibibyteOfUtf8IsAnInvalidArgumentBeforeConnecting() throws Exception {
        try (MonolockClient client = MonolockClient.create(closedPort())) {
            IllegalArgumentException ascii = assertThrows(IllegalArgumentException.class,
                    () -> client.lock("big", LEASE, "x".repeat(1025)));
            assertEquals("value of 1025 bytes is above the maximum of 1024 bytes", ascii.getMessage());
            IllegalArgumentException wide = assertThrows(IllegalArgumentException.class,
                    () -> client.tryLock("big", LEASE, "\u00e9".repeat(513)));
            assertEquals("value of 1026 bytes is above the maximum of 1024 bytes", wide.getMessage(),
                    "bytes of UTF-8, not characters");
            assertTrue(client.lockAsync("big", LEASE, null, "x".repeat(1025)).isCompletedExceptionally());
        }
    }

    /**
     * A server with the extension that breaks its promise of token order:
     * OBSERVE is answered OBSERVING, the INITIAL state HELD under token 5,
     * then GRANTED under token 4.
     */
    static final class BackwardsServer implements AutoCloseable {
        final ServerSocket socket;

        BackwardsServer() throws IOException {
            socket = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
            daemon(() -> {
                try (Socket client = socket.accept()) {
                    DataInputStream in = new DataInputStream(client.getInputStream());
                    OutputStream out = client.getOutputStream();
                    in.readFully(new byte[6 + 5]);
                    out.write(FramesTest.hex("30 00 00 00 00 00 00 00 01 00 00 04 00"));
                    out.write(FramesTest.hex("39 00 00 00 01 00 00 04 00"));
                    out.flush();
                    byte[] head = new byte[6];
                    in.readFully(head);
                    in.readFully(new byte[head[5] & 0xff]);
                    byte[] watch = {head[1], head[2], head[3], head[4]};
                    out.write(0x3b);
                    out.write(watch);
                    out.write(0x3e);
                    out.write(watch);
                    out.write(FramesTest.hex("01 01 00 00 00 00 00 00 00 05 00 00 00 00 00 00 00 00 00 00 00"));
                    out.write(0x3e);
                    out.write(watch);
                    out.write(FramesTest.hex("02 00 00 00 00 00 00 00 00 04 00 00 00 00 00 00 00 00 00 00 00"));
                    out.flush();
                    in.read();
                } catch (IOException err) {
                    // The client closed, as it must.
                }
            });
        }

        String address() {
            return "127.0.0.1:" + socket.getLocalPort();
        }

        @Override
        public void close() throws IOException {
            socket.close();
        }
    }

    @Test
    void aWatchToldAnOlderHolderAfterANewerOneEndsTheSessionAsAProtocolViolation() throws Exception {
        try (BackwardsServer server = new BackwardsServer();
                MonolockClient client = MonolockClient.create(server.address());
                Observation observation = client.observe("backwards")) {
            LockState initial = observation.next();
            assertEquals(5, initial.token());
            assertTrue(initial.initial());
            ObservationEndedException end = observation.ended().get(PATIENCE.toMillis(), TimeUnit.MILLISECONDS);
            assertEquals(LossReason.PROTOCOL, end.reason());
            assertFalse(end.isTemporary());
            assertTrue(end.getMessage().startsWith("observation of lock \"backwards\" ended (protocol): "),
                    end.getMessage());
            assertThrows(ObservationEndedException.class, observation::hasNext, "token 4 is never handed on");
        }
    }
}
