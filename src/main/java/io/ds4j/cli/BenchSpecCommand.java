package io.ds4j.cli;

import io.ds4j.cpu.CpuBackend;
import io.ds4j.engine.Backend;
import io.ds4j.engine.Generation;
import io.ds4j.model.WeightLoader;
import io.ds4j.model.synth.ModelStore;
import io.ds4j.sampling.Sampler;
import io.ds4j.sampling.SamplingParams;
import io.ds4j.speculative.DraftSource;
import io.ds4j.speculative.ModelDraftSource;
import io.ds4j.speculative.NgramDraft;
import io.ds4j.engine.VerifyWidth;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.Callable;

/**
 * {@code ds4j bench-spec}: plain greedy decode against speculative decoding with each draft source (n-gram lookup,
 * a draft model, and a copy of the target as the acceptance-1.0 upper bound) on the CPU backend. Prints acceptance
 * rate ("-" when the draft offered nothing), mean committed tokens per verify step and decode tokens/s per source,
 * after one warm-up pass of every configuration. A benchmark: asserts nothing.
 */
@Command(name = "bench-spec", mixinStandardHelpOptions = true,
        description = "Compare plain decoding with speculative decoding per draft source (CPU backend).")
public final class BenchSpecCommand implements Callable<Integer> {
    @Option(names = "--model", paramLabel = "DIR", description = "target model directory (default: the 'small' preset)") Path model;
    @Option(names = "--draft-model", paramLabel = "DIR", description = "draft model directory (default: the 'tiny' preset)") Path draftModel;
    @Option(names = "--prompt-tokens", defaultValue = "128", description = "prompt length (default ${DEFAULT-VALUE})") int promptTokens;
    @Option(names = "--decode-tokens", defaultValue = "64", description = "tokens generated per run (default ${DEFAULT-VALUE})") int decodeTokens;
    @Option(names = "--spec-q", defaultValue = "4", description = "verify width 1..8 or auto (default ${DEFAULT-VALUE})") String specQ;
    @Option(names = "--prompts", defaultValue = "2", description = "prompts per source (default ${DEFAULT-VALUE})") int prompts;

    @Override
    public Integer call() throws Exception {
        VerifyWidth.parse(specQ);
        if (promptTokens < 1 || decodeTokens < 2 || prompts < 1) throw new IllegalArgumentException("--prompt-tokens >= 1, --decode-tokens >= 2, --prompts >= 1");
        Path tdir = model != null ? model : ModelStore.ensure("small", 1, System.err::println);
        Path ddir = draftModel != null ? draftModel : ModelStore.ensure("tiny", 1, System.err::println);
        try (CpuBackend target = new CpuBackend(WeightLoader.load(tdir));
             CpuBackend copy = new CpuBackend(WeightLoader.load(tdir));
             CpuBackend drafter = new CpuBackend(WeightLoader.load(ddir))) {
            ModelDraftSource.checkCompatible(target, drafter, null, null);
            System.out.printf("target: %s%ndraft model: %s%nq = %s, %d prompts x %d prompt tokens, %d generated tokens each, greedy%n",
                    tdir, ddir, specQ, prompts, promptTokens, decodeTokens);
            List<int[]> ps = new ArrayList<>();
            SplittableRandom r = new SplittableRandom(3);
            for (int i = 0; i < prompts; i++) {
                int[] p = new int[promptTokens];
                // half random, half a repeated phrase, so lookup drafting has something to find (as in real text)
                for (int j = 0; j < promptTokens; j++) p[j] = j < promptTokens / 2 ? r.nextInt(target.config().vocabSize) : p[j % 16];
                ps.add(p);
            }
            // warm-up (JIT) for the target and both draft models, so no row pays for compilation
            run(target, null, null, ps, null, 0);
            run(target, new ModelDraftSource(drafter, "model", 16), VerifyWidth.parse(specQ), ps, null, 0);
            run(target, new ModelDraftSource(copy, "copy", 16), VerifyWidth.parse(specQ), ps, null, 0);
            System.out.printf("%-22s %10s %12s %14s %10s%n", "draft", "tokens/s", "acceptance", "tokens/step", "speed-up");
            double base = run(target, null, null, ps, "none (plain decode)", 0);
            run(target, NgramDraft.source(), VerifyWidth.parse(specQ), ps, "ngram", base);
            run(target, new ModelDraftSource(drafter, "model", 16), VerifyWidth.parse(specQ), ps, "draft model (tiny)", base);
            run(target, new ModelDraftSource(copy, "copy", 16), VerifyWidth.parse(specQ), ps, "copy of target", base);
        }
        return 0;
    }

    private double run(Backend target, DraftSource src, VerifyWidth w, List<int[]> ps, String label, double base) {
        long toks = 0;
        double secs = 0;
        Generation.SpecStats st = new Generation.SpecStats(0, 0, 0);
        for (int[] p : ps) {
            SamplingParams sp = SamplingParams.greedy(decodeTokens).withMaxTokens(decodeTokens);
            Sampler s = new Sampler(new SamplingParams(0, 0, 1, 0, null, 0, 0, 1, java.util.Map.of(), decodeTokens, List.of(), false, 0, true),
                    target.config().vocabSize, p);
            Generation g = new Generation(target, target.newSequence(16), p, s, src == null ? null : src.open(p, sp, 1),
                    w == null ? null : VerifyWidth.parse(specQ), new Generation.Options(512, 1 << 20, new int[0], 16), (t, lp) -> true);
            while (g.step()) { }
            toks += g.generatedTokens() - 1;
            secs += g.decodeSeconds();
            st = st.plus(g.specStats());
        }
        double tps = toks / secs;
        if (label == null) return tps;
        System.out.printf("%-22s %10.2f %12s %14s %10s%n", label, tps,
                src == null || st.offered() == 0 ? "-" : String.format("%.3f", st.acceptanceRate()),
                String.format("%.2f", st.committedPerStep()), base == 0 ? "1.00x" : String.format("%.2fx", tps / base));
        return tps;
    }
}
