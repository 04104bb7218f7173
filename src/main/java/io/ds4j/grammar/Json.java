package io.ds4j.grammar;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.TextNode;

/** JSON text helpers for literals. */
final class Json {
    private static final ObjectMapper M = new ObjectMapper();

    private Json() {}

    static String quote(String s) {
        return write(TextNode.valueOf(s));
    }

    /** Compact canonical JSON of a value. */
    static String write(JsonNode v) {
        try {
            return M.writeValueAsString(v);
        } catch (JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
    }
}
