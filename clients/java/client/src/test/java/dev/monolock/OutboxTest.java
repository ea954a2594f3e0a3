package dev.monolock;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** How the outbox gathers frames into writes, on a recording stream. */
class OutboxTest {
    static final Duration BOUND = Duration.ofSeconds(30);

    /** Records every write as one entry; the first write can be held open. */
    static final class Recording extends OutputStream {
        final List<byte[]> writes = Collections.synchronizedList(new ArrayList<>());
        final CountDownLatch firstEntered = new CountDownLatch(1);
        final CountDownLatch firstMayReturn;

        Recording(boolean holdFirst) {
            firstMayReturn = new CountDownLatch(holdFirst ? 1 : 0);
        }

        @Override
        public void write(int b) {
            write(new byte[] {(byte) b}, 0, 1);
        }

        @Override
        public void write(byte[] bytes, int offset, int length) {
            byte[] copy = new byte[length];
            System.arraycopy(bytes, offset, copy, 0, length);
            boolean first = writes.isEmpty();
            writes.add(copy);
            if (first) {
                firstEntered.countDown();
                try {
                    assertTrue(firstMayReturn.await(BOUND.toSeconds(), TimeUnit.SECONDS));
                } catch (InterruptedException err) {
                    Thread.currentThread().interrupt();
                }
            }
        }
    }

    @Test
    void aLoneThreadWritesEachFrameAtOnce() throws Exception {
        Recording out = new Recording(false);
        Outbox outbox = new Outbox(out);
        outbox.add(Frames.acquire(1, false, FramesTest.DEPLOY));
        outbox.flush();
        assertEquals(1, out.writes.size(), "written before flush returns, with no wait for company");
        outbox.add(Frames.release(1));
        outbox.flush();
        assertEquals(2, out.writes.size());
        assertArrayEquals(Frames.release(1), out.writes.get(1));
        outbox.flush();
        assertEquals(2, out.writes.size(), "nothing queued: nothing written");
    }

    @Test
    void framesQueuedDuringAWriteLeaveTogetherInTheNextOne() throws Exception {
        Recording out = new Recording(true);
        Outbox outbox = new Outbox(out);
        outbox.add(Frames.ping());
        Throwable[] failed = new Throwable[1];
        Thread writer = new Thread(() -> {
            try {
                outbox.flush();
            } catch (Throwable err) {
                failed[0] = err;
            }
        });
        writer.start();
        assertTrue(out.firstEntered.await(BOUND.toSeconds(), TimeUnit.SECONDS));
        // The writer is inside its write: these two only queue, and return.
        assertTimeoutPreemptively(BOUND, () -> {
            outbox.add(Frames.acquire(7, true, FramesTest.DEPLOY));
            outbox.flush();
            outbox.add(Frames.release(3));
            outbox.flush();
        });
        assertEquals(1, out.writes.size(), "the queued frames wait for the write in progress");
        out.firstMayReturn.countDown();
        writer.join(BOUND.toMillis());
        assertNull(failed[0]);
        assertEquals(2, out.writes.size(), "the writer took both frames in one more write");
        ByteArrayOutputStream expected = new ByteArrayOutputStream();
        expected.write(Frames.acquire(7, true, FramesTest.DEPLOY));
        expected.write(Frames.release(3));
        assertArrayEquals(expected.toByteArray(), out.writes.get(1), "in the order they were queued");
    }

    @Test
    void everyFrameOfManyThreadsLeavesWholeAndOnce() throws Exception {
        ByteArrayOutputStream sink = new ByteArrayOutputStream();
        Outbox outbox = new Outbox(sink);
        int threads = 8;
        int each = 500;
        List<Thread> workers = new ArrayList<>();
        Throwable[] failed = new Throwable[1];
        for (int t = 0; t < threads; t++) {
            int thread = t;
            Thread worker = new Thread(() -> {
                try {
                    for (int i = 0; i < each; i++) {
                        outbox.add(Frames.release(thread * each + i));
                        outbox.flush();
                    }
                } catch (Throwable err) {
                    synchronized (failed) {
                        failed[0] = err;
                    }
                }
            });
            worker.start();
            workers.add(worker);
        }
        for (Thread worker : workers) {
            worker.join(BOUND.toMillis());
        }
        assertNull(failed[0]);
        byte[] bytes = sink.toByteArray();
        assertEquals(threads * each * 5, bytes.length, "every frame, nothing twice");
        Map<Integer, Integer> lastOfThread = new HashMap<>();
        for (int at = 0; at < bytes.length; at += 5) {
            assertEquals(0x22, bytes[at], "a whole RELEASE at every 5th byte");
            int claim = ((bytes[at + 1] & 0xff) << 24) | ((bytes[at + 2] & 0xff) << 16)
                    | ((bytes[at + 3] & 0xff) << 8) | (bytes[at + 4] & 0xff);
            int thread = claim / each;
            int previous = lastOfThread.getOrDefault(thread, -1);
            assertEquals(previous + 1, claim % each, "each thread's frames in its own order");
            lastOfThread.put(thread, claim % each);
        }
        assertEquals(threads, lastOfThread.size());
    }

    @Test
    void aFailedWriteReachesTheWriterAndTheNextFrameTriesAgain() throws Exception {
        List<Integer> lengths = new ArrayList<>();
        boolean[] broken = {true};
        Outbox outbox = new Outbox(new OutputStream() {
            @Override
            public void write(int b) throws IOException {
                write(new byte[] {(byte) b}, 0, 1);
            }

            @Override
            public void write(byte[] bytes, int offset, int length) throws IOException {
                if (broken[0]) {
                    throw new IOException("broken pipe");
                }
                lengths.add(length);
            }
        });
        outbox.add(Frames.ping());
        IOException err = assertThrows(IOException.class, outbox::flush);
        assertEquals("broken pipe", err.getMessage());
        broken[0] = false;
        outbox.add(Frames.release(1));
        outbox.flush();
        assertEquals(List.of(5), lengths, "the failed frame is dropped, not written later; no writer is stuck");
    }
}
