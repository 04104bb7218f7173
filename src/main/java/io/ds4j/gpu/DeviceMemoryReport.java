package io.ds4j.gpu;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Device memory use of the GPU backend by category, logged at load and served through
 * {@link HipBackend#memoryReport()} (for {@code /props}). Every category of {@link #CATEGORIES} is listed, 0 when
 * empty. {@link #EXPERTS_HOST} is host memory (the memory-mapped checkpoint), not device memory.
 *
 * @param device       the GPU, as {@link Gpu#toString()}
 * @param placement    effective expert placement, "monolithic" or "hybrid"
 * @param residentPerLayer routed experts in device memory per layer, "R" or "R..R+1"
 * @param expertsPerLayer  routed experts per layer (E)
 * @param hostExperts  routed experts in host memory, all layers together
 * @param budgetBytes  the budget the weights were planned against
 * @param reserveBytes what the automatic budget keeps free for the workspace and the caches (0 with an explicit budget)
 * @param totalBytes   the device's memory
 * @param entries      bytes by category, in {@link #CATEGORIES} order
 */
public record DeviceMemoryReport(String device, String placement, String residentPerLayer, int expertsPerLayer,
                                 int hostExperts, long budgetBytes, long reserveBytes, long totalBytes,
                                 List<Entry> entries) {
    public static final String EMBED = "embedding + lm_head";
    public static final String ATTENTION = "attention";
    public static final String COMPRESSORS = "compressors + indexer";
    /** DeepSeek-V4 has no dense FFN layers: the shared expert and the router (gate, bias, hash table) of every layer. */
    public static final String SHARED = "shared experts + router";
    public static final String EXPERTS_DEVICE = "routed experts (device)";
    public static final String EXPERTS_HOST = "routed experts (host memory)";
    /** RMSNorm weights, the mHC mappings and the mHC head merge, RoPE tables: the small rest. */
    public static final String OTHER = "norms, mHC + other";
    public static final String WORKSPACE = "workspace";
    public static final String FREE = "free";
    /** Every category, in report order. */
    public static final List<String> CATEGORIES = List.of(EMBED, ATTENTION, COMPRESSORS, SHARED, EXPERTS_DEVICE,
            EXPERTS_HOST, OTHER, WORKSPACE, FREE);

    /** Bytes of one category. */
    public record Entry(String category, long bytes) {}

    /** Bytes of a category (0 when absent). */
    public long bytes(String category) {
        for (Entry e : entries) if (e.category.equals(category)) return e.bytes;
        return 0;
    }

    /** Category → bytes, in report order (for JSON). */
    public Map<String, Long> byCategory() {
        Map<String, Long> m = new LinkedHashMap<>();
        for (Entry e : entries) m.put(e.category, e.bytes);
        return m;
    }

    /** A multi-line table for the log. */
    public String format() {
        StringBuilder b = new StringBuilder();
        b.append("device memory on ").append(device).append(": expert placement ").append(placement).append(", ")
                .append(residentPerLayer).append(" of ").append(expertsPerLayer).append(" routed experts per layer on the device");
        if (hostExperts > 0) b.append(", ").append(hostExperts).append(" in host memory");
        b.append("; weights budget ").append(Gpu.mib(budgetBytes));
        if (reserveBytes > 0) b.append(" (reserve ").append(Gpu.mib(reserveBytes)).append(')');
        b.append(", device total ").append(Gpu.mib(totalBytes));
        for (Entry e : entries) {
            b.append(String.format("%n  %-30s %12s", e.category, Gpu.mib(e.bytes)));
            if (e.category.equals(EXPERTS_HOST)) b.append("  (mapped checkpoint, not device memory)");
        }
        return b.toString();
    }
}
