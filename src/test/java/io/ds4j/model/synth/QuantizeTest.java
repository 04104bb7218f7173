package io.ds4j.model.synth;

import io.ds4j.model.DType;
import io.ds4j.model.WeightMatrix;
import org.junit.jupiter.api.Test;

import java.lang.foreign.MemorySegment;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

class QuantizeTest {

    /** Nearest code by brute force over a decoding table, ties to the even code. */
    private static int nearest(float[] table, float x, int codes) {
        int best = -1;
        double bd = Double.POSITIVE_INFINITY;
        for (int c = 0; c < codes; c++) {
            float v = table[c];
            if (Float.isNaN(v)) continue;
            if ((Float.floatToRawIntBits(v) < 0) != (Float.floatToRawIntBits(x) < 0)) continue; // keep the sign
            double dd = Math.abs((double) v - x);
            if (dd < bd || (dd == bd && (c & 1) == 0 && (best & 1) == 1)) {
                bd = dd;
                best = c;
            }
        }
        return best;
    }

    @Test
    void e4m3EveryCodeRoundTrips() {
        for (int c = 0; c < 256; c++) {
            if ((c & 0x7F) == 0x7F) continue; // NaN
            assertEquals(c, Quantize.toE4M3(WeightMatrix.E4M3[c]) & 0xFF, "code " + c);
        }
    }

    @Test
    void e4m3RoundsToNearestEven() {
        SplittableRandom r = new SplittableRandom(1);
        for (int i = 0; i < 20000; i++) {
            float x = (float) (Math.scalb(r.nextDouble(1, 2), r.nextInt(-12, 9)) * (r.nextBoolean() ? 1 : -1));
            if (Math.abs(x) > 448) x = Math.copySign(448f, x);
            int c = Quantize.toE4M3(x) & 0xFF;
            assertEquals(nearest(WeightMatrix.E4M3, x, 256), c, "x=" + x);
        }
        // exact midpoints: 1 + 1/16 lies between 1 (even mantissa 0) and 1.125 → 1
        assertEquals(1f, WeightMatrix.E4M3[Quantize.toE4M3(1.0625f) & 0xFF]);
        assertEquals(1.25f, WeightMatrix.E4M3[Quantize.toE4M3(1.1875f) & 0xFF]);
        // subnormal midpoint 1.5·2^-9 → 2·2^-9 (even)
        assertEquals(0x1p-8f, WeightMatrix.E4M3[Quantize.toE4M3(0x1.8p-9f) & 0xFF]);
        assertEquals(448f, WeightMatrix.E4M3[Quantize.toE4M3(1000f) & 0xFF]);
        assertEquals(-448f, WeightMatrix.E4M3[Quantize.toE4M3(-1000f) & 0xFF]);
    }

    @Test
    void e2m1RoundsToNearestEven() {
        for (int c = 0; c < 16; c++) assertEquals(c, Quantize.toE2M1(WeightMatrix.E2M1[c]), "code " + c);
        SplittableRandom r = new SplittableRandom(2);
        for (int i = 0; i < 20000; i++) {
            float x = (float) r.nextDouble(-6, 6);
            assertEquals(nearest(WeightMatrix.E2M1, x, 16), Quantize.toE2M1(x), "x=" + x);
        }
        float[] ties = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5f};
        float[] want = {0f, 1f, 1f, 2f, 2f, 4f, 4f};
        for (int i = 0; i < ties.length; i++) {
            assertEquals(want[i], WeightMatrix.E2M1[Quantize.toE2M1(ties[i])], "tie " + ties[i]);
            assertEquals(-want[i], WeightMatrix.E2M1[Quantize.toE2M1(-ties[i])], "tie " + -ties[i]);
        }
        assertEquals(6f, WeightMatrix.E2M1[Quantize.toE2M1(100f)]);
    }

    @Test
    void scaleIsSmallestFittingPowerOfTwo() {
        assertEquals(0, Quantize.scaleExponent(448f, 448f));
        assertEquals(1, Quantize.scaleExponent(448.0001f, 448f));
        assertEquals(-1, Quantize.scaleExponent(224f, 448f));
        assertEquals(-8, Quantize.scaleExponent(1.75f, 448f));
        assertEquals(-7, Quantize.scaleExponent(1.76f, 448f));
        assertEquals(0, Quantize.scaleExponent(6f, 6f));
        assertEquals(-2, Quantize.scaleExponent(1.5f, 6f));
        assertEquals(0, Quantize.scaleExponent(0f, 6f));
        assertEquals(1f, WeightMatrix.e8m0(Quantize.e8m0(0)));
        assertEquals(0x1p-10f, WeightMatrix.e8m0(Quantize.e8m0(-10)));
    }

    @Test
    void fp8BlocksDecodeThroughWeightMatrix() {
        int rows = 200, cols = 300; // partial blocks on both edges
        float[] w = new float[rows * cols];
        SplittableRandom r = new SplittableRandom(3);
        for (int i = 0; i < w.length; i++) w[i] = (float) (r.nextGaussian() * (i % 7 == 0 ? 3 : 0.01));
        int sr = 2, sc = 3;
        byte[] q = new byte[rows * cols], s = new byte[sr * sc];
        Quantize.fp8Blocks(w, 0, rows, cols, q, 0, s, 0);
        WeightMatrix m = new WeightMatrix(WeightMatrix.Format.FP8_E4M3_B128, rows, cols, MemorySegment.ofArray(q),
                MemorySegment.ofArray(s), DType.F8_E8M0, 0, "t");
        for (int br = 0; br < sr; br++)
            for (int bc = 0; bc < sc; bc++) {
                float amax = 0;
                for (int i = br * 128; i < Math.min(rows, br * 128 + 128); i++)
                    for (int j = bc * 128; j < Math.min(cols, bc * 128 + 128); j++) amax = Math.max(amax, Math.abs(w[i * cols + j]));
                float scale = WeightMatrix.e8m0(s[br * sc + bc]);
                assertTrue(amax / scale <= 448 && amax / scale > 224, "block scale " + scale + " amax " + amax);
            }
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < cols; j++) {
                float x = w[i * cols + j], scale = m.fp8Scale(i, j);
                float want = WeightMatrix.E4M3[nearest(WeightMatrix.E4M3, x / scale, 256)] * scale;
                assertEquals(want, m.get(i, j), 0f, "(" + i + "," + j + ")");
                assertTrue(Math.abs(m.get(i, j) - x) <= Math.max(Math.abs(x) / 16, scale * 0x1p-10f));
            }
    }

    @Test
    void fp4BlocksDecodeThroughWeightMatrix() {
        int rows = 5, cols = 96;
        float[] w = new float[rows * cols];
        SplittableRandom r = new SplittableRandom(4);
        for (int i = 0; i < w.length; i++) w[i] = (float) (r.nextGaussian() * (i < cols ? 1e-3 : 1));
        byte[] q = new byte[rows * cols / 2], s = new byte[rows * cols / 32];
        Quantize.fp4Blocks(w, 0, rows, cols, q, 0, s, 0);
        // element 2j in the low nibble
        assertEquals(Quantize.toE2M1(w[0] / WeightMatrix.e8m0(s[0])), q[0] & 0xF);
        assertEquals(Quantize.toE2M1(w[1] / WeightMatrix.e8m0(s[0])), (q[0] >> 4) & 0xF);
        WeightMatrix m = new WeightMatrix(WeightMatrix.Format.FP4_E2M1_B32, rows, cols, MemorySegment.ofArray(q),
                MemorySegment.ofArray(s), DType.F8_E8M0, 0, "t");
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < cols; j++) {
                float x = w[i * cols + j], scale = WeightMatrix.e8m0(s[i * (cols / 32) + j / 32]);
                float want = WeightMatrix.E2M1[nearest(WeightMatrix.E2M1, x / scale, 16)] * scale;
                assertEquals(want, m.get(i, j), 0f, "(" + i + "," + j + ")");
                float a = Math.abs(x / scale);
                assertTrue(a <= 6, "scaled value " + a + " must fit e2m1");
                float halfGap = a < 2 ? 0.25f : a < 4 ? 0.5f : 1f;
                assertTrue(Math.abs(m.get(i, j) - x) <= halfGap * scale);
            }
    }
}
