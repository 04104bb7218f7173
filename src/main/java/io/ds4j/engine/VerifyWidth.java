package io.ds4j.engine;

/**
 * Verify width q per step: fixed, or adaptive from the recent acceptance. The adaptive rule keeps an exponentially
 * weighted mean of the draft tokens accepted per step (weight 0.3 on the newest step) and proposes one more than it,
 * within [1, max]: a draft that keeps being accepted earns a wider step, one that keeps failing drops to q = 1.
 */
public final class VerifyWidth {
    private final int fixed, max;
    private double ewma;

    private VerifyWidth(int fixed, int max) {
        this.fixed = fixed;
        this.max = max;
        this.ewma = Math.min(2, max);
    }

    /** A fixed width q in [1, 8]. */
    public static VerifyWidth fixed(int q) {
        if (q < 1 || q > 8) throw new IllegalArgumentException("speculative width q must be in 1..8 or 'auto', got " + q);
        return new VerifyWidth(q, q);
    }

    /** Adaptive width in [1, max]. */
    public static VerifyWidth adaptive(int max) {
        if (max < 1 || max > 8) throw new IllegalArgumentException("maximum speculative width must be in 1..8, got " + max);
        return new VerifyWidth(0, max);
    }

    /**
     * Parses "auto" or a number 1..8.
     * @throws IllegalArgumentException for anything else
     */
    public static VerifyWidth parse(String s) {
        if (s == null || s.equalsIgnoreCase("auto")) return adaptive(8);
        try {
            return fixed(Integer.parseInt(s.trim()));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("speculative width must be 1..8 or 'auto', got '" + s + "'");
        }
    }

    public boolean isAdaptive() {
        return fixed == 0;
    }

    /** Width for the next step. */
    public int next() {
        if (fixed > 0) return fixed;
        return (int) Math.max(1, Math.min(max, Math.floor(ewma) + 1));
    }

    /** Records how many of the offered draft tokens the last step accepted. */
    public void record(int offered, int accepted) {
        if (offered > 0) ewma = 0.7 * ewma + 0.3 * accepted;
    }

    @Override
    public String toString() {
        return fixed > 0 ? Integer.toString(fixed) : "auto(max " + max + ")";
    }
}
