package io.ds4j.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
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

    /** Parses the events; the clock reads 0 at the request and then each event's time (ms), one per event. */
    static BenchServerCommand.Sample sample(long[] ms, String... events) throws Exception {
        ObjectMapper m = new ObjectMapper();
        List<JsonNode> ev = new ArrayList<>();
        for (String e : events) ev.add(m.readTree(e));
        long[] at = new long[ms.length + 1];
        for (int i = 0; i < ms.length; i++) at[i] = ms[i] * 1_000_000L;
        at[ms.length] = at[ms.length - 1];
        int[] i = {0};
        return BenchServerCommand.sample(ev, 0, () -> at[Math.min(i[0]++, at.length - 1)]);
    }

    static String chunk(String content, String finish, Integer tokens) {
        return "{\"choices\":[{\"index\":0,\"delta\":" + (content == null ? "{}" : "{\"content\":\"" + content + "\"}")
                + ",\"finish_reason\":" + (finish == null ? "null" : "\"" + finish + "\"") + "}]"
                + (tokens == null ? "" : ",\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":" + tokens + "}") + "}";
    }

    /** With the running usage on every chunk, a chunk of k tokens after a gap g counts k gaps of g / k. */
    @Test
    void aChunkOfSeveralTokensCountsAGapForEach() throws Exception {
        BenchServerCommand.Sample s = sample(new long[]{1, 10, 20, 30, 31},
                chunk("", null, 0), chunk("a", null, 1), chunk("bc", null, 3), chunk("d", null, 4), chunk(null, "length", 4),
                "{\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":4}}");
        assertEquals(4, s.tokens());
        assertArrayEquals(new double[]{10, 10}, s.gapsMs(), 1e-9);
        assertArrayEquals(new double[]{5, 5, 10}, s.tokenGapsMs(), 1e-9);
        assertEquals(1, s.shared());
    }

    /**
     * --url against a server that puts the usage on its last chunk beside the finish reason (no chunk with empty
     * choices after it, as llama.cpp's server did): the tokens are still read from it.
     */
    @Test
    void theUsageIsReadAlsoFromAChunkWithChoices() throws Exception {
        BenchServerCommand.Sample s = sample(new long[]{10, 20, 30, 31},
                chunk("a", null, null), chunk("b", null, null), chunk("c", null, null), chunk(null, "length", 3));
        assertEquals(3, s.tokens(), "the usage on the finish chunk");
        assertArrayEquals(new double[]{10, 10}, s.tokenGapsMs(), 1e-9);
        assertTrue(s.decodeTps() > 0, "decode tok/s " + s.decodeTps());
    }
}
