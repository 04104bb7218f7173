package io.ds4j.text.chat;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.JsonKinds;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

/**
 * One message of an OpenAI-style conversation, as the V4 encoder takes it.
 *
 * @param role who speaks
 * @param content the text; null means none. OpenAI content-part lists are flattened to text by
 *     {@link #fromOpenAi(JsonNode, String)} (text parts joined with a blank line, as DeepSeek's encoder joins content
 *     blocks)
 * @param reasoningContent an assistant turn's reasoning (OpenAI {@code reasoning_content}); null means none
 * @param toolCalls the tool calls an assistant turn made; never null
 * @param toolCallId for a tool result, the id of the call it answers; may be null
 * @param name the optional participant or tool name; the V4 format does not render it
 */
public record ChatMessage(Role role, String content, String reasoningContent, List<ToolCall> toolCalls,
                          String toolCallId, String name) {

    /** The roles the V4 encoder accepts. */
    public enum Role {
        SYSTEM, DEVELOPER, USER, ASSISTANT, TOOL;

        /** The role's name on the wire ({@code "system"}, ...). */
        public String wireName() {
            return name().toLowerCase(Locale.ROOT);
        }

        /** The role for a wire name, or null when there is none. */
        public static Role fromWireName(String name) {
            for (Role r : values()) if (r.wireName().equals(name)) return r;
            return null;
        }
    }

    /**
     * A function call made by the assistant.
     *
     * @param id the call's id (OpenAI {@code tool_calls[].id}); may be null in a message built in code, never in one
     *     read by {@link ChatMessage#listFromOpenAi}
     * @param name the function name
     * @param arguments the arguments as JSON text (normally an object)
     */
    public record ToolCall(String id, String name, String arguments) {
        /** Checks that a name and arguments are present. */
        public ToolCall {
            if (name == null) throw new IllegalArgumentException("tool call name is null");
            if (arguments == null) throw new IllegalArgumentException("tool call arguments are null");
        }
    }

    /** Checks the role and copies the tool-call list. */
    public ChatMessage {
        if (role == null) throw new IllegalArgumentException("role is null");
        toolCalls = toolCalls == null ? List.of() : List.copyOf(toolCalls);
    }

    /** A system message. */
    public static ChatMessage system(String content) {
        return new ChatMessage(Role.SYSTEM, content, null, List.of(), null, null);
    }

    /** A developer message. */
    public static ChatMessage developer(String content) {
        return new ChatMessage(Role.DEVELOPER, content, null, List.of(), null, null);
    }

    /** A user message. */
    public static ChatMessage user(String content) {
        return new ChatMessage(Role.USER, content, null, List.of(), null, null);
    }

    /** An assistant message with text only. */
    public static ChatMessage assistant(String content) {
        return new ChatMessage(Role.ASSISTANT, content, null, List.of(), null, null);
    }

    /** An assistant message with reasoning, text and tool calls (any may be null or empty). */
    public static ChatMessage assistant(String content, String reasoningContent, List<ToolCall> toolCalls) {
        return new ChatMessage(Role.ASSISTANT, content, reasoningContent, toolCalls, null, null);
    }

    /** A tool result answering the call with the given id. */
    public static ChatMessage tool(String toolCallId, String content) {
        return new ChatMessage(Role.TOOL, content, null, List.of(), toolCallId, null);
    }

    /**
     * Reads an OpenAI {@code messages} array. Beyond each message's own fields, tool calls and their results must pair
     * up as OpenAI requires: an assistant message with {@code tool_calls} is followed by one {@code tool} message for
     * each of its calls (in any order) before any other message, also when it is the conversation's last turn, and a
     * tool message answers a call of that assistant message, by its id, and only once.
     *
     * @throws ChatFormatException naming the first bad field, e.g. {@code messages[2].role: unknown role 'foo'}
     */
    public static List<ChatMessage> listFromOpenAi(JsonNode messages) {
        if (messages == null || !messages.isArray()) throw new ChatFormatException("messages", "must be an array");
        List<ChatMessage> out = new ArrayList<>(messages.size());
        int caller = -1; // the assistant message whose calls the tool messages here answer, or -1
        Set<String> callIds = new HashSet<>(); // its call ids: each tool message is checked in constant time
        Map<String, Integer> answered = new HashMap<>(); // its call ids answered so far, with the tool message that did
        for (int i = 0; i < messages.size(); i++) {
            String path = "messages[" + i + "]";
            ChatMessage m = fromOpenAi(messages.get(i), path);
            if (m.role() == Role.TOOL) {
                checkAnswers(m, path, caller, caller < 0 ? null : out.get(caller), callIds, answered);
                answered.put(m.toolCallId(), i);
            } else {
                if (caller >= 0) checkAllAnswered(out.get(caller), caller, answered, "before " + path + " ("
                        + (m.role() == Role.ASSISTANT ? "an " : "a ") + m.role().wireName() + " message)");
                caller = m.role() == Role.ASSISTANT && !m.toolCalls().isEmpty() ? i : -1;
                callIds.clear();
                for (ToolCall c : m.toolCalls()) callIds.add(c.id());
                answered.clear();
            }
            out.add(m);
        }
        if (caller >= 0) checkAllAnswered(out.get(caller), caller, answered, "before the messages end");
        return out;
    }

    /**
     * Refuses a tool message that answers no call of the assistant message before it, or a call already answered: the
     * encoder puts tool results in the order of that message's calls, and a result for a call the model never made,
     * or a second one for a call, is a broken history (a client that lost, reordered or repeated messages), which
     * OpenAI refuses too.
     */
    private static void checkAnswers(ChatMessage tool, String path, int caller, ChatMessage assistant, Set<String> callIds,
                                     Map<String, Integer> answered) {
        String id = "'" + tool.toolCallId() + "'";
        if (assistant == null)
            throw new ChatFormatException(path + ".tool_call_id", id + " answers no tool call: a tool message follows the"
                    + " assistant message with the tool_calls it answers (or another tool message after it)");
        Integer before = answered.get(tool.toolCallId());
        if (before != null)
            throw new ChatFormatException(path + ".tool_call_id", id + " was already answered by messages[" + before
                    + "]: each tool call of messages[" + caller + "] is answered by one tool message");
        if (callIds.contains(tool.toolCallId())) return;
        List<String> ids = new ArrayList<>();
        for (ToolCall c : assistant.toolCalls()) {
            if (ids.size() == MAX_LISTED_IDS) {
                ids.add("and " + (assistant.toolCalls().size() - MAX_LISTED_IDS) + " more");
                break;
            }
            ids.add("'" + c.id() + "'");
        }
        throw new ChatFormatException(path + ".tool_call_id", id + " is not the id of a tool call of messages[" + caller
                + "] (its tool calls: " + String.join(", ", ids) + ")");
    }

    /** The most unanswered call ids an error lists. */
    private static final int MAX_LISTED_IDS = 8;

    /**
     * Refuses an assistant message with tool_calls whose calls are not all answered before the next message other
     * than a tool message, or before the conversation ends: the model would go on as if it had the results of calls it
     * never got (a client that lost a result or stopped its agent mid-step), which OpenAI refuses too.
     *
     * @param where where the answers stop, e.g. {@code before messages[3] (a user message)}
     */
    private static void checkAllAnswered(ChatMessage assistant, int index, Map<String, Integer> answered, String where) {
        List<String> missing = new ArrayList<>();
        int count = 0;
        for (ToolCall c : assistant.toolCalls()) {
            if (answered.containsKey(c.id())) continue;
            // the first few name the problem; a message (and its log line) listing thousands would not help more
            if (++count <= MAX_LISTED_IDS) missing.add("'" + c.id() + "'");
        }
        if (count == 0) return;
        if (count > MAX_LISTED_IDS) missing.add("and " + (count - MAX_LISTED_IDS) + " more");
        throw new ChatFormatException("messages[" + index + "].tool_calls", UNANSWERED + (count == 1 ? " " : "s ")
                + String.join(", ", missing) + " " + where + UNANSWERED_RULE);
    }

    /**
     * How the refusal of unanswered tool calls ({@link #listFromOpenAi}) starts, before "s" for several calls, their ids
     * and where the answers stop; an API translated into chat words the same rule its own way from these.
     */
    public static final String UNANSWERED = "no tool message answers the call";
    /** How that refusal ends: the rule. */
    public static final String UNANSWERED_RULE = ": an assistant message with tool_calls must be followed by a tool message"
            + " answering each of its call ids before any other message";

    /** Reads one OpenAI message object; errors are reported under the path {@code message}. */
    public static ChatMessage fromOpenAi(JsonNode message) {
        return fromOpenAi(message, "message");
    }

    /**
     * Reads one OpenAI message object.
     *
     * @param path the message's path for error messages, e.g. {@code messages[2]}
     * @throws ChatFormatException naming the bad field
     */
    public static ChatMessage fromOpenAi(JsonNode message, String path) {
        if (message == null || !message.isObject()) throw new ChatFormatException(path, "must be an object");
        JsonNode roleNode = message.get("role");
        if (roleNode == null || roleNode.isNull()) throw new ChatFormatException(path + ".role", "missing");
        if (!roleNode.isTextual()) throw new ChatFormatException(path + ".role", "must be a string");
        Role role = Role.fromWireName(roleNode.textValue());
        if (role == null) throw new ChatFormatException(path + ".role", "unknown role '" + roleNode.textValue() + "' (use "
                + java.util.Arrays.stream(Role.values()).map(Role::wireName).collect(java.util.stream.Collectors.joining(", ")) + ")");

        String content = readContent(message.get("content"), path + ".content", role == Role.ASSISTANT);
        String reasoning = optionalString(message, "reasoning_content", path);
        // newer vLLM's name for it, which this server's answers also carry: a client that sends an answer back in its
        // history sends both (reasoning_content counts where both are given)
        String reasoningAlias = optionalString(message, "reasoning", path);
        if (reasoning == null) reasoning = reasoningAlias;
        String toolCallId = optionalString(message, "tool_call_id", path);
        // read to check it is a string, as OpenAI types it; the V4 format has no place for it, so the server names it
        // as ignored (RequestFields.READ_UNUSED)
        String name = optionalString(message, "name", path);

        List<ToolCall> calls = List.of();
        JsonNode callsNode = message.get("tool_calls");
        if (callsNode != null && !callsNode.isNull()) {
            String callsPath = path + ".tool_calls";
            if (!callsNode.isArray()) throw new ChatFormatException(callsPath, "must be an array");
            if (role != Role.ASSISTANT && !callsNode.isEmpty()) {
                throw new ChatFormatException(callsPath, "only assistant messages carry tool calls");
            }
            calls = new ArrayList<>(callsNode.size());
            Map<String, Integer> ids = new HashMap<>();
            for (int i = 0; i < callsNode.size(); i++) {
                ToolCall c = readToolCall(callsNode.get(i), callsPath + "[" + i + "]");
                // a tool message names the call it answers by its id, so two calls with one id cannot both be answered
                Integer same = ids.putIfAbsent(c.id(), i);
                if (same != null)
                    throw new ChatFormatException(callsPath + "[" + i + "].id", "'" + c.id() + "' is also the id of "
                            + callsPath + "[" + same + "]: each tool call has an id of its own");
                calls.add(c);
            }
        }
        if (role == Role.DEVELOPER && (content == null || content.isEmpty())) {
            throw new ChatFormatException(path + ".content", "a developer message needs non-empty content");
        }
        // a tool result answers one call; without the id the client's history is broken (OpenAI refuses it too)
        if (role == Role.TOOL && (toolCallId == null || toolCallId.isEmpty())) {
            throw new ChatFormatException(path + ".tool_call_id", "is required in a tool message");
        }
        // only an assistant turn that makes tool calls may come without content (an empty tool_calls array makes
        // none), as in OpenAI's API: a turn with neither is most likely a message the client lost, which rendering
        // it as an empty answer would hide
        if (content == null && role != Role.ASSISTANT) {
            throw new ChatFormatException(path + ".content", "is required in a " + roleNode.textValue() + " message");
        }
        // a turn the model refused comes back from OpenAI's API with content null and its words in refusal, and the SDKs
        // send it so in the history: the refusal is what the assistant said
        if (content == null && role == Role.ASSISTANT) content = optionalString(message, "refusal", path);
        if (content == null && calls.isEmpty()) {
            throw new ChatFormatException(path + ".content", "is required in an assistant message without tool_calls"
                    + " (or refusal)");
        }
        return new ChatMessage(role, content, reasoning, calls, toolCallId, name);
    }

    /** nullable: whether the role may leave its content null (an assistant's, with tool calls or a refusal), as its error says. */
    private static String readContent(JsonNode node, String path, boolean nullable) {
        if (node == null || node.isNull()) return null;
        if (node.isTextual()) return node.textValue();
        if (!node.isArray())
            throw new ChatFormatException(path, nullable ? "must be a string, an array of content parts or null"
                    : "must be a string or an array of content parts");
        // as in OpenAI's API: an array of parts has at least one; an empty one is most likely content the client lost
        if (node.isEmpty())
            throw new ChatFormatException(path, "is an empty array: an array of content parts needs at least one part"
                    + (nullable ? " (an assistant message with tool_calls may leave content null)" : ""));
        StringBuilder text = new StringBuilder();
        for (int i = 0; i < node.size(); i++) {
            JsonNode part = node.get(i);
            String partPath = path + "[" + i + "]";
            if (part.isTextual()) {
                appendPart(text, i, part.textValue());
                continue;
            }
            if (!part.isObject()) throw new ChatFormatException(partPath, "must be an object");
            JsonNode type = part.get("type");
            if (type == null || type.isNull()) throw new ChatFormatException(partPath + ".type", "is required (\"text\")");
            if (!type.isTextual()) throw new ChatFormatException(partPath + ".type", "must be a string, got " + JsonKinds.kind(type));
            if (!type.textValue().equals("text")) {
                throw new ChatFormatException(partPath + ".type", "unsupported content part type '" + type.textValue() + "'");
            }
            JsonNode t = part.get("text");
            if (t == null || t.isNull()) throw new ChatFormatException(partPath + ".text", "is required (a text part's string)");
            if (!t.isTextual()) throw new ChatFormatException(partPath + ".text", "must be a string, got " + JsonKinds.kind(t));
            appendPart(text, i, t.textValue());
        }
        return text.toString();
    }

    private static void appendPart(StringBuilder text, int index, String part) {
        if (index > 0) text.append("\n\n");
        text.append(part);
    }

    private static String optionalString(JsonNode message, String field, String path) {
        JsonNode v = message.get(field);
        if (v == null || v.isNull()) return null;
        if (!v.isTextual()) throw new ChatFormatException(path + "." + field, "must be a string");
        return v.textValue();
    }

    private static final com.fasterxml.jackson.databind.ObjectMapper ARGS_MAPPER = new com.fasterxml.jackson.databind.ObjectMapper();

    private static ToolCall readToolCall(JsonNode call, String path) {
        if (call == null || !call.isObject()) throw new ChatFormatException(path, "must be an object");
        JsonNode type = call.get("type");
        if (type != null && !type.isNull() && !(type.isTextual() && type.textValue().equals("function"))) {
            throw new ChatFormatException(path + ".type", "unsupported tool call type " + type);
        }
        String id = optionalString(call, "id", path);
        JsonNode fn = call.get("function");
        if (fn == null || !fn.isObject()) throw new ChatFormatException(path + ".function", "missing or not an object");
        JsonNode name = fn.get("name");
        if (name == null || !name.isTextual() || name.textValue().isEmpty()) {
            throw new ChatFormatException(path + ".function.name", "must be a non-empty string");
        }
        // the tools' rule: the encoder writes this name into the prompt's invoke markup as it writes a tool's
        ChatOptions.checkFunctionName(name.textValue(), path + ".function.name");
        JsonNode args = fn.get("arguments");
        String arguments;
        if (args == null || args.isNull()) {
            arguments = "{}";
        } else if (args.isTextual()) {
            arguments = args.textValue().isBlank() ? "{}" : args.textValue(); // some clients send "" for no arguments
            // OpenAI's arguments are a JSON object encoded as a string; anything else is a client mistake, which the
            // encoder would otherwise render as a made-up "arguments" parameter
            try {
                JsonNode parsed = ARGS_MAPPER.readTree(arguments);
                if (parsed == null || !parsed.isObject()) {
                    throw new ChatFormatException(path + ".function.arguments", "must be a JSON object encoded as a string");
                }
            } catch (com.fasterxml.jackson.core.exc.StreamConstraintsException e) {
                // past a reading limit the parser stops, whether or not the rest is valid: the limit is what to say
                throw new ChatFormatException(path + ".function.arguments", io.ds4j.json.ReadLimits.problem(e, ARGS_MAPPER.getFactory().streamReadConstraints(), ""));
            } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
                var loc = e.getLocation();
                throw new ChatFormatException(path + ".function.arguments", "is not valid JSON"
                        + (loc != null && loc.getColumnNr() > 0 ? " (at column " + loc.getColumnNr() + ")" : ""));
            }
        } else if (args.isObject()) {
            arguments = PythonJson.dumps(args); // some clients send the object itself
        } else {
            throw new ChatFormatException(path + ".function.arguments", "must be a JSON string");
        }
        // the tool message answering the call names it by its id (OpenAI requires one too); checked last, so a call
        // that is wrong in several ways is first told about its function
        if (id == null || id.isEmpty())
            throw new ChatFormatException(path + ".id", "is required: the tool message that answers the call names it by its id");
        return new ToolCall(id, name.textValue(), arguments);
    }
}
