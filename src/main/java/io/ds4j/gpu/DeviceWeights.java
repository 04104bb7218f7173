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
 * for ds4j_moe_matmul.
 */
public final class DeviceWeights implements AutoCloseable {
    /** Routed experts of one projection: E matrices of one shape and format, addressed through device tables. */
    public record Experts(int format, int scaleKind, int rows, int cols, long dataTable, long scaleTable, long rowBaseTable) {}

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

    public DeviceMatrix embed, hcHeadFn, lmHead;
    public long hcHeadBase, hcHeadScale, finalNorm;
    public final Layer[] layers;

    private final Gpu gpu;
    private final List<Long> allocations = new ArrayList<>();
    private final Map<String, Long> uploaded = new HashMap<>();
    /** Device bytes by category, in upload order. */
    private final Map<String, Long> bytesBy = new LinkedHashMap<>();

    /**
     * Uploads every weight. On failure (e.g. out of device memory) everything uploaded so far is freed and the
     * exception names what did not fit.
     */
    public DeviceWeights(Gpu gpu, ModelWeights w) {
        this.gpu = gpu;
        ModelConfig c = w.config;
        this.layers = new Layer[c.numLayers];
        try {
            embed = matrix(w.embed, "embedding and head");
            lmHead = matrix(w.lmHead, "embedding and head");
            hcHeadFn = matrix(w.hcHeadFn, "dense layers");
            hcHeadBase = vector(w.hcHeadBase, "vectors");
            hcHeadScale = vector(w.hcHeadScale, "vectors");
            finalNorm = vector(w.finalNorm, "vectors");
            for (int l = 0; l < c.numLayers; l++) layers[l] = layer(c, l, w.layers[l]);
        } catch (RuntimeException e) {
            close();
            throw e;
        }
    }

    private Layer layer(ModelConfig c, int l, ModelWeights.Layer L) {
        Layer y = new Layer();
        String dense = "dense layers";
        y.attnHcFn = matrix(L.attnHcFn, dense);
        y.ffnHcFn = matrix(L.ffnHcFn, dense);
        y.qA = matrix(L.qA, dense);
        y.qB = matrix(L.qB, dense);
        y.kv = matrix(L.kv, dense);
        y.oA = matrix(L.oA, dense);
        y.oB = matrix(L.oB, dense);
        y.gate = matrix(L.gate, dense);
        y.sharedW1 = matrix(L.sharedW1, dense);
        y.sharedW3 = matrix(L.sharedW3, dense);
        y.sharedW2 = matrix(L.sharedW2, dense);
        y.attnHcBase = vector(L.attnHcBase, "vectors");
        y.attnHcScale = vector(L.attnHcScale, "vectors");
        y.ffnHcBase = vector(L.ffnHcBase, "vectors");
        y.ffnHcScale = vector(L.ffnHcScale, "vectors");
        y.inputNorm = vector(L.inputNorm, "vectors");
        y.postAttnNorm = vector(L.postAttnNorm, "vectors");
        y.qANorm = vector(L.qANorm, "vectors");
        y.kvNorm = vector(L.kvNorm, "vectors");
        y.sinks = vector(L.sinks, "vectors");
        if (L.gateBias != null) y.gateBias = vector(L.gateBias, "vectors");
        if (L.tid2eid != null) y.tid2eid = ints(L.tid2eid, "vectors");
        if (L.compressor != null) y.compressor = comp(L.compressor);
        if (L.indexer != null) {
            y.indexer = new Indexer();
            y.indexer.compressor = comp(L.indexer.compressor);
            y.indexer.qB = matrix(L.indexer.qB, dense);
            y.indexer.weightsProj = matrix(L.indexer.weightsProj, dense);
        }
        y.w1 = experts(L.w1, "layer " + l + " experts (gate)");
        y.w3 = experts(L.w3, "layer " + l + " experts (up)");
        y.w2 = experts(L.w2, "layer " + l + " experts (down)");
        return y;
    }

    private Comp comp(ModelWeights.Compressor k) {
        Comp y = new Comp();
        y.kvProj = matrix(k.kvProj, "dense layers");
        y.gateProj = matrix(k.gateProj, "dense layers");
        y.positionBias = vector(k.positionBias, "vectors");
        y.norm = vector(k.norm, "vectors");
        return y;
    }

    private Experts experts(WeightMatrix[] ms, String what) {
        int E = ms.length;
        long[] data = new long[E], scale = new long[E];
        int[] rowBase = new int[E];
        DeviceMatrix first = null;
        boolean anyRowBase = false;
        for (int e = 0; e < E; e++) {
            DeviceMatrix d = matrix(ms[e], "routed experts");
            if (first == null) first = d;
            else if (d.format() != first.format() || d.scaleKind() != first.scaleKind() || d.rows() != first.rows() || d.cols() != first.cols())
                throw new IllegalArgumentException(what + ": expert " + e + " is " + ms[e] + ", expert 0 is " + ms[0]
                        + "; the GPU backend needs every routed expert of a projection in one format and shape");
            data[e] = d.data();
            scale[e] = d.scale();
            rowBase[e] = d.rowBase();
            anyRowBase |= d.rowBase() != 0;
        }
        long dt = alloc(8L * E, what + " table", "routed experts");
        gpu.upload(dt, data);
        long st = 0;
        if (first.scale() != 0) {
            st = alloc(8L * E, what + " scale table", "routed experts");
            gpu.upload(st, scale);
        }
        long rt = 0;
        if (anyRowBase) {
            rt = alloc(4L * E, what + " row table", "routed experts");
            gpu.upload(rt, rowBase);
        }
        return new Experts(first.format(), first.scaleKind(), first.rows(), first.cols(), dt, st, rt);
    }

    private DeviceMatrix matrix(WeightMatrix m, String category) {
        long data = segment(m.data, m.name, category);
        long scale = 0;
        int kind = 0;
        if (m.scale != null) {
            scale = segment(m.scale, m.name + " scales", category);
            kind = m.scaleType == DType.F32 ? 1 : 0;
        }
        return new DeviceMatrix(m.format.ordinal(), data, scale, kind, m.rowBase, m.rows, m.cols, m.name);
    }

    /** Uploads a host segment once (views sharing storage share the device copy). */
    private long segment(MemorySegment s, String what, String category) {
        String key = s.isNative() ? s.address() + ":" + s.byteSize() : null;
        if (key != null) {
            Long p = uploaded.get(key);
            if (p != null) return p;
        }
        long p = alloc(s.byteSize(), what, category);
        gpu.upload(p, s);
        if (key != null) uploaded.put(key, p);
        return p;
    }

    private long vector(float[] v, String category) {
        long p = alloc(4L * v.length, "vector", category);
        gpu.upload(p, v);
        return p;
    }

    private long ints(int[] v, String category) {
        long p = alloc(4L * v.length, "tid2eid", category);
        gpu.upload(p, v);
        return p;
    }

    private long alloc(long bytes, String what, String category) {
        long p;
        try {
            p = gpu.malloc(bytes, "weights: " + what);
        } catch (GpuException e) {
            if (e.code != io.ds4j.gpu.bindings.ds4j_gpu_h.DS4J_ERR_OOM()) throw e;
            throw new GpuException(e.code, e.getMessage() + "; " + Gpu.mib(totalBytes()) + " of weights were uploaded before ("
                    + bytesBy + "). The model does not fit this GPU: use a GPU with more memory, a smaller model, or backend cpu");
        }
        allocations.add(p);
        bytesBy.merge(category, bytes, Long::sum);
        return p;
    }

    /** Device bytes held by the weights. */
    public long totalBytes() {
        long b = 0;
        for (long v : bytesBy.values()) b += v;
        return b;
    }

    /** "dense layers 12.0 MiB, routed experts 30.0 MiB, ..." */
    public String summary() {
        StringBuilder b = new StringBuilder();
        for (var e : bytesBy.entrySet()) {
            if (!b.isEmpty()) b.append(", ");
            b.append(e.getKey()).append(' ').append(Gpu.mib(e.getValue()));
        }
        return b.toString();
    }

    @Override
    public void close() {
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
}
