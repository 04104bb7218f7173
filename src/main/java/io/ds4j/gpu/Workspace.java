package io.ds4j.gpu;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.ArrayList;
import java.util.List;

/**
 * Scratch device memory for the activations of one step: a bump allocator over grow-only chunks. Work is ordered on
 * the context's stream, so memory released by {@link #release} can be handed out again at once: a later kernel that
 * reuses it runs after the earlier ones that used it. Work in a branch on a side stream (HipBackend's branchBegin) is
 * not ordered with the work beside it: what a branch uses is released only after its join. {@link #reset(long)} makes one chunk of at least the
 * step's estimated peak ({@link #stepBytes}) before the step starts, so that running out of device memory happens
 * before the step changes any sequence state; a step that needs more still grows the workspace (and is recorded in
 * {@link #overshoot}).
 */
final class Workspace implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(Workspace.class);
    private static final long ALIGN = 256, MIN_CHUNK = 64L << 20;
    /** The alignment (bytes) of every allocation: an allocation of n bytes takes at most n + ALIGN_BYTES. */
    static final long ALIGN_BYTES = ALIGN;
    private final Gpu gpu;
    private final List<long[]> chunks = new ArrayList<>(); // {base, size}
    private int cur;
    private long off;
    /** The estimate given to the last {@link #reset(long)}. */
    private long need;
    /** The most bytes a step took beyond its estimate ({@link #stepBytes}); tests expect 0. */
    long overshoot;
    /**
     * Bumped whenever device memory is allocated or freed (a new chunk, a reallocation): between two equal values the
     * same sequence of allocations gets the same addresses (a kept step graph stays valid).
     */
    long generation;

    Workspace(Gpu gpu) {
        this.gpu = gpu;
    }

    /** Device memory for bytes (256-byte aligned), valid until released or reset. */
    long alloc(long bytes) {
        bytes = Math.max(ALIGN, (bytes + ALIGN - 1) / ALIGN * ALIGN);
        while (cur < chunks.size()) {
            long[] c = chunks.get(cur);
            if (off + bytes <= c[1]) {
                long p = c[0] + off;
                off += bytes;
                noteUse();
                return p;
            }
            cur++;
            off = 0;
        }
        long size = Math.max(bytes, Math.max(MIN_CHUNK, chunks.isEmpty() ? 0 : 2 * chunks.getLast()[1]));
        chunks.add(new long[]{gpu.malloc(size, "activations (workspace)"), size});
        LOG.debug("workspace grown by a chunk of {} MiB within a step (its estimate was {} MiB)", size >> 20, need >> 20);
        generation++;
        cur = chunks.size() - 1;
        off = bytes;
        noteUse();
        return chunks.get(cur)[0];
    }

    /** Books how far the step's allocations reach past its estimate. */
    private void noteUse() {
        long used = off;
        for (int i = 0; i < cur; i++) used += chunks.get(i)[1];
        if (used > need) overshoot = Math.max(overshoot, used - need);
    }

    /** n floats. */
    long f32(long n) {
        return alloc(4 * n);
    }

    /** n int32. */
    long i32(long n) {
        return alloc(4 * n);
    }

    /** The current position, for {@link #release}. */
    long mark() {
        return ((long) cur << 40) | off;
    }

    /** Frees everything allocated after the mark. */
    void release(long mark) {
        cur = (int) (mark >>> 40);
        off = mark & ((1L << 40) - 1);
    }

    /**
     * Frees everything and makes one chunk of at least need bytes (several chunks are merged into one of their total
     * size; a new size is rounded up to 64 MiB, or exact when that does not fit). Waits for the device when it
     * reallocates.
     * @throws GpuException (DS4J_ERR_OOM) when need bytes cannot be had; the workspace is then empty and still usable
     */
    void reset(long need) {
        cur = 0;
        off = 0;
        this.need = need;
        long have = bytes();
        if (chunks.size() <= 1 && have >= need) return;
        long size = Math.max(have, (need + MIN_CHUNK - 1) / MIN_CHUNK * MIN_CHUNK);
        LOG.debug("workspace reallocated: {} MiB in {} chunks to {} MiB (the step needs {} MiB)", have >> 20, chunks.size(),
                size >> 20, need >> 20);
        gpu.sync();
        generation++;
        for (long[] c : chunks) gpu.free(c[0]);
        chunks.clear();
        long p;
        try {
            p = gpu.malloc(size, "activations (workspace)");
        } catch (GpuException e) {
            if (size <= need) throw e;
            size = need;
            p = gpu.malloc(size, "activations (workspace)");
        }
        chunks.add(new long[]{p, size});
    }

    /**
     * Peak workspace bytes of a one-entry step of S tokens after N0 ({@link #batchBytes} of one entry).
     * @param S tokens in the step (≥ 1)
     * @param N0 tokens in the sequence before the step
     * @param R logits rows asked for
     */
    static long stepBytes(io.ds4j.model.ModelConfig c, int S, long N0, int R) {
        return batchBytes(c, new int[]{S}, new long[]{N0}, R);
    }

    /**
     * Peak workspace bytes of one {@link HipBackend#step} over a batch (each allocation rounded up as {@link #alloc}
     * does), with T = Σ S_i rows in all: the rows kept for the whole step (token ids, the mHC streams [T, n·D], post,
     * comb, the collapsed input, the streams' RMSNorm_1 [T, n·D]) plus the largest of one layer's attention site
     * (queries, kv, compressor rows of all T rows, plus the largest entry's indexer scratch: queries, weights, scores
     * [S_i, (N0_i+S_i)/m], selection — each entry's scratch is released before the next entry's), one layer's MoE site (router logits, picks, expert rows
     * [T·k, I] and [T·k, D], shared expert, the host rows of hybrid placement, and the routed experts' scratch, which
     * groups the picks of an entry on the tensor-core path) and the output head (R rows, logits [R, V]). Mirrors the allocations of HipBackend.step
     * and its helpers; keep the two in step (HipPlacementTest fails when a step takes more than this). The verify
     * attention scratch is added by the caller.
     * @param S tokens of each entry (each ≥ 1)
     * @param N0 tokens in each entry's sequence before the step
     * @param R logits rows asked for, all entries together
     */
    static long batchBytes(io.ds4j.model.ModelConfig c, int[] S, long[] N0, int R) {
        final long D = c.hidden, n = c.hcMult, nD = n * D, mix = (2 + n) * n, k = c.expertsPerToken, I = c.moeInter;
        final long H = c.numHeads, d = c.headDim;
        long T = 0;
        for (int s : S) T += s;
        long keep = f(T) + f(T * nD) + f(T * n) + f(T * n * n) + f(T * D) + f(T * nD);
        long hc = f(T * mix);
        long peak = hc;
        for (int l = 0; l < c.numLayers; l++) {
            io.ds4j.model.AttentionKind kind = c.layerTypes[l];
            long att = f(T * c.qLoraRank) + f(T * H * d) + f(T * d);
            if (kind != io.ds4j.model.AttentionKind.SLIDING) {
                long cw = kind == io.ds4j.model.AttentionKind.CSA ? 2 * d : d;
                att += 2 * f(T * cw);
            }
            if (kind == io.ds4j.model.AttentionKind.CSA) {
                att += 2 * f(T * 2L * c.indexHeadDim);
                long entry = 0;
                for (int i = 0; i < S.length; i++) {
                    long total = (N0[i] + S[i]) / c.csaRatio;
                    if (total > c.indexTopk)
                        entry = Math.max(entry, f(S[i] * (long) c.indexHeads * c.indexHeadDim) + f(S[i] * (long) c.indexHeads)
                                + f(S[i] * total) + f(S[i] * (long) c.indexTopk));
                }
                att += entry;
            }
            att += f(T * H * d) + f(T * (long) c.oGroups * c.oLoraRank) + f(T * D);
            peak = Math.max(peak, att);
        }
        long moe = f(T * (long) c.numExperts) + 2 * f(T * k) + 2 * f(T * k * I) + f(T * k * D) + 2 * f(T * I) + 2 * f(T * D)
                + f(T * k * D);
        // every run of rows passes ds4j_moe_matmul_prefill a scratch (an entry on the tensor-core path groups its picks
        // by expert there); a run has at most T rows
        moe += f(T * k + 3L * c.numExperts + 1);
        peak = Math.max(peak, moe);
        if (R > 0) peak = Math.max(peak, 2 * f(R * nD) + f(R * n) + f(R * D) + f((long) R * c.vocabSize));
        return keep + peak;
    }

    /** Bytes of n 4-byte elements as {@link #alloc} books them. */
    private static long f(long n) {
        return Math.max(ALIGN, (4 * n + ALIGN - 1) / ALIGN * ALIGN);
    }

    /** Device bytes held. */
    long bytes() {
        long b = 0;
        for (long[] c : chunks) b += c[1];
        return b;
    }

    @Override
    public void close() {
        for (long[] c : chunks) {
            try {
                gpu.free(c[0]);
            } catch (RuntimeException ignored) {
                // keep freeing the rest
            }
        }
        chunks.clear();
    }
}
