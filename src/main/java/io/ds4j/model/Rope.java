package io.ds4j.model;

/**
 * RoPE frequency tables of DeepSeek-V4 (spec 1.4): {@code main} (plain, θ = rope_theta) for sliding-only layers and
 * {@code compress} (θ = compress_rope_theta, YaRN when configured, no mscale) for CSA/HCA layers, their compressed
 * entries and the indexer. Built with the spec's bit-exact fp32 recipe so angles match the reference buffers.
 */
public final class Rope {
    /** inv_freq[i], i in [0, r/2). */
    public final float[] invFreq;
    /** r, the number of rotated channels (the last r of a head). */
    public final int dims;

    private Rope(float[] invFreq, int dims) {
        this.invFreq = invFreq;
        this.dims = dims;
    }

    /** The {@code main} table: plain RoPE, θ = rope_theta, never scaled (spec 1.2). */
    public static Rope main(ModelConfig c) {
        return plain(c.ropeDim, c.ropeTheta);
    }

    /** The {@code compress} table: θ = compress_rope_theta with YaRN when the config has it (spec 1.2, 1.4). */
    public static Rope compress(ModelConfig c) {
        if (c.yarnFactor <= 0) return plain(c.ropeDim, c.compressRopeTheta);
        return yarn(c.ropeDim, c.compressRopeTheta, c.yarnFactor, c.yarnOriginalMax, c.yarnBetaFast, c.yarnBetaSlow);
    }

    static Rope plain(int r, double theta) {
        float[] inv = new float[r / 2];
        for (int i = 0; i < r / 2; i++) inv[i] = 1f / pow32(theta, r, i);
        return new Rope(inv, r);
    }

    /** p_i = fp32(pow_double(θ, fp32(2i)/fp32(r))) (spec 1.4 steps 1–2). */
    private static float pow32(double theta, int r, int i) {
        float e = (float) (2 * i) / (float) r;
        return (float) Math.pow(theta, e);
    }

    static Rope yarn(int r, double theta, double factor, double origMax, double betaFast, double betaSlow) {
        int half = r / 2;
        double low = Math.max(Math.floor(corr(betaFast, r, theta, origMax)), 0);
        double high = Math.min(Math.ceil(corr(betaSlow, r, theta, origMax)), r - 1);
        if (low == high) high += 0.001;
        float s = (float) factor;
        float[] inv = new float[half];
        for (int i = 0; i < half; i++) {
            float p = pow32(theta, r, i);
            float ext = 1f / p;
            float in = 1f / (s * p);
            float ramp = (float) (i - low) / (float) (high - low);
            ramp = Math.min(Math.max(ramp, 0f), 1f);
            float ef = 1f - ramp;
            float a = in * (1f - ef);
            float b = ext * ef;
            inv[i] = a + b;
        }
        return new Rope(inv, r);
    }

    /** c(β) = r·ln(L0/(2πβ)) / (2 ln θ). */
    private static double corr(double beta, int r, double theta, double origMax) {
        return r * Math.log(origMax / (beta * 2 * Math.PI)) / (2 * Math.log(theta));
    }

    /**
     * Fills cos/sin for position t: φ_i = fp32(inv_i · fp32(t)), evaluated accurately and rounded to fp32.
     * @param cos out [r/2]
     * @param sin out [r/2]
     */
    public void angles(long t, float[] cos, float[] sin) {
        float ft = (float) t;
        for (int i = 0; i < invFreq.length; i++) {
            float phi = invFreq[i] * ft;
            cos[i] = (float) Math.cos(phi);
            sin[i] = (float) Math.sin(phi);
        }
    }

    /**
     * Rotates the last r channels of x[off .. off+width) in interleaved pairs (2i, 2i+1) (spec 3.0 RoPE).
     * @param inverse rotate by −φ (RoPE⁻¹, the output de-rotation of spec 3.4 step 6)
     */
    public void apply(float[] x, int off, int width, float[] cos, float[] sin, boolean inverse) {
        int base = off + width - dims;
        for (int i = 0; i < dims / 2; i++) {
            float a = x[base + 2 * i], b = x[base + 2 * i + 1];
            float c = cos[i], s = inverse ? -sin[i] : sin[i];
            x[base + 2 * i] = a * c - b * s;
            x[base + 2 * i + 1] = b * c + a * s;
        }
    }
}
