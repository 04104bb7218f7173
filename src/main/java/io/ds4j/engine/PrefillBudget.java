package io.ds4j.engine;

import java.util.Arrays;

/**
 * The scheduler's latency policy for prefill: how many prompt tokens a tick may carry beside the running
 * decode/verify rows, so that a long prompt being prefilled stretches the running streams' inter-token latency by a
 * bounded factor instead of by a whole {@code tokenBudget} of prefill per tick.
 *
 * <p>Rule, when prefill waits and decode/verify rows run: the tick's predicted duration may be at most
 * {@link Scheduler.Limits#maxTickStretch} times the predicted duration of the same tick without prefill, so the
 * prefill tokens are limited to {@code (maxTickStretch − 1) · decodeMs / msPerToken}, clamped to
 * [{@link Scheduler.Limits#minPrefillChunk}, {@link Scheduler.Limits#tokenBudget}]. The floor keeps a prompt
 * progressing in chunks large enough to run efficiently even where one such chunk alone costs more than the bound
 * allows; the ceiling is the token budget. Without decode rows, or with the policy off (maxTickStretch 0), prefill
 * takes the whole token budget.
 *
 * <p>The cost model is learned online from the measured durations of whole ticks ({@link #observe}):
 * <ul>
 *   <li>{@code decodeMs}: the second fastest of the last {@value #DECODE_WINDOW} measured ticks that ran
 *       decode/verify rows and no prefill (the fastest while there are at most two). Such a tick is measured when it
 *       has as many decode entries as the previous one, when it is the first or the load changed, or when the
 *       previous one was not measured: the first step of a new batch shape may carry one-off work (on the GPU it
 *       captures its step graph, ~20 ms on a 23 ms step at 16 streams; BENCHMARKS.md), as streams end at a round's
 *       close one after another. A probe that was not measured is followed by another after one prefill tick. Slow
 *       outliers are common and fast ones rare, and a bound set too loose costs every stream's latency where one set too
 *       tight costs only prefill speed. The first tick of a new load (decode rows off by more than a factor of two and 8
 *       rows, below) is measured whatever its shape, and replaces the measurements before it. A tick in which the
 *       backend did one-off work ({@link Backend#oneOffWork}: a step graph captured, the workspace reallocated) is not
 *       measured, whatever it holds; such a probe is repeated, and after {@value #ONE_OFF_SKIPS} such probes in a row
 *       the next is measured all the same (one-off work at every probe would otherwise hold a waiting prompt back
 *       for good, or keep the time stale);</li>
 *   <li>{@code msPerToken}: exponentially weighted mean of a tick's prefill cost per prefill token, the prefill cost
 *       being the tick's duration less {@code decodeMs} (the whole tick when no decode rows ran). Measured on chunks
 *       of the size the policy picks, it includes a chunk's fixed cost spread over its tokens, so the pick converges
 *       to the chunk whose whole cost fits the bound; it also follows the cost's growth with the prompt's
 *       position.</li>
 *   <li>the per-pass cost line: a tick's prefill cost as {@code passMs · P + tokenMs · W}, P the passes over the layers
 *       its prefill made (its whole chunks together one, a chunk in a layer slice its share of the layers) and W its
 *       prefill tokens' work (as {@code msPerToken}'s). Learned from the ticks beside decode rows at two ends, each
 *       the median of the last {@value #PASS_WINDOW} such ticks' points (W / P tokens a pass, cost / P ms a pass):
 *       passes of fewer than {@value #SHORT_PASS_FLOORS} floors' tokens (floor-sized chunks, short prompts) and longer
 *       ones (whole chunks, the slices of one); the line through the two is the fixed cost a pass pays whatever its
 *       tokens and the cost a token adds. Each end keeps its last measurements while only the other's kind of tick
 *       runs, so the line stays known. It answers one question that a cost per token cannot ({@link #wholeCheaper}):
 *       at the floor, whether a whole chunk of few tokens (one pass) or one layer of a long chunk (a 1/L pass of many
 *       tokens) makes the shorter tick. On the GPU a pass's fixed cost dominates and the slice wins; on the CPU with
 *       few layers the tokens' cost dominates and the floor-sized chunk does.</li>
 * </ul>
 * While a long prompt prefills, every tick holds prefill, so {@code decodeMs} would go stale: a tick then runs
 * without prefill (a probe) when there is no decode-only measurement yet, when the last one is
 * {@value #PROBE_EVERY} prefill ticks old, or when the decode rows differ from the measured ones by more than a
 * factor of two (and by more than 8 rows). Until a prefill tick has been measured the floor is used.
 *
 * <p>Not thread-safe: the scheduler's thread calls every method.
 */
public final class PrefillBudget {
    /** Why a tick got the prefill tokens it got. */
    public enum Reason {
        /** No decode/verify rows run: the whole token budget. */
        NO_DECODES,
        /** The policy is off (maxTickStretch 0): the whole token budget. */
        OFF,
        /** No prefill in this tick, to measure a decode-only tick. */
        PROBE,
        /** No prefill cost measured yet: the floor. */
        NO_DATA,
        /**
         * The stretch bound allows less than the floor: the floor (also where a chunk is cut to it because that makes a
         * shorter tick than one layer of the chunk in a slice, {@link #wholeCheaper}).
         */
        FLOOR,
        /** The stretch bound limits the tokens. */
        STRETCH,
        /** The stretch bound allows at least the token budget: the budget. */
        CEILING,
        /**
         * Even a floor-sized chunk breaks the bound, and the backend runs chunks in layer slices: a chunk runs only the
         * layers whose predicted cost fits the bound in this tick, the rest in the next ticks ({@link #layers}).
         */
        LAYERS;

        /** The reason as logs and metrics name it: its name in lower case ({@code no_decodes}). */
        public String label() {
            return name().toLowerCase(java.util.Locale.ROOT);
        }
    }

    /**
     * One tick's decision.
     * @param tokens     most prefill tokens of the tick (0: none, a probe)
     * @param reason     why
     * @param decodeMs   the predicted duration of the tick without prefill (ms; NaN when unknown)
     * @param msPerToken the predicted prefill cost per token (ms; NaN when unknown)
     * @param passMs     the per-pass cost line's fixed cost of a pass over the layers (ms; NaN while not known)
     * @param tokenMs    the per-pass cost line's cost of a token (ms; NaN while not known)
     */
    public record Decision(int tokens, Reason reason, double decodeMs, double msPerToken, double passMs, double tokenMs) {
        /** True when the latency bound set the limit below the token budget (chunks may be cut to meet it). */
        public boolean bounded() {
            return reason == Reason.FLOOR || reason == Reason.STRETCH || reason == Reason.NO_DATA || reason == Reason.LAYERS;
        }

        /** This decision with another reason (the scheduler's, once it knows what the tick holds). */
        public Decision because(Reason why) {
            return new Decision(tokens, why, decodeMs, msPerToken, passMs, tokenMs);
        }

        /**
         * True when the tick's limit is the floor because even a floor-sized chunk exceeds the stretch bound (or its
         * cost is not known yet; or a chunk runs in a layer slice for that reason): the bound is not met by a whole
         * chunk, so prompts whose rest fits in the floor may come along up to the token budget ({@link Scheduler}).
         */
        public boolean atFloor() {
            return reason == Reason.FLOOR || reason == Reason.NO_DATA || reason == Reason.LAYERS;
        }

        /** The predicted duration of a tick with this many prefill tokens (ms; NaN when unknown). */
        public double predictedMs(double prefillTokens) {
            return (Double.isNaN(decodeMs) ? 0 : decodeMs) + prefillTokens * msPerToken;
        }
    }

    /** Prefill ticks after which a decode-only tick re-measures {@code decodeMs}. */
    public static final int PROBE_EVERY = 64;
    /** Weight of a new measurement in the means. */
    static final double ALPHA = 0.25;
    /**
     * Probes in a row left unmeasured because the backend did one-off work in them; the next one is measured all the
     * same (two: a capture during which the workspace grew is not kept, so the shape's next step captures again).
     */
    static final int ONE_OFF_SKIPS = 2;
    /** Decode-only ticks whose second fastest is {@code decodeMs}. */
    static final int DECODE_WINDOW = 5;
    /**
     * A pass of fewer than this many floors' tokens ({@link Scheduler.Limits#floor}) is a short one: the per-pass cost
     * line's short end (a floor-sized chunk's pass), the rest its long end (a whole chunk's, or a slice's).
     */
    static final int SHORT_PASS_FLOORS = 2;

    /** Ticks whose median point is an end of the per-pass cost line. */
    static final int PASS_WINDOW = 5;

    /**
     * One end of the per-pass cost line: the last {@value #PASS_WINDOW} such ticks' points (prefill tokens a pass,
     * prefill cost a pass in ms), and as the end the point of median cost (the lower middle one of an even count).
     * Each point lies on the line but for noise, so any of them is a point of the line; the median, because slow
     * outliers are common (on the CPU the first step beside decode rows after a server's start took 824 ms where its
     * like took 23) and an end may go long without a tick of its kind to replace one.
     */
    private static final class PassEnd {
        private final double[] tokens = new double[PASS_WINDOW], ms = new double[PASS_WINDOW];
        private int count, next;

        void add(double t, double m) {
            tokens[next] = t;
            ms[next] = m;
            next = (next + 1) % PASS_WINDOW;
            count = Math.min(count + 1, PASS_WINDOW);
        }

        boolean known() {
            return count > 0;
        }

        /** The end: the window's point of median cost, {tokens a pass, ms a pass} (null while none is measured). */
        double[] point() {
            if (count == 0) return null;
            Integer[] order = new Integer[count];
            for (int i = 0; i < count; i++) order[i] = i;
            Arrays.sort(order, (x, y) -> Double.compare(ms[x], ms[y]));
            int m = order[(count - 1) / 2];
            return new double[]{tokens[m], ms[m]};
        }
    }

    private double decodeMs = Double.NaN;
    private final double[] decodeSamples = new double[DECODE_WINDOW];
    private int decodeCount, decodeNext;
    private double decodeRowsAt;
    /** Decode entries of the last tick without prefill (-1: none yet). */
    private int lastDecodeEntries = -1;
    /** Whether the last tick without prefill was left unmeasured (a new shape). */
    private boolean lastSkipped;
    private double msPerToken = Double.NaN;
    private int sinceDecodeSample;
    /** Probes in a row left unmeasured for one-off work ({@link #ONE_OFF_SKIPS} at most). */
    private int oneOffSkips;
    /** The per-pass cost line's ends: short passes (a floor-sized chunk's) and long ones (a whole chunk's, a slice's). */
    private final PassEnd shortPasses = new PassEnd(), longPasses = new PassEnd();

    /**
     * The prefill tokens of the next tick, given that prefill waits.
     * @param limits     the scheduler's limits
     * @param decodeRows decode/verify rows the tick runs
     */
    public Decision decide(Scheduler.Limits limits, int decodeRows) {
        int budget = limits.tokenBudget();
        if (decodeRows == 0) return decision(budget, Reason.NO_DECODES);
        if (limits.maxTickStretch() == 0) return decision(budget, Reason.OFF);
        if (Double.isNaN(decodeMs) || sinceDecodeSample >= PROBE_EVERY || loadChanged(decodeRows))
            return decision(0, Reason.PROBE);
        int floor = limits.floor();
        if (Double.isNaN(msPerToken)) return decision(floor, Reason.NO_DATA);
        double allowed = (limits.maxTickStretch() - 1) * decodeMs / msPerToken;
        if (allowed >= budget) return decision(budget, Reason.CEILING);
        if (allowed < floor) return decision(floor, Reason.FLOOR);
        return decision((int) allowed, Reason.STRETCH);
    }

    private Decision decision(int tokens, Reason why) {
        double[] line = passLine();
        return line == null ? new Decision(tokens, why, decodeMs, msPerToken, Double.NaN, Double.NaN)
                : new Decision(tokens, why, decodeMs, msPerToken, line[0], line[1]);
    }

    /**
     * How many layers of a chunk of {@code chunkTokens} tokens a tick under this decision runs, for a backend that runs
     * chunks in layer slices: where the latency bound limits the tick ({@link Decision#bounded}) and both costs are
     * known, the layers whose share of the chunk's predicted cost (chunkTokens · msPerToken, spread evenly over the
     * layers) fits the room the bound leaves, (maxTickStretch − 1) · decodeMs less the prefill work already in the tick
     * (planned · msPerToken); 0 when not one layer fits (the caller decides: one layer, or a cut chunk instead);
     * otherwise every layer.
     * @param planned   prefill work (tokens) already planned in the tick, a slice counting as its share of the layers
     * @param numLayers the model's layers
     * @return 0 .. numLayers
     */
    public static int layers(Scheduler.Limits limits, Decision d, int chunkTokens, double planned, int numLayers) {
        if (!d.bounded() || Double.isNaN(d.decodeMs()) || Double.isNaN(d.msPerToken())) return numLayers;
        double roomMs = (limits.maxTickStretch() - 1) * d.decodeMs() - planned * d.msPerToken(),
                chunkMs = chunkTokens * d.msPerToken();
        return (int) Math.max(0, Math.min(numLayers, Math.floor(numLayers * roomMs / chunkMs)));
    }

    /**
     * Whether a whole chunk of {@code wholeTokens} tokens (one pass over the layers) is predicted to make a shorter tick
     * than one layer of a chunk of {@code chunkTokens} tokens in a slice (1/numLayers of a pass over its tokens; the
     * chunk's next ticks run its other layers alike), by the per-pass cost line. The scheduler asks where, at the floor,
     * not one layer of a new chunk fits the room the bound leaves: both break the bound, and the shorter tick holds the
     * running streams up least.
     *
     * <p>slice − whole is {@code (1/L − 1) · passMs + (chunkTokens/L − wholeTokens) · tokenMs}. With both ends of the
     * line measured the line decides. With one end, every line through it with both costs at least 0 is possible:
     * where the sign is the same on all of them it decides (one layer of a chunk of at most L floors never costs more
     * than the floor-sized chunk; a one-layer model's slice is its whole chunk), else the option whose tokens a pass
     * fall at the end not yet measured runs, so that the line is known after it. Nothing measured, neither option at
     * the missing end, or a tie: the slice (nothing measured on a one-layer model: the cut chunk, as every line says).
     * @param floor the floor ({@link Scheduler.Limits#floor}), which parts the line's ends
     * @return true: the whole chunk; false: the slice
     */
    public boolean wholeCheaper(int wholeTokens, int chunkTokens, int numLayers, int floor) {
        double s = 1.0 / numLayers, passCoef = s - 1, tokenCoef = s * chunkTokens - wholeTokens;
        double shortBelow = (double) SHORT_PASS_FLOORS * floor;
        PassEnd wholeEnd = wholeTokens < shortBelow ? shortPasses : longPasses,
                sliceEnd = chunkTokens < shortBelow ? shortPasses : longPasses;
        double[] line = passLine();
        if (line != null) return passCoef * line[0] + tokenCoef * line[1] > 0;
        PassEnd known = shortPasses.known() ? shortPasses : longPasses.known() ? longPasses : null;
        // nothing measured: the slice, but where every line says the cut chunk (a one-layer model's slice is its whole
        // chunk, never cheaper than that chunk cut shorter; it ran whole at the floor until an end was measured)
        if (known == null) return passCoef >= 0 && tokenCoef > 0;
        // the lines through the known end (t0 tokens a pass costing c0 ms) with both costs at least 0: (passMs, tokenMs)
        // from (0, c0 / t0), all of c0 the tokens', to (c0, 0), all of it the pass's; the difference is linear between
        double[] k = known.point();
        double atTokens = tokenCoef * k[1] / Math.max(k[0], 1e-9), atPass = passCoef * k[1];
        if (atTokens <= 0 && atPass <= 0) return false;
        if (atTokens >= 0 && atPass >= 0) return true;
        if (sliceEnd != known) return false; // the slice measures the missing end
        return wholeEnd != known;
    }

    /**
     * The per-pass cost line through its two ends: {passMs, tokenMs}, both at least 0 (a line that falls, or rises from
     * below 0, is replaced by the nearest with a cost at 0); null while an end is not measured.
     */
    private double[] passLine() {
        if (!shortPasses.known() || !longPasses.known()) return null;
        double[] a = shortPasses.point(), b = longPasses.point();
        double t1 = a[0], c1 = a[1], t2 = b[0], c2 = b[1];
        if (t2 == t1) return null;
        if (t2 < t1) { // the floor changed between them: still two points of the line, the shorter pass first
            double t = t1, c = c1;
            t1 = t2;
            c1 = c2;
            t2 = t;
            c2 = c;
        }
        double tokenMs = (c2 - c1) / (t2 - t1), passMs = c1 - tokenMs * t1;
        if (tokenMs < 0) return new double[]{(c1 + c2) / 2, 0}; // longer passes measured cheaper (noise): a pass's cost
        if (passMs < 0) return new double[]{0, (c1 * t1 + c2 * t2) / (t1 * t1 + t2 * t2)}; // through 0: a token's cost
        return new double[]{passMs, tokenMs};
    }

    /** The per-pass cost line's fixed cost of a pass (ms; NaN while an end of the line is not measured). */
    public double passMs() {
        double[] l = passLine();
        return l == null ? Double.NaN : l[0];
    }

    /** The per-pass cost line's cost of a token (ms; NaN while an end of the line is not measured). */
    public double tokenMs() {
        double[] l = passLine();
        return l == null ? Double.NaN : l[1];
    }

    /** {@link #observe(int, int, double, long, boolean)} with one decode entry per decode row and no one-off work. */
    public void observe(int decodeRows, double prefillTokens, long nanos) {
        observe(decodeRows, decodeRows, prefillTokens, nanos, false);
    }

    /** {@link #observe(int, int, double, long, boolean)} of a tick without one-off work. */
    public void observe(int decodeRows, int decodeEntries, double prefillTokens, long nanos) {
        observe(decodeRows, decodeEntries, prefillTokens, nanos, false);
    }

    /**
     * {@link #observe(int, int, double, double, int, long, boolean)} without the passes its prefill made: the per-pass
     * cost line does not learn from it.
     */
    public void observe(int decodeRows, int decodeEntries, double prefillTokens, long nanos, boolean oneOff) {
        observe(decodeRows, decodeEntries, prefillTokens, 0, 0, nanos, oneOff);
    }

    /**
     * Learns from a tick that ran.
     * @param decodeRows    its decode/verify rows
     * @param decodeEntries the decode/verify entries that hold them (with its prefill entries, the step's batch shape)
     * @param prefillTokens its prefill tokens, a chunk run in a layer slice counting as its tokens times the slice's
     *                      share of the layers
     * @param passes        the passes over the layers its prefill made: 1 for its whole prefill entries together, plus
     *                      a slice's share of the layers (0: not known, the per-pass cost line does not learn from it)
     * @param floor         the floor in effect ({@link Scheduler.Limits#floor}): a pass of fewer than
     *                      {@value #SHORT_PASS_FLOORS} times as many tokens is a short one
     * @param nanos         its duration (ns)
     * @param oneOff        the backend did one-off work in it ({@link Backend#oneOffWork}: a graph captured, the workspace
     *                      reallocated): its duration is not learned from; a probe that did is repeated after one
     *                      prefill tick (at once when there is no decode time yet or the load changed), and measured
     *                      all the same after {@value #ONE_OFF_SKIPS} such probes in a row
     */
    public void observe(int decodeRows, int decodeEntries, double prefillTokens, double passes, int floor, long nanos,
                        boolean oneOff) {
        double ms = nanos / 1e6;
        if (prefillTokens == 0) {
            if (decodeRows == 0) return;
            boolean fresh = Double.isNaN(decodeMs) || loadChanged(decodeRows), repeat = decodeEntries == lastDecodeEntries;
            lastDecodeEntries = decodeEntries;
            if (oneOff && oneOffSkips < ONE_OFF_SKIPS) {
                // the same shape runs without that work next time: measure it then (but not forever: a backend whose
                // one-off work recurs at every probe would otherwise keep decodeMs unknown, or stale, and every other
                // tick, or every tick, a probe)
                oneOffSkips++;
                lastSkipped = true;
                sinceDecodeSample = Math.min(sinceDecodeSample, PROBE_EVERY - 1);
                return;
            }
            if (!fresh && !repeat && !lastSkipped) {
                // a new shape: not measured; a probe is due again after one prefill tick (not at once, so that streams
                // ending one per tick cannot hold the prompt back, nor after PROBE_EVERY, so the time stays fresh), and
                // that one is measured whatever its shape, so that shapes changing at every probe cannot keep it stale
                lastSkipped = true;
                sinceDecodeSample = Math.min(sinceDecodeSample, PROBE_EVERY - 1);
                return;
            }
            lastSkipped = false;
            oneOffSkips = 0;
            if (fresh) {
                // the first measurement, or a new decode load: it replaces the old ones
                decodeCount = 0;
                decodeNext = 0;
                decodeRowsAt = decodeRows;
            } else {
                decodeRowsAt += ALPHA * (decodeRows - decodeRowsAt);
            }
            decodeSamples[decodeNext] = ms;
            decodeNext = (decodeNext + 1) % DECODE_WINDOW;
            decodeCount = Math.min(decodeCount + 1, DECODE_WINDOW);
            decodeMs = secondFastest(decodeSamples, decodeCount);
            sinceDecodeSample = 0;
            return;
        }
        if (decodeRows > 0) sinceDecodeSample++;
        if (oneOff) return;
        double cost;
        if (decodeRows == 0) cost = ms;
        else {
            if (Double.isNaN(decodeMs)) return; // the prefill's share of the tick is unknown
            cost = ms - decodeMs;
        }
        // a tick faster than the decode-only mean (noise): count its prefill as nearly free, the next ticks correct it
        double perToken = Math.max(cost, 1e-3) / prefillTokens;
        msPerToken = Double.isNaN(msPerToken) ? perToken : msPerToken + ALPHA * (perToken - msPerToken);
        if (passes > 0 && decodeRows > 0) {
            // only beside decode rows, the ticks it decides for: a tick without them pays the step's own costs, which
            // prefill beside decode rows shares with them, and would count them as a pass's. Per pass, so that a slice
            // of a fifth of the layers and a whole chunk of as many tokens a pass land on the same point of the line
            double perPass = prefillTokens / passes;
            (perPass < (double) SHORT_PASS_FLOORS * floor ? shortPasses : longPasses).add(perPass, Math.max(cost, 0) / passes);
        }
    }

    /** The second smallest of v[0 .. n), or the smallest when n is at most 2. */
    private static double secondFastest(double[] v, int n) {
        double[] c = Arrays.copyOf(v, n);
        Arrays.sort(c);
        return c[n <= 2 ? 0 : 1];
    }

    /**
     * Whether the decode rows differ from those {@code decodeMs} was measured at by more than a factor of two (and
     * more than 8 rows, so a stream's varying verify width alone does not count).
     */
    private boolean loadChanged(int decodeRows) {
        double hi = Math.max(decodeRows, decodeRowsAt), lo = Math.min(decodeRows, decodeRowsAt);
        return hi > 2 * lo + 8;
    }

    /** The predicted duration of a tick without prefill (ms; NaN when unknown). */
    public double decodeMs() {
        return decodeMs;
    }

    /** The predicted prefill cost per token (ms; NaN when unknown). */
    public double msPerToken() {
        return msPerToken;
    }
}
