package dev.monolock;

/**
 * An {@link Observation} ended because its session did: its message is
 * {@code observation of lock "NAME" ended (REASON): DETAIL}, and
 * {@link #reason()} is one of the loss reasons of a lock ({@code expired},
 * {@code connection}, {@code protocol}, {@code shutdown},
 * {@code server_error}). Observe again to go on watching.
 */
public class ObservationEndedException extends LockLostException {
    private static final long serialVersionUID = 1L;

    public ObservationEndedException(String lockName, LossReason reason, String detail) {
        super("observation of lock \"" + lockName + "\" ended (" + reason.wireName() + "): " + detail, lockName,
                reason);
    }
}
