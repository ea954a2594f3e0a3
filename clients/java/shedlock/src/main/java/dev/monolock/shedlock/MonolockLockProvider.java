package dev.monolock.shedlock;

import dev.monolock.MonolockClient;
import dev.monolock.MonolockLock;
import java.time.Duration;
import java.time.Instant;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import net.javacrumbs.shedlock.core.LockConfiguration;
import net.javacrumbs.shedlock.core.LockProvider;
import net.javacrumbs.shedlock.core.SimpleLock;

/**
 * ShedLock's {@link LockProvider} over monolock: a scheduled job runs on
 * the one node whose {@code tryLock} of the job's name succeeds, under a
 * fencing token the job reads with {@link #currentToken()}.
 *
 * <pre>{@code
 * @Bean
 * LockProvider lockProvider(MonolockClient monolock) {
 *     return new MonolockLockProvider(monolock);
 * }
 * }</pre>
 *
 * <p>Where it differs from ShedLock's stores: the lock is held by the
 * running node's heartbeats, not by a row with an expiry, so
 * {@code lockAtMostFor} is not needed for safety (a node that dies loses the
 * lock after its lease) and is not enforced: a job that runs longer keeps
 * its lock. {@code lockAtLeastFor} is honoured: a job that finishes early
 * keeps the lock until {@code lockAtLeastUntil}, so that a node whose clock
 * or scheduler runs late does not start the same run again.
 */
public final class MonolockLockProvider implements LockProvider {
    private static final ThreadLocal<MonolockLock> CURRENT = new ThreadLocal<>();

    private final MonolockClient client;
    private final Duration lease;
    private final String prefix;
    private final ScheduledThreadPoolExecutor laterReleases;

    /** Jobs lock {@code shedlock/NAME} with a 10-second lease. */
    public MonolockLockProvider(MonolockClient client) {
        this(client, Duration.ofSeconds(10), "shedlock/");
    }

    /**
     * Jobs lock {@code prefix + NAME} with {@code lease} (the failure
     * detector: how long a dead node keeps the job's lock).
     */
    public MonolockLockProvider(MonolockClient client, Duration lease, String prefix) {
        this.client = client;
        this.lease = lease;
        this.prefix = prefix;
        this.laterReleases = new ScheduledThreadPoolExecutor(1, task -> {
            Thread thread = new Thread(task, "monolock-shedlock-release");
            thread.setDaemon(true);
            return thread;
        });
    }

    /**
     * The fencing token of the lock the calling thread's job runs under:
     * hand it to every write the job makes.
     */
    public static OptionalLong currentToken() {
        MonolockLock lock = CURRENT.get();
        return lock == null ? OptionalLong.empty() : OptionalLong.of(lock.token());
    }

    /** The lock the calling thread's job runs under: {@code check()} it before a step that must not run twice. */
    public static Optional<MonolockLock> currentLock() {
        return Optional.ofNullable(CURRENT.get());
    }

    @Override
    public Optional<SimpleLock> lock(LockConfiguration configuration) {
        Optional<MonolockLock> lock = client.tryLock(prefix + configuration.getName(), lease);
        if (lock.isEmpty()) {
            return Optional.empty();
        }
        CURRENT.set(lock.get());
        return Optional.of(new Held(lock.get(), configuration.getLockAtLeastUntil()));
    }

    private final class Held implements SimpleLock {
        private final MonolockLock lock;
        private final Instant atLeastUntil;

        Held(MonolockLock lock, Instant atLeastUntil) {
            this.lock = lock;
            this.atLeastUntil = atLeastUntil;
        }

        @Override
        public void unlock() {
            if (CURRENT.get() == lock) {
                CURRENT.remove();
            }
            long wait = Duration.between(Instant.now(), atLeastUntil).toNanos();
            if (wait <= 0) {
                lock.close();
            } else {
                laterReleases.schedule(lock::close, wait, TimeUnit.NANOSECONDS);
            }
        }

        @Override
        public Optional<SimpleLock> extend(Duration lockAtMostFor, Duration lockAtLeastFor) {
            // Heartbeats keep the lock; there is no expiry to move.
            return lock.isHeld() ? Optional.of(this) : Optional.empty();
        }
    }
}
