package dev.monolock;

import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;

/**
 * A {@link Lock} over one monolock lock, for code written against
 * {@code java.util.concurrent.locks.Lock} (Redisson's {@code RLock},
 * Curator's mutex behind an adapter). What it cannot promise:
 *
 * <ul>
 *   <li>Ownership is per view object, not per thread: any thread may
 *       {@link #unlock()} what another locked through the same view.</li>
 *   <li>Not re-entrant: {@link #lock()} on a view that holds the lock
 *       throws {@link IllegalStateException} rather than queue behind
 *       itself forever.</li>
 *   <li>{@link #newCondition()} is unsupported.</li>
 *   <li>The lock can be lost while held (the lease, an administrator):
 *       {@link #current()} gives the {@link MonolockLock} for its token and
 *       its loss signals.</li>
 * </ul>
 */
public final class LockView implements Lock {
    private final MonolockClient client;
    private final String name;
    private final Duration lease;
    private MonolockLock held;

    LockView(MonolockClient client, String name, Duration lease) {
        this.client = client;
        this.name = name;
        this.lease = lease;
    }

    /** The lock held through this view, or null. */
    public synchronized MonolockLock current() {
        return held;
    }

    private synchronized void take(MonolockLock lock) {
        held = lock;
    }

    private synchronized void refuseReentry() {
        if (held != null) {
            throw new IllegalStateException("lock \"" + name + "\" is already held through this view"
                    + " (monolock locks are not re-entrant)");
        }
    }

    /**
     * Waits for the lock, uninterruptibly: an interrupt is kept for later
     * and the claim keeps its place in the queue.
     */
    @Override
    public void lock() {
        refuseReentry();
        try {
            take(client.lockAsync(name, lease).join());
        } catch (java.util.concurrent.CompletionException err) {
            if (err.getCause() instanceof RuntimeException cause) {
                throw cause;
            }
            throw err;
        }
    }

    @Override
    public void lockInterruptibly() throws InterruptedException {
        refuseReentry();
        take(client.lock(name, lease));
    }

    @Override
    public boolean tryLock() {
        refuseReentry();
        MonolockLock lock = client.tryLock(name, lease).orElse(null);
        take(lock);
        return lock != null;
    }

    @Override
    public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
        refuseReentry();
        try {
            take(client.lock(name, lease, Duration.ofNanos(unit.toNanos(Math.max(0, time)))));
            return true;
        } catch (LockNotAcquiredException err) {
            return false;
        }
    }

    /**
     * Releases the lock, confirmed by the server.
     *
     * @throws IllegalMonitorStateException this view does not hold the lock
     * @throws LockLostException the lock had been lost before the release
     */
    @Override
    public void unlock() {
        MonolockLock lock;
        synchronized (this) {
            lock = held;
            held = null;
        }
        if (lock == null) {
            throw new IllegalMonitorStateException("lock \"" + name + "\" is not held through this view");
        }
        lock.release();
    }

    /** Unsupported: a monolock lock has no condition variables. */
    @Override
    public Condition newCondition() {
        throw new UnsupportedOperationException("monolock locks have no conditions");
    }
}
