package io.ds4j.engine;

import io.ds4j.sampling.Sampler;
import io.ds4j.sampling.SamplingParams;
import io.ds4j.speculative.DraftSource;
import io.ds4j.speculative.ModelDraftSource;
import io.ds4j.speculative.NgramDraft;
import io.ds4j.engine.VerifyWidth;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

/**
 * Runs a mix of 18 requests alone and then all together through one {@link Scheduler}, for the CPU and GPU batch
 * invariance tests (no test-only libraries, so the device package can run it). The mix: prompt lengths 3..70 (some
 * repeating a phrase), four kinds of drafting (none, n-gram, an unrelated draft model, a copy of the target as draft
 * model), each with a greedy and a seeded sampled request, fixed and adaptive widths, 14..20 new tokens.
 */
public final class BatchInvarianceRuns {
    private BatchInvarianceRuns() {}

    /** One request of the mix: prompt, sampling, draft source (null: plain) and width. */
    public record Req(int[] prompt, SamplingParams params, DraftSource draft, String width) {
        public String label() {
            return (params.isGreedy() ? "greedy" : "sampled") + ", draft " + (draft == null ? "none" : draft.name()) + ", q " + width
                    + ", prompt " + prompt.length;
        }
    }

    /**
     * What the runs gave.
     * @param requests     the mix
     * @param alone        per request, its tokens stepped alone
     * @param batched      per request, its tokens in the batched run
     * @param plain        per request, the tokens of the same prompt and settings without a draft, stepped alone
     * @param widest       most entries in one batched target step
     * @param mixedKinds   batched target steps that held prefill, decode and verify entries at once
     * @param widestDraft  most entries in one draft-model step (the unrelated draft)
     * @param ticks        ticks of the batched run
     * @param aloneSteps   target steps of the runs alone
     * @param maxPrefill   most prefill tokens in one tick
     * @param failures     failures reported by the scheduler (should be none)
     * @param allReleased  every target sequence was closed at the end
     */
    public record Report(List<Req> requests, List<int[]> alone, List<int[]> batched, List<int[]> plain, int widest,
                         int mixedKinds, int widestDraft, int ticks, int aloneSteps, int maxPrefill, List<String> failures,
                         boolean allReleased) {}

    /** The mix for a vocabulary of V tokens. */
    public static List<Req> mix(int V, DraftSource otherDraft, DraftSource sameDraft) {
        SplittableRandom rnd = new SplittableRandom(5);
        List<Req> out = new ArrayList<>();
        for (int i = 0; i < 18; i++) {
            int n = 3 + (i * 37) % 68;
            int[] p = new int[n];
            for (int j = 0; j < n; j++) p[j] = i % 3 == 0 && j >= 4 ? p[j - 4] : rnd.nextInt(V); // some repeat a phrase
            int max = 14 + i % 7;
            SamplingParams sp = i % 2 == 0 ? SamplingParams.greedy(max) : SamplingParams.sampled(0.9, 0, 0.95, 0, 1000 + i, max);
            DraftSource d = switch ((i / 2) % 4) { // each kind with a greedy and a sampled request
                case 0 -> null;
                case 1 -> NgramDraft.source();
                case 2 -> otherDraft;
                default -> sameDraft;
            };
            out.add(new Req(p, sp, d, i % 5 == 0 ? "auto" : Integer.toString(1 + i % 4)));
        }
        return out;
    }

    /** A generation of a request on the given target (rollback window 16, context 4096), collecting its tokens. */
    public static Generation open(Backend target, Req r, int chunk, List<Integer> out) {
        Sampler s = new Sampler(r.params(), target.config().vocabSize, r.prompt());
        return new Generation(target, target.newSequence(16), r.prompt(), s,
                r.draft() == null ? null : r.draft().open(r.prompt(), r.params(), 99),
                r.draft() == null ? null : VerifyWidth.parse(r.width()),
                new Generation.Options(chunk, 4096, new int[]{-1}, 16), (t, lp) -> { out.add(t); return true; });
    }

    static int[] tokens(List<Integer> l) {
        return l.stream().mapToInt(Integer::intValue).toArray();
    }

    /**
     * Runs the mix alone and batched (prefill chunk 8, token budget 64, max batch rows 256).
     * @param targetBackend the target
     * @param otherBackend  an unrelated draft model (same vocabulary)
     * @param sameBackend   a second copy of the target, as draft model
     */
    public static Report run(Backend targetBackend, Backend otherBackend, Backend sameBackend) {
        TrackingBackend target = new TrackingBackend(targetBackend), draftOther = new TrackingBackend(otherBackend),
                draftSame = new TrackingBackend(sameBackend);
        DraftSource other = new ModelDraftSource(draftOther, "model:other", 16), same = new ModelDraftSource(draftSame, "model:same", 16);
        List<Req> reqs = mix(target.config().vocabSize, other, same);
        int chunk = 8;
        List<int[]> alone = new ArrayList<>(), plain = new ArrayList<>();
        for (Req r : reqs) {
            List<Integer> out = new ArrayList<>();
            Generation g = open(target, r, chunk, out);
            while (g.step()) { }
            alone.add(tokens(out));
        }
        int aloneSteps = target.steps.size();
        for (Req r : reqs) {
            List<Integer> out = new ArrayList<>();
            Generation g = open(targetBackend, new Req(r.prompt(), r.params(), null, r.width()), chunk, out);
            while (g.step()) { }
            plain.add(tokens(out));
        }
        target.steps.clear();
        draftOther.steps.clear();
        Scheduler<Integer> sch = new Scheduler<>(target, new Scheduler.Limits(256, 64));
        List<List<Integer>> outs = new ArrayList<>();
        for (int i = 0; i < reqs.size(); i++) {
            List<Integer> out = new ArrayList<>();
            outs.add(out);
            sch.add(i, open(target, reqs.get(i), Scheduler.prefillChunk(chunk, sch.limits()), out));
        }
        int ticks = 0, maxPrefill = 0;
        List<String> failures = new ArrayList<>();
        while (!sch.isEmpty() && ticks < 10_000) {
            Scheduler.Tick<Integer> t = sch.tick();
            t.failed().forEach((k, e) -> failures.add("request " + k + ": " + e));
            maxPrefill = Math.max(maxPrefill, t.prefillTokens());
            ticks++;
        }
        List<int[]> batched = new ArrayList<>();
        for (List<Integer> o : outs) batched.add(tokens(o));
        int widest = target.steps.stream().mapToInt(List::size).max().orElse(0);
        int mixed = (int) target.steps.stream().filter(k -> k.contains(StepKind.VERIFY) && k.contains(StepKind.DECODE)
                && k.contains(StepKind.PREFILL)).count();
        int widestDraft = draftOther.steps.stream().mapToInt(List::size).max().orElse(0);
        boolean released = target.sequences.stream().allMatch(s -> s.closed);
        return new Report(reqs, alone, batched, plain, widest, mixed, widestDraft, ticks, aloneSteps, maxPrefill, failures, released);
    }
}
