package io.ds4j.engine;


import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.IntConsumer;

/**
 * Proposals of many requests' drafts at once. Drafts that are {@link SteppedDraft}s sharing a backend run as batched
 * steps: with widths q_i, at most max(q_i) sequential steps, each one {@link Backend#step} over the drafts still
 * proposing (their catch-up steps first, then one token each). Drafts that are {@link SteppedMtpDraft}s sharing an MTP
 * head run the same way, one {@link MtpHead#step} per draft position over the drafts still proposing (their starts
 * first, then one chained step each). Other drafts (n-gram lookup, which needs no model step, or any other source)
 * propose on their own. A draft whose step or proposal fails fails only its call (a batched MTP step that throws is
 * retried one draft at a time to find the culprit). A draft's proposal is the same as {@link Draft#propose} alone
 * would give, provided the batched step is batch-invariant (as {@link Backend#step} and {@link MtpHead#step} require).
 */
public final class DraftBatch {
    private DraftBatch() {}

    /** One draft's request: up to q ≥ 1 tokens continuing ctx[0 .. len). */
    public record Call(Draft draft, int[] ctx, int len, int q) {}

    /**
     * A call's result: its proposal, or the error that ended it (exactly one non-null).
     */
    public record Result(Draft.Proposal proposal, Throwable failure) {}

    /**
     * Runs every call (each draft at most once).
     * @return per call, in order, its result
     */
    public static Result[] proposeAll(List<Call> calls) {
        return proposeAll(calls, n -> {});
    }

    /**
     * Runs every call (each draft at most once), reporting each batched MTP step.
     * @param mtpSteps told, for every {@link MtpHead#step} run, how many drafts it held
     * @return per call, in order, its result
     */
    public static Result[] proposeAll(List<Call> calls, IntConsumer mtpSteps) {
        Result[] out = new Result[calls.size()];
        Map<Backend, List<Integer>> groups = new IdentityHashMap<>();
        Map<MtpHead, List<Integer>> mtpGroups = new IdentityHashMap<>();
        for (int i = 0; i < calls.size(); i++) {
            Call c = calls.get(i);
            if (c.draft() instanceof SteppedDraft sd) {
                groups.computeIfAbsent(sd.backend(), b -> new ArrayList<>()).add(i);
            } else if (c.draft() instanceof SteppedMtpDraft md) {
                mtpGroups.computeIfAbsent(md.head(), h -> new ArrayList<>()).add(i);
            } else {
                try {
                    out[i] = new Result(c.draft().propose(c.ctx(), c.len(), c.q()), null);
                } catch (Throwable t) {
                    out[i] = new Result(null, t);
                }
            }
        }
        for (var g : groups.entrySet()) runGroup(g.getKey(), g.getValue(), calls, out);
        for (var g : mtpGroups.entrySet()) runMtpGroup(g.getKey(), g.getValue(), calls, out, mtpSteps);
        return out;
    }

    private static void runMtpGroup(MtpHead head, List<Integer> members, List<Call> calls, Result[] out, IntConsumer mtpSteps) {
        List<Integer> live = new ArrayList<>();
        List<MtpHead.Step> steps = new ArrayList<>();
        for (int i : members) {
            Call c = calls.get(i);
            SteppedMtpDraft d = (SteppedMtpDraft) c.draft();
            try {
                MtpHead.Step s = d.begin(c.ctx(), c.len(), c.q());
                if (s == null) {
                    out[i] = new Result(d.proposal(), null);
                } else {
                    steps.add(s);
                    live.add(i);
                }
            } catch (Throwable t) {
                fail(d, i, t, out);
            }
        }
        while (!live.isEmpty()) {
            mtpSteps.accept(steps.size());
            float[][] logits = new float[steps.size()][];
            Throwable[] failures = new Throwable[steps.size()];
            runMtp(head, steps, logits, failures);
            List<Integer> nextLive = new ArrayList<>();
            List<MtpHead.Step> nextSteps = new ArrayList<>();
            for (int k = 0; k < live.size(); k++) {
                int i = live.get(k);
                SteppedMtpDraft d = (SteppedMtpDraft) calls.get(i).draft();
                if (failures[k] != null) {
                    fail(d, i, failures[k], out);
                    continue;
                }
                try {
                    MtpHead.Step s = d.advance(logits[k]);
                    if (s == null) {
                        out[i] = new Result(d.proposal(), null);
                    } else {
                        nextLive.add(i);
                        nextSteps.add(s);
                    }
                } catch (Throwable t) {
                    fail(d, i, t, out);
                }
            }
            live = nextLive;
            steps = nextSteps;
        }
    }

    /**
     * One batched MTP step; when it throws, each step again alone (a step the head refused changed no state, so
     * running it alone repeats exactly what it would have done), so that only the culprit fails.
     */
    private static void runMtp(MtpHead head, List<MtpHead.Step> steps, float[][] logits, Throwable[] failures) {
        try {
            float[][] got = head.step(steps);
            System.arraycopy(got, 0, logits, 0, got.length);
            return;
        } catch (Throwable batchError) {
            if (steps.size() == 1) {
                failures[0] = batchError;
                return;
            }
        }
        for (int k = 0; k < steps.size(); k++) {
            try {
                logits[k] = head.step(List.of(steps.get(k)))[0];
            } catch (Throwable alone) {
                failures[k] = alone;
            }
        }
    }

    private static void runGroup(Backend backend, List<Integer> members, List<Call> calls, Result[] out) {
        List<Integer> live = new ArrayList<>();
        List<BatchEntry> entries = new ArrayList<>();
        for (int i : members) {
            Call c = calls.get(i);
            SteppedDraft d = (SteppedDraft) c.draft();
            try {
                entries.add(d.begin(c.ctx(), c.len(), c.q()));
                live.add(i);
            } catch (Throwable t) {
                fail(d, i, t, out);
            }
        }
        while (!live.isEmpty()) {
            BatchRun.Outcome o = BatchRun.run(backend, entries);
            List<Integer> nextLive = new ArrayList<>();
            List<BatchEntry> nextEntries = new ArrayList<>();
            for (int k = 0; k < live.size(); k++) {
                int i = live.get(k);
                SteppedDraft d = (SteppedDraft) calls.get(i).draft();
                if (!o.ok(k)) {
                    fail(d, i, o.failures()[k], out);
                    continue;
                }
                try {
                    BatchEntry e = d.advance(o.logits()[k]);
                    if (e == null) {
                        out[i] = new Result(d.proposal(), null);
                    } else {
                        nextLive.add(i);
                        nextEntries.add(e);
                    }
                } catch (Throwable t) {
                    fail(d, i, t, out);
                }
            }
            live = nextLive;
            entries = nextEntries;
        }
    }

    private static void fail(SteppedMtpDraft d, int i, Throwable t, Result[] out) {
        try {
            d.abandon();
        } catch (Throwable ignored) {
            // the original error is what is reported
        }
        out[i] = new Result(null, t);
    }

    private static void fail(SteppedDraft d, int i, Throwable t, Result[] out) {
        try {
            d.abandon();
        } catch (Throwable ignored) {
            // the original error is what is reported
        }
        out[i] = new Result(null, t);
    }
}
