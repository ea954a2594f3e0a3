package dev.monolock;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * The wire format of docs/protocol.md, versions 1 and 2: encoders for the
 * client's frames and an incremental decoder for the server's. Pure byte
 * arithmetic, no I/O. All integers are big-endian.
 */
final class Frames {
    private Frames() {}

    /** The longest lock name, in UTF-8 bytes (a protocol constant). */
    static final int MAX_NAME_BYTES = 255;

    // Server frame types, version 1.
    static final int V1_WAITING = 0x11;
    static final int V1_ACQUIRED = 0x12;
    /** ERROR ends a connection in both versions. */
    static final int ERROR = 0x13;
    // Server frame types, version 2.
    static final int OPENED = 0x30;
    static final int ACQUIRED = 0x31;
    static final int WAITING = 0x32;
    static final int BUSY = 0x33;
    static final int RELEASED = 0x34;
    static final int PONG = 0x35;
    static final int REFUSED = 0x36;
    static final int GRANTED = 0x37;
    static final int REVOKED = 0x38;

    /** The version 1 HEARTBEAT. */
    static byte[] heartbeat() {
        return new byte[] {0x02};
    }

    /** The version 2 PING. */
    static byte[] ping() {
        return new byte[] {0x23};
    }

    /** Version 1 ACQUIRE: {@code 01 01 lease_ms:u32 name_len:u16 name}. */
    static byte[] acquireV1(byte[] name, long leaseMs) {
        byte[] out = new byte[8 + name.length];
        out[0] = 0x01;
        out[1] = 0x01;
        putU32(out, 2, leaseMs);
        out[6] = (byte) (name.length >>> 8);
        out[7] = (byte) name.length;
        System.arraycopy(name, 0, out, 8, name.length);
        return out;
    }

    /** Version 2 OPEN: {@code 01 02 lease_ms:u32}. */
    static byte[] open(long leaseMs) {
        byte[] out = new byte[6];
        out[0] = 0x01;
        out[1] = 0x02;
        putU32(out, 2, leaseMs);
        return out;
    }

    /** Version 2 ACQUIRE: {@code 21 claim:u32 mode:u8 name_len:u8 name}. */
    static byte[] acquire(int claim, boolean tryOnly, byte[] name) {
        byte[] out = new byte[7 + name.length];
        out[0] = 0x21;
        putU32(out, 1, claim & 0xffffffffL);
        out[5] = (byte) (tryOnly ? 1 : 0);
        out[6] = (byte) name.length;
        System.arraycopy(name, 0, out, 7, name.length);
        return out;
    }

    /** Version 2 RELEASE: {@code 22 claim:u32}. */
    static byte[] release(int claim) {
        byte[] out = new byte[5];
        out[0] = 0x22;
        putU32(out, 1, claim & 0xffffffffL);
        return out;
    }

    private static void putU32(byte[] out, int at, long value) {
        out[at] = (byte) (value >>> 24);
        out[at + 1] = (byte) (value >>> 16);
        out[at + 2] = (byte) (value >>> 8);
        out[at + 3] = (byte) value;
    }

    /**
     * One frame from the server. Fields a type does not carry are zero or
     * empty: {@code claim} and {@code token} for the claim frames,
     * {@code code} and {@code reason} for ERROR, REFUSED and REVOKED;
     * OPENED carries its session id in {@code token} and max_claims in
     * {@code claim} (read them through {@link #session()} and
     * {@link #maxClaims()}).
     */
    record Frame(int type, int claim, long token, int code, String reason) {
        long session() {
            return token;
        }

        long maxClaims() {
            return claim & 0xffffffffL;
        }

        static Frame of(int type) {
            return new Frame(type, 0, 0, 0, "");
        }

        @Override
        public String toString() {
            return String.format("frame 0x%02x (claim %d, token %d, code 0x%02x, reason \"%s\")",
                    type, claim & 0xffffffffL, token, code, reason);
        }
    }

    /** The server sent bytes that are no frame of the protocol. */
    static final class MalformedFrame extends Exception {
        private static final long serialVersionUID = 1L;

        MalformedFrame(String message) {
            super(message);
        }
    }

    /**
     * Incremental decoder: feed it bytes as they arrive, take whole frames
     * out. One read may hold half a frame or several frames.
     */
    static final class Decoder {
        private byte[] buffer = new byte[256];
        private int start;
        private int end;

        void feed(byte[] bytes, int offset, int length) {
            if (end + length > buffer.length) {
                int live = end - start;
                if (live + length > buffer.length) {
                    buffer = Arrays.copyOfRange(buffer, start, start + Math.max(buffer.length * 2, live + length));
                } else {
                    System.arraycopy(buffer, start, buffer, 0, live);
                }
                start = 0;
                end = live;
            }
            System.arraycopy(bytes, offset, buffer, end, length);
            end += length;
        }

        /** Bytes received and not yet taken as a frame. */
        int buffered() {
            return end - start;
        }

        /** The next whole frame, or null until more bytes arrive. */
        Frame next() throws MalformedFrame {
            int available = end - start;
            if (available == 0) {
                return null;
            }
            int type = buffer[start] & 0xff;
            int need = length(type, available);
            if (need < 0 || available < need) {
                return null;
            }
            int at = start + 1;
            Frame frame = switch (type) {
                case V1_WAITING, PONG -> Frame.of(type);
                case V1_ACQUIRED -> new Frame(type, 0, u64(at), 0, "");
                case ERROR -> new Frame(type, 0, 0, buffer[at] & 0xff, text(at + 2, buffer[at + 1] & 0xff));
                case OPENED -> new Frame(type, (int) u32(at + 8), u64(at), 0, "");
                case ACQUIRED, GRANTED -> new Frame(type, (int) u32(at), u64(at + 4), 0, "");
                case WAITING, BUSY, RELEASED -> new Frame(type, (int) u32(at), 0, 0, "");
                case REFUSED, REVOKED -> new Frame(
                        type, (int) u32(at), 0, buffer[at + 4] & 0xff, text(at + 6, buffer[at + 5] & 0xff));
                default -> throw new IllegalStateException("unreachable: type checked by length()");
            };
            start += need;
            if (start == end) {
                start = 0;
                end = 0;
            }
            return frame;
        }

        /** The whole length of a frame of {@code type}, or -1 until it is known. */
        private int length(int type, int available) throws MalformedFrame {
            return switch (type) {
                case V1_WAITING, PONG -> 1;
                case V1_ACQUIRED -> 9;
                case ERROR -> available < 3 ? -1 : 3 + (buffer[start + 2] & 0xff);
                case OPENED, ACQUIRED, GRANTED -> 13;
                case WAITING, BUSY, RELEASED -> 5;
                case REFUSED, REVOKED -> available < 7 ? -1 : 7 + (buffer[start + 6] & 0xff);
                default -> throw new MalformedFrame(String.format("unknown frame type 0x%02x", type));
            };
        }

        private long u32(int at) {
            return ((buffer[at] & 0xffL) << 24) | ((buffer[at + 1] & 0xffL) << 16)
                    | ((buffer[at + 2] & 0xffL) << 8) | (buffer[at + 3] & 0xffL);
        }

        private long u64(int at) {
            return (u32(at) << 32) | u32(at + 4);
        }

        private String text(int at, int length) {
            return new String(buffer, at, length, StandardCharsets.UTF_8);
        }
    }
}
