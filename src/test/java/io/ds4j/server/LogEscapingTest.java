package io.ds4j.server;

import io.vertx.junit5.VertxExtension;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Text a client sends reaches the log with its control characters escaped, once for every log line: a line feed in a
 * model id cannot start a forged line, a NUL is not written.
 */
@ExtendWith(VertxExtension.class)
class LogEscapingTest {
    static final String FORGED = "12:34:56.789 [ERROR] forged";

    @Test
    void controlCharactersAreEscapedAndTheRestKept() {
        assertEquals("plain text, tabs\tand üñíçødé kept", LogEscaping.escape("plain text, tabs\tand üñíçødé kept"));
        assertEquals("x\\n" + FORGED, LogEscaping.escape("x\n" + FORGED));
        assertEquals("a\\r\\nb\\u0000c\\u001b[31md\\u007fe\\u0085f\\u2028g",
                LogEscaping.escape("a\r\nb\u0000c\u001b[31md\u007fe\u0085f\u2028g"));
    }

    @Test
    void clientTextInTheLogCannotForgeALineOrWriteANul() throws Exception {
        try (TestServer t = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript), Map.of());
             LogCapture log = new LogCapture()) {
            // a model id in the path, decoded by the router: its 404 is logged with the id
            TestServer.Resp r = t.get("/v1/models/x%0A12:34:56.789%20%5BERROR%5D%20forged");
            assertEquals(404, r.status(), r.body());
            // the same in a chat request's model field, and a NUL
            assertEquals(404, t.post("/v1/chat/completions", TestServer.chat("Hi", "").replace("\"scripted\"",
                    "\"y\\n" + FORGED + "\"")).status());
            // a NUL in a model's name reaches the log escaped (one in the path is refused before any route: 400
            // invalid_path, RequestFramingTest.anEscapedNulIsRefused)
            assertEquals(400, t.get("/v1/models/nul%00byte").status());
            assertEquals(404, t.post("/v1/chat/completions", TestServer.chat("Hi", "").replace("\"scripted\"",
                    "\"nul\\u0000byte\"")).status());
            assertTrue(TestServer.eventually(5000, () -> log.linesWith("nul\\u0000byte").size() == 1), log.lines().toString());
            List<String> lines = log.lines();
            for (String l : lines) {
                assertFalse(l.startsWith(FORGED), "a forged line: " + lines);
                assertFalse(l.indexOf('\u0000') >= 0, "a NUL in the log: " + l);
            }
            assertEquals(1, log.linesWith("'x\\n" + FORGED + "' does not exist").size(), lines.toString());
            assertEquals(1, log.linesWith("'y\\n" + FORGED + "' does not exist").size(), lines.toString());
        }
    }
}
