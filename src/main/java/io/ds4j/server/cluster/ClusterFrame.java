package io.ds4j.server.cluster;

import java.util.List;

/**
 * One message between a gateway and an engine node about one relayed HTTP exchange. A gateway sends {@link Kind#GEN}
 * (the client's request) and, when the client goes away, {@link Kind#CANCEL}; the engine node answers with
 * {@link Kind#HEAD} (status and headers), any number of {@link Kind#DATA} frames and one {@link Kind#END}, or one
 * {@link Kind#FAIL}. A DATA frame carries every byte the engine's API wrote since the previous frame — one engine
 * step's tokens, or more when steps come faster than the frames go — never one message per token.
 *
 * @param kind    what the frame is
 * @param id      the exchange id the gateway chose (every frame of one exchange carries it)
 * @param status  HTTP status (HEAD, FAIL), else 0
 * @param address GEN: the gateway's address the answers go to; HEAD: the engine node's name; else null
 * @param text    GEN: "METHOD /path?query"; FAIL: why it failed; CANCEL: why the gateway gave it up;
 *                else null
 * @param headers header names and values alternately (GEN: the client's, HEAD: the response's); never null
 * @param data    GEN: the request body; DATA, END: response bytes; never null
 * @param nanos   DATA, END: the engine node's {@code System.nanoTime()} when it sent the frame (comparable only on the
 *                same host), else 0
 */
public record ClusterFrame(Kind kind, String id, int status, String address, String text, List<String> headers,
                           byte[] data, long nanos) {
    /** Frame kinds; the ordinal is the wire tag. */
    public enum Kind { GEN, CANCEL, HEAD, DATA, END, FAIL }

    private static final byte[] NONE = new byte[0];

    public ClusterFrame {
        headers = headers == null ? List.of() : List.copyOf(headers);
        data = data == null ? NONE : data;
        if (headers.size() % 2 != 0) throw new IllegalArgumentException("headers must be name/value pairs, got " + headers.size() + " strings");
    }

    static ClusterFrame gen(String id, String replyTo, String methodAndUri, List<String> headers, byte[] body) {
        return new ClusterFrame(Kind.GEN, id, 0, replyTo, methodAndUri, headers, body, 0);
    }

    static ClusterFrame cancel(String id, String why) {
        return new ClusterFrame(Kind.CANCEL, id, 0, null, why, null, null, 0);
    }

    static ClusterFrame head(String id, int status, String engine, List<String> headers) {
        return new ClusterFrame(Kind.HEAD, id, status, engine, null, headers, null, 0);
    }

    static ClusterFrame data(String id, byte[] bytes, boolean end) {
        return new ClusterFrame(end ? Kind.END : Kind.DATA, id, 0, null, null, null, bytes, System.nanoTime());
    }

    static ClusterFrame fail(String id, int status, String why) {
        return new ClusterFrame(Kind.FAIL, id, status, null, why, null, null, 0);
    }

    @Override
    public String toString() {
        return kind + "[" + id + (status != 0 ? " " + status : "") + (text != null ? " " + text : "") + ", " + data.length + " bytes]";
    }
}
