package io.ds4j.gpu;

import io.ds4j.kernels.Experts;
import io.ds4j.engine.Backend;
import io.ds4j.engine.BackendOptions;
import io.ds4j.engine.BatchEntry;
import io.ds4j.engine.CacheLayout;
import io.ds4j.engine.EngineStatus;
import io.ds4j.engine.Sequence;
import io.ds4j.engine.StepKind;
import io.ds4j.engine.StepOutput;
import io.ds4j.engine.VerifyAttention;
import io.ds4j.engine.FeatureGate;
import io.ds4j.model.AttentionKind;
import io.ds4j.model.CheckpointException;
import io.ds4j.model.ModelConfig;
import io.ds4j.model.LayerProgram;
import io.ds4j.model.ModelWeights;
import io.ds4j.model.Rope;
import io.ds4j.model.WeightLoader;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import static io.ds4j.gpu.Gpu.check;
import static io.ds4j.gpu.Gpu.ptr;
import static io.ds4j.gpu.bindings.ds4j_gpu_h.*;

/**
 * The DeepSeek-V4 forward (spec section 3) on a GPU through the ds4j GPU library (HIP C++, built with hipcc or, on
 * NVIDIA, with nvcc), running {@link LayerProgram} like the CPU backend (the reference) does, operation by operation: F32 activations, weights in
 * their stored format dequantised inside the kernels, the F16 MLA cache and the F32 compressor rings of each
 * {@link HipSequence} in device memory. One step serves prefill chunks, decode and verification (S ≥ 1 rows); entries
 * of at least {@code DS4J_TC_MIN_ROWS} rows, and prefill chunks of at least {@link #PREFILL_TC_ROWS} ({@link #tcEntry}),
 * run the matrix products, the routed experts (grouped by expert) and the indexer scores on tensor cores, the others (decode, verify) their products on the skinny
 * tensor-core kernels (each picked routed expert read once per step) where the build, device and formats allow, else
 * on the F32 FFMA kernels (ds4j_gpu.h says how close the paths are). Only the requested logits rows are copied back.
 *
 * <p>Expert placement ({@link ExpertPlacementPlan}, {@link BackendOptions#placement()}): monolithic keeps every routed
 * expert in device memory; hybrid keeps the experts beyond the device-memory budget in host memory (the mapped
 * checkpoint) and runs the picks routed to them with the CPU kernels while the device runs the others. At load the
 * device memory use is logged by category ({@link #memoryReport()}). Running out of device memory is a
 * {@link DeviceMemoryException} naming what did not fit and what to change.
 *
 * <p>Attention arithmetic, decided here for every query outside a prefill chunk on the tensor-core path
 * ({@link #tcEntry}; those run on tensor cores at F32 accuracy, one block per query): a query whose attended row count
 * n_attn ({@link #attendedRows}) is at most {@link BackendOptions#f32ShortContextRows()} keeps Q·Kᵀ and P·V in F32
 * arithmetic (the split FFMA kernels); above it the products run on tensor cores ({@code ds4j_attention_f16_operands})
 * at F32 accuracy: the F16 cache rows are exact F16 operands, the F32 side of each product (the query, the
 * probabilities) is split into F16 hi + lo parts, two products accumulated in F32, so the output is within F32
 * rounding noise of plain F32 arithmetic (the GPU tests hold it within 1e-5 at lengths up to 1,048,576) and each key
 * tile is read once for all 64 heads. A query's kernel and key ranges depend on its own key count only, so decode and
 * verify steps compute the same numbers for the same query, alone or in any batch: the rows a verify step commits
 * stay in the cache, and if verify and decode differed (even by an ulp) a draft that matches the target would drift
 * from it step by step; so a copy-of-target draft keeps its tokens and speculative greedy output equals plain greedy
 * output.
 *
 * <p>Verify attention: two paths that differ only in where a verify step reads the cache rows, chosen by
 * {@link BackendOptions#f16KvVerify()} and switchable at run time ({@link #setVerifyAttention}):
 * <ul>
 *   <li>{@link VerifyAttention#F32_CONVERT} (the control, the default): in verify steps, per layer, the complete
 *       persistent F16 cache rows — every window ring row, every compressed entry stored so far and, where the indexer
 *       runs, every indexer key — are converted to an F32 scratch in the step's workspace (reused by the next layer),
 *       then the indexer scores and the attention run on the copies ({@code ds4j_attention_f16_operands_f32}, whose
 *       tensor-core kernel rounds each copied row back to F16, exactly);</li>
 *   <li>{@link VerifyAttention#F16}: the F16 rows are read in place, as in decode steps.</li>
 * </ul>
 * F16 to F32 is exact and the arithmetic is the same, so the two paths give the same logits bit for bit at every
 * length; the F16 path saves the conversion (its time and its memory traffic). Each layer kind's mode is logged at its
 * first verify step, and once more for each new mode it enters (a growing context crossing the threshold, a run-time
 * switch of the path).
 *
 * <p>Decode-step graphs ({@link DecodeGraphs}): with monolithic placement, decode steps (S = 1)
 * and verify steps run as one graph launch instead of kernel by kernel ({@link #setGraphs}, {@code -Dds4j.gpu.graphs});
 * the results are the same bit for bit. Steps with no verify entry on the control path, and steps whose entries are all
 * verify entries on the control path, run in a fixed form: every entry through the several-sequence kernels (a
 * batch of one included), which read positions, lengths, ring offsets and cache addresses from views in device memory,
 * with launch shapes from bounds (ds4j_seqs_bounds) and the indexer's scores row rounded up to a power of two; the
 * control's conversion copies each view's rows into room sized by the bounds (ds4j_f16_to_f32_seqs: the window ring's
 * rows, the CSA and HCA entries rounded up to a power of two) and attends on the copies
 * (ds4j_attention_f16_operands_f32_seqs). Its launches and their arguments then depend only on a shape key (rows, kind
 * and logits rows of each entry, whether the indexer selects, the bounds, the workspace's generation, the verify path
 * and threshold, the layer kinds whose queries may attend at most the threshold's rows from the step's earliest
 * position on: where none can, the F32 kernel is left out), so it is captured once per key and replayed after one
 * upload of the step's inputs (tokens, positions, views).
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
    /** The last verify mode per layer kind (its message is built when asked for or logged, not every step). */
    private final Map<AttentionKind, VerifyMode> verifyModes = new EnumMap<>(AttentionKind.class);
    /** (layer kind, path, tensor cores) already logged. */
    private final java.util.Set<List<Object>> loggedModes = new java.util.HashSet<>();
    /**
     * One layer of each attention kind the model has, in kind order: every layer of a kind has the same attended rows,
     * cache sizes and attention arithmetic at a position, so per-kind decisions look at this one.
     */
    private final int[] kindLayers;
    /** Whether ds4j_attention_f16_operands uses tensor cores for this model (nvcc build, supported head width). */
    private final boolean tensorCores;
    /**
     * Whether prefill entries on the tensor-core path ({@link #tcEntry}) run their attention on tensor cores (default) or on the
     * F32 kernel of decode steps ({@code -Dds4j.gpu.prefillAttention=f32}, for comparisons). Prefill rows never have to
     * equal decode rows bit for bit (their products already run on tensor cores), only to agree within F32 noise.
     */
    private volatile boolean prefillTensorCores = !"f32".equals(System.getProperty("ds4j.gpu.prefillAttention"));
    /** Host out-parameter of size queries (used under the backend's lock). */
    private final MemorySegment outLong = Arena.ofAuto().allocate(ValueLayout.JAVA_LONG);
    /** Host out-parameters of ds4j_parts_end (where, planes, stride; used under the backend's lock). */
    private final MemorySegment partsAt = Arena.ofAuto().allocate(ValueLayout.ADDRESS),
            partsPlanes = Arena.ofAuto().allocate(ValueLayout.JAVA_INT), partsStride = Arena.ofAuto().allocate(ValueLayout.JAVA_LONG);
    /** Decode-step graphs (decode and verify steps captured and launched as one graph). */
    private final DecodeGraphs graphs;
    /** Whether the model has CSA / HCA layers (the fixed form's indexer flag and entry bound). */
    private final boolean hasCsa, hasHca;
    /** Host memory of a step's inputs (tokens, positions, sequence views), grown as needed, reused by every step. */
    private MemorySegment inputsHost;
    /** Steps run and the host time they took until their last launch was queued (see {@link #hostTime}). */
    private long hostSteps, hostNanos;
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
        try {
            requireCompressorWidths(weights.config);
        } catch (IllegalArgumentException e) {
            gpu.close();
            throw e;
        }
        this.gpu = gpu;
        this.c = weights.config;
        this.hostWeights = weights;
        this.options = options;
        this.hostPickCount = new long[c.numLayers];
        this.shortRows = this.options.f32ShortContextRows();
        this.tensorCores = "cuda".equals(gpu.platform) && java.util.Set.of(64, 128, 256, 512).contains(weights.config.headDim);
        this.kindLayers = java.util.stream.Stream.of(AttentionKind.values()).mapToInt(k -> Arrays.asList(c.layerTypes).indexOf(k))
                .filter(l -> l >= 0).toArray();
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
        // one log line per line of the report: a line break inside a log line is written escaped (LogEscaping)
        for (String line : report.format().split("\\R")) LOG.info("{}", line);
        boolean hostExperts = false;
        for (DeviceWeights.Layer L : dw.layers) hostExperts |= L.w1.resident() < c.numExperts;
        this.graphs = new DecodeGraphs(gpu, hostExperts
                ? "hybrid expert placement (host experts run on the CPU in the middle of a step)" : null);
        boolean csa = false, hca = false;
        for (AttentionKind kd : c.layerTypes) {
            csa |= kd == AttentionKind.CSA;
            hca |= kd == AttentionKind.HCA;
        }
        this.hasCsa = csa;
        this.hasHca = hca;
        this.gateRouteFits = gateRouteFits(dw);
        LOG.info("hip backend decode-step graphs: {}", graphs.describe());
        LOG.info("hip backend router: {}", fusedRouter && gateRouteFits
                ? "scores and picks in one launch for decode and verify rows (ds4j_moe_gate_route, -Dds4j.gpu.fusedRouter=true)"
                : "gate product, then the ranking (" + (gateRouteFits ? "the default; -Dds4j.gpu.fusedRouter=true for one launch"
                        : "the gate's format or shape is not one ds4j_moe_gate_route takes") + ")");
    }

    /** Whether every layer's gate is one ds4j_moe_gate_route takes (format and shape). */
    private boolean gateRouteFits(DeviceWeights dw) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(ValueLayout.JAVA_INT);
            for (DeviceWeights.Layer L : dw.layers) {
                check(ds4j_moe_gate_route_fits(ctx(), L.gate.format(), L.gate.rows(), L.gate.cols(), v), "router query");
                if (v.get(ValueLayout.JAVA_INT, 0) == 0 || L.gate.rowBase() != 0) return false;
            }
            return true;
        }
    }

    /**
     * Whether decode steps (S = 1) and verify steps (S below DS4J_TC_MIN_ROWS) are captured into a graph and launched
     * as one ({@link DecodeGraphs}); the start-up value is {@code -Dds4j.gpu.graphs} (default kept: fixed-form steps
     * replayed) where the library supports graphs and the placement is monolithic. Profile mode never captures.
     */
    public synchronized boolean graphs() {
        return graphs.enabled();
    }

    /**
     * Turns decode-step graphs on (both forms: kept graphs for fixed-form steps, re-recorded ones for the other decode
     * and verify steps) or off from the next step on (tests, benchmarks). Results are the same bit for bit.
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

    /**
     * Host time of the steps since load: how many ran, and the nanoseconds from entering {@link #step} until the step's
     * last launch was queued (validation, state growth, building and uploading the inputs, recording or replaying),
     * before waiting for the logits.
     * @param steps steps run
     * @param nanos their host time in all
     */
    public record HostTime(long steps, long nanos) {}

    /** {@link HostTime} since load (benchmarks take differences). */
    public synchronized HostTime hostTime() {
        return new HostTime(hostSteps, hostNanos);
    }

    /** Destroys the kept step graphs, so that the next fixed-form step is captured again (tests; {@link #setBranches}). */
    synchronized void dropKeptGraphs() {
        graphs.dropKept();
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
     * Checks that the model's compressed entries fit the GPU's compressor pooling: head_dim (the attention's entries)
     * and index_head_dim (the indexer's) at most DS4J_COMPRESS_MAX_WIDTH (ds4j_gpu.h), so that such a model is refused
     * before its weights are uploaded rather than failing at its first compressed window.
     * @throws IllegalArgumentException naming the config key, its value and the limit
     */
    static void requireCompressorWidths(io.ds4j.model.ModelConfig c) {
        final int most = DS4J_COMPRESS_MAX_WIDTH();
        if (c.headDim > most || c.indexHeadDim > most)
            throw new IllegalArgumentException("backend 'hip' pools compressed entries of at most " + most + " channels; this model has "
                    + (c.headDim > most ? "head_dim " + c.headDim : "index_head_dim " + c.indexHeadDim) + " (use backend 'cpu')");
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
     * Sets the plain-F32 threshold of decode and verify attention (attended rows of a query; above it tensor cores at
     * F32 accuracy, on both verify paths) from the next step on.
     * @throws IllegalArgumentException outside {@value BackendOptions#MIN_SHORT_ROWS}..{@value BackendOptions#MAX_SHORT_ROWS}
     */
    public synchronized void setF32ShortContextRows(int rows) {
        if (rows < BackendOptions.MIN_SHORT_ROWS || rows > BackendOptions.MAX_SHORT_ROWS)
            throw new IllegalArgumentException("verify.f32ShortContextRows must be in " + BackendOptions.MIN_SHORT_ROWS + ".."
                    + BackendOptions.MAX_SHORT_ROWS + ", got " + rows);
        shortRows = rows;
    }

    /** The plain-F32 threshold of decode and verify attention, attended rows ({@link #setF32ShortContextRows}). */
    public synchronized int f32ShortContextRows() {
        return shortRows;
    }

    /**
     * The verify attention mode each layer kind was in at its last verify step: the path and the arithmetic of its
     * longest query, e.g. "f32-convert full-F32 (n_attn N <= T)", "f16 tensor-core (n_attn N > T)"; kinds not yet run
     * are absent.
     */
    public synchronized Map<AttentionKind, String> verifyAttentionModes() {
        Map<AttentionKind, String> m = new EnumMap<>(AttentionKind.class);
        verifyModes.forEach((k, v) -> m.put(k, v.message()));
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

    /**
     * {@inheritDoc} Alone: the copies a control step launches kernel by kernel (ds4j_f16_to_f32 of each array at its
     * exact length, into one scratch reused by each layer). In a graph: those a control verify step of
     * {@code rows} rows in the fixed form launches and replays (ds4j_f16_to_f32_seqs at the step's
     * bounds, {@link #fixedFormCopies}); not timed (NaN) where such a step would not take the fixed form ({@link #fixedForm}:
     * graphs off, a profiled step, bounds far above the exact copies).
     * @throws DeviceMemoryException when the sequence's entry arrays cannot grow to the step's length
     */
    @Override
    public synchronized Conversion verifyConversion(Sequence seq, int rows, int reps) {
        if (!(seq instanceof HipSequence hs) || hs.backend != this)
            throw new IllegalArgumentException("sequence does not belong to this backend");
        if (rows < 1) throw new IllegalArgumentException("rows must be positive, got " + rows);
        int n = hs.length();
        long most = 0;
        for (HipSequence.LayerState st : hs.layers) most = Math.max(most, conversionBytes(st, n));
        final long scratch = most;
        ws.reset(scratch);
        // what the control converts per layer (see attention and indexerSelect), into a scratch reused by each layer
        Runnable convert = () -> {
            for (HipSequence.LayerState st : hs.layers) {
                ws.reset(scratch);
                toF32(st.win, (long) st.winCap * c.headDim);
                if (st.comp != null && CacheLayout.entries(n, st.comp.m) > 0) toF32(st.comp.entries(), (long) CacheLayout.entries(n, st.comp.m) * c.headDim);
                if (st.index != null && CacheLayout.entries(n, st.index.m) > 0) toF32(st.index.entries(), (long) CacheLayout.entries(n, st.index.m) * c.indexHeadDim);
            }
        };
        double[] ms = new double[Math.max(1, reps)];
        for (int r = 0; r < ms.length; r++) {
            gpu.sync();
            long t0 = System.nanoTime();
            convert.run();
            gpu.sync();
            ms[r] = (System.nanoTime() - t0) / 1e6;
        }
        java.util.Arrays.sort(ms);
        Runnable fixed = fixedFormCopies(hs, rows);
        double graph = fixed == null ? Double.NaN : DecodeGraphs.replayMicros(gpu, 1, 4 * ms.length, fixed) / 1e3;
        return new Conversion(ms[ms.length / 2], graph);
    }

    /**
     * The control's copies as a fixed-form verify step of S rows of hs alone launches them, each layer's in the step's
     * workspace (convertGroup: the window ring with the CSA or HCA entries, and the CSA layers' indexer keys, at the
     * step's bounds), with the step's views uploaded once; null where that step would not take the fixed form. Grows
     * hs's entry arrays to the step's length, as the step would; changes nothing else.
     */
    private Runnable fixedFormCopies(HipSequence hs, int S) {
        DeviceStep b = new DeviceStep(List.of(new BatchEntry(hs, new int[S], new int[0], StepKind.VERIFY, 0, null, null)));
        long copies;
        try {
            for (HipSequence.LayerState ls : hs.layers) {
                if (ls.comp != null) HipSequence.ensure(gpu, ls.comp, CacheLayout.entries(b.start[0] + S, ls.comp.m));
                if (ls.index != null) HipSequence.ensure(gpu, ls.index, CacheLayout.entries(b.start[0] + S, ls.index.m));
            }
            copies = attentionScratchBytes(hs, S, b.start[0], StepKind.VERIFY, false);
        } catch (GpuException e) {
            throw outOfMemory(e, "the conversion of a verify step at " + b.start[0] + " tokens");
        }
        if (!fixedForm(b, copies, true) || !b.convert) return null;
        b.group = new int[]{0};
        MemorySegment host = hostInputs(b);
        ws.reset(convertBytes(b) + host.byteSize() + 2L * Workspace.ALIGN_BYTES);
        long inputs = ws.alloc(host.byteSize());
        gpu.upload(inputs, host);
        b.setInputs(inputs);
        return () -> {
            for (int l = 0; l < c.numLayers; l++) {
                long mark = ws.mark();
                HipSequence.LayerState st = hs.layers[l];
                convertGroup(b, groupHostView(b, l, 0), groupView(b, l, 0), b.ringRows, st.comp == null ? 0 : st.comp.m,
                        b.convertedEntries(c.layerTypes[l]), c.headDim);
                if (st.index != null && b.indexer)
                    convertGroup(b, groupHostView(b, l, 2), groupView(b, l, 2), 0, st.index.m, b.scoreLd, c.indexHeadDim);
                ws.release(mark);
            }
        };
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
     * {@inheritDoc} Where both parts stay on the chunk's side of {@link #PREFILL_TC_ROWS}: a chunk below it runs every
     * part on the same kernels as the whole; a chunk at or above it may be cut only into parts of at least that many
     * rows (the tensor-core path, whose row results do not depend on the step's size). A cut that puts rows of a
     * tensor-core chunk on the shorter steps' kernels would round them differently.
     */
    @Override
    public boolean prefillSplitExact(int rows, int first) {
        return splitExact(rows, first);
    }

    /** {@link #prefillSplitExact}: both parts of the cut on the chunk's side of {@link #tcEntry}. */
    static boolean splitExact(int rows, int first) {
        if (first < 1 || first >= rows) return false;
        final boolean tc = tcEntry(StepKind.PREFILL, rows);
        return tc == tcEntry(StepKind.PREFILL, first) && tc == tcEntry(StepKind.PREFILL, rows - first);
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
            try {
                graphs.dropKept();
            } catch (RuntimeException e) {
                LOG.warn("destroying kept step graphs: {}", e.getMessage());
            }
            ws.close();
            w.close();
            gpu.free(argmaxIds);
            gpu.free(argmaxMaskBuf);
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
    /**
     * {@code -Dds4j.gpu.profileByOperation=true}: the profile books each library call under "category: operation" instead
     * of its category alone, to find the slow call inside a category.
     */
    private static final boolean PROFILE_BY_OPERATION = Boolean.getBoolean("ds4j.gpu.profileByOperation");
    private long profileMark;

    /** Tests: the device weights (to name the operation of one matrix's product, {@link #injectFault}). */
    DeviceWeights deviceWeights() {
        return w;
    }

    /** Tests: the next operation named faultAt gets the status of fault instead of its own (then both clear). */
    private String faultAt;
    private java.util.function.IntSupplier fault;

    /** Tests: makes the next library operation named {@code what} report the status of {@code call} (e.g. a failing call). */
    synchronized void injectFault(String what, java.util.function.IntSupplier call) {
        faultAt = what;
        fault = call;
    }

    /**
     * After a library call (a kernel launch or copy on the stream): checks its status (a test's injected fault in its
     * place where one names {@code what}), and in profile mode waits for it and books its time under {@code cat}.
     */
    private void launched(int rc, String what, String cat) {
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
            long[] v = profile.computeIfAbsent(PROFILE_BY_OPERATION ? cat + ": " + what : cat, x -> new long[2]);
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

    /**
     * y[s*ldy + r] = Σ W[r, c] x[s*ldx + c] (ds4j_matmul); tcRows: the call's tc_rows (1 for rows of entries on the
     * tensor-core prefill path, {@link #tcEntry}; 0 for the library's threshold).
     */
    private void matmul(DeviceMatrix m, long x, long ldx, long y, long ldy, int S, int tcRows) {
        launched(ds4j_matmul(ctx(), m.format(), ptr(m.data()), ptr(m.scale()), m.scaleKind(), m.rowBase(), m.rows(), m.cols(),
                ptr(x), ldx, ptr(y), ldy, S, tcRows), m.name(), m == w.lmHead ? "lm_head" : "matmul (dense)");
    }

    /** {@link #matmul(DeviceMatrix, long, long, long, long, int, int)} on packed rows (ldx = cols, ldy = rows). */
    private void matmul(DeviceMatrix m, long x, long y, int S, int tcRows) {
        matmul(m, x, m.cols(), y, m.rows(), S, tcRows);
    }

    private void rmsnorm(long x, long y, long weight, int rows, int n) {
        launched(ds4j_rmsnorm(ctx(), ptr(x), ptr(y), ptr(weight), rows, n, (float) c.rmsEps), "rmsnorm", "norm, rope, mHC");
    }

    private void rope(long x, int S, int heads, int width, long table, long pos0, long step, boolean inverse) {
        launched(ds4j_rope(ctx(), ptr(x), S, heads, width, c.ropeDim, ptr(table), pos0, step, inverse ? 1 : 0), "rope", "norm, rope, mHC");
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
        if (!(sequence instanceof HipSequence seq) || seq.backend != this)
            throw new IllegalArgumentException("sequence does not belong to this backend");
        if (seq.closed) throw new IllegalStateException("sequence is closed");
        seq.checkUsable();
        Backend.checkStep(c, tokens, off, S, logitRows);
        return step(List.of(new BatchEntry(seq, Arrays.copyOfRange(tokens, off, off + S), logitRows, kind)))[0];
    }

    /**
     * {@inheritDoc} The rows of all entries run together through {@link LayerProgram}; each entry's
     * {@link StepKind#VERIFY} rows take the verify attention path. Before any state changes, the entry stores of every
     * sequence are grown and the workspace is sized for the whole batch ({@link Workspace#batchBytes}): running out of
     * device memory there leaves every sequence unchanged. A failure after the step has started marks every sequence
     * of the batch unusable (their rings may hold rows of this step). Steps of one entry whose kind and size allow it
     * run as a decode-step graph ({@link DecodeGraphs}); steps of several entries run without graphs.
     *
     * <p>Batch invariance: the kernel of a matrix product depends on its row count and on the call's tc_rows (tensor
     * cores from DS4J_TC_MIN_ROWS rows on, or for the entries {@link #tcEntry} puts there; the skinny tensor-core or
     * FFMA kernels for the others; each gives a row a result that does not depend on the row count, but the two sides
     * differ in rounding). So the row-wise products never run over the batch's total row count: they run over runs of
     * rows ({@link #rowRuns}) in which every row belongs to an entry that alone would take the same kernel. The routed experts follow the same runs. Attention, compressors and indexer run per entry at the
     * entry's own size, as alone.
     * @throws IllegalArgumentException naming the entry: a sequence of another backend, a bad token id or logit row,
     *         a repeated sequence
     * @throws IllegalStateException naming the entry: a closed sequence, or one whose earlier step failed half-way
     * @throws DeviceMemoryException when the step does not fit in device memory
     */
    @Override
    public synchronized float[][] step(List<BatchEntry> batch) {
        return stepBatch(batch, false).logits();
    }

    /**
     * {@inheritDoc} The argmax-only entries' rows are reduced on the device ({@code ds4j_argmax_rows}, after the step's
     * kernels or graph) and only their ids are copied back, 4 bytes a row instead of 4·V; the other entries' logits
     * come back as from {@link #step}. Same checks, errors and state rules as {@link #step}.
     */
    @Override
    public synchronized StepOutput stepArgmax(List<BatchEntry> batch) {
        Backend.checkArgmax(c, batch);
        return stepBatch(batch, true);
    }

    /**
     * {@inheritDoc} A slice runs as a step of its own before the step of the batch's whole entries (its products on the
     * tensor-core path where the whole chunk's would be, {@link #tcEntry} of its rows), its streams and their
     * RMSNorm_1 kept in device buffers of the sequence between slices ({@link HipSequence#sliceX}).
     */
    @Override
    public boolean layerSlices() {
        return true;
    }

    /** {@link #step} (argmax false: every entry's logits) or {@link #stepArgmax} (argmax true). */
    private StepOutput stepBatch(List<BatchEntry> batch, boolean argmax) {
        if (closed) throw new IllegalStateException("backend is closed");
        for (int i = 0; i < batch.size(); i++) {
            if (!(batch.get(i).seq() instanceof HipSequence seq) || seq.backend != this)
                throw new IllegalArgumentException("batch entry " + i + ": sequence does not belong to this backend");
            if (seq.closed) throw new IllegalStateException("batch entry " + i + ": sequence is closed");
            try {
                seq.checkUsable();
            } catch (IllegalStateException e) {
                throw new IllegalStateException("batch entry " + i + ": " + e.getMessage(), e);
            }
        }
        Backend.checkBatch(c, batch);
        if (batch.size() == 1 || !Backend.anySlice(batch)) return stepChecked(batch, argmax);
        List<BatchEntry> whole = batch.stream().filter(e -> e.layers() == null).toList();
        // each chunk's layer slice in a step of its own, then the whole entries in one step: a slice that fails leaves
        // the whole entries' sequences untouched
        float[][] lg = new float[batch.size()][];
        int[][] ids = new int[batch.size()][];
        for (int i = 0; i < batch.size(); i++) {
            if (batch.get(i).layers() == null) continue;
            StepOutput o = stepChecked(List.of(batch.get(i)), argmax);
            lg[i] = o.logits()[0];
            ids[i] = o.argmax()[0];
        }
        StepOutput w = whole.isEmpty() ? null : stepChecked(whole, argmax);
        for (int i = 0, k = 0; i < batch.size(); i++) {
            if (batch.get(i).layers() != null) continue;
            lg[i] = w.logits()[k];
            ids[i] = w.argmax()[k++];
        }
        return new StepOutput(lg, ids);
    }

    /** {@link #stepBatch} of checked entries: every entry whole, or a single entry (a layer slice or not). */
    private StepOutput stepChecked(List<BatchEntry> batch, boolean argmax) {
        final long t0 = System.nanoTime();
        DeviceStep b = new DeviceStep(batch);
        b.t0 = t0;
        // grow the entry arrays and the workspace first, so that running out of memory leaves every sequence unchanged
        try {
            long scratch = 0, copies = 0;
            for (int e = 0; e < b.seqs.length; e++) {
                for (HipSequence.LayerState ls : b.seqs[e].layers) {
                    if (ls.comp != null) HipSequence.ensure(gpu, ls.comp, CacheLayout.entries(b.start[e] + b.count[e], ls.comp.m));
                    if (ls.index != null) HipSequence.ensure(gpu, ls.index, CacheLayout.entries(b.start[e] + b.count[e], ls.index.m));
                }
                scratch = Math.max(scratch, attentionScratchBytes(b.seqs[e], b.count[e], b.start[e], b.kinds[e], true));
                copies = Math.max(copies, attentionScratchBytes(b.seqs[e], b.count[e], b.start[e], b.kinds[e], false));
            }
            long[] starts = new long[b.start.length];
            for (int e = 0; e < starts.length; e++) starts[e] = b.start[e];
            if (b.slice != null && b.slice.from() == 0 && b.seqs[0].sliceX == 0) {
                // the chunk's streams and their norm outlive this step's workspace
                HipSequence s0 = b.seqs[0];
                long bytes = 4L * b.R * c.hcMult * c.hidden;
                s0.sliceX = gpu.malloc(bytes, "layer slice streams");
                s0.sliceV = gpu.malloc(bytes, "layer slice streams' norm");
                s0.sliceBytes = bytes;
            }
            b.fixed = fixedForm(b, copies, verifyAttention == VerifyAttention.F32_CONVERT);
            b.group = b.fixed ? java.util.stream.IntStream.range(0, b.seqs.length).toArray() : group(b);
            if (b.convert) scratch = Math.max(scratch, convertBytes(b));
            ws.reset(Workspace.batchBytes(c, b.count, starts, b.logitCounts()) + scratch + groupBytes(b));
        } catch (GpuException e) {
            throw outOfMemory(e, b.describe());
        }
        if (profile != null) {
            gpu.sync();
            profileMark = System.nanoTime();
        }
        int[] argmaxBelow = new int[batch.size()];
        boolean anyArgmax = false;
        for (int e = 0; e < argmaxBelow.length; e++) {
            argmaxBelow[e] = argmax ? batch.get(e).argmaxBelow() : 0;
            anyArgmax |= argmaxBelow[e] > 0 && b.logitRows[e].length > 0;
        }
        StepOutput out;
        try {
            // the masks go up before the step's kernels are queued (an upload waits for the stream)
            long masks = anyArgmax ? uploadArgmaxMasks(b, batch, b.logitCounts()) : 0;
            out = run(b, anyArgmax ? argmaxBelow : null, masks);
        } catch (RuntimeException e) {
            // the rings may hold rows of this step now: the sequences cannot continue or roll back
            for (HipSequence seq : b.seqs) seq.failed = e.getMessage();
            throw e instanceof GpuException g ? outOfMemory(g, b.describe()) : e;
        }
        if (ws.bytes() != report.bytes(DeviceMemoryReport.WORKSPACE)) report = buildReport();
        return out;
    }

    /**
     * One step: the token ids go up (a copy that waits), then every kernel of the step is queued — captured into one
     * graph for single-entry decode and verify steps ({@link DecodeGraphs}), launched one by one otherwise — and the
     * requested logits rows come back once the device has finished.
     */
    private StepOutput run(DeviceStep b, int[] argmaxBelow, long masks) {
        long logits;
        if (b.fixed) logits = runFixed(b);
        else {
            if (b.group != null) uploadInputs(b);
            else {
                b.tok = ws.i32(b.R);
                gpu.upload(b.tok, b.toks);
            }
            long mark = ws.mark();
            java.util.function.LongSupplier body = () -> b.slice == null ? LayerProgram.run(b, c.numLayers) : runSlice(b);
            boolean graph = b.seqs.length == 1 && b.slice == null
                    && graphs.capturable(b.R, b.kinds[0] == StepKind.VERIFY, profile != null);
            logits = graph ? graphs.run(body, () -> ws.release(mark)) : body.getAsLong();
        }
        hostSteps++;
        hostNanos += System.nanoTime() - b.t0;
        int rows = b.logitCounts();
        StepOutput out;
        if (rows == 0) {
            gpu.sync();
            out = split(b, new float[0], null, null);
        } else if (argmaxBelow == null) out = split(b, gpu.downloadFloats(logits, rows * c.vocabSize), null, null);
        else out = downloadArgmax(b, logits, rows, argmaxBelow, masks);
        if (b.dropExec != 0) graphs.destroy(b.dropExec); // captured while the workspace grew: not valid for a replay
        commit(b); // only once the device has finished
        return out;
    }

    /**
     * The program of a step that runs one chunk's layer slice [from, to): embedding (from 0) or the streams the
     * sequence kept, those layers, and the head when the slice ends at the last layer.
     * @return the logits (0 before the last layer: none are asked for)
     */
    private long runSlice(DeviceStep b) {
        long X = LayerProgram.layers(b, b.embed(), b.slice.from(), b.slice.to());
        return b.slice.last(c.numLayers) ? b.head(X) : 0;
    }

    /** Device buffer of the argmax ids [argmaxCapacity] (grown as needed; freed at close). */
    private long argmaxIds;
    private int argmaxCapacity;
    /** Device buffer of the argmax rows' masks [argmaxMaskWords] (grown as needed; freed at close). */
    private long argmaxMaskBuf;
    private long argmaxMaskWords;

    /**
     * Whether constrained greedy rows are chosen on the device among their masks ({@link Backend#argmaxMasks}; the
     * default); the system property {@code ds4j.gpu.maskedArgmax=false} turns it off (their logits come back, for
     * measurements through the server).
     */
    private final boolean maskedArgmax = !"false".equals(System.getProperty("ds4j.gpu.maskedArgmax"));

    /**
     * {@inheritDoc} Yes unless {@code ds4j.gpu.maskedArgmax=false}: the rows' masks go up (V / 8 bytes a row) and
     * {@code ds4j_argmax_rows_masked} chooses among them, so a constrained greedy row copies back 4 bytes, not 4·V.
     */
    @Override
    public boolean argmaxMasks() {
        return maskedArgmax;
    }

    /**
     * The masks of the step's logit rows as one upload [rows][ceil(V / 64)] when some argmax-only entry has masks (a
     * row without one allows every id; rows of entries that want logits are never read), else 0.
     */
    private long uploadArgmaxMasks(DeviceStep b, List<BatchEntry> batch, int rows) {
        boolean any = false;
        for (BatchEntry e : batch) any |= e.argmaxMasks() != null;
        if (!any) return 0;
        int W = io.ds4j.sampling.Constraint.words(c.vocabSize);
        long[] words = new long[rows * W];
        Arrays.fill(words, -1L);
        for (int e = 0, at = 0; e < batch.size(); at += b.logitRows[e].length, e++) {
            long[][] m = batch.get(e).argmaxMasks();
            if (m == null) continue;
            for (int r = 0; r < m.length; r++) {
                if (m[r] == null) continue;
                int base = (at + r) * W;
                Arrays.fill(words, base, base + W, 0L);
                System.arraycopy(m[r], 0, words, base, Math.min(m[r].length, W));
            }
        }
        if (words.length > argmaxMaskWords) {
            long cap = Math.max(words.length, 2 * argmaxMaskWords);
            long p = gpu.malloc(8L * cap, "argmax masks");
            gpu.free(argmaxMaskBuf);
            argmaxMaskBuf = p;
            argmaxMaskWords = cap;
        }
        gpu.upload(argmaxMaskBuf, words);
        return argmaxMaskBuf;
    }

    /**
     * The step's output when some entries want only their greedy tokens: ds4j_argmax_rows over their rows (one launch
     * over all rows when those entries share one limit, which is the usual case: the extra rows cost microseconds),
     * the ids copied back, and the logits of the other entries copied back run by run of adjacent entries.
     */
    private StepOutput downloadArgmax(DeviceStep b, long logits, int rows, int[] argmaxBelow, long masks) {
        int V = c.vocabSize;
        long W = io.ds4j.sampling.Constraint.words(V);
        if (rows > argmaxCapacity) {
            int cap = Math.max(rows, Math.max(64, 2 * argmaxCapacity));
            long p = gpu.malloc(4L * cap, "argmax ids");
            gpu.free(argmaxIds);
            argmaxIds = p;
            argmaxCapacity = cap;
        }
        int common = -1;
        for (int e = 0; e < argmaxBelow.length; e++) {
            if (argmaxBelow[e] == 0 || b.logitRows[e].length == 0) continue;
            common = common == -1 || common == argmaxBelow[e] ? argmaxBelow[e] : -2;
        }
        if (common > 0)
            check(ds4j_argmax_rows_masked(ctx(), ptr(logits), V, rows, common, ptr(masks), W, ptr(argmaxIds)), "argmax_rows");
        else for (int e = 0, at = 0; e < argmaxBelow.length; at += b.logitRows[e].length, e++) {
            int n = b.logitRows[e].length;
            if (argmaxBelow[e] == 0 || n == 0) continue;
            check(ds4j_argmax_rows_masked(ctx(), ptr(logits + 4L * at * V), V, n, argmaxBelow[e],
                    ptr(masks == 0 ? 0 : masks + 8L * at * W), W, ptr(argmaxIds + 4L * at)), "argmax_rows");
        }
        int[] ids = gpu.downloadInts(argmaxIds, rows); // waits for the device
        float[][] lg = new float[argmaxBelow.length][];
        for (int e = 0, at = 0; e < argmaxBelow.length; ) {
            if (argmaxBelow[e] > 0) {
                at += b.logitRows[e].length;
                e++;
                continue;
            }
            int e1 = e, rowsRun = 0;
            while (e1 < argmaxBelow.length && argmaxBelow[e1] == 0) rowsRun += b.logitRows[e1++].length;
            float[] run = rowsRun == 0 ? new float[0] : gpu.downloadFloats(logits + 4L * at * V, rowsRun * V);
            for (int off = 0; e < e1; e++) {
                int n = b.logitRows[e].length * V;
                lg[e] = Arrays.copyOfRange(run, off, off + n);
                off += n;
            }
            at += rowsRun;
        }
        return split(b, null, lg, ids);
    }

    /**
     * Per entry its logits (from all rows' logits, or from lg where given) or its ids (from all rows' ids, for the
     * entries without logits in lg when ids are given).
     */
    private StepOutput split(DeviceStep b, float[] all, float[][] lg, int[] ids) {
        int E = b.seqs.length, V = c.vocabSize;
        float[][] logits = lg != null ? lg : new float[E][];
        int[][] out = new int[E][];
        int at = 0;
        for (int e = 0; e < E; e++) {
            int n = b.logitRows[e].length;
            if (all != null) logits[e] = Arrays.copyOfRange(all, at * V, (at + n) * V);
            else if (logits[e] == null) out[e] = Arrays.copyOfRange(ids, at, at + n);
            at += n;
        }
        return new StepOutput(logits, out);
    }

    /**
     * Whether a step runs in the fixed form (see the class comment): graphs on, not profiling, and every entry one that
     * graphs take (one row, or a verify step below DS4J_TC_MIN_ROWS rows) and not on the tensor-core path
     * ({@link #tcEntry}) with no MTP state attached (its stream copies depend on the position), either none a verify
     * entry on the f32-convert path or all of them (a step mixing those with other entries is not fixed; so is one whose
     * copies at the bounds would take more than twice its largest entry's exact copies plus {@link #CONVERT_SLACK}).
     * Sets the step's bounds: whether the indexer selects, the scores row (a power of two, at least 256), the HCA entry
     * bound (likewise), the entries' earliest start and, for the control's copies, the window ring rows and the CSA
     * entry bound.
     * @param alone   the largest entry's exact copies on the control path ({@link #attentionScratchBytes} without the
     *                partials, as the step computed it)
     * @param control whether verify entries take the control's path (the backend's verify path, or the conversion's
     *                timing, {@link #verifyConversion})
     */
    private boolean fixedForm(DeviceStep b, long alone, boolean control) {
        if (!graphs.enabled() || profile != null || b.slice != null) return false;
        long csa = 0, hca = 0, first = Long.MAX_VALUE;
        int verifying = 0, ring = 0;
        for (int e = 0; e < b.seqs.length; e++) {
            StepKind kind = b.kinds[e];
            int S = b.count[e], N0 = b.start[e];
            first = Math.min(first, N0);
            if (!DecodeGraphs.capturable(true, false, S, kind == StepKind.VERIFY) || b.seqs[e].kept != null) return false;
            // the fixed form runs every entry on the plain attention path: not one that takes the tensor-core path
            // (a one-row prefill chunk under ds4j.gpu.prefillTcRows=1), whose attention would then depend on its step
            if (tcEntry(kind, S)) return false;
            if (kind == StepKind.VERIFY) verifying++;
            csa = Math.max(csa, CacheLayout.entries(N0 + S, c.csaRatio));
            hca = Math.max(hca, CacheLayout.entries(N0 + S, c.hcaRatio));
            ring = Math.max(ring, b.seqs[e].layers[0].winCap);
        }
        // the control converts for verify entries only: a step mixing them with decode entries runs kernel by kernel
        // (and its grouped decode entries must not convert: the flag is set for fixed steps alone)
        boolean convert = control && verifying > 0;
        if (convert && verifying < b.seqs.length) return false;
        b.convert = convert;
        b.firstPos = first;
        b.indexer = hasCsa && csa > c.indexTopk;
        b.scoreLd = b.indexer ? bound(csa) : 0;
        b.hcaBound = hasHca ? bound(hca) : 0;
        b.ringRows = b.convert ? ring : 0;
        b.csaBound = b.convert && hasCsa ? bound(csa) : 0;
        if (b.convert) {
            // the fixed form keeps every entry's copies at the bounds at once, where kernel by kernel each entry's exact
            // copies are freed before the next: a batch of long contexts stays kernel by kernel rather than asking for
            // many times the memory (within twice the largest entry's copies plus CONVERT_SLACK it takes the fixed form)
            if (convertBytes(b) > 2 * alone + CONVERT_SLACK) {
                b.convert = false;
                b.ringRows = 0;
                b.csaBound = 0;
                return false;
            }
        }
        return true;
    }

    /** Workspace bytes a converting fixed-form step may take beyond twice its largest entry's own copies (64 MiB). */
    static final long CONVERT_SLACK = 64L << 20;

    /** The smallest power of two at least n and at least 256 (few distinct bounds, so few shape keys). */
    static long bound(long n) {
        return n <= 256 ? 256 : Long.highestOneBit(n - 1) << 1;
    }

    /**
     * The shape key of a fixed-form step: what its launches and their arguments depend on. Entries' kinds, rows and
     * logits rows; the bounds; the workspace's generation (its addresses); the attention path and its threshold (both
     * paths' launches take it); the layer kinds whose F32 kernel the step launches (shortKinds: a query from the step's
     * earliest position on may attend at most the threshold's rows).
     */
    private record ShapeKey(String entries, boolean indexer, long scoreLd, long hcaBound, int ringRows, long csaBound,
                            long workspace, String attention, String shortKinds) {}

    private ShapeKey shapeKey(DeviceStep b) {
        StringBuilder k = new StringBuilder();
        for (int e = 0; e < b.seqs.length; e++) {
            k.append(b.kinds[e].ordinal()).append(':').append(b.count[e]).append(':');
            for (int r : b.logitRows[e]) k.append(r).append(',');
            k.append('|');
        }
        String attention = verifyAttention.key() + "@" + shortRows;
        // the layer kinds whose F32 kernel the step launches: a query from its first position on may attend at most
        // shortRows rows (ds4j_seqs_bounds's first position; attended rows grow with the position)
        StringBuilder shortKinds = new StringBuilder();
        for (int l : kindLayers)
            if (attendedRows(c, l, b.firstPos, 1) <= shortRows) shortKinds.append(c.layerTypes[l].name().charAt(0));
        return new ShapeKey(k.toString(), b.indexer, b.scoreLd, b.hcaBound, b.ringRows, b.csaBound, ws.generation, attention,
                shortKinds.toString());
    }

    /**
     * A fixed-form step: replays the kept graph of its shape key after uploading the inputs, or captures one (launching
     * it) and keeps it. A capture the runtime refuses runs the step without a graph (same kernels, same numbers).
     * @return the device address of the logits
     */
    private long runFixed(DeviceStep b) {
        ShapeKey key = shapeKey(b);
        DecodeGraphs.Kept kg = graphs.kept(key);
        MemorySegment host = hostInputs(b);
        if (kg != null) {
            gpu.upload(kg.inputs(), host);
            graphs.replay(kg);
            noteReplayedModes(b);
            return kg.logits();
        }
        long inputs = ws.alloc(host.byteSize());
        gpu.upload(inputs, host);
        b.setInputs(inputs);
        long generation = ws.generation, mark = ws.mark(), t0 = System.nanoTime();
        check(ds4j_seqs_bounds(ctx(), 1, b.hcaBound, b.firstPos), "launch bounds of the several-sequence kernels");
        long[] r;
        try {
            r = graphs.capture(() -> LayerProgram.run(b, c.numLayers), () -> ws.release(mark));
        } finally {
            int rc = ds4j_seqs_bounds(ctx(), 0, 0, 0);
            if (rc != DS4J_OK()) LOG.warn("resetting the launch bounds failed: {}", Gpu.lastError());
        }
        captures++;
        if (LOG.isDebugEnabled())
            LOG.debug("step graph captured for {} entries (scores row {}, HCA bound {}, workspace generation {}): {} ms to record and launch",
                    b.seqs.length, b.scoreLd, b.hcaBound, ws.generation, String.format("%.1f", (System.nanoTime() - t0) / 1e6));
        if (r[1] != 0) {
            if (ws.generation == generation) graphs.keep(key, new DecodeGraphs.Kept(r[1], inputs, r[0]));
            else b.dropExec = r[1];
        }
        return r[0];
    }

    /** Step graphs captured so far ({@link #runFixed}). */
    private long captures;

    /** Step graphs captured plus workspace reallocations so far. */
    @Override
    public long oneOffWork() {
        return captures + ws.generation;
    }

    /** The verify modes a replayed step's entries are in (what its capture noted, see attendGroup). */
    private void noteReplayedModes(DeviceStep b) {
        for (int e = 0; e < b.seqs.length; e++) {
            if (b.kinds[e] != StepKind.VERIFY) continue;
            for (int l : kindLayers) noteVerifyMode(c.layerTypes[l], attendedRows(c, l, b.start[e], b.count[e]));
        }
    }

    /**
     * Commits a finished step: the entry counts of every sequence's compressors and its length; for a layer slice
     * before the chunk's last, only how far the chunk got (its streams wait in the sequence's buffers).
     */
    private void commit(DeviceStep b) {
        if (b.slice != null) {
            HipSequence s0 = b.seqs[0];
            if (!b.slice.last(c.numLayers)) {
                s0.chunk.ranTo(b.R, b.slice.to());
                return;
            }
            s0.dropSlice();
        }
        for (int e = 0; e < b.seqs.length; e++) {
            int n = b.start[e] + b.count[e];
            for (HipSequence.LayerState ls : b.seqs[e].layers) {
                if (ls.comp != null) ls.comp.count = CacheLayout.entries(n, ls.comp.m);
                if (ls.index != null) ls.index.count = CacheLayout.entries(n, ls.index.m);
            }
            b.seqs[e].pos.advance(b.count[e]);
        }
    }

    /**
     * Most rows in one run of the smaller entries' rows ({@link #rowRuns}): DS4J_TC_MIN_ROWS − 1 (64: a step of 64
     * decode streams is one skinny launch per product, reading every weight once), or the system property
     * {@code ds4j.gpu.runRows} (1 .. DS4J_TC_MIN_ROWS − 1; e.g. 31 to measure the narrower runs). Every row takes
     * the same kernel and gives the same numbers whatever the run width; only how often the weights are read changes.
     */
    static final int RUN_ROWS = Math.clamp(Integer.getInteger("ds4j.gpu.runRows", DS4J_TC_MIN_ROWS() - 1), 1, DS4J_TC_MIN_ROWS() - 1);

    /**
     * Fewest rows of a prefill entry that run on the tensor-core prefill path (its products, routed experts, indexer
     * products and attention; {@link #tcEntry}): {@value #PREFILL_TC_ROWS_DEFAULT}, or the system property
     * {@code ds4j.gpu.prefillTcRows} (1 .. DS4J_TC_MIN_ROWS; DS4J_TC_MIN_ROWS keeps every chunk below it on the skinny
     * kernels). Decode and verify entries keep the skinny kernels below DS4J_TC_MIN_ROWS at any value: they must agree
     * with each other. On the prefill path the prompts of a tick share one run, so each weight is read once for all of
     * them, where the skinny kernels read it once per run of at most {@link #RUN_ROWS} rows. On the H200 (43 layers,
     * `bench-server --clients 1,16,64`, 62-token prompts, the same call for both values; BENCHMARKS.md, sixteenth
     * session) 16 against DS4J_TC_MIN_ROWS gave TTFT p50 50.2 against 69.6 ms for one stream, 494 against 637 ms at
     * 16 streams, and aggregates of 6.54x / 8.80x one stream at 16 / 64 streams against 6.19x / 7.25x.
     */
    static final int PREFILL_TC_ROWS_DEFAULT = 16;

    /** {@link #PREFILL_TC_ROWS_DEFAULT} or {@code ds4j.gpu.prefillTcRows}, read once. */
    static final int PREFILL_TC_ROWS = Math.clamp(Integer.getInteger("ds4j.gpu.prefillTcRows", PREFILL_TC_ROWS_DEFAULT), 1,
            DS4J_TC_MIN_ROWS());

    /**
     * Whether an entry of this kind and size runs on the tensor-core prefill path (products with tc_rows 1, routed
     * experts grouped by expert, tensor-core prefill attention): any entry of at least DS4J_TC_MIN_ROWS rows, and
     * prefill entries of at least {@link #PREFILL_TC_ROWS}. A function of the entry alone, so an entry's numbers do not
     * depend on the rest of its step; a prefill chunk's do not depend on how it is cut among parts on its side of
     * {@link #PREFILL_TC_ROWS} ({@link #prefillSplitExact}).
     */
    static boolean tcEntry(StepKind kind, int rows) {
        return rows >= DS4J_TC_MIN_ROWS() || (kind == StepKind.PREFILL && rows >= PREFILL_TC_ROWS);
    }

    /**
     * Runs of rows [first, count, tcRows] for the row-wise products of a step whose entries have the given row counts
     * and kinds (in batch order, rows concatenated): consecutive entries on the tensor-core path ({@link #tcEntry})
     * share one run with tcRows 1 (the prefill GEMM, whose row results do not depend on the run's other rows, so that a
     * tick's prefill chunks read the weights once together); the rows of the other entries fill runs of at most
     * {@link #RUN_ROWS} rows with tcRows 0 (the skinny or FFMA path, as alone; a run may split an entry). Entries of no
     * rows are skipped. Row offsets keep the activations 16-byte aligned because every activation width of the model
     * is a multiple of 4.
     */
    static int[][] rowRuns(int[] counts, StepKind[] kinds) {
        return rowRuns(counts, kinds, RUN_ROWS);
    }

    /** {@link #rowRuns(int[], StepKind[])} with runs of at most {@code width} (1 .. DS4J_TC_MIN_ROWS − 1) small-entry rows. */
    static int[][] rowRuns(int[] counts, StepKind[] kinds, int width) {
        final int T = DS4J_TC_MIN_ROWS();
        if (width < 1 || width >= T) throw new IllegalArgumentException("run width " + width + " not in 1 .. " + (T - 1));
        if (kinds.length != counts.length) throw new IllegalArgumentException(kinds.length + " kinds for " + counts.length + " entries");
        List<int[]> runs = new ArrayList<>();
        int p = 0, smallStart = 0, smallLen = 0, tcStart = 0, tcLen = 0;
        for (int i = 0; i < counts.length; i++) {
            final int cnt = counts[i];
            if (cnt == 0) continue;
            if (tcEntry(kinds[i], cnt)) {
                if (smallLen > 0) runs.add(new int[]{smallStart, smallLen, 0});
                smallLen = 0;
                if (tcLen == 0) tcStart = p;
                tcLen += cnt;
                p += cnt;
                continue;
            }
            if (tcLen > 0) runs.add(new int[]{tcStart, tcLen, 1});
            tcLen = 0;
            for (int left = cnt; left > 0; ) {
                if (smallLen == 0) smallStart = p;
                int take = Math.min(left, width - smallLen);
                smallLen += take;
                left -= take;
                p += take;
                if (smallLen == width) {
                    runs.add(new int[]{smallStart, smallLen, 0});
                    smallLen = 0;
                }
            }
        }
        if (smallLen > 0) runs.add(new int[]{smallStart, smallLen, 0});
        if (tcLen > 0) runs.add(new int[]{tcStart, tcLen, 1});
        return runs.toArray(int[][]::new);
    }

    /**
     * The operations of one step over a batch ({@link LayerProgram.Ops} on device addresses): rows of entry i are
     * [first[i], first[i] + count[i]) of every activation matrix, at positions start[i] ...
     */
    private final class DeviceStep implements LayerProgram.Ops<Long> {
        final HipSequence[] seqs;
        final StepKind[] kinds;
        final int[] first, count, start;
        final int[][] logitRows;
        final int[] toks;
        final int R;
        /** Row runs of the activations and of the head's rows ({@link #rowRuns}). */
        final int[][] runs, headRuns;
        long tok, post, comb, col, siteMark;
        /**
         * RMSNorm_1 of the streams [R, n·D] (the input of a site's mHC product) and whether it holds that of the current
         * X: the stream update of a site computes it for the next site in the same launch (ds4j_hc_post_norm).
         */
        long v;
        boolean vReady;
        /** The column whose site norm the last mixPre applied (ds4j_hc_pre_norm), so that {@link #norm} skips it; or 0. */
        long normedCol;
        /**
         * A MoE combination left to the stream update (ds4j_hc_post_norm computes it in the same launch): the output
         * address {@link #moe} returned, then ids, weights, routed rows and shared-expert output; null when none.
         */
        long[] combine;
        /**
         * The entries whose attention runs in the several-sequence kernels ({@link #group}), or null; with them, the
         * positions of every row [R] (int64) and their sequence views per layer ({@link #groupView}) on the device.
         */
        int[] group;
        long pos, views;
        SeqViews hostViews;
        /** Offsets of the positions and the views in the step's inputs (tokens first; {@link #hostInputs}). */
        long posOff, viewOff;
        /** The fixed form ({@link #fixedForm}) and its bounds; firstPos: the entries' earliest start. */
        boolean fixed, indexer;
        long scoreLd, hcaBound, firstPos;
        /**
         * A fixed-form step of verify entries on the control path ({@link #convertGroup}): its attention and indexer
         * read F32 copies made in the step; the copies' bounds: window ring rows and CSA entries (HCA: hcaBound).
         */
        boolean convert;
        int ringRows;
        long csaBound;

        /** The compressed entries a layer of this kind copies in the control's conversion: its bound (none: sliding). */
        long convertedEntries(AttentionKind kind) {
            return switch (kind) {
                case SLIDING -> 0;
                case CSA -> csaBound;
                case HCA -> hcaBound;
            };
        }
        /** When the step started (host time), and an executable to destroy once it has finished (or 0). */
        long t0, dropExec;

        /** The device addresses of the inputs uploaded at base. */
        void setInputs(long base) {
            tok = base;
            pos = base + posOff;
            views = base + viewOff;
        }

        /**
         * Streams to start from instead of the embedding (the MTP block's inputs, set by {@link #forwardMtp} before
         * the layers run), or 0.
         */
        long given;
        /** The layers of a step that runs one chunk's layer slice ({@link #runSlice}), or null. */
        final BatchEntry.Layers slice;

        DeviceStep(List<BatchEntry> batch) {
            int E = batch.size();
            seqs = new HipSequence[E];
            kinds = new StepKind[E];
            int[] heads = new int[E];
            for (int i = 0; i < E; i++) {
                seqs[i] = (HipSequence) batch.get(i).seq();
                kinds[i] = batch.get(i).kind();
                heads[i] = batch.get(i).logitRows().length;
            }
            io.ds4j.engine.BatchLayout lay = new io.ds4j.engine.BatchLayout(batch);
            first = lay.first;
            count = lay.count;
            start = lay.start;
            logitRows = lay.logitRows;
            toks = lay.toks;
            R = lay.rows;
            runs = rowRuns(count, kinds);
            // the head's runs by each entry's logit rows (a function of the entry too)
            headRuns = rowRuns(heads, kinds);
            slice = E == 1 ? batch.getFirst().layers() : null;
        }

        int logitCounts() {
            int n = 0;
            for (int[] rs : logitRows) n += rs.length;
            return n;
        }

        String describe() {
            return seqs.length == 1 ? "a step of " + R + " tokens at position " + start[0]
                    : "a step of " + seqs.length + " sequences, " + R + " tokens in all";
        }

        @Override
        public Long embed() { // 3.1: every stream starts as the embedding
            final int D = c.hidden, n = c.hcMult, nD = n * D;
            // a layer slice works in the sequence's buffers: from layer 0 it embeds into them, later it continues there
            final boolean sliced = slice != null, continues = sliced && slice.from() > 0;
            long X = sliced ? seqs[0].sliceX : given;
            if (given == 0 && !continues) {
                if (X == 0) X = ws.f32((long) R * nD);
                DeviceMatrix e = w.embed;
                launched(ds4j_embed(ctx(), e.format(), ptr(e.data()), ptr(e.scale()), e.scaleKind(), e.rowBase(), e.rows(), e.cols(),
                        ptr(tok), R, n, ptr(X)), "embed", "embed");
            }
            post = ws.f32((long) R * n);
            comb = ws.f32((long) R * n * n);
            col = ws.f32((long) R * D);
            v = sliced ? seqs[0].sliceV : ws.f32((long) R * nD);
            vReady = continues; // the previous slice's last stream update left RMSNorm_1 of X in v
            siteMark = ws.mark();
            return X;
        }

        @Override
        public Long mixPre(Long X, int l, LayerProgram.Site site) {
            DeviceWeights.Layer L = w.layers[l];
            // the site's norm (input_layernorm, post_attention_layernorm) runs in the same launch; norm() then skips it
            if (site == LayerProgram.Site.ATTENTION) hcPre(this, X, L.attnHcFn, L.attnHcBase, L.attnHcScale, L.inputNorm);
            else hcPre(this, X, L.ffnHcFn, L.ffnHcBase, L.ffnHcScale, L.postAttnNorm);
            normedCol = col;
            return col;
        }

        @Override
        public void norm(Long x, int l, LayerProgram.Site site) {
            if (x == normedCol) { // done by mixPre's launch
                normedCol = 0;
                return;
            }
            DeviceWeights.Layer L = w.layers[l];
            rmsnorm(x, x, site == LayerProgram.Site.ATTENTION ? L.inputNorm : L.postAttnNorm, R, c.hidden);
        }

        @Override
        public Long attention(int l, Long x) {
            return HipBackend.this.attention(this, l, w.layers[l], x);
        }

        @Override
        public Long moe(int l, Long x) {
            return HipBackend.this.moe(this, l, w.layers[l], x);
        }

        /**
         * {@inheritDoc} One launch: the MoE combination when {@link #moe} left it here, the stream update, and RMSNorm_1
         * of the updated streams for the next site's mHC product.
         */
        @Override
        public void mixPost(Long X, Long f) {
            long[] m = combine != null && combine[0] == f ? combine : null;
            combine = null;
            launched(ds4j_hc_post_norm(ctx(), ptr(X), ptr(m != null ? m[4] : f), ptr(m != null ? m[1] : 0), ptr(m != null ? m[2] : 0),
                    ptr(m != null ? m[3] : 0), c.expertsPerToken, ptr(post), ptr(comb), R, c.hcMult, c.hidden, (float) c.rmsEps,
                    ptr(v)), "hc_post (+ combine, norm)", "norm, rope, mHC");
            vReady = true;
        }

        @Override
        public void siteDone() {
            ws.release(siteMark);
        }

        @Override
        public Long head(Long X) {
            int[] rows = io.ds4j.engine.BatchLayout.headRows(first, logitRows);
            // the final streams of sequences with an MTP state attached, before hc_head (the MTP's input)
            final long nD = (long) c.hcMult * c.hidden;
            for (int i = 0; i < seqs.length; i++)
                if (seqs[i].kept != null) seqs[i].kept.put(X + 4L * first[i] * nD, start[i], count[i]);
            return HipBackend.this.head(X, rows, headRuns);
        }
    }

    /** A row-wise product over the runs of a step: y[s*ldy + r] = Σ W[r, c] x[s*ldx + c] for the runs' rows s. */
    private void matmulRuns(int[][] runs, DeviceMatrix m, long x, long y) {
        for (int[] run : runs)
            matmul(m, x + 4L * run[0] * m.cols(), m.cols(), y + 4L * run[0] * m.rows(), m.rows(), run[1], run[2]);
    }

    /** 3.9: hc_head merge, final norm and lm_head for the requested rows only; the logits [R, V] (0 when R = 0). */
    private long head(long X, int[] rows, int[][] runs) {
        final int D = c.hidden, n = c.hcMult, nD = n * D, R = rows.length;
        if (R == 0) return 0;
        long xs = ws.f32((long) R * nD), v = ws.f32((long) R * nD), mu = ws.f32((long) R * n), y = ws.f32((long) R * D);
        for (int i = 0; i < R; i++) gpu.copy(xs + 4L * i * nD, X + 4L * rows[i] * nD, 4L * nD);
        rmsnorm(xs, v, 0, R, nD);
        matmulRuns(runs, w.hcHeadFn, v, mu);
        launched(ds4j_hc_head(ctx(), ptr(mu), ptr(w.hcHeadBase), ptr(w.hcHeadScale), ptr(xs), R, n, D, (float) c.hcEps, ptr(y)), "hc_head", "norm, rope, mHC");
        rmsnorm(y, y, w.finalNorm, R, D);
        long logits = ws.f32((long) R * c.vocabSize);
        matmulRuns(runs, w.lmHead, y, logits);
        return logits;
    }

    /**
     * 3.2 mHC mapping for the step's rows: post [R, n], Sinkhorn matrix [R, n, n], collapsed input [R, D] normalised
     * with the site's weight norm (in the same launch). RMSNorm_1 of X is the previous stream update's (b.vReady) or
     * computed here.
     */
    private void hcPre(DeviceStep b, long X, DeviceMatrix fn, long base, long scale, long norm) {
        final int D = c.hidden, n = c.hcMult, nD = n * D, mix = (2 + n) * n, S = b.R;
        long mark = ws.mark();
        long mu = ws.f32((long) S * mix);
        if (!b.vReady) rmsnorm(X, b.v, 0, S, nD);
        b.vReady = false;
        matmulRuns(b.runs, fn, b.v, mu);
        launched(ds4j_hc_pre_norm(ctx(), ptr(mu), ptr(base), ptr(scale), ptr(X), S, n, D, c.sinkhornIters, (float) c.hcEps,
                ptr(b.post), ptr(b.comb), ptr(b.col), ptr(norm), (float) c.rmsEps), "hc_pre + norm", "norm, rope, mHC");
        ws.release(mark);
    }

    // ------------------------------------------------------------------------------------------------------------
    // 3.4–3.7 attention

    /**
     * 3.4-3.7 over a step: the projections of x [R, D] (query latent, queries, shared kv, compressor inputs) and the
     * output projection run over the step's row runs; per entry: norms and RoPE at its positions, compressors, indexer,
     * attention, de-rotation and the window ring.
     */
    private long attention(DeviceStep b, int l, DeviceWeights.Layer L, long x) {
        final int R = b.R, D = c.hidden, H = c.numHeads, d = c.headDim;
        final AttentionKind kind = c.layerTypes[l];
        final long P = kind == AttentionKind.SLIDING ? ropeMain : ropeCompress;
        // 3. shared kv and the compressors' inputs, products of x alone, and the compressors' steps, which read only
        // those inputs and their own rings: in a branch beside the queries' chain
        long kv = ws.f32((long) R * d);
        long ca = 0, cz = 0, ia = 0, iz = 0;
        int cw = kind == AttentionKind.CSA ? 2 * d : d, iw = 2 * c.indexHeadDim;
        if (kind != AttentionKind.SLIDING) {
            ca = ws.f32((long) R * cw);
            cz = ws.f32((long) R * cw);
        }
        if (kind == AttentionKind.CSA) {
            ia = ws.f32((long) R * iw);
            iz = ws.f32((long) R * iw);
        }
        long ql = ws.f32((long) R * c.qLoraRank), q = ws.f32((long) R * H * d);
        try (Branch side = branch(1)) {
            matmulRuns(b.runs, L.kv, x, kv);
            if (kind != AttentionKind.SLIDING) {
                matmulRuns(b.runs, L.compressor.kvProj, x, ca);
                matmulRuns(b.runs, L.compressor.gateProj, x, cz);
            }
            if (kind == AttentionKind.CSA) {
                matmulRuns(b.runs, L.indexer.compressor.kvProj, x, ia);
                matmulRuns(b.runs, L.indexer.compressor.gateProj, x, iz);
            }
            compressors(b, l, L, ca, cz, ia, iz, cw, iw);
            side.end();
            // 1. query latent (kept for the indexer), 2. queries
            matmulRuns(b.runs, L.qA, x, ql);
            rmsnorm(ql, ql, L.qANorm, R, c.qLoraRank);
            matmulRuns(b.runs, L.qB, ql, q);
        }
        long o = ws.f32((long) R * H * d);
        boolean grouped = b.group != null;
        if (grouped) {
            // every row's query and kv norm + RoPE at its own position, in two launches (the same kernels as one entry's)
            launched(ds4j_qkv_norm_rope(ctx(), ptr(q), ptr(kv), ptr(L.kvNorm), R, H, d, (float) c.rmsEps, c.ropeDim, ptr(P), 0, ptr(b.pos)),
                    "q, kv norm + rope (+ f16)", "norm, rope, mHC");
            long mark = ws.mark();
            attendGroup(b, l, L, x, ql, q, kv, o);
            ws.release(mark);
        }
        for (int e = 0; e < b.seqs.length; e++) {
            if (grouped && inGroup(b, e)) continue;
            long r0 = b.first[e], mark = ws.mark();
            attendEntry(b.seqs[e], l, L, x + 4L * r0 * D, ql + 4L * r0 * c.qLoraRank, q + 4L * r0 * H * d, kv + 4L * r0 * d,
                    o + 4L * r0 * H * d, b.count[e], b.start[e], b.kinds[e], P, grouped);
            ws.release(mark);
        }
        // 6. de-rotation of every row at its position (the entries outside the group were left for this launch)
        if (grouped) launched(ds4j_rope_at(ctx(), ptr(o), R, H, d, c.ropeDim, ptr(P), ptr(b.pos), 1), "rope", "norm, rope, mHC");
        // 7. grouped output projection
        final int G = c.oGroups, Rk = c.oLoraRank, gw = H * d / G;
        long y = ws.f32((long) R * G * Rk);
        DeviceMatrix oA = L.oA;
        for (int[] run : b.runs)
            launched(ds4j_matmul_grouped(ctx(), oA.format(), ptr(oA.data()), ptr(oA.scale()), oA.scaleKind(), oA.rowBase(), oA.rows(), oA.cols(),
                    Rk, gw, ptr(o + 4L * run[0] * H * d), (long) H * d, ptr(y + 4L * run[0] * G * Rk), (long) G * Rk, run[1], run[2]),
                    oA.name(), "matmul (dense)");
        long out = ws.f32((long) R * D);
        matmulRuns(b.runs, L.oB, y, out);
        return out;
    }

    /**
     * 3.4-3.7 for one entry of S rows at positions N0 .. (addresses of its first row in each step matrix): query and kv
     * norms and RoPE, the indexer's selection, the attention (on the path the step kind and the verify setting choose)
     * into o [S, H·d], de-rotation, and the new raw rows into the window ring; the compressors' steps ran before
     * ({@link #compressors}).
     */
    private void attendEntry(HipSequence seq, int l, DeviceWeights.Layer L, long x, long ql, long q, long kv, long o, int S,
                             int N0, StepKind step, long P, boolean normed) {
        final boolean verify = step == StepKind.VERIFY;
        final boolean convert = verify && verifyAttention == VerifyAttention.F32_CONVERT;
        final int H = c.numHeads, d = c.headDim, W = c.slidingWindow;
        final AttentionKind kind = c.layerTypes[l];
        HipSequence.LayerState st = seq.layers[l];
        if (!normed) { // else the step has done the norms and RoPE of every row at its position (ds4j_rmsnorm_rope_at)
            // queries: norm and RoPE per head; 3. shared kv: norm, RoPE, rounded to F16 as stored; one launch
            launched(ds4j_qkv_norm_rope(ctx(), ptr(q), ptr(kv), ptr(L.kvNorm), S, H, d, (float) c.rmsEps, c.ropeDim, ptr(P), N0,
                    MemorySegment.NULL), "q, kv norm + rope (+ f16)", "norm, rope, mHC");
        }
        // 4. the indexer's selection (the compressors' steps ran with their inputs, HipBackend.compressors)
        long sel = 0;
        if (st.index != null) {
            sel = indexerSelect(st.index, L, ql, x, S, N0, convert, tcEntry(step, S) ? 1 : 0);
        }
        // 5. attention over [raw window ‖ compressed entries] with the sink; 6. de-rotation
        int akind = switch (kind) {
            case SLIDING -> DS4J_ATTN_SLIDING();
            case CSA -> DS4J_ATTN_CSA();
            case HCA -> DS4J_ATTN_HCA();
        };
        int m = st.comp == null ? 0 : st.comp.m;
        long entries = st.comp == null ? 0 : st.comp.entries();
        float scale = (float) (1.0 / Math.sqrt(d));
        long nAttn = attendedRows(c, l, N0, S);
        if (step == StepKind.PREFILL && tcEntry(step, S)) {
            if (tensorCores && prefillTensorCores) {
                // a prefill chunk: every query on tensor cores at F32 accuracy, its keys read once for all 64 heads (the F32
                // kernel below runs a block per head and query and re-reads them 64 times); one block per query, no split
                launched(ds4j_attention_f16_operands(ctx(), ptr(q), ptr(kv), ptr(st.win), st.winCap, ptr(entries), akind, m, ptr(sel),
                        c.indexTopk, ptr(L.sinks), N0, S, H, d, W, scale, 0L, DS4J_F16OPS_WHOLE(), MemorySegment.NULL, 0L, ptr(o)),
                        "attention (prefill, tensor cores)", "attention");
            } else launched(ds4j_attention(ctx(), ptr(q), ptr(kv), ptr(st.win), st.winCap, ptr(entries), akind, m,
                    ptr(sel), c.indexTopk, ptr(L.sinks), N0, S, H, d, W, scale, ptr(o)), "attention", "attention");
        } else {
            // every other query (decode, verify, short prefill chunks) by the rule of the class comment: at or under
            // shortRows F32 arithmetic, above it tensor cores at F32 accuracy; the control reads its F32 copies
            int impl = DS4J_F16OPS_AUTO();
            long work = 0, workBytes = 0;
            if (nAttn > shortRows) {
                check(ds4j_attention_f16_operands_work(ctx(), akind, m, c.indexTopk, N0, S, H, d, W, shortRows, impl, outLong),
                        "attention work size");
                workBytes = outLong.get(ValueLayout.JAVA_LONG, 0);
                work = workBytes == 0 ? 0 : ws.alloc(workBytes);
            }
            if (convert) {
                // the control: the layer's complete F16 cache rows to F32, then the attention on the copies
                long ring32 = toF32(st.win, (long) st.winCap * d);
                int count = st.comp == null ? 0 : CacheLayout.entries(N0 + S, m);
                long entries32 = count == 0 ? 0 : toF32(entries, (long) count * d);
                launched(ds4j_attention_f16_operands_f32(ctx(), ptr(q), ptr(kv), ptr(ring32), st.winCap, ptr(entries32), akind, m,
                        ptr(sel), c.indexTopk, ptr(L.sinks), N0, S, H, d, W, scale, shortRows, impl, ptr(work), workBytes, ptr(o)),
                        "attention (f32 copy)", "attention");
            } else {
                launched(ds4j_attention_f16_operands(ctx(), ptr(q), ptr(kv), ptr(st.win), st.winCap, ptr(entries), akind, m, ptr(sel),
                        c.indexTopk, ptr(L.sinks), N0, S, H, d, W, scale, shortRows, impl, ptr(work), workBytes, ptr(o)),
                        nAttn > shortRows ? "attention (tensor cores)" : "attention", "attention");
            }
            if (verify) noteVerifyMode(kind, nAttn);
        }
        if (!normed) rope(o, S, H, d, P, N0, 1, true);
        // the newest raw rows go to the ring after every query of this step has read the old ones
        launched(ds4j_ring_store(ctx(), ptr(st.win), 1, st.winCap, d, ptr(kv), N0, S), "window ring store", "attention");
    }

    // ------------------------------------------------------------------------------------------------------------
    // several sequences' attention in one launch per kernel

    /**
     * The entries of a step whose attention can run in the library's several-sequence kernels
     * (ds4j_attention_f16_operands_seqs and its companions), or null when fewer than two can: those whose attention
     * alone is ds4j_attention_f16_operands on the F16 rows (the several-sequence kernel gives each query the same kernel
     * and key ranges), with the FFMA indexer, so that their numbers are the same bit for bit (the kernels share their
     * bodies with the single-sequence ones). Left out: entries on the tensor-core path, {@link #tcEntry} (their indexer
     * scores and prefill attention run on tensor cores alone), and verify entries on the control path (f32-convert: a
     * fixed-form step of them alone converts the group, {@link #fixedForm}). Decode steps of many sequences are the case
     * this serves: one launch per kernel and layer instead of one per sequence. The system property
     * {@code ds4j.gpu.groupedAttention=false} turns it off (for measurements through the server).
     */
    private volatile boolean groupedAttention = !"false".equals(System.getProperty("ds4j.gpu.groupedAttention"));

    /**
     * Whether the attention of several decode and verify entries runs in the several-sequence kernels (default) or one
     * entry at a time; the numbers are the same either way (benchmarks compare the two, {@link GpuBench}).
     */
    public void setGroupedAttention(boolean on) {
        groupedAttention = on;
    }

    /**
     * Whether prefill chunks on the tensor-core path ({@link #tcEntry}) run their attention on tensor cores (the default where
     * {@code ds4j_attention_f16_operands} has them) or on the F32 kernel (benchmarks compare the two, {@link GpuBench}).
     */
    public void setPrefillTensorCores(boolean on) {
        prefillTensorCores = on;
    }

    /**
     * Whether a step runs the work that does not depend on each other at the same time, in branches on the context's
     * side streams ({@code ds4j_branch_begin}): the shared kv and the compressors' inputs and steps beside the queries'
     * chain, the shared expert beside the routing and the routed experts, the routed experts' w3 beside their w1. Each
     * call computes the same numbers either way; what changes is that small launches share the device instead of
     * waiting for each other. The system property {@code ds4j.gpu.branches=false} turns it off (for measurements); the
     * per-operation profile turns it off too, since it waits for every call.
     */
    private volatile boolean branches = !"false".equals(System.getProperty("ds4j.gpu.branches"));

    /**
     * Whether the rows of the step's small runs (decode, verify, short prefill chunks off the tensor-core path) get their
     * router scores and picks in one launch ({@code ds4j_moe_gate_route}) instead of the gate's product, its partial
     * sums and {@code ds4j_moe_route}: the same picks' rule, scores summed in another order (the same at every batch
     * size). Off unless {@code -Dds4j.gpu.fusedRouter=true}: on an H100 at full depth it left a decode step of one
     * sequence as it was, took ~0.4 ms off a 16-entry step and added ~0.6 ms to a 64-entry one (BENCHMARKS.md,
     * fifty-third session). Runs on the tensor-core path always keep the three launches, as does a gate the kernel does
     * not take ({@link #gateRouteFits}).
     */
    private volatile boolean fusedRouter = "true".equals(System.getProperty("ds4j.gpu.fusedRouter"));
    /** Whether every layer's gate fits ds4j_moe_gate_route (asked once at load). */
    private final boolean gateRouteFits;

    /**
     * Whether SwiGLU reads the column-split partial sums of the products before it (the routed experts' w1 and w3, the
     * shared expert's W3) instead of a launch that adds them first ({@code ds4j_parts_begin}, {@code ds4j_swiglu_parts}):
     * the same bits, one launch less per product. Steps of one run of rows; the routed ones only where every expert is in
     * device memory (a host expert's pick rows are written to y, not to the planes), and w3 only where it runs on its
     * own lane (w1 on the step's stream would overwrite its planes).
     * {@code -Dds4j.gpu.partialsToReaders=false} keeps the sums' launches (for measurements).
     */
    private volatile boolean partialsToReaders = !"false".equals(System.getProperty("ds4j.gpu.partialsToReaders"));
    /** Products whose partial sums went to their reader instead of a sum's launch (tests: that it happened). */
    long partialsLeft;

    /** Turns {@link #partialsToReaders} on or off from the next step on, dropping the kept step graphs (tests, benchmarks). */
    public synchronized void setPartialsToReaders(boolean on) {
        if (partialsToReaders != on) dropKeptGraphs();
        partialsToReaders = on;
    }

    /** Where a product's result is to be read: planes of partial sums {@code stride} floats apart, or one plane, y. */
    private record Parts(long at, int planes, long stride) {}

    /**
     * Runs {@code product} (the launches of one product into y) on the current lane with its partial sums left to their
     * reader when {@code on} (ds4j_parts_begin / ds4j_parts_end, the lane disarmed again even if a launch fails): where
     * the product's result is to be read, its planes, or y itself when it summed them or {@code on} is false.
     */
    private Parts leavingParts(boolean on, long y, Runnable product) {
        if (!on) {
            product.run();
            return new Parts(y, 1, 0);
        }
        check(ds4j_parts_begin(ctx()), "parts begin");
        try {
            product.run();
        } finally {
            check(ds4j_parts_end(ctx(), partsAt, partsPlanes, partsStride), "parts end");
        }
        int planes = partsPlanes.get(ValueLayout.JAVA_INT, 0);
        if (planes == 0) return new Parts(y, 1, 0);
        partialsLeft++;
        return new Parts(partsAt.get(ValueLayout.ADDRESS, 0).address(), planes, partsStride.get(ValueLayout.JAVA_LONG, 0));
    }

    /** SwiGLU of g and u (n values each) into out, each read from its planes (ds4j_swiglu_parts) or as one array. */
    private void swiglu(Parts g, Parts u, long out, long n) {
        if (g.planes() == 1 && u.planes() == 1)
            launched(ds4j_swiglu(ctx(), ptr(g.at()), ptr(u.at()), ptr(out), n, (float) c.swigluLimit), "swiglu",
                    "MoE (routing, swiglu, combine)");
        else
            launched(ds4j_swiglu_parts(ctx(), ptr(g.at()), g.planes(), g.stride(), ptr(u.at()), u.planes(), u.stride(), ptr(out),
                    n, (float) c.swigluLimit), "swiglu", "MoE (routing, swiglu, combine)");
    }

    /** Whether decode and verify rows get the router in one launch now (tests: which launch a fault is injected into). */
    synchronized boolean fusedRouterTaken() {
        return fusedRouter && gateRouteFits;
    }

    /** Turns {@link #fusedRouter} on or off from the next step on, dropping the kept step graphs (tests, benchmarks). */
    public synchronized void setFusedRouter(boolean on) {
        if (fusedRouter != on) dropKeptGraphs();
        fusedRouter = on;
    }

    /**
     * Turns the branches ({@link #branches}) on or off; the numbers are the same either way (tests compare the two). The
     * kept step graphs are dropped when it changes, so that the next steps are captured the new way.
     */
    public synchronized void setBranches(boolean on) {
        if (branches != on) dropKeptGraphs();
        branches = on;
    }

    /**
     * A branch on lane (1 .. DS4J_BRANCH_LANES), opened where branches are on and no profile is taken (else a branch that
     * is not {@link Branch#open}: its calls queue on the step's stream as usual): the calls until {@link Branch#end} go
     * to the lane, those after it beside them, and {@link Branch#close} joins the lane, on every exit, a failed call's
     * too, so that no later work runs beside what the branch left queued. The workspace the branch uses stays taken
     * until the close: the caller releases it after.
     */
    private Branch branch(int lane) {
        if (!branches || profile != null) return new Branch(0);
        check(ds4j_branch_begin(ctx(), lane), "branch begin");
        return new Branch(lane);
    }

    /** See {@link #branch}: an open (lane > 0) or a not opened (lane 0) branch. */
    private final class Branch implements AutoCloseable {
        private final int lane;
        private boolean ended;

        Branch(int lane) {
            this.lane = lane;
            this.ended = lane == 0;
        }

        /** Whether the branch was opened: its calls run on a side lane. */
        boolean open() {
            return lane > 0;
        }

        /** Ends the branch: later calls queue on the step's stream, beside it until the close. */
        void end() {
            if (ended) return;
            ended = true;
            check(ds4j_branch_end(ctx()), "branch end");
        }

        /** Ends the branch where still open (a call in it failed) and makes the step's stream wait for it. */
        @Override
        public void close() {
            if (lane == 0) return;
            try {
                end();
            } finally {
                check(ds4j_branch_join(ctx(), lane), "branch join");
            }
        }
    }

    private int[] group(DeviceStep b) {
        if (b.seqs.length < 2 || !groupedAttention) return null;
        int[] g = new int[b.seqs.length];
        int n = 0;
        for (int e = 0; e < b.seqs.length; e++) {
            StepKind kind = b.kinds[e];
            if (tcEntry(kind, b.count[e])) continue;
            if (kind == StepKind.VERIFY && verifyAttention == VerifyAttention.F32_CONVERT) continue;
            g[n++] = e;
        }
        return n < 2 ? null : Arrays.copyOf(g, n);
    }

    private static boolean inGroup(DeviceStep b, int e) {
        return Arrays.binarySearch(b.group, e) >= 0;
    }

    /**
     * Workspace bytes of the grouped attention beyond {@link Workspace#batchBytes}: row positions, the sequence views
     * of every layer, and per layer the indexer's queries, weights, scores [R, largest (N0+S)/m] and selections.
     */
    private long groupBytes(DeviceStep b) {
        if (b.group == null) return 0;
        long R = b.R, most = 0;
        for (int e : b.group) most = Math.max(most, CacheLayout.entries(b.start[e] + b.count[e], c.csaRatio));
        long a = Workspace.ALIGN_BYTES;
        long bytes = 8 * R + 2 * a + SeqViews.BYTES * 3L * c.numLayers * b.group.length + a;
        most = Math.max(most, b.scoreLd); // the fixed form's scores row
        bytes += 4 * R * c.indexHeads * c.indexHeadDim + 4 * R * c.indexHeads + 4 * R * Math.max(1, most) + 4 * R * c.indexTopk + 4 * a;
        return bytes;
    }

    /** Address of the views of one layer's state kind (0: window ring and entries, 1: compressor, 2: indexer). */
    private static long groupView(DeviceStep b, int l, int kind) {
        return b.views + SeqViews.BYTES * ((long) l * 3 + kind) * b.group.length;
    }

    private static java.lang.foreign.MemorySegment groupHostView(DeviceStep b, int l, int kind) {
        long off = SeqViews.BYTES * ((long) l * 3 + kind) * b.group.length;
        return b.hostViews.host().asSlice(off, SeqViews.BYTES * b.group.length);
    }

    /**
     * The step's inputs in host memory: token ids [R] (int32), then (16-byte aligned) row positions [R] (int64) and the
     * group's sequence views of every layer ({@link #groupView}), after the entry stores have been grown; sets the
     * step's host views and offsets. The memory is reused by the next step.
     */
    private MemorySegment hostInputs(DeviceStep b) {
        final int R = b.R, G = b.group.length;
        b.posOff = (4L * R + 15) & ~15L;
        b.viewOff = (b.posOff + 8L * R + 15) & ~15L;
        long bytes = b.viewOff + SeqViews.BYTES * 3L * c.numLayers * G;
        if (inputsHost == null || inputsHost.byteSize() < bytes)
            inputsHost = Arena.ofAuto().allocate(Math.max(bytes, inputsHost == null ? 0 : 2 * inputsHost.byteSize()), 16);
        MemorySegment h = inputsHost.asSlice(0, bytes);
        for (int i = 0; i < R; i++) h.set(ValueLayout.JAVA_INT, 4L * i, b.toks[i]);
        for (int e = 0; e < b.seqs.length; e++)
            for (int s = 0; s < b.count[e]; s++) h.set(ValueLayout.JAVA_LONG, b.posOff + 8L * (b.first[e] + s), (long) b.start[e] + s);
        b.hostViews = new SeqViews(h.asSlice(b.viewOff), 3 * c.numLayers * G);
        for (int l = 0; l < c.numLayers; l++)
            for (int i = 0; i < G; i++) {
                int e = b.group[i];
                HipSequence.LayerState st = b.seqs[e].layers[l];
                long N0 = b.start[e];
                int S = b.count[e], r0 = b.first[e];
                b.hostViews.set((l * 3) * G + i, N0, S, r0, st.win, 0, st.comp == null ? 0 : st.comp.entries(), st.winCap);
                if (st.comp != null)
                    b.hostViews.set((l * 3 + 1) * G + i, N0, S, r0, st.comp.ringA, st.comp.ringZ, st.comp.entries(), st.comp.cap);
                else b.hostViews.set((l * 3 + 1) * G + i, N0, S, r0, 0, 0, 0, 0);
                if (st.index != null)
                    b.hostViews.set((l * 3 + 2) * G + i, N0, S, r0, st.index.ringA, st.index.ringZ, st.index.entries(), st.index.cap);
                else b.hostViews.set((l * 3 + 2) * G + i, N0, S, r0, 0, 0, 0, 0);
            }
        return h;
    }

    /** Uploads the step's inputs ({@link #hostInputs}) in one copy to the workspace and sets their device addresses. */
    private void uploadInputs(DeviceStep b) {
        MemorySegment h = hostInputs(b);
        long base = ws.alloc(h.byteSize());
        gpu.upload(base, h);
        b.setInputs(base);
    }

    /**
     * 3.4-3.7 for the group's entries at once (their norms and RoPE done by the caller, their compressors' steps by
     * {@link #compressors}): the indexer's selection, attention into o, and the window rings; one launch per kernel for
     * all of them.
     */
    private void attendGroup(DeviceStep b, int l, DeviceWeights.Layer L, long x, long ql, long q, long kv, long o) {
        final int R = b.R, H = c.numHeads, d = c.headDim, W = c.slidingWindow, G = b.group.length, K = c.indexTopk;
        final AttentionKind kind = c.layerTypes[l];
        HipSequence.LayerState st0 = b.seqs[b.group[0]].layers[l];
        var hWin = groupHostView(b, l, 0);
        long dWin = groupView(b, l, 0);
        long sel = 0;  // the compressors' steps ran with their inputs (HipBackend.compressors)
        if (st0.index != null) {
            sel = indexerSelectGroup(b, l, st0.index.m, L, ql, x);
        }
        int akind = switch (kind) {
            case SLIDING -> DS4J_ATTN_SLIDING();
            case CSA -> DS4J_ATTN_CSA();
            case HCA -> DS4J_ATTN_HCA();
        };
        int m = st0.comp == null ? 0 : st0.comp.m;
        float scale = (float) (1.0 / Math.sqrt(d));
        // per query: at or under shortRows the F32 kernel, above it tensor cores at F32 accuracy, as attendEntry
        if (b.convert) {
            // the control: the group's complete F16 cache rows to F32, then the attention on the copies
            var v32 = convertGroup(b, hWin, dWin, b.ringRows, m, b.convertedEntries(kind), d);
            launched(ds4j_attention_f16_operands_f32_seqs(ctx(), v32.host(), ptr(v32.device()), G, ptr(q), ptr(kv), akind, m, ptr(sel), K,
                    ptr(L.sinks), H, d, W, scale, shortRows, ptr(o)), "attention (f32 copy)", "attention");
        } else launched(ds4j_attention_f16_operands_seqs(ctx(), hWin, ptr(dWin), G, ptr(q), ptr(kv), akind, m, ptr(sel), K, ptr(L.sinks),
                H, d, W, scale, shortRows, ptr(o)), "attention", "attention");
        for (int e : b.group)
            if (b.kinds[e] == StepKind.VERIFY) noteVerifyMode(kind, attendedRows(c, l, b.start[e], b.count[e]));
        // the newest raw rows go to the rings after every query of this step has read the old ones
        launched(ds4j_ring_store_seqs(ctx(), hWin, ptr(dWin), G, 0, 1, d, ptr(kv)), "window ring store", "attention");
    }

    /**
     * 3.5 the compressor steps of a layer for every entry of the step (the group's in one launch per compressor, the
     * others entry by entry): pooling of every completed window into the entries, then the newest raw rows into the
     * rings. They read only the compressors' inputs ca, cz (width cw) and ia, iz (width iw) [R, ·] and each entry's own
     * rings, so they run before the queries' norms, the indexer and the attention that read their entries.
     */
    private void compressors(DeviceStep b, int l, DeviceWeights.Layer L, long ca, long cz, long ia, long iz, int cw, int iw) {
        boolean grouped = b.group != null;
        if (grouped) {
            HipSequence.LayerState st0 = b.seqs[b.group[0]].layers[l];
            if (st0.comp != null) compressGroup(b, l, 1, st0.comp, L.compressor, ca, cz);
            if (st0.index != null) compressGroup(b, l, 2, st0.index, L.indexer.compressor, ia, iz);
        }
        for (int e = 0; e < b.seqs.length; e++) {
            if (grouped && inGroup(b, e)) continue;
            HipSequence.LayerState st = b.seqs[e].layers[l];
            long r0 = b.first[e];
            int S = b.count[e], N0 = b.start[e];
            if (st.comp != null) compress(st.comp, L.compressor, ca + 4L * r0 * cw, cz + 4L * r0 * cw, S, N0);
            if (st.index != null) compress(st.index, L.indexer.compressor, ia + 4L * r0 * iw, iz + 4L * r0 * iw, S, N0);
        }
    }

    /** 3.5 compressor step of the group: pooling of every completed window, then the newest raw rows into the rings. */
    private void compressGroup(DeviceStep b, int l, int view, HipSequence.Comp cs0, DeviceWeights.Comp W, long a, long z) {
        var h = groupHostView(b, l, view);
        long dv = groupView(b, l, view);
        int G = b.group.length;
        launched(ds4j_compress_step_seqs(ctx(), h, ptr(dv), G, ptr(a), ptr(z), cs0.m, cs0.w, cs0.overlap ? 1 : 0, ptr(W.positionBias),
                ptr(W.norm), (float) c.rmsEps, ptr(ropeCompress), c.ropeDim), "compress_pool + ring stores", "compressor");
    }

    /**
     * 3.6 Lightning Indexer for the group: the selection [R, K_I] (rows of queries whose available set is at most K_I
     * unused), or 0 when no query of the group needs one.
     */
    private long indexerSelectGroup(DeviceStep b, int l, int m, DeviceWeights.Layer L, long ql, long x) {
        final int HI = c.indexHeads, dI = c.indexHeadDim, K = c.indexTopk, R = b.R, G = b.group.length;
        long ld = 0;
        for (int e : b.group) ld = Math.max(ld, CacheLayout.entries(b.start[e] + b.count[e], m));
        if (ld <= K) return 0;
        if (b.fixed) { // the scores row of the shape key (launch shapes follow it, ds4j_seqs_bounds)
            if (b.scoreLd < ld) throw new IllegalStateException("fixed-form scores row " + b.scoreLd + " < " + ld + " entries");
            ld = b.scoreLd;
        }
        long qi = ws.f32((long) R * HI * dI), wt = ws.f32((long) R * HI);
        matmulRuns(b.runs, L.indexer.qB, ql, qi);
        matmulRuns(b.runs, L.indexer.weightsProj, x, wt);
        launched(ds4j_rope_at(ctx(), ptr(qi), R, HI, dI, c.ropeDim, ptr(ropeCompress), ptr(b.pos), 0), "rope", "norm, rope, mHC");
        long scores = ws.f32(R * ld), sel = ws.i32((long) R * K);
        float wScale = (float) (1.0 / Math.sqrt(HI)), sScale = (float) (1.0 / Math.sqrt(dI));
        var h = groupHostView(b, l, 2);
        long dv = groupView(b, l, 2);
        if (b.convert) { // the control: every indexer key to F32 first
            var v32 = convertGroup(b, h, dv, 0, m, ld, dI);
            launched(ds4j_indexer_scores_f32_seqs(ctx(), v32.host(), ptr(v32.device()), G, ptr(qi), ptr(wt), m, HI, dI, K, wScale, sScale,
                    ptr(scores), ld), "indexer_scores (f32 copy)", "indexer");
        } else launched(ds4j_indexer_scores_seqs(ctx(), h, ptr(dv), G, ptr(qi), ptr(wt), m, HI, dI, K, wScale, sScale, ptr(scores), ld),
                "indexer_scores", "indexer");
        launched(ds4j_indexer_topk_seqs(ctx(), h, ptr(dv), G, ptr(scores), ld, m, K, ptr(sel)), "indexer_topk", "indexer");
        return sel;
    }

    /**
     * Workspace bytes an entry's attention needs beyond {@link Workspace#stepBytes} (the largest layer, since the scratch
     * is released after each layer; one layer of each kind, {@link #kindLayers}): on the control's verify entries the
     * F32 copies (window ring, compressed entries, indexer keys), and above the short-context threshold the tensor-core
     * kernel's partial results; none for a prefill chunk on the tensor-core path ({@link #tcEntry}), whose attention is
     * not split into key ranges.
     * @param partials whether to count the partials (else the copies alone: what a fixed-form step multiplies, its
     *                 grouped attention taking its partials from the library's scratch)
     */
    private long attentionScratchBytes(HipSequence seq, int S, int N0, StepKind step, boolean partials) {
        if (step == StepKind.PREFILL && tcEntry(step, S)) return 0;
        boolean convert = step == StepKind.VERIFY && verifyAttention == VerifyAttention.F32_CONVERT;
        long most = 0;
        for (int l : kindLayers) {
            HipSequence.LayerState st = seq.layers[l];
            long b = convert ? conversionBytes(st, N0 + S) : 0;
            if (partials && attendedRows(c, l, N0, S) > shortRows) {
                int akind = switch (c.layerTypes[l]) {
                    case SLIDING -> DS4J_ATTN_SLIDING();
                    case CSA -> DS4J_ATTN_CSA();
                    case HCA -> DS4J_ATTN_HCA();
                };
                check(ds4j_attention_f16_operands_work(ctx(), akind, st.comp == null ? 0 : st.comp.m, c.indexTopk, N0, S,
                        c.numHeads, c.headDim, c.slidingWindow, shortRows, DS4J_F16OPS_AUTO(), outLong), "attention work size");
                b += outLong.get(ValueLayout.JAVA_LONG, 0) + 256;
            }
            most = Math.max(most, b);
        }
        return most;
    }

    /** Workspace bytes of the control's F32 copies of one layer's cache at n tokens (ring, entries, indexer keys). */
    private long conversionBytes(HipSequence.LayerState st, int n) {
        long b = 4L * st.winCap * c.headDim + 256;
        if (st.comp != null) b += 4L * CacheLayout.entries(n, st.comp.m) * c.headDim + 256;
        if (st.index != null) b += 4L * CacheLayout.entries(n, st.index.m) * c.indexHeadDim + 256;
        return b;
    }

    /** An F32 copy of n F16 values in the workspace (the control's conversion). */
    private long toF32(long f16, long n) {
        long dst = ws.f32(n);
        launched(ds4j_f16_to_f32(ctx(), ptr(f16), ptr(dst), n), "f16 to f32", "attention: f32 conversion");
        return dst;
    }

    /** Views of the control's F32 copies: in host memory (checks, launch sizes) and in device memory (the kernels). */
    private record CopyViews(MemorySegment host, long device) {}

    /** Host memory of the copies' views ({@link #convertGroup}), reused by every call. */
    private MemorySegment copyViewsHost;

    /**
     * The control's conversion for the group of a fixed-form step: every view's window ring (ringRows > 0; the copy
     * keeps ringRows rows) and its compressed entries or indexer keys (m > 0, at most maxEntries) to F32 in the
     * workspace, in one launch that reads lengths and addresses from the device views (ds4j_f16_to_f32_seqs), which
     * also writes the copies' views in device memory; the same views are built here in host memory.
     * @param hViews the group's views in host memory, {@code views} the same in device memory
     * @param width  values per row (d for the attention's rows, d_I for indexer keys)
     */
    private CopyViews convertGroup(DeviceStep b, MemorySegment hViews, long views, int ringRows, int m, long maxEntries, int width) {
        int G = b.group.length;
        long stride = 4L * (ringRows + maxEntries) * width;
        long dst = ws.alloc(stride * G), dViews = ws.alloc(SeqViews.BYTES * G);
        launched(ds4j_f16_to_f32_seqs(ctx(), hViews, ptr(views), G, ringRows, m, maxEntries, width, ptr(dst), ptr(dViews)),
                "f16 to f32", "attention: f32 conversion");
        long bytes = SeqViews.BYTES * G;
        if (copyViewsHost == null || copyViewsHost.byteSize() < bytes) copyViewsHost = Arena.ofAuto().allocate(Math.max(bytes, 2 * SeqViews.BYTES * 64), 8);
        MemorySegment h = copyViewsHost.asSlice(0, bytes);
        h.copyFrom(hViews.asSlice(0, bytes));
        SeqViews copies = new SeqViews(h, G);
        for (int i = 0; i < G; i++) {
            long copy = dst + stride * i;
            if (ringRows > 0) copies.ring(i, copy);
            if (m > 0) copies.store(i, copy + 4L * ringRows * width);
        }
        return new CopyViews(h, dViews);
    }

    /** Workspace bytes of a converting fixed-form step's copies ({@link #convertGroup}) in its largest layer. */
    private long convertBytes(DeviceStep b) {
        long G = b.seqs.length, a = Workspace.ALIGN_BYTES, most = 0;
        for (int l = 0; l < c.numLayers; l++) {
            long bytes = 4 * G * (b.ringRows + b.convertedEntries(c.layerTypes[l])) * c.headDim + SeqViews.BYTES * G + 2 * a;
            if (c.layerTypes[l] == AttentionKind.CSA && b.indexer) bytes += 4 * G * b.scoreLd * c.indexHeadDim + SeqViews.BYTES * G + 2 * a;
            most = Math.max(most, bytes);
        }
        return most;
    }

    /** Records the path and arithmetic of a verify entry whose queries attend up to nAttn rows in a layer of a kind. */
    private void noteVerifyMode(AttentionKind kind, long nAttn) {
        VerifyMode m = new VerifyMode(verifyAttention.key(), nAttn, shortRows, tensorCores);
        verifyModes.put(kind, m);
        // once per (layer kind, mode): at first use, and when a growing context moves the kind to a new mode
        if (loggedModes.add(List.of(kind, m.path(), m.nAttn() > m.shortRows())))
            LOG.info("verify attention, {} layers: {}", kind.name().toLowerCase(Locale.ROOT), m.message());
    }

    /** A verify entry's attention in a layer kind: its path, its longest query's attended rows and the threshold. */
    private record VerifyMode(String path, long nAttn, int shortRows, boolean tensorCores) {
        /** E.g. "f32-convert full-F32 (n_attn 140 <= 512)", "f16 tensor-core (n_attn 640 > 512)". */
        String message() {
            if (nAttn <= shortRows) return path + " full-F32 (n_attn " + nAttn + " <= " + shortRows + ")";
            return path + (tensorCores ? " tensor-core" : ", portable kernel (no tensor cores)") + " (n_attn " + nAttn + " > "
                    + shortRows + ")";
        }
    }

    /**
     * 3.5 compressor step of one entry: pools every window completed in this step, then keeps the newest raw rows in
     * the rings. a and z [S, cw]: the entry's rows of the compressor's kv and gate projections.
     */
    private void compress(HipSequence.Comp cs, DeviceWeights.Comp W, long a, long z, int S, int N0) {
        // one launch where the stores cannot overwrite a slot the pooling reads (decode, short verify steps)
        launched(ds4j_compress_step(ctx(), ptr(cs.ringA), ptr(cs.ringZ), cs.cap, ptr(a), ptr(z), N0, S, cs.m, cs.w, cs.overlap ? 1 : 0,
                ptr(W.positionBias), ptr(W.norm), (float) c.rmsEps, ptr(ropeCompress), c.ropeDim, ptr(cs.entries())),
                "compress_pool + ring stores", "compressor");
    }

    /**
     * 3.6 Lightning Indexer: top-K_I entries per query whose available set exceeds K_I (ties to the lower index);
     * returns the selection [S, K_I] (0 when no query needs one: the attention then takes every available entry).
     */
    private long indexerSelect(HipSequence.Comp ix, DeviceWeights.Layer L, long ql, long x, int S, int N0, boolean convert, int tcRows) {
        final int HI = c.indexHeads, dI = c.indexHeadDim, K = c.indexTopk, m = ix.m;
        final int total = CacheLayout.entries(N0 + S, m);
        if (total <= K) return 0;
        long qi = ws.f32((long) S * HI * dI), wt = ws.f32((long) S * HI);
        matmul(L.indexer.qB, ql, qi, S, tcRows);
        matmul(L.indexer.weightsProj, x, wt, S, tcRows);
        rope(qi, S, HI, dI, ropeCompress, N0, 1, false);
        long scores = ws.f32((long) S * total), sel = ws.i32((long) S * K);
        float wScale = (float) (1.0 / Math.sqrt(HI)), sScale = (float) (1.0 / Math.sqrt(dI));
        if (convert) { // the control: every indexer key to F32 first
            long keys32 = toF32(ix.entries(), (long) total * dI);
            launched(ds4j_indexer_scores_f32(ctx(), ptr(qi), ptr(wt), ptr(keys32), N0, S, m, HI, dI, K, wScale, sScale, ptr(scores), total),
                    "indexer_scores (f32 copy)", "indexer");
        } else {
            // tensor cores at every S (the same bits per query and key); DS4J_INDEXER_TC=0 puts the steps below the
            // threshold (and the control's F32 copies) back on the FFMA kernel, for comparisons
            int rc = tcRows != 0
                    ? ds4j_indexer_scores_tc(ctx(), ptr(qi), ptr(wt), ptr(ix.entries()), N0, S, m, HI, dI, K, wScale, sScale, ptr(scores), total)
                    : ds4j_indexer_scores(ctx(), ptr(qi), ptr(wt), ptr(ix.entries()), N0, S, m, HI, dI, K, wScale, sScale, ptr(scores), total);
            launched(rc, "indexer_scores", "indexer");
        }
        launched(ds4j_indexer_topk(ctx(), ptr(scores), total, N0, S, m, K, ptr(sel)), "indexer_topk", "indexer");
        return sel;
    }

    // ------------------------------------------------------------------------------------------------------------
    // 3.8 MoE

    /**
     * 3.8 over a step: routing over all rows (hash layers by token id), routed experts over the step's row runs
     * (grouped by expert on tensor cores for the runs of entries on the tensor-core path; in the other runs each expert once for
     * all its picks on the skinny tensor-core kernel, or pick by pick on the FFMA kernels), the shared expert;
     * h [R, D] -> [R, D]. The weighted combination is left to the stream update that takes the output
     * ({@code DeviceStep.mixPost}, ds4j_hc_post_norm): the address returned names it, its values are never stored.
     */
    private long moe(DeviceStep b, int l, DeviceWeights.Layer L, long h) {
        final int D = c.hidden, E = c.numExperts, k = c.expertsPerToken, I = c.moeInter, S = b.R;
        long lam = ws.f32((long) S * E), ids = ws.i32((long) S * k), wts = ws.f32((long) S * k);
        long sg = ws.f32((long) S * I), su = ws.f32((long) S * I), sy = ws.f32((long) S * D);
        long g = ws.f32((long) S * k * I), u = ws.f32((long) S * k * I), yr = ws.f32((long) S * k * D);
        // W3's partial sums to the SwiGLU (W1's would be overwritten by W3's on the same lane)
        final boolean parts = partialsToReaders && b.runs.length == 1;
        Runnable sharedExpert = () -> {
            matmulRuns(b.runs, L.sharedW1, h, sg);
            Parts pu = leavingParts(parts, su, () -> matmulRuns(b.runs, L.sharedW3, h, su));
            swiglu(new Parts(sg, 1, 0), pu, sg, (long) S * I);
            matmulRuns(b.runs, L.sharedW2, sg, sy);
        };
        // the shared expert in a branch beside the routing and the routed experts; without branches after them, so that
        // the hybrid placement's wait for the routing does not wait for it too
        try (Branch side = branch(1)) {
            if (side.open()) {
                sharedExpert.run();
                side.end();
            }
            Runnable hostWork = routedExperts(b, l, L, h, lam, ids, wts, g, u, yr);
            if (!side.open()) sharedExpert.run();
            // the host experts' CPU work while the device runs what is queued
            if (hostWork != null) hostWork.run();
        }
        // the combination runs in the stream update's launch (DeviceStep.mixPost); out is its handle
        long out = ws.f32((long) S * D);
        b.combine = new long[]{out, ids, wts, yr, sy};
        return out;
    }

    /**
     * 3.8 the routing and the routed experts over a step: lam [R, E] the router's scores, ids / wts [R, k] the picks and
     * their weights, g, u [R·k, I] the experts' gate and up products (g then their SwiGLU), yr [R·k, D] each pick's
     * output. Under hybrid placement the picks of experts in host memory are left to the returned work (it runs
     * {@link #hostExperts}, which fills their rows of yr), else null.
     */
    private Runnable routedExperts(DeviceStep b, int l, DeviceWeights.Layer L, long h, long lam, long ids, long wts, long g,
                                   long u, long yr) {
        final int D = c.hidden, E = c.numExperts, k = c.expertsPerToken, I = c.moeInter, S = b.R;
        route(b, l, L, h, lam, ids, wts);
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
            // w3 in a second branch beside w1; its calls' scratch stays taken until the join
            // the partial sums of w1 and w3 to the SwiGLU: one run of rows (one product each), every expert on the
            // device (a host expert's pick rows are filled in y, not in the planes), w3 only on its own lane
            final boolean parts = partialsToReaders && b.runs.length == 1 && resident == E;
            Parts pu, pg;
            long mark = ws.mark();
            try (Branch up = branch(2)) {
                pu = leavingParts(parts && up.open(), u, () -> {
                    for (int[] run : b.runs) {
                        long p0 = (long) run[0] * k;
                        moeMatmul(L.w3, ids + 4 * p0, k, run, h + 4L * run[0] * D, D, false, u + 4 * p0 * I, I, up.open());
                    }
                });
                up.end();
                pg = leavingParts(parts, g, () -> {
                    for (int[] run : b.runs) {
                        long p0 = (long) run[0] * k;
                        moeMatmul(L.w1, ids + 4 * p0, k, run, h + 4L * run[0] * D, D, false, g + 4 * p0 * I, I, false);
                    }
                });
            }
            ws.release(mark);
            swiglu(pg, pu, g, (long) S * k * I);
            for (int[] run : b.runs) {
                long p0 = (long) run[0] * k;
                moeMatmul(L.w2, ids + 4 * p0, k, run, g + 4 * p0 * I, I, true, yr + 4 * p0 * D, D, false);
            }
        }
        if (hHost == null) return null;
        final int[] picks = hostPicks, picked = idsHost;
        final float[] hIn = hHost;
        return () -> hostExperts(l, picks, picked, hIn, yr);
    }

    /**
     * 3.8 the router over a step's runs: lam [R, E] the gate's scores, ids / wts [R, k] the picks and their weights.
     * Without {@link #fusedRouter} (the default) the gate's product over every run, then one {@code ds4j_moe_route} over
     * all rows; with it, each run off the tensor-core path takes one {@code ds4j_moe_gate_route}, and each run on it the
     * gate's product and a {@code ds4j_moe_route} over its rows.
     */
    private void route(DeviceStep b, int l, DeviceWeights.Layer L, long h, long lam, long ids, long wts) {
        final int D = c.hidden, E = c.numExperts, k = c.expertsPerToken;
        final boolean hash = c.hashMoe[l];
        final MemorySegment bias = ptr(hash ? 0 : L.gateBias), table = ptr(hash ? L.tid2eid : 0);
        final float scaling = (float) c.routedScaling;
        if (!(fusedRouter && gateRouteFits)) {
            matmulRuns(b.runs, L.gate, h, lam);
            launched(ds4j_moe_route(ctx(), ptr(lam), bias, table, ptr(b.tok), b.R, E, k, scaling, ptr(ids), ptr(wts)), "moe_route",
                    "MoE (routing, swiglu, combine)");
            return;
        }
        for (int[] run : b.runs) {
            final int s0 = run[0], n = run[1];
            final long lamRun = lam + 4L * s0 * E, idsRun = ids + 4L * s0 * k, wtsRun = wts + 4L * s0 * k;
            if (run[2] == 0) {
                launched(ds4j_moe_gate_route(ctx(), L.gate.format(), ptr(L.gate.data()), E, D, ptr(h + 4L * s0 * D), D,
                        bias, table, ptr(b.tok + 4L * s0), n, k, scaling, ptr(lamRun), ptr(idsRun), ptr(wtsRun)),
                        "moe_gate_route", "MoE (routing, swiglu, combine)");
            } else {
                matmul(L.gate, h + 4L * s0 * D, D, lamRun, E, n, run[2]);
                launched(ds4j_moe_route(ctx(), ptr(lamRun), bias, table, ptr(b.tok + 4L * s0), n, E, k, scaling, ptr(idsRun),
                        ptr(wtsRun)), "moe_route", "MoE (routing, swiglu, combine)");
            }
        }
    }

    /**
     * Hybrid placement (spec 3.8 step 4 on the CPU): the picks routed to experts in host memory, grouped so that each
     * expert runs once on all its tokens with the CPU kernels ({@link Experts#expert}) over the mapped checkpoint;
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
            float[] y = Experts.expert(HL.w1[e], HL.w3[e], HL.w2[e], hin, cnt, I, lim);
            for (int j = 0; j < cnt; j++) System.arraycopy(y, j * D, rows, order[start[e] + j] * D, D);
        }
        long buf = ws.f32((long) n * D);
        gpu.upload(buf, rows);
        for (int i = 0; i < n; i++) gpu.copy(yr + 4L * picks[i] * D, buf + 4L * i * D, 4L * D);
        hostPickCount[l] += n;
        if (profile != null) launched(DS4J_OK(), "host experts", "routed experts (host, CPU)");
    }

    /**
     * The routed experts' product over the picks of a run's rows (run as {@link #rowRuns} gives it) through
     * ds4j_moe_matmul_prefill, which knows the number of experts: runs on the tensor-core path (run[2], the call's
     * tc_rows, 1) group the picks by expert in its scratch, one GEMM per expert; the others run the skinny kernel, with one block per picked expert instead of one per pick where the picks
     * (S·k) outnumber the experts, and leave the scratch unused. The scratch is free again once the call is queued
     * (later work on the stream runs after it), unless keep: a call in a branch keeps it until the caller's join.
     */
    private void moeMatmul(DeviceWeights.Experts x, long ids, int k, int[] run, long in, long ldx, boolean perPick, long y, long ldy,
                           boolean keep) {
        final int E = c.numExperts, S = run[1];
        long mark = ws.mark();
        long bytes = 4L * ((long) S * k + 3L * E + 1), scratch = ws.alloc(bytes);
        launched(ds4j_moe_matmul_prefill(ctx(), x.format(), ptr(x.dataTable()), ptr(x.scaleTable()), ptr(x.rowBaseTable()), x.scaleKind(),
                x.rows(), x.cols(), E, ptr(ids), k, S, ptr(in), ldx, perPick ? 1 : 0, ptr(y), ldy, ptr(scratch), bytes, run[2]),
                "routed experts", "routed experts");
        if (!keep) ws.release(mark);
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
     * One MTP forward over several sequences of this (block) backend, as {@link #step} runs a batch: entry i has S_i
     * rows (its tokens), input streams h_proj(hnorm(H_r)) + e_proj(enorm(embed(tok_r))) for each of its rows r, from
     * H [R, n·D] (device, the rows of all entries, entry after entry; any backend's memory on this device), with the
     * embedding term of the entry's first row zero when zeroFirst[i] (position 0); then the decoder layer, appending
     * S_i positions to its sequence; its last row's output streams go to last[i] [n·D] and its last row's logits [V]
     * come back.
     *
     * <p>Batch invariance as in {@link #step}: the input projections, like every row-wise product of the layer, run
     * over the row runs of {@link #rowRuns} (an entry's rows take the kernel they take alone); attention runs per
     * entry or in the several-sequence kernels, which give the same numbers.
     * @throws IllegalArgumentException naming the entry: a sequence of another backend, a bad token id, a repeated
     *         sequence; nothing changes then
     * @throws IllegalStateException naming the entry: a closed sequence or one whose earlier step failed
     * @throws DeviceMemoryException when the step does not fit in device memory (nothing changed)
     */
    synchronized float[][] forwardMtp(List<HipSequence> seqs, long H, List<int[]> toks, boolean[] zeroFirst, MtpInputs in, long[] last) {
        if (closed) throw new IllegalStateException("backend is closed");
        final int E = seqs.size(), D = c.hidden, n = c.hcMult, nD = n * D;
        List<BatchEntry> batch = new ArrayList<>(E);
        for (int i = 0; i < E; i++) {
            HipSequence seq = seqs.get(i);
            if (seq.backend != this) throw new IllegalArgumentException("MTP entry " + i + ": sequence does not belong to this backend");
            if (seq.closed) throw new IllegalStateException("MTP entry " + i + ": sequence is closed");
            try {
                seq.checkUsable();
            } catch (IllegalStateException e) {
                throw new IllegalStateException("MTP entry " + i + ": " + e.getMessage(), e);
            }
            int S = toks.get(i).length;
            batch.add(new BatchEntry(seq, toks.get(i), new int[]{S - 1}, S > 1 ? StepKind.PREFILL : StepKind.DECODE));
        }
        Backend.checkBatch(c, batch);
        DeviceStep b = new DeviceStep(batch);
        final int R = b.R;
        String what = E == 1 ? "an MTP step of " + R + " entries at position " + b.start[0] : "an MTP step of " + E + " sequences, " + R + " entries in all";
        try {
            long scratch = 0;
            for (int e = 0; e < E; e++) {
                for (HipSequence.LayerState ls : b.seqs[e].layers) {
                    if (ls.comp != null) HipSequence.ensure(gpu, ls.comp, CacheLayout.entries(b.start[e] + b.count[e], ls.comp.m));
                    if (ls.index != null) HipSequence.ensure(gpu, ls.index, CacheLayout.entries(b.start[e] + b.count[e], ls.index.m));
                }
                scratch = Math.max(scratch, attentionScratchBytes(b.seqs[e], b.count[e], b.start[e], b.kinds[e], true));
            }
            long[] starts = new long[E];
            for (int e = 0; e < E; e++) starts[e] = b.start[e];
            b.group = group(b);
            long inputs = 4L * (2L * R * nD + 2L * R * D + (long) R * n + (long) R * n * n) + 16 * Workspace.ALIGN_BYTES;
            ws.reset(Workspace.batchBytes(c, b.count, starts, b.logitCounts()) + inputs + scratch + groupBytes(b));
        } catch (GpuException e) {
            throw outOfMemory(e, what);
        }
        try {
            if (b.group != null) uploadInputs(b); // tokens, positions and views in one copy
            else {
                b.tok = ws.i32(R);
                gpu.upload(b.tok, b.toks);
            }
            long tok = b.tok;
            int[] rowsN = new int[E];
            for (int e = 0; e < E; e++) rowsN[e] = b.count[e] * n;
            long X = ws.f32((long) R * nD), hn = ws.f32((long) R * nD);
            rmsnorm(H, hn, in.hnorm(), R * n, D);
            matmulRuns(rowRuns(rowsN, b.kinds), in.hProj(), hn, X);
            long e = ws.f32((long) R * D), ep = ws.f32((long) R * D);
            DeviceMatrix em = w.embed;
            launched(ds4j_embed(ctx(), em.format(), ptr(em.data()), ptr(em.scale()), em.scaleKind(), em.rowBase(), em.rows(), em.cols(),
                    ptr(tok), R, 1, ptr(e)), "embed", "embed");
            for (int i = 0; i < E; i++) if (zeroFirst[i]) gpu.memset(e + 4L * b.first[i] * D, 0, 4L * D);
            rmsnorm(e, e, in.enorm(), R, D);
            matmulRuns(b.runs, in.eProj(), e, ep);
            // X_i += ep for every stream i: the stream update with post = 1 and the identity as mixing matrix
            if (R <= in.rows()) {
                launched(ds4j_hc_post(ctx(), ptr(X), ptr(ep), ptr(in.ones()), ptr(in.eye()), R, n, D), "hc_post", "norm, rope, mHC");
            } else {
                long post = ws.f32((long) R * n), comb = ws.f32((long) R * n * n);
                float[] ones = new float[R * n], eye = new float[R * n * n];
                Arrays.fill(ones, 1f);
                for (int s = 0; s < R; s++) for (int i = 0; i < n; i++) eye[s * n * n + i * n + i] = 1f;
                gpu.upload(post, ones);
                gpu.upload(comb, eye);
                launched(ds4j_hc_post(ctx(), ptr(X), ptr(ep), ptr(post), ptr(comb), R, n, D), "hc_post", "norm, rope, mHC");
            }
            // the decoder layer(s) on these streams: the layer program with X in place of the embedding
            b.given = X;
            long logits = LayerProgram.run(b, c.numLayers);
            for (int i = 0; i < E; i++) gpu.copy(last[i], X + 4L * (b.first[i] + b.count[i] - 1) * nD, 4L * nD);
            float[] all = gpu.downloadFloats(logits, E * c.vocabSize);
            commit(b);
            float[][] out = new float[E][];
            for (int i = 0; i < E; i++) out[i] = Arrays.copyOfRange(all, i * c.vocabSize, (i + 1) * c.vocabSize);
            return out;
        } catch (RuntimeException x) {
            for (HipSequence seq : b.seqs) seq.failed = x.getMessage();
            throw x instanceof GpuException g ? outOfMemory(g, what) : x;
        }
    }
}
