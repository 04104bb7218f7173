package io.ds4j.json;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonStreamContext;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadFeature;
import com.fasterxml.jackson.databind.DeserializationContext;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.ObjectReader;
import com.fasterxml.jackson.databind.deser.std.StdDeserializer;
import com.fasterxml.jackson.databind.module.SimpleModule;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ContainerNode;
import com.fasterxml.jackson.databind.node.DoubleNode;
import com.fasterxml.jackson.databind.node.IntNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.IOException;
import java.util.ArrayDeque;

/**
 * The shared Jackson mapper, the one reader of JSON text and small helpers, for every reader of JSON text: request
 * bodies, the server's configuration file, a model's config.json, schema files and command-line values alike, so that
 * each gets the same checks and the same plain-words messages.
 */
public final class Json {
    /**
     * Thread-safe once configured. Trailing content after the JSON value (`{...} xyz`, a stray `}`) is a syntax
     * error, not silently ignored.
     */
    public static final ObjectMapper MAPPER = new ObjectMapper()
            .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS);

    /**
     * Reads every JSON text given: request bodies, the configuration file, a model's config.json ({@link #read},
     * which checks the bytes' UTF-8 first): as {@link #MAPPER}, and a key given twice in one object is an error
     * instead of the last value winning silently (a client that sends {@code "max_tokens"} twice meant one of them, and which is unclear).
     * Numbers keep the text the client wrote them in, for messages about them ({@link #written}); objects record
     * which of their fields were read, so that a body's unread fields can be reported ({@link TrackedObject}).
     */
    public static final ObjectReader BODY_READER = new ObjectMapper()
            .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
            .registerModule(new SimpleModule("ds4j-body").addDeserializer(JsonNode.class, new BodyTree()))
            .reader().with(StreamReadFeature.STRICT_DUPLICATE_DETECTION);

    private Json() {}

    /** What kind of problem made a JSON text {@link Unreadable}. */
    public enum Problem {
        /** The bytes are not well-formed UTF-8. */
        UTF8,
        /** A key is given twice in one object ({@link Unreadable#field()} names it). */
        DUPLICATE_KEY,
        /**
         * A string or key holds half of a UTF-16 surrogate pair without the other half, from a JSON escape of one
         * surrogate (backslash, u, D800): no character ({@link Unreadable#field()} names where), where the same bytes
         * raw are refused as not UTF-8.
         */
        LONE_SURROGATE,
        /** Any other syntax error. */
        SYNTAX
    }

    /**
     * A JSON text that {@link #read} refuses. The message is in plain words and names no source, so that each caller
     * says what was read: {@code not valid UTF-8: a malformed byte sequence at byte offset 19},
     * {@code limits.maxActive: is given twice in one JSON object (the second time at line 1, column 36); give each key
     * once}, {@code malformed JSON at line 1, column 4: ...}.
     */
    public static final class Unreadable extends Exception {
        private final Problem problem;
        private final String field;

        Unreadable(Problem problem, String field, String message) {
            super(message, null, false, false);
            this.problem = problem;
            this.field = field;
        }

        public Problem problem() {
            return problem;
        }

        /** The path of the key given twice ({@code messages[0].role}); null for the other problems. */
        public String field() {
            return field;
        }
    }

    /**
     * Reads one JSON value the way every JSON text is read, request bodies, the configuration file and a model's
     * config.json alike: the bytes must be well-formed UTF-8 (RFC 3629), each key may appear once per object, and
     * nothing but whitespace may follow the value.
     * @return the value, or null when the bytes are empty or only whitespace (each caller words that itself)
     * @throws Unreadable naming the byte offset, the key given twice, or the line and column of a syntax error
     */
    public static JsonNode read(byte[] bytes) throws Unreadable {
        return read(bytes, "a body");
    }

    /**
     * {@link #read(byte[])} for a text that is not a request body: messages that say one value is allowed name what
     * was read ({@code "a file"}: "more content after the JSON value (one JSON value a file)").
     * @param unit what the text is, with its article, as in "one JSON value a body"
     */
    public static JsonNode read(byte[] bytes, String unit) throws Unreadable {
        checkUtf8Json(bytes);
        JsonNode n;
        try {
            n = BODY_READER.readTree(bytes);
        } catch (LoneSurrogate e) {
            boolean high = Character.isHighSurrogate(e.unit);
            throw new Unreadable(Problem.LONE_SURROGATE, e.path.isEmpty() ? null : e.path, (e.path.isEmpty() ? "the value" : e.path)
                    + ": holds the escape " + escapeFound(bytes, e) + ", the " + (high ? "first" : "second") + " half of a"
                    + " UTF-16 surrogate pair without the " + (high ? "second" : "first") + ", which is no character; write the"
                    + " character itself, or both halves of its escape");
        } catch (JsonProcessingException e) {
            if (e instanceof com.fasterxml.jackson.core.exc.StreamConstraintsException c) {
                // well-formed or not, the parser stopped at a limit of its own: the text is too large, not malformed
                var loc = e.getLocation();
                String at = loc != null && loc.getLineNr() > 0
                        ? " at line " + loc.getLineNr() + ", column " + charColumn(bytes, loc.getLineNr(), loc.getColumnNr()) : "";
                throw new Unreadable(Problem.SYNTAX, null, "the JSON " + io.ds4j.json.ReadLimits.problem(c,
                        BODY_READER.getFactory().streamReadConstraints(), at));
            }
            String twice = duplicateKey(e);
            if (twice == null) throw new Unreadable(Problem.SYNTAX, null, syntaxProblem("malformed JSON", e, unit, bytes));
            var at = e.getLocation();
            throw new Unreadable(Problem.DUPLICATE_KEY, twice, twice + ": is given twice in one JSON object" + (at != null
                    ? " (the second time at line " + at.getLineNr() + ", column " + charColumn(bytes, at.getLineNr(), at.getColumnNr()) + ")"
                    : "") + "; give each key once");
        } catch (java.io.IOException | RuntimeException e) {
            // readTree of a byte array does no I/O: whatever else it throws is about the text, and bad input is never a 500
            throw new Unreadable(Problem.SYNTAX, null, "the JSON cannot be read: " + (e.getMessage() != null ? e.getMessage()
                    : e.getClass().getSimpleName()));
        }
        return n == null || n.isMissingNode() ? null : n;
    }

    /**
     * The encoding whose byte order mark bytes start with, for UTF-16 and UTF-32 ("UTF-16LE (FF FE)"), or null: text
     * saved as "Unicode" starts so, and would otherwise be named only by its first byte that is not UTF-8.
     */
    private static String otherByteOrderMark(byte[] b) {
        int n = b.length;
        if (n >= 4 && b[0] == (byte) 0xFF && b[1] == (byte) 0xFE && b[2] == 0 && b[3] == 0) return "UTF-32LE (FF FE 00 00)";
        if (n >= 4 && b[0] == 0 && b[1] == 0 && b[2] == (byte) 0xFE && b[3] == (byte) 0xFF) return "UTF-32BE (00 00 FE FF)";
        if (n >= 2 && b[0] == (byte) 0xFF && b[1] == (byte) 0xFE) return "UTF-16LE (FF FE)";
        if (n >= 2 && b[0] == (byte) 0xFE && b[1] == (byte) 0xFF) return "UTF-16BE (FE FF)";
        return null;
    }

    /** s with each surrogate char written as its escape (backslash, u, four hex digits). */
    private static String escapeSurrogates(String s) {
        StringBuilder b = new StringBuilder(s.length() + 8);
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (Character.isSurrogate(c)) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.toString();
    }

    /**
     * The index of s's first lone surrogate (a high one not followed by a low one, or a low one not after a high one),
     * or -1.
     */
    private static int loneAt(String s) {
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (Character.isHighSurrogate(c)) {
                if (i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1))) i++;
                else return i;
            } else if (Character.isLowSurrogate(c)) {
                return i;
            }
        }
        return -1;
    }

    /**
     * A lone surrogate's escape as the client wrote it (backslash, u, DC00: its case kept), with its line and column where
     * its string's bytes can be walked to it; else the escape in lower case alone. Raw UTF-8 holds no surrogate (the
     * bytes were checked first), so the lone one is always an escape: the string is walked from its opening quote,
     * counting UTF-16 units, to the escape that makes unit e.index.
     */
    private static String escapeFound(byte[] src, LoneSurrogate e) {
        String plain = String.format("\\u%04x", (int) e.unit);
        long start = e.stringAt;
        if (start < 0 || start >= src.length || src[(int) start] != '"') return plain;
        int i = (int) start + 1, unit = 0;
        while (i < src.length && src[i] != '"') {
            int b = src[i] & 0xFF;
            if (b == '\\' && i + 1 < src.length) {
                if (src[i + 1] == 'u' && i + 6 <= src.length) {
                    if (unit == e.index) {
                        String written = new String(src, i, 6, java.nio.charset.StandardCharsets.US_ASCII);
                        return written + " at line " + lineOf(src, i) + ", column " + columnOf(src, i);
                    }
                    i += 6;
                } else i += 2;
                unit++;
            } else {
                int len = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
                unit += len == 4 ? 2 : 1;
                i += len;
            }
            if (unit > e.index) break;
        }
        return plain;
    }

    /** The 1-based line of byte offset p. */
    private static int lineOf(byte[] src, int p) {
        int line = 1;
        for (int i = 0; i < p; i++) if (endsLine(src, i)) line++;
        return line;
    }

    /** Whether byte i ends a line as the JSON reader counts lines: a line feed, or a carriage return without one after. */
    private static boolean endsLine(byte[] src, int i) {
        return src[i] == '\n' || (src[i] == '\r' && (i + 1 >= src.length || src[i + 1] != '\n'));
    }

    /** The 1-based column, in characters, of byte offset p on its line. */
    private static int columnOf(byte[] src, int p) {
        int lineStart = p;
        while (lineStart > 0 && !endsLine(src, lineStart - 1)) lineStart--;
        String before = new String(src, lineStart, p - lineStart, java.nio.charset.StandardCharsets.UTF_8);
        return before.codePointCount(0, before.length()) + 1;
    }

    /**
     * Refuses bytes that are not UTF-8 JSON text. Not well-formed UTF-8: Jackson's parser lets overlong forms,
     * surrogates and code points above U+10FFFF through (and a String read from a file would have turned them into
     * U+FFFD), so the JDK's strict decoder checks the bytes first. UTF-16 or UTF-32: ASCII text in them is well-formed
     * UTF-8 with NUL bytes between the characters, and Jackson reads a byte array in whichever encoding its first bytes
     * suggest; a NUL byte, which UTF-8 JSON never holds (it writes U+0000 as an escape), is refused so that the text is
     * read as UTF-8 or not at all, and a leading UTF-16 or UTF-32 byte order mark is named as such.
     */
    private static void checkUtf8Json(byte[] bytes) throws Unreadable {
        String bom = otherByteOrderMark(bytes);
        if (bom != null)
            throw new Unreadable(Problem.UTF8, null, "not UTF-8 JSON: it starts with the byte order mark of " + bom);
        String bad = utf8Problem(bytes);
        if (bad != null) throw new Unreadable(Problem.UTF8, null, bad);
        for (int i = 0; i < bytes.length; i++)
            if (bytes[i] == 0)
                throw new Unreadable(Problem.UTF8, null, "not UTF-8 JSON: it holds a NUL byte at byte offset " + i + ", as"
                        + " UTF-16 and UTF-32 text do (JSON writes U+0000 only as the escape \\u0000)");
    }

    /**
     * Why bytes are not well-formed UTF-8 (RFC 3629), in the words every reader of JSON text uses ("not valid
     * UTF-8: a malformed byte sequence at byte offset 19"), or null where they are.
     */
    public static String utf8Problem(byte[] bytes) {
        java.nio.charset.CharsetDecoder d = java.nio.charset.StandardCharsets.UTF_8.newDecoder()
                .onMalformedInput(java.nio.charset.CodingErrorAction.REPORT)
                .onUnmappableCharacter(java.nio.charset.CodingErrorAction.REPORT);
        java.nio.ByteBuffer in = java.nio.ByteBuffer.wrap(bytes);
        java.nio.CharBuffer out = java.nio.CharBuffer.allocate(8192);
        while (true) {
            java.nio.charset.CoderResult r = d.decode(in, out, true);
            if (r.isError()) return "not valid UTF-8: a malformed byte sequence at byte offset " + in.position();
            if (r.isUnderflow()) break;
            out.clear();
        }
        out.clear();
        return d.flush(out).isError() ? "not valid UTF-8: it ends inside a character" : null;
    }

    /**
     * How the client wrote a number of a request body ({@link #BODY_READER}) where its value would show it otherwise
     * ({@link JsonNumbers#written}, where it is decided).
     */
    public static String written(JsonNode n) {
        return JsonNumbers.written(n);
    }

    /**
     * A value as its writer wrote it, for messages and logs: a number's kept text ({@link #written}: 1e3, not the
     * 1000.0 of its double), anything else as JSON.
     */
    public static String asWritten(JsonNode n) {
        String w = written(n);
        return w != null ? w : n.toString();
    }

    /** A JSON number with an integral value as written ({@link JsonNumbers#isIntegral}, where it is decided). */
    public static boolean isIntegral(JsonNode v) {
        return JsonNumbers.isIntegral(v);
    }

    /** A number written nonzero that a double holds as 0 ({@link JsonNumbers#underflowed}, where it is decided). */
    public static boolean underflowed(JsonNode v) {
        return JsonNumbers.underflowed(v);
    }

    /**
     * A Java value as a JSON tree ({@link #MAPPER}'s valueToTree), except that a node is itself: valueToTree copies a
     * node into Jackson's own types, which would drop the text a number keeps ({@link #written}).
     */
    public static JsonNode tree(Object value) {
        return value instanceof JsonNode n ? n : MAPPER.valueToTree(value);
    }

    /**
     * A number node's exact value: its text as written where it keeps one ({@link #written}; a number past the double
     * range by a stand-in on the same side of every double, as {@link JsonNumbers#exact}), else its integer digits or
     * the shortest decimal of its double (0.7, not 0.69999...).
     */
    public static java.math.BigDecimal exact(JsonNode n) {
        String w = written(n);
        java.math.BigDecimal x = w == null ? null : JsonNumbers.exact(w);
        if (x != null) return x;
        if (n.isIntegralNumber()) return new java.math.BigDecimal(n.bigIntegerValue());
        double d = n.doubleValue();
        // an infinite double (a Java value, not a JSON text) by the same stand-in: beyond every finite double
        return Double.isFinite(d) ? java.math.BigDecimal.valueOf(d)
                : java.math.BigDecimal.ONE.scaleByPowerOfTen(1000).multiply(java.math.BigDecimal.valueOf(Math.signum(d)));
    }

    /** A fraction or exponent: Jackson's node for it (a double), with its text. */
    private static final class WrittenDouble extends DoubleNode implements JsonNumbers.Written {
        private final String text;

        WrittenDouble(double v, String text) {
            super(v);
            this.text = text;
        }

        @Override
        public String text() {
            return text;
        }
    }

    /** {@code -0}, which Jackson reads as the int 0. */
    private static final class WrittenInt extends IntNode implements JsonNumbers.Written {
        private final String text;

        WrittenInt(int v, String text) {
            super(v);
            this.text = text;
        }

        @Override
        public String text() {
            return text;
        }
    }

    /**
     * Builds a body's tree as Jackson's own tree reader does (the same node types, iteratively, so deep nesting costs no
     * stack), but with numbers that keep their text where the value loses it ({@link #written}). Duplicate keys, depth and
     * size limits and trailing content are the parser's and the reader's checks, as before.
     */
    private static final class BodyTree extends StdDeserializer<JsonNode> {
        BodyTree() {
            super(JsonNode.class);
        }

        @Override
        public JsonNode deserialize(JsonParser p, DeserializationContext ctxt) throws IOException {
            JsonNodeFactory f = ctxt.getNodeFactory();
            JsonToken t = p.currentToken();
            if (t != JsonToken.START_OBJECT && t != JsonToken.START_ARRAY) return scalar(p, f, ctxt);
            // objects record which fields the endpoint reads, so that the others can be reported (TrackedObject)
            ContainerNode<?> root = t == JsonToken.START_OBJECT ? new TrackedObject(f) : f.arrayNode();
            ArrayDeque<ContainerNode<?>> open = new ArrayDeque<>();
            open.push(root);
            String name = null;
            while (true) {
                t = p.nextToken();
                if (t == null) return ctxt.reportInputMismatch(JsonNode.class, "the JSON ends too early");
                switch (t) {
                    case FIELD_NAME -> {
                        name = p.currentName();
                        int lone = loneAt(name);
                        if (lone >= 0) throw new LoneSurrogate(p, name, lone);
                        continue;
                    }
                    case END_OBJECT, END_ARRAY -> {
                        open.pop();
                        if (open.isEmpty()) return root;
                        continue;
                    }
                    default -> { }
                }
                JsonNode v = t == JsonToken.START_OBJECT ? new TrackedObject(f)
                        : t == JsonToken.START_ARRAY ? f.arrayNode() : scalar(p, f, ctxt);
                if (open.peek() instanceof ObjectNode o) o.set(name, v);
                else ((ArrayNode) open.peek()).add(v);
                if (v instanceof ContainerNode<?> c) open.push(c);
            }
        }

        private static JsonNode scalar(JsonParser p, JsonNodeFactory f, DeserializationContext ctxt) throws IOException {
            return switch (p.currentToken()) {
                case VALUE_STRING -> {
                    String text = p.getText();
                    int lone = loneAt(text);
                    if (lone >= 0) throw new LoneSurrogate(p, text, lone);
                    yield f.textNode(text);
                }
                case VALUE_NUMBER_INT -> switch (p.getNumberType()) {
                    case INT -> {
                        int v = p.getIntValue();
                        yield v == 0 && "-0".equals(p.getText()) ? new WrittenInt(0, "-0") : f.numberNode(v);
                    }
                    case LONG -> f.numberNode(p.getLongValue());
                    default -> f.numberNode(p.getBigIntegerValue());
                };
                case VALUE_NUMBER_FLOAT -> new WrittenDouble(p.getDoubleValue(), p.getText());
                case VALUE_TRUE -> f.booleanNode(true);
                case VALUE_FALSE -> f.booleanNode(false);
                case VALUE_NULL -> f.nullNode();
                case VALUE_EMBEDDED_OBJECT -> f.pojoNode(p.getEmbeddedObject());
                default -> ctxt.reportInputMismatch(JsonNode.class, "unexpected " + p.currentToken());
            };
        }
    }

    /**
     * Where a key given twice in one object is, in the form error messages name fields with
     * ({@code max_tokens}, {@code messages[0].role}); null when the error is another one.
     */
    private static String duplicateKey(JsonProcessingException e) {
        String m = e.getOriginalMessage();
        if (m == null || !m.startsWith("Duplicate field '") || !(e.getProcessor() instanceof JsonParser p))
            return null;
        return fieldPath(p);
    }

    /** Where the parser is, as error messages name fields ({@code max_tokens}, {@code messages[0].role}); "" at the root. */
    private static String fieldPath(JsonParser p) {
        java.util.Deque<String> parts = new ArrayDeque<>();
        for (JsonStreamContext c = p.getParsingContext(); c != null && !c.inRoot(); c = c.getParent()) {
            if (c.inObject()) parts.push((c.getParent() != null && !c.getParent().inRoot() ? "." : "") + c.getCurrentName());
            else parts.push("[" + c.getCurrentIndex() + "]");
        }
        String path = String.join("", parts);
        return path.startsWith(".") ? path.substring(1) : path;
    }

    /**
     * A string or key holding a lone surrogate (BodyTree), with where it is; the path writes surrogates as escapes, as
     * the error that names it is JSON too.
     */
    private static final class LoneSurrogate extends JsonProcessingException {
        final String path;
        /** The lone surrogate, and its index among the string's UTF-16 units. */
        final char unit;
        final int index;
        /** The byte offset of the string's opening quote, or -1 where the parser does not say. */
        final long stringAt;

        LoneSurrogate(JsonParser p, String text, int index) {
            super("a lone UTF-16 surrogate");
            this.path = escapeSurrogates(fieldPath(p));
            this.index = index;
            this.unit = text.charAt(index);
            var at = p.currentTokenLocation();
            this.stringAt = at != null ? at.getByteOffset() : -1;
        }
    }

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

    /**
     * A JSON syntax error in plain words with its place, without Jackson's internals (source descriptions, feature
     * and constraint names, token types): {@code "malformed JSON at line 1, column 17: unexpected character 'x': expected
     * a JSON value"}.
     * @param what how the message starts ("malformed JSON")
     */
    public static String syntaxProblem(String what, JsonProcessingException e) {
        return syntaxProblem(what, e, "a body", null);
    }

    /**
     * {@link #syntaxProblem(String, JsonProcessingException)} of a text that is unit ("a file"), not a request body.
     * @param src the text's bytes, to look at what precedes the error, or null
     */
    static String syntaxProblem(String what, JsonProcessingException e, String unit, byte[] src) {
        var loc = e.getLocation();
        String bare = bareCharacter(e, src);
        if (bare != null) return what + bare;
        String m = plainSyntaxMessage(e, unit, src);
        if (loc == null || loc.getLineNr() <= 0) return what + ": " + m;
        int column = loc.getColumnNr();
        // Jackson places a leading '+', and a control character between tokens, one column past it: the column named
        // is the character's
        if ((m.startsWith("unexpected character '+' in a number") || m.startsWith("unexpected control character"))
                && column > 1) column--;
        else column = tokenStartColumn(e, src, column);
        return what + " at line " + loc.getLineNr() + ", column " + charColumn(src, loc.getLineNr(), column) + ": " + m;
    }

    /**
     * A 1-based column in bytes (Jackson's, reading bytes) on line `line` of src, as a column in characters (code
     * points), as an editor counts it and as the lone-surrogate message gives it; the byte column itself without src.
     */
    private static int charColumn(byte[] src, int line, int byteColumn) {
        if (src == null || line < 1 || byteColumn < 1) return byteColumn;
        int start = 0;
        for (int l = 1; l < line; l++) {
            while (start < src.length && !endsLine(src, start)) start++;
            if (start >= src.length) return byteColumn;
            start++;
        }
        int end = Math.min(src.length, start + byteColumn - 1);
        String before = new String(src, start, end - start, java.nio.charset.StandardCharsets.UTF_8);
        return before.codePointCount(0, before.length()) + 1;
    }

    /**
     * The column where an unrecognized word ({@code tru}, {@code NaN}) starts, for an error that names one; else
     * column. Jackson places such an error after the word, and after the one character that ended it when there is
     * one (the {@code tru} of {@code [tru]} is placed after the ']'): the word's bytes are looked for just before
     * the error's byte offset, and the column moved back by the distance. The word and that place are on one line (a
     * newline that ends the word leaves Jackson's line and column where they were).
     */
    private static int tokenStartColumn(JsonProcessingException e, byte[] src, int column) {
        var loc = e.getLocation();
        java.util.regex.Matcher token = TOKEN.matcher(e.getOriginalMessage() != null ? e.getOriginalMessage() : "");
        if (src == null || !token.matches()) return column;
        long end = loc.getByteOffset();
        if (end < 0 || end > src.length) return column;
        String t = token.group(1);
        // a word longer than Jackson shows is cut, with "..." added; the error is then placed right after the cut
        if (t.endsWith("...")) t = t.substring(0, t.length() - 3);
        byte[] word = t.getBytes(java.nio.charset.StandardCharsets.UTF_8);
        if (word.length == 0) return column;
        // at most one character (up to 4 bytes in UTF-8) lies between the word's end and the error's place
        for (long at = end - word.length; at >= Math.max(0, end - word.length - 4); at--) {
            if (java.util.Arrays.equals(src, (int) at, (int) at + word.length, word, 0, word.length)) {
                long start = column - (end - at);
                return start >= 1 ? (int) start : column;
            }
        }
        return column;
    }

    /**
     * A character beyond ASCII outside a string ({@code {"a": é}}), which Jackson reports as "Invalid UTF-8 start byte"
     * at the character's second byte though the text is well-formed UTF-8 (checked before it is parsed): said as the
     * character it is, at its own line and column. Null for any other error, or without the text's bytes.
     */
    private static String bareCharacter(JsonProcessingException e, byte[] src) {
        String m = e.getOriginalMessage();
        var loc = e.getLocation();
        if (src == null || m == null || !m.startsWith("Invalid UTF-8") || loc == null || loc.getByteOffset() < 0) return null;
        int p = (int) Math.min(loc.getByteOffset(), src.length) - 1;
        while (p > 0 && (src[p] & 0xC0) == 0x80) p--;
        if (p < 0 || (src[p] & 0xC0) != 0xC0) return null;
        int len = (src[p] & 0xE0) == 0xC0 ? 2 : (src[p] & 0xF0) == 0xE0 ? 3 : 4;
        if (p + len > src.length) return null;
        String ch = new String(src, p, len, java.nio.charset.StandardCharsets.UTF_8);
        return " at line " + lineOf(src, p) + ", column " + columnOf(src, p) + ": unexpected character '" + ch + "' (U+"
                + String.format("%04X", ch.codePointAt(0)) + ") outside a string: text goes inside double quotes";
    }

    /** Jackson's message for a '}' or ']' read outside every object and array. */
    private static final java.util.regex.Pattern ROOT_CLOSER =
            java.util.regex.Pattern.compile("^Unexpected close marker '([}\\]])'.*\\(for root ");

    /** Jackson's message for a '}' or ']' that does not close the object or array open there, and where that opened. */
    private static final java.util.regex.Pattern WRONG_CLOSER = java.util.regex.Pattern.compile(
            "^Unexpected close marker '([}\\]])': expected '([}\\]])' \\(for (Object|Array) starting at .*line: (\\d+), column: (\\d+)\\]\\)");

    /** Jackson's "Unexpected character ('x' (code 120))", optionally "in numeric value", and what follows it. */
    private static final java.util.regex.Pattern UNEXPECTED = java.util.regex.Pattern.compile(
            "(?s)^Unexpected character \\((?:'(.{1,2})' \\(code (\\d+)\\)|\\(CTRL-CHAR, code (\\d+)\\))\\)( in numeric value)?:?\\s*(.*)$");

    /** Jackson's message for a control character between tokens ("only regular white space (\\r, \\n, \\t) is allowed"). */
    private static final java.util.regex.Pattern BETWEEN =
            java.util.regex.Pattern.compile("^Illegal character \\(\\(CTRL-CHAR, code (\\d+)\\)\\): only regular white space");

    /** Jackson's "Unrecognized token 'x'" and "Non-standard token 'NaN'": a word that is no JSON value. */
    private static final java.util.regex.Pattern TOKEN =
            java.util.regex.Pattern.compile("(?s)^(?:Unrecognized|Non-standard) token '(.*?)'(?::.*)?$");

    /** Whether the parser had read a complete top-level value when it failed. */
    private static boolean afterValue(JsonProcessingException e) {
        return e.getProcessor() instanceof JsonParser p && p.getParsingContext() != null
                && p.getParsingContext().inRoot() && p.getParsingContext().getEntryCount() > 0;
    }

    /**
     * Whether a complete top-level value was read before the word or character the parser failed on (the parser's last
     * token is that value's end; before a first value there is none).
     */
    private static boolean valueBefore(JsonProcessingException e) {
        // the root context counts the word it failed on as an entry: a value before it makes a second one
        return e.getProcessor() instanceof JsonParser p && p.getParsingContext() != null && p.getParsingContext().inRoot()
                && (p.currentToken() != null || p.getParsingContext().getEntryCount() > 1);
    }

    /**
     * Jackson's syntax message in plain words, without its place: what was found, then what was expected there, in
     * one phrasing for every error ("unexpected character 'x': expected ...", "the JSON ends ...").
     * @param unit what the text is ("a body", "a file"), for the messages that say one value is allowed
     * @param src  the text's bytes, or null
     */
    static String plainSyntaxMessage(JsonProcessingException e, String unit, byte[] src) {
        String m = e.getOriginalMessage() != null ? e.getOriginalMessage() : "";
        if (m.startsWith("Unexpected end-of-input")) return endedEarly(e, m, src);
        // "Unexpected close marker '}': expected ']' (for root starting at ...)": a closer with nothing open to close,
        // which Jackson words as a mismatch with a root it calls an array; after a complete value it is a stray closer
        java.util.regex.Matcher closer = ROOT_CLOSER.matcher(m);
        if (closer.find())
            return afterValue(e)
                    ? "more content after the JSON value: a stray '" + closer.group(1) + "' (one JSON value " + unit + ")"
                    : "unexpected '" + closer.group(1) + "': there is no object or array to close";
        java.util.regex.Matcher wrong = WRONG_CLOSER.matcher(m);
        if (wrong.find())
            return "unexpected '" + wrong.group(1) + "': expected '" + wrong.group(2) + "' to close the "
                    + wrong.group(3).toLowerCase(java.util.Locale.ROOT) + " opened at line " + wrong.group(4) + ", column "
                    + charColumn(src, Integer.parseInt(wrong.group(4)), Integer.parseInt(wrong.group(5)));
        // "Trailing token (of type START_OBJECT) found after value (bound as `...JsonNode`): not allowed as per ..."
        if (m.startsWith("Trailing token")) return "more content after the JSON value (one JSON value " + unit + ")";
        java.util.regex.Matcher token = TOKEN.matcher(m);
        if (token.matches()) {
            String t = token.group(1);
            // a word after a complete value: nothing was expected there at all
            if (valueBefore(e)) return "more content after the JSON value: '" + t + "' (one JSON value " + unit + ")";
            boolean nonFinite = t.matches("[-+]?(NaN|Infinity|INF)");
            return "unrecognized token '" + t + "': expected a JSON value" + (nonFinite ? " (JSON has no NaN or Infinity)" : "");
        }
        if (m.startsWith("Invalid numeric value: Leading zeroes"))
            return "invalid number: a JSON number has no leading zeros (write 1, not 01)";
        java.util.regex.Matcher esc = java.util.regex.Pattern.compile("^Unrecognized character escape '(.{1,2})'").matcher(m);
        if (esc.find())
            return "unrecognized escape '\\" + esc.group(1) + "' in a string (the escapes are \\\" \\\\ \\/ \\b \\f \\n \\r \\t and \\uXXXX)";
        java.util.regex.Matcher ctl = java.util.regex.Pattern.compile("^Illegal unquoted character \\(\\(CTRL-CHAR, code (\\d+)\\)\\)").matcher(m);
        if (ctl.find()) {
            String hex = String.format("%04X", Integer.parseInt(ctl.group(1)));
            return "unescaped control character U+" + hex + " in a string: write it as an escape (\\u" + hex + ")";
        }
        // Jackson words it "only regular white space (\r, \n, \t) is allowed", leaving out the plain space
        java.util.regex.Matcher between = BETWEEN.matcher(m);
        if (between.find())
            return "unexpected control character U+" + String.format("%04X", Integer.parseInt(between.group(1)))
                    + " between tokens: JSON allows only spaces, tabs (\\t), line feeds (\\n) and carriage returns (\\r) there";
        java.util.regex.Matcher u = UNEXPECTED.matcher(m);
        if (u.matches()) return unexpected(u, e, src, unit);
        return cleaned(m);
    }

    /**
     * An unexpected character, found where something else was expected. The hint for a number written without a
     * digit before its decimal point ({@code .5}, {@code -.5}) follows what the client wrote.
     */
    private static String unexpected(java.util.regex.Matcher u, JsonProcessingException e, byte[] src, String unit) {
        String c = u.group(1) != null ? "'" + u.group(1) + "'" : "U+" + String.format("%04X", Integer.parseInt(u.group(3)));
        boolean inNumber = u.group(4) != null;
        String rest = u.group(5);
        // a character after a complete value: nothing was expected there at all
        if ((rest.startsWith("expected a valid value") || rest.startsWith("expected a value")) && valueBefore(e))
            return "more content after the JSON value: " + c + " (one JSON value " + unit + ")";
        String expected;
        if (rest.startsWith("was expecting comma to separate Object entries")) expected = "expected ',' or '}' after a value in an object";
        else if (rest.startsWith("was expecting comma to separate Array entries")) expected = "expected ',' or ']' after a value in an array";
        else if (rest.startsWith("was expecting a colon")) expected = "expected ':' after a field name";
        else if (rest.startsWith("was expecting double-quote to start field name")) expected = "expected a field name in double quotes";
        else if (rest.startsWith("expected a valid value") || rest.startsWith("expected a value")) {
            expected = "expected a JSON value";
            if (".".equals(u.group(1))) {
                // a JSON number has a digit before its point: what the client likely meant, with its sign if it wrote one
                String sign = precededByMinus(e, src) ? "-" : "";
                expected += " (a JSON number has a digit before its decimal point: " + sign + "0.5, not " + sign + ".5)";
            } else if ("'".equals(u.group(1))) expected += " (a string is written in double quotes)";
        }
        else if (rest.startsWith("maybe a (non-standard) comment")) expected = "JSON has no comments";
        else if (rest.startsWith("Decimal point not followed by a digit")) expected = "expected a digit after the decimal point";
        else if (rest.startsWith("expected digit (0-9) to follow minus sign")) expected = "expected a digit after the minus sign";
        else if (rest.startsWith("Exponent indicator not followed by a digit")) expected = "expected a digit after the exponent's 'e'";
        else if (rest.startsWith("JSON spec does not allow numbers to have plus signs")) expected = "a JSON number has no '+' sign";
        else if (rest.startsWith("expected a hex-digit for character escape sequence")) expected = "expected a hexadecimal digit of a \\u escape";
        else expected = cleaned(rest);
        return "unexpected character " + c + (inNumber ? " in a number" : "") + (expected.isEmpty() ? "" : ": " + expected);
    }

    /** Whether the byte before the parser's error position is a '-' (the client wrote -.5, not .5). */
    private static boolean precededByMinus(JsonProcessingException e, byte[] src) {
        var loc = e.getLocation();
        if (src == null || loc == null) return false;
        long at = loc.getByteOffset();
        return at >= 1 && at <= src.length && src[(int) at - 1] == '-';
    }

    /**
     * The text ended early: inside a string or field name, or with an object or array still open (the innermost named
     * with where it opened), in one phrasing whatever Jackson's words ("in VALUE_STRING", "within/between Object
     * entries", "expected close marker").
     */
    private static String endedEarly(JsonProcessingException e, String m, byte[] src) {
        if (m.contains("in VALUE_STRING")) return "the JSON ends inside a string: its closing '\"' is missing";
        if (m.contains("in field name")) return "the JSON ends inside a field name: its closing '\"' is missing";
        if (m.contains("in character escape sequence")) return "the JSON ends inside an escape sequence of a string";
        if (e.getProcessor() instanceof JsonParser p && p.getParsingContext() != null
                && (p.getParsingContext().inObject() || p.getParsingContext().inArray())) {
            JsonStreamContext c = p.getParsingContext();
            var at = c.startLocation(com.fasterxml.jackson.core.io.ContentReference.unknown());
            String what = c.inObject() ? "an object" : "an array";
            return "the JSON ends before " + what + (at != null && at.getLineNr() > 0 ? " opened at line " + at.getLineNr()
                    + ", column " + charColumn(src, at.getLineNr(), at.getColumnNr()) : "") + " is closed (a '"
                    + (c.inObject() ? "}" : "]") + "' is missing)";
        }
        return "the JSON ends too early";
    }

    /** Any other message of Jackson's: its sources, feature advice and character codes left out. */
    private static String cleaned(String m) {
        m = m.replaceAll("\\[Source: [^;\\]]*; line: (\\d+), column: (\\d+)\\]", "line $1, column $2");
        m = m.replace("start marker at ", "opened at ");
        m = m.replaceAll("\\[Source: [^\\]]*\\]", "");
        // advice about parser features a client cannot switch on
        m = m.replaceAll(":?\\s*\\(?\\s*(?:enable|disable) `?(?:JsonReadFeature|JsonParser\\.Feature|StreamReadFeature)[^)]*\\)?", "");
        m = m.replaceAll("\\s*\\(not recognized as one since Feature '[A-Z_]+' not enabled for parser\\)", "");
        m = m.replaceAll(" ?\\(`?StreamReadConstraints[^)]*\\)", "");
        m = m.replaceAll("\\('(.{1,2})' \\(code \\d+\\)\\)", "'$1'");
        m = m.replaceAll("\\(\\((CTRL-CHAR), code (\\d+)\\)\\)", "(control character $2)");
        m = m.replace("a valid value (JSON String, Number, Array, Object or token 'null', 'true' or 'false')", "a JSON value");
        m = m.replace("(JSON String, Number, Array, Object or token 'null', 'true' or 'false')", "a JSON value");
        m = m.replaceAll("\\s+", " ").trim();
        if (m.endsWith(":")) m = m.substring(0, m.length() - 1);
        return m.isEmpty() ? "malformed JSON" : Character.toLowerCase(m.charAt(0)) + m.substring(1);
    }
}
