package dev.monolock.shedlock;

import dev.monolock.MonolockClient;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import net.javacrumbs.shedlock.core.DefaultLockingTaskExecutor;
import net.javacrumbs.shedlock.core.LockConfiguration;
import net.javacrumbs.shedlock.core.LockingTaskExecutor;

/**
 * One node of a fleet, as a Spring {@code @Scheduled} job with ShedLock
 * would run it: every second from a wall-clock instant shared by the fleet,
 * the same job through ShedLock's executor and the monolock provider. Each
 * run appends {@code slot token node} to the shared file; each attempt is
 * printed on standard output.
 *
 * <p>Arguments: address, slots, run file, node name, slot interval (ms),
 * lockAtLeastFor (ms). It prints {@code ready} once up, then reads the first
 * slot's instant (epoch ms) from standard input.
 */
public final class ScheduledNode {
    public static void main(String[] args) throws Exception {
        String address = args[0];
        int slots = Integer.parseInt(args[1]);
        Path runs = Path.of(args[2]);
        String node = args[3];
        long interval = Long.parseLong(args[4]);
        Duration atLeast = Duration.ofMillis(Long.parseLong(args[5]));
        try (MonolockClient client = MonolockClient.create(address)) {
            LockingTaskExecutor executor = new DefaultLockingTaskExecutor(new MonolockLockProvider(client));
            ScheduledExecutorService scheduler = Executors.newSingleThreadScheduledExecutor();
            System.out.println("ready");
            System.out.flush();
            String line = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
            long first = Long.parseLong(line.trim());
            for (int slot = 0; slot < slots; slot++) {
                int current = slot;
                long at = first + slot * interval;
                scheduler.schedule(() -> {
                    LockConfiguration configuration = new LockConfiguration(Instant.now(), "report",
                            Duration.ofSeconds(30), atLeast);
                    executor.executeWithLock((Runnable) () -> record(runs, current, node), configuration);
                    System.out.println("attempted " + current);
                    System.out.flush();
                }, at - System.currentTimeMillis(), TimeUnit.MILLISECONDS);
            }
            scheduler.shutdown();
            if (!scheduler.awaitTermination(slots + 60L, TimeUnit.SECONDS)) {
                System.exit(2);
            }
            // The last run's lock is released once its lockAtLeastFor has passed;
            // the client's close would end it earlier.
            Thread.sleep(atLeast.toMillis());
        }
    }

    private static void record(Path runs, int slot, String node) {
        long token = MonolockLockProvider.currentToken().orElseThrow();
        String line = slot + " " + token + " " + node + "\n";
        try {
            Files.writeString(runs, line, StandardCharsets.UTF_8, StandardOpenOption.CREATE,
                    StandardOpenOption.APPEND, StandardOpenOption.WRITE);
        } catch (IOException err) {
            throw new IllegalStateException(err);
        }
    }
}
