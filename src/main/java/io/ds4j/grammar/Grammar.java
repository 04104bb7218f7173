package io.ds4j.grammar;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.text.Tokenizer;

import java.util.ArrayList;
import java.util.List;

/**
 * A compiled output grammar, independent of the tokenizer and shareable between requests: JSON of a schema, any JSON
 * object, or one DeepSeek-V4 DSML tool call. {@link #constraint} gives a request its own stateful constraint.
 */
public final class Grammar {
    /**
     * The most parse states a constraint keeps live at once, the one limit on the constraint engine's work per token
     * (each state is stepped for every byte the token mask tries). States that differ only in what follows them are
     * merged, so a schema stays far below it unless many alternatives are genuinely open together: an anyOf with
     * more alternatives is refused when the request is validated ({@link UnsupportedSchemaException}), and an output
     * that would reach it later fails with {@link GrammarLimitException}.
     */
    public static final int MAX_LIVE_STATES = 512;

    private final GState start;
    private final String description;
    private final boolean toolCall;

    private Grammar(GState start, String description) {
        this(start, description, false);
    }

    private Grammar(GState start, String description, boolean toolCall) {
        this.start = start;
        this.description = description;
        this.toolCall = toolCall;
    }

    /** Whether the output (after any reasoning) is one DSML tool call and nothing else ({@link #toolCall}). */
    public boolean isToolCall() {
        return toolCall;
    }

    /** Any JSON object (response_format json_object). */
    public static Grammar jsonObject() {
        return new Grammar(States.value(new Schema.AnyObject(), States.End.INSTANCE), "json_object");
    }

    /**
     * JSON valid for a schema (response_format json_schema).
     * @throws UnsupportedSchemaException for a schema outside the supported subset, or one whose alternatives would
     *                                    keep more than {@link #MAX_LIVE_STATES} states live from the start
     */
    public static Grammar jsonSchema(JsonNode schema) {
        Schema root = SchemaCompiler.compile(schema);
        return new Grammar(start(() -> States.value(root, States.End.INSTANCE)), "json_schema");
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
     */
    public static Grammar toolCall(List<String> names, List<JsonNode> parameters) {
        List<Schema.Obj> objs = new ArrayList<>();
        List<String> heads = new ArrayList<>();
        for (int i = 0; i < names.size(); i++) {
            JsonNode p = parameters.get(i);
            Schema s = p == null || p.isNull() ? new Schema.AnyObject() : SchemaCompiler.compile(p);
            while (s instanceof Schema.Ref r) s = r.target;
            Schema.Obj o;
            if (s instanceof Schema.Obj x) o = x;
            else if (s instanceof Schema.AnyObject || s instanceof Schema.Any) o = new Schema.Obj(List.of(), new Schema[0], new boolean[0]);
            else throw new UnsupportedSchemaException("type", "", "the parameters of function '" + names.get(i) + "' must be an object schema");
            for (String n : o.names)
                if (!dsmlName(n))
                    throw new UnsupportedSchemaException("properties", SchemaCompiler.property("", n), "parameter name '" + n + "' of function '"
                            + names.get(i) + "' cannot be written in a DSML tool call (no '\"', '<', '>' or line breaks)");
            if (!dsmlName(names.get(i)) || names.get(i).isEmpty())
                throw new UnsupportedSchemaException("name", "", "function name '" + names.get(i) + "' cannot be written in a DSML tool call");
            objs.add(o);
            heads.add("\n\n" + Dsml.TOOL_CALLS_OPEN + "\n" + Dsml.INVOKE_OPEN + " name=\"" + names.get(i) + "\">\n");
        }
        GState close = States.literal("\n" + Dsml.TOOL_CALLS_CLOSE, States.End.INSTANCE);
        GState start = start(() -> new States.Lit(new LitSet(heads), 0, new States.ToolThen(List.copyOf(objs), close)));
        return new Grammar(start, "tool_call", true);
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
        return new Grammar(new States.Until(States.THINK_END, 0, 0, start), description + " after reasoning", toolCall);
    }

    /** A fresh constraint over a tokenizer's vocabulary (the token trie is built once per tokenizer). */
    public TokenConstraint constraint(Tokenizer tokenizer) {
        return new TokenConstraint(TokenTrie.of(tokenizer), start);
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
