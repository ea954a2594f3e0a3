package dev.monolock;

import dev.monolock.Frames.Frame;
import java.util.ArrayDeque;

/**
 * One version 1 claim (docs/protocol.md, "Matching replies"), as a pure
 * state machine on instants in nanoseconds: every ACQUIRE and HEARTBEAT gets
 * exactly one reply, in order; a promotion adds one unsolicited ACQUIRED,
 * which confirms nothing. Not thread-safe: its owner serialises access.
 */
final class V1Core {
    enum State { ASKING, WAITING, HELD }

    /** What a frame meant. */
    enum Kind {
        /** The ACQUIRE was answered WAITING: queued. */
        QUEUED,
        /** The lock is held ({@code token}): the ACQUIRE's reply or a push. */
        HELD,
        /** A heartbeat's reply: nothing for the owner. */
        NOTHING,
        /** ERROR: the connection is over. */
        ENDED,
    }

    record Event(Kind kind, long token, int code, String reason) {}

    private final Schedule schedule;
    private final ArrayDeque<Long> inFlight = new ArrayDeque<>();
    private State state = State.ASKING;
    private long token;
    private long confirmedSend;
    private long repliedAt;

    /** The state right after the ACQUIRE went out at {@code acquireSent}. */
    V1Core(long leaseNanos, long acquireSent) {
        schedule = new Schedule(leaseNanos);
        inFlight.add(acquireSent);
        confirmedSend = acquireSent;
        repliedAt = acquireSent;
    }

    State state() {
        return state;
    }

    long token() {
        return token;
    }

    long deadline() {
        return schedule.deadline(confirmedSend);
    }

    /** When the next HEARTBEAT is due, or {@code Long.MAX_VALUE} while one is in flight. */
    long nextHeartbeat() {
        return inFlight.isEmpty() ? schedule.nextSend(confirmedSend, repliedAt) : Long.MAX_VALUE;
    }

    void heartbeatSent(long at) {
        inFlight.add(at);
    }

    Event onFrame(Frame frame, long now) throws SessionCore.ProtocolViolation {
        switch (frame.type()) {
            case Frames.ERROR:
                return new Event(Kind.ENDED, 0, frame.code(), frame.reason());
            case Frames.V1_WAITING:
                if (inFlight.isEmpty() || state == State.HELD) {
                    throw unexpected(frame);
                }
                Event queued = new Event(state == State.ASKING ? Kind.QUEUED : Kind.NOTHING, 0, 0, "");
                state = State.WAITING;
                confirm(now);
                return queued;
            case Frames.V1_ACQUIRED:
                if (state == State.ASKING) {
                    state = State.HELD;
                    token = frame.token();
                    confirm(now);
                    return new Event(Kind.HELD, token, 0, "");
                }
                if (state == State.WAITING) {
                    // The first ACQUIRED while waiting is the push; a
                    // heartbeat in flight gets its own ACQUIRED after it.
                    state = State.HELD;
                    token = frame.token();
                    return new Event(Kind.HELD, token, 0, "");
                }
                if (inFlight.isEmpty() || frame.token() != token) {
                    throw unexpected(frame);
                }
                confirm(now);
                return new Event(Kind.NOTHING, token, 0, "");
            default:
                throw unexpected(frame);
        }
    }

    private void confirm(long now) {
        long sent = inFlight.pollFirst();
        schedule.observeRtt(Math.max(0, now - sent));
        confirmedSend = Math.max(sent, confirmedSend);
        repliedAt = now;
    }

    private static SessionCore.ProtocolViolation unexpected(Frame frame) {
        return new SessionCore.ProtocolViolation("unexpected " + frame);
    }
}
