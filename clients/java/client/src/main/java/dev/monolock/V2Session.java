package dev.monolock;

import dev.monolock.Connector.Answer;
import dev.monolock.Connector.Connection;
import dev.monolock.Frames.Frame;
import dev.monolock.SessionCore.Event;
import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
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
    private int nextClaimId;
    private boolean ended;
    /** Why the session ended ({@code reason: detail}), once it has. */
    private String endedBecause = "";
    /** The server refused a claim with 0x09: no new claims until one ends. */
    private boolean full;
    private long idleSince;
    private ScheduledFuture<?> tick;
    private long tickAt = Long.MAX_VALUE;

    private V2Session(Answer answer, long leaseNanos, Duration idleClose, Timer timer, Consumer<V2Session> onEnd)
            throws SessionCore.ProtocolViolation {
        this.idleNanos = idleClose.toNanos();
        this.connection = answer.connection();
        this.outbox = new Outbox(connection.out);
        this.timer = timer;
        this.onEnd = onEnd;
        this.core = new SessionCore(leaseNanos, answer.sentAt());
        Event opened = core.onFrame(answer.frame(), answer.readAt());
        this.maxClaims = opened.maxClaims();
        this.idleSince = answer.readAt();
    }

    /** Starts the session whose OPEN was answered OPENED in {@code answer}. */
    static V2Session start(Answer answer, long leaseNanos, Duration idleClose, Timer timer,
            Consumer<V2Session> onEnd) throws SessionCore.ProtocolViolation {
        V2Session session = new V2Session(answer, leaseNanos, idleClose, timer, onEnd);
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
    V2Claim acquire(String name, byte[] nameBytes, boolean tryOnly) {
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
                outbox.add(Frames.acquire(id, tryOnly, nameBytes));
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
        synchronized (this) {
            if (ended) {
                return;
            }
            ended = true;
            endedBecause = reason.wireName() + ": " + detail;
            gone = new ArrayList<>(claims.values());
            claims.clear();
            for (V2Claim claim : gone) {
                claim.loss = new LockLostException(claim.name, reason, detail);
            }
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

    /** Makes sure a tick comes by the next instant the session must act. */
    private void arm() {
        if (ended) {
            return;
        }
        long wake = Math.min(core.deadline(), core.nextPing());
        if (claims.isEmpty()) {
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
            } else if (claims.isEmpty() && now - (idleSince + idleNanos) >= 0) {
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
            boolean hadClaims = !claims.isEmpty();
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
                default -> {
                    // OPENED cannot come twice (the core refuses it); NOTHING is nothing.
                }
            }
            if (hadClaims && claims.isEmpty()) {
                idleSince = now;
            }
            arm();
            return true;
        }
    }
}
