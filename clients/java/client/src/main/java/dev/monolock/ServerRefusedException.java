package dev.monolock;

/**
 * The server refused the claim (an ACL, a code for a request it cannot
 * serve); {@link #code()} is the protocol's code. Codes below 0x10 are
 * temporary.
 */
public class ServerRefusedException extends MonolockException {
    private static final long serialVersionUID = 1L;

    private final int code;

    public ServerRefusedException(String message, int code) {
        super(message, code < 0x10, null);
        this.code = code;
    }

    /** The protocol's error code. */
    public int code() {
        return code;
    }
}
