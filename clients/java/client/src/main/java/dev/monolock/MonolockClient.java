package dev.monolock;

import dev.monolock.Arguments.Address;
import dev.monolock.Connector.Answer;
import dev.monolock.Connector.Refusal;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
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
import java.util.function.Consumer;
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
    /** Sessions tried for one watch or lookup when the one picked ends or fills meanwhile. */
    static final int SESSION_PICKS = 3;
    /** The lease of a session opened for watches and lookups alone (its PINGs keep it alive). */
    public static final long OBSERVE_LEASE_MS = 10_000;
    /** Why a client forced to protocol version 1 refuses values and observers. */
    static final String V1_HAS_NO_VALUES = "protocol version 1 has no lock values or observers";

    private final List<Address> addresses;
    private final Connector connector;
    private final boolean forceV1;
    private final Duration idleClose;
    private final Timer timer = new Timer();
    private final Map<Long, List<V2Session>> pool = new HashMap<>();
    private final Map<Address, Long> v1Until = new ConcurrentHashMap<>();
    /** Addresses whose server answered HELLO with ERROR 0x13 (no values, no observers), until when. */
    private final Map<Address, Long> plainUntil = new ConcurrentHashMap<>();
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
        return acquire(name, lease, null, "", null);
    }

    /**
     * Takes the lock with a value that its observers and
     * {@link #holder(String)} see while it is held (this holder's
     * {@code host:port}, say): UTF-8 text of at most 1,024 bytes; empty is
     * no value. Waits in the queue for as long as it takes.
     *
     * @throws UnsupportedFeatureException the server is older than lock values (or the client forced to v1)
     * @throws InterruptedException the thread was interrupted; the claim has left the queue
     */
    public MonolockLock lock(String name, Duration lease, String value) throws InterruptedException {
        return acquire(name, lease, null, value, null);
    }

    /**
     * Takes the lock, waiting at most {@code wait}.
     *
     * @throws LockNotAcquiredException the wait ran out; the claim has left the queue
     * @throws InterruptedException the thread was interrupted; the claim has left the queue
     */
    public MonolockLock lock(String name, Duration lease, Duration wait) throws InterruptedException {
        return acquire(name, lease, Arguments.waitBound(wait), "", null);
    }

    /**
     * Takes the lock with a value (see {@link #lock(String, Duration, String)}), waiting at most {@code wait}.
     *
     * @throws LockNotAcquiredException the wait ran out; the claim has left the queue
     * @throws UnsupportedFeatureException the server is older than lock values (or the client forced to v1)
     * @throws InterruptedException the thread was interrupted; the claim has left the queue
     */
    public MonolockLock lock(String name, Duration lease, Duration wait, String value) throws InterruptedException {
        return acquire(name, lease, Arguments.waitBound(wait), value, null);
    }

    /** Takes the lock if it is free now; never queues. */
    public Optional<MonolockLock> tryLock(String name, Duration lease) {
        return tryLock(name, lease, "");
    }

    /**
     * Takes the lock with a value (see {@link #lock(String, Duration, String)}) if it is free now; never queues.
     *
     * @throws UnsupportedFeatureException the server is older than lock values (or the client forced to v1)
     */
    public Optional<MonolockLock> tryLock(String name, Duration lease, String value) {
        byte[] nameBytes = Arguments.lockName(name);
        long leaseMs = Arguments.leaseMillis(lease);
        byte[] valueBytes = Arguments.lockValue(value);
        while (true) {
            Claim claim = start(name, nameBytes, leaseMs, true, valueBytes);
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
        return lockAsync(name, lease, null, "");
    }

    /** {@link #lock(String, Duration, Duration)} as a future; cancelling it leaves the queue. */
    public CompletableFuture<MonolockLock> lockAsync(String name, Duration lease, Duration wait) {
        return lockAsync(name, lease, wait, "");
    }

    /**
     * {@link #lock(String, Duration, Duration, String)} as a future ({@code wait} null: no bound);
     * cancelling it leaves the queue.
     */
    public CompletableFuture<MonolockLock> lockAsync(String name, Duration lease, Duration wait, String value) {
        CompletableFuture<MonolockLock> result = new CompletableFuture<>();
        try {
            Arguments.lockName(name);
            Arguments.leaseMillis(lease);
            Arguments.lockValue(value);
            if (wait != null) {
                Arguments.waitBound(wait);
            }
        } catch (IllegalArgumentException err) {
            result.completeExceptionally(err);
            return result;
        }
        async.execute(() -> {
            try {
                MonolockLock lock = acquire(name, lease, wait, value, result);
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

    /**
     * Watches lock {@code name} without claiming it: the returned
     * {@link Observation} yields the lock's state now, then every change
     * (granted, value replaced, released with its reason), in token order.
     * Returns once the first state has arrived. Close it to stop watching.
     * The watch rides on a pooled session (one of any lease, or a new one
     * with a lease of {@value #OBSERVE_LEASE_MS} ms), which it keeps open.
     *
     * @throws UnsupportedFeatureException the server is older than observers (or the client forced to v1)
     * @throws InterruptedException the thread was interrupted; the watch is given up
     */
    public Observation observe(String name) throws InterruptedException {
        byte[] nameBytes = Arguments.lockName(name);
        requireExtension();
        for (int attempt = 1; ; attempt++) {
            V2Session session = extendedSession(true);
            Observation observation = new Observation(name);
            if (session.observe(nameBytes, observation)) {
                try {
                    observation.first.get();
                    return observation;
                } catch (InterruptedException err) {
                    observation.close();
                    throw err;
                } catch (ExecutionException err) {
                    if (err.getCause() != Claim.TOO_MANY_WATCHES || attempt >= SESSION_PICKS) {
                        throw rethrown(err.getCause());
                    }
                }
            } else if (attempt >= SESSION_PICKS) {
                throw new MonolockException("no session could take a watch of lock \"" + name + "\" ("
                        + session.endedBecause() + ")", true, null);
            }
        }
    }

    /**
     * {@link #observe(String)} in listener form: every state, the first
     * included, is handed to {@code listener} in order on a daemon thread of
     * the observation, until it is closed or its session ends
     * ({@link Observation#ended()} says so). The returned observation is
     * for closing and for {@code ended()}; its states go to the listener
     * alone.
     *
     * @throws UnsupportedFeatureException the server is older than observers (or the client forced to v1)
     * @throws InterruptedException the thread was interrupted; the watch is given up
     */
    public Observation observe(String name, Consumer<LockState> listener) throws InterruptedException {
        if (listener == null) {
            throw new IllegalArgumentException("the observation's listener is null");
        }
        Observation observation = observe(name);
        Thread thread = new Thread(() -> {
            try {
                observation.forEachRemaining(listener);
            } catch (MonolockException ended) {
                // Its end is reported by ended(); an interrupt ends the delivery.
            }
        }, "monolock-observe-" + name);
        thread.setDaemon(true);
        thread.start();
        return observation;
    }

    /**
     * Who holds lock {@code name} now, asked once: a state whose event is
     * {@code FREE} or {@code HELD} (with the holder's token and value).
     * Advisory: the holder may lose the lock right after.
     *
     * @throws UnsupportedFeatureException the server is older than lookups (or the client forced to v1)
     */
    public LockState holder(String name) {
        byte[] nameBytes = Arguments.lockName(name);
        requireExtension();
        for (int attempt = 1; ; attempt++) {
            V2Session session = extendedSession(false);
            CompletableFuture<LockState> answer = session.lookup(name, nameBytes);
            if (answer != null) {
                return joinUninterruptibly(answer);
            }
            if (attempt >= SESSION_PICKS) {
                throw new MonolockException("no session could look up lock \"" + name + "\" ("
                        + session.endedBecause() + ")", true, null);
            }
        }
    }

    /**
     * A leader election on lock {@code name} (see {@link LeaderElection}):
     * this candidate campaigns with {@code value} once it is
     * {@link LeaderElection#start() started}.
     */
    public LeaderElection leaderElection(String name, Duration lease, String value, LeaderElection.Listener listener) {
        Arguments.lockName(name);
        Arguments.leaseMillis(lease);
        Arguments.lockValue(value);
        if (listener == null) {
            throw new IllegalArgumentException("the election's listener is null");
        }
        return new LeaderElection(this, name, lease, value == null ? "" : value, listener);
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

    private MonolockLock acquire(String name, Duration lease, Duration wait, String value,
            CompletableFuture<?> cancelledBy) throws InterruptedException {
        byte[] nameBytes = Arguments.lockName(name);
        long leaseMs = Arguments.leaseMillis(lease);
        byte[] valueBytes = Arguments.lockValue(value);
        long started = System.nanoTime();
        while (true) {
            Claim claim = start(name, nameBytes, leaseMs, false, valueBytes);
            if (cancelledBy != null) {
                cancelledBy.whenComplete((result, err) -> {
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

    private static <T> T joinUninterruptibly(CompletableFuture<T> future) {
        boolean interrupted = false;
        try {
            while (true) {
                try {
                    return future.get();
                } catch (InterruptedException err) {
                    interrupted = true;
                } catch (ExecutionException err) {
                    throw rethrown(err.getCause());
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    static RuntimeException rethrown(Throwable cause) {
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

    /** Values and observers need protocol version 2. */
    private void requireExtension() {
        if (closed) {
            throw new IllegalStateException("the client is closed");
        }
        if (forceV1) {
            throw new UnsupportedFeatureException(V1_HAS_NO_VALUES);
        }
    }

    private static boolean remembered(Map<Address, Long> memory, Address address) {
        Long until = memory.get(address);
        return until != null && System.nanoTime() - until < 0;
    }

    private static UnsupportedFeatureException unsupported(Address address) {
        return new UnsupportedFeatureException(V2Session.unsupportedMessage(address.toString()));
    }

    /**
     * Sends the ACQUIRE of a new claim on a pooled session, a new session,
     * or a version 1 connection, trying the addresses in order. A claim
     * with a value goes only on a session with the extension.
     */
    private Claim start(String name, byte[] nameBytes, long leaseMs, boolean tryOnly, byte[] value) {
        if (closed) {
            throw new IllegalStateException("the client is closed");
        }
        if (value.length > 0) {
            requireExtension();
        }
        if (!forceV1) {
            Claim pooled = onPooledSession(name, nameBytes, leaseMs, tryOnly, value);
            if (pooled != null) {
                return pooled;
            }
        }
        List<Refusal> refusals = new ArrayList<>();
        for (Address address : addresses) {
            try {
                return startAt(address, name, nameBytes, leaseMs, tryOnly, value);
            } catch (Refusal refusal) {
                forgetAnswers(address);
                refusals.add(refusal);
            }
        }
        throw connectFailure(refusals);
    }

    /** An address that failed to connect: what it answered before is forgotten. */
    private void forgetAnswers(Address address) {
        v1Until.remove(address);
        plainUntil.remove(address);
    }

    private Claim onPooledSession(String name, byte[] nameBytes, long leaseMs, boolean tryOnly, byte[] value) {
        synchronized (pool) {
            for (V2Session session : pool.getOrDefault(leaseMs, List.of())) {
                if (session.accepts() && (value.length == 0 || session.extended())) {
                    Claim claim = session.acquire(name, nameBytes, tryOnly, value);
                    if (claim != null) {
                        return claim;
                    }
                }
            }
        }
        return null;
    }

    /**
     * A session with the extension for a watch ({@code forWatch}: one with
     * room for it) or a lookup: a pooled one of any lease, else a new one at
     * the first address that answers.
     */
    private V2Session extendedSession(boolean forWatch) {
        synchronized (pool) {
            for (List<V2Session> sessions : pool.values()) {
                for (V2Session session : sessions) {
                    if (forWatch ? session.acceptsWatch() : session.extended() && !session.ended()) {
                        return session;
                    }
                }
            }
        }
        List<Refusal> refusals = new ArrayList<>();
        for (Address address : addresses) {
            if (remembered(v1Until, address) || remembered(plainUntil, address)) {
                throw unsupported(address);
            }
            try {
                V2Session session = openSession(address, OBSERVE_LEASE_MS);
                if (session == null || !session.extended()) {
                    throw unsupported(address);
                }
                return session;
            } catch (Refusal refusal) {
                forgetAnswers(address);
                refusals.add(refusal);
            }
        }
        throw connectFailure(refusals);
    }

    /**
     * Opens a version 2 session at {@code address} and pools it: with HELLO
     * written behind the OPEN, unless the address is known to lack the
     * extension; a server that answers HELLO with ERROR 0x13 is remembered
     * as lacking it and a plain session opened instead. Null when the
     * address speaks only version 1 (remembered too).
     */
    private V2Session openSession(Address address, long leaseMs) throws Refusal {
        long leaseNanos = TimeUnit.MILLISECONDS.toNanos(leaseMs);
        while (true) {
            boolean hello = !remembered(plainUntil, address);
            byte[] open = Frames.open(leaseMs);
            if (hello) {
                byte[] withHello = Frames.hello(Frames.FEATURE_VALUES_AND_OBSERVERS);
                byte[] both = Arrays.copyOf(open, open.length + withHello.length);
                System.arraycopy(withHello, 0, both, open.length, withHello.length);
                open = both;
            }
            Answer answer = connector.open(address, open);
            int type = answer.frame().type();
            int code = answer.frame().code();
            if (type == Frames.OPENED) {
                Answer features = null;
                if (hello) {
                    try {
                        features = connector.next(answer.connection(), answer.sentAt());
                    } catch (Refusal refusal) {
                        answer.connection().close();
                        throw refusal;
                    }
                    Frames.Frame frame = features.frame();
                    if (frame.type() == Frames.ERROR && frame.code() == SessionCore.UNKNOWN_MESSAGE_TYPE) {
                        // A server older than the extension: it closes; plain sessions from now on.
                        answer.connection().close();
                        plainUntil.put(address, System.nanoTime() + V1_MEMORY_NANOS);
                        continue;
                    }
                    if (frame.type() == Frames.ERROR) {
                        answer.connection().close();
                        throw new Refusal(String.format("%s refused the session (error 0x%02x: %s)",
                                address, frame.code(), frame.reason()), frame.code() < 0x10, false, null);
                    }
                }
                V2Session session;
                try {
                    session = V2Session.start(answer, features, leaseNanos, idleClose, timer, this::dropSession);
                } catch (SessionCore.ProtocolViolation err) {
                    answer.connection().close();
                    throw new Refusal(address + " broke the protocol: " + err.getMessage(), false, false, err);
                }
                if (hello && !session.extended()) {
                    plainUntil.put(address, System.nanoTime() + V1_MEMORY_NANOS);
                }
                synchronized (pool) {
                    pool.computeIfAbsent(leaseMs, lease -> new ArrayList<>()).add(session);
                }
                return session;
            }
            answer.connection().close();
            if (type == Frames.ERROR && code == SessionCore.UNSUPPORTED_VERSION) {
                v1Until.put(address, System.nanoTime() + V1_MEMORY_NANOS);
                return null;
            } else if (type == Frames.ERROR) {
                throw new Refusal(String.format("%s refused the session (error 0x%02x: %s)",
                        address, code, answer.frame().reason()), code < 0x10, false, null);
            }
            throw new Refusal(address + " is not a monolock server: it answered OPEN with "
                    + answer.frame(), false, false, null);
        }
    }

    private Claim startAt(Address address, String name, byte[] nameBytes, long leaseMs, boolean tryOnly,
            byte[] value) throws Refusal {
        long leaseNanos = TimeUnit.MILLISECONDS.toNanos(leaseMs);
        boolean v1 = forceV1 || remembered(v1Until, address);
        for (int attempt = 1; !v1; attempt++) {
            if (value.length > 0 && remembered(plainUntil, address)) {
                throw unsupported(address);
            }
            V2Session session = openSession(address, leaseMs);
            if (session == null) {
                v1 = true;
                break;
            }
            if (value.length > 0 && !session.extended()) {
                // The session stays pooled for plain claims.
                throw unsupported(address);
            }
            Claim claim = session.acquire(name, nameBytes, tryOnly, value);
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
        if (value.length > 0) {
            throw unsupported(address);
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
        if (!forceV1) {
            claim.noValues = V2Session.unsupportedMessage(address.toString());
        }
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
