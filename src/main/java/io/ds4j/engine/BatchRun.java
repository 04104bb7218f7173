package io.ds4j.engine;

import java.util.ArrayList;
import java.util.List;

/**
 * Runs one {@link Backend#step} over a batch so that a bad entry fails only itself. Each entry's arguments are checked
 * first ({@link Backend#checkStep}); an entry that fails the check is left out of the step. When the batched step
 * itself throws, the entries are run again one at a time to find the culprit:
 * <ul>
 *   <li>an entry whose sequence did not advance is stepped alone;</li>
 *   <li>an entry whose sequence advanced by its whole count finished before the failure (a backend that runs the
 *       entries one after another): without wanted logits it is done; with them its tokens are rolled back
 *       ({@link Sequence#rollback}, exact) and it is stepped alone, when the rollback window allows;</li>
 *   <li>a layer slice of a prefill chunk ({@link BatchEntry.Layers}) that is not the chunk's last is done when its
 *       sequence's {@link Sequence#slicedLayers} reached the slice's end, and stepped alone when they did not move;</li>
 *   <li>any other entry (advanced partly, further than its rollback window, or a chunk's last slice with logit rows,
 *       whose streams are gone once it ran) fails with the batch's error, as its state is unknown. The backends run a
 *       step's layer slices before its whole entries, so a failing slice leaves those to be stepped again.</li>
 * </ul>
 * An entry that throws when stepped alone fails with its own error; one that succeeds alone goes on (a fault that does
 * not recur fails nobody). A step of a single entry is not retried: its error is the entry's. Errors of every kind are
 * caught (a step that ran out of memory fails its requests, not the engine).
 */
public final class BatchRun {
    private BatchRun() {}

    /**
     * The outcome per entry: logits where it succeeded, the error where it failed (exactly one of the two is non-null
     * per entry).
     * @param logits   per entry, its logits [logitRows.length, V] row-major, or null when it failed or asked for its
     *                 greedy tokens only
     * @param argmax   per entry that asked for its greedy tokens only ({@link BatchEntry#argmaxOnly()}) and succeeded,
     *                 one token id per logit row ({@link Backend#stepArgmax}); else null
     * @param failures per entry, its error, or null when it succeeded
     * @param isolated true when the batched step failed and the entries were retried one at a time
     */
    public record Outcome(float[][] logits, int[][] argmax, Throwable[] failures, boolean isolated) {
        /** True when entry i succeeded. */
        public boolean ok(int i) {
            return failures[i] == null;
        }
    }

    /**
     * Steps the batch (see the class description for what happens on failure).
     * @param batch entries, each sequence at most once (may be empty: nothing runs)
     */
    public static Outcome run(Backend backend, List<BatchEntry> batch) {
        int n = batch.size();
        float[][] logits = new float[n][];
        int[][] ids = new int[n][];
        Throwable[] failures = new Throwable[n];
        List<BatchEntry> valid = new ArrayList<>(n);
        List<Integer> index = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            BatchEntry e = batch.get(i);
            try {
                Backend.checkStep(backend.config(), e.tokens(), 0, e.count(), e.logitRows());
                Backend.checkArgmax(backend.config(), List.of(e));
                valid.add(e);
                index.add(i);
            } catch (IllegalArgumentException x) {
                failures[i] = x;
            }
        }
        if (valid.isEmpty()) return new Outcome(logits, ids, failures, false);
        int[] before = new int[valid.size()], slicedBefore = new int[valid.size()];
        for (int k = 0; k < before.length; k++) {
            before[k] = valid.get(k).seq().length();
            slicedBefore[k] = valid.get(k).seq().slicedLayers();
        }
        StepOutput out;
        try {
            out = backend.stepArgmax(valid);
        } catch (Throwable batchError) {
            if (valid.size() == 1) {
                // a step of one entry has no one else to blame
                failures[index.getFirst()] = batchError;
                return new Outcome(logits, ids, failures, false);
            }
            for (int k = 0; k < valid.size(); k++) {
                BatchEntry e = valid.get(k);
                int i = index.get(k);
                try {
                    int advanced = e.seq().length() - before[k];
                    int sliced = e.seq().slicedLayers();
                    if (e.layers() != null && !e.layers().last(backend.config().numLayers) && sliced != slicedBefore[k]) {
                        // a slice before the chunk's last ran when its streams are kept up to its end
                        if (sliced != e.layers().to()) failures[i] = batchError;
                        else if (e.argmaxOnly()) ids[i] = new int[0];
                        else logits[i] = new float[0];
                        continue;
                    }
                    if (advanced == e.count() && e.logitRows().length == 0) {
                        if (e.argmaxOnly()) ids[i] = new int[0];
                        else logits[i] = new float[0];
                        continue;
                    }
                    if (advanced == e.count() && e.count() <= e.seq().rollbackable() && e.layers() == null) {
                        e.seq().rollback(e.count());
                    } else if (advanced != 0) {
                        failures[i] = batchError;
                        continue;
                    }
                    StepOutput alone = backend.stepArgmax(List.of(e));
                    logits[i] = alone.logits()[0];
                    ids[i] = alone.argmax()[0];
                } catch (Throwable alone) {
                    failures[i] = alone;
                }
            }
            return new Outcome(logits, ids, failures, true);
        }
        for (int k = 0; k < valid.size(); k++) {
            logits[index.get(k)] = out.logits()[k];
            ids[index.get(k)] = out.argmax()[k];
        }
        return new Outcome(logits, ids, failures, false);
    }
}
