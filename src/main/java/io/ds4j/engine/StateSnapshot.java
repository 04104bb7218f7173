package io.ds4j.engine;

import java.util.List;

/**
 * A frozen copy of one sequence's state at a length, from which new sequences resume ({@link Backend#resume}) as if
 * they had prefilled the same tokens: bit for bit the state a cold prefill of those tokens leaves.
 *
 * <p>What a snapshot holds (the layout of {@link CacheLayout}): its own copy of the raw window rings and of the
 * compressors' (a, z) rings, which later steps overwrite in place; and references to the append-only stores of
 * compressed entries and indexer keys, whose first rows it shares with the sequence it was taken from and with every
 * sequence resumed from it. Those rows are never rewritten while a snapshot refers to them: a sequence that would
 * write inside them copies the store first.
 *
 * <p>Used from one thread at a time. {@link #close()} releases what it holds alone and its references to the stores
 * (a store's memory is freed when nothing refers to it any more).
 */
public interface StateSnapshot extends AutoCloseable {
    /** Tokens the state covers (the length a resumed sequence starts at). */
    int length();

    /** Bytes held by this snapshot alone (window rings, compressor rings). */
    long ownBytes();

    /**
     * The append-only stores this snapshot refers to, each with the bytes of the rows it uses. Several snapshots and
     * sequences may name the same store (the same object); a cache that counts memory counts each store once, at the
     * largest row count any snapshot uses.
     */
    List<SharedRows> shared();

    /** Releases the snapshot (idempotent). */
    @Override
    void close();

    /**
     * Rows of one append-only store that a snapshot uses.
     * @param store the store, compared by identity
     * @param bytes bytes of the rows the snapshot uses
     */
    record SharedRows(Object store, long bytes) {}
}
