package io.ds4j.engine;

import io.ds4j.grammar.Grammar;
import io.ds4j.sampling.Sampler;
import io.ds4j.sampling.SamplingParams;
import io.ds4j.speculative.DraftSource;
import io.ds4j.engine.VerifyWidth;
import io.ds4j.text.Tokenizer;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/** Runs constrained generations for the CPU and GPU tests (no test-only libraries, so the device package can run it). */
public final class ConstrainedRuns {
    private ConstrainedRuns() {}

    /** One constrained generation: its tokens, text (EOS left out), speculative figures and finish. */
    public record Out(int[] tokens, String text, Generation.SpecStats stats, Generation.Finish finish) {}

    /** Runs one generation on target under grammar g to its end (prefill chunk 64, context 4096, rollback 16). */
    public static Out run(Backend target, Tokenizer tok, Grammar g, int[] prompt, SamplingParams p, DraftSource src, VerifyWidth w) {
        List<Integer> out = new ArrayList<>();
        ByteArrayOutputStream text = new ByteArrayOutputStream();
        Sampler s = new Sampler(p, target.config().vocabSize, prompt, tok.vocabSize());
        Generation gen = new Generation(target, target.newSequence(16), prompt, s, src == null ? null : src.open(prompt, p, 3), w,
                new Generation.Options(64, 4096, new int[]{tok.eosId()}, 16), (t, lp) -> {
                    out.add(t);
                    if (t != tok.eosId()) text.writeBytes(tok.tokenBytes(t));
                    return true;
                }, g.constraint(tok));
        while (gen.step()) { }
        return new Out(out.stream().mapToInt(Integer::intValue).toArray(), text.toString(StandardCharsets.UTF_8), gen.specStats(), gen.finish());
    }
}
