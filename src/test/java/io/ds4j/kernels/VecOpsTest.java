package io.ds4j.kernels;

import org.junit.jupiter.api.Test;

import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** The vector helpers give exactly the values the attention and mHC code relied on before they existed. */
class VecOpsTest {
    private static float[] random(int n, long seed) {
        SplittableRandom r = new SplittableRandom(seed);
        float[] v = new float[n];
        for (int i = 0; i < n; i++) v[i] = (float) r.nextDouble(-3, 3);
        return v;
    }

    /** dot4 equals four dot calls bit for bit, for lengths with and without a scalar tail. */
    @Test
    void dot4MatchesDot() {
        for (int n : new int[]{1, 7, 8, 64, 67, 128, 131}) {
            float[] a = random(n + 5, n), b = random(6 * n + 11, 100 + n), out = new float[4];
            int[] bo = {0, n + 3, 2 * n + 7, 5 * n + 2};
            VecOps.dot4(a, 5, b, bo[0], bo[1], bo[2], bo[3], n, out);
            for (int j = 0; j < 4; j++)
                assertEquals(Float.floatToRawIntBits(VecOps.dot(a, 5, b, bo[j], n)), Float.floatToRawIntBits(out[j]), "n=" + n + " j=" + j);
        }
    }

    /** axpy4 equals four axpy calls in order bit for bit (vector body and scalar tail). */
    @Test
    void axpy4MatchesFourAxpy() {
        for (int n : new int[]{1, 7, 8, 64, 67, 128, 131}) {
            float[] x = random(6 * n + 11, n), y = random(n + 3, 200 + n), ref = y.clone();
            int[] xo = {0, n + 3, 2 * n + 7, 5 * n + 2};
            float[] a = {0.31f, -1.7f, 2.05e-3f, 0.999f};
            VecOps.axpy4(a[0], a[1], a[2], a[3], x, xo[0], xo[1], xo[2], xo[3], y, 3, n);
            for (int j = 0; j < 4; j++) VecOps.axpy(a[j], x, xo[j], ref, 3, n);
            for (int i = 0; i < n + 3; i++)
                assertEquals(Float.floatToRawIntBits(ref[i]), Float.floatToRawIntBits(y[i]), "n=" + n + " i=" + i);
        }
    }

    /** addProduct and scale equal the scalar statements y += a·x and y = a·x (product rounded, no fused multiply-add). */
    @Test
    void addProductAndScaleMatchScalar() {
        for (int n : new int[]{3, 8, 29, 512}) {
            float[] x = random(n + 2, n), y = random(n + 4, 2L * n), ref = y.clone(), s = y.clone(), sref = y.clone();
            float alpha = 0.7315f;
            VecOps.addProduct(alpha, x, 2, y, 4, n);
            VecOps.scale(alpha, x, 2, s, 4, n);
            for (int i = 0; i < n; i++) {
                ref[4 + i] += alpha * x[2 + i];
                sref[4 + i] = alpha * x[2 + i];
            }
            for (int i = 0; i < n + 4; i++) {
                assertEquals(Float.floatToRawIntBits(ref[i]), Float.floatToRawIntBits(y[i]), "addProduct n=" + n + " i=" + i);
                assertEquals(Float.floatToRawIntBits(sref[i]), Float.floatToRawIntBits(s[i]), "scale n=" + n + " i=" + i);
            }
        }
    }
}
