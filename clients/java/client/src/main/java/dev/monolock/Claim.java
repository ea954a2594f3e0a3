package dev.monolock;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;

/**
 * One claim as its lock sees it, whichever protocol version carries it.
 * {@code granted} completes with the token, or exceptionally: {@link #BUSY}
 * (a try found the lock held), {@link #TOO_MANY_CLAIMS} (try another
 * session), or a {@link MonolockException}. {@code lost} completes only on a
 * loss, never on a release.
 */
abstract class Claim {
    /** A try-only claim found the lock held. */
    static final RuntimeException BUSY = new NotGranted("busy");
    /** The session is at its claim bound: use another. */
    static final RuntimeException TOO_MANY_CLAIMS = new NotGranted("too many claims");
    /** The session is at its watch bound: use another. */
    static final RuntimeException TOO_MANY_WATCHES = new NotGranted("too many watches");

    static final class NotGranted extends RuntimeException {
        private static final long serialVersionUID = 1L;

        NotGranted(String what) {
            super(what, null, false, false);
        }
    }

    final String name;
    final CompletableFuture<Long> granted = new CompletableFuture<>();
    final CompletableFuture<LockLostException> lost = new CompletableFuture<>();
    volatile long token;
    /**
     * The loss, set under the owner's monitor at the instant the claim is
     * lost, before {@code lost} completes (which happens outside it): a
     * reader never sees "held" after the loss was decided.
     */
    volatile LockLostException loss;
    /** The claim's value as the server has it: the ACQUIRE's, then each confirmed PROCLAIM's. */
    volatile String value = "";

    Claim(String name) {
        this.name = name;
    }

    /** Gives the claim up at once if its deadline has passed: the state is read. */
    abstract void checkDeadline();

    /**
     * Lets go and waits, within {@code bound}, for the server to confirm
     * that the claim is gone (queue left, lock handed on). Returns whether
     * it confirmed; unconfirmed, the connection is closed.
     */
    abstract boolean leave(Duration bound);

    /**
     * Why this claim's lock cannot carry a value (a server without the
     * extension, protocol version 1), or null when it can.
     */
    abstract String unsupported();

    /**
     * Writes a PROCLAIM of {@code value}; completes once the server has it,
     * or exceptionally (the claim's loss, a refusal). Only called when
     * {@link #unsupported()} is null.
     */
    abstract CompletableFuture<Void> proclaim(byte[] value);

    /** Whether the claim holds the lock now, its deadline checked. */
    boolean held() {
        return currentLoss() == null && granted.isDone() && !granted.isCompletedExceptionally();
    }

    /** The loss, if any, with the deadline checked first. */
    LockLostException currentLoss() {
        checkDeadline();
        return loss;
    }
}
