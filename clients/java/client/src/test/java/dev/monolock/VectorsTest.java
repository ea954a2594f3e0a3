package dev.monolock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.monolock.Frames.Frame;
import dev.monolock.testkit.Json;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayDeque;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * Replays the shared protocol vectors (clients/conformance/vectors, format
 * in its README.md) through the client's sans-I/O cores: {@link V1Core}
 * for version 1, {@link SessionCore} for version 2, fed by the client's
 * own encoders and {@link Frames.Decoder}. What the cores leave to their
 * drivers (writing the heartbeat when due, giving up at the deadline,
 * naming the loss, the RELEASE a late reply calls for, the half-close of a
 * version 1 release) is done here as {@link V1Claim} and {@link V2Session}
 * do it, with the same functions ({@link LossReason#ofErrorCode}) and the
 * same comparisons.
 *
 * <p>The directory is the repository's clients/conformance/vectors, or
 * {@code MONOLOCK_VECTORS} (a system property, else the environment
 * variable). A missing or empty directory fails: nothing is skipped.
 */
class VectorsTest {
    /** Vector instant 0 on the cores' clock: not 0, so no core can lean on it. */
    static final long ORIGIN = 123_456_789_000L;
    static final long MS = 1_000_000L;
    static final HexFormat HEX = HexFormat.of();

    /** The vectors' directory, found as the class doc says. */
    static Path directory() {
        String named = System.getProperty("MONOLOCK_VECTORS");
        if (named == null || named.isEmpty()) {
            named = System.getenv("MONOLOCK_VECTORS");
        }
        if (named != null && !named.isEmpty()) {
            return Path.of(named);
        }
        // Surefire runs in the module's directory; the repository is the
        // ancestor that holds clients/java/pom.xml.
        for (Path dir = Path.of("").toAbsolutePath(); dir != null; dir = dir.getParent()) {
            if (Files.isRegularFile(dir.resolve("clients/java/pom.xml"))) {
                return dir.resolve("clients/conformance/vectors");
            }
        }
        return fail("no repository (clients/java/pom.xml) above " + Path.of("").toAbsolutePath()
                + ": set MONOLOCK_VECTORS to the vectors' directory");
    }

    static List<Path> vectors() throws IOException {
        Path dir = directory();
        assertTrue(Files.isDirectory(dir), "the protocol vectors' directory " + dir
                + " is missing (set MONOLOCK_VECTORS to another)");
        List<Path> files;
        try (Stream<Path> listing = Files.list(dir)) {
            files = listing.filter(file -> file.getFileName().toString().endsWith(".json")).sorted().toList();
        }
        assertFalse(files.isEmpty(), "no *.json vector in " + dir);
        return files;
    }

    @Test
    void bothVersionsHaveVectors() throws IOException {
        List<String> names = vectors().stream().map(file -> file.getFileName().toString()).toList();
        assertTrue(names.stream().anyMatch(name -> name.startsWith("v1-")), "no version 1 vector: " + names);
        assertTrue(names.stream().anyMatch(name -> name.startsWith("v2-")), "no version 2 vector: " + names);
        assertTrue(names.stream().anyMatch(name -> name.startsWith("v2x-")),
                "no vector of the extension (values and observers): " + names);
    }

    @TestFactory
    Stream<DynamicTest> everyVectorReplays() throws IOException {
        return vectors().stream().map(file -> DynamicTest.dynamicTest(file.getFileName().toString(),
                () -> replay(file)));
    }

    @SuppressWarnings("unchecked")
    static void replay(Path file) throws IOException {
        Map<String, Object> vector = (Map<String, Object>) Json.parse(Files.readString(file));
        String name = (String) vector.get("name");
        assertEquals(file.getFileName().toString(), name + ".json", "the vector's name is its file's");
        long protocol = (Long) vector.get("protocol");
        long leaseMs = (Long) vector.get("lease_ms");
        Replay replay = switch ((int) protocol) {
            case 1 -> new V1Replay(leaseMs);
            case 2 -> new V2Replay(leaseMs);
            default -> fail(name + ": protocol " + protocol);
        };
        List<Object> steps = (List<Object>) vector.get("steps");
        for (int i = 0; i < steps.size(); i++) {
            Map<String, Object> step = (Map<String, Object>) steps.get(i);
            String where = String.format("%s, step %d %s", name, i, Json.write(step));
            replay.step(step, where);
        }
        replay.noneLeft(name + ", at the end");
    }

    /** One replay: the pending outputs of the latest input, and the steps' dispatch. */
    abstract static class Replay {
        final long leaseMs;
        long now = ORIGIN;
        /** Writes of the latest input, in order: a frame's hex, or "half_close". */
        final ArrayDeque<String> writes = new ArrayDeque<>();
        /** Events of the latest input, in order, each as the vector spells it. */
        final ArrayDeque<Map<String, Object>> events = new ArrayDeque<>();

        Replay(long leaseMs) {
            this.leaseMs = leaseMs;
        }

        @SuppressWarnings("unchecked")
        void step(Map<String, Object> step, String where) {
            String kind = (String) step.get("step");
            switch (kind) {
                case "call", "recv", "eof", "advance" -> {
                    noneLeft(where);
                    switch (kind) {
                        case "call" -> call(step, where);
                        case "recv" -> recv(HEX.parseHex((String) step.get("hex")), where);
                        case "eof" -> eof(where);
                        default -> {
                            long to = ORIGIN + (Long) step.get("to") * MS;
                            assertTrue(to - now >= 0, where + ": the clock never goes back");
                            now = to;
                            advance(where);
                        }
                    }
                }
                case "send" -> assertEquals(step.get("hex"), next(writes, where), where);
                case "half_close" -> assertEquals("half_close", next(writes, where), where);
                case "event" -> {
                    Map<String, Object> expected = new LinkedHashMap<>(step);
                    expected.remove("step");
                    assertEquals(expected, next(events, where), where);
                }
                case "belief" -> assertEquals(step.get("held"), belief(step, where), where);
                case "deadline" -> assertEquals(step.get("at"), instant(deadline(where)), where);
                case "next_heartbeat" -> {
                    long next = nextHeartbeat(where);
                    assertEquals(step.get("at"), next == Long.MAX_VALUE ? null : instant(next), where);
                }
                default -> fail(where + ": unknown step kind " + kind);
            }
        }

        /**
         * An instant of the cores' clock as the vectors write it: whole
         * milliseconds from the origin, or the exact nanoseconds as text
         * when it is not whole, so that the comparison fails and says so.
         */
        static Object instant(long nanos) {
            long fromOrigin = nanos - ORIGIN;
            if (fromOrigin % MS != 0) {
                return String.format("%d ns after the origin (not a whole millisecond)", fromOrigin);
            }
            return fromOrigin / MS;
        }

        static <T> T next(ArrayDeque<T> pending, String where) {
            T first = pending.pollFirst();
            if (first == null) {
                fail(where + ": the client produced no such output");
            }
            return first;
        }

        void noneLeft(String where) {
            assertTrue(writes.isEmpty(), where + ": writes the vector does not expect: " + writes);
            assertTrue(events.isEmpty(), where + ": events the vector does not expect: " + events);
        }

        void write(byte[] frame) {
            writes.add(HEX.formatHex(frame));
        }

        static Map<String, Object> event(String kind, Object... fields) {
            Map<String, Object> event = new LinkedHashMap<>();
            event.put("event", kind);
            for (int i = 0; i < fields.length; i += 2) {
                event.put((String) fields[i], fields[i + 1]);
            }
            return event;
        }

        abstract void call(Map<String, Object> step, String where);

        abstract void recv(byte[] bytes, String where);

        abstract void eof(String where);

        /** The timers look at {@code now}: the deadline first, then a heartbeat. */
        abstract void advance(String where);

        abstract boolean belief(Map<String, Object> step, String where);

        abstract long deadline(String where);

        abstract long nextHeartbeat(String where);
    }

    /** Version 1: one connection, one claim; {@link V1Claim}'s duties. */
    static final class V1Replay extends Replay {
        private final Frames.Decoder decoder = new Frames.Decoder();
        private V1Core core;
        private boolean granted;
        private boolean leaving;
        private boolean ended;

        V1Replay(long leaseMs) {
            super(leaseMs);
        }

        private V1Core core(String where) {
            if (core == null) {
                fail(where + ": no ACQUIRE was written yet");
            }
            return core;
        }

        @Override
        void call(Map<String, Object> step, String where) {
            switch ((String) step.get("call")) {
                case "acquire" -> {
                    assertEquals("wait", step.get("mode"), where + ": version 1 vectors wait");
                    byte[] lock = ((String) step.get("lock")).getBytes(StandardCharsets.UTF_8);
                    write(Frames.acquireV1(lock, leaseMs));
                    core = new V1Core(leaseMs * MS, now);
                }
                case "release" -> {
                    // V1Claim.leave: no more ticks, the write side shut down.
                    core(where);
                    leaving = true;
                    writes.add("half_close");
                }
                default -> fail(where + ": not a version 1 call");
            }
        }

        @Override
        void recv(byte[] bytes, String where) {
            assertFalse(ended, where + ": bytes after the connection was given up");
            decoder.feed(bytes, 0, bytes.length);
            while (!ended) {
                Frame frame;
                try {
                    frame = decoder.next();
                } catch (Frames.MalformedFrame err) {
                    end(LossReason.PROTOCOL);
                    return;
                }
                if (frame == null) {
                    return;
                }
                handle(frame, where);
            }
        }

        /** V1Claim.handle. */
        private void handle(Frame frame, String where) {
            V1Core.Event event;
            try {
                event = core(where).onFrame(frame, now);
            } catch (SessionCore.ProtocolViolation err) {
                if (!leaving) {
                    end(LossReason.PROTOCOL);
                }
                return;
            }
            switch (event.kind()) {
                case HELD -> {
                    granted = true;
                    events.add(event("granted", "token", event.token()));
                }
                case QUEUED -> events.add(event("waiting"));
                case ENDED -> {
                    if (!leaving) {
                        end(LossReason.ofErrorCode(event.code()));
                    }
                }
                default -> {
                    // A heartbeat's reply: nothing for the owner.
                }
            }
        }

        @Override
        void eof(String where) {
            assertFalse(ended, where + ": EOF after the connection was given up");
            if (leaving) {
                ended = true;
                events.add(event("released"));
            } else {
                end(LossReason.CONNECTION);
            }
        }

        /** V1Claim.onTick (no tick once leaving) and checkDeadline. */
        @Override
        void advance(String where) {
            if (ended || leaving || core == null) {
                return;
            }
            if (now - core.deadline() >= 0) {
                end(LossReason.EXPIRED);
            } else if (now - core.nextHeartbeat() >= 0) {
                write(Frames.heartbeat());
                core.heartbeatSent(now);
            }
        }

        /** V1Claim.end: a loss unless its owner let go. */
        private void end(LossReason reason) {
            ended = true;
            if (!leaving) {
                events.add(event("lost", "reason", reason.wireName()));
            }
        }

        @Override
        boolean belief(Map<String, Object> step, String where) {
            assertFalse(step.containsKey("claim"), where + ": version 1 steps name no claim");
            return granted && !ended && !leaving && now - core(where).deadline() < 0;
        }

        @Override
        long deadline(String where) {
            assertFalse(ended, where + ": asked after the connection was given up");
            return core(where).deadline();
        }

        @Override
        long nextHeartbeat(String where) {
            assertFalse(ended, where + ": asked after the connection was given up");
            return core(where).nextHeartbeat();
        }
    }

    /** Version 2: one session, claims by id; {@link V2Session}'s duties. */
    static final class V2Replay extends Replay {
        /** What the owner of a live claim has been told and has done. */
        private static final class Owner {
            boolean granted;
            boolean releasing;
        }

        private final Frames.Decoder decoder = new Frames.Decoder();
        /** The live claims, by id: lost events of one cause go in ascending id. */
        private final TreeMap<Integer, Owner> live = new TreeMap<>();
        /** Watches whose observation was closed before OBSERVING: V2Session.Watch.closeWanted. */
        private final Set<Integer> closeWanted = new HashSet<>();
        private SessionCore core;
        private boolean ended;

        V2Replay(long leaseMs) {
            super(leaseMs);
        }

        private SessionCore core(String where) {
            if (core == null) {
                fail(where + ": no OPEN was written yet");
            }
            return core;
        }

        private static int claim(Map<String, Object> step, String where) {
            return id(step, "claim", where);
        }

        private static int id(Map<String, Object> step, String field, String where) {
            Object id = step.get(field);
            if (!(id instanceof Long number)) {
                return fail(where + ": a version 2 step names its " + field);
            }
            return (int) (long) number;
        }

        private static byte[] utf8(Map<String, Object> step, String field, String where) {
            Object text = step.get(field);
            if (!(text instanceof String string)) {
                return fail(where + ": the step's " + field + " is a string");
            }
            return string.getBytes(StandardCharsets.UTF_8);
        }

        @Override
        void call(Map<String, Object> step, String where) {
            switch ((String) step.get("call")) {
                case "open" -> {
                    assertTrue(core == null, where + ": one OPEN per session");
                    write(Frames.open(leaseMs));
                    core = new SessionCore(leaseMs * MS, now);
                    Object features = step.get("features");
                    if (features != null) {
                        // MonolockClient.openSession: HELLO in the same write as the OPEN.
                        write(Frames.hello((int) (long) (Long) features));
                        core.helloSent(now);
                    }
                }
                case "proclaim" -> {
                    // V2Session.proclaim.
                    int id = claim(step, where);
                    assertFalse(ended, where + ": a PROCLAIM on a session that ended");
                    assertTrue(core(where).inUse(id), where + ": a PROCLAIM names a claim in use");
                    write(Frames.proclaim(id, utf8(step, "value", where)));
                    core.proclaimSent(id, now);
                }
                case "observe" -> {
                    // V2Session.observe.
                    int watch = id(step, "watch", where);
                    assertFalse(ended, where + ": an OBSERVE on a session that ended");
                    assertFalse(core(where).knowsWatch(watch), where + ": the watch id is in use");
                    write(Frames.observe(watch, utf8(step, "lock", where)));
                    core.observeSent(watch, now);
                }
                case "unobserve" -> {
                    // V2Session.unobserve.
                    int watch = id(step, "watch", where);
                    if (ended || !core(where).knowsWatch(watch)) {
                        return;
                    }
                    if (core.unobserve(watch)) {
                        write(Frames.unobserve(watch));
                        core.unobserveSent(watch, now);
                    } else {
                        closeWanted.add(watch);
                    }
                }
                case "lookup" -> {
                    assertFalse(ended, where + ": a LOOKUP on a session that ended");
                    write(Frames.lookup(utf8(step, "lock", where)));
                    core(where).lookupSent(now);
                }
                case "acquire" -> {
                    int id = claim(step, where);
                    boolean tryOnly = switch ((String) step.get("mode")) {
                        case "wait" -> false;
                        case "try" -> true;
                        default -> fail(where + ": mode");
                    };
                    assertFalse(ended, where + ": an ACQUIRE on a session that ended");
                    assertFalse(core(where).knows(id), where + ": the claim id is in use");
                    byte[] lock = ((String) step.get("lock")).getBytes(StandardCharsets.UTF_8);
                    if (step.containsKey("value")) {
                        write(Frames.acquireValue(id, tryOnly, lock, utf8(step, "value", where)));
                    } else {
                        write(Frames.acquire(id, tryOnly, lock));
                    }
                    core.acquireSent(id, tryOnly, now);
                    live.put(id, new Owner());
                }
                case "release" -> {
                    // V2Claim.leave.
                    int id = claim(step, where);
                    Owner owner = live.get(id);
                    if (ended || owner == null) {
                        return;
                    }
                    owner.releasing = true;
                    if (core(where).release(id)) {
                        write(Frames.release(id));
                        core.releaseSent(id, now);
                    }
                }
                default -> fail(where + ": not a version 2 call");
            }
        }

        @Override
        void recv(byte[] bytes, String where) {
            assertFalse(ended, where + ": bytes after the session ended");
            decoder.feed(bytes, 0, bytes.length);
            while (!ended) {
                try {
                    Frame frame = decoder.next();
                    if (frame == null) {
                        return;
                    }
                    handle(core(where).onFrame(frame, now));
                } catch (Frames.MalformedFrame | SessionCore.ProtocolViolation err) {
                    end(LossReason.PROTOCOL);
                }
            }
        }

        /** V2Session.handle. */
        private void handle(SessionCore.Event event) {
            int id = event.claim();
            Owner owner = live.get(id);
            switch (event.kind()) {
                case ENDED -> end(LossReason.ofErrorCode(event.code()));
                case HELD -> {
                    if (owner != null) {
                        owner.granted = true;
                    }
                    events.add(event("granted", "claim", (long) id, "token", event.token()));
                    releaseIfLetGo(event);
                }
                case QUEUED -> {
                    events.add(event("waiting", "claim", (long) id));
                    releaseIfLetGo(event);
                }
                case BUSY -> {
                    live.remove(id);
                    events.add(event("busy", "claim", (long) id));
                }
                case REFUSED -> {
                    live.remove(id);
                    events.add(event("refused", "claim", (long) id, "code", (long) event.code()));
                }
                case RELEASED -> {
                    live.remove(id);
                    events.add(event("released", "claim", (long) id));
                }
                case REVOKED -> {
                    live.remove(id);
                    events.add(event("lost", "claim", (long) id, "reason", LossReason.FORCED.wireName()));
                }
                case FEATURES -> events.add(event("features", "features", (long) event.code(),
                        "max_watches", event.maxClaims()));
                case UNSUPPORTED -> {
                    // MonolockClient.openSession: the session is over, nothing else to tell.
                    ended = true;
                    live.clear();
                    events.add(event("unsupported"));
                }
                case PROCLAIMED -> events.add(event("proclaimed", "claim", (long) id));
                case PROCLAIM_REFUSED -> {
                    // V2Session: the owner of a claim already lost is told its loss, not the refusal.
                    if (live.containsKey(id)) {
                        events.add(event("refused", "claim", (long) id, "code", (long) event.code()));
                    }
                }
                case OBSERVING -> {
                    events.add(event("observing", "watch", (long) id));
                    if (closeWanted.remove(id)) {
                        write(Frames.unobserve(id));
                        core.unobserveSent(id, now);
                    }
                }
                case WATCH_REFUSED -> {
                    closeWanted.remove(id);
                    events.add(event("refused", "watch", (long) id, "code", (long) event.code()));
                }
                case STATE -> {
                    LockState state = LockState.of(event.state());
                    events.add(event("state", "watch", (long) id, "state_event", state.event().wireName(),
                            "initial", state.initial(), "coalesced", state.coalesced(), "token", state.token(),
                            "since_ms", state.since().map(Instant::toEpochMilli).orElse(0L),
                            "reason", state.reason().map(LockState.ReleaseReason::wireName).orElse(null),
                            "value", state.value()));
                }
                case UNOBSERVED -> events.add(event("unobserved", "watch", (long) id));
                case LOCK_STATE -> {
                    LockState state = LockState.of(event.state());
                    events.add(event("lock_state", "state_event", state.event().wireName(), "token", state.token(),
                            "since_ms", state.since().map(Instant::toEpochMilli).orElse(0L),
                            "value", state.value()));
                }
                case LOOKUP_REFUSED -> events.add(event("refused", "lookup", true, "code", (long) event.code()));
                default -> {
                    // OPENED, a PONG, a GRANTED that crossed a RELEASE, REFUSED 0x20 after a REVOKED,
                    // a STATE for a watch being unobserved.
                }
            }
        }

        /** The owner let go while its ACQUIRE was unanswered: the RELEASE goes now. */
        private void releaseIfLetGo(SessionCore.Event event) {
            if (event.release()) {
                write(Frames.release(event.claim()));
                core.releaseSent(event.claim(), now);
            }
        }

        @Override
        void eof(String where) {
            assertFalse(ended, where + ": EOF after the session ended");
            end(LossReason.CONNECTION);
        }

        /** V2Session.onTick and checkDeadline. */
        @Override
        void advance(String where) {
            if (ended || core == null) {
                return;
            }
            if (now - core.deadline() >= 0) {
                end(LossReason.EXPIRED);
            } else if (now - core.nextPing() >= 0) {
                write(Frames.ping());
                core.pingSent(now);
            }
        }

        /** V2Session.end: every live claim is lost, then every live watch, each in ascending id. */
        private void end(LossReason reason) {
            ended = true;
            for (int id : live.keySet()) {
                events.add(event("lost", "claim", (long) id, "reason", reason.wireName()));
            }
            live.clear();
            if (core != null) {
                for (int watch : core.liveWatches()) {
                    events.add(event("watch_lost", "watch", (long) watch, "reason", reason.wireName()));
                }
            }
        }

        @Override
        boolean belief(Map<String, Object> step, String where) {
            Owner owner = live.get(claim(step, where));
            return owner != null && owner.granted && !owner.releasing && !ended
                    && now - core(where).deadline() < 0;
        }

        @Override
        long deadline(String where) {
            assertFalse(ended, where + ": asked after the session ended");
            return core(where).deadline();
        }

        @Override
        long nextHeartbeat(String where) {
            assertFalse(ended, where + ": asked after the session ended");
            return core(where).nextPing();
        }
    }
}
