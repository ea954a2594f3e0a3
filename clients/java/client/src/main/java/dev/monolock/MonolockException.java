package dev.monolock;

/**
 * Every failure of the client. {@link #isTemporary()} says whether the same
 * call may succeed later unchanged (refused, unreachable, timeouts, a server
 * shutting down) or never will (wrong protocol, TLS verification, ACL,
 * a bad argument).
 */
public class MonolockException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final boolean temporary;

    public MonolockException(String message, boolean temporary, Throwable cause) {
        super(message, cause);
        this.temporary = temporary;
    }

    /** Whether retrying the same call later may succeed. */
    public boolean isTemporary() {
        return temporary;
    }
}
