package io.ds4j.server;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;

/** The server's shared Jackson mapper and small helpers. */
public final class Json {
    /** Thread-safe once configured. */
    public static final ObjectMapper MAPPER = new ObjectMapper();

    private Json() {}

    public static ObjectNode object() {
        return JsonNodeFactory.instance.objectNode();
    }

    public static ArrayNode array() {
        return JsonNodeFactory.instance.arrayNode();
    }

    /** Compact JSON text. */
    public static String write(JsonNode n) {
        try {
            return MAPPER.writeValueAsString(n);
        } catch (JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
    }

    /** A double as JSON: NaN and infinities become null. */
    public static void putNumber(ObjectNode o, String field, double v) {
        if (Double.isFinite(v)) o.put(field, Math.round(v * 1000.0) / 1000.0);
        else o.putNull(field);
    }
}
