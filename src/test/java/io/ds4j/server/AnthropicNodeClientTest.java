package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.*;

/**
 * A Messages client nobody here wrote: the official {@code @anthropic-ai/sdk} npm package (pinned in
 * src/test/node/package-lock.json) against the scripted model with an API key (sent as x-api-key, as the SDK does):
 * text, thinking and tool_use answers unstreamed and through its streaming helper (which rebuilds the message from
 * the events), a tool result sent back, count_tokens, its typed errors, and a stream it aborts, which the server
 * cancels. {@code bin/test} runs {@code npm ci --prefix src/test/node} first.
 */
class AnthropicNodeClientTest {
    static TestServer server;
    static final ScriptedBackend backend = new ScriptedBackend(TestServer::defaultScript);

    @BeforeAll
    static void start() throws Exception {
        Assumptions.assumeTrue(OpenAiNodeClientTest.onPath("node"), "node is not installed");
        assertTrue(Files.isDirectory(OpenAiNodeClientTest.NODE_DIR.resolve("node_modules/@anthropic-ai/sdk")),
                "run 'npm ci --prefix src/test/node' first (bin/test does it)");
        // slow enough that the long answer the client aborts is still running when it does
        backend.delayMs = 3;
        server = TestServer.scripted(backend, Map.of("speculative.draft", "none", "server.apiKeys", List.of("sk-local")));
    }

    @AfterAll
    static void stop() {
        if (server != null) server.close();
    }

    @Test
    void officialAnthropicClientWorks() throws Exception {
        int cut = TestServer.THINKING.indexOf("</think>");
        String expected = Json.write(Json.object().put("plain", TestServer.PLAIN).set("thinking", Json.array()
                .add(TestServer.THINKING.substring(0, cut)).add(TestServer.THINKING.substring(cut + "</think>".length()))));
        Process p = new ProcessBuilder("node", OpenAiNodeClientTest.NODE_DIR.resolve("anthropic-client.mjs").toString(),
                "http://127.0.0.1:" + server.port, "sk-local", "scripted", expected).redirectErrorStream(true).start();
        boolean done = p.waitFor(180, TimeUnit.SECONDS);
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!done) {
            p.destroyForcibly();
            fail("the node client did not finish in time: " + out);
        }
        System.out.println("@anthropic-ai/sdk client: " + out.trim());
        assertEquals(0, p.exitValue(), out);
        JsonNode j = Json.MAPPER.readTree(out.trim().lines().reduce((a, b) -> b).orElse(""));
        assertTrue(j.get("ok").asBoolean(), out);
        assertEquals(List.of("text", "count_tokens", "tool_use", "thinking", "errors", "abort"),
                Json.MAPPER.convertValue(j.get("done"), List.class));
        assertTrue(TestServer.eventually(5000, () -> server.state().recent().stream().anyMatch(r -> r.outcome().equals("cancelled"))),
                "the aborted request was cancelled: " + server.state().recent());
        assertTrue(TestServer.eventually(5000, () -> server.state().metrics().running.get() == 0));
    }
}
