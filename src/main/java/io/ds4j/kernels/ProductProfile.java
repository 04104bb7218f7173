package io.ds4j.kernels;

import io.ds4j.model.WeightMatrix;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.LongAdder;

/**
 * Wall time and weight bytes of the batched matrix-vector products ({@link Gemm#matvecs}, which every decode product
 * goes through; one call is one hand-off to the worker pool for n independent products), for {@code ds4j bench-engine
 * --profile}. Off unless one is {@link #activate}d; while off, a call pays one volatile read. What a step spends
 * outside these calls (attention over the cache, mHC, norms, RoPE, compressors, indexer, routing, SwiGLU) is its total
 * time minus theirs.
 */
public final class ProductProfile {
    private static volatile ProductProfile active;

    /**
     * Totals of one group of calls.
     * @param name   the number of products per call and the first product's weight, without layer and expert
     *               numbers, e.g. {@code 6 x mlp.experts.E.gate_proj.weight[384x512 BF16]} for a layer's w1/w3 call
     * @param calls  number of calls
     * @param nanos  wall nanoseconds, from entering {@link Gemm#matvecs} to its return
     * @param bytes  weight bytes of all products of all calls
     */
    public record Group(String name, long calls, long nanos, long bytes) {}

    /** Raw grouping key, cheap to hash in the timed loop; names are shortened only when read. */
    private record Key(int n, String name, int rows, int cols, WeightMatrix.Format format) {}

    private final Map<Key, LongAdder[]> groups = new ConcurrentHashMap<>();

    /** An empty profile; it records nothing until {@link #activate}d. */
    public ProductProfile() {}

    /**
     * Makes {@code p} record every following {@link Gemm#matvecs} call, from any thread, adding to what it already
     * holds; {@code null} stops recording.
     */
    public static void activate(ProductProfile p) {
        active = p;
    }

    static ProductProfile active() {
        return active;
    }

    /** Records one call: its n = w.length products took nanos and read bytes of weights. */
    void record(WeightMatrix[] w, long nanos, long bytes) {
        LongAdder[] g = groups.computeIfAbsent(new Key(w.length, w[0].name, w[0].rows, w[0].cols, w[0].format),
                k -> new LongAdder[]{new LongAdder(), new LongAdder(), new LongAdder()});
        g[0].increment();
        g[1].add(nanos);
        g[2].add(bytes);
    }

    /** The groups recorded so far (calls of every layer and expert merged), largest wall time first. */
    public List<Group> groups() {
        Map<String, long[]> merged = new LinkedHashMap<>();
        groups.forEach((k, g) -> {
            String name = k.n() + " x " + k.name().replaceFirst("^(model\\.)?layers\\.\\d+\\.", "")
                    .replaceAll("experts\\.\\d+\\.", "experts.E.") + "[" + k.rows() + "x" + k.cols() + " " + k.format() + "]";
            long[] t = merged.computeIfAbsent(name, q -> new long[3]);
            t[0] += g[0].sum();
            t[1] += g[1].sum();
            t[2] += g[2].sum();
        });
        List<Group> out = new ArrayList<>();
        merged.forEach((name, t) -> out.add(new Group(name, t[0], t[1], t[2])));
        out.sort((a, b) -> Long.compare(b.nanos(), a.nanos()));
        return out;
    }
}
