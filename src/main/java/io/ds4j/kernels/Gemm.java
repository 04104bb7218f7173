package io.ds4j.kernels;

import io.ds4j.model.DType;
import io.ds4j.model.WeightMatrix;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.ShortVector;
import jdk.incubator.vector.VectorMask;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorShape;
import jdk.incubator.vector.VectorShuffle;
import jdk.incubator.vector.VectorSpecies;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.concurrent.atomic.AtomicIntegerArray;

/**
 * Matrix products against stored-format weights ({@link WeightMatrix}), with Vector API kernels that dequantise
 * on the fly (the matrix is never expanded in memory) and run in parallel over output rows on {@link Parallel}.
 * Accumulation is in F32.
 *
 * <p>S = 1 (decode) is a matrix-vector product streaming each weight byte once (memory-bandwidth bound), two
 * far-apart rows at a time; {@link #matvecs} runs several independent ones in one parallel dispatch.
 * BF16 with 2 to {@link #FEW_TOKENS} tokens (a batch of decode steps) reads each weight row straight from the matrix for
 * four tokens at a time. Other S &gt; 1 (prefill) dequantises tiles of 8 rows × 1024 columns into a per-thread scratch and runs a 2-row ×
 * 2-token register-blocked micro-kernel over all S tokens, so the weights are also read once per call.
 *
 * <p>Results are reproducible bit for bit and batch-invariant: y[s, r] depends only on row r of W and row s of x,
 * not on S, the thread count or the JIT tier (every path sums in one canonical order, see the matvec kernels).
 * Each weight is first dequantised exactly as {@link WeightMatrix#get} does (value × scale, one rounding).
 *
 * <p>The weight segments must be accessible from every thread (a shared, global or automatic arena, or a
 * mapped file); a confined segment fails with {@code WrongThreadException}. The vector paths need a preferred
 * float vector of 8 or 16 lanes (AVX2 / AVX-512); other machines use a slow scalar path.
 * The e4m3 NaN codes (0x7F, 0xFF) decode as ±480 in the vector paths. Arithmetic on subnormal floats costs ~10x
 * on current Intel and AMD cores; BF16/F16/FP4 decoding never does it (F16 fixes subnormal halves up with exact
 * masked arithmetic, FP4 goes through lookup tables), FP8 does it only for its rare exponent-0 codes unless
 * {@code -Dds4j.fp8.safe=true} (see {@link #FP8_SAFE}).
 *
 * <p>System properties (read once): {@code ds4j.fp8.safe}, {@code ds4j.vectorBits} (256|512: force the lane
 * count, for tests), {@code ds4j.gemm.scalar} (scalar path only).
 */
public final class Gemm {
    private Gemm() {}

    /** Float species: the preferred one, or {@code -Dds4j.vectorBits=256|512} (tests of the other lane count). */
    static final VectorSpecies<Float> FS = switch (Integer.getInteger("ds4j.vectorBits", 0)) {
        case 256 -> FloatVector.SPECIES_256;
        case 512 -> FloatVector.SPECIES_512;
        default -> FloatVector.SPECIES_PREFERRED;
    };
    static final int VL = FS.length();
    /** True when the vector kernels are used. */
    static final boolean VECTOR = (VL == 8 || VL == 16) && !Boolean.getBoolean("ds4j.gemm.scalar");
    static final VectorSpecies<Integer> IS = VectorSpecies.of(int.class, FS.vectorShape());
    static final VectorSpecies<Short> SS = VECTOR ? VectorSpecies.of(short.class, VectorShape.forBitSize(VL * 16)) : null;
    static final VectorSpecies<Byte> BS = VECTOR ? VectorSpecies.of(byte.class, VectorShape.forBitSize(VL * 8)) : null;
    private static final ByteOrder LE = ByteOrder.LITTLE_ENDIAN;

    /** Prefill tile: rows per block and columns per chunk (a multiple of 128 so FP8/FP4 blocks never straddle). */
    static final int RB = 8, KC = 1024;
    /** Minimum weight bytes per parallel piece of a matrix-vector product, so small matrices don't pay for dispatch. */
    private static final long GRAIN_BYTES = 64 * 1024;
    /** Maximum weight bytes per parallel piece of a matrix-vector product (about 50-100 µs of streaming). */
    private static final long MAX_PIECE_BYTES = 1 << 20;

    private static final int FP8_BLOCK = WeightMatrix.FP8_BLOCK, FP4_BLOCK = WeightMatrix.FP4_BLOCK;
    /** E8M0 byte → 2^(e−127) (NaN for 0xFF). */
    private static final float[] E8M0 = new float[256];
    private static final float[] E4M3 = WeightMatrix.E4M3;
    /**
     * FP8 decoding mode. Default: one multiply by 2^120·scale of the raw bits, which are a subnormal float for the
     * 14 exponent-0 codes (rare in real weights: |w| &lt; amax·3.5e-5 of their block); CPUs run such multiplies
     * ~10x slower. {@code -Dds4j.fp8.safe=true}: subnormal-free decoding with masked fix-ups, ~30% slower on
     * typical data but immune to that. Both give exactly the same values.
     */
    static final boolean FP8_SAFE = Boolean.getBoolean("ds4j.fp8.safe");
    private static final int SIGN = 0x80000000;
    private static final float[] E2M1 = WeightMatrix.E2M1;
    /**
     * FP4 lookup tables, one per E8M0 scale byte e, at FP4_TABLES[e·VL ..], as int bits. VL = 16: the 16 signed
     * e2m1 values × scale. VL = 8: the 8 magnitudes × scale, each XOR (index &lt;&lt; 28), so that
     * {@link #fp4lo}/{@link #fp4hi} restore the index bits and set the sign with one XOR. Entries are
     * E2M1 × scale computed exactly as {@link WeightMatrix#get} does.
     */
    private static final int[] FP4_TABLES = new int[256 * 16];

    static {
        for (int b = 0; b < 256; b++) E8M0[b] = WeightMatrix.e8m0(b);
        for (int e = 0; e < 256; e++)
            for (int i = 0; i < VL && i < 16; i++) {
                int bits = Float.floatToRawIntBits(E2M1[i] * E8M0[e]);
                FP4_TABLES[e * VL + i] = VL == 16 ? bits : bits ^ (i << 28);
            }
    }

    private static final ThreadLocal<Scratch> SCRATCH = ThreadLocal.withInitial(Scratch::new);

    private static final class Scratch {
        final float[] tile = new float[RB * KC];
        float[] acc = new float[0];

        float[] acc(int n) {
            if (acc.length < n) acc = new float[n];
            Arrays.fill(acc, 0, n, 0f);
            return acc;
        }
    }

    /**
     * y[s, r] = Σ_c W[r, c] · x[s, c] for s in [0, S).
     * @param w weight [rows, cols]
     * @param x activations [S, cols], row-major, from index 0
     * @param S number of activation rows (tokens), ≥ 0
     * @param y output [S, rows], row-major, from index 0 (overwritten)
     * @throws IllegalArgumentException when x or y is too short or S &lt; 0
     */
    public static void matmul(WeightMatrix w, float[] x, int S, float[] y) {
        if (S < 0) throw new IllegalArgumentException("S = " + S);
        if (x.length < (long) S * w.cols) throw new IllegalArgumentException(w + ": x length " + x.length + " < " + S + "x" + w.cols);
        if (y.length < (long) S * w.rows) throw new IllegalArgumentException(w + ": y length " + y.length + " < " + S + "x" + w.rows);
        if (S == 0 || w.rows == 0) return;
        if (S == 1) {
            matvec(w, x, 0, y, 0);
            return;
        }
        if (!VECTOR || w.cols == 0) {
            for (int s = 0; s < S; s++) matvec(w, x, s * w.cols, y, s * w.rows);
            return;
        }
        float[] xs = x;
        if (permuted(w.format)) {
            xs = new float[S * w.cols];
            for (int s = 0; s < S; s++) permute(x, s * w.cols, w.cols, xs, s * w.cols);
        }
        final float[] xf = xs;
        if (w.format == WeightMatrix.Format.BF16 && S <= FEW_TOKENS) {
            // a few tokens (a batch of decode steps): each weight row is read straight from the matrix for four
            // tokens at a time, without the tile's dequantised copy
            long rowBytes = w.rowBytes();
            int grain = (int) Math.max(1, GRAIN_BYTES / Math.max(1, rowBytes));
            Parallel.forRange(w.rows, grain, (a, b) -> {
                float[] out = new float[4];
                for (int r = a; r < b; r++) bf16FewTokens(w, r, xf, S, y, out);
            });
            return;
        }
        int blocks = (w.rows + RB - 1) / RB;
        Parallel.forRange(blocks, 1, (a, b) -> {
            Scratch sc = SCRATCH.get();
            for (int blk = a; blk < b; blk++)
                tileBlock(w, xf, S, y, blk * RB, Math.min(w.rows, blk * RB + RB), sc);
        });
    }

    /**
     * Matrix-vector product y[yOff + r] = Σ_c W[r, c] · x[xOff + c] for r in [0, rows).
     * @param w weight [rows, cols]
     * @param x input holding cols values from xOff
     * @param y output, rows values written from yOff
     * @throws IllegalArgumentException when x or y is too short
     */
    public static void matvec(WeightMatrix w, float[] x, int xOff, float[] y, int yOff) {
        matvecs(new WeightMatrix[]{w}, new float[][]{x}, new int[]{xOff}, new float[][]{y}, new int[]{yOff});
    }

    /**
     * Independent products y_i = W_i · x_i with the same S, each exactly as {@link #matmul} computes it. With S = 1
     * they share one hand-off to the worker pool ({@link #matvecs}); with S &gt; 1 they run one after the other.
     * @param w weights [rows_i, cols_i]
     * @param x activations [S, cols_i], row-major, from index 0
     * @param y outputs [S, rows_i], row-major, from index 0 (overwritten)
     * @throws IllegalArgumentException when the arrays differ in length, an x or y is too short or S &lt; 0
     */
    public static void matmuls(int S, WeightMatrix[] w, float[][] x, float[][] y) {
        if (w.length != x.length || w.length != y.length)
            throw new IllegalArgumentException("matmuls: " + w.length + " weights, " + x.length + " inputs, " + y.length + " outputs");
        if (S != 1) {
            for (int i = 0; i < w.length; i++) matmul(w[i], x[i], S, y[i]);
            return;
        }
        matvecs(w, x, new int[w.length], y, new int[w.length]);
    }

    /**
     * Several independent matrix-vector products y_i[yOff_i + r] = Σ_c W_i[r, c] · x_i[xOff_i + c] in one parallel
     * dispatch. A decode step runs about twenty small products per layer; sharing the hand-off to the worker pool
     * (and its tail, where one thread waits for the other's last chunk) between products that do not depend on each
     * other saves that cost. Each y_i is bit-identical to a separate {@link #matvec} (same kernels, same order).
     * @param w weights [rows_i, cols_i] (any mix of formats)
     * @param x inputs, cols_i values from xOff_i
     * @param y outputs, rows_i values written from yOff_i; outputs must not overlap each other or any input
     * @throws IllegalArgumentException when the arrays differ in length or an x or y is too short
     */
    public static void matvecs(WeightMatrix[] w, float[][] x, int[] xOff, float[][] y, int[] yOff) {
        ProductProfile prof = ProductProfile.active();
        long t0 = prof == null ? 0 : System.nanoTime();
        int n = w.length;
        if (x.length != n || xOff.length != n || y.length != n || yOff.length != n)
            throw new IllegalArgumentException("matvecs: " + n + " weights, " + x.length + " inputs, " + xOff.length
                    + " input offsets, " + y.length + " outputs, " + yOff.length + " output offsets");
        float[][] xs = new float[n][];
        int[] xo = new int[n];
        boolean[] perm = new boolean[n]; // xs[i] holds x_i in the permute() order
        long total = 0;
        for (int i = 0; i < n; i++) {
            WeightMatrix m = w[i];
            if (xOff[i] < 0 || xOff[i] + (long) m.cols > x[i].length)
                throw new IllegalArgumentException(m + ": x too short for offset " + xOff[i]);
            if (yOff[i] < 0 || yOff[i] + (long) m.rows > y[i].length)
                throw new IllegalArgumentException(m + ": y too short for offset " + yOff[i]);
            xs[i] = x[i];
            xo[i] = xOff[i];
            if (m.rows == 0) continue;
            if (m.cols == 0) {
                Arrays.fill(y[i], yOff[i], yOff[i] + m.rows, 0f);
                continue;
            }
            total += m.storedBytes();
            if (VECTOR && permuted(m.format)) {
                int j = 0; // an input already permuted for an earlier product is reused
                while (j < i && !(perm[j] && x[j] == x[i] && xOff[j] == xOff[i] && w[j].cols == m.cols)) j++;
                if (j < i) {
                    xs[i] = xs[j];
                    xo[i] = xo[j];
                } else {
                    xs[i] = new float[m.cols];
                    xo[i] = 0;
                    permute(x[i], xOff[i], m.cols, xs[i], 0);
                }
                perm[i] = true;
            }
        }
        if (total == 0) return;
        float[][] x2 = new float[n][]; // BF16: a second copy of the (permuted) input, see bf16Rows
        for (int i = 0; i < n; i++) {
            if (!VECTOR || w[i].format != WeightMatrix.Format.BF16 || w[i].rows == 0 || w[i].cols == 0) continue;
            int j = 0;
            while (j < i && !(x2[j] != null && xs[j] == xs[i] && xo[j] == xo[i] && w[j].cols == w[i].cols)) j++;
            x2[i] = j < i ? x2[j] : Arrays.copyOfRange(xs[i], xo[i], xo[i] + w[i].cols);
        }
        // Work unit: row pair j = (j, j + h) of a product, h = ceil(rows / 2) (see the kernels' comment). Pieces are
        // runs of consecutive pairs, about 1/16 of a thread's share each (at least GRAIN_BYTES, at most
        // MAX_PIECE_BYTES), in product order. The piece list is cut into one contiguous span per thread; a thread
        // claims the pieces of its own span in order, so its two row streams run on across pieces without a break
        // for the hardware prefetcher, then helps with the other spans (so a thread slowed down by the rest of the
        // machine holds the others up by one piece at most).
        long target = Math.max(GRAIN_BYTES, Math.min(MAX_PIECE_BYTES, total / (16L * Parallel.threads())));
        int[] pm = new int[16], pr = new int[16];
        int np = 0;
        for (int i = 0; i < n; i++) {
            WeightMatrix m = w[i];
            if (m.rows == 0 || m.cols == 0) continue;
            int h = pairs(m.rows);
            // equal pieces, about target bytes each (one 98 KB product with a 64 KB target: two halves, not 64 + 34 KB)
            long k = Math.max(1, Math.min(h, Math.round((double) h * 2 * m.rowBytes() / target)));
            int step = (int) ((h + k - 1) / k);
            for (int j = 0; j < h; j += step) {
                if (np == pm.length) {
                    pm = Arrays.copyOf(pm, 2 * np);
                    pr = Arrays.copyOf(pr, 2 * np);
                }
                pm[np] = i;
                pr[np++] = j;
            }
        }
        final int[] pieceMat = pm, pieceFirst = pr;
        final int pieces = np, spans = Math.min(Parallel.threads(), pieces);
        final AtomicIntegerArray next = new AtomicIntegerArray(spans);
        for (int sp = 0; sp < spans; sp++) next.set(sp, (int) ((long) sp * pieces / spans));
        Parallel.forEachChunk(spans, (a, b) -> {
            for (int home = a; home < b; home++)
                for (int k = 0; k < spans; k++) {
                    int sp = (home + k) % spans, end = (int) ((long) (sp + 1) * pieces / spans), p;
                    while ((p = next.getAndIncrement(sp)) < end) {
                        int i = pieceMat[p];
                        int j1 = p + 1 < pieces && pieceMat[p + 1] == i ? pieceFirst[p + 1] : pairs(w[i].rows);
                        pairsOf(w[i], xs[i], xo[i], x2[i], y[i], yOff[i], pieceFirst[p], j1);
                    }
                }
        });
        if (prof != null) prof.record(w, System.nanoTime() - t0, total);
    }

    /**
     * Row pairs [j0, j1) of one matrix-vector product (x already permuted for BF16 and FP4; BF16: x2 a copy of
     * x[xo .. xo + cols), see {@link #bf16Rows}).
     */
    private static void pairsOf(WeightMatrix w, float[] x, int xo, float[] x2, float[] y, int yo, int j0, int j1) {
        if (!VECTOR) {
            scalarPairs(w, x, xo, y, yo, j0, j1);
            return;
        }
        switch (w.format) {
            case F32, BF16, F16 -> mvPlain(w, x, xo, x2, y, yo, j0, j1);
            case FP8_E4M3_B128 -> mvFp8(w, x, xo, y, yo, j0, j1);
            case FP4_E2M1_B32 -> mvFp4(w, x, xo, y, yo, j0, j1);
        }
    }

    // ---------------------------------------------------------------- vector decoders
    // All decoders are exact: they produce the value WeightMatrix.get would (FP8: before the scale).

    /** VL bf16 values at byte offset off → floats. */
    static FloatVector bf16(MemorySegment d, long off) {
        return ((IntVector) ShortVector.fromMemorySegment(SS, d, off, LE).convertShape(VectorOperators.S2I, IS, 0))
                .lanewise(VectorOperators.LSHL, 16).reinterpretAsFloats();
    }

    /** VL ints holding 2·VL bf16 values (little-endian) → the even-numbered values (low halves) as floats. */
    static FloatVector bf16Even(IntVector v) {
        return v.lanewise(VectorOperators.LSHL, 16).reinterpretAsFloats();
    }

    /** VL ints holding 2·VL bf16 values (little-endian) → the odd-numbered values (high halves) as floats. */
    static FloatVector bf16Odd(IntVector v) {
        return v.and(0xFFFF0000).reinterpretAsFloats();
    }

    /**
     * VL f16 values at byte offset off → floats. Normal halves: exponent rebias by integer add; zero/subnormal
     * halves: the rebiased value n = 2^-15·(1 + mant/1024) gives mant·2^-24 = 2n − 2^-14 exactly; Inf/NaN: all-ones
     * exponent. The sign is OR-ed in last.
     */
    static FloatVector f16(MemorySegment d, long off) {
        IntVector h = (IntVector) ShortVector.fromMemorySegment(SS, d, off, LE).convertShape(VectorOperators.S2I, IS, 0);
        IntVector em = h.and(0x7FFF), sh = em.lanewise(VectorOperators.LSHL, 13);
        FloatVector n = sh.add(112 << 23).reinterpretAsFloats();
        n = n.blend(n.fma(2f, -0x1p-14f), em.compare(VectorOperators.LT, 0x400).cast(FS));
        n = n.blend(sh.or(0x7F800000).reinterpretAsFloats(), em.compare(VectorOperators.GE, 0x7C00).cast(FS));
        return n.reinterpretAsInts().or(h.and(SIGN)).reinterpretAsFloats();
    }

    /** VL bytes at off, sign-extended to ints. */
    static IntVector bytes(MemorySegment d, long off) {
        return (IntVector) ByteVector.fromMemorySegment(BS, d, off, LE).convertShape(VectorOperators.B2I, IS, 0);
    }

    /** e4m3 bytes (sign-extended ints) → value × 2^-120 exactly (a subnormal float for exponent-0 codes). */
    static FloatVector fp8raw(IntVector b) {
        return b.lanewise(VectorOperators.LSHL, 20).and(0x87F00000).reinterpretAsFloats();
    }

    /**
     * e4m3 bytes (sign-extended ints) → values (unscaled). Default mode: fp8raw × 2^120. Safe mode: the magnitude
     * bits go to f32 bits 20..26 with the exponent rebiased by an integer add (exact for normal codes); for
     * exponent-0 codes that gives
     * n = 2^-7·(1 + m/8) and the value m/8·2^-6 is 2n − 2^-6, exact. The sign is OR-ed in last.
     */
    static FloatVector fp8v(IntVector b) {
        if (!FP8_SAFE) return fp8raw(b).mul(0x1p120f);
        FloatVector n = b.lanewise(VectorOperators.LSHL, 20).and(0x07F00000).add(120 << 23).reinterpretAsFloats();
        n = n.blend(n.fma(2f, -0x1p-6f), b.and(0x78).compare(VectorOperators.EQ, 0).cast(FS));
        return n.reinterpretAsInts().or(b.and(SIGN)).reinterpretAsFloats();
    }

    /** Low nibbles (even elements) of sign-extended bytes → weights, via the block's table (see {@link #FP4_TABLES}). */
    static FloatVector fp4lo(IntVector b, IntVector table) {
        if (VL == 16) return b.and(15).selectFrom(table).reinterpretAsFloats();
        return b.and(7).selectFrom(table).lanewise(VectorOperators.XOR, b.lanewise(VectorOperators.LSHL, 28)).reinterpretAsFloats();
    }

    /** High nibbles (odd elements) of sign-extended bytes → weights, via the block's table (see {@link #FP4_TABLES}). */
    static FloatVector fp4hi(IntVector b, IntVector table) {
        IntVector i = b.lanewise(VectorOperators.ASHR, 4);
        if (VL == 16) return i.and(15).selectFrom(table).reinterpretAsFloats();
        return i.and(7).selectFrom(table).lanewise(VectorOperators.XOR, i.lanewise(VectorOperators.LSHL, 28)).reinterpretAsFloats();
    }

    private static final VectorShuffle<Float> SW1 = VectorShuffle.fromOp(FS, i -> i ^ 1);
    private static final VectorShuffle<Float> SW2 = VL >= 4 ? VectorShuffle.fromOp(FS, i -> i ^ 2) : null;
    private static final VectorShuffle<Float> SW4 = VL >= 8 ? VectorShuffle.fromOp(FS, i -> i ^ 4) : null;
    private static final VectorShuffle<Float> SW8 = VL >= 16 ? VectorShuffle.fromOp(FS, i -> i ^ 8) : null;

    /**
     * Sum of the lanes in a fixed pairwise order (not {@code reduceLanes}, whose order may differ between the
     * interpreter and compiled code), so results are reproducible bit for bit.
     */
    static float hsum(FloatVector v) {
        if (VL >= 16) v = v.add(v.rearrange(SW8));
        v = v.add(v.rearrange(SW4));
        v = v.add(v.rearrange(SW2));
        v = v.add(v.rearrange(SW1));
        return v.lane(0);
    }

    /**
     * True for the formats whose kernels take even and odd elements apart (see {@link #permute}): BF16 (the low and
     * high halves of each 32-bit lane, with a shift and a mask, instead of widening 16-bit lanes) and FP4 (low and
     * high nibbles of each byte).
     */
    static boolean permuted(WeightMatrix.Format f) {
        return f == WeightMatrix.Format.BF16 || f == WeightMatrix.Format.FP4_E2M1_B32;
    }

    /**
     * The column order of the {@link #permuted} formats' kernels: within each whole group of 2·VL columns (groups
     * start at column 0), the first VL slots hold the group's even columns and the next VL its odd ones; the
     * columns after the last whole group stay in place. dst[dOff ..] receives x[xOff .. xOff + cols) in that order.
     */
    static void permute(float[] x, int xOff, int cols, float[] dst, int dOff) {
        int g2 = 2 * VL, c0 = 0;
        for (; c0 <= cols - g2; c0 += g2)
            for (int i = 0; i < VL; i++) {
                dst[dOff + c0 + i] = x[xOff + c0 + 2 * i];
                dst[dOff + c0 + VL + i] = x[xOff + c0 + 2 * i + 1];
            }
        System.arraycopy(x, xOff + c0, dst, dOff + c0, cols - c0);
    }


    private static float fp8Scale(WeightMatrix w, int r, int cb) {
        long idx = (long) ((w.rowBase + r) / FP8_BLOCK) * w.scaleCols + cb / FP8_BLOCK;
        return w.scaleType == DType.F32 ? w.scale.get(WeightMatrix.F32_LE, idx * 4)
                : E8M0[w.scale.get(ValueLayout.JAVA_BYTE, idx) & 0xFF];
    }

    // ---------------------------------------------------------------- matvec kernels (rows in pairs)
    // Canonical order of every dot product (shared with the prefill micro-kernels, so results do not depend on S):
    // each weight is first dequantised exactly (value × scale, one rounding, as WeightMatrix.get); the columns are
    // taken in the kernel's order (BF16 and FP4: the permute() order, others: natural order); per KC-column chunk,
    // even-numbered vectors of VL columns accumulate (fma) into A and odd ones into B; the chunk sum is
    // hsum(A + B) followed by the scalar tail in column order; chunk sums are added in order to 0f.
    // Each row-pair kernel keeps its vector accumulators local to one method (so C2 never boxes them) and is indexed
    // by plain counters with long segment offsets (so C2 hoists all bounds checks).
    // The rows of a matrix are read in pairs j = (j, j + h), h = ceil(rows / 2), j in [0, h): two far-apart rows
    // stream as two independent sequences and give each core four independent accumulation chains. Rows close
    // together interfere: on the AVX2 build machine (AMD EPYC, one core, BF16 rows of 1 KB streamed from memory)
    // pairs 1-8 KB apart ran at ~6-9 GB/s, 32 KB apart ~12 GB/s, 128 KB or more apart ~14-18 GB/s. With rows odd,
    // the middle row is paired with itself (its bytes then come from cache). Each kernel takes a range [j0, j1) of
    // pairs.

    /** Number of row pairs of a matrix of n rows. */
    static int pairs(int n) {
        return (n + 1) >>> 1;
    }

    private static void mvPlain(WeightMatrix w, float[] x, int xo, float[] x2, float[] y, int yo, int j0, int j1) {
        MemorySegment d = w.data;
        int cols = w.cols, h = pairs(w.rows);
        long rbytes = w.rowBytes();
        float[] out = new float[2];
        for (int r = j0; r < j1; r++) {
            int rb = r + h < w.rows ? r + h : r;
            switch (w.format) {
                case F32 -> f32Rows(d, r * rbytes, rb * rbytes, x, xo, cols, out);
                case BF16 -> bf16Rows(d, r * rbytes, rb * rbytes, x, xo, x2, cols, out);
                default -> f16Rows(d, r * rbytes, rb * rbytes, x, xo, cols, out);
            }
            y[yo + r] = out[0];
            y[yo + rb] = out[1];
        }
    }

    private static void f32Rows(MemorySegment d, long oa, long ob, float[] x, int xo, int cols, float[] out) {
        FloatVector z = FloatVector.zero(FS);
        float ta = 0f, tb = 0f;
        for (int c0 = 0; c0 < cols; c0 += KC) {
            int ce = Math.min(cols, c0 + KC), steps = (ce - c0) / (2 * VL);
            FloatVector a0 = z, a1 = z, b0 = z, b1 = z;
            long pa = oa + 4L * c0, pb = ob + 4L * c0;
            for (int st = 0; st < steps; st++) {
                int c = c0 + st * 2 * VL;
                long u = (long) st * (8 * VL);
                FloatVector x0 = FloatVector.fromArray(FS, x, xo + c), x1 = FloatVector.fromArray(FS, x, xo + c + VL);
                a0 = FloatVector.fromMemorySegment(FS, d, pa + u, LE).fma(x0, a0);
                a1 = FloatVector.fromMemorySegment(FS, d, pa + u + 4 * VL, LE).fma(x1, a1);
                b0 = FloatVector.fromMemorySegment(FS, d, pb + u, LE).fma(x0, b0);
                b1 = FloatVector.fromMemorySegment(FS, d, pb + u + 4 * VL, LE).fma(x1, b1);
            }
            int c = c0 + steps * 2 * VL;
            if (c + VL <= ce) {
                FloatVector x0 = FloatVector.fromArray(FS, x, xo + c);
                a0 = FloatVector.fromMemorySegment(FS, d, oa + 4L * c, LE).fma(x0, a0);
                b0 = FloatVector.fromMemorySegment(FS, d, ob + 4L * c, LE).fma(x0, b0);
                c += VL;
            }
            float sa = hsum(a0.add(a1)), sb = hsum(b0.add(b1));
            for (; c < ce; c++) {
                float xv = x[xo + c];
                sa += d.get(WeightMatrix.F32_LE, oa + 4L * c) * xv;
                sb += d.get(WeightMatrix.F32_LE, ob + 4L * c) * xv;
            }
            ta += sa;
            tb += sb;
        }
        out[0] = ta;
        out[1] = tb;
    }

    /**
     * BF16 row pair over the permuted x: each whole 2·VL-column group is read as VL ints, whose low halves (the
     * group's even columns, {@link #bf16Even}) go to A and high halves (odd columns, {@link #bf16Odd}) to B — a shift
     * and a mask per VL weights instead of widening 16-bit lanes. The columns after the last whole group are in
     * natural order: one vector into A when VL remain, then scalars. Row b reads its x from x2, a copy of
     * x[xo .. xo + cols): with one array C2 loads each x vector once for both rows and keeps it in a register, which
     * after its 4x unrolling spills accumulators and x vectors to the stack (~15% slower in cache); with two arrays
     * every x load folds into its fused multiply-add.
     */
    private static void bf16Rows(MemorySegment d, long oa, long ob, float[] x, int xo, float[] x2, int cols, float[] out) {
        float ta = 0f, tb = 0f;
        for (int c0 = 0; c0 < cols; c0 += KC) {
            int ce = Math.min(cols, c0 + KC), groups = (ce - c0) / (2 * VL);
            FloatVector z = FloatVector.zero(FS);
            FloatVector a0 = z, a1 = z, b0 = z, b1 = z;
            long pa = oa + 2L * c0, pb = ob + 2L * c0;
            for (int g = 0; g < groups; g++) {
                int c = c0 + g * 2 * VL;
                long u = (long) g * (4 * VL);
                IntVector ia = IntVector.fromMemorySegment(IS, d, pa + u, LE), ib = IntVector.fromMemorySegment(IS, d, pb + u, LE);
                a0 = bf16Even(ia).fma(FloatVector.fromArray(FS, x, xo + c), a0);
                a1 = bf16Odd(ia).fma(FloatVector.fromArray(FS, x, xo + c + VL), a1);
                b0 = bf16Even(ib).fma(FloatVector.fromArray(FS, x2, c), b0);
                b1 = bf16Odd(ib).fma(FloatVector.fromArray(FS, x2, c + VL), b1);
            }
            int c = c0 + groups * 2 * VL;
            if (c + VL <= ce) {
                FloatVector x0 = FloatVector.fromArray(FS, x, xo + c);
                a0 = bf16(d, oa + 2L * c).fma(x0, a0);
                b0 = bf16(d, ob + 2L * c).fma(x0, b0);
                c += VL;
            }
            float sa = hsum(a0.add(a1)), sb = hsum(b0.add(b1));
            for (; c < ce; c++) {
                float xv = x[xo + c];
                sa += Float.intBitsToFloat((d.get(WeightMatrix.I16_LE, oa + 2L * c) & 0xFFFF) << 16) * xv;
                sb += Float.intBitsToFloat((d.get(WeightMatrix.I16_LE, ob + 2L * c) & 0xFFFF) << 16) * xv;
            }
            ta += sa;
            tb += sb;
        }
        out[0] = ta;
        out[1] = tb;
    }

    /**
     * One vector per row per iteration, alternating accumulators by swapping them (A takes the even vectors, B the
     * odd ones, as in the canonical order; A + B is symmetric): half the code of a 2-vector step, which keeps the
     * heavier decoders below C2's inlining limits.
     */
    private static void f16Rows(MemorySegment d, long oa, long ob, float[] x, int xo, int cols, float[] out) {
        FloatVector z = FloatVector.zero(FS);
        float ta = 0f, tb = 0f;
        for (int c0 = 0; c0 < cols; c0 += KC) {
            int ce = Math.min(cols, c0 + KC), nv = (ce - c0) / VL;
            FloatVector a0 = z, a1 = z, b0 = z, b1 = z;
            long pa = oa + 2L * c0, pb = ob + 2L * c0;
            for (int v = 0; v < nv; v++) {
                FloatVector x0 = FloatVector.fromArray(FS, x, xo + c0 + v * VL);
                long u = (long) v * (2 * VL);
                FloatVector na = f16(d, pa + u).fma(x0, a0), nb = f16(d, pb + u).fma(x0, b0);
                a0 = a1;
                a1 = na;
                b0 = b1;
                b1 = nb;
            }
            int c = c0 + nv * VL;
            float sa = hsum(a0.add(a1)), sb = hsum(b0.add(b1));
            for (; c < ce; c++) {
                float xv = x[xo + c];
                sa += Float.float16ToFloat(d.get(WeightMatrix.I16_LE, oa + 2L * c)) * xv;
                sb += Float.float16ToFloat(d.get(WeightMatrix.I16_LE, ob + 2L * c)) * xv;
            }
            ta += sa;
            tb += sb;
        }
        out[0] = ta;
        out[1] = tb;
    }

    /** log2(vectors per 128-column FP8 block): the kernels read block scales as ka[v &gt;&gt; FP8_SHIFT]. */
    private static final int FP8_SHIFT = Integer.numberOfTrailingZeros(FP8_BLOCK / VL);

    /** FP8 row pairs; ka/kb hold the rows' block scales (one extra 0 entry for the index past the last block). */
    private static void mvFp8(WeightMatrix w, float[] x, int xo, float[] y, int yo, int j0, int j1) {
        MemorySegment d = w.data;
        int cols = w.cols, nb = (cols + FP8_BLOCK - 1) / FP8_BLOCK;
        long rbytes = w.rowBytes();
        float[] out = new float[2], ka = new float[nb + 1], kb = new float[nb + 1];
        int h = pairs(w.rows);
        for (int r = j0; r < j1; r++) {
            int rb = r + h < w.rows ? r + h : r;
            boolean fold = !FP8_SAFE;
            for (int j = 0; j < nb; j++) {
                ka[j] = fp8Scale(w, r, j * FP8_BLOCK);
                kb[j] = fp8Scale(w, rb, j * FP8_BLOCK);
                fold &= Math.abs(ka[j]) < 0x1p8f && Math.abs(kb[j]) < 0x1p8f;
            }
            if (fold) { // default mode, usual scales: one multiply by 2^120·scale
                for (int j = 0; j < nb; j++) {
                    ka[j] *= 0x1p120f;
                    kb[j] *= 0x1p120f;
                }
                fp8RowsRaw(d, r * rbytes, rb * rbytes, x, xo, cols, ka, kb, out);
            } else {
                fp8Rows(d, r * rbytes, rb * rbytes, x, xo, cols, ka, kb, out);
            }
            y[yo + r] = out[0];
            y[yo + rb] = out[1];
        }
    }

    /** Same structure as {@link #f16Rows}; weights are fp8v(bytes) × the vector's block scale. */
    private static void fp8Rows(MemorySegment d, long oa, long ob, float[] x, int xo, int cols,
                                float[] ka, float[] kb, float[] out) {
        FloatVector z = FloatVector.zero(FS);
        float ta = 0f, tb = 0f;
        for (int c0 = 0; c0 < cols; c0 += KC) {
            int ce = Math.min(cols, c0 + KC), nv = (ce - c0) / VL, v0 = c0 / VL;
            FloatVector a0 = z, a1 = z, b0 = z, b1 = z;
            long pa = oa + c0, pb = ob + c0;
            for (int v = 0; v < nv; v++) {
                FloatVector x0 = FloatVector.fromArray(FS, x, xo + c0 + v * VL);
                long u = (long) v * VL;
                FloatVector na = fp8v(bytes(d, pa + u)).mul(ka[(v0 + v) >> FP8_SHIFT]).fma(x0, a0);
                FloatVector nb = fp8v(bytes(d, pb + u)).mul(kb[(v0 + v) >> FP8_SHIFT]).fma(x0, b0);
                a0 = a1;
                a1 = na;
                b0 = b1;
                b1 = nb;
            }
            int c = c0 + nv * VL;
            float sa = hsum(a0.add(a1)), sb = hsum(b0.add(b1));
            if (c < ce) {
                float qa = ka[c / FP8_BLOCK], qb = kb[c / FP8_BLOCK];
                for (; c < ce; c++) {
                    float xv = x[xo + c];
                    sa += E4M3[d.get(ValueLayout.JAVA_BYTE, oa + c) & 0xFF] * qa * xv;
                    sb += E4M3[d.get(ValueLayout.JAVA_BYTE, ob + c) & 0xFF] * qb * xv;
                }
            }
            ta += sa;
            tb += sb;
        }
        out[0] = ta;
        out[1] = tb;
    }

    /** {@link #fp8Rows} with ka/kb = 2^120·scale (no overflow): weights are fp8raw(bytes) × that, one multiply. */
    private static void fp8RowsRaw(MemorySegment d, long oa, long ob, float[] x, int xo, int cols,
                                float[] ka, float[] kb, float[] out) {
        FloatVector z = FloatVector.zero(FS);
        float ta = 0f, tb = 0f;
        for (int c0 = 0; c0 < cols; c0 += KC) {
            int ce = Math.min(cols, c0 + KC), nv = (ce - c0) / VL, v0 = c0 / VL;
            FloatVector a0 = z, a1 = z, b0 = z, b1 = z;
            long pa = oa + c0, pb = ob + c0;
            for (int v = 0; v < nv; v++) {
                FloatVector x0 = FloatVector.fromArray(FS, x, xo + c0 + v * VL);
                long u = (long) v * VL;
                FloatVector na = fp8raw(bytes(d, pa + u)).mul(ka[(v0 + v) >> FP8_SHIFT]).fma(x0, a0);
                FloatVector nb = fp8raw(bytes(d, pb + u)).mul(kb[(v0 + v) >> FP8_SHIFT]).fma(x0, b0);
                a0 = a1;
                a1 = na;
                b0 = b1;
                b1 = nb;
            }
            int c = c0 + nv * VL;
            float sa = hsum(a0.add(a1)), sb = hsum(b0.add(b1));
            if (c < ce) {
                float qa = ka[c / FP8_BLOCK] * 0x1p-120f, qb = kb[c / FP8_BLOCK] * 0x1p-120f;
                for (; c < ce; c++) {
                    float xv = x[xo + c];
                    sa += E4M3[d.get(ValueLayout.JAVA_BYTE, oa + c) & 0xFF] * qa * xv;
                    sb += E4M3[d.get(ValueLayout.JAVA_BYTE, ob + c) & 0xFF] * qb * xv;
                }
            }
            ta += sa;
            tb += sb;
        }
        out[0] = ta;
        out[1] = tb;
    }

    /**
     * FP4 row pairs over the permuted x (see {@link #permute}), weights from per-block lookup tables; ka/kb hold
     * the rows' block scales. cols is a multiple of 32, hence of 2·VL: no odd vector, no scalar tail; low-nibble
     * vectors go to A, high-nibble vectors to B.
     */
    private static void mvFp4(WeightMatrix w, float[] x, int xo, float[] y, int yo, int j0, int j1) {
        MemorySegment d = w.data, sc = w.scale;
        int cols = w.cols, nb = cols / FP4_BLOCK;
        long rbytes = w.rowBytes();
        float[] out = new float[2];
        int h = pairs(w.rows);
        for (int r = j0; r < j1; r++) {
            int rb = r + h < w.rows ? r + h : r;
            fp4Rows(d, r * rbytes, rb * rbytes, sc, (long) r * nb, (long) rb * nb, x, xo, cols, out);
            y[yo + r] = out[0];
            y[yo + rb] = out[1];
        }
    }

    /** sa/sb: offsets of the rows' scale bytes in sc; each block's table is FP4_TABLES[scale byte · VL ..]. */
    private static void fp4Rows(MemorySegment d, long oa, long ob, MemorySegment sc, long sa, long sb,
                                float[] x, int xo, int cols, float[] out) {
        FloatVector z = FloatVector.zero(FS);
        float ta = 0f, tb = 0f;
        for (int c0 = 0; c0 < cols; c0 += KC) {
            int blocks = (Math.min(cols, c0 + KC) - c0) / FP4_BLOCK, j0 = c0 / FP4_BLOCK;
            FloatVector pa = z, qa = z, pb = z, qb = z;
            long ba = oa + (c0 >>> 1), bb = ob + (c0 >>> 1);
            for (int bl = 0; bl < blocks; bl++) {
                IntVector tA = IntVector.fromArray(IS, FP4_TABLES, (sc.get(ValueLayout.JAVA_BYTE, sa + j0 + bl) & 0xFF) * VL);
                IntVector tB = IntVector.fromArray(IS, FP4_TABLES, (sc.get(ValueLayout.JAVA_BYTE, sb + j0 + bl) & 0xFF) * VL);
                for (int g = 0; g < FP4_BLOCK / (2 * VL); g++) { // constant trip count: fully unrolled
                    int c = c0 + bl * FP4_BLOCK + g * 2 * VL;
                    long u = (long) bl * (FP4_BLOCK / 2) + (long) g * VL;
                    FloatVector xl = FloatVector.fromArray(FS, x, xo + c), xh = FloatVector.fromArray(FS, x, xo + c + VL);
                    IntVector ia = bytes(d, ba + u), ib = bytes(d, bb + u);
                    pa = fp4lo(ia, tA).fma(xl, pa);
                    qa = fp4hi(ia, tA).fma(xh, qa);
                    pb = fp4lo(ib, tB).fma(xl, pb);
                    qb = fp4hi(ib, tB).fma(xh, qb);
                }
            }
            ta += hsum(pa.add(qa));
            tb += hsum(pb.add(qb));
        }
        out[0] = ta;
        out[1] = tb;
    }

    /** Scalar fallback (no usable vector shape): the rows of pairs [j0, j1). */
    private static void scalarPairs(WeightMatrix w, float[] x, int xOff, float[] y, int yOff, int j0, int j1) {
        float[] row = new float[w.cols];
        int h = pairs(w.rows);
        for (int j = j0; j < j1; j++)
            for (int r = j; r < w.rows && r <= j + h; r += h) {
                w.dequantRow(r, row, 0);
                float acc = 0;
                for (int c = 0; c < w.cols; c++) acc += row[c] * x[xOff + c];
                y[yOff + r] = acc;
            }
    }

    // ---------------------------------------------------------------- a few tokens (BF16)

    /** Largest token count of the BF16 few-token path ({@link #bf16FewTokens}); more tokens take the tiles. */
    public static final int FEW_TOKENS = 8;

    /**
     * y[s, r] for every token s of a BF16 matrix row r, x permuted: four tokens at a time ({@link #bf16Row4}), the
     * remaining ones one at a time, chunk sums added in order to 0f — the canonical order.
     */
    private static void bf16FewTokens(WeightMatrix w, int r, float[] x, int S, float[] y, float[] out) {
        MemorySegment d = w.data;
        long ro = r * w.rowBytes();
        int cols = w.cols, rows = w.rows, s = 0;
        for (; s + 4 <= S; s += 4) {
            float t0 = 0f, t1 = 0f, t2 = 0f, t3 = 0f;
            for (int c0 = 0; c0 < cols; c0 += KC) {
                bf16Row4(d, ro, c0, Math.min(KC, cols - c0), x, s * cols, (s + 1) * cols, (s + 2) * cols, (s + 3) * cols, out);
                t0 += out[0];
                t1 += out[1];
                t2 += out[2];
                t3 += out[3];
            }
            y[s * rows + r] = t0;
            y[(s + 1) * rows + r] = t1;
            y[(s + 2) * rows + r] = t2;
            y[(s + 3) * rows + r] = t3;
        }
        for (; s < S; s++) {
            float t = 0f;
            for (int c0 = 0; c0 < cols; c0 += KC) t += bf16Row1(d, ro, c0, Math.min(KC, cols - c0), x, s * cols);
            y[s * rows + r] = t;
        }
    }

    /**
     * One BF16 row (at byte offset ro) against four tokens (x rows at xa .. xd, permuted) over the chunk [c0, c0+len):
     * the chunk sum of each token in the canonical order (as {@link #bf16Rows}: whole 2·VL groups, even columns into
     * A and odd ones into B, one natural-order vector into A, hsum(A + B), the scalar tail in column order).
     */
    private static void bf16Row4(MemorySegment d, long ro, int c0, int len, float[] x, int xa, int xb, int xc, int xd, float[] out) {
        FloatVector z = FloatVector.zero(FS);
        FloatVector a0 = z, a1 = z, b0 = z, b1 = z, e0 = z, e1 = z, f0 = z, f1 = z;
        int groups = len / (2 * VL);
        long p = ro + 2L * c0;
        for (int g = 0; g < groups; g++) {
            int k = c0 + g * 2 * VL;
            IntVector iv = IntVector.fromMemorySegment(IS, d, p + (long) g * (4 * VL), LE);
            FloatVector w0 = bf16Even(iv), w1 = bf16Odd(iv);
            a0 = w0.fma(FloatVector.fromArray(FS, x, xa + k), a0);
            a1 = w1.fma(FloatVector.fromArray(FS, x, xa + k + VL), a1);
            b0 = w0.fma(FloatVector.fromArray(FS, x, xb + k), b0);
            b1 = w1.fma(FloatVector.fromArray(FS, x, xb + k + VL), b1);
            e0 = w0.fma(FloatVector.fromArray(FS, x, xc + k), e0);
            e1 = w1.fma(FloatVector.fromArray(FS, x, xc + k + VL), e1);
            f0 = w0.fma(FloatVector.fromArray(FS, x, xd + k), f0);
            f1 = w1.fma(FloatVector.fromArray(FS, x, xd + k + VL), f1);
        }
        int c = c0 + groups * 2 * VL, ce = c0 + len;
        if (c + VL <= ce) {
            FloatVector w0 = bf16(d, ro + 2L * c);
            a0 = w0.fma(FloatVector.fromArray(FS, x, xa + c), a0);
            b0 = w0.fma(FloatVector.fromArray(FS, x, xb + c), b0);
            e0 = w0.fma(FloatVector.fromArray(FS, x, xc + c), e0);
            f0 = w0.fma(FloatVector.fromArray(FS, x, xd + c), f0);
            c += VL;
        }
        float sa = hsum(a0.add(a1)), sb = hsum(b0.add(b1)), se = hsum(e0.add(e1)), sf = hsum(f0.add(f1));
        for (; c < ce; c++) {
            float wv = Float.intBitsToFloat((d.get(WeightMatrix.I16_LE, ro + 2L * c) & 0xFFFF) << 16);
            sa += wv * x[xa + c];
            sb += wv * x[xb + c];
            se += wv * x[xc + c];
            sf += wv * x[xd + c];
        }
        out[0] = sa;
        out[1] = sb;
        out[2] = se;
        out[3] = sf;
    }

    /** One-token version of {@link #bf16Row4}: the chunk sum. */
    private static float bf16Row1(MemorySegment d, long ro, int c0, int len, float[] x, int xa) {
        FloatVector z = FloatVector.zero(FS);
        FloatVector a0 = z, a1 = z;
        int groups = len / (2 * VL);
        long p = ro + 2L * c0;
        for (int g = 0; g < groups; g++) {
            int k = c0 + g * 2 * VL;
            IntVector iv = IntVector.fromMemorySegment(IS, d, p + (long) g * (4 * VL), LE);
            a0 = bf16Even(iv).fma(FloatVector.fromArray(FS, x, xa + k), a0);
            a1 = bf16Odd(iv).fma(FloatVector.fromArray(FS, x, xa + k + VL), a1);
        }
        int c = c0 + groups * 2 * VL, ce = c0 + len;
        if (c + VL <= ce) {
            a0 = bf16(d, ro + 2L * c).fma(FloatVector.fromArray(FS, x, xa + c), a0);
            c += VL;
        }
        float sa = hsum(a0.add(a1));
        for (; c < ce; c++) sa += Float.intBitsToFloat((d.get(WeightMatrix.I16_LE, ro + 2L * c) & 0xFFFF) << 16) * x[xa + c];
        return sa;
    }

    // ---------------------------------------------------------------- prefill (S > 1)

    /** Rows [r0, r1) (at most RB) against all S tokens; x is permuted for BF16 and FP4. */
    private static void tileBlock(WeightMatrix w, float[] x, int S, float[] y, int r0, int r1, Scratch sc) {
        int nr = r1 - r0, cols = w.cols, rows = w.rows;
        float[] t = sc.tile;
        float[] acc = sc.acc(S * RB);
        int np = (nr + 1) >>> 1;
        for (int c0 = 0; c0 < cols; c0 += KC) {
            int len = Math.min(KC, cols - c0);
            for (int i = 0; i < nr; i++) dequantChunk(w, r0 + i, c0, len, t, i * KC);
            // an odd last row is padded with zeros (its sums are never written out)
            if ((nr & 1) != 0) Arrays.fill(t, nr * KC, nr * KC + len, 0f);
            int s = 0;
            for (; s + 1 < S; s += 2) {
                int xa = s * cols + c0, xb = xa + cols;
                for (int p = 0; p < np; p++) k2x2(t, 2 * p * KC, x, xa, xb, len, acc, s * RB + 2 * p, (s + 1) * RB + 2 * p);
            }
            if (s < S) {
                int xa = s * cols + c0;
                for (int p = 0; p < np; p++) k2x1(t, 2 * p * KC, x, xa, len, acc, s * RB + 2 * p);
            }
        }
        for (int s = 0; s < S; s++)
            for (int i = 0; i < nr; i++) y[s * rows + r0 + i] = acc[s * RB + i];
    }

    /**
     * Dequantises W[r, c0 .. c0+len) into t[off ..], in the kernels' column order (BF16 and FP4: the
     * {@link #permute} order). c0 is a multiple of KC, so the chunk's whole 2·VL groups are the row's.
     */
    static void dequantChunk(WeightMatrix w, int r, int c0, int len, float[] t, int off) {
        MemorySegment d = w.data;
        long ro = r * w.rowBytes();
        int c = c0, ce = c0 + len;
        switch (w.format) {
            case F32 -> MemorySegment.copy(d, WeightMatrix.F32_LE, ro + 4L * c0, t, off, len);
            case BF16 -> {
                for (; c <= ce - 2 * VL; c += 2 * VL) {
                    IntVector v = IntVector.fromMemorySegment(IS, d, ro + 2L * c, LE);
                    bf16Even(v).intoArray(t, off + c - c0);
                    bf16Odd(v).intoArray(t, off + c - c0 + VL);
                }
                for (; c <= ce - VL; c += VL) bf16(d, ro + 2L * c).intoArray(t, off + c - c0);
                for (; c < ce; c++) t[off + c - c0] = Float.intBitsToFloat((d.get(WeightMatrix.I16_LE, ro + 2L * c) & 0xFFFF) << 16);
            }
            case F16 -> {
                for (; c <= ce - VL; c += VL) f16(d, ro + 2L * c).intoArray(t, off + c - c0);
                for (; c < ce; c++) t[off + c - c0] = Float.float16ToFloat(d.get(WeightMatrix.I16_LE, ro + 2L * c));
            }
            case FP8_E4M3_B128 -> {
                for (int cb = c0; cb < ce; cb += FP8_BLOCK) {
                    int be = Math.min(ce, cb + FP8_BLOCK);
                    float s = fp8Scale(w, r, cb);
                    for (c = cb; c <= be - VL; c += VL) fp8v(bytes(d, ro + c)).mul(s).intoArray(t, off + c - c0);
                    for (; c < be; c++) t[off + c - c0] = E4M3[d.get(ValueLayout.JAVA_BYTE, ro + c) & 0xFF] * s;
                }
            }
            case FP4_E2M1_B32 -> {
                long so = (long) r * (w.cols / FP4_BLOCK);
                for (int cb = c0; cb < ce; cb += FP4_BLOCK) {
                    int e = w.scale.get(ValueLayout.JAVA_BYTE, so + cb / FP4_BLOCK) & 0xFF;
                    IntVector tab = IntVector.fromArray(IS, FP4_TABLES, e * VL);
                    for (c = cb; c < cb + FP4_BLOCK; c += 2 * VL) {
                        IntVector b = bytes(d, ro + (c >>> 1));
                        fp4lo(b, tab).intoArray(t, off + c - c0);
                        fp4hi(b, tab).intoArray(t, off + c - c0 + VL);
                    }
                }
            }
        }
    }

    /**
     * Two tile rows × two tokens over one chunk, in the canonical order of the matvec kernels:
     * acc[aa + i] += dot(t[tOff + i·KC ..], x[xa ..]) and acc[ab + i] += dot(t[tOff + i·KC ..], x[xb ..]), i = 0, 1.
     */
    private static void k2x2(float[] t, int tOff, float[] x, int xa, int xb, int len, float[] acc, int aa, int ab) {
        FloatVector z = FloatVector.zero(FS);
        FloatVector a0 = z, a1 = z, b0 = z, b1 = z, c0 = z, c1 = z, d0 = z, d1 = z;
        int t1 = tOff + KC, nv = len / VL * VL;
        int k = 0;
        for (; k <= nv - 2 * VL; k += 2 * VL) {
            FloatVector u0 = FloatVector.fromArray(FS, x, xa + k), u1 = FloatVector.fromArray(FS, x, xa + k + VL);
            FloatVector v0 = FloatVector.fromArray(FS, x, xb + k), v1 = FloatVector.fromArray(FS, x, xb + k + VL);
            FloatVector w0 = FloatVector.fromArray(FS, t, tOff + k), w1 = FloatVector.fromArray(FS, t, tOff + k + VL);
            a0 = w0.fma(u0, a0);
            a1 = w1.fma(u1, a1);
            c0 = w0.fma(v0, c0);
            c1 = w1.fma(v1, c1);
            FloatVector z0 = FloatVector.fromArray(FS, t, t1 + k), z1 = FloatVector.fromArray(FS, t, t1 + k + VL);
            b0 = z0.fma(u0, b0);
            b1 = z1.fma(u1, b1);
            d0 = z0.fma(v0, d0);
            d1 = z1.fma(v1, d1);
        }
        if (k < nv) {
            FloatVector u0 = FloatVector.fromArray(FS, x, xa + k), v0 = FloatVector.fromArray(FS, x, xb + k);
            FloatVector w0 = FloatVector.fromArray(FS, t, tOff + k), z0 = FloatVector.fromArray(FS, t, t1 + k);
            a0 = w0.fma(u0, a0);
            c0 = w0.fma(v0, c0);
            b0 = z0.fma(u0, b0);
            d0 = z0.fma(v0, d0);
            k += VL;
        }
        float sa = hsum(a0.add(a1)), sb = hsum(b0.add(b1)), sc = hsum(c0.add(c1)), sd = hsum(d0.add(d1));
        for (; k < len; k++) {
            float u = x[xa + k], v = x[xb + k], w0 = t[tOff + k], w1 = t[t1 + k];
            sa += w0 * u;
            sb += w1 * u;
            sc += w0 * v;
            sd += w1 * v;
        }
        acc[aa] += sa;
        acc[aa + 1] += sb;
        acc[ab] += sc;
        acc[ab + 1] += sd;
    }

    /** One-token version of {@link #k2x2}. */
    private static void k2x1(float[] t, int tOff, float[] x, int xa, int len, float[] acc, int aa) {
        FloatVector z = FloatVector.zero(FS);
        FloatVector a0 = z, a1 = z, b0 = z, b1 = z;
        int t1 = tOff + KC, nv = len / VL * VL;
        int k = 0;
        for (; k <= nv - 2 * VL; k += 2 * VL) {
            FloatVector u0 = FloatVector.fromArray(FS, x, xa + k), u1 = FloatVector.fromArray(FS, x, xa + k + VL);
            a0 = FloatVector.fromArray(FS, t, tOff + k).fma(u0, a0);
            a1 = FloatVector.fromArray(FS, t, tOff + k + VL).fma(u1, a1);
            b0 = FloatVector.fromArray(FS, t, t1 + k).fma(u0, b0);
            b1 = FloatVector.fromArray(FS, t, t1 + k + VL).fma(u1, b1);
        }
        if (k < nv) {
            FloatVector u0 = FloatVector.fromArray(FS, x, xa + k);
            a0 = FloatVector.fromArray(FS, t, tOff + k).fma(u0, a0);
            b0 = FloatVector.fromArray(FS, t, t1 + k).fma(u0, b0);
            k += VL;
        }
        float sa = hsum(a0.add(a1)), sb = hsum(b0.add(b1));
        for (; k < len; k++) {
            float u = x[xa + k];
            sa += t[tOff + k] * u;
            sb += t[t1 + k] * u;
        }
        acc[aa] += sa;
        acc[aa + 1] += sb;
    }
}
