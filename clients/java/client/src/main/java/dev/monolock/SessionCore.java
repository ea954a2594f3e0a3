package dev.monolock;

import dev.monolock.Frames.Frame;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Reply matching and timing for one protocol version 2 session
 * (docs/protocol.md, "Writing a version 2 client: checklist"), as a pure
 * state machine: fed the frames sent and received with their instants
 * (nanoseconds of {@link System#nanoTime()}), it says what each frame
 * meant, or that the server broke the protocol. Not thread-safe: its
 * owner serialises access.
 *
 * <ul>
 *   <li>Every frame sent gets exactly one reply, in order: a FIFO of the
 *       frames in flight, each reply checked against the oldest (type and
 *       claim id). GRANTED and REVOKED are pushes and answer nothing.</li>
 *   <li>Each claim id: asking (ACQUIRE sent), waiting or held, releasing
 *       (RELEASE sent), free on RELEASED. GRANTED may cross a RELEASE;
 *       REFUSED 0x20 answers a RELEASE that crossed a REVOKED.</li>
 *   <li>{@code S} is the send instant of the latest frame whose reply has
 *       arrived (before the first: the OPEN's); the session is given up at
 *       {@code S + 0.8 lease}. A push moves nothing.</li>
 *   <li>PING on the version 1 schedule, only when nothing is in flight: any
 *       reply confirms the session, so a busy session never pings.</li>
 *   <li>The extension "values and observers": HELLO rides behind the OPEN
 *       and is answered FEATURES, or ERROR 0x13 after OPENED by a server
 *       without it ({@link Kind#UNSUPPORTED}). Watch ids live apart from
 *       claim ids; a STATE is a push (it confirms nothing), for a watch in
 *       use, its token never below the watch's previous one; a STATE for a
 *       watch being unobserved is nothing for anyone.</li>
 * </ul>
 */
final class SessionCore {
    /** ERROR code of a server that speaks only version 1, in reply to OPEN. */
    static final int UNSUPPORTED_VERSION = 0x10;
    /** REFUSED code: the session has max_claims claims in use. */
    static final int TOO_MANY_CLAIMS = 0x09;
    /** REFUSED code: RELEASE of an id not in use. */
    static final int UNKNOWN_CLAIM = 0x20;
    /** ERROR code "unknown message type": a server without the extension answering HELLO. */
    static final int UNKNOWN_MESSAGE_TYPE = 0x13;
    /** REFUSED code: the session has max_watches watches in use. */
    static final int TOO_MANY_WATCHES = 0x0b;

    private enum SentKind { OPEN, HELLO, ACQUIRE, RELEASE, PING, PROCLAIM, OBSERVE, UNOBSERVE, LOOKUP }

    private record Sent(SentKind kind, int claim, long at) {}

    private enum ClaimState { ASKING_WAIT, ASKING_TRY, WAITING, HELD, RELEASING }

    private enum WatchState { ASKING, WATCHING, UNOBSERVING }

    private static final class WatchEntry {
        WatchState state = WatchState.ASKING;
        /** The highest token pushed to the watch: a push below it breaks the token order. */
        long lastToken;
    }

    private static final class ClaimEntry {
        ClaimState state;
        /** Its owner let go while the ACQUIRE was unanswered. */
        boolean releaseWanted;

        ClaimEntry(ClaimState state) {
            this.state = state;
        }
    }

    /** What a frame from the server meant. */
    enum Kind {
        /** The reply to OPEN ({@code maxClaims}). */
        OPENED,
        /** Nothing for any claim's owner (PONG, a GRANTED that crossed a RELEASE, ...). */
        NOTHING,
        /** The claim holds the lock; {@code release}: write RELEASE now. */
        HELD,
        /** The claim is queued; {@code release}: write RELEASE now. */
        QUEUED,
        /** A try found the lock held; the id is free. */
        BUSY,
        /** The ACQUIRE was refused; the id is free. */
        REFUSED,
        /** RELEASED: the lock is handed on; the id is free. */
        RELEASED,
        /** An administrator ended the claim; the id is free. */
        REVOKED,
        /** ERROR: the session is over, with every claim. */
        ENDED,
        /** FEATURES answered HELLO ({@code code}: the features granted, {@code maxClaims}: max_watches). */
        FEATURES,
        /**
         * OPENED, then ERROR 0x13 in answer to HELLO: the server lacks the
         * extension and closes; the session is over and nothing else is
         * reported (no claim or watch existed yet).
         */
        UNSUPPORTED,
        /** PROCLAIMED: the server has the claim's new value. */
        PROCLAIMED,
        /** A PROCLAIM was refused ({@code code}); the claim stays as it was. */
        PROCLAIM_REFUSED,
        /** OBSERVING: the watch is in use; its INITIAL state follows. */
        OBSERVING,
        /** An OBSERVE ({@code code}) or UNOBSERVE was refused; the watch id is free. */
        WATCH_REFUSED,
        /** A STATE for a watch in use ({@code state}). */
        STATE,
        /** UNOBSERVED: the watch id is free. */
        UNOBSERVED,
        /** LOCK_STATE answered a LOOKUP ({@code state}). */
        LOCK_STATE,
        /** A LOOKUP was refused ({@code code}). */
        LOOKUP_REFUSED,
    }

    /**
     * One interpreted frame. {@code claim} is the watch id for the watch
     * kinds; {@code state} is set for STATE and LOCK_STATE.
     */
    record Event(Kind kind, int claim, long token, boolean release, int code, String reason, long maxClaims,
            Frames.WireState state) {
        Event(Kind kind, int claim, long token, boolean release, int code, String reason, long maxClaims) {
            this(kind, claim, token, release, code, reason, maxClaims, null);
        }

        static Event of(Kind kind, int claim) {
            return new Event(kind, claim, 0, false, 0, "", 0);
        }
    }

    /** The frame cannot be the next one a version 2 server sends. */
    static final class ProtocolViolation extends Exception {
        private static final long serialVersionUID = 1L;

        ProtocolViolation(String message) {
            super(message);
        }
    }

    private final Schedule schedule;
    private final ArrayDeque<Sent> inFlight = new ArrayDeque<>();
    private final Map<Integer, ClaimEntry> claims = new HashMap<>();
    private final Map<Integer, WatchEntry> watches = new HashMap<>();
    private long confirmedSend;
    private long repliedAt;
    private boolean opened;

    /** The state right after the OPEN went out at {@code openSent}. */
    SessionCore(long leaseNanos, long openSent) {
        schedule = new Schedule(leaseNanos);
        inFlight.add(new Sent(SentKind.OPEN, 0, openSent));
        confirmedSend = openSent;
        repliedAt = openSent;
    }

    boolean opened() {
        return opened;
    }

    /** The instant at which the session is given up without a reply. */
    long deadline() {
        return schedule.deadline(confirmedSend);
    }

    /** When the next PING is due, or {@code Long.MAX_VALUE} while a frame is in flight. */
    long nextPing() {
        return inFlight.isEmpty() ? schedule.nextSend(confirmedSend, repliedAt) : Long.MAX_VALUE;
    }

    /** Claim ids asked for or in use. */
    int claims() {
        return claims.size();
    }

    boolean knows(int claim) {
        return claims.containsKey(claim);
    }

    /** Watch ids asked for or in use (unobserving included). */
    int watches() {
        return watches.size();
    }

    boolean knowsWatch(int watch) {
        return watches.containsKey(watch);
    }

    /** Whether {@code claim} is waiting or held, so that a PROCLAIM may name it. */
    boolean inUse(int claim) {
        ClaimEntry entry = claims.get(claim);
        return entry != null && (entry.state == ClaimState.WAITING || entry.state == ClaimState.HELD);
    }

    /** Records a HELLO written at {@code at}, right behind the OPEN. */
    void helloSent(long at) {
        inFlight.add(new Sent(SentKind.HELLO, 0, at));
    }

    /** Records a PROCLAIM of {@code claim} written at {@code at}. */
    void proclaimSent(int claim, long at) {
        inFlight.add(new Sent(SentKind.PROCLAIM, claim, at));
    }

    /** Records an OBSERVE of {@code watch} written at {@code at}. */
    void observeSent(int watch, long at) {
        watches.put(watch, new WatchEntry());
        inFlight.add(new Sent(SentKind.OBSERVE, watch, at));
    }

    /** Whether to write an UNOBSERVE of {@code watch} now: only for a watch in use. */
    boolean unobserve(int watch) {
        WatchEntry entry = watches.get(watch);
        return entry != null && entry.state == WatchState.WATCHING;
    }

    /** Records an UNOBSERVE of {@code watch} written at {@code at}. */
    void unobserveSent(int watch, long at) {
        WatchEntry entry = watches.get(watch);
        if (entry != null) {
            entry.state = WatchState.UNOBSERVING;
        }
        inFlight.add(new Sent(SentKind.UNOBSERVE, watch, at));
    }

    /** Records a LOOKUP written at {@code at}. */
    void lookupSent(long at) {
        inFlight.add(new Sent(SentKind.LOOKUP, 0, at));
    }

    /** Records an ACQUIRE of {@code claim} written at {@code at}. */
    void acquireSent(int claim, boolean tryOnly, long at) {
        claims.put(claim, new ClaimEntry(tryOnly ? ClaimState.ASKING_TRY : ClaimState.ASKING_WAIT));
        inFlight.add(new Sent(SentKind.ACQUIRE, claim, at));
    }

    /**
     * The owner of {@code claim} let go: whether to write a RELEASE now
     * (false: the ACQUIRE is unanswered and its reply will say, or the id is
     * already free or being released).
     */
    boolean release(int claim) {
        ClaimEntry entry = claims.get(claim);
        if (entry == null) {
            return false;
        }
        switch (entry.state) {
            case ASKING_WAIT, ASKING_TRY -> {
                entry.releaseWanted = true;
                return false;
            }
            case WAITING, HELD -> {
                return true;
            }
            default -> {
                return false;
            }
        }
    }

    /** Records a RELEASE of {@code claim} written at {@code at}. */
    void releaseSent(int claim, long at) {
        ClaimEntry entry = claims.get(claim);
        if (entry == null) {
            entry = new ClaimEntry(ClaimState.RELEASING);
            claims.put(claim, entry);
        }
        entry.state = ClaimState.RELEASING;
        inFlight.add(new Sent(SentKind.RELEASE, claim, at));
    }

    /** Records a PING written at {@code at}. */
    void pingSent(long at) {
        inFlight.add(new Sent(SentKind.PING, 0, at));
    }

    /** Interprets one frame that arrived at {@code now}. */
    Event onFrame(Frame frame, long now) throws ProtocolViolation {
        switch (frame.type()) {
            case Frames.ERROR: {
                Sent oldest = inFlight.peekFirst();
                if (opened && oldest != null && oldest.kind() == SentKind.HELLO
                        && frame.code() == UNKNOWN_MESSAGE_TYPE) {
                    return new Event(Kind.UNSUPPORTED, 0, 0, false, frame.code(), frame.reason(), 0);
                }
                return new Event(Kind.ENDED, 0, 0, false, frame.code(), frame.reason(), 0);
            }
            case Frames.STATE: {
                WatchEntry entry = watches.get(frame.claim());
                if (entry == null || entry.state == WatchState.ASKING) {
                    throw unexpected(frame);
                }
                if (entry.state == WatchState.UNOBSERVING) {
                    // Pushed before the server read the UNOBSERVE: nobody is told.
                    return Event.of(Kind.NOTHING, frame.claim());
                }
                Frames.WireState state = frame.state();
                if (Long.compareUnsigned(state.token(), entry.lastToken) < 0) {
                    throw new ProtocolViolation(String.format(
                            "a STATE of watch %d names token %s after token %s (token order broken)",
                            frame.claim() & 0xffffffffL, Long.toUnsignedString(state.token()),
                            Long.toUnsignedString(entry.lastToken)));
                }
                entry.lastToken = state.token();
                return new Event(Kind.STATE, frame.claim(), state.token(), false, 0, "", 0, state);
            }
            case Frames.GRANTED: {
                ClaimEntry entry = claims.get(frame.claim());
                if (entry != null && entry.state == ClaimState.WAITING) {
                    entry.state = ClaimState.HELD;
                    return new Event(Kind.HELD, frame.claim(), frame.token(), false, 0, "", 0);
                }
                if (entry != null && entry.state == ClaimState.RELEASING) {
                    // Granted while its RELEASE is on the way: RELEASED follows.
                    return Event.of(Kind.NOTHING, frame.claim());
                }
                throw unexpected(frame);
            }
            case Frames.REVOKED: {
                ClaimEntry entry = claims.get(frame.claim());
                if (entry != null && (entry.state == ClaimState.WAITING || entry.state == ClaimState.HELD
                        || entry.state == ClaimState.RELEASING)) {
                    claims.remove(frame.claim());
                    return new Event(Kind.REVOKED, frame.claim(), 0, false, frame.code(), frame.reason(), 0);
                }
                throw unexpected(frame);
            }
            default:
                return onReply(frame, now);
        }
    }

    /** A reply: it answers the oldest frame in flight. */
    private Event onReply(Frame frame, long now) throws ProtocolViolation {
        Sent sent = inFlight.peekFirst();
        if (sent == null) {
            throw unexpected(frame);
        }
        ClaimEntry entry = claims.get(frame.claim());
        boolean sameClaim = sent.claim() == frame.claim();
        Event event;
        if (sent.kind() == SentKind.OPEN && frame.type() == Frames.OPENED) {
            opened = true;
            event = new Event(Kind.OPENED, 0, 0, false, 0, "", frame.maxClaims());
        } else if (sent.kind() == SentKind.PING && frame.type() == Frames.PONG) {
            event = Event.of(Kind.NOTHING, 0);
        } else if (sent.kind() == SentKind.HELLO && frame.type() == Frames.FEATURES) {
            event = new Event(Kind.FEATURES, 0, 0, false, frame.features(), "", frame.maxWatches());
        } else if (sent.kind() == SentKind.PROCLAIM && sameClaim && frame.type() == Frames.PROCLAIMED) {
            event = Event.of(Kind.PROCLAIMED, frame.claim());
        } else if (sent.kind() == SentKind.PROCLAIM && sameClaim && frame.type() == Frames.REFUSED) {
            event = new Event(Kind.PROCLAIM_REFUSED, frame.claim(), 0, false, frame.code(), frame.reason(), 0);
        } else if (sent.kind() == SentKind.OBSERVE && sameClaim && watchIn(frame.claim(), WatchState.ASKING)
                && (frame.type() == Frames.OBSERVING || frame.type() == Frames.REFUSED)) {
            if (frame.type() == Frames.OBSERVING) {
                watches.get(frame.claim()).state = WatchState.WATCHING;
                event = Event.of(Kind.OBSERVING, frame.claim());
            } else {
                watches.remove(frame.claim());
                event = new Event(Kind.WATCH_REFUSED, frame.claim(), 0, false, frame.code(), frame.reason(), 0);
            }
        } else if (sent.kind() == SentKind.UNOBSERVE && sameClaim && watchIn(frame.claim(), WatchState.UNOBSERVING)
                && (frame.type() == Frames.UNOBSERVED || frame.type() == Frames.REFUSED)) {
            watches.remove(frame.claim());
            event = frame.type() == Frames.UNOBSERVED
                    ? Event.of(Kind.UNOBSERVED, frame.claim())
                    : new Event(Kind.WATCH_REFUSED, frame.claim(), 0, false, frame.code(), frame.reason(), 0);
        } else if (sent.kind() == SentKind.LOOKUP && frame.type() == Frames.LOCK_STATE) {
            event = new Event(Kind.LOCK_STATE, 0, frame.state().token(), false, 0, "", 0, frame.state());
        } else if (sent.kind() == SentKind.LOOKUP && frame.type() == Frames.REFUSED && frame.claim() == 0) {
            event = new Event(Kind.LOOKUP_REFUSED, 0, 0, false, frame.code(), frame.reason(), 0);
        } else if (sent.kind() == SentKind.ACQUIRE && sameClaim && entry != null
                && (entry.state == ClaimState.ASKING_WAIT || entry.state == ClaimState.ASKING_TRY)) {
            boolean release = entry.releaseWanted;
            switch (frame.type()) {
                case Frames.ACQUIRED -> {
                    entry.state = ClaimState.HELD;
                    event = new Event(Kind.HELD, frame.claim(), frame.token(), release, 0, "", 0);
                }
                case Frames.WAITING -> {
                    if (entry.state != ClaimState.ASKING_WAIT) {
                        throw unexpected(frame);
                    }
                    entry.state = ClaimState.WAITING;
                    event = new Event(Kind.QUEUED, frame.claim(), 0, release, 0, "", 0);
                }
                case Frames.BUSY -> {
                    if (entry.state != ClaimState.ASKING_TRY) {
                        throw unexpected(frame);
                    }
                    claims.remove(frame.claim());
                    event = Event.of(Kind.BUSY, frame.claim());
                }
                case Frames.REFUSED -> {
                    claims.remove(frame.claim());
                    event = new Event(Kind.REFUSED, frame.claim(), 0, false, frame.code(), frame.reason(), 0);
                }
                default -> throw unexpected(frame);
            }
        } else if (sent.kind() == SentKind.RELEASE && sameClaim && frame.type() == Frames.RELEASED
                && entry != null && entry.state == ClaimState.RELEASING) {
            claims.remove(frame.claim());
            event = Event.of(Kind.RELEASED, frame.claim());
        } else if (sent.kind() == SentKind.RELEASE && sameClaim && frame.type() == Frames.REFUSED
                && frame.code() == UNKNOWN_CLAIM && entry == null) {
            // The RELEASE crossed a REVOKED: the claim was already gone.
            event = Event.of(Kind.NOTHING, frame.claim());
        } else {
            throw unexpected(frame);
        }
        inFlight.pollFirst();
        schedule.observeRtt(Math.max(0, now - sent.at()));
        confirmedSend = Math.max(sent.at(), confirmedSend);
        repliedAt = now;
        return event;
    }

    private boolean watchIn(int watch, WatchState state) {
        WatchEntry entry = watches.get(watch);
        return entry != null && entry.state == state;
    }

    /**
     * The live watch ids, ascending: answered OBSERVING, UNOBSERVED not yet
     * read. The ones whose end a session's end reports.
     */
    List<Integer> liveWatches() {
        return watches.entrySet().stream().filter(entry -> entry.getValue().state != WatchState.ASKING)
                .map(Map.Entry::getKey).sorted().toList();
    }

    private static ProtocolViolation unexpected(Frame frame) {
        return new ProtocolViolation("unexpected " + frame);
    }
}
