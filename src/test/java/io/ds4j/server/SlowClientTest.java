package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.vertx.junit5.VertxExtension;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Clients that hold resources without finishing their part: a body that stops arriving gets 408 and its connection
 * closed (a body already refused has its connection closed), and the server keeps serving the others.
 */
@ExtendWith(VertxExtension.class)
class SlowClientTest {
    TestServer server;
    final ScriptedBackend backend = new ScriptedBackend(TestServer::defaultScript);

    @AfterEach
    void stop() {
        if (server != null) server.close();
    }

    /** Sends the head and the first part of a request, then nothing more; returns everything the server answers. */
    static String stall(int port, String head, String part) throws Exception {
        try (Socket s = new Socket("127.0.0.1", port)) {
            s.setSoTimeout(30_000);  // a bound for a broken server, far above the timeout under test
            OutputStream o = s.getOutputStream();
            o.write((head + part).getBytes(StandardCharsets.UTF_8));
            o.flush();
            InputStream in = s.getInputStream();
            // read to the end: the server closes the connection after its answer
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        }
    }

    @Test
    void aBodyThatStopsArrivingGets408AndItsConnectionClosed() throws Exception {
        server = TestServer.scripted(backend, Map.of("limits.bodyReadTimeoutMs", 300));
        long forwards = backend.forwards.get();  // the warm-up's
        String part = "{\"messages\":[{\"role\":\"user\",";
        String fixed = stall(server.port, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + "Content-Length: 200\r\n\r\n", part);
        String chunked = stall(server.port, "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + "Transfer-Encoding: chunked\r\n\r\n", Integer.toHexString(part.length()) + "\r\n" + part + "\r\n");
        for (String answer : new String[]{fixed, chunked}) {
            assertTrue(answer.startsWith("HTTP/1.1 408"), answer);
            assertTrue(answer.toLowerCase(java.util.Locale.ROOT).contains("connection: close"), answer);
            JsonNode e = Json.MAPPER.readTree(answer.substring(answer.indexOf("\r\n\r\n") + 4)).get("error");
            assertEquals("request_timeout", e.get("code").asText(), answer);
            String m = e.get("message").asText();
            assertTrue(m.contains(part.length() + (answer == fixed ? " of the 200 bytes declared" : " bytes (chunked)"))
                    && m.contains("within 300 ms (limits.bodyReadTimeoutMs)"), m);
        }
        // a body refused for its declared size is answered at once; its connection is closed once the rest stops coming
        String refused = stall(server.port, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + "Content-Length: 5000000\r\n\r\n", part);
        assertTrue(refused.startsWith("HTTP/1.1 413") && refused.contains("request_too_large"), refused);
        assertTrue(server.get("/metrics").body().contains("ds4j:requests_rejected_total{reason=\"request_timeout\"} 2.0"), "counted as rejected");
        assertEquals(forwards, backend.forwards.get(), "nothing of the stalled requests reached the engine");
        assertEquals(200, server.post("/v1/chat/completions", TestServer.chat("Hi", "")).status(), "still serving");
    }
}
