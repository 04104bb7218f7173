package io.ds4j.cli;

import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Build output has no ANSI escape codes: Maven 3.8 starts its output with colour resets even in batch mode unless
 * jansi is told not to, and bin/test and bin/ds4j tell it. Runs one quick Maven goal (the native-library step, skipped)
 * the way those scripts run Maven.
 */
class BuildOutputTest {
    @Test
    void mavenAsTheScriptsRunItPrintsNoEscapeCodes() throws Exception {
        for (String script : new String[]{"bin/test", "bin/ds4j"})
            assertTrue(Files.readString(Path.of(script)).contains("-Djansi.noreset=true"), script + " sets jansi.noreset");
        String opts = Files.readAllLines(Path.of("bin/test")).stream().filter(l -> l.startsWith("export MAVEN_OPTS=")).findFirst()
                .orElseThrow();
        ProcessBuilder pb = new ProcessBuilder("bash", "-c", opts + "; exec mvn -B -q -o -Dds4j.native=none exec:exec@native-gpu-library")
                .redirectErrorStream(true);
        Process p;
        try {
            p = pb.start();
        } catch (java.io.IOException e) {
            Assumptions.abort("no bash: " + e.getMessage());
            return;
        }
        assertTrue(p.waitFor(120, TimeUnit.SECONDS), "maven finished");
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        Assumptions.assumeFalse(out.contains("mvn: command not found"), "no Maven on the PATH");
        assertEquals(0, p.exitValue(), out);
        assertTrue(out.contains("ds4j native: skipped"), out);
        assertFalse(out.contains("\u001b"), "no escape codes: " + out.replace("\u001b", "<ESC>"));
    }
}
