package dev.monolock;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.List;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

/**
 * Builds an {@link SSLContext} from the PEM files a monolock deployment
 * uses: the CA that signed the server's certificate and, for mTLS, the
 * client's certificate chain and its PKCS#8 private key (RSA, EC or
 * Ed25519). The JDK alone: no key store to convert.
 */
public final class MonolockTls {
    private MonolockTls() {}

    /** Trusts the CA in {@code caPem}; no client certificate. */
    public static SSLContext trusting(Path caPem) {
        return context(caPem, null, null);
    }

    /** Trusts the CA in {@code caPem} and presents {@code certPem} with {@code keyPem} (mTLS). */
    public static SSLContext mutual(Path caPem, Path certPem, Path keyPem) {
        return context(caPem, certPem, keyPem);
    }

    private static SSLContext context(Path caPem, Path certPem, Path keyPem) {
        try {
            CertificateFactory factory = CertificateFactory.getInstance("X.509");
            KeyStore trust = KeyStore.getInstance(KeyStore.getDefaultType());
            trust.load(null, null);
            int n = 0;
            for (Certificate ca : certificates(factory, caPem)) {
                trust.setCertificateEntry("ca-" + n++, ca);
            }
            TrustManagerFactory trustManagers =
                    TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            trustManagers.init(trust);
            KeyManagerFactory keyManagers = null;
            if (certPem != null && keyPem != null) {
                KeyStore identity = KeyStore.getInstance(KeyStore.getDefaultType());
                identity.load(null, null);
                char[] password = new char[0];
                Collection<? extends Certificate> chain = certificates(factory, certPem);
                identity.setKeyEntry("client", privateKey(keyPem), password, chain.toArray(new Certificate[0]));
                keyManagers = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
                keyManagers.init(identity, password);
            }
            SSLContext context = SSLContext.getInstance("TLS");
            context.init(keyManagers == null ? null : keyManagers.getKeyManagers(),
                    trustManagers.getTrustManagers(), null);
            return context;
        } catch (IOException | GeneralSecurityException err) {
            throw new IllegalArgumentException("cannot build TLS settings from PEM files: " + err.getMessage(), err);
        }
    }

    private static Collection<? extends Certificate> certificates(CertificateFactory factory, Path pem)
            throws IOException, GeneralSecurityException {
        try (InputStream in = Files.newInputStream(pem)) {
            Collection<? extends Certificate> certificates = factory.generateCertificates(in);
            if (certificates.isEmpty()) {
                throw new GeneralSecurityException(pem + " holds no certificate");
            }
            return certificates;
        }
    }

    private static PrivateKey privateKey(Path pem) throws IOException, GeneralSecurityException {
        String text = Files.readString(pem, StandardCharsets.US_ASCII);
        String begin = "-----BEGIN PRIVATE KEY-----";
        int start = text.indexOf(begin);
        int end = text.indexOf("-----END PRIVATE KEY-----");
        if (start < 0 || end < start) {
            throw new GeneralSecurityException(pem + " holds no PKCS#8 key (BEGIN PRIVATE KEY);"
                    + " convert it with `openssl pkcs8 -topk8 -nocrypt`");
        }
        byte[] der = Base64.getMimeDecoder().decode(text.substring(start + begin.length(), end));
        List<String> tried = new ArrayList<>();
        for (String algorithm : List.of("EC", "RSA", "Ed25519")) {
            try {
                return KeyFactory.getInstance(algorithm).generatePrivate(new PKCS8EncodedKeySpec(der));
            } catch (GeneralSecurityException err) {
                tried.add(algorithm);
            }
        }
        throw new GeneralSecurityException(pem + ": not an " + String.join(", ", tried) + " key");
    }
}
