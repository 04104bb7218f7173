package io.ds4j.text.chat;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.text.PromptText;
import io.ds4j.text.chat.ChatMessage.Role;
import io.ds4j.text.chat.ChatMessage.ToolCall;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Renders a conversation into the DeepSeek-V4 prompt text, following {@code encode_messages} of DeepSeek's
 * {@code encoding/encoding_dsv4.py} (see {@code package-info.java} for the rules and the few documented deviations).
 * The result starts with the BOS text. {@link #render} keeps apart the template's own text and what the messages,
 * tools and response format supplied, which the tokenizer takes as plain text ({@code Tokenizer.encode(PromptText)}):
 * a message holding {@code <｜User｜>} cannot open a turn of its own.
 */
public final class ChatEncoder {
    private ChatEncoder() {}

    /** One piece of a merged user turn: its own text, or a tool result. */
    private record Block(boolean toolResult, String text, String toolCallId) {}

    /** A message after tool results and user messages have been merged. */
    private static final class Turn {
        final Role role;
        final String content;
        String reasoning;
        final List<ToolCall> calls;
        final List<Block> blocks = new ArrayList<>();
        final int source;
        boolean withTools;
        boolean withResponseFormat;

        Turn(Role role, String content, String reasoning, List<ToolCall> calls, int source) {
            this.role = role;
            this.content = content;
            this.reasoning = reasoning;
            this.calls = calls;
            this.source = source;
        }

        boolean userLike() {
            return role == Role.USER || role == Role.DEVELOPER;
        }
    }

    /**
     * Encodes a conversation to its text (the text of {@link #render}).
     *
     * @param messages the conversation (may be empty)
     * @param options mode, effort, tools, response format and the other switches
     * @return the prompt text, starting with {@code <｜begin▁of▁sentence｜>}
     * @throws ChatFormatException for a message the format cannot carry (a developer message without content)
     */
    public static String encode(List<ChatMessage> messages, ChatOptions options) {
        return render(messages, options).toString();
    }

    /**
     * Renders a conversation as the prompt to tokenise: the format's markup and fixed texts are template pieces; message
     * contents, reasoning, tool-call names and arguments, tool results, tool definitions and the response format are
     * supplied pieces.
     *
     * @param messages the conversation (may be empty)
     * @param options mode, effort, tools, response format and the other switches
     * @throws ChatFormatException for a message the format cannot carry (a developer message without content)
     */
    public static PromptText render(List<ChatMessage> messages, ChatOptions options) {
        if (options == null) options = ChatOptions.defaults();
        for (int i = 0; i < messages.size(); i++) {
            ChatMessage m = messages.get(i);
            if (m.role() == Role.DEVELOPER && (m.content() == null || m.content().isEmpty())) {
                throw new ChatFormatException("messages[" + i + "].content", "a developer message needs non-empty content");
            }
        }

        if (options.continueFinal()) checkContinuable(messages);
        List<Turn> turns = merge(messages, options);
        orderToolResults(turns);

        // the reference keeps all reasoning whenever tools are defined
        boolean drop = options.dropEarlierReasoning() && !options.hasTools();
        if (options.thinking() && drop) turns = dropEarlierReasoning(turns);

        PromptText out = new PromptText().template(V4Format.BOS);
        int lastUser = lastUserIndex(turns);
        for (int i = 0; i < turns.size(); i++) render(turns, i, lastUser, drop, options, out);
        return out;
    }

    /**
     * Whether the answer to a conversation starts inside the reasoning: in thinking mode, unless the answer continues a
     * last assistant message that already has content (its reasoning, if any, was closed before that content).
     *
     * @param messages the conversation, as given to {@link #render}
     * @param options the options it is rendered with
     */
    public static boolean answerStartsInReasoning(List<ChatMessage> messages, ChatOptions options) {
        if (!options.thinking()) return false;
        if (!options.continueFinal() || messages.isEmpty()) return true;
        String content = messages.getLast().content();
        return content == null || content.isEmpty();
    }

    /**
     * Refuses a conversation whose last message cannot be continued ({@link ChatOptions#continueFinal}): it must be an
     * assistant's, without tool calls (a turn that made calls waits for their results; the answer to continue is text).
     *
     * @throws ChatFormatException naming the message's field
     */
    public static void checkContinuable(List<ChatMessage> messages) {
        if (messages.isEmpty()) throw new ChatFormatException("messages", "continuing the last message needs one");
        int last = messages.size() - 1;
        ChatMessage m = messages.get(last);
        if (m.role() != Role.ASSISTANT)
            throw new ChatFormatException("messages[" + last + "].role", "only an assistant message can be continued, got "
                    + m.role().wireName());
        if (!m.toolCalls().isEmpty())
            throw new ChatFormatException("messages[" + last + "].tool_calls", "an assistant message to be continued cannot"
                    + " carry tool calls (a turn that made calls waits for their results)");
    }

    /**
     * Turns tool messages into tool-result blocks of user turns and merges consecutive user turns (the reference's
     * {@code merge_tool_messages}); attaches tools and response format to a leading system turn, inserting an empty
     * one when the conversation does not start with a system message (as SGLang's V4 serving path does).
     */
    private static List<Turn> merge(List<ChatMessage> messages, ChatOptions options) {
        List<Turn> turns = new ArrayList<>(messages.size() + 1);
        boolean attach = options.hasTools() || options.hasResponseFormat();
        if (attach && (messages.isEmpty() || messages.getFirst().role() != Role.SYSTEM)) {
            turns.add(new Turn(Role.SYSTEM, "", null, List.of(), -1));
        }
        for (int i = 0; i < messages.size(); i++) {
            ChatMessage m = messages.get(i);
            Turn last = turns.isEmpty() ? null : turns.getLast();
            boolean appendToLast = last != null && last.role == Role.USER;
            switch (m.role()) {
                case TOOL, USER -> {
                    Block block = m.role() == Role.TOOL
                            ? new Block(true, orEmpty(m.content()), orEmpty(m.toolCallId()))
                            : new Block(false, orEmpty(m.content()), null);
                    if (appendToLast) {
                        last.blocks.add(block);
                    } else {
                        Turn t = new Turn(Role.USER, null, null, List.of(), i);
                        t.blocks.add(block);
                        turns.add(t);
                    }
                }
                default -> turns.add(new Turn(m.role(), m.content(), m.reasoningContent(), m.toolCalls(), i));
            }
        }
        if (attach) {
            turns.getFirst().withTools = options.hasTools();
            turns.getFirst().withResponseFormat = options.hasResponseFormat();
        }
        return turns;
    }

    /**
     * Within each user turn that holds several tool results, puts them in the order of the calls of the latest
     * assistant turn with tool calls (stable; unknown ids count as position 0), as {@code sort_tool_results_by_call_order}.
     */
    private static void orderToolResults(List<Turn> turns) {
        Map<String, Integer> callOrder = new HashMap<>();
        for (Turn t : turns) {
            if (t.role == Role.ASSISTANT && !t.calls.isEmpty()) {
                callOrder = new HashMap<>();
                for (int i = 0; i < t.calls.size(); i++) {
                    String id = t.calls.get(i).id();
                    if (id != null && !id.isEmpty()) callOrder.put(id, i);
                }
            } else if (t.role == Role.USER) {
                List<Block> results = new ArrayList<>();
                for (Block b : t.blocks) if (b.toolResult()) results.add(b);
                if (results.size() > 1 && !callOrder.isEmpty()) {
                    Map<String, Integer> order = callOrder;
                    results.sort((a, b) -> Integer.compare(order.getOrDefault(a.toolCallId(), 0),
                            order.getOrDefault(b.toolCallId(), 0)));
                    int next = 0;
                    for (int i = 0; i < t.blocks.size(); i++) {
                        if (t.blocks.get(i).toolResult()) t.blocks.set(i, results.get(next++));
                    }
                }
            }
        }
    }

    /**
     * The reference's {@code _drop_thinking_messages}: before the last user (or developer) turn, assistant turns
     * lose their reasoning and developer turns are removed.
     */
    private static List<Turn> dropEarlierReasoning(List<Turn> turns) {
        int lastUser = lastUserIndex(turns);
        List<Turn> kept = new ArrayList<>(turns.size());
        for (int i = 0; i < turns.size(); i++) {
            Turn t = turns.get(i);
            if (i >= lastUser || t.role == Role.USER || t.role == Role.SYSTEM) {
                kept.add(t);
            } else if (t.role == Role.ASSISTANT) {
                t.reasoning = null;
                kept.add(t);
            }
        }
        return kept;
    }

    private static int lastUserIndex(List<Turn> turns) {
        for (int i = turns.size() - 1; i >= 0; i--) if (turns.get(i).userLike()) return i;
        return -1;
    }

    /** The reference's {@code render_message} for turn {@code i}. */
    private static void render(List<Turn> turns, int i, int lastUser, boolean drop, ChatOptions options,
                               PromptText out) {
        Turn t = turns.get(i);
        if (i == 0 && options.thinking()) out.template(options.revision().effortPreamble(options.reasoningEffort()));

        switch (t.role) {
            case SYSTEM -> {
                out.supplied(orEmpty(t.content));
                appendAttachments(t, options, out);
            }
            case DEVELOPER -> {
                out.template(V4Format.USER).supplied(t.content);
                appendAttachments(t, options, out);
            }
            case USER -> {
                out.template(V4Format.USER);
                for (int b = 0; b < t.blocks.size(); b++) {
                    if (b > 0) out.template("\n\n");
                    Block block = t.blocks.get(b);
                    if (block.toolResult()) {
                        out.template(V4Format.TOOL_RESULT_OPEN).supplied(block.text()).template(V4Format.TOOL_RESULT_CLOSE);
                    } else {
                        out.supplied(block.text());
                    }
                }
            }
            case ASSISTANT -> {
                // the answer to continue stays open: no end of sentence, and reasoning without content not yet closed
                boolean open = options.continueFinal() && i == turns.size() - 1;
                String content = orEmpty(t.content);
                if (options.thinking() && (!drop || i > lastUser)) {
                    out.supplied(orEmpty(t.reasoning));
                    if (!open || !content.isEmpty()) out.template(V4Format.THINK_END);
                }
                out.supplied(content);
                if (!t.calls.isEmpty()) appendToolCalls(t.calls, out);
                if (!open) out.template(V4Format.EOS);
            }
            case TOOL -> throw new IllegalStateException("tool turns are merged into user turns");
        }

        boolean last = i == turns.size() - 1;
        if (!last && turns.get(i + 1).role != Role.ASSISTANT) return;
        if (t.userLike() && (!last || options.addGenerationPrompt())) {
            out.template(V4Format.ASSISTANT);
            boolean think = options.thinking() && (!drop || i >= lastUser);
            out.template(think ? V4Format.THINK_START : V4Format.THINK_END);
        }
    }

    private static void appendAttachments(Turn t, ChatOptions options, PromptText out) {
        if (t.withTools) {
            out.template("\n\n");
            appendTools(options.tools(), out);
        }
        if (t.withResponseFormat) {
            out.template("\n\n" + V4Format.RESPONSE_FORMAT_HEAD).supplied(PythonJson.dumps(options.responseFormat()));
        }
    }

    /** The tools preamble with one {@code json.dumps} line per tool's {@code function} object (the request's). */
    private static void appendTools(JsonNode tools, PromptText out) {
        out.template(V4Format.TOOLS_HEAD);
        for (int i = 0; i < tools.size(); i++) {
            if (i > 0) out.template("\n");
            out.supplied(PythonJson.dumps(tools.get(i).get("function")));
        }
        out.template(V4Format.TOOLS_TAIL);
    }

    /** {@code \n\n<｜DSML｜tool_calls>\n<invoke>\n<invoke>...\n</｜DSML｜tool_calls>}. */
    private static void appendToolCalls(List<ToolCall> calls, PromptText out) {
        out.template(V4Format.BLOCK_START + "\n");
        for (int c = 0; c < calls.size(); c++) {
            if (c > 0) out.template("\n");
            ToolCall call = calls.get(c);
            out.template(V4Format.INVOKE_OPEN + " name=\"").supplied(call.name()).template("\">\n");
            appendParameters(call.arguments(), out);
            out.template("\n" + V4Format.INVOKE_CLOSE);
        }
        out.template("\n" + V4Format.TOOL_CALLS_CLOSE);
    }

    /**
     * One DSML parameter line per argument: strings as they are with {@code string="true"}, everything else as
     * JSON with {@code string="false"}. Arguments that are not a JSON object become one string parameter named
     * {@code arguments} holding the raw text (the reference does this for text that is not JSON).
     */
    private static void appendParameters(String arguments, PromptText out) {
        JsonNode parsed = PythonJson.parseOrNull(arguments);
        if (parsed == null || !parsed.isObject()) {
            appendParameter("arguments", true, arguments, out);
            return;
        }
        boolean first = true;
        for (Map.Entry<String, JsonNode> e : parsed.properties()) {
            if (!first) out.template("\n");
            first = false;
            JsonNode v = e.getValue();
            if (v.isTextual()) {
                appendParameter(e.getKey(), true, v.textValue(), out);
            } else {
                appendParameter(e.getKey(), false, PythonJson.dumps(v), out);
            }
        }
    }

    private static void appendParameter(String name, boolean isString, String value, PromptText out) {
        out.template(V4Format.PARAMETER_OPEN + " name=\"").supplied(name)
                .template("\" string=\"" + (isString ? "true" : "false") + "\">").supplied(value)
                .template(V4Format.PARAMETER_CLOSE);
    }

    private static String orEmpty(String s) {
        return s == null ? "" : s;
    }
}
