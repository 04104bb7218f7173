package io.ds4j.bench;

import io.ds4j.engine.Backend;
import io.ds4j.engine.Draft;
import io.ds4j.engine.Sequence;
import io.ds4j.engine.StepKind;
import io.ds4j.engine.SyntheticContext;
import io.ds4j.engine.VerifyAttention;
import io.ds4j.sampling.Sampler;
import io.ds4j.speculative.PredictionDraft;

import java.io.PrintStream;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

/**
 * The F16-KV verifier's matched benchmark (the reference system's "fused verify F16 KV" table): for each input length
 * and verify attention path, prefill tokens/s, speculative decode tokens/s with a draft that is a copy of the target,
 * the verify step time, the control's cache conversion time per step, the acceptance rate, and how often the two paths
 * verify the same tokens.
 *
 * <p>Per (length L, path): a fresh sequence prefills L seeded random tokens in chunks (timed, including the wait for
 * the device) — or, for L above {@link Options#syntheticAbove()}, is given L − 1 tokens of random cache rows through
 * {@link SyntheticContext} (a prefill of that length would take hours; such rows are marked and have no prefill
 * figure) and forwards the last prompt token — then greedy speculative decoding with q draft tokens per verify step runs until at least
 * {@code decodeTokens} tokens were emitted after one warm-up round (timed: draft steps plus verify steps). The draft
 * is the target itself on a second sequence forked from the prefilled one ({@link Backend#fork}; a backend that cannot
 * fork prefills it, untimed), so without numeric differences between decode (S = 1) and verify (S = q + 1) every
 * draft token is accepted. Agreement (once per length, after both paths): {@code agreementSteps} speculative rounds
 * where the same q + 1 rows are verified by both paths (roll back in between); it counts rounds whose verified
 * tokens (accepted prefix and the correction/bonus token) are identical, and rows whose argmax is identical.
 * A benchmark: it asserts nothing.
 */
public final class VerifyPathBench {
    private VerifyPathBench() {}

    /** Draft names in the table: a copy of the target; the target's greedy output replayed as a predicted output. */
    public static final String COPY = "copy", REPLAY = "replay";

    /**
     * @param lengths        input lengths (tokens)
     * @param q              draft tokens per verify step (1..16)
     * @param decodeTokens   tokens to emit in the timed decode of each row
     * @param agreementSteps verify rounds compared between the paths per length (0 = skip)
     * @param chunk          prefill chunk (tokens)
     * @param seed           seed of the random prompt tokens
     * @param syntheticAbove lengths above this are filled synthetically instead of prefilled
     * @param drafts         {@link #COPY} (always) and optionally {@link #REPLAY}
     */
    public record Options(List<Integer> lengths, int q, int decodeTokens, int agreementSteps, int chunk, long seed,
                          int syntheticAbove, List<String> drafts) {
        /** Real prefill at every length that is at most 122,879 tokens, synthetic contexts above. */
        public static final int DEFAULT_SYNTHETIC_ABOVE = 122_879;
        /** The drafts: a copy of the target, and the target's own greedy output replayed as a predicted output. */
        public static final List<String> DRAFTS = List.of(COPY, REPLAY);

        public Options(List<Integer> lengths, int q, int decodeTokens, int agreementSteps, int chunk, long seed) {
            this(lengths, q, decodeTokens, agreementSteps, chunk, seed, DEFAULT_SYNTHETIC_ABOVE);
        }

        public Options(List<Integer> lengths, int q, int decodeTokens, int agreementSteps, int chunk, long seed,
                       int syntheticAbove) {
            this(lengths, q, decodeTokens, agreementSteps, chunk, seed, syntheticAbove, List.of(COPY));
        }

        /**
         * Checks each option. The messages name {@code ds4j bench}'s flags, which set these one for one, so that a
         * refusal names the flag the user typed, as {@link #checkContext} does.
         */
        public Options {
            if (lengths.isEmpty()) throw new IllegalArgumentException("--lengths: at least one input length is needed");
            for (int L : lengths) if (L < 2) throw new IllegalArgumentException("--lengths: each input length must be >= 2, got " + L);
            // a length given twice is run twice and written as two rows of one length, which the report tells apart nowhere
            for (int i = 0; i < lengths.size(); i++)
                if (lengths.indexOf(lengths.get(i)) < i)
                    throw new IllegalArgumentException("--lengths: each input length may be given once, but " + lengths.get(i) + " is repeated");
            if (q < 1 || q > 16) throw new IllegalArgumentException("--q must be in 1..16, got " + q);
            if (decodeTokens < 1) throw new IllegalArgumentException("--decode-tokens must be >= 1, got " + decodeTokens);
            if (agreementSteps < 0) throw new IllegalArgumentException("--agreement-steps must be >= 0, got " + agreementSteps);
            if (chunk < 1) throw new IllegalArgumentException("--chunk must be >= 1, got " + chunk);
            if (syntheticAbove < 1) throw new IllegalArgumentException("--synthetic-above must be >= 1, got " + syntheticAbove);
            drafts = List.copyOf(drafts);
            for (String d : drafts)
                if (!DRAFTS.contains(d)) throw new IllegalArgumentException("--drafts: unknown draft '" + d + "': one of " + DRAFTS);
            if (drafts.stream().distinct().count() != drafts.size())
                throw new IllegalArgumentException("--drafts: a draft is named twice: " + drafts);
            if (!drafts.contains(COPY))
                throw new IllegalArgumentException("--drafts must include " + COPY + " (the replay replays its output), got " + drafts);
        }

        boolean replay() {
            return drafts.contains(REPLAY);
        }
    }

    /**
     * One row of the table.
     * @param draft           {@link #COPY} or {@link #REPLAY}
     * @param prefillTokS     L / prefill seconds
     * @param decodeTokS      emitted tokens / seconds of the timed speculative rounds
     * @param verifyMs        mean milliseconds of one verify step (q + 1 rows on the target, logits back on the host)
     * @param acceptance      accepted / offered draft tokens in the timed rounds
     * @param agreement       fraction of compared rounds with identical verified tokens (NaN when not measured)
     * @param rowAgreement    fraction of compared rows with identical argmax (NaN when not measured)
     * @param synthetic       the context was filled synthetically (no prefill figure)
     * @param stateMiB        device (or host) memory of one sequence's state at this length, MiB
     * @param conversionMs    milliseconds the control's conversion of the cache takes per verify step timed alone, kernel
     *                        by kernel as the host launches them (NaN: not measured)
     * @param conversionGraphMs the same conversion replayed from a captured graph, as the control's verify steps run it
     *                        where they replay kept graphs (NaN: not measured, or the backend's steps take no graphs)
     * @param pairedVerifyMs  median milliseconds of this path's verify step in the agreement rounds, where the two paths
     *                        verify the same rows in alternation (NaN when not measured): the two paths' figures are
     *                        taken side by side, so a drift of the machine between the paths' own runs does not enter
     *                        their difference
     * @param pairedDiff      for the second path's rows: the median, over the agreement rounds, of its verify step less
     *                        the first path's in the same round, ms, with a distribution-free 95 % interval
     *                        ({@link Stats#medianInterval}); NaN figures for the first path and where not measured
     */
    public record Row(int length, String path, String draft, double prefillTokS, double prefillSeconds, double decodeTokS, int emitted,
                      int verifySteps, double verifyMs, int offered, int accepted, double acceptance, double agreement,
                      double rowAgreement, int agreementRounds, boolean synthetic, double stateMiB, double conversionMs,
                      double conversionGraphMs, double pairedVerifyMs, Stats.Interval pairedDiff) {
        /** No paired difference (the first path's rows, or none measured). */
        static final Stats.Interval NO_DIFF = new Stats.Interval(Double.NaN, Double.NaN, Double.NaN);

        /**
         * Milliseconds of conversion a control verify step pays: the graph-replayed figure where measured (a positive
         * one: the step is replayed from a kept graph, which launches the copies without the host's per-kernel cost),
         * else the one timed alone.
         */
        public double stepConversionMs() {
            return conversionGraphMs > 0 ? conversionGraphMs : conversionMs;
        }

        /** This row with the agreement rounds' figures; second: the row is the second path's (it gets a's difference). */
        Row withAgreement(Agreement a, boolean second) {
            return new Row(length, path, draft, prefillTokS, prefillSeconds, decodeTokS, emitted, verifySteps, verifyMs, offered,
                    accepted, acceptance, a.rounds(), a.rows(), a.count(), synthetic, stateMiB, conversionMs,
                    conversionGraphMs, second ? a.msB() : a.msA(), second ? a.diff() : NO_DIFF);
        }
    }

    /**
     * The agreement rounds' results.
     * @param rounds fraction of rounds with identical verified tokens
     * @param rows   fraction of rows with identical argmax
     * @param count  rounds compared
     * @param msA    median verify step of the first path, ms
     * @param msB    median verify step of the second path, ms
     * @param diff   median over the rounds of the second path's verify step less the first's, ms, and its 95 % interval
     */
    public record Agreement(double rounds, double rows, int count, double msA, double msB, Stats.Interval diff) {}

    /**
     * Runs the table: every length with each path the backend offers (the control first), or with its single path.
     * @throws IllegalArgumentException before any work when a length does not fit: past the model's context
     *                                  (max_position_embeddings), a synthetic length on a backend that cannot fill one,
     *                                  or more device memory than is free
     */
    public static List<Row> run(Backend be, Options o, PrintStream log) {
        List<VerifyAttention> paths = new ArrayList<>();
        for (VerifyAttention p : VerifyAttention.values()) if (be.verifyAttentionPaths().contains(p)) paths.add(p);
        int V = be.config().vocabSize;
        checkFits(be, o);
        List<Row> rows = new ArrayList<>();
        // warm-up: kernels loaded, workspace grown for the chunk size
        try (Sequence s = be.newSequence(16)) {
            int n = Math.min(o.chunk(), 64);
            int[] t = tokens(n + 1, V, o.seed() + 99);
            be.forward(s, t, 0, n, new int[]{n - 1}, StepKind.PREFILL);
            be.forward(s, t, n, 1, new int[]{0}, StepKind.DECODE);
        }
        for (int L : o.lengths()) {
            int[] prompt = tokens(L, V, o.seed() + L);
            List<Row> forL = new ArrayList<>();
            Spec last = null;
            int[] controlOutput = null;
            // the control's conversion, timed once per length on its own sequence (the control runs first); every row of
            // the length carries it
            SyntheticContext.Conversion conv = SyntheticContext.Conversion.NONE;
            for (VerifyAttention p : paths.isEmpty() ? java.util.Collections.<VerifyAttention>singletonList(null) : paths) {
                if (p != null) be.setVerifyAttention(p);
                String name = p == null ? be.name() : p.key();
                if (last != null) last.close();
                Spec s = new Spec(be, prompt, o);
                last = s;
                boolean synthetic = L > o.syntheticAbove();
                double pre = synthetic ? s.fillSynthetic(o.seed() + L) : s.prefill(o.chunk());
                if (be instanceof SyntheticContext sc && p == VerifyAttention.F32_CONVERT) conv = sc.verifyConversion(s.tgt, o.q() + 1, 5);
                double mib = be.stateBytes(L, 16) / 1048576.0;
                // the replay starts from the same prefilled state: a fork taken before the copy run decodes
                Sequence rep = o.replay() ? forkOrPrefill(be, s, o.chunk()) : null;
                int start = s.len;
                s.round(); // warm-up round (untimed)
                s.resetCounters();
                long t0 = System.nanoTime();
                while (s.emitted < o.decodeTokens()) s.round();
                double sec = (System.nanoTime() - t0) / 1e9;
                Row r = new Row(L, name, COPY, synthetic ? Double.NaN : L / pre, synthetic ? Double.NaN : pre, s.emitted / sec, s.emitted,
                        s.steps, s.verifyNanos / 1e6 / s.steps, s.offered, s.accepted,
                        s.offered == 0 ? Double.NaN : (double) s.accepted / s.offered, Double.NaN, Double.NaN, 0, synthetic, mib, conv.aloneMs(),
                        conv.graphMs(), Double.NaN, Row.NO_DIFF);
                log.printf("L=%d %s: %s, decode %.1f tok/s (%d tokens, %d verify steps of %.2f ms), acceptance %.3f;%s"
                                + " sequence state %.0f MiB%n",
                        L, name, synthetic ? "synthetic context (no prefill)" : String.format(java.util.Locale.ROOT,
                                "prefill %.0f tok/s (%.2f s)", r.prefillTokS(), pre),
                        r.decodeTokS(), s.emitted, s.steps, r.verifyMs(), r.acceptance(),
                        Double.isNaN(conv.aloneMs()) ? "" : String.format(java.util.Locale.ROOT,
                                " control's conversion per verify step %.3f ms alone, %s in a graph;", conv.aloneMs(),
                                Double.isNaN(conv.graphMs()) ? "not timed" : String.format(java.util.Locale.ROOT, "%.3f ms", conv.graphMs())),
                        mib);
                forL.add(r);
                // the greedy output of this path, from the first generated token (pushed by the prefill) on
                int[] output = java.util.Arrays.copyOfRange(s.ctx, L, s.len);
                if (controlOutput == null) controlOutput = output;
                else {
                    int n = Math.min(output.length, controlOutput.length), same = 0;
                    while (same < n && output[same] == controlOutput[same]) same++;
                    log.printf("L=%d %s: greedy output equal to %s's for %d of %d tokens%n", L, name, forL.get(0).path(), same, n);
                }
                if (rep != null) forL.add(replay(be, s, rep, start, L, output, o, r, name, log));
            }
            if (paths.size() == 2 && o.agreementSteps() > 0) {
                Agreement a = last.agreement(paths.get(0), paths.get(1), o.agreementSteps());
                log.printf("L=%d agreement %s vs %s over %d rounds: %.4f of rounds, %.4f of rows; verify step in alternation"
                                + " (median) %.2f against %.2f ms; %s less %s in the same round: median %+.2f ms, 95 %% interval %s%n",
                        L, paths.get(0).key(), paths.get(1).key(), o.agreementSteps(), a.rounds(), a.rows(), a.msA(), a.msB(),
                        paths.get(1).key(), paths.get(0).key(), a.diff().median(), BenchReport.interval(a.diff()));
                forL.replaceAll(r -> r.withAgreement(a, !r.path().equals(paths.get(0).key())));
                be.setVerifyAttention(paths.get(0));
            }
            last.close();
            // per draft (copy, then replay), the paths in order (the control first)
            forL.sort(java.util.Comparator.comparingInt((Row r) -> o.drafts().indexOf(r.draft())));
            rows.addAll(forL);
        }
        return rows;
    }

    /** A second sequence in the state of s's target after its prefill: a fork, or (a backend that cannot fork) a prefill, untimed. */
    private static Sequence forkOrPrefill(Backend be, Spec s, int chunk) {
        try {
            return be.fork(s.tgt, 16);
        } catch (UnsupportedOperationException e) {
            Sequence q = be.newSequence(16);
            int L = s.len - 1;
            for (int off = 0; off < L; off += chunk)
                be.forward(q, s.ctx, off, Math.min(chunk, L - off), new int[0], StepKind.PREFILL);
            return q;
        }
    }

    /**
     * The {@code replay} row: speculative decoding from the prefilled state rep, with the target's own greedy output of
     * the copy run (output, from the first generated token on) replayed as a predicted output: a near-free draft, so
     * the row measures verify steps alone. Warm-up round untimed, as the copy run; stops when the prediction is used up.
     */
    private static Row replay(Backend be, Spec copy, Sequence rep, int start, int L, int[] output, Options o, Row copyRow,
                              String name, PrintStream log) {
        try (Spec s = new Spec(be, rep, copy.ctx, start, L, output, o)) {
            s.round();
            s.resetCounters();
            long t0 = System.nanoTime();
            while (s.emitted < o.decodeTokens() && s.round()) { }
            double sec = (System.nanoTime() - t0) / 1e9;
            Row r = new Row(L, name, REPLAY, copyRow.prefillTokS(), copyRow.prefillSeconds(), s.emitted / sec, s.emitted, s.steps,
                    s.steps == 0 ? Double.NaN : s.verifyNanos / 1e6 / s.steps, s.offered, s.accepted,
                    s.offered == 0 ? Double.NaN : (double) s.accepted / s.offered, Double.NaN, Double.NaN, 0, copyRow.synthetic(),
                    copyRow.stateMiB(), copyRow.conversionMs(), copyRow.conversionGraphMs(), Double.NaN, Row.NO_DIFF);
            log.printf("L=%d %s, replayed prediction: decode %.1f tok/s (%d tokens, %d verify steps of %.2f ms), acceptance %.3f%n",
                    L, name, r.decodeTokS(), s.emitted, s.steps, r.verifyMs(), r.acceptance());
            return r;
        }
    }

    /**
     * The checks of {@link #run} that need no work: each length fits the model's context ({@link #checkContext}) and
     * the device.
     */
    static void checkFits(Backend be, Options o) {
        boolean agreement = be.verifyAttentionPaths().size() > 1;
        checkContext(be.config().maxPositionEmbeddings, o, agreement);
        for (int L : o.lengths()) {
            long need = positions(L, o, agreement);
            if (L > o.syntheticAbove() && !(be instanceof SyntheticContext))
                throw new IllegalArgumentException(String.format(java.util.Locale.ROOT,
                        "input length %,d is above --synthetic-above %,d, and backend %s cannot fill a context synthetically;"
                                + " lower the length or raise --synthetic-above", L, o.syntheticAbove(), be.name()));
            if (be instanceof SyntheticContext sc) {
                // target and draft sequences (and the replay's), plus the control's F32 copy of the largest layer (4 bytes
                // per cached value)
                long state = be.stateBytes((int) Math.min(need, Integer.MAX_VALUE), 16);
                long scratch = 3L * L * be.config().headDim;
                long free = sc.freeDeviceBytes();
                int seqs = o.replay() ? 3 : 2;
                if (seqs * state + scratch > free)
                    throw new IllegalArgumentException(String.format(java.util.Locale.ROOT,
                            "input length %,d needs about %,.0f MiB of device memory (%d sequences of %,.0f MiB and the control's"
                                    + " scratch); %,.0f MiB are free", L, (seqs * state + scratch) / 1048576.0, seqs,
                            state / 1048576.0, free / 1048576.0));
            }
        }
    }

    /**
     * Refuses a length whose run would pass the model's context, before a model is opened or made (the context is
     * known from its config). The message adds up: the input, the timed decode's tokens, the untimed warm-up step and
     * the last step's overrun (each up to q + 1 tokens), a margin of 8 and, where both paths run, the agreement rounds
     * (each up to q + 1 tokens).
     * @param maxPositions the model's max_position_embeddings
     * @param agreement    whether the agreement rounds run (a backend with both verify attention paths)
     * @throws IllegalArgumentException naming the length, each part of what it needs, and the longest input that fits
     */
    public static void checkContext(int maxPositions, Options o, boolean agreement) {
        for (int L : o.lengths()) {
            long need = positions(L, o, agreement);
            if (need <= maxPositions) continue;
            long rounds = agreement ? (long) o.agreementSteps() * (o.q() + 1) : 0;
            throw new IllegalArgumentException(String.format(java.util.Locale.ROOT,
                    "input length %,d needs %,d positions, past the model's context of %,d (max_position_embeddings): "
                            + "%,d input + %,d decode tokens (--decode-tokens) + %,d for the untimed warm-up step and the"
                            + " last step's overrun (2 x (--q %d + 1)) + %d spare%s; the longest input that fits is %,d",
                    L, need, maxPositions, L, o.decodeTokens(), 2L * (o.q() + 1), o.q(), SPARE_POSITIONS,
                    rounds == 0 ? "" : String.format(java.util.Locale.ROOT,
                            " + %,d for %,d agreement rounds (--agreement-steps) of up to --q %d + 1 tokens",
                            rounds, o.agreementSteps(), o.q()),
                    maxPositions - (need - L)));
        }
    }

    /** Positions beyond those counted (input, decode, warm-up and overrun, agreement) that a run is given. */
    private static final int SPARE_POSITIONS = 8;

    /** The positions a length needs: its input, decode, warm-up step and overrun, the spare and any agreement rounds. */
    private static long positions(int L, Options o, boolean agreement) {
        return (long) L + o.decodeTokens() + 2L * (o.q() + 1) + SPARE_POSITIONS
                + (agreement ? (long) o.agreementSteps() * (o.q() + 1) : 0);
    }

    static int[] tokens(int n, int V, long seed) {
        SplittableRandom r = new SplittableRandom(seed);
        int[] t = new int[n];
        for (int i = 0; i < n; i++) t[i] = r.nextInt(V);
        return t;
    }

    /**
     * Greedy speculative decoding with the target as its own draft. Invariant between rounds: ctx[0 .. len) are the
     * committed tokens, the target has forwarded len − 1 of them, the draft dlen ≤ len.
     */
    static final class Spec implements AutoCloseable {
        final Backend be;
        final int q, V;
        final Sequence tgt;
        Sequence dft;
        /** The replayed prediction (the {@code replay} draft), or null: the draft is the target's copy on {@link #dft}. */
        Draft prediction;
        int[] ctx;
        int len, dlen, emitted, steps, offered, accepted;
        long verifyNanos;

        Spec(Backend be, int[] prompt, Options o) {
            this.be = be;
            this.q = o.q();
            this.V = be.config().vocabSize;
            this.tgt = be.newSequence(16);
            this.ctx = java.util.Arrays.copyOf(prompt, prompt.length + 1024);
            this.len = prompt.length;
        }

        /**
         * The {@code replay} draft: a sequence already holding the prefilled prompt (forked from a copy-of-target run's
         * target before it decoded) whose committed tokens are ctx[0 .. len), drafting from a prediction: the target's
         * own greedy output replayed as a client's predicted output ({@link PredictionDraft}).
         */
        Spec(Backend be, Sequence prefilled, int[] ctx, int len, int promptLen, int[] predicted, Options o) {
            this.be = be;
            this.q = o.q();
            this.V = be.config().vocabSize;
            this.tgt = prefilled;
            this.ctx = java.util.Arrays.copyOf(ctx, Math.max(ctx.length, len + 1024));
            this.len = len;
            this.prediction = new PredictionDraft(predicted, promptLen, null);
        }

        /** Prefills the prompt (all L tokens; the last row's logits give the first token); returns seconds. */
        double prefill(int chunk) {
            long t0 = System.nanoTime();
            float[] lg = null;
            for (int off = 0; off < len; off += chunk) {
                int m = Math.min(chunk, len - off);
                lg = be.forward(tgt, ctx, off, m, off + m == len ? new int[]{m - 1} : new int[0], StepKind.PREFILL);
            }
            double sec = (System.nanoTime() - t0) / 1e9;
            push(Sampler.argmax(lg, 0, V));
            try {
                dft = be.fork(tgt, 16);
            } catch (UnsupportedOperationException e) {
                dft = be.newSequence(16);
                for (int off = 0; off < len - 1; off += chunk)
                    be.forward(dft, ctx, off, Math.min(chunk, len - 1 - off), new int[0], StepKind.PREFILL);
            }
            dlen = dft.length();
            return sec;
        }

        /**
         * Gives the target L − 1 tokens of synthetic context, forwards the last prompt token (its logits give the first
         * token) and forks the draft from it; returns NaN (no prefill to time).
         */
        double fillSynthetic(long seed) {
            ((SyntheticContext) be).fillSynthetic(tgt, len - 1, seed);
            float[] lg = be.forward(tgt, ctx, len - 1, 1, new int[]{0}, StepKind.DECODE);
            push(Sampler.argmax(lg, 0, V));
            dft = be.fork(tgt, 16);
            dlen = dft.length();
            return Double.NaN;
        }

        void push(int t) {
            if (len == ctx.length) ctx = java.util.Arrays.copyOf(ctx, ctx.length * 2);
            ctx[len++] = t;
        }

        void resetCounters() {
            emitted = steps = offered = accepted = 0;
            verifyNanos = 0;
        }

        /**
         * The draft's tokens after ctx[0 .. len): the copy of the target catches up, then takes q − 1 single steps; the
         * replayed prediction proposes up to q tokens (none once it is used up).
         */
        int[] propose() {
            if (prediction != null) return prediction.propose(ctx, len, q).tokens();
            int n = len - dlen;
            float[] lg = be.forward(dft, ctx, dlen, n, new int[]{n - 1}, StepKind.DECODE);
            dlen = len;
            int[] d = new int[q];
            d[0] = Sampler.argmax(lg, 0, V);
            for (int i = 1; i < q; i++) {
                lg = be.forward(dft, d, i - 1, 1, new int[]{0}, StepKind.DECODE);
                d[i] = Sampler.argmax(lg, 0, V);
            }
            return d;
        }

        /** Verifies [ctx[len−1], d…] on the target (its time added to verifyNanos); returns the argmax of every row (d.length + 1). */
        int[] verify(int[] d) {
            int n = d.length + 1;
            int[] rows = new int[n];
            rows[0] = ctx[len - 1];
            System.arraycopy(d, 0, rows, 1, d.length);
            int[] want = new int[n];
            for (int i = 0; i < n; i++) want[i] = i;
            long t0 = System.nanoTime();
            float[] lg = be.forward(tgt, rows, 0, n, want, StepKind.VERIFY);
            verifyNanos += System.nanoTime() - t0;
            int[] g = new int[n];
            for (int i = 0; i < n; i++) g[i] = Sampler.argmax(lg, i * V, V);
            return g;
        }

        static int acceptedPrefix(int[] d, int[] g) {
            int a = 0;
            while (a < d.length && d[a] == g[a]) a++;
            return a;
        }

        /** Commits a verified round: d[0 .. a) and g[a]; rolls both sequences back to what stays. */
        void commit(int[] d, int[] g) {
            int a = acceptedPrefix(d, g);
            tgt.rollback(d.length - a);
            if (prediction == null) {
                int keep = Math.min(a, q - 1);
                dft.rollback((q - 1) - keep);
                dlen = len + keep;
            }
            for (int i = 0; i < a; i++) push(d[i]);
            push(g[a]);
            if (prediction != null) {
                prediction.verified(d.length, a);
                prediction.committed(ctx, len);
            }
            emitted += a + 1;
            steps++;
            offered += d.length;
            accepted += a;
        }

        /** One speculative round; false (nothing done) when the draft had nothing to propose (a used-up prediction). */
        boolean round() {
            int[] d = propose();
            if (d.length == 0) return false;
            commit(d, verify(d));
            return true;
        }

        /**
         * Rounds verified by path a and by path b on the same rows, each path's step timed; commits path b's verified
         * tokens. The paths take turns at going first (a first in even rounds, b in odd ones), so that neither always
         * meets what the draft's steps left in the caches; the cache rows kept are those of the path verified second.
         */
        Agreement agreement(VerifyAttention a, VerifyAttention b, int rounds) {
            int same = 0, rowsSame = 0;
            double[] msA = new double[rounds], msB = new double[rounds];
            for (int r = 0; r < rounds; r++) {
                int[] d = propose();
                boolean aFirst = r % 2 == 0;
                int[] ga = null, gb = null;
                for (int turn = 0; turn < 2; turn++) {
                    boolean isA = (turn == 0) == aFirst;
                    if (turn == 1) tgt.rollback(q + 1);
                    be.setVerifyAttention(isA ? a : b);
                    long t0 = verifyNanos;
                    int[] g = verify(d);
                    double ms = (verifyNanos - t0) / 1e6;
                    if (isA) { ga = g; msA[r] = ms; } else { gb = g; msB[r] = ms; }
                }
                int na = acceptedPrefix(d, ga), nb = acceptedPrefix(d, gb);
                if (na == nb && ga[na] == gb[nb]) same++;
                for (int i = 0; i <= q; i++) if (ga[i] == gb[i]) rowsSame++;
                commit(d, gb);
            }
            double[] diff = new double[rounds];
            for (int r = 0; r < rounds; r++) diff[r] = msB[r] - msA[r];
            return new Agreement((double) same / rounds, (double) rowsSame / ((double) rounds * (q + 1)), rounds,
                    Stats.median(msA), Stats.median(msB), Stats.medianInterval(diff, 0.95));
        }

        @Override
        public void close() {
            tgt.close();
            if (dft != null) dft.close();
            if (prediction != null) prediction.close();
        }
    }
}
