package io.ds4j.gpu;

import io.ds4j.engine.BackendOptions.ExpertPlacement;
import io.ds4j.gpu.ExpertPlacementPlan.Budget;
import io.ds4j.gpu.ExpertPlacementPlan.Footprint;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import static io.ds4j.gpu.ExpertPlacementPlan.plan;
import static org.junit.jupiter.api.Assertions.*;

/** Edges of the placement over several devices, without a GPU: ranges that differ by layer in the messages. */
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
}
