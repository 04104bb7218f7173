package io.ds4j.model.synth;

/**
 * Quantisers that produce the released DeepSeek-V4 storage formats (spec 2.5), the inverse of the decoding tables in
 * {@link io.ds4j.model.WeightMatrix}.
 *
 * <ul>
 *   <li>FP8: e4m3fn bytes with one E8M0 scale per 128×128 block. The scale is the smallest power of two 2^k with
 *       max|w| / 2^k ≤ 448; elements are rounded to nearest, ties to even.</li>
 *   <li>FP4: e2m1 nibbles packed two per byte (element 2j in the low nibble) with one E8M0 scale per 1×32 block,
 *       the smallest power of two with max|w| / 2^k ≤ 6; elements rounded to the nearest e2m1 value, ties to even.</li>
 * </ul>
 * An all-zero block gets scale 2^0 (E8M0 byte 127).
 */
public final class Quantize {
    private Quantize() {}

    /** Largest finite e4m3fn magnitude. */
    public static final float E4M3_MAX = 448f;
    /** Largest e2m1 magnitude. */
    public static final float E2M1_MAX = 6f;

    /**
     * Rounds to the nearest e4m3fn value (ties to even), saturating at ±448; NaN maps to 0x7F.
     * @return the e4m3fn byte
     */
    public static byte toE4M3(float x) {
        int bits = Float.floatToRawIntBits(x);
        int sign = (bits >>> 24) & 0x80;
        if (Float.isNaN(x)) return (byte) 0x7F;
        float a = Math.abs(x);
        if (a >= E4M3_MAX) return (byte) (sign | 0x7E);
        if (a < 0x1p-6f) {
            // subnormal grid m · 2^-9, m = 0..8 (m = 8 is the smallest normal, code 0x08)
            return (byte) (sign | (int) Math.rint(a * 512f));
        }
        int ab = Float.floatToRawIntBits(a);
        int r = (ab + 0x7FFFF + ((ab >>> 20) & 1)) & ~0xFFFFF; // keep 3 mantissa bits, ties to even
        int e = (r >>> 23) - 127;
        int code = ((e + 7) << 3) | ((r >>> 20) & 7);
        if (code > 0x7E) code = 0x7E;
        return (byte) (sign | code);
    }

    /** Rounds to the nearest e2m1 value (ties to even), saturating at ±6. @return the nibble 0..15 */
    public static int toE2M1(float x) {
        float f = Math.abs(x) * 4f; // every rounding threshold is a multiple of 1/4
        int i = Math.min((int) f, 24); // NaN → 0
        int m = E2M1_QUARTER[i] - (E2M1_TIE_DOWN[i] & (f == i ? 1 : 0));
        return ((Float.floatToRawIntBits(x) >>> 28) & 8) | m;
    }

    /** Nearest e2m1 magnitude code for |x| in [i/4, (i+1)/4). */
    private static final int[] E2M1_QUARTER = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7};
    /** 1 where |x| = i/4 exactly is a tie that rounds down to the even code (0.25, 1.25, 2.5, 5). */
    private static final int[] E2M1_TIE_DOWN = {0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0};

    /**
     * Exponent k of the smallest power of two with {@code amax / 2^k <= max}, clamped to the E8M0 range [-127, 127].
     * Returns 0 for {@code amax == 0}.
     */
    public static int scaleExponent(float amax, float max) {
        if (!(amax > 0)) return 0;
        int k = Math.getExponent(amax) - Math.getExponent(max);
        while (Math.scalb((double) amax, -k) > max) k++;
        while (k > -127 && Math.scalb((double) amax, -(k - 1)) <= max) k--;
        return Math.max(-127, Math.min(127, k));
    }

    /** The E8M0 byte for 2^k. */
    public static byte e8m0(int k) {
        return (byte) (k + 127);
    }

    /**
     * Quantises a row-major [rows, cols] matrix to FP8 e4m3 with 128×128 block scales.
     * @param w the values, rows·cols of them starting at {@code off}
     * @param q receives rows·cols e4m3 bytes starting at {@code qOff}
     * @param scale receives the scale grid [ceil(rows/128), ceil(cols/128)] starting at {@code sOff}
     */
    public static void fp8Blocks(float[] w, int off, int rows, int cols, byte[] q, int qOff, byte[] scale, int sOff) {
        int sc = (cols + 127) / 128;
        for (int br = 0; br < rows; br += 128) {
            int re = Math.min(rows, br + 128);
            for (int bc = 0; bc < cols; bc += 128) {
                int ce = Math.min(cols, bc + 128);
                float amax = 0;
                for (int r = br; r < re; r++)
                    for (int c = bc; c < ce; c++) amax = Math.max(amax, Math.abs(w[off + r * cols + c]));
                int k = scaleExponent(amax, E4M3_MAX);
                scale[sOff + (br / 128) * sc + bc / 128] = e8m0(k);
                float inv = Math.scalb(1f, -k);
                for (int r = br; r < re; r++)
                    for (int c = bc; c < ce; c++) q[qOff + r * cols + c] = toE4M3(w[off + r * cols + c] * inv);
            }
        }
    }

    /**
     * Quantises a row-major [rows, cols] matrix to packed FP4 e2m1 with 1×32 block scales. {@code cols} must be a
     * multiple of 32.
     * @param q receives rows·cols/2 bytes (element 2j in the low nibble of byte j)
     * @param scale receives rows·cols/32 E8M0 bytes
     */
    public static void fp4Blocks(float[] w, int off, int rows, int cols, byte[] q, int qOff, byte[] scale, int sOff) {
        if (cols % 32 != 0) throw new IllegalArgumentException("FP4 needs cols % 32 == 0, got " + cols);
        int nb = cols / 32;
        for (int r = 0; r < rows; r++) {
            for (int b = 0; b < nb; b++) {
                int base = off + r * cols + b * 32;
                float amax = 0;
                for (int i = 0; i < 32; i++) amax = Math.max(amax, Math.abs(w[base + i]));
                int k = scaleExponent(amax, E2M1_MAX);
                scale[sOff + r * nb + b] = e8m0(k);
                float inv = Math.scalb(1f, -k);
                int qb = qOff + r * (cols / 2) + b * 16;
                for (int i = 0; i < 16; i++) {
                    int lo = toE2M1(w[base + 2 * i] * inv), hi = toE2M1(w[base + 2 * i + 1] * inv);
                    q[qb + i] = (byte) (lo | (hi << 4));
                }
            }
        }
    }
}
