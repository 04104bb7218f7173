package io.ds4j.speculative;

import io.ds4j.engine.Draft;
import io.ds4j.cpu.CpuBackend;
import io.ds4j.cpu.TestModelsAccess;
import io.ds4j.engine.Backend;
import io.ds4j.engine.Sequence;
import io.ds4j.engine.StepKind;
import io.ds4j.model.ModelConfig;
import io.ds4j.sampling.SamplingParams;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.*;

/**
 * A draft model marks its forwards: catching up on several tokens (the prompt, or tokens accepted since the last
 * proposal) is a {@link StepKind#PREFILL} chunk, a single token a {@link StepKind#DECODE} step, and it never runs a
 * {@link StepKind#VERIFY} step (so the GPU backend's verify attention option never applies to a draft).
 */
class ModelDraftSourceStepKindTest {

    /** Records the kind of every forward and delegates to a real backend. */
    static final class Recording implements Backend {
        final Backend inner;
        final List<int[]> calls = new ArrayList<>(); // {count, kind ordinal or -1 when no kind was given}

        Recording(Backend inner) {
            this.inner = inner;
        }

        @Override public String name() { return inner.name(); }
        @Override public ModelConfig config() { return inner.config(); }
        @Override public Sequence newSequence(int maxRollback) { return inner.newSequence(maxRollback); }
        @Override public long stateBytes(int contextTokens, int maxRollback) { return inner.stateBytes(contextTokens, maxRollback); }
        @Override public void close() { inner.close(); }

        @Override
        public float[] forward(Sequence seq, int[] tokens, int off, int count, int[] logitRows) {
            calls.add(new int[]{count, -1});
            return inner.forward(seq, tokens, off, count, logitRows);
        }

        @Override
        public float[] forward(Sequence seq, int[] tokens, int off, int count, int[] logitRows, StepKind kind) {
            calls.add(new int[]{count, kind.ordinal()});
            return inner.forward(seq, tokens, off, count, logitRows, kind);
        }
    }

    @Test
    void catchUpIsPrefillAndSingleTokensAreDecode() {
        ModelConfig c = TestModelsAccess.microConfig();
        Recording rec = new Recording(new CpuBackend(TestModelsAccess.random(c, 3)));
        try (ModelDraftSource src = new ModelDraftSource(rec, "model:micro", 16)) {
            int[] ctx = new int[64];
            for (int i = 0; i < 6; i++) ctx[i] = 1 + i;
            int len = 6;
            Draft d = src.open(java.util.Arrays.copyOf(ctx, len), SamplingParams.greedy(32), 0);
            // the first proposal catches up on the whole 6-token prompt
            Draft.Proposal p = d.propose(ctx, len, 4);
            assertEquals(4, p.size());
            // the target accepted two proposals and added its own token: three new committed tokens
            ctx[len] = p.tokens()[0];
            ctx[len + 1] = p.tokens()[1];
            ctx[len + 2] = (p.tokens()[2] + 1) % c.vocabSize;
            len += 3;
            d.committed(ctx, len);
            d.propose(ctx, len, 3);
            // rejected everything: only the target's own token is new
            ctx[len] = 5;
            len += 1;
            d.committed(ctx, len);
            d.propose(ctx, len, 2);
            d.close();
        }
        boolean prefill = false, decode = false;
        for (int[] call : rec.calls) {
            assertNotEquals(-1, call[1], "every draft forward names its kind");
            StepKind k = StepKind.values()[call[1]];
            assertNotEquals(StepKind.VERIFY, k, "a draft never verifies");
            assertEquals(call[0] > 1 ? StepKind.PREFILL : StepKind.DECODE, k, "a forward of " + call[0] + " token(s)");
            prefill |= k == StepKind.PREFILL;
            decode |= k == StepKind.DECODE;
        }
        assertTrue(prefill && decode, "both kinds occurred");
        assertEquals(6, rec.calls.getFirst()[0], "the first forward is the whole prompt");
    }
}
