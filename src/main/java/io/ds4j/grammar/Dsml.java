package io.ds4j.grammar;

import io.ds4j.text.chat.V4Format;

/**
 * The DeepSeek-V4 tool-call markup the tool grammar produces: the chat format's own strings ({@link V4Format}), so the
 * grammar writes exactly what the encoder renders and the output parser reads.
 */
final class Dsml {
    private Dsml() {}

    static final String TOOL_CALLS_OPEN = V4Format.TOOL_CALLS_OPEN;
    static final String BLOCK_START = V4Format.BLOCK_START;
    static final String TOOL_CALLS_CLOSE = V4Format.TOOL_CALLS_CLOSE;
    static final String INVOKE_OPEN = V4Format.INVOKE_OPEN;
    static final String INVOKE_CLOSE = V4Format.INVOKE_CLOSE;
    static final String PARAMETER_OPEN = V4Format.PARAMETER_OPEN;
    static final String PARAMETER_CLOSE = V4Format.PARAMETER_CLOSE;

    /** Plain strings travel as raw text ({@code string="true"}); everything else as JSON. */
    static boolean raw(Schema s) {
        return s instanceof Schema.Str;
    }
}
