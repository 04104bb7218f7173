package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.engine.BackendOptions;
import io.ds4j.engine.FeatureGate;
import io.ds4j.speculative.NgramDraft;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Map;
import java.util.concurrent.atomic.AtomicReference;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The backend's effective state in /props and /metrics, and the feature gate on config reload: an option a backend
 * cannot honour is refused or reported, never dropped silently.
 * The server is configured for {@code backend: hip} with the F16-KV verifier on; its model provider stands in for a
 * GPU backend whose experts fell back to hybrid placement (status from {@link FeatureGate#resolve} with the options
 * the server passed), so the verifier is requested but inactive and a diagnostic is due.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class EngineStatusServerTest {
    @TempDir
    static Path dir;
    static Path file;
    static TestServer server;
    /** The options the server handed to its model provider. */
    static final AtomicReference<BackendOptions> given = new AtomicReference<>();

    static final String START = "{\"server\": {\"configScanMs\": 100}, \"model\": {\"backend\": \"hip\"},"
            + " \"verify\": {\"f16Kv\": true}, \"limits\": {\"maxTokensDefault\": 5}}";

    @BeforeAll
    static void start() throws Exception {
        file = dir.resolve("server.json");
        Files.writeString(file, START);
        ModelProvider gpuLike = (cfg, log) -> {
            BackendOptions o = cfg.backendOptions();
            given.set(o);
            ScriptedBackend b = new ScriptedBackend(TestServer::defaultScript);
            // what a GPU backend reports when monolithic placement did not fit: hybrid, 40 experts in host memory
            b.status = FeatureGate.resolve(cfg.backend(), o, BackendOptions.ExpertPlacement.HYBRID, 40);
            return new LoadedModel("scripted", "/scripted", false, b, TestServer.tokenizer(), NgramDraft.source());
        };
        server = TestServer.start(gpuLike, Map.of(), file, START);
    }

    @AfterAll
    static void stop() {
        server.close();
    }

    static void write(String text) throws Exception {
        Path tmp = dir.resolve("server.json.tmp");
        Files.writeString(tmp, text);
        Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    }

    static JsonNode props() throws Exception {
        TestServer.Resp r = server.get("/props");
        assertEquals(200, r.status(), r.body());
        return r.json();
    }

    static boolean reloadMessageContains(String s) {
        try {
            return props().path("config_reload").path("message").asText("").contains(s);
        } catch (Exception | AssertionError e) {
            return false;
        }
    }

    /** The value of one sample line of the Prometheus text, or NaN when the series is absent. */
    static double sample(String metrics, String series) {
        Matcher m = Pattern.compile("(?m)^" + Pattern.quote(series) + " (\\S+)$").matcher(metrics);
        return m.find() ? Double.parseDouble(m.group(1)) : Double.NaN;
    }

    @Test
    @Order(1)
    void theServerOpensTheBackendWithItsConfiguredOptions() {
        assertEquals(new BackendOptions(1, BackendOptions.ExpertPlacement.AUTO, 0, true, 512), given.get());
        assertEquals(BackendOptions.ExpertPlacement.MONOLITHIC, FeatureGate.requestedPlacement(given.get()),
                "with the verifier on, auto asks the backend for monolithic placement");
    }

    @Test
    @Order(2)
    void propsShowRequestedAndEffectiveState() throws Exception {
        JsonNode p = props();
        assertEquals("hip", p.get("backend").asText());
        JsonNode v = p.get("verify");
        assertTrue(v.get("f16KvRequested").asBoolean(), v.toString());
        assertFalse(v.get("f16KvActive").asBoolean(), v.toString());
        assertEquals("f32-convert", v.get("attention").asText());
        assertEquals(512, v.get("f32ShortContextRows").asInt());
        assertEquals("F16-KV verifier unavailable with hybrid expert placement; using F32 verifier attention (verify.f16Kv requested)",
                v.get("diagnostic").asText());
        JsonNode e = p.get("engine");
        assertEquals("hip", e.get("backend").asText());
        assertEquals("hybrid", e.get("expertPlacement").asText());
        assertEquals(40, e.get("hostExperts").asInt());
        assertEquals("auto", e.get("expertPlacementConfigured").asText());
        assertEquals(1, e.get("devices").asInt());
        assertTrue(p.at("/config/verify/f16Kv").asBoolean(), "the configuration still says what was asked for");
    }

    @Test
    @Order(3)
    void metricsShowTheEffectiveState() throws Exception {
        String m = server.get("/metrics").body();
        assertEquals(1.0, sample(m, "ds4j:verify_f16_kv_requested"), m);
        assertEquals(0.0, sample(m, "ds4j:verify_f16_kv_active"));
        assertEquals(512.0, sample(m, "ds4j:verify_f32_short_context_rows"));
        assertEquals(40.0, sample(m, "ds4j:host_experts"));
        assertEquals(1.0, sample(m, "ds4j:engine_state{backend=\"hip\",expert_placement=\"hybrid\",verify_attention=\"f32-convert\"}"), m);
        assertEquals(1.0, sample(m, "ds4j:engine_diagnostic{message=\"" + FeatureGate.F16KV_HYBRID_WARNING + "\"}"), m);
    }

    @Test
    @Order(4)
    void aReloadTheGateRefusesIsRejectedAsAWhole() throws Exception {
        // two devices with the verifier on; the live key in the same file must not apply either
        write("{\"server\": {\"configScanMs\": 100}, \"model\": {\"backend\": \"hip\"}, \"gpu\": {\"devices\": 2},"
                + " \"verify\": {\"f16Kv\": true}, \"limits\": {\"maxTokensDefault\": 3}}");
        assertTrue(TestServer.eventually(5000, () -> reloadMessageContains("gpu.devices")), "reload judged");
        JsonNode p = props();
        assertEquals("rejected", p.at("/config_reload/outcome").asText());
        String msg = p.at("/config_reload/message").asText();
        assertTrue(msg.contains("verify.f16Kv: the F16-KV verifier (--fused-verify-f16-kv) requires backend hip on a single device;"
                + " current: backend hip on 2 devices"), msg);
        assertTrue(msg.contains("gpu.devices: backend hip runs on a single device"), msg);
        assertEquals(5, p.at("/config/limits/maxTokensDefault").asInt(), "nothing of the rejected file applies");
        assertEquals(1, p.at("/config/gpu/devices").asInt());
        assertTrue(p.get("pending_restart").isEmpty(), p.get("pending_restart").toString());
        TestServer.Resp ok = server.post("/v1/chat/completions", TestServer.chat("Hi", ""));
        assertEquals(200, ok.status(), ok.body());
        assertEquals(5, ok.json().at("/usage/completion_tokens").asInt(), "the old configuration keeps serving");

        // switching the backend to cpu while keeping the verifier on is refused too
        write("{\"server\": {\"configScanMs\": 100}, \"model\": {\"backend\": \"cpu\"}, \"verify\": {\"f16Kv\": true}}");
        assertTrue(TestServer.eventually(5000, () -> reloadMessageContains("current: backend cpu on 1 device")));
        assertEquals("rejected", props().at("/config_reload/outcome").asText());
        assertEquals("hip", props().at("/config/model/backend").asText());
    }

    @Test
    @Order(5)
    void anAcceptedChangeOfTheOptionWaitsForARestart() throws Exception {
        write("{\"server\": {\"configScanMs\": 100}, \"model\": {\"backend\": \"hip\"}, \"gpu\": {\"expertPlacement\": \"hybrid\"},"
                + " \"limits\": {\"maxTokensDefault\": 4}}");
        assertTrue(TestServer.eventually(5000, () -> reloadMessageContains("pending restart")));
        JsonNode p = props();
        assertEquals("applied, restart pending", p.at("/config_reload/outcome").asText());
        assertEquals(4, p.at("/config/limits/maxTokensDefault").asInt());
        boolean f16 = false, placement = false;
        for (JsonNode c : p.get("pending_restart")) {
            if (c.get("key").asText().equals("verify.f16Kv")) {
                f16 = true;
                assertTrue(c.get("running").asBoolean());
                assertFalse(c.get("configured").asBoolean());
            }
            if (c.get("key").asText().equals("gpu.expertPlacement")) {
                placement = true;
                assertEquals("hybrid", c.get("configured").asText());
            }
        }
        assertTrue(f16 && placement, p.get("pending_restart").toString());
        assertTrue(p.at("/verify/f16KvRequested").asBoolean(), "the running backend is unchanged until a restart");
    }
}
