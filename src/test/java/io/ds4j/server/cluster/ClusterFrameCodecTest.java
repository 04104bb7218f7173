package io.ds4j.server.cluster;

import io.vertx.core.buffer.Buffer;
import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;
import java.util.List;

import static org.junit.jupiter.api.Assertions.*;

/** The wire form of the frames gateways and engine nodes exchange. */
class ClusterFrameCodecTest {
    final ClusterFrameCodec codec = new ClusterFrameCodec();

    /** Encodes after some unrelated bytes (the event bus puts its own header first) and decodes from that offset. */
    ClusterFrame roundTrip(ClusterFrame f) {
        Buffer b = Buffer.buffer().appendString("prefix-bytes");
        int pos = b.length();
        codec.encodeToWire(b, f);
        b.appendString("trailing"); // a decoder must not read past its own frame
        return codec.decodeFromWire(pos, b);
    }

    static void assertSame(ClusterFrame a, ClusterFrame b) {
        assertEquals(a.kind(), b.kind());
        assertEquals(a.id(), b.id());
        assertEquals(a.status(), b.status());
        assertEquals(a.address(), b.address());
        assertEquals(a.text(), b.text());
        assertEquals(a.headers(), b.headers());
        assertArrayEquals(a.data(), b.data());
        assertEquals(a.nanos(), b.nanos());
    }

    @Test
    void everyKindSurvivesTheWire() {
        byte[] body = "{\"messages\":[{\"role\":\"user\",\"content\":\"héllo 你好 🙂\"}],\"stream\":true}".getBytes(StandardCharsets.UTF_8);
        List<ClusterFrame> frames = List.of(
                ClusterFrame.gen("a1", "ds4j.cluster.gateway.n.0", "POST /v1/chat/completions?x=1",
                        List.of("Authorization", "Bearer sk-1", "Content-Type", "application/json"), body),
                ClusterFrame.cancel("a1", "the gateway gave it up: engine node 'e' left the cluster"),
                ClusterFrame.head("a1", 200, "engine@127.0.0.1:8081", List.of("content-type", "text/event-stream; charset=utf-8")),
                ClusterFrame.data("a1", "data: {\"x\":\"你好\"}\n\ndata: {\"y\":1}\n\n".getBytes(StandardCharsets.UTF_8), false),
                ClusterFrame.data("a1", null, true),
                ClusterFrame.fail("a1", 502, "engine node 'e' could not serve the request: connection reset"),
                new ClusterFrame(ClusterFrame.Kind.DATA, "", 0, "", "", List.of("", ""), new byte[0], Long.MIN_VALUE));
        for (ClusterFrame f : frames) assertSame(f, roundTrip(f));
        // two tokens' text of one engine flush travel as one frame
        ClusterFrame two = roundTrip(frames.get(3));
        assertEquals(2, new String(two.data(), StandardCharsets.UTF_8).split("\n\n").length);
        assertTrue(two.nanos() != 0, "data frames carry the sender's clock");
    }

    @Test
    void aLargeBodyAndManyHeadersSurvive() {
        byte[] big = new byte[1 << 20];
        for (int i = 0; i < big.length; i++) big[i] = (byte) (i * 31);
        List<String> h = new java.util.ArrayList<>();
        for (int i = 0; i < 100; i++) {
            h.add("X-H" + i);
            h.add("v" + i);
        }
        ClusterFrame f = ClusterFrame.gen("big", "addr", "POST /v1/completions", h, big);
        assertSame(f, roundTrip(f));
    }

    @Test
    void corruptBytesAreRefusedNotMisread() {
        Buffer b = Buffer.buffer();
        codec.encodeToWire(b, ClusterFrame.data("id", "hello".getBytes(StandardCharsets.UTF_8), false));
        // an unknown kind tag
        Buffer wrongKind = b.copy();
        wrongKind.setByte(0, (byte) 42);
        assertThrows(IllegalArgumentException.class, () -> codec.decodeFromWire(0, wrongKind));
        // a data length past the end (the frame was cut short)
        Buffer cut = b.getBuffer(0, b.length() - 2);
        assertThrows(IllegalArgumentException.class, () -> codec.decodeFromWire(0, cut));
    }

    @Test
    void headersMustBePairs() {
        assertThrows(IllegalArgumentException.class, () -> ClusterFrame.head("x", 200, "e", List.of("content-type")));
    }

    @Test
    void localDeliveryPassesTheSameObject() {
        ClusterFrame f = ClusterFrame.cancel("z", null);
        assertSame(f, codec.transform(f));
        assertEquals(ClusterFrameCodec.NAME, codec.name());
        assertEquals(-1, codec.systemCodecID());
    }
}
