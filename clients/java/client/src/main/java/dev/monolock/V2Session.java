package dev.monolock;

import dev.monolock.Connector.Answer;
import dev.monolock.Connector.Connection;
import dev.monolock.Frames.Frame;
import dev.monolock.SessionCore.Event;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Consumer;

/**
 * The I/O around one protocol version 2 session: its socket, one daemon
 * reader thread, and ticks on the client's timer for PING, the deadline
 * and the idle close. All protocol decisions are {@link SessionCore}'s.
 * Futures are completed after the session's monitor is released, so that
 * no caller code runs under it. Frames are queued in the {@link Outbox}
 * under the monitor, in the order the core records them as sent, and
 * written after it is released: frames that many threads queue while one
 * write is in progress leave in one write.
 */
final class V2Session {
    /** By default, a session with no claim is closed by the client after this long. */
    static final Duration IDLE_CLOSE = Duration.ofSeconds(20);
    /** The detail of a loss at the session's deadline. */
    static final String DEADLINE_PASSED = "no reply confirmed the session within 0.8 x lease";

    private final Connection connection;
    private final Outbox outbox;
    private final Timer timer;
    private final Consumer<V2Session> onEnd;
    private final SessionCore core;
    private final long maxClaims;
    private final long idleNanos;
    private final Map<Integer, V2Claim> claims = new HashMap<>();
    /** Whether FEATURES granted values and observers on this session. */
    private final boolean extended;
    private final long maxWatches;
    private final Map<Integer, Watch> watches = new HashMap<>();
    /** PROCLAIMs in flight, per claim, in the order written. */
    private final Map<Integer, ArrayDeque<Proclaim>> proclaims = new HashMap<>();
    /** LOOKUPs in flight, in the order written (their replies come in that order). */
    private final ArrayDeque<Lookup> lookups = new ArrayDeque<>();
    private int nextClaimId;
    /** Watch ids from 1, in a space of their own. */
    private int nextWatchId = 1;
    /** The server refused a watch with 0x0b: no new watches until one ends. */
    private boolean watchesFull;
    private boolean ended;
    /** Why the session ended ({@code reason: detail}), once it has. */
    private String endedBecause = "";
    /** The server refused a claim with 0x09: no new claims until one ends. */
    private boolean full;
    private long idleSince;
    private ScheduledFuture<?> tick;
    private long tickAt = Long.MAX_VALUE;

    private V2Session(Answer answer, Answer hello, long leaseNanos, Duration idleClose, Timer timer,
            Consumer<V2Session> onEnd) throws SessionCore.ProtocolViolation {
        this.idleNanos = idleClose.toNanos();
        this.connection = answer.connection();
        this.outbox = new Outbox(connection.out);
        this.timer = timer;
        this.onEnd = onEnd;
        this.core = new SessionCore(leaseNanos, answer.sentAt());
        if (hello != null) {
            core.helloSent(answer.sentAt());
        }
        Event opened = core.onFrame(answer.frame(), answer.readAt());
        this.maxClaims = opened.maxClaims();
        if (hello != null) {
            Event features = core.onFrame(hello.frame(), hello.readAt());
            if (features.kind() != SessionCore.Kind.FEATURES) {
                throw new SessionCore.ProtocolViolation("HELLO answered with " + hello.frame());
            }
            this.extended = (features.code() & Frames.FEATURE_VALUES_AND_OBSERVERS) != 0;
            this.maxWatches = features.maxClaims();
            this.idleSince = hello.readAt();
        } else {
            this.extended = false;
            this.maxWatches = 0;
            this.idleSince = answer.readAt();
        }
    }

    /**
     * Starts the session whose OPEN was answered OPENED in {@code answer},
     * and whose HELLO (written with the OPEN), if any, was answered FEATURES
     * in {@code hello}.
     */
    static V2Session start(Answer answer, Answer hello, long leaseNanos, Duration idleClose, Timer timer,
            Consumer<V2Session> onEnd) throws SessionCore.ProtocolViolation {
        V2Session session = new V2Session(answer, hello, leaseNanos, idleClose, timer, onEnd);
        Thread reader = new Thread(session::readLoop, "monolock-v2-" + answer.connection().address);
        reader.setDaemon(true);
        reader.start();
        synchronized (session) {
            session.arm();
        }
        return session;
    }

    String address() {
        return connection.address.toString();
    }

    /** Whether a new claim may go on this session now. */
    synchronized boolean accepts() {
        return !ended && !full && claims.size() < maxClaims;
    }

    /** Whether the server granted values and observers on this session. */
    boolean extended() {
        return extended;
    }

    /** Whether a new watch may go on this session now. */
    synchronized boolean acceptsWatch() {
        return !ended && extended && !watchesFull && core.watches() < maxWatches;
    }

    synchronized boolean ended() {
        return ended;
    }

    /** Why the session ended ({@code reason: detail}); empty while it lives. */
    synchronized String endedBecause() {
        return endedBecause;
    }

    /**
     * Writes an ACQUIRE for a new claim; its {@code granted} future says
     * how it went. Null when the session has ended meanwhile, or has passed
     * its deadline (it is ended then; {@link #endedBecause()} says why).
     */
    V2Claim acquire(String name, byte[] nameBytes, boolean tryOnly, byte[] value) {
        V2Claim claim;
        synchronized (this) {
            if (ended) {
                return null;
            }
            long now = System.nanoTime();
            if (now - core.deadline() >= 0) {
                // Past its deadline (an OPENED that came late, a pause before
                // the timer's tick): the server may have dropped the session,
                // so no claim goes on it.
                claim = null;
            } else {
                int id = nextClaimId++;
                while (claims.containsKey(id) || core.knows(id)) {
                    id = nextClaimId++;
                }
                claim = new V2Claim(name, id);
                claims.put(id, claim);
                if (value.length > 0) {
                    outbox.add(Frames.acquireValue(id, tryOnly, nameBytes, value));
                    claim.value = new String(value, StandardCharsets.UTF_8);
                } else {
                    outbox.add(Frames.acquire(id, tryOnly, nameBytes));
                }
                core.acquireSent(id, tryOnly, now);
                arm();
            }
        }
        if (claim == null) {
            end(LossReason.EXPIRED, DEADLINE_PASSED);
            return null;
        }
        flushOutbox();
        return claim;
    }

    /** One claim of this session. */
    final class V2Claim extends Claim {
        final int id;
        final CompletableFuture<Boolean> released = new CompletableFuture<>();

        V2Claim(String name, int id) {
            super(name);
            this.id = id;
        }

        @Override
        void checkDeadline() {
            V2Session.this.checkDeadline();
        }

        @Override
        String unsupported() {
            return extended ? null : unsupportedMessage(address());
        }

        @Override
        CompletableFuture<Void> proclaim(byte[] value) {
            return V2Session.this.proclaim(this, value);
        }

        @Override
        boolean leave(Duration bound) {
            synchronized (V2Session.this) {
                if (ended || !claims.containsKey(id)) {
                    return released.getNow(false);
                }
                if (core.release(id)) {
                    outbox.add(Frames.release(id));
                    core.releaseSent(id, System.nanoTime());
                    arm();
                }
            }
            flushOutbox();
            try {
                return released.get(bound.toNanos(), TimeUnit.NANOSECONDS);
            } catch (TimeoutException err) {
                end(LossReason.CONNECTION, "the server did not confirm a release within " + bound.toMillis() + " ms");
                return false;
            } catch (InterruptedException err) {
                Thread.currentThread().interrupt();
                end(LossReason.CONNECTION, "interrupted while releasing: the session is closed instead");
                return false;
            } catch (ExecutionException err) {
                return false;
            }
        }
    }

    /** The message of an address whose server lacks values and observers. */
    static String unsupportedMessage(String address) {
        return address + " does not support lock values and observers (the server is older than this client):"
                + " upgrade the server";
    }

    /**
     * Writes a PROCLAIM of {@code claim}'s new value; the future completes
     * once PROCLAIMED is read, or exceptionally: the claim's loss, or the
     * server's refusal.
     */
    private CompletableFuture<Void> proclaim(V2Claim claim, byte[] value) {
        CompletableFuture<Void> done = new CompletableFuture<>();
        RuntimeException failure = null;
        synchronized (this) {
            if (claim.loss != null) {
                failure = claim.loss;
            } else if (ended || !claims.containsKey(claim.id) || !core.inUse(claim.id)) {
                failure = new IllegalStateException("lock \"" + claim.name + "\" is not held: no value to replace");
            } else {
                outbox.add(Frames.proclaim(claim.id, value));
                core.proclaimSent(claim.id, System.nanoTime());
                proclaims.computeIfAbsent(claim.id, id -> new ArrayDeque<>()).add(new Proclaim(claim,
                        new String(value, StandardCharsets.UTF_8), done));
                arm();
            }
        }
        if (failure != null) {
            done.completeExceptionally(failure);
            return done;
        }
        flushOutbox();
        return done;
    }

    /** A PROCLAIM in flight. */
    private record Proclaim(V2Claim claim, String value, CompletableFuture<Void> done) {}

    /** One watch of this session: its id and the observation it feeds. */
    final class Watch {
        final int id;
        final Observation observation;
        /** Its observation was closed while the OBSERVE was unanswered: UNOBSERVE once it is. */
        boolean closeWanted;

        Watch(int id, Observation observation) {
            this.id = id;
            this.observation = observation;
        }
    }

    /**
     * Writes an OBSERVE of {@code name} for {@code observation}, whose
     * {@code first} future then says how it went. False when the session
     * has ended meanwhile or cannot take another watch.
     */
    boolean observe(byte[] nameBytes, Observation observation) {
        Watch watch;
        synchronized (this) {
            if (ended || !extended || watchesFull || core.watches() >= maxWatches
                    || System.nanoTime() - core.deadline() >= 0) {
                return false;
            }
            int id = nextWatchId++;
            while (core.knowsWatch(id) || id == 0) {
                id = nextWatchId++;
            }
            watch = new Watch(id, observation);
            watches.put(id, watch);
            outbox.add(Frames.observe(id, nameBytes));
            core.observeSent(id, System.nanoTime());
            arm();
        }
        observation.onClose(() -> unobserve(watch));
        flushOutbox();
        return true;
    }

    /** Stops a watch: UNOBSERVE now if it is in use, once OBSERVING comes if it is asked for. */
    private void unobserve(Watch watch) {
        synchronized (this) {
            if (ended || watches.get(watch.id) != watch) {
                return;
            }
            if (!core.unobserve(watch.id)) {
                watch.closeWanted = true;
                return;
            }
            outbox.add(Frames.unobserve(watch.id));
            core.unobserveSent(watch.id, System.nanoTime());
            arm();
        }
        flushOutbox();
    }

    /** A LOOKUP in flight. */
    private record Lookup(String name, CompletableFuture<LockState> answer) {}

    /**
     * Writes a LOOKUP of {@code name}; the future completes with the
     * LOCK_STATE, or exceptionally. Null when the session has ended or
     * cannot carry it.
     */
    CompletableFuture<LockState> lookup(String name, byte[] nameBytes) {
        CompletableFuture<LockState> answer = new CompletableFuture<>();
        synchronized (this) {
            if (ended || !extended || System.nanoTime() - core.deadline() >= 0) {
                return null;
            }
            outbox.add(Frames.lookup(nameBytes));
            core.lookupSent(System.nanoTime());
            lookups.add(new Lookup(name, answer));
            arm();
        }
        flushOutbox();
        return answer;
    }

    /** Gives the whole session up if its deadline has passed. */
    void checkDeadline() {
        boolean due;
        synchronized (this) {
            due = !ended && System.nanoTime() - core.deadline() >= 0;
        }
        if (due) {
            end(LossReason.EXPIRED, DEADLINE_PASSED);
        }
    }

    /** Closes the session, unused (the client is closing, or it idled). */
    void close() {
        end(LossReason.CONNECTION, "the client closed the session");
    }

    /**
     * Ends the session: closes the connection; every claim on it is lost
     * (or, asked for, fails) with {@code reason}.
     */
    void end(LossReason reason, String detail) {
        List<V2Claim> gone;
        List<Watch> watchesGone;
        List<Proclaim> proclaimsGone = new ArrayList<>();
        List<Lookup> lookupsGone;
        synchronized (this) {
            if (ended) {
                return;
            }
            ended = true;
            endedBecause = reason.wireName() + ": " + detail;
            gone = new ArrayList<>(claims.values());
            gone.sort(Comparator.comparingInt(claim -> claim.id));
            claims.clear();
            for (V2Claim claim : gone) {
                claim.loss = new LockLostException(claim.name, reason, detail);
            }
            watchesGone = new ArrayList<>(watches.values());
            watchesGone.sort(Comparator.comparingInt(watch -> watch.id));
            watches.clear();
            proclaims.values().forEach(proclaimsGone::addAll);
            proclaims.clear();
            lookupsGone = new ArrayList<>(lookups);
            lookups.clear();
            if (tick != null) {
                tick.cancel(false);
            }
        }
        connection.close();
        onEnd.accept(this);
        for (V2Claim claim : gone) {
            LockLostException loss = claim.loss;
            claim.granted.completeExceptionally(loss);
            claim.released.complete(false);
            claim.lost.complete(loss);
        }
        for (Proclaim proclaim : proclaimsGone) {
            LockLostException loss = proclaim.claim().loss;
            proclaim.done().completeExceptionally(loss != null ? loss
                    : new IllegalStateException("lock \"" + proclaim.claim().name + "\" was released meanwhile"));
        }
        for (Watch watch : watchesGone) {
            watch.observation.fail(new ObservationEndedException(watch.observation.name(), reason, detail));
        }
        for (Lookup lookup : lookupsGone) {
            lookup.answer().completeExceptionally(new MonolockException("the holder of lock \"" + lookup.name()
                    + "\" is unknown: the session ended before the answer (" + reason.wireName() + ": " + detail
                    + ")", reason != LossReason.PROTOCOL, null));
        }
    }

    /**
     * Writes the frames queued, or leaves them to the thread already
     * writing; a failed write ends the session. Called with the monitor
     * released, by every thread that queued a frame.
     */
    private void flushOutbox() {
        try {
            outbox.flush();
        } catch (IOException err) {
            end(LossReason.CONNECTION, "write failed: " + err.getMessage());
        }
    }

    /** Nothing keeps the session open: no claim, no watch, nothing in flight for anyone. */
    private boolean idle() {
        return claims.isEmpty() && watches.isEmpty() && lookups.isEmpty();
    }

    /** Makes sure a tick comes by the next instant the session must act. */
    private void arm() {
        if (ended) {
            return;
        }
        long wake = Math.min(core.deadline(), core.nextPing());
        if (idle()) {
            wake = Math.min(wake, idleSince + idleNanos);
        }
        if (tick != null && !tick.isDone() && tickAt - wake <= 0) {
            return;
        }
        if (tick != null) {
            tick.cancel(false);
        }
        tickAt = wake;
        tick = timer.at(wake, this::onTick);
    }

    private void onTick() {
        List<Runnable> after = new ArrayList<>();
        boolean idle = false;
        synchronized (this) {
            if (ended) {
                return;
            }
            long now = System.nanoTime();
            tick = null;
            if (now - core.deadline() >= 0) {
                after.add(() -> end(LossReason.EXPIRED, DEADLINE_PASSED));
            } else if (idle() && now - (idleSince + idleNanos) >= 0) {
                // Ended here, under the monitor, so that no claim can join it meanwhile.
                ended = true;
                endedBecause = "idle: closed by the client after " + idleNanos / 1_000_000 + " ms without claims";
                idle = true;
            } else {
                if (now - core.nextPing() >= 0) {
                    outbox.add(Frames.ping());
                    core.pingSent(now);
                }
                arm();
            }
        }
        if (idle) {
            connection.close();
            onEnd.accept(this);
        }
        flushOutbox();
        after.forEach(Runnable::run);
    }

    private void readLoop() {
        byte[] buffer = new byte[4096];
        try {
            drain();
            while (true) {
                int n = connection.in.read(buffer);
                if (n < 0) {
                    end(LossReason.CONNECTION, "the server closed the connection");
                    return;
                }
                connection.decoder.feed(buffer, 0, n);
                if (!drain()) {
                    return;
                }
            }
        } catch (IOException err) {
            end(LossReason.CONNECTION, "connection failed: " + err.getMessage());
        }
    }

    /** Handles every whole frame buffered; false once the session has ended. */
    private boolean drain() {
        while (true) {
            List<Runnable> after = new ArrayList<>();
            boolean more;
            try {
                Frame frame = connection.decoder.next();
                if (frame == null) {
                    return !ended();
                }
                more = handle(frame, after);
            } catch (Frames.MalformedFrame | SessionCore.ProtocolViolation err) {
                end(LossReason.PROTOCOL, "the server broke the protocol: " + err.getMessage());
                return false;
            }
            // A RELEASE the reply called for goes out before anyone is woken.
            flushOutbox();
            after.forEach(Runnable::run);
            if (!more) {
                return false;
            }
        }
    }

    private boolean handle(Frame frame, List<Runnable> after) throws SessionCore.ProtocolViolation {
        synchronized (this) {
            if (ended) {
                return false;
            }
            long now = System.nanoTime();
            Event event = core.onFrame(frame, now);
            boolean wasIdle = idle();
            V2Claim claim = claims.get(event.claim());
            switch (event.kind()) {
                case ENDED -> {
                    LossReason reason = LossReason.ofErrorCode(event.code());
                    String detail = String.format("the server ended the session (error 0x%02x: %s)",
                            event.code(), event.reason());
                    after.add(() -> end(reason, detail));
                    return false;
                }
                case HELD -> {
                    if (claim != null) {
                        claim.token = event.token();
                        if (event.release()) {
                            outbox.add(Frames.release(claim.id));
                            core.releaseSent(claim.id, now);
                        } else {
                            after.add(() -> claim.granted.complete(event.token()));
                        }
                    }
                }
                case QUEUED -> {
                    if (claim != null && event.release()) {
                        outbox.add(Frames.release(claim.id));
                        core.releaseSent(claim.id, now);
                    }
                }
                case BUSY, REFUSED -> {
                    if (claim != null) {
                        claims.remove(claim.id);
                        RuntimeException why;
                        if (event.kind() == SessionCore.Kind.BUSY) {
                            why = Claim.BUSY;
                        } else if (event.code() == SessionCore.TOO_MANY_CLAIMS) {
                            full = true;
                            why = Claim.TOO_MANY_CLAIMS;
                        } else {
                            why = new ServerRefusedException(String.format(
                                    "the server refused lock \"%s\" (0x%02x): %s",
                                    claim.name, event.code(), event.reason()), event.code());
                        }
                        after.add(() -> {
                            claim.granted.completeExceptionally(why);
                            claim.released.complete(true);
                        });
                    }
                }
                case RELEASED -> {
                    if (claim != null) {
                        claims.remove(claim.id);
                        full = false;
                        after.add(() -> claim.released.complete(true));
                    }
                }
                case REVOKED -> {
                    if (claim != null) {
                        claims.remove(claim.id);
                        full = false;
                        LockLostException loss = new LockLostException(claim.name, LossReason.FORCED,
                                String.format("revoked by an administrator (0x%02x: %s)", event.code(),
                                        event.reason()));
                        claim.loss = loss;
                        after.add(() -> {
                            claim.granted.completeExceptionally(loss);
                            claim.released.complete(false);
                            claim.lost.complete(loss);
                        });
                    }
                }
                case PROCLAIMED, PROCLAIM_REFUSED -> {
                    ArrayDeque<Proclaim> waiting = proclaims.get(event.claim());
                    Proclaim proclaim = waiting == null ? null : waiting.pollFirst();
                    if (waiting != null && waiting.isEmpty()) {
                        proclaims.remove(event.claim());
                    }
                    if (proclaim != null && event.kind() == SessionCore.Kind.PROCLAIMED) {
                        proclaim.claim().value = proclaim.value();
                        after.add(() -> proclaim.done().complete(null));
                    } else if (proclaim != null) {
                        // 0x20: the claim ended first (its REVOKED was read before this).
                        RuntimeException why = proclaim.claim().loss != null ? proclaim.claim().loss
                                : new ServerRefusedException(String.format(
                                        "the server refused the new value of lock \"%s\" (0x%02x): %s",
                                        proclaim.claim().name, event.code(), event.reason()), event.code());
                        after.add(() -> proclaim.done().completeExceptionally(why));
                    }
                }
                case OBSERVING -> {
                    Watch watch = watches.get(event.claim());
                    if (watch != null && watch.closeWanted) {
                        outbox.add(Frames.unobserve(watch.id));
                        core.unobserveSent(watch.id, now);
                    }
                }
                case WATCH_REFUSED -> {
                    Watch watch = watches.remove(event.claim());
                    if (watch != null) {
                        if (event.code() == SessionCore.TOO_MANY_WATCHES) {
                            watchesFull = true;
                        }
                        RuntimeException why = event.code() == SessionCore.TOO_MANY_WATCHES ? Claim.TOO_MANY_WATCHES
                                : new ServerRefusedException(String.format(
                                        "the server refused to observe lock \"%s\" (0x%02x): %s",
                                        watch.observation.name(), event.code(), event.reason()), event.code());
                        after.add(() -> watch.observation.first.completeExceptionally(why));
                    }
                }
                case STATE -> {
                    Watch watch = watches.get(event.claim());
                    if (watch != null) {
                        LockState state = LockState.of(event.state());
                        after.add(() -> watch.observation.deliver(state));
                    }
                }
                case UNOBSERVED -> {
                    if (watches.remove(event.claim()) != null) {
                        watchesFull = false;
                    }
                }
                case LOCK_STATE, LOOKUP_REFUSED -> {
                    Lookup lookup = lookups.pollFirst();
                    if (lookup != null && event.kind() == SessionCore.Kind.LOCK_STATE) {
                        LockState state = LockState.of(event.state());
                        after.add(() -> lookup.answer().complete(state));
                    } else if (lookup != null) {
                        ServerRefusedException why = new ServerRefusedException(String.format(
                                "the server refused to look up lock \"%s\" (0x%02x): %s", lookup.name(),
                                event.code(), event.reason()), event.code());
                        after.add(() -> lookup.answer().completeExceptionally(why));
                    }
                }
                default -> {
                    // OPENED and FEATURES cannot come twice (the core refuses them); NOTHING is nothing.
                    // UNSUPPORTED is only read before a session starts (MonolockClient reads the answer to HELLO).
                }
            }
            if (!wasIdle && idle()) {
                idleSince = now;
            }
            arm();
            return true;
        }
    }
}
