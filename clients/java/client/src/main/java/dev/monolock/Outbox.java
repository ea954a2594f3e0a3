package dev.monolock;

import java.io.IOException;
import java.io.OutputStream;
import java.util.Arrays;

/**
 * The frames a session has queued and not yet written, and the rule that
 * gathers them: the thread that finds no write in progress writes
 * everything queued, then whatever other threads queued while it wrote,
 * until nothing is left; a thread that finds a write in progress only
 * queues. With one thread every frame is written at once by its own
 * thread, as before; with many, the frames they queue during one write go
 * out together in the next, one system call instead of one each.
 *
 * <p>Its owner queues under its own monitor, in the order in which it
 * records the frames as sent, so the bytes leave in that order; it calls
 * {@link #flush()} after releasing that monitor, so that no one waits for
 * the socket while holding it. The monitor of the outbox itself is only
 * ever held for a copy.
 */
final class Outbox {
    private final OutputStream out;
    /** Frames queued since the current write took the previous ones. */
    private byte[] queued = new byte[256];
    private int queuedLength;
    /** The buffer being written, reused as the next queue. */
    private byte[] spare = new byte[256];
    /** A thread is writing: what is queued now goes out in its next write. */
    private boolean writing;

    Outbox(OutputStream out) {
        this.out = out;
    }

    /** Queues {@code frame} behind every frame queued before it. */
    synchronized void add(byte[] frame) {
        if (queuedLength + frame.length > queued.length) {
            queued = Arrays.copyOf(queued, Math.max(queued.length * 2, queuedLength + frame.length));
        }
        System.arraycopy(frame, 0, queued, queuedLength, frame.length);
        queuedLength += frame.length;
    }

    /**
     * Writes what is queued, unless another thread is writing (it writes
     * this too before it stops). Returns once nothing is queued or another
     * thread has the writing; a failed write is thrown to the thread that
     * was writing, and the frames queued then are never written (the
     * connection is unusable).
     */
    void flush() throws IOException {
        synchronized (this) {
            if (writing || queuedLength == 0) {
                return;
            }
            writing = true;
        }
        boolean done = false;
        try {
            while (true) {
                byte[] batch;
                int length;
                synchronized (this) {
                    if (queuedLength == 0) {
                        writing = false;
                        done = true;
                        return;
                    }
                    batch = queued;
                    length = queuedLength;
                    queued = spare;
                    queuedLength = 0;
                    spare = batch;
                }
                out.write(batch, 0, length);
                out.flush();
            }
        } finally {
            if (!done) {
                synchronized (this) {
                    writing = false;
                    queuedLength = 0;
                }
            }
        }
    }
}
