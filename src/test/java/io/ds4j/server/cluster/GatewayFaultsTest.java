package io.ds4j.server.cluster;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;
import io.ds4j.server.LogCapture;
import io.ds4j.server.config.ServerConfig;
import io.vertx.core.Vertx;
import io.vertx.core.json.JsonObject;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ThreadLocalRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * A real gateway (in this JVM) with scripted engine nodes behind it: a second cluster member of this test's own that
 * announces engines of its choosing (any model, status and announcement period) and answers the frames a gateway sends
 * them as the test says (an answer, the head of a stream and then nothing, silence). What a gateway decides when an
 * engine serves another model, stops announcing itself, or goes away while it answers.
 */
class GatewayFaultsTest {
    /** The gateway's cluster.engineTimeoutMs: short, so that a silent engine is dropped quickly. */
    static final int TIMEOUT_MS = 2_000;
    static ClusterNode gateway;
    static Vertx member;
    /** The scripted engines, by node id. */
    static final Map<String, Fake> fakes = new ConcurrentHashMap<>();

    /** One scripted engine node. */
    static final class Fake {
        final String node, name;
        volatile JsonObject ann;
        /** Whether it still announces itself. */
        volatile boolean announcing = true;
        /** What it does with a request: "answer" (a 200 naming it), "stream" (a stream's head and events, then nothing), "hold". */
        volatile String mode = "answer";
        /** The stream's first bytes in "stream" mode. */
        volatile String streamStart = "data: {\"x\":1}\n\n";
        final List<ClusterFrame> got = new CopyOnWriteArrayList<>();
        final List<String> cancelled = new CopyOnWriteArrayList<>();

        Fake(String node, String status, String model, int announceMs) {
            this.node = node;
            this.name = "fake-" + node;
            ann = new JsonObject().put("node", node).put("name", name).put("status", status).put("running", 0).put("waiting", 0)
                    .put("maxActive", 4).put("maxQueue", 4).put("announceMs", announceMs);
            if (model != null) ann.put("model", new JsonObject().put("id", model).put("n_ctx", 4096));
        }

        void serve(String status, String model) {
            JsonObject a = ann.copy().put("status", status);
            if (model != null) a.put("model", new JsonObject().put("id", model).put("n_ctx", 4096)); else a.remove("model");
            ann = a;
        }
    }

    @BeforeAll
    static void start() throws Exception {
        String name = "faults-test-" + Long.toHexString(ThreadLocalRandom.current().nextLong());
        int[] ports = io.ds4j.server.FreePorts.distinct(2);
        int gp = ports[0], fp = ports[1];
        Map<String, Object> go = GatewayDrainTest.config("gateway", gp, name, fp);
        go.put("cluster.engineTimeoutMs", TIMEOUT_MS);
        go.put("cluster.announceMs", 100);
        gateway = ClusterNode.start(ServerConfig.parse(null, "test", go), null, go, null).await();
        Map<String, Object> fo = GatewayDrainTest.config("engine", fp, name, gp);
        ServerConfig fc = ServerConfig.parse(null, "test", fo);
        member = io.ds4j.server.Ds4jServer.vertxBuilder(io.ds4j.server.Ds4jServer.newRegistry(), fc,
                ClusterSupport.create(fc.cluster()).manager()).buildClustered().await();
        ClusterSupport.registerCodec(member);
        member.setPeriodic(100, t -> {
            for (Fake f : fakes.values()) if (f.announcing) member.eventBus().publish(EngineNode.ANNOUNCE, f.ann);
        });
    }

    @AfterAll
    static void stop() {
        if (gateway != null) gateway.close().await();
        if (member != null) member.close().await();
    }

    /** Adds a scripted engine that announces itself and serves its address; returns once the gateway knows it. */
    static Fake engine(String node, String status, String model, int announceMs) throws Exception {
        Fake f = new Fake(node, status, model, announceMs);
        member.eventBus().<ClusterFrame>consumer(EngineNode.address(node), m -> {
            ClusterFrame g = m.body();
            if (g.kind() == ClusterFrame.Kind.CANCEL) {
                f.cancelled.add(g.id());
                return;
            }
            f.got.add(g);
            m.reply(ClusterFrame.head(g.id(), 100, f.name, null));
            switch (f.mode) {
                case "answer" -> {
                    member.eventBus().send(g.address(), ClusterFrame.head(g.id(), 200, f.name, List.of("content-type", "application/json")));
                    member.eventBus().send(g.address(), ClusterFrame.data(g.id(), ("{\"served_by\":\"" + f.name + "\"}").getBytes(StandardCharsets.UTF_8), true));
                }
                case "stream" -> {
                    member.eventBus().send(g.address(), ClusterFrame.head(g.id(), 200, f.name, List.of("content-type", "text/event-stream")));
                    member.eventBus().send(g.address(), ClusterFrame.data(g.id(), f.streamStart.getBytes(StandardCharsets.UTF_8), false));
                }
                default -> { }
            }
        }).completion().await();
        fakes.put(node, f);
        assertTrue(GatewayRelayTest.eventually(30_000, () -> props().contains("\"" + f.name + "\"")), "the gateway knows " + f.name);
        return f;
    }

    static String props() {
        try {
            return GatewayHttpTest.raw(gateway.port(), "GET", "/props", "");
        } catch (Exception e) {
            return e.toString();
        }
    }

    /** Stops a scripted engine's announcements and waits until the gateway has dropped it. */
    static void silence(Fake f) throws Exception {
        f.announcing = false;
        assertTrue(GatewayRelayTest.eventually(TIMEOUT_MS * 10L, () -> !props().contains("\"" + f.name + "\"")), "the gateway dropped " + f.name);
    }

    static String post(String path, String json) throws Exception {
        return GatewayRelayTest.post(gateway.port(), path, "", json);
    }

    /** Posts on a thread of its own (a request an engine holds), its answer, or what failed, into answer[0]. */
    static Thread postBeside(String path, String json, String[] answer) {
        return Thread.ofVirtual().start(() -> {
            try {
                answer[0] = post(path, json);
            } catch (Exception x) {
                answer[0] = x.toString();
            }
        });
    }

    static JsonNode body(String answer) throws Exception {
        return Json.MAPPER.readTree(answer.substring(answer.indexOf("\r\n\r\n") + 4));
    }

    @Test
    void requestsGoOnlyToEnginesServingTheirModel() throws Exception {
        Fake a = engine("route-a", "ready", "model-a", 100);
        Fake b = engine("route-b", "loading", null, 100);
        try {
            // b loads: a request for a model no ready engine serves may be b's, so it is a 503 for now, never a's 404
            String loading = post("/v1/chat/completions", "{\"model\":\"model-b\",\"messages\":[]}");
            assertTrue(loading.startsWith("HTTP/1.1 503") && loading.contains("Retry-After: 5"), loading);
            assertTrue(body(loading).at("/error/message").asText().contains("still loading"), loading);
            b.serve("ready", "model-b");
            assertTrue(GatewayRelayTest.eventually(10_000, () -> props().contains("\"model-b\"")));
            for (int i = 0; i < 6; i++) {
                assertTrue(post("/v1/chat/completions", "{\"model\":\"model-b\",\"messages\":[]}").contains("\"served_by\":\"fake-route-b\""));
                assertTrue(post("/v1/chat/completions", "{\"model\":\"model-a\",\"messages\":[]}").contains("\"served_by\":\"fake-route-a\""));
            }
            // /v1/models/{id} goes to an engine serving that id
            assertTrue(GatewayHttpTest.raw(gateway.port(), "GET", "/v1/models/model-b", "").contains("\"served_by\":\"fake-route-b\""));
            // with a trailing slash too, which is no part of the id (as on a single server)
            String slash = GatewayHttpTest.raw(gateway.port(), "GET", "/v1/models/model-b/", "");
            assertTrue(slash.contains("\"served_by\":\"fake-route-b\""), slash);
            // a model no engine serves: the gateway's own 404, naming the cluster's models
            String unknown = post("/v1/chat/completions", "{\"model\":\"nope\",\"messages\":[]}");
            assertTrue(unknown.startsWith("HTTP/1.1 404"), unknown);
            JsonNode e = body(unknown).get("error");
            assertEquals("model_not_found", e.get("code").asText(), unknown);
            assertEquals("model", e.get("param").asText(), unknown);
            String prefix = "model: 'nope' does not exist; this cluster serves ";
            assertTrue(e.get("message").asText().startsWith(prefix), unknown);
            // the models of this gateway's other tests whose engines went away are listed as such
            List<String> listed = List.of(e.get("message").asText().substring(prefix.length()).split(", "));
            assertTrue(listed.contains("'model-a'") && listed.contains("'model-b'"), unknown);
            for (String m : listed)
                assertTrue(m.equals("'model-a'") || m.equals("'model-b'") || m.endsWith("' (its engine nodes are gone for now)"), unknown);
            assertFalse(unknown.contains(GatewayVerticle.ENGINE_HEADER), "not an engine's answer: " + unknown);
            String unknownId = GatewayHttpTest.raw(gateway.port(), "GET", "/v1/models/nope", "");
            assertTrue(unknownId.startsWith("HTTP/1.1 404") && unknownId.contains("'model-a', 'model-b'"), unknownId);
            // b goes: its model is down for now (503 naming why), not unknown
            b.mode = "hold";
            {
                // a request b took and had not answered is re-sent, but only to an engine of its model: there is none
                String[] held = new String[1];
                Thread t = postBeside("/v1/chat/completions", "{\"model\":\"model-b\",\"messages\":[]}", held);
                assertTrue(GatewayRelayTest.eventually(10_000, () -> b.got.size() == 8), "b holds the request");
                silence(b);
                t.join(10_000);
                assertTrue(held[0].startsWith("HTTP/1.1 503"), held[0]);
                assertTrue(body(held[0]).at("/error/message").asText().startsWith("no engine node serving 'model-b' is in the cluster now"
                        + " (engine node 'fake-route-b' stopped announcing itself for " + TIMEOUT_MS + " ms (cluster.engineTimeoutMs))"), held[0]);
                String down = post("/v1/chat/completions", "{\"model\":\"model-b\",\"messages\":[]}");
                assertTrue(down.startsWith("HTTP/1.1 503") && down.contains("Retry-After: 5"), down);
                assertTrue(body(down).at("/error/message").asText().contains("stopped announcing itself"), down);
            }
            assertEquals(6, a.got.size(), "a got model-a's requests only");
            // a request without a model goes to any ready engine, which serves it with its own
            assertTrue(post("/v1/chat/completions", "{\"messages\":[]}").contains("\"served_by\":\"fake-route-a\""));
        } finally {
            a.announcing = false;
            b.announcing = false;
            fakes.clear();
        }
    }

    /**
     * A stream on path relayed from a scripted engine (for its model) that sends start and then falls
     * silent until the gateway drops it; returns what the client read: the head, start and how the stream ended.
     */
    static String lostStream(Fake f, String path, String start) throws Exception {
        return lostStream(f, path, start, () -> { });
    }

    /** As {@link #lostStream(Fake, String, String)}, calling beforeSilence once the stream started. */
    static String lostStream(Fake f, String path, String start, Runnable beforeSilence) throws Exception {
        f.mode = "stream";
        f.streamStart = start;
        try (Socket s = new Socket("127.0.0.1", gateway.port())) {
            s.setSoTimeout(30_000);
            byte[] b = ("{\"model\":\"" + f.ann.getJsonObject("model").getString("id") + "\",\"stream\":true,\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}")
                    .getBytes(StandardCharsets.UTF_8);
            s.getOutputStream().write(("POST " + path + " HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n"
                    + "Content-Length: " + b.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
            s.getOutputStream().write(b);
            BufferedReader in = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8));
            StringBuilder got = new StringBuilder();
            String lastOfStart = start.strip().lines().reduce((x, y) -> y).orElseThrow();
            for (String line; (line = in.readLine()) != null; ) {
                got.append(line).append('\n');
                if (line.equals(lastOfStart)) break;
            }
            beforeSilence.run();
            silence(f);
            for (String line; (line = in.readLine()) != null; ) got.append(line).append('\n');
            return got.toString();
        }
    }

    /** The body of an answer lostStream read (HTTP/1.0: no chunked encoding, the stream as the client's SSE reader reads it). */
    static String events(String raw) {
        return raw.substring(raw.indexOf("\n\n") + 2);
    }

    @Test
    void anEngineLostMidStreamEndsItInTheShapeOfTheRequestsApi() throws Exception {
        String why = "engine node 'fake-lost-anthropic' stopped announcing itself for " + TIMEOUT_MS + " ms (cluster.engineTimeoutMs)"
                + " while streaming this response";
        String anthropic = events(lostStream(engine("lost-anthropic", "ready", "lost-anthropic", 100), "/v1/messages",
                "event: message_start\ndata: {\"type\":\"message_start\"}\n\n"));
        assertTrue(anthropic.contains("event: message_start\ndata: {\"type\":\"message_start\"}\n\nevent: error\ndata: "
                + "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"" + why + "\"}}\n\n"), anthropic);
        String responses = events(lostStream(engine("lost-responses", "ready", "lost-responses", 100), "/v1/responses",
                "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0}\n\n"
                        + "event: response.in_progress\ndata: {\"type\":\"response.in_progress\",\"sequence_number\":1}\n\n"));
        assertTrue(responses.contains("\"sequence_number\":1}\n\nevent: error\ndata: {\"type\":\"error\",\"code\":\"engine_lost\",\"message\":\""
                + why.replace("anthropic", "responses") + "\",\"param\":null,\"sequence_number\":2}\n\n"), responses);
        // chat's stream keeps OpenAI's data frame
        String chat = events(lostStream(engine("lost-chat", "ready", "lost-chat", 100), "/v1/chat/completions", "data: {\"x\":1}\n\n"));
        assertTrue(chat.contains("data: {\"x\":1}\n\ndata: {\"error\":{\"message\":\"" + why.replace("anthropic", "chat")
                + "\",\"type\":\"server_error\",\"param\":null,\"code\":\"engine_lost\"}}\n\n"), chat);
        fakes.clear();
    }

    @Test
    void requestsGivenUpOnASilentEngineAreCancelledThereAndASlowAnnouncerIsWarnedOf() throws Exception {
        try (LogCapture log = new LogCapture()) {
            // announcing every 5 s, against a timeout of 2 s: it would be dropped over and over
            Fake slow = engine("slow", "ready", "slow", 5_000);
            assertTrue(GatewayRelayTest.eventually(10_000, () -> !log.linesWith("'fake-slow' announces itself every 5000 ms").isEmpty()),
                    log.lines().toString());
            String warning = log.linesWith("'fake-slow' announces itself every 5000 ms").getFirst();
            assertTrue(warning.contains("[WARN]") && warning.contains("cluster.announceMs") && warning.contains("silent for "
                    + TIMEOUT_MS + " ms (cluster.engineTimeoutMs)"), warning);
            // once, not at each announcement
            Thread.sleep(500);
            assertEquals(1, log.linesWith("'fake-slow' announces itself every").size(), log.lines().toString());
            slow.announcing = false;
            // an engine that announces often enough is not warned of
            assertTrue(log.linesWith("'fake-silent' announces itself").isEmpty());
        }
        Fake f = engine("silent", "ready", "silent", 100);
        f.mode = "hold";
        String[] held = new String[1];
        Thread t = postBeside("/v1/chat/completions", "{\"model\":\"silent\",\"messages\":[]}", held);
        assertTrue(GatewayRelayTest.eventually(10_000, () -> f.got.size() == 1), "the engine holds the request");
        // it falls silent with a stream running too: the gateway gives up on both, and has the engine stop them
        String stream = lostStream(f, "/v1/chat/completions", "data: {\"x\":1}\n\n");
        t.join(10_000);
        assertTrue(held[0].startsWith("HTTP/1.1 503"), held[0]);
        assertTrue(stream.contains("\"engine_lost\""), stream);
        List<String> ids = f.got.stream().map(ClusterFrame::id).toList();
        assertTrue(GatewayRelayTest.eventually(5_000, () -> f.cancelled.containsAll(ids)), "cancelled " + f.cancelled + " of " + ids);
        fakes.clear();
    }

    @Test
    void anEngineLossSaysHowManyRequestsEndedAndHowManyWereReSent() throws Exception {
        Fake r1 = engine("resend-1", "ready", "resend", 100);
        r1.mode = "hold";
        String[] held = new String[2];
        List<Thread> threads = new java.util.ArrayList<>();
        for (int i = 0; i < 2; i++) {
            int n = i;
            threads.add(Thread.ofVirtual().start(() -> {
                try {
                    held[n] = post("/v1/chat/completions", "{\"model\":\"resend\",\"messages\":[]}");
                } catch (Exception x) {
                    held[n] = x.toString();
                }
            }));
        }
        assertTrue(GatewayRelayTest.eventually(10_000, () -> r1.got.size() == 2), "r1 holds both");
        try (LogCapture log = new LogCapture()) {
            // a stream on r1 too, which cannot be re-sent once it started; then another engine of the model comes
            Fake[] r2 = new Fake[1];
            String stream = lostStream(r1, "/v1/chat/completions", "data: {\"x\":1}\n\n", () -> {
                try {
                    r2[0] = engine("resend-2", "ready", "resend", 100);
                } catch (Exception x) {
                    throw new IllegalStateException(x);
                }
            });
            assertTrue(stream.contains("\"engine_lost\""), stream);
            for (Thread t : threads) t.join(10_000);
            for (String h : held) assertTrue(h.startsWith("HTTP/1.1 200") && h.contains("\"served_by\":\"fake-resend-2\""), h);
            List<String> lost = log.linesWith("engine node 'fake-resend-1' stopped announcing itself for " + TIMEOUT_MS + " ms (cluster.engineTimeoutMs); ");
            assertEquals(1, lost.size(), log.lines().toString());
            assertTrue(lost.getFirst().contains("; 3 request(s) in flight on it: 1 ended (their answers had begun), 2 re-sent to"
                    + " other engine nodes, 0 refused (no other engine node could take them); "), lost.getFirst());
            for (ClusterFrame g : r1.got.subList(0, 2)) {
                List<String> moved = log.linesWith("request " + g.id() + " (POST /v1/chat/completions) re-sent to engine node 'fake-resend-2' as ");
                assertEquals(1, moved.size(), log.lines().toString());
                assertTrue(moved.getFirst().contains("[INFO]") && moved.getFirst().endsWith(": engine node 'fake-resend-1' stopped announcing itself for "
                        + TIMEOUT_MS + " ms (cluster.engineTimeoutMs)"), moved.getFirst());
            }
            r2[0].announcing = false;
        }
        fakes.clear();
    }
}
