package io.ds4j.engine;

/**
 * The per-sequence state a backend keeps (spec section 4): the persistent F16 MLA cache (raw window rows,
 * compressed entries, indexer keys) and the F32 compressor state. Owned by one thread at a time.
 */
public interface Sequence extends AutoCloseable {
    /** Tokens committed to this sequence so far (the next token's position). */
    int length();

    /**
     * Removes the last k tokens exactly, as if they had never been forwarded (spec 4.5).
     * @throws IllegalArgumentException when k is negative or reaches further back than the rollback window allows
     */
    void rollback(int k);

    /** How many of the last tokens can currently be rolled back. */
    int rollbackable();

    /**
     * Layers already run of a prefill chunk that runs in layer slices ({@link BatchEntry.Layers}), whose next slice
     * starts at this layer; 0 when no chunk is part-way (the sequence's state is then that of its {@link #length}
     * tokens).
     */
    default int slicedLayers() {
        return 0;
    }

    /** The tokens of the chunk part-way through its layers ({@link #slicedLayers}); 0 when none. */
    default int slicedRows() {
        return 0;
    }

    /** Bytes of state this sequence holds now. */
    long stateBytes();

    @Override
    void close();
}
