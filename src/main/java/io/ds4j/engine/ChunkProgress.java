package io.ds4j.engine;

/**
 * How far a sequence's prefill chunk has got through the layers when it runs in layer slices
 * ({@link BatchEntry.Layers}): its tokens and the next layer to run, or none. A backend's sequence keeps one (the
 * chunk's streams themselves stay with the backend) and answers {@link Sequence#slicedLayers} and
 * {@link Sequence#slicedRows} from it. Not thread-safe: owned with its sequence.
 */
public final class ChunkProgress {
    private int rows, next;

    /** The next layer of the part-way chunk; 0 when none ({@link Sequence#slicedLayers}). */
    public int layers() {
        return next;
    }

    /** The part-way chunk's tokens; 0 when none ({@link Sequence#slicedRows}). */
    public int rows() {
        return next > 0 ? rows : 0;
    }

    /**
     * A slice of a chunk of {@code rows} tokens ran up to layer {@code next} (exclusive), before the chunk's last.
     * @throws IllegalArgumentException when either is below 1
     */
    public void ranTo(int rows, int next) {
        if (rows < 1 || next < 1) throw new IllegalArgumentException("a part-way chunk needs tokens and a layer, got " + rows + ", " + next);
        this.rows = rows;
        this.next = next;
    }

    /** The chunk's last slice ran, or the sequence is closed: none part-way. */
    public void clear() {
        rows = next = 0;
    }

    /**
     * @param what what the caller is about to do ("roll back", "snapshot")
     * @throws IllegalStateException while a chunk is part-way, naming how far it got of {@code numLayers}
     */
    public void checkNone(String what, int numLayers) {
        if (next > 0)
            throw new IllegalStateException("cannot " + what + " a sequence whose prefill chunk has run " + next + " of "
                    + numLayers + " layers");
    }
}
