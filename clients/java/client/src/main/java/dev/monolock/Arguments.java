package dev.monolock;

import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/** Checks of what callers pass, done before any connection is made. */
final class Arguments {
    private Arguments() {}

    static final Duration MIN_LEASE = Duration.ofMillis(100);
    static final Duration MAX_LEASE = Duration.ofHours(1);
    private static final String UNIT = "(leases are in whole milliseconds, as java.time.Duration values)";

    /** The lease in milliseconds, or an {@link IllegalArgumentException} naming the unit. */
    static long leaseMillis(Duration lease) {
        if (lease == null) {
            throw new IllegalArgumentException("lease is null " + UNIT);
        }
        if (lease.compareTo(MIN_LEASE) < 0) {
            throw new IllegalArgumentException(
                    "lease " + describe(lease) + " is below the minimum of 100 ms " + UNIT);
        }
        if (lease.compareTo(MAX_LEASE) > 0) {
            throw new IllegalArgumentException(
                    "lease " + describe(lease) + " is above the maximum of 1 hour " + UNIT);
        }
        if (lease.toNanos() % 1_000_000L != 0) {
            throw new IllegalArgumentException(
                    "lease " + describe(lease) + " is not a whole number of milliseconds " + UNIT);
        }
        return lease.toMillis();
    }

    private static String describe(Duration lease) {
        if (lease.isNegative()) {
            return lease.toString();
        }
        if (lease.compareTo(Duration.ofSeconds(10)) >= 0 && lease.toMillis() % 1000 == 0) {
            return lease.getSeconds() + " s";
        }
        if (lease.toNanos() % 1_000_000L == 0 || lease.compareTo(Duration.ofDays(1)) > 0) {
            return lease.toMillis() + " ms";
        }
        return lease.toNanos() + " ns";
    }

    /** The name's UTF-8 bytes, 1 to 255 of them, or an {@link IllegalArgumentException}. */
    static byte[] lockName(String name) {
        if (name == null || name.isEmpty()) {
            throw new IllegalArgumentException("lock name is empty (a name is 1 to 255 bytes of UTF-8)");
        }
        ByteBuffer encoded;
        try {
            encoded = StandardCharsets.UTF_8.newEncoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .encode(CharBuffer.wrap(name));
        } catch (CharacterCodingException err) {
            throw new IllegalArgumentException("lock name is not valid Unicode (an unpaired surrogate)", err);
        }
        byte[] bytes = new byte[encoded.remaining()];
        encoded.get(bytes);
        if (bytes.length > Frames.MAX_NAME_BYTES) {
            throw new IllegalArgumentException("lock name is " + bytes.length
                    + " bytes of UTF-8, above the maximum of 255 bytes");
        }
        return bytes;
    }

    /**
     * A lock value's UTF-8 bytes, at most 1,024 of them, or an
     * {@link IllegalArgumentException}. Null is the empty value (none).
     */
    static byte[] lockValue(String value) {
        if (value == null || value.isEmpty()) {
            return new byte[0];
        }
        ByteBuffer encoded;
        try {
            encoded = StandardCharsets.UTF_8.newEncoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .encode(CharBuffer.wrap(value));
        } catch (CharacterCodingException err) {
            throw new IllegalArgumentException("value is not valid Unicode (an unpaired surrogate)", err);
        }
        byte[] bytes = new byte[encoded.remaining()];
        encoded.get(bytes);
        if (bytes.length > Frames.MAX_VALUE_BYTES) {
            throw new IllegalArgumentException("value of " + bytes.length + " bytes is above the maximum of "
                    + Frames.MAX_VALUE_BYTES + " bytes");
        }
        return bytes;
    }

    /** A wait that is not negative. */
    static Duration waitBound(Duration wait) {
        if (wait == null || wait.isNegative()) {
            throw new IllegalArgumentException("wait " + wait + " must be zero or more");
        }
        return wait;
    }

    /** One server address: {@code host:port}, IPv6 as {@code [addr]:port}. */
    record Address(String host, int port) {
        @Override
        public String toString() {
            return host.indexOf(':') >= 0 ? "[" + host + "]:" + port : host + ":" + port;
        }
    }

    /** Parses a comma-separated list of {@code host:port}. */
    static List<Address> addresses(String text) {
        if (text == null || text.isBlank()) {
            throw new IllegalArgumentException("no server address: write host:port (or set MONOLOCK_ADDRESS)");
        }
        List<Address> out = new ArrayList<>();
        for (String raw : text.split(",")) {
            String item = raw.trim();
            if (item.isEmpty()) {
                continue;
            }
            if (item.contains("://")) {
                throw new IllegalArgumentException("address \"" + item + "\": write host:port, without a scheme");
            }
            String host;
            String port;
            if (item.startsWith("[")) {
                int close = item.indexOf(']');
                if (close < 0 || close + 1 >= item.length() || item.charAt(close + 1) != ':') {
                    throw new IllegalArgumentException("address \"" + item + "\": write [addr]:port for IPv6");
                }
                host = item.substring(1, close);
                port = item.substring(close + 2);
            } else {
                int colon = item.lastIndexOf(':');
                if (colon <= 0 || item.indexOf(':') != colon) {
                    throw new IllegalArgumentException("address \"" + item + "\": write host:port");
                }
                host = item.substring(0, colon);
                port = item.substring(colon + 1);
            }
            int number;
            try {
                number = Integer.parseInt(port);
            } catch (NumberFormatException err) {
                number = -1;
            }
            if (number < 1 || number > 65535) {
                throw new IllegalArgumentException("address \"" + item + "\": the port must be 1 to 65535");
            }
            out.add(new Address(host, number));
        }
        if (out.isEmpty()) {
            throw new IllegalArgumentException("no server address in \"" + text + "\": write host:port");
        }
        return out;
    }
}
