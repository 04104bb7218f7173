package io.ds4j.cli;

import com.fasterxml.jackson.databind.JsonNode;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * Checks on a {@code --json-schema} file before it is compiled: a whole request body given where the schema alone is
 * expected (the schema compiler would name its first key, {@code 'model'}, as an unsupported keyword, hiding the
 * actual mistake).
 */
final class SchemaFiles {
    private SchemaFiles() {}

    /** Top-level keys of a chat request that no JSON Schema has. */
    private static final List<String> REQUEST_KEYS = List.of("messages", "response_format", "model");

    /** Where a request body keeps its schema, as JSON pointers: OpenAI's response_format, vLLM's structured_outputs. */
    private static final List<String> SCHEMA_PLACES = List.of("/response_format/json_schema/schema", "/structured_outputs/json",
            "/guided_json");

    /**
     * The problem with a file that looks like a request body rather than a JSON Schema (top-level "messages",
     * "response_format" or "model"), naming where the schema inside it is; null for anything else.
     */
    static String requestBodyProblem(JsonNode doc, Path file) {
        if (doc == null || !doc.isObject()) return null;
        List<String> keys = new ArrayList<>();
        for (String k : REQUEST_KEYS) if (doc.has(k)) keys.add("\"" + k + "\"");
        if (keys.isEmpty()) return null;
        String at = null;
        for (String p : SCHEMA_PLACES) if (doc.at(p).isObject()) {
            at = p;
            break;
        }
        return file + " looks like a request body (top-level " + String.join(", ", keys) + "), not a JSON Schema: "
                + (at != null ? "the schema inside it is at " + at + "; put that object alone in a file and give that file"
                : "it holds no schema (at /response_format/json_schema/schema); give a file that holds the JSON Schema alone");
    }
}
