package dev.monolock;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.monolock.Frames.Frame;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The byte vectors of docs/protocol.md, replayed through the codec. */
class FramesTest {
    static byte[] hex(String text) {
        String clean = text.replace(" ", "");
        byte[] out = new byte[clean.length() / 2];
        for (int i = 0; i < out.length; i++) {
            out[i] = (byte) Integer.parseInt(clean.substring(2 * i, 2 * i + 2), 16);
        }
        return out;
    }

    static final byte[] DEPLOY = "deploy".getBytes(StandardCharsets.UTF_8);

    @Test
    void clientFramesMatchTheProtocolPage() {
        assertArrayEquals(hex("01 01 00 00 07 d0 00 06 64 65 70 6c 6f 79"), Frames.acquireV1(DEPLOY, 2000));
        assertArrayEquals(hex("01 02 00 00 07 d0"), Frames.open(2000));
        assertArrayEquals(hex("21 00 00 00 01 00 06 64 65 70 6c 6f 79"), Frames.acquire(1, false, DEPLOY));
        assertArrayEquals(hex("21 00 00 00 02 01 06 64 65 70 6c 6f 79"), Frames.acquire(2, true, DEPLOY));
        assertArrayEquals(hex("22 00 00 00 09"), Frames.release(9));
        assertArrayEquals(hex("23"), Frames.ping());
        assertArrayEquals(hex("02"), Frames.heartbeat());
        assertArrayEquals(hex("22 ff ff ff ff"), Frames.release(-1), "claim ids are u32");
    }

    static final String WORKED_EXCHANGE = String.join("",
            "30 00 00 00 00 00 00 00 01 00 00 04 00",
            "31 00 00 00 01 00 06 b4 9d 20 00 00 00",
            "33 00 00 00 02",
            "32 00 00 00 03",
            "35",
            "37 00 00 00 03 00 06 b4 9d 20 00 00 02",
            "34 00 00 00 01",
            "31 00 00 00 01 00 06 b4 9d 20 00 00 03",
            "36 00 00 00 09 20 13 75 6e 6b 6e 6f 77 6e 20 63 6c 61 69 6d 20 69 64 3a 20 39",
            "38 00 00 00 03 08 0d 66 6f 72 63 65 2d 72 65 6c 65 61 73 65",
            "13 01 00");

    static final List<Frame> WORKED_FRAMES = List.of(
            new Frame(Frames.OPENED, 1024, 1, 0, ""),
            new Frame(Frames.ACQUIRED, 1, 0x0006b49d20000000L, 0, ""),
            new Frame(Frames.BUSY, 2, 0, 0, ""),
            new Frame(Frames.WAITING, 3, 0, 0, ""),
            Frame.of(Frames.PONG),
            new Frame(Frames.GRANTED, 3, 0x0006b49d20000002L, 0, ""),
            new Frame(Frames.RELEASED, 1, 0, 0, ""),
            new Frame(Frames.ACQUIRED, 1, 0x0006b49d20000003L, 0, ""),
            new Frame(Frames.REFUSED, 9, 0, 0x20, "unknown claim id: 9"),
            new Frame(Frames.REVOKED, 3, 0, 0x08, "force-release"),
            new Frame(Frames.ERROR, 0, 0, 0x01, ""));

    @Test
    void theWorkedExchangeDecodesWholeAndOneByteAtATime() throws Exception {
        byte[] bytes = hex(WORKED_EXCHANGE);
        Frames.Decoder whole = new Frames.Decoder();
        whole.feed(bytes, 0, bytes.length);
        assertEquals(WORKED_FRAMES, drain(whole));

        Frames.Decoder trickle = new Frames.Decoder();
        List<Frame> frames = new ArrayList<>();
        for (byte b : bytes) {
            trickle.feed(new byte[] {b}, 0, 1);
            frames.addAll(drain(trickle));
        }
        assertEquals(WORKED_FRAMES, frames);
        assertEquals(0, trickle.buffered());
    }

    @Test
    void versionOneServerFramesDecode() throws Exception {
        Frames.Decoder decoder = new Frames.Decoder();
        byte[] bytes = hex("11 12 00 06 b4 9d 20 00 00 00 13 18 03 61 63 6c");
        decoder.feed(bytes, 0, bytes.length);
        assertEquals(List.of(Frame.of(Frames.V1_WAITING),
                new Frame(Frames.V1_ACQUIRED, 0, 0x0006b49d20000000L, 0, ""),
                new Frame(Frames.ERROR, 0, 0, 0x18, "acl")), drain(decoder));
    }

    @Test
    void anUnknownTypeIsMalformedAndAHalfFrameWaits() throws Exception {
        Frames.Decoder decoder = new Frames.Decoder();
        decoder.feed(hex("31 00 00"), 0, 3);
        assertNull(decoder.next());
        Frames.Decoder bad = new Frames.Decoder();
        bad.feed(hex("7f"), 0, 1);
        assertThrows(Frames.MalformedFrame.class, bad::next);
    }

    static final byte[] VALUE_9000 = "10.0.0.7:9000".getBytes(StandardCharsets.UTF_8);

    /** The client's frames of docs/protocol.md's worked exchange of the extension, byte for byte. */
    @Test
    void extensionClientFramesMatchTheWorkedExchange() {
        assertArrayEquals(hex("24 00 00 00 01"), Frames.hello(Frames.FEATURE_VALUES_AND_OBSERVERS));
        assertArrayEquals(hex("25 00 00 00 01 00 06 64 65 70 6c 6f 79 00 0d 31 30 2e 30 2e 30 2e 37 3a 39 30 30 30"),
                Frames.acquireValue(1, false, DEPLOY, VALUE_9000));
        assertArrayEquals(hex("26 00 00 00 01 00 0d 31 30 2e 30 2e 30 2e 37 3a 39 30 30 31"),
                Frames.proclaim(1, "10.0.0.7:9001".getBytes(StandardCharsets.UTF_8)));
        assertArrayEquals(hex("27 00 00 00 07 06 64 65 70 6c 6f 79"), Frames.observe(7, DEPLOY));
        assertArrayEquals(hex("28 00 00 00 07"), Frames.unobserve(7));
        assertArrayEquals(hex("29 06 64 65 70 6c 6f 79"), Frames.lookup(DEPLOY));
        assertArrayEquals(hex("25 00 00 00 02 01 06 64 65 70 6c 6f 79 00 00"),
                Frames.acquireValue(2, true, DEPLOY, new byte[0]), "an empty value is value_len 0");
    }

    /** The server's frames of the worked exchange: STATE and LOCK_STATE with their state, FEATURES, replies. */
    @Test
    void extensionServerFramesOfTheWorkedExchangeDecode() throws Exception {
        byte[] bytes = hex(String.join("",
                "39 00 00 00 01 00 00 04 00",
                "3b 00 00 00 07",
                "3e 00 00 00 07 01 01 00 06 b4 9d 20 00 00 00 00 00 01 a2 3b d2 cb 00 00 00 0d",
                "31 30 2e 30 2e 30 2e 37 3a 39 30 30 30",
                "3a 00 00 00 01",
                "3e 00 00 00 07 04 00 00 06 b4 9d 20 00 00 00 00 00 01 a2 3b d2 d0 dc 01 00 00",
                "3d 01 00 00 06 b4 9d 20 00 00 01 00 00 01 a2 3b d2 d0 dc 00 00 0d",
                "31 30 2e 30 2e 30 2e 38 3a 39 30 30 30",
                "3c 00 00 00 07"));
        List<Frame> expected = List.of(
                new Frame(Frames.FEATURES, 1, 1024, 0, ""),
                new Frame(Frames.OBSERVING, 7, 0, 0, ""),
                new Frame(Frames.STATE, 7, 0, 0, "",
                        new Frames.WireState(1, 1, 0x0006b49d20000000L, 1796300000000L, 0, "10.0.0.7:9000")),
                new Frame(Frames.PROCLAIMED, 1, 0, 0, ""),
                new Frame(Frames.STATE, 7, 0, 0, "",
                        new Frames.WireState(4, 0, 0x0006b49d20000000L, 1796300001500L, 1, "")),
                new Frame(Frames.LOCK_STATE, 0, 0, 0, "",
                        new Frames.WireState(1, 0, 0x0006b49d20000001L, 1796300001500L, 0, "10.0.0.8:9000")),
                new Frame(Frames.UNOBSERVED, 7, 0, 0, ""));
        Frames.Decoder whole = new Frames.Decoder();
        whole.feed(bytes, 0, bytes.length);
        assertEquals(expected, drain(whole));
        Frames.Decoder trickle = new Frames.Decoder();
        List<Frame> frames = new ArrayList<>();
        for (byte b : bytes) {
            trickle.feed(new byte[] {b}, 0, 1);
            frames.addAll(drain(trickle));
        }
        assertEquals(expected, frames);
    }

    @Test
    void aStateWithAnUnknownEventOrAValueThatIsNotUtf8IsMalformed() {
        Frames.Decoder event = new Frames.Decoder();
        byte[] badEvent = hex("3d 05 00 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 00 00 00 00");
        event.feed(badEvent, 0, badEvent.length);
        assertThrows(Frames.MalformedFrame.class, event::next);
        Frames.Decoder value = new Frames.Decoder();
        byte[] badValue = hex("3d 01 00 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 00 00 00 01 ff");
        value.feed(badValue, 0, badValue.length);
        assertThrows(Frames.MalformedFrame.class, value::next);
    }

    private static List<Frame> drain(Frames.Decoder decoder) throws Frames.MalformedFrame {
        List<Frame> out = new ArrayList<>();
        for (Frame frame = decoder.next(); frame != null; frame = decoder.next()) {
            out.add(frame);
        }
        return out;
    }
}
