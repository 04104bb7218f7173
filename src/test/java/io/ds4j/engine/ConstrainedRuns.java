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

    /** A request of {@link #batched}. */
    public record Req(Grammar g, int[] prompt, SamplingParams p, DraftSource src, VerifyWidth w) {}

    /**
     * Runs the requests together through one {@link Scheduler} (token budget 64, prefill chunk 64), each tick's
     * constrained rows sampled ahead on several threads, and returns each one's tokens.
     */
    public static List<int[]> batched(Backend target, Tokenizer tok, List<Req> reqs) {
        Scheduler<Integer> sch = new Scheduler<>(target, new Scheduler.Limits(256, 64));
        List<List<Integer>> outs = new ArrayList<>();
        for (int i = 0; i < reqs.size(); i++) {
            Req r = reqs.get(i);
            List<Integer> out = new ArrayList<>();
            outs.add(out);
            Sampler s = new Sampler(r.p(), target.config().vocabSize, r.prompt(), tok.vocabSize());
            sch.add(i, new Generation(target, target.newSequence(16), r.prompt(), s, r.src() == null ? null : r.src().open(r.prompt(), r.p(), 3),
                    r.w(), new Generation.Options(Scheduler.prefillChunk(64, sch.limits()), 4096, new int[]{tok.eosId()}, 16),
                    (t, lp) -> { out.add(t); return true; }, r.g().constraint(tok)));
        }
        for (int ticks = 0; !sch.isEmpty(); ticks++) {
            Scheduler.Tick<Integer> t = sch.tick();
            if (!t.failed().isEmpty()) throw new IllegalStateException("failed: " + t.failed());
            if (ticks > 100_000) throw new IllegalStateException("no end");
        }
        List<int[]> r = new ArrayList<>();
        for (List<Integer> o : outs) r.add(o.stream().mapToInt(Integer::intValue).toArray());
        return r;
    }
}
