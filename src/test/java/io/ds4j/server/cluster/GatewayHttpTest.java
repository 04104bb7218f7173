package io.ds4j.server.cluster;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;
import io.ds4j.server.FrontChecks;
import io.ds4j.server.LogCapture;
import io.ds4j.server.config.ServerConfig;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * A cluster gateway alone in its cluster (no engine node): what its HTTP front answers by itself, before anything
 * could be relayed. It runs in this JVM, on loopback, in a cluster of its own name.
 */
class GatewayHttpTest {
    static ClusterNode node;

    @BeforeAll
    static void start() throws Exception {
        node = ClusterNode.start(ServerConfig.parse(null, "test", config()), null, config(), null).await();
    }

    /** A lone gateway's configuration, in a cluster of its own name. */
    static Map<String, Object> config() {
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("server.host", "127.0.0.1");
        o.put("server.port", 0);
        o.put("limits.headerReadTimeoutMs", 300);
        o.put("limits.bodyReadTimeoutMs", 300);
        o.put("cluster.enabled", true);
        o.put("cluster.role", "gateway");
        o.put("cluster.port", 0);
        o.put("cluster.name", "gateway-test-" + Long.toHexString(ThreadLocalRandom.current().nextLong()));
        o.put("server.cors.allowedOrigins", List.of("http://app.example"));
        return o;
    }

    @AfterAll
    static void stop() {
        if (node != null) node.close().await();
    }

    /** The raw answer to a request without a body, read to the end (the connection closes after it). */
    static String raw(String method, String path) throws Exception {
        return raw(node.port(), method, path, "");
    }

    /** {@link FrontChecks#raw(int, String, String, String)}. */
    static String raw(int port, String method, String path, String headers) throws Exception {
        return FrontChecks.raw(port, method, path, headers);
    }

    @Test
    void aMalformedPercentEscapeInThePathIsA400NamingItAndOneLogLine() throws Exception {
        // escapes that are not UTF-8, or a NUL, too: refused before relaying, as on a single server
        List<String> paths = List.of("/v1/models/%ZZ", "/health%", "/%ZZ", "/v1/chat/completions%zz", "/v1/models/%FF", "/v1/models/%00");
        try (LogCapture log = new LogCapture()) {
            for (String path : paths) {
                String answer = raw("GET", path);
                assertTrue(answer.startsWith("HTTP/1.1 400"), path + ": " + answer);
                assertTrue(answer.toLowerCase(Locale.ROOT).contains("content-type: application/json"), answer);
                JsonNode e = Json.MAPPER.readTree(answer.substring(answer.indexOf("\r\n\r\n") + 4)).get("error");
                assertEquals("invalid_path", e.get("code").asText(), answer);
                assertTrue(e.get("message").asText().startsWith("the request path") && e.get("message").asText().contains("percent-escape"), answer);
            }
            for (String path : paths) {
                List<String> lines = log.linesWith(" " + path + " ");
                assertEquals(1, lines.size(), path + ": " + lines);
                assertTrue(lines.getFirst().contains("[INFO]") && lines.getFirst().contains("rejected with 400"), lines.getFirst());
            }
            assertTrue(log.linesWith("Unhandled exception").isEmpty() && log.linesWith("\tat ").isEmpty(), log.lines().toString());
        }
    }

    @Test
    void aConnectionWithoutACompleteRequestHeadIsClosed() throws Exception {
        for (String part : new String[]{"GET /health HTTP/1.1\r\nHost: x\r\n", ""}) {
            try (Socket s = new Socket("127.0.0.1", node.port())) {
                s.setSoTimeout(30_000);  // a bound for a broken server, far above the deadline under test
                s.getOutputStream().write(part.getBytes(StandardCharsets.US_ASCII));
                // read to the end: it comes only because the gateway closes the connection, without an answer
                assertEquals(0, s.getInputStream().readAllBytes().length, part);
            }
        }
    }

    /**
     * The status line and the header lines of a raw answer but its length, in order of their text; an X-Request-Id's
     * value is left out (each request has its own), the header itself kept.
     */
    static java.util.SortedSet<String> headLinesButLength(String answer) {
        java.util.SortedSet<String> s = new java.util.TreeSet<>();
        for (String l : answer.substring(0, answer.indexOf("\r\n\r\n")).split("\r\n")) s.add(io.ds4j.server.FrontChecks.withoutRequestId(l));
        s.removeIf(l -> l.toLowerCase(Locale.ROOT).startsWith("content-length:"));
        return s;
    }

    @Test
    void headIsAnsweredWhereverGetIs() throws Exception {
        for (String path : List.of("/v1/models", "/models", "/props", "/metrics", "/health", "/v1/health")) {
            String get = raw("GET", path), head = raw("HEAD", path);
            assertTrue(head.endsWith("\r\n\r\n"), "no body: " + head);
            // GET's status and headers; its length too, but /props and /metrics change between two requests
            assertEquals(headLinesButLength(get), headLinesButLength(head), path);
            assertTrue(head.toLowerCase(Locale.ROOT).contains("content-length: "), head);
            if (!path.equals("/props") && !path.equals("/metrics"))
                assertTrue(head.contains("content-length: " + get.substring(get.indexOf("\r\n\r\n") + 4).getBytes(StandardCharsets.UTF_8).length), head);
        }
        // the playground's files and paths with no route: GET's headers, its Content-Type and length included
        FrontChecks.staticHeadsMatchGets(node.port());
        FrontChecks.unsatisfiableRangeIsA416WithTheErrorBody(node.port());
        FrontChecks.undecodableRequestsGetTheJsonError(node.port());
    }

    /** What README says a gateway's /metrics holds: the cluster's series and its own process's, none of the engines'. */
    @Test
    void aGatewaysMetricsHoldTheClustersSeriesAndItsProcesssOwn() throws Exception {
        String m = raw("GET", "/metrics");
        assertTrue(m.startsWith("HTTP/1.1 200"), m);
        java.util.Set<String> families = new java.util.TreeSet<>();
        for (String l : m.substring(m.indexOf("\r\n\r\n") + 4).split("\n"))
            if (!l.isEmpty() && !l.startsWith("#")) families.add(l.replaceFirst("[_:].*", ""));
        assertTrue(m.contains("\nds4j:cluster_engines_ready ") && m.contains("\nds4j:cluster_engines_known "), m);
        assertEquals(java.util.Set.of("ds4j", "jvm", "process", "system", "vertx"), families, m);
    }

    @Test
    void aRequestWhoseBodyLengthIsAmbiguousIsRefusedAndItsConnectionClosed() throws Exception {
        FrontChecks.ambiguousFramingIsRefusedAndNothingAfterItServed(node.port());
    }

    /** The gateway's own refusals in the route's API shape, as a single server's (BadInputTest runs the same check). */
    @Test
    void aFormBodyIsA415InItsRoutesShape() throws Exception {
        FrontChecks.aFormBodyIsA415InItsRoutesShape(node.port());
    }

    @Test
    void anOverLongRequestLineIsA414WithTheErrorBody() throws Exception {
        FrontChecks.overLongRequestLineIsA414WithTheErrorBody(node.port());
    }

    @Test
    void rangesPastALongAndStaleIfRangesAreServedAsRfc9110Says() throws Exception {
        FrontChecks.rangesPastALongAndStaleIfRangesAreServedAsRfc9110Says(node.port());
    }

    @Test
    void optionsOnAnUnknownPathIsAnsweredHereNotRelayed() throws Exception {
        FrontChecks.optionsOnAnUnknownPathIsAnsweredAsOnASingleServer(node.port(), "http://app.example");
        Map<String, Object> keyed = config();
        keyed.put("server.apiKeys", List.of("k1"));
        ClusterNode withKeys = ClusterNode.start(ServerConfig.parse(null, "test", keyed), null, keyed, null).await();
        try {
            FrontChecks.optionsOnAnUnknownApiPathNeedsTheKeyButAPreflightDoesNot(withKeys.port(), "http://app.example");
        } finally {
            withKeys.close().await();
        }
    }

    @Test
    void everyKeyARequestSendsMustBeValidAsOnASingleServer() throws Exception {
        Map<String, Object> keyed = config();
        keyed.put("server.apiKeys", List.of("k1"));
        ClusterNode withKeys = ClusterNode.start(ServerConfig.parse(null, "test", keyed), null, keyed, null).await();
        try {
            FrontChecks.everyKeyARequestSendsMustBeValid(withKeys.port());
        } finally {
            withKeys.close().await();
        }
    }

    /** Sends a request's head and part of its body, then nothing more; returns everything answered, to the close. */
    static String stall(String headAndPart) throws Exception {
        try (Socket s = new Socket("127.0.0.1", node.port())) {
            s.setSoTimeout(30_000);  // a bound for a broken server, far above the deadline under test
            s.getOutputStream().write(headAndPart.getBytes(StandardCharsets.US_ASCII));
            return new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        }
    }

    @Test
    void aBodyThatStopsArrivingIsBoundedAsOnASingleServer() throws Exception {
        String relayed = stall("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 200\r\n\r\n{\"messages\":");
        assertTrue(relayed.startsWith("HTTP/1.1 408"), relayed);
        assertTrue(relayed.contains("\"request_timeout\"") && relayed.contains("12 of the 200 bytes declared came within 300 ms"), relayed);
        // on the Messages route in Anthropic's shape, as a single server answers it
        String messages = stall("POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 200\r\n\r\n{\"messages\":");
        assertTrue(messages.startsWith("HTTP/1.1 408"), messages);
        JsonNode m = Json.MAPPER.readTree(messages.substring(messages.indexOf("\r\n\r\n") + 4));
        assertEquals("error", m.path("type").asText(), messages);
        assertEquals("invalid_request_error", m.path("error").path("type").asText(), messages);
        assertTrue(m.path("error").path("message").asText().contains("12 of the 200 bytes declared came within 300 ms"), messages);
        // answered without reading the body, then closed once the rest of it is late
        String health = stall("GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc");
        assertTrue(health.startsWith("HTTP/1.1 503") && health.contains("\"engines\""), health);
    }

    @Test
    void anUnknownPathIsA404AtOnceEvenWhenItsBodyNeverCompletes() throws Exception {
        // as on a single server: answered by the gateway itself, without relaying or waiting for the body
        io.ds4j.server.SlowClientTestAccess.unknownPathsAreAnsweredWithoutWaitingForTheirBodies(node.port());
    }

    @Test
    void aGatewayLogsAtItsConfiguredLevel() throws Exception {
        // from info (as every process starts), a gateway configured for debug logs its own DEBUG lines, as a single server
        io.ds4j.server.LogLevels.apply("info");
        Map<String, Object> debug = config();
        debug.put("log.level", "debug");
        ClusterNode verbose = ClusterNode.start(ServerConfig.parse(null, "test", debug), null, debug, null).await();
        try (LogCapture log = new LogCapture()) {
            String a = raw(verbose.port(), "GET", "/app.js", "Range: bytes=99999999-\r\n");
            assertTrue(a.startsWith("HTTP/1.1 416"), a);
            List<String> line = log.linesWith("answered with 416");
            assertFalse(line.isEmpty(), "no DEBUG line for the 416: " + log.lines());
            assertTrue(line.getFirst().contains("[DEBUG]"), line.toString());
        } finally {
            verbose.close().await();
            io.ds4j.server.LogLevels.apply("info");
        }
    }

    /** The gateway's own 404 and 405 are logged with the reason at INFO, as its other refusals and a single server's. */
    @Test
    void aGatewaysUnknownRoutesAndWrongMethodsAreLogged() throws Exception {
        try (LogCapture log = new LogCapture()) {
            assertTrue(raw(node.port(), "GET", "/v1/nothing", "").startsWith("HTTP/1.1 404"));
            assertTrue(raw(node.port(), "GET", "/v1/chat/completions", "").startsWith("HTTP/1.1 405"));
            List<String> lines = log.linesWith("GET /v1/nothing rejected with 404: no route for GET /v1/nothing");
            assertEquals(1, lines.size(), log.lines().toString());
            assertTrue(lines.getFirst().contains("[INFO]"), lines.getFirst());
            // named by the id its answer carries, as a single server's refusals are
            assertTrue(lines.getFirst().matches("(?s).*request req-[A-Za-z0-9]{24}: GET /v1/nothing rejected.*"), lines.getFirst());
            assertEquals(1, log.linesWith("GET /v1/chat/completions rejected with 405: GET is not allowed on /v1/chat/completions").size(),
                    log.lines().toString());
        }
    }

    @Test
    void theGatewaysOwnAnswersCarryCorsHeadersForAnAllowedOrigin() throws Exception {
        Map<String, Object> keyed = config();
        keyed.put("server.apiKeys", List.of("k1"));
        ClusterNode withKeys = ClusterNode.start(ServerConfig.parse(null, "test", keyed), null, keyed, null).await();
        try {
            // health, models (503: no engine), props, 404, 405; then a 401 and a keyed 200 from a gateway with a key
            Map<String, String> answers = new LinkedHashMap<>();
            for (String[] r : new String[][]{{"GET", "/health"}, {"HEAD", "/health"}, {"GET", "/v1/models"}, {"GET", "/props"},
                    {"GET", "/v1/nothing"}, {"GET", "/v1/chat/completions"}})
                answers.put(r[0] + " " + r[1], raw(node.port(), r[0], r[1], "Origin: http://app.example\r\n"));
            answers.put("401 GET /v1/models", raw(withKeys.port(), "GET", "/v1/models", "Origin: http://app.example\r\n"));
            answers.put("keyed GET /props", raw(withKeys.port(), "GET", "/props",
                    "Origin: http://app.example\r\nAuthorization: Bearer k1\r\n"));
            assertTrue(answers.get("GET /v1/nothing").startsWith("HTTP/1.1 404"), answers.get("GET /v1/nothing"));
            assertTrue(answers.get("GET /v1/chat/completions").startsWith("HTTP/1.1 405"), answers.get("GET /v1/chat/completions"));
            assertTrue(answers.get("401 GET /v1/models").startsWith("HTTP/1.1 401"), answers.get("401 GET /v1/models"));
            for (Map.Entry<String, String> a : answers.entrySet()) {
                String head = a.getValue().substring(0, a.getValue().indexOf("\r\n\r\n")).toLowerCase(Locale.ROOT);
                assertTrue(head.contains("\r\naccess-control-allow-origin: http://app.example"), a.getKey() + ": " + a.getValue());
                assertTrue(head.contains("\r\nvary: origin"), a.getKey() + ": " + a.getValue());
            }
            // an origin not on the list gets none, as from a single server
            String other = raw(node.port(), "GET", "/health", "Origin: http://evil.example\r\n");
            assertFalse(other.toLowerCase(Locale.ROOT).contains("access-control-allow-origin"), other);
        } finally {
            withKeys.close().await();
        }
    }
}
