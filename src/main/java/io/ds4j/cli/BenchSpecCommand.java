package io.ds4j.cli;

import io.ds4j.engine.Backend;
import io.ds4j.app.Backends;
import io.ds4j.engine.Generation;
import io.ds4j.model.synth.ModelStore;
import io.ds4j.model.synth.RandomCheckpoint;
import io.ds4j.sampling.Sampler;
import io.ds4j.sampling.SamplingParams;
import io.ds4j.engine.Draft;
import io.ds4j.speculative.DraftSource;
import io.ds4j.speculative.ModelDraftSource;
import io.ds4j.speculative.MtpDraftSource;
import io.ds4j.speculative.NgramDraft;
import io.ds4j.engine.VerifyWidth;
import io.ds4j.speculative.PredictionDraft;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.Callable;
import java.util.function.Function;

/**
 * {@code ds4j bench-spec}: plain greedy decode against speculative decoding per draft source, on the CPU or the GPU
 * backend: n-gram lookup, a draft model, a copy of the target (a second sequence of the target's own backend: the
 * acceptance-1.0 draft at the full price of a target step), an edited prediction (the target's own greedy output
 * with one token in 12 replaced, sent back as a predicted output) and a replay (the target's greedy output sent back
 * unchanged: acceptance 1.0 at almost no draft cost, what speculation can give with a perfect cheap draft), and the
 * checkpoint's own MTP layer. The predictions come from the plain run, which is greedy and deterministic. With the MTP
 * source it also prints the MTP's cost per draft token as a fraction of a target decode step ({@link #mtpCost}).
 *
 * <p>Per source it prints decode tokens/s, acceptance rate ("-" when the draft offered nothing), mean tokens committed
 * per verify step, the speed-up over plain decoding, and the draft's cost per verify step (its propose and commit
 * calls, timed around the draft) as a fraction of a plain target decode step (the plain run's seconds per token).
 * Every configuration runs --warmup times untimed first; plain decoding runs again at the end to show drift. A benchmark:
 * asserts nothing.
 */
@Command(name = "bench-spec", mixinStandardHelpOptions = true,
        description = "Compare plain decoding with speculative decoding per draft source (CPU or GPU backend).")
public final class BenchSpecCommand implements Callable<Integer> {
    /** Every source, in the order printed. */
    static final List<String> SOURCES = List.of("none", "ngram", "model", "copy", "mtp", "prediction", "replay");

    @Option(names = "--backend", defaultValue = "cpu", description = "cpu or hip (default ${DEFAULT-VALUE})") String backend;
    @Option(names = "--model", paramLabel = "DIR", description = "target model directory (default: the 'small' preset, or the --preset variant)") Path model;
    @Option(names = "--preset", description = "preset variant as the target when no --model: tiny, small, flash-shaped") String preset;
    @Option(names = "--layers", description = "layers of the preset variant (default: the preset's)") Integer layers;
    @Option(names = "--experts", description = "routed experts per layer of the preset variant (default: the preset's)") Integer experts;
    @Option(names = "--dtype", description = "storage of a preset variant: fp8 (FP8 dense + FP4 experts) or bf16 (default fp8)") String dtype;
    @Option(names = "--draft-model", paramLabel = "DIR", description = "draft model directory (default: the 'tiny' preset)") Path draftModel;
    @Option(names = {"--drafts", "--sources"}, defaultValue = "none,ngram,model,copy,mtp,prediction,replay", split = ",",
            description = "draft sources to run: none, ngram, model, copy, mtp, prediction, replay (default ${DEFAULT-VALUE}; plain decoding always runs; mtp is skipped, with the reason, on a checkpoint without an MTP layer)") List<String> sources;
    @Option(names = "--prompt-tokens", defaultValue = "128", description = "prompt length (default ${DEFAULT-VALUE})") int promptTokens;
    @Option(names = "--decode-tokens", defaultValue = "64", description = "tokens generated per run (default ${DEFAULT-VALUE})") int decodeTokens;
    @Option(names = "--spec-q", defaultValue = "4", description = "verify width 1..8 or auto (default ${DEFAULT-VALUE})") String specQ;
    @Option(names = "--prompts", defaultValue = "2", description = "prompts per source (default ${DEFAULT-VALUE})") int prompts;
    @Spec CommandLine.Model.CommandSpec spec;
    @Option(names = "--warmup", defaultValue = "2", description = "untimed passes of every configuration before the timed ones, 0 or more; one plain pass, which records the outputs the prediction and replay drafts send back, runs untimed first at any value (default ${DEFAULT-VALUE})") int warmup;

    @Override
    public Integer call() throws Exception {
        List<String> bad = new ArrayList<>();
        try {
            VerifyWidth.parse(specQ);
        } catch (IllegalArgumentException e) {
            // bench-spec measures speculation: no width 0 (no speculation) here, unlike serve and generate
            bad.add("--spec-q: " + e.getMessage() + " (bench-spec times speculative decoding against plain decoding, which it runs itself)");
        }
        String unknown = io.ds4j.engine.FeatureGate.unknownBackend(backend);
        if (unknown != null) bad.add("--backend: " + unknown);
        if (promptTokens < 1) bad.add("--prompt-tokens must be at least 1, got " + promptTokens);
        if (decodeTokens < 2) bad.add("--decode-tokens must be at least 2, got " + decodeTokens);
        if (prompts < 1) bad.add("--prompts must be at least 1, got " + prompts);
        if (warmup < 0) bad.add("--warmup must be at least 0 (the untimed passes before the timed ones), got " + warmup);
        RandomCheckpoint.Storage storage = RandomCheckpoint.Storage.FP8;
        if (dtype != null) {
            try {
                storage = RandomCheckpoint.Storage.parse(dtype);
            } catch (IllegalArgumentException e) {
                bad.add("--dtype: " + e.getMessage());
            }
        }
        // beside --model (which is the target) a variant's options would be silently unused: refused, naming them
        String besideModel = Main.variantOptionsBesideModel(spec == null ? null : spec.commandLine().getParseResult());
        if (besideModel != null) bad.add(besideModel);
        if (!bad.isEmpty()) throw new IllegalArgumentException(String.join("; ", bad));
        Set<String> want = new LinkedHashSet<>(sources);
        // picocli drops the empty entries of a split list ("--drafts ,," is no list at all, which ran plain decoding
        // alone), so they are found in the arguments as typed, and refused as the empty entry of "--drafts=" is
        CommandLine.ParseResult parsed = spec == null ? null : spec.commandLine().getParseResult();
        String empty = sourcesOptionWith(parsed, "");
        if (empty != null)
            throw new IllegalArgumentException(empty + ": unknown source '' (expected some of " + SOURCES + ")");
        for (String s : want)
            if (!SOURCES.contains(s)) {
                String typed = sourcesOptionWith(parsed, s);
                throw new IllegalArgumentException((typed != null ? typed : SOURCES_NAMES.getFirst())
                        + ": unknown source '" + s + "' (expected some of " + SOURCES + ")");
            }
        Backends.checkAvailable(backend);  // before a model is made for it
        if (draftModel != null && want.contains("model")) Main.modelFolder("--draft-model", draftModel);
        Path tdir = model != null ? Main.modelFolder("--model", model)
                : plainSmall(preset, layers, experts, dtype == null ? null : storage) ? ModelStore.ensure("small", 1, System.err::println)
                : ModelStore.ensureVariant(preset == null ? "small" : preset, layers, experts, storage, 1, System.err::println);
        try (Backend target = Backends.open(backend, tdir)) {
            Backend drafter = null;
            try {
                if (want.contains("model")) {
                    Path ddir = draftModel != null ? draftModel : ModelStore.ensure("tiny", 1, System.err::println);
                    drafter = Backends.open(backend, ddir);
                    ModelDraftSource.checkCompatible(target, drafter, null, null);
                }
                bench(target, drafter, tdir, want);
            } finally {
                if (drafter != null) drafter.close();
            }
        }
        return 0;
    }

    /** The names of the sources option, aliases, in the order --help shows them. */
    static final List<String> SOURCES_NAMES = List.of("--drafts", "--sources");

    /**
     * The name of the sources option as the command line wrote it ({@code --drafts} or {@code --sources}, aliases) for
     * the first list given to it that holds {@code value} ("" for an empty entry: {@code --drafts ,,}, {@code --drafts=}),
     * as {@code --drafts a,b} or {@code --drafts=a,b}; null where no list holds it. Picocli keeps no record of which
     * name matched, nor of a split list's empty entries, so the original arguments are read.
     * @param parsed the command line's parse result, or null
     */
    static String sourcesOptionWith(CommandLine.ParseResult parsed, String value) {
        for (String[] given : sourcesGiven(parsed))
            if (List.of(given[1].split(",", -1)).contains(value)) return given[0];
        return null;
    }

    /** Each list the original arguments give the sources option, in order, with the option's name as typed. */
    private static List<String[]> sourcesGiven(CommandLine.ParseResult parsed) {
        List<String> args = parsed == null ? List.of() : parsed.originalArgs();
        List<String[]> out = new java.util.ArrayList<>();
        for (int i = 0; i < args.size(); i++) {
            String a = args.get(i);
            if (a.equals("--")) break;
            for (String name : SOURCES_NAMES) {
                String list = a.equals(name) && i + 1 < args.size() ? args.get(i + 1)
                        : a.startsWith(name + "=") ? a.substring(name.length() + 1) : null;
                if (list != null) out.add(new String[]{name, list});
            }
        }
        return out;
    }

    /**
     * Whether the target without --model is the plain {@code small} preset (its BF16 model) rather than a variant:
     * no --preset, --layers or --experts, and no --dtype or a BF16 one ({@code dtype} null when not given).
     */
    static boolean plainSmall(String preset, Integer layers, Integer experts, RandomCheckpoint.Storage dtype) {
        return preset == null && layers == null && experts == null && (dtype == null || dtype == RandomCheckpoint.Storage.BF16);
    }

    private void bench(Backend target, Backend drafter, Path tdir, Set<String> want) {
        System.out.printf(Locale.ROOT, "backend: %s%ntarget: %s (%d layers, hidden %d, %d routed experts)%ndraft model: %s%n"
                        + "q = %s, %d prompts x %d prompt tokens, %d generated tokens each, greedy%n",
                target.name(), tdir, target.config().numLayers, target.config().hidden, target.config().numExperts,
                drafter == null ? "-" : draftModel != null ? draftModel : "tiny preset", specQ, prompts, promptTokens, decodeTokens);
        List<int[]> ps = new ArrayList<>();
        SplittableRandom r = new SplittableRandom(3);
        for (int i = 0; i < prompts; i++) {
            int[] p = new int[promptTokens];
            // half random, half a repeated phrase, so lookup drafting has something to find (as in real text)
            for (int j = 0; j < promptTokens; j++) p[j] = j < promptTokens / 2 ? r.nextInt(target.config().vocabSize) : p[j % 16];
            ps.add(p);
        }
        // the plain runs' outputs are the replayed predictions (greedy decoding is deterministic)
        List<int[]> outputs = new ArrayList<>();
        run(target, null, ps, null, 0, outputs); // warm-up (JIT, GPU graphs): no row pays for compilation
        List<int[]> edited = new ArrayList<>();
        for (int[] o : outputs) edited.add(edit(o, target.config().vocabSize));
        Map<String, Function<Integer, DraftSource>> make = new java.util.LinkedHashMap<>();
        make.put("ngram", i -> NgramDraft.source());
        if (drafter != null) make.put("model", i -> new ModelDraftSource(drafter, "model", 16));
        // the target's own backend drafts on a second sequence: same weights, no second copy in memory
        make.put("copy", i -> new ModelDraftSource(target, "copy", 16));
        MtpDraftSource mtp = null;
        if (want.contains("mtp")) {
            try {
                mtp = new MtpDraftSource(target, 16);
            } catch (IllegalStateException | UnsupportedOperationException e) {
                System.out.println("mtp: skipped (" + e.getMessage() + ")");
            }
        }
        final MtpDraftSource mtpSource = mtp;
        if (mtpSource != null) make.put("mtp", i -> mtpSource);
        make.put("prediction", i -> PredictionDraft.source(edited.get(i), null));
        make.put("replay", i -> PredictionDraft.source(outputs.get(i), null));
        make.keySet().removeIf(k -> !want.contains(k));
        // warm-up passes (JIT compilation, GPU graphs, caches) of every configuration, plain decoding included, so that
        // no timed row (and above all not the plain baseline every speed-up divides by) runs cold
        for (int w = 0; w < warmup; w++) {
            if (w > 0) run(target, null, ps, null, 0, null);
            for (var e : make.entrySet()) run(target, e.getValue(), ps, null, 0, null);
        }
        System.out.printf("%-24s %10s %11s %12s %9s %16s%n", "draft", "tokens/s", "acceptance", "tokens/step", "speed-up", "draft cost/step");
        double base = run(target, null, ps, "none (plain decode)", 0, null);
        Map<String, String> labels = Map.of("ngram", "ngram", "model", "draft model", "copy", "copy of target", "mtp", "mtp",
                "prediction", "prediction (edited)", "replay", "replay (own output)");
        for (var e : make.entrySet()) run(target, e.getValue(), ps, labels.get(e.getKey()), base, null);
        if (mtpSource != null) mtpCost(target, ps.getFirst());
        // plain decoding once more: how far the machine's speed drifted during the runs (shared machines, clocks)
        run(target, null, ps, "none (again, for drift)", base, null);
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
            System.out.printf("mtp draft cost: %.3f ms per draft token = %.1f %% of a target decode step (%.3f ms) [timed on its own: %d decode steps"
                            + " and %d draft tokens in proposals of 4 on the first prompt; the table's draft cost/step is per verify step, catch-up included]%n",
                    mtpMs, 100 * mtpMs / decodeMs, decodeMs, reps, tokens);
        }
    }

    /** The output with one token in 12 replaced by another (a prediction that is right but for small edits). */
    static int[] edit(int[] output, int vocab) {
        int[] p = output.clone();
        SplittableRandom r = new SplittableRandom(5);
        for (int i = 6; i < p.length; i += 12) p[i] = (p[i] + 1 + r.nextInt(vocab - 1)) % vocab;
        return p;
    }

    /**
     * Runs every prompt with a draft from src (null: plain decoding), prints a row when labelled, and returns decode
     * tokens/s; outputs, when given, receives each run's generated tokens.
     */
    private double run(Backend target, Function<Integer, DraftSource> src, List<int[]> ps, String label, double base, List<int[]> outputs) {
        long toks = 0;
        double secs = 0;
        long[] draftNs = new long[1];
        Generation.SpecStats st = new Generation.SpecStats(0, 0, 0);
        for (int i = 0; i < ps.size(); i++) {
            int[] p = ps.get(i);
            SamplingParams sp = SamplingParams.greedy(decodeTokens).withMaxTokens(decodeTokens);
            Sampler s = new Sampler(new SamplingParams(0, 0, 1, 0, null, 0, 0, 1, Map.of(), decodeTokens, List.of(), false, 0, true),
                    target.config().vocabSize, p);
            Draft d = src == null ? null : new TimedDraft(src.apply(i).open(p, sp, 1), draftNs);
            Generation g = new Generation(target, target.newSequence(16), p, s, d,
                    d == null ? null : VerifyWidth.parse(specQ), new Generation.Options(512, 1 << 20, new int[0], 16), (t, lp) -> true);
            while (g.step()) { }
            toks += g.generatedTokens() - 1;
            secs += g.decodeSeconds();
            st = st.plus(g.specStats());
            if (outputs != null) outputs.add(g.generatedIds());
        }
        double tps = toks / secs;
        if (label == null) return tps;
        // a plain decode step makes one token: its time is 1 / (plain tokens/s)
        double stepCost = base == 0 || st.steps() == 0 ? Double.NaN : (draftNs[0] / 1e9 / st.steps()) * base;
        System.out.printf(Locale.ROOT, "%-24s %10.2f %11s %12s %9s %16s%n", label, tps,
                src == null || st.offered() == 0 ? "-" : String.format(Locale.ROOT, "%.3f", st.acceptanceRate()),
                String.format(Locale.ROOT, "%.2f", st.committedPerStep()), base == 0 ? "1.00x" : String.format(Locale.ROOT, "%.2fx", tps / base),
                Double.isNaN(stepCost) ? "-" : String.format(Locale.ROOT, "%.4f", stepCost));
        return tps;
    }

    /** A draft that adds the time spent in its propose and commit calls to a counter. */
    private record TimedDraft(Draft d, long[] ns) implements Draft {
        @Override
        public Proposal propose(int[] ctx, int len, int q) {
            long t = System.nanoTime();
            try {
                return d.propose(ctx, len, q);
            } finally {
                ns[0] += System.nanoTime() - t;
            }
        }

        @Override
        public void committed(int[] ctx, int len) {
            long t = System.nanoTime();
            d.committed(ctx, len);
            ns[0] += System.nanoTime() - t;
        }

        @Override
        public void verified(int judged, int accepted) {
            d.verified(judged, accepted);
        }

        @Override
        public void attach(Backend target, io.ds4j.engine.Sequence seq) {
            d.attach(target, seq);
        }

        @Override
        public int maxContext() {
            return d.maxContext();
        }

        @Override
        public void close() {
            d.close();
        }
    }
}
