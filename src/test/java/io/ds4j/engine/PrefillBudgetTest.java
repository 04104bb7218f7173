package io.ds4j.engine;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The scheduler's latency policy for prefill on its own, fed measured tick durations of a made-up cost (no model, no
 * clock): the full budget without decodes or with the policy off, a probe before decode-only time is known, the
 * floor before prefill cost is known and whenever the bound allows less, the ceiling, the stretch bound holding tick
 * after tick in a world of affine costs, re-probes as the decode load changes or the measurement ages, and the
 * per-pass cost line that tells a floor-sized chunk from one layer of a long chunk.
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

    /**
     * The first step of a new batch shape captures its step graph on the GPU (about 20 ms on top of a 23 ms step at
     * 16 streams, BENCHMARKS.md): such ticks, one per shape as streams end at a round's close, must not raise the
     * decode-only prediction, which sets every later prefill tick's bound; nor may slow repeats of one shape; a lasting
     * change moves it within a few ticks.
     */
    @Test
    void slowDecodeOnlyTicksDoNotRaiseThePrediction() {
        PrefillBudget b = new PrefillBudget();
        for (int i = 0; i < 3; i++) b.observe(16, 16, 0, ms(23.5));
        b.observe(14, 14, 0, ms(49.1));
        b.observe(13, 13, 0, ms(52.1));
        b.observe(12, 12, 0, ms(41.0));
        assertEquals(23.5, b.decodeMs(), 1e-9, "each tick the first of its shape: not measured");
        b.observe(12, 12, 0, ms(21.0));
        assertEquals(23.5, b.decodeMs(), 1e-9, "a repeat is measured: the second fastest of 23.5, 23.5, 23.5, 21");
        b.observe(16, 16, 0, ms(60));
        b.observe(16, 16, 0, ms(45));
        assertEquals(23.5, b.decodeMs(), 1e-9, "the new shape's slow first tick not measured, its slow repeat measured");
        for (int i = 0; i < 4; i++) b.observe(16, 16, 0, ms(30));
        assertEquals(30, b.decodeMs(), 1e-9, "four of the last five at 30 ms");
        // verify rows swing from tick to tick without a new shape: each tick is measured
        PrefillBudget v = new PrefillBudget();
        for (int rows : new int[]{20, 23, 17, 25, 21}) v.observe(rows, 5, 0, ms(rows));
        assertEquals(20, v.decodeMs(), 1e-9, "the second fastest of 20, 23, 17, 25, 21");
    }

    /**
     * A probe that lands on a new shape is not measured: the next probe comes after one prefill tick, not at once, and
     * is measured whatever its shape, so that shapes changing at every probe cannot keep the decode-only time stale.
     */
    @Test
    void aProbeOnANewShapeIsRepeatedAfterOnePrefillTickAndThenMeasured() {
        PrefillBudget b = new PrefillBudget();
        b.observe(16, 16, 0, ms(23));
        int entries = 16;
        for (int round = 0; round < 3; round++) {
            for (int i = 0; i < PrefillBudget.PROBE_EVERY; i++) b.observe(16, entries, 10, ms(24));
            assertEquals(PrefillBudget.Reason.PROBE, b.decide(LIMITS, 16).reason(), "round " + round);
            b.observe(16, --entries, 0, ms(45)); // a stream ended: a new shape, its graph captured
            assertEquals(round == 0 ? 23 : 20, b.decodeMs(), 1e-9, "round " + round + ": a new shape's tick not measured");
            PrefillBudget.Decision d = b.decide(LIMITS, 16);
            assertNotEquals(PrefillBudget.Reason.PROBE, d.reason(), "round " + round + ": the prompt progresses between probes");
            b.observe(16, entries, d.tokens(), ms(24));
            assertEquals(PrefillBudget.Reason.PROBE, b.decide(LIMITS, 16).reason(), "round " + round + ": probed again");
            b.observe(16, --entries, 0, ms(20)); // another stream ended: a new shape again, measured all the same
            assertEquals(20, b.decodeMs(), 1e-9, "round " + round + ": the second probe measured");
        }
    }

    /**
     * A tick in which the backend did one-off work (a step graph captured, the workspace reallocated) is not learned
     * from: neither as the first decode-only time, nor on a new load (the first tick of a round at 16 streams, whose
     * capture would set a bound of 1.6 x 45 ms until the next probe 64 ticks later), nor as prefill cost; such a probe
     * is repeated, and its repeat measured.
     */
    @Test
    void ticksWithOneOffWorkAreNotLearnedFrom() {
        PrefillBudget b = new PrefillBudget();
        b.observe(1, 1, 0, ms(60), true);
        assertTrue(Double.isNaN(b.decodeMs()), "the first probe captured its graph: " + b.decodeMs());
        assertEquals(PrefillBudget.Reason.PROBE, b.decide(LIMITS, 1).reason(), "probed again at once");
        b.observe(1, 1, 0, ms(14));
        assertEquals(14, b.decodeMs(), 1e-9);
        b.observe(1, 1, 64, ms(14 + 64 * 0.2));
        b.observe(1, 1, 64, ms(300), true); // the workspace reallocated for a longer chunk
        assertEquals(0.2, b.msPerToken(), 1e-9, "the reallocating tick's prefill cost not learned");
        assertEquals(PrefillBudget.Reason.PROBE, b.decide(LIMITS, 16).reason(), "a new load");
        b.observe(16, 16, 0, ms(45), true);
        assertEquals(14, b.decodeMs(), 1e-9, "the new load's capture is not its decode time");
        assertEquals(PrefillBudget.Reason.PROBE, b.decide(LIMITS, 16).reason(), "the load is still unmeasured: probe again");
        b.observe(16, 16, 0, ms(24));
        assertEquals(24, b.decodeMs(), 1e-9, "the repeat measured, replacing the old load's time");
        for (int i = 0; i < PrefillBudget.PROBE_EVERY; i++) b.observe(16, 16, 10, ms(26));
        assertEquals(PrefillBudget.Reason.PROBE, b.decide(LIMITS, 16).reason());
        b.observe(16, 16, 0, ms(50), true); // same shape, one-off work all the same: not measured, probed after one tick
        assertEquals(24, b.decodeMs(), 1e-9);
        assertNotEquals(PrefillBudget.Reason.PROBE, b.decide(LIMITS, 16).reason(), "the prompt progresses between probes");
        b.observe(16, 16, 10, ms(26));
        assertEquals(PrefillBudget.Reason.PROBE, b.decide(LIMITS, 16).reason(), "probed again");
        b.observe(16, 16, 0, ms(23));
        assertEquals(23, b.decodeMs(), 1e-9, "the faster of two: 24, 23");
    }

    /**
     * A backend whose one-off work does not stop (every decode-only step captures a graph: speculative streams' verify
     * widths give more batch shapes than the GPU keeps graphs for): were every such probe left unmeasured, decodeMs
     * would stay unknown and every tick would be a probe (a waiting prompt never prefilled while streams run), or,
     * once known, stay at a stale time with every other tick a probe. A probe is left unmeasured for one-off work at
     * most twice in a row.
     */
    @Test
    void oneOffWorkInEveryProbeNeitherStarvesThePromptNorKeepsDecodeMsStale() {
        PrefillBudget b = new PrefillBudget();
        int prefillTicks = 0;
        for (int i = 0; i < 100; i++) {
            if (b.decide(LIMITS, 16).tokens() == 0) b.observe(16, 16, 0, ms(20), true);
            else {
                prefillTicks++;
                b.observe(16, 16, 64, ms(20 + 64 * 0.1));
            }
        }
        assertTrue(prefillTicks > 50, "the prompt prefilled in " + prefillTicks + " of 100 ticks; decodeMs " + b.decodeMs());
        // the decode load grows within 2x + 8 rows: 40 ms where 20 were measured, every probe with one-off work
        int probes = 0;
        for (int i = 0; i < 2000; i++) {
            if (b.decide(LIMITS, 30).tokens() == 0) {
                probes++;
                b.observe(30, 30, 0, ms(40), true);
            } else b.observe(30, 30, 64, ms(40 + 64 * 0.1));
        }
        assertTrue(b.decodeMs() > 30, "decodeMs still " + b.decodeMs() + " ms after " + probes
                + " probes of 40 ms, none measured");
    }

    @Test
    void aTickFasterThanTheDecodeMeanCountsItsPrefillAsNearlyFree() {
        PrefillBudget b = new PrefillBudget();
        b.observe(16, 0, ms(50));
        b.observe(16, 64, ms(45));
        assertTrue(b.msPerToken() > 0 && b.msPerToken() < 1e-3, "" + b.msPerToken());
        assertEquals(PrefillBudget.Reason.CEILING, b.decide(LIMITS, 16).reason());
    }

    /**
     * A tick beside 16 decode rows (50 ms alone) whose prefill made {@code passes} passes over the layers with
     * {@code work} tokens' work, costing {@code passMs} a pass and {@code tokenMs} a token (floor 64).
     */
    static void prefillTick(PrefillBudget b, double work, double passes, double passMs, double tokenMs) {
        b.observe(16, 16, work, passes, 64, ms(50 + passes * passMs + work * tokenMs), false);
    }

    /**
     * The line's two ends measured under different floors, the long end's passes shorter than the short end's (the
     * floor lowered from 64 to 8 between them): still two points of the line, which it goes through.
     */
    @Test
    void theLineGoesThroughItsEndsWhenTheFloorMovedBetweenThem() {
        PrefillBudget b = new PrefillBudget();
        b.observe(16, 0, ms(50));
        b.observe(16, 16, 100, 1, 64, ms(50 + 20 + 100 * 0.1), false);  // short end under floor 64 (100 < 128 tokens)
        b.observe(16, 16, 40, 1, 8, ms(50 + 20 + 40 * 0.1), false);     // long end under floor 8 (40 >= 16 tokens)
        assertEquals(20, b.passMs(), 1e-6);
        assertEquals(0.1, b.tokenMs(), 1e-6);
    }

    /**
     * A budget that measured 50 ms decode-only ticks, then a floor-sized whole chunk (64 tokens, one pass) and one layer
     * of five of a 512-token chunk beside them, each costing passMs a pass and tokenMs a token.
     */
    static PrefillBudget floorChunkAndSliceMeasured(double passMs, double tokenMs) {
        PrefillBudget b = new PrefillBudget();
        b.observe(16, 0, ms(50));
        prefillTick(b, 64, 1, passMs, tokenMs);
        prefillTick(b, 512 / 5.0, 0.2, passMs, tokenMs);
        return b;
    }

    /**
     * The per-pass cost line from a floor-sized whole chunk (64 tokens, one pass) and one layer of five of a 512-token
     * chunk (a fifth of a pass, 102.4 tokens' work): it tells a pass's cost from a token's, which a cost per token
     * cannot. CPU-like (0.5 ms a token, nothing a pass): the floor chunk (32 ms) is cheaper than the slice (51.2 ms).
     * GPU-like (30 ms a pass, 0.05 ms a token): the slice (11.1 ms) is cheaper than the floor chunk (33.2 ms), although
     * it holds more tokens' work.
     */
    @Test
    void thePerPassCostLineTellsWhetherAFloorChunkOrOneLayerOfAChunkIsCheaper() {
        PrefillBudget cpu = floorChunkAndSliceMeasured(0, 0.5);
        assertEquals(0, cpu.passMs(), 1e-6);
        assertEquals(0.5, cpu.tokenMs(), 1e-6);
        assertTrue(cpu.wholeCheaper(64, 512, 5, 64), "CPU-like: the floor chunk");
        assertFalse(cpu.wholeCheaper(64, 256, 5, 64), "one layer of a chunk of at most 5 floors costs no more");
        assertEquals(cpu.decide(LIMITS, 16).passMs(), cpu.passMs(), "the decision carries the line (the step log shows it)");

        PrefillBudget gpu = floorChunkAndSliceMeasured(30, 0.05);
        assertEquals(30, gpu.passMs(), 1e-6);
        assertEquals(0.05, gpu.tokenMs(), 1e-6);
        assertFalse(gpu.wholeCheaper(64, 512, 5, 64), "GPU-like: the slice");
        // the same ticks' cost per token, for contrast: the slice's 102.4 tokens are predicted dearer than 64
        assertTrue(102.4 * gpu.msPerToken() > 64 * gpu.msPerToken());
    }

    /**
     * With one end of the line measured, what every line through it allows decides where it can; else the option that
     * measures the missing end runs. Without any end (or with only ticks without decode rows): the slice.
     */
    @Test
    void withOneEndOfTheLineTheOptionThatMeasuresTheOtherRuns() {
        PrefillBudget b = new PrefillBudget();
        b.observe(0, 0, 64, 1, 64, ms(40), false); // without decode rows: not learned from
        assertTrue(Double.isNaN(b.passMs()));
        assertFalse(b.wholeCheaper(64, 512, 5, 64), "nothing measured: the slice");
        b.observe(16, 0, ms(50));
        prefillTick(b, 64, 1, 0, 0.5); // the short end
        assertTrue(Double.isNaN(b.passMs()), "one end: no line yet");
        assertFalse(b.wholeCheaper(64, 512, 5, 64), "the slice measures the long end");
        assertFalse(b.wholeCheaper(64, 320, 5, 64), "one layer of 5 floors never costs more than the floor");
        assertTrue(b.wholeCheaper(64, 512, 1, 64), "one layer of a one-layer model is its whole chunk");
        prefillTick(b, 512 / 5.0, 0.2, 0, 0.5);
        assertTrue(b.wholeCheaper(64, 512, 5, 64), "both ends: the line says the floor chunk");

        PrefillBudget g = new PrefillBudget();
        g.observe(16, 0, ms(50));
        prefillTick(g, 512 / 5.0, 0.2, 30, 0.05); // a slice: the long end
        assertFalse(g.wholeCheaper(64, 512, 43, 64), "one layer of 43 holds fewer tokens than the floor: the slice");
        assertTrue(g.wholeCheaper(64, 512, 5, 64), "the floor chunk measures the short end");
        prefillTick(g, 64, 1, 30, 0.05);
        assertFalse(g.wholeCheaper(64, 512, 5, 64), "both ends: the line says the slice");
    }

    /**
     * One layer of a one-layer model is its whole chunk: the floor-sized chunk never costs more, whatever the line, so
     * it is cut before anything is measured too (it ran whole: the slice was the default).
     */
    @Test
    void aOneLayerModelsChunkIsCutToTheFloorBeforeTheLineIsMeasured() {
        PrefillBudget b = new PrefillBudget();
        assertTrue(b.wholeCheaper(64, 512, 1, 64), "one layer: the floor chunk");
        assertFalse(b.wholeCheaper(64, 512, 5, 64), "five layers, nothing measured: the slice");
        assertFalse(b.wholeCheaper(64, 64, 1, 64), "no cut: the same chunk");
    }

    /**
     * One slow tick at an end that its kind of tick rarely revisits (the first step beside decode rows after a start
     * took 824 ms where its like took 23 on the CPU) does not hold the line: an end is the median of its last ticks.
     */
    @Test
    void aSlowTickDoesNotHoldAnEndOfTheLine() {
        PrefillBudget b = new PrefillBudget();
        b.observe(16, 0, ms(50));
        prefillTick(b, 64, 1, 800, 0.5); // 800 ms more than its like
        prefillTick(b, 512 / 5.0, 0.2, 0, 0.5);
        prefillTick(b, 64, 1, 0, 0.5);
        assertTrue(b.wholeCheaper(64, 512, 5, 64), "the floor chunk, by its tick like the others (line: "
                + b.passMs() + " ms a pass, " + b.tokenMs() + " a token)");
        assertEquals(0, b.passMs(), 1e-6);
    }

    /** The step log and the metric name a reason alike (the log said NO_DECODES where the metric said no_decodes). */
    @Test
    void aReasonsLabelIsTheMetricsTag() {
        assertEquals("no_decodes", PrefillBudget.Reason.NO_DECODES.label());
        for (PrefillBudget.Reason r : PrefillBudget.Reason.values())
            assertTrue(r.label().matches("[a-z_]+"), r.label());
    }
}
