package io.ds4j.server.cluster;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The cluster as an operator runs it: three JVMs on 127.0.0.1 — a gateway and two engine nodes on the embedded tiny
 * model, each started as {@code serve --cluster} from the test classpath. Concurrent streams through the gateway are
 * spread over both engines; the official openai npm client streams through it; a client that disconnects is
 * cancelled on its engine node; one engine process is killed mid-run (its streams end with an error event, the
 * other's complete, new requests go to the survivor); the killed node restarts and takes requests again.
 */
public class ClusterProcessesTest {
    static final String KEY = "sk-cluster";
    static final Path LOGS = Path.of("target", "cluster-test");
    static final List<Process> PROCS = Collections.synchronizedList(new ArrayList<>());
    static final HttpClient HTTP = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(Duration.ofSeconds(10)).build();

    int gwPort, gwCluster;
    final int[] enginePort = new int[2], engineCluster = new int[2];
    final Process[] engines = new Process[2];

    @AfterAll
    static void stopAll() {
        for (Process p : PROCS) p.destroy();
        for (Process p : PROCS) {
            try {
                if (!p.waitFor(15, TimeUnit.SECONDS)) p.destroyForcibly();
            } catch (InterruptedException e) {
                p.destroyForcibly();
            }
        }
    }

    /** The command line of {@code ds4j} in a JVM of its own (the test class path, bin/ds4j's JVM options), up to the command's name. */
    public static List<String> ds4jCommand() {
        String cp = System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"));
        return new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--add-modules", "jdk.incubator.vector", "--enable-native-access=ALL-UNNAMED",
                "--add-exports", "java.base/jdk.internal.ref=ALL-UNNAMED", "--add-opens", "java.base/java.lang=ALL-UNNAMED",
                "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens", "java.management/sun.management=ALL-UNNAMED",
                "--add-opens", "jdk.management/com.sun.management.internal=ALL-UNNAMED", "--sun-misc-unsafe-memory-access=allow",
                "-Xss4m", "-Xmx384m", "-XX:+UseSerialGC", "-cp", cp, "io.ds4j.cli.Main"));
    }

    /** {@code serve --cluster} in a JVM of its own, output to target/cluster-test/NAME.log. */
    static Process serve(String name, List<String> args) throws IOException {
        Files.createDirectories(LOGS);
        List<String> cmd = ds4jCommand();
        cmd.addAll(List.of("serve", "--cluster", "--host", "127.0.0.1", "--api-key", KEY, "--log-level", "info",
                // a shared 2-core machine can starve a process for a second or two: no false engine losses
                "--set", "cluster.announceMs=300", "--set", "cluster.engineTimeoutMs=8000"));
        cmd.addAll(args);
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.appendTo(LOGS.resolve(name + ".log").toFile()));
        pb.environment().put("DJL_OFFLINE", "true");
        Process p = pb.start();
        PROCS.add(p);
        return p;
    }

    List<String> members(int self) {
        List<String> out = new ArrayList<>();
        for (int port : new int[]{gwCluster, engineCluster[0], engineCluster[1]})
            if (port != self) out.addAll(List.of("--member", "127.0.0.1:" + port));
        return out;
    }

    Process startEngine(int i) throws IOException {
        List<String> a = new ArrayList<>(List.of("--role", "engine", "--port", Integer.toString(enginePort[i]),
                "--cluster-port", Integer.toString(engineCluster[i]), "--max-active", "8", "--max-queue", "64"));
        a.addAll(members(engineCluster[i]));
        return engines[i] = serve("engine" + (i + 1), a);
    }

    String engineName(int i) {
        return "engine@127.0.0.1:" + enginePort[i];
    }

    static String logs() {
        StringBuilder s = new StringBuilder();
        try (Stream<Path> files = Files.list(LOGS)) {
            for (Path f : files.sorted().toList()) {
                List<String> lines = Files.readAllLines(f);
                s.append("\n--- ").append(f.getFileName()).append(" (last lines)\n");
                for (String l : lines.subList(Math.max(0, lines.size() - 25), lines.size())) s.append(l).append('\n');
            }
        } catch (IOException e) {
            s.append(e);
        }
        return s.toString();
    }

    static boolean eventually(long ms, BooleanSupplier c) throws InterruptedException {
        long end = System.currentTimeMillis() + ms;
        while (System.currentTimeMillis() < end) {
            try {
                if (c.getAsBoolean()) return true;
            } catch (RuntimeException ignored) {
                // not up yet
            }
            Thread.sleep(250);
        }
        return c.getAsBoolean();
    }

    static HttpResponse<String> get(int port, String path) {
        try {
            return HTTP.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
                    .header("Authorization", "Bearer " + KEY).timeout(Duration.ofSeconds(10)).build(), HttpResponse.BodyHandlers.ofString());
        } catch (IOException e) {
            throw new RuntimeException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new RuntimeException(e);
        }
    }

    int readyEngines() {
        try {
            return Json.MAPPER.readTree(get(gwPort, "/health").body()).path("engines").path("ready").asInt();
        } catch (IOException e) {
            throw new RuntimeException(e);
        }
    }

    /**
     * What a client saw of one stream.
     * @param done    ended with a finish_reason chunk and [DONE]
     * @param error   the error event's code, or null
     * @param problem what was malformed, or null
     */
    record Seen(int status, String engine, int contentChunks, boolean done, String error, String problem) {}

    /** Streams one chat completion through the gateway; counts down {@code first} at the first content chunk. */
    Seen stream(int maxTokens, CountDownLatch first) throws Exception {
        String body = "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me about clusters.\"}],\"stream\":true,"
                + "\"max_tokens\":" + maxTokens + ",\"temperature\":0.8}";
        HttpResponse<Stream<String>> r = HTTP.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + gwPort + "/v1/chat/completions"))
                .header("Authorization", "Bearer " + KEY).header("Content-Type", "application/json")
                .timeout(Duration.ofSeconds(120)).POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofLines());
        String engine = r.headers().firstValue(GatewayVerticle.ENGINE_HEADER).orElse(null);
        int content = 0;
        boolean finished = false, done = false;
        String error = null, problem = null;
        try (Stream<String> lines = r.body()) {
            for (String line : (Iterable<String>) lines::iterator) {
                if (line.isEmpty()) continue;
                if (!line.startsWith("data: ")) {
                    problem = "not an SSE data line: " + line;
                    continue;
                }
                String d = line.substring(6);
                if (done || error != null) problem = "data after the end: " + d;
                if (d.equals("[DONE]")) {
                    if (!finished) problem = "[DONE] without a finish_reason";
                    done = true;
                    continue;
                }
                JsonNode j = Json.MAPPER.readTree(d);
                if (j.has("error")) {
                    error = j.get("error").path("code").asText();
                    continue;
                }
                if (!"chat.completion.chunk".equals(j.path("object").asText()) || !j.path("choices").isArray()) {
                    problem = "not a chunk: " + d;
                    continue;
                }
                JsonNode c = j.path("choices").path(0);
                if (!c.path("finish_reason").isNull() && !c.path("finish_reason").isMissingNode()) finished = true;
                if (c.path("delta").path("content").asText("").length() > 0) {
                    if (content++ == 0 && first != null) first.countDown();
                }
            }
        } catch (IOException e) {
            problem = "the stream broke without an error event: " + e;
        }
        return new Seen(r.statusCode(), engine, content, done, error, problem);
    }

    List<Seen> streams(int n, int maxTokens, CountDownLatch first) throws Exception {
        try (ExecutorService ex = Executors.newVirtualThreadPerTaskExecutor()) {
            List<Future<Seen>> fs = new ArrayList<>();
            for (int i = 0; i < n; i++) fs.add(ex.submit(() -> stream(maxTokens, first)));
            List<Seen> out = new ArrayList<>();
            for (Future<Seen> f : fs) out.add(f.get(240, TimeUnit.SECONDS));
            return out;
        }
    }

    static Map<String, Integer> byEngine(List<Seen> seen) {
        Map<String, Integer> m = new HashMap<>();
        for (Seen s : seen) m.merge(String.valueOf(s.engine()), 1, Integer::sum);
        return m;
    }

    static void assertComplete(Seen s, String what) {
        assertEquals(200, s.status(), what + ": " + s);
        assertNull(s.problem(), what + ": " + s);
        assertNull(s.error(), what + ": " + s);
        assertTrue(s.done() && s.contentChunks() >= 1, what + ": " + s);
    }

    double cancelledOnEngines() {
        double sum = 0;
        for (int i = 0; i < 2; i++) {
            if (!engines[i].isAlive()) continue;
            for (String l : get(enginePort[i], "/metrics").body().split("\n"))
                if (l.startsWith("ds4j:requests_cancelled_total")) sum += Double.parseDouble(l.substring(l.lastIndexOf(' ') + 1));
        }
        return sum;
    }

    @Test
    void gatewayAndTwoEngineProcesses() throws Exception {
        if (Files.isDirectory(LOGS)) try (Stream<Path> old = Files.list(LOGS)) {
            for (Path f : old.toList()) Files.delete(f);
        }
        int[] ports = io.ds4j.server.FreePorts.distinct(6);
        gwPort = ports[0];
        gwCluster = ports[1];
        for (int i = 0; i < 2; i++) {
            enginePort[i] = ports[2 + 2 * i];
            engineCluster[i] = ports[3 + 2 * i];
        }
        List<String> g = new ArrayList<>(List.of("--role", "gateway", "--port", Integer.toString(gwPort),
                "--cluster-port", Integer.toString(gwCluster)));
        g.addAll(members(gwCluster));
        serve("gateway", g);
        startEngine(0);
        startEngine(1);
        assertTrue(eventually(180_000, () -> readyEngines() == 2), "the gateway sees two ready engines" + logs());
        HttpResponse<String> headReady = head(gwPort, "/v1/health");
        assertEquals(200, headReady.statusCode(), "HEAD /v1/health while engines are ready");
        assertEquals("application/json", headReady.headers().firstValue("Content-Type").orElse(null), "GET's headers");
        // a compressed body is refused as by a single server: by the gateway itself, before anything is relayed
        HttpResponse<String> gz = HTTP.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + gwPort + "/tokenize"))
                .header("Authorization", "Bearer " + KEY).header("Content-Type", "application/json").header("Content-Encoding", "gzip")
                .POST(HttpRequest.BodyPublishers.ofString("{\"content\":\"x\"}")).build(), HttpResponse.BodyHandlers.ofString());
        assertEquals(415, gz.statusCode(), gz.body());
        assertTrue(gz.headers().firstValue(GatewayVerticle.ENGINE_HEADER).isEmpty(), "refused by the gateway itself");

        // --- the cluster view, and keys enforced at the gateway
        HttpResponse<String> anon = HTTP.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + gwPort + "/v1/chat/completions"))
                .header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString("{}")).build(),
                HttpResponse.BodyHandlers.ofString());
        assertEquals(401, anon.statusCode(), anon.body());
        assertTrue(anon.headers().firstValue(GatewayVerticle.ENGINE_HEADER).isEmpty(), "refused by the gateway itself");
        JsonNode models = Json.MAPPER.readTree(get(gwPort, "/v1/models").body());
        String model = models.path("data").path(0).path("id").asText();
        assertEquals(2, models.path("data").path(0).path("engines").size(), models.toString());
        // vLLM's context limit: the smallest of the engines' (both the same here)
        assertTrue(models.path("data").path(0).path("max_model_len").asInt() > 0, models.toString());
        assertEquals(models.path("data").path(0).path("meta").path("n_ctx"), models.path("data").path(0).path("max_model_len"));
        JsonNode props = Json.MAPPER.readTree(get(gwPort, "/props").body());
        assertEquals(2, props.path("cluster").path("engines").size(), props.toString());
        assertEquals(model, props.path("cluster").path("engines").path(0).path("model").path("id").asText(), props.toString());
        assertEquals("gateway", props.path("cluster").path("role").asText());
        assertTrue(get(gwPort, "/metrics").body().contains("ds4j:cluster_engines_ready 2.0"));
        JsonNode engineProps = Json.MAPPER.readTree(get(enginePort[0], "/props").body());
        assertEquals("engine", engineProps.path("cluster").path("role").asText(), engineProps.toString());

        // --- 32 concurrent streams, spread over both engines
        List<Seen> first = streams(32, 8, null);
        for (Seen s : first) assertComplete(s, "phase 1");
        Map<String, Integer> spread = byEngine(first);
        System.out.println("cluster: 32 streams by engine: " + spread);
        for (int i = 0; i < 2; i++)
            assertTrue(spread.getOrDefault(engineName(i), 0) >= 11, "each engine serves at least a third: " + spread);

        // --- the official openai npm client through the gateway
        Path node = Path.of("src/test/node");
        if (io.ds4j.server.OpenAiNodeClientTestAccess.nodeAvailable()) {
            assertTrue(Files.isDirectory(node.resolve("node_modules/openai")), "run 'npm ci --prefix src/test/node' first (bin/test does it)");
            Process p = new ProcessBuilder("node", node.resolve("openai-client.mjs").toString(),
                    "http://127.0.0.1:" + gwPort + "/v1", KEY, model).redirectErrorStream(true).start();
            boolean ended = p.waitFor(180, TimeUnit.SECONDS);
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            if (!ended) p.destroyForcibly();
            System.out.println("openai npm client through the gateway: " + out.trim());
            assertTrue(ended && p.exitValue() == 0, out);
            assertTrue(Json.MAPPER.readTree(out.trim().lines().reduce((a, b) -> b).orElse("{}")).path("ok").asBoolean(), out);
            // the stream it aborted was cancelled on the engine node that ran it
            assertTrue(eventually(20_000, () -> cancelledOnEngines() >= 1), "the client's abort reached the engine node" + logs());
        } else {
            System.out.println("node is not installed: the openai npm client part is skipped");
        }

        // --- a client that goes away is cancelled on its engine node
        double cancelled0 = cancelledOnEngines();
        try (java.net.Socket sock = postStream(gwPort, "\"max_tokens\":4000")) {
            var in = new java.io.BufferedReader(new java.io.InputStreamReader(sock.getInputStream(), StandardCharsets.UTF_8));
            int content = 0;
            for (String line; content < 3 && (line = in.readLine()) != null; )
                if (line.contains("\"content\":\"") && !line.contains("\"content\":\"\"")) content++;
            assertEquals(3, content, "the long stream started");
        } // the client goes away here, mid-stream
        assertTrue(eventually(20_000, () -> cancelledOnEngines() >= cancelled0 + 1),
                "the disconnect reached the engine node: cancelled " + cancelledOnEngines() + logs());

        // --- kill one engine mid-run
        CountDownLatch allStreaming = new CountDownLatch(16);
        Future<List<Seen>> running;
        try (ExecutorService one = Executors.newSingleThreadExecutor()) {
            running = one.submit(() -> streams(16, 64, allStreaming));
            assertTrue(allStreaming.await(120, TimeUnit.SECONDS), "all 16 streams started" + logs());
            // non-streamed requests in flight too: those on the killed node had no answer yet and go to the survivor
            List<Future<HttpResponse<String>>> plain = new ArrayList<>();
            try (ExecutorService ex = Executors.newVirtualThreadPerTaskExecutor()) {
                for (int i = 0; i < 4; i++) plain.add(ex.submit(() -> HTTP.send(HttpRequest.newBuilder(
                                URI.create("http://127.0.0.1:" + gwPort + "/v1/chat/completions"))
                        .header("Authorization", "Bearer " + KEY).header("Content-Type", "application/json")
                        .POST(HttpRequest.BodyPublishers.ofString("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":48}"))
                        .build(), HttpResponse.BodyHandlers.ofString())));
                Thread.sleep(500);
                engines[0].destroyForcibly();
                for (Future<HttpResponse<String>> f : plain) {
                    HttpResponse<String> r = f.get(240, TimeUnit.SECONDS);
                    assertEquals(200, r.statusCode(), r.body());
                    assertEquals("chat.completion", Json.MAPPER.readTree(r.body()).path("object").asText(), r.body());
                }
            }
            List<Seen> killed = running.get(240, TimeUnit.SECONDS);
            int onDead = 0, onLive = 0;
            for (Seen s : killed) {
                assertEquals(200, s.status(), s.toString());
                assertNull(s.problem(), s.toString());
                if (engineName(0).equals(s.engine())) {
                    onDead++;
                    assertEquals("engine_lost", s.error(), "a stream of the killed node ends with an error event: " + s);
                    assertFalse(s.done(), s.toString());
                } else {
                    onLive++;
                    assertComplete(s, "a stream of the surviving node");
                }
            }
            System.out.println("cluster: at the kill, " + onDead + " streams on the killed node, " + onLive + " on the survivor");
            assertTrue(onDead >= 1 && onLive >= 1, "streams were on both nodes when one was killed: " + byEngine(killed));
        }
        assertEquals(1, readyEngines());
        List<Seen> after = streams(16, 8, null);
        for (Seen s : after) {
            assertComplete(s, "after the kill");
            assertEquals(engineName(1), s.engine(), "served by the survivor");
        }

        // --- the killed node restarts and takes requests again
        startEngine(0);
        assertTrue(eventually(180_000, () -> readyEngines() == 2), "the restarted engine rejoined" + logs());
        List<Seen> rejoined = streams(8, 8, null);
        for (Seen s : rejoined) assertComplete(s, "after the restart");
        Map<String, Integer> back = byEngine(rejoined);
        System.out.println("cluster: after the restart, 8 streams by engine: " + back);
        assertTrue(back.getOrDefault(engineName(0), 0) >= 1, "the restarted node serves again: " + back);

        // --- an engine that begins shutting down (TERM) says so at once: the gateway sends it nothing more, while its
        // own running request (a long one on its API, so that it keeps draining) goes on
        java.net.Socket busy = postStream(enginePort[0], "\"max_tokens\":30000,\"ignore_eos\":true");
        Thread reader = Thread.ofVirtual().start(() -> {
            try {
                busy.getInputStream().transferTo(java.io.OutputStream.nullOutputStream());
            } catch (IOException ignored) {
                // closed below
            }
        });
        assertTrue(eventually(20_000, () -> io.ds4j.server.PromText.value(get(enginePort[0], "/metrics").body(), "vllm:num_requests_running") == 1.0),
                "the long request runs on engine 1" + logs());
        engines[0].destroy(); // TERM: a graceful shutdown, whose grace period (20 s) the long request keeps it in
        assertTrue(eventually(3_000, () -> readyEngines() == 1), "the draining engine is no longer ready at the gateway" + logs());
        assertTrue(engines[0].isAlive(), "still draining its own request");
        List<Seen> drainingSeen = streams(8, 8, null);
        for (Seen s : drainingSeen) {
            assertComplete(s, "while an engine drains");
            assertEquals(engineName(1), s.engine(), "served by the engine that is not shutting down");
        }
        busy.close();
        reader.join(5_000);

        // --- no engine left: a non-streamed request gets a 503 naming why
        engines[0].destroyForcibly();
        engines[1].destroyForcibly();
        assertTrue(eventually(30_000, () -> readyEngines() == 0), "the gateway noticed both engines gone" + logs());
        HttpResponse<String> none = HTTP.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + gwPort + "/v1/chat/completions"))
                .header("Authorization", "Bearer " + KEY).header("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}")).build(),
                HttpResponse.BodyHandlers.ofString());
        assertEquals(503, none.statusCode(), none.body());
        JsonNode err = Json.MAPPER.readTree(none.body()).path("error");
        assertEquals("no_engine", err.path("code").asText(), none.body());
        assertTrue(err.path("message").asText().contains("no engine node"), none.body());
        assertTrue(none.headers().firstValue("Retry-After").isPresent());
        assertEquals(503, get(gwPort, "/health").statusCode());
        HttpResponse<String> head = head(gwPort, "/health");
        assertEquals(503, head.statusCode(), "HEAD /health answers GET's status");
        assertTrue(head.headers().firstValue("Retry-After").isPresent(), "and GET's headers");
    }

    /** A streamed chat request to "x" with the given extra fields, sent on a socket of its own (read or closed by the caller). */
    static java.net.Socket postStream(int port, String extra) throws IOException {
        java.net.Socket sock = new java.net.Socket("127.0.0.1", port);
        byte[] b = ("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":true," + extra + "}").getBytes(StandardCharsets.UTF_8);
        sock.getOutputStream().write(("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + KEY
                + "\r\nContent-Type: application/json\r\nContent-Length: " + b.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
        sock.getOutputStream().write(b);
        sock.getOutputStream().flush();
        return sock;
    }

    static HttpResponse<String> head(int port, String path) throws IOException, InterruptedException {
        return HTTP.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path)).method("HEAD",
                HttpRequest.BodyPublishers.noBody()).timeout(Duration.ofSeconds(10)).build(), HttpResponse.BodyHandlers.ofString());
    }
}
