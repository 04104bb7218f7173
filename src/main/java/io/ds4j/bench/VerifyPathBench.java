package io.ds4j.bench;

import io.ds4j.engine.Backend;
import io.ds4j.engine.Sequence;
import io.ds4j.engine.StepKind;
import io.ds4j.engine.VerifyAttention;
import io.ds4j.sampling.Sampler;

import java.io.PrintStream;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

/**
 * The F16-KV verifier's matched benchmark (control and f16 path measured alike): for each input length and
 * verify attention path, prefill tokens/s, speculative decode tokens/s with a draft that is a copy of the target, the
 * acceptance rate, and how often the two paths verify the same tokens.
 *
 * <p>Per (length L, path): a fresh sequence prefills L seeded random tokens in chunks (timed, including the wait for
 * the device), then greedy speculative decoding with q draft tokens per verify step runs until at least
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

    /**
     * @param lengths        input lengths (tokens)
     * @param q              draft tokens per verify step (1..16)
     * @param decodeTokens   tokens to emit in the timed decode of each row
     * @param agreementSteps verify rounds compared between the paths per length (0 = skip)
     * @param chunk          prefill chunk (tokens)
     * @param seed           seed of the random prompt tokens
     */
    public record Options(List<Integer> lengths, int q, int decodeTokens, int agreementSteps, int chunk, long seed) {
        public Options {
            if (lengths.isEmpty()) throw new IllegalArgumentException("at least one input length is needed");
            for (int L : lengths) if (L < 2) throw new IllegalArgumentException("input lengths must be >= 2, got " + L);
            if (q < 1 || q > 16) throw new IllegalArgumentException("q must be in 1..16, got " + q);
            if (decodeTokens < 1) throw new IllegalArgumentException("decode tokens must be >= 1, got " + decodeTokens);
            if (agreementSteps < 0) throw new IllegalArgumentException("agreement steps must be >= 0, got " + agreementSteps);
            if (chunk < 1) throw new IllegalArgumentException("prefill chunk must be >= 1, got " + chunk);
        }
    }

    /**
     * One row of the table.
     * @param prefillTokS     L / prefill seconds
     * @param decodeTokS      emitted tokens / seconds of the timed speculative rounds
     * @param verifyMs        mean milliseconds of one verify step (q + 1 rows on the target, logits back on the host)
     * @param acceptance      accepted / offered draft tokens in the timed rounds
     * @param agreement       fraction of compared rounds with identical verified tokens (NaN when not measured)
     * @param rowAgreement    fraction of compared rows with identical argmax (NaN when not measured)
     */
    public record Row(int length, String path, double prefillTokS, double prefillSeconds, double decodeTokS, int emitted,
                      int verifySteps, double verifyMs, int offered, int accepted, double acceptance, double agreement,
                      double rowAgreement, int agreementRounds) {
        Row withAgreement(double a, double rows, int rounds) {
            return new Row(length, path, prefillTokS, prefillSeconds, decodeTokS, emitted, verifySteps, verifyMs, offered,
                    accepted, acceptance, a, rows, rounds);
        }
    }

    /**
     * Runs the table: every length with each path the backend offers (the control first), or with its single path.
     * @throws IllegalArgumentException when the backend cannot hold a length (its message)
     */
    public static List<Row> run(Backend be, Options o, PrintStream log) {
        List<VerifyAttention> paths = new ArrayList<>();
        for (VerifyAttention p : VerifyAttention.values()) if (be.verifyAttentionPaths().contains(p)) paths.add(p);
        int V = be.config().vocabSize;
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
            for (VerifyAttention p : paths.isEmpty() ? java.util.Collections.<VerifyAttention>singletonList(null) : paths) {
                if (p != null) be.setVerifyAttention(p);
                String name = p == null ? be.name() : p.key();
                if (last != null) last.close();
                Spec s = new Spec(be, prompt, o);
                last = s;
                double pre = s.prefill(o.chunk());
                s.round(); // warm-up round (untimed)
                s.resetCounters();
                long t0 = System.nanoTime();
                while (s.emitted < o.decodeTokens()) s.round();
                double sec = (System.nanoTime() - t0) / 1e9;
                Row r = new Row(L, name, L / pre, pre, s.emitted / sec, s.emitted, s.steps, s.verifyNanos / 1e6 / s.steps,
                        s.offered, s.accepted,
                        s.offered == 0 ? Double.NaN : (double) s.accepted / s.offered, Double.NaN, Double.NaN, 0);
                log.printf("L=%d %s: prefill %.0f tok/s (%.2f s), decode %.1f tok/s (%d tokens, %d verify steps of %.2f ms), acceptance %.3f%n",
                        L, name, r.prefillTokS(), pre, r.decodeTokS(), s.emitted, s.steps, r.verifyMs(), r.acceptance());
                forL.add(r);
            }
            if (paths.size() == 2 && o.agreementSteps() > 0) {
                double[] a = last.agreement(paths.get(0), paths.get(1), o.agreementSteps());
                log.printf("L=%d agreement %s vs %s over %d rounds: %.4f of rounds, %.4f of rows%n", L, paths.get(0).key(),
                        paths.get(1).key(), o.agreementSteps(), a[0], a[1]);
                forL.replaceAll(r -> r.withAgreement(a[0], a[1], o.agreementSteps()));
                be.setVerifyAttention(paths.get(0));
            }
            last.close();
            rows.addAll(forL);
        }
        return rows;
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

        void push(int t) {
            if (len == ctx.length) ctx = java.util.Arrays.copyOf(ctx, ctx.length * 2);
            ctx[len++] = t;
        }

        void resetCounters() {
            emitted = steps = offered = accepted = 0;
            verifyNanos = 0;
        }

        /** The draft's q tokens after ctx[0 .. len): catch up, then q − 1 single steps. */
        int[] propose() {
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

        /** Verifies [ctx[len−1], d…] on the target; returns the argmax of every row (q + 1). */
        int[] verify(int[] d) {
            int[] rows = new int[q + 1];
            rows[0] = ctx[len - 1];
            System.arraycopy(d, 0, rows, 1, q);
            int[] want = new int[q + 1];
            for (int i = 0; i <= q; i++) want[i] = i;
            long t0 = System.nanoTime();
            float[] lg = be.forward(tgt, rows, 0, q + 1, want, StepKind.VERIFY);
            verifyNanos += System.nanoTime() - t0;
            int[] g = new int[q + 1];
            for (int i = 0; i <= q; i++) g[i] = Sampler.argmax(lg, i * V, V);
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
            tgt.rollback(q - a);
            int keep = Math.min(a, q - 1);
            dft.rollback((q - 1) - keep);
            dlen = len + keep;
            for (int i = 0; i < a; i++) push(d[i]);
            push(g[a]);
            emitted += a + 1;
            steps++;
            offered += q;
            accepted += a;
        }

        void round() {
            int[] d = propose();
            commit(d, verify(d));
        }

        /**
         * Rounds verified by path a and by path b on the same rows; commits path b's result.
         * @return {fraction of rounds with identical verified tokens, fraction of rows with identical argmax}
         */
        double[] agreement(VerifyAttention a, VerifyAttention b, int rounds) {
            int same = 0, rowsSame = 0;
            for (int r = 0; r < rounds; r++) {
                int[] d = propose();
                be.setVerifyAttention(a);
                int[] ga = verify(d);
                tgt.rollback(q + 1);
                be.setVerifyAttention(b);
                int[] gb = verify(d);
                int na = acceptedPrefix(d, ga), nb = acceptedPrefix(d, gb);
                if (na == nb && ga[na] == gb[nb]) same++;
                for (int i = 0; i <= q; i++) if (ga[i] == gb[i]) rowsSame++;
                commit(d, gb);
            }
            return new double[]{(double) same / rounds, (double) rowsSame / ((double) rounds * (q + 1))};
        }

        @Override
        public void close() {
            tgt.close();
            if (dft != null) dft.close();
        }
    }
}
