package io.ds4j.engine;

import io.ds4j.sampling.Sampler;

import java.util.List;

/**
 * What {@link Backend#stepArgmax} returns per entry of a batch: the full logits of its logit rows, or, for an entry
 * that asked for its greedy tokens only ({@link BatchEntry#argmaxOnly()}), one token id per logit row. Exactly one of
 * {@code logits[i]} and {@code argmax[i]} is non-null per entry.
 *
 * @param logits per entry, its logits [logitRows.length, V] row-major, or null for an argmax-only entry
 * @param argmax per argmax-only entry, per logit row the index of the largest logit among ids [0, argmaxBelow)
 *               (lowest index on ties); null for the other entries
 */
public record StepOutput(float[][] logits, int[][] argmax) {
    public StepOutput {
        if (logits.length != argmax.length) throw new IllegalArgumentException("logits and argmax differ in entries");
    }

    /**
     * The output of a batch from the full logits of every entry (what {@link Backend#step} returns): argmax-only
     * entries get their rows' argmax computed here ({@link Sampler#argmax}, among a row's mask where it has one) and
     * their logits dropped.
     * @param V the vocabulary size (the logits' row length)
     */
    public static StepOutput fromLogits(List<BatchEntry> batch, float[][] logits, int V) {
        int[][] ids = new int[logits.length][];
        float[][] lg = logits.clone();
        for (int i = 0; i < ids.length; i++) {
            BatchEntry e = batch.get(i);
            if (!e.argmaxOnly()) continue;
            int n = Math.min(e.argmaxBelow(), V);
            int[] out = new int[e.logitRows().length];
            long[][] masks = e.argmaxMasks();
            for (int r = 0; r < out.length; r++)
                out[r] = masks == null || masks[r] == null ? Sampler.argmax(lg[i], r * V, n) : Sampler.argmax(lg[i], r * V, n, masks[r]);
            ids[i] = out;
            lg[i] = null;
        }
        return new StepOutput(lg, ids);
    }
}
