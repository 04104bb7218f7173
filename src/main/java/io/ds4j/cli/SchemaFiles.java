package io.ds4j.cli;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * The output constraint's files, {@code --json-schema} and {@code --grammar}, read and compiled as every command that
 * takes them reads them ({@code generate}, {@code bench-server}), so that a missing, unreadable or invalid file is
 * refused in the same words by each, before any model work. A whole request body given where the schema alone is
 * expected is said to be one (the schema compiler would name its first key, {@code 'model'}, as an unsupported keyword,
 * hiding the actual mistake).
 */
final class SchemaFiles {
    private SchemaFiles() {}

    /**
     * A {@code --json-schema} file's schema and the grammar it compiles to.
     * @param json    the schema as the file writes it (read by the server's reader: numbers as written)
     * @param grammar its constraint
     */
    record Schema(JsonNode json, io.ds4j.grammar.Grammar grammar) {}

    /**
     * Reads and compiles a {@code --json-schema} file.
     * @throws IllegalArgumentException starting with {@code --json-schema: }, naming the file and what is wrong
     */
    static Schema jsonSchema(Path file) {
        String flag = "--json-schema";
        JsonNode schema;
        try {
            // the server's reader: what a request carrying this schema would be read as
            schema = Json.read(bytes(flag, file), "a file");
        } catch (Json.Unreadable e) {
            throw new IllegalArgumentException(flag + ": " + file + ": " + e.getMessage(), e);
        }
        if (schema == null) throw new IllegalArgumentException(flag + ": " + file + " is empty");
        if (!schema.isObject()) throw new IllegalArgumentException(flag + ": " + file + " holds no JSON object (a schema is one)");
        String body = requestBodyProblem(schema, file);
        if (body != null) throw new IllegalArgumentException(flag + ": " + body);
        try {
            return new Schema(schema, io.ds4j.grammar.Grammar.jsonSchema(schema));
        } catch (io.ds4j.grammar.UnsupportedSchemaException e) {
            throw new IllegalArgumentException(flag + ": " + file + ": " + e.getMessage(), e);
        }
    }

    /**
     * A {@code --grammar} file's text and the grammar it compiles to.
     * @param text    the EBNF grammar as the file writes it
     * @param grammar its constraint
     */
    record GrammarFile(String text, io.ds4j.grammar.Grammar grammar) {}

    /**
     * Reads a {@code --grammar} file (an EBNF grammar, rule {@code root}) and compiles it.
     * @throws IllegalArgumentException starting with {@code --grammar: }, naming the file and what is wrong
     */
    static GrammarFile grammar(Path file) {
        byte[] b = bytes("--grammar", file);
        // strict, and worded as the JSON reader words it for --json-schema: a malformed byte is refused, with its place,
        // not read as a replacement character
        String bad = Json.utf8Problem(b);
        if (bad != null) throw new IllegalArgumentException("--grammar: " + file + ": " + bad);
        String text = new String(b, java.nio.charset.StandardCharsets.UTF_8);
        try {
            return new GrammarFile(text, io.ds4j.grammar.Grammar.ebnf(text));
        } catch (io.ds4j.grammar.UnsupportedGrammarException e) {
            throw new IllegalArgumentException("--grammar: " + file + ": " + e.getMessage(), e);
        }
    }

    /**
     * The largest {@code --json-schema} or {@code --grammar} file read: far above any real schema or grammar (a few
     * hundred KiB at most), and the server's default largest request body ({@code server.maxBodyBytes}) four times
     * over. Past it, reading and compiling would take gigabytes and minutes before any answer.
     */
    static final long MAX_BYTES = 16L << 20;

    // a missing file, one that is no regular file (a folder, a FIFO that would block) and one that cannot be read are
    // each named in words, not by Java's exception text ("/nope (No such file or directory)")
    private static byte[] bytes(String flag, Path file) {
        if (!java.nio.file.Files.exists(file)) throw new IllegalArgumentException(flag + ": file not found: " + file + inline(flag, file));
        if (!java.nio.file.Files.isRegularFile(file)) throw new IllegalArgumentException(flag + ": " + file + " is not a regular file");
        try {
            long size = java.nio.file.Files.size(file);
            if (size > MAX_BYTES)
                throw new IllegalArgumentException(flag + ": " + file + " is too large: " + String.format("%,d", size)
                        + " bytes, more than the " + (MAX_BYTES >> 20) + " MiB a schema or grammar file may hold");
            return java.nio.file.Files.readAllBytes(file);
        } catch (java.io.IOException e) {
            throw new IllegalArgumentException(flag + ": cannot read " + file + ": "
                    + (e instanceof java.nio.file.FileSystemException f ? Main.reason(f) : e.getMessage()), e);
        }
    }

    /**
     * What a missing file's name adds when it is the schema or grammar itself, written where its file's path goes (as a
     * request carries it inline): that the option takes a file; "" for any other name.
     */
    private static String inline(String flag, Path file) {
        String name = file.toString().strip();
        String what = flag.equals("--json-schema") ? (name.startsWith("{") ? "a JSON Schema" : null)
                : (name.contains("::=") ? "an EBNF grammar" : null);
        return what == null ? "" : " (" + flag + " takes the path of a file holding " + what + ", not " + what
                + " itself: write it into a file and give its path)";
    }

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
