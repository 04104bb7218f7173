package io.ds4j.text.chat;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.math.BigDecimal;
import java.util.Map;

/**
 * JSON text exactly as Python's {@code json.dumps(value, ensure_ascii=False)} writes it, which is how the V4 encoder
 * puts tool schemas, response formats and non-string tool arguments into the prompt: {@code ", "} and
 * {@code ": "} separators, keys in their given order, non-ASCII kept, floats in Python's {@code repr} form.
 */
final class PythonJson {
    private PythonJson() {}

    /** Strict reader: no trailing tokens, no comments, no NaN. */
    static final ObjectMapper MAPPER = new ObjectMapper()
            .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS);

    /** Parses JSON text, or returns null when it is not exactly one valid JSON value. */
    static JsonNode parseOrNull(String text) {
        try {
            JsonNode node = MAPPER.readTree(text);
            return node == null || node.isMissingNode() ? null : node;
        } catch (JsonProcessingException e) {
            return null;
        }
    }

    /** Serializes a JSON tree the way {@code json.dumps(..., ensure_ascii=False)} does. */
    static String dumps(JsonNode node) {
        StringBuilder out = new StringBuilder();
        write(node, out);
        return out.toString();
    }

    private static void write(JsonNode node, StringBuilder out) {
        if (node == null || node.isNull() || node.isMissingNode()) {
            out.append("null");
        } else if (node.isObject()) {
            out.append('{');
            boolean first = true;
            for (Map.Entry<String, JsonNode> e : node.properties()) {
                if (!first) out.append(", ");
                first = false;
                quote(e.getKey(), out);
                out.append(": ");
                write(e.getValue(), out);
            }
            out.append('}');
        } else if (node.isArray()) {
            out.append('[');
            for (int i = 0; i < node.size(); i++) {
                if (i > 0) out.append(", ");
                write(node.get(i), out);
            }
            out.append(']');
        } else if (node.isTextual()) {
            quote(node.textValue(), out);
        } else if (node.isBoolean()) {
            out.append(node.booleanValue() ? "true" : "false");
        } else if (node.isIntegralNumber()) {
            out.append(node.bigIntegerValue());
        } else if (node.isNumber()) {
            out.append(floatRepr(node.doubleValue()));
        } else {
            // binary or POJO nodes do not come out of a JSON parse; write their text form as a string
            quote(node.asText(), out);
        }
    }

    /** A JSON string literal as Python writes it with ensure_ascii=False. */
    static String quote(String s) {
        StringBuilder out = new StringBuilder(s.length() + 2);
        quote(s, out);
        return out.toString();
    }

    static void quote(CharSequence s, StringBuilder out) {
        out.append('"');
        escapeInto(s, 0, s.length(), out);
        out.append('"');
    }

    /** Appends the characters of {@code s[from, to)} escaped for the inside of a JSON string literal. */
    static void escapeInto(CharSequence s, int from, int to, StringBuilder out) {
        for (int i = from; i < to; i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                case '\b' -> out.append("\\b");
                case '\f' -> out.append("\\f");
                default -> {
                    if (c < 0x20) {
                        out.append("\\u00").append(Character.forDigit(c >> 4, 16)).append(Character.forDigit(c & 15, 16));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
    }

    /**
     * Python's {@code repr(float)}: the shortest digits that round-trip, fixed notation for decimal exponents
     * -4 < e <= 16 (with a trailing {@code .0} for whole numbers), else {@code d.ddde+XX}.
     */
    static String floatRepr(double d) {
        if (Double.isNaN(d)) return "NaN";
        if (Double.isInfinite(d)) return d > 0 ? "Infinity" : "-Infinity";
        if (d == 0) return (1 / d < 0) ? "-0.0" : "0.0";
        String sign = d < 0 ? "-" : "";
        // Double.toString gives the shortest round-tripping digits (JDK 19 and later)
        BigDecimal exact = new BigDecimal(Double.toString(Math.abs(d))).stripTrailingZeros();
        String digits = exact.unscaledValue().toString();
        int point = digits.length() - exact.scale(); // value = 0.<digits> * 10^point
        StringBuilder out = new StringBuilder(sign);
        if (point > -4 && point <= 16) {
            if (point <= 0) {
                out.append("0.").append("0".repeat(-point)).append(digits);
            } else if (point >= digits.length()) {
                out.append(digits).append("0".repeat(point - digits.length())).append(".0");
            } else {
                out.append(digits, 0, point).append('.').append(digits, point, digits.length());
            }
        } else {
            out.append(digits.charAt(0));
            if (digits.length() > 1) out.append('.').append(digits, 1, digits.length());
            int exp = point - 1;
            out.append('e').append(exp < 0 ? '-' : '+');
            int abs = Math.abs(exp);
            if (abs < 10) out.append('0');
            out.append(abs);
        }
        return out.toString();
    }
}
