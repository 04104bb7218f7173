package io.ds4j.grammar;

import com.fasterxml.jackson.databind.JsonNode;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Compiles a JSON Schema of the supported subset into {@link Schema} nodes. Supported: {@code type} (a name or a
 * list of names), {@code properties}, {@code required}, {@code additionalProperties} (false or true; only declared
 * properties are ever produced), {@code items}, {@code minItems}, {@code maxItems}, {@code enum}, {@code const},
 * {@code anyOf}, {@code $ref} to {@code #}, {@code #/$defs/...} or {@code #/definitions/...}, a string's
 * {@code minLength}, {@code maxLength}, {@code pattern} (matched by the whole string) and {@code format} (those of
 * {@link Formats}), an integer's {@code minimum}, {@code maximum}, {@code exclusiveMinimum} and
 * {@code exclusiveMaximum}, a number's {@code minimum}/{@code maximum} of the few values its grammar can hold, and annotations
 * ({@code title}, {@code description}, {@code default}, {@code examples}, {@code $schema}, {@code $id},
 * {@code $comment}, {@code deprecated}, {@code readOnly}, {@code writeOnly}). Any other keyword is refused with
 * {@link UnsupportedSchemaException} naming it, so nothing the client asked for is silently not enforced; every
 * {@code $defs} and {@code definitions} entry is checked so, whether or not a {@code $ref} uses it. The values
 * of an {@code enum} or {@code const} are produced only where they satisfy the other keywords of their node too (any
 * {@code minimum} and {@code maximum} there included, checked on the values exactly); a node none of whose values
 * does is refused, as no output would be valid. A literal clients could not read as written is refused too: a number
 * past the double range, or an integer past 2^53 − 1 where only an integer is valid.
 */
public final class SchemaCompiler {
    private static final Set<String> ANNOTATIONS = Set.of("title", "description", "default", "examples", "$schema",
            "$id", "$comment", "deprecated", "readOnly", "writeOnly", "$defs", "definitions");
    /** The keywords that hold named schemas for {@code $ref} to use. */
    private static final List<String> DEFINITIONS = List.of("$defs", "definitions");
    private static final Set<String> STRUCTURE = Set.of("type", "properties", "required", "additionalProperties",
            "items", "minItems", "maxItems", "enum", "const", "anyOf", "$ref", "minimum", "maximum", "exclusiveMinimum",
            "exclusiveMaximum", "minLength", "maxLength", "pattern", "format");
    /** The bounds of numbers, in the order {@link #integerRange} reads them. */
    private static final List<String> BOUNDS = List.of("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum");
    /** The keywords that hold strings only. */
    private static final List<String> STRING_KEYWORDS = List.of("minLength", "maxLength", "pattern", "format");
    /**
     * Most bits of a string's {@link Regex#charCounts} (its pattern's positions times the lengths told apart), where a
     * pattern or format and a length range hold it together: bounds the memory and the time to build them.
     */
    static final long MAX_COUNT_BITS = 1L << 23;
    /** Integer digits that keep every number inside the widest bounds clients send (±(2^53 − 1) from zod's int()). */
    static final int BOUNDED_DIGITS = 15;
    private static final double BOUND = 999_999_999_999_999d;
    /**
     * Most schema nodes visited while expanding every anyOf through nested anyOf and {@code $ref}, over the whole
     * schema: bounds the compile's time and the expansions' memory whatever the schema's shape (real schemas need a
     * few per anyOf option).
     */
    static final int MAX_EXPANSION = 200_000;
    /**
     * Most properties declared by all the schema's objects together. A token's mask tests the property names left in
     * an object, and the cost grows faster than the count (100,000 names in one object take over a second per mask,
     * two million hang the request); real schemas declare a few hundred at most.
     */
    static final int MAX_PROPERTIES = 10_000;

    private final JsonNode root;
    private final List<Schema> nodes = new ArrayList<>();
    private final Map<String, Schema> byPointer = new HashMap<>();
    private final List<Map.Entry<String, Schema.Ref>> pending = new ArrayList<>();
    /**
     * The pointer of every {@code $defs} and {@code definitions} entry met while compiling, each compiled whether or not
     * a {@code $ref} uses it: a dangling {@code $ref} or an unsupported keyword in an entry nothing uses yet is refused
     * as it would be once a {@code $ref} reaches it, not left for a later edit of the schema to find.
     */
    private final List<String> definitions = new ArrayList<>();
    /**
     * One node per distinct number kind and per distinct literal list: states refer to their schema node, so equal
     * nodes shared make equal states, which the live alternatives then hold once.
     */
    private final Map<List<Object>, Schema> shared = new HashMap<>();
    /** Where each anyOf node is, for messages. */
    private final Map<Schema, String> anyOfPaths = new IdentityHashMap<>();
    /** Where each array node is, for messages. */
    private final Map<Schema, String> arrayPaths = new IdentityHashMap<>();
    /** Properties declared so far by the objects compiled ({@link #MAX_PROPERTIES}). */
    private long properties;

    private SchemaCompiler(JsonNode root) {
        this.root = root;
    }

    /**
     * @param schema a JSON Schema (an object, or {@code true}; {@code false} admits no value and is refused)
     * @return the compiled root
     * @throws UnsupportedSchemaException for a keyword outside the subset, a bad value of a supported keyword, a
     *                                    {@code $ref} that does not resolve, a schema no finite JSON satisfies, an
     *                                    anyOf that refers back to itself before any input, or one that opens more
     *                                    alternatives at once than {@link Grammar#MAX_LIVE_STATES}
     */
    public static Schema compile(JsonNode schema) {
        SchemaCompiler c = new SchemaCompiler(schema);
        invalidValues(schema, "");
        Schema s = c.node(schema, "");
        c.resolve();
        c.alternatives();
        c.minLengths();
        if (s.minLen >= GState.FAR) {
            // FAR also stands for a length past it, so a huge minItems must not be reported as endless recursion
            if (c.derivable().contains(s)) throw c.tooLong();
            throw UnsupportedSchemaException.invalid("$ref", "", "the schema admits no finite JSON value (a required recursion without a base case)");
        }
        return s;
    }

    private <T extends Schema> T add(T s) {
        nodes.add(s);
        return s;
    }

    private Schema node(JsonNode n, String path) {
        if (n != null && n.isBoolean() && n.booleanValue()) return add(new Schema.Any());
        if (n != null && n.isBoolean()) {
            // false: no value at all; inside a schema it would take leaving a property or option out, which is not done
            if (path.isEmpty()) throw UnsupportedSchemaException.invalid("false", path, "no value satisfies the schema at '" + path + "': it is false");
            throw new UnsupportedSchemaException("false", path, "the schema false (no value) at '" + path
                    + "' is not supported by constrained decoding; leave the property or option out instead");
        }
        if (n == null || !n.isObject())
            throw UnsupportedSchemaException.invalid("type", path, "schema at '" + path + "' must be an object, or true or false");
        keywords(n, path);
        for (String k : DEFINITIONS) {
            JsonNode d = n.get(k);
            if (d == null) continue;
            if (!d.isObject())
                throw UnsupportedSchemaException.invalid(k, path, k + " at '" + path + "' must be an object of named schemas");
            for (var e : d.properties()) definitions.add(path + "/" + k + "/" + escaped(e.getKey()));
        }
        if (n.has("$ref")) {
            for (var e : n.properties())
                if (STRUCTURE.contains(e.getKey()) && !e.getKey().equals("$ref"))
                    throw new UnsupportedSchemaException(e.getKey(), path, "'" + e.getKey() + "' next to '$ref' (at '" + path + "') is not supported");
            Schema.Ref ref = add(new Schema.Ref());
            pending.add(Map.entry(refPointer(n.get("$ref"), path), ref));
            return ref;
        }
        if (n.has("anyOf")) {
            for (var e : n.properties())
                if (STRUCTURE.contains(e.getKey()) && !e.getKey().equals("anyOf"))
                    throw new UnsupportedSchemaException(e.getKey(), path, "'" + e.getKey() + "' next to 'anyOf' (at '" + path + "') is not supported; move it into each option");
            JsonNode a = n.get("anyOf");
            if (!a.isArray() || a.isEmpty()) throw UnsupportedSchemaException.invalid("anyOf", path, "anyOf at '" + path + "' must be a non-empty array");
            Schema.AnyOf u = add(new Schema.AnyOf());
            anyOfPaths.put(u, path);
            u.options = new Schema[a.size()];
            for (int i = 0; i < a.size(); i++) u.options[i] = node(a.get(i), path + "/anyOf/" + i);
            return u;
        }
        if (n.has("const") || n.has("enum")) return literals(n, path);
        JsonNode t = n.get("type");
        if (t == null || t.isNull()) {
            // a bound applies to numbers only, and a node without a type admits any value: the bound was dropped, and
            // {"minimum": 0} produced -99999999999999999999999
            for (String bound : BOUNDS)
                if (n.has(bound))
                    throw new UnsupportedSchemaException(bound, path, bound + " at '" + path + "' without type number or"
                            + " integer is not supported: add \"type\": \"number\" or \"integer\" next to it");
            // the same for a string's keywords: {"maxLength": 3} alone would let any number or object through
            for (String k : STRING_KEYWORDS)
                if (n.has(k))
                    throw new UnsupportedSchemaException(k, path, k + " at '" + path + "' without type string is not"
                            + " supported: add \"type\": \"string\" next to it");
            if (n.has("properties") || n.has("required") || n.has("additionalProperties")) return typed(n, "object", path);
            if (n.has("items") || n.has("minItems") || n.has("maxItems")) return typed(n, "array", path);
            return add(new Schema.Any());
        }
        if (t.isTextual()) return typed(n, t.textValue(), path);
        if (t.isArray() && !t.isEmpty()) {
            Schema.AnyOf u = add(new Schema.AnyOf());
            anyOfPaths.put(u, path);
            u.options = new Schema[t.size()];
            for (int i = 0; i < t.size(); i++) {
                if (!t.get(i).isTextual()) throw UnsupportedSchemaException.invalid("type", path, "type at '" + path + "' must be a type name or a list of them");
                u.options[i] = typed(n, t.get(i).textValue(), path);
            }
            return u;
        }
        throw UnsupportedSchemaException.invalid("type", path, "type at '" + path + "' must be a type name or a list of them");
    }

    private Schema typed(JsonNode n, String type, String path) {
        return switch (type) {
            case "string" -> string(n, path);
            case "number", "integer" -> {
                if (type.equals("integer") && ranged(n)) yield integerRange(n, path);
                for (String k : List.of("exclusiveMinimum", "exclusiveMaximum")) {
                    if (n.has(k) && n.get(k).isNull())
                        throw UnsupportedSchemaException.invalid(k, path, k + " at '" + path + "' is null: it must be a number");
                    if (n.has(k))
                        throw new UnsupportedSchemaException(k, path, k + " at '" + path + "' is supported on type integer"
                                + " only, not on type number");
                }
                boolean nonNegative = false;
                int maxIntDigits = -1;
                String posCap = null, negCap = null;
                JsonNode min = n.get("minimum"), max = n.get("maximum");
                // JSON Schema asks for a number here: a null bound is no bound the client may think it set (it was
                // ignored, and a 24-digit number came out under "minimum": null)
                // (and "1", true or [3] is no bound of another kind: the schema is wrong, not outside what is held)
                if (min != null && !min.isNumber())
                    throw UnsupportedSchemaException.invalid("minimum", path, "minimum at '" + path + "' is " + clipped(min.toString())
                            + ": it must be a number");
                if (max != null && !max.isNumber())
                    throw UnsupportedSchemaException.invalid("maximum", path, "maximum at '" + path + "' is " + clipped(max.toString())
                            + ": it must be a number");
                // the bounds as written, read once and compared exactly: 1e-400 is no 0 (its double is), 1e400 is named
                // so, not Infinity
                java.math.BigDecimal lo = min != null && min.isNumber() ? bound(min, "minimum", path) : null;
                java.math.BigDecimal hi = max != null && max.isNumber() ? bound(max, "maximum", path) : null;
                // minimum == maximum asks for one value, which const gives; the ranges alone did not say so (whichever
                // of the two is refused)
                String one = lo != null && hi != null && lo.compareTo(hi) == 0
                        ? "; for the one value minimum and maximum allow, write \"const\": " + shown(min, path) : "";
                if (min != null) {
                    if (lo == null || !(lo.signum() == 0 || lo.compareTo(java.math.BigDecimal.valueOf(-BOUND)) <= 0))
                        throw new UnsupportedSchemaException("minimum", path, "minimum " + shown(min, path) + " at '" + path
                                + "' is not supported (only 0, or a minimum at or below -" + (long) BOUND + ")" + one);
                    if (lo.signum() == 0) nonNegative = true;
                    else negCap = fractionCap(lo.negate());
                    maxIntDigits = BOUNDED_DIGITS;
                }
                if (max != null) {
                    if (hi == null || hi.compareTo(java.math.BigDecimal.valueOf(BOUND)) < 0)
                        throw new UnsupportedSchemaException("maximum", path, "maximum " + shown(max, path) + " at '" + path
                                + "' is not supported (only a maximum at or above " + (long) BOUND + ")" + one);
                    posCap = fractionCap(hi);
                    maxIntDigits = BOUNDED_DIGITS;
                }
                boolean integer = type.equals("integer"), nn = nonNegative;
                // an integer has no fraction, so 15 digits stay within any supported bound
                String pc = integer ? null : posCap, nc = integer ? null : negCap;
                // An integer has at most 15 digits even without bounds, so a JavaScript client (whose numbers are
                // doubles) reads it exactly: 24 digits came out as 933647685126847349171777, which JS rounds. The
                // schema's own bounds never ask for more: the only ones supported are 0 and ±999,999,999,999,999 or
                // wider, and a wider bound allows larger integers without requiring any.
                int digits = integer ? BOUNDED_DIGITS : maxIntDigits;
                yield shared(Arrays.asList("number", integer, nn, digits, pc, nc), () -> {
                    Schema.Num num = new Schema.Num(integer);
                    num.nonNegative = nn;
                    num.maxIntDigits = digits;
                    num.posCap = pc;
                    num.negCap = nc;
                    return num;
                });
            }
            case "boolean" -> literals(List.of("true", "false"));
            case "null" -> literals(List.of("null"));
            case "array" -> {
                int min = count(n, "minItems", path, 0);
                int max = count(n, "maxItems", path, -1);
                if (max >= 0 && max < min) throw UnsupportedSchemaException.invalid("maxItems", path, "maxItems is below minItems at '" + path + "'");
                Schema.Arr a = add(new Schema.Arr(min, max));
                arrayPaths.put(a, path);
                a.items = n.has("items") ? node(n.get("items"), path + "/items") : add(new Schema.Any());
                yield a;
            }
            case "object" -> object(n, path);
            default -> throw UnsupportedSchemaException.invalid("type", path, "type '" + type + "' at '" + path + "' is not a JSON Schema type");
        };
    }

    /**
     * Whether an integer node's bounds ask for more than {@link Schema.Num} holds (0, or ±999,999,999,999,999 and
     * beyond): an exclusive bound, or another minimum or maximum. Null and non-number bounds are left to the number
     * node, which names them.
     */
    private static boolean ranged(JsonNode n) {
        if (n.has("exclusiveMinimum") || n.has("exclusiveMaximum")) return true;
        JsonNode min = n.get("minimum"), max = n.get("maximum");
        if (min != null && min.isNumber()) {
            java.math.BigDecimal lo = Json.exact(min, "");
            if (lo != null && lo.signum() != 0 && lo.compareTo(java.math.BigDecimal.valueOf(-BOUND)) > 0) return true;
        }
        if (max != null && max.isNumber()) {
            java.math.BigDecimal hi = Json.exact(max, "");
            return hi != null && hi.compareTo(java.math.BigDecimal.valueOf(BOUND)) < 0;
        }
        return false;
    }

    /**
     * An integer node held to its bounds as a pattern of the decimal integers between them ({@link Formats#integers}),
     * within ±999,999,999,999,999 as every integer is here: a minimum is rounded up, a maximum down, and an exclusive
     * bound moves to the next integer inside it. Refuses a bound that is no number, and bounds no such integer lies
     * within.
     */
    private Schema integerRange(JsonNode n, String path) {
        long lo = -(long) BOUND, hi = (long) BOUND;
        String loBy = null, hiBy = null;
        for (String k : BOUNDS) {
            JsonNode b = n.get(k);
            if (b == null) continue;
            if (!b.isNumber())
                throw UnsupportedSchemaException.invalid(k, path, k + " at '" + path + "' is " + (b.isNull() ? "null" : b.toString())
                        + ": it must be a number");
            java.math.BigDecimal v = bound(b, k, path);
            boolean lower = k.endsWith("inimum");
            // the integer nearest the bound on its inside, kept within one past the 15 digits integers have here
            java.math.BigDecimal edge = switch (k) {
                case "minimum" -> rounded(v, java.math.RoundingMode.CEILING);
                case "exclusiveMinimum" -> rounded(v, java.math.RoundingMode.FLOOR).add(java.math.BigDecimal.ONE);
                case "maximum" -> rounded(v, java.math.RoundingMode.FLOOR);
                default -> rounded(v, java.math.RoundingMode.CEILING).subtract(java.math.BigDecimal.ONE);
            };
            long e = edge.max(java.math.BigDecimal.valueOf(-BOUND - 1)).min(java.math.BigDecimal.valueOf(BOUND + 1)).longValueExact();
            if (lower && e > lo) {
                lo = e;
                loBy = k;
            }
            if (!lower && e < hi) {
                hi = e;
                hiBy = k;
            }
        }
        if (lo > hi) {
            // named: a bound past the 15 digits alone, else the two that leave nothing between them
            if (lo > BOUND || hi < -BOUND) {
                String k = lo > BOUND ? loBy : hiBy;
                // the schema has values; integers this long are what this server does not hold
                throw new UnsupportedSchemaException(k, path, k + " " + clipped(shown(n.get(k), path)) + " at '" + path
                        + "' leaves no integer of at most " + BOUNDED_DIGITS + " digits (integers here stay within ±"
                        + (long) BOUND + ", which JavaScript clients read exactly)");
            }
            throw UnsupportedSchemaException.invalid(hiBy, path, "no value satisfies the schema at '" + path + "': no integer is"
                    + " at or above " + lo + " and at or below " + hi + " (its " + loBy + " and " + hiBy + ")");
        }
        long a = lo, b = hi;
        return shared(Arrays.asList("integers", a, b), () -> new Schema.Text(Regex.compile(Formats.integers(a, b))));
    }

    /**
     * v rounded to an integer up (CEILING) or down (FLOOR). A magnitude below 1 gives 0 or ±1 without BigDecimal's
     * rescaling, which for 1e-300000000 (a scale of 3e8 with one digit written) built a power of ten of that many
     * digits: minutes on an event loop, and at 1e-999999999 an ArithmeticException answered 500. At or above 1 the
     * scale is at most the digits written, so the rescaling is as cheap as reading the number.
     */
    private static java.math.BigDecimal rounded(java.math.BigDecimal v, java.math.RoundingMode mode) {
        if (v.signum() != 0 && (long) v.precision() - v.scale() <= 0) {  // 0 < |v| < 1
            if (mode == java.math.RoundingMode.CEILING) return v.signum() > 0 ? java.math.BigDecimal.ONE : java.math.BigDecimal.ZERO;
            return v.signum() < 0 ? java.math.BigDecimal.ONE.negate() : java.math.BigDecimal.ZERO;
        }
        return v.setScale(0, mode);
    }

    /**
     * For a bound's magnitude at or above 999,999,999,999,999: null from 10^15 on (no number of 15 integer digits
     * reaches it), else the digits of its fraction ("" for none), which {@link States.Num} keeps a number whose integer
     * part is 15 nines within. Digits past {@link States#MAX_NUMBER} are dropped: no number has that many, and reading
     * them as 0 only narrows the cap.
     */
    private static String fractionCap(java.math.BigDecimal magnitude) {
        java.math.BigDecimal f = magnitude.subtract(java.math.BigDecimal.valueOf(BOUND));
        if (f.compareTo(java.math.BigDecimal.ONE) >= 0) return null;
        if (f.signum() == 0) return "";
        String digits = f.stripTrailingZeros().toPlainString().substring(2); // "0.xyz"
        return digits.substring(0, Math.min(digits.length(), States.MAX_NUMBER));
    }

    /** Integer digits past which a bound is refused: 1e999999999 - 999999999999999 took a billion digits, or threw. */
    private static final int BOUND_DIGITS = 1000;

    /**
     * A bound's exact value, refused where it has more than {@link #BOUND_DIGITS} integer digits: BigDecimal's
     * arithmetic on 1e999999999 threw "BigInteger would overflow supported range", and on 1e2147483648 (a scale at
     * int's limit) "Underflow", both answered 500.
     */
    private static java.math.BigDecimal bound(JsonNode b, String keyword, String path) {
        java.math.BigDecimal m = Json.exact(b, path);
        if (m != null && m.signum() != 0 && (long) m.precision() - m.scale() > BOUND_DIGITS)
            throw new UnsupportedSchemaException(keyword, path, keyword + " " + clipped(shown(b, path)) + " at '" + path
                    + "' is too large to compare: write a bound below 1e" + BOUND_DIGITS + " in magnitude");
        return m;
    }

    /** A value's text cut to 40 characters for a message (a number may be written with thousands of digits). */
    private static String clipped(String t) {
        return t.length() > 40 ? t.substring(0, 40) + "..." : t;
    }

    /** A bound as an error names it: a number as written ({@link Json#numberText}), anything else as JSON. */
    private static String shown(JsonNode v, String path) {
        return v.isNumber() ? Json.numberText(v, path) : v.toString();
    }

    /**
     * Refuses a keyword outside the subset, so that nothing the client asked for is silently not enforced, and a
     * pattern or format the engine cannot hold a string to, wherever it is (on a node of another type it holds nothing,
     * yet would be refused once the type allows strings).
     */
    private void keywords(JsonNode n, String path) {
        for (var e : n.properties()) {
            String k = e.getKey();
            if (!ANNOTATIONS.contains(k) && !STRUCTURE.contains(k))
                throw new UnsupportedSchemaException(k, path, "JSON Schema keyword '" + k + "' (at '" + path + "/" + k
                        + "') is not supported by constrained decoding");
        }
        pattern(n, path);
        format(n, path);
    }

    /**
     * Refuses, before anything is compiled, a keyword outside the subset whose value JSON Schema itself refuses
     * ({@link #invalidValue}) anywhere in the schema: the schema is wrong, whatever the subset, and a client told "not
     * supported" would think it valid; the compile, which stops at the first keyword it does not support, would not
     * reach one after it. Walks the places a schema holds schemas, 2020-12's and the older drafts' (a property named
     * {@code multipleOf} is a name, not the keyword).
     * @throws UnsupportedSchemaException {@link UnsupportedSchemaException#invalid} naming the first such keyword and where it is
     */
    static void invalidValues(JsonNode n, String path) {
        if (n == null || !n.isObject()) return;
        for (var e : n.properties()) {
            String k = e.getKey(), why = invalidValue(k, e.getValue());
            if (why != null)
                throw UnsupportedSchemaException.invalid(k, path, k + " at '" + path + "' is " + clipped(shown(e.getValue(), null)) + ": " + why);
        }
        for (var e : n.properties()) {
            String k = e.getKey();
            JsonNode v = e.getValue();
            switch (k) {
                // dependencies (draft 7): a schema or a list of property names by property
                case "properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies" -> {
                    if (v.isObject()) for (var p : v.properties()) invalidValues(p.getValue(), path + "/" + k + "/" + escaped(p.getKey()));
                }
                case "anyOf", "oneOf", "allOf", "prefixItems" -> {
                    if (v.isArray()) for (int i = 0; i < v.size(); i++) invalidValues(v.get(i), path + "/" + k + "/" + i);
                }
                case "items" -> {
                    if (v.isArray()) for (int i = 0; i < v.size(); i++) invalidValues(v.get(i), path + "/items/" + i);
                    else invalidValues(v, path + "/items");
                }
                case "not", "if", "then", "else", "contains", "additionalProperties", "additionalItems", "unevaluatedProperties",
                     "unevaluatedItems", "propertyNames", "contentSchema" -> invalidValues(v, path + "/" + k);
                default -> { }
            }
        }
    }

    /**
     * What is wrong, as JSON Schema (2020-12, validation vocabulary) reads it, with the value of a keyword outside the
     * subset that takes a number of a kind: {@code multipleOf} must be above 0, {@code minProperties},
     * {@code maxProperties}, {@code minContains} and {@code maxContains} must be integers at or above 0,
     * {@code uniqueItems} a boolean; null where the value is valid or the keyword is not one of these.
     */
    static String invalidValue(String keyword, JsonNode v) {
        // decided on the number as written, as the bounds are: 1e-400 is above 0 (its double is 0), 2.0000000000000000001
        // is no integer (its double is)
        java.math.BigDecimal x = v.isNumber() ? Json.exact(v, null) : null;
        // another reader's double past the range has lost its text ("Infinity"): its sign is kept, and it is whole
        int sign = x != null ? x.signum() : v.isNumber() ? (int) Math.signum(v.doubleValue()) : 0;
        boolean whole = x == null || x.signum() == 0 || x.stripTrailingZeros().scale() <= 0;
        return switch (keyword) {
            case "multipleOf" -> v.isNumber() && sign > 0 ? null : "it must be a number above 0";
            case "minProperties", "maxProperties", "minContains", "maxContains" ->
                    v.isNumber() && sign >= 0 && whole ? null : "it must be an integer at or above 0";
            case "uniqueItems" -> v.isBoolean() ? null : "it must be true or false";
            default -> null;
        };
    }

    /** Patterns compiled, by their text: a node checked again, and equal patterns, share one. */
    private final Map<String, Regex> patterns = new HashMap<>();

    /** A node's pattern (null: none), compiled: the whole string must match it. */
    private Regex pattern(JsonNode n, String path) {
        JsonNode p = n.get("pattern");
        if (p == null || p.isNull()) return null;
        if (!p.isTextual())
            throw UnsupportedSchemaException.invalid("pattern", path, "pattern at '" + path + "' must be a string (a regular expression)");
        Regex re = patterns.get(p.textValue());
        if (re == null) {
            try {
                re = Regex.compile(p.textValue());
            } catch (UnsupportedRegexException e) {
                throw new UnsupportedSchemaException("pattern", path, "pattern at '" + path + "': " + e.getMessage());
            }
            patterns.put(p.textValue(), re);
        }
        return re;
    }

    /** Whether a pattern is anchored at both ends (a trailing '$' not escaped), so that reading it whole changes nothing. */
    static boolean wholeStringPattern(String p) {
        if (!p.startsWith("^") || !p.endsWith("$") || p.length() < 2) return false;
        int slashes = 0;
        for (int k = p.length() - 2; k >= 0 && p.charAt(k) == '\\'; k--) slashes++;
        return slashes % 2 == 0;
    }

    /** A node's format (null: none). */
    private static Formats.Format format(JsonNode n, String path) {
        JsonNode f = n.get("format");
        if (f == null || f.isNull()) return null;
        if (!f.isTextual()) throw UnsupportedSchemaException.invalid("format", path, "format at '" + path + "' must be a string");
        Formats.Format known = Formats.of(f.textValue());
        if (known == null)
            throw new UnsupportedSchemaException("format", path, "format " + clipped(f.toString()) + " at '" + path
                    + "' is not supported by constrained decoding (supported: " + Formats.NAMES + ")");
        return known;
    }

    /**
     * A string node: a plain string, or one held to its length range and its pattern or format ({@link Schema.StrOf}).
     * Refuses a range no string of the pattern has, a pattern beside a format, and a pattern or format beside a
     * length range whose {@link Regex#charCounts} would take more than {@link #MAX_COUNT_BITS}.
     */
    private Schema string(JsonNode n, String path) {
        int min = count(n, "minLength", path, 0), max = count(n, "maxLength", path, -1);
        if (max >= 0 && max < min)
            throw UnsupportedSchemaException.invalid("maxLength", path, "maxLength is below minLength at '" + path + "'");
        Regex pattern = pattern(n, path);
        Formats.Format format = format(n, path);
        if (pattern != null && format != null)
            throw new UnsupportedSchemaException("format", path, "'format' next to 'pattern' (at '" + path + "') is not"
                    + " supported: keep one (a pattern can spell the format out)");
        String held = pattern != null ? "pattern" : "format " + (format != null ? n.get("format") : "");
        if (format != null && format.maxLength() >= 0 && (max < 0 || max > format.maxLength())) {
            max = format.maxLength();
            if (max < min)
                throw UnsupportedSchemaException.invalid("minLength", path, "no value satisfies the schema at '" + path
                        + "': its " + held + " allows at most " + max + " characters, fewer than its minLength " + min);
        }
        Regex re = pattern != null ? pattern : format != null ? format.re() : null;
        if (re == null && min == 0 && max < 0) return add(new Schema.Str());
        if (min >= GState.FAR - 2)
            throw new UnsupportedSchemaException("minLength", path, "minLength " + min + " at '" + path + "' makes the"
                    + " shortest value of the schema longer than " + String.format("%,d", GState.FAR) + " bytes, more than any output can hold");
        java.util.BitSet[] counts = null;
        int cap = 0;
        if (re != null && (min > 0 || max >= 0)) {
            cap = max >= 0 ? max : min + re.size();
            if ((long) re.size() * (cap + 1L) > MAX_COUNT_BITS)
                throw new UnsupportedSchemaException(max >= 0 ? "maxLength" : "minLength", path, (max >= 0 ? "maxLength " + max
                        : "minLength " + min) + " at '" + path + "' is too large beside its " + held + ": the " + held
                        + "'s " + re.size() + " NFA positions times the lengths to tell apart pass " + String.format("%,d", MAX_COUNT_BITS)
                        + "; lower it or hold the string to the " + held + " alone");
            counts = re.charCounts(cap);
            if (!((Regex.At) re.start()).endsWithin(counts, min, max >= 0 ? max : cap)) {
                String kw = max >= 0 ? "maxLength" : "minLength", none = "no string " + (max < 0 ? "of at least " + min
                        : min == max ? "of " + min : "of " + min + " to " + max) + " characters matches its " + held;
                // JSON Schema reads a pattern unanchored; here the whole string must match it, so a pattern not written
                // for the whole string may leave no value here where the schema has some: that is this server's limit
                if (pattern != null && !wholeStringPattern(n.get("pattern").textValue()))
                    throw new UnsupportedSchemaException(kw, path, none + " at '" + path + "' as a whole (constrained decoding"
                            + " matches a pattern against the whole string, as if written ^(?:...)$, where JSON Schema also"
                            + " takes a match inside it): write the pattern for the whole string, e.g. '^[A-Z]' as '^[A-Z].*$'");
                throw UnsupportedSchemaException.invalid(kw, path, "no value satisfies the schema at '" + path + "': " + none);
            }
        }
        int lo = min, hi = max, c = cap;
        java.util.BitSet[] rows = counts;
        Regex r = re != null ? re : Schema.StrOf.ANY_TEXT;
        return shared(Arrays.asList("string", r, lo, hi), () -> new Schema.StrOf(r, lo, hi, rows, c));
    }

    /**
     * The values of a node's const (else its enum) that satisfy every keyword of the node ({@link #satisfies}): the
     * output must be valid for the whole node, so {@code {"type": "integer", "enum": ["a"]}} must not produce "a".
     * When none does, no output is valid and the schema is refused.
     */
    private Schema literals(JsonNode n, String path) {
        JsonNode en = n.get("enum");
        if (en != null && (!en.isArray() || en.isEmpty()))
            throw UnsupportedSchemaException.invalid("enum", path, "enum at '" + path + "' must be a non-empty array");
        boolean isConst = n.has("const");
        List<JsonNode> candidates = new ArrayList<>();
        if (isConst) candidates.add(n.get("const"));
        else en.forEach(candidates::add);
        List<String> texts = new ArrayList<>();
        // each value against the node less the keyword it came from (it is a member of that): against the whole enum
        // again, n values took n^2 comparisons, seconds on an event loop for 50,000
        String own = isConst ? "const" : "enum";
        for (JsonNode v : candidates) finite(v, path, own);
        for (JsonNode v : candidates) if (check(v, n, path, own)) texts.add(Json.write(v, path));
        if (texts.isEmpty()) {
            // named: the keywords that alone rule out every value (else, where only together, all of them)
            List<String> others = new ArrayList<>(), alone = new ArrayList<>();
            for (var e : n.properties()) {
                if (!STRUCTURE.contains(e.getKey()) || e.getKey().equals(own)) continue;
                others.add("'" + e.getKey() + "'");
                com.fasterxml.jackson.databind.node.ObjectNode only = com.fasterxml.jackson.databind.node.JsonNodeFactory.instance.objectNode();
                only.set(e.getKey(), e.getValue());
                boolean any = false;
                for (JsonNode v : candidates) any |= check(v, only, path, null);
                if (!any) alone.add("'" + e.getKey() + "'");
            }
            throw UnsupportedSchemaException.invalid(own, path, "no value satisfies the schema at '" + path + "': "
                    + (isConst ? "its const is not" : "none of its enum values is") + " valid for "
                    + String.join(", ", alone.isEmpty() ? others : alone) + (alone.isEmpty() && others.size() > 1 ? " together" : ""));
        }
        return literals(texts);
    }

    /**
     * Refuses a literal holding a number past the double range (1e400): every client reads it as Infinity or not at
     * all, so producing it as written gives no usable value.
     */
    private static void finite(JsonNode v, String path, String own) {
        if (v.isNumber()) {
            String t = Json.numberText(v, path);
            if (Double.isInfinite(Double.parseDouble(t)))
                throw new UnsupportedSchemaException(own, path, "the number " + clipped(t) + " in the " + own + " at '" + path
                        + "' is beyond the double range (clients read it as Infinity); write a number within ±1.7976931348623157e308");
        }
        for (JsonNode x : v) finite(x, path, own);
    }

    /** Largest integer every JavaScript client reads exactly (2^53 − 1). */
    private static final java.math.BigDecimal MAX_EXACT = java.math.BigDecimal.valueOf((1L << 53) - 1);

    /** Results of {@link #satisfies} per value and schema node (by identity); null while one is being decided. */
    private final Map<JsonNode, Map<JsonNode, Boolean>> checked = new IdentityHashMap<>();

    /**
     * Whether a value is valid for a schema of the supported subset, every keyword of every node it reaches counting,
     * each as JSON Schema reads it (bounds only for numbers, {@code properties} and {@code required} only for objects,
     * and so on); a keyword outside the subset or a malformed one is refused as {@link #node} refuses it. Results are
     * kept per value and schema node, so anyOf and {@code $ref} that share subschemas are each decided once.
     */
    private boolean satisfies(JsonNode v, JsonNode s, String path) {
        Map<JsonNode, Boolean> forValue = checked.computeIfAbsent(v, k -> new IdentityHashMap<>());
        if (forValue.containsKey(s)) {
            Boolean r = forValue.get(s);
            if (r == null)
                throw UnsupportedSchemaException.invalid("$ref", path, "$ref at '" + path + "' leads back to the same schema through"
                        + " $ref and anyOf alone, with nothing in between, so no value can be checked against it");
            return r;
        }
        forValue.put(s, null);
        boolean r = check(v, s, path, null);
        forValue.put(s, r);
        return r;
    }

    /** {@link #satisfies} without its cache; own: "const" or "enum" where v is a value of that keyword of s (not checked again), else null. */
    private boolean check(JsonNode v, JsonNode s, String path, String own) {
        if (s.isBoolean()) return s.booleanValue();
        if (!s.isObject()) throw UnsupportedSchemaException.invalid("type", path, "schema at '" + path + "' must be an object, or true or false");
        keywords(s, path);
        JsonNode c = s.get("const");
        if (c != null && !"const".equals(own) && !equal(v, c, path)) return false;
        JsonNode en = "enum".equals(own) ? null : s.get("enum");
        if (en != null) {
            if (!en.isArray() || en.isEmpty()) throw UnsupportedSchemaException.invalid("enum", path, "enum at '" + path + "' must be a non-empty array");
            boolean in = false;
            for (JsonNode x : en) in |= equal(v, x, path);
            if (!in) return false;
        }
        JsonNode t = s.get("type");
        if (t != null && !t.isNull()) {
            boolean ok = false;
            if (t.isTextual()) ok = ofType(v, t.textValue(), path);
            else if (t.isArray() && !t.isEmpty()) {
                for (JsonNode x : t) {
                    if (!x.isTextual()) throw UnsupportedSchemaException.invalid("type", path, "type at '" + path + "' must be a type name or a list of them");
                    ok |= ofType(v, x.textValue(), path);
                }
            } else throw UnsupportedSchemaException.invalid("type", path, "type at '" + path + "' must be a type name or a list of them");
            if (!ok) return false;
            // where the value is valid as an integer only, it must be one a JavaScript client reads exactly, as every
            // integer the number grammar produces is (9007199254740993 reads as ...992)
            boolean number = t.isTextual() ? t.textValue().equals("number") : false;
            if (t.isArray()) for (JsonNode x : t) number |= x.textValue().equals("number");
            if (v.isNumber() && !number && Json.exact(v, path).abs().compareTo(MAX_EXACT) > 0)
                throw new UnsupportedSchemaException("type", path, "the integer " + clipped(Json.numberText(v, path)) + " of an enum or"
                        + " const at '" + path + "' (type integer) is past 2^53 - 1 (9007199254740991), which JavaScript clients"
                        + " cannot read exactly; write an integer within ±9007199254740991");
        }
        if (v.isNumber()) {
            for (String bound : BOUNDS) {
                JsonNode b = s.get(bound);
                if (b == null || b.isNull()) continue;
                if (!b.isNumber()) throw UnsupportedSchemaException.invalid(bound, path, bound + " at '" + path + "' must be a number");
                int cmp = Json.exact(v, path).compareTo(bound(b, bound, path));
                boolean out = switch (bound) {
                    case "minimum" -> cmp < 0;
                    case "exclusiveMinimum" -> cmp <= 0;
                    case "maximum" -> cmp > 0;
                    default -> cmp >= 0;
                };
                if (out) return false;
            }
        }
        if (v.isTextual()) {
            String text = v.textValue();
            int chars = text.codePointCount(0, text.length());
            if (chars < count(s, "minLength", path, 0)) return false;
            int max = count(s, "maxLength", path, -1);
            if (max >= 0 && chars > max) return false;
            Regex re = pattern(s, path);
            if (re != null && !re.matches(text)) return false;
            Formats.Format f = format(s, path);
            if (f != null && (!f.re().matches(text) || f.maxLength() >= 0 && chars > f.maxLength())) return false;
        }
        if (v.isArray()) {
            int min = count(s, "minItems", path, 0), max = count(s, "maxItems", path, -1);
            if (v.size() < min || max >= 0 && v.size() > max) return false;
            JsonNode items = s.get("items");
            if (items != null && !items.isNull())
                for (JsonNode x : v) if (!satisfies(x, items, path + "/items")) return false;
        }
        if (v.isObject()) {
            JsonNode ap = s.get("additionalProperties");
            if (ap != null && !ap.isBoolean())
                throw new UnsupportedSchemaException("additionalProperties", path, "additionalProperties at '" + path + "' must be false (or true); a schema there is not supported");
            JsonNode props = s.get("properties");
            if (props != null && !props.isNull() && !props.isObject())
                throw UnsupportedSchemaException.invalid("properties", path, "properties at '" + path + "' must be an object");
            for (var e : v.properties()) {
                JsonNode p = props == null || props.isNull() ? null : props.get(e.getKey());
                if (p != null) {
                    if (!satisfies(e.getValue(), p, property(path, e.getKey()))) return false;
                } else if (ap != null && !ap.booleanValue()) return false;
            }
            JsonNode r = s.get("required");
            if (r != null && !r.isNull()) {
                if (!r.isArray()) throw UnsupportedSchemaException.invalid("required", path, "required at '" + path + "' must be an array of names");
                for (JsonNode x : r) {
                    if (!x.isTextual()) throw UnsupportedSchemaException.invalid("required", path, "required at '" + path + "' must be an array of names");
                    if (!v.has(x.textValue())) return false;
                }
            }
        }
        JsonNode a = s.get("anyOf");
        if (a != null) {
            if (!a.isArray() || a.isEmpty()) throw UnsupportedSchemaException.invalid("anyOf", path, "anyOf at '" + path + "' must be a non-empty array");
            boolean any = false;
            for (int i = 0; i < a.size() && !any; i++) any = satisfies(v, a.get(i), path + "/anyOf/" + i);
            if (!any) return false;
        }
        JsonNode ref = s.get("$ref");
        if (ref != null) {
            String ptr = refPointer(ref, path);
            return satisfies(v, at(ptr), ptr);
        }
        return true;
    }

    /**
     * The JSON pointer of the $ref written at path ("" for "#"), which names a node of the schema ({@link #at}).
     * @throws UnsupportedSchemaException for a reference that is not local, or one that does not resolve: named where it
     *                                    is written, since its pointer names no node
     */
    private String refPointer(JsonNode ref, String path) {
        if (!ref.isTextual() || !(ref.textValue().equals("#") || ref.textValue().startsWith("#/")))
            throw new UnsupportedSchemaException("$ref", path, "$ref at '" + path + "' must be a local reference such as \"#/$defs/Name\"");
        String ptr = ref.textValue().substring(1);
        JsonNode target = at(ptr);
        if (target == null || target.isMissingNode())
            throw UnsupportedSchemaException.invalid("$ref", path, "$ref \"#" + ptr + "\" at '" + path + "' does not resolve");
        return ptr;
    }

    /**
     * The JSON pointer of property name's schema under the node at path, the name escaped as RFC 6901 asks ('~' as
     * "~0", '/' as "~1"), so that a name holding either reads back as one name, as a $ref's pointer does.
     */
    static String property(String path, String name) {
        return path + "/properties/" + escaped(name);
    }

    /** A name as one step of a JSON pointer (RFC 6901: '~' as "~0", '/' as "~1"). */
    private static String escaped(String name) {
        return name.replace("~", "~0").replace("/", "~1");
    }

    /** The schema node a pointer names (the root for ""). */
    private JsonNode at(String ptr) {
        return ptr.isEmpty() ? root : root.at(ptr);
    }

    /** Whether a value is of a JSON Schema type; an integer is a number of integral value however written, as the server reads one. */
    private static boolean ofType(JsonNode v, String type, String path) {
        return switch (type) {
            case "string" -> v.isTextual();
            case "number" -> v.isNumber();
            case "integer" -> v.isNumber() && io.ds4j.json.JsonNumbers.isIntegral(v);
            case "boolean" -> v.isBoolean();
            case "null" -> v.isNull();
            case "array" -> v.isArray();
            case "object" -> v.isObject();
            default -> throw UnsupportedSchemaException.invalid("type", path, "type '" + type + "' at '" + path + "' is not a JSON Schema type");
        };
    }

    /** JSON equality, as enum and const compare: numbers by exact value (1 and 1.0 are equal), objects whatever their key order. */
    private static boolean equal(JsonNode a, JsonNode b, String path) {
        if (a.isNumber() && b.isNumber()) return Json.exact(a, path).compareTo(Json.exact(b, path)) == 0;
        if (a.getNodeType() != b.getNodeType() || a.size() != b.size()) return false;
        if (a.isArray()) {
            for (int i = 0; i < a.size(); i++) if (!equal(a.get(i), b.get(i), path)) return false;
            return true;
        }
        if (a.isObject()) {
            for (var e : a.properties()) {
                JsonNode o = b.get(e.getKey());
                if (o == null || !equal(e.getValue(), o, path)) return false;
            }
            return true;
        }
        return a.equals(b);
    }

    private Schema literals(List<String> texts) {
        return shared(List.of("literals", texts), () -> new Schema.Literals(texts));
    }

    private Schema shared(List<Object> key, java.util.function.Supplier<Schema> make) {
        Schema s = shared.get(key);
        if (s == null) {
            s = add(make.get());
            shared.put(key, s);
        }
        return s;
    }

    private Schema object(JsonNode n, String path) {
        JsonNode ap = n.get("additionalProperties");
        if (ap != null && !ap.isBoolean())
            throw new UnsupportedSchemaException("additionalProperties", path, "additionalProperties at '" + path + "' must be false (or true); a schema there is not supported");
        JsonNode props = n.get("properties");
        // no object has a required property that properties does not define where additionalProperties false rules
        // out every other; the node has no value at all only where its type allows nothing but an object
        boolean noOthers = ap != null && !ap.booleanValue(), closed = noOthers && onlyObject(n.get("type"));
        // JSON Schema's form of required, checked whether properties are declared or not (a string or a number there
        // was read as no names where nothing is declared, and [5] named as an undefined property)
        JsonNode r = n.get("required");
        if (r != null && !r.isNull()) {
            if (!r.isArray()) throw UnsupportedSchemaException.invalid("required", path, "required at '" + path + "' must be an array of names");
            for (JsonNode x : r)
                if (!x.isTextual())
                    throw UnsupportedSchemaException.invalid("required", path, "required at '" + path + "' must be an array of names, not " + x);
        }
        if (props == null || props.isNull()) {
            if (r != null && !r.isNull() && !r.isEmpty()) {
                if (closed) throw noValueRequires(r.get(0), path);
                throw new UnsupportedSchemaException("required", path, "required at '" + path + "' names properties that 'properties' does not define");
            }
            if (noOthers) return add(new Schema.Obj(List.of(), new Schema[0], new boolean[0]));
            return add(new Schema.AnyObject());
        }
        if (!props.isObject()) throw UnsupportedSchemaException.invalid("properties", path, "properties at '" + path + "' must be an object");
        // counted before the properties compile: a schema far past the bound is refused without building its nodes
        properties += props.size();
        if (properties > MAX_PROPERTIES)
            throw new UnsupportedSchemaException("properties", path, "the schema declares more than " + String.format("%,d", MAX_PROPERTIES)
                    + " properties in all (" + String.format("%,d", props.size()) + " at '" + path + "/properties'), more than constrained"
                    + " decoding takes: each token's mask is tested against the property names");
        Map<String, JsonNode> defs = new LinkedHashMap<>();
        for (var e : props.properties()) defs.put(e.getKey(), e.getValue());
        java.util.Set<String> req = new java.util.HashSet<>();
        if (r != null && !r.isNull()) {
            for (JsonNode x : r) {
                if (closed && !defs.containsKey(x.textValue())) throw noValueRequires(x, path);
                if (!defs.containsKey(x.textValue()))
                    throw new UnsupportedSchemaException("required", path, "required at '" + path + "' names " + x + ", which 'properties' does not define");
                req.add(x.textValue());
            }
        }
        List<String> names = new ArrayList<>(defs.keySet());
        Schema[] ps = new Schema[names.size()];
        boolean[] rq = new boolean[names.size()];
        for (int i = 0; i < ps.length; i++) {
            ps[i] = node(defs.get(names.get(i)), property(path, names.get(i)));
            rq[i] = req.contains(names.get(i));
        }
        return add(new Schema.Obj(names, ps, rq));
    }

    /** Whether a node's "type" allows objects alone: "object", or ["object"] (absent: every type). */
    private static boolean onlyObject(JsonNode type) {
        if (type == null) return false;
        if (type.isTextual()) return type.textValue().equals("object");
        return type.isArray() && type.size() == 1 && type.get(0).isTextual() && type.get(0).textValue().equals("object");
    }

    /**
     * An object-only schema that requires a property it does not define while additionalProperties false forbids every
     * other: no value satisfies it, so the schema is wrong (without additionalProperties false it has values, which
     * constrained decoding, producing only declared properties, cannot write: that is unsupported instead).
     */
    private static UnsupportedSchemaException noValueRequires(JsonNode name, String path) {
        return UnsupportedSchemaException.invalid("required", path, "no value satisfies the schema at '" + path + "': required names "
                + name + ", which 'properties' does not define and additionalProperties false rules out");
    }

    /**
     * A count keyword's value (minItems, maxItems), def when absent. An integer as JSON Schema reads one, so 2.0 and
     * 2e0 are 2; one past an int is named too large rather than "no integer" (2147483648 and 1e20 are integers).
     */
    private static int count(JsonNode n, String f, String path, int def) {
        JsonNode v = n.get(f);
        if (v == null || v.isNull()) return def;
        java.math.BigDecimal x = v.isNumber() ? Json.exact(v, path) : null;
        if (x == null || x.signum() < 0 || (x.signum() != 0 && x.stripTrailingZeros().scale() > 0))
            throw UnsupportedSchemaException.invalid(f, path, f + " at '" + path + "' must be a non-negative integer, got "
                    + clipped(shown(v, path)));
        if (x.compareTo(java.math.BigDecimal.valueOf(Integer.MAX_VALUE)) > 0)
            throw new UnsupportedSchemaException(f, path, f + " " + clipped(shown(v, path)) + " at '" + path + "' is too large (at most "
                    + Integer.MAX_VALUE + ")");
        return x.intValueExact();
    }

    /**
     * Points every {@code $ref} at its target's node, compiling each target once, and compiles every definition no
     * {@code $ref} reached ({@link #definitions}); both lists grow while targets and definitions compile.
     */
    private void resolve() {
        int d = 0;
        for (int i = 0; i < pending.size() || d < definitions.size(); ) {
            if (i == pending.size()) {
                String ptr = definitions.get(d++);
                if (!byPointer.containsKey(ptr)) byPointer.put(ptr, node(at(ptr), ptr));
                continue;
            }
            var e = pending.get(i++);
            String ptr = e.getKey();
            Schema target = byPointer.get(ptr);
            if (target == null) {
                target = node(at(ptr), ptr);  // resolves: refPointer checked it
                byPointer.put(ptr, target);
            }
            e.getValue().target = target;
        }
        for (var e : pending) {
            Schema s = e.getValue();
            int hops = 0;
            while (s instanceof Schema.Ref r) {
                s = r.target;
                if (++hops > pending.size() + 1)
                    throw UnsupportedSchemaException.invalid("$ref", e.getKey(), "$ref \"#" + e.getKey() + "\" only leads to other references");
            }
        }
    }

    /**
     * Expands every anyOf into the distinct schemas its value can start as ({@link Schema.AnyOf#alternatives}), so
     * building its states costs one state per alternative however the anyOf and {@code $ref} nest and share. Refuses
     * an anyOf that reaches itself again through anyOf and {@code $ref} alone (it would expand without end before any
     * input), one with more alternatives than {@link Grammar#MAX_LIVE_STATES} (they would all be live at once), and a
     * schema whose expansions visit more than {@link #MAX_EXPANSION} nodes in all. Plain strings, free values and free
     * objects each count once: their states do not depend on the schema node.
     */
    private void alternatives() {
        int visited = 0;
        for (Schema s : nodes) {
            if (!(s instanceof Schema.AnyOf u)) continue;
            String path = anyOfPaths.getOrDefault(u, "");
            Set<Schema> seen = Collections.newSetFromMap(new IdentityHashMap<>());
            LinkedHashSet<Schema> leaves = new LinkedHashSet<>(); // Schema nodes compare by identity
            boolean str = false, any = false, anyObject = false;
            ArrayDeque<Schema> todo = new ArrayDeque<>();
            for (int i = u.options.length - 1; i >= 0; i--) todo.push(u.options[i]);
            while (!todo.isEmpty()) {
                Schema x = todo.pop();
                if (x == u)
                    throw new UnsupportedSchemaException("anyOf", path, "anyOf at '" + path + "' refers back to itself through"
                            + " anyOf and $ref alone, with nothing written in between, so it has no finite expansion");
                if (!seen.add(x)) continue;
                if (++visited > MAX_EXPANSION)
                    throw new UnsupportedSchemaException("anyOf", path, "the schema's anyOf and $ref take more than " + MAX_EXPANSION
                            + " steps to expand (at '" + path + "'); simplify it");
                switch (x) {
                    case Schema.AnyOf a -> {
                        for (int i = a.options.length - 1; i >= 0; i--) todo.push(a.options[i]);
                    }
                    case Schema.Ref r -> todo.push(r.target);
                    case Schema.Str t -> {
                        if (!str) leaves.add(t);
                        str = true;
                    }
                    case Schema.Any t -> {
                        if (!any) leaves.add(t);
                        any = true;
                    }
                    case Schema.AnyObject t -> {
                        if (!anyObject) leaves.add(t);
                        anyObject = true;
                    }
                    default -> leaves.add(x);
                }
            }
            if (leaves.size() > Grammar.MAX_LIVE_STATES)
                throw new UnsupportedSchemaException("anyOf", path, "anyOf at '" + path + "' opens " + leaves.size()
                        + " alternatives at once (through nested anyOf and $ref), more than the " + Grammar.MAX_LIVE_STATES
                        + " parse states the constraint engine keeps live; use fewer alternatives (an enum is one)");
            u.alternatives = leaves.toArray(new Schema[0]);
        }
    }

    /** Fewest bytes per node: iterate to the fixed point (recursion through $ref converges from above). */
    private void minLengths() {
        for (Schema s : nodes) s.minLen = GState.FAR;
        boolean changed = true;
        while (changed) {
            changed = false;
            for (Schema s : nodes) {
                int m = own(s);
                if (m < s.minLen) {
                    s.minLen = m;
                    changed = true;
                }
            }
        }
    }

    /**
     * The nodes that have some finite value, whatever its length: {@link #minLengths} without the byte counts, which
     * saturate at {@link GState#FAR} and so cannot tell a value too long to count from none at all.
     */
    private Set<Schema> derivable() {
        Set<Schema> done = Collections.newSetFromMap(new IdentityHashMap<>());
        boolean changed = true;
        while (changed) {
            changed = false;
            for (Schema s : nodes) {
                if (done.contains(s)) continue;
                boolean ok = switch (s) {
                    case Schema.Literals l -> l.set.minLen() < GState.FAR;
                    case Schema.Arr a -> a.minItems == 0 || done.contains(a.items);
                    case Schema.Obj o -> {
                        boolean all = true;
                        for (int i = 0; i < o.props.length; i++) all &= !o.required[i] || done.contains(o.props[i]);
                        yield all;
                    }
                    case Schema.AnyOf u -> java.util.Arrays.stream(u.options).anyMatch(done::contains);
                    case Schema.Ref r -> done.contains(r.target);
                    default -> true;
                };
                if (ok) changed |= done.add(s);
            }
        }
        return done;
    }

    /**
     * The error for a schema whose shortest value is too long to count: names the array with the largest minItems
     * among those whose own shortest value is past the limit, or the schema as a whole when the length only adds up
     * across several nodes.
     */
    private UnsupportedSchemaException tooLong() {
        String limit = String.format("%,d", GState.FAR);
        Schema.Arr worst = null;
        for (Schema s : nodes)
            if (s instanceof Schema.Arr a && a.minLen >= GState.FAR && a.items.minLen < GState.FAR && (worst == null || a.minItems > worst.minItems))
                worst = a;
        if (worst != null) {
            String path = arrayPaths.get(worst);
            return new UnsupportedSchemaException("minItems", path, "minItems " + worst.minItems + " at '" + path
                    + "' makes the shortest value of the schema longer than " + limit + " bytes, more than any output can hold");
        }
        return new UnsupportedSchemaException("minItems", "", "the shortest value of the schema is longer than " + limit
                + " bytes (its minItems and required properties add up to that), more than any output can hold");
    }

    static int own(Schema s) {
        return switch (s) {
            case Schema.Any a -> 1;
            case Schema.AnyObject o -> 2;
            case Schema.Str x -> 2;
            // each character at least a byte, and the pattern's shortest ending in UTF-8 bytes (escapes only add)
            case Schema.StrOf x -> (int) Math.min(GState.FAR, 2L + Math.max(x.minLength, x.re.start().dist()));
            case Schema.Text x -> x.re.start().dist();
            case Schema.Num x -> 1;
            case Schema.Literals l -> l.set.minLen();
            case Schema.Arr a -> a.minItems == 0 ? 2
                    : (int) Math.min(GState.FAR, 2L + (long) a.minItems * a.items.minLen + a.minItems - 1);
            case Schema.Obj o -> GState.add(1, o.tail(0, true));
            case Schema.AnyOf u -> {
                int m = GState.FAR;
                for (Schema o : u.options) m = Math.min(m, o.minLen);
                yield m;
            }
            case Schema.Ref r -> r.target.minLen;
        };
    }
}
