package dev.monolock;

/** A bounded wait ran out before the lock was granted; the claim has left the queue. */
public class LockNotAcquiredException extends MonolockException {
    private static final long serialVersionUID = 1L;

    public LockNotAcquiredException(String message) {
        super(message, true, null);
    }
}
