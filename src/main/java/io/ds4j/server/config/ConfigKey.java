package io.ds4j.server.config;

import com.fasterxml.jackson.databind.JsonNode;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * One key of {@code conf/server.json}: its dotted name, value type, default, whether a change applies to the running
 * server (live) or needs a restart, and a one-line description (the README table lists the same).
 *
 * @param name   dotted path, e.g. {@code limits.maxActive}
 * @param type   how the JSON value is read and checked
 * @param def    the default value (already in the type's Java form; may be null where the type allows it)
 * @param live   true when a change applies to new requests at once; false when it only takes effect after a restart
 * @param doc    what the key does
 */
public record ConfigKey(String name, Type type, Object def, boolean live, String doc) {

    /** Value types. Each reads a JSON node into a Java value or returns a problem text. */
    public enum Type {
        /** A string. */
        STRING,
        /** A string or null. */
        NULLABLE_STRING,
        /** An integer (Java Integer). */
        INT,
        /** A number (Java Double). */
        NUMBER,
        /** An integer or null (Java Long). */
        NULLABLE_LONG,
        /** true or false. */
        BOOL,
        /** An array of strings (Java List&lt;String&gt;). */
        STRING_LIST,
        /** "auto" or an integer 1..8 (Java String, canonical form). */
        WIDTH;

        /**
         * Reads a JSON value.
         * @return the Java value, or a {@link Problem} describing why the value is unusable
         */
        Object read(JsonNode v) {
            switch (this) {
                case STRING -> {
                    return v.isTextual() ? v.textValue() : new Problem("must be a string, got " + describe(v));
                }
                case NULLABLE_STRING -> {
                    if (v.isNull()) return null;
                    return v.isTextual() ? v.textValue() : new Problem("must be a string or null, got " + describe(v));
                }
                case INT -> {
                    if (v.isIntegralNumber() && v.canConvertToInt()) return v.intValue();
                    if (v.isNumber() && v.asDouble() == Math.rint(v.asDouble()) && Math.abs(v.asDouble()) < Integer.MAX_VALUE)
                        return (int) v.asDouble();
                    if (v.isNumber() && v.asDouble() == Math.rint(v.asDouble())) // a whole number out of the int range
                        return new Problem("must be an integer of at most " + Integer.MAX_VALUE + " in magnitude, got " + describe(v));
                    return new Problem("must be an integer, got " + describe(v));
                }
                case NUMBER -> {
                    return v.isNumber() ? (Object) v.asDouble() : new Problem("must be a number, got " + describe(v));
                }
                case NULLABLE_LONG -> {
                    if (v.isNull()) return null;
                    if (v.isIntegralNumber() && v.canConvertToLong()) return v.longValue();
                    return new Problem("must be an integer or null, got " + describe(v));
                }
                case BOOL -> {
                    return v.isBoolean() ? (Object) v.booleanValue() : new Problem("must be true or false, got " + describe(v));
                }
                case STRING_LIST -> {
                    if (!v.isArray()) return new Problem("must be an array of strings, got " + describe(v));
                    List<String> out = new ArrayList<>();
                    for (int i = 0; i < v.size(); i++) {
                        if (!v.get(i).isTextual()) return new Problem("element " + i + " must be a string, got " + describe(v.get(i)));
                        out.add(v.get(i).textValue());
                    }
                    return List.copyOf(out);
                }
                case WIDTH -> {
                    if (v.isTextual() && v.textValue().trim().toLowerCase(Locale.ROOT).equals("auto")) return "auto";
                    String s = v.isIntegralNumber() ? v.asText() : v.isTextual() ? v.textValue().trim() : null;
                    try {
                        int q = s == null ? -1 : Integer.parseInt(s);
                        if (q >= 1 && q <= 8) return Integer.toString(q);
                    } catch (NumberFormatException ignored) {
                        // reported below
                    }
                    return new Problem("must be \"auto\" or an integer 1..8, got " + describe(v));
                }
                default -> throw new AssertionError(this);
            }
        }

        static String describe(JsonNode v) {
            if (v.isTextual()) return "\"" + (v.textValue().length() > 40 ? v.textValue().substring(0, 37) + "..." : v.textValue()) + "\"";
            if (v.isContainerNode()) return v.isArray() ? "an array" : "an object";
            return v.toString();
        }
    }

    /** Why a value was refused. */
    record Problem(String text) {}
}
