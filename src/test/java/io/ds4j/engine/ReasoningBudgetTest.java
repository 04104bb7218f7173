package io.ds4j.engine;

import io.ds4j.cpu.CpuBackend;
import io.ds4j.cpu.TestModelsAccess;
import io.ds4j.grammar.Grammar;
import io.ds4j.model.synth.Presets;
import io.ds4j.sampling.Sampler;
import io.ds4j.sampling.SamplingParams;
import io.ds4j.speculative.DraftSource;
import io.ds4j.speculative.ModelDraftSource;
import io.ds4j.speculative.NgramDraft;
import io.ds4j.text.Tokenizer;
import io.ds4j.text.Tokenizers;
import io.ds4j.text.chat.V4Format;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The reasoning budget: its count and character boundary on made-up tokens, then in the generation loop on a random
 * model with the real vocabulary (preset tiny), which never ends its reasoning by itself in these few tokens: the
 * reasoning is cut after exactly the budget, the tokens before the cut are the model's own, and speculative output
 * (drafts from the same model and from n-gram lookup) and sampled output under a budget equal plain output under it.
 */
class ReasoningBudgetTest {
    static CpuBackend target, draftModel;
    static final Tokenizer TOK = Tokenizers.vendored();
    static final int END = TOK.id(V4Format.THINK_END).orElseThrow();

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

    /** Token 1 is "a"; 2, 3, 4 are the three bytes of "中" (E4 B8 AD); 5 is a four-byte lead alone. */
    static byte[] bytes(int t) {
        return switch (t) {
            case 1 -> new byte[]{'a'};
            case 2 -> new byte[]{(byte) 0xE4};
            case 3 -> new byte[]{(byte) 0xB8};
            case 4 -> new byte[]{(byte) 0xAD};
            case 5 -> new byte[]{(byte) 0xF0};
            default -> new byte[0];
        };
    }

    @Test
    void theBudgetEndsAtACharacterBoundary() {
        ReasoningBudget b = new ReasoningBudget(99, 2, ReasoningBudgetTest::bytes);
        assertFalse(b.forcing());
        b.committed(1);
        assertFalse(b.forcing(), "one of two spent");
        b.committed(2);
        assertFalse(b.forcing(), "spent, but inside a character");
        b.committed(3);
        assertFalse(b.forcing());
        b.committed(4);
        assertTrue(b.forcing(), "the character is finished");
        b.committed(99);
        assertTrue(b.ended());
        assertFalse(b.forcing(), "ended: nothing more to force");

        ReasoningBudget zero = new ReasoningBudget(99, 0, ReasoningBudgetTest::bytes);
        assertTrue(zero.forcing(), "a budget of 0 ends the reasoning at once");

        ReasoningBudget own = new ReasoningBudget(99, 3, ReasoningBudgetTest::bytes);
        own.committed(99);
        own.committed(1);
        own.committed(1);
        own.committed(1);
        assertFalse(own.forcing(), "the model ended its reasoning itself: the rest is the answer's");

        // a model that keeps opening characters is stopped after three tokens past the budget
        ReasoningBudget leads = new ReasoningBudget(99, 1, ReasoningBudgetTest::bytes);
        for (int i = 0; i < 3; i++) {
            leads.committed(5);
            assertFalse(leads.forcing(), "token " + i);
        }
        leads.committed(5);
        assertTrue(leads.forcing());
        assertThrows(IllegalArgumentException.class, () -> new ReasoningBudget(99, -1, ReasoningBudgetTest::bytes));
    }

    record Out(int[] tokens, Generation.SpecStats stats) {}

    static Out run(int budget, SamplingParams p, DraftSource src, Grammar g) {
        int[] prompt = TOK.encode(V4Format.BOS + V4Format.USER + "Think about it" + V4Format.ASSISTANT + V4Format.THINK_START);
        List<Integer> out = new ArrayList<>();
        Sampler s = new Sampler(p, target.config().vocabSize, prompt, TOK.vocabSize());
        Generation gen = new Generation(target, target.newSequence(16), prompt, s, src == null ? null : src.open(prompt, p, 3),
                src == null ? null : VerifyWidth.fixed(3), new Generation.Options(64, 4096, new int[]{TOK.eosId()}, 16),
                (t, lp) -> out.add(t), g == null ? null : g.constraint(TOK));
        if (budget >= 0) gen.limitReasoning(new ReasoningBudget(END, budget, TOK::tokenBytes));
        while (gen.step()) { }
        return new Out(out.stream().mapToInt(Integer::intValue).toArray(), gen.specStats());
    }

    /** The index of the first end-of-reasoning token, or -1. */
    static int end(int[] tokens) {
        for (int i = 0; i < tokens.length; i++) if (tokens[i] == END) return i;
        return -1;
    }

    @Test
    void theReasoningIsCutAfterTheBudgetAndSpeculationAgrees() {
        SamplingParams greedy = SamplingParams.greedy(24);
        int[] free = run(-1, greedy, null, null).tokens();
        assertEquals(-1, end(Arrays.copyOf(free, 9)), "the random model does not end its reasoning this early by itself");
        for (int budget : new int[]{0, 1, 6}) {
            int[] capped = run(budget, greedy, null, null).tokens();
            int cut = end(capped);
            // a character the model's tokens leave unfinished may take up to three more tokens
            assertTrue(cut >= budget && cut <= budget + 3, "budget " + budget + ": the end at " + cut + " in " + Arrays.toString(capped));
            assertArrayEquals(Arrays.copyOf(free, cut), Arrays.copyOf(capped, cut), "the tokens before the cut are the model's own");
            assertTrue(capped.length > cut + 1, "the answer goes on after the cut: " + Arrays.toString(capped));
            for (DraftSource src : List.of(new ModelDraftSource(draftModel, "model", 16), NgramDraft.source()))
                assertArrayEquals(capped, run(budget, greedy, src, null).tokens(), "budget " + budget + " with " + src.name());
        }
        Out same = run(6, greedy, new ModelDraftSource(draftModel, "model", 16), null);
        assertTrue(same.stats().accepted() > 0, "drafts were accepted: " + same.stats());

        SamplingParams sampled = SamplingParams.sampled(1.0, 0, 0.95, 0, 7, 24);
        int[] plain = run(4, sampled, null, null).tokens();
        int cut = end(plain);
        assertTrue(cut >= 4 && cut <= 7, Arrays.toString(plain));
        assertArrayEquals(plain, run(4, sampled, null, null).tokens(), "seeded: the same output again");
    }

    @Test
    void underAConstraintTheCutComesWhereTheGrammarAllowsIt() throws Exception {
        Grammar g = Grammar.jsonObject().afterThinking();
        int[] capped = run(5, SamplingParams.greedy(80), null, g).tokens();
        int cut = end(capped);
        assertTrue(cut >= 5 && cut <= 8, Arrays.toString(capped));
        StringBuilder answer = new StringBuilder();
        for (int i = cut + 1; i < capped.length && capped[i] != TOK.eosId(); i++)
            answer.append(new String(TOK.tokenBytes(capped[i]), java.nio.charset.StandardCharsets.UTF_8));
        assertTrue(new com.fasterxml.jackson.databind.ObjectMapper().readTree(answer.toString()).isObject(), answer.toString());
    }
}
