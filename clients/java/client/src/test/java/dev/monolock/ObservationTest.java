package dev.monolock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.NoSuchElementException;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/** An observation's queue as its reader sees it, fed as a session feeds it (no I/O). */
class ObservationTest {
    static LockState granted(long token) {
        return LockState.of(new Frames.WireState(2, 0, token, 1_796_300_000_000L + token, 0, "holder-" + token));
    }

    static LockState released(long token) {
        return LockState.of(new Frames.WireState(4, 0, token, 1_796_300_000_000L + token, 1, "ignored"));
    }

    @Test
    void statesComeInOrderAndCloseUnobservesOnce() throws Exception {
        Observation observation = new Observation("lock");
        AtomicInteger unobserved = new AtomicInteger();
        observation.onClose(unobserved::incrementAndGet);
        observation.deliver(granted(1));
        observation.deliver(released(1));
        assertTrue(observation.hasNext());
        assertEquals(granted(1), observation.next());
        LockState free = observation.next();
        assertEquals(LockState.Event.RELEASED, free.event());
        assertFalse(free.held());
        assertEquals("", free.value(), "a released state carries no value");
        assertEquals(Optional.of(LockState.ReleaseReason.RELEASED), free.reason());
        assertEquals(Optional.empty(), observation.next(Duration.ofMillis(1)), "nothing more came");
        observation.close();
        observation.close();
        assertEquals(1, unobserved.get(), "one UNOBSERVE");
        assertFalse(observation.hasNext(), "closed: the iteration is over");
        assertThrows(NoSuchElementException.class, observation::next);
        assertThrows(NoSuchElementException.class, () -> observation.next(Duration.ZERO));
    }

    @Test
    void aReaderFallingBehindTheBoundIsGivenTheCurrentStateFlaggedCoalesced() {
        Observation observation = new Observation("lock");
        for (long token = 1; token <= Observation.QUEUE_BOUND + 3; token++) {
            observation.deliver(granted(token));
        }
        LockState first = observation.next();
        assertTrue(first.coalesced(), "changes were dropped: " + first);
        assertEquals(LockState.Event.HELD, first.event(), "a coalesced state is a state, not a change");
        assertTrue(first.held());
        assertFalse(first.initial());
        assertEquals(Observation.QUEUE_BOUND + 1, first.token(), "the state when the bound was found reached");
        assertEquals(Observation.QUEUE_BOUND + 2, observation.next().token(), "changes after it go on");
        assertEquals(Observation.QUEUE_BOUND + 3, observation.next().token());
    }

    @Test
    void theSessionsEndComesAfterTheStatesBeforeIt() {
        Observation observation = new Observation("leader");
        observation.deliver(granted(7));
        observation.fail(new ObservationEndedException("leader", LossReason.CONNECTION, "the server closed it"));
        assertEquals(7, observation.next().token(), "what came before the end is read first");
        ObservationEndedException end = assertThrows(ObservationEndedException.class, observation::hasNext);
        assertEquals("observation of lock \"leader\" ended (connection): the server closed it", end.getMessage());
        assertEquals(LossReason.CONNECTION, end.reason());
        assertTrue(end.isTemporary());
        assertTrue(observation.ended().isDone());
        assertThrows(ObservationEndedException.class, () -> observation.next(Duration.ofSeconds(1)));
    }
}
