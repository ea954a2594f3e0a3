package dev.monolock;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A held lock: its fencing token, its state, and the way out. Closing it
 * (try-with-resources) releases it. Thread-safe.
 *
 * <p>Loss is first-class: the server pushes a forced release to the holder,
 * and the client gives the lock up on its own when no reply has confirmed
 * its session for 0.8 x lease. {@link #isHeld()} and {@link #check()} read
 * the deadline themselves, so a process resuming from a pause never trusts
 * a stale "held".
 */
public final class MonolockLock implements AutoCloseable {
    private final Claim claim;
    private final Duration ioTimeout;
    private final long token;
    private final AtomicBoolean released = new AtomicBoolean();

    MonolockLock(Claim claim, long token, Duration ioTimeout) {
        this.claim = claim;
        this.token = token;
        this.ioTimeout = ioTimeout;
    }

    /** The lock's name. */
    public String name() {
        return claim.name;
    }

    /**
     * The fencing token of this grant: hand it to the guarded resource with
     * every write; the resource refuses a write whose token is lower than
     * the highest it has accepted.
     */
    public long token() {
        return token;
    }

    /** The lock's value as the server has it: the one it was taken with, then each one set. */
    public String value() {
        return claim.value;
    }

    /**
     * Replaces the lock's value while it is held (etcd's Proclaim): returns
     * once the server has the new value, so that every state observers are
     * told from then on carries it. UTF-8 text of at most 1,024 bytes;
     * empty clears it.
     *
     * @throws IllegalArgumentException the value is over 1,024 bytes (nothing is sent)
     * @throws UnsupportedFeatureException the server is older than lock values (or the client forced to v1)
     * @throws LockLostException the lock was lost
     * @throws IllegalStateException the lock was released by its holder
     */
    public void setValue(String value) {
        byte[] bytes = Arguments.lockValue(value);
        String unsupported = claim.unsupported();
        if (unsupported != null) {
            throw new UnsupportedFeatureException(unsupported);
        }
        check();
        CompletableFuture<Void> done = claim.proclaim(bytes);
        boolean interrupted = false;
        try {
            while (true) {
                try {
                    done.get();
                    break;
                } catch (InterruptedException err) {
                    interrupted = true;
                } catch (ExecutionException err) {
                    throw MonolockClient.rethrown(err.getCause());
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /** Whether the lock is held now (deadline checked; false once released or lost). */
    public boolean isHeld() {
        return !released.get() && claim.held();
    }

    /**
     * Returns normally while the lock is held; throws the loss otherwise.
     *
     * @throws LockLostException the lock was lost, with its reason
     * @throws IllegalStateException the lock was released by its holder
     */
    public void check() {
        LockLostException loss = claim.currentLoss();
        if (loss != null) {
            throw loss;
        }
        if (released.get()) {
            throw new IllegalStateException("lock \"" + claim.name + "\" was released by its holder");
        }
    }

    /**
     * Runs {@code action} once, when the lock is lost (never on a release),
     * on a thread of the client; at once if it is lost already. Keep it short:
     * signal the work to stop.
     */
    public void onLost(Runnable action) {
        claim.lost.thenRun(action);
    }

    /** Completes, with the loss, when the lock is lost; never completes on a release. */
    public CompletableFuture<LockLostException> lost() {
        return claim.lost.thenApply(loss -> loss);
    }

    /**
     * Releases the lock and returns once the server has confirmed it (the
     * lock is handed on, or free): after this returns {@code true}, anyone's
     * {@code tryLock} succeeds at once. Past the client's I/O timeout the
     * connection is closed and {@code false} is returned: the lock is gone
     * for the caller all the same. Releasing twice does nothing.
     *
     * @return whether the server confirmed the release
     * @throws LockLostException the lock had been lost before the release
     */
    public boolean release() {
        if (!released.compareAndSet(false, true)) {
            return false;
        }
        LockLostException loss = claim.currentLoss();
        if (loss != null) {
            claim.leave(ioTimeout);
            throw loss;
        }
        return claim.leave(ioTimeout);
    }

    /** {@link #release()} off the caller's thread. */
    public CompletableFuture<Boolean> releaseAsync() {
        return CompletableFuture.supplyAsync(this::release);
    }

    /** Releases the lock; a loss already reported through {@link #lost()} is not thrown again. */
    @Override
    public void close() {
        try {
            release();
        } catch (LockLostException ignored) {
            // Loss is reported by check(), isHeld(), onLost() and lost().
        }
    }

    @Override
    public String toString() {
        return "MonolockLock[" + claim.name + ", token " + token + "]";
    }
}
