package io.ds4j.engine;


import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;

/**
 * Proposals of many requests' drafts at once. Drafts that are {@link SteppedDraft}s sharing a backend run as batched
 * steps: with widths q_i, at most max(q_i) sequential steps, each one {@link Backend#step} over the drafts still
 * proposing (their catch-up steps first, then one token each). Other drafts (n-gram lookup, which needs no model
 * step, or any other source) propose on their own. A draft whose step or proposal fails fails only its call.
 * A draft's proposal is the same as {@link Draft#propose} alone would give, provided the backend's batched step is
 * batch-invariant (as {@link Backend#step} requires).
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
        Result[] out = new Result[calls.size()];
        Map<Backend, List<Integer>> groups = new IdentityHashMap<>();
        for (int i = 0; i < calls.size(); i++) {
            Call c = calls.get(i);
            if (c.draft() instanceof SteppedDraft sd) {
                groups.computeIfAbsent(sd.backend(), b -> new ArrayList<>()).add(i);
            } else {
                try {
                    out[i] = new Result(c.draft().propose(c.ctx(), c.len(), c.q()), null);
                } catch (Throwable t) {
                    out[i] = new Result(null, t);
                }
            }
        }
        for (var g : groups.entrySet()) runGroup(g.getKey(), g.getValue(), calls, out);
        return out;
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

    private static void fail(SteppedDraft d, int i, Throwable t, Result[] out) {
        try {
            d.abandon();
        } catch (Throwable ignored) {
            // the original error is what is reported
        }
        out[i] = new Result(null, t);
    }
}
