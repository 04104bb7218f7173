package io.ds4j.grammar;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.util.SplittableRandom;

/** Random JSON Schemas of the subset constrained decoding supports (for property tests). */
public final class RandomSchemas {
    private static final ObjectMapper M = new ObjectMapper();
    private static final String[] NAMES = {"a", "name", "value", "items", "ключ", "with space", "q\"uote", "back\\slash",
            "emoji😀", "n1", "n2", "count", "tags", "kind"};

    private RandomSchemas() {}

    /** A random schema; about one in five is a recursive {@code $defs}/{@code $ref} list. */
    public static ObjectNode schema(SplittableRandom r) {
        if (r.nextInt(5) == 0) {
            ObjectNode root = M.createObjectNode();
            ObjectNode node = object(r, 1);
            ObjectNode props = (ObjectNode) node.get("properties");
            ObjectNode next = M.createObjectNode();
            ArrayNode any = next.putArray("anyOf");
            any.addObject().put("$ref", "#/$defs/node");
            any.addObject().put("type", "null");
            props.set("next", next);
            ((ArrayNode) node.get("required")).add("next");
            root.putObject("$defs").set("node", node);
            root.put("$ref", "#/$defs/node");
            return root;
        }
        return r.nextInt(4) == 0 ? node(r, 0) : object(r, 0);
    }

    static ObjectNode node(SplittableRandom r, int depth) {
        int k = r.nextInt(depth >= 3 ? 7 : 11);
        ObjectNode s = M.createObjectNode();
        switch (k) {
            case 0 -> s.put("type", "string");
            case 1 -> s.put("type", "number");
            case 2 -> {
                s.put("type", r.nextBoolean() ? "integer" : "number");
                // the bounds zod's int() emits, and non-negative numbers
                if (r.nextBoolean()) s.put("minimum", -9007199254740991L).put("maximum", 9007199254740991L);
                else if (r.nextBoolean()) s.put("minimum", 0);
            }
            case 3 -> s.put("type", "boolean");
            case 4 -> s.put("type", "null");
            case 5 -> {
                ArrayNode e = s.putArray("enum");
                e.add("red").add("green").add("a \"quoted\" é");
                if (r.nextBoolean()) e.add(12).add(1).add(-3.5).add(true).addNull();
            }
            case 6 -> s.set("const", r.nextBoolean() ? M.getNodeFactory().textNode("fixed") : M.getNodeFactory().numberNode(7));
            case 7, 8 -> {
                s.put("type", "array");
                s.set("items", node(r, depth + 1));
                if (r.nextBoolean()) s.put("minItems", r.nextInt(3));
                if (r.nextBoolean()) s.put("maxItems", 2 + r.nextInt(3));
            }
            case 9 -> {
                ArrayNode a = s.putArray("anyOf");
                a.add(node(r, depth + 1));
                a.add(node(r, depth + 1));
            }
            default -> {
                return object(r, depth + 1);
            }
        }
        if (r.nextInt(3) == 0) s.put("description", "a field");
        return s;
    }

    /** A random object schema whose top-level names fit a DSML tool call (no quote). */
    public static ObjectNode toolParameters(SplittableRandom r) {
        while (true) {
            ObjectNode o = object(r, 0);
            boolean ok = true;
            for (var it = o.get("properties").fieldNames(); it.hasNext(); ) if (it.next().contains("\"")) ok = false;
            if (ok) return o;
        }
    }

    static ObjectNode object(SplittableRandom r, int depth) {
        ObjectNode s = M.createObjectNode();
        s.put("type", "object");
        ObjectNode props = s.putObject("properties");
        ArrayNode req = s.putArray("required");
        int n = r.nextInt(depth == 0 ? 5 : 3);
        for (int i = 0; i < n; i++) {
            String name = NAMES[r.nextInt(NAMES.length)];
            if (props.has(name)) continue;
            props.set(name, node(r, depth + 1));
            if (r.nextInt(4) != 0) req.add(name);
        }
        s.put("additionalProperties", false);
        return s;
    }

    /** The schema as a JsonNode (for libraries that want one). */
    public static JsonNode parse(String json) throws Exception {
        return M.readTree(json);
    }
}
