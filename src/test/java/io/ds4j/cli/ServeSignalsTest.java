package io.ds4j.cli;

import io.ds4j.server.cluster.ClusterProcessesTest;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

import static org.junit.jupiter.api.Assertions.*;

/**
 * {@code serve} and its signals ({@link Signals}), in a process of its own on the embedded model: the first SIGTERM
 * starts the graceful shutdown, which waits for a running stream (the grace period is long); a second one ends the
 * process at once, with the status the JVM gives a SIGTERM (143), and says so in the log.
 */
class ServeSignalsTest {
    private static final HttpClient HTTP = HttpClient.newHttpClient();

    @Test
    void aSecondSigtermEndsTheGracefulShutdownAtOnce() throws Exception {
        int port = io.ds4j.server.FreePorts.one();
        Path log = Files.createTempFile("ds4j-signals", ".log");
        List<String> cmd = ClusterProcessesTest.ds4jCommand();
        cmd.addAll(List.of("serve", "--host", "127.0.0.1", "--port", Integer.toString(port), "--log-level", "info",
                "--set", "server.shutdownGraceSeconds=300"));
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile());
        pb.environment().put("DJL_OFFLINE", "true");
        Process p = pb.start();
        try {
            assertTrue(eventually(120_000, () -> ready(port)), "the server got ready: " + Files.readString(log));
            // a stream far longer than the test: the graceful shutdown would wait for it the whole grace period
            try (Socket stream = new Socket("127.0.0.1", port)) {
                byte[] b = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":true,\"max_tokens\":30000,\"ignore_eos\":true}"
                        .getBytes(StandardCharsets.UTF_8);
                stream.getOutputStream().write(("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                        + "application/json\r\nContent-Length: " + b.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
                stream.getOutputStream().write(b);
                stream.getOutputStream().flush();
                assertTrue(stream.getInputStream().read() >= 0, "the stream began");
                p.destroy();  // SIGTERM
                assertTrue(eventually(30_000, () -> logHas(log, "shutting down (SIGTERM received)")), Files.readString(log));
                assertTrue(eventually(30_000, () -> logHas(log, "1 running request may finish within 300 s")), Files.readString(log));
                assertFalse(p.waitFor(2, TimeUnit.SECONDS), "still draining the stream after the first signal");
                p.destroy();  // the second SIGTERM
                assertTrue(p.waitFor(20, TimeUnit.SECONDS), "gone after the second signal: " + Files.readString(log));
            }
            assertEquals(143, p.exitValue(), Files.readString(log));
            assertTrue(logHas(log, "second SIGTERM while shutting down: exiting now"), Files.readString(log));
        } finally {
            p.destroyForcibly();
            Files.deleteIfExists(log);
        }
    }

    private static boolean ready(int port) {
        try {
            return HTTP.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/health")).timeout(Duration.ofSeconds(5))
                    .build(), HttpResponse.BodyHandlers.ofString()).statusCode() == 200;
        } catch (IOException | InterruptedException e) {
            return false;
        }
    }

    private static boolean logHas(Path log, String text) {
        try {
            return Files.readString(log).contains(text);
        } catch (IOException e) {
            return false;
        }
    }

    private static boolean eventually(long ms, BooleanSupplier c) throws InterruptedException {
        long end = System.nanoTime() + ms * 1_000_000;
        while (System.nanoTime() < end) {
            if (c.getAsBoolean()) return true;
            Thread.sleep(100);
        }
        return c.getAsBoolean();
    }
}
