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
 * OpenAI's Responses API ({@code POST /v1/responses}) as a translation over the chat endpoint, as
 * {@link AnthropicApi} is for the Messages API. A Responses body is rewritten into the chat body that means the same
 * ({@link #translate}), which {@link Requests#parse} then reads and checks as any chat request, so sampling, tools,
 * tool choice, thinking, constrained outputs and their limits are decided by chat alone; what only the Responses
 * shapes have (input items, {@code instructions}, flat function tools, {@code text.format}, {@code reasoning}, the
 * fields about stored responses) is checked here, naming the Responses field. A complaint of the chat parser names a
 * chat field; {@link Translation#renamed} names the Responses field it came from. Errors keep OpenAI's shape.
 *
 * <p>The server stores nothing: a response cannot be fetched, deleted or cancelled later ({@link #notStored}), and a
 * request that builds on a stored one ({@code previous_response_id}, {@code conversation}, an {@code item_reference})
 * is refused; a client sends the whole conversation as input items instead, the output items of earlier responses
 * included, which is what clients with {@code store: false} do.
 *
 * <p>The fields are read from the client's body, so {@link RequestFields} reports those this translation never asked
 * for, as on chat; parts passed on whole (a function's {@code parameters}, a format's {@code schema}) are marked so.
 */
final class ResponsesApi {
    private ResponsesApi() {}

    /** The generation route. */
    static final String RESPONSES = "/v1/responses";


    /**
     * The hints for chat's names of this API's fields, which no edit distance finds ({@code max_tokens} is
     * {@code max_output_tokens}), and for chat's fields this API has no counterpart of ({@code stop}), said instead of a
     * "did you mean" of a name that only looks alike ({@code stop} is no misspelt {@code store}).
     */
    static final java.util.Map<String, String> FIELD_HINTS = java.util.Map.of(
            "max_tokens", "did you mean max_output_tokens?",
            "max_token", "did you mean max_output_tokens?",
            "max_completion_tokens", "did you mean max_output_tokens?",
            "stop", "the Responses API has no stop field: stop sequences cannot be given",
            "messages", "did you mean input?",
            "response_format", "did you mean text.format?",
            "reasoning_effort", "did you mean reasoning.effort?");

    /** The route that counts a request's prompt tokens without generating. */
    static final String INPUT_TOKENS = "/v1/responses/input_tokens";

    /** The path of a stored response by its id: any name under {@link #RESPONSES} but {@code input_tokens}. */
    static final String STORED_ID = "/v1/responses/(?!input_tokens(?:/|$))([^/]+)";

    /** A stored response's routes, which this server answers with a 404: one response, its cancel, its input items. */
    private static final Pattern STORED = Pattern.compile(STORED_ID + "(/cancel|/input_items)?");

    /**
     * The methods a path under {@link #RESPONSES} answers (each with a 404, as nothing is stored), or null for a path
     * that is none of a stored response's routes.
     */
    static String allowed(String path) {
        Matcher m = STORED.matcher(path);
        if (!m.matches()) return null;
        if (m.group(2) == null) return "GET, HEAD, DELETE";
        return m.group(2).equals("/cancel") ? "POST" : "GET, HEAD";
    }

    /**
     * The 404 of a stored response's route ({@code GET} or {@code DELETE /v1/responses/{id}}, its {@code cancel} and
     * {@code input_items}): the server keeps no responses, whatever {@code store} asked.
     *
     * @param path the routed path, one {@link #allowed} knows
     */
    static ApiException notStored(String path) {
        Matcher m = STORED.matcher(path);
        String id = m.matches() ? m.group(1) : path;
        // the id is the client's: a long one is cut, so the answer stays small
        if (id.length() > 64) id = id.substring(0, 64) + "...";
        return new ApiException(404, "invalid_request_error", "response_not_found", null, "response '" + id
                + "' not found: this server stores no responses (each answer is returned once, streamed or not), so none"
                + " can be retrieved, deleted or cancelled; send the conversation as input items instead", null);
    }

    /**
     * A Responses body as a chat body, with what the answer echoes.
     *
     * @param chat     the chat body, to give {@link Requests#parse}
     * @param origins  for each chat message, the Responses path it came from ({@code instructions}, {@code input},
     *                 {@code input[3]}; an assistant turn of several items, its first item's)
     * @param ends     for each chat message, the path of the last item it came from (an assistant turn's last item,
     *                 else its origin): the item that ends an input that ends with the assistant's turn
     * @param calls    for each chat message, the paths of its tool calls' {@code function_call} items (empty for most)
     * @param settings the request's settings as the response object echoes them ({@code instructions}, {@code tools},
     *                 {@code text}, ...; sampling values and max_output_tokens are added by the writer, as applied)
     */
    record Translation(ObjectNode chat, List<String> origins, List<String> ends, List<List<String>> calls, ObjectNode settings)
            implements TranslatedRequest {
        /**
         * A chat path pattern: a message (with a call, its tool_call_id or content), a tool's function part, a tool
         * choice's name, a response format's part, and the chat-only field names of this translation.
         */
        private static final Pattern CHAT_PATH = Pattern.compile(
                "messages\\[(?<m>\\d+)](?<mrest>\\.tool_calls(?:\\[(?<c>\\d+)])?(?:\\.function(?:\\.arguments|\\.name)?|\\.id)?|\\.tool_call_id|\\.content)?"
                        + "|tools\\[(?<t>\\d+)]\\.function(?<trest>\\.parameters|\\.name|\\.description|\\.strict)?"
                        + "|tool_choice\\.function\\.name"
                        + "|response_format(?<rf>\\.json_schema(?:\\.schema|\\.strict|\\.name|\\.description)?|\\.type)?"
                        + "|(?<![\\w.\\[])(?<bare>messages|max_tokens|reasoning_effort)(?![\\w\\[])");

        /** The chat fields this translation writes whose names the pattern matches. */
        private static final java.util.Set<String> OWN_KEYS = java.util.Set.of("messages", "max_tokens", "reasoning_effort", "response_format");

        @Override
        public String idPrefix() {
            return "resp_";
        }

        @Override
        public java.util.Map<String, String> fieldHints() {
            return FIELD_HINTS;
        }

        @Override
        public AnswerWriter writer(String id, long created, String model, Requests.Gen g, int promptTokens, int maxTokens) {
            return new ResponsesResponse(id, created, model, g.stream(), settings, g.params().temperature(), g.params().topP(),
                    maxTokens);
        }

        /**
         * The chat parser's error as the Responses API's: its field, and every chat path in its message, named as the
         * client sent them ({@code max_tokens} is {@code max_output_tokens}, {@code response_format.json_schema.schema}
         * is {@code text.format.schema}, {@code tools[0].function.parameters} is {@code tools[0].parameters}, a chat
         * message is the input item it came from, a tool call its {@code function_call} item). What the client wrote is
         * left as it is, even where it reads as a chat path.
         */
        @Override
        public ApiException renamed(ApiException e) {
            // the chat fields this translation wrote are no client's strings
            List<String> own = ChatPaths.clientStrings(chat, CHAT_PATH, OWN_KEYS);
            String param = e.param() == null ? null : path(e.param());
            String msg = e.getMessage();
            if (msg != null) {
                // the message starts with the field it is about, then says what is wrong with it
                if (e.param() != null && msg.startsWith(e.param() + ":"))
                    msg = param + ChatPaths.replace(msg.substring(e.param().length()), own, CHAT_PATH, this::one);
                else msg = ChatPaths.replace(msg, own, CHAT_PATH, this::one);
                msg = worded(ChatPaths.replace(msg, own, ChatPaths.CALL_WORDS, ResponsesApi.Translation::callWords), param);
            }
            return e.renamed(param, msg);
        }

        /** The Responses API's words for one of {@link ChatPaths#CALL_WORDS}. */
        private static String callWords(Matcher m) {
            String w = m.group();
            if (w.startsWith("answers no tool call")) return "answers no function call: a function_call_output item follows"
                    + " the function_call item it answers (or another function_call_output item after it)";
            if (w.startsWith("is not the id")) return "is not the call_id of a function_call in the assistant turn at ";
            if (w.startsWith("(its tool calls")) return "(its call_ids: ";
            if (w.startsWith("each tool call of"))
                return "each function_call in the assistant turn at " + m.group(1) + " is answered by one function_call_output item";
            if (w.startsWith("is also")) return "is also the call_id of ";
            return "each function_call has a call_id of its own";
        }

        /** Chat's wording of a rule as the Responses API states it ({@link ChatPaths#worded}). */
        private static String worded(String msg, String param) {
            return ChatPaths.worded(msg, param, callsAndWhere -> {
                // "the call 'a' before input[3] (a user message)", "the calls 'a', 'b' before the input end"
                String items = callsAndWhere.startsWith("s ") ? "function_call items" + callsAndWhere.substring(1)
                        : "function_call item" + callsAndWhere;
                if (items.endsWith("before the input end")) items = items + "s";
                return "no function_call_output item answers the " + items + ": each function_call item must be"
                        + " answered by a function_call_output item with its call_id before any other item";
            });
        }

        /** A field's path: its chat path is where it starts; what follows is the client's (a schema's property names). */
        private String path(String p) {
            Matcher m = CHAT_PATH.matcher(p);
            if (!m.lookingAt()) return p;
            return one(m) + p.substring(m.end());
        }

        /** The Responses name of one chat path the pattern matched. */
        private String one(Matcher m) {
            if (m.group("bare") != null) return switch (m.group("bare")) {
                case "messages" -> "input";
                case "max_tokens" -> "max_output_tokens";
                default -> "reasoning.effort";
            };
            if (m.group().startsWith("response_format")) {
                String part = m.group("rf");
                if (part == null) return "text.format";
                if (part.equals(".type")) return "text.format.type";
                return "text.format" + part.substring(".json_schema".length());
            }
            if (m.group("t") != null) {
                String part = m.group("trest");
                return "tools[" + m.group("t") + "]" + (part == null ? "" : part);
            }
            if (m.group("m") == null) return "tool_choice.name";
            int k = Integer.parseInt(m.group("m"));
            if (k >= origins.size()) return m.group();
            String origin = origins.get(k), rest = m.group("mrest");
            // the last message named alone is the refusal of an input that ends with the assistant's turn: the item that
            // ends the input is what is refused, not the turn's first (a reasoning item, an earlier message)
            if (rest == null) return k == origins.size() - 1 ? ends.get(k) : origin;
            // a tool message is a function_call_output item: its call_id and output
            if (rest.equals(".tool_call_id")) return origin + ".call_id";
            if (rest.equals(".content")) return origin + (chat.path("messages").path(k).path("role").asText().equals("tool") ? ".output" : ".content");
            // a tool call: the function_call item it came from
            List<String> items = calls.get(k);
            if (items.isEmpty()) return origin;
            if (m.group("c") == null) return items.getFirst();
            int c = Integer.parseInt(m.group("c"));
            String item = c < items.size() ? items.get(c) : origin;
            String field = rest.substring(rest.indexOf(']') + 1);
            return item + (field.endsWith(".arguments") ? ".arguments" : field.endsWith(".name") ? ".name" : field.equals(".id") ? ".call_id" : "");
        }
    }

    /**
     * Rewrites a Responses body into a chat body, checking what only the Responses shapes have.
     *
     * @param body the client's body
     * @return the chat body, where its messages and calls came from, and the settings the answer echoes
     * @throws ApiException 400 naming the Responses field
     */
    static Translation translate(JsonNode body) {
        if (body == null || !body.isObject()) throw ApiException.bodyNotAnObject(body);
        storedState(body);
        ObjectNode chat = Json.object();
        ObjectNode settings = Json.object();
        for (String f : List.of("model", "stream", "temperature", "top_p", "parallel_tool_calls")) {
            JsonNode v = body.get(f);
            if (v != null && !v.isNull()) chat.set(f, v);
        }
        // chat checks it, under its name of max_tokens (renamed back in its errors)
        JsonNode most = body.get("max_output_tokens");
        if (most != null && !most.isNull()) chat.set("max_tokens", most);
        streamOptions(body);
        bookkeeping(body, settings);

        List<String> origins = new ArrayList<>(), ends = new ArrayList<>();
        List<List<String>> calls = new ArrayList<>();
        ArrayNode messages = chat.putArray("messages");
        JsonNode instructions = body.get("instructions");
        if (instructions != null && !instructions.isNull()) {
            if (!instructions.isTextual())
                throw ApiException.badField("instructions", "must be a string (the system message), got " + what(instructions));
            if (!instructions.textValue().isEmpty()) {
                messages.addObject().put("role", "system").put("content", instructions.textValue());
                origins.add("instructions");
                ends.add("instructions");
                calls.add(List.of());
            }
            settings.put("instructions", instructions.textValue());
        } else settings.putNull("instructions");
        input(body, messages, origins, ends, calls);

        tools(body, chat, settings);
        text(body, chat, settings);
        reasoning(body, chat, settings);
        JsonNode parallel = chat.get("parallel_tool_calls");
        settings.put("parallel_tool_calls", parallel == null || !parallel.isBoolean() || parallel.booleanValue());
        return new Translation(chat, origins, ends, calls, settings);
    }

    /**
     * Refuses what builds on state this server would have had to store: an earlier response, a conversation, a
     * stored prompt, a response run in the background to fetch later.
     */
    private static void storedState(JsonNode body) {
        String send = ": this server stores no responses; send the whole conversation as input items (the earlier input"
                + " and each response's output items)";
        if (given(body, "previous_response_id"))
            throw ApiException.badField("previous_response_id", "is not supported" + send);
        if (given(body, "conversation"))
            throw ApiException.badField("conversation", "is not supported" + send);
        if (given(body, "prompt"))
            throw ApiException.badField("prompt", "stored prompt templates are not supported: give instructions and input");
        Boolean background = Requests.optBool(body, "background", "background");
        if (Boolean.TRUE.equals(background))
            throw ApiException.badField("background", "background responses are not supported: a response is fetched later"
                    + " from storage, and this server stores none; " + (body.path("stream").asBoolean(false)
                    ? "leave background out: the response streams as it is made" : "stream it instead (\"stream\": true)"));
    }

    /** {@code stream_options}: only with {@code stream: true}, as chat's; {@code include_obfuscation} is accepted. */
    private static void streamOptions(JsonNode body) {
        JsonNode so = body.get("stream_options");
        if (so == null || so.isNull()) return;
        if (!so.isObject()) throw ApiException.badField("stream_options", "must be an object, got " + what(so));
        // the padding that hides the length of a stream's deltas on the network: not sent, a local server's stream
        // needs none
        Requests.optBool(so, "include_obfuscation", "stream_options.include_obfuscation");
        if (!Requests.bool(body, "stream", false))
            throw ApiException.badField("stream_options", "is allowed only with \"stream\": true");
    }

    /**
     * The fields about the request rather than its answer: {@code store} (accepted; nothing is stored, so the answer
     * says {@code false}), {@code metadata} (an object of strings, echoed), {@code user} (echoed), {@code include}
     * (output this server does not produce is simply not there, but logprobs are refused: asked for, their absence
     * would be silent), {@code truncation} ({@code disabled}, or {@code auto}, which drops nothing here: a conversation
     * past the context is refused, as with {@code disabled}), {@code top_logprobs} (0 only).
     */
    private static void bookkeeping(JsonNode body, ObjectNode settings) {
        Requests.optBool(body, "store", "store");
        settings.put("store", false);
        JsonNode metadata = body.get("metadata");
        if (metadata != null && !metadata.isNull()) {
            if (!metadata.isObject())
                throw ApiException.badField("metadata", "must be an object of strings such as {\"task\": \"...\"}, got " + what(metadata));
            // the keys are the client's own, read whole
            for (var f : metadata.properties())
                if (!f.getValue().isTextual())
                    throw ApiException.badField("metadata." + f.getKey(), "must be a string, got " + what(f.getValue()));
            settings.set("metadata", metadata);
        } else settings.putObject("metadata");
        String user = Requests.optString(body, "user", "user");
        if (user != null) settings.put("user", user); else settings.putNull("user");
        JsonNode include = body.get("include");
        if (include != null && !include.isNull()) {
            if (!include.isArray()) throw ApiException.badField("include", "must be an array of strings, got " + what(include));
            for (int i = 0; i < include.size(); i++) {
                JsonNode v = include.get(i);
                if (!v.isTextual()) throw ApiException.badField("include[" + i + "]", "must be a string, got " + what(v));
                if (v.textValue().equals("message.output_text.logprobs"))
                    throw ApiException.badField("include[" + i + "]", "'message.output_text.logprobs' is not supported on"
                            + " /v1/responses (chat completions return logprobs: /v1/chat/completions with \"logprobs\": true)");
            }
        }
        JsonNode top = body.get("top_logprobs");
        if (top != null && !top.isNull() && !(Json.isIntegral(top) && top.canConvertToInt() && top.intValue() == 0))
            throw ApiException.badField("top_logprobs", "logprobs are not supported on /v1/responses (only 0 is accepted; chat"
                    + " completions return them: /v1/chat/completions with \"logprobs\": true), got " + Requests.shown(top));
        String truncation = Requests.optString(body, "truncation", "truncation");
        if (truncation != null && !truncation.equals("disabled") && !truncation.equals("auto"))
            throw ApiException.badField("truncation", "must be \"disabled\" or \"auto\", got " + Requests.shown(body.get("truncation")));
        settings.put("truncation", truncation == null ? "disabled" : truncation);
    }

    // ------------------------------------------------------------------------------------------------ input

    /**
     * {@code input}: a string (one user message) or an array of items, as chat messages. Message items become
     * messages of their role; {@code reasoning}, assistant {@code message} and {@code function_call} items in a row are
     * one assistant turn (its reasoning, content and tool calls); each {@code function_call_output} item becomes a tool
     * message. Chat then checks that each call is answered before the next other message.
     */
    private static void input(JsonNode body, ArrayNode messages, List<String> origins, List<String> ends,
                              List<List<String>> calls) {
        JsonNode input = body.get("input");
        if (input == null || input.isNull())
            // a chat body sent here: its messages are named, as they are when input is given beside them
            throw ApiException.badField("input", "is required: a string (one user message) or an array of input items"
                    + (body.has("messages") ? " (the body has chat's messages: the Responses API takes the conversation as input)" : ""));
        if (input.isTextual()) {
            messages.addObject().put("role", "user").put("content", input.textValue());
            origins.add("input");
            ends.add("input");
            calls.add(List.of());
            return;
        }
        if (!input.isArray())
            throw ApiException.badField("input", "must be a string or an array of input items, got " + what(input));
        if (input.isEmpty()) throw ApiException.badField("input", "must hold at least one item");
        Turn turn = null;
        for (int i = 0; i < input.size(); i++) {
            String where = "input[" + i + "]";
            JsonNode item = input.get(i);
            if (item == null || !item.isObject()) throw ApiException.badField(where, "must be an input item object, got " + what(item));
            String type = type(item, where);
            // the id and status an output item came with, sent back with the history: output only
            item.get("id");
            item.get("status");
            switch (type) {
                case "message" -> {
                    String role = role(item, where);
                    if (role.equals("assistant")) {
                        if (turn == null) turn = new Turn(where);
                        turn.last = where;
                        turn.parts.addAll(parts(item, where, true));
                    } else {
                        turn = close(turn, messages, origins, ends, calls);
                        ArrayNode parts = parts(item, where, false);
                        JsonNode c = item.get("content");
                        ObjectNode m = messages.addObject().put("role", role);
                        // a string stays one: a user turn of "" is chat's, as sent
                        if (c.isTextual()) m.put("content", c.textValue()); else m.set("content", parts);
                        origins.add(where);
                        ends.add(where);
                        calls.add(List.of());
                    }
                }
                case "function_call" -> {
                    if (turn == null) turn = new Turn(where);
                    turn.last = where;
                    turn.calls.add(functionCall(item, where));
                    turn.callPaths.add(where);
                }
                case "reasoning" -> {
                    if (turn == null) turn = new Turn(where);
                    turn.last = where;
                    String r = reasoningText(item, where);
                    if (r != null) turn.reasoning.append(turn.reasoning.isEmpty() ? "" : "\n\n").append(r);
                }
                case "function_call_output" -> {
                    turn = close(turn, messages, origins, ends, calls);
                    messages.add(functionCallOutput(item, where));
                    origins.add(where);
                    ends.add(where);
                    calls.add(List.of());
                }
                case "item_reference" -> throw ApiException.badField(where + ".type", "an item_reference names a stored item,"
                        + " and this server stores none: send the item itself");
                default -> throw ApiException.badField(where + ".type", "unsupported item type '" + type + "' (this server"
                        + " takes message, function_call, function_call_output and reasoning items)");
            }
        }
        close(turn, messages, origins, ends, calls);
    }

    /**
     * The assistant items in a row, gathered into one chat assistant message: the chat template would end the first
     * turn with an end of sentence and start the next without a role marker.
     */
    private static final class Turn {
        final String origin;
        /** The path of the turn's last item so far. */
        String last;
        final ArrayNode parts = Json.array();
        final StringBuilder reasoning = new StringBuilder();
        final ArrayNode calls = Json.array();
        final List<String> callPaths = new ArrayList<>();

        Turn(String origin) {
            this.origin = origin;
            this.last = origin;
        }
    }

    /** Adds a turn's chat message, if one is open; null, the turn that is open now. */
    private static Turn close(Turn t, ArrayNode messages, List<String> origins, List<String> ends, List<List<String>> calls) {
        // a turn of reasoning items without text (another provider's, encrypted) says nothing: no message
        if (t == null || t.parts.isEmpty() && t.calls.isEmpty() && t.reasoning.isEmpty()) return null;
        ObjectNode a = messages.addObject().put("role", "assistant");
        if (!t.parts.isEmpty()) a.set("content", t.parts);
        else if (t.calls.isEmpty()) a.put("content", "");  // a turn of reasoning only
        if (!t.reasoning.isEmpty()) a.put("reasoning_content", t.reasoning.toString());
        if (!t.calls.isEmpty()) a.set("tool_calls", t.calls);
        origins.add(t.origin);
        ends.add(t.last);
        calls.add(t.callPaths);
        return null;
    }

    /** An item's type: {@code message} where none is given (an easy input message, {@code {"role", "content"}}). */
    private static String type(JsonNode item, String where) {
        JsonNode t = item.get("type");
        if (t == null || t.isNull()) return "message";
        if (!t.isTextual()) throw ApiException.badField(where + ".type", "must be a string, got " + what(t));
        return t.textValue();
    }

    private static String role(JsonNode item, String where) {
        JsonNode r = item.get("role");
        if (r == null || r.isNull())
            throw ApiException.badField(where + ".role", "is required (\"user\", \"assistant\", \"system\" or \"developer\")");
        String role = r.isTextual() ? r.textValue() : null;
        if (!"user".equals(role) && !"assistant".equals(role) && !"system".equals(role) && !"developer".equals(role))
            throw ApiException.badField(where + ".role", "must be \"user\", \"assistant\", \"system\" or \"developer\", got "
                    + Requests.shown(r) + ("tool".equals(role) ? " (a tool's result is a function_call_output item)" : ""));
        return role;
    }

    /**
     * A message item's content as chat text parts: a string, or an array of {@code input_text} and
     * {@code output_text} parts (and an assistant's {@code refusal}, what it said). Images, files and audio are
     * refused: this model reads text only.
     */
    private static ArrayNode parts(JsonNode item, String where, boolean assistant) {
        JsonNode c = item.get("content");
        String path = where + ".content";
        ArrayNode parts = Json.array();
        if (c == null || c.isNull()) throw ApiException.badField(path, "is required");
        if (c.isTextual()) {
            if (!c.textValue().isEmpty() || !assistant) parts.addObject().put("type", "text").put("text", c.textValue());
            return parts;
        }
        if (!c.isArray()) throw ApiException.badField(path, "must be a string or an array of content parts, got " + what(c));
        if (c.isEmpty()) throw ApiException.badField(path, "must hold at least one content part");
        for (int j = 0; j < c.size(); j++) {
            String at = path + "[" + j + "]";
            JsonNode part = c.get(j);
            if (part == null || !part.isObject()) throw ApiException.badField(at, "must be a content part object, got " + what(part));
            String type = Requests.optString(part, "type", at + ".type");
            if (type == null) throw ApiException.badField(at + ".type", "is required (\"input_text\" or \"output_text\")");
            String text = switch (type) {
                case "input_text", "output_text" -> {
                    // what an answer's text came with, sent back with the history: output only
                    part.get("annotations");
                    part.get("logprobs");
                    yield string(part, "text", at);
                }
                case "refusal" -> {
                    if (!assistant) throw ApiException.badField(at + ".type", "a refusal part belongs in an assistant message");
                    yield string(part, "refusal", at);
                }
                case "input_image", "input_file", "input_audio" -> throw ApiException.badField(at + ".type", "'" + type
                        + "' parts are not supported: this model reads text only (give input_text parts)");
                default -> throw ApiException.badField(at + ".type", "unsupported content part type '" + type
                        + "' (give input_text or output_text parts)");
            };
            parts.addObject().put("type", "text").put("text", text);
        }
        return parts;
    }

    /** A required string field of an object at path {@code at}. */
    private static String string(JsonNode o, String field, String at) {
        JsonNode v = o.get(field);
        if (v == null || v.isNull()) throw ApiException.badField(at + "." + field, "is required");
        if (!v.isTextual()) throw ApiException.badField(at + "." + field, "must be a string, got " + what(v));
        return v.textValue();
    }

    /** A {@code function_call} item as a chat tool call; its arguments are checked by chat (JSON object text). */
    private static ObjectNode functionCall(JsonNode item, String where) {
        String id = callId(item, where);
        JsonNode name = item.get("name");
        if (name == null || !name.isTextual() || name.textValue().isEmpty())
            throw ApiException.badField(where + ".name", "must be a non-empty string, got " + what(name));
        JsonNode args = item.get("arguments");
        if (args != null && !args.isNull() && !args.isTextual())
            throw ApiException.badField(where + ".arguments", "must be a string: the call's arguments as JSON text, got " + what(args));
        ObjectNode call = Json.object().put("id", id).put("type", "function");
        ObjectNode fn = call.putObject("function").put("name", name.textValue());
        if (args != null && !args.isNull()) fn.set("arguments", args);
        return call;
    }

    private static String callId(JsonNode item, String where) {
        JsonNode id = item.get("call_id");
        if (id == null || id.isNull()) throw ApiException.badField(where + ".call_id", "is required: the id that pairs a function_call"
                + " item with the function_call_output item answering it");
        if (!id.isTextual() || id.textValue().isEmpty())
            throw ApiException.badField(where + ".call_id", "must be a non-empty string, got " + Requests.shown(id));
        return id.textValue();
    }

    /**
     * A {@code function_call_output} item as a chat tool message: its {@code output} a string, or an array of
     * {@code input_text} parts (joined as chat joins text parts).
     */
    private static ObjectNode functionCallOutput(JsonNode item, String where) {
        String id = callId(item, where);
        JsonNode out = item.get("output");
        String path = where + ".output";
        if (out == null || out.isNull()) throw ApiException.badField(path, "is required: the call's result, a string");
        String text;
        if (out.isTextual()) text = out.textValue();
        else if (out.isArray()) {
            StringBuilder t = new StringBuilder();
            for (int j = 0; j < out.size(); j++) {
                String at = path + "[" + j + "]";
                JsonNode part = out.get(j);
                if (part == null || !part.isObject()) throw ApiException.badField(at, "must be a content part object, got " + what(part));
                String type = Requests.optString(part, "type", at + ".type");
                if ("input_image".equals(type) || "input_file".equals(type))
                    throw ApiException.badField(at + ".type", "'" + type + "' parts are not supported: this model reads text only");
                if (!"input_text".equals(type))
                    throw ApiException.badField(at + ".type", "must be \"input_text\", got " + what(part.get("type")));
                t.append(j > 0 ? "\n\n" : "").append(string(part, "text", at));
            }
            text = t.toString();
        } else throw ApiException.badField(path, "must be a string or an array of input_text parts, got " + what(out));
        return Json.object().put("role", "tool").put("tool_call_id", id).put("content", text);
    }

    /**
     * A {@code reasoning} item's text, the reasoning of the assistant turn it belongs to: its {@code content}'s
     * {@code reasoning_text} parts (the whole reasoning, as this server answers it), else its {@code summary}'s
     * {@code summary_text} parts; null for neither. {@code encrypted_content} is another provider's reasoning,
     * which nothing here can read: left out.
     */
    private static String reasoningText(JsonNode item, String where) {
        item.get("encrypted_content");
        String content = texts(item, "content", "reasoning_text", where);
        String summary = texts(item, "summary", "summary_text", where);
        return content != null ? content : summary;
    }

    /** The texts of an array field's parts of one type joined by a blank line; null when there are none. */
    private static String texts(JsonNode item, String field, String partType, String where) {
        JsonNode a = item.get(field);
        String path = where + "." + field;
        if (a == null || a.isNull()) return null;
        if (!a.isArray()) throw ApiException.badField(path, "must be an array of " + partType + " parts, got " + what(a));
        StringBuilder t = new StringBuilder();
        for (int j = 0; j < a.size(); j++) {
            String at = path + "[" + j + "]";
            JsonNode part = a.get(j);
            if (part == null || !part.isObject()) throw ApiException.badField(at, "must be a " + partType + " part, got " + what(part));
            String type = Requests.optString(part, "type", at + ".type");
            if (!partType.equals(type))
                throw ApiException.badField(at + ".type", "must be \"" + partType + "\", got " + what(part.get("type")));
            t.append(j > 0 ? "\n\n" : "").append(string(part, "text", at));
        }
        return a.isEmpty() ? null : t.toString();
    }

    // ------------------------------------------------------------------------------------------------ options

    /**
     * {@code tools} (function tools: name, description, parameters, strict) as chat functions, and
     * {@code tool_choice} as chat's ({@code auto}, {@code none}, {@code required}, {@code {"type": "function", "name"}}).
     * The hosted tools (web search, file search, computer use, code interpreter, MCP, ...) run on OpenAI's platform,
     * which this server is not, and custom (free-form) tools have no schema a call can be parsed by: refused.
     */
    private static void tools(JsonNode body, ObjectNode chat, ObjectNode settings) {
        JsonNode tools = body.get("tools");
        ArrayNode echoed = settings.putArray("tools");
        if (tools != null && !tools.isNull()) {
            if (!tools.isArray()) throw ApiException.badField("tools", "must be an array of tools, got " + what(tools));
            ArrayNode fns = chat.putArray("tools");
            for (int i = 0; i < tools.size(); i++) {
                String where = "tools[" + i + "]";
                JsonNode t = tools.get(i);
                if (t == null || !t.isObject()) throw ApiException.badField(where, "must be a tool object, got " + what(t));
                JsonNode type = t.get("type");
                if (type == null || type.isNull()) throw ApiException.badField(where + ".type", "is required (\"function\")");
                if (!(type.isTextual() && type.textValue().equals("function")))
                    throw ApiException.badField(where + ".type", "only function tools are supported, got " + Requests.shown(type)
                            + ": hosted tools run on OpenAI's platform; give {\"type\": \"function\", \"name\", \"description\","
                            + " \"parameters\"}");
                ObjectNode fn = fns.addObject().put("type", "function").putObject("function");
                ObjectNode echo = echoed.addObject().put("type", "function");
                for (String f : List.of("name", "description", "parameters", "strict")) {
                    JsonNode v = t.get(f);
                    if (v == null) continue;
                    if (!v.isNull()) fn.set(f, v);
                    echo.set(f, v);
                }
                // the chat template writes the schema whole into the prompt
                JsonNode parameters = t.get("parameters");
                if (parameters != null) RequestFields.usedWhole(parameters);
            }
        }
        JsonNode choice = body.get("tool_choice");
        if (choice == null || choice.isNull()) {
            settings.put("tool_choice", "auto");
            return;
        }
        settings.set("tool_choice", choice);
        if (choice.isTextual()) {
            // chat's own three, checked there
            chat.set("tool_choice", choice);
            return;
        }
        if (!choice.isObject())
            throw ApiException.badField("tool_choice", "must be \"auto\", \"none\", \"required\" or {\"type\": \"function\","
                    + " \"name\": ...}, got " + what(choice));
        JsonNode type = choice.get("type");
        if (type == null || type.isNull()) throw ApiException.badField("tool_choice.type", "is required (\"function\")");
        if (!(type.isTextual() && type.textValue().equals("function")))
            throw ApiException.badField("tool_choice.type", "must be \"function\" (a function tool by its name), got "
                    + Requests.shown(type) + ": hosted tools and allowed_tools are not supported");
        JsonNode name = choice.get("name");
        if (name == null || !name.isTextual() || name.textValue().isEmpty())
            throw ApiException.badField("tool_choice.name", "must be a non-empty string, got " + what(name));
        chat.putObject("tool_choice").put("type", "function").putObject("function").put("name", name.textValue());
    }

    /**
     * {@code text.format} as chat's {@code response_format}: {@code text} (free text), {@code json_object},
     * {@code json_schema} with {@code name}, {@code schema}, {@code strict} and {@code description} (chat's
     * {@code json_schema} object, so the schema is enforced as on chat).
     */
    private static void text(JsonNode body, ObjectNode chat, ObjectNode settings) {
        JsonNode text = body.get("text");
        ObjectNode echo = settings.putObject("text");
        if (text == null || text.isNull()) {
            echo.putObject("format").put("type", "text");
            return;
        }
        if (!text.isObject()) throw ApiException.badField("text", "must be an object such as {\"format\": {\"type\": \"text\"}}, got " + what(text));
        JsonNode format = text.get("format");
        if (format == null || format.isNull()) {
            echo.putObject("format").put("type", "text");
            return;
        }
        if (!format.isObject())
            throw ApiException.badField("text.format", "must be an object such as {\"type\": \"json_schema\", ...}, got " + what(format));
        String type = Requests.optString(format, "type", "text.format.type");
        if (type == null) throw ApiException.badField("text.format.type", "is required (\"text\", \"json_object\" or \"json_schema\")");
        echo.set("format", format);
        switch (type) {
            case "text" -> { }
            case "json_object" -> chat.putObject("response_format").put("type", "json_object");
            case "json_schema" -> {
                ObjectNode js = chat.putObject("response_format").put("type", "json_schema").putObject("json_schema");
                List<String> known = List.of("name", "schema", "strict", "description");
                for (String f : known) format.get(f);
                // in the client's order, as the chat template writes the format into the prompt (a copy is gone over,
                // so that the format's other fields are still reported as unread)
                for (var f : format.deepCopy().properties())
                    if (known.contains(f.getKey()) && !f.getValue().isNull()) js.set(f.getKey(), format.get(f.getKey()));
                // the chat template writes the schema whole into the prompt, and the constraint is compiled from it whole
                JsonNode schema = format.get("schema");
                if (schema != null) RequestFields.usedWhole(schema);
            }
            default -> throw ApiException.badField("text.format.type", "must be \"text\", \"json_object\" or \"json_schema\", got "
                    + Requests.shown(format.get("type")));
        }
    }

    /**
     * {@code reasoning.effort} as chat's {@code reasoning_effort} (thinking mode on for any effort but
     * {@code none}); {@code summary} is accepted: no summary is written, as the reasoning comes whole.
     */
    private static void reasoning(JsonNode body, ObjectNode chat, ObjectNode settings) {
        JsonNode r = body.get("reasoning");
        ObjectNode echo = settings.putObject("reasoning");
        if (r == null || r.isNull()) {
            echo.putNull("effort").putNull("summary");
            return;
        }
        if (!r.isObject()) throw ApiException.badField("reasoning", "must be an object such as {\"effort\": \"high\"}, got " + what(r));
        JsonNode effort = r.get("effort");
        if (effort != null && !effort.isNull()) chat.set("reasoning_effort", effort);
        echo.set("effort", effort == null ? com.fasterxml.jackson.databind.node.NullNode.getInstance() : effort);
        String summary = Requests.optString(r, "summary", "reasoning.summary");
        // the older name of summary
        String generate = Requests.optString(r, "generate_summary", "reasoning.generate_summary");
        for (String s : new String[]{summary, generate})
            if (s != null && !List.of("auto", "concise", "detailed").contains(s))
                throw ApiException.badField(s == summary ? "reasoning.summary" : "reasoning.generate_summary",
                        "must be \"auto\", \"concise\" or \"detailed\", got '" + s + "'");
        if (summary != null || generate != null) echo.put("summary", summary != null ? summary : generate);
        else echo.putNull("summary");
    }

    private static boolean given(JsonNode body, String field) {
        JsonNode v = body.get(field);
        return v != null && !v.isNull();
    }

}
