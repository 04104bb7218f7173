package io.ds4j.gpu;

import io.ds4j.engine.BackendOptions.ExpertPlacement;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

import io.ds4j.gpu.ExpertPlacementPlan.Budget;
import io.ds4j.gpu.ExpertPlacementPlan.Footprint;
import static io.ds4j.gpu.ExpertPlacementPlan.plan;
import static org.junit.jupiter.api.Assertions.*;

/**
 * The expert placement over several devices of one host, without a GPU: the expert-to-owner map (contiguous ranges
 * per layer, a resident prefix of each), the per-device bytes, the errors naming the device that does not fit, and
 * that one device gives exactly the plans and messages of the one-device planner.
 */
class ExpertPlacementPlanDevicesTest {
    /** Fixed weights as ExpertPlacementPlanTest.fixedCategories, tables 64 bytes per layer, host bytes 90 + layer + expert. */
    static Footprint fp(long[][] experts) {
        Map<String, Long> fixed = ExpertPlacementPlanTest.fixedCategories();
        long[][] host = new long[experts.length][];
        for (int l = 0; l < experts.length; l++) {
            host[l] = new long[experts[l].length];
            for (int e = 0; e < host[l].length; e++) host[l][e] = 90 + l + e;
        }
        long[] tables = new long[experts.length];
        Arrays.fill(tables, 64);
        return new Footprint(fixed, experts, tables, host);
    }

    /** L layers of E experts of the given bytes each. */
    static Footprint uniform(int L, int E, long bytes) {
        long[][] b = new long[L][E];
        for (long[] x : b) Arrays.fill(x, bytes);
        return fp(b);
    }

    static Budget budget(long bytes) {
        return Budget.of(bytes, 1L << 40, 0);
    }

    static List<Budget> budgets(long... bytes) {
        List<Budget> b = new ArrayList<>();
        for (long x : bytes) b.add(budget(x));
        return b;
    }

    static long fixed(Footprint f) {
        return f.fixedTotal() + f.tablesTotal();
    }

    // ---- one device: the plans of the one-device planner -------------------------------------------------------

    /** What the one-device planner returned: a plan's figures, or the message of its DeviceMemoryException. */
    record OldResult(ExpertPlacement placement, int[] resident, int hostExperts, long deviceBytes, boolean f16KvDropped, String error) {}

    /**
     * The one-device planner as it was before plans covered several devices, kept verbatim (arithmetic and messages)
     * as the oracle for D = 1.
     */
    static OldResult oldPlan(ExpertPlacement requested, boolean f16KvVerify, Budget budget, Footprint fp) {
        int[] all = fp.allResident();
        long total = fp.total();
        if (requested != ExpertPlacement.HYBRID && total <= budget.bytes())
            return new OldResult(ExpertPlacement.MONOLITHIC, all, 0, total, false, null);
        if (requested == ExpertPlacement.MONOLITHIC)
            return new OldResult(null, null, 0, 0, false, "gpu.expertPlacement monolithic: the model needs " + Gpu.mib(total)
                    + " of device memory (" + oldCategories(fp) + ") but " + budget.describe() + " is "
                    + Gpu.mib(total - budget.bytes()) + " short. To fit: set gpu.expertPlacement: hybrid (or auto) to keep the"
                    + " routed experts beyond the budget in host memory, raise gpu.memoryBudgetMiB if the device has room,"
                    + " or use a smaller model");
        long fixed = fp.fixedTotal() + fp.tablesTotal();
        if (fixed > budget.bytes())
            return new OldResult(null, null, 0, 0, false, "the weights other than the routed experts need " + Gpu.mib(fixed)
                    + " of device memory (" + oldCategories(fp) + ") but " + budget.describe() + " is " + Gpu.mib(fixed - budget.bytes())
                    + " short, so the model does not fit even with every routed expert in host memory (gpu.expertPlacement"
                    + " hybrid). To fit: raise gpu.memoryBudgetMiB if the device has room, use a GPU with more free memory,"
                    + " a smaller model, or backend cpu");
        int[] resident = ExpertPlacementPlan.residentPrefix(fp.expertBytes(), budget.bytes() - fixed);
        int host = 0;
        for (int l = 0; l < all.length; l++) host += all[l] - resident[l];
        long device = fixed + fp.residentBytes(resident);
        if (host == 0) return new OldResult(ExpertPlacement.MONOLITHIC, resident, 0, device, false, null);
        return new OldResult(ExpertPlacement.HYBRID, resident, host, device, f16KvVerify, null);
    }

    static String oldCategories(Footprint fp) {
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

    @Test
    void oneDeviceGivesExactlyTheOneDevicePlans() {
        List<Footprint> fps = List.of(
                uniform(3, 4, 100),
                fp(new long[][]{{400, 100, 100, 100}, {400, 100, 100, 100}}),        // shared storage charged to expert 0
                fp(new long[][]{{100, 200, 50}, {70, 70, 70, 70, 70}, {300}}),        // ragged layers
                fp(new long[][]{{1000L << 20, 1000L << 20}}),                          // MiB-sized, as in the messages
                fp(new long[0][]),                                                     // no layers
                fp(new long[][]{{}, {}}));                                             // layers without routed experts
        int compared = 0, errors = 0, hybrids = 0;
        for (Footprint f : fps) {
            long lo = Math.max(0, fixed(f) - 40), hi = f.total() + 40, step = Math.max(1, (hi - lo) / 300);
            List<Long> bs = new ArrayList<>();
            for (long b = lo; b <= hi; b += step) bs.add(b);
            bs.addAll(List.of(fixed(f) - 1, fixed(f), f.total() - 1, f.total()));
            for (long b : bs)
                for (ExpertPlacement pl : ExpertPlacement.values())
                    for (boolean f16 : new boolean[]{false, true}) {
                        Budget budget = budget(b);
                        OldResult old = oldPlan(pl, f16, budget, f);
                        String where = pl.key() + " f16=" + f16 + " budget " + b + " footprint " + Arrays.deepToString(f.expertBytes());
                        if (old.error() != null) {
                            DeviceMemoryException e = assertThrows(DeviceMemoryException.class, () -> plan(pl, f16, budget, f), where);
                            assertEquals(old.error(), e.getMessage(), where);
                            DeviceMemoryException e1 = assertThrows(DeviceMemoryException.class, () -> plan(pl, f16, List.of(budget), f), where);
                            assertEquals(old.error(), e1.getMessage(), where);
                            errors++;
                        } else {
                            ExpertPlacementPlan p = plan(pl, f16, budget, f);
                            assertEquals(p, plan(pl, f16, List.of(budget), f), where);
                            assertEquals(old.placement(), p.placement(), where);
                            assertArrayEquals(old.resident(), p.resident(), where);
                            assertEquals(old.hostExperts(), p.hostExperts(), where);
                            assertEquals(old.deviceBytes(), p.deviceBytes(), where);
                            assertEquals(old.f16KvDropped(), p.f16KvDropped(), where);
                            assertEquals(f.hostBytes(old.resident()), p.hostBytes(), where);
                            assertSame(budget, p.budget(), where);
                            assertEquals(1, p.devices().size(), where);
                            if (p.placement() == ExpertPlacement.HYBRID) hybrids++;
                        }
                        compared++;
                    }
        }
        // the sweep reaches every branch: fits, hybrid, and both errors
        assertTrue(compared > 1000 && errors > 100 && hybrids > 100, compared + " compared, " + errors + " errors, " + hybrids + " hybrid");
    }

    // ---- the owner map -----------------------------------------------------------------------------------------

    @Test
    void contiguousRangesAsEqualAsPossible() {
        ExpertOwners two = ExpertOwners.contiguous(2, new int[]{7, 7});
        ExpertOwners three = ExpertOwners.contiguous(3, new int[]{7, 5});
        for (int l = 0; l < 2; l++) {
            assertEquals(0, two.rangeStart(l, 0));
            assertEquals(3, two.rangeEnd(l, 0));
            assertEquals(3, two.rangeStart(l, 1));
            assertEquals(7, two.rangeEnd(l, 1));
        }
        // layer 0, E = 7: [0,2) [2,4) [4,7); layer 1, E = 5: [0,1) [1,3) [3,5)
        int[][] starts = {{0, 2, 4}, {0, 1, 3}}, ends = {{2, 4, 7}, {1, 3, 5}};
        for (int l = 0; l < 2; l++)
            for (int d = 0; d < 3; d++) {
                assertEquals(starts[l][d], three.rangeStart(l, d), "layer " + l + " device " + d);
                assertEquals(ends[l][d], three.rangeEnd(l, d), "layer " + l + " device " + d);
                assertEquals(ends[l][d] - starts[l][d], three.resident(l, d), "the default map holds every expert");
            }
        assertEquals(0, three.hostExperts());
        assertEquals(2 + 2, three.residentExperts(1));
        assertEquals("1..2", three.residentRange(0));
        assertThrows(IllegalArgumentException.class, () -> ExpertOwners.contiguous(0, new int[]{4}));
        assertThrows(IllegalArgumentException.class, () -> ExpertOwners.contiguous(2, new int[]{-1}));
    }

    @Test
    void everyExpertHasExactlyOneOwner() {
        for (int D = 1; D <= 5; D++)
            for (int E : new int[]{0, 1, 2, 3, 7, 8, 13}) {
                int[] es = {E, E, E};
                ExpertOwners whole = ExpertOwners.contiguous(D, es);
                // a resident prefix that varies by layer and device
                int[][] res = new int[3][D];
                for (int l = 0; l < 3; l++)
                    for (int d = 0; d < D; d++) res[l][d] = (whole.rangeEnd(l, d) - whole.rangeStart(l, d) + l) / (l + 1);
                ExpertOwners o = whole.withResident(res);
                for (int l = 0; l < 3; l++) {
                    int[] count = new int[D];
                    int host = 0;
                    for (int e = 0; e < E; e++) {
                        int owner = o.owner(l, e);
                        if (owner == ExpertOwners.HOST) {
                            host++;
                            continue;
                        }
                        assertTrue(owner >= 0 && owner < D);
                        assertTrue(e >= o.rangeStart(l, owner) && e < o.residentEnd(l, owner), "expert " + e + " in device " + owner + "'s resident prefix");
                        count[owner]++;
                    }
                    for (int d = 0; d < D; d++) {
                        assertEquals(res[l][d], count[d], "D=" + D + " E=" + E + " layer " + l + " device " + d);
                        if (d > 0) assertEquals(o.rangeEnd(l, d - 1), o.rangeStart(l, d), "ranges are contiguous");
                        int size = o.rangeEnd(l, d) - o.rangeStart(l, d);
                        assertTrue(size == E / D || size == E / D + 1, "as equal as possible: " + size);
                    }
                    assertEquals(0, o.rangeStart(l, 0));
                    assertEquals(E, o.rangeEnd(l, D - 1));
                    assertEquals(o.hostExperts(l), host);
                }
                final int fE = E;
                if (E > 0) assertThrows(IndexOutOfBoundsException.class, () -> o.owner(0, fE));
                assertThrows(IndexOutOfBoundsException.class, () -> o.owner(0, -1));
            }
    }

    @Test
    void residentCountsOutsideTheRangeAreRefused() {
        ExpertOwners o = ExpertOwners.contiguous(2, new int[]{5});
        assertThrows(IllegalArgumentException.class, () -> o.withResident(new int[][]{{3, 3}}), "device 0's range holds 2");
        assertThrows(IllegalArgumentException.class, () -> o.withResident(new int[][]{{-1, 0}}));
        assertThrows(IllegalArgumentException.class, () -> o.withResident(new int[][]{{1}}));
        assertThrows(IllegalArgumentException.class, () -> o.withResident(new int[][]{{1, 1}, {1, 1}}));
        assertEquals(3, o.withResident(new int[][]{{2, 0}}).hostExperts());
    }

    // ---- several devices ---------------------------------------------------------------------------------------

    @Test
    void monolithicOverTwoAndThreeDevices() {
        Footprint f = fp(new long[][]{{10, 11, 12, 13, 14, 15, 16}, {20, 21, 22, 23, 24, 25, 26}});
        for (int D : new int[]{2, 3}) {
            long[] b = new long[D];
            Arrays.fill(b, 1L << 30);
            for (ExpertPlacement pl : ExpertPlacement.values()) {
                ExpertPlacementPlan p = plan(pl, true, budgets(b), f);
                assertEquals(ExpertPlacement.MONOLITHIC, p.placement(), pl.key());
                assertFalse(p.f16KvDropped());
                assertEquals(0, p.hostExperts());
                assertEquals(0, p.hostBytes());
                assertEquals(D, p.owners().devices());
                long experts = 0;
                for (ExpertPlacementPlan.DeviceBytes d : p.devices()) {
                    long own = 0;
                    for (int l = 0; l < 2; l++)
                        for (int e = p.owners().rangeStart(l, d.device()); e < p.owners().rangeEnd(l, d.device()); e++) own += f.expertBytes()[l][e];
                    assertEquals(own, d.experts(), "device " + d.device());
                    assertEquals(f.fixedTotal(), d.fixed(), "replicated");
                    assertEquals(f.tablesTotal(), d.tables(), "replicated");
                    assertEquals(f.fixedTotal() + f.tablesTotal() + own, d.total());
                    experts += d.experts();
                }
                assertEquals(f.residentBytes(f.allResident()), experts, "the devices hold every expert once");
            }
        }
        // E = 7 over two devices: 3 and 4 per layer
        ExpertPlacementPlan p = plan(ExpertPlacement.AUTO, false, budgets(1L << 30, 1L << 30), f);
        assertEquals(6, p.devices().get(0).residentExperts());
        assertEquals(8, p.devices().get(1).residentExperts());
        assertArrayEquals(new int[]{3, 3}, p.resident(), "device 0's view");
        assertEquals(p.devices().get(0).total(), p.deviceBytes());
    }

    @Test
    void monolithicThatDoesNotFitNamesTheDevice() {
        Footprint f = uniform(3, 6, 100); // two experts per layer and device: 600 bytes
        long fx = fixed(f);
        DeviceMemoryException e = assertThrows(DeviceMemoryException.class,
                () -> plan(ExpertPlacement.MONOLITHIC, false, budgets(fx + 600, fx + 599, fx + 600), f));
        String m = e.getMessage();
        for (String part : new String[]{"device 1 (routed experts 2..3 of each layer)", "over 3 devices", "short", "hybrid",
                "more devices", "gpu.memoryBudgetMiB", "smaller model", DeviceMemoryReport.EMBED, "3 layers x 2 experts"})
            assertTrue(m.contains(part), "message names '" + part + "': " + m);
        assertFalse(m.contains("device 0"), m);
        assertFalse(m.contains("also short"), m);
        assertEquals(5, e.code, "DS4J_ERR_OOM");

        e = assertThrows(DeviceMemoryException.class, () -> plan(ExpertPlacement.MONOLITHIC, false, budgets(fx + 600, fx, fx + 1), f));
        assertTrue(e.getMessage().contains("device 1 (routed experts 2..3"), e.getMessage());
        assertTrue(e.getMessage().contains("also short: device 2 by"), e.getMessage());
        // auto and hybrid keep the experts that do not fit in host memory instead
        ExpertPlacementPlan p = plan(ExpertPlacement.AUTO, false, budgets(fx + 600, fx + 599, fx + 600), f);
        assertEquals(ExpertPlacement.HYBRID, p.placement());
        assertEquals(1, p.hostExperts(), "device 1 holds 2, 2, 1 of its experts");
        assertArrayEquals(new int[]{2, 2, 1}, p.owners().residentPerLayer(1));
        assertEquals(ExpertOwners.HOST, p.owners().owner(2, 3));
        assertEquals(1, p.owners().owner(2, 2));
    }

    @Test
    void hybridWithUnevenBudgets() {
        Footprint f = uniform(3, 4, 100); // device ranges of two experts per layer
        long fx = fixed(f);
        for (ExpertPlacement pl : new ExpertPlacement[]{ExpertPlacement.AUTO, ExpertPlacement.HYBRID}) {
            ExpertPlacementPlan p = plan(pl, true, budgets(fx + 399, fx + 10_000), f);
            assertEquals(ExpertPlacement.HYBRID, p.placement());
            assertTrue(p.f16KvDropped());
            // device 0: one round (300), then one more in layer 0 (400 > 399: no)
            assertArrayEquals(new int[]{1, 1, 1}, p.owners().residentPerLayer(0));
            assertArrayEquals(new int[]{2, 2, 2}, p.owners().residentPerLayer(1));
            assertEquals(3, p.hostExperts());
            for (int l = 0; l < 3; l++) {
                assertEquals(0, p.owners().owner(l, 0));
                assertEquals(ExpertOwners.HOST, p.owners().owner(l, 1));
                assertEquals(1, p.owners().owner(l, 2));
                assertEquals(1, p.owners().owner(l, 3));
            }
            assertEquals(fx + 300, p.devices().get(0).total());
            assertEquals(fx + 600, p.devices().get(1).total());
            assertEquals(91 + 92 + 93, p.hostBytes(), "stored bytes of expert 1 of each layer");
            assertEquals("1", p.residentRange());
            String d = p.describe();
            for (String part : new String[]{"hybrid over 2 devices", "device 0: experts 0..1 of each layer, 1 resident per layer",
                    "device 1: experts 2..3 of each layer, 2 resident per layer", "host memory: 3 routed experts"})
                assertTrue(d.contains(part), "describe() names '" + part + "': " + d);
        }
        // enough room on every device: hybrid is monolithic
        ExpertPlacementPlan p = plan(ExpertPlacement.HYBRID, true, budgets(fx + 600, fx + 600), f);
        assertEquals(ExpertPlacement.MONOLITHIC, p.placement());
        assertFalse(p.f16KvDropped());
    }

    @Test
    void aRangeAfterExpertZeroPaysForTheLayersSharedStorage() {
        // expert 0 carries 300 bytes of storage shared by the layer's experts (a stacked scale grid)
        Footprint f = fp(new long[][]{{400, 100, 100, 100}});
        long fx = fixed(f);
        assertThrows(DeviceMemoryException.class, () -> plan(ExpertPlacement.MONOLITHIC, false, budgets(fx + 500, fx + 499), f),
                "device 1 holds experts 2, 3 and the shared storage: 500");
        ExpertPlacementPlan p = plan(ExpertPlacement.MONOLITHIC, false, budgets(fx + 500, fx + 500), f);
        assertEquals(500, p.devices().get(1).experts());
        p = plan(ExpertPlacement.HYBRID, false, budgets(fx + 500, fx + 450), f);
        assertArrayEquals(new int[]{1}, p.owners().residentPerLayer(1), "expert 2 with the shared storage (400) fits, expert 3 does not");
        assertEquals(400, p.devices().get(1).experts());
    }

    @Test
    void weightsBesidesTheExpertsMustFitEveryDevice() {
        Footprint f = uniform(2, 4, 100);
        long fx = fixed(f);
        for (ExpertPlacement pl : ExpertPlacement.values()) {
            DeviceMemoryException e = assertThrows(DeviceMemoryException.class, () -> plan(pl, false, budgets(fx + 400, fx - 1), f), pl.key());
            assertTrue(e.getMessage().contains("device 1"), e.getMessage());
            if (pl != ExpertPlacement.MONOLITHIC) {
                assertTrue(e.getMessage().contains("replicated on each of the 2 devices"), e.getMessage());
                assertTrue(e.getMessage().contains("more devices do not help"), e.getMessage());
            }
        }
        assertThrows(IllegalArgumentException.class, () -> plan(ExpertPlacement.AUTO, false, List.of(), f));
    }

    @Test
    void noLayersAndFewerExpertsThanDevices() {
        Footprint none = fp(new long[0][]);
        ExpertPlacementPlan p = plan(ExpertPlacement.MONOLITHIC, true, budgets(fixed(none), fixed(none), fixed(none)), none);
        assertEquals(ExpertPlacement.MONOLITHIC, p.placement());
        assertEquals(3, p.devices().size());
        for (ExpertPlacementPlan.DeviceBytes d : p.devices()) assertEquals(fixed(none), d.total());
        assertEquals("0", p.residentRange());
        assertTrue(p.describe().contains("device 2: experts none"), p.describe());

        // two experts over three devices: device 0 owns none, devices 1 and 2 one each
        Footprint two = uniform(2, 2, 100);
        long fx = fixed(two);
        p = plan(ExpertPlacement.AUTO, false, budgets(fx, fx + 200, fx + 200), two);
        assertEquals(ExpertPlacement.MONOLITHIC, p.placement(), "device 0 needs only the replicated weights");
        ExpertOwners o = p.owners();
        for (int l = 0; l < 2; l++) {
            assertEquals(1, o.owner(l, 0));
            assertEquals(2, o.owner(l, 1));
            assertEquals(o.rangeStart(l, 0), o.rangeEnd(l, 0));
        }
        assertEquals(0, p.devices().get(0).experts());
        assertEquals(0, p.devices().get(0).residentExperts());
        assertEquals(200, p.devices().get(2).experts());
        // hybrid with no room for experts: everything on the host
        p = plan(ExpertPlacement.HYBRID, false, budgets(fx, fx, fx), two);
        assertEquals(ExpertPlacement.HYBRID, p.placement());
        assertEquals(4, p.hostExperts());
        for (int l = 0; l < 2; l++) for (int e = 0; e < 2; e++) assertEquals(ExpertOwners.HOST, p.owners().owner(l, e));
        long stored = 0;
        for (long[] h : two.hostBytes()) for (long v : h) stored += v;
        assertEquals(stored, p.hostBytes());
    }
}
