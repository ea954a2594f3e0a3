package dev.monolock;

/**
 * A lock value, a value replacement, an observation or a holder lookup was
 * asked of a server that lacks the protocol's extension "values and
 * observers" (it is older than this client), or of a client forced to
 * protocol version 1. Never temporary: the same call fails until the server
 * is upgraded. Plain locks on the same server work as ever.
 */
public class UnsupportedFeatureException extends MonolockException {
    private static final long serialVersionUID = 1L;

    public UnsupportedFeatureException(String message) {
        super(message, false, null);
    }
}
