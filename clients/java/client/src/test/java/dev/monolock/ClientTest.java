package dev.monolock;

import static dev.monolock.TestServer.PATIENCE;
import static dev.monolock.TestServer.eventually;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.Lock;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/** The client against the real server, every test on protocol v2 and on forced v1. */
class ClientTest {
    enum Protocol { V2, V1 }

    static final Duration LEASE = Duration.ofSeconds(5);
    static TestServer server;

    @BeforeAll
    static void startServer() throws Exception {
        server = TestServer.start();
    }

    @AfterAll
    static void stopServer() throws Exception {
        server.close();
    }

    static MonolockClient client(TestServer on, Protocol protocol) {
        return client(on.address, protocol);
    }

    static MonolockClient client(String address, Protocol protocol) {
        MonolockClient.Builder builder = MonolockClient.builder(address);
        if (protocol == Protocol.V1) {
            builder.forceV1();
        }
        return builder.build();
    }

    static String name(String what, Protocol protocol) {
        return "java/" + what + "/" + protocol;
    }

    @ParameterizedTest
    @EnumSource(Protocol.class)
    void aReleaseIsConfirmedSoTheNextTryLockSucceedsAtOnce(Protocol protocol) throws Exception {
        String name = name("release-then-try", protocol);
        try (MonolockClient holder = client(server, protocol); MonolockClient other = client(server, protocol)) {
            for (int round = 0; round < 20; round++) {
                MonolockLock lock = holder.lock(name, LEASE);
                assertEquals(server.holderToken(name), lock.token(), "the token is the server's");
                assertTrue(other.tryLock(name, LEASE).isEmpty(), "held: a try finds it busy");
                assertEquals(0, server.waiters(name), "a try leaves no trace in the queue");
                assertTrue(lock.release(), "the server confirms the release");
                assertFalse(lock.isHeld());
                Optional<MonolockLock> next = other.tryLock(name, LEASE);
                assertTrue(next.isPresent(), "round " + round + ": free at the first attempt after release");
                assertTrue(next.get().token() > lock.token(), "tokens increase");
                next.get().close();
            }
        }
    }

    @ParameterizedTest
    @EnumSource(Protocol.class)
    void waitersAreGrantedInArrivalOrder(Protocol protocol) throws Exception {
        String name = name("fifo", protocol);
        try (MonolockClient client = client(server, protocol)) {
            MonolockLock first = client.lock(name, LEASE);
            BlockingQueue<Integer> order = new LinkedBlockingQueue<>();
            List<CompletableFuture<MonolockLock>> waiting = new ArrayList<>();
            for (int i = 0; i < 4; i++) {
                int n = i;
                CompletableFuture<MonolockLock> future = client.lockAsync(name, LEASE);
                future.thenRun(() -> order.add(n));
                waiting.add(future);
                eventually("waiter " + n + " queued", () -> server.waiters(name) == n + 1);
            }
            first.release();
            for (int i = 0; i < 4; i++) {
                Integer granted = order.poll(PATIENCE.toMillis(), TimeUnit.MILLISECONDS);
                assertEquals(i, granted, "granted in arrival order");
                assertTrue(order.isEmpty(), "nobody is granted before their turn");
                MonolockLock lock = waiting.get(i).join();
                assertEquals(server.holderToken(name), lock.token());
                lock.release();
            }
        }
    }

    @ParameterizedTest
    @EnumSource(Protocol.class)
    void aBoundedWaitRunsOutAndLeavesTheQueue(Protocol protocol) throws Exception {
        String name = name("bounded", protocol);
        try (MonolockClient holder = client(server, protocol); MonolockClient waiter = client(server, protocol);
                MonolockLock lock = holder.lock(name, LEASE)) {
            long start = System.nanoTime();
            LockNotAcquiredException err = assertThrows(LockNotAcquiredException.class,
                    () -> waiter.lock(name, LEASE, Duration.ofMillis(300)));
            assertTrue(System.nanoTime() - start >= TimeUnit.MILLISECONDS.toNanos(300), "waited the whole bound");
            assertTrue(err.getMessage().contains(name), err.getMessage());
            assertEquals(0, server.waiters(name), "no trace in the queue once it has returned");
            assertTrue(lock.isHeld());
        }
    }

    @ParameterizedTest
    @EnumSource(Protocol.class)
    void anInterruptedWaiterHasLeftTheQueueWhenItReturns(Protocol protocol) throws Exception {
        String name = name("interrupt", protocol);
        try (MonolockClient holder = client(server, protocol); MonolockClient waiter = client(server, protocol);
                MonolockLock lock = holder.lock(name, LEASE)) {
            AtomicReference<Object> outcome = new AtomicReference<>();
            Thread thread = new Thread(() -> {
                try {
                    outcome.set(waiter.lock(name, LEASE));
                } catch (InterruptedException err) {
                    try {
                        // Asked at once, with no polling: the queue must already be empty.
                        outcome.set(server.waiters(name));
                    } catch (Exception failure) {
                        outcome.set(failure);
                    }
                }
            });
            thread.start();
            eventually("the waiter queued", () -> server.waiters(name) == 1);
            thread.interrupt();
            thread.join(PATIENCE.toMillis());
            assertEquals(0, outcome.get(), "the waiter's queue place is gone before InterruptedException");
            assertTrue(lock.isHeld());
        }
    }

    @ParameterizedTest
    @EnumSource(Protocol.class)
    void aForcedReleaseIsPushedToTheHolder(Protocol protocol) throws Exception {
        String name = name("forced", protocol);
        try (MonolockClient client = client(server, protocol)) {
            MonolockLock lock = client.lock(name, LEASE);
            CountDownLatch ran = new CountDownLatch(1);
            lock.onLost(ran::countDown);
            assertFalse(lock.lost().isDone());
            server.forceRelease(name);
            LockLostException loss = lock.lost().get(PATIENCE.toMillis(), TimeUnit.MILLISECONDS);
            assertEquals(LossReason.FORCED, loss.reason());
            assertTrue(loss.getMessage().startsWith("lock \"" + name + "\" lost (forced): "), loss.getMessage());
            assertTrue(ran.await(PATIENCE.toMillis(), TimeUnit.MILLISECONDS), "onLost ran");
            assertFalse(lock.isHeld());
            assertEquals(LossReason.FORCED, assertThrows(LockLostException.class, lock::check).reason());
            assertThrows(LockLostException.class, lock::release, "releasing a lost lock reports the loss");
            assertTrue(client.tryLock(name, LEASE).isPresent(), "the client works on after a loss");
        }
    }

    @ParameterizedTest
    @EnumSource(Protocol.class)
    void aPausedServerIsGivenUpAtTheClientDeadline(Protocol protocol) throws Exception {
        Duration lease = Duration.ofMillis(1000);
        try (TestServer paused = TestServer.start(); MonolockClient client = client(paused, protocol)) {
            MonolockLock lock = client.lock("paused", lease);
            paused.signal("STOP");
            long stopped = System.nanoTime();
            try {
                LockLostException loss = lock.lost().get(PATIENCE.toMillis(), TimeUnit.MILLISECONDS);
                assertEquals(LossReason.EXPIRED, loss.reason());
                long after = System.nanoTime() - stopped;
                assertTrue(after <= PATIENCE.toNanos(), "given up without the server");
                assertFalse(lock.isHeld());
                assertEquals(LossReason.EXPIRED, assertThrows(LockLostException.class, lock::check).reason());
            } finally {
                paused.signal("CONT");
            }
        }
    }

    @ParameterizedTest
    @EnumSource(Protocol.class)
    void isHeldReadsTheDeadlineItself(Protocol protocol) throws Exception {
        Duration lease = Duration.ofMillis(1000);
        try (TestServer paused = TestServer.start(); MonolockClient client = client(paused, protocol)) {
            MonolockLock lock = client.lock("deadline", lease);
            paused.signal("STOP");
            long stopped = System.nanoTime();
            try {
                // Every answer at or after stopped + 0.8 x lease is false, whatever the timer thread did.
                long due = stopped + TimeUnit.MILLISECONDS.toNanos(800);
                while (System.nanoTime() - due < 0) {
                    Thread.onSpinWait();
                }
                assertFalse(lock.isHeld());
            } finally {
                paused.signal("CONT");
            }
        }
    }

    @ParameterizedTest
    @EnumSource(Protocol.class)
    void aShutdownReachesTheHolder(Protocol protocol) throws Exception {
        TestServer stopping = TestServer.start();
        try (MonolockClient client = client(stopping, protocol)) {
            MonolockLock lock = client.lock("shutdown", LEASE);
            stopping.signal("TERM");
            LockLostException loss = lock.lost().get(PATIENCE.toMillis(), TimeUnit.MILLISECONDS);
            assertEquals(LossReason.SHUTDOWN, loss.reason());
        } finally {
            stopping.close();
        }
    }

    @ParameterizedTest
    @EnumSource(Protocol.class)
    void badArgumentsAreRefusedBeforeConnecting(Protocol protocol) throws Exception {
        try (SilentPort port = new SilentPort(); MonolockClient client = client(port.address(), protocol)) {
            assertThrows(IllegalArgumentException.class, () -> client.lock("", LEASE));
            assertThrows(IllegalArgumentException.class, () -> client.tryLock("x".repeat(256), LEASE));
            assertThrows(IllegalArgumentException.class, () -> client.lock("é".repeat(128), LEASE));
            IllegalArgumentException low = assertThrows(IllegalArgumentException.class,
                    () -> client.lock("x", Duration.ofMillis(10)));
            assertTrue(low.getMessage().contains("below the minimum of 100 ms"), low.getMessage());
            assertThrows(IllegalArgumentException.class, () -> client.lock("x", Duration.ofMillis(1L << 32)));
            assertThrows(IllegalArgumentException.class, () -> client.lock("x", LEASE, Duration.ofMillis(-1)));
            assertEquals(0, port.accepted(), "no connection was made");
        }
    }

    @ParameterizedTest
    @EnumSource(Protocol.class)
    void aDeadAddressIsNamedAndPassedOver(Protocol protocol) throws Exception {
        String dead = SilentPort.deadAddress();
        try (MonolockClient alone = MonolockClient.builder(dead).build()) {
            ConnectFailedException err = assertThrows(ConnectFailedException.class, () -> alone.lock("x", LEASE));
            assertTrue(err.getMessage().contains(dead), err.getMessage());
            assertTrue(err.isTemporary(), "refused is temporary");
        }
        MonolockClient.Builder builder = MonolockClient.builder(dead + "," + server.address);
        if (protocol == Protocol.V1) {
            builder.forceV1();
        }
        try (MonolockClient both = builder.build(); MonolockLock lock = both.lock(name("dead", protocol), LEASE)) {
            assertTrue(lock.isHeld());
        }
    }

    @ParameterizedTest
    @EnumSource(Protocol.class)
    void theLockViewBehavesAsDocumented(Protocol protocol) throws Exception {
        String name = name("view", protocol);
        try (MonolockClient client = client(server, protocol); MonolockClient other = client(server, protocol)) {
            Lock view = client.asLock(name, LEASE);
            assertThrows(IllegalMonitorStateException.class, view::unlock);
            view.lock();
            assertThrows(IllegalStateException.class, view::lock, "not re-entrant");
            assertFalse(other.asLock(name, LEASE).tryLock(50, TimeUnit.MILLISECONDS));
            assertThrows(UnsupportedOperationException.class, view::newCondition);
            view.unlock();
            Lock second = other.asLock(name, LEASE);
            assertTrue(second.tryLock(), "free once unlocked");
            second.unlock();
        }
    }

    @ParameterizedTest
    @EnumSource(Protocol.class)
    void aCancelledAsyncLockLeavesTheQueue(Protocol protocol) throws Exception {
        String name = name("async", protocol);
        try (MonolockClient client = client(server, protocol); MonolockLock held = client.lock(name, LEASE)) {
            CompletableFuture<MonolockLock> waiting = client.lockAsync(name, LEASE);
            eventually("queued", () -> server.waiters(name) == 1);
            assertTrue(waiting.cancel(false));
            eventually("left the queue", () -> server.waiters(name) == 0);
            Optional<MonolockLock> tried = client.tryLockAsync(name, LEASE).get(PATIENCE.toMillis(), TimeUnit.MILLISECONDS);
            assertTrue(tried.isEmpty());
            assertTrue(held.isHeld());
        }
    }

    @ParameterizedTest
    @EnumSource(Protocol.class)
    void manyLocksOfOneClientShareSessionsInV2(Protocol protocol) throws Exception {
        try (TestServer bounded = TestServer.start("--max-claims-per-session", "4");
                MonolockClient client = client(bounded, protocol)) {
            List<MonolockLock> locks = new ArrayList<>();
            for (int i = 0; i < 10; i++) {
                locks.add(client.lock("many/" + i, LEASE));
            }
            long readers = Thread.getAllStackTraces().keySet().stream()
                    .filter(thread -> thread.getName().startsWith("monolock-v"))
                    .filter(thread -> thread.getName().endsWith(bounded.address))
                    .count();
            // v2: claims beyond the bound of 4 go to another session (REFUSED 0x09); v1: a connection each.
            assertEquals(protocol == Protocol.V2 ? 3 : 10, readers);
            for (MonolockLock lock : locks) {
                assertTrue(lock.isHeld());
                assertEquals(bounded.holderToken(lock.name()), lock.token());
                assertTrue(lock.release());
            }
            assertNotEquals(locks.get(0).token(), locks.get(1).token());
        }
    }

    @ParameterizedTest
    @EnumSource(Protocol.class)
    void releaseTwiceAndCloseAfterReleaseDoNothing(Protocol protocol) throws Exception {
        String name = name("twice", protocol);
        try (MonolockClient client = client(server, protocol)) {
            MonolockLock lock = client.lock(name, LEASE);
            assertTrue(lock.release());
            assertFalse(lock.release());
            lock.close();
            assertThrows(IllegalStateException.class, lock::check);
            assertSame(false, server.held(name));
        }
    }

    @org.junit.jupiter.api.Test
    void anIdleSessionIsClosedByTheClientAndAnotherOpensOnDemand() throws Exception {
        try (TestServer own = TestServer.start();
                MonolockClient client = MonolockClient.builder(own.address).idleClose(Duration.ofMillis(300)).build()) {
            MonolockLock one = client.lock("java/idle", LEASE);
            long first = one.token();
            assertTrue(one.release());
            assertEquals(1, sessionThreads(own.address));
            eventually("the idle session closed", () -> sessionThreads(own.address) == 0);
            MonolockLock again = client.lock("java/idle", LEASE);
            assertTrue(again.token() > first);
            assertEquals(1, sessionThreads(own.address));
            again.release();
        }
    }

    static long sessionThreads(String address) {
        return Thread.getAllStackTraces().keySet().stream()
                .filter(thread -> thread.getName().equals("monolock-v2-" + address))
                .count();
    }
}
