package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.ds4j.json.Json;

import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static io.ds4j.server.Requests.what;

/**
 * The Anthropic Messages API ({@code POST /v1/messages} and {@code POST /v1/messages/count_tokens}) as a translation
 * over the chat endpoint. A Messages body is rewritten into the chat body that means the same ({@link #translate}),
 * which {@link Requests#parse} then reads and checks as any chat request, so sampling, stop strings, tools, tool
 * choice, thinking and their limits are decided by chat alone; what only the Messages shapes have (blocks, a top-level
 * {@code system}, {@code tool_result} blocks in user turns, server tools) is checked here, naming the Messages field.
 * A complaint of the chat parser names a chat field; {@link Translation#renamed} names the Messages field it came
 * from. Errors go out in Anthropic's shape ({@link #errorBody}).
 *
 * <p>The fields are read from the client's body, so {@link RequestFields} reports those this translation never asked
 * for, as on chat; parts passed on whole (a tool's {@code input_schema}, a {@code tool_use} block's {@code input}) are
 * marked so.
 */
final class AnthropicApi {
    private AnthropicApi() {}

    /** The generation route. */
    static final String MESSAGES = "/v1/messages";
    /** The route that counts a request's prompt tokens without generating. */
    static final String COUNT_TOKENS = "/v1/messages/count_tokens";

    /**
     * Whether a routed path answers in the Anthropic shapes (its errors included): the path of a request the router
     * hands to the Messages routes ({@code /v1/messages/} too, {@link HttpVerticle#exactRoute}).
     */
    static boolean speaks(String path) {
        String route = HttpVerticle.exactRoute(path);
        return MESSAGES.equals(route) || COUNT_TOKENS.equals(route);
    }

    /**
     * Platform fields the Messages API has that are accepted without a word, as OpenAI's are
     * ({@link RequestFields#ACCEPTED}): {@code metadata} (its {@code user_id} names the end user) and
     * {@code service_tier}. OpenAI's others ({@code user}, {@code safety_identifier}, {@code prompt_cache_key},
     * {@code store}) are no fields of it, so one sent here is unknown, named with what the Messages API has instead.
     */
    private static final java.util.Set<String> ACCEPTED = java.util.Set.of("metadata", "service_tier");

    /** Hints for fields the Messages API has not ({@link Translation#fieldHints}). */
    private static final java.util.Map<String, String> FIELD_HINTS = java.util.Map.of(
            "store", "the Messages API has no store field: this server stores nothing",
            "user", "the Messages API names the end user in metadata.user_id",
            "safety_identifier", "the Messages API names the end user in metadata.user_id",
            "prompt_cache_key", "the Messages API has no prompt_cache_key: this server's prefix cache finds prefixes by their tokens");

    /**
     * A Messages body as a chat body.
     *
     * @param chat    the chat body, to give {@link Requests#parse}
     * @param origins for each chat message, the Messages path it came from ({@code system}, {@code messages[2]},
     *                or {@code messages[3].content[0]} for a tool result)
     * @param calls   for each chat message, the paths of its tool calls' {@code tool_use} blocks (empty for most)
     */
    record Translation(ObjectNode chat, List<String> origins, List<List<String>> calls) implements TranslatedRequest {
        @Override
        public String idPrefix() {
            return "msg_";
        }

        /**
         * The Messages API's platform fields ({@link #ACCEPTED}); OpenAI's others sent here are unknown (named, or
         * refused under server.rejectUnknownFields), whatever their value: {@code store} is no stored completion here.
         */
        @Override
        public java.util.Set<String> acceptedFields() {
            return ACCEPTED;
        }

        /** None: {@code store}, OpenAI's, is no field of the Messages API ({@link #acceptedFields}). */
        @Override
        public java.util.Map<String, String> ignoredWhenTrue() {
            return java.util.Map.of();
        }

        /** What the Messages API has instead of a field it has not, said in place of a "did you mean". */
        @Override
        public java.util.Map<String, String> fieldHints() {
            return FIELD_HINTS;
        }

        @Override
        public AnswerWriter writer(String id, long created, String model, Requests.Gen g, int promptTokens, int maxTokens) {
            return new AnthropicResponse(id, model, g.stream(), promptTokens);
        }

        /** A chat path pattern: a message (with a call), a tool's function part, or a tool choice's name. */
        private static final Pattern CHAT_PATH = Pattern.compile(
                "messages\\[(\\d+)](\\.tool_calls(?:\\[(\\d+)])?(?:\\.function(?:\\.arguments|\\.name)?|\\.id)?|\\.tool_call_id|\\.content)?"
                        + "|tools\\[(\\d+)]\\.function(\\.parameters|\\.name|\\.description)?"
                        + "|tool_choice\\.function\\.name");

        /**
         * The chat parser's error as the Messages API's: its field, and every chat path in its message, named as the
         * client sent them ({@code stop} is {@code stop_sequences}, {@code tools[0].function.parameters} is
         * {@code tools[0].input_schema}, a chat message index is the Messages path it came from). What the client
         * wrote (a model name, a tool_use id, a schema's property name) is left as it is, even where it reads as a
         * chat path: the message quotes it, and the client must recognise its own value.
         */
        @Override
        public ApiException renamed(ApiException e) {
            List<String> own = clientStrings();
            String param = e.param() == null ? null : path(e.param());
            String msg = e.getMessage() == null ? null : worded(text(e.getMessage(), e.param(), param, own), param);
            // chat's tool calls and tool messages are this API's tool_use and tool_result blocks
            if (msg != null) msg = ChatPaths.replace(msg, own, ChatPaths.CALL_WORDS, Translation::callWords);
            return e.renamed(param, msg);
        }

        /** The Messages API's words for one of {@link ChatPaths#CALL_WORDS}. */
        private static String callWords(Matcher m) {
            String w = m.group();
            if (w.startsWith("answers no tool call")) return "answers no tool_use block: a tool_result block answers a"
                    + " tool_use block of the assistant message right before its user message";
            if (w.startsWith("is not the id")) return "is not the id of a tool_use block of ";
            if (w.startsWith("(its tool calls")) return "(its tool_use ids: ";
            if (w.startsWith("each tool call of"))
                return "each tool_use block of " + m.group(1) + " is answered by one tool_result block";
            if (w.startsWith("is also")) return w;
            return "each tool_use block has an id of its own";
        }

        /** Chat's wording of a rule as the Messages API states it ({@link ChatPaths#worded}). */
        private static String worded(String msg, String param) {
            // "the call 'a'" or "the calls 'a', 'b'"
            return ChatPaths.worded(msg, param, calls -> "no tool_result block answers the "
                    + (calls.startsWith("s ") ? "tool_use blocks" + calls.substring(1) : "tool_use block" + calls)
                    + ": each tool_use block must be answered by a tool_result block in the user message right after it");
        }

        private String text(String msg, String oldParam, String newParam, List<String> own) {
            // the message starts with the field it is about; the short chat-only names are renamed only there
            if (oldParam != null && newParam != null && msg.startsWith(oldParam + ":"))
                return newParam + paths(msg.substring(oldParam.length()), own);
            return paths(msg, own);
        }

        /**
         * A field's path: its chat path is where it starts; what follows is the client's (a schema's property names),
         * left as it is.
         */
        private String path(String p) {
            if (p.equals("stop") || p.startsWith("stop[")) return "stop_sequences" + p.substring(4);
            if (p.equals("parallel_tool_calls")) return "tool_choice.disable_parallel_tool_use";
            Matcher m = CHAT_PATH.matcher(p);
            if (!m.lookingAt()) return p;
            // the prefix flag is this translation's own, set on the prefill: the client knows the message
            String rest = p.substring(m.end());
            return one(m) + (rest.equals(".prefix") ? "" : rest);
        }

        private List<String> clientStrings() {
            return ChatPaths.clientStrings(chat, CHAT_PATH);
        }

        private String paths(String s, List<String> own) {
            return ChatPaths.replace(s, own, CHAT_PATH, this::one);
        }

        private String one(Matcher m) {
            if (m.group(4) != null) {
                String tool = "tools[" + m.group(4) + "]";
                String part = m.group(5);
                if (part == null) return tool;
                return tool + (part.equals(".parameters") ? ".input_schema" : part);
            }
            if (m.group(1) == null) return "tool_choice.name";
            int k = Integer.parseInt(m.group(1));
            if (k >= origins.size()) return m.group();
            String origin = origins.get(k), rest = m.group(2);
            if (rest == null) return origin;
            if (rest.equals(".tool_call_id")) return origin + ".tool_use_id";
            if (rest.equals(".content")) return origin + ".content";
            // a tool call: the tool_use block it came from
            List<String> blocks = calls.get(k);
            if (m.group(3) == null) return origin + ".content";
            int c = Integer.parseInt(m.group(3));
            String block = c < blocks.size() ? blocks.get(c) : origin + ".content";
            String field = rest.substring(rest.indexOf(']') + 1);
            return block + (field.endsWith(".arguments") ? ".input" : field.endsWith(".name") ? ".name" : field.equals(".id") ? ".id" : "");
        }
    }

    /**
     * Rewrites a Messages body into a chat body, checking what only the Messages shapes have.
     *
     * @param generation a generation request, which must give {@code max_tokens} (Anthropic requires it; counting
     *                   tokens does not)
     * @throws ApiException 400 naming the Messages field
     */
    static Translation translate(JsonNode body, boolean generation) {
        if (body == null || !body.isObject()) throw ApiException.bodyNotAnObject(body);
        ObjectNode chat = Json.object();
        for (String f : List.of("model", "stream", "temperature", "top_p", "top_k", "max_tokens")) {
            JsonNode v = body.get(f);
            if (v != null && !v.isNull()) chat.set(f, v);
        }
        if (generation && !chat.has("max_tokens"))
            throw ApiException.badField("max_tokens", "is required: the most tokens to generate, an integer of at least 1");
        // accepted and not used: the caller's own tags for the request, an object as Anthropic defines it
        JsonNode metadata = body.get("metadata");
        if (metadata != null && !metadata.isNull() && !metadata.isObject())
            throw ApiException.badField("metadata", "must be an object such as {\"user_id\": \"...\"}, got " + what(metadata));

        JsonNode stops = body.get("stop_sequences");
        if (stops != null && !stops.isNull()) {
            if (!stops.isArray()) throw ApiException.badField("stop_sequences", "must be an array of strings, got " + what(stops));
            // chat takes an empty stop string in an array without naming which: named here
            for (int i = 0; i < stops.size(); i++)
                if (stops.get(i).isTextual() && stops.get(i).textValue().isEmpty())
                    throw ApiException.badField("stop_sequences[" + i + "]", "must not be empty");
            chat.set("stop", stops);
        }

        List<String> origins = new ArrayList<>();
        List<List<String>> calls = new ArrayList<>();
        ArrayNode messages = chat.putArray("messages");
        JsonNode system = body.get("system");
        if (system != null && !system.isNull()) {
            ArrayNode parts = textParts(system, "system");
            if (parts != null) {
                messages.addObject().put("role", "system").set("content", parts);
                origins.add("system");
                calls.add(List.of());
            }
        }
        JsonNode msgs = body.get("messages");
        if (msgs == null || msgs.isNull()) throw ApiException.badField("messages", "is required");
        if (!msgs.isArray()) throw ApiException.badField("messages", "must be an array of messages, got " + what(msgs));
        if (msgs.isEmpty()) throw ApiException.badField("messages", "must contain at least one message");
        String lastRole = null;
        for (int i = 0; i < msgs.size(); i++)
            lastRole = message(msgs.get(i), "messages[" + i + "]", "assistant".equals(lastRole), messages, origins, calls);
        // a last assistant message is a prefill: the answer continues it, as chat's prefix does
        if (lastRole.equals("assistant")) ((ObjectNode) messages.get(messages.size() - 1)).put("prefix", true);

        tools(body, chat);
        thinking(body, chat);
        return new Translation(chat, origins, calls);
    }

    /**
     * A {@code system} prompt or a tool result's content: a string, or an array of text blocks (as chat's text parts,
     * which chat joins). Null for an empty string, which adds nothing.
     */
    private static ArrayNode textParts(JsonNode v, String path) {
        ArrayNode parts = Json.array();
        if (v.isTextual()) {
            if (v.textValue().isEmpty()) return null;
            parts.addObject().put("type", "text").put("text", v.textValue());
            return parts;
        }
        if (!v.isArray()) throw ApiException.badField(path, "must be a string or an array of text blocks, got " + what(v));
        for (int j = 0; j < v.size(); j++) {
            String where = path + "[" + j + "]";
            JsonNode block = v.get(j);
            String type = blockType(block, where);
            if (!type.equals("text"))
                throw ApiException.badField(where + ".type", unsupported(type, "text blocks only"));
            parts.addObject().put("type", "text").put("text", text(block, where));
        }
        return parts.isEmpty() ? null : parts;
    }

    /** A block's type, checked to be there. */
    private static String blockType(JsonNode block, String where) {
        if (block == null || !block.isObject())
            throw ApiException.badField(where, "must be a content block object, got " + what(block));
        JsonNode t = block.get("type");
        if (t == null || t.isNull()) throw ApiException.badField(where + ".type", "is required");
        if (!t.isTextual()) throw ApiException.badField(where + ".type", "must be a string, got " + what(t));
        // a prompt-caching hint: this server's prefix cache finds shared prefixes by their tokens, unasked
        block.get("cache_control");
        return t.textValue();
    }

    private static String text(JsonNode block, String where) {
        JsonNode t = block.get("text");
        if (t == null || t.isNull()) throw ApiException.badField(where + ".text", "is required");
        if (!t.isTextual()) throw ApiException.badField(where + ".text", "must be a string, got " + what(t));
        // the citations an answer carried, sent back with the history: output only
        block.get("citations");
        return t.textValue();
    }


    private static String unsupported(String type, String what) {
        if (type.equals("image") || type.equals("document"))
            return "'" + type + "' blocks are not supported: this model reads text only (" + what + ")";
        return "unsupported block type '" + type + "' (" + what + ")";
    }

    /**
     * One Messages message as chat messages: a user turn's {@code tool_result} blocks become tool messages (first, as
     * chat wants them right after the assistant's calls), its text blocks a user message; an assistant turn's text,
     * {@code thinking} (its reasoning) and {@code tool_use} blocks (its tool calls) one assistant message.
     * Consecutive assistant turns are one turn, as Anthropic takes them: the chat template would end the first with an
     * end of sentence and start the second without a role marker (consecutive user turns need nothing: the template
     * renders them as one).
     * @param afterAssistant the message before was the assistant's: an assistant message is merged into its chat
     *                       message (text parts, reasoning and tool calls appended), which keeps its path
     * @return the message's role
     */
    private static String message(JsonNode m, String path, boolean afterAssistant, ArrayNode out, List<String> origins,
                                  List<List<String>> calls) {
        if (m == null || !m.isObject()) throw ApiException.badField(path, "must be a message object, got " + what(m));
        JsonNode roleNode = m.get("role");
        if (roleNode == null || roleNode.isNull()) throw ApiException.badField(path + ".role", "is required (\"user\" or \"assistant\")");
        String role = roleNode.isTextual() ? roleNode.textValue() : null;
        if (!"user".equals(role) && !"assistant".equals(role))
            throw ApiException.badField(path + ".role", "must be \"user\" or \"assistant\", got " + Requests.shown(roleNode)
                    + ("system".equals(role) ? " (the system prompt is the top-level field system)" : ""));
        JsonNode content = m.get("content");
        if (content == null || content.isNull()) throw ApiException.badField(path + ".content", "is required");
        if (content.isTextual() && afterAssistant && role.equals("assistant")) {
            ArrayNode parts = Json.array();
            if (!content.textValue().isEmpty()) parts.addObject().put("type", "text").put("text", content.textValue());
            merge((ObjectNode) out.get(out.size() - 1), parts, null, Json.array());
            return role;
        }
        if (content.isTextual()) {
            out.addObject().put("role", role).put("content", content.textValue());
            origins.add(path);
            calls.add(List.of());
            return role;
        }
        if (!content.isArray())
            throw ApiException.badField(path + ".content", "must be a string or an array of content blocks, got " + what(content));
        if (content.isEmpty()) throw ApiException.badField(path + ".content", "must hold at least one content block");
        boolean user = role.equals("user");
        ArrayNode parts = Json.array();
        StringBuilder reasoning = null;
        ArrayNode toolCalls = Json.array();
        List<String> callPaths = new ArrayList<>();
        for (int j = 0; j < content.size(); j++) {
            String where = path + ".content[" + j + "]";
            JsonNode block = content.get(j);
            String type = blockType(block, where);
            switch (type) {
                case "text" -> parts.addObject().put("type", "text").put("text", text(block, where));
                case "tool_result" -> {
                    if (!user) throw ApiException.badField(where + ".type", "a tool_result block belongs in a user message");
                    out.add(toolResult(block, where));
                    origins.add(where);
                    calls.add(List.of());
                }
                case "tool_use" -> {
                    if (user) throw ApiException.badField(where + ".type", "a tool_use block belongs in an assistant message");
                    toolCalls.add(toolUse(block, where));
                    callPaths.add(where);
                }
                case "thinking" -> {
                    if (user) throw ApiException.badField(where + ".type", "a thinking block belongs in an assistant message");
                    JsonNode t = block.get("thinking");
                    if (t == null || !t.isTextual())
                        throw ApiException.badField(where + ".thinking", "must be a string, got " + what(t));
                    // the signature this server gave is empty; another one is not checked (nothing here can read it)
                    block.get("signature");
                    if (reasoning == null) reasoning = new StringBuilder();
                    else reasoning.append("\n\n");
                    reasoning.append(t.textValue());
                }
                case "redacted_thinking" -> {
                    if (user) throw ApiException.badField(where + ".type", "a redacted_thinking block belongs in an assistant message");
                    // encrypted reasoning of another provider's model: nothing this model can read, so left out
                    block.get("data");
                }
                default -> throw ApiException.badField(where + ".type", unsupported(type,
                        user ? "a user message takes text and tool_result blocks" : "an assistant message takes text, thinking and tool_use blocks"));
            }
        }
        if (user) {
            if (!parts.isEmpty()) {
                out.addObject().put("role", "user").set("content", parts);
                origins.add(path);
                calls.add(List.of());
            }
            return role;
        }
        if (afterAssistant && content.isArray()) {
            merge((ObjectNode) out.get(out.size() - 1), parts, reasoning, toolCalls);
            List<String> all = new ArrayList<>(calls.getLast());
            all.addAll(callPaths);
            calls.set(calls.size() - 1, all);
            return role;
        }
        ObjectNode a = out.addObject().put("role", "assistant");
        if (!parts.isEmpty()) a.set("content", parts);
        else if (toolCalls.isEmpty()) a.put("content", "");  // a turn of reasoning only
        if (reasoning != null) a.put("reasoning_content", reasoning.toString());
        if (!toolCalls.isEmpty()) a.set("tool_calls", toolCalls);
        origins.add(path);
        calls.add(callPaths);
        return role;
    }

    /**
     * Appends an assistant turn to the chat assistant message of the turn before it: text parts after its content
     * (chat joins them as it joins any parts), reasoning after its reasoning, tool calls after its calls.
     */
    private static void merge(ObjectNode prev, ArrayNode parts, StringBuilder reasoning, ArrayNode toolCalls) {
        if (!parts.isEmpty()) {
            JsonNode had = prev.get("content");
            if (had != null && had.isArray()) ((ArrayNode) had).addAll(parts);
            else if (had != null && had.isTextual() && !had.textValue().isEmpty())
                prev.set("content", Json.array().add(Json.object().put("type", "text").put("text", had.textValue())).addAll(parts));
            else prev.set("content", parts);
        }
        if (reasoning != null) {
            JsonNode had = prev.get("reasoning_content");
            prev.put("reasoning_content", had == null ? reasoning.toString() : had.textValue() + "\n\n" + reasoning);
        }
        if (!toolCalls.isEmpty()) {
            JsonNode had = prev.get("tool_calls");
            if (had == null) prev.set("tool_calls", toolCalls);
            else ((ArrayNode) had).addAll(toolCalls);
            // a turn of reasoning only had an empty content, which a turn with calls needs not
            JsonNode c = prev.get("content");
            if (c != null && c.isTextual() && c.textValue().isEmpty()) prev.remove("content");
        }
    }

    /** A {@code tool_result} block as a chat tool message; a result marked {@code is_error} says so before its text. */
    private static ObjectNode toolResult(JsonNode block, String where) {
        JsonNode id = block.get("tool_use_id");
        if (id == null || id.isNull()) throw ApiException.badField(where + ".tool_use_id", "is required: the id of the tool_use block it answers");
        if (!id.isTextual() || id.textValue().isEmpty())
            throw ApiException.badField(where + ".tool_use_id", "must be a non-empty string (the id of the tool_use block it"
                    + " answers), got " + Requests.shown(id));
        Boolean failed = Requests.optBool(block, "is_error", where + ".is_error");
        JsonNode c = block.get("content");
        String text;
        if (c == null || c.isNull()) text = "";
        else if (c.isTextual()) text = c.textValue();
        else {
            ArrayNode parts = textParts(c, where + ".content");
            StringBuilder t = new StringBuilder();
            if (parts != null)
                for (JsonNode p : parts) t.append(t.isEmpty() ? "" : "\n\n").append(p.get("text").textValue());
            text = t.toString();
        }
        // the chat template has no mark for a failed call: the model reads it in the result's text
        if (Boolean.TRUE.equals(failed)) text = "Error: " + text;
        return Json.object().put("role", "tool").put("tool_call_id", id.textValue()).put("content", text);
    }

    /** A {@code tool_use} block as a chat tool call (its {@code input} object as the arguments). */
    private static ObjectNode toolUse(JsonNode block, String where) {
        JsonNode id = block.get("id");
        if (id == null || id.isNull()) throw ApiException.badField(where + ".id", "is required: the tool_result that answers it names it");
        if (!id.isTextual() || id.textValue().isEmpty())
            throw ApiException.badField(where + ".id", "must be a non-empty string, got " + Requests.shown(id));
        JsonNode name = block.get("name");
        if (name == null || !name.isTextual() || name.textValue().isEmpty())
            throw ApiException.badField(where + ".name", "must be a non-empty string, got " + what(name));
        JsonNode input = block.get("input");
        if (input == null || !input.isObject())
            throw ApiException.badField(where + ".input", "must be an object, got " + what(input));
        RequestFields.usedWhole(input);
        ObjectNode call = Json.object().put("id", id.textValue()).put("type", "function");
        call.putObject("function").put("name", name.textValue()).set("arguments", input);
        return call;
    }

    /**
     * {@code tools} (custom tools: name, description, input_schema) as chat functions, and {@code tool_choice} as
     * chat's: auto, any → required, tool → the named function, none; {@code disable_parallel_tool_use} →
     * {@code parallel_tool_calls: false}. Server tools (a {@code type} such as {@code web_search_20250305}) run on
     * Anthropic's platform, which this server is not: refused.
     */
    private static void tools(JsonNode body, ObjectNode chat) {
        JsonNode tools = body.get("tools");
        if (tools != null && !tools.isNull()) {
            if (!tools.isArray()) throw ApiException.badField("tools", "must be an array of tools, got " + what(tools));
            ArrayNode fns = chat.putArray("tools");
            for (int i = 0; i < tools.size(); i++) {
                String where = "tools[" + i + "]";
                JsonNode t = tools.get(i);
                if (!t.isObject()) throw ApiException.badField(where, "must be a tool object, got " + what(t));
                JsonNode type = t.get("type");
                if (type != null && !type.isNull() && !(type.isTextual() && type.textValue().equals("custom")))
                    throw ApiException.badField(where + ".type", "server tools are not supported (got " + Requests.shown(type)
                            + "): give custom tools, with name, description and input_schema");
                t.get("cache_control");
                JsonNode schema = t.get("input_schema");
                if (schema == null || schema.isNull())
                    throw ApiException.badField(where + ".input_schema", "is required: the JSON Schema of the tool's input");
                ObjectNode fn = fns.addObject().put("type", "function").putObject("function");
                JsonNode name = t.get("name");
                if (name != null) fn.set("name", name);
                JsonNode description = t.get("description");
                if (description != null && !description.isNull()) fn.set("description", description);
                fn.set("parameters", schema);
                // strict tool use is chat's strict function: checked and enforced there
                JsonNode strict = t.get("strict");
                if (strict != null && !strict.isNull()) fn.set("strict", strict);
                // the chat template writes the schema whole into the prompt
                RequestFields.usedWhole(schema);
            }
        }
        JsonNode choice = body.get("tool_choice");
        if (choice == null || choice.isNull()) return;
        if (!choice.isObject())
            throw ApiException.badField("tool_choice", "must be an object such as {\"type\": \"auto\"}, got " + what(choice));
        JsonNode type = choice.get("type");
        String t = type != null && type.isTextual() ? type.textValue() : null;
        switch (t == null ? "" : t) {
            case "auto" -> chat.put("tool_choice", "auto");
            case "any" -> {
                // chat's check would speak of 'required'
                if (tools == null || !tools.isArray() || tools.isEmpty())
                    throw ApiException.badField("tool_choice.type", "\"any\" needs at least one tool in tools");
                chat.put("tool_choice", "required");
            }
            case "none" -> chat.put("tool_choice", "none");
            case "tool" -> {
                JsonNode name = choice.get("name");
                if (name == null || !name.isTextual() || name.textValue().isEmpty())
                    throw ApiException.badField("tool_choice.name", "must be a non-empty string, got " + what(name));
                chat.putObject("tool_choice").put("type", "function").putObject("function").put("name", name.textValue());
            }
            default -> throw ApiException.badField("tool_choice.type", "must be \"auto\", \"any\", \"tool\" or \"none\", got "
                    + (type == null ? "nothing" : Requests.shown(type)));
        }
        if (!t.equals("none")) {
            Boolean single = Requests.optBool(choice, "disable_parallel_tool_use", "tool_choice.disable_parallel_tool_use");
            if (single != null) chat.put("parallel_tool_calls", !single);
        }
    }

    /**
     * {@code thinking}: {@code {"type": "enabled", "budget_tokens": N}} turns thinking mode on, as does
     * {@code {"type": "adaptive"}} (the model decides how long to think, as V4 does in thinking mode), {@code disabled} off.
     * The budget (an integer from 1 to Integer.MAX_VALUE) caps the reasoning as chat's {@code thinking_token_budget}
     * does; max_tokens still bounds the whole answer.
     */
    private static void thinking(JsonNode body, ObjectNode chat) {
        JsonNode th = body.get("thinking");
        if (th == null || th.isNull()) return;
        if (!th.isObject())
            throw ApiException.badField("thinking", "must be {\"type\": \"enabled\", \"budget_tokens\": N}, {\"type\": \"adaptive\"} or {\"type\": \"disabled\"}, got "
                    + what(th));
        JsonNode type = th.get("type");
        String t = type != null && type.isTextual() ? type.textValue() : null;
        // adaptive: the model decides how much to think; V4 in thinking mode does so anyway
        if ("adaptive".equals(t)) t = "enabled";
        if (!"enabled".equals(t) && !"disabled".equals(t))
            throw ApiException.badField("thinking.type", "must be \"enabled\", \"adaptive\" or \"disabled\", got " + (type == null ? "nothing" : Requests.shown(type)));
        if (t.equals("enabled")) {
            JsonNode budget = th.get("budget_tokens");
            if (budget != null && !budget.isNull() && !(Json.isIntegral(budget) && budget.canConvertToInt() && budget.intValue() >= 1))
                throw ApiException.badField("thinking.budget_tokens", "must be an integer from 1 to " + Integer.MAX_VALUE
                        + ", got " + Requests.shown(budget));
            if (budget != null && !budget.isNull()) chat.put("thinking_token_budget", budget.intValue());
        }
        chat.putObject("thinking").put("type", t);
    }

    // ------------------------------------------------------------------------------------------------ errors

    /** Anthropic's error type for an HTTP status (the statuses are chat's for the same problem). */
    static String errorType(int status) {
        return switch (status) {
            case 401 -> "authentication_error";
            case 403 -> "permission_error";
            case 404 -> "not_found_error";
            case 413 -> "request_too_large";
            case 429 -> "rate_limit_error";
            case 503, 529 -> "overloaded_error";
            default -> status >= 500 ? "api_error" : "invalid_request_error";
        };
    }

    /**
     * A single server's error body for a request to path: Anthropic's on the Anthropic routes, OpenAI's elsewhere. The
     * one decision of the shape, for the routes' errors ({@link HttpVerticle}) and the refusals answered before them
     * ({@link RequestFraming}, {@link BodyDeadline}).
     */
    static ObjectNode errorBody(String path, ApiException e) {
        return speaks(path) ? errorBody(e) : e.body();
    }

    /** {@code {"type": "error", "error": {"type", "message"}}}: the body of an error, and the data of a stream's error event. */
    static ObjectNode errorBody(ApiException e) {
        ObjectNode o = Json.object().put("type", "error");
        o.putObject("error").put("type", errorType(e.status())).put("message", e.getMessage());
        return o;
    }
}
