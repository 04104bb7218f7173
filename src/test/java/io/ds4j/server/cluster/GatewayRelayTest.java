package io.ds4j.server.cluster;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;
import io.ds4j.server.FrontChecks;
import io.ds4j.server.LogCapture;
import io.ds4j.server.ScriptedModelAccess;
import io.ds4j.server.ServerState;
import io.ds4j.server.config.ServerConfig;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import java.util.function.BooleanSupplier;

import static org.junit.jupiter.api.Assertions.*;

/**
 * A gateway with an engine behind it, both in this JVM (role {@code both}) on the scripted model: what the gateway does
 * with answers it relays — a stream whose client stopped reading, HEAD on relayed routes.
 */
class GatewayRelayTest {
    /** Tokens of the flood answer: each 64 bytes of text, listed with 20 alternatives (about 2 KB of SSE a token). */
    static final int FLOOD = 30_000;
    static final int BUFFER = 16 * 1024;
    static ClusterNode node;

    @BeforeAll
    static void start() throws Exception {
        int[] bar = ScriptedModelAccess.tokenizer().encode("=".repeat(64));
        int[] flood = new int[FLOOD];
        java.util.Arrays.fill(flood, bar[0]);
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("server.host", "127.0.0.1");
        o.put("server.port", 0);
        o.put("server.httpInstances", 1);
        o.put("limits.streamBufferBytes", BUFFER);
        o.put("cluster.enabled", true);
        o.put("cluster.role", "both");
        o.put("cluster.port", 0);
        // a shared 2-core machine can starve the announcements for a while: no false engine losses
        o.put("cluster.engineTimeoutMs", 60_000);
        o.put("cluster.name", "relay-test-" + Long.toHexString(ThreadLocalRandom.current().nextLong()));
        node = ClusterNode.start(ServerConfig.parse(null, "test", o), null, o, ScriptedModelAccess.provider(
                p -> ScriptedModelAccess.tokenizer().decode(p).contains("flood") ? flood : ScriptedModelAccess.defaultScript(p))).await();
        node.ready().await();
        assertTrue(eventually(60_000, () -> raw("GET", "/health").contains("\"ready\":1")), "the gateway sees its engine");
    }

    @AfterAll
    static void stop() {
        if (node != null) node.close().await();
    }

    static boolean eventually(long ms, BooleanSupplier c) throws InterruptedException {
        long end = System.currentTimeMillis() + ms;
        while (System.currentTimeMillis() < end) {
            if (c.getAsBoolean()) return true;
            Thread.sleep(20);
        }
        return c.getAsBoolean();
    }

    /** The raw answer of the gateway to a request without a body, read to the end (the connection closes after it). */
    static String raw(String method, String path) {
        try {
            return FrontChecks.raw(node.port(), method, path, "");
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    @Test
    void headOnARelayedRouteAnswersGetsStatusAndHeadersWithItsLength() {
        for (String path : List.of("/v1/models/scripted", "/models/scripted", "/v1/models/nope")) {
            String get = raw("GET", path), head = raw("HEAD", path);
            assertTrue(head.endsWith("\r\n\r\n"), "no body: " + head);
            int length = get.substring(get.indexOf("\r\n\r\n") + 4).getBytes(StandardCharsets.UTF_8).length;
            assertTrue(length > 0 && head.toLowerCase(Locale.ROOT).contains("content-length: " + length + "\r\n"), path + ": " + head);
            assertEquals(FrontChecks.headLinesButDate(get), FrontChecks.headLinesButDate(head), path + ": GET's status and headers");
        }
        assertTrue(raw("GET", "/models/scripted").startsWith("HTTP/1.1 200"), "served by the engine, as /v1/models/scripted");
    }

    @Test
    void theIgnoredFieldsAndNotesHeadersOfAnEngineReachTheClient() throws Exception {
        String got = post(node.port(), "/v1/chat/completions", "", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_token\":3}");
        assertTrue(got.startsWith("HTTP/1.1 200"), got);
        assertTrue(got.toLowerCase(Locale.ROOT).contains("\r\nx-ds4j-ignored-fields: max_token (did you mean max_tokens?)\r\n"), got);
        // and its notes header (a reasoning budget with thinking off)
        got = post(node.port(), "/v1/chat/completions", "", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":2,\"reasoning_effort\":\"none\","
                + "\"thinking_token_budget\":5}");
        assertTrue(got.startsWith("HTTP/1.1 200"), got);
        assertTrue(got.toLowerCase(Locale.ROOT).contains("\r\nx-ds4j-notes: its reasoning budget (5 tokens) is not used: thinking is off\r\n"), got);
    }

    /** The raw answer of the gateway to a chat completion of one token, with the given extra header lines. */
    static String chat(String headers) throws Exception {
        return post(node.port(), "/v1/chat/completions", headers, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":1}");
    }

    /** The values of the answer's X-Request-Id header lines. */
    static List<String> requestIds(String answer) {
        return answer.substring(0, answer.indexOf("\r\n\r\n")).lines()
                .filter(l -> l.toLowerCase(Locale.ROOT).startsWith("x-request-id:")).map(l -> l.substring(13).strip()).toList();
    }

    @Test
    void answersCarryTheRequestIdAsASingleServersDo() throws Exception {
        // relayed: the engine's header comes back, the client's id where it sent one, else the completion's id
        String own = chat("X-Request-Id: job-7\r\n");
        assertTrue(own.startsWith("HTTP/1.1 200"), own);
        assertEquals(List.of("job-7"), requestIds(own), own);
        String none = chat("");
        String bodyId = none.substring(none.indexOf("\"id\":\"") + 6, none.indexOf('"', none.indexOf("\"id\":\"") + 6));
        assertTrue(bodyId.startsWith("chatcmpl-"), none);
        assertEquals(List.of(bodyId), requestIds(none), "the completion's id, once: " + none);
        // answered by the gateway itself: the client's id, else one of the gateway's own
        assertEquals(List.of("probe-1"), requestIds(FrontChecks.raw(node.port(), "GET", "/health", "X-Request-Id: probe-1\r\n")));
        List<String> health = requestIds(raw("GET", "/health"));
        assertTrue(health.size() == 1 && health.get(0).startsWith("req-"), health.toString());
    }

    @Test
    void anAnthropicMessagesStreamIsRelayed() throws Exception {
        try (Socket s = new Socket("127.0.0.1", node.port())) {
            s.setSoTimeout(60_000);
            byte[] body = "{\"max_tokens\":20,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}".getBytes(StandardCharsets.UTF_8);
            s.getOutputStream().write(("POST /v1/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
                    + "Content-Length: " + body.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
            s.getOutputStream().write(body);
            String got = new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertTrue(got.startsWith("HTTP/1.1 200"), got);
            assertTrue(got.contains("event: message_start\n") && got.contains("\"text_delta\"") && got.contains("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"), got);
        }
    }

    /** A POST through a gateway, read to the end (the connection closes after it). */
    static String post(int port, String path, String headers, String json) throws Exception {
        try (Socket s = new Socket("127.0.0.1", port)) {
            s.setSoTimeout(60_000);
            byte[] body = json.getBytes(StandardCharsets.UTF_8);
            s.getOutputStream().write(("POST " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
                    + headers + "Content-Length: " + body.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
            s.getOutputStream().write(body);
            return new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        }
    }

    @Test
    void aKeyInXApiKeyReachesTheEngineAsTheGatewayAcceptedIt() throws Exception {
        // a gateway and an engine with the same keys (as README asks): Anthropic's SDKs send the key as x-api-key
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("server.host", "127.0.0.1");
        o.put("server.port", 0);
        o.put("server.httpInstances", 1);
        o.put("server.apiKeys", List.of("sk-gw"));
        o.put("cluster.enabled", true);
        o.put("cluster.role", "both");
        o.put("cluster.port", 0);
        o.put("cluster.engineTimeoutMs", 60_000);
        o.put("cluster.name", "keys-test-" + Long.toHexString(ThreadLocalRandom.current().nextLong()));
        ClusterNode keyed = ClusterNode.start(ServerConfig.parse(null, "test", o), null, o, ScriptedModelAccess.provider(
                ScriptedModelAccess::defaultScript)).await();
        try {
            keyed.ready().await();
            assertTrue(eventually(60_000, () -> {
                try {
                    return FrontChecks.raw(keyed.port(), "GET", "/health", "").contains("\"ready\":1");
                } catch (Exception e) {
                    return false;
                }
            }), "the gateway sees its engine");
            // a body both routes read alike
            String messages = "{\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}";
            for (String header : List.of("x-api-key: sk-gw\r\n", "X-Api-Key: sk-gw\r\n", "Authorization: Bearer sk-gw\r\n")) {
                String a = post(keyed.port(), "/v1/messages", header, messages);
                assertTrue(a.startsWith("HTTP/1.1 200") && a.contains("\"type\":\"message\""), header + a);
                String c = post(keyed.port(), "/v1/chat/completions", header, messages);
                assertTrue(c.startsWith("HTTP/1.1 200") && c.contains("\"chat.completion\""), header + c);
            }
            // a wrong key is still the gateway's own 401, never relayed
            String wrong = post(keyed.port(), "/v1/messages", "x-api-key: sk-nope\r\n", messages);
            assertTrue(wrong.startsWith("HTTP/1.1 401") && !wrong.toLowerCase(Locale.ROOT).contains(GatewayVerticle.ENGINE_HEADER.toLowerCase(Locale.ROOT)), wrong);
        } finally {
            keyed.close().await();
        }
    }

    @Test
    void expect100ContinueIsAnsweredBeforeTheBodyAsOnASingleServer() throws Exception {
        FrontChecks.expectContinueIsAnsweredBeforeTheBody(node.port(), "");
    }

    @Test
    void aRelayedGetHeadOrOptionsIsAnsweredWithoutWaitingForItsBody() throws Exception {
        FrontChecks.bodilessMethodsAreAnsweredWithoutWaitingForTheirBodies(node.port());
    }

    @Test
    void aStreamWhoseClientStopsReadingIsCancelledOnItsEngineOnceTheGatewayHoldsTooMuchOfIt() throws Exception {
        ServerState engine = node.engine().state();
        int before = engine.recent().size();
        String logprobs = "\"stream\":true,\"logprobs\":true,\"top_logprobs\":20";
        byte[] body = ("{\"messages\":[{\"role\":\"user\",\"content\":\"flood\"}]," + logprobs + ",\"max_tokens\":" + FLOOD + "}")
                .getBytes(StandardCharsets.UTF_8);
        try (LogCapture log = new LogCapture(); Socket s = new Socket()) {
            s.setReceiveBufferSize(2048);  // before connecting: the window the client offers stays small
            s.setSoTimeout(30_000);
            s.connect(new InetSocketAddress("127.0.0.1", node.port()));
            OutputStream o = s.getOutputStream();
            o.write(("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Request-Id: gw-slow\r\n"
                    + "Content-Length: " + body.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
            o.write(body);
            o.flush();
            // the client reads nothing while the answer is generated: the gateway gives up on it, and the engine stops it
            assertTrue(eventually(300_000, () -> engine.recent().size() > before), "the request ended");
            ServerState.JobRecord r = engine.recent().getLast();
            assertEquals("cancelled", r.outcome(), r.toString());
            assertTrue(r.generated() < FLOOD, "stopped before the end of its " + FLOOD + " tokens: " + r);
            // the connection is closed: what was sent before reads to its end, without the stream's end
            String got = new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertTrue(got.startsWith("HTTP/1.1 200"), got.substring(0, Math.min(200, got.length())));
            assertFalse(got.contains("[DONE]"), "the stream did not end normally");
            List<String> lines = log.linesWith("is not reading its stream");
            assertEquals(1, lines.size(), log.lines().toString());
            assertTrue(lines.getFirst().contains("GatewayVerticle") && lines.getFirst().contains("more than " + BUFFER
                    + " bytes wait unsent (limits.streamBufferBytes)"), lines.getFirst());
            // named by the client's id, as the engine's lines name it, and by the relay's
            assertTrue(lines.getFirst().matches("(?s).*request gw-slow: POST /v1/chat/completions \\(relayed as [0-9a-f]+\\): .*"),
                    lines.getFirst());
            // the engine's own lines on the request say why the gateway stopped it, not that a client went away
            String why = "its cluster gateway stopped it: the client did not read its stream at the gateway";
            assertTrue(eventually(10_000, () -> !log.linesWith("cancelled").stream().filter(l -> l.contains(why)).toList().isEmpty()),
                    log.lines().toString());
            assertTrue(log.linesWith("client disconnected").isEmpty(), log.lines().toString());
        }
        assertTrue(eventually(10_000, () -> engine.openExchanges() == 0), "no exchange left open on the engine");
        // a client that reads gets its whole stream under the same limit
        try (Socket s = new Socket("127.0.0.1", node.port())) {
            s.setSoTimeout(60_000);
            byte[] hi = ("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]," + logprobs + "}").getBytes(StandardCharsets.UTF_8);
            s.getOutputStream().write(("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
                    + "Content-Length: " + hi.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
            s.getOutputStream().write(hi);
            String got = new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertTrue(got.startsWith("HTTP/1.1 200") && got.contains("data: [DONE]"), got);
        }
        JsonNode health = Json.MAPPER.readTree(raw("GET", "/health").substring(raw("GET", "/health").indexOf("\r\n\r\n") + 4));
        assertEquals(1, health.path("engines").path("ready").asInt(), "the engine is still there: " + health);
    }

    @Test
    void anHttp10StreamThatAskedForKeepAliveEndsWithTheConnectionAsOnASingleServer() throws Exception {
        // HTTP/1.0 has no chunked encoding: without a length, the connection's close is the only end the client can see
        byte[] hi = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"stream\":true}".getBytes(StandardCharsets.UTF_8);
        try (Socket s = new Socket("127.0.0.1", node.port())) {
            s.setSoTimeout(15_000);  // far above the stream's time, well below an idle connection's close
            s.getOutputStream().write(("POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n"
                    + "Content-Type: application/json\r\nContent-Length: " + hi.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
            s.getOutputStream().write(hi);
            String got;
            try {
                got = new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            } catch (java.net.SocketTimeoutException e) {
                throw new AssertionError("the connection stayed open after the stream: the client cannot tell its end", e);
            }
            String head = got.substring(0, got.indexOf("\r\n\r\n")).toLowerCase(Locale.ROOT);
            assertTrue(head.startsWith("http/1.0 200") || head.startsWith("http/1.1 200"), got);
            assertTrue(head.contains("\r\nconnection: close"), got);
            assertFalse(head.contains("transfer-encoding"), got);
            assertTrue(got.endsWith("data: [DONE]\n\n"), got);
        }
    }
}
