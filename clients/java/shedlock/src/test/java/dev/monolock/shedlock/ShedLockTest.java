package dev.monolock.shedlock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.monolock.MonolockClient;
import dev.monolock.MonolockLock;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import net.javacrumbs.shedlock.core.DefaultLockingTaskExecutor;
import net.javacrumbs.shedlock.core.LockConfiguration;
import net.javacrumbs.shedlock.core.SimpleLock;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The provider against the real server, and a fleet of two JVMs running one scheduled job. */
class ShedLockTest {
    static final int SLOTS = 4;
    /** Between two slots of the scheduled job. */
    static final long INTERVAL_MS = 2000;
    /** The job's lockAtLeastFor: a node whose scheduler fires up to this late does not run a slot again. */
    static final long AT_LEAST_MS = 1500;

    @TempDir
    Path dir;

    /** Starts {@code monolock serve} and returns it with its address. */
    static Process server(String[] address) throws IOException, InterruptedException {
        String bin = System.getenv("MONOLOCK_BIN");
        if (bin == null || !Files.isExecutable(Path.of(bin))) {
            fail("MONOLOCK_BIN must name the monolock server binary: got " + bin);
        }
        Process process = new ProcessBuilder(bin, "serve", "--listen", "127.0.0.1:0", "--admin-listen",
                "127.0.0.1:0", "--log-format", "json").redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
        CountDownLatch listening = new CountDownLatch(1);
        Thread reader = new Thread(() -> {
            try (BufferedReader lines = new BufferedReader(
                    new InputStreamReader(process.getErrorStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = lines.readLine()) != null) {
                    int at = line.indexOf("\"message\":\"listening\",\"addr\":\"");
                    if (at >= 0 && address[0] == null) {
                        String rest = line.substring(at + "\"message\":\"listening\",\"addr\":\"".length());
                        address[0] = rest.substring(0, rest.indexOf('"'));
                        listening.countDown();
                    }
                }
            } catch (IOException ignored) {
                // The server exited.
            }
        });
        reader.setDaemon(true);
        reader.start();
        if (!listening.await(20, TimeUnit.SECONDS)) {
            process.destroyForcibly();
            fail("monolock serve did not start listening");
        }
        return process;
    }

    @Test
    void aJobRunsOnceUnderItsTokenAndKeepsTheLockForLockAtLeastFor() throws Exception {
        String[] address = new String[1];
        Process server = server(address);
        try (MonolockClient node = MonolockClient.create(address[0]);
                MonolockClient other = MonolockClient.create(address[0])) {
            MonolockLockProvider provider = new MonolockLockProvider(node);
            MonolockLockProvider rival = new MonolockLockProvider(other);
            LockConfiguration configuration = new LockConfiguration(Instant.now(), "job", Duration.ofSeconds(30),
                    Duration.ofSeconds(3));
            long[] seen = new long[1];
            new DefaultLockingTaskExecutor(provider).executeWithLock((Runnable) () -> {
                seen[0] = MonolockLockProvider.currentToken().orElseThrow();
                assertTrue(rival.lock(configuration).isEmpty(), "the rival node does not run it meanwhile");
            }, configuration);
            assertTrue(seen[0] > 0, "the job saw its fencing token");
            assertTrue(MonolockLockProvider.currentToken().isEmpty(), "no token outside the job");
            assertTrue(other.tryLock("shedlock/job", Duration.ofSeconds(5)).isEmpty(),
                    "held until lockAtLeastFor (3 s) has passed");
            Optional<SimpleLock> later = Optional.empty();
            long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (later.isEmpty() && System.nanoTime() - end < 0) {
                later = rival.lock(configuration);
            }
            assertTrue(later.isPresent(), "released after lockAtLeastFor");
            assertFalse(Instant.now().isBefore(configuration.getLockAtLeastUntil()),
                    "not released before lockAtLeastUntil");
            later.get().unlock();
            Optional<MonolockLock> again = other.tryLock("shedlock/job", Duration.ofSeconds(5));
            assertTrue(again.isEmpty() || again.get().token() > seen[0]);
            again.ifPresent(MonolockLock::close);
        } finally {
            server.destroy();
            server.waitFor();
        }
    }

    @Test
    void twoJvmsRunEachScheduledSlotExactlyOnce() throws Exception {
        String[] address = new String[1];
        Process server = server(address);
        Path runs = dir.resolve("runs.txt");
        List<Process> nodes = new ArrayList<>();
        try {
            String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
            for (String name : List.of("a", "b")) {
                nodes.add(new ProcessBuilder(java, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                        "-cp", System.getProperty("java.class.path"), ScheduledNode.class.getName(), address[0],
                        Integer.toString(SLOTS), runs.toString(), name, Long.toString(INTERVAL_MS),
                        Long.toString(AT_LEAST_MS))
                        .redirectError(ProcessBuilder.Redirect.INHERIT).start());
            }
            List<BufferedReader> outputs = new ArrayList<>();
            for (Process node : nodes) {
                BufferedReader output = new BufferedReader(
                        new InputStreamReader(node.getInputStream(), StandardCharsets.UTF_8));
                assertEquals("ready", output.readLine(), "a node did not start");
                outputs.add(output);
            }
            // Both nodes are up: the same wall-clock slots for both, from a second on.
            long first = System.currentTimeMillis() + 1000;
            for (Process node : nodes) {
                node.getOutputStream().write((first + "\n").getBytes(StandardCharsets.UTF_8));
                node.getOutputStream().flush();
            }
            for (int n = 0; n < nodes.size(); n++) {
                Process node = nodes.get(n);
                StringBuilder text = new StringBuilder();
                for (String line = outputs.get(n).readLine(); line != null; line = outputs.get(n).readLine()) {
                    text.append(line).append('\n');
                }
                String output = text.toString();
                assertTrue(node.waitFor(60, TimeUnit.SECONDS), "a node did not finish");
                assertEquals(0, node.exitValue(), "a node failed: " + output);
                for (int slot = 0; slot < SLOTS; slot++) {
                    assertTrue(output.contains("attempted " + slot + "\n"),
                            "every node attempted slot " + slot + ": " + output);
                }
            }
            List<String> lines = Files.readAllLines(runs, StandardCharsets.UTF_8);
            assertEquals(SLOTS, lines.size(), "one run per slot across the fleet: " + lines);
            Set<Integer> slots = new HashSet<>();
            long previous = 0;
            for (String line : lines) {
                String[] parts = line.split(" ");
                slots.add(Integer.parseInt(parts[0]));
                long token = Long.parseLong(parts[1]);
                assertTrue(token > previous, "each run's token is above the previous run's: " + lines);
                previous = token;
            }
            assertEquals(SLOTS, slots.size(), "every slot ran once: " + lines);
        } finally {
            for (Process node : nodes) {
                node.destroyForcibly();
            }
            server.destroy();
            server.waitFor();
        }
    }
}
