package io.ds4j.server.cluster;

import io.vertx.core.buffer.Buffer;
import io.vertx.core.eventbus.MessageCodec;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * Puts {@link ClusterFrame}s on the clustered event bus. Wire layout (big-endian): kind tag (1 byte), id, status
 * (int), address, text, header count (int) and that many strings, nanos (long), data length (int) and the bytes.
 * A string is its UTF-8 length (int, -1 for null) and bytes. Between verticles of one JVM a frame passes by reference
 * (it is immutable but for its byte array, which nobody writes after sending).
 */
public final class ClusterFrameCodec implements MessageCodec<ClusterFrame, ClusterFrame> {
    /** The codec's registered name. */
    public static final String NAME = "ds4j-cluster-frame";
    private static final ClusterFrame.Kind[] KINDS = ClusterFrame.Kind.values();

    @Override
    public void encodeToWire(Buffer b, ClusterFrame f) {
        b.appendByte((byte) f.kind().ordinal());
        string(b, f.id());
        b.appendInt(f.status());
        string(b, f.address());
        string(b, f.text());
        b.appendInt(f.headers().size());
        for (String h : f.headers()) string(b, h);
        b.appendLong(f.nanos());
        b.appendInt(f.data().length).appendBytes(f.data());
    }

    private static void string(Buffer b, String s) {
        if (s == null) {
            b.appendInt(-1);
            return;
        }
        byte[] u = s.getBytes(StandardCharsets.UTF_8);
        b.appendInt(u.length).appendBytes(u);
    }

    /**
     * @throws IllegalArgumentException when the bytes are not a frame (unknown kind tag, a length past the end)
     */
    @Override
    public ClusterFrame decodeFromWire(int pos, Buffer b) {
        Reader r = new Reader(b, pos);
        int tag = b.getByte(r.pos++);
        if (tag < 0 || tag >= KINDS.length) throw new IllegalArgumentException("not a cluster frame: kind tag " + tag);
        String id = r.string();
        int status = r.i();
        String address = r.string();
        String text = r.string();
        int n = r.i();
        if (n < 0 || n > (b.length() - r.pos) / 4) throw new IllegalArgumentException("not a cluster frame: " + n + " headers");
        List<String> headers = new ArrayList<>(n);
        for (int k = 0; k < n; k++) headers.add(r.string());
        long nanos = b.getLong(r.pos);
        r.pos += 8;
        byte[] data = r.bytes(r.i());
        return new ClusterFrame(KINDS[tag], id, status, address, text, headers, data, nanos);
    }

    private static final class Reader {
        final Buffer b;
        int pos;

        Reader(Buffer b, int pos) {
            this.b = b;
            this.pos = pos;
        }

        int i() {
            int v = b.getInt(pos);
            pos += 4;
            return v;
        }

        byte[] bytes(int len) {
            if (len < 0 || len > b.length() - pos) throw new IllegalArgumentException("not a cluster frame: length " + len
                    + " at " + pos + " of " + b.length());
            byte[] v = b.getBytes(pos, pos + len);
            pos += len;
            return v;
        }

        String string() {
            int len = i();
            return len == -1 ? null : new String(bytes(len), StandardCharsets.UTF_8);
        }
    }

    @Override
    public ClusterFrame transform(ClusterFrame f) {
        return f;
    }

    @Override
    public String name() {
        return NAME;
    }

    @Override
    public byte systemCodecID() {
        return -1;
    }
}
