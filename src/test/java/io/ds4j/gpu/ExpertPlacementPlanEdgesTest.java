package io.ds4j.gpu;

import io.ds4j.engine.BackendOptions.ExpertPlacement;
import io.ds4j.gpu.ExpertPlacementPlan.Budget;
import io.ds4j.gpu.ExpertPlacementPlan.DeviceBytes;
import io.ds4j.gpu.ExpertPlacementPlan.Footprint;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;

import static io.ds4j.gpu.ExpertPlacementPlan.plan;
import static org.junit.jupiter.api.Assertions.*;

/**
 * Edges of the placement over several devices, without a GPU: plans for random footprints, device counts and budgets
 * checked against invariants recomputed from the owner map (bytes per device within its budget, host experts and bytes,
 * R or R+1 resident per layer and no room left for one more), budgets near Long.MAX_VALUE, and ranges that differ by
 * layer in the messages.
 */
class ExpertPlacementPlanEdgesTest {
    static List<Budget> budgets(long... b) {
        List<Budget> r = new ArrayList<>();
        for (long x : b) r.add(Budget.of(x, 1L << 40, 0));
        return r;
    }

    /** Layers of different sizes give per-layer ranges; messages say so instead of "experts per layer of each layer". */
    @Test
    void rangesThatDifferByLayerReadAsSuch() {
        Footprint f = ExpertPlacementPlanDevicesTest.fp(new long[][]{{100, 100, 100, 100}, {100, 100, 100, 100, 100, 100}});
        long fx = f.fixedTotal() + f.tablesTotal();
        ExpertPlacementPlan p = plan(ExpertPlacement.AUTO, false, budgets(1L << 30, 1L << 30), f);
        assertTrue(p.describe().contains("device 0: experts in ranges that differ by layer, 2..3 resident per layer"), p.describe());
        DeviceMemoryException e = assertThrows(DeviceMemoryException.class,
                () -> plan(ExpertPlacement.MONOLITHIC, false, budgets(1L << 30, fx + 499), f));
        assertTrue(e.getMessage().contains("device 1 (routed experts in ranges that differ by layer) needs"), e.getMessage());
        assertFalse(e.getMessage().contains("of each layer)"), e.getMessage());
        p = plan(ExpertPlacement.AUTO, false, budgets(1L << 30, 1L << 30), ExpertPlacementPlanDevicesTest.uniform(2, 4, 100));
        assertTrue(p.describe().contains("device 1: experts 2..3 of each layer, 2 resident per layer"), p.describe());
        assertTrue(p.owners().toString().contains("device 1: experts 2..3 of each layer, 2 resident per layer"), p.owners().toString());
    }

    /** An explicit budget of Long.MAX_VALUE bytes on every device: every expert fits, no arithmetic wraps. */
    @Test
    void budgetsNearLongMaxHoldEverything() {
        Footprint f = ExpertPlacementPlanDevicesTest.fp(new long[][]{{400, 100, 100}, {400, 100, 100}});
        for (int D = 1; D <= 4; D++)
            for (ExpertPlacement pl : ExpertPlacement.values()) {
                long[] b = new long[D];
                Arrays.fill(b, Long.MAX_VALUE);
                ExpertPlacementPlan p = plan(pl, true, budgets(b), f);
                assertEquals(ExpertPlacement.MONOLITHIC, p.placement(), "D=" + D + " " + pl.key());
                assertEquals(0, p.hostExperts());
                for (DeviceBytes d : p.devices()) assertTrue(d.total() > 0 && d.total() < 10_000, d.toString());
            }
    }

    @Test
    void randomPlansKeepTheirInvariants() {
        Random rnd = new Random(7);
        for (int it = 0; it < 2000; it++) {
            int L = rnd.nextInt(5), E = rnd.nextInt(12), D = 1 + rnd.nextInt(8);
            long[][] eb = new long[L][E];
            for (long[] x : eb) {
                long per = 1 + rnd.nextInt(200);
                Arrays.fill(x, per);
                if (E > 0 && rnd.nextBoolean()) x[0] += rnd.nextInt(500);
            }
            Footprint f = ExpertPlacementPlanDevicesTest.fp(eb);
            long fx = f.fixedTotal() + f.tablesTotal();
            long[] b = new long[D];
            for (int d = 0; d < D; d++) b[d] = fx - 5 + rnd.nextLong(f.residentBytes(f.allResident()) / Math.max(1, D) * 2 + 700);
            ExpertPlacement pl = ExpertPlacement.values()[rnd.nextInt(3)];
            List<Budget> bs = budgets(b);
            ExpertPlacementPlan p;
            try {
                p = plan(pl, rnd.nextBoolean(), bs, f);
            } catch (DeviceMemoryException e) {
                boolean fixedShort = false;
                for (long x : b) fixedShort |= fx > x;
                assertTrue(fixedShort || pl == ExpertPlacement.MONOLITHIC, e.getMessage());
                if (D > 1) {
                    int first = -1;
                    for (int d = 0; d < D && first < 0; d++) if (fx > b[d]) first = d;
                    if (pl != ExpertPlacement.MONOLITHIC) assertTrue(e.getMessage().contains("on device " + first + " "), e.getMessage());
                }
                continue;
            }
            ExpertOwners o = p.owners();
            int host = 0;
            long hostBytes = 0;
            long[] devExperts = new long[D];
            int[] devCount = new int[D];
            for (int l = 0; l < L; l++) {
                for (int e = 0; e < E; e++) {
                    int w = o.owner(l, e);
                    if (w == ExpertOwners.HOST) {
                        host++;
                        hostBytes += f.hostBytes()[l][e];
                    } else {
                        devCount[w]++;
                        // the first expert of a range starting after 0 also uploads expert 0's shared storage
                        devExperts[w] += e == o.rangeStart(l, w) && e > 0 ? Math.max(eb[l][e], eb[l][0]) : eb[l][e];
                    }
                }
            }
            String where = "it " + it + " pl " + pl + " budgets " + Arrays.toString(b) + " fx " + fx + " eb " + Arrays.deepToString(eb) + " devs " + p.devices();
            assertEquals(host, p.hostExperts(), where);
            assertEquals(hostBytes, p.hostBytes(), where);
            assertEquals(host > 0 ? ExpertPlacement.HYBRID : ExpertPlacement.MONOLITHIC, p.placement(), where);
            for (DeviceBytes d : p.devices()) {
                assertEquals(devCount[d.device()], d.residentExperts(), where);
                assertEquals(devExperts[d.device()], d.experts(), where);
                assertTrue(d.total() <= b[d.device()], where);
                assertSame(bs.get(d.device()), d.budget());
                // R or R+1 per layer, and no room left for one more expert in any layer
                int lo = Integer.MAX_VALUE, hi = 0;
                for (int l = 0; l < L; l++) {
                    lo = Math.min(lo, o.resident(l, d.device()));
                    hi = Math.max(hi, o.resident(l, d.device()));
                }
                for (int l = 0; l < L; l++) {
                    int r = o.resident(l, d.device());
                    int start = o.rangeStart(l, d.device()), end = o.rangeEnd(l, d.device());
                    if (pl != ExpertPlacement.MONOLITHIC && start + r < end) {
                        long next = start + r == start && start > 0 ? Math.max(eb[l][start], eb[l][0]) : eb[l][start + r];
                        assertTrue(d.total() + next > b[d.device()] || r > lo, "layer " + l + " could hold one more: " + where);
                    }
                }
                if (L > 0) assertTrue(hi - lo <= 1, where);
            }
        }
    }
}
