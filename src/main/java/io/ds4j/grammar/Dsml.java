package io.ds4j.grammar;

/** The DeepSeek-V4 tool-call markup the tool grammar produces (the same text the chat encoder renders). */
final class Dsml {
    private Dsml() {}

    static final String BAR = "\uFF5CDSML\uFF5C";
    static final String TOOL_CALLS_OPEN = "<" + BAR + "tool_calls>";
    static final String TOOL_CALLS_CLOSE = "</" + BAR + "tool_calls>";
    static final String INVOKE_OPEN = "<" + BAR + "invoke";
    static final String INVOKE_CLOSE = "</" + BAR + "invoke>";
    static final String PARAMETER_OPEN = "<" + BAR + "parameter";
    static final String PARAMETER_CLOSE = "</" + BAR + "parameter>";

    /** Plain strings travel as raw text ({@code string="true"}); everything else as JSON. */
    static boolean raw(Schema s) {
        return s instanceof Schema.Str;
    }
}
