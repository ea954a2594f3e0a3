package dev.monolock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.monolock.ClientTest.Protocol;
import java.nio.file.Path;
import java.time.Duration;
import javax.net.ssl.SSLContext;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/** TLS, mTLS, and connecting to the wrong thing: a connect error naming the problem, never a loss. */
class TlsAndWrongPortTest {
    static final Duration LEASE = Duration.ofSeconds(5);

    @TempDir
    static Path dir;
    static TestPki pki;
    static TestServer plain;
    static TestServer tls;
    static TestServer mtls;

    @BeforeAll
    static void start() throws Exception {
        pki = TestPki.make(dir);
        plain = TestServer.start();
        tls = TestServer.start("--tls-cert", pki.serverCert.toString(), "--tls-key", pki.serverKey.toString());
        mtls = TestServer.start("--tls-cert", pki.serverCert.toString(), "--tls-key", pki.serverKey.toString(),
                "--tls-client-ca", pki.clientCa.toString());
    }

    @AfterAll
    static void stop() {
        plain.close();
        tls.close();
        mtls.close();
    }

    static MonolockClient client(String address, Protocol protocol, SSLContext context, String serverName) {
        MonolockClient.Builder builder = MonolockClient.builder(address).tls(context).serverName(serverName);
        if (protocol == Protocol.V1) {
            builder.forceV1();
        }
        return builder.build();
    }

    @ParameterizedTest
    @EnumSource(Protocol.class)
    void locksOverTlsWithAndWithoutAServerName(Protocol protocol) throws Exception {
        SSLContext trusting = MonolockTls.trusting(pki.serverCa);
        for (String serverName : new String[] {null, "localhost"}) {
            String name = "java/tls/" + protocol + "/" + serverName;
            try (MonolockClient client = client(tls.address, protocol, trusting, serverName);
                    MonolockLock lock = client.lock(name, LEASE)) {
                assertEquals(tls.holderToken(name), lock.token());
                assertTrue(lock.release());
            }
        }
    }

    @ParameterizedTest
    @EnumSource(Protocol.class)
    void anUntrustedServerIsATlsFailureThatIsNotTemporary(Protocol protocol) throws Exception {
        try (MonolockClient client = client(tls.address, protocol, MonolockTls.trusting(pki.strangerCa), null)) {
            TlsFailedException err = assertThrows(TlsFailedException.class, () -> client.lock("x", LEASE));
            assertFalse(err.isTemporary());
            assertTrue(err.getMessage().contains(tls.address), err.getMessage());
            assertTrue(err.getMessage().contains("certificate"), err.getMessage());
        }
    }

    @ParameterizedTest
    @EnumSource(Protocol.class)
    void mutualTlsLocksWithACertificateAndFailsWithout(Protocol protocol) throws Exception {
        String name = "java/mtls/" + protocol;
        SSLContext mutual = MonolockTls.mutual(pki.serverCa, pki.clientCert, pki.clientKey);
        try (MonolockClient client = client(mtls.address, protocol, mutual, null);
                MonolockLock lock = client.lock(name, LEASE)) {
            assertEquals(mtls.holderToken(name), lock.token());
        }
        try (MonolockClient anonymous = client(mtls.address, protocol, MonolockTls.trusting(pki.serverCa), null)) {
            TlsFailedException err = assertThrows(TlsFailedException.class, () -> anonymous.lock(name, LEASE));
            assertFalse(err.isTemporary());
        }
    }

    @ParameterizedTest
    @EnumSource(Protocol.class)
    void aPlainClientToATlsPortIsToldItExpectsTls(Protocol protocol) throws Exception {
        try (MonolockClient client = ClientTest.client(tls.address, protocol)) {
            ConnectFailedException err = assertThrows(ConnectFailedException.class, () -> client.lock("x", LEASE));
            assertFalse(err instanceof TlsFailedException, "the client did not speak TLS");
            assertTrue(err.getMessage().contains(tls.address) && err.getMessage().contains("expects TLS"),
                    err.getMessage());
            assertFalse(err.isTemporary());
        }
    }

    @ParameterizedTest
    @EnumSource(Protocol.class)
    void aTlsClientToAPlainPortIsToldItDoesNotSpeakTls(Protocol protocol) throws Exception {
        try (MonolockClient client = client(plain.address, protocol, MonolockTls.trusting(pki.serverCa), null)) {
            TlsFailedException err = assertThrows(TlsFailedException.class, () -> client.lock("x", LEASE));
            assertTrue(err.getMessage().contains(plain.address) && err.getMessage().contains("does not speak TLS"),
                    err.getMessage());
            assertFalse(err.isTemporary());
        }
    }

    @ParameterizedTest
    @EnumSource(Protocol.class)
    void theAdminPortIsNotAMonolockServer(Protocol protocol) throws Exception {
        try (MonolockClient client = ClientTest.client(plain.admin, protocol)) {
            ConnectFailedException err = assertThrows(ConnectFailedException.class, () -> client.lock("x", LEASE));
            assertEquals(plain.admin + " is not a monolock server: an HTTP server answered", err.getMessage());
            assertFalse(err.isTemporary());
        }
    }

    @ParameterizedTest
    @EnumSource(Protocol.class)
    void aPortThatNeverAnswersIsATemporaryConnectError(Protocol protocol) throws Exception {
        try (SilentPort silent = new SilentPort()) {
            MonolockClient.Builder builder = MonolockClient.builder(silent.address()).ioTimeout(Duration.ofMillis(500));
            if (protocol == Protocol.V1) {
                builder.forceV1();
            }
            try (MonolockClient client = builder.build()) {
                long start = System.nanoTime();
                ConnectFailedException err = assertThrows(ConnectFailedException.class,
                        () -> client.lock("x", LEASE));
                assertTrue(System.nanoTime() - start >= 500_000_000L);
                assertTrue(err.getMessage().contains(silent.address() + " did not answer within 500 ms"),
                        err.getMessage());
                assertTrue(err.isTemporary());
                assertInstanceOf(ConnectFailedException.class, err);
            }
        }
    }
}
