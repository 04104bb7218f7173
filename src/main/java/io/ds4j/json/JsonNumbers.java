package io.ds4j.json;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * JSON numbers as written: the text a reader kept for a number whose value would not show it ({@link Written}: the
 * reader of every JSON text, {@link Json}, keeps it), and integrality judged on that text. Depends on
 * Jackson alone, so that every layer that reads JSON numbers (the server, the grammar's schema compiler) decides them
 * here, in one place.
 */
public final class JsonNumbers {
    private JsonNumbers() {}

    /** A number node that keeps its text (a fraction, an exponent, {@code -0}). */
    public interface Written {
        /** The number as written, e.g. {@code 1e-400}, {@code 2.50}, {@code -0}. */
        String text();
    }

    /**
     * How a number was written where its value would show it otherwise: a number with a fraction or an exponent
     * ({@code 1E10}, {@code 2.50}, {@code 1e-400}, which is 0 as a double), and {@code -0}; null for any other node (an
     * integer's digits are its text).
     */
    public static String written(JsonNode n) {
        return n instanceof Written w ? w.text() : null;
    }

    /**
     * A JSON number with an integral value: 1000, but also 1e3 and 1000.0 (JSON has one number type); not 1e-400 or
     * 1.0000000000000000001, which a double rounds to an integer, nor one past the double range (1e400).
     */
    public static boolean isIntegral(JsonNode v) {
        if (v.isIntegralNumber()) return true;
        if (!v.isFloatingPointNumber()) return false;
        double d = v.doubleValue();
        if (!Double.isFinite(d) || d != Math.rint(d)) return false;
        String w = written(v);
        if (w == null) return true;
        try {
            java.math.BigDecimal x = new java.math.BigDecimal(w);
            return x.signum() == 0 || x.stripTrailingZeros().scale() <= 0;
        } catch (NumberFormatException | ArithmeticException e) {
            // an exponent past BigDecimal's (1e-9999999999): a fraction unless its digits are all 0
            return !underflowed(v);
        }
    }

    /** A number written nonzero that a double holds as 0 ({@code 1e-400}). */
    public static boolean underflowed(JsonNode v) {
        String w = written(v);
        if (w == null || v.doubleValue() != 0) return false;
        int e = w.toLowerCase(java.util.Locale.ROOT).indexOf('e');
        return (e < 0 ? w : w.substring(0, e)).chars().anyMatch(c -> c >= '1' && c <= '9');
    }

    private static final java.util.regex.Pattern JSON_NUMBER =
            java.util.regex.Pattern.compile("(-?)([0-9]+)(?:\\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?");

    /**
     * The exact value of a JSON number's text, or null for text that is no JSON number. An exponent past what a
     * BigDecimal holds ({@code 1e-99999999999}) gives a stand-in on the same side of every double: 0 when the digits
     * are all 0, else ±10^-1000 for a negative exponent (nearer 0 than any nonzero double) and ±10^1000 for a positive
     * one (beyond every double), so comparing it with a double bound decides as the number would: the sampling
     * parameters' and the configuration's range checks (numbers as a request, the file or a flag wrote them), a
     * schema's numeric keywords.
     */
    public static java.math.BigDecimal exact(String text) {
        java.util.regex.Matcher m = JSON_NUMBER.matcher(text);
        if (!m.matches()) return null;
        try {
            return new java.math.BigDecimal(text);
        } catch (NumberFormatException e) {
            String digits = m.group(2) + (m.group(3) == null ? "" : m.group(3));
            if (digits.chars().allMatch(c -> c == '0')) return java.math.BigDecimal.ZERO;
            int power = m.group(4) != null && m.group(4).startsWith("-") ? -1000 : 1000;
            java.math.BigDecimal stand = java.math.BigDecimal.ONE.scaleByPowerOfTen(power);
            return m.group(1).isEmpty() ? stand : stand.negate();
        }
    }
}
