package dev.monolock;

import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * A throwaway PKI made with the openssl command: a server CA and a server
 * certificate for 127.0.0.1 and localhost, a client CA and a client
 * certificate with a URI identity, and a stranger CA that signed nothing
 * the server shows. EC P-256 keys in PKCS#8.
 */
final class TestPki {
    static final String CLIENT_IDENTITY = "spiffe://test/java-client";

    final Path dir;
    final Path serverCa;
    final Path serverCert;
    final Path serverKey;
    final Path clientCa;
    final Path clientCert;
    final Path clientKey;
    final Path strangerCa;

    private TestPki(Path dir) {
        this.dir = dir;
        serverCa = dir.resolve("server-ca.pem");
        serverCert = dir.resolve("server.pem");
        serverKey = dir.resolve("server.key");
        clientCa = dir.resolve("client-ca.pem");
        clientCert = dir.resolve("client.pem");
        clientKey = dir.resolve("client.key");
        strangerCa = dir.resolve("stranger-ca.pem");
    }

    static TestPki make(Path dir) throws IOException, InterruptedException {
        TestPki pki = new TestPki(dir);
        pki.ca("server-ca", "java test server CA");
        pki.ca("client-ca", "java test client CA");
        pki.ca("stranger-ca", "stranger CA");
        pki.leaf("server", "server-ca", "127.0.0.1",
                "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n");
        pki.leaf("client", "client-ca", "java client",
                "subjectAltName=URI:" + CLIENT_IDENTITY + "\nextendedKeyUsage=clientAuth\n");
        return pki;
    }

    private void ca(String name, String subject) throws IOException, InterruptedException {
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", name + ".key");
        openssl("req", "-x509", "-new", "-key", name + ".key", "-days", "2", "-subj", "/CN=" + subject,
                "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,digitalSignature",
                "-out", name + ".pem");
    }

    private void leaf(String name, String ca, String subject, String extensions)
            throws IOException, InterruptedException {
        Files.writeString(dir.resolve(name + ".ext"), extensions, StandardCharsets.US_ASCII);
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", name + ".key");
        openssl("req", "-new", "-key", name + ".key", "-subj", "/CN=" + subject, "-out", name + ".csr");
        openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
                "-CAcreateserial", "-days", "2", "-extfile", name + ".ext", "-out", name + ".pem");
    }

    private void openssl(String... args) throws IOException, InterruptedException {
        List<String> command = new ArrayList<>();
        command.add("openssl");
        command.addAll(Arrays.asList(args));
        Process process = new ProcessBuilder(command).directory(dir.toFile()).redirectErrorStream(true).start();
        String output = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (process.waitFor() != 0) {
            fail(String.join(" ", command) + " failed: " + output);
        }
    }
}
