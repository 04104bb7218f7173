package io.ds4j.server;

import io.ds4j.app.DefaultModelProvider;
import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;
import io.vertx.junit5.VertxExtension;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.*;

/**
 * A client nobody here wrote: the official {@code openai} npm package (pinned in src/test/node/package-lock.json)
 * lists models, streams and non-streams chat completions (include_usage on and off), uses the streaming helper,
 * legacy completions, typed errors, a predicted output (prediction and usage.completion_tokens_details) and aborts a stream — against the embedded default model with an API key.
 * {@code bin/test} runs {@code npm ci --prefix src/test/node} first.
 */
@ExtendWith(VertxExtension.class)
class OpenAiNodeClientTest {
    static TestServer server;
    static final Path NODE_DIR = Path.of("src/test/node");

    @BeforeAll
    static void start() throws Exception {
        Assumptions.assumeTrue(onPath("node"), "node is not installed");
        assertTrue(Files.isDirectory(NODE_DIR.resolve("node_modules/openai")) && Files.isDirectory(NODE_DIR.resolve("node_modules/ai")),
                "run 'npm ci --prefix src/test/node' first (bin/test does it)");
        server = TestServer.start(new DefaultModelProvider(), Map.of("server.apiKeys", List.of("sk-local")), null, null);
    }

    @AfterAll
    static void stop() {
        if (server != null) server.close();
    }

    static boolean onPath(String exe) {
        for (String d : System.getenv().getOrDefault("PATH", "").split(java.io.File.pathSeparator))
            if (Files.isExecutable(Path.of(d, exe))) return true;
        return false;
    }

    @Test
    void officialOpenAiClientWorks() throws Exception {
        String model = server.state().model().id();
        Process p = new ProcessBuilder("node", NODE_DIR.resolve("openai-client.mjs").toString(),
                "http://127.0.0.1:" + server.port + "/v1", "sk-local", model).redirectErrorStream(true).start();
        boolean done = p.waitFor(180, TimeUnit.SECONDS);
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!done) {
            p.destroyForcibly();
            fail("the node client did not finish in time: " + out);
        }
        System.out.println("openai npm client: " + out.trim());
        assertEquals(0, p.exitValue(), out);
        String last = out.trim().lines().reduce((a, b) -> b).orElse("");
        JsonNode j = Json.MAPPER.readTree(last);
        assertTrue(j.get("ok").asBoolean(), out);
        // the aborted stream was cancelled by the server, which does no more work for it
        assertTrue(TestServer.eventually(5000, () -> server.state().recent().stream().anyMatch(r -> r.outcome().equals("cancelled"))),
                "the aborted request was cancelled: " + server.state().recent());
        assertTrue(TestServer.eventually(5000, () -> server.state().metrics().running.get() == 0));
    }

    /**
     * The Vercel AI SDK's generateObject and LangChain JS's withStructuredOutput (json schema and forced function
     * call) against the random embedded model: both libraries parse and check the result with the zod schema.
     */
    @Test
    void structuredOutputLibrariesWork() throws Exception {
        String model = server.state().model().id();
        Process p = new ProcessBuilder("node", NODE_DIR.resolve("structured-client.mjs").toString(),
                "http://127.0.0.1:" + server.port + "/v1", "sk-local", model).redirectErrorStream(true).start();
        boolean done = p.waitFor(300, TimeUnit.SECONDS);
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!done) {
            p.destroyForcibly();
            fail("the structured-output client did not finish in time: " + out);
        }
        System.out.println("structured outputs (ai, @langchain/openai): " + out.trim());
        assertEquals(0, p.exitValue(), out);
        String last = out.trim().lines().reduce((a, b) -> b).orElse("");
        assertTrue(Json.MAPPER.readTree(last).get("ok").asBoolean(), out);
    }
}
