package io.ds4j.engine;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.networknt.schema.JsonSchemaFactory;
import com.networknt.schema.SpecVersion;
import io.ds4j.cpu.CpuBackend;
import io.ds4j.cpu.TestModelsAccess;
import io.ds4j.grammar.Grammar;
import io.ds4j.grammar.RandomSchemas;
import io.ds4j.model.synth.Presets;
import io.ds4j.sampling.SamplingParams;
import io.ds4j.speculative.DraftSource;
import io.ds4j.speculative.ModelDraftSource;
import io.ds4j.speculative.NgramDraft;
import io.ds4j.engine.VerifyWidth;
import io.ds4j.text.Tokenizer;
import io.ds4j.text.Tokenizers;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Constrained decoding in the generation loop on a random model with the real vocabulary (preset tiny): speculative
 * greedy output under a constraint equals plain greedy output under it, token for token, with drafts from the same
 * model (which propose what the target wants, constraint or not) and from n-gram lookup; sampled outputs validate.
 */
class ConstrainedGenerationTest {
    static CpuBackend target, draftModel;
    static final Tokenizer TOK = Tokenizers.vendored();
    static final ObjectMapper M = new ObjectMapper();

    @BeforeAll
    static void load() {
        target = new CpuBackend(TestModelsAccess.random(Presets.get("tiny"), 11));
        draftModel = new CpuBackend(TestModelsAccess.random(Presets.get("tiny"), 11));
    }

    @AfterAll
    static void close() {
        target.close();
        draftModel.close();
    }

    static ConstrainedRuns.Out run(Grammar g, int[] prompt, SamplingParams p, DraftSource src, VerifyWidth w) {
        return ConstrainedRuns.run(target, TOK, g, prompt, p, src, w);
    }

    @Test
    void speculativeGreedyEqualsPlainGreedyUnderAConstraint() throws Exception {
        SplittableRandom r = new SplittableRandom(23);
        DraftSource same = new ModelDraftSource(draftModel, "model", 16);
        long offered = 0, accepted = 0;
        for (int trial = 0; trial < 6; trial++) {
            JsonNode schema = RandomSchemas.schema(r);
            Grammar g = Grammar.jsonSchema(schema);
            int[] prompt = TOK.encode("<｜begin▁of▁sentence｜><｜User｜>Data " + trial + "<｜Assistant｜></think>");
            SamplingParams p = SamplingParams.greedy(Math.max(60, g.minBytes() + 8));
            ConstrainedRuns.Out plain = run(g, prompt, p, null, null);
            for (DraftSource src : List.of(same, NgramDraft.source())) {
                for (VerifyWidth w : List.of(VerifyWidth.fixed(3), VerifyWidth.parse("auto"))) {
                    ConstrainedRuns.Out spec = run(g, prompt, p, src, w);
                    assertArrayEquals(plain.tokens(), spec.tokens(), schema + " with " + src.name() + " " + w);
                    offered += spec.stats().offered();
                    accepted += spec.stats().accepted();
                }
            }
            assertEquals(Generation.Finish.STOP, plain.finish(), plain.text());
            assertTrue(JsonSchemaFactory.getInstance(SpecVersion.VersionFlag.V202012).getSchema(schema)
                    .validate(M.readTree(plain.text())).isEmpty(), schema + " -> " + plain.text());
        }
        assertTrue(offered > 0 && accepted > 0, "drafts were offered (" + offered + ") and accepted (" + accepted + ")");
    }

    /**
     * Constrained requests batched through one scheduler (their masks and distributions computed ahead on several
     * threads, the drafts' rows by the constraint's state after the drafts) give each request's tokens as alone:
     * greedy and seeded sampling, no draft, n-gram and model drafts, JSON schemas (two requests sharing one), a regex
     * and a choice.
     */
    @Test
    void batchedConstrainedRequestsAreAsAlone() throws Exception {
        SplittableRandom r = new SplittableRandom(47);
        DraftSource same = new ModelDraftSource(draftModel, "model", 16);
        List<ConstrainedRuns.Req> reqs = new java.util.ArrayList<>();
        JsonNode shared = RandomSchemas.schema(r);
        for (int i = 0; i < 8; i++) {
            Grammar g = switch (i) {
                case 0, 1 -> Grammar.jsonSchema(shared);
                case 2 -> Grammar.regex("(red|green|blue)( [a-z]{1,8}){1,5}\\.");
                case 3 -> Grammar.choice(List.of("alpha", "beta gamma", "delta"));
                default -> Grammar.jsonSchema(RandomSchemas.schema(r));
            };
            int[] prompt = TOK.encode("<｜begin▁of▁sentence｜><｜User｜>Batch " + i + "<｜Assistant｜></think>");
            int max = Math.max(40, g.minBytes() + 8);
            SamplingParams p = i % 2 == 0 ? SamplingParams.greedy(max) : SamplingParams.sampled(1.0, 0, 0.95, 0, 300 + i, max);
            // drafts the constraint allows, so that verify rows after accepted drafts are masked ahead: the greedy
            // output predicted (as a predicted output would), and the drafts of a model or of n-gram lookup
            int[] greedy = run(g, prompt, SamplingParams.greedy(max), null, null).tokens();
            DraftSource src = switch (i % 4) {
                case 0 -> null;
                case 1 -> NgramDraft.source();
                case 2 -> same;
                default -> io.ds4j.speculative.PredictionDraft.source(java.util.Arrays.copyOf(greedy, greedy.length - 1), null);
            };
            if (i < 2) src = io.ds4j.speculative.PredictionDraft.source(java.util.Arrays.copyOf(greedy, greedy.length - 1), null);
            reqs.add(new ConstrainedRuns.Req(g, prompt, p, src, src == null ? null : VerifyWidth.fixed(3)));
        }
        List<int[]> batched = ConstrainedRuns.batched(target, TOK, reqs);
        for (int i = 0; i < reqs.size(); i++) {
            ConstrainedRuns.Req q = reqs.get(i);
            ConstrainedRuns.Out alone = run(q.g(), q.prompt(), q.p(), q.src(), q.w());
            assertArrayEquals(alone.tokens(), batched.get(i), "request " + i + " (" + q.g() + ")");
        }
    }

    /**
     * Constrained greedy rows chosen among their masks by the backend (argmax-only entries with masks,
     * {@link Backend#argmaxMasks}) give the tokens that sampling their full logits on the host gives: alone and batched
     * through a scheduler, with and without drafts (verify rows masked after the drafts before them), JSON schemas, a
     * regex, a choice and a grammar; and the masked steps were taken.
     */
    @Test
    void maskedArgmaxRowsGiveTheTokensOfFullLogits() throws Exception {
        SplittableRandom r = new SplittableRandom(61);
        DraftSource same = new ModelDraftSource(draftModel, "model", 16);
        TrackingBackend masked = new TrackingBackend(target), logits = new TrackingBackend(target);
        masked.masks = true;
        List<ConstrainedRuns.Req> reqs = new java.util.ArrayList<>();
        for (int i = 0; i < 6; i++) {
            Grammar g = switch (i) {
                case 0 -> Grammar.regex("(red|green|blue)( [a-z]{1,8}){1,5}\\.");
                case 1 -> Grammar.choice(List.of("alpha", "beta gamma", "delta"));
                case 2 -> Grammar.ebnf("root ::= \"(\" item (\", \" item)* \")\"\nitem ::= [a-z]+ | root\n");
                default -> Grammar.jsonSchema(RandomSchemas.schema(r));
            };
            int[] prompt = TOK.encode("<｜begin▁of▁sentence｜><｜User｜>Masked " + i + "<｜Assistant｜></think>");
            SamplingParams p = SamplingParams.greedy(Math.max(40, g.minBytes() + 8));
            int[] plain = ConstrainedRuns.run(logits, TOK, g, prompt, p, null, null).tokens();
            // the greedy output predicted (every draft accepted: each verify row's mask is the state after its drafts),
            // and the drafts of a model and of n-gram lookup
            DraftSource predicted = io.ds4j.speculative.PredictionDraft.source(java.util.Arrays.copyOf(plain, plain.length - 1), null);
            for (DraftSource src : java.util.Arrays.asList(null, predicted, NgramDraft.source(), same)) {
                VerifyWidth w = src == null ? null : VerifyWidth.fixed(3);
                assertArrayEquals(plain, ConstrainedRuns.run(masked, TOK, g, prompt, p, src, w).tokens(),
                        "alone: " + g + " with " + (src == null ? "no draft" : src.name()));
            }
            DraftSource src = i % 2 == 0 ? predicted : same;
            reqs.add(new ConstrainedRuns.Req(g, prompt, p, src, VerifyWidth.fixed(3)));
        }
        List<int[]> a = ConstrainedRuns.batched(logits, TOK, reqs), b = ConstrainedRuns.batched(masked, TOK, reqs);
        for (int i = 0; i < reqs.size(); i++) assertArrayEquals(a.get(i), b.get(i), "batched: request " + i);
        long maskedRows = masked.entries.stream().flatMap(List::stream).filter(e -> e.argmaxMasks() != null)
                .mapToLong(e -> e.logitRows().length).sum();
        long verifyRows = masked.entries.stream().flatMap(List::stream)
                .filter(e -> e.argmaxMasks() != null && e.kind() == StepKind.VERIFY).count();
        assertTrue(maskedRows > 100 && verifyRows > 0, "masked rows " + maskedRows + ", verify entries " + verifyRows);
        assertTrue(logits.entries.stream().flatMap(List::stream).noneMatch(e -> e.argmaxMasks() != null),
                "a backend that does not say argmaxMasks gets no masks");
    }

    @Test
    void sampledSpeculativeOutputValidates() throws Exception {
        SplittableRandom r = new SplittableRandom(31);
        DraftSource same = new ModelDraftSource(draftModel, "model", 16);
        for (int trial = 0; trial < 4; trial++) {
            JsonNode schema = RandomSchemas.schema(r);
            Grammar g = Grammar.jsonSchema(schema);
            int[] prompt = TOK.encode("<｜begin▁of▁sentence｜><｜User｜>Sampled " + trial + "<｜Assistant｜></think>");
            SamplingParams p = SamplingParams.sampled(1.0, 0, 0.95, 0, 100 + trial, Math.max(60, g.minBytes() + 8));
            ConstrainedRuns.Out o = run(g, prompt, p, same, VerifyWidth.fixed(4));
            assertEquals(Generation.Finish.STOP, o.finish(), o.text());
            assertTrue(JsonSchemaFactory.getInstance(SpecVersion.VersionFlag.V202012).getSchema(schema)
                    .validate(M.readTree(o.text())).isEmpty(), schema + " -> " + o.text());
        }
    }

    /**
     * An array that can never fit, next to null: greedy decoding pushed towards '[' by logit_bias still writes null
     * and stops (the array's distance once wrapped negative, so the decoder opened it and ran out of tokens).
     */
    @Test
    void aHugeMinItemsArrayNextToNullEndsWithNull() throws Exception {
        Grammar g = Grammar.jsonSchema(M.readTree("{\"anyOf\":[{\"type\":\"array\",\"minItems\":2147483647},{\"type\":\"null\"}]}"));
        int[] open = TOK.encode("[");
        assertEquals(1, open.length);
        int[] prompt = TOK.encode("<｜begin▁of▁sentence｜><｜User｜>Nothing<｜Assistant｜></think>");
        SamplingParams p = SamplingParams.greedy(16).withLogitBias(java.util.Map.of(open[0], 100f));
        ConstrainedRuns.Out o = run(g, prompt, p, null, null);
        assertEquals("null", o.text().strip());
        assertEquals(Generation.Finish.STOP, o.finish(), o.text());
    }
}
