package dev.monolock;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * The wire format of docs/protocol.md, versions 1 and 2 and the version 2
 * extension "values and observers": encoders for the
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
    // Server frame types of the version 2 extension "values and observers".
    static final int FEATURES = 0x39;
    static final int PROCLAIMED = 0x3a;
    static final int OBSERVING = 0x3b;
    static final int UNOBSERVED = 0x3c;
    static final int LOCK_STATE = 0x3d;
    static final int STATE = 0x3e;

    /** The longest lock value, in UTF-8 bytes (a protocol constant). */
    static final int MAX_VALUE_BYTES = 1024;
    /** HELLO's feature bit for values and observers. */
    static final int FEATURE_VALUES_AND_OBSERVERS = 0x1;
    /** The bytes of a state after its frame's header: event, flags, token, since_ms, reason, value_len. */
    private static final int STATE_HEAD = 21;

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

    /** HELLO: {@code 24 features:u32}, the first frame after OPEN. */
    static byte[] hello(int features) {
        byte[] out = new byte[5];
        out[0] = 0x24;
        putU32(out, 1, features & 0xffffffffL);
        return out;
    }

    /** ACQUIRE_VALUE: {@code 25 claim:u32 mode:u8 name_len:u8 name value_len:u16 value}. */
    static byte[] acquireValue(int claim, boolean tryOnly, byte[] name, byte[] value) {
        byte[] out = new byte[9 + name.length + value.length];
        out[0] = 0x25;
        putU32(out, 1, claim & 0xffffffffL);
        out[5] = (byte) (tryOnly ? 1 : 0);
        out[6] = (byte) name.length;
        System.arraycopy(name, 0, out, 7, name.length);
        int at = 7 + name.length;
        out[at] = (byte) (value.length >>> 8);
        out[at + 1] = (byte) value.length;
        System.arraycopy(value, 0, out, at + 2, value.length);
        return out;
    }

    /** PROCLAIM: {@code 26 claim:u32 value_len:u16 value}. */
    static byte[] proclaim(int claim, byte[] value) {
        byte[] out = new byte[7 + value.length];
        out[0] = 0x26;
        putU32(out, 1, claim & 0xffffffffL);
        out[5] = (byte) (value.length >>> 8);
        out[6] = (byte) value.length;
        System.arraycopy(value, 0, out, 7, value.length);
        return out;
    }

    /** OBSERVE: {@code 27 watch:u32 name_len:u8 name}. */
    static byte[] observe(int watch, byte[] name) {
        byte[] out = new byte[6 + name.length];
        out[0] = 0x27;
        putU32(out, 1, watch & 0xffffffffL);
        out[5] = (byte) name.length;
        System.arraycopy(name, 0, out, 6, name.length);
        return out;
    }

    /** UNOBSERVE: {@code 28 watch:u32}. */
    static byte[] unobserve(int watch) {
        byte[] out = new byte[5];
        out[0] = 0x28;
        putU32(out, 1, watch & 0xffffffffL);
        return out;
    }

    /** LOOKUP: {@code 29 name_len:u8 name}. */
    static byte[] lookup(byte[] name) {
        byte[] out = new byte[2 + name.length];
        out[0] = 0x29;
        out[1] = (byte) name.length;
        System.arraycopy(name, 0, out, 2, name.length);
        return out;
    }

    private static void putU32(byte[] out, int at, long value) {
        out[at] = (byte) (value >>> 24);
        out[at + 1] = (byte) (value >>> 16);
        out[at + 2] = (byte) (value >>> 8);
        out[at + 3] = (byte) value;
    }

    /**
     * The state a STATE push or a LOCK_STATE reply carries, as on the wire:
     * {@code event} 0 FREE, 1 HELD, 2 GRANTED, 3 VALUE, 4 RELEASED;
     * {@code flags} bit 0 INITIAL, bit 1 COALESCED; {@code reason} 1 to 4
     * for RELEASED, else 0.
     */
    record WireState(int event, int flags, long token, long sinceMs, int reason, String value) {}

    /**
     * One frame from the server. Fields a type does not carry are zero or
     * empty: {@code claim} and {@code token} for the claim frames (the
     * watch id in {@code claim} for OBSERVING, UNOBSERVED and STATE),
     * {@code code} and {@code reason} for ERROR, REFUSED and REVOKED,
     * {@code state} for STATE and LOCK_STATE (else null). OPENED carries
     * its session id in {@code token} and max_claims in {@code claim} (read
     * them through {@link #session()} and {@link #maxClaims()}); FEATURES
     * its features in {@code claim} and max_watches in {@code token}.
     */
    record Frame(int type, int claim, long token, int code, String reason, WireState state) {
        Frame(int type, int claim, long token, int code, String reason) {
            this(type, claim, token, code, reason, null);
        }

        long session() {
            return token;
        }

        long maxClaims() {
            return claim & 0xffffffffL;
        }

        int features() {
            return claim;
        }

        long maxWatches() {
            return token;
        }

        static Frame of(int type) {
            return new Frame(type, 0, 0, 0, "");
        }

        @Override
        public String toString() {
            return String.format("frame 0x%02x (claim %d, token %d, code 0x%02x, reason \"%s\"%s)",
                    type, claim & 0xffffffffL, token, code, reason, state == null ? "" : ", " + state);
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
                case FEATURES -> new Frame(type, (int) u32(at), u32(at + 4), 0, "");
                case PROCLAIMED, OBSERVING, UNOBSERVED -> new Frame(type, (int) u32(at), 0, 0, "");
                case LOCK_STATE -> new Frame(type, 0, 0, 0, "", state(at, need - 1 - STATE_HEAD));
                case STATE -> new Frame(type, (int) u32(at), 0, 0, "", state(at + 4, need - 5 - STATE_HEAD));
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
                case FEATURES -> 9;
                case PROCLAIMED, OBSERVING, UNOBSERVED -> 5;
                case LOCK_STATE -> stateLength(1, available);
                case STATE -> stateLength(5, available);
                default -> throw new MalformedFrame(String.format("unknown frame type 0x%02x", type));
            };
        }

        /** The length of a frame whose state starts at {@code head}, or -1 until value_len is in. */
        private int stateLength(int head, int available) {
            int lengthAt = head + STATE_HEAD - 2;
            if (available < lengthAt + 2) {
                return -1;
            }
            int valueLength = ((buffer[start + lengthAt] & 0xff) << 8) | (buffer[start + lengthAt + 1] & 0xff);
            return head + STATE_HEAD + valueLength;
        }

        /** The state at {@code at}, its value {@code valueLength} bytes; checked before the frame is taken. */
        private WireState state(int at, int valueLength) throws MalformedFrame {
            int event = buffer[at] & 0xff;
            int reason = buffer[at + 18] & 0xff;
            if (event > 4) {
                throw new MalformedFrame(String.format("unknown state event 0x%02x", event));
            }
            if (reason > 4) {
                throw new MalformedFrame(String.format("unknown release reason 0x%02x", reason));
            }
            String value;
            try {
                value = StandardCharsets.UTF_8.newDecoder()
                        .onMalformedInput(CodingErrorAction.REPORT)
                        .onUnmappableCharacter(CodingErrorAction.REPORT)
                        .decode(ByteBuffer.wrap(buffer, at + STATE_HEAD, valueLength))
                        .toString();
            } catch (CharacterCodingException err) {
                throw new MalformedFrame("a lock value that is not UTF-8");
            }
            return new WireState(event, buffer[at + 1] & 0xff, u64(at + 2), u64(at + 10), reason, value);
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
