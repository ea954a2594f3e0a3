package dev.monolock;

import static dev.monolock.TestServer.PATIENCE;
import static dev.monolock.TestServer.eventually;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Lock values, observations, holder lookups and the leader election
 * against the real server (docs/protocol.md, "Version 2 extension: values
 * and observers").
 */
class ValuesAndObserversTest {
    static final Duration LEASE = Duration.ofSeconds(5);
    static TestServer server;

    @BeforeAll
    static void startServer() throws Exception {
        server = TestServer.start();
    }

    @AfterAll
    static void stopServer() {
        server.close();
    }

    /** The next state, within {@link TestServer#PATIENCE}. */
    static LockState next(Observation observation) throws InterruptedException {
        return observation.next(PATIENCE).orElseGet(() -> fail("no state within " + PATIENCE));
    }

    @Test
    void aValueIsSeenThroughHolderFromAnotherClient() throws Exception {
        String name = "java/ext/holder";
        String longest = "v".repeat(1023) + "!";
        try (MonolockClient holder = MonolockClient.create(server.address);
                MonolockClient other = MonolockClient.create(server.address)) {
            LockState free = other.holder(name);
            assertFalse(free.held());
            assertEquals(LockState.Event.FREE, free.event());
            try (MonolockLock lock = holder.lock(name, LEASE, "10.0.0.7:9000")) {
                assertEquals("10.0.0.7:9000", lock.value());
                LockState held = other.holder(name);
                assertTrue(held.held());
                assertEquals(LockState.Event.HELD, held.event());
                assertEquals(lock.token(), held.token());
                assertEquals(server.holderToken(name), held.token());
                assertEquals("10.0.0.7:9000", held.value());
                assertFalse(held.initial());
                assertFalse(held.coalesced());
                assertTrue(held.since().isPresent(), "the server says since when");
            }
            assertFalse(other.holder(name).held(), "released: free again, the value gone with the claim");
            try (MonolockLock lock = holder.tryLock(name, LEASE, longest).orElseThrow()) {
                assertEquals(longest, lock.value());
                assertEquals(longest, other.holder(name).value(), "1,024 bytes is the bound, and allowed");
            }
        }
    }

    @Test
    void aNewValueIsSeenByAnObserverOnceSetValueReturns() throws Exception {
        String name = "java/ext/set-value";
        try (MonolockClient holder = MonolockClient.create(server.address);
                MonolockClient follower = MonolockClient.create(server.address);
                MonolockLock lock = holder.lock(name, LEASE, "10.0.0.7:9000");
                Observation observation = follower.observe(name)) {
            LockState initial = next(observation);
            assertTrue(initial.initial());
            assertEquals(LockState.Event.HELD, initial.event());
            assertEquals(lock.token(), initial.token());
            assertEquals("10.0.0.7:9000", initial.value());

            lock.setValue("10.0.0.7:9001");
            assertEquals("10.0.0.7:9001", lock.value());
            assertEquals("10.0.0.7:9001", follower.holder(name).value(), "the server has it once setValue returns");
            LockState changed = next(observation);
            assertEquals(LockState.Event.VALUE, changed.event());
            assertEquals(lock.token(), changed.token());
            assertEquals("10.0.0.7:9001", changed.value());
            assertTrue(changed.held());
            assertFalse(changed.initial());
        }
    }

    @Test
    void aListenerIsHandedEveryStateInOrderUntilClosed() throws Exception {
        String name = "java/ext/listener";
        BlockingQueue<LockState> states = new LinkedBlockingQueue<>();
        try (MonolockClient client = MonolockClient.create(server.address)) {
            Observation observation = client.observe(name, states::add);
            MonolockLock lock = client.lock(name, LEASE, "listener:1");
            assertTrue(lock.release());
            List<LockState.Event> events = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                LockState state = states.poll(PATIENCE.toMillis(), TimeUnit.MILLISECONDS);
                assertNotNull(state, "no state within " + PATIENCE + " after " + events);
                events.add(state.event());
            }
            assertEquals(List.of(LockState.Event.FREE, LockState.Event.GRANTED, LockState.Event.RELEASED), events);
            observation.close();
            assertFalse(observation.ended().isDone(), "closing is not an end by the session");
        }
    }

    @Test
    void anObserverSeesEveryHandOnInTokenOrder() throws Exception {
        String name = "java/ext/hand-ons";
        int holders = 4;
        try (MonolockClient follower = MonolockClient.create(server.address);
                MonolockClient client = MonolockClient.create(server.address);
                Observation observation = follower.observe(name)) {
            LockState initial = next(observation);
            assertEquals(LockState.Event.FREE, initial.event());
            assertTrue(initial.initial());

            MonolockLock first = client.lock(name, LEASE, "holder-0");
            List<CompletableFuture<MonolockLock>> waiting = new ArrayList<>();
            for (int i = 1; i < holders; i++) {
                waiting.add(client.lockAsync(name, LEASE, null, "holder-" + i));
                int queued = i;
                eventually("holder " + i + " queued", () -> server.waiters(name) == queued);
            }
            List<MonolockLock> locks = new ArrayList<>(List.of(first));
            LockState granted = next(observation);
            assertEquals(LockState.Event.GRANTED, granted.event());
            assertEquals(first.token(), granted.token());
            assertEquals("holder-0", granted.value());
            for (int i = 0; i < holders; i++) {
                MonolockLock lock = locks.get(i);
                assertTrue(lock.release());
                LockState released = next(observation);
                assertEquals(LockState.Event.RELEASED, released.event(), "a hand-on: RELEASED first");
                assertEquals(lock.token(), released.token());
                assertEquals(Optional.of(LockState.ReleaseReason.RELEASED), released.reason());
                assertFalse(released.held());
                if (i + 1 < holders) {
                    MonolockLock nextLock = waiting.get(i).get(PATIENCE.toMillis(), TimeUnit.MILLISECONDS);
                    locks.add(nextLock);
                    LockState next = next(observation);
                    assertEquals(LockState.Event.GRANTED, next.event(), "then GRANTED");
                    assertEquals(nextLock.token(), next.token());
                    assertTrue(next.token() > lock.token(), "tokens increase");
                    assertEquals("holder-" + (i + 1), next.value());
                }
            }
            assertEquals(Optional.empty(), observation.next(Duration.ZERO), "nothing else happened");
        }
    }

    @Test
    void anObservationEndsWithAnErrorWhenTheServerIsKilled() throws Exception {
        String name = "java/ext/killed";
        TestServer doomed = TestServer.start();
        try (MonolockClient client = MonolockClient.create(doomed.address);
                Observation observation = client.observe(name)) {
            assertTrue(next(observation).initial());
            doomed.process.destroyForcibly();
            ObservationEndedException end = observation.ended().get(PATIENCE.toMillis(), TimeUnit.MILLISECONDS);
            assertEquals(LossReason.CONNECTION, end.reason());
            assertTrue(end.getMessage().startsWith("observation of lock \"" + name + "\" ended (connection): "),
                    end.getMessage());
            ObservationEndedException thrown = assertThrows(ObservationEndedException.class, observation::hasNext);
            assertEquals(end.getMessage(), thrown.getMessage());
        } finally {
            doomed.close();
        }
    }

    /**
     * A listener that records what the election tells, in order. Its
     * campaign (isLeader, notLeader) and its observation (onNewLeader) are
     * two threads, so a test waits for an event among all those told.
     */
    static final class Recorder implements LeaderElection.Listener {
        final BlockingQueue<String> arrivals = new LinkedBlockingQueue<>();
        final List<String> seen = new ArrayList<>();

        @Override
        public void isLeader(long token) {
            arrivals.add("leader " + token);
        }

        @Override
        public void notLeader() {
            arrivals.add("not leader");
        }

        @Override
        public void onNewLeader(LockState leader) {
            arrivals.add("new leader " + leader.token() + " " + leader.value());
        }

        /** The first event told that matches, waiting for it within {@link TestServer#PATIENCE}. */
        String await(String what, Predicate<String> matches) throws InterruptedException {
            long end = System.nanoTime() + PATIENCE.toNanos();
            for (int i = 0; ; i++) {
                if (i == seen.size()) {
                    String event = arrivals.poll(Math.max(0, end - System.nanoTime()), TimeUnit.NANOSECONDS);
                    assertNotNull(event, "no " + what + " within " + PATIENCE + "; told: " + seen);
                    seen.add(event);
                }
                if (matches.test(seen.get(i))) {
                    return seen.get(i);
                }
            }
        }

        /** The token this candidate was told it leads with, above {@code above}. */
        long leaderAbove(long above) throws InterruptedException {
            return token(await("leadership above " + above,
                    event -> event.startsWith("leader ") && token(event) > above));
        }

        /** Everything told so far, none waited for. */
        List<String> told() {
            arrivals.drainTo(seen);
            return seen;
        }
    }

    static long token(String event) {
        String[] words = event.split(" ");
        return Long.parseLong(event.startsWith("new leader") ? words[2] : words[1]);
    }

    @Test
    void theElectionFailsOverWhenTheLeaderResignsAndWhenItsConnectionCloses() throws Exception {
        String name = "java/ext/election";
        MonolockClient firstClient = MonolockClient.create(server.address);
        MonolockClient secondClient = MonolockClient.create(server.address);
        try (MonolockClient thirdClient = MonolockClient.create(server.address)) {
            Recorder first = new Recorder();
            Recorder second = new Recorder();
            Recorder third = new Recorder();
            LeaderElection firstElection = firstClient.leaderElection(name, LEASE, "first:1", first);
            LeaderElection secondElection = secondClient.leaderElection(name, LEASE, "second:2", second);
            LeaderElection thirdElection = thirdClient.leaderElection(name, LEASE, "third:3", third);
            try {
                firstElection.start();
                long firstToken = first.leaderAbove(0);
                assertEquals(firstToken, server.holderToken(name));
                assertTrue(firstElection.hasLeadership());
                first.await("itself as the new leader", ("new leader " + firstToken + " first:1")::equals);

                secondElection.start();
                second.await("the leader's value", ("new leader " + firstToken + " first:1")::equals);
                eventually("the second candidate queued", () -> server.waiters(name) == 1);
                assertEquals("first:1", secondElection.getLeader().orElseThrow().value());
                assertFalse(secondElection.hasLeadership());

                // The leader resigns: it stops leading before the lock is handed on.
                firstElection.close();
                assertEquals(Set.of("leader " + firstToken, "new leader " + firstToken + " first:1",
                        "not leader"), Set.copyOf(first.told()), "close() returns after notLeader");
                assertEquals("not leader", first.told().get(2), "the last thing told");
                long secondToken = second.leaderAbove(firstToken);
                second.await("itself as the new leader", ("new leader " + secondToken + " second:2")::equals);

                thirdElection.start();
                third.await("the leader's value", ("new leader " + secondToken + " second:2")::equals);
                eventually("the third candidate queued", () -> server.waiters(name) == 1);

                // The leader's connection closes: the next candidate leads, and everyone is told.
                secondClient.close();
                second.await("the end of its leadership", "not leader"::equals);
                long thirdToken = third.leaderAbove(secondToken);
                third.await("itself as the new leader", ("new leader " + thirdToken + " third:3")::equals);
                assertEquals(thirdToken, server.holderToken(name));
                secondElection.close();

                thirdElection.close();
                third.await("the end of its leadership", "not leader"::equals);
                eventually("resigning released the lock", () -> !server.held(name));
                for (Recorder recorder : List.of(first, second, third)) {
                    List<String> leadership = recorder.told().stream().filter(event -> !event.startsWith("new"))
                            .toList();
                    for (int i = 0; i < leadership.size(); i++) {
                        assertEquals(i % 2 == 0, leadership.get(i).startsWith("leader "),
                                "isLeader and notLeader alternate: " + leadership);
                    }
                }
            } finally {
                firstElection.close();
                secondElection.close();
                thirdElection.close();
                firstClient.close();
                secondClient.close();
            }
        }
    }

    @Test
    void setValueOnALostLockFailsWithTheLoss() throws Exception {
        String name = "java/ext/lost-set-value";
        try (MonolockClient client = MonolockClient.create(server.address)) {
            MonolockLock lock = client.lock(name, LEASE, "before");
            server.forceRelease(name);
            lock.lost().get(PATIENCE.toMillis(), TimeUnit.MILLISECONDS);
            LockLostException loss = assertThrows(LockLostException.class, () -> lock.setValue("after"));
            assertEquals(LossReason.FORCED, loss.reason());
            assertEquals("before", lock.value());
        }
    }
}
