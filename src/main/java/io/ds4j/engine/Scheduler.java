package io.ds4j.engine;

import io.ds4j.engine.Draft;
import io.ds4j.engine.DraftBatch;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.LongSupplier;

/**
 * Continuous batching: each {@link #tick} plans one batch from all running generations, runs it as one
 * {@link Backend#step} and commits every entry's logits to its generation.
 *
 * <p>A tick's batch holds
 * <ul>
 *   <li>a decode/verify entry of every decoding generation (the pending token plus its draft tokens), up to
 *       {@link Limits#maxBatchRows} rows of such entries; a generation that does not fit waits for the next tick and
 *       goes first then (its draft width is never cut to fit, so the batch never changes what a request
 *       computes);</li>
 *   <li>prefill chunks of the prefilling generations while their tokens fit in the tick's prefill limit: the
 *       {@link Limits#tokenBudget}, or, while decode/verify rows run, the latency bound of {@link PrefillBudget}
 *       (at most {@link Limits#maxTickStretch} times the predicted tick without prefill, at least
 *       {@link Limits#minPrefillChunk} tokens). A chunk's cuts are the generation's own (chunk multiples and snapshot
 *       points, see {@link Generation#snapshotAt}); give the generations a prefill chunk no larger than the budget
 *       ({@link #prefillChunk}). Only to meet the latency bound is a chunk cut shorter, and only where the backend
 *       says the two parts give the same numbers as the whole chunk ({@link Backend#prefillSplitExact}), so a
 *       request's output never depends on what else runs. A long prompt thus takes one chunk (or part of one) per
 *       tick and the decoding generations step in every tick beside it. Where the bound leaves only the floor (even a
 *       floor-sized chunk breaks it), prompts whose whole rest fits in the floor come along up to the token budget
 *       ({@link #shortRestAtFloor}, and such a prompt is never sliced: it comes along or waits for a tick with room).
 *       Wherever the bound limits the tick (at the floor or below the budget), a longer prompt's next chunk runs in
 *       layer slices where the limits and the backend allow ({@link Limits#layerSlices}, {@link Backend#layerSlices}):
 *       the whole chunk, but per tick only the layers whose share of its predicted cost fits the bound
 *       ({@link PrefillBudget#layers}, after the prefill already in the tick; all of them when it fits whole), the
 *       tick's only prefill besides short rests, one chunk part-way at a time (same numbers: every layer sees what it
 *       sees in one step); under the stretch bound a new chunk of which not even one layer fits is cut as below,
 *       part-way it runs one layer. It is not cut shorter instead: a short chunk pays most of a whole chunk's pass
 *       over the weights (on the GPU, beside 16 streams at 32K tokens of context, a step with a 70-token chunk took
 *       76 ms, one with a slice of a 512-token chunk worth 71 tokens 45 ms; BENCHMARKS.md, twenty-third session), and
 *       the cost per token that the bound learns from the slices would not predict it. At the floor, where not one
 *       layer of a new chunk fits, both a floor-sized chunk and one layer break the bound: the chunk runs one layer,
 *       or is cut to the floor where {@link PrefillBudget#wholeCheaper} predicts that the shorter tick (its per-pass
 *       cost line tells a pass's fixed cost from a token's: on the CPU with few layers one layer of a long chunk can
 *       be more tokens' work than the floor and cost more).</li>
 * </ul>
 * Generations that stepped move to the back of the order, so decodes that waited and prefills that did not get a
 * chunk go first in the next tick (round-robin).
 *
 * <p>Draft models run batched too: before the target's step, the draft proposals of all decoding generations are
 * obtained together through {@link DraftBatch#proposeAll} (draft-model steps batched over the requests, MTP drafts as one
 * batched MTP step per draft position; n-gram lookups need none).
 *
 * <p>Failure isolation: a generation whose draft proposal, step or commit fails is ended ({@link Generation#abandon},
 * its state released) and reported in {@link Tick#failed}; the others go on. When the batched step itself throws,
 * {@link BatchRun} retries the entries one at a time to find the culprit.
 *
 * <p>Not thread-safe: one thread (the engine's) calls every method.
 *
 * @param <K> the caller's handle of a request
 */
public final class Scheduler<K> {
    /**
     * A tick's limits.
     * @param maxBatchRows    most token rows of decode/verify entries per step (a verify entry has 1 + q rows); at least
     *                        one decoding generation steps per tick even when its rows alone exceed this
     * @param tokenBudget     most prefill tokens per step
     * @param maxTickStretch  while decode/verify rows run, a tick with prefill may take at most this many times the
     *                        predicted time of the same tick without prefill ({@link PrefillBudget}); 0 turns the
     *                        bound off (prefill always gets the token budget); else at least 1
     * @param minPrefillChunk the fewest prefill tokens a tick gives a waiting prompt under that bound (a floor, so the
     *                        prompt progresses in chunks large enough to run efficiently)
     * @param layerSlices     where the bound limits a tick, run a prompt's chunk in layer slices over several ticks
     *                        when the backend can ({@link Backend#layerSlices}), each tick only the layers that fit the
     *                        bound; false: such a chunk is cut to the tokens that fit, and where even a floor-sized
     *                        chunk breaks the bound it runs at the floor, beyond it
     * @throws IllegalArgumentException for a value out of range
     */
    public record Limits(int maxBatchRows, int tokenBudget, double maxTickStretch, int minPrefillChunk, boolean layerSlices) {
        public Limits {
            if (maxBatchRows < 1) throw new IllegalArgumentException("maxBatchRows must be >= 1, got " + maxBatchRows);
            if (tokenBudget < 1) throw new IllegalArgumentException("tokenBudget must be >= 1, got " + tokenBudget);
            if (!(maxTickStretch == 0 || maxTickStretch >= 1) || Double.isInfinite(maxTickStretch))
                throw new IllegalArgumentException("maxTickStretch must be 0 (off) or a number >= 1, got " + maxTickStretch);
            if (minPrefillChunk < 1) throw new IllegalArgumentException("minPrefillChunk must be >= 1, got " + minPrefillChunk);
        }

        /** The floor a waiting prompt gets under the latency bound: minPrefillChunk, at most the token budget. */
        public int floor() {
            return Math.min(minPrefillChunk, tokenBudget);
        }

        /** Limits with layer slices where the backend has them. */
        public Limits(int maxBatchRows, int tokenBudget, double maxTickStretch, int minPrefillChunk) {
            this(maxBatchRows, tokenBudget, maxTickStretch, minPrefillChunk, true);
        }

        /** Limits without the latency bound: prefill always gets the whole token budget. */
        public Limits(int maxBatchRows, int tokenBudget) {
            this(maxBatchRows, tokenBudget, 0, 1);
        }
    }

    /**
     * What one tick did.
     * @param stepped       generations that committed a step this tick (in batch order)
     * @param failed        generations that failed this tick, with their errors (already ended and removed)
     * @param ended         generations that ended this tick (finished or cancelled; removed), not counting failed ones
     * @param entries       batch entries of the target's step (0: nothing ran)
     * @param decodeRows    rows of decode/verify entries
     * @param prefillTokens rows of prefill entries
     * @param slicedTokens  of which the rows of a chunk that ran in a layer slice ({@link BatchEntry.Layers}), 0 if none
     * @param prefillShare  the prefill tokens, a chunk in a layer slice counting as its rows times the slice's share of
     *                      the layers (a chunk's slices add up to its rows): the prefill work the tick did
     * @param isolated      true when the batched step failed and its entries were retried one at a time
     * @param mtpSteps      per batched MTP step of the drafts this tick ({@link MtpHead#step}, one per draft position),
     *                      how many requests' MTP drafts it held
     * @param budget        the prefill limit decided for this tick and why; null when no prompt waited for prefill
     * @param nanos         how long the tick took (ns, by the scheduler's clock)
     * @param planNanos     of which planning the batch (drafts' proposals included), ns
     * @param stepNanos     of which the backend's step, ns
     * @param commitNanos   of which committing the entries (sampling, acceptance, emitting tokens to the listeners), ns
     * @param oneOff        the backend did one-off work in the tick ({@link Backend#oneOffWork}): not learned from
     */
    public record Tick<K>(List<K> stepped, Map<K, Throwable> failed, List<K> ended, int entries, int decodeRows,
                          int prefillTokens, int slicedTokens, double prefillShare, boolean isolated, List<Integer> mtpSteps,
                          PrefillBudget.Decision budget, long nanos, long planNanos, long stepNanos, long commitNanos,
                          boolean oneOff) {
        /** All rows of the target's step. */
        public int rows() {
            return decodeRows + prefillTokens;
        }
    }

    private final Backend backend;
    private final LongSupplier clock;
    private final PrefillBudget prefillBudget = new PrefillBudget();
    private Limits limits;
    /** Running generations in scheduling order (the front goes first). */
    private final LinkedHashMap<K, Generation> running = new LinkedHashMap<>();

    public Scheduler(Backend backend, Limits limits) {
        this(backend, limits, System::nanoTime);
    }

    /** @param clock nanoseconds, for the ticks' durations that {@link PrefillBudget} learns from (tests pass a fake) */
    public Scheduler(Backend backend, Limits limits, LongSupplier clock) {
        this.backend = backend;
        this.limits = limits;
        this.clock = clock;
    }

    /** The prefill chunk generations should use under these limits: the configured chunk, at most the token budget. */
    public static int prefillChunk(int configuredChunk, Limits limits) {
        return Math.max(1, Math.min(configuredChunk, limits.tokenBudget()));
    }

    public Limits limits() {
        return limits;
    }

    /** The latency policy's learned cost model (read-only use: its predictions). */
    public PrefillBudget prefillBudget() {
        return prefillBudget;
    }

    /** Changes the limits from the next tick on (a configuration reload). */
    public void limits(Limits l) {
        this.limits = l;
    }

    /**
     * Adds a generation (it is stepped from the next tick on, after the ones already running).
     * @throws IllegalArgumentException when the key is already present
     */
    public void add(K key, Generation g) {
        if (running.containsKey(key)) throw new IllegalArgumentException("request already scheduled: " + key);
        running.put(key, g);
    }

    /** Removes a generation without touching it (the caller ends it); false when it is not scheduled. */
    public boolean remove(K key) {
        return running.remove(key) != null;
    }

    public boolean isEmpty() {
        return running.isEmpty();
    }

    public int size() {
        return running.size();
    }

    /** Plans one batch, runs it and commits the results (see the class description). */
    public Tick<K> tick() {
        long t0 = clock.getAsLong(), work0 = backend.oneOffWork();
        List<K> ended = new ArrayList<>();
        Map<K, Throwable> failed = new LinkedHashMap<>();
        // --- decode/verify entries: how many rows each asks for, in order, while they fit
        List<K> decoding = new ArrayList<>();
        List<Generation.DraftCall> calls = new ArrayList<>();
        List<K> withDraft = new ArrayList<>();
        int decodeRows = 0;
        for (var en : running.entrySet()) {
            Generation g = en.getValue();
            if (g.done() || g.prefilling()) continue;
            int rows = g.nextRows();
            if (rows == 0) continue; // cancelled: ended below
            if (decodeRows > 0 && decodeRows + rows > limits.maxBatchRows()) continue;
            decodeRows += rows;
            decoding.add(en.getKey());
            Generation.DraftCall c = g.draftCall();
            if (c != null) {
                calls.add(c);
                withDraft.add(en.getKey());
            }
        }
        // --- the drafts' proposals, draft-model steps batched over the requests
        Map<K, Draft.Proposal> proposals = new IdentityHashMap<>();
        List<Integer> mtpSteps = new ArrayList<>();
        if (!calls.isEmpty()) {
            List<DraftBatch.Call> dc = new ArrayList<>(calls.size());
            for (Generation.DraftCall c : calls) dc.add(new DraftBatch.Call(c.draft(), c.ctx(), c.len(), c.q()));
            DraftBatch.Result[] res = DraftBatch.proposeAll(dc, mtpSteps::add);
            for (int i = 0; i < res.length; i++) {
                K k = withDraft.get(i);
                if (res[i].failure() != null) fail(k, res[i].failure(), failed);
                else proposals.put(k, res[i].proposal());
            }
        }
        List<K> keys = new ArrayList<>();
        List<BatchEntry> batch = new ArrayList<>();
        int rowsDecode = 0, entriesDecode = 0, prefillTokens = 0;
        for (K k : decoding) {
            if (failed.containsKey(k)) continue;
            Generation g = running.get(k);
            try {
                BatchEntry e = g.plan(proposals.getOrDefault(k, Draft.Proposal.NONE));
                if (e == null) continue;
                keys.add(k);
                batch.add(e);
                rowsDecode += e.count();
                entriesDecode++;
            } catch (Throwable t) {
                fail(k, t, failed);
            }
        }
        // --- prefill chunks under the tick's prefill limit
        PrefillBudget.Decision budget = null;
        double prefillShare = 0; // prefill tokens times the share of the layers they ran
        boolean wholePrefill = false; // whole prefill entries ran (together one pass over the layers)
        double slicePass = 0; // the share of the layers the tick's chunk in a layer slice ran (its pass)
        final int L = backend.config().numLayers;
        // a chunk part-way through its layers goes on before another starts (each holds its streams until it ends)
        boolean partWay = running.values().stream().anyMatch(g -> g.slicing() && g.nextRows() > 0);
        int sliceTokens = 0; // the tokens of the tick's chunk in a layer slice (prefillTokens: whole chunks)
        boolean cutInstead = false; // a chunk was cut to the floor instead of starting in a slice (below)
        // a part-way chunk plans first, so that its next slice is sized by the whole room of the bound, not by what
        // prompts ahead of it in the round-robin order left
        Iterable<Map.Entry<K, Generation>> order = running.entrySet();
        if (partWay) {
            List<Map.Entry<K, Generation>> sorted = new ArrayList<>(running.entrySet());
            sorted.sort(Comparator.comparing(en -> !en.getValue().slicing()));
            order = sorted;
        }
        for (var en : order) {
            Generation g = en.getValue();
            if (!g.prefilling() || g.nextRows() == 0) continue;
            if (budget == null) budget = prefillBudget.decide(limits, rowsDecode);
            if (budget.tokens() == 0) break; // a probe: this tick measures the decode rows alone
            int n = g.nextRows();
            boolean shortRest = shortRestAtFloor(g, n, budget, prefillTokens);
            // a prompt whose whole rest fits in the floor is never sliced: it comes along whole, or waits for a tick
            // with room (a burst of short prompts then shares whole passes instead of each taking slices of its own)
            boolean restInFloor = n <= limits.floor() && g.promptTokens() - g.prefilledTokens() == n;
            if (g.slicing() || (sliceable(budget) && !restInFloor)) {
                // a chunk in layer slices: the generation's whole next chunk (the weights read once for all its tokens)
                // or the rest of its part-way one, as many layers as the bound allows; one such chunk a tick
                if (sliceTokens > 0 || cutInstead || (partWay && !g.slicing())) continue;
                int layers = PrefillBudget.layers(limits, budget, n, prefillShare, L);
                // not one layer fits the room the tick has left: at the floor (unless cut, next) or part-way the chunk
                // runs one layer;
                // under the stretch bound a new chunk is cut instead (below: to the tokens that fit, or it waits)
                int run = layers > 0 || g.slicing() || budget.reason() != PrefillBudget.Reason.STRETCH ? Math.max(1, layers) : 0;
                // at the floor one layer of a new chunk breaks the bound, and so does the floor-sized chunk the cut
                // below would run whole: the per-pass cost line picks the shorter tick. On the CPU with few layers one
                // layer of a long chunk is more tokens' work than the floor and costs more; on the GPU a pass's fixed
                // cost makes the slice far cheaper. A chunk cut instead is the tick's one long chunk, as a slice is
                if (layers == 0 && !g.slicing() && budget.reason() == PrefillBudget.Reason.FLOOR) {
                    int whole = cut(n, budget.tokens() - prefillTokens, prefillTokens == 0);
                    if (whole > 0 && whole < n && prefillBudget.wholeCheaper(whole, n, L, limits.floor())) {
                        run = 0;
                        cutInstead = true;
                    }
                }
                if (run > 0) {
                    final int r = run;
                    BatchEntry e = plan(en.getKey(), () -> g.planPrefill(n, r), keys, batch, failed);
                    if (e == null) continue;
                    sliceTokens = e.count();
                    BatchEntry.Layers ly = e.layers();
                    if (ly == null) wholePrefill = true;
                    else slicePass = (double) (ly.to() - ly.from()) / L;
                    prefillShare += ly == null ? e.count() : (double) e.count() * (ly.to() - ly.from()) / L;
                    if (ly != null && budget.reason() == PrefillBudget.Reason.FLOOR) budget = budget.because(PrefillBudget.Reason.LAYERS);
                    continue;
                }
            }
            // beside a slice only prompts' short rests come along: at the floor up to the budget (shortRestAtFloor),
            // under the stretch bound those that fit the tokens it has left
            boolean besideSlice = sliceTokens > 0;
            if (besideSlice && !shortRest && (budget.reason() != PrefillBudget.Reason.STRETCH || prefillShare + n > budget.tokens()))
                continue;
            int take = besideSlice || prefillTokens + n <= budget.tokens() || shortRest ? n
                    : budget.bounded() ? cut(n, budget.tokens() - prefillTokens, prefillTokens == 0) : 0;
            if (take == 0 && prefillTokens == 0) take = n; // the first prompt always progresses
            if (take == 0) continue;
            final int t = take;
            BatchEntry e = plan(en.getKey(), () -> g.planPrefill(t), keys, batch, failed);
            if (e == null) continue;
            prefillTokens += e.count();
            prefillShare += e.count();
            wholePrefill = true;
        }
        prefillTokens += sliceTokens;
        // --- cancelled generations end at this step boundary (plan releases their state)
        for (var en : running.entrySet()) {
            Generation g = en.getValue();
            if (!g.done() && g.nextRows() == 0 && g.planned() == null && !failed.containsKey(en.getKey())) g.plan();
        }
        // --- the target's step, and each entry's commit
        List<K> stepped = new ArrayList<>(keys.size());
        boolean isolated = false;
        long tPlanned = clock.getAsLong(), tStepped = tPlanned;
        if (!batch.isEmpty()) {
            maskAll(keys, batch);
            BatchRun.Outcome o = BatchRun.run(backend, batch);
            tStepped = clock.getAsLong();
            isolated = o.isolated();
            prepareAll(keys, o);
            for (int i = 0; i < keys.size(); i++) {
                K k = keys.get(i);
                if (!o.ok(i)) {
                    fail(k, o.failures()[i], failed);
                    continue;
                }
                try {
                    running.get(k).commit(o.logits()[i], o.argmax()[i]);
                    stepped.add(k);
                } catch (Throwable t) {
                    fail(k, t, failed);
                }
            }
        }
        // --- bookkeeping: ended and failed generations leave; those that stepped go to the back
        for (K k : failed.keySet()) running.remove(k);
        for (var it = running.entrySet().iterator(); it.hasNext(); ) {
            var en = it.next();
            if (en.getValue().done()) {
                ended.add(en.getKey());
                it.remove();
            }
        }
        for (K k : stepped) {
            Generation g = running.remove(k);
            if (g != null) running.put(k, g);
        }
        long t1 = clock.getAsLong(), nanos = t1 - t0;
        boolean oneOff = backend.oneOffWork() != work0;
        if (!batch.isEmpty() && !isolated)
            prefillBudget.observe(rowsDecode, entriesDecode, prefillShare, (wholePrefill ? 1 : 0) + slicePass, limits.floor(),
                    nanos, oneOff);
        return new Tick<>(stepped, failed, ended, batch.size(), rowsDecode, prefillTokens, sliceTokens, prefillShare, isolated,
                List.copyOf(mtpSteps), budget, nanos, tPlanned - t0, tStepped - tPlanned, t1 - tStepped, oneOff);
    }

    /**
     * Whether a prompt's next chunk of n tokens runs in this tick although it does not fit the latency bound's limit:
     * when the limit is the floor ({@link PrefillBudget.Decision#atFloor}: a floor-sized chunk already breaks the
     * bound), a prompt whose whole rest is this chunk of at most {@link Limits#minPrefillChunk} tokens comes along up to
     * the token budget. Each such prompt would otherwise take a tick of its own at the floor; together they share one
     * pass over the weights (on the GPU most of a short chunk's cost), so a burst of short prompts gets its first
     * tokens in one tick instead of one tick each, and the running streams are held up once instead of once per prompt.
     * A long prompt's chunks are still limited to the floor.
     */
    private boolean shortRestAtFloor(Generation g, int n, PrefillBudget.Decision budget, int prefillTokens) {
        return budget.atFloor() && n <= limits.floor()
                && g.promptTokens() - g.prefilledTokens() == n && prefillTokens + n <= limits.tokenBudget();
    }

    /**
     * Plans a prefill entry of the generation under key: adds it to the batch when there is one, fails the generation
     * when planning throws.
     * @return the entry, or null (none, or planning failed)
     */
    private BatchEntry plan(K key, java.util.function.Supplier<BatchEntry> planner, List<K> keys, List<BatchEntry> batch,
                            Map<K, Throwable> failed) {
        try {
            BatchEntry e = planner.get();
            if (e != null) {
                keys.add(key);
                batch.add(e);
            }
            return e;
        } catch (Throwable t) {
            fail(key, t, failed);
            return null;
        }
    }

    /**
     * Whether a new chunk starts in layer slices under this decision: the limits allow it, the backend runs them, and
     * the latency bound limits the tick, at the floor (a floor-sized chunk already breaks the bound) or below the
     * budget ({@link PrefillBudget#layers}).
     */
    private boolean sliceable(PrefillBudget.Decision budget) {
        return limits.layerSlices() && backend.layerSlices()
                && (budget.reason() == PrefillBudget.Reason.FLOOR || budget.reason() == PrefillBudget.Reason.STRETCH);
    }

    /**
     * How many tokens of a prefill chunk of n tokens to run now under the latency bound, which leaves room for
     * {@code room} more prefill tokens in this tick: the largest cut k in [floor, min(room, n − 1)] whose two parts
     * give the numbers of the whole chunk ({@link Backend#prefillSplitExact}); when there is none and the chunk is the
     * tick's first ({@code first}), the smallest such cut above room, else the whole chunk; when there is none and it is
     * not the first, 0 (it waits). The floor is {@link Limits#minPrefillChunk} (at most the token budget).
     */
    int cut(int n, int room, boolean first) {
        int floor = limits.floor();
        for (int k = Math.min(room, n - 1); k >= floor; k--) if (backend.prefillSplitExact(n, k)) return k;
        if (!first) return 0;
        for (int k = Math.max(room + 1, floor); k < n; k++) if (backend.prefillSplitExact(n, k)) return k;
        return n;
    }

    /**
     * Computes the row distributions of the entries whose sampling depends on their logits alone
     * ({@link Generation#prepare}) on several threads (the common fork-join pool, this thread helping), before the
     * commits run one by one on this thread. Sampling a full-vocabulary row costs about a millisecond on the host, and
     * a constrained row's mask may cost as much again at a state no request met before, so at 64 sampled or
     * constrained streams this is most of a step's host time. A failure here is left to the commit, which computes
     * the distributions itself then.
     */
    private void prepareAll(List<K> keys, BatchRun.Outcome o) {
        List<Runnable> work = new ArrayList<>();
        for (int i = 0; i < keys.size(); i++) {
            Generation g = running.get(keys.get(i));
            float[] lg = o.logits()[i];
            if (g != null && lg != null && o.ok(i) && g.preparable()) work.add(() -> {
                try {
                    g.prepare(lg);
                } catch (RuntimeException e) {
                    // commit computes what prepare did not, and meets the failure (a constraint's live-state limit)
                    // where it belongs to its request; caught here so that no task ends the parallel loop early: its
                    // caller would go on to the commits while other tasks still prepare
                }
            });
        }
        if (work.size() < 2) return;
        work.parallelStream().forEach(Runnable::run);
    }

    /**
     * Re-plans the entries whose constrained greedy rows the backend can choose among their masks
     * ({@link Generation#maskedArgmax}), the masks computed on several threads (the common fork-join pool, this thread
     * helping) before the step, as {@link #prepareAll} computes them after it for the rows that need logits. A failure
     * leaves the entry as planned: its commit computes the mask again and meets the failure where it belongs to its
     * request.
     */
    private void maskAll(List<K> keys, List<BatchEntry> batch) {
        List<Runnable> work = new ArrayList<>();
        for (int i = 0; i < keys.size(); i++) {
            Generation g = running.get(keys.get(i));
            int at = i;
            if (g != null && g.planned() == batch.get(i) && g.maskable()) work.add(() -> {
                try {
                    batch.set(at, g.maskedArgmax());
                } catch (RuntimeException e) {
                    // left as planned (see above); caught so that no task ends the parallel loop early
                }
            });
        }
        if (work.size() == 1) work.getFirst().run();
        else if (work.size() > 1) work.parallelStream().forEach(Runnable::run);
    }

    private void fail(K k, Throwable t, Map<K, Throwable> failed) {
        Generation g = running.get(k);
        try {
            if (g != null) g.abandon();
        } catch (Throwable ignored) {
            // already failing; the original error is what is reported
        }
        failed.put(k, t);
    }
}
