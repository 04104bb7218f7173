package io.ds4j.grammar;

import com.fasterxml.jackson.databind.JsonNode;
import com.github.benmanes.caffeine.cache.Cache;
import com.github.benmanes.caffeine.cache.Caffeine;
import io.ds4j.text.Tokenizer;
import io.ds4j.text.chat.OutputParser;

import java.util.ArrayList;
import java.util.List;

/**
 * A compiled output grammar, independent of the tokenizer and shareable between requests: JSON of a schema, any JSON
 * object, text matching a regular expression, one of some strings, or one DeepSeek-V4 DSML tool call. {@link #constraint} gives a request its own stateful constraint.
 */
public final class Grammar {
    /**
     * The most parse states a constraint keeps live at once, the one limit on the constraint engine's work per token
     * (each state is stepped for every byte the token mask tries). States that differ only in what follows them are
     * merged, so a schema stays far below it unless many alternatives are genuinely open together: an anyOf with
     * more alternatives is refused when the request is validated ({@link UnsupportedSchemaException}), and an output
     * that would reach it later fails with {@link GrammarLimitException}. A regular expression's state counts once,
     * however many NFA positions are live in it: their number is bounded by the pattern's size instead
     * ({@link #regex}).
     */
    public static final int MAX_LIVE_STATES = 512;

    /**
     * Grammars compiled lately, by what they were compiled from: requests that send the same schema, pattern, choices
     * or tools get the same grammar, whose states are then equal across those requests, so the token masks of those
     * states are computed once for all of them ({@link TokenConstraint}). At most 64, each dropped after ten minutes
     * unused (a regex keeps the states it met, up to {@value Regex#MAX_KEPT}).
     */
    private static final Cache<List<Object>, Grammar> COMPILED = Caffeine.newBuilder()
            .maximumSize(64)
            .expireAfterAccess(java.time.Duration.ofMinutes(10))
            .executor(Runnable::run)
            .build();

    /** The grammar compiled from key, compiled by build where it is not kept (a refusal is thrown, not kept). */
    private static Grammar compiled(List<Object> key, java.util.function.Supplier<Grammar> build) {
        Grammar g = COMPILED.getIfPresent(key);
        if (g != null) return g;
        g = build.get();
        // two requests that compile one key at once keep the first grammar
        Grammar before = COMPILED.asMap().putIfAbsent(key, g);
        return before != null ? before : g;
    }

    /**
     * Empties the cache of compiled grammars, for tests that compare grammars compiled apart: once the cache is full (64
     * grammars, compiled by the tests before them), its size-bounded admission may drop a newly compiled grammar at once.
     */
    static void forgetCompiled() {
        COMPILED.invalidateAll();
    }

    /** A JSON node list as the cache key's text, numbers as written ({@link Json#key}; null: JSON null). */
    private static List<String> texts(List<JsonNode> nodes) {
        List<String> t = new ArrayList<>(nodes.size());
        for (JsonNode n : nodes) t.add(n == null ? "null" : Json.key(n));
        return t;
    }

    /** What the output (after any reasoning) may be, as the chat output parser must read it. */
    public enum Output {
        /** Free text that may open a DSML tool-call block wherever it writes the block's tag. */
        TEXT_OR_CALLS,
        /** Content held to the grammar (JSON, a regex, a choice): literal text, no markup in it. */
        HELD,
        /** Held content, or a tool-call block in its place from the content's start. */
        HELD_OR_CALLS,
        /** One DSML tool call and nothing else (a forced tool_choice). */
        TOOL_CALL
    }

    /** How a tool-call block begins where content could, as bytes ({@link Dsml#BLOCK_START}). */
    private static final byte[] BLOCK_START_BYTES = Dsml.BLOCK_START.getBytes(java.nio.charset.StandardCharsets.UTF_8);

    private final GState start;
    private final String description;
    private final Output output;
    /**
     * The calls of an optional tool-call block, right after its opening tag (null where the grammar has none free to
     * begin): reasoning may open the block too, as the output parser reads it ({@link #afterThinking}).
     */
    private final GState block;
    /** Whether the output is steered to complete within max_tokens (see {@link TokenConstraint}). */
    private final boolean steered;

    private Grammar(GState start, String description) {
        this(start, description, Output.HELD, null, true);
    }

    private Grammar(GState start, String description, Output output, GState block, boolean steered) {
        this.start = start;
        this.description = description;
        this.output = output;
        this.block = block;
        this.steered = steered;
    }

    /** Whether the output (after any reasoning) is one DSML tool call and nothing else ({@link #toolCall}). */
    public boolean isToolCall() {
        return output == Output.TOOL_CALL;
    }

    /**
     * The chat output parser for a turn generated under a grammar (null: none), told how its output may be read: a
     * forced call's markup, held content as literal text (a block only at its start beside tools), or free text.
     *
     * @param thinking whether the prompt was encoded in thinking mode (the output starts inside the reasoning)
     */
    public static OutputParser parser(Grammar g, boolean thinking) {
        OutputParser p = new OutputParser(thinking);
        if (g == null) return p;
        return switch (g.output) {
            case TOOL_CALL -> p.forcedToolCall(true);
            case HELD -> p.heldContent(false);
            case HELD_OR_CALLS -> p.heldContent(true);
            case TEXT_OR_CALLS -> p;
        };
    }

    /** Any JSON object (response_format json_object). */
    public static Grammar jsonObject() {
        return jsonObject(false);
    }

    /**
     * Any JSON object.
     * @param compact no whitespace between the JSON's tokens (vLLM's {@code disable_any_whitespace}); else at most
     *                {@value States#MAX_WS} bytes of it in a row
     */
    public static Grammar jsonObject(boolean compact) {
        return compiled(List.of("json_object", compact), () -> new Grammar(json(States.value(new Schema.AnyObject(),
                States.End.INSTANCE), compact), "json_object" + compactly(compact)));
    }

    /**
     * JSON valid for a schema (response_format json_schema).
     * @throws UnsupportedSchemaException for a schema outside the supported subset, or one whose alternatives would
     *                                    keep more than {@link #MAX_LIVE_STATES} states live from the start
     */
    public static Grammar jsonSchema(JsonNode schema) {
        return jsonSchema(schema, false);
    }

    /**
     * JSON valid for a schema.
     * @param compact no whitespace between the JSON's tokens (vLLM's {@code disable_any_whitespace})
     * @throws UnsupportedSchemaException as {@link #jsonSchema(JsonNode)}
     */
    public static Grammar jsonSchema(JsonNode schema, boolean compact) {
        return compiled(List.of("json_schema", Json.key(schema), compact), () -> {
            Schema root = SchemaCompiler.compile(schema);
            return new Grammar(json(start(() -> States.value(root, States.End.INSTANCE)), compact), "json_schema" + compactly(compact));
        });
    }

    /** How a compact grammar's description says so, for the errors and log lines that name the grammar. */
    private static String compactly(boolean compact) {
        return compact ? " without whitespace between its tokens (disable_any_whitespace)" : "";
    }

    /** A JSON start state, held to no whitespace between tokens where compact. */
    private static GState json(GState start, boolean compact) {
        return compact ? new States.Compact(start, false, false) : start;
    }

    /**
     * Output that matches a regular expression as a whole (vLLM's {@code structured_outputs.regex}). The subset:
     * literals; escapes {@code \d \w \s \D \W \S} (ASCII meanings), {@code \n \t \r \f \v}, {@code \xHH},
     * {@code \x{H...}}, {@code \}{@code uHHHH} and an escaped punctuation character; {@code .} (any character but a line
     * break); classes {@code [...]} with ranges, negation and escapes; groups {@code (...)}, {@code (?:...)} and named
     * groups (read as plain ones); alternation; quantifiers {@code * + ? {n} {n,} {n,m} {,m} {,}}, lazy ones too (the same
     * strings match). A leading {@code ^} and a trailing {@code $} are accepted and change nothing.
     *
     * @throws UnsupportedRegexException for anything else (backreferences, lookaround, anchors inside the pattern,
     *         inline flags, possessive quantifiers), a syntax error, a pattern of more than {@value Regex#MAX_POSITIONS}
     *         NFA positions, or one that matches no string
     */
    public static Grammar regex(String pattern) {
        return compiled(List.of("regex", pattern), () -> new Grammar(Regex.compile(pattern).start(), "the regex"));
    }

    /**
     * Output that matches an EBNF grammar as a whole (vLLM's {@code structured_outputs.grammar}, llama.cpp's GBNF): rules
     * {@code name ::= body} with string literals, character classes, {@code .}, rule names, groups, alternatives and
     * repetition, the output being rule {@code root} ({@link Ebnf} has the notation and what is refused).
     *
     * @throws UnsupportedGrammarException for a syntax error, an undefined or twice-defined rule, no root, left
     *         recursion, a root no finite text matches, XGrammar's extensions, or a grammar of more than
     *         {@value Regex#MAX_POSITIONS} NFA positions or {@value Ebnf#MAX_RULES} rules
     */
    public static Grammar ebnf(String grammar) {
        return compiled(List.of("ebnf", grammar), () -> new Grammar(Ebnf.compile(grammar), "the grammar"));
    }

    /**
     * Output that is exactly one of some strings (vLLM's {@code structured_outputs.choice}), then the end of the turn.
     * An empty string is a choice like any other (the output may then be empty); one given twice counts once.
     *
     * @throws IllegalArgumentException for no strings at all, or a null among them
     */
    public static Grammar choice(List<String> options) {
        if (options.isEmpty()) throw new IllegalArgumentException("a choice needs at least one string");
        for (String o : options) if (o == null) throw new IllegalArgumentException("a choice cannot be null");
        return compiled(List.of("choice", List.copyOf(options)),
                () -> new Grammar(new States.Lit(new LitSet(options), 0, new States.Same(States.End.INSTANCE)), "one of the choices"));
    }

    /** A start state; one past the live-state limit is the schema's problem, said as such. */
    private static GState start(java.util.function.Supplier<GState> build) {
        try {
            return build.get();
        } catch (GrammarLimitException e) {
            throw new UnsupportedSchemaException("anyOf", "", e.getMessage());
        }
    }

    /**
     * One DSML tool call of one of the named functions, with arguments valid for that function's parameters
     * schema: {@code \n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="…">\n} parameters one per line in schema
     * order (plain strings as raw text with {@code string="true"}, other values as JSON with {@code string="false"}),
     * then the closing tags, then the end of the turn.
     *
     * @param names      function names
     * @param parameters each function's parameters schema (null: no parameters)
     * @throws UnsupportedSchemaException when a parameters schema is not an object schema of the supported subset
     *                                    ({@link UnsupportedSchemaException#tool()}: its index in names)
     */
    public static Grammar toolCall(List<String> names, List<JsonNode> parameters) {
        return compiled(List.of("tool_call", List.copyOf(names), texts(parameters)), () -> {
            List<Boolean> all = java.util.Collections.nCopies(names.size(), true);
            GState close = States.literal("\n" + Dsml.TOOL_CALLS_CLOSE, States.End.INSTANCE);
            GState calls = invokes(names, parameters, all, (heads, objs) -> close);
            return new Grammar(States.literal(Dsml.BLOCK_START, calls), "tool_call", Output.TOOL_CALL, null, true);
        });
    }

    /**
     * Tool calls the model may choose to make (tool_choice auto): the content, which may end the turn, or a DSML
     * tool-call block in which every invoke names one of the functions, a function marked strict gets arguments valid
     * for its parameters schema (the others take any DSML parameters, still written as the parser reads them), and at most one
     * invoke comes when parallel calls are off; the end of the turn follows the block. With free content the block
     * opens wherever the text writes {@code <｜DSML｜tool_calls>} (the model's own way to begin one); with a content
     * grammar (a strict json_schema, json_object) the output is either that content or the block from its start.
     * Free content is not steered towards the length limit (the model's call is never shortened to fit: one that does
     * not fit is cut, as an unconstrained call is); constrained content is, a block in its place too.
     *
     * @param names      function names
     * @param parameters each function's parameters schema (null: no parameters)
     * @param strict     per function, whether its arguments are held to its schema
     * @param parallel   whether the block may hold more than one invoke
     * @param content    the content's grammar, or null for free text
     * @throws UnsupportedSchemaException when a strict function's parameters schema is not an object schema of the
     *                                    supported subset ({@link UnsupportedSchemaException#tool()}: its index)
     */
    public static Grammar optionalToolCalls(List<String> names, List<JsonNode> parameters, List<Boolean> strict,
                                            boolean parallel, Grammar content) {
        // the content grammar by identity: it is the kept one of its own key
        List<Object> key = List.of("tools", List.copyOf(names), texts(parameters), List.copyOf(strict), parallel,
                content == null ? "free" : content);
        return compiled(key, () -> buildOptionalToolCalls(names, parameters, strict, parallel, content));
    }

    private static Grammar buildOptionalToolCalls(List<String> names, List<JsonNode> parameters, List<Boolean> strict,
                                                  boolean parallel, Grammar content) {
        GState close = States.literal("\n" + Dsml.TOOL_CALLS_CLOSE, States.End.INSTANCE);
        GState calls = invokes(names, parameters, strict, (heads, objs) -> parallel ? new States.MoreCalls(heads, objs) : close);
        if (content == null)
            return new Grammar(States.Until.optional(States.TOOL_CALLS_START, calls), "text or tool calls", Output.TEXT_OR_CALLS, calls, false);
        GState block = States.literal(Dsml.BLOCK_START, calls);
        // the content may not begin as the block does: text that opens a block is the block's, held to the tools
        GState held = new States.Avoiding(content.start, BLOCK_START_BYTES, 0);
        return new Grammar(start(() -> States.Union.of(held, block)), content.description + " or tool calls",
                Output.HELD_OR_CALLS, null, true);
    }

    /**
     * The first invoke of a block, right after its opening tag: {@code \n<｜DSML｜invoke name="…">\n} of one of the
     * functions, its parameters, the invoke's close, then what {@code after} gives for those invoke lines and the
     * functions' schemas (null for a function whose arguments are free).
     */
    private static GState invokes(List<String> names, List<JsonNode> parameters, List<Boolean> strict,
                                  java.util.function.BiFunction<LitSet, List<Schema.Obj>, GState> after) {
        List<Schema.Obj> objs = new ArrayList<>();
        for (int i = 0; i < names.size(); i++) {
            if (!dsmlName(names.get(i)) || names.get(i).isEmpty())
                throw new UnsupportedSchemaException("name", "", "function name '" + names.get(i) + "' cannot be written in a DSML tool call").inTool(i);
            objs.add(strict.get(i) ? parametersOf(names.get(i), parameters.get(i), i) : null);
        }
        List<Schema.Obj> tools = java.util.Collections.unmodifiableList(objs);
        LitSet heads = heads(names);
        GState k = after.apply(heads, tools);
        return start(() -> new States.Lit(heads, 0, new States.ToolThen(tools, k)));
    }

    /** The invoke lines of the functions, valued by their index. */
    private static LitSet heads(List<String> names) {
        List<String> heads = new ArrayList<>();
        for (String n : names) heads.add("\n" + Dsml.INVOKE_OPEN + " name=\"" + n + "\">\n");
        return new LitSet(heads);
    }

    /** A function's parameters as the object schema its DSML parameters are written from. */
    private static Schema.Obj parametersOf(String name, JsonNode p, int tool) {
        try {
            Schema s = p == null || p.isNull() ? new Schema.AnyObject() : SchemaCompiler.compile(objectAlone(p));
            while (s instanceof Schema.Ref r) s = r.target;
            Schema.Obj o;
            if (s instanceof Schema.Obj x) o = x;
            else if (s instanceof Schema.AnyObject || s instanceof Schema.Any) o = new Schema.Obj(List.of(), new Schema[0], new boolean[0]);
            else {
                // a type list that also allows null (or another type) is no object schema for a constrained call
                JsonNode type = p.get("type");
                String why = type != null && type.isArray() ? ": its type " + type + " allows values that are not an object;"
                        + " a constrained call's arguments are one object (drop the other types)" : "";
                throw new UnsupportedSchemaException("type", "", "the parameters of function '" + name + "' must be an object schema" + why);
            }
            for (String n : o.names)
                if (!dsmlName(n))
                    throw new UnsupportedSchemaException("properties", SchemaCompiler.property("", n), "parameter name '" + n + "' of function '"
                            + name + "' cannot be written in a DSML tool call (no '\"', '<', '>' or line breaks)");
            return o;
        } catch (UnsupportedSchemaException e) {
            throw e.inTool(tool);
        }
    }

    /** A schema whose type list names "object" alone ({@code ["object"]}) as the same schema of type "object". */
    private static JsonNode objectAlone(JsonNode p) {
        JsonNode type = p.get("type");
        if (type == null || !type.isArray() || type.isEmpty()) return p;
        for (JsonNode t : type) if (!"object".equals(t.asText(null))) return p;
        com.fasterxml.jackson.databind.node.ObjectNode one = (com.fasterxml.jackson.databind.node.ObjectNode) p.deepCopy();
        one.put("type", "object");
        return one;
    }

    /** Whether a name fits DSML's {@code name="..."} attribute as the output parser reads it. */
    private static boolean dsmlName(String n) {
        for (int i = 0; i < n.length(); i++) {
            char c = n.charAt(i);
            if (c == '"' || c == '<' || c == '>' || c == '\n' || c == '\r') return false;
        }
        return true;
    }

    /** The same grammar after free reasoning text that ends with {@code </think>} (thinking mode). */
    public Grammar afterThinking() {
        // a block of free calls may also open inside the reasoning, which the output parser ends there
        GState reasoning = block != null ? new States.Reasoning(0, 0, 0, start, block) : new States.Until(States.THINK_END, 0, 0, start);
        return new Grammar(reasoning, description + " after reasoning", output, null, steered);
    }

    /**
     * This grammar after an output's given start (an assistant message the answer continues): the state its UTF-8 bytes
     * lead to, or null where they cannot begin an output of this grammar.
     *
     * @param text the start already written, e.g. {@code {"city": "} for a JSON grammar
     * @throws GrammarLimitException where the start opens more alternatives than {@link #MAX_LIVE_STATES}
     */
    public Grammar after(String text) {
        GState s = start;
        byte[] bytes = text.getBytes(java.nio.charset.StandardCharsets.UTF_8);
        for (int i = 0; i < bytes.length && s != null; i++) s = s.next(bytes[i] & 0xFF);
        // a block that reasoning may open is for afterThinking, which is decided before the start is read
        // content that has begun can no longer give way to a block, which opens only where the content begins
        Output rest = output == Output.HELD_OR_CALLS && !text.isEmpty() ? Output.HELD : output;
        return s == null ? null : new Grammar(s, description + " continuing a given start", rest, null, steered);
    }

    /** A fresh constraint over a tokenizer's vocabulary (the token trie is built once per tokenizer). */
    public TokenConstraint constraint(Tokenizer tokenizer) {
        return constraint(tokenizer, false);
    }

    /**
     * A fresh constraint; with {@code ignoreEos} (the request's ignore_eos) the end of the turn is offered only where
     * the output can go no further, so free text runs on to the length limit as it would without a grammar.
     */
    public TokenConstraint constraint(Tokenizer tokenizer, boolean ignoreEos) {
        return constraint(tokenizer, ignoreEos, null);
    }

    /**
     * {@link #constraint(Tokenizer, boolean)} for a request of a server, whose id its log line names.
     *
     * @param requestId the request's id, or null
     */
    public TokenConstraint constraint(Tokenizer tokenizer, boolean ignoreEos, String requestId) {
        return new TokenConstraint(TokenTrie.of(tokenizer), start, steered, ignoreEos, requestId);
    }

    /** A constraint steered to complete within max_tokens whatever the grammar's own choice (for property tests). */
    TokenConstraint steeredConstraint(Tokenizer tokenizer) {
        return new TokenConstraint(TokenTrie.of(tokenizer), start, true, false);
    }

    /** The state before any output (for tests that step the grammar byte by byte). */
    GState startState() {
        return start;
    }

    /** Fewest bytes of a complete output. */
    public int minBytes() {
        return start.dist();
    }

    @Override
    public String toString() {
        return description;
    }
}
