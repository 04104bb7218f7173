package io.ds4j.sampling;

import io.ds4j.kernels.TopK;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorMask;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorSpecies;

import java.util.Arrays;
import java.util.SplittableRandom;
import java.util.random.RandomGenerator;

/**
 * Turns logits rows into next tokens for one request. Order of operations (as in HF transformers' processors):
 * logit_bias → repetition penalty (prompt and output tokens) → presence / frequency penalties (output tokens) →
 * temperature → top-k → top-p → min-p → draw. Temperature 0 is greedy: the argmax of the processed logits.
 *
 * <p>Work per token is O(V) passes plus O(V log k) selection; nothing sorts the whole vocabulary. The token history
 * that drives the penalties can be extended tentatively and undone ({@link #push}/{@link #pop}), which speculative
 * verification uses to apply penalties to draft positions exactly as plain decoding would.
 */
public final class Sampler {
    private final SamplingParams p;
    private final int vocab;
    private final int[] outCount, allCount;
    /** Distinct tokens with allCount > 0, so penalties touch only those. */
    private int[] seen = new int[64];
    private int nSeen;
    private final RandomGenerator rng;
    /** Ids at or above this are never produced (the model's rows past the tokenizer's vocabulary). */
    private final int tokenLimit;

    /**
     * @param params validated settings
     * @param vocab V
     * @param prompt prompt token ids (counted for the repetition penalty only)
     */
    public Sampler(SamplingParams params, int vocab, int[] prompt) {
        this(params, vocab, prompt, vocab);
    }

    /**
     * @param tokenLimit ids ≥ tokenLimit are masked out: a checkpoint's embedding often has more rows (129,280 in
     *                   V4) than its tokenizer has tokens (128,815 in the DeepSeek tokenizer), and those ids decode
     *                   to nothing
     */
    public Sampler(SamplingParams params, int vocab, int[] prompt, int tokenLimit) {
        params.validate(Math.min(vocab, tokenLimit));
        if (tokenLimit < 1 || tokenLimit > vocab) throw new IllegalArgumentException("token limit " + tokenLimit + " outside [1, " + vocab + "]");
        this.tokenLimit = tokenLimit;
        this.p = params;
        this.vocab = vocab;
        this.outCount = new int[vocab];
        this.allCount = new int[vocab];
        for (int t : prompt) {
            if (t < 0 || t >= vocab) throw new IllegalArgumentException("prompt token id " + t + " is outside [0, " + vocab + ")");
            note(t, 1, false);
        }
        this.rng = new SplittableRandom(params.seed() != null ? params.seed() : new SplittableRandom().nextLong());
    }

    public SamplingParams params() {
        return p;
    }

    /** Ids at or above this are never produced (the model's rows past the tokenizer's vocabulary). */
    public int tokenLimit() {
        return tokenLimit;
    }

    /**
     * Whether the next token's choice needs nothing of a logits row but its argmax below {@link #tokenLimit()}:
     * greedy, no logit bias, no penalties, no logprobs. Then {@link #distribution} of a row (without a constraint's
     * mask) is the certain {@link #argmax} of the row's ids [0, tokenLimit) (ids at or above it get −∞ there, which
     * never wins), and nothing is drawn from the random source.
     */
    public boolean argmaxSuffices() {
        return p.isGreedy() && (p.logitBias() == null || p.logitBias().isEmpty()) && !p.hasPenalties() && !p.logprobs();
    }

    /** The request's random source (one stream per request, so a fixed seed reproduces the output). */
    public RandomGenerator rng() {
        return rng;
    }

    /** Records a generated token in the penalty history. */
    public void push(int token) {
        note(token, 1, true);
    }

    /** Undoes the latest {@link #push} of this token. */
    public void pop(int token) {
        note(token, -1, true);
    }

    private void note(int t, int d, boolean output) {
        if (allCount[t] == 0 && d > 0) {
            if (nSeen == seen.length) seen = Arrays.copyOf(seen, nSeen * 2);
            seen[nSeen++] = t;
        }
        allCount[t] += d;
        if (output) outCount[t] += d;
    }

    /**
     * The distribution of the next token given logits[off .. off+V) and the current history.
     */
    public Distribution distribution(float[] logits, int off) {
        return distribution(logits, off, null);
    }

    /**
     * The distribution of the next token with a constraint's mask applied first: tokens whose bit is clear in
     * {@code allow} (see {@link Constraint#allowed}) get logit −∞ before biases, penalties, temperature and the
     * top-k/top-p/min-p cuts, so the draw is from the target's distribution restricted to the allowed set.
     *
     * @param allow allowed-token bitset, or null for no constraint
     */
    public Distribution distribution(float[] logits, int off, long[] allow) {
        // the common case (no mask, bias, penalties or top-k) reads the row where it lies, over ids [0, tokenLimit):
        // the ids above would get -inf, whose weight exp(-inf) = 0 adds nothing to the sum and is never kept, so the
        // result is the same bit for bit (rows whose maximum is not finite take the general path, as NaN weights
        // would be kept there)
        if (allow == null && (p.logitBias() == null || p.logitBias().isEmpty()) && !p.hasPenalties()
                && !(p.topK() > 0 && p.topK() < vocab)) {
            if (p.isGreedy()) return Distribution.certain(argmax(logits, off, tokenLimit));
            float mx = Float.NEGATIVE_INFINITY;
            for (int i = 0; i < tokenLimit; i++) mx = Math.max(mx, logits[off + i]);
            if (mx > Float.NEGATIVE_INFINITY) return draw(logits, off, tokenLimit, null, mx);
        }
        float[] z = Arrays.copyOfRange(logits, off, off + vocab);
        if (tokenLimit < vocab) Arrays.fill(z, tokenLimit, vocab, Float.NEGATIVE_INFINITY);
        if (allow != null) {
            for (int w = 0; w * 64 < vocab; w++) {
                long bits = w < allow.length ? allow[w] : 0;
                if (bits == -1L) continue;
                int end = Math.min(vocab, w * 64 + 64);
                for (int i = w * 64; i < end; i++) if ((bits & (1L << i)) == 0) z[i] = Float.NEGATIVE_INFINITY;
            }
        }
        if (p.logitBias() != null) for (var e : p.logitBias().entrySet()) z[e.getKey()] += e.getValue();
        if (p.hasPenalties()) {
            float rp = (float) p.repetitionPenalty();
            for (int i = 0; i < nSeen; i++) {
                int t = seen[i];
                if (allCount[t] <= 0) continue;
                // in double (the same F32 result where it is finite), kept within F32's range: a tiny penalty (1e-300
                // is in range, and rounds to F32 zero) would make a logit inf, and inf - inf is NaN in the softmax
                // (a masked token's -inf stays as it is: -inf x an F32-zero penalty would be NaN)
                if (rp != 1f && z[t] != Float.NEGATIVE_INFINITY)
                    z[t] = (float) Math.clamp(z[t] > 0 ? (double) z[t] / rp : (double) z[t] * rp, -Float.MAX_VALUE, Float.MAX_VALUE);
                int oc = outCount[t];
                if (oc > 0) z[t] -= (float) (p.presencePenalty() + p.frequencyPenalty() * oc);
            }
        }
        if (p.isGreedy()) return Distribution.certain(argmax(z));
        int[] cand;
        int n;
        if (p.topK() > 0 && p.topK() < vocab) {
            cand = TopK.select(z, vocab, p.topK());
            n = cand.length;
        } else {
            cand = null;
            n = vocab;
        }
        float mx = Float.NEGATIVE_INFINITY;
        for (int i = 0; i < n; i++) mx = Math.max(mx, z[cand == null ? i : cand[i]]);
        return draw(z, 0, n, cand, mx);
    }

    /** Weights exp((z - max) / T) of the candidates, reused between calls (one request's thread at a time). */
    private double[] weights = new double[0];

    /**
     * Softmax over the candidates (z[base + i] for i in [0, n), or z[base + cand[i]]) with the maximum mx, then the
     * top-p / min-p cuts; the ids are i or cand[i].
     */
    private Distribution draw(float[] z, int base, int n, int[] cand, float mx) {
        float invT = (float) (1.0 / p.temperature());
        if (weights.length < n) weights = new double[n];
        double[] e = weights;
        double sum = 0;
        float[] w = expWeights(z, base, n, cand, mx, invT);
        for (int i = 0; i < n; i++) {
            e[i] = w[i];
            sum += e[i];
        }
        // extract in descending order until top-p mass is reached; min-p cut relative to the maximum
        double minKeep = p.minP() > 0 ? p.minP() * (1.0 / sum) : 0; // p_max = 1/sum since the max term is exp(0)
        int kept = 0;
        int[] ids;
        double[] pr;
        double mass = 0;
        if (p.topP() >= 1) {
            // no nucleus cut: keep every candidate above the min-p floor, no ordering needed beyond the top first
            ids = new int[n];
            pr = new double[n];
            int best = -1;
            for (int i = 0; i < n; i++) {
                double prob = e[i] / sum;
                if (prob <= 0 || prob < minKeep) continue;
                int id = cand == null ? i : cand[i];
                if (best < 0 || prob > pr[best] || (prob == pr[best] && id < ids[best])) best = kept;
                ids[kept] = id;
                pr[kept++] = prob;
                mass += prob;
            }
            if (best > 0) {
                int ti = ids[0]; ids[0] = ids[best]; ids[best] = ti;
                double tp = pr[0]; pr[0] = pr[best]; pr[best] = tp;
            }
        } else {
            // extract in descending order until the top-p mass is reached (O(n + m log n) for m kept). The candidates
            // whose weight is at least a threshold come first in that order, so extracting from them alone gives the
            // same tokens, probabilities and mass as long as the cut comes before they run out; when it does not, the
            // extraction is redone from a lower threshold (2^-10 of the top weight, then 2^-24: a peaked row's mass
            // sits in a few tokens, while the long tail of a 129,280-token row can hold a quarter of them above 2^-24),
            // at last over all candidates
            ids = null;
            pr = null;
            int[] heap;
            int size = 0;
            for (double t : new double[]{0x1p-10, 0x1p-24, 0}) {
                if (t > 0) {
                    heap = new int[64];
                    size = 0;
                    for (int i = 0; i < n; i++) {
                        if (e[i] < t) continue;
                        if (size == heap.length) heap = Arrays.copyOf(heap, size * 2);
                        heap[size++] = i;
                    }
                    if (size > n / 4) continue; // too many above it to gain anything
                } else {
                    heap = new int[n];
                    for (int i = 0; i < n; i++) heap[i] = i;
                    size = n;
                }
                for (int i = size / 2 - 1; i >= 0; i--) siftDown(heap, i, size, e, cand);
                ids = new int[Math.min(n, 256)];
                pr = new double[ids.length];
                kept = 0;
                mass = 0;
                boolean cut = false;
                while (size > 0) {
                    int top = heap[0];
                    double prob = e[top] / sum;
                    if (kept > 0 && (mass >= p.topP() || prob < minKeep || prob <= 0)) {
                        cut = true;
                        break;
                    }
                    if (kept == ids.length) {
                        ids = Arrays.copyOf(ids, kept * 2);
                        pr = Arrays.copyOf(pr, kept * 2);
                    }
                    ids[kept] = cand == null ? top : cand[top];
                    pr[kept++] = prob;
                    mass += prob;
                    heap[0] = heap[--size];
                    siftDown(heap, 0, size, e, cand);
                }
                if (cut || t == 0) break;
                size = 0;
            }
        }
        float[] probs = new float[kept];
        for (int i = 0; i < kept; i++) probs[i] = (float) (pr[i] / mass);
        return new Distribution(Arrays.copyOf(ids, kept), probs);
    }

    /** F32 weights of {@link #expWeights}, and the candidates' logits gathered for them, reused between calls. */
    private float[] fweights = new float[0], gathered = new float[0];

    /**
     * exp((z - mx) / T) of the candidates in F32 lanes (the Vector API's exp, within an ulp of the exact value), the
     * same function of each logit wherever it sits in the row: the 129,280 exponentials of a row are most of a draw's
     * time, about 4x less this way than one double {@code Math.exp} each. The maximum's weight is 1 also where 1 / T
     * overflows F32 (a temperature below ~3e-39: 0 x inf would be NaN).
     */
    private float[] expWeights(float[] z, int base, int n, int[] cand, float mx, float invT) {
        if (fweights.length < n) fweights = new float[n];
        float[] src = z;
        int off = base;
        if (cand != null) {
            if (gathered.length < n) gathered = new float[n];
            for (int i = 0; i < n; i++) gathered[i] = z[base + cand[i]];
            src = gathered;
            off = 0;
        }
        FloatVector vmx = FloatVector.broadcast(F, mx), vinv = FloatVector.broadcast(F, invT);
        for (int i = 0; i < n; i += F.length()) {
            VectorMask<Float> in = F.indexInRange(i, n);
            FloatVector d = FloatVector.fromArray(F, src, off + i, in).sub(vmx);
            d.mul(vinv).blend(0f, d.eq(0f)).lanewise(VectorOperators.EXP).intoArray(fweights, i, in);
        }
        return fweights;
    }

    /** Max-heap on e, ties to the lower token id (deterministic). */
    private static void siftDown(int[] h, int i, int n, double[] e, int[] cand) {
        while (true) {
            int l = 2 * i + 1, r = l + 1, b = i;
            if (l < n && above(h[l], h[b], e, cand)) b = l;
            if (r < n && above(h[r], h[b], e, cand)) b = r;
            if (b == i) return;
            int t = h[b]; h[b] = h[i]; h[i] = t;
            i = b;
        }
    }

    private static boolean above(int a, int b, double[] e, int[] cand) {
        if (e[a] != e[b]) return e[a] > e[b];
        return (cand == null ? a : cand[a]) < (cand == null ? b : cand[b]);
    }

    /** Draws the next token from logits[off .. off+V) (does not push it). */
    public int sample(float[] logits, int off) {
        return distribution(logits, off).sample(rng);
    }

    /** Index of the largest value, the lowest index on ties. */
    public static int argmax(float[] z) {
        return argmax(z, 0, z.length);
    }

    /**
     * Index in [0, n) of the largest of z[off .. off+n), the lowest index on ties (one row of a logits matrix): the
     * scan from index 0 that moves only to a strictly larger value, so a NaN never wins unless it is at index 0.
     */
    public static int argmax(float[] z, int off, int n) {
        if (n >= 4 * F.length()) {
            // the maximum in vector lanes (Math.max semantics: NaN when any value is NaN), then its first index;
            // -0 and +0 compare equal there as in the scan. A row holding a NaN takes the scan.
            FloatVector m = FloatVector.broadcast(F, Float.NEGATIVE_INFINITY);
            int bound = F.loopBound(n), i = 0;
            for (; i < bound; i += F.length()) m = m.max(FloatVector.fromArray(F, z, off + i));
            float mx = m.reduceLanes(VectorOperators.MAX);
            for (; i < n; i++) mx = Math.max(mx, z[off + i]);
            if (!Float.isNaN(mx)) {
                for (i = 0; i < bound; i += F.length()) {
                    VectorMask<Float> hit = FloatVector.fromArray(F, z, off + i).eq(mx);
                    if (hit.anyTrue()) return i + hit.firstTrue();
                }
                for (; i < n; i++) if (z[off + i] == mx) return i;
            }
        }
        int best = 0;
        for (int i = 1; i < n; i++) if (z[off + i] > z[off + best]) best = i;
        return best;
    }

    /**
     * {@link #argmax(float[], int, int)} with the ids whose bit is clear in {@code allow} (bit {@code id & 63} of word
     * {@code id >> 6}; missing words clear) taken as −∞: the greedy token {@link #distribution(float[], int, long[])}
     * gives under that mask (a row whose allowed values are all −∞ or NaN gives 0, as the scan does).
     */
    public static int argmax(float[] z, int off, int n, long[] allow) {
        int best = 0;
        float bv = Constraint.has(allow, 0) ? z[off] : Float.NEGATIVE_INFINITY;
        for (int i = 1; i < n; i++) {
            if (!Constraint.has(allow, i)) continue;
            float v = z[off + i];
            if (v > bv) {
                best = i;
                bv = v;
            }
        }
        return best;
    }

    private static final VectorSpecies<Float> F = FloatVector.SPECIES_PREFERRED;

    /**
     * Log-probabilities from the model's raw logits (before any processing, as vLLM reports them by default).
     * @return the chosen token's logprob and the top-n alternatives
     */
    public TokenLogprobs logprobs(float[] logits, int off, int chosen, int topN) {
        float mx = Float.NEGATIVE_INFINITY;
        for (int i = 0; i < vocab; i++) mx = Math.max(mx, logits[off + i]);
        double s = 0;
        for (int i = 0; i < vocab; i++) s += Math.exp(logits[off + i] - mx);
        double lse = mx + Math.log(s);
        int[] top = new int[0];
        float[] topLp = new float[0];
        if (topN > 0) {
            float[] row = Arrays.copyOfRange(logits, off, off + vocab);
            int[] sel = TopK.select(row, vocab, topN);
            Integer[] order = Arrays.stream(sel).boxed().toArray(Integer[]::new);
            Arrays.sort(order, (a, b) -> row[a] != row[b] ? Float.compare(row[b], row[a]) : Integer.compare(a, b));
            top = Arrays.stream(order).mapToInt(Integer::intValue).toArray();
            topLp = new float[top.length];
            for (int i = 0; i < top.length; i++) topLp[i] = (float) (row[top[i]] - lse);
        }
        return new TokenLogprobs(chosen, (float) (logits[off + chosen] - lse), top, topLp);
    }

    /** A token's log-probability and the most likely alternatives (token ids, most likely first). */
    public record TokenLogprobs(int token, float logprob, int[] topIds, float[] topLogprobs) {}
}
