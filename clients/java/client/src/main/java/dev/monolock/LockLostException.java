package dev.monolock;

/**
 * The lock is no longer held. Its message is
 * {@code lock "NAME" lost (REASON): DETAIL}; {@link #reason()} is the
 * shared vocabulary.
 */
public class LockLostException extends MonolockException {
    private static final long serialVersionUID = 1L;

    private final String lockName;
    private final LossReason reason;

    public LockLostException(String lockName, LossReason reason, String detail) {
        this("lock \"" + lockName + "\" lost (" + reason.wireName() + "): " + detail, lockName, reason);
    }

    /** A loss whose whole message is {@code message} (an observation's end says so in its own words). */
    protected LockLostException(String message, String lockName, LossReason reason) {
        super(message, reason != LossReason.PROTOCOL, null);
        this.lockName = lockName;
        this.reason = reason;
    }

    /** The lock's name. */
    public String lockName() {
        return lockName;
    }

    /** Why it was lost. */
    public LossReason reason() {
        return reason;
    }
}
