package io.ds4j.cli;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@code ds4j bench-server}: its closing line shows the prefill chunk the engine uses, not only the configured one, and the latency bound on prefill. */
class BenchServerCommandTest {
    @Test
    void theServerLineShowsTheEffectivePrefillChunk() {
        String cut = BenchServerCommand.serverLine(16, 256, 48, 512, 2, 1.6, 64);
        assertTrue(cut.contains("prefill chunk 48 (limits.prefillChunk 512, cut to the token budget)"), cut);
        assertTrue(cut.contains("scheduler.tokenBudget 48"), cut);
        String kept = BenchServerCommand.serverLine(16, 256, 1024, 512, 2, 0, 64);
        assertTrue(kept.contains("prefill chunk 512,"), kept);
        assertFalse(kept.contains("cut to"), kept);
        assertTrue(cut.contains("scheduler.maxTickStretch 1.6 with scheduler.minPrefillChunk 64"), cut);
        assertTrue(kept.contains("scheduler.maxTickStretch 0 (off"), kept);
    }
}
