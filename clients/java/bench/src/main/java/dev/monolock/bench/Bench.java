package dev.monolock.bench;

import dev.monolock.MonolockClient;
import dev.monolock.MonolockLock;
import dev.monolock.MonolockTls;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.ToDoubleFunction;
import java.util.stream.Stream;
import javax.net.ssl.SSLContext;

/**
 * The Java client's figures for BENCHMARKS.md ("Java client"), v2 and
 * forced v1 side by side in one run against one server this program
 * starts: lock cycle p50/p99 and cycles/s with 1 and 16 threads, the same
 * over TLS, and what holding 1,000 locks costs the process (connections,
 * threads, heap). With each cycle figure, what a cycle costs this process:
 * CPU time (all its threads) and write system calls (from /proc/self/io),
 * which a loaded machine disturbs less than it does the wall clock.
 *
 * <pre>
 * java -cp client/target/monolock-client-0.1.0.jar:bench/target/monolock-bench-0.1.0.jar \
 *     dev.monolock.bench.Bench --bin ../../target/release/monolock [--cycles 5000] [--rounds 3]
 * </pre>
 *
 * The TLS certificate (ECDSA P-256) is made with the openssl command.
 */
public final class Bench {
    static final Duration LEASE = Duration.ofSeconds(10);

    public static void main(String[] args) throws Exception {
        String bin = System.getenv("MONOLOCK_BIN");
        int cycles = 5000;
        int rounds = 3;
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--bin" -> bin = args[i + 1];
                case "--cycles" -> cycles = Integer.parseInt(args[i + 1]);
                case "--rounds" -> rounds = Integer.parseInt(args[i + 1]);
                default -> throw new IllegalArgumentException("unknown option " + args[i]);
            }
        }
        if (bin == null) {
            throw new IllegalArgumentException("--bin PATH (or MONOLOCK_BIN): the monolock server binary");
        }
        Path dir = Files.createTempDirectory("monolock-java-bench");
        makeCertificate(dir);
        Server plain = Server.start(bin);
        Server tls = Server.start(bin, "--tls-cert", dir.resolve("server.pem").toString(), "--tls-key",
                dir.resolve("server.key").toString());
        SSLContext context = MonolockTls.trusting(dir.resolve("server.pem"));
        try {
            System.out.printf("Java %s, %d cycles per figure after 200 warm-up, %d rounds (medians)%n%n",
                    System.getProperty("java.version"), cycles, rounds);
            System.out.println("| client | threads | cycle p50 | cycle p99 | cycles/s | CPU per cycle "
                    + "| writes per cycle | p50 v1 / v2 |");
            System.out.println("|---|---|---|---|---|---|---|---|");
            for (int threads : new int[] {1, 16}) {
                List<Figures> v2Rounds = new ArrayList<>();
                List<Figures> v1Rounds = new ArrayList<>();
                for (int round = 0; round < rounds; round++) {
                    // The versions take turns at running first.
                    for (boolean v1 : round % 2 == 0 ? new boolean[] {false, true} : new boolean[] {true, false}) {
                        (v1 ? v1Rounds : v2Rounds).add(cycles(plain.address, null, v1, threads, cycles));
                    }
                }
                Figures v2 = Figures.median(v2Rounds);
                Figures v1 = Figures.median(v1Rounds);
                row("Java, v2", threads, v2, null);
                row("Java, v1 forced", threads, v1, v1.p50 / v2.p50);
            }
            int tlsCycles = Math.max(200, cycles / 10);
            List<Figures> tlsV2 = new ArrayList<>();
            List<Figures> tlsV1 = new ArrayList<>();
            for (int round = 0; round < rounds; round++) {
                tlsV2.add(cycles(tls.address, context, false, 1, tlsCycles));
                tlsV1.add(cycles(tls.address, context, true, 1, tlsCycles));
            }
            Figures tlsV2Median = Figures.median(tlsV2);
            Figures tlsV1Median = Figures.median(tlsV1);
            row("Java over TLS, v2", 1, tlsV2Median, null);
            row("Java over TLS, v1 forced", 1, tlsV1Median, tlsV1Median.p50 / tlsV2Median.p50);
            System.out.println();
            System.out.println("| holding 1,000 locks | take 1,000 | connections | threads added | heap added |");
            System.out.println("|---|---|---|---|---|");
            for (boolean forceV1 : new boolean[] {false, true}) {
                hold(plain.address, forceV1, 1000);
            }
        } finally {
            plain.stop();
            tls.stop();
            try (Stream<Path> files = Files.list(dir)) {
                for (Path file : files.toList()) {
                    Files.delete(file);
                }
            }
            Files.delete(dir);
        }
    }

    /** One figure: latencies in nanoseconds, CPU in nanoseconds per cycle. */
    record Figures(double p50, double p99, double perSecond, double cpuPerCycle, double writesPerCycle) {
        static Figures median(List<Figures> all) {
            return new Figures(median(all, Figures::p50), median(all, Figures::p99),
                    median(all, Figures::perSecond), median(all, Figures::cpuPerCycle),
                    median(all, Figures::writesPerCycle));
        }

        private static double median(List<Figures> all, ToDoubleFunction<Figures> field) {
            double[] sorted = all.stream().mapToDouble(field).sorted().toArray();
            return sorted[sorted.length / 2];
        }
    }

    static void row(String client, int threads, Figures figures, Double ratio) {
        System.out.printf(Locale.ROOT, "| %s | %d | %.0f µs | %.0f µs | %.0f | %.1f µs | %.2f | %s |%n", client,
                threads, figures.p50 / 1000, figures.p99 / 1000, figures.perSecond, figures.cpuPerCycle / 1000,
                figures.writesPerCycle, ratio == null ? "" : String.format(Locale.ROOT, "%.2f", ratio));
    }

    /** {@code threads} threads, each on its own name, lock + release {@code count} times in all. */
    static Figures cycles(String address, SSLContext tls, boolean forceV1, int threads, int count)
            throws Exception {
        MonolockClient.Builder builder = MonolockClient.builder(address);
        if (tls != null) {
            builder.tls(tls).serverName("localhost");
        }
        if (forceV1) {
            builder.forceV1();
        }
        try (MonolockClient client = builder.build()) {
            int each = Math.max(1, count / threads);
            long[][] samples = new long[threads][each];
            CountDownLatch ready = new CountDownLatch(threads);
            CountDownLatch go = new CountDownLatch(1);
            List<Thread> workers = new ArrayList<>();
            Throwable[] failure = new Throwable[1];
            for (int t = 0; t < threads; t++) {
                int n = t;
                Thread worker = new Thread(() -> {
                    String name = "bench/java/" + n;
                    try {
                        for (int i = 0; i < 200 / threads + 1; i++) {
                            client.lock(name, LEASE).release();
                        }
                        ready.countDown();
                        go.await();
                        for (int i = 0; i < each; i++) {
                            long start = System.nanoTime();
                            MonolockLock lock = client.lock(name, LEASE);
                            lock.release();
                            samples[n][i] = System.nanoTime() - start;
                        }
                    } catch (Throwable err) {
                        synchronized (failure) {
                            failure[0] = err;
                        }
                        ready.countDown();
                    }
                });
                worker.start();
                workers.add(worker);
            }
            ready.await();
            long cpuBefore = processCpuNanos();
            long writesBefore = writeCalls();
            long start = System.nanoTime();
            go.countDown();
            for (Thread worker : workers) {
                worker.join();
            }
            long elapsed = System.nanoTime() - start;
            long cpu = processCpuNanos() - cpuBefore;
            long writes = writeCalls() - writesBefore;
            if (failure[0] != null) {
                throw new IllegalStateException("a bench thread failed", failure[0]);
            }
            long[] all = Arrays.stream(samples).flatMapToLong(Arrays::stream).sorted().toArray();
            return new Figures(all[all.length / 2], all[(int) (all.length * 0.99)],
                    all.length * 1e9 / elapsed, (double) cpu / all.length, (double) writes / all.length);
        }
    }

    static void hold(String address, boolean forceV1, int count) throws Exception {
        long heapBefore = settledHeap();
        long socketsBefore = sockets();
        long threadsBefore = threads();
        MonolockClient.Builder builder = MonolockClient.builder(address);
        if (forceV1) {
            builder.forceV1();
        }
        try (MonolockClient client = builder.build()) {
            List<MonolockLock> locks = new ArrayList<>();
            long start = System.nanoTime();
            for (int i = 0; i < count; i++) {
                locks.add(client.lock("bench/java/held/" + i, LEASE));
            }
            long took = System.nanoTime() - start;
            long heap = settledHeap() - heapBefore;
                System.out.printf(Locale.ROOT, "| Java, %s | %d ms | %d | %d (%d in all) | %.1f MB |%n",
                    forceV1 ? "v1 forced" : "v2", took / 1_000_000, sockets() - socketsBefore,
                    threads() - threadsBefore, threads(), heap / 1e6);
            for (MonolockLock lock : locks) {
                lock.release();
            }
        }
    }

    /** The heap in use once collections no longer shrink it (the earlier figures' garbage gone). */
    static long settledHeap() throws InterruptedException {
        long used = Long.MAX_VALUE;
        for (int i = 0; i < 10; i++) {
            System.gc();
            long now = usedHeap();
            if (now >= used) {
                return now;
            }
            used = now;
            Thread.sleep(50);
        }
        return used;
    }

    static long usedHeap() {
        Runtime runtime = Runtime.getRuntime();
        return runtime.totalMemory() - runtime.freeMemory();
    }

    /** CPU time of this process, every thread. */
    static long processCpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime();
    }

    /** Write system calls of this process so far ({@code syscw} of /proc/self/io). */
    static long writeCalls() throws IOException {
        for (String line : Files.readAllLines(Path.of("/proc/self/io"))) {
            if (line.startsWith("syscw:")) {
                return Long.parseLong(line.substring(6).trim());
            }
        }
        throw new IOException("/proc/self/io has no syscw line");
    }

    /** Open sockets of this process. */
    static long sockets() throws IOException {
        try (Stream<Path> fds = Files.list(Path.of("/proc/self/fd"))) {
            return fds.filter(fd -> {
                try {
                    return Files.readSymbolicLink(fd).toString().startsWith("socket:");
                } catch (IOException gone) {
                    return false;
                }
            }).count();
        }
    }

    /** Threads of this process, as the kernel counts them. */
    static long threads() throws IOException {
        for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
            if (line.startsWith("Threads:")) {
                return Long.parseLong(line.substring(8).trim());
            }
        }
        return -1;
    }

    static void makeCertificate(Path dir) throws IOException, InterruptedException {
        run(dir, "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", "server.key", "-out", "server.pem", "-days", "1", "-subj", "/CN=localhost",
                "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1");
    }

    static void run(Path dir, String... command) throws IOException, InterruptedException {
        Process process = new ProcessBuilder(command).directory(dir.toFile()).redirectErrorStream(true).start();
        String output = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (process.waitFor() != 0) {
            throw new IOException(String.join(" ", command) + " failed: " + output);
        }
    }

    /** {@code monolock serve} on a free loopback port. */
    record Server(Process process, String address) {
        static Server start(String bin, String... extra) throws IOException, InterruptedException {
            List<String> command = new ArrayList<>(List.of(bin, "serve", "--listen", "127.0.0.1:0",
                    "--admin-listen", "127.0.0.1:0", "--log-format", "json"));
            command.addAll(Arrays.asList(extra));
            Process process = new ProcessBuilder(command).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
            String[] address = new String[1];
            CountDownLatch listening = new CountDownLatch(1);
            Thread reader = new Thread(() -> {
                try (BufferedReader lines = new BufferedReader(
                        new InputStreamReader(process.getErrorStream(), StandardCharsets.UTF_8))) {
                    String marker = "\"message\":\"listening\",\"addr\":\"";
                    String line;
                    while ((line = lines.readLine()) != null) {
                        int at = line.indexOf(marker);
                        if (at >= 0 && address[0] == null) {
                            String rest = line.substring(at + marker.length());
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
            if (!listening.await(30, TimeUnit.SECONDS)) {
                process.destroyForcibly();
                throw new IOException("monolock serve did not start listening");
            }
            return new Server(process, address[0]);
        }

        void stop() throws InterruptedException {
            process.destroy();
            process.waitFor();
        }
    }
}
