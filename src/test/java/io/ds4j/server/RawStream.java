package io.ds4j.server;

import io.ds4j.json.Json;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;

/**
 * An HTTP/1.1 request over a plain socket, so a test can read part of an SSE stream and then drop the connection
 * the way a client that goes away does.
 */
final class RawStream implements AutoCloseable {
    private final Socket socket;
    private final BufferedReader in;
    final int status;

    RawStream(int port, String path, String body) throws IOException {
        this(port, path, body, true);
    }

    /** @param readHead wait for and read the status line and headers (a non-streaming answer only comes at the end) */
    RawStream(int port, String path, String body, boolean readHead) throws IOException {
        socket = new Socket("127.0.0.1", port);
        socket.setSoTimeout(30_000);
        byte[] b = body.getBytes(StandardCharsets.UTF_8);
        OutputStream o = socket.getOutputStream();
        o.write(("POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: "
                + b.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
        o.write(b);
        o.flush();
        in = new BufferedReader(new InputStreamReader(socket.getInputStream(), StandardCharsets.UTF_8));
        if (!readHead) {
            status = -1;
            return;
        }
        String statusLine = in.readLine();
        status = Integer.parseInt(statusLine.split(" ")[1]);
        for (String h = in.readLine(); h != null && !h.isEmpty(); h = in.readLine()) {
            // headers are not needed
        }
    }

    /** The next SSE data payload, or null at the end of the stream. */
    String nextData() throws IOException {
        for (String l = in.readLine(); l != null; l = in.readLine()) {
            if (l.startsWith("data: ")) return l.substring(6);
        }
        return null;
    }

    /**
     * Reads the stream up to its first error event and returns that payload, or null when the stream ends without one;
     * each payload before it goes to {@code before}.
     */
    String firstError(java.util.function.Consumer<com.fasterxml.jackson.databind.JsonNode> before) throws IOException {
        for (String d = nextData(); d != null; d = nextData()) {
            com.fasterxml.jackson.databind.JsonNode n = Json.MAPPER.readTree(d);
            if (n.has("error")) return d;
            before.accept(n);
        }
        return null;
    }

    /** Reads a non-SSE response body line (for a JSON error answer). */
    String readLine() throws IOException {
        return in.readLine();
    }

    @Override
    public void close() throws IOException {
        socket.close();
    }
}
