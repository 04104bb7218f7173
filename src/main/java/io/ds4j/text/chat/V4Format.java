package io.ds4j.text.chat;

/**
 * The literal strings of the DeepSeek-V4 conversation format: special tokens, the DSML tool-call markup and the
 * fixed prompt texts. They are the model's format and must match {@code encoding/encoding_dsv4.py} byte for byte
 * (see {@code package-info.java}). {@code ｜} is U+FF5C and {@code ▁} is U+2581.
 */
public final class V4Format {
    private V4Format() {}

    /** Begin-of-sentence token text; every encoded prompt starts with it. */
    public static final String BOS = "<\uFF5Cbegin\u2581of\u2581sentence\uFF5C>";
    /** End-of-sentence token text; closes every finished assistant turn. */
    public static final String EOS = "<\uFF5Cend\u2581of\u2581sentence\uFF5C>";
    /** Opens a user (or developer) turn. */
    public static final String USER = "<\uFF5CUser\uFF5C>";
    /** Opens an assistant turn. */
    public static final String ASSISTANT = "<\uFF5CAssistant\uFF5C>";
    /** Opens the reasoning block (thinking mode). */
    public static final String THINK_START = "<think>";
    /** Closes the reasoning block; in chat mode the assistant turn starts with it. */
    public static final String THINK_END = "</think>";
    /** The DSML marker that every tool-call tag carries after its {@code <} or {@code </}. */
    public static final String DSML = "\uFF5CDSML\uFF5C";

    /** {@code <｜DSML｜tool_calls>}: opens the tool-call block. */
    public static final String TOOL_CALLS_OPEN = "<" + DSML + "tool_calls>";
    /** How the format opens a tool-call block after content (or at its place): a blank line, then {@link #TOOL_CALLS_OPEN}. */
    public static final String BLOCK_START = "\n\n" + TOOL_CALLS_OPEN;
    /** {@code </｜DSML｜tool_calls>}: closes the tool-call block. */
    public static final String TOOL_CALLS_CLOSE = "</" + DSML + "tool_calls>";
    /** {@code <｜DSML｜invoke}: start of an invoke tag (followed by {@code  name="..." >}). */
    public static final String INVOKE_OPEN = "<" + DSML + "invoke";
    /** {@code </｜DSML｜invoke>}: closes one tool call. */
    public static final String INVOKE_CLOSE = "</" + DSML + "invoke>";
    /** {@code <｜DSML｜parameter}: start of a parameter tag (followed by {@code  name="..." string="true|false">}). */
    public static final String PARAMETER_OPEN = "<" + DSML + "parameter";
    /** {@code </｜DSML｜parameter>}: closes one parameter value. */
    public static final String PARAMETER_CLOSE = "</" + DSML + "parameter>";

    /** Wraps one tool result inside a user turn: the text goes between these two. */
    /**
     * Fill-in-the-middle markers of the DeepSeek tokenizer (control tokens of its vocabulary), used in prefix, suffix,
     * middle order: {@code <｜fim▁begin｜>prefix<｜fim▁hole｜>suffix<｜fim▁end｜>}, the middle generated after it.
     */
    public static final String FIM_BEGIN = "<\uFF5Cfim\u2581begin\uFF5C>";
    /** Where the middle goes, between the prefix and the suffix ({@link #FIM_BEGIN}). */
    public static final String FIM_HOLE = "<\uFF5Cfim\u2581hole\uFF5C>";
    /** The end of the suffix; the middle follows ({@link #FIM_BEGIN}). */
    public static final String FIM_END = "<\uFF5Cfim\u2581end\uFF5C>";

    /**
     * A fill-in-the-middle prompt: the prefix and suffix around the hole, for the model to write the middle. A prefix
     * that starts with the BOS text keeps it first, where a prompt's BOS belongs.
     *
     * @param prefix the text before the hole (may be empty)
     * @param suffix the text after the hole (may be empty)
     */
    public static String fillInTheMiddle(String prefix, String suffix) {
        String bos = prefix.startsWith(BOS) ? BOS : "";
        return bos + FIM_BEGIN + prefix.substring(bos.length()) + FIM_HOLE + suffix + FIM_END;
    }

    static final String TOOL_RESULT_OPEN = "<tool_result>";
    static final String TOOL_RESULT_CLOSE = "</tool_result>";

    /** Heading and sentence placed before the response_format object. */
    static final String RESPONSE_FORMAT_HEAD =
            "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

    /** The tools preamble up to the tool schemas (one JSON object per line follow it). */
    static final String TOOLS_HEAD = """
            ## Tools

            You have access to a set of tools to help answer the user's question. \
            You can invoke tools by writing a "<｜DSML｜tool_calls>" block like the following:

            <｜DSML｜tool_calls>
            <｜DSML｜invoke name="$TOOL_NAME">
            <｜DSML｜parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</｜DSML｜parameter>
            ...
            </｜DSML｜invoke>
            <｜DSML｜invoke name="$TOOL_NAME2">
            ...
            </｜DSML｜invoke>
            </｜DSML｜tool_calls>

            String parameters should be specified as is and set `string="true"`. \
            For all other types (numbers, booleans, arrays, objects), pass the value in JSON format \
            and set `string="false"`.

            If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning \
            inside <think>...</think> BEFORE any tool calls or final response.

            Otherwise, output directly after </think> with tool calls or final response.

            ### Available Tool Schemas

            """;

    /** The tools preamble after the tool schemas. */
    static final String TOOLS_TAIL = """


            You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.
            """;

    /**
     * The reasoning-effort preamble for "max" in the first V4 release; the V4-0731 revision uses the same text for
     * "high".
     */
    static final String EFFORT_ABSOLUTE_MAXIMUM =
            "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
            + "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the "
            + "root cause, rigorously stress-testing your logic against all potential paths, edge cases, and "
            + "adversarial scenarios.\n"
            + "Explicitly write out your entire deliberation process, documenting every intermediate step, "
            + "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
            + "unchecked.\n\n";

    /** The V4-0731 revision's preamble for "max". */
    static final String EFFORT_BEYOND_MAXIMUM =
            "Reasoning Effort: Beyond maximum \u2014 exhaustive, relentless, and uncompromising.\n"
            + "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: exhaustively "
            + "decompose the problem into its most fundamental components, trace every causal chain to its root, "
            + "and resolve the underlying cause rather than any surface symptom.\n"
            + "Do not stop reasoning until you have independently verified the solution from multiple angles and "
            + "are certain that no assumption remains unchecked and no error remains undiscovered.\n\n";
}
