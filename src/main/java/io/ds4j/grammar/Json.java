package io.ds4j.grammar;

import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.TextNode;

import java.io.IOException;
import java.io.StringWriter;
import java.math.BigDecimal;

/** JSON text helpers for literals. */
final class Json {
    private static final ObjectMapper M = new ObjectMapper();

    private Json() {}

    static String quote(String s) {
        try {
            return M.writeValueAsString(TextNode.valueOf(s));
        } catch (JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
    }

    /**
     * Compact JSON of a value, its numbers as the schema wrote them ({@link #numberText}): an enum's {@code 1e400} or
     * {@code 1e2} is what the output must be, not the double Jackson's writer would show ({@code Infinity}, {@code 100.0}).
     * @param path where the value is, for the refusal; null for {@link #key}, which refuses nothing
     * @throws UnsupportedSchemaException for a number whose text is lost and whose double is not finite
     */
    static String write(JsonNode v, String path) {
        StringWriter out = new StringWriter();
        try (JsonGenerator g = M.getFactory().createGenerator(out)) {
            write(g, v, path);
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
        return out.toString();
    }

    /**
     * What a schema or a tool's parameters were written as, for the cache of compiled grammars: compact JSON with each
     * number's text as the client wrote it ({@code 1e2}, {@code 100.0} and {@code -0} are different schemas, which
     * Jackson's own text would make one), never refused (a lost text of a non-finite number is keyed by its double).
     */
    static String key(JsonNode v) {
        return write(v, null);
    }

    private static void write(JsonGenerator g, JsonNode v, String path) throws IOException {
        if (v.isNumber()) g.writeNumber(numberText(v, path));
        else if (v.isObject()) {
            g.writeStartObject();
            for (var e : v.properties()) {
                g.writeFieldName(e.getKey());
                write(g, e.getValue(), path);
            }
            g.writeEndObject();
        } else if (v.isArray()) {
            g.writeStartArray();
            for (JsonNode x : v) write(g, x, path);
            g.writeEndArray();
        } else M.writeTree(g, v);
    }

    /**
     * A number's JSON text: as written where the reader kept it (the server's request and file reader,
     * {@link io.ds4j.json.JsonNumbers#written}: fractions, exponents, {@code -0}), else its integer digits, its decimal, or
     * its double's shortest form (a tree from another reader).
     * @param path where the number is, for the refusal; null to refuse nothing (the double's text then, as {@link #key} wants)
     * @throws UnsupportedSchemaException for a double that is not finite (another reader's {@code 1e400}): its text is lost
     */
    static String numberText(JsonNode n, String path) {
        String w = io.ds4j.json.JsonNumbers.written(n);
        if (w != null) return w;
        if (n.isIntegralNumber()) return n.bigIntegerValue().toString();
        if (n.isBigDecimal()) return n.decimalValue().toString();
        double d = n.doubleValue();
        if (!Double.isFinite(d) && path != null)
            throw new UnsupportedSchemaException("enum", path, "a number of the enum or const at '" + path
                    + "' is beyond the double range, and the reader lost its text");
        return Double.toString(d);
    }

    /** A number's exact value, from its text ({@link #numberText}; a stand-in past BigDecimal's range, as JsonNumbers.exact). */
    static BigDecimal exact(JsonNode n, String path) {
        return io.ds4j.json.JsonNumbers.exact(numberText(n, path));
    }
}
