package io.ds4j.gpu;

import io.ds4j.cpu.CpuBackend;
import io.ds4j.engine.Backend;
import io.ds4j.engine.BackendOptions;
import io.ds4j.engine.CacheLayout;
import io.ds4j.engine.EngineStatus;
import io.ds4j.engine.Sequence;
import io.ds4j.engine.StepKind;
import io.ds4j.engine.VerifyAttention;
import io.ds4j.engine.FeatureGate;
import io.ds4j.model.AttentionKind;
import io.ds4j.model.CheckpointException;
import io.ds4j.model.ModelConfig;
import io.ds4j.model.ModelWeights;
import io.ds4j.model.Rope;
import io.ds4j.model.WeightLoader;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.util.EnumMap;
import java.util.Locale;
import java.util.Map;

import static io.ds4j.gpu.Gpu.check;
import static io.ds4j.gpu.Gpu.ptr;
import static io.ds4j.gpu.bindings.ds4j_gpu_h.*;

/**
 * The DeepSeek-V4 forward (spec section 3) on a GPU through the ds4j GPU library (HIP C++, built with hipcc or, on
 * NVIDIA, with nvcc), mirroring {@link io.ds4j.cpu.CpuBackend} operation by operation: F32 activations, weights in
 * their stored format dequantised inside the kernels, the F16 MLA cache and the F32 compressor rings of each
 * {@link HipSequence} in device memory. One step serves prefill chunks, decode and verification (S ≥ 1 rows); steps
 * of at least {@code DS4J_TC_MIN_ROWS} rows (prefill chunks) run the matrix products, the routed experts (grouped by
 * expert) and the indexer scores on tensor cores, shorter ones (decode, verify) on the F32 FFMA kernels (ds4j_gpu.h
 * says how close the two are). Only the requested logits rows are copied back.
 *
 * <p>Expert placement ({@link ExpertPlacementPlan}, {@link BackendOptions#placement()}): monolithic keeps every routed
 * expert in device memory; hybrid keeps the experts beyond the device-memory budget in host memory (the mapped
 * checkpoint) and runs the picks routed to them with the CPU kernels while the device runs the others. At load the
 * device memory use is logged by category ({@link #memoryReport()}). Running out of device memory is a
 * {@link DeviceMemoryException} naming what did not fit and what to change.
 *
 * <p>Verify attention (prefill never changes): two paths over the same attended rows, masks and sink, chosen by
 * {@link BackendOptions#f16KvVerify()} and switchable at run time ({@link #setVerifyAttention}):
 * <ul>
 *   <li>{@link VerifyAttention#F32_CONVERT} (the control, the default): in verify steps, per layer, the complete
 *       persistent F16 cache rows — every window ring row, every compressed entry stored so far and, where the indexer
 *       runs, every indexer key — are converted to an F32 scratch in the step's workspace (reused by the next layer),
 *       then the indexer scores and the attention run in F32 on the copies; decode steps run the same F32 arithmetic on
 *       the F16 rows in place, bit for bit the same;</li>
 *   <li>{@link VerifyAttention#F16}: the F16 rows are read in place, in verify and decode steps alike. A query whose
 *       attended row count n_attn ({@link #attendedRows}) is at most {@link BackendOptions#f32ShortContextRows()} keeps
 *       Q·Kᵀ and P·V in F32 arithmetic: its output equals the control's bit for bit. Above it the products run on
 *       tensor cores ({@code ds4j_attention_f16_operands}) at F32 accuracy: the F32 side of each product (the query,
 *       the probabilities) is split into F16 hi + lo parts, two products accumulated in F32, so the output is within
 *       F32 rounding noise of the control's. Decode steps take the same path because the rows a verify step commits
 *       stay in the cache: if verify and decode computed different numbers (even by an ulp), a draft that matches
 *       the target would drift from it step by step; with one path and a per-query kernel that does not depend on the
 *       step's size, a copy-of-target draft keeps its tokens and speculative greedy output equals plain greedy output.
 *       The indexer scores are F32 arithmetic on both paths (the control's on the F32 copies), so both select the
 *       same entries from the same inputs.</li>
 * </ul>
 * Each layer kind's mode is logged at its first verify step, and once more for each new mode it enters (a growing context
 * crossing the threshold, a run-time switch of the path).
 *
 * <p>Decode-step graphs ({@link DecodeGraphs}): with monolithic placement, decode steps (S = 1)
 * and verify steps are captured into one graph per step and launched as one instead of kernel by kernel
 * ({@link #setGraphs}, {@code -Dds4j.gpu.graphs}); the results are the same bit for bit.
 *
 * <p>All work runs on one stream of one device; calls are serialised on the backend (different sequences may be
 * stepped from different threads, one at a time). Implements {@code backend: hip} ({@link io.ds4j.engine.Backends}).
 */
public final class HipBackend implements Backend, io.ds4j.engine.SyntheticContext {
    private static final Logger LOG = LoggerFactory.getLogger(HipBackend.class);

    private final Gpu gpu;
    private final ModelConfig c;
    private final ModelWeights hostWeights;
    private final DeviceWeights w;
    private final Workspace ws;
    /** Device inv_freq tables [r/2] of the main and compress RoPE (spec 1.4). */
    private final long ropeMain, ropeCompress;
    private final BackendOptions options;
    private final ExpertPlacementPlan plan;
    /** Host picks run on the CPU per layer (hybrid placement), for tests and diagnostics. */
    final long[] hostPickCount;
    private volatile DeviceMemoryReport report;

    private VerifyAttention verifyAttention;
    /** The effective state at load (placement, F16-KV decision and its diagnostic). */
    private final EngineStatus startStatus;
    private int shortRows;
    /** The last verify mode per layer kind: {category, message}. */
    private final Map<AttentionKind, String[]> verifyModes = new EnumMap<>(AttentionKind.class);
    /** (layer kind, mode category) pairs already logged. */
    private final java.util.Set<String> loggedModes = new java.util.HashSet<>();
    /** Whether ds4j_attention_f16_operands uses tensor cores for this model (nvcc build, supported head width). */
    private final boolean tensorCores;
    /** Host out-parameter of size queries (used under the backend's lock). */
    private final MemorySegment outLong = Arena.ofAuto().allocate(ValueLayout.JAVA_LONG);
    /** Decode-step graphs (decode and verify steps captured and launched as one graph). */
    private final DecodeGraphs graphs;
    private boolean closed;

    /**
     * Opens the first GPU and uploads the weights with the default options (automatic placement and budget).
     * @param weights loaded weights; the backend closes them in {@link #close()}
     * @throws GpuUnavailableException when no GPU can be used (message names what is missing)
     * @throws DeviceMemoryException when the weights do not fit (message names what did not fit)
     */
    public HipBackend(ModelWeights weights) {
        this(weights, BackendOptions.DEFAULTS);
    }

    /**
     * Opens the first GPU and uploads the weights as the options place them ({@link ExpertPlacementPlan}).
     * @param weights loaded weights; the backend closes them in {@link #close()} (not when this constructor throws)
     * @throws GpuUnavailableException when no GPU can be used (message names what is missing)
     * @throws DeviceMemoryException when the weights do not fit the budget with the asked-for placement, or the device
     *         runs out while uploading them (the message names what did not fit, the budget and what to change)
     */
    public HipBackend(ModelWeights weights, BackendOptions options) {
        this(weights, Gpu.open(0), options);
    }

    private HipBackend(ModelWeights weights, Gpu gpu, BackendOptions options) {
        this.gpu = gpu;
        this.c = weights.config;
        this.hostWeights = weights;
        this.options = options;
        this.hostPickCount = new long[c.numLayers];
        this.shortRows = this.options.f32ShortContextRows();
        this.tensorCores = "cuda".equals(gpu.platform) && java.util.Set.of(64, 128, 256, 512).contains(weights.config.headDim);
        DeviceWeights dw = null;
        Workspace wsp = null;
        long rm = 0, rc = 0;
        try {
            long t0 = System.nanoTime();
            ExpertPlacementPlan.Footprint fp = DeviceWeights.measure(weights);
            long[] mem = gpu.memory();
            ExpertPlacementPlan.Budget budget = ExpertPlacementPlan.Budget.of(options.deviceMemoryBudget(), mem[0],
                    ExpertPlacementPlan.reserveBytes(c));
            if (budget.explicit() && budget.bytes() > mem[0])
                LOG.warn("gpu.memoryBudgetMiB {} exceeds the free device memory {}; uploading may run out of memory",
                        Gpu.mib(budget.bytes()), Gpu.mib(mem[0]));
            ExpertPlacementPlan pl = ExpertPlacementPlan.plan(options.placement(), options.f16KvVerify(), budget, fp);
            LOG.info("expert placement {} (asked for {}): {} of {} routed experts per layer in device memory, {} in host memory;"
                            + " weights {} of device memory within {}", pl.placement().key(), options.placement().key(),
                    pl.residentRange(), c.numExperts, pl.hostExperts(), Gpu.mib(pl.deviceBytes()), budget.describe());
            this.plan = pl;
            // the server / generate report the diagnostic (FeatureGate.resolve's contract); it is not logged here twice
            this.startStatus = FeatureGate.resolve("hip", options, pl.placement(), pl.hostExperts());
            this.verifyAttention = startStatus.f16KvActive() ? VerifyAttention.F16 : VerifyAttention.F32_CONVERT;
            dw = new DeviceWeights(gpu, weights, pl.resident(), ". Planned for expert placement " + pl.placement().key()
                    + " within " + budget.describe() + ". To fit: lower gpu.memoryBudgetMiB (with gpu.expertPlacement hybrid or"
                    + " auto, more routed experts stay in host memory), free device memory used by other processes, or use a"
                    + " smaller model");
            rm = gpu.uploadNew(Rope.main(c).invFreq, "rope table");
            rc = gpu.uploadNew(Rope.compress(c).invFreq, "rope table");
            wsp = new Workspace(gpu);
            gpu.sync();
            LOG.info("hip backend on {}: weights uploaded in {} s (total {})", gpu,
                    String.format("%.2f", (System.nanoTime() - t0) / 1e9), Gpu.mib(dw.totalBytes()));
            LOG.info("hip backend verify attention: {} (f32ShortContextRows {}; above it {})", verifyAttention.key(), shortRows,
                    tensorCores ? "tensor cores at F32 accuracy (hi + lo F16 splits)" : "the portable kernel (F32 arithmetic on the F16 rows)");
        } catch (RuntimeException e) {
            if (wsp != null) wsp.close();
            if (dw != null) dw.close();
            try {
                gpu.free(rm);
                gpu.free(rc);
                gpu.close();
            } catch (RuntimeException ignored) {
                // report the original failure
            }
            throw e;
        }
        this.w = dw;
        this.ws = wsp;
        this.ropeMain = rm;
        this.ropeCompress = rc;
        this.report = buildReport();
        LOG.info(report.format());
        boolean hostExperts = false;
        for (DeviceWeights.Layer L : dw.layers) hostExperts |= L.w1.resident() < c.numExperts;
        this.graphs = new DecodeGraphs(gpu, hostExperts
                ? "hybrid expert placement (host experts run on the CPU in the middle of a step)" : null);
        LOG.info("hip backend decode-step graphs: {}", graphs.describe());
    }

    /**
     * Whether decode steps (S = 1) and verify steps (S below DS4J_TC_MIN_ROWS) are captured into a graph and launched
     * as one ({@link DecodeGraphs}); the start-up value is {@code -Dds4j.gpu.graphs} (default false) where the
     * library supports graphs and the placement is monolithic. Profile mode never captures.
     */
    public synchronized boolean graphs() {
        return graphs.enabled();
    }

    /**
     * Turns decode-step graphs on or off from the next step on (tests, benchmarks). Results are the same bit for bit.
     * @throws UnsupportedOperationException turning them on where they are not available (hybrid placement, or a
     *         library without graph support), naming why
     */
    public synchronized void setGraphs(boolean on) {
        graphs.setEnabled(on);
    }

    /** Decode-step graph counts since load: steps captured, executables updated or built, refused captures. */
    public synchronized DecodeGraphs.Stats graphStats() {
        return graphs.stats();
    }

    /** Whether the stream is in capture mode now (tests: never after a step returned or failed). */
    synchronized boolean capturing() {
        return graphs.capturing();
    }

    /**
     * Device memory use by category: the weights (as placed), the routed experts left in host memory, the workspace
     * and the free memory, as of load time or the last step that changed the workspace size.
     */
    public DeviceMemoryReport memoryReport() {
        return report;
    }

    private DeviceMemoryReport buildReport() {
        long[] mem = gpu.memory();
        java.util.List<DeviceMemoryReport.Entry> es = new java.util.ArrayList<>();
        java.util.Map<String, Long> by = w.bytesByCategory();
        long ropeBytes = 2 * Math.max(256, ((4L * Rope.main(c).invFreq.length + 255) / 256) * 256);
        long hostBytes = 0;
        for (int l = 0; l < c.numLayers; l++)
            for (int e = w.layers[l].w1.resident(); e < c.numExperts; e++) {
                ModelWeights.Layer L = hostWeights.layers[l];
                hostBytes += L.w1[e].storedBytes() + L.w3[e].storedBytes() + L.w2[e].storedBytes();
            }
        for (String cat : DeviceMemoryReport.CATEGORIES) {
            long b = switch (cat) {
                case DeviceMemoryReport.EXPERTS_HOST -> hostBytes;
                case DeviceMemoryReport.WORKSPACE -> ws.bytes();
                case DeviceMemoryReport.FREE -> mem[0];
                case DeviceMemoryReport.OTHER -> by.getOrDefault(cat, 0L) + ropeBytes;
                default -> by.getOrDefault(cat, 0L);
            };
            es.add(new DeviceMemoryReport.Entry(cat, b));
        }
        ExpertPlacementPlan.Budget b = plan.budget();
        return new DeviceMemoryReport(gpu.toString(), plan.placement().key(), plan.residentRange(), c.numExperts,
                plan.hostExperts(), b.bytes(), b.explicit() ? 0 : b.reserve(), mem[1], java.util.List.copyOf(es));
    }

    /** The most workspace bytes a step took beyond {@link Workspace#stepBytes} (0 when the estimate holds), for tests. */
    synchronized long workspaceOvershoot() {
        return ws.overshoot;
    }

    /** The expert placement in effect. */
    public ExpertPlacementPlan placement() {
        return plan;
    }

    /**
     * An out-of-memory failure at run time as a {@link DeviceMemoryException} naming what did not fit and what to
     * change; other failures unchanged.
     */
    private RuntimeException outOfMemory(GpuException e, String what) {
        if (e.code != DS4J_ERR_OOM() || e instanceof DeviceMemoryException) return e;
        long free;
        try {
            free = gpu.memory()[0];
        } catch (RuntimeException x) {
            free = -1;
        }
        return new DeviceMemoryException("out of device memory for " + what + ": " + e.getMessage() + ". The weights take "
                + Gpu.mib(w.totalBytes()) + " (expert placement " + plan.placement().key() + ", " + plan.budget().describe()
                + "), the workspace " + Gpu.mib(ws.bytes()) + (free >= 0 ? ", " + Gpu.mib(free) + " is free now" : "")
                + ". To leave more room for the workspace and the sequence caches: lower gpu.memoryBudgetMiB (with"
                + " gpu.expertPlacement hybrid or auto, more routed experts stay in host memory), use shorter prefill chunks"
                + " (limits.prefillChunk), fewer concurrent sequences (limits.maxActive), a shorter context"
                + " (limits.maxContextTokens), or a smaller model", e);
    }

    /**
     * {@code backend: hip}: checks for a usable GPU first (fast, clear failure), then loads and uploads the model.
     * @throws IllegalArgumentException when no GPU can be used here, naming what is missing
     * @throws CheckpointException when the model cannot be loaded
     */
    public static HipBackend open(Path modelDir) throws CheckpointException {
        return open(modelDir, BackendOptions.DEFAULTS);
    }

    /**
     * {@link #open(Path)} with start-up options (placement, budget, verify attention path).
     * @throws DeviceMemoryException when the model does not fit the device as asked for (message names what to change)
     */
    public static HipBackend open(Path modelDir, BackendOptions options) throws CheckpointException {
        Gpu gpu;
        try {
            gpu = Gpu.open(0);
        } catch (GpuUnavailableException e) {
            throw new IllegalArgumentException("backend 'hip' is not available on this machine: " + e.getMessage()
                    + "; use backend 'cpu'", e);
        }
        ModelWeights weights;
        try {
            weights = WeightLoader.load(modelDir);
        } catch (CheckpointException | RuntimeException e) {
            gpu.close();
            throw e;
        }
        try {
            return new HipBackend(weights, gpu, options);
        } catch (RuntimeException e) {
            try {
                weights.close();
            } catch (Exception ignored) {
                // report the original failure
            }
            throw e;
        }
    }

    /** The GPU this backend runs on. */
    public Gpu gpu() {
        return gpu;
    }

    /** Device bytes of the uploaded weights. */
    public long weightBytes() {
        return w.totalBytes();
    }

    @Override
    public String name() {
        return "hip";
    }

    @Override
    public synchronized EngineStatus status() {
        return engineStatus();
    }

    /** The load-time decision ({@link FeatureGate#resolve}) with the verify path and threshold in use now. */
    private EngineStatus engineStatus() {
        boolean f16 = verifyAttention == VerifyAttention.F16;
        // switched on at run time (tests, ds4j bench) counts as requested
        return new EngineStatus(name(), startStatus.expertPlacement(), startStatus.hostExperts(), options.f16KvVerify() || f16, f16,
                verifyAttention.key(), shortRows, startStatus.diagnostic());
    }

    @Override
    public java.util.Set<VerifyAttention> verifyAttentionPaths() {
        return plan.placement() == BackendOptions.ExpertPlacement.HYBRID ? java.util.Set.of(VerifyAttention.F32_CONVERT)
                : java.util.EnumSet.allOf(VerifyAttention.class);
    }

    /** The verify attention path in use. */
    public synchronized VerifyAttention verifyAttention() {
        return verifyAttention;
    }

    /**
     * Switches the verify attention path from the next step on (tests, benchmarks); the start-up choice is
     * {@link BackendOptions#f16KvVerify()}.
     * @throws IllegalArgumentException for null
     */
    @Override
    public synchronized void setVerifyAttention(VerifyAttention path) {
        if (path == null) throw new IllegalArgumentException("verify attention path must be set");
        if (!verifyAttentionPaths().contains(path)) throw new UnsupportedOperationException(FeatureGate.F16KV_HYBRID_WARNING);
        verifyAttention = path;
    }

    /**
     * Sets the F16 path's full-F32 threshold (attended rows) from the next step on.
     * @throws IllegalArgumentException outside {@value BackendOptions#MIN_SHORT_ROWS}..{@value BackendOptions#MAX_SHORT_ROWS}
     */
    public synchronized void setF32ShortContextRows(int rows) {
        if (rows < BackendOptions.MIN_SHORT_ROWS || rows > BackendOptions.MAX_SHORT_ROWS)
            throw new IllegalArgumentException("verify.f32ShortContextRows must be in " + BackendOptions.MIN_SHORT_ROWS + ".."
                    + BackendOptions.MAX_SHORT_ROWS + ", got " + rows);
        shortRows = rows;
    }

    /**
     * The verify attention mode each layer kind was in at its last verify step ("f32-convert",
     * "f16 full-F32 (n_attn N <= T)", "f16 tensor-core (n_attn N > T)"); kinds not yet run are absent.
     */
    public synchronized Map<AttentionKind, String> verifyAttentionModes() {
        Map<AttentionKind, String> m = new EnumMap<>(AttentionKind.class);
        verifyModes.forEach((k, v) -> m.put(k, v[1]));
        return m;
    }

    /**
     * n_attn of layer l in a step of S tokens at positions N0 .. N0+S-1: the rows its last query t = N0+S-1 attends,
     * which is the most any query of the step attends (counts grow with the position): min(t+1, W) raw window rows
     * plus its compressed entries (HCA: ⌊(t+1)/m⌋; CSA: min(⌊(t+1)/m⌋, K_I), the indexer's picks; sliding: none).
     * Spec 3.7. The same as the library's ds4j_attention_rows.
     */
    public static long attendedRows(ModelConfig c, int l, long N0, int S) {
        long t = N0 + S - 1, raw = Math.min(t + 1, c.slidingWindow);
        return switch (c.layerTypes[l]) {
            case SLIDING -> raw;
            case HCA -> raw + (t + 1) / c.ratio(l);
            case CSA -> raw + Math.min((t + 1) / c.ratio(l), c.indexTopk);
        };
    }

    @Override
    public ModelConfig config() {
        return c;
    }

    /** @throws DeviceMemoryException when the sequence's cache does not fit in device memory */
    @Override
    public synchronized HipSequence newSequence(int maxRollback) {
        if (closed) throw new IllegalStateException("backend is closed");
        try {
            return new HipSequence(this, c, maxRollback);
        } catch (GpuException e) {
            throw outOfMemory(e, "a new sequence's cache (rollback window " + maxRollback + ")");
        }
    }

    @Override
    public synchronized HipSequence fork(Sequence src, int maxRollback) {
        if (!(src instanceof HipSequence hs) || hs.backend != this)
            throw new IllegalArgumentException("sequence does not belong to this backend");
        if (hs.closed) throw new IllegalStateException("sequence is closed");
        HipSequence copy = newSequence(maxRollback);
        try {
            copy.copyFrom(hs);
        } catch (RuntimeException e) {
            copy.close();
            throw e;
        }
        return copy;
    }

    @Override
    public synchronized void fillSynthetic(Sequence seq, int n, long seed) {
        if (!(seq instanceof HipSequence hs) || hs.backend != this)
            throw new IllegalArgumentException("sequence does not belong to this backend");
        try {
            hs.fillRandom(n, seed);
        } catch (GpuException e) {
            throw outOfMemory(e, "a synthetic context of " + n + " tokens");
        }
    }

    @Override
    public synchronized double verifyConversionMillis(Sequence seq, int reps) {
        if (!(seq instanceof HipSequence hs) || hs.backend != this)
            throw new IllegalArgumentException("sequence does not belong to this backend");
        int n = hs.length();
        long scratch = 0;
        for (HipSequence.LayerState st : hs.layers) scratch = Math.max(scratch, conversionBytes(st, n));
        ws.reset(scratch);
        double[] ms = new double[Math.max(1, reps)];
        for (int r = 0; r < ms.length; r++) {
            gpu.sync();
            long t0 = System.nanoTime();
            // what the control converts per layer (see attention and indexerSelect), into a scratch reused by each layer
            for (HipSequence.LayerState st : hs.layers) {
                ws.reset(scratch);
                toF32(st.win, (long) st.winCap * c.headDim);
                if (st.comp != null && n / st.comp.m > 0) toF32(st.comp.entries(), (long) (n / st.comp.m) * c.headDim);
                if (st.index != null && n / st.index.m > 0) toF32(st.index.entries(), (long) (n / st.index.m) * c.indexHeadDim);
            }
            gpu.sync();
            ms[r] = (System.nanoTime() - t0) / 1e6;
        }
        java.util.Arrays.sort(ms);
        return ms[ms.length / 2];
    }

    @Override
    public long freeDeviceBytes() {
        return gpu.memory()[0];
    }

    @Override
    public boolean snapshots() {
        return true;
    }

    /**
     * {@inheritDoc} Device-to-device copies of the rings (in device memory, outside the weights' budget); the entry
     * stores are shared.
     * @throws DeviceMemoryException when the copies do not fit
     */
    @Override
    public synchronized io.ds4j.engine.StateSnapshot snapshot(Sequence sequence) {
        if (closed) throw new IllegalStateException("backend is closed");
        if (!(sequence instanceof HipSequence hs) || hs.backend != this)
            throw new IllegalArgumentException("sequence does not belong to this backend");
        if (hs.closed) throw new IllegalStateException("sequence is closed");
        hs.checkUsable();
        try {
            return hs.snapshot();
        } catch (GpuException e) {
            throw outOfMemory(e, "a prefix cache snapshot at " + hs.length() + " tokens");
        }
    }

    @Override
    public synchronized HipSequence resume(io.ds4j.engine.StateSnapshot snap, int maxRollback) {
        if (!(snap instanceof HipSequence.Snapshot s) || s.backend != this)
            throw new IllegalArgumentException("snapshot does not belong to this backend");
        if (s.closed()) throw new IllegalArgumentException("snapshot is closed");
        HipSequence q = newSequence(maxRollback);
        try {
            q.resumeFrom(s);
        } catch (RuntimeException e) {
            q.close();
            throw e;
        }
        return q;
    }

    /** Runs r under the backend's lock (device memory release of a sequence). */
    synchronized void release(Runnable r) {
        if (!closed) r.run();
    }

    @Override
    public long stateBytes(int ctx, int maxRollback) {
        return CacheLayout.stateBytes(c, ctx, maxRollback);
    }

    @Override
    public synchronized void close() {
        if (closed) return;
        closed = true;
        try {
            if (mtpHead != null) mtpHead.close();
            ws.close();
            w.close();
            gpu.free(ropeMain);
            gpu.free(ropeCompress);
            gpu.close();
        } finally {
            try {
                hostWeights.close();
            } catch (Exception e) {
                throw new IllegalStateException("closing weights: " + e.getMessage(), e);
            }
        }
    }

    // ------------------------------------------------------------------------------------------------------------

    private MemorySegment ctx() {
        return gpu.ctx();
    }

    /**
     * Opt-in per-operation timing ({@code -Dds4j.gpu.profile=true} or {@link #setProfiling}): each call waits for the device and adds its
     * wall time to a category. Slows everything down; for finding where time goes, not for throughput figures.
     */
    private java.util.Map<String, long[]> profile = Boolean.getBoolean("ds4j.gpu.profile") ? new java.util.TreeMap<>() : null;
    private long profileMark;

    /** Tests: the next operation named faultAt gets the status of fault instead of its own (then both clear). */
    private String faultAt;
    private java.util.function.IntSupplier fault;

    /** Tests: makes the next library operation named {@code what} report the status of {@code call} (e.g. a failing call). */
    synchronized void injectFault(String what, java.util.function.IntSupplier call) {
        faultAt = what;
        fault = call;
    }

    /** Checks a library call's status; in profile mode also waits and books its time under cat. */
    private void k(int rc, String what, String cat) {
        if (faultAt != null && faultAt.equals(what)) {
            java.util.function.IntSupplier f = fault;
            faultAt = null;
            fault = null;
            rc = f.getAsInt();
        }
        check(rc, what);
        if (profile != null) {
            gpu.sync();
            long now = System.nanoTime();
            long[] v = profile.computeIfAbsent(cat, x -> new long[2]);
            v[0] += now - profileMark;
            v[1]++;
            profileMark = now;
        }
    }

    /** Turns per-operation timing on or off (see {@link #takeProfile}). */
    public synchronized void setProfiling(boolean on) {
        profile = on ? new java.util.TreeMap<>() : null;
    }

    /** The per-category times booked since the last call (profile mode), as "category: ms (calls)" lines; clears them. */
    public synchronized String takeProfile() {
        if (profile == null) return "profiling is off (-Dds4j.gpu.profile=true)";
        StringBuilder b = new StringBuilder();
        long total = 0;
        for (long[] v : profile.values()) total += v[0];
        for (var e : profile.entrySet())
            b.append(String.format("  %-32s %9.3f ms %5.1f%% (%d calls)%n", e.getKey(), e.getValue()[0] / 1e6,
                    100.0 * e.getValue()[0] / Math.max(1, total), e.getValue()[1]));
        profile.clear();
        return b.toString();
    }

    /** y[s*ldy + r] = Σ W[r, c] x[s*ldx + c] (ds4j_matmul). */
    private void matmul(DeviceMatrix m, long x, long ldx, long y, long ldy, int S) {
        k(ds4j_matmul(ctx(), m.format(), ptr(m.data()), ptr(m.scale()), m.scaleKind(), m.rowBase(), m.rows(), m.cols(),
                ptr(x), ldx, ptr(y), ldy, S), m.name(), m == w.lmHead ? "lm_head" : "matmul (dense)");
    }

    private void matmul(DeviceMatrix m, long x, long y, int S) {
        matmul(m, x, m.cols(), y, m.rows(), S);
    }

    private void rmsnorm(long x, long y, long weight, int rows, int n) {
        k(ds4j_rmsnorm(ctx(), ptr(x), ptr(y), ptr(weight), rows, n, (float) c.rmsEps), "rmsnorm", "norm, rope, mHC");
    }

    private void rope(long x, int S, int heads, int width, long table, long pos0, long step, boolean inverse) {
        k(ds4j_rope(ctx(), ptr(x), S, heads, width, c.ropeDim, ptr(table), pos0, step, inverse ? 1 : 0), "rope", "norm, rope, mHC");
    }

    @Override
    public float[] forward(Sequence sequence, int[] tokens, int off, int S, int[] logitRows) {
        return forward(sequence, tokens, off, S, logitRows, StepKind.PREFILL);
    }

    /** {@inheritDoc} {@link StepKind#VERIFY} steps take the verify attention path ({@link #setVerifyAttention}). */
    @Override
    public synchronized float[] forward(Sequence sequence, int[] tokens, int off, int S, int[] logitRows, StepKind kind) {
        if (closed) throw new IllegalStateException("backend is closed");
        if (kind == null) throw new IllegalArgumentException("step kind must be set");
        final boolean verify = kind == StepKind.VERIFY;
        if (!(sequence instanceof HipSequence seq) || seq.backend != this)
            throw new IllegalArgumentException("sequence does not belong to this backend");
        if (seq.closed) throw new IllegalStateException("sequence is closed");
        seq.checkUsable();
        Backend.checkStep(c, tokens, off, S, logitRows);
        final int N0 = seq.pos.length();
        // grow the entry arrays and the workspace first, so that running out of memory leaves the sequence unchanged
        try {
            for (HipSequence.LayerState ls : seq.layers) {
                if (ls.comp != null) HipSequence.ensure(gpu, ls.comp, (N0 + S) / ls.comp.m);
                if (ls.index != null) HipSequence.ensure(gpu, ls.index, (N0 + S) / ls.index.m);
            }
            ws.reset(Workspace.stepBytes(c, S, N0, logitRows.length) + (verify || (kind == StepKind.DECODE && verifyAttention == VerifyAttention.F16) ? verifyScratchBytes(seq, S, N0) : 0));
        } catch (GpuException e) {
            throw outOfMemory(e, "a step of " + S + " tokens at position " + N0);
        }
        if (profile != null) {
            gpu.sync();
            profileMark = System.nanoTime();
        }
        float[] logits;
        try {
            logits = step(seq, tokens, off, S, logitRows, N0, kind);
        } catch (RuntimeException e) {
            // the rings may hold rows of this step now: the sequence cannot continue or roll back
            seq.failed = e.getMessage();
            throw e instanceof GpuException g ? outOfMemory(g, "a step of " + S + " tokens at position " + N0) : e;
        }
        if (ws.bytes() != report.bytes(DeviceMemoryReport.WORKSPACE)) report = buildReport();
        return logits;
    }

    /**
     * One step: the token ids go up (a copy that waits), then every kernel of the step is queued — captured into one
     * graph for decode and verify steps ({@link DecodeGraphs}), launched one by one otherwise — and the requested
     * logits rows come back once the device has finished.
     */
    private float[] step(HipSequence seq, int[] tokens, int off, int S, int[] logitRows, int N0, StepKind kind) {
        final boolean verify = kind == StepKind.VERIFY;
        long tok = ws.i32(S);
        int[] toks = java.util.Arrays.copyOfRange(tokens, off, off + S);
        gpu.upload(tok, toks);
        long mark = ws.mark();
        java.util.function.LongSupplier body = () -> layersAndHead(seq, tok, S, logitRows, N0, kind);
        long logits = graphs.capturable(S, verify, profile != null) ? graphs.run(body, () -> ws.release(mark)) : body.getAsLong();
        float[] out;
        if (logitRows.length == 0) {
            gpu.sync();
            out = new float[0];
        } else out = gpu.downloadFloats(logits, logitRows.length * c.vocabSize);
        // committed only once the device has finished
        for (HipSequence.LayerState ls : seq.layers) {
            if (ls.comp != null) ls.comp.count = (N0 + S) / ls.comp.m;
            if (ls.index != null) ls.index.count = (N0 + S) / ls.index.m;
        }
        seq.pos.advance(S);
        return out;
    }

    /** Queues the layers and the output head of a step (nothing here waits for the device); the logits' address. */
    private long layersAndHead(HipSequence seq, long tok, int S, int[] logitRows, int N0, StepKind kind) {
        final int D = c.hidden, n = c.hcMult, nD = n * D;
        // 3.1: every stream starts as the embedding
        long X = ws.f32((long) S * nD);
        DeviceMatrix e = w.embed;
        k(ds4j_embed(ctx(), e.format(), ptr(e.data()), ptr(e.scale()), e.scaleKind(), e.rowBase(), e.rows(), e.cols(),
                ptr(tok), S, n, ptr(X)), "embed", "embed");
        long post = ws.f32((long) S * n), comb = ws.f32((long) S * n * n), col = ws.f32((long) S * D);
        for (int l = 0; l < c.numLayers; l++) {
            DeviceWeights.Layer L = w.layers[l];
            long mark = ws.mark();
            // 3.3 attention site
            hcPre(X, S, L.attnHcFn, L.attnHcBase, L.attnHcScale, post, comb, col);
            rmsnorm(col, col, L.inputNorm, S, D);
            long a = attention(seq, l, L, col, S, N0, kind);
            k(ds4j_hc_post(ctx(), ptr(X), ptr(a), ptr(post), ptr(comb), S, n, D), "hc_post", "norm, rope, mHC");
            ws.release(mark);
            // 3.3 MoE site
            hcPre(X, S, L.ffnHcFn, L.ffnHcBase, L.ffnHcScale, post, comb, col);
            rmsnorm(col, col, L.postAttnNorm, S, D);
            long f = moe(l, L, col, S, tok);
            k(ds4j_hc_post(ctx(), ptr(X), ptr(f), ptr(post), ptr(comb), S, n, D), "hc_post", "norm, rope, mHC");
            ws.release(mark);
        }
        if (seq.kept != null) seq.kept.put(X, N0, S);
        return head(X, logitRows);
    }

    /** 3.9: hc_head merge, final norm and lm_head for the requested rows only; the logits [R, V] (0 when R = 0). */
    private long head(long X, int[] rows) {
        final int D = c.hidden, n = c.hcMult, nD = n * D, R = rows.length;
        if (R == 0) return 0;
        long xs = ws.f32((long) R * nD), v = ws.f32((long) R * nD), mu = ws.f32((long) R * n), y = ws.f32((long) R * D);
        for (int i = 0; i < R; i++) gpu.copy(xs + 4L * i * nD, X + 4L * rows[i] * nD, 4L * nD);
        rmsnorm(xs, v, 0, R, nD);
        matmul(w.hcHeadFn, v, mu, R);
        k(ds4j_hc_head(ctx(), ptr(mu), ptr(w.hcHeadBase), ptr(w.hcHeadScale), ptr(xs), R, n, D, (float) c.hcEps, ptr(y)), "hc_head", "norm, rope, mHC");
        rmsnorm(y, y, w.finalNorm, R, D);
        long logits = ws.f32((long) R * c.vocabSize);
        matmul(w.lmHead, y, logits, R);
        return logits;
    }

    /** 3.2 mHC mapping for S tokens: post [S, n], Sinkhorn matrix [S, n, n], collapsed input [S, D]. */
    private void hcPre(long X, int S, DeviceMatrix fn, long base, long scale, long post, long comb, long col) {
        final int D = c.hidden, n = c.hcMult, nD = n * D, mix = (2 + n) * n;
        long mark = ws.mark();
        long v = ws.f32((long) S * nD), mu = ws.f32((long) S * mix);
        rmsnorm(X, v, 0, S, nD);
        matmul(fn, v, mu, S);
        k(ds4j_hc_pre(ctx(), ptr(mu), ptr(base), ptr(scale), ptr(X), S, n, D, c.sinkhornIters, (float) c.hcEps,
                ptr(post), ptr(comb), ptr(col)), "hc_pre", "norm, rope, mHC");
        ws.release(mark);
    }

    // ------------------------------------------------------------------------------------------------------------
    // 3.4–3.7 attention

    private long attention(HipSequence seq, int l, DeviceWeights.Layer L, long x, int S, int N0, StepKind step) {
        final boolean verify = step == StepKind.VERIFY;
        // the f16 path covers decode steps too: a verify step and the decode steps it stands for must compute the same
        // numbers, or the rows a verify step commits differ from what decoding writes (see the class comment)
        final boolean inPlace = step != StepKind.PREFILL && verifyAttention == VerifyAttention.F16;
        final boolean convert = verify && verifyAttention == VerifyAttention.F32_CONVERT;
        final int D = c.hidden, H = c.numHeads, d = c.headDim, W = c.slidingWindow;
        final AttentionKind kind = c.layerTypes[l];
        final long P = kind == AttentionKind.SLIDING ? ropeMain : ropeCompress;
        HipSequence.LayerState st = seq.layers[l];
        // 1. query latent (kept for the indexer), 2. queries: per-head RMSNorm_1, RoPE
        long ql = ws.f32((long) S * c.qLoraRank);
        matmul(L.qA, x, ql, S);
        rmsnorm(ql, ql, L.qANorm, S, c.qLoraRank);
        long q = ws.f32((long) S * H * d);
        matmul(L.qB, ql, q, S);
        k(ds4j_rmsnorm_rope(ctx(), ptr(q), MemorySegment.NULL, S * H, d, (float) c.rmsEps, c.ropeDim, ptr(P), N0, H, 0),
                "q norm + rope", "norm, rope, mHC");
        // 3. shared kv: norm, RoPE, rounded to F16 as stored
        long kv = ws.f32((long) S * d);
        matmul(L.kv, x, kv, S);
        k(ds4j_rmsnorm_rope(ctx(), ptr(kv), ptr(L.kvNorm), S, d, (float) c.rmsEps, c.ropeDim, ptr(P), N0, 1, 1),
                "kv norm + rope + f16", "norm, rope, mHC");
        // 4. compressors and the indexer's selection
        if (st.comp != null) compress(st.comp, L.compressor, x, S, N0);
        long sel = 0;
        if (st.index != null) {
            compress(st.index, L.indexer.compressor, x, S, N0);
            sel = indexerSelect(st.index, L, ql, x, S, N0, convert);
        }
        // 5. attention over [raw window ‖ compressed entries] with the sink; 6. de-rotation
        long o = ws.f32((long) S * H * d);
        int akind = switch (kind) {
            case SLIDING -> DS4J_ATTN_SLIDING();
            case CSA -> DS4J_ATTN_CSA();
            case HCA -> DS4J_ATTN_HCA();
        };
        int m = st.comp == null ? 0 : st.comp.m;
        long entries = st.comp == null ? 0 : st.comp.entries();
        float scale = (float) (1.0 / Math.sqrt(d));
        if (convert) {
            // the control: the layer's complete F16 cache rows to F32, then F32 attention on the copies
            long ring32 = toF32(st.win, (long) st.winCap * d);
            int count = st.comp == null ? 0 : (N0 + S) / m;
            long entries32 = count == 0 ? 0 : toF32(entries, (long) count * d);
            k(ds4j_attention_f32(ctx(), ptr(q), ptr(kv), ptr(ring32), st.winCap, ptr(entries32), akind, m, ptr(sel), c.indexTopk,
                    ptr(L.sinks), N0, S, H, d, W, scale, ptr(o)), "attention (f32 copy)", "attention");
            noteVerifyMode(kind, "f32-convert", "f32-convert");
        } else if (inPlace && attendedRows(c, l, N0, S) > shortRows) {
            // per query: at or under shortRows F32 arithmetic (the control's numbers), above it tensor cores at F32 accuracy
            long nAttn = attendedRows(c, l, N0, S);
            int impl = DS4J_F16OPS_AUTO();
            check(ds4j_attention_f16_operands_work(ctx(), akind, m, c.indexTopk, N0, S, H, d, W, shortRows, impl, outLong),
                    "attention work size");
            long workBytes = outLong.get(ValueLayout.JAVA_LONG, 0);
            long work = workBytes == 0 ? 0 : ws.alloc(workBytes);
            k(ds4j_attention_f16_operands(ctx(), ptr(q), ptr(kv), ptr(st.win), st.winCap, ptr(entries), akind, m, ptr(sel),
                    c.indexTopk, ptr(L.sinks), N0, S, H, d, W, scale, shortRows, impl, ptr(work), workBytes, ptr(o)),
                    "attention (f16 in place, tensor cores)", "attention");
            if (verify) noteVerifyMode(kind, "f16 tensor-core", (tensorCores ? "f16 tensor-core" : "f16 in place, portable kernel (no tensor cores)")
                    + " (n_attn " + nAttn + " > " + shortRows + ")");
        } else {
            k(ds4j_attention(ctx(), ptr(q), ptr(kv), ptr(st.win), st.winCap, ptr(entries), akind, m,
                    ptr(sel), c.indexTopk, ptr(L.sinks), N0, S, H, d, W, scale, ptr(o)), "attention", "attention");
            if (verify) noteVerifyMode(kind, "f16 full-F32", "f16 full-F32 (n_attn " + attendedRows(c, l, N0, S) + " <= " + shortRows + ")");
        }
        rope(o, S, H, d, P, N0, 1, true);
        // the newest raw rows go to the ring after every query of this step has read the old ones
        k(ds4j_ring_store(ctx(), ptr(st.win), 1, st.winCap, d, ptr(kv), N0, S), "window ring store", "attention");
        // 7. grouped output projection
        final int G = c.oGroups, R = c.oLoraRank, gw = H * d / G;
        long y = ws.f32((long) S * G * R);
        DeviceMatrix oA = L.oA;
        k(ds4j_matmul_grouped(ctx(), oA.format(), ptr(oA.data()), ptr(oA.scale()), oA.scaleKind(), oA.rowBase(), oA.rows(), oA.cols(),
                R, gw, ptr(o), (long) H * d, ptr(y), (long) G * R, S), oA.name(), "matmul (dense)");
        long out = ws.f32((long) S * D);
        matmul(L.oB, y, out, S);
        return out;
    }

    /**
     * Workspace bytes a verify step's attention needs beyond {@link Workspace#stepBytes} (the largest layer, since the
     * scratch is released after each layer): the control's F32 copies (window ring, compressed entries, indexer keys),
     * or the tensor-core kernel's partial results above the short-context threshold.
     */
    private long verifyScratchBytes(HipSequence seq, int S, int N0) {
        long most = 0;
        for (int l = 0; l < c.numLayers; l++) {
            HipSequence.LayerState st = seq.layers[l];
            long b;
            if (verifyAttention == VerifyAttention.F32_CONVERT) {
                b = conversionBytes(st, N0 + S);
            } else if (attendedRows(c, l, N0, S) > shortRows) {
                int akind = switch (c.layerTypes[l]) {
                    case SLIDING -> DS4J_ATTN_SLIDING();
                    case CSA -> DS4J_ATTN_CSA();
                    case HCA -> DS4J_ATTN_HCA();
                };
                check(ds4j_attention_f16_operands_work(ctx(), akind, st.comp == null ? 0 : st.comp.m, c.indexTopk, N0, S,
                        c.numHeads, c.headDim, c.slidingWindow, shortRows, DS4J_F16OPS_AUTO(), outLong), "attention work size");
                b = outLong.get(ValueLayout.JAVA_LONG, 0) + 256;
            } else b = 0;
            most = Math.max(most, b);
        }
        return most;
    }

    /** Workspace bytes of the control's F32 copies of one layer's cache at n tokens (ring, entries, indexer keys). */
    private long conversionBytes(HipSequence.LayerState st, int n) {
        long b = 4L * st.winCap * c.headDim + 256;
        if (st.comp != null) b += 4L * (n / st.comp.m) * c.headDim + 256;
        if (st.index != null) b += 4L * (n / st.index.m) * c.indexHeadDim + 256;
        return b;
    }

    /** An F32 copy of n F16 values in the workspace (the control's conversion). */
    private long toF32(long f16, long n) {
        long dst = ws.f32(n);
        k(ds4j_f16_to_f32(ctx(), ptr(f16), ptr(dst), n), "f16 to f32", "attention: f32 conversion");
        return dst;
    }

    /** Records the verify mode of a layer kind; logs it when the kind's mode category changes (or is first seen). */
    private void noteVerifyMode(AttentionKind kind, String category, String message) {
        verifyModes.put(kind, new String[]{category, message});
        // once per (layer kind, mode): at first use, and when a growing context moves the kind to a new mode
        if (loggedModes.add(kind + "/" + category))
            LOG.info("verify attention, {} layers: {}", kind.name().toLowerCase(Locale.ROOT), message);
    }

    /** 3.5 compressor step: pools every window completed in this step, then keeps the newest raw rows in the rings. */
    private void compress(HipSequence.Comp cs, DeviceWeights.Comp W, long x, int S, int N0) {
        long a = ws.f32((long) S * cs.cw), z = ws.f32((long) S * cs.cw);
        matmul(W.kvProj, x, a, S);
        matmul(W.gateProj, x, z, S);
        k(ds4j_compress_pool(ctx(), ptr(cs.ringA), ptr(cs.ringZ), cs.cap, ptr(a), ptr(z), N0, S, cs.m, cs.w, cs.overlap ? 1 : 0,
                ptr(W.positionBias), ptr(W.norm), (float) c.rmsEps, ptr(ropeCompress), c.ropeDim, ptr(cs.entries())), "compress_pool", "compressor");
        k(ds4j_ring_store(ctx(), ptr(cs.ringA), 0, cs.cap, cs.cw, ptr(a), N0, S), "compressor ring store", "compressor");
        k(ds4j_ring_store(ctx(), ptr(cs.ringZ), 0, cs.cap, cs.cw, ptr(z), N0, S), "compressor ring store", "compressor");
    }

    /**
     * 3.6 Lightning Indexer: top-K_I entries per query whose available set exceeds K_I (ties to the lower index);
     * returns the selection [S, K_I] (0 when no query needs one: the attention then takes every available entry).
     */
    private long indexerSelect(HipSequence.Comp ix, DeviceWeights.Layer L, long ql, long x, int S, int N0, boolean convert) {
        final int HI = c.indexHeads, dI = c.indexHeadDim, K = c.indexTopk, m = ix.m;
        final int total = (N0 + S) / m;
        if (total <= K) return 0;
        long qi = ws.f32((long) S * HI * dI), wt = ws.f32((long) S * HI);
        matmul(L.indexer.qB, ql, qi, S);
        matmul(L.indexer.weightsProj, x, wt, S);
        rope(qi, S, HI, dI, ropeCompress, N0, 1, false);
        long scores = ws.f32((long) S * total), sel = ws.i32((long) S * K);
        float wScale = (float) (1.0 / Math.sqrt(HI)), sScale = (float) (1.0 / Math.sqrt(dI));
        if (convert) { // the control: every indexer key to F32 first
            long keys32 = toF32(ix.entries(), (long) total * dI);
            k(ds4j_indexer_scores_f32(ctx(), ptr(qi), ptr(wt), ptr(keys32), N0, S, m, HI, dI, K, wScale, sScale, ptr(scores), total),
                    "indexer_scores (f32 copy)", "indexer");
        } else {
            // prefill chunks score on tensor cores; decode and verify steps (S below the threshold) keep the FFMA kernel
            int rc = S >= DS4J_TC_MIN_ROWS()
                    ? ds4j_indexer_scores_tc(ctx(), ptr(qi), ptr(wt), ptr(ix.entries()), N0, S, m, HI, dI, K, wScale, sScale, ptr(scores), total)
                    : ds4j_indexer_scores(ctx(), ptr(qi), ptr(wt), ptr(ix.entries()), N0, S, m, HI, dI, K, wScale, sScale, ptr(scores), total);
            k(rc, "indexer_scores", "indexer");
        }
        k(ds4j_indexer_topk(ctx(), ptr(scores), total, N0, S, m, K, ptr(sel)), "indexer_topk", "indexer");
        return sel;
    }

    // ------------------------------------------------------------------------------------------------------------
    // 3.8 MoE

    private long moe(int l, DeviceWeights.Layer L, long h, int S, long tok) {
        final int D = c.hidden, E = c.numExperts, k = c.expertsPerToken, I = c.moeInter;
        final float lim = (float) c.swigluLimit;
        long lam = ws.f32((long) S * E), ids = ws.i32((long) S * k), wts = ws.f32((long) S * k);
        matmul(L.gate, h, lam, S);
        boolean hash = c.hashMoe[l];
        k(ds4j_moe_route(ctx(), ptr(lam), ptr(hash ? 0 : L.gateBias), ptr(hash ? L.tid2eid : 0), ptr(tok), S, E, k,
                (float) c.routedScaling, ptr(ids), ptr(wts)), "moe_route", "MoE (routing, swiglu, combine)");
        long g = ws.f32((long) S * k * I), u = ws.f32((long) S * k * I), yr = ws.f32((long) S * k * D);
        // hybrid placement: which picks go to experts in host memory (waits for the routing)
        final int resident = L.w1.resident();
        int[] idsHost = null, hostPicks = null;
        float[] hHost = null;
        if (resident < E) {
            idsHost = gpu.downloadInts(ids, S * k);
            int nh = 0;
            for (int id : idsHost) if (id >= resident) nh++;
            hostPicks = new int[nh];
            nh = 0;
            for (int p = 0; p < S * k; p++) if (idsHost[p] >= resident) hostPicks[nh++] = p;
            if (nh > 0) hHost = gpu.downloadFloats(h, S * D);
        }
        // resident picks on the device (ds4j_moe_matmul skips the host ones: null table entries), queued before the
        // CPU starts so that both work at once
        if (resident > 0) {
            moeMatmul(L.w1, ids, k, S, h, D, false, g, I);
            moeMatmul(L.w3, ids, k, S, h, D, false, u, I);
            k(ds4j_swiglu(ctx(), ptr(g), ptr(u), ptr(g), (long) S * k * I, lim), "swiglu", "MoE (routing, swiglu, combine)");
            moeMatmul(L.w2, ids, k, S, g, I, true, yr, D);
        }
        long sg = ws.f32((long) S * I), su = ws.f32((long) S * I), sy = ws.f32((long) S * D);
        matmul(L.sharedW1, h, sg, S);
        matmul(L.sharedW3, h, su, S);
        k(ds4j_swiglu(ctx(), ptr(sg), ptr(su), ptr(sg), (long) S * I, lim), "swiglu", "MoE (routing, swiglu, combine)");
        matmul(L.sharedW2, sg, sy, S);
        if (hHost != null) hostExperts(l, hostPicks, idsHost, hHost, yr);
        long out = ws.f32((long) S * D);
        k(ds4j_moe_combine(ctx(), ptr(ids), ptr(wts), ptr(yr), ptr(sy), S, k, D, ptr(out)), "moe_combine", "MoE (routing, swiglu, combine)");
        return out;
    }

    /**
     * Hybrid placement (spec 3.8 step 4 on the CPU): the picks routed to experts in host memory, grouped so that each
     * expert runs once on all its tokens with the CPU kernels ({@link CpuBackend#expert}) over the mapped checkpoint;
     * the results go to their pick rows of yr [S·k, D] on the device, ready for ds4j_moe_combine.
     * @param picks pick indices p = s·k + j whose expert ids[p] is in host memory
     * @param h     the MoE input [S, D] on the host
     */
    private void hostExperts(int l, int[] picks, int[] ids, float[] h, long yr) {
        final int D = c.hidden, I = c.moeInter, k = c.expertsPerToken, E = c.numExperts, n = picks.length;
        final float lim = (float) c.swigluLimit;
        ModelWeights.Layer HL = hostWeights.layers[l];
        // counting sort of the picks by expert
        int[] start = new int[E + 1];
        for (int p : picks) start[ids[p] + 1]++;
        for (int e = 0; e < E; e++) start[e + 1] += start[e];
        int[] order = new int[n], fill = start.clone();
        for (int i = 0; i < n; i++) order[fill[ids[picks[i]]]++] = i;
        float[] rows = new float[n * D];
        for (int e = 0; e < E; e++) {
            int cnt = start[e + 1] - start[e];
            if (cnt == 0) continue;
            float[] hin = new float[cnt * D];
            for (int j = 0; j < cnt; j++) System.arraycopy(h, picks[order[start[e] + j]] / k * D, hin, j * D, D);
            float[] y = CpuBackend.expert(HL.w1[e], HL.w3[e], HL.w2[e], hin, cnt, I, lim);
            for (int j = 0; j < cnt; j++) System.arraycopy(y, j * D, rows, order[start[e] + j] * D, D);
        }
        long buf = ws.f32((long) n * D);
        gpu.upload(buf, rows);
        for (int i = 0; i < n; i++) gpu.copy(yr + 4L * picks[i] * D, buf + 4L * i * D, 4L * D);
        hostPickCount[l] += n;
        if (profile != null) k(DS4J_OK(), "host experts", "routed experts (host, CPU)");
    }

    private void moeMatmul(DeviceWeights.Experts x, long ids, int k, int S, long in, long ldx, boolean perPick, long y, long ldy) {
        if (S >= DS4J_TC_MIN_ROWS()) {
            // prefill: picks grouped by expert on the device, one GEMM per expert (scratch: the grouping)
            final int E = c.numExperts;
            long bytes = 4L * ((long) S * k + 3L * E + 1), scratch = ws.alloc(bytes);
            k(ds4j_moe_matmul_prefill(ctx(), x.format(), ptr(x.dataTable()), ptr(x.scaleTable()), ptr(x.rowBaseTable()), x.scaleKind(),
                    x.rows(), x.cols(), E, ptr(ids), k, S, ptr(in), ldx, perPick ? 1 : 0, ptr(y), ldy, ptr(scratch), bytes),
                    "routed experts", "routed experts");
            return;
        }
        k(ds4j_moe_matmul(ctx(), x.format(), ptr(x.dataTable()), ptr(x.scaleTable()), ptr(x.rowBaseTable()), x.scaleKind(),
                x.rows(), x.cols(), ptr(ids), k, S, ptr(in), ldx, perPick ? 1 : 0, ptr(y), ldy), "routed experts", "routed experts");
    }

    // ------------------------------------------------------------------------------------------------------------
    // MTP layer

    private HipMtp mtpHead;

    /** {@inheritDoc} The MTP block runs as a one-layer backend on its own stream of this device ({@link HipMtp}). */
    @Override
    public synchronized io.ds4j.engine.MtpHead mtp() {
        if (closed) throw new IllegalStateException("backend is closed");
        if (hostWeights.mtp == null) throw new IllegalStateException("no usable MTP layer: "
                + (hostWeights.mtpProblem != null ? hostWeights.mtpProblem : "these weights were built without one"));
        if (mtpHead == null) mtpHead = new HipMtp(this, hostWeights, options);
        return mtpHead;
    }

    /**
     * The MTP's input projections and norms on the device, and for up to {@code rows} entries per step the constant
     * operands of the embedding broadcast: ones [rows, n] and identity matrices [rows, n, n].
     */
    record MtpInputs(DeviceMatrix eProj, DeviceMatrix hProj, long enorm, long hnorm, long ones, long eye, int rows) {}

    /** Uploads the MTP's input projections and norms next to this (block) backend's weights; freed with them. */
    synchronized MtpInputs mtpInputs(ModelWeights.Mtp m, int rows) {
        final int n = c.hcMult;
        float[] ones = new float[rows * n], eye = new float[rows * n * n];
        java.util.Arrays.fill(ones, 1f);
        for (int s = 0; s < rows; s++) for (int i = 0; i < n; i++) eye[s * n * n + i * n + i] = 1f;
        return new MtpInputs(w.extraMatrix(m.eProj), w.extraMatrix(m.hProj), w.extraVector(m.enorm), w.extraVector(m.hnorm),
                w.extraVector(ones), w.extraVector(eye), rows);
    }

    /**
     * One MTP step of S entries on this (block) backend: input streams h_proj(hnorm(H_i)) + e_proj(enorm(embed(tok)))
     * from H [S, n·D] (device, any backend's memory on this device) and the tokens (the first row's embedding term zero
     * when zeroFirst: position 0), then the decoder layer, appending S positions to seq; the last row's output streams
     * go to {@code last} [n·D] and its logits [V] come back.
     */
    synchronized float[] forwardMtp(HipSequence seq, long H, int[] toks, int S, boolean zeroFirst, MtpInputs in, long last) {
        if (closed) throw new IllegalStateException("backend is closed");
        if (seq.backend != this) throw new IllegalArgumentException("sequence does not belong to this backend");
        if (seq.closed) throw new IllegalStateException("sequence is closed");
        seq.checkUsable();
        Backend.checkStep(c, toks, 0, S, new int[]{S - 1});
        final int D = c.hidden, n = c.hcMult, nD = n * D, N0 = seq.pos.length();
        final StepKind kind = S > 1 ? StepKind.PREFILL : StepKind.DECODE;
        try {
            ws.reset(Workspace.stepBytes(c, S, N0, 1) + 4L * (2L * S * nD + 2L * S * D + (long) S * n + (long) S * n * n) + 4096
                    + (kind == StepKind.DECODE && verifyAttention == VerifyAttention.F16 ? verifyScratchBytes(seq, S, N0) : 0));
        } catch (GpuException e) {
            throw outOfMemory(e, "an MTP step of " + S + " entries at position " + N0);
        }
        try {
            long tok = ws.i32(S);
            gpu.upload(tok, toks);
            long X = ws.f32((long) S * nD), hn = ws.f32((long) S * nD);
            rmsnorm(H, hn, in.hnorm(), S * n, D);
            matmul(in.hProj(), hn, X, S * n);
            long e = ws.f32((long) S * D), ep = ws.f32((long) S * D);
            DeviceMatrix em = w.embed;
            k(ds4j_embed(ctx(), em.format(), ptr(em.data()), ptr(em.scale()), em.scaleKind(), em.rowBase(), em.rows(), em.cols(),
                    ptr(tok), S, 1, ptr(e)), "embed", "embed");
            if (zeroFirst) gpu.memset(e, 0, 4L * D);
            rmsnorm(e, e, in.enorm(), S, D);
            matmul(in.eProj(), e, ep, S);
            // X_i += ep for every stream i: the stream update with post = 1 and the identity as mixing matrix
            long post = ws.f32((long) S * n), comb = ws.f32((long) S * n * n), col = ws.f32((long) S * D);
            if (S <= in.rows()) {
                k(ds4j_hc_post(ctx(), ptr(X), ptr(ep), ptr(in.ones()), ptr(in.eye()), S, n, D), "hc_post", "norm, rope, mHC");
            } else {
                float[] ones = new float[S * n], eye = new float[S * n * n];
                java.util.Arrays.fill(ones, 1f);
                for (int s = 0; s < S; s++) for (int i = 0; i < n; i++) eye[s * n * n + i * n + i] = 1f;
                gpu.upload(post, ones);
                gpu.upload(comb, eye);
                k(ds4j_hc_post(ctx(), ptr(X), ptr(ep), ptr(post), ptr(comb), S, n, D), "hc_post", "norm, rope, mHC");
            }
            for (int l = 0; l < c.numLayers; l++) {
                DeviceWeights.Layer L = w.layers[l];
                long mark = ws.mark();
                hcPre(X, S, L.attnHcFn, L.attnHcBase, L.attnHcScale, post, comb, col);
                rmsnorm(col, col, L.inputNorm, S, D);
                long a = attention(seq, l, L, col, S, N0, kind);
                k(ds4j_hc_post(ctx(), ptr(X), ptr(a), ptr(post), ptr(comb), S, n, D), "hc_post", "norm, rope, mHC");
                ws.release(mark);
                hcPre(X, S, L.ffnHcFn, L.ffnHcBase, L.ffnHcScale, post, comb, col);
                rmsnorm(col, col, L.postAttnNorm, S, D);
                long f = moe(l, L, col, S, tok);
                k(ds4j_hc_post(ctx(), ptr(X), ptr(f), ptr(post), ptr(comb), S, n, D), "hc_post", "norm, rope, mHC");
                ws.release(mark);
            }
            gpu.copy(last, X + 4L * (S - 1) * nD, 4L * nD);
            long logits = head(X, new int[]{S - 1});
            float[] out = gpu.downloadFloats(logits, c.vocabSize);
            seq.pos.advance(S);
            return out;
        } catch (RuntimeException e) {
            seq.failed = e.getMessage();
            throw e instanceof GpuException g ? outOfMemory(g, "an MTP step of " + S + " entries at position " + N0) : e;
        }
    }
}
