package io.ds4j.kernels;

import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorSpecies;

/**
 * Vector API helpers for the attention inner loops (dot products and scaled accumulation over one head) and the
 * mHC stream mixing. The summation order depends only on n — never on the batch or on the JIT tier — so results
 * stay batch-invariant.
 */
public final class VecOps {
    private VecOps() {}

    private static final VectorSpecies<Float> F = FloatVector.SPECIES_PREFERRED;

    /** Σ a[ao+i]·b[bo+i] for i in [0, n). */
    public static float dot(float[] a, int ao, float[] b, int bo, int n) {
        int i = 0;
        float acc = 0;
        if (n >= F.length()) {
            FloatVector va = FloatVector.zero(F);
            for (int ub = F.loopBound(n); i < ub; i += F.length())
                va = FloatVector.fromArray(F, a, ao + i).fma(FloatVector.fromArray(F, b, bo + i), va);
            // fixed lane order: reduceLanes may associate differently in compiled and interpreted code
            float[] lanes = new float[F.length()];
            va.intoArray(lanes, 0);
            for (float v : lanes) acc += v;
        }
        for (; i < n; i++) acc += a[ao + i] * b[bo + i];
        return acc;
    }

    /**
     * Four dot products against one vector: out[j] = dot(a, ao, b, bo_j, n) for j = 0..3, bit for bit equal to four
     * {@link #dot} calls, computed as four interleaved accumulation chains (a single dot product is bound by the
     * latency of its one chain of fused multiply-adds).
     */
    public static void dot4(float[] a, int ao, float[] b, int b0, int b1, int b2, int b3, int n, float[] out) {
        int i = 0;
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        if (n >= F.length()) {
            FloatVector v0 = FloatVector.zero(F), v1 = v0, v2 = v0, v3 = v0;
            for (int ub = F.loopBound(n); i < ub; i += F.length()) {
                FloatVector va = FloatVector.fromArray(F, a, ao + i);
                v0 = va.fma(FloatVector.fromArray(F, b, b0 + i), v0);
                v1 = va.fma(FloatVector.fromArray(F, b, b1 + i), v1);
                v2 = va.fma(FloatVector.fromArray(F, b, b2 + i), v2);
                v3 = va.fma(FloatVector.fromArray(F, b, b3 + i), v3);
            }
            // the same fixed lane order as dot
            float[] lanes = new float[4 * F.length()];
            v0.intoArray(lanes, 0);
            v1.intoArray(lanes, F.length());
            v2.intoArray(lanes, 2 * F.length());
            v3.intoArray(lanes, 3 * F.length());
            for (int l = 0; l < F.length(); l++) {
                s0 += lanes[l];
                s1 += lanes[F.length() + l];
                s2 += lanes[2 * F.length() + l];
                s3 += lanes[3 * F.length() + l];
            }
        }
        for (; i < n; i++) {
            float x = a[ao + i];
            s0 += x * b[b0 + i];
            s1 += x * b[b1 + i];
            s2 += x * b[b2 + i];
            s3 += x * b[b3 + i];
        }
        out[0] = s0;
        out[1] = s1;
        out[2] = s2;
        out[3] = s3;
    }

    /**
     * y[yo+i] += alpha·x[xo+i] for i in [0, n), the product rounded before the sum (unfused): the same values as
     * the scalar statement {@code y += alpha * x}.
     */
    public static void addProduct(float alpha, float[] x, int xo, float[] y, int yo, int n) {
        int i = 0;
        if (n >= F.length()) {
            FloatVector va = FloatVector.broadcast(F, alpha);
            for (int ub = F.loopBound(n); i < ub; i += F.length())
                FloatVector.fromArray(F, y, yo + i).add(FloatVector.fromArray(F, x, xo + i).mul(va)).intoArray(y, yo + i);
        }
        for (; i < n; i++) y[yo + i] += alpha * x[xo + i];
    }

    /** y[yo+i] = alpha·x[xo+i] for i in [0, n). */
    public static void scale(float alpha, float[] x, int xo, float[] y, int yo, int n) {
        int i = 0;
        if (n >= F.length()) {
            FloatVector va = FloatVector.broadcast(F, alpha);
            for (int ub = F.loopBound(n); i < ub; i += F.length())
                FloatVector.fromArray(F, x, xo + i).mul(va).intoArray(y, yo + i);
        }
        for (; i < n; i++) y[yo + i] = alpha * x[xo + i];
    }

    /**
     * Four {@link #axpy} calls in order, y += a0·x[x0 ..], then a1·x[x1 ..], a2·x[x2 ..], a3·x[x3 ..], bit for bit:
     * each element takes the same four fused multiply-adds in the same order, but y is loaded and stored once instead
     * of four times (attention's P·V is bound by those loads and stores, not by the multiply-adds).
     */
    public static void axpy4(float a0, float a1, float a2, float a3, float[] x, int x0, int x1, int x2, int x3,
                             float[] y, int yo, int n) {
        int i = 0;
        if (n >= F.length()) {
            FloatVector v0 = FloatVector.broadcast(F, a0), v1 = FloatVector.broadcast(F, a1);
            FloatVector v2 = FloatVector.broadcast(F, a2), v3 = FloatVector.broadcast(F, a3);
            for (int ub = F.loopBound(n); i < ub; i += F.length()) {
                FloatVector acc = FloatVector.fromArray(F, x, x0 + i).fma(v0, FloatVector.fromArray(F, y, yo + i));
                acc = FloatVector.fromArray(F, x, x1 + i).fma(v1, acc);
                acc = FloatVector.fromArray(F, x, x2 + i).fma(v2, acc);
                FloatVector.fromArray(F, x, x3 + i).fma(v3, acc).intoArray(y, yo + i);
            }
        }
        for (; i < n; i++) {
            float v = y[yo + i];
            v += a0 * x[x0 + i];
            v += a1 * x[x1 + i];
            v += a2 * x[x2 + i];
            y[yo + i] = v + a3 * x[x3 + i];
        }
    }

    /** y[yo+i] += alpha·x[xo+i] for i in [0, n). */
    public static void axpy(float alpha, float[] x, int xo, float[] y, int yo, int n) {
        int i = 0;
        if (n >= F.length()) {
            FloatVector va = FloatVector.broadcast(F, alpha);
            for (int ub = F.loopBound(n); i < ub; i += F.length())
                FloatVector.fromArray(F, x, xo + i).fma(va, FloatVector.fromArray(F, y, yo + i)).intoArray(y, yo + i);
        }
        for (; i < n; i++) y[yo + i] += alpha * x[xo + i];
    }
}
