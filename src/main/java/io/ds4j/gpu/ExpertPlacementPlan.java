package io.ds4j.gpu;

import io.ds4j.engine.BackendOptions.ExpertPlacement;
import io.ds4j.engine.CacheLayout;
import io.ds4j.model.ModelConfig;

import java.util.Map;

/**
 * Where the routed experts of the GPU backend live: the planning arithmetic, a pure function of the
 * weights' device footprint and the budget, so that it is checked without a GPU.
 *
 * <ul>
 *   <li>{@code monolithic}: every routed expert in device memory; a model larger than the budget is a start-up
 *       error ({@link DeviceMemoryException}).</li>
 *   <li>{@code hybrid}: the weights other than the routed experts, plus as many routed experts as the budget allows,
 *       in device memory; the other experts stay in host memory (the memory-mapped checkpoint, never copied) and
 *       run on the CPU kernels. When the budget holds every expert the result is monolithic.</li>
 *   <li>{@code auto}: monolithic when the whole model fits the budget, else hybrid. With the F16-KV verifier asked
 *       for, auto asks for monolithic (the verifier needs it) and falls back to hybrid with a warning
 *       ({@link #f16KvDropped}).</li>
 * </ul>
 *
 * <p><b>Which experts stay on the device.</b> A uniform prefix: experts 0 .. R−1 of every layer, with R the largest
 * count whose experts fit in all layers; what is left of the budget then gives one more expert to the layers in
 * order while it lasts (so the resident count of a layer is R or R+1). Why per layer rather than whole layers on the
 * host: (1) every layer runs the same share of its picks on the CPU, so in every layer the CPU work overlaps the
 * device's work on the resident picks and the shared expert, where a layer wholly on the host would leave the device
 * idle while the CPU runs all k picks; (2) the budget is used in steps of one expert per layer, not E experts at
 * once; (3) which experts are hot depends on the prompts, and without routing statistics at load any fixed set is
 * as good as a prefix (the router is trained for balanced load, so about (E−R)/E of a layer's picks go to the host).
 * The cost is one device-to-host copy of the routing ids per layer and step. Hash-routed layers are treated alike.
 * The reference system also places a uniform prefix; beyond it, we use the rest of the
 * budget (one more expert in the first layers), keep prefill batched and the F16-KV verifier decision explicit, and
 * run the host picks on the CPU while the device works on the resident picks and the shared expert.
 *
 * @param placement    effective placement: MONOLITHIC or HYBRID (never AUTO)
 * @param resident     per layer, the routed experts in device memory (experts 0 .. resident[l]−1)
 * @param hostExperts  routed experts in host memory, all layers together
 * @param deviceBytes  device bytes the weights take with this plan
 * @param budget       the budget planned against
 * @param f16KvDropped the F16-KV verifier was asked for but the placement is hybrid, so it is off
 */
public record ExpertPlacementPlan(ExpertPlacement placement, int[] resident, int hostExperts, long deviceBytes,
                                  Budget budget, boolean f16KvDropped) {

    /** Fixed part of the reserve: runtime allocations outside our control (BLAS handles, graphs, fragmentation). */
    public static final long RUNTIME_RESERVE = 512L << 20;
    /**
     * The workload the automatic budget keeps room for: the conf/server.json defaults of limits.prefillChunk (512),
     * limits.maxActive (8 sequences) and limits.maxContextTokens (32,768), with the rollback window of 16 tokens and
     * logits for q+1 = 17 rows. Larger settings need gpu.memoryBudgetMiB.
     */
    public static final int RESERVE_STEP_TOKENS = 512, RESERVE_SEQUENCES = 8, RESERVE_CONTEXT = 32768, RESERVE_ROLLBACK = io.ds4j.engine.RollbackWindow.DEFAULT,
            RESERVE_LOGIT_ROWS = RESERVE_ROLLBACK + 1;

    /**
     * Device bytes the weights take (every allocation rounded up to 256 bytes), from a dry run of the upload
     * ({@link DeviceWeights#measure}).
     *
     * @param fixed       bytes by category ({@link DeviceMemoryReport} names) of everything but the routed experts
     * @param expertBytes [layer][expert]: the device bytes expert e adds when experts 0 .. e−1 of its layer are
     *                    already resident (its three projections; storage shared by several experts, e.g. the FP8
     *                    scale grid of stacked experts, is charged to the first)
     * @param tableBytes  [layer]: the device pointer tables of the layer's routed experts (uploaded in any plan)
     * @param hostBytes   [layer][expert]: stored bytes of the expert in the checkpoint (host memory when not resident)
     */
    public record Footprint(Map<String, Long> fixed, long[][] expertBytes, long[] tableBytes, long[][] hostBytes) {
        /** Bytes of everything but the routed experts and their tables. */
        public long fixedTotal() {
            long b = 0;
            for (long v : fixed.values()) b += v;
            return b;
        }

        /** Bytes of the expert pointer tables, all layers. */
        public long tablesTotal() {
            long b = 0;
            for (long v : tableBytes) b += v;
            return b;
        }

        /** Device bytes of the resident experts (without tables). */
        public long residentBytes(int[] resident) {
            long b = 0;
            for (int l = 0; l < expertBytes.length; l++)
                for (int e = 0; e < resident[l]; e++) b += expertBytes[l][e];
            return b;
        }

        /** Stored bytes of the experts that are not resident. */
        public long hostBytes(int[] resident) {
            long b = 0;
            for (int l = 0; l < hostBytes.length; l++)
                for (int e = resident[l]; e < hostBytes[l].length; e++) b += hostBytes[l][e];
            return b;
        }

        /** Every expert resident. */
        public int[] allResident() {
            int[] r = new int[expertBytes.length];
            for (int l = 0; l < r.length; l++) r[l] = expertBytes[l].length;
            return r;
        }

        /** Device bytes of the whole model (monolithic). */
        public long total() {
            return fixedTotal() + tablesTotal() + residentBytes(allResident());
        }
    }

    /**
     * The device bytes the weights may take.
     *
     * @param bytes    the budget
     * @param free     free device memory at start-up
     * @param reserve  what the automatic budget leaves free for the workspace and the caches
     * @param explicit set by gpu.memoryBudgetMiB (then trusted even above the free memory: on unified-memory
     *                 devices the runtime's free figure understates what can be allocated)
     */
    public record Budget(long bytes, long free, long reserve, boolean explicit) {
        /**
         * @param requested gpu.memoryBudgetMiB in bytes, 0 = automatic: the free memory less the reserve
         * @throws IllegalArgumentException for a negative request
         */
        public static Budget of(long requested, long free, long reserve) {
            if (requested < 0) throw new IllegalArgumentException("gpu.memoryBudgetMiB must be >= 0, got " + requested + " bytes");
            if (requested > 0) return new Budget(requested, free, reserve, true);
            return new Budget(Math.max(0, free - reserve), free, reserve, false);
        }

        /** "the budget of X MiB (…)" for messages. */
        public String describe() {
            return explicit
                    ? "the budget gpu.memoryBudgetMiB = " + Gpu.mib(bytes) + " (the device has " + Gpu.mib(free) + " free)"
                    : "the automatic budget of " + Gpu.mib(bytes) + " (the device's " + Gpu.mib(free) + " of free memory less a reserve of "
                      + Gpu.mib(reserve) + " for the workspace and the sequence caches)";
        }
    }

    /**
     * The reserve the automatic budget (gpu.memoryBudgetMiB 0) keeps free: {@link #RUNTIME_RESERVE}, the workspace of
     * one {@link #RESERVE_STEP_TOKENS}-token step at {@link #RESERVE_CONTEXT} tokens of context with
     * {@link #RESERVE_LOGIT_ROWS} logits rows ({@link Workspace#stepBytes}), and the caches of {@link #RESERVE_SEQUENCES}
     * sequences at {@link #RESERVE_CONTEXT} tokens ({@link CacheLayout#stateBytes}).
     */
    public static long reserveBytes(ModelConfig c) {
        return RUNTIME_RESERVE
                + Workspace.stepBytes(c, RESERVE_STEP_TOKENS, RESERVE_CONTEXT - RESERVE_STEP_TOKENS, RESERVE_LOGIT_ROWS)
                + RESERVE_SEQUENCES * CacheLayout.stateBytes(c, RESERVE_CONTEXT, RESERVE_ROLLBACK);
    }

    /**
     * Plans the placement.
     * @param requested   gpu.expertPlacement
     * @param f16KvVerify verify.f16Kv was asked for
     * @throws DeviceMemoryException when monolithic was asked for and the model does not fit the budget, or when
     *         the weights other than the routed experts do not fit it (no placement helps then); the message names
     *         the bytes by category, the budget and what to change
     */
    public static ExpertPlacementPlan plan(ExpertPlacement requested, boolean f16KvVerify, Budget budget, Footprint fp) {
        int[] all = fp.allResident();
        long total = fp.total();
        if (requested != ExpertPlacement.HYBRID && total <= budget.bytes())
            return new ExpertPlacementPlan(ExpertPlacement.MONOLITHIC, all, 0, total, budget, false);
        if (requested == ExpertPlacement.MONOLITHIC)
            throw new DeviceMemoryException("gpu.expertPlacement monolithic: the model needs " + Gpu.mib(total)
                    + " of device memory (" + categories(fp) + ") but " + budget.describe() + " is "
                    + Gpu.mib(total - budget.bytes()) + " short. To fit: set gpu.expertPlacement: hybrid (or auto) to keep the"
                    + " routed experts beyond the budget in host memory, raise gpu.memoryBudgetMiB if the device has room,"
                    + " or use a smaller model");
        long fixed = fp.fixedTotal() + fp.tablesTotal();
        if (fixed > budget.bytes())
            throw new DeviceMemoryException("the weights other than the routed experts need " + Gpu.mib(fixed)
                    + " of device memory (" + categories(fp) + ") but " + budget.describe() + " is " + Gpu.mib(fixed - budget.bytes())
                    + " short, so the model does not fit even with every routed expert in host memory (gpu.expertPlacement"
                    + " hybrid). To fit: raise gpu.memoryBudgetMiB if the device has room, use a GPU with more free memory,"
                    + " a smaller model, or backend cpu");
        int[] resident = residentPrefix(fp.expertBytes(), budget.bytes() - fixed);
        int host = 0;
        for (int l = 0; l < all.length; l++) host += all[l] - resident[l];
        long device = fixed + fp.residentBytes(resident);
        if (host == 0) return new ExpertPlacementPlan(ExpertPlacement.MONOLITHIC, resident, 0, device, budget, false);
        return new ExpertPlacementPlan(ExpertPlacement.HYBRID, resident, host, device, budget, f16KvVerify);
    }

    /**
     * Resident counts per layer within room bytes: the largest uniform R, then one more expert per layer in layer
     * order while the rest of the room allows (see the class comment).
     * @param bytes [layer][expert] marginal device bytes, as {@link Footprint#expertBytes}
     */
    static int[] residentPrefix(long[][] bytes, long room) {
        int L = bytes.length, minE = Integer.MAX_VALUE;
        for (long[] b : bytes) minE = Math.min(minE, b.length);
        int[] res = new int[L];
        if (L == 0) return res;
        long used = 0;
        int R = 0;
        while (R < minE) {
            long add = 0;
            for (long[] b : bytes) add += b[R];
            if (used + add > room) break;
            used += add;
            R++;
        }
        java.util.Arrays.fill(res, R);
        for (int l = 0; l < L; l++)
            if (res[l] < bytes[l].length && used + bytes[l][res[l]] <= room) used += bytes[l][res[l]++];
        return res;
    }

    /** Per layer, the routed experts in device memory (a copy). */
    @Override
    public int[] resident() {
        return resident.clone();
    }

    /** Resident experts per layer as "R" or "R..R+1". */
    public String residentRange() {
        int lo = Integer.MAX_VALUE, hi = 0;
        for (int r : resident) {
            lo = Math.min(lo, r);
            hi = Math.max(hi, r);
        }
        if (resident.length == 0) return "0";
        return lo == hi ? Integer.toString(lo) : lo + ".." + hi;
    }

    private static String categories(Footprint fp) {
        StringBuilder b = new StringBuilder();
        for (var e : fp.fixed().entrySet()) {
            if (e.getValue() == 0) continue;
            if (!b.isEmpty()) b.append(", ");
            b.append(e.getKey()).append(' ').append(Gpu.mib(e.getValue()));
        }
        int L = fp.expertBytes().length, E = L == 0 ? 0 : fp.expertBytes()[0].length;
        if (!b.isEmpty()) b.append(", ");
        b.append(DeviceMemoryReport.EXPERTS_DEVICE).append(' ').append(Gpu.mib(fp.residentBytes(fp.allResident()) + fp.tablesTotal()))
                .append(" for ").append(L).append(" layers x ").append(E).append(" experts");
        return b.toString();
    }
}
