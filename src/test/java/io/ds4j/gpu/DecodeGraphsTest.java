package io.ds4j.gpu;

import org.junit.jupiter.api.Test;

import static io.ds4j.gpu.bindings.ds4j_gpu_h.DS4J_TC_MIN_ROWS;
import static org.junit.jupiter.api.Assertions.*;

/** Which steps {@link DecodeGraphs} captures (no GPU needed; the capture itself is tested by HipGraphTest). */
class DecodeGraphsTest {
    @Test
    void decodeAndShortVerifyStepsAreCaptured() {
        int T = DS4J_TC_MIN_ROWS();
        assertTrue(DecodeGraphs.capturable(true, false, 1, false), "decode");
        assertTrue(DecodeGraphs.capturable(true, false, 1, true), "verify of one row");
        assertTrue(DecodeGraphs.capturable(true, false, 17, true), "verify of q+1 = 17 rows");
        assertTrue(DecodeGraphs.capturable(true, false, T - 1, true), "verify below the tensor-core threshold");
    }

    @Test
    void prefillProfilingAndSwitchedOffAreNot() {
        int T = DS4J_TC_MIN_ROWS();
        assertFalse(DecodeGraphs.capturable(true, false, 2, false), "prefill chunk of 2 rows");
        assertFalse(DecodeGraphs.capturable(true, false, T, true), "verify on the tensor-core path");
        assertFalse(DecodeGraphs.capturable(true, true, 1, false), "profile mode waits per operation");
        assertFalse(DecodeGraphs.capturable(false, false, 1, false), "graphs off");
        assertFalse(DecodeGraphs.capturable(true, false, 0, true), "empty step");
    }

    @Test
    void fixedFormBoundsArePowersOfTwoFrom256() {
        assertEquals(256, HipBackend.bound(0));
        assertEquals(256, HipBackend.bound(256));
        assertEquals(512, HipBackend.bound(257));
        assertEquals(1024, HipBackend.bound(1000));
        assertEquals(16384, HipBackend.bound(14983)); // CSA entries at 59,933 tokens (m 4)
        for (long n = 0; n < 5000; n += 37) assertTrue(HipBackend.bound(n) >= n, "bound of " + n);
    }
}
