package io.ds4j.gpu;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.ds4j.cpu.TestModelsAccess;
import io.ds4j.engine.ConstrainedRuns;
import io.ds4j.engine.Generation;
import io.ds4j.grammar.Grammar;
import io.ds4j.grammar.RandomSchemas;
import io.ds4j.model.synth.Presets;
import io.ds4j.sampling.SamplingParams;
import io.ds4j.speculative.ModelDraftSource;
import io.ds4j.speculative.NgramDraft;
import io.ds4j.engine.VerifyWidth;
import io.ds4j.text.Tokenizer;
import io.ds4j.text.Tokenizers;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Constrained decoding with the target on the GPU (random weights, real vocabulary): speculative greedy output under a
 * constraint equals plain greedy output under it, and the output is complete JSON.
 */
@Tag("gpu")
class HipConstrainedTest {
    @Test
    void speculativeGreedyEqualsPlainGreedyUnderAConstraintOnTheGpu() throws Exception {
        Tokenizer tok = Tokenizers.vendored();
        ObjectMapper m = new ObjectMapper();
        try (HipBackend target = new HipBackend(TestModelsAccess.random(Presets.get("tiny"), 11));
             HipBackend twin = new HipBackend(TestModelsAccess.random(Presets.get("tiny"), 11))) {
            SplittableRandom r = new SplittableRandom(29);
            long offered = 0;
            for (int i = 0; i < 6; i++) {
                JsonNode schema = RandomSchemas.schema(r);
                Grammar g = Grammar.jsonSchema(schema);
                int[] prompt = tok.encode("<｜begin▁of▁sentence｜><｜User｜>GPU " + i + "<｜Assistant｜></think>");
                SamplingParams p = SamplingParams.greedy(Math.max(60, g.minBytes() + 8));
                var plain = ConstrainedRuns.run(target, tok, g, prompt, p, null, null);
                assertEquals(Generation.Finish.STOP, plain.finish(), plain.text());
                // the schema validator is a test-only dependency the device package does not carry: CI validates on
                // the CPU (ConstrainedGenerationTest); here the output must at least be complete JSON
                assertNotNull(m.readTree(plain.text()), schema + " -> " + plain.text());
                for (var src : new io.ds4j.speculative.DraftSource[]{NgramDraft.source(), new ModelDraftSource(twin, "twin", 16)}) {
                    var spec = ConstrainedRuns.run(target, tok, g, prompt, p, src, VerifyWidth.fixed(4));
                    assertArrayEquals(plain.tokens(), spec.tokens(), schema + " with " + src.name());
                    offered += spec.stats().offered();
                }
            }
            assertTrue(offered > 0, "drafts were offered");
        }
    }
}
