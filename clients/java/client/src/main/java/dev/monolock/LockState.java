package dev.monolock;

import java.time.Instant;
import java.util.Objects;
import java.util.Optional;

/**
 * The state of a lock as the server told it: what an {@link Observation}
 * yields, one per push, and what {@link MonolockClient#holder(String)}
 * answers. Advisory: the holder it names may already have lost the lock
 * by the time it is read, so writes are still fenced by the token.
 */
public final class LockState {
    /** What the server's frame said (docs/protocol.md, "The state"). */
    public enum Event {
        /** Nobody holds the lock (a state: the first push, a coalesced push, a lookup). */
        FREE("free"),
        /** Held under {@code token} with {@code value} (a state, as FREE). */
        HELD("held"),
        /** A change: the lock was granted under {@code token}. */
        GRANTED("granted"),
        /** A change: the holder of {@code token} replaced its value. */
        VALUE("value"),
        /** A change: the claim holding {@code token} ended, for {@code reason}; the lock is free. */
        RELEASED("released");

        private final String wireName;

        Event(String wireName) {
            this.wireName = wireName;
        }

        /** The event's name as every client and the driver protocol spell it. */
        public String wireName() {
            return wireName;
        }

        static Event ofWire(int code) {
            return values()[code];
        }
    }

    /** Why a claim ended, in a RELEASED state. */
    public enum ReleaseReason {
        /** Its holder released it, or closed its connection. */
        RELEASED("released"),
        /** A lease of silence ran out. */
        EXPIRED("expired"),
        /** An administrator force-released it. */
        FORCED("forced"),
        /** The server ended the holder's session, and the kept claim ran out. */
        ENDED_BY_SERVER("ended_by_server");

        private final String wireName;

        ReleaseReason(String wireName) {
            this.wireName = wireName;
        }

        /** The reason's name as every client and the driver protocol spell it. */
        public String wireName() {
            return wireName;
        }

        static ReleaseReason ofWire(int code) {
            return code >= 1 && code <= 4 ? values()[code - 1] : null;
        }
    }

    private final Event event;
    private final long token;
    private final String value;
    private final Instant since;
    private final boolean initial;
    private final boolean coalesced;
    private final ReleaseReason reason;

    LockState(Event event, long token, String value, Instant since, boolean initial, boolean coalesced,
            ReleaseReason reason) {
        this.event = event;
        this.token = token;
        this.value = value;
        this.since = since;
        this.initial = initial;
        this.coalesced = coalesced;
        this.reason = reason;
    }

    /** The state a STATE or LOCK_STATE frame carries. */
    static LockState of(Frames.WireState wire) {
        Event event = Event.ofWire(wire.event());
        boolean held = event == Event.HELD || event == Event.GRANTED || event == Event.VALUE;
        return new LockState(event, wire.token(), held ? wire.value() : "",
                wire.sinceMs() == 0 ? null : Instant.ofEpochMilli(wire.sinceMs()),
                (wire.flags() & 0x01) != 0, (wire.flags() & 0x02) != 0,
                event == Event.RELEASED ? ReleaseReason.ofWire(wire.reason()) : null);
    }

    /** Whether the lock is held in this state: HELD, GRANTED and VALUE. */
    public boolean held() {
        return event == Event.HELD || event == Event.GRANTED || event == Event.VALUE;
    }

    /**
     * The holder's fencing token (HELD, GRANTED, VALUE), the token whose
     * claim ended (RELEASED), or for FREE the last holder's if the server
     * knows it, else 0.
     */
    public long token() {
        return token;
    }

    /** The holder's value; empty when the lock is not held or its holder gave none. */
    public String value() {
        return value;
    }

    /**
     * The server's wall-clock instant at which the lock was granted, or
     * became free; for display only.
     */
    public Optional<Instant> since() {
        return Optional.ofNullable(since);
    }

    /** What the frame said. */
    public Event event() {
        return event;
    }

    /** Whether this is an observation's first state (the state when the watch was registered). */
    public boolean initial() {
        return initial;
    }

    /** Whether changes were missed before this state (a slow reader); the state is current. */
    public boolean coalesced() {
        return coalesced;
    }

    /** For RELEASED, why the claim ended. */
    public Optional<ReleaseReason> reason() {
        return Optional.ofNullable(reason);
    }

    @Override
    public boolean equals(Object other) {
        return other instanceof LockState state && event == state.event && token == state.token
                && value.equals(state.value) && Objects.equals(since, state.since) && initial == state.initial
                && coalesced == state.coalesced && reason == state.reason;
    }

    @Override
    public int hashCode() {
        return Objects.hash(event, token, value, since, initial, coalesced, reason);
    }

    @Override
    public String toString() {
        StringBuilder out = new StringBuilder("LockState[").append(event.wireName());
        out.append(", token ").append(Long.toUnsignedString(token));
        if (!value.isEmpty()) {
            out.append(", value \"").append(value).append('"');
        }
        if (initial) {
            out.append(", initial");
        }
        if (coalesced) {
            out.append(", coalesced");
        }
        if (reason != null) {
            out.append(", ").append(reason.wireName());
        }
        return out.append(']').toString();
    }
}
