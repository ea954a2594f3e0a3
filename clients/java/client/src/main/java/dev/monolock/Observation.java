package dev.monolock;

import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Iterator;
import java.util.NoSuchElementException;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;

/**
 * A watch on one lock: the lock's state when the watch was registered
 * ({@link LockState#initial()}), then every change the server pushes, in
 * token order (never an older holder after a newer one). From
 * {@link MonolockClient#observe(String)}; close it (try-with-resources) to
 * stop watching. Thread-safe.
 *
 * <pre>{@code
 * try (Observation leader = client.observe("leader")) {
 *     while (leader.hasNext()) {
 *         LockState state = leader.next();
 *         if (state.held()) {
 *             forwardTo(state.value());
 *         }
 *     }
 * }
 * }</pre>
 *
 * <p>As an {@link Iterator}, {@link #hasNext()} blocks until a state
 * arrives; it returns false once the observation is closed, and throws
 * {@link ObservationEndedException} once its session has ended (the server
 * went away, the session's deadline passed): observe again to go on.
 * {@link #next(Duration)} waits at most a bound.
 *
 * <p>States wait in the observation until taken. A reader that falls more
 * than {@value #QUEUE_BOUND} states behind is given, in their place, one
 * state flagged {@link LockState#coalesced()}: the lock's state now, as the
 * server does for a slow session. The view is advisory: the holder it
 * names may already have lost the lock, so writes are fenced by the token.
 */
public final class Observation implements Iterator<LockState>, AutoCloseable {
    /** States kept for a reader that does not take them, before they are coalesced into one. */
    public static final int QUEUE_BOUND = 1024;

    private final String name;
    private final ArrayDeque<LockState> queue = new ArrayDeque<>();
    private final CompletableFuture<ObservationEndedException> ended = new CompletableFuture<>();
    /** Completes with the first state, or exceptionally if the watch was refused or its session ended first. */
    final CompletableFuture<LockState> first = new CompletableFuture<>();
    private Runnable unobserve = () -> { };
    private LockState latest;
    private ObservationEndedException failure;
    private boolean closed;

    Observation(String name) {
        this.name = name;
    }

    /** The observed lock's name. */
    public String name() {
        return name;
    }

    /** Sets what closing does (write UNOBSERVE on the watch's session). */
    synchronized void onClose(Runnable action) {
        this.unobserve = action;
    }

    /** A state pushed by the server, in order. */
    void deliver(LockState state) {
        synchronized (this) {
            latest = state;
            if (!closed) {
                if (queue.size() >= QUEUE_BOUND) {
                    queue.clear();
                    queue.add(current(state));
                } else {
                    queue.add(state);
                }
                notifyAll();
            }
        }
        first.complete(state);
    }

    /** The lock's state after {@code state}, flagged coalesced. */
    private static LockState current(LockState state) {
        LockState.Event event = state.held() ? LockState.Event.HELD : LockState.Event.FREE;
        return new LockState(event, state.token(), state.value(), state.since().orElse(null), false, true, null);
    }

    /** The session ended: the reader is told once the states before it are taken. */
    void fail(ObservationEndedException why) {
        synchronized (this) {
            if (failure != null) {
                return;
            }
            failure = why;
            notifyAll();
        }
        first.completeExceptionally(why);
        ended.complete(why);
    }

    /**
     * Whether a state is there to take: blocks until one arrives. False once
     * the observation is closed.
     *
     * @throws ObservationEndedException the session ended (every state before the end taken)
     * @throws MonolockException the thread was interrupted while waiting (its flag is set again)
     */
    @Override
    public synchronized boolean hasNext() {
        try {
            while (queue.isEmpty() && !closed && failure == null) {
                wait();
            }
        } catch (InterruptedException err) {
            Thread.currentThread().interrupt();
            throw new MonolockException("interrupted while waiting for a state of lock \"" + name + "\"", true, err);
        }
        return ready();
    }

    /**
     * The next state, blocking until it arrives.
     *
     * @throws NoSuchElementException the observation is closed
     * @throws ObservationEndedException the session ended
     */
    @Override
    public synchronized LockState next() {
        if (!hasNext()) {
            throw new NoSuchElementException("the observation of lock \"" + name + "\" is closed");
        }
        return queue.pollFirst();
    }

    /**
     * The next state, waiting at most {@code timeout}; empty when none came
     * in time.
     *
     * @throws NoSuchElementException the observation is closed
     * @throws ObservationEndedException the session ended
     * @throws InterruptedException the thread was interrupted while waiting
     */
    public synchronized Optional<LockState> next(Duration timeout) throws InterruptedException {
        long end = System.nanoTime() + Math.max(0, timeout.toNanos());
        while (queue.isEmpty() && !closed && failure == null) {
            long left = end - System.nanoTime();
            if (left <= 0) {
                return Optional.empty();
            }
            wait(left / 1_000_000, (int) (left % 1_000_000));
        }
        if (!ready()) {
            throw new NoSuchElementException("the observation of lock \"" + name + "\" is closed");
        }
        return Optional.of(queue.pollFirst());
    }

    /** With the monitor held and something to report: true with a state queued, false closed, else the end. */
    private boolean ready() {
        if (closed) {
            return false;
        }
        if (!queue.isEmpty()) {
            return true;
        }
        throw failure;
    }

    /** The latest state the server pushed (taken or not), or empty before the first. */
    public synchronized Optional<LockState> latest() {
        return Optional.ofNullable(latest);
    }

    /** Completes, with the end, when the observation's session ends; never on {@link #close()}. */
    public CompletableFuture<ObservationEndedException> ended() {
        return ended.thenApply(why -> why);
    }

    /**
     * Stops watching: the server is told (UNOBSERVE), without waiting for
     * its answer; states not yet taken are dropped, and {@link #hasNext()}
     * returns false. Closing twice does nothing.
     */
    @Override
    public void close() {
        Runnable action;
        synchronized (this) {
            if (closed) {
                return;
            }
            closed = true;
            queue.clear();
            notifyAll();
            action = unobserve;
        }
        action.run();
    }

    @Override
    public String toString() {
        return "Observation[" + name + "]";
    }
}
