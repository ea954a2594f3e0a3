package dev.monolock;

import static org.junit.jupiter.api.Assertions.fail;

import dev.monolock.testkit.Json;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.InputStream;
import java.net.HttpURLConnection;
import java.net.URI;
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * The real {@code monolock serve} ($MONOLOCK_BIN) on free loopback ports,
 * its addresses read from its JSON log, and its admin API.
 */
final class TestServer implements AutoCloseable {
    /** The bound of every wait on a real event: generous, the machine is shared. */
    static final Duration PATIENCE = Duration.ofSeconds(20);

    final Process process;
    final String address;
    final String admin;

    private TestServer(Process process, String address, String admin) {
        this.process = process;
        this.address = address;
        this.admin = admin;
    }

    static Path binary() {
        String bin = System.getenv("MONOLOCK_BIN");
        if (bin == null || bin.isBlank() || !Files.isExecutable(Path.of(bin))) {
            fail("MONOLOCK_BIN must name the monolock server binary (cargo build -p monolock;"
                    + " crates/monolock/tests/java_client.rs sets it): got " + bin);
        }
        return Path.of(bin);
    }

    static TestServer start(String... extra) throws IOException, InterruptedException {
        List<String> command = new ArrayList<>(List.of(binary().toString(), "serve", "--listen", "127.0.0.1:0",
                "--admin-listen", "127.0.0.1:0", "--log-format", "json"));
        command.addAll(Arrays.asList(extra));
        ProcessBuilder builder = new ProcessBuilder(command);
        builder.redirectOutput(ProcessBuilder.Redirect.DISCARD);
        builder.environment().remove("MONOLOCK_ADDRESS");
        Process process = builder.start();
        String[] found = new String[2];
        CountDownLatch listening = new CountDownLatch(2);
        Thread reader = new Thread(() -> follow(process.getErrorStream(), found, listening), "monolock-serve-log");
        reader.setDaemon(true);
        reader.start();
        if (!listening.await(PATIENCE.toMillis(), TimeUnit.MILLISECONDS)) {
            process.destroyForcibly();
            fail("monolock serve did not report both listeners: " + command);
        }
        return new TestServer(process, found[0], found[1]);
    }

    private static void follow(InputStream stderr, String[] found, CountDownLatch listening) {
        try (BufferedReader lines = new BufferedReader(new InputStreamReader(stderr, StandardCharsets.UTF_8))) {
            String line;
            while ((line = lines.readLine()) != null) {
                if (!line.startsWith("{")) {
                    continue;
                }
                Object parsed = Json.parse(line);
                if (!(parsed instanceof Map<?, ?> map)) {
                    continue;
                }
                Object message = map.get("message");
                if ("listening".equals(message) && found[0] == null) {
                    found[0] = String.valueOf(map.get("addr"));
                    listening.countDown();
                } else if ("admin API listening".equals(message) && found[1] == null) {
                    found[1] = String.valueOf(map.get("addr"));
                    listening.countDown();
                }
            }
        } catch (IOException | RuntimeException ignored) {
            // The server has gone: its exit is what the tests look at.
        }
    }

    /** Sends a signal (STOP, CONT, TERM) to the server. */
    void signal(String name) throws IOException, InterruptedException {
        Process kill = new ProcessBuilder("kill", "-" + name, Long.toString(process.pid())).start();
        if (kill.waitFor() != 0) {
            fail("kill -" + name + " failed");
        }
    }

    /** The admin API's view of one lock, or null when it has no holder. */
    @SuppressWarnings("unchecked")
    Map<String, Object> lock(String name) throws IOException {
        return (Map<String, Object>) request("GET", "/api/locks/" + URLEncoder.encode(name, StandardCharsets.UTF_8)
                .replace("+", "%20"));
    }

    long holderToken(String name) throws IOException {
        Map<String, Object> lock = lock(name);
        if (lock == null) {
            fail("lock \"" + name + "\" has no holder");
        }
        Object holder = lock.get("holder");
        return ((Number) ((Map<?, ?>) holder).get("token")).longValue();
    }

    int waiters(String name) throws IOException {
        Map<String, Object> lock = lock(name);
        if (lock == null) {
            return 0;
        }
        return ((List<?>) lock.get("waiters")).size();
    }

    boolean held(String name) throws IOException {
        Map<String, Object> lock = lock(name);
        return lock != null && lock.get("holder") != null;
    }

    void forceRelease(String name) throws IOException {
        if (request("POST", "/api/locks/" + URLEncoder.encode(name, StandardCharsets.UTF_8) + "/release") == null) {
            fail("force-release of \"" + name + "\": no holder");
        }
    }

    private Object request(String method, String path) throws IOException {
        HttpURLConnection http = (HttpURLConnection) URI.create("http://" + admin + path).toURL().openConnection();
        http.setRequestMethod(method);
        http.setConnectTimeout((int) PATIENCE.toMillis());
        http.setReadTimeout((int) PATIENCE.toMillis());
        // The admin API refuses changes without it (a web page cannot send it).
        http.setRequestProperty("X-Requested-By", "monolock-java-tests");
        int status = http.getResponseCode();
        if (status == 404) {
            return null;
        }
        if (status != 200) {
            fail("admin API " + method + " " + path + ": status " + status);
        }
        try (InputStream body = http.getInputStream()) {
            return Json.parse(new String(body.readAllBytes(), StandardCharsets.UTF_8));
        }
    }

    /** Polls state only visible by asking (the admin API) until it holds, at most {@link #PATIENCE}. */
    static void eventually(String what, Check condition) throws Exception {
        long end = System.nanoTime() + PATIENCE.toNanos();
        while (!condition.holds()) {
            if (System.nanoTime() - end > 0) {
                fail("never happened: " + what);
            }
            Thread.sleep(10);
        }
    }

    /** A condition that may ask the server. */
    interface Check {
        boolean holds() throws Exception;
    }

    @Override
    public void close() {
        process.destroy();
        try {
            if (!process.waitFor(PATIENCE.toMillis(), TimeUnit.MILLISECONDS)) {
                process.destroyForcibly();
            }
        } catch (InterruptedException err) {
            process.destroyForcibly();
            Thread.currentThread().interrupt();
        }
    }
}
