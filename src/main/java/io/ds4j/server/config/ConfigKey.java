package io.ds4j.server.config;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * One key of {@code conf/server.json}: its dotted name, value type, default, whether a change applies to the running
 * server (live) or needs a restart, its accepted range, and a one-line description (the README table lists the same).
 *
 * @param name   dotted path, e.g. {@code limits.maxActive}
 * @param type   how the JSON value is read and checked
 * @param def    the default value (already in the type's Java form; may be null where the type allows it)
 * @param live   true when a change applies to new requests at once; false when it only takes effect after a restart
 * @param range  the values an {@link Type#INT} or {@link Type#NUMBER} key accepts; null for the other types
 * @param doc    what the key does
 */
public record ConfigKey(String name, Type type, Object def, boolean live, Range range, String doc) {

    /**
     * The accepted values of a numeric key: the one definition that both validation and the README's range column
     * (checked by a test) are derived from, so they cannot disagree.
     * @param lo      lower bound
     * @param hi      upper bound; {@code Double.POSITIVE_INFINITY} for none
     * @param openLow whether lo itself is refused
     * @param off     one more accepted value outside the interval that turns the feature off; null for none
     */
    public record Range(double lo, double hi, boolean openLow, Double off) {
        /** [lo, hi]. */
        public static Range of(double lo, double hi) {
            return new Range(lo, hi, false, null);
        }

        /** [lo, ∞]. */
        public static Range atLeast(double lo) {
            return new Range(lo, Double.POSITIVE_INFINITY, false, null);
        }

        /** (lo, hi]. */
        public static Range aboveUpTo(double lo, double hi) {
            return new Range(lo, hi, true, null);
        }

        /** off, or [lo, hi]. */
        public static Range offOr(double off, double lo, double hi) {
            return new Range(lo, hi, false, off);
        }

        /** Whether x is accepted. */
        public boolean accepts(double x) {
            return (off != null && x == off) || ((openLow ? x > lo : x >= lo) && x <= hi);
        }

        /** Whether the exact number x is accepted (a number as written: 2.0000000000000000001 is above 2). */
        public boolean accepts(java.math.BigDecimal x) {
            if (off != null && x.compareTo(new java.math.BigDecimal(off)) == 0) return true;
            int c = x.compareTo(new java.math.BigDecimal(lo));
            return (openLow ? c > 0 : c >= 0) && (hi == Double.POSITIVE_INFINITY || x.compareTo(new java.math.BigDecimal(hi)) <= 0);
        }

        /** The interval as the README and error messages write it: {@code [1, 4096]}, {@code (0, 1]}, {@code [0, ∞]}. */
        public String interval() {
            return (openLow ? "(" : "[") + num(lo) + ", " + (hi == Double.POSITIVE_INFINITY ? "∞" : num(hi)) + "]";
        }

        /** The README's range cell: the interval, after the off value where there is one ({@code 0 (off) or [1, 100]}). */
        public String text() {
            return off == null ? interval() : num(off) + " (off) or " + interval();
        }

        /** What a value out of range is told it must be: {@code in [1, 4096]}, {@code 0 (off) or in [1, 100]}. */
        String mustBe() {
            return off == null ? "in " + interval() : num(off) + " (off) or in " + interval();
        }

        /** A bound or value as written in the README and error messages: whole numbers without a fraction. */
        public static String num(double d) {
            return d == Math.rint(d) && Math.abs(d) < 0x1p62 ? Long.toString((long) d) : Double.toString(d);
        }
    }

    /**
     * What a value outside this key's {@link #range} is told it must be: {@code must be an integer in [1, 4096]},
     * {@code must be 0 (off) or in [1, 100]}; the one wording of the configuration's errors and of the flags that set
     * a key.
     */
    public String mustBe() {
        return "must be " + (type == Type.INT ? "an integer " : "") + range.mustBe();
    }

    /**
     * Reads a JSON value as this key's {@link #type}. A whole number beyond the int range is told the range this key
     * accepts, as far as an int reaches ({@code [1, 65536]}; {@code [0, 2147483647]} for {@code [0, ∞]}), as any other
     * value out of range is.
     * @return the Java value, or a {@link Problem} describing why the value is unusable
     */
    Object read(JsonNode v) {
        Object r = type.read(v);
        // a secret's refused value is said by its kind only: the message reaches the terminal, the log and /props
        if (r instanceof Problem && ServerConfig.secret(name))
            return new Problem(v.isArray() ? "must be an array of strings, got an array with an element that is not a string"
                    : "must be an array of strings, got " + Type.kind(v));
        if (r instanceof Problem && type == Type.INT && range != null && Type.whole(v)) {
            Range held = new Range(Math.max(range.lo(), Integer.MIN_VALUE), Math.min(range.hi(), Integer.MAX_VALUE),
                    range.openLow(), range.off());
            return new Problem("must be an integer " + held.mustBe() + ", got " + Type.describe(v));
        }
        return r;
    }

    /**
     * Whether two values (String, Number, Boolean, List or null, as overrides give them) are one value of this key:
     * both accepted and read alike (the widths "auto" and "AUTO"; the integer 20 and 20.0; the log levels DEBUG and debug).
     * False when the key refuses either.
     */
    public boolean sameValue(Object a, Object b) {
        JsonNode ta = Json.tree(a), tb = Json.tree(b);
        Object x = read(ta), y = read(tb);
        if (x instanceof Problem || y instanceof Problem || !java.util.Objects.equals(x, y)) return false;
        // numbers are one value only where they are as written, not only as read (2 and 2.0000000000000000001 are
        // two, though a double reads both as 2)
        return !ta.isNumber() || !tb.isNumber() || Json.exact(ta).compareTo(Json.exact(tb)) == 0;
    }

    /** The README's range cell of this key: its {@link Range#text}, the accepted widths, or "—" for a key without one. */
    public String rangeText() {
        if (range != null) return range.text();
        return type == Type.WIDTH ? "0 (off), [1, 8] or \"auto\"" : "—";
    }

    /** The speculative widths {@link #width} accepts, as the messages of speculative.q and a request's speculative_q say them. */
    public static final String WIDTHS = "0 (off), an integer 1..8 or \"auto\"";

    /**
     * Reads a speculative width: the one reading of the key {@code speculative.q} and of a request's
     * {@code speculative_q}, so that the two accept the same values. "auto" in any letter case, or a JSON number that is
     * a whole number 0..8 as written (4.0 too); 0 is no speculation. A string holding a number ("4") is refused, as by
     * every integer key and request field.
     * @return "auto" or "0".."8", or null for a value refused ({@link #WIDTHS} says what is accepted)
     */
    public static String width(JsonNode v) {
        if (v.isTextual()) return v.textValue().trim().equalsIgnoreCase("auto") ? "auto" : null;
        if (v.isNumber() && Json.isIntegral(v) && v.canConvertToInt() && v.intValue() >= 0 && v.intValue() <= 8)
            return Integer.toString(v.intValue());
        return null;
    }

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
        /** "auto" or an integer 0..8, 0 for no speculation ({@link ConfigKey#width}; Java String, canonical form). */
        WIDTH,
        /** A log level: trace, debug, info, warn, error or off, in any case (Java String, lower case). */
        LEVEL;

        /** The log levels {@link #LEVEL} accepts, in the order its message names them. */
        static final List<String> LEVELS = List.of("trace", "debug", "info", "warn", "error", "off");

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
                    // whole as written (1e3, 4.0; not 2.0000000000000001, which a double rounds to 2), as a request's
                    // integers are read (Json#isIntegral)
                    if (whole(v) && v.asDouble() >= Integer.MIN_VALUE && v.asDouble() <= Integer.MAX_VALUE)
                        return (int) v.asDouble();
                    // a whole number out of the int range (ConfigKey.read tells the key's range instead)
                    if (whole(v))
                        return new Problem("must be an integer of at most " + Integer.MAX_VALUE + " in magnitude, got " + describe(v));
                    return new Problem("must be an integer, got " + describe(v));
                }
                case NUMBER -> {
                    return v.isNumber() ? (Object) v.asDouble() : new Problem("must be a number, got " + describe(v));
                }
                case NULLABLE_LONG -> {
                    if (v.isNull()) return null;
                    if (v.isIntegralNumber() && v.canConvertToLong()) return v.longValue();
                    if (whole(v)) {
                        // the exact number as written (9007199254740993.0 is not 9007199254740992), as a request's seed
                        try {
                            return Json.exact(v).longValueExact();
                        } catch (ArithmeticException e) {
                            return new Problem("must be an integer in [-2^63, 2^63) or null, got " + describe(v));
                        }
                    }
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
                    String w = width(v);
                    return w != null ? w : new Problem("must be " + WIDTHS + ", got " + describe(v));
                }
                case LEVEL -> {
                    String l = v.isTextual() ? v.textValue().toLowerCase(Locale.ROOT) : null;
                    if (l != null && LEVELS.contains(l)) return l;  // List.of's contains throws on null
                    return new Problem("must be one of " + String.join(", ", LEVELS) + ", got " + describe(v));
                }
                default -> throw new AssertionError(this);
            }
        }

        /** A whole number as written ({@link Json#isIntegral}), or one beyond the double range (1e400: no fraction). */
        static boolean whole(JsonNode v) {
            return v.isNumber() && (Json.isIntegral(v) || Double.isInfinite(v.asDouble()));
        }

        /** What a JSON value is, without the value: "a string", "a number", "true or false", "null", "an object". */
        static String kind(JsonNode v) {
            return v.isBoolean() ? "true or false" : io.ds4j.json.JsonKinds.kind(v);
        }

        static String describe(JsonNode v) {
            if (v.isTextual()) return "\"" + (v.textValue().length() > 40 ? v.textValue().substring(0, 37) + "..." : v.textValue()) + "\"";
            if (v.isContainerNode()) return v.isArray() ? "an array" : "an object";
            // a number as the file wrote it (10000000000.0, not 1.0E10), as request errors show theirs
            return Json.asWritten(v);
        }
    }

    /** Why a value was refused. */
    record Problem(String text) {}
}
