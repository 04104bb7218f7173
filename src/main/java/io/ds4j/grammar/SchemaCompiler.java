package io.ds4j.grammar;

import com.fasterxml.jackson.databind.JsonNode;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Compiles a JSON Schema of the supported subset into {@link Schema} nodes. Supported: {@code type} (a name or a
 * list of names), {@code properties}, {@code required}, {@code additionalProperties} (false or true; only declared
 * properties are ever produced), {@code items}, {@code minItems}, {@code maxItems}, {@code enum}, {@code const},
 * {@code anyOf}, {@code $ref} to {@code #}, {@code #/$defs/...} or {@code #/definitions/...}, and annotations
 * ({@code title}, {@code description}, {@code default}, {@code examples}, {@code $schema}, {@code $id},
 * {@code $comment}, {@code deprecated}, {@code readOnly}, {@code writeOnly}). Any other keyword is refused with
 * {@link UnsupportedSchemaException} naming it, so nothing the client asked for is silently not enforced.
 */
public final class SchemaCompiler {
    private static final Set<String> ANNOTATIONS = Set.of("title", "description", "default", "examples", "$schema",
            "$id", "$comment", "deprecated", "readOnly", "writeOnly", "$defs", "definitions");
    private static final Set<String> STRUCTURE = Set.of("type", "properties", "required", "additionalProperties",
            "items", "minItems", "maxItems", "enum", "const", "anyOf", "$ref", "minimum", "maximum");
    /** Integer digits that keep every number inside the widest bounds clients send (±(2^53 − 1) from zod's int()). */
    static final int BOUNDED_DIGITS = 15;
    private static final double BOUND = 999_999_999_999_999d;

    private final JsonNode root;
    private final List<Schema> nodes = new ArrayList<>();
    private final Map<String, Schema> byPointer = new HashMap<>();
    private final List<Map.Entry<String, Schema.Ref>> pending = new ArrayList<>();

    private SchemaCompiler(JsonNode root) {
        this.root = root;
    }

    /**
     * @param schema a JSON Schema (an object or {@code true})
     * @return the compiled root
     * @throws UnsupportedSchemaException for a keyword outside the subset, a bad value of a supported keyword, a
     *                                    {@code $ref} that does not resolve, or a schema no finite JSON satisfies
     */
    public static Schema compile(JsonNode schema) {
        SchemaCompiler c = new SchemaCompiler(schema);
        Schema s = c.node(schema, "");
        c.resolve();
        c.minLengths();
        if (s.minLen >= GState.FAR)
            throw new UnsupportedSchemaException("$ref", "", "the schema admits no finite JSON value (a required recursion without a base case)");
        return s;
    }

    private <T extends Schema> T add(T s) {
        nodes.add(s);
        return s;
    }

    private Schema node(JsonNode n, String path) {
        if (n != null && n.isBoolean() && n.booleanValue()) return add(new Schema.Any());
        if (n == null || !n.isObject())
            throw new UnsupportedSchemaException("type", path, "schema at '" + path + "' must be an object");
        for (var e : n.properties()) {
            String k = e.getKey();
            if (!ANNOTATIONS.contains(k) && !STRUCTURE.contains(k))
                throw new UnsupportedSchemaException(k, path, "JSON Schema keyword '" + k + "' (at '" + path + "/" + k
                        + "') is not supported by constrained decoding");
        }
        if (n.has("$ref")) {
            for (var e : n.properties())
                if (STRUCTURE.contains(e.getKey()) && !e.getKey().equals("$ref"))
                    throw new UnsupportedSchemaException(e.getKey(), path, "'" + e.getKey() + "' next to '$ref' (at '" + path + "') is not supported");
            JsonNode r = n.get("$ref");
            if (!r.isTextual() || !(r.textValue().equals("#") || r.textValue().startsWith("#/")))
                throw new UnsupportedSchemaException("$ref", path, "$ref at '" + path + "' must be a local reference such as \"#/$defs/Name\"");
            Schema.Ref ref = add(new Schema.Ref());
            pending.add(Map.entry(r.textValue().substring(1), ref));
            return ref;
        }
        if (n.has("anyOf")) {
            for (var e : n.properties())
                if (STRUCTURE.contains(e.getKey()) && !e.getKey().equals("anyOf"))
                    throw new UnsupportedSchemaException(e.getKey(), path, "'" + e.getKey() + "' next to 'anyOf' (at '" + path + "') is not supported; move it into each option");
            JsonNode a = n.get("anyOf");
            if (!a.isArray() || a.isEmpty()) throw new UnsupportedSchemaException("anyOf", path, "anyOf at '" + path + "' must be a non-empty array");
            Schema.AnyOf u = add(new Schema.AnyOf());
            u.options = new Schema[a.size()];
            for (int i = 0; i < a.size(); i++) u.options[i] = node(a.get(i), path + "/anyOf/" + i);
            return u;
        }
        if (n.has("const")) return add(new Schema.Literals(List.of(Json.write(n.get("const")))));
        if (n.has("enum")) {
            JsonNode en = n.get("enum");
            if (!en.isArray() || en.isEmpty()) throw new UnsupportedSchemaException("enum", path, "enum at '" + path + "' must be a non-empty array");
            List<String> texts = new ArrayList<>();
            for (JsonNode v : en) texts.add(Json.write(v));
            return add(new Schema.Literals(texts));
        }
        JsonNode t = n.get("type");
        if (t == null || t.isNull()) {
            if (n.has("properties") || n.has("required") || n.has("additionalProperties")) return typed(n, "object", path);
            if (n.has("items") || n.has("minItems") || n.has("maxItems")) return typed(n, "array", path);
            return add(new Schema.Any());
        }
        if (t.isTextual()) return typed(n, t.textValue(), path);
        if (t.isArray() && !t.isEmpty()) {
            Schema.AnyOf u = add(new Schema.AnyOf());
            u.options = new Schema[t.size()];
            for (int i = 0; i < t.size(); i++) {
                if (!t.get(i).isTextual()) throw new UnsupportedSchemaException("type", path, "type at '" + path + "' must be a type name or a list of them");
                u.options[i] = typed(n, t.get(i).textValue(), path);
            }
            return u;
        }
        throw new UnsupportedSchemaException("type", path, "type at '" + path + "' must be a type name or a list of them");
    }

    private Schema typed(JsonNode n, String type, String path) {
        return switch (type) {
            case "string" -> add(new Schema.Str());
            case "number", "integer" -> {
                Schema.Num num = add(new Schema.Num(type.equals("integer")));
                JsonNode min = n.get("minimum"), max = n.get("maximum");
                if (min != null && !min.isNull()) {
                    if (!min.isNumber() || !(min.doubleValue() == 0 || min.doubleValue() <= -BOUND))
                        throw new UnsupportedSchemaException("minimum", path, "minimum " + min + " at '" + path
                                + "' is not supported (only 0, or bounds at or beyond ±" + (long) BOUND + ")");
                    if (min.doubleValue() == 0) num.nonNegative = true;
                    num.maxIntDigits = BOUNDED_DIGITS;
                }
                if (max != null && !max.isNull()) {
                    if (!max.isNumber() || max.doubleValue() < BOUND)
                        throw new UnsupportedSchemaException("maximum", path, "maximum " + max + " at '" + path
                                + "' is not supported (only bounds at or beyond " + (long) BOUND + ")");
                    num.maxIntDigits = BOUNDED_DIGITS;
                }
                yield num;
            }
            case "boolean" -> add(new Schema.Literals(List.of("true", "false")));
            case "null" -> add(new Schema.Literals(List.of("null")));
            case "array" -> {
                int min = count(n, "minItems", path, 0);
                int max = count(n, "maxItems", path, -1);
                if (max >= 0 && max < min) throw new UnsupportedSchemaException("maxItems", path, "maxItems is below minItems at '" + path + "'");
                Schema.Arr a = add(new Schema.Arr(min, max));
                a.items = n.has("items") ? node(n.get("items"), path + "/items") : add(new Schema.Any());
                yield a;
            }
            case "object" -> object(n, path);
            default -> throw new UnsupportedSchemaException("type", path, "type '" + type + "' at '" + path + "' is not a JSON Schema type");
        };
    }

    private Schema object(JsonNode n, String path) {
        JsonNode ap = n.get("additionalProperties");
        if (ap != null && !ap.isBoolean())
            throw new UnsupportedSchemaException("additionalProperties", path, "additionalProperties at '" + path + "' must be false (or true); a schema there is not supported");
        JsonNode props = n.get("properties");
        if (props == null || props.isNull()) {
            if (n.has("required") && !n.get("required").isEmpty())
                throw new UnsupportedSchemaException("required", path, "required at '" + path + "' names properties that 'properties' does not define");
            if (ap != null && !ap.booleanValue()) return add(new Schema.Obj(List.of(), new Schema[0], new boolean[0]));
            return add(new Schema.AnyObject());
        }
        if (!props.isObject()) throw new UnsupportedSchemaException("properties", path, "properties at '" + path + "' must be an object");
        Map<String, JsonNode> defs = new LinkedHashMap<>();
        for (var e : props.properties()) defs.put(e.getKey(), e.getValue());
        java.util.Set<String> req = new java.util.HashSet<>();
        JsonNode r = n.get("required");
        if (r != null && !r.isNull()) {
            if (!r.isArray()) throw new UnsupportedSchemaException("required", path, "required at '" + path + "' must be an array of names");
            for (JsonNode x : r) {
                if (!x.isTextual() || !defs.containsKey(x.textValue()))
                    throw new UnsupportedSchemaException("required", path, "required at '" + path + "' names " + x + ", which 'properties' does not define");
                req.add(x.textValue());
            }
        }
        List<String> names = new ArrayList<>(defs.keySet());
        Schema[] ps = new Schema[names.size()];
        boolean[] rq = new boolean[names.size()];
        for (int i = 0; i < ps.length; i++) {
            ps[i] = node(defs.get(names.get(i)), path + "/properties/" + names.get(i));
            rq[i] = req.contains(names.get(i));
        }
        return add(new Schema.Obj(names, ps, rq));
    }

    private static int count(JsonNode n, String f, String path, int def) {
        JsonNode v = n.get(f);
        if (v == null || v.isNull()) return def;
        if (!v.canConvertToInt() || !v.isIntegralNumber() || v.intValue() < 0)
            throw new UnsupportedSchemaException(f, path, f + " at '" + path + "' must be a non-negative integer");
        return v.intValue();
    }

    private void resolve() {
        for (int i = 0; i < pending.size(); i++) { // grows while targets compile
            var e = pending.get(i);
            String ptr = e.getKey();
            Schema target = byPointer.get(ptr);
            if (target == null) {
                JsonNode t = ptr.isEmpty() ? root : root.at(ptr);
                if (t == null || t.isMissingNode())
                    throw new UnsupportedSchemaException("$ref", ptr, "$ref \"#" + ptr + "\" does not resolve");
                target = node(t, ptr);
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
                    throw new UnsupportedSchemaException("$ref", e.getKey(), "$ref \"#" + e.getKey() + "\" only leads to other references");
            }
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

    static int own(Schema s) {
        return switch (s) {
            case Schema.Any a -> 1;
            case Schema.AnyObject o -> 2;
            case Schema.Str x -> 2;
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
