package dev.monolock;

import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;

/**
 * The client's one timer thread: heartbeats, deadlines and idle sessions
 * of every connection of a client are ticks on it. A tick does no blocking
 * I/O beyond writing a one-byte frame.
 */
final class Timer {
    private final ScheduledThreadPoolExecutor executor;

    Timer() {
        executor = new ScheduledThreadPoolExecutor(1, task -> {
            Thread thread = new Thread(task, "monolock-timer");
            thread.setDaemon(true);
            return thread;
        });
        executor.setRemoveOnCancelPolicy(true);
    }

    /** Runs {@code task} at {@code instant} (of {@link System#nanoTime()}). */
    ScheduledFuture<?> at(long instant, Runnable task) {
        long delay = Math.max(0, instant - System.nanoTime());
        return executor.schedule(task, delay, TimeUnit.NANOSECONDS);
    }

    void shutdown() {
        executor.shutdownNow();
    }
}
