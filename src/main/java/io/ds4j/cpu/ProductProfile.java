package io.ds4j.cpu;

import io.ds4j.model.WeightMatrix;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.LongAdder;

/**
 * Wall time and weight bytes of the batched matrix-vector products ({@link Gemm#matvecs}, which every decode product
 * goes through), grouped by product shape, for {@code ds4j bench-engine --profile}. Off unless one is {@link #activate}d; while off, a product pays one volatile read. Whatever a step spends outside these products (attention over the
 * cache, mHC, norms, RoPE, compressors, indexer, routing, SwiGLU) is its total time minus theirs.
 */
public final class ProductProfile {
    private static volatile ProductProfile active;

    /** Totals of one product group: calls, wall nanoseconds (from entering {@link Gemm#matvecs} to its return), bytes. */
    public record Group(String name, long calls, long nanos, long bytes) {}

    private final Map<String, LongAdder[]> groups = new ConcurrentHashMap<>();

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

    /**
     * Records one batch of products. The group is named after the first weight, without its layer number, and expert number, with the
     * number of products in the batch: e.g. {@code 6 x mlp.experts.E.gate_proj.weight[384x512 BF16]} for a layer's
     * w1/w3 batch.
     */
    void record(WeightMatrix[] w, long nanos, long bytes) {
        String first = w[0].toString().replaceFirst("^(model\\.)?layers\\.\\d+\\.", "").replaceAll("experts\\.\\d+\\.", "experts.E.");
        String key = w.length + " x " + first;
        LongAdder[] g = groups.computeIfAbsent(key, k -> new LongAdder[]{new LongAdder(), new LongAdder(), new LongAdder()});
        g[0].increment();
        g[1].add(nanos);
        g[2].add(bytes);
    }

    /** The groups recorded so far, largest wall time first. */
    public List<Group> groups() {
        List<Group> out = new ArrayList<>();
        groups.forEach((k, g) -> out.add(new Group(k, g[0].sum(), g[1].sum(), g[2].sum())));
        out.sort((a, b) -> Long.compare(b.nanos(), a.nanos()));
        return out;
    }
}
