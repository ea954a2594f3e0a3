package dev.monolock;

/**
 * No address could be used: refused, unreachable, silent, or not a monolock
 * server. The message names every address tried and what went wrong.
 */
public class ConnectFailedException extends MonolockException {
    private static final long serialVersionUID = 1L;

    public ConnectFailedException(String message, boolean temporary, Throwable cause) {
        super(message, temporary, cause);
    }
}
