package io.ds4j.gpu;

import io.ds4j.engine.BackendOptions.ExpertPlacement;
import io.ds4j.engine.CacheLayout;
import io.ds4j.model.ModelConfig;

import java.util.Arrays;
import java.util.List;
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
 * <p><b>Several devices of one host.</b> With D devices the routed experts of every layer are split into D contiguous
 * ranges as equal as possible ({@link ExpertOwners#contiguous}), each device computing the experts of its range;
 * everything else (embedding, head, attention, compressors and indexer, shared expert and router, norms, the expert
 * pointer tables) is replicated on every device, which pays because V4's attention has a single shared KV head. Each
 * device plans its own range against its own budget as above: monolithic holds the whole range, hybrid a uniform
 * per-layer prefix of it, the rest of the range in host memory. One device is the special case D = 1.
 *
 * @param placement    effective placement: MONOLITHIC or HYBRID (never AUTO); HYBRID when any expert is in host memory
 * @param owners       which device (or the host) holds each routed expert
 * @param devices      per device, in device order, its budget and the device bytes of its weights
 * @param hostBytes    stored bytes of the routed experts in host memory, all layers and devices together
 * @param f16KvDropped the F16-KV verifier was asked for but the placement is hybrid, so it is off
 */
public record ExpertPlacementPlan(ExpertPlacement placement, ExpertOwners owners, List<DeviceBytes> devices, long hostBytes,
                                  boolean f16KvDropped) {

    /**
     * @throws IllegalArgumentException when the devices do not match the owner map
     */
    public ExpertPlacementPlan {
        devices = List.copyOf(devices);
        if (devices.size() != owners.devices())
            throw new IllegalArgumentException(devices.size() + " device figures for an owner map over " + owners.devices() + " devices");
    }

    /**
     * The device bytes of one device's weights with a plan. The fixed part and the tables are the same on every device
     * (replicated); the routed experts are those the device holds.
     *
     * @param device          device index 0 .. D−1
     * @param budget          the budget this device was planned against
     * @param fixed           bytes of everything but the routed experts and their tables ({@link Footprint#fixedTotal})
     * @param tables          bytes of the routed experts' device pointer tables, all layers ({@link Footprint#tablesTotal})
     * @param experts         bytes of the routed experts resident on this device
     * @param residentExperts routed experts resident on this device, all layers together
     */
    public record DeviceBytes(int device, Budget budget, long fixed, long tables, long experts, int residentExperts) {
        /** All device bytes of this device's weights. */
        public long total() {
            return fixed + tables + experts;
        }
    }

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
            return sum(expertBytes, resident);
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
            return fixedTotal() + tablesTotal() + sum(expertBytes, null);
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
     * Plans the placement on one device: {@link #plan(ExpertPlacement, boolean, List, Footprint)} with one budget.
     * @param requested   gpu.expertPlacement
     * @param f16KvVerify verify.f16Kv was asked for
     * @throws DeviceMemoryException when monolithic was asked for and the model does not fit the budget, or when
     *         the weights other than the routed experts do not fit it (no placement helps then); the message names
     *         the bytes by category, the budget and what to change
     */
    public static ExpertPlacementPlan plan(ExpertPlacement requested, boolean f16KvVerify, Budget budget, Footprint fp) {
        return plan(requested, f16KvVerify, List.of(budget), fp);
    }

    /**
     * Plans the placement over D = budgets.size() devices of one host, the routed experts of every layer in D
     * contiguous ranges ({@link ExpertOwners#contiguous}), everything else replicated (see the class comment).
     * Monolithic (and auto, when every device's range fits its budget) keeps each range whole on its device; hybrid
     * (and auto otherwise) keeps a per-layer prefix of each range that fits the device's budget and puts the rest
     * of the range in host memory. With one device the messages are those of the one-device case.
     *
     * <p>The marginal bytes of {@link Footprint#expertBytes} are those of an upload from expert 0, where storage
     * shared by a layer's experts (the FP8 scale grid of stacked experts) is charged to expert 0. A device whose
     * range starts after expert 0 uploads that storage too, so the first expert of such a range is charged what
     * expert 0 is when that is more (the experts of a projection share one shape and format).
     *
     * @param requested   gpu.expertPlacement
     * @param f16KvVerify verify.f16Kv was asked for
     * @param budgets     per device, in device order, the device bytes its weights may take; at least one
     * @throws IllegalArgumentException without budgets
     * @throws DeviceMemoryException when monolithic was asked for and a device's range does not fit its budget, or
     *         when the weights other than the routed experts do not fit a device's budget (no placement helps then);
     *         the message names the device (with more than one), its bytes by category, its budget and what to change
     */
    public static ExpertPlacementPlan plan(ExpertPlacement requested, boolean f16KvVerify, List<Budget> budgets, Footprint fp) {
        int D = budgets.size();
        if (D < 1) throw new IllegalArgumentException("expert placement needs the budget of at least one device");
        long[][] eb = fp.expertBytes();
        int L = eb.length;
        int[] E = new int[L];
        for (int l = 0; l < L; l++) E[l] = eb[l].length;
        ExpertOwners whole = ExpertOwners.contiguous(D, E);
        long fixed = fp.fixedTotal() + fp.tablesTotal();
        long[][][] share = new long[D][][];
        long[] need = new long[D];
        boolean fits = true;
        for (int d = 0; d < D; d++) {
            share[d] = rangeBytes(eb, whole, d);
            need[d] = fixed + sum(share[d], null);
            fits &= need[d] <= budgets.get(d).bytes();
        }
        if (requested != ExpertPlacement.HYBRID && fits) return build(ExpertPlacement.MONOLITHIC, whole, budgets, fp, share, false);
        if (requested == ExpertPlacement.MONOLITHIC) throw monolithicShort(fp, whole, budgets, need, share);
        for (int d = 0; d < D; d++)
            if (fixed > budgets.get(d).bytes()) throw fixedShort(fp, whole, budgets.get(d), d, share[d]);
        int[][] resident = new int[L][D];
        for (int d = 0; d < D; d++) {
            int[] r = residentPrefix(share[d], budgets.get(d).bytes() - fixed);
            for (int l = 0; l < L; l++) resident[l][d] = r[l];
        }
        ExpertOwners owners = whole.withResident(resident);
        if (owners.hostExperts() == 0) return build(ExpertPlacement.MONOLITHIC, owners, budgets, fp, share, false);
        return build(ExpertPlacement.HYBRID, owners, budgets, fp, share, f16KvVerify);
    }

    /** [layer][i]: the marginal device bytes of the i-th expert of the device's range (see the charge of expert 0). */
    private static long[][] rangeBytes(long[][] eb, ExpertOwners owners, int d) {
        long[][] r = new long[eb.length][];
        for (int l = 0; l < eb.length; l++) {
            int a = owners.rangeStart(l, d), b = owners.rangeEnd(l, d);
            r[l] = Arrays.copyOfRange(eb[l], a, b);
            if (a > 0 && b > a) r[l][0] = Math.max(r[l][0], eb[l][0]);
        }
        return r;
    }

    /** Sum of bytes[l][0 .. count[l]−1], every entry when count is null. */
    private static long sum(long[][] bytes, int[] count) {
        long s = 0;
        for (int l = 0; l < bytes.length; l++)
            for (int i = 0, n = count == null ? bytes[l].length : count[l]; i < n; i++) s += bytes[l][i];
        return s;
    }

    private static ExpertPlacementPlan build(ExpertPlacement placement, ExpertOwners owners, List<Budget> budgets, Footprint fp,
                                             long[][][] share, boolean f16KvDropped) {
        List<DeviceBytes> devices = new java.util.ArrayList<>();
        for (int d = 0; d < owners.devices(); d++)
            devices.add(new DeviceBytes(d, budgets.get(d), fp.fixedTotal(), fp.tablesTotal(), sum(share[d], owners.residentPerLayer(d)),
                    owners.residentExperts(d)));
        long host = 0;
        long[][] hb = fp.hostBytes();
        for (int l = 0; l < owners.layers(); l++)
            for (int d = 0; d < owners.devices(); d++)
                for (int e = owners.residentEnd(l, d); e < owners.rangeEnd(l, d); e++) host += hb[l][e];
        return new ExpertPlacementPlan(placement, owners, devices, host, f16KvDropped);
    }

    private static DeviceMemoryException monolithicShort(Footprint fp, ExpertOwners owners, List<Budget> budgets, long[] need,
                                                         long[][][] share) {
        int D = budgets.size();
        if (D == 1) {
            Budget budget = budgets.getFirst();
            long total = need[0];
            return new DeviceMemoryException("gpu.expertPlacement monolithic: the model needs " + Gpu.mib(total)
                    + " of device memory (" + categories(fp, share[0]) + ") but " + budget.describe() + " is "
                    + Gpu.mib(total - budget.bytes()) + " short. To fit: set gpu.expertPlacement: hybrid (or auto) to keep the"
                    + " routed experts beyond the budget in host memory, raise gpu.memoryBudgetMiB if the device has room,"
                    + " or use a smaller model");
        }
        int first = -1;
        StringBuilder others = new StringBuilder();
        for (int d = 0; d < D; d++) {
            long over = need[d] - budgets.get(d).bytes();
            if (over <= 0) continue;
            if (first < 0) first = d;
            else others.append(others.isEmpty() ? "; also short: device " : ", device ").append(d).append(" by ").append(Gpu.mib(over));
        }
        Budget budget = budgets.get(first);
        return new DeviceMemoryException("gpu.expertPlacement monolithic over " + D + " devices: device " + first + " (routed experts "
                + owners.rangeText(first) + ") needs " + Gpu.mib(need[first]) + " of device memory ("
                + categories(fp, share[first]) + ") but " + budget.describe() + " is "
                + Gpu.mib(need[first] - budget.bytes()) + " short" + others + ". To fit: set gpu.expertPlacement: hybrid (or auto)"
                + " to keep the routed experts beyond each device's budget in host memory, use more devices (gpu.devices) so that"
                + " each holds fewer experts, raise gpu.memoryBudgetMiB if the device has room, or use a smaller model");
    }

    private static DeviceMemoryException fixedShort(Footprint fp, ExpertOwners owners, Budget budget, int d, long[][] share) {
        long fixed = fp.fixedTotal() + fp.tablesTotal();
        if (owners.devices() == 1)
            return new DeviceMemoryException("the weights other than the routed experts need " + Gpu.mib(fixed)
                    + " of device memory (" + categories(fp, share) + ") but " + budget.describe() + " is "
                    + Gpu.mib(fixed - budget.bytes()) + " short, so the model does not fit even with every routed expert in host"
                    + " memory (gpu.expertPlacement hybrid). To fit: raise gpu.memoryBudgetMiB if the device has room, use a GPU"
                    + " with more free memory, a smaller model, or backend cpu");
        return new DeviceMemoryException("the weights other than the routed experts, replicated on each of the " + owners.devices()
                + " devices, need " + Gpu.mib(fixed) + " of device memory (" + categories(fp, share) + ") but on device "
                + d + " " + budget.describe() + " is " + Gpu.mib(fixed - budget.bytes()) + " short, so the model does not fit even"
                + " with every routed expert in host memory (gpu.expertPlacement hybrid). To fit: raise gpu.memoryBudgetMiB if"
                + " the devices have room, use GPUs with more free memory, a smaller model, or backend cpu (more devices do"
                + " not help: these weights are on every device)");
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

    /** Per layer, the routed experts in device 0's memory, experts 0 .. resident[l]−1 (with one device: the plan's). */
    public int[] resident() {
        return owners.residentPerLayer(0);
    }

    /** Routed experts in host memory, all layers together. */
    public int hostExperts() {
        return owners.hostExperts();
    }

    /** Device bytes device 0's weights take with this plan (with one device: the plan's). */
    public long deviceBytes() {
        return devices.getFirst().total();
    }

    /** The budget device 0 was planned against (with one device: the plan's). */
    public Budget budget() {
        return devices.getFirst().budget();
    }

    /** Resident experts per layer on device 0 (with one device: the plan's) as "R" or "R..R+1". */
    public String residentRange() {
        return owners.residentRange(0);
    }

    /**
     * One line for the log: the placement, then per device its experts, resident experts per layer and its device
     * bytes by part against its budget, then the host experts and their bytes.
     */
    public String describe() {
        StringBuilder b = new StringBuilder("expert placement ").append(placement.key()).append(" over ").append(devices.size())
                .append(devices.size() == 1 ? " device" : " devices");
        for (DeviceBytes d : devices)
            b.append("; device ").append(d.device()).append(": experts ").append(owners.rangeText(d.device())).append(", ")
                    .append(owners.residentRange(d.device())).append(" resident per layer, ").append(Gpu.mib(d.total()))
                    .append(" (replicated ").append(Gpu.mib(d.fixed())).append(", expert tables ").append(Gpu.mib(d.tables()))
                    .append(", routed experts ").append(Gpu.mib(d.experts())).append(") of a budget of ").append(Gpu.mib(d.budget().bytes()));
        return b.append("; host memory: ").append(hostExperts()).append(" routed experts, ").append(Gpu.mib(hostBytes)).toString();
    }

    /** The fixed categories and the device's whole share of routed experts with the tables, for messages. */
    private static String categories(Footprint fp, long[][] share) {
        StringBuilder b = new StringBuilder();
        for (var e : fp.fixed().entrySet()) {
            if (e.getValue() == 0) continue;
            if (!b.isEmpty()) b.append(", ");
            b.append(e.getKey()).append(' ').append(Gpu.mib(e.getValue()));
        }
        int L = share.length, E = L == 0 ? 0 : share[0].length;
        if (!b.isEmpty()) b.append(", ");
        b.append(DeviceMemoryReport.EXPERTS_DEVICE).append(' ').append(Gpu.mib(sum(share, null) + fp.tablesTotal()))
                .append(" for ").append(L).append(" layers x ").append(E).append(" experts");
        return b.toString();
    }
}
