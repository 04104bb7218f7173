package io.ds4j.gpu;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.function.LongSupplier;

import static io.ds4j.gpu.Gpu.check;
import static io.ds4j.gpu.bindings.ds4j_gpu_h.*;

/**
 * Decode-step graphs for {@link HipBackend} (ds4j_gpu.h "step graphs"): a decode step
 * (S = 1) or a verify step (S = q + 1 below {@code DS4J_TC_MIN_ROWS}) runs as one graph launch instead of one launch
 * per kernel (about 40 per layer). Two forms:
 * <ul>
 *   <li>kept graphs ({@link #capture}, {@link #replay}): a step whose launches and arguments depend only on its shape
 *       (HipBackend's fixed form: positions, lengths and cache addresses read from device memory) is captured once per
 *       shape key and the executable replayed as is for every later step of that key, after the step's inputs are
 *       uploaded into the same device buffers; at most {@value #MAX_KEPT} executables are kept (least recently used
 *       evicted);</li>
 *   <li>re-recorded graphs ({@link #run}): the other decode and verify steps of one sequence (e.g. a verify step on
 *       either path above its short-context threshold, whose tensor-core launches follow the context) are captured
 *       again every step, and the library updates the parameters of a cached executable graph of the same topology
 *       instead of building a new one. Steps of several sequences that are not in the fixed form (a batch mixing
 *       decode entries with verify entries on the f32-convert path) run kernel by kernel.</li>
 * </ul>
 * The numerics are those of the same kernels launched one by one, bit for bit.
 *
 * <p>Never captured: prefill chunks of more than one row, steps in profile mode (each operation waits for the device)
 * and hybrid expert placement (its MoE waits for the routing and runs host experts in the middle of the step); the
 * caller decides with {@link #capturable}. A failure inside the capture ends it cleanly (no stream is left capturing).
 * A capture the runtime refuses ({@code DS4J_ERR_CAPTURE}: nothing recorded ran) is dropped and the step is run again
 * without it; after {@value #MAX_FALLBACKS} such fallbacks graphs are turned off with a warning.
 *
 * <p>Switch: {@code -Dds4j.gpu.graphs=kept|all|off} ({@code true} = kept, {@code false} = off), or
 * {@link HipBackend#setGraphs} (on = all). The default, {@code kept}, replays the fixed-form steps and runs the others
 * kernel by kernel: on the H200 at full depth the kept form decodes 5.6 % faster than no graphs (host time per step
 * 11.5 ms down to 0.5 ms; BENCHMARKS.md, "Decode-step graphs"), while the re-recorded form measured 5-6 % slower (every
 * step recorded call by call, the device starting only when recording and update are done), so {@code all} is for
 * comparisons. Not thread-safe: used under the backend's lock.
 */
final class DecodeGraphs {
    private static final Logger LOG = LoggerFactory.getLogger(DecodeGraphs.class);
    /** The system property that chooses the graph forms: kept (default), all, or off. */
    static final String PROPERTY = "ds4j.gpu.graphs";
    /** Refused captures after which graphs are turned off. */
    static final int MAX_FALLBACKS = 3;

    /** Most kept executables (one per step shape key); the least recently used is destroyed beyond it. */
    static final int MAX_KEPT = 32;

    /**
     * Counts since the backend opened.
     * @param captured       steps launched as a re-recorded graph ({@link #run})
     * @param updated        of which reused a cached executable graph (parameters updated)
     * @param instantiated   of which needed a new executable graph (a topology not cached)
     * @param reinstantiated of which had a cached topology whose update was refused
     * @param fallbacks      captures refused by the runtime, whose steps ran without a graph
     * @param kept           steps captured once for their shape key and launched ({@link #capture}; the executable kept)
     * @param replayed       steps launched from a kept executable without any recording ({@link #replay})
     */
    public record Stats(long captured, long updated, long instantiated, long reinstantiated, long fallbacks, long kept,
                        long replayed) {
        /** Steps that ran as a graph of either form. */
        public long graphSteps() {
            return captured + kept + replayed;
        }
    }

    /**
     * A kept executable of one step shape.
     * @param exec   the library's handle (ds4j_graph_end_keep)
     * @param inputs device address the step's inputs (tokens, positions, sequence views) are uploaded to before a replay
     * @param logits device address of the logits the graph writes (0 when the step asks for none)
     */
    record Kept(long exec, long inputs, long logits) {}

    private final java.util.LinkedHashMap<Object, Kept> keptGraphs = new java.util.LinkedHashMap<>(16, 0.75f, true);
    private long keptCount, replayed;

    private final Gpu gpu;
    /** Whether the library can capture graphs (ds4j_graph_available). */
    final boolean available;
    /** Why steps of this backend are never captured (null: they may be). */
    private final String never;
    private boolean enabled;
    /** Whether steps outside the fixed form are re-recorded into a graph every step (mode all) or run without one. */
    private boolean recordEveryStep;
    private long captured, updated, instantiated, reinstantiated, fallbacks;
    private final MemorySegment out = Arena.ofAuto().allocate(ValueLayout.JAVA_INT);

    /**
     * @param never why this backend's steps can never be captured (e.g. hybrid placement), or null
     */
    DecodeGraphs(Gpu gpu, String never) {
        this.gpu = gpu;
        boolean av;
        try {
            av = ds4j_graph_available(out) == DS4J_OK() && out.get(ValueLayout.JAVA_INT, 0) != 0;
        } catch (RuntimeException | LinkageError e) { // a library built before graphs: run without them
            av = false;
        }
        this.available = av;
        this.never = !available ? "this build of the GPU library has no graph support" : never;
        String mode = System.getProperty(PROPERTY, "kept").trim().toLowerCase(java.util.Locale.ROOT);
        switch (mode) {
            case "kept", "true", "on" -> this.enabled = true;
            case "all" -> {
                this.enabled = true;
                this.recordEveryStep = true;
            }
            case "off", "false" -> this.enabled = false;
            default -> {
                LOG.warn("-D{}={} is not one of kept, all, off: using kept", PROPERTY, mode);
                this.enabled = true;
            }
        }
    }

    /** "on", "off (switched off)" or "off (why they are not available)", for the start-up log. */
    String describe() {
        return enabled() ? (recordEveryStep ? "on, all (fixed-form steps replayed from kept graphs, other decode and verify steps re-recorded)"
                : "on, kept (fixed-form steps replayed from kept graphs, other steps kernel by kernel)")
                : never != null ? "off (" + never + ")" : "off (-D" + PROPERTY + "=kept turns them on)";
    }

    /** Whether steps may be captured now (switched on, supported, not hybrid). */
    boolean enabled() {
        return enabled && never == null;
    }

    /**
     * Switches capture on or off from the next step on.
     * @throws UnsupportedOperationException turning it on where steps can never be captured (the message says why)
     */
    void setEnabled(boolean on) {
        if (on && never != null) throw new UnsupportedOperationException("decode-step graphs are not available: " + never);
        enabled = on;
        recordEveryStep = on;
    }

    Stats stats() {
        return new Stats(captured, updated, instantiated, reinstantiated, fallbacks, keptCount, replayed);
    }

    /** The kept executable of a step shape key, or null (marks it most recently used). */
    Kept kept(Object key) {
        return keptGraphs.get(key);
    }

    /** Kept executables now. */
    int keptSize() {
        return keptGraphs.size();
    }

    /**
     * Launches a kept executable (asynchronously); the caller has uploaded the step's inputs to {@link Kept#inputs}.
     * @throws GpuException when the launch fails
     */
    void replay(Kept k) {
        check(ds4j_graph_replay(gpu.ctx(), k.exec()), "replaying a kept step graph");
        replayed++;
    }

    /**
     * Runs the step's kernel calls inside a capture, instantiates the graph and launches it (asynchronously). When the
     * runtime refuses the capture, nothing recorded has run: the workspace is rewound, the calls run again without
     * capture and the executable is 0 (a refusal counts towards {@link #MAX_FALLBACKS}).
     * @param body   queues the step's kernels (no call that waits for the device) and returns its result
     * @param rewind undoes body's workspace allocations before a run without capture
     * @return {body's result, the executable handle or 0}; the caller keeps the executable ({@link #keep}) or destroys
     *         it ({@link #destroy})
     * @throws RuntimeException what body throws (the capture is discarded first), or a {@link GpuException} when
     *         launching fails (the executable is destroyed)
     */
    long[] capture(LongSupplier body, Runnable rewind) {
        Recorded r = record(body);
        if (r.refused()) return new long[]{fallback(r.why(), body, rewind), 0};
        long result = r.result();
        MemorySegment h = Arena.ofAuto().allocate(ValueLayout.JAVA_LONG);
        int rc = ds4j_graph_end_keep(gpu.ctx(), h);
        if (rc == DS4J_ERR_CAPTURE()) return new long[]{fallback(Gpu.lastError(), body, rewind), 0};
        check(rc, "instantiating the step graph");
        long exec = h.get(ValueLayout.JAVA_LONG, 0);
        rc = ds4j_graph_replay(gpu.ctx(), exec);
        if (rc != DS4J_OK()) {
            GpuException e = new GpuException(rc, "launching the step graph: " + Gpu.lastError());
            ds4j_graph_destroy(gpu.ctx(), exec);
            throw e;
        }
        keptCount++;
        return new long[]{result, exec};
    }

    /** Keeps an executable for its key (from {@link #capture}); beyond {@value #MAX_KEPT} the least recently used goes. */
    void keep(Object key, Kept k) {
        Kept old = keptGraphs.put(key, k);
        if (old != null && old.exec() != k.exec()) destroy(old.exec());
        while (keptGraphs.size() > MAX_KEPT) {
            var it = keptGraphs.entrySet().iterator();
            long exec = it.next().getValue().exec();
            it.remove();
            destroy(exec);
        }
    }

    /** Destroys an executable that is not kept (waits for the stream first). */
    void destroy(long exec) {
        if (exec != 0) check(ds4j_graph_destroy(gpu.ctx(), exec), "destroying a step graph");
    }

    /** Destroys every kept executable (the workspace they point into is going away, or the backend closes). */
    void dropKept() {
        RuntimeException first = null;
        for (Kept k : keptGraphs.values()) {
            try {
                destroy(k.exec());
            } catch (RuntimeException e) {
                if (first == null) first = e;
            }
        }
        keptGraphs.clear();
        if (first != null) throw first;
    }

    /**
     * Whether a step is captured: graphs on, no per-operation profiling, and a decode step (S = 1) or a verify step of
     * fewer than {@code DS4J_TC_MIN_ROWS} rows.
     */
    boolean capturable(int S, boolean verify, boolean profiling) {
        return recordEveryStep && capturable(enabled(), profiling, S, verify);
    }

    /** {@link #capturable(int, boolean, boolean)} as a pure function of its inputs. */
    static boolean capturable(boolean enabled, boolean profiling, int S, boolean verify) {
        return enabled && !profiling && (S == 1 || (verify && S >= 1 && S < DS4J_TC_MIN_ROWS()));
    }

    /**
     * Runs the step's kernel calls inside a capture and launches the graph (asynchronously: the caller's download
     * waits for it). When the runtime refuses the capture, nothing recorded has run: the workspace is rewound and the
     * calls run again without capture.
     * @param body   queues the step's kernels (no call that waits for the device) and returns its result, e.g. the
     *               device address of the logits
     * @param rewind undoes body's workspace allocations before a run without capture
     * @return body's result
     * @throws RuntimeException what body throws (the capture is discarded first; any failure to discard is attached
     *         as suppressed), or a {@link GpuException} when launching the graph fails
     */
    long run(LongSupplier body, Runnable rewind) {
        Recorded r = record(body);
        if (r.refused()) return fallback(r.why(), body, rewind);
        long result = r.result();
        int rc = ds4j_graph_end_launch(gpu.ctx(), out);
        if (rc == DS4J_ERR_CAPTURE()) return fallback(Gpu.lastError(), body, rewind);
        check(rc, "launching the step graph");
        captured++;
        int how = out.get(ValueLayout.JAVA_INT, 0);
        if (how == DS4J_GRAPH_UPDATED()) updated++;
        else if (how == DS4J_GRAPH_INSTANTIATED()) instantiated++;
        else reinstantiated++;
        return result;
    }

    /** body's result with the capture still open, or why the runtime refused the capture (nothing recorded ran). */
    private record Recorded(long result, boolean refused, String why) {}

    /**
     * Begins a capture and queues body into it (the first half of {@link #capture} and {@link #run}).
     * @throws RuntimeException what body throws, after the capture is discarded (a failure to discard is attached as
     *         suppressed); a refusal surfacing from body is returned instead
     */
    private Recorded record(LongSupplier body) {
        int rc = ds4j_graph_begin(gpu.ctx());
        if (rc == DS4J_ERR_CAPTURE()) return new Recorded(0, true, Gpu.lastError());
        check(rc, "beginning a graph capture");
        try {
            return new Recorded(body.getAsLong(), false, null);
        } catch (RuntimeException e) {
            int d = ds4j_graph_discard(gpu.ctx());
            if (d != DS4J_OK()) e.addSuppressed(new GpuException(d, "discarding the graph capture: " + Gpu.lastError()));
            if (d == DS4J_OK() && e instanceof GpuException g && g.code == DS4J_ERR_CAPTURE()) return new Recorded(0, true, g.getMessage());
            throw e;
        }
    }

    private long fallback(String why, LongSupplier body, Runnable rewind) {
        fallbacks++;
        if (fallbacks >= MAX_FALLBACKS) {
            enabled = false;
            LOG.warn("decode-step graph capture refused ({}); the step ran without a graph. {} refusals: graphs are off from"
                    + " now on (kernels are launched one by one)", why, fallbacks);
        } else LOG.warn("decode-step graph capture refused ({}); the step ran without a graph", why);
        rewind.run();
        return body.getAsLong();
    }

    /** Whether the context's stream is in capture mode (tests: after a failure it must not be). */
    boolean capturing() {
        check(ds4j_graph_capturing(gpu.ctx(), out), "graph capture state");
        return out.get(ValueLayout.JAVA_INT, 0) != 0;
    }

    /**
     * Mean µs per call of `call` replayed from a graph, for benchmarks that time device work without the host's launch
     * cost: `calls` calls (e.g. one per weight copy, so that every call reads HBM) captured once, replayed until about
     * reps calls ran, after one replay as a warm-up. NaN when this build or device cannot capture graphs or a call
     * fails inside the capture (the capture is then discarded). Not for steps: {@link #capture} keeps theirs.
     */
    static double replayMicros(Gpu gpu, int calls, int reps, Runnable call) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment flag = arena.allocate(ValueLayout.JAVA_INT);
            if (ds4j_graph_available(flag) != DS4J_OK() || flag.get(ValueLayout.JAVA_INT, 0) == 0) return Double.NaN;
            gpu.sync();
            if (ds4j_graph_begin(gpu.ctx()) != DS4J_OK()) return Double.NaN;
            try {
                for (int i = 0; i < calls; i++) call.run();
            } catch (RuntimeException e) {
                ds4j_graph_discard(gpu.ctx());
                return Double.NaN;
            }
            MemorySegment h = arena.allocate(ValueLayout.JAVA_LONG);
            if (ds4j_graph_end_keep(gpu.ctx(), h) != DS4J_OK()) return Double.NaN;
            long exec = h.get(ValueLayout.JAVA_LONG, 0);
            try {
                int replays = Math.max(1, (reps + calls - 1) / calls);
                check(ds4j_graph_replay(gpu.ctx(), exec), "replaying a timing graph");
                gpu.sync();
                long t0 = System.nanoTime();
                for (int r = 0; r < replays; r++) check(ds4j_graph_replay(gpu.ctx(), exec), "replaying a timing graph");
                gpu.sync();
                return (System.nanoTime() - t0) / 1e3 / ((double) replays * calls);
            } finally {
                check(ds4j_graph_destroy(gpu.ctx(), exec), "destroying a timing graph");
            }
        }
    }
}
