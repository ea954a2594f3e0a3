package dev.monolock;

/** Why a lock was lost: the one vocabulary of every monolock client. */
public enum LossReason {
    /** The client's own deadline ({@code S + 0.8 x lease}) passed unconfirmed. */
    EXPIRED("expired"),
    /** An administrator ended the claim (force-release or kick). */
    FORCED("forced"),
    /** The server is shutting down. */
    SHUTDOWN("shutdown"),
    /** The connection closed or failed (EOF, reset, I/O error). */
    CONNECTION("connection"),
    /** The server broke the protocol. */
    PROTOCOL("protocol"),
    /** Any other ERROR code from the server. */
    SERVER_ERROR("server_error");

    private final String wireName;

    LossReason(String wireName) {
        this.wireName = wireName;
    }

    /** The reason's name, as every client and the driver protocol spell it. */
    public String wireName() {
        return wireName;
    }

    @Override
    public String toString() {
        return wireName;
    }

    /** The reason for a session or connection ended by ERROR {@code code}. */
    static LossReason ofErrorCode(int code) {
        return switch (code) {
            case 0x01 -> SHUTDOWN;
            case 0x02 -> FORCED;
            default -> SERVER_ERROR;
        };
    }
}
