package dev.monolock;

import dev.monolock.Arguments.Address;
import dev.monolock.Connector.Answer;
import dev.monolock.Connector.Refusal;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.locks.Lock;
import javax.net.ssl.SSLContext;

/**
 * A client of one monolock server (or a list of addresses, tried in
 * order). One per application: thread-safe, and it pools its protocol
 * version 2 sessions, many claims on each. {@link #close()} ends every
 * session and every lock still held.
 *
 * <pre>{@code
 * try (MonolockClient client = MonolockClient.create("127.0.0.1:7070");
 *      MonolockLock lock = client.lock("deploy", Duration.ofSeconds(10))) {
 *     write(lock.token());
 * }
 * }</pre>
 *
 * <p>Threads: one daemon reader thread per connection (one per session in
 * version 2, one per claim in version 1) and one timer thread per client
 * for heartbeats, deadlines and idle sessions.
 */
public final class MonolockClient implements AutoCloseable {
    /** How long a version 1 answer to OPEN is remembered for an address. */
    static final long V1_MEMORY_NANOS = TimeUnit.MINUTES.toNanos(5);
    /**
     * Sessions opened for one claim at one address when each ends before
     * the claim could be written on it (past its deadline on arrival).
     */
    static final int NEW_SESSION_ATTEMPTS = 2;

    private final List<Address> addresses;
    private final Connector connector;
    private final boolean forceV1;
    private final Duration idleClose;
    private final Timer timer = new Timer();
    private final Map<Long, List<V2Session>> pool = new HashMap<>();
    private final Map<Address, Long> v1Until = new ConcurrentHashMap<>();
    private final Set<V1Claim> v1Claims = ConcurrentHashMap.newKeySet();
    private final ExecutorService async;
    private volatile boolean closed;

    private MonolockClient(Builder builder) {
        this.addresses = Arguments.addresses(builder.addresses);
        this.connector = new Connector(builder.tls, builder.serverName, builder.ioTimeout);
        this.forceV1 = builder.forceV1;
        this.idleClose = builder.idleClose;
        this.async = Executors.newCachedThreadPool(task -> {
            Thread thread = new Thread(task, "monolock-async");
            thread.setDaemon(true);
            return thread;
        });
    }

    /** A client of {@code addresses}: {@code host:port}, comma-separated; plain TCP, protocol v2. */
    public static MonolockClient create(String addresses) {
        return builder(addresses).build();
    }

    /** A client of the addresses in {@code $MONOLOCK_ADDRESS}. */
    public static MonolockClient create() {
        return builder().build();
    }

    /** A builder for a client of {@code addresses}. */
    public static Builder builder(String addresses) {
        return new Builder(addresses);
    }

    /** A builder for a client of the addresses in {@code $MONOLOCK_ADDRESS}. */
    public static Builder builder() {
        String addresses = System.getenv("MONOLOCK_ADDRESS");
        if (addresses == null || addresses.isBlank()) {
            throw new IllegalArgumentException("MONOLOCK_ADDRESS is not set: name the server as host:port");
        }
        return new Builder(addresses);
    }

    /** Options of a client. */
    public static final class Builder {
        private final String addresses;
        private SSLContext tls;
        private String serverName;
        private boolean forceV1;
        private Duration ioTimeout = Duration.ofSeconds(5);
        private Duration idleClose = V2Session.IDLE_CLOSE;

        private Builder(String addresses) {
            this.addresses = addresses;
        }

        /**
         * Speak TLS with this context: its trust managers verify the server,
         * its key managers (if any) present the client certificate (mTLS).
         * See {@link MonolockTls} to build one from PEM files.
         */
        public Builder tls(SSLContext context) {
            this.tls = context;
            return this;
        }

        /** The name the server's certificate must carry (default: the address's host). */
        public Builder serverName(String name) {
            this.serverName = name;
            return this;
        }

        /** Speak protocol version 1 only: one connection per claim. */
        public Builder forceV1() {
            this.forceV1 = true;
            return this;
        }

        /** Bound of a connect, a handshake, a first answer and a release (default 5 s). */
        public Builder ioTimeout(Duration timeout) {
            if (timeout == null || timeout.isNegative() || timeout.isZero()) {
                throw new IllegalArgumentException("ioTimeout must be positive");
            }
            this.ioTimeout = timeout;
            return this;
        }

        /** How long a v2 session with no claim stays open (20 s; shorter in tests). */
        Builder idleClose(Duration idle) {
            this.idleClose = idle;
            return this;
        }

        /** The client. Nothing connects until the first lock. */
        public MonolockClient build() {
            return new MonolockClient(this);
        }
    }

    /**
     * Takes the lock, waiting in the server's FIFO queue for as long as it
     * takes.
     *
     * @throws InterruptedException the thread was interrupted; the claim has
     *     left the queue before this is thrown
     */
    public MonolockLock lock(String name, Duration lease) throws InterruptedException {
        return acquire(name, lease, null);
    }

    /**
     * Takes the lock, waiting at most {@code wait}.
     *
     * @throws LockNotAcquiredException the wait ran out; the claim has left the queue
     * @throws InterruptedException the thread was interrupted; the claim has left the queue
     */
    public MonolockLock lock(String name, Duration lease, Duration wait) throws InterruptedException {
        return acquire(name, lease, Arguments.waitBound(wait));
    }

    /** Takes the lock if it is free now; never queues. */
    public Optional<MonolockLock> tryLock(String name, Duration lease) {
        byte[] nameBytes = Arguments.lockName(name);
        long leaseMs = Arguments.leaseMillis(lease);
        while (true) {
            Claim claim = start(name, nameBytes, leaseMs, true);
            if (claim instanceof V1Claim v1 && v1.waiting()) {
                // Version 1 has no try: leave the queue before answering.
                v1.leave(connector.ioTimeout());
                v1Claims.remove(v1);
                return Optional.empty();
            }
            try {
                long token = awaitUninterruptibly(claim);
                return Optional.of(new MonolockLock(claim, token, connector.ioTimeout()));
            } catch (Claim.NotGranted notGranted) {
                if (notGranted == Claim.BUSY) {
                    return Optional.empty();
                }
            }
        }
    }

    /** {@link #lock(String, Duration)} as a future; cancelling it leaves the queue. */
    public CompletableFuture<MonolockLock> lockAsync(String name, Duration lease) {
        return lockAsync(name, lease, null);
    }

    /** {@link #lock(String, Duration, Duration)} as a future; cancelling it leaves the queue. */
    public CompletableFuture<MonolockLock> lockAsync(String name, Duration lease, Duration wait) {
        CompletableFuture<MonolockLock> result = new CompletableFuture<>();
        try {
            Arguments.lockName(name);
            Arguments.leaseMillis(lease);
            if (wait != null) {
                Arguments.waitBound(wait);
            }
        } catch (IllegalArgumentException err) {
            result.completeExceptionally(err);
            return result;
        }
        async.execute(() -> {
            try {
                MonolockLock lock = acquire(name, lease, wait, result);
                if (!result.complete(lock)) {
                    lock.close();
                }
            } catch (InterruptedException err) {
                result.cancel(false);
            } catch (RuntimeException err) {
                result.completeExceptionally(err);
            }
        });
        return result;
    }

    /** {@link #tryLock} as a future. */
    public CompletableFuture<Optional<MonolockLock>> tryLockAsync(String name, Duration lease) {
        return CompletableFuture.supplyAsync(() -> tryLock(name, lease), async);
    }

    /**
     * A {@link Lock} view of one lock, for code written against
     * {@code java.util.concurrent.locks.Lock} (Redisson's {@code RLock},
     * say). Ownership belongs to the view object, not to a thread; it is not
     * re-entrant; {@code newCondition} is unsupported. See {@link LockView}.
     */
    public LockView asLock(String name, Duration lease) {
        Arguments.lockName(name);
        Arguments.leaseMillis(lease);
        return new LockView(this, name, lease);
    }

    /** Ends every session and every lock still held (they are reported lost, {@code connection}). */
    @Override
    public void close() {
        closed = true;
        List<V2Session> sessions = new ArrayList<>();
        synchronized (pool) {
            pool.values().forEach(sessions::addAll);
            pool.clear();
        }
        sessions.forEach(V2Session::close);
        v1Claims.forEach(V1Claim::close);
        v1Claims.clear();
        timer.shutdown();
        async.shutdownNow();
    }

    private MonolockLock acquire(String name, Duration lease, Duration wait) throws InterruptedException {
        return acquire(name, lease, wait, null);
    }

    private MonolockLock acquire(String name, Duration lease, Duration wait, CompletableFuture<?> cancelledBy)
            throws InterruptedException {
        byte[] nameBytes = Arguments.lockName(name);
        long leaseMs = Arguments.leaseMillis(lease);
        long started = System.nanoTime();
        while (true) {
            Claim claim = start(name, nameBytes, leaseMs, false);
            if (cancelledBy != null) {
                cancelledBy.whenComplete((value, err) -> {
                    if (cancelledBy.isCancelled()) {
                        claim.leave(connector.ioTimeout());
                    }
                });
            }
            try {
                long token;
                if (wait == null) {
                    token = claim.granted.get();
                } else {
                    long left = wait.toNanos() - (System.nanoTime() - started);
                    token = claim.granted.get(Math.max(0, left), TimeUnit.NANOSECONDS);
                }
                return new MonolockLock(claim, token, connector.ioTimeout());
            } catch (TimeoutException err) {
                claim.leave(connector.ioTimeout());
                forget(claim);
                throw new LockNotAcquiredException(
                        "lock \"" + name + "\" was not acquired within " + wait.toMillis() + " ms");
            } catch (InterruptedException err) {
                claim.leave(connector.ioTimeout());
                forget(claim);
                throw err;
            } catch (ExecutionException err) {
                Throwable cause = err.getCause();
                if (cause == Claim.TOO_MANY_CLAIMS) {
                    continue;
                }
                forget(claim);
                throw rethrown(cause);
            }
        }
    }

    private long awaitUninterruptibly(Claim claim) {
        boolean interrupted = false;
        try {
            while (true) {
                try {
                    return claim.granted.get();
                } catch (InterruptedException err) {
                    interrupted = true;
                } catch (ExecutionException err) {
                    forget(claim);
                    throw rethrown(err.getCause());
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private static RuntimeException rethrown(Throwable cause) {
        if (cause instanceof RuntimeException runtime) {
            return runtime;
        }
        return new MonolockException(String.valueOf(cause), false, cause);
    }

    private void forget(Claim claim) {
        if (claim instanceof V1Claim v1) {
            v1Claims.remove(v1);
        }
    }

    /**
     * Sends the ACQUIRE of a new claim on a pooled session, a new session,
     * or a version 1 connection, trying the addresses in order.
     */
    private Claim start(String name, byte[] nameBytes, long leaseMs, boolean tryOnly) {
        if (closed) {
            throw new IllegalStateException("the client is closed");
        }
        if (!forceV1) {
            Claim pooled = onPooledSession(name, nameBytes, leaseMs, tryOnly);
            if (pooled != null) {
                return pooled;
            }
        }
        List<Refusal> refusals = new ArrayList<>();
        for (Address address : addresses) {
            try {
                return startAt(address, name, nameBytes, leaseMs, tryOnly);
            } catch (Refusal refusal) {
                v1Until.remove(address);
                refusals.add(refusal);
            }
        }
        throw connectFailure(refusals);
    }

    private Claim onPooledSession(String name, byte[] nameBytes, long leaseMs, boolean tryOnly) {
        synchronized (pool) {
            for (V2Session session : pool.getOrDefault(leaseMs, List.of())) {
                if (session.accepts()) {
                    Claim claim = session.acquire(name, nameBytes, tryOnly);
                    if (claim != null) {
                        return claim;
                    }
                }
            }
        }
        return null;
    }

    private Claim startAt(Address address, String name, byte[] nameBytes, long leaseMs, boolean tryOnly)
            throws Refusal {
        long leaseNanos = TimeUnit.MILLISECONDS.toNanos(leaseMs);
        Long until = v1Until.get(address);
        boolean v1 = forceV1 || (until != null && System.nanoTime() - until < 0);
        for (int attempt = 1; !v1; attempt++) {
            Answer answer = connector.open(address, Frames.open(leaseMs));
            int type = answer.frame().type();
            int code = answer.frame().code();
            if (type == Frames.OPENED) {
                V2Session session;
                try {
                    session = V2Session.start(answer, leaseNanos, idleClose, timer, this::dropSession);
                } catch (SessionCore.ProtocolViolation err) {
                    answer.connection().close();
                    throw new Refusal(address + " broke the protocol: " + err.getMessage(), false, false, err);
                }
                synchronized (pool) {
                    pool.computeIfAbsent(leaseMs, lease -> new ArrayList<>()).add(session);
                }
                Claim claim = session.acquire(name, nameBytes, tryOnly);
                if (claim != null) {
                    return claim;
                }
                if (attempt < NEW_SESSION_ATTEMPTS) {
                    // It ended before carrying any claim (its OPENED came
                    // past its deadline: a pause, a cold start): nothing
                    // was lost, and a fresh session costs one round trip.
                    continue;
                }
                throw new Refusal(address + ": the new session ended before the claim could be written ("
                        + session.endedBecause() + ")", true, false, null);
            }
            answer.connection().close();
            if (type == Frames.ERROR && code == SessionCore.UNSUPPORTED_VERSION) {
                v1Until.put(address, System.nanoTime() + V1_MEMORY_NANOS);
                v1 = true;
            } else if (type == Frames.ERROR) {
                throw new Refusal(String.format("%s refused the session (error 0x%02x: %s)",
                        address, code, answer.frame().reason()), code < 0x10, false, null);
            } else {
                throw new Refusal(address + " is not a monolock server: it answered OPEN with "
                        + answer.frame(), false, false, null);
            }
        }
        Answer answer = connector.open(address, Frames.acquireV1(nameBytes, leaseMs));
        if (answer.frame().type() == Frames.ERROR) {
            answer.connection().close();
            int code = answer.frame().code();
            String text = String.format("the server refused lock \"%s\" (0x%02x): %s", name, code,
                    answer.frame().reason());
            if (code >= 0x10) {
                throw new ServerRefusedException(text, code);
            }
            throw new Refusal(address + ": " + text, true, false, null);
        }
        if (answer.frame().type() != Frames.V1_WAITING && answer.frame().type() != Frames.V1_ACQUIRED) {
            answer.connection().close();
            throw new Refusal(address + " is not a monolock server: it answered ACQUIRE with "
                    + answer.frame(), false, false, null);
        }
        V1Claim claim = V1Claim.start(name, answer, leaseNanos, timer);
        v1Claims.add(claim);
        claim.finished.thenRun(() -> v1Claims.remove(claim));
        return claim;
    }

    private void dropSession(V2Session session) {
        synchronized (pool) {
            for (List<V2Session> sessions : pool.values()) {
                sessions.remove(session);
            }
        }
    }

    private static ConnectFailedException connectFailure(List<Refusal> refusals) {
        boolean temporary = refusals.stream().allMatch(refusal -> refusal.temporary);
        boolean tls = refusals.stream().anyMatch(refusal -> refusal.tls);
        StringBuilder message = new StringBuilder();
        if (refusals.size() > 1) {
            message.append("no address could be used: ");
        }
        for (int i = 0; i < refusals.size(); i++) {
            if (i > 0) {
                message.append("; ");
            }
            message.append(refusals.get(i).getMessage());
        }
        Throwable cause = refusals.isEmpty() ? null : refusals.get(refusals.size() - 1);
        return tls ? new TlsFailedException(message.toString(), temporary, cause)
                : new ConnectFailedException(message.toString(), temporary, cause);
    }
}
