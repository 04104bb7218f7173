package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;
import io.ds4j.server.config.ServerConfig;
import io.ds4j.speculative.NgramDraft;
import io.ds4j.text.Tokenizer;
import io.ds4j.text.Tokenizers;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpHeaders;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.BooleanSupplier;

/** A real server on a free loopback port for integration tests, with small HTTP helpers (HTTP/1.1). */
final class TestServer implements AutoCloseable {
    /** Plain answer of the scripted model. */
    static final String PLAIN = "Hello! How can I help you today?";
    /** Thinking-mode answer: reasoning, then content. */
    static final String THINKING = "The user says hi. I should greet back.</think>Hi there, nice to meet you.";
    /** Tool-call answer (DSML), produced when the prompt mentions the weather. */
    static final String TOOL = "Let me check.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
            + "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
            + "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
            + "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

    final Ds4jServer server;
    final int port;
    private final HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(Duration.ofSeconds(10)).build();

    private TestServer(Ds4jServer server) {
        this.server = server;
        this.port = server.port();
    }

    static Tokenizer tokenizer() {
        return Tokenizers.vendored();
    }

    /** The scripted model's answers, chosen by prompt content. */
    static int[] defaultScript(int[] prompt) {
        Tokenizer t = tokenizer();
        String text = t.decode(prompt);
        if (text.contains("weather")) return t.encode(TOOL);
        if (text.contains("count for a long time")) {
            StringBuilder s = new StringBuilder();
            for (int i = 1; i <= 3000; i++) s.append(i).append(' ');
            return t.encode(s.toString());
        }
        if (text.endsWith("<think>")) return t.encode(THINKING);
        return t.encode(PLAIN);
    }

    /** The base settings of test servers: loopback, a free port, one HTTP instance less than the default. */
    static Map<String, Object> base() {
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("server.host", "127.0.0.1");
        o.put("server.port", 0);
        o.put("server.httpInstances", 2);
        return o;
    }

    static ModelProvider provider(ScriptedBackend b) {
        return (cfg, log) -> new LoadedModel("scripted", "/scripted", false, b, tokenizer(),
                cfg.draft().equals("none") ? null : NgramDraft.source());
    }

    static TestServer scripted(ScriptedBackend b, Map<String, Object> overrides) throws Exception {
        return start(provider(b), overrides, null, null);
    }

    /** Starts a server and waits until its model is ready. */
    static TestServer start(ModelProvider p, Map<String, Object> overrides, Path configFile, String fileText) throws Exception {
        Map<String, Object> o = base();
        if (overrides != null) o.putAll(overrides);
        ServerConfig cfg = ServerConfig.parse(fileText, "test", o);
        Ds4jServer s = Ds4jServer.start(new Ds4jServer.Options(cfg, configFile, o, p)).await();
        s.ready().await();
        return new TestServer(s);
    }

    ServerState state() {
        return server.state();
    }

    record Resp(int status, HttpHeaders headers, String body) {
        JsonNode json() {
            try {
                return Json.MAPPER.readTree(body);
            } catch (IOException e) {
                throw new AssertionError("not JSON (" + e.getMessage() + "): " + body);
            }
        }

        /** The data payloads of an SSE body, in order. */
        List<String> events() {
            List<String> out = new ArrayList<>();
            for (String block : body.split("\n\n")) {
                if (block.isBlank()) continue;
                if (!block.startsWith("data: ")) throw new AssertionError("not an SSE data frame: " + block);
                out.add(block.substring(6));
            }
            return out;
        }
    }

    Resp post(String path, String body, String... headers) throws Exception {
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
                .timeout(Duration.ofSeconds(60)).POST(HttpRequest.BodyPublishers.ofString(body))
                .header("Content-Type", "application/json");
        for (int i = 0; i < headers.length; i += 2) b.header(headers[i], headers[i + 1]);
        HttpResponse<String> r = http.send(b.build(), HttpResponse.BodyHandlers.ofString());
        return new Resp(r.statusCode(), r.headers(), r.body());
    }

    Resp get(String path, String... headers) throws Exception {
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path)).timeout(Duration.ofSeconds(60));
        for (int i = 0; i < headers.length; i += 2) b.header(headers[i], headers[i + 1]);
        HttpResponse<String> r = http.send(b.build(), HttpResponse.BodyHandlers.ofString());
        return new Resp(r.statusCode(), r.headers(), r.body());
    }

    HttpClient http() {
        return http;
    }

    /** Polls a condition for up to the given time. */
    static boolean eventually(long millis, BooleanSupplier c) throws InterruptedException {
        long end = System.currentTimeMillis() + millis;
        while (System.currentTimeMillis() < end) {
            if (c.getAsBoolean()) return true;
            Thread.sleep(20);
        }
        return c.getAsBoolean();
    }

    /** A chat request body. */
    static String chat(String user, String extra) {
        return "{\"model\":\"scripted\",\"messages\":[{\"role\":\"user\",\"content\":" + Json.MAPPER.valueToTree(user)
                + "}]" + (extra == null || extra.isEmpty() ? "" : "," + extra) + "}";
    }

    @Override
    public void close() {
        server.close().await();
    }
}
