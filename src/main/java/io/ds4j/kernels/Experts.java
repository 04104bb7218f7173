package io.ds4j.kernels;

import io.ds4j.model.WeightMatrix;

/**
 * SwiGLU expert feed-forward blocks on the CPU (spec 3.8): used by the CPU backend for every expert and by the GPU
 * backend for experts placed on the host.
 */
public final class Experts {
    private Experts() {}

    /**
     * One SwiGLU expert MLP (spec 3.8 steps 4–5, routed or shared) on S rows: y = W2 · SwiGLU_clamped(W1 h, W3 h), the
     * same products and order as the CPU backend's own MoE ({@link #run}). Also runs the routed experts that the GPU
     * backend keeps in host memory (hybrid expert placement).
     * @param w1 gate [I, D], w3 up [I, D], w2 down [D', I] in any stored format
     * @param h inputs [S, D], row-major
     * @param I intermediate width (rows of w1 and w3)
     * @param lim swiglu_limit (spec 3.0)
     * @return y [S, D'] (D' = w2.rows), row-major
     */
    public static float[] expert(WeightMatrix w1, WeightMatrix w3, WeightMatrix w2, float[] h, int S, int I, float lim) {
        return run(new WeightMatrix[]{w1}, new WeightMatrix[]{w3}, new WeightMatrix[]{w2}, new float[][]{h}, new int[]{S}, I, lim)[0];
    }

    /**
     * SwiGLU experts: y_i = W2_i · swiglu(W1_i · h_i, W3_i · h_i) for products with S_i = rows[i] tokens each. All
     * W1/W3 products form one batch and all W2 products another, so when every S_i is 1 (decode) each batch is one
     * hand-off to the worker pool.
     */
    public static float[][] run(WeightMatrix[] w1, WeightMatrix[] w3, WeightMatrix[] w2, float[][] h, int[] rows,
                                     int I, float lim) {
        int n = w1.length;
        boolean decode = true;
        for (int r : rows) decode &= r == 1;
        float[][] g = new float[n][], u = new float[n][], y = new float[n][];
        for (int i = 0; i < n; i++) {
            g[i] = new float[rows[i] * I];
            u[i] = new float[rows[i] * I];
            y[i] = new float[rows[i] * w2[i].rows];
        }
        if (decode) {
            WeightMatrix[] w13 = new WeightMatrix[2 * n];
            float[][] x13 = new float[2 * n][], y13 = new float[2 * n][];
            for (int i = 0; i < n; i++) {
                w13[2 * i] = w1[i];
                w13[2 * i + 1] = w3[i];
                x13[2 * i] = x13[2 * i + 1] = h[i];
                y13[2 * i] = g[i];
                y13[2 * i + 1] = u[i];
            }
            Gemm.matmuls(1, w13, x13, y13);
        } else {
            for (int i = 0; i < n; i++) {
                Gemm.matmul(w1[i], h[i], rows[i], g[i]);
                Gemm.matmul(w3[i], h[i], rows[i], u[i]);
            }
        }
        for (int i = 0; i < n; i++)
            for (int j = 0; j < rows[i] * I; j++) g[i][j] = Ops.swiglu(g[i][j], u[i][j], lim);
        if (decode) Gemm.matmuls(1, w2, g, y);
        else for (int i = 0; i < n; i++) Gemm.matmul(w2[i], g[i], rows[i], y[i]);
        return y;
    }
}
