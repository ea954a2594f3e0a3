package dev.monolock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.monolock.Frames.Frame;
import dev.monolock.SessionCore.Event;
import dev.monolock.SessionCore.Kind;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The schedule and both exchanges, at exact instants (nanoseconds; t0 = 0). */
class CoreTest {
    static final long MS = 1_000_000L;
    static final long LEASE = 2000 * MS;

    static SessionCore opened(long at) throws Exception {
        SessionCore core = new SessionCore(LEASE, 0);
        Event event = core.onFrame(new Frame(Frames.OPENED, 8, 1, 0, ""), at);
        assertEquals(Kind.OPENED, event.kind());
        assertEquals(8, event.maxClaims());
        return core;
    }

    @Test
    void theScheduleFollowsTheProtocolArithmetic() {
        Schedule schedule = new Schedule(LEASE);
        assertEquals(1600 * MS, schedule.deadline(0));
        assertEquals(500 * MS, schedule.interval(), "base = lease / 4 before any sample");
        schedule.observeRtt(10 * MS);
        assertEquals(480 * MS, schedule.interval(), "base - 2 srtt");
        schedule.observeRtt(60 * MS);
        assertEquals(20 * MS, schedule.srtt(), "alpha 0.2: (10 * 4 + 60) / 5");
        assertEquals(1460 * MS, schedule.nextSend(1000 * MS, 1010 * MS));
        schedule.observeRtt(10_000 * MS);
        assertEquals(100 * MS, schedule.interval(), "clamped at the floor min(100 ms, base / 4)");
        assertEquals(3000 * MS, schedule.nextSend(1000 * MS, 3000 * MS), "2 srtt >= base: at once");
        assertEquals(25 * MS, new Schedule(400 * MS).interval() / 4, "a 400 ms lease: floor 25 ms");
    }

    @Test
    void everyReplyConfirmsItsSendInstantAndAPushConfirmsNothing() throws Exception {
        SessionCore core = opened(10 * MS);
        assertEquals(1600 * MS, core.deadline(), "S is the OPEN's send instant");
        core.acquireSent(1, false, 100 * MS);
        assertEquals(Long.MAX_VALUE, core.nextPing(), "a frame is in flight");
        Event queued = core.onFrame(new Frame(Frames.WAITING, 1, 0, 0, ""), 110 * MS);
        assertEquals(Kind.QUEUED, queued.kind());
        assertEquals(1700 * MS, core.deadline());
        assertEquals(580 * MS, core.nextPing(), "srtt 10 ms: 100 + 500 - 20");
        Event granted = core.onFrame(new Frame(Frames.GRANTED, 1, 42, 0, ""), 1500 * MS);
        assertEquals(Kind.HELD, granted.kind());
        assertEquals(42, granted.token());
        assertEquals(1700 * MS, core.deadline(), "a push moves no deadline");
        core.pingSent(580 * MS);
        assertEquals(Kind.NOTHING, core.onFrame(Frame.of(Frames.PONG), 1590 * MS).kind());
        assertEquals(580 * MS + 1600 * MS, core.deadline());
    }

    @Test
    void aReleaseMayCrossAGrantAndARevoke() throws Exception {
        SessionCore core = opened(MS);
        core.acquireSent(7, false, 2 * MS);
        core.onFrame(new Frame(Frames.WAITING, 7, 0, 0, ""), 3 * MS);
        assertTrue(core.release(7));
        core.releaseSent(7, 4 * MS);
        assertEquals(Kind.NOTHING, core.onFrame(new Frame(Frames.GRANTED, 7, 9, 0, ""), 5 * MS).kind());
        assertEquals(Kind.RELEASED, core.onFrame(new Frame(Frames.RELEASED, 7, 0, 0, ""), 6 * MS).kind());
        assertFalse(core.knows(7));

        core.acquireSent(8, false, 7 * MS);
        core.onFrame(new Frame(Frames.ACQUIRED, 8, 10, 0, ""), 8 * MS);
        core.releaseSent(8, 9 * MS);
        assertEquals(Kind.REVOKED, core.onFrame(new Frame(Frames.REVOKED, 8, 0, 8, "kick"), 10 * MS).kind());
        assertEquals(Kind.NOTHING,
                core.onFrame(new Frame(Frames.REFUSED, 8, 0, SessionCore.UNKNOWN_CLAIM, ""), 11 * MS).kind());
        assertEquals(0, core.claims());
    }

    @Test
    void aReleaseWhileAskedWaitsForTheReplyThenIsWritten() throws Exception {
        SessionCore core = opened(MS);
        core.acquireSent(3, false, 2 * MS);
        assertFalse(core.release(3), "the ACQUIRE is unanswered");
        Event held = core.onFrame(new Frame(Frames.ACQUIRED, 3, 77, 0, ""), 3 * MS);
        assertTrue(held.release(), "the reply says: release now");
        core.acquireSent(4, true, 4 * MS);
        assertEquals(Kind.BUSY, core.onFrame(new Frame(Frames.BUSY, 4, 0, 0, ""), 5 * MS).kind());
        assertFalse(core.knows(4), "a BUSY leaves the id free");
    }

    @Test
    void repliesThatAnswerNothingOrTheWrongClaimBreakTheProtocol() throws Exception {
        SessionCore idle = opened(MS);
        assertThrows(SessionCore.ProtocolViolation.class,
                () -> idle.onFrame(Frame.of(Frames.PONG), 2 * MS));
        SessionCore wrong = opened(MS);
        wrong.acquireSent(1, false, 2 * MS);
        assertThrows(SessionCore.ProtocolViolation.class,
                () -> wrong.onFrame(new Frame(Frames.ACQUIRED, 2, 5, 0, ""), 3 * MS));
        SessionCore tried = opened(MS);
        tried.acquireSent(1, true, 2 * MS);
        assertThrows(SessionCore.ProtocolViolation.class,
                () -> tried.onFrame(new Frame(Frames.WAITING, 1, 0, 0, ""), 3 * MS), "a try never waits");
        SessionCore pushed = opened(MS);
        assertThrows(SessionCore.ProtocolViolation.class,
                () -> pushed.onFrame(new Frame(Frames.GRANTED, 1, 5, 0, ""), 3 * MS), "a grant of no claim");
    }

    @Test
    void versionOneTellsThePushFromTheHeartbeatReply() throws Exception {
        V1Core core = new V1Core(LEASE, 0);
        assertEquals(V1Core.Kind.QUEUED, core.onFrame(Frame.of(Frames.V1_WAITING), 10 * MS).kind());
        assertEquals(1600 * MS, core.deadline());
        assertEquals(480 * MS, core.nextHeartbeat());
        core.heartbeatSent(480 * MS);
        assertEquals(Long.MAX_VALUE, core.nextHeartbeat(), "at most one in flight");
        V1Core.Event push = core.onFrame(new Frame(Frames.V1_ACQUIRED, 0, 99, 0, ""), 485 * MS);
        assertEquals(V1Core.Kind.HELD, push.kind());
        assertEquals(1600 * MS, core.deadline(), "the push confirms nothing");
        assertEquals(V1Core.Kind.NOTHING, core.onFrame(new Frame(Frames.V1_ACQUIRED, 0, 99, 0, ""), 490 * MS).kind());
        assertEquals(480 * MS + 1600 * MS, core.deadline(), "the heartbeat's own reply confirms it");
        assertThrows(SessionCore.ProtocolViolation.class,
                () -> core.onFrame(new Frame(Frames.V1_ACQUIRED, 0, 99, 0, ""), 500 * MS), "nothing in flight");
        core.heartbeatSent(600 * MS);
        assertThrows(SessionCore.ProtocolViolation.class,
                () -> core.onFrame(new Frame(Frames.V1_ACQUIRED, 0, 100, 0, ""), 610 * MS), "another token");
    }

    @Test
    void argumentsAreRefusedWithTheUnitNamed() {
        IllegalArgumentException low = assertThrows(IllegalArgumentException.class,
                () -> Arguments.leaseMillis(java.time.Duration.ofMillis(10)));
        assertTrue(low.getMessage().startsWith("lease 10 ms is below the minimum of 100 ms"), low.getMessage());
        IllegalArgumentException high = assertThrows(IllegalArgumentException.class,
                () -> Arguments.leaseMillis(java.time.Duration.ofSeconds(10000)));
        assertTrue(high.getMessage().startsWith("lease 10000 s is above the maximum of 1 hour"), high.getMessage());
        assertThrows(IllegalArgumentException.class, () -> Arguments.leaseMillis(java.time.Duration.ofNanos(100_500_000)));
        assertEquals(100, Arguments.leaseMillis(java.time.Duration.ofMillis(100)));
        assertThrows(IllegalArgumentException.class, () -> Arguments.lockName(""));
        assertThrows(IllegalArgumentException.class, () -> Arguments.lockName("é".repeat(128)));
        assertEquals(255, Arguments.lockName("a".repeat(255)).length);
        IllegalArgumentException scheme = assertThrows(IllegalArgumentException.class,
                () -> Arguments.addresses("http://127.0.0.1:7070"));
        assertEquals("address \"http://127.0.0.1:7070\": write host:port, without a scheme", scheme.getMessage());
        assertEquals("[::1]:7070", Arguments.addresses("a:1, [::1]:7070").get(1).toString());
    }

    static Frame state(int watch, int event, long token) {
        return new Frame(Frames.STATE, watch, 0, 0, "", new Frames.WireState(event, 0, token, 0, 0, ""));
    }

    @Test
    void watchesLiveApartFromClaimsAndAStateIsAcceptedOnlyForAWatchInUse() throws Exception {
        SessionCore core = new SessionCore(LEASE, 0);
        core.helloSent(0);
        core.onFrame(new Frame(Frames.OPENED, 8, 1, 0, ""), 1 * MS);
        Event features = core.onFrame(new Frame(Frames.FEATURES, 1, 16, 0, ""), 1 * MS);
        assertEquals(Kind.FEATURES, features.kind());
        assertEquals(16, features.maxClaims(), "max_watches");
        core.acquireSent(1, false, 2 * MS);
        core.observeSent(1, 2 * MS);
        assertTrue(core.knows(1));
        assertTrue(core.knowsWatch(1));
        assertEquals(List.of(), core.liveWatches(), "a watch asked for is not live before OBSERVING");
        assertThrows(SessionCore.ProtocolViolation.class, () -> askedToObserve().onFrame(state(1, 0, 0), 3 * MS),
                "a STATE before its OBSERVING");
        assertEquals(Kind.HELD, core.onFrame(new Frame(Frames.ACQUIRED, 1, 5, 0, ""), 3 * MS).kind());
        assertEquals(Kind.OBSERVING, core.onFrame(new Frame(Frames.OBSERVING, 1, 0, 0, ""), 3 * MS).kind());
        assertEquals(List.of(1), core.liveWatches());
        long deadline = core.deadline();
        Event initial = core.onFrame(state(1, 1, 5), 900 * MS);
        assertEquals(Kind.STATE, initial.kind());
        assertEquals(5, initial.state().token());
        assertEquals(deadline, core.deadline(), "a push confirms nothing");
        assertTrue(core.unobserve(1));
        core.unobserveSent(1, 901 * MS);
        assertEquals(Kind.NOTHING, core.onFrame(state(1, 4, 5), 902 * MS).kind(),
                "pushed before the UNOBSERVE was read");
        assertEquals(Kind.UNOBSERVED, core.onFrame(new Frame(Frames.UNOBSERVED, 1, 0, 0, ""), 903 * MS).kind());
        assertFalse(core.knowsWatch(1));
        assertTrue(core.knows(1), "the claim of the same number lives on");
        assertThrows(SessionCore.ProtocolViolation.class, () -> core.onFrame(state(1, 0, 5), 904 * MS),
                "a STATE for a watch no longer in use");
    }

    /** A session whose claim 1 and watch 1 are asked for and unanswered (a probe apart from the test's core). */
    private static SessionCore askedToObserve() throws Exception {
        SessionCore core = new SessionCore(LEASE, 0);
        core.helloSent(0);
        core.onFrame(new Frame(Frames.OPENED, 8, 1, 0, ""), 1 * MS);
        core.onFrame(new Frame(Frames.FEATURES, 1, 16, 0, ""), 1 * MS);
        core.acquireSent(1, false, 2 * MS);
        core.observeSent(1, 2 * MS);
        return core;
    }

    @Test
    void anErrorAnsweringHelloAfterOpenedIsUnsupportedAndBeforeItAnEnd() throws Exception {
        SessionCore older = new SessionCore(LEASE, 0);
        older.helloSent(0);
        older.onFrame(new Frame(Frames.OPENED, 8, 1, 0, ""), 1 * MS);
        assertEquals(Kind.UNSUPPORTED, older.onFrame(new Frame(Frames.ERROR, 0, 0, 0x13, "unknown"), 1 * MS).kind());
        SessionCore refused = new SessionCore(LEASE, 0);
        refused.helloSent(0);
        assertEquals(Kind.ENDED, refused.onFrame(new Frame(Frames.ERROR, 0, 0, 0x13, "unknown"), 1 * MS).kind(),
                "no OPENED yet: the OPEN itself was refused");
        SessionCore shutdown = new SessionCore(LEASE, 0);
        shutdown.helloSent(0);
        shutdown.onFrame(new Frame(Frames.OPENED, 8, 1, 0, ""), 1 * MS);
        assertEquals(Kind.ENDED, shutdown.onFrame(new Frame(Frames.ERROR, 0, 0, 0x01, ""), 1 * MS).kind());
    }
}
