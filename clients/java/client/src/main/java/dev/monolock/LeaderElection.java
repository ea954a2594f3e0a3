package dev.monolock;

import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * Leader election on one lock, in the shape of Curator's
 * {@code LeaderLatch}: from {@link MonolockClient#leaderElection}, this
 * candidate campaigns once {@link #start() started} (it takes the lock with
 * its value, waiting in the FIFO queue), is told {@link Listener#isLeader}
 * with its fencing token when granted and {@link Listener#notLeader} when
 * leadership ends for any reason (lost, or {@link #close() resigned}), and
 * campaigns again after a loss. It observes the lock meanwhile, so every
 * candidate (and any follower) is told {@link Listener#onNewLeader} with
 * the new leader's state (its token and value: where to forward requests)
 * each time the lock is granted under a new token, and
 * {@link #getLeader()} answers from the latest state observed.
 *
 * <pre>{@code
 * LeaderElection election = client.leaderElection("leader", Duration.ofSeconds(10), "10.0.0.7:9000",
 *         new LeaderElection.Listener() {
 *             public void isLeader(long token) { startServing(token); }
 *             public void notLeader() { stopServing(); }
 *             public void onNewLeader(LockState leader) { forwardTo(leader.value()); }
 *         });
 * election.start();
 * ...
 * election.close(); // resigns: releases the lock if leading, after notLeader()
 * }</pre>
 *
 * <p>{@code isLeader} and {@code notLeader} are called on the election's
 * campaign thread, strictly alternating ({@code isLeader} is never called
 * again before the previous {@code notLeader}); {@code onNewLeader} on its
 * observing thread. Keep them short. Once {@link #close()} has begun, no
 * callback but the resigning leader's {@code notLeader} is called. A leader
 * fences its writes with the token: the observed view is advisory, and
 * leadership may be lost (the lease, an administrator) before
 * {@code notLeader} is read.
 */
public final class LeaderElection implements AutoCloseable {
    /** The election's callbacks. */
    public interface Listener {
        /** This candidate leads, under fencing {@code token}. */
        void isLeader(long token);

        /** This candidate's leadership ended: lost, or resigned by {@link LeaderElection#close()}. */
        void notLeader();

        /** The lock was granted under a new token (to this candidate or another), with that holder's value. */
        default void onNewLeader(LockState leader) {
        }
    }

    /** The pause before campaigning or observing again after a temporary failure. */
    static final Duration RETRY = Duration.ofMillis(500);
    /** The bound on close() waiting for the campaign to hand the lock back. */
    static final Duration CLOSE_BOUND = Duration.ofSeconds(30);

    private final MonolockClient client;
    private final String name;
    private final Duration lease;
    private final Listener listener;
    private final CompletableFuture<Void> closing = new CompletableFuture<>();
    private volatile String value;
    private volatile LockState leader;
    private volatile MonolockException failure;
    private Thread campaign;
    private Thread watcher;
    private Observation observation;
    private MonolockLock leading;
    private boolean started;
    private boolean closed;
    /** The token of the latest leader told to onNewLeader (the observing thread's alone). */
    private long announcedToken;

    LeaderElection(MonolockClient client, String name, Duration lease, String value, Listener listener) {
        this.client = client;
        this.name = name;
        this.lease = lease;
        this.value = value;
        this.listener = listener;
    }

    /**
     * Starts observing the lock and campaigning for it, in the background.
     * Returns once the observation has its first state.
     *
     * @throws UnsupportedFeatureException the server is older than observers (or the client forced to v1)
     * @throws InterruptedException the thread was interrupted; nothing was started
     */
    public void start() throws InterruptedException {
        synchronized (this) {
            if (started || closed) {
                throw new IllegalStateException("the election on lock \"" + name + "\" was already started");
            }
            started = true;
        }
        Observation first = client.observe(name);
        synchronized (this) {
            observation = first;
            watcher = daemon("monolock-election-observe-" + name, () -> watch(first));
            campaign = daemon("monolock-election-campaign-" + name, this::campaign);
        }
    }

    private static Thread daemon(String threadName, Runnable task) {
        Thread thread = new Thread(task, threadName);
        thread.setDaemon(true);
        thread.start();
        return thread;
    }

    /** The lock's name. */
    public String name() {
        return name;
    }

    /** The latest state of the lock observed (its holder, token and value), or empty before the first. */
    public Optional<LockState> getLeader() {
        return Optional.ofNullable(leader);
    }

    /** Whether this candidate leads now (its lock held, the deadline checked). */
    public synchronized boolean hasLeadership() {
        return leading != null && leading.isHeld();
    }

    /** The lock this candidate leads with, while it does: its token, its loss signals. */
    public synchronized Optional<MonolockLock> currentLock() {
        return Optional.ofNullable(leading);
    }

    /** Why the election stopped campaigning on its own (an error that retrying cannot mend), if it did. */
    public Optional<MonolockException> failure() {
        return Optional.ofNullable(failure);
    }

    /**
     * Replaces this candidate's value: at once on the lock if it leads
     * (observers see it), and for every later campaign.
     *
     * @throws IllegalArgumentException the value is over 1,024 bytes
     * @throws LockLostException leadership was lost meanwhile (the next campaign carries the value)
     */
    public void setValue(String newValue) {
        Arguments.lockValue(newValue);
        MonolockLock lock;
        synchronized (this) {
            value = newValue == null ? "" : newValue;
            lock = leading;
        }
        if (lock != null) {
            lock.setValue(newValue);
        }
    }

    private void watch(Observation first) {
        Observation current = first;
        while (true) {
            try {
                while (current.hasNext()) {
                    seen(current.next());
                }
                return;
            } catch (ObservationEndedException ended) {
                current = observeAgain();
                if (current == null) {
                    return;
                }
            } catch (MonolockException interrupted) {
                return;
            }
        }
    }

    /** A new observation after the previous one's session ended, or null once closed. */
    private Observation observeAgain() {
        while (pause()) {
            try {
                Observation next = client.observe(name);
                synchronized (this) {
                    if (closed) {
                        next.close();
                        return null;
                    }
                    observation = next;
                }
                return next;
            } catch (InterruptedException err) {
                return null;
            } catch (IllegalStateException err) {
                return null;
            } catch (MonolockException err) {
                if (!err.isTemporary()) {
                    failure = err;
                    return null;
                }
            }
        }
        return null;
    }

    private void seen(LockState state) {
        synchronized (this) {
            if (closed) {
                // Resigning: what follows (the hand-on to another candidate) is no longer this election's.
                return;
            }
        }
        leader = state;
        if (state.held() && state.token() != announcedToken) {
            announcedToken = state.token();
            listener.onNewLeader(state);
        }
    }

    private void campaign() {
        while (true) {
            synchronized (this) {
                if (closed) {
                    return;
                }
            }
            MonolockLock lock;
            try {
                lock = client.lock(name, lease, value);
            } catch (InterruptedException err) {
                return;
            } catch (IllegalStateException err) {
                return;
            } catch (MonolockException err) {
                if (!err.isTemporary()) {
                    failure = err;
                    return;
                }
                if (!pause()) {
                    return;
                }
                continue;
            }
            synchronized (this) {
                if (closed) {
                    // Granted as close() began: never announced, handed back at once.
                    Thread.interrupted();
                    lock.close();
                    return;
                }
                leading = lock;
            }
            listener.isLeader(lock.token());
            CompletableFuture.anyOf(lock.lost(), closing).join();
            synchronized (this) {
                leading = null;
            }
            if (lock.isHeld()) {
                // Resigning: the leader stops before anyone else can lead.
                listener.notLeader();
                lock.close();
                return;
            }
            lock.close();
            listener.notLeader();
            synchronized (this) {
                if (closed) {
                    return;
                }
            }
        }
    }

    /** Waits {@link #RETRY} unless the election closes first: whether to go on. */
    private boolean pause() {
        try {
            closing.get(RETRY.toMillis(), TimeUnit.MILLISECONDS);
            return false;
        } catch (TimeoutException err) {
            return true;
        } catch (InterruptedException | ExecutionException err) {
            return false;
        }
    }

    /**
     * Resigns: stops campaigning and observing; if this candidate leads, the
     * lock is released and {@link Listener#notLeader} has been called when
     * this returns. Closing twice does nothing.
     */
    @Override
    public void close() {
        Thread campaignThread;
        Thread watcherThread;
        Observation watching;
        synchronized (this) {
            if (closed) {
                return;
            }
            closed = true;
            campaignThread = campaign;
            watcherThread = watcher;
            watching = observation;
            if (campaignThread != null && leading == null) {
                // Waiting in the queue (or pausing): the claim leaves the queue.
                campaignThread.interrupt();
            }
        }
        closing.complete(null);
        if (watching != null) {
            watching.close();
        }
        boolean interrupted = false;
        for (Thread thread : new Thread[] {campaignThread, watcherThread}) {
            if (thread == null || thread == Thread.currentThread()) {
                continue;
            }
            try {
                thread.join(CLOSE_BOUND.toMillis());
            } catch (InterruptedException err) {
                interrupted = true;
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }

    @Override
    public String toString() {
        return "LeaderElection[" + name + "]";
    }
}
