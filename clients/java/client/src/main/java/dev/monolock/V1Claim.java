package dev.monolock;

import dev.monolock.Connector.Answer;
import dev.monolock.Connector.Connection;
import dev.monolock.Frames.Frame;
import java.io.IOException;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * One protocol version 1 claim: its own connection, one daemon reader
 * thread, heartbeats and the deadline as ticks on the client's timer. All
 * protocol decisions are {@link V1Core}'s. Leaving (release, or a try that
 * found the lock busy) half-closes and reads until the server's EOF: the
 * server releases in its table before it closes, so EOF confirms it.
 */
final class V1Claim extends Claim {
    private final Connection connection;
    private final Timer timer;
    private final V1Core core;
    private final CompletableFuture<Boolean> closedByServer = new CompletableFuture<>();
    /** Completes when the connection is closed, whatever the cause. */
    final CompletableFuture<Void> finished = new CompletableFuture<>();
    /** What {@link #unsupported()} answers: protocol version 1 forced, or an address that only speaks it. */
    volatile String noValues = MonolockClient.V1_HAS_NO_VALUES;
    private boolean ended;
    private boolean leaving;
    private ScheduledFuture<?> tick;
    private long tickAt = Long.MAX_VALUE;

    private V1Claim(String name, Answer answer, long leaseNanos, Timer timer) {
        super(name);
        this.connection = answer.connection();
        this.timer = timer;
        this.core = new V1Core(leaseNanos, answer.sentAt());
    }

    /** Starts the claim whose ACQUIRE was answered (WAITING or ACQUIRED) in {@code answer}. */
    static V1Claim start(String name, Answer answer, long leaseNanos, Timer timer) {
        V1Claim claim = new V1Claim(name, answer, leaseNanos, timer);
        claim.handle(answer.frame(), answer.readAt());
        Thread reader = new Thread(claim::readLoop, "monolock-v1-" + answer.connection().address);
        reader.setDaemon(true);
        reader.start();
        synchronized (claim) {
            claim.arm();
        }
        return claim;
    }

    /** Whether the ACQUIRE was answered WAITING (and no push has come yet). */
    synchronized boolean waiting() {
        return !ended && core.state() != V1Core.State.HELD;
    }

    @Override
    String unsupported() {
        return noValues;
    }

    @Override
    CompletableFuture<Void> proclaim(byte[] value) {
        return CompletableFuture.failedFuture(new UnsupportedFeatureException(noValues));
    }

    @Override
    void checkDeadline() {
        boolean due;
        synchronized (this) {
            due = !ended && !leaving && System.nanoTime() - core.deadline() >= 0;
        }
        if (due) {
            end(LossReason.EXPIRED, "no reply confirmed the claim within 0.8 x lease");
        }
    }

    @Override
    boolean leave(Duration bound) {
        synchronized (this) {
            if (ended) {
                return closedByServer.getNow(false);
            }
            leaving = true;
            if (tick != null) {
                tick.cancel(false);
            }
        }
        try {
            connection.socket.shutdownOutput();
        } catch (IOException | UnsupportedOperationException err) {
            connection.close();
            quietEnd();
            return false;
        }
        boolean confirmed;
        try {
            confirmed = closedByServer.get(bound.toNanos(), TimeUnit.NANOSECONDS);
        } catch (TimeoutException | ExecutionException err) {
            confirmed = false;
        } catch (InterruptedException err) {
            Thread.currentThread().interrupt();
            confirmed = false;
        }
        connection.close();
        quietEnd();
        return confirmed;
    }

    /** Closes the connection: the lock, if held, is lost ({@code connection}). */
    void close() {
        end(LossReason.CONNECTION, "the client closed the connection");
    }

    private void quietEnd() {
        synchronized (this) {
            ended = true;
        }
        finished.complete(null);
    }

    private void end(LossReason reason, String detail) {
        synchronized (this) {
            if (ended) {
                return;
            }
            ended = true;
            if (leaving) {
                // Its owner let go: the end of the connection is no loss.
                connection.close();
                finished.complete(null);
                return;
            }
            loss = new LockLostException(name, reason, detail);
            if (tick != null) {
                tick.cancel(false);
            }
        }
        connection.close();
        finished.complete(null);
        LockLostException loss = this.loss;
        granted.completeExceptionally(loss);
        lost.complete(loss);
    }

    private void arm() {
        if (ended || leaving) {
            return;
        }
        long wake = Math.min(core.deadline(), core.nextHeartbeat());
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
        boolean expired = false;
        IOException failed = null;
        synchronized (this) {
            if (ended || leaving) {
                return;
            }
            tick = null;
            long now = System.nanoTime();
            if (now - core.deadline() >= 0) {
                expired = true;
            } else {
                if (now - core.nextHeartbeat() >= 0) {
                    try {
                        connection.out.write(Frames.heartbeat());
                        connection.out.flush();
                        core.heartbeatSent(now);
                    } catch (IOException err) {
                        failed = err;
                    }
                }
                arm();
            }
        }
        if (expired) {
            end(LossReason.EXPIRED, "no reply confirmed the claim within 0.8 x lease");
        } else if (failed != null) {
            end(LossReason.CONNECTION, "write failed: " + failed.getMessage());
        }
    }

    private void readLoop() {
        byte[] buffer = new byte[512];
        try {
            if (!drain()) {
                return;
            }
            while (true) {
                int n = connection.in.read(buffer);
                if (n < 0) {
                    closedByServer.complete(true);
                    end(LossReason.CONNECTION, "the server closed the connection");
                    return;
                }
                connection.decoder.feed(buffer, 0, n);
                if (!drain()) {
                    return;
                }
            }
        } catch (IOException err) {
            closedByServer.complete(false);
            end(LossReason.CONNECTION, "connection failed: " + err.getMessage());
        }
    }

    private boolean drain() {
        while (true) {
            Frame frame;
            try {
                frame = connection.decoder.next();
            } catch (Frames.MalformedFrame err) {
                closedByServer.complete(false);
                end(LossReason.PROTOCOL, "the server broke the protocol: " + err.getMessage());
                return false;
            }
            if (frame == null) {
                return true;
            }
            if (!handle(frame, System.nanoTime())) {
                return false;
            }
        }
    }

    /** Handles one frame; false once the claim has ended. */
    private boolean handle(Frame frame, long now) {
        V1Core.Event event;
        synchronized (this) {
            if (ended) {
                return false;
            }
            try {
                event = core.onFrame(frame, now);
            } catch (SessionCore.ProtocolViolation err) {
                event = null;
                String detail = "the server broke the protocol: " + err.getMessage();
                if (!leaving) {
                    closedByServer.complete(false);
                    end(LossReason.PROTOCOL, detail);
                    return false;
                }
            }
            arm();
        }
        if (event == null) {
            return true;
        }
        switch (event.kind()) {
            case HELD -> {
                token = event.token();
                granted.complete(event.token());
            }
            case ENDED -> {
                String detail = String.format("the server ended the claim (error 0x%02x: %s)",
                        event.code(), event.reason());
                if (!granted.isDone() && event.code() >= 0x10) {
                    granted.completeExceptionally(new ServerRefusedException(String.format(
                            "the server refused lock \"%s\" (0x%02x): %s", name, event.code(), event.reason()),
                            event.code()));
                }
                if (!leaving) {
                    end(LossReason.ofErrorCode(event.code()), detail);
                    return false;
                }
            }
            default -> {
                // QUEUED: wait for the push; NOTHING: a heartbeat's reply.
            }
        }
        return true;
    }
}
