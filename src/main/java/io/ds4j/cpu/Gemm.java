package io.ds4j.cpu;

import io.ds4j.model.WeightMatrix;

/**
 * Matrix products against stored-format weights. Placeholder scalar version; replaced by the Vector API kernels.
 */
public final class Gemm {
    private Gemm() {}

    /**
     * y[s, r] = Σ_c W[r, c] · x[s, c] for s in [0, S).
     * @param w weight [rows, cols]
     * @param x activations [S, cols], row-major, from index 0
     * @param S number of activation rows (tokens)
     * @param y output [S, rows], row-major, from index 0 (overwritten)
     */
    public static void matmul(WeightMatrix w, float[] x, int S, float[] y) {
        float[] row = new float[w.cols];
        for (int r = 0; r < w.rows; r++) {
            w.dequantRow(r, row, 0);
            for (int s = 0; s < S; s++) {
                float acc = 0;
                int xo = s * w.cols;
                for (int c = 0; c < w.cols; c++) acc += row[c] * x[xo + c];
                y[s * w.rows + r] = acc;
            }
        }
    }
}
