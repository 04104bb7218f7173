package io.ds4j.cpu;

import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorSpecies;

/**
 * Vector API helpers for the attention inner loops (dot products and scaled accumulation over one head). The
 * summation order depends only on n — never on the batch or on the JIT tier — so results stay batch-invariant.
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
