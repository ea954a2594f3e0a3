package dev.monolock;

/** A TLS or mTLS failure: verification, a missing client certificate, a peer that does not speak TLS. */
public class TlsFailedException extends ConnectFailedException {
    private static final long serialVersionUID = 1L;

    public TlsFailedException(String message, boolean temporary, Throwable cause) {
        super(message, temporary, cause);
    }
}
