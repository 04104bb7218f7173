package io.ds4j.engine;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The scheduler's latency policy for prefill on its own, fed measured tick durations of a made-up cost (no model, no
 * clock): the full budget without decodes or with the policy off, a probe before decode-only time is known, the
 * floor before prefill cost is known and whenever the bound allows less, the ceiling, the stretch bound holding tick
 * after tick in a world of affine costs, re-probes as the decode load changes or the measurement ages.
 */
class PrefillBudgetTest {
    static final Scheduler.Limits LIMITS = new Scheduler.Limits(256, 512, 1.6, 64);

    static long ms(double v) {
        return (long) (v * 1e6);
    }

    @Test
    void withoutDecodesOrWithThePolicyOffPrefillGetsTheWholeBudget() {
        PrefillBudget b = new PrefillBudget();
        PrefillBudget.Decision d = b.decide(LIMITS, 0);
        assertEquals(512, d.tokens());
        assertEquals(PrefillBudget.Reason.NO_DECODES, d.reason());
        assertFalse(d.bounded());
        d = b.decide(new Scheduler.Limits(256, 512), 16);
        assertEquals(512, d.tokens());
        assertEquals(PrefillBudget.Reason.OFF, d.reason());
    }

    @Test
    void aProbeFirstThenTheFloorThenTheStretchBound() {
        PrefillBudget b = new PrefillBudget();
        PrefillBudget.Decision d = b.decide(LIMITS, 16);
        assertEquals(0, d.tokens(), "no decode-only time known: this tick measures it");
        assertEquals(PrefillBudget.Reason.PROBE, d.reason());
        b.observe(16, 0, ms(50));
        d = b.decide(LIMITS, 16);
        assertEquals(PrefillBudget.Reason.NO_DATA, d.reason());
        assertEquals(64, d.tokens(), "no prefill cost known: the floor");
        b.observe(16, 64, ms(50 + 64 * 0.25)); // 0.25 ms per prefill token
        assertEquals(0.25, b.msPerToken(), 1e-9);
        d = b.decide(LIMITS, 16);
        assertEquals(PrefillBudget.Reason.STRETCH, d.reason());
        assertEquals(120, d.tokens(), "0.6 * 50 ms / 0.25 ms per token");
        assertTrue(d.bounded());
        assertTrue(d.predictedMs(d.tokens()) <= 1.6 * 50 + 1e-9, "predicted " + d.predictedMs(d.tokens()));
    }

    @Test
    void theFloorHoldsWhenTheBoundAllowsLessAndTheCeilingWhenItAllowsMore() {
        PrefillBudget b = new PrefillBudget();
        b.observe(16, 0, ms(50));
        b.observe(16, 64, ms(50 + 64 * 5.0)); // 5 ms per token: the bound would allow 6 tokens
        PrefillBudget.Decision d = b.decide(LIMITS, 16);
        assertEquals(PrefillBudget.Reason.FLOOR, d.reason());
        assertEquals(64, d.tokens());
        // the floor is at most the token budget
        assertEquals(32, b.decide(new Scheduler.Limits(256, 32, 1.6, 64), 16).tokens());
        PrefillBudget c = new PrefillBudget();
        c.observe(16, 0, ms(50));
        c.observe(16, 512, ms(50 + 512 * 0.01)); // nearly free prefill
        d = c.decide(LIMITS, 16);
        assertEquals(PrefillBudget.Reason.CEILING, d.reason());
        assertEquals(512, d.tokens());
    }

    /**
     * Ticks cost 30 ms + 1.5 ms per decode row, a prefill chunk 6 ms + 0.1 ms per token (a fixed part the per-token
     * mean has to learn around): fed back tick after tick, every tick with prefill stays within 1.6x the tick without
     * it, the chunks grow to nearly the largest that fits, and the prompt progresses in every tick but the probes.
     */
    @Test
    void theStretchBoundHoldsTickAfterTickUnderAffineCosts() {
        PrefillBudget b = new PrefillBudget();
        int rows = 16;
        double decode = 30 + 1.5 * rows;
        int last = 0, probes = 0, prefilled = 0;
        for (int tick = 0; tick < 400; tick++) {
            PrefillBudget.Decision d = b.decide(LIMITS, rows);
            int n = d.tokens();
            if (n == 0) probes++;
            double t = decode + (n > 0 ? 6 + 0.1 * n : 0);
            if (n > 0 && d.reason() != PrefillBudget.Reason.NO_DATA)
                assertTrue(t <= 1.6 * decode + 1e-9, "tick " + tick + ": " + t + " ms with " + n + " prefill tokens vs " + decode);
            b.observe(rows, n, ms(t));
            last = n;
            prefilled += n;
        }
        int best = (int) ((0.6 * decode - 6) / 0.1); // the largest chunk within the bound
        assertTrue(last >= best - 2 && last <= best, "converged to " + last + ", best " + best);
        assertTrue(probes >= 400 / (PrefillBudget.PROBE_EVERY + 1) && probes <= 400 / PrefillBudget.PROBE_EVERY + 1,
                "a probe every " + PrefillBudget.PROBE_EVERY + " prefill ticks: " + probes);
        assertTrue(prefilled > 390 * 64, "the prompt progressed: " + prefilled);
    }

    @Test
    void aChangedDecodeLoadIsMeasuredAgain() {
        PrefillBudget b = new PrefillBudget();
        b.observe(4, 0, ms(20));
        b.observe(4, 64, ms(20 + 64 * 0.1));
        assertEquals(PrefillBudget.Reason.STRETCH, b.decide(LIMITS, 6).reason(), "a verify width's swing is no new load");
        assertEquals(PrefillBudget.Reason.PROBE, b.decide(LIMITS, 40).reason(), "ten times the rows: measure again");
        b.observe(40, 0, ms(60));
        assertEquals(60, b.decodeMs(), 1e-9, "the new load's time replaces the old mean");
        PrefillBudget.Decision d = b.decide(LIMITS, 40);
        assertEquals(PrefillBudget.Reason.STRETCH, d.reason());
        assertEquals((int) (0.6 * 60 / 0.1), d.tokens());
    }

    @Test
    void aTickFasterThanTheDecodeMeanCountsItsPrefillAsNearlyFree() {
        PrefillBudget b = new PrefillBudget();
        b.observe(16, 0, ms(50));
        b.observe(16, 64, ms(45));
        assertTrue(b.msPerToken() > 0 && b.msPerToken() < 1e-3, "" + b.msPerToken());
        assertEquals(PrefillBudget.Reason.CEILING, b.decide(LIMITS, 16).reason());
    }
}
