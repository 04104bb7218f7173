package io.ds4j.cli;

import io.ds4j.engine.Backend;
import io.ds4j.engine.Generation;
import io.ds4j.model.synth.ModelStore;
import io.ds4j.model.synth.RandomCheckpoint;
import io.ds4j.sampling.Sampler;
import io.ds4j.sampling.SamplingParams;
import io.ds4j.speculative.DraftSource;
import io.ds4j.speculative.ModelDraftSource;
import io.ds4j.speculative.MtpDraftSource;
import io.ds4j.speculative.NgramDraft;
import io.ds4j.speculative.VerifyWidth;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.Callable;

/**
 * {@code ds4j bench-spec}: plain greedy decode against speculative decoding with each draft source (n-gram lookup,
 * a draft model, a copy of the target as the acceptance-1.0 upper bound, and the checkpoint's own MTP layer) on the
 * CPU backend (or the GPU one with {@code --backend hip}). Prints acceptance rate ("-" when the draft offered nothing),
 * mean committed tokens per verify step and decode tokens/s per source, after one warm-up pass of every configuration;
 * with the MTP source also the MTP's cost per draft token as a fraction of a target decode step (both timed on a
 * prefilled prompt: one MTP entry plus the shared head per draft token, against one plain decode step).
 * A benchmark: asserts nothing.
 */
@Command(name = "bench-spec", mixinStandardHelpOptions = true,
        description = "Compare plain decoding with speculative decoding per draft source (CPU backend by default).")
public final class BenchSpecCommand implements Callable<Integer> {
    @Option(names = "--model", paramLabel = "DIR", description = "target model directory (default: the 'small' preset)") Path model;
    @Option(names = "--preset", paramLabel = "NAME", description = "target: a preset model instead of --model (tiny, small, flash-shaped; "
            + "flash-shaped is FP8/FP4), created on first use") String preset;
    @Option(names = "--layers", paramLabel = "L", description = "with --preset: layer count (default: the preset's)") Integer layers;
    @Option(names = "--experts", paramLabel = "E", description = "with --preset: routed experts per layer (default: the preset's)") Integer experts;
    @Option(names = "--backend", defaultValue = "cpu", paramLabel = "cpu|hip", description = "backend of the target and the draft models (default ${DEFAULT-VALUE})") String backend;
    @Option(names = "--drafts", defaultValue = "ngram,model,copy,mtp", paramLabel = "LIST",
            description = "draft sources to run, comma-separated: ngram, model, copy, mtp (default ${DEFAULT-VALUE})") String drafts;
    @Option(names = "--draft-model", paramLabel = "DIR", description = "draft model directory (default: the 'tiny' preset)") Path draftModel;
    @Option(names = "--prompt-tokens", defaultValue = "128", description = "prompt length (default ${DEFAULT-VALUE})") int promptTokens;
    @Option(names = "--decode-tokens", defaultValue = "64", description = "tokens generated per run (default ${DEFAULT-VALUE})") int decodeTokens;
    @Option(names = "--spec-q", defaultValue = "4", description = "verify width 1..8 or auto (default ${DEFAULT-VALUE})") String specQ;
    @Option(names = "--prompts", defaultValue = "2", description = "prompts per source (default ${DEFAULT-VALUE})") int prompts;

    @Override
    public Integer call() throws Exception {
        VerifyWidth.parse(specQ);
        if (promptTokens < 1 || decodeTokens < 2 || prompts < 1) throw new IllegalArgumentException("--prompt-tokens >= 1, --decode-tokens >= 2, --prompts >= 1");
        List<String> want = List.of(drafts.split(","));
        for (String d : want)
            if (!List.of("ngram", "model", "copy", "mtp").contains(d))
                throw new IllegalArgumentException("--drafts: unknown draft source '" + d + "' (ngram, model, copy, mtp)");
        if (!io.ds4j.engine.Backends.NAMES.contains(backend))
            throw new IllegalArgumentException("--backend must be one of " + io.ds4j.engine.Backends.NAMES + ", got '" + backend + "'");
        Path tdir = model != null ? model : preset != null
                ? ModelStore.ensureVariant(preset, layers, experts, preset.startsWith("flash") ? RandomCheckpoint.Storage.FP8
                        : RandomCheckpoint.Storage.BF16, 1, System.err::println)
                : ModelStore.ensure("small", 1, System.err::println);
        boolean needDrafter = want.contains("model");
        Path ddir = !needDrafter ? null : draftModel != null ? draftModel : ModelStore.ensure("tiny", 1, System.err::println);
        try (Backend target = io.ds4j.engine.Backends.open(backend, tdir);
             Backend copy = want.contains("copy") ? io.ds4j.engine.Backends.open(backend, tdir) : null;
             Backend drafter = needDrafter ? io.ds4j.engine.Backends.open(backend, ddir) : null) {
            if (drafter != null) ModelDraftSource.checkCompatible(target, drafter, null, null);
            MtpDraftSource mtp = null;
            if (want.contains("mtp")) {
                try {
                    mtp = new MtpDraftSource(target, 16);
                } catch (IllegalStateException | UnsupportedOperationException e) {
                    System.out.println("mtp: skipped (" + e.getMessage() + ")");
                }
            }
            System.out.printf("target: %s (%s backend)%ndraft model: %s%nq = %s, %d prompts x %d prompt tokens, %d generated tokens each, greedy%n",
                    tdir, backend, ddir == null ? "-" : ddir, specQ, prompts, promptTokens, decodeTokens);
            List<int[]> ps = new ArrayList<>();
            SplittableRandom r = new SplittableRandom(3);
            for (int i = 0; i < prompts; i++) {
                int[] p = new int[promptTokens];
                // half random, half a repeated phrase, so lookup drafting has something to find (as in real text)
                for (int j = 0; j < promptTokens; j++) p[j] = j < promptTokens / 2 ? r.nextInt(target.config().vocabSize) : p[j % 16];
                ps.add(p);
            }
            // warm-up (JIT) for the target and every draft source, so no row pays for compilation
            run(target, null, null, ps, null, 0);
            if (drafter != null) run(target, new ModelDraftSource(drafter, "model", 16), VerifyWidth.parse(specQ), ps, null, 0);
            if (copy != null) run(target, new ModelDraftSource(copy, "copy", 16), VerifyWidth.parse(specQ), ps, null, 0);
            if (mtp != null) run(target, mtp, VerifyWidth.parse(specQ), ps, null, 0);
            System.out.printf("%-22s %10s %12s %14s %10s%n", "draft", "tokens/s", "acceptance", "tokens/step", "speed-up");
            double base = run(target, null, null, ps, "none (plain decode)", 0);
            if (want.contains("ngram")) run(target, NgramDraft.source(), VerifyWidth.parse(specQ), ps, "ngram", base);
            if (drafter != null) run(target, new ModelDraftSource(drafter, "model", 16), VerifyWidth.parse(specQ), ps, "draft model (tiny)", base);
            if (copy != null) run(target, new ModelDraftSource(copy, "copy", 16), VerifyWidth.parse(specQ), ps, "copy of target", base);
            if (mtp != null) {
                run(target, mtp, VerifyWidth.parse(specQ), ps, "mtp", base);
                mtpCost(target, ps.getFirst());
            }
        }
        return 0;
    }

    /**
     * The MTP's cost per draft token against a target decode step, both on the prompt prefilled: a decode step is one
     * token forwarded and rolled back; a draft token is one MTP entry and the shared head (a proposal's start or one
     * chained step, which cost the same), in proposals of q = 4.
     */
    static void mtpCost(Backend target, int[] prompt) {
        int len = prompt.length, reps = 24, q = 4;
        try (io.ds4j.engine.Sequence seq = target.newSequence(16); io.ds4j.engine.MtpState st = target.mtp().open(seq, 16)) {
            target.forward(seq, prompt, 0, len - 1, new int[0], io.ds4j.engine.StepKind.PREFILL);
            long t0 = 0;
            for (int i = 0; i < reps + 4; i++) {
                if (i == 4) t0 = System.nanoTime();
                target.forward(seq, prompt, len - 1, 1, new int[]{0}, io.ds4j.engine.StepKind.DECODE);
                seq.rollback(1);
            }
            double decodeMs = (System.nanoTime() - t0) / 1e6 / reps;
            int tokens = 0;
            for (int i = 0; i < reps + 4; i++) {
                if (i == 4) {
                    t0 = System.nanoTime();
                    tokens = 0;
                }
                st.start(prompt, len);
                for (int j = 1; j < q; j++) st.next(prompt[j]);
                tokens += q;
            }
            double mtpMs = (System.nanoTime() - t0) / 1e6 / tokens;
            System.out.printf("mtp draft cost: %.3f ms per draft token = %.1f %% of a target decode step (%.3f ms) [%d decode steps, %d draft tokens]%n",
                    mtpMs, 100 * mtpMs / decodeMs, decodeMs, reps, tokens);
        }
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
