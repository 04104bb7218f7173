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
 * A Responses client nobody here wrote: the official {@code openai} npm package's {@code client.responses} (pinned in
 * src/test/node/package-lock.json) against the scripted model with an API key: a text answer unstreamed, streamed with
 * {@code stream: true} and through its stream helper (which rebuilds the response from the events), a function call
 * and its output sent back, reasoning, a strict json_schema format parsed from a zod schema, its typed errors, and a
 * stream it aborts, which the server cancels. {@code bin/test} runs {@code npm ci --prefix src/test/node} first.
 */
class ResponsesNodeClientTest {
    static TestServer server;
    static final ScriptedBackend backend = new ScriptedBackend(p ->
            TestServer.tokenizer().decode(p).contains("as JSON") ? TestServer.tokenizer().encode(ResponsesApiTest.JSON_ANSWER)
                    : TestServer.defaultScript(p));

    @BeforeAll
    static void start() throws Exception {
        Assumptions.assumeTrue(OpenAiNodeClientTest.onPath("node"), "node is not installed");
        assertTrue(Files.isDirectory(OpenAiNodeClientTest.NODE_DIR.resolve("node_modules/openai"))
                        && Files.isDirectory(OpenAiNodeClientTest.NODE_DIR.resolve("node_modules/zod")),
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
    void officialResponsesClientWorks() throws Exception {
        int cut = TestServer.THINKING.indexOf("</think>");
        String expected = Json.write(Json.object().put("plain", TestServer.PLAIN).put("json", ResponsesApiTest.JSON_ANSWER)
                .set("thinking", Json.array().add(TestServer.THINKING.substring(0, cut))
                        .add(TestServer.THINKING.substring(cut + "</think>".length()))));
        Process p = new ProcessBuilder("node", OpenAiNodeClientTest.NODE_DIR.resolve("responses-client.mjs").toString(),
                "http://127.0.0.1:" + server.port + "/v1", "sk-local", "scripted", expected).redirectErrorStream(true).start();
        boolean done = p.waitFor(180, TimeUnit.SECONDS);
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!done) {
            p.destroyForcibly();
            fail("the node client did not finish in time: " + out);
        }
        System.out.println("openai client.responses: " + out.trim());
        assertEquals(0, p.exitValue(), out);
        JsonNode j = Json.MAPPER.readTree(out.trim().lines().reduce((a, b) -> b).orElse(""));
        assertTrue(j.get("ok").asBoolean(), out);
        assertEquals(List.of("text", "function_call", "reasoning", "json_schema", "errors", "abort"),
                Json.MAPPER.convertValue(j.get("done"), List.class));
        assertTrue(TestServer.eventually(5000, () -> server.state().recent().stream().anyMatch(r -> r.outcome().equals("cancelled"))),
                "the aborted request was cancelled: " + server.state().recent());
        assertTrue(TestServer.eventually(5000, () -> server.state().metrics().running.get() == 0));
    }
}
