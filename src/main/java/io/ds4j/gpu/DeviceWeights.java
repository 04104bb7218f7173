package io.ds4j.gpu;

import io.ds4j.model.DType;
import io.ds4j.model.ModelConfig;
import io.ds4j.model.ModelWeights;
import io.ds4j.model.WeightMatrix;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * {@link ModelWeights} uploaded once to device memory, every matrix in its stored format (BF16/F16/F32, FP8 e4m3 with
 * 128×128 block scales, FP4 e2m1 with 1×32 scales), small vectors as F32, tid2eid as int32. Storage shared by several
 * views (FP8 scale grids of stacked experts) is uploaded once. Routed experts get device tables of per-expert pointers
 * for ds4j_moe_matmul; with hybrid placement ({@link ExpertPlacementPlan}) only experts 0 .. resident−1 of a layer
 * are uploaded and the others have null table entries (they stay in the mapped checkpoint and run on the CPU).
 * Device bytes are booked by {@link DeviceMemoryReport} category, each allocation rounded up to 256 bytes.
 */
public final class DeviceWeights implements AutoCloseable {
    /**
     * Routed experts of one projection: E matrices of one shape and format, addressed through device tables;
     * experts [0, resident) are in device memory, the others have null entries.
     */
    public record Experts(int format, int scaleKind, int rows, int cols, long dataTable, long scaleTable, long rowBaseTable,
                          int resident) {}

    /** A compressor (spec 3.5). */
    public static final class Comp {
        public DeviceMatrix kvProj, gateProj;
        /** [m, cw] F32 */
        public long positionBias;
        /** [w] F32 */
        public long norm;
    }

    /** Lightning Indexer (spec 3.6). */
    public static final class Indexer {
        public Comp compressor;
        public DeviceMatrix qB, weightsProj;
    }

    /** One decoder layer (spec 2.2); vectors are F32 device pointers. */
    public static final class Layer {
        public DeviceMatrix attnHcFn, ffnHcFn, qA, qB, kv, oA, oB, gate, sharedW1, sharedW3, sharedW2;
        public long attnHcBase, attnHcScale, ffnHcBase, ffnHcScale, inputNorm, postAttnNorm, qANorm, kvNorm, sinks;
        /** moe layers: [E] F32; hash layers: 0. */
        public long gateBias;
        /** hash layers: [V, k] int32; else 0. */
        public long tid2eid;
        public Comp compressor;
        public Indexer indexer;
        public Experts w1, w3, w2;
    }

    private static final long ALIGN = 256;

    public DeviceMatrix embed, hcHeadFn, lmHead;
    public long hcHeadBase, hcHeadScale, finalNorm;
    public final Layer[] layers;

    /** null: a dry run that only books bytes ({@link #measure}). */
    private final Gpu gpu;
    private final int[] resident;
    private final String onOom;
    private final List<Long> allocations = new ArrayList<>();
    private final Map<String, Long> uploaded = new HashMap<>();
    /** Device bytes by category, in upload order. */
    private final Map<String, Long> bytesBy = new LinkedHashMap<>();
    /** Dry run: fake device addresses. */
    private long fakeNext = 1L << 32;
    private final long[][] expertBytes, hostBytes;
    private final long[] tableBytes;

    /** Uploads every weight, every routed expert resident. As {@link #DeviceWeights(Gpu, ModelWeights, int[], String)}. */
    public DeviceWeights(Gpu gpu, ModelWeights w) {
        this(gpu, w, null, "");
    }

    /**
     * Uploads the weights. On failure (e.g. out of device memory) everything uploaded so far is freed.
     * @param resident per layer, the routed experts to upload (experts 0 .. resident[l]−1); null = all
     * @param onOom    appended to the message of an out-of-memory failure, e.g. ". Planned ...: lower ..." (the plan's
     *                 budget and what to change)
     * @throws DeviceMemoryException when the runtime runs out of device memory, naming the tensor, its category and
     *         bytes and what was uploaded before
     */
    public DeviceWeights(Gpu gpu, ModelWeights w, int[] resident, String onOom) {
        this(w, resident, onOom, java.util.Objects.requireNonNull(gpu, "gpu"));
    }

    /** gpu null: a dry run that books the bytes without a device. */
    private DeviceWeights(ModelWeights w, int[] resident, String onOom, Gpu gpu) {
        this.gpu = gpu;
        ModelConfig c = w.config;
        if (resident != null && resident.length != c.numLayers)
            throw new IllegalArgumentException("resident experts given for " + resident.length + " layers, the model has " + c.numLayers);
        this.resident = resident;
        this.onOom = onOom;
        this.layers = new Layer[c.numLayers];
        this.expertBytes = new long[c.numLayers][];
        this.hostBytes = new long[c.numLayers][];
        this.tableBytes = new long[c.numLayers];
        for (String cat : List.of(DeviceMemoryReport.EMBED, DeviceMemoryReport.ATTENTION, DeviceMemoryReport.COMPRESSORS,
                DeviceMemoryReport.SHARED, DeviceMemoryReport.EXPERTS_DEVICE, DeviceMemoryReport.OTHER))
            bytesBy.put(cat, 0L);
        try {
            embed = matrix(w.embed, DeviceMemoryReport.EMBED);
            lmHead = matrix(w.lmHead, DeviceMemoryReport.EMBED);
            hcHeadFn = matrix(w.hcHeadFn, DeviceMemoryReport.OTHER);
            hcHeadBase = vector(w.hcHeadBase, DeviceMemoryReport.OTHER);
            hcHeadScale = vector(w.hcHeadScale, DeviceMemoryReport.OTHER);
            finalNorm = vector(w.finalNorm, DeviceMemoryReport.OTHER);
            for (int l = 0; l < c.numLayers; l++) layers[l] = layer(c, l, w.layers[l]);
        } catch (RuntimeException e) {
            close();
            throw e;
        }
    }

    /**
     * The device footprint of the weights with every expert resident, by a dry run of the upload (no GPU needed):
     * the input of {@link ExpertPlacementPlan#plan}.
     */
    public static ExpertPlacementPlan.Footprint measure(ModelWeights w) {
        DeviceWeights d = new DeviceWeights(w, null, "", null);
        Map<String, Long> fixed = new LinkedHashMap<>(d.bytesBy);
        fixed.remove(DeviceMemoryReport.EXPERTS_DEVICE);
        return new ExpertPlacementPlan.Footprint(java.util.Collections.unmodifiableMap(fixed), d.expertBytes, d.tableBytes, d.hostBytes);
    }

    private Layer layer(ModelConfig c, int l, ModelWeights.Layer L) {
        Layer y = new Layer();
        final String att = DeviceMemoryReport.ATTENTION, other = DeviceMemoryReport.OTHER, shared = DeviceMemoryReport.SHARED;
        y.attnHcFn = matrix(L.attnHcFn, other);
        y.ffnHcFn = matrix(L.ffnHcFn, other);
        y.qA = matrix(L.qA, att);
        y.qB = matrix(L.qB, att);
        y.kv = matrix(L.kv, att);
        y.oA = matrix(L.oA, att);
        y.oB = matrix(L.oB, att);
        y.gate = matrix(L.gate, shared);
        y.sharedW1 = matrix(L.sharedW1, shared);
        y.sharedW3 = matrix(L.sharedW3, shared);
        y.sharedW2 = matrix(L.sharedW2, shared);
        y.attnHcBase = vector(L.attnHcBase, other);
        y.attnHcScale = vector(L.attnHcScale, other);
        y.ffnHcBase = vector(L.ffnHcBase, other);
        y.ffnHcScale = vector(L.ffnHcScale, other);
        y.inputNorm = vector(L.inputNorm, other);
        y.postAttnNorm = vector(L.postAttnNorm, other);
        y.qANorm = vector(L.qANorm, other);
        y.kvNorm = vector(L.kvNorm, other);
        y.sinks = vector(L.sinks, att);
        if (L.gateBias != null) y.gateBias = vector(L.gateBias, shared);
        if (L.tid2eid != null) y.tid2eid = ints(L.tid2eid, shared);
        if (L.compressor != null) y.compressor = comp(L.compressor);
        if (L.indexer != null) {
            y.indexer = new Indexer();
            y.indexer.compressor = comp(L.indexer.compressor);
            y.indexer.qB = matrix(L.indexer.qB, DeviceMemoryReport.COMPRESSORS);
            y.indexer.weightsProj = matrix(L.indexer.weightsProj, DeviceMemoryReport.COMPRESSORS);
        }
        int E = L.w1.length;
        expertBytes[l] = new long[E];
        hostBytes[l] = new long[E];
        y.w1 = experts(l, L.w1, "layer " + l + " experts (gate)");
        y.w3 = experts(l, L.w3, "layer " + l + " experts (up)");
        y.w2 = experts(l, L.w2, "layer " + l + " experts (down)");
        return y;
    }

    private Comp comp(ModelWeights.Compressor k) {
        Comp y = new Comp();
        y.kvProj = matrix(k.kvProj, DeviceMemoryReport.COMPRESSORS);
        y.gateProj = matrix(k.gateProj, DeviceMemoryReport.COMPRESSORS);
        y.positionBias = vector(k.positionBias, DeviceMemoryReport.COMPRESSORS);
        y.norm = vector(k.norm, DeviceMemoryReport.COMPRESSORS);
        return y;
    }

    private Experts experts(int l, WeightMatrix[] ms, String what) {
        int E = ms.length, R = resident == null ? E : Math.max(0, Math.min(resident[l], E));
        WeightMatrix m0 = ms[0];
        boolean anyRowBase = false;
        for (int e = 0; e < E; e++) {
            WeightMatrix m = ms[e];
            if (m.format != m0.format || scaleKind(m) != scaleKind(m0) || m.rows != m0.rows || m.cols != m0.cols)
                throw new IllegalArgumentException(what + ": expert " + e + " is " + m + ", expert 0 is " + m0
                        + "; the GPU backend needs every routed expert of a projection in one format and shape");
            anyRowBase |= m.rowBase != 0;
            hostBytes[l][e] += m.storedBytes();
        }
        long[] data = new long[E], scale = new long[E];
        int[] rowBase = new int[E];
        for (int e = 0; e < R; e++) {
            long before = bytesBy.get(DeviceMemoryReport.EXPERTS_DEVICE);
            DeviceMatrix d = matrix(ms[e], DeviceMemoryReport.EXPERTS_DEVICE);
            expertBytes[l][e] += bytesBy.get(DeviceMemoryReport.EXPERTS_DEVICE) - before;
            data[e] = d.data();
            scale[e] = d.scale();
            rowBase[e] = d.rowBase();
        }
        long before = bytesBy.get(DeviceMemoryReport.EXPERTS_DEVICE);
        long dt = alloc(8L * E, what + " table", DeviceMemoryReport.EXPERTS_DEVICE);
        upload(dt, data);
        long st = 0;
        if (m0.scale != null) {
            st = alloc(8L * E, what + " scale table", DeviceMemoryReport.EXPERTS_DEVICE);
            upload(st, scale);
        }
        long rt = 0;
        if (anyRowBase) {
            rt = alloc(4L * E, what + " row table", DeviceMemoryReport.EXPERTS_DEVICE);
            upload(rt, rowBase);
        }
        tableBytes[l] += bytesBy.get(DeviceMemoryReport.EXPERTS_DEVICE) - before;
        return new Experts(m0.format.ordinal(), scaleKind(m0), m0.rows, m0.cols, dt, st, rt, R);
    }

    private static int scaleKind(WeightMatrix m) {
        return m.scale != null && m.scaleType == DType.F32 ? 1 : 0;
    }

    private DeviceMatrix matrix(WeightMatrix m, String category) {
        long data = segment(m.data, m.name, category);
        long scale = 0;
        if (m.scale != null) scale = segment(m.scale, m.name + " scales", category);
        return new DeviceMatrix(m.format.ordinal(), data, scale, scaleKind(m), m.rowBase, m.rows, m.cols, m.name);
    }

    /** Uploads a host segment once (views sharing storage share the device copy). */
    private long segment(MemorySegment s, String what, String category) {
        String key = s.isNative() ? s.address() + ":" + s.byteSize() : null;
        if (key != null) {
            Long p = uploaded.get(key);
            if (p != null) return p;
        }
        long p = alloc(s.byteSize(), what, category);
        if (gpu != null) gpu.upload(p, s);
        if (key != null) uploaded.put(key, p);
        return p;
    }

    private long vector(float[] v, String category) {
        long p = alloc(4L * v.length, "vector", category);
        if (gpu != null) gpu.upload(p, v);
        return p;
    }

    private long ints(int[] v, String category) {
        long p = alloc(4L * v.length, "tid2eid", category);
        if (gpu != null) gpu.upload(p, v);
        return p;
    }

    private void upload(long p, long[] v) {
        if (gpu != null) gpu.upload(p, v);
    }

    private void upload(long p, int[] v) {
        if (gpu != null) gpu.upload(p, v);
    }

    private long alloc(long bytes, String what, String category) {
        long booked = Math.max(ALIGN, (bytes + ALIGN - 1) / ALIGN * ALIGN);
        long p;
        if (gpu == null) {
            p = fakeNext;
            fakeNext += booked;
        } else {
            try {
                p = gpu.malloc(bytes, "weights: " + what);
            } catch (GpuException e) {
                if (e.code != io.ds4j.gpu.bindings.ds4j_gpu_h.DS4J_ERR_OOM()) throw e;
                throw new DeviceMemoryException("out of device memory uploading " + what + " (" + category + ", "
                        + Gpu.mib(bytes) + "): " + e.getMessage() + "; " + Gpu.mib(totalBytes()) + " of weights were uploaded before ("
                        + summary() + ")" + onOom, e);
            }
            allocations.add(p);
        }
        bytesBy.merge(category, booked, Long::sum);
        return p;
    }

    /** Device bytes held by the weights. */
    public long totalBytes() {
        long b = 0;
        for (long v : bytesBy.values()) b += v;
        return b;
    }

    /** Device bytes by {@link DeviceMemoryReport} category (every weight category, 0 when empty). */
    public Map<String, Long> bytesByCategory() {
        return java.util.Collections.unmodifiableMap(bytesBy);
    }

    /** "embedding + lm_head 12.0 MiB, attention 30.0 MiB, ..." (non-empty categories). */
    public String summary() {
        StringBuilder b = new StringBuilder();
        for (var e : bytesBy.entrySet()) {
            if (e.getValue() == 0) continue;
            if (!b.isEmpty()) b.append(", ");
            b.append(e.getKey()).append(' ').append(Gpu.mib(e.getValue()));
        }
        return b.toString();
    }

    @Override
    public void close() {
        if (gpu == null) return;
        for (long p : allocations) {
            try {
                gpu.free(p);
            } catch (RuntimeException ignored) {
                // keep freeing the rest
            }
        }
        allocations.clear();
        uploaded.clear();
    }

    /** Uploads one more matrix (the MTP's input projections), freed with these weights. */
    DeviceMatrix extraMatrix(WeightMatrix m) {
        return matrix(m, DeviceMemoryReport.OTHER);
    }

    /** Uploads one more vector (the MTP's input norms), freed with these weights. */
    long extraVector(float[] v) {
        return vector(v, DeviceMemoryReport.OTHER);
    }
}
