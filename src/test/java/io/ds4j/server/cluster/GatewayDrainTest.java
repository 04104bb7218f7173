package io.ds4j.server.cluster;

import io.ds4j.server.ScriptedModelAccess;
import io.ds4j.server.config.ServerConfig;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * A gateway that shuts down drains as a single server does: in this JVM a gateway node and an engine node (the scripted
 * model, whose "flood" answer is long); while a long stream runs through the gateway it is closed with a grace period
 * of 1 s: the gateway's /health and new requests get 503 server_shutting_down at once, and the stream, still running
 * when the grace period ends, gets a 503 error event (not a connection cut without one) and is cancelled on its engine.
 */
class GatewayDrainTest {
    static ClusterNode engine, gateway;

    @AfterAll
    static void stop() {
        if (gateway != null) gateway.close().await();
        if (engine != null) engine.close().await();
    }

    static Map<String, Object> config(String role, int clusterPort, String name, int... members) {
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("server.host", "127.0.0.1");
        o.put("server.port", 0);
        o.put("server.httpInstances", 1);
        o.put("server.shutdownGraceSeconds", 1);
        o.put("cluster.enabled", true);
        o.put("cluster.role", role);
        o.put("cluster.host", "127.0.0.1");
        o.put("cluster.port", clusterPort);
        o.put("cluster.engineTimeoutMs", 60_000);
        o.put("cluster.name", name);
        java.util.List<String> m = new java.util.ArrayList<>();
        for (int p : members) m.add("127.0.0.1:" + p);
        o.put("cluster.members", m);
        return o;
    }

    @Test
    void aGatewayThatShutsDownEndsItsStreamsWithAnErrorEvent() throws Exception {
        int[] bar = ScriptedModelAccess.tokenizer().encode("=".repeat(64));
        int[] flood = new int[200_000];
        java.util.Arrays.fill(flood, bar[0]);
        String name = "drain-test-" + Long.toHexString(ThreadLocalRandom.current().nextLong());
        int[] ports = io.ds4j.server.FreePorts.distinct(2);
        int gp = ports[0], ep = ports[1];
        Map<String, Object> eo = config("engine", ep, name, gp);
        engine = ClusterNode.start(ServerConfig.parse(null, "test", eo), null, eo, ScriptedModelAccess.provider(
                p -> ScriptedModelAccess.tokenizer().decode(p).contains("flood") ? flood : ScriptedModelAccess.defaultScript(p))).await();
        engine.ready().await();
        Map<String, Object> go = config("gateway", gp, name, ep);
        gateway = ClusterNode.start(ServerConfig.parse(null, "test", go), null, go, null).await();
        int port = gateway.port();
        assertTrue(GatewayRelayTest.eventually(60_000, () -> health(port).contains("\"ready\":1")), "the gateway sees its engine");
        try (Socket s = new Socket("127.0.0.1", port)) {
            s.setSoTimeout(30_000);
            byte[] body = "{\"messages\":[{\"role\":\"user\",\"content\":\"flood\"}],\"stream\":true,\"max_tokens\":30000}"
                    .getBytes(StandardCharsets.UTF_8);
            s.getOutputStream().write(("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    + "Content-Length: " + body.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
            s.getOutputStream().write(body);
            BufferedReader in = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8));
            int content = 0;
            for (String line; content < 3 && (line = in.readLine()) != null; ) if (line.contains("\"content\":\"=")) content++;
            assertEquals(3, content, "the stream runs");
            var closing = gateway.close();
            assertTrue(GatewayRelayTest.eventually(5_000, () -> health(port).contains("shutting_down")), "/health says so at once");
            String refused = post(port, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":3}");
            assertTrue(refused.startsWith("HTTP/1.1 503") && refused.contains("server_shutting_down"), refused);
            String last = null;
            for (String line; (line = in.readLine()) != null; ) if (line.startsWith("data: ")) last = line;
            assertNotNull(last);
            assertTrue(last.contains("\"server_shutting_down\"") && last.contains("grace period"), "the stream ends with the error event: " + last);
            closing.await();
            gateway = null;
        }
        assertTrue(GatewayRelayTest.eventually(20_000, () -> engine.engine().state().metrics().running.get() == 0),
                "the stream was cancelled on its engine");
    }

    static String health(int port) {
        try (Socket s = new Socket("127.0.0.1", port)) {
            s.setSoTimeout(5_000);
            s.getOutputStream().write("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
            return new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        } catch (Exception e) {
            return e.toString();
        }
    }

    static String post(int port, String json) throws Exception {
        try (Socket s = new Socket("127.0.0.1", port)) {
            s.setSoTimeout(10_000);
            byte[] b = json.getBytes(StandardCharsets.UTF_8);
            s.getOutputStream().write(("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
                    + "Content-Length: " + b.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
            s.getOutputStream().write(b);
            return new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        }
    }
}
