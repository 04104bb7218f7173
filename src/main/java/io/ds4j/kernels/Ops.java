package io.ds4j.kernels;

/** Small fp32 building blocks of the forward (spec 3.0). Rows are contiguous slices of flat arrays. */
public final class Ops {
    private Ops() {}

    /** x[off..off+n) ← w ⊙ x / sqrt(mean(x²) + eps); w may be null for the unweighted RMSNorm_1. */
    public static void rmsNorm(float[] x, int off, int n, float[] w, float eps) {
        double ss = 0;
        for (int i = 0; i < n; i++) {
            float v = x[off + i];
            ss += v * v;
        }
        float inv = (float) (1.0 / Math.sqrt((float) (ss / n) + eps));
        if (w == null) for (int i = 0; i < n; i++) x[off + i] = x[off + i] * inv;
        else for (int i = 0; i < n; i++) x[off + i] = w[i] * (x[off + i] * inv);
    }

    /** Applies {@link #rmsNorm} to each of S rows of width n. */
    public static void rmsNormRows(float[] x, int S, int n, float[] w, float eps) {
        for (int s = 0; s < S; s++) rmsNorm(x, s * n, n, w, eps);
    }

    public static float sigmoid(float z) {
        return (float) (1.0 / (1.0 + Math.exp(-z)));
    }

    /** sqrt(softplus(z)), softplus(z) = z for z > 20 (torch's threshold). */
    public static float sqrtSoftplus(float z) {
        double sp = z > 20 ? z : Math.log1p(Math.exp(z));
        return (float) Math.sqrt(sp);
    }

    /** silu(min(g, λ)) · clamp(u, −λ, λ) (spec 3.0 SwiGLU_clamped). */
    public static float swiglu(float g, float u, float limit) {
        g = Math.min(g, limit);
        u = Math.max(-limit, Math.min(u, limit));
        return (float) (g / (1.0 + Math.exp(-g))) * u;
    }

    /** Rounds through IEEE binary16, as stored in the F16 cache. */
    public static float f16(float v) {
        return Float.float16ToFloat(Float.floatToFloat16(v));
    }
}
