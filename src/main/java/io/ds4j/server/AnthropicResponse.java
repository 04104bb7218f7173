package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.ds4j.json.Json;
import io.ds4j.text.chat.OutputParser;

import java.util.ArrayList;
import java.util.List;

/**
 * Turns one request's engine events into the Anthropic Messages API's shapes: one {@code message} object, or the
 * stream of named events ({@code message_start}; per content block {@code content_block_start}, its
 * {@code content_block_delta}s and {@code content_block_stop}; {@code message_delta} with the stop reason and usage;
 * {@code message_stop}).
 *
 * <p>The output parser's events become content blocks in the order they come: reasoning a {@code thinking} block,
 * content a {@code text} block, each tool call a {@code tool_use} block; a block ends where output of another kind
 * begins. Streamed and not, the blocks are cut by this one rule, so a stream's deltas join to the content of the same
 * answer unstreamed. A {@code thinking} block's {@code signature} is empty: nothing signs this model's reasoning, and
 * a thinking block sent back in the history is read without one.
 */
final class AnthropicResponse implements AnswerWriter {
    private final String id, model;
    private final boolean stream;
    private final int promptTokens;
    private final List<Block> blocks = new ArrayList<>();
    /** The prompt tokens resumed from the prefix cache, once known (-1 before). */
    private int cached = -1;
    /** Streaming: a block started and not yet stopped, or null. */
    private Block open;

    /** One content block: its type ("text", "thinking", "tool_use"), text (a tool call's: its arguments' JSON). */
    private static final class Block {
        final int index;
        final String type;
        final StringBuilder text = new StringBuilder();
        /** A tool call's id, name and index among the calls (the parser's), else null and -1. */
        String callId, name;
        int call = -1;

        Block(int index, String type) {
            this.index = index;
            this.type = type;
        }
    }

    /**
     * @param id           the message's id ({@code msg_...})
     * @param promptTokens the prompt's tokens, for {@code message_start}'s usage
     */
    AnthropicResponse(String id, String model, boolean stream, int promptTokens) {
        this.id = id;
        this.model = model;
        this.stream = stream;
        this.promptTokens = promptTokens;
    }

    private static String event(String name, ObjectNode data) {
        return "event: " + name + "\ndata: " + Json.write(data) + "\n\n";
    }

    /**
     * A tool_use block's id for the parser's call id: Anthropic's ids start with {@code toolu_}, and some clients
     * tell tool calls apart by that prefix. The rest is the parser's (random) id, so each is unique as the call's is.
     */
    static String toolUseId(String callId) {
        return "toolu_" + (callId.startsWith("call_") ? callId.substring(5) : callId);
    }

    /** The message object: {@code content} and the stop fields as given (null while streaming starts). */
    private ObjectNode message(ArrayNode content, String stopReason, String stopSequence, ObjectNode usage) {
        ObjectNode m = Json.object().put("id", id).put("type", "message").put("role", "assistant").put("model", model);
        m.set("content", content);
        if (stopReason == null) m.putNull("stop_reason"); else m.put("stop_reason", stopReason);
        if (stopSequence == null) m.putNull("stop_sequence"); else m.put("stop_sequence", stopSequence);
        m.set("usage", usage);
        return m;
    }

    /**
     * The prompt tokens the prefix cache resumed, known when the request started at once (the cache is looked up as
     * it starts): message_start's usage then splits the prompt as the final usage does.
     */
    void cached(int tokens) {
        cached = tokens;
    }

    @Override
    public String start(String echo, List<EngineEvent.TokenLogprob> promptTokens) {
        if (!stream) return "";
        // a request that waited in the queue looks the cache up when it starts, after this: its share is 0 here and
        // message_delta's usage has the split
        int resumed = Math.max(0, cached);
        ObjectNode usage = Json.object().put("input_tokens", this.promptTokens - resumed)
                .put("cache_creation_input_tokens", 0).put("cache_read_input_tokens", resumed).put("output_tokens", 0);
        return event("message_start", Json.object().put("type", "message_start").set("message",
                message(Json.array(), null, null, usage)));
    }

    @Override
    public String delta(EngineEvent.Delta d) {
        StringBuilder out = new StringBuilder();
        for (OutputParser.Event e : d.events()) add(e, out);
        return stream ? out.toString() : "";
    }

    /** Adds one parser event to the blocks; streaming, its frames to out. */
    private void add(OutputParser.Event e, StringBuilder out) {
        switch (e) {
            case OutputParser.ContentDelta c -> append("text", c.text(), out);
            case OutputParser.ReasoningDelta r -> append("thinking", r.text(), out);
            case OutputParser.ToolCallStart s -> {
                Block b = begin("tool_use", out);
                b.callId = toolUseId(s.id());
                b.name = s.name();
                b.call = s.index();
                if (stream) out.append(blockStart(b));
            }
            case OutputParser.ToolCallArgumentsDelta a -> {
                Block b = call(a.index());
                if (b == null || a.fragment().isEmpty()) return;
                b.text.append(a.fragment());
                if (stream) out.append(blockDelta(b, Json.object().put("type", "input_json_delta").put("partial_json", a.fragment())));
            }
            default -> { }
        }
    }

    /** Text of a kind: into the last block when it is of that kind (and still open), else into a new one. */
    private void append(String type, String text, StringBuilder out) {
        if (text.isEmpty()) return;
        Block last = blocks.isEmpty() ? null : blocks.getLast();
        Block b = last != null && last.type.equals(type) && (!stream || open == last) ? last : null;
        if (b == null) {
            b = begin(type, out);
            if (stream) out.append(blockStart(b));
        }
        b.text.append(text);
        if (stream) {
            ObjectNode delta = type.equals("text") ? Json.object().put("type", "text_delta").put("text", text)
                    : Json.object().put("type", "thinking_delta").put("thinking", text);
            out.append(blockDelta(b, delta));
        }
    }

    /** A new block, the open one stopped first. */
    private Block begin(String type, StringBuilder out) {
        stopOpen(out);
        Block b = new Block(blocks.size(), type);
        blocks.add(b);
        if (stream) open = b;
        return b;
    }

    private Block call(int index) {
        for (int i = blocks.size() - 1; i >= 0; i--) if (blocks.get(i).call == index) return blocks.get(i);
        return null;
    }

    private void stopOpen(StringBuilder out) {
        if (open == null) return;
        out.append(event("content_block_stop", Json.object().put("type", "content_block_stop").put("index", open.index)));
        open = null;
    }

    private String blockStart(Block b) {
        ObjectNode start = Json.object().put("type", "content_block_start").put("index", b.index);
        ObjectNode cb = start.putObject("content_block").put("type", b.type);
        switch (b.type) {
            case "text" -> cb.put("text", "");
            case "thinking" -> cb.put("thinking", "").put("signature", "");
            default -> {
                cb.put("id", b.callId).put("name", b.name);
                cb.putObject("input");
            }
        }
        return event("content_block_start", start);
    }

    private static String blockDelta(Block b, ObjectNode delta) {
        ObjectNode o = Json.object().put("type", "content_block_delta").put("index", b.index);
        o.set("delta", delta);
        return event("content_block_delta", o);
    }

    /**
     * The stop reason for how the engine ended: a stop string → {@code stop_sequence}, the length limit →
     * {@code max_tokens}, tool calls → {@code tool_use}, the end of the turn → {@code end_turn}.
     */
    static String stopReason(EngineEvent.Done d) {
        // a stop string that matched inside a call cut it (chat's finish reason is "stop" then): an Anthropic client
        // that reads tool_use would run it, so stop_sequence (with the sequence) says what happened
        if (d.stopString() != null) return "stop_sequence";
        return switch (d.finishReason()) {
            case "length" -> "max_tokens";
            case "tool_calls" -> "tool_use";
            default -> "end_turn";
        };
    }

    /**
     * Anthropic's usage: {@code input_tokens} are the prompt tokens that were prefilled, {@code cache_read_input_tokens}
     * those resumed from the prefix cache (the two add up to the prompt, as count_tokens counts it), nothing is written
     * to a cache on request ({@code cache_creation_input_tokens} 0).
     */
    private static ObjectNode usage(Usage u) {
        return Json.object().put("input_tokens", u.promptTokens() - u.cachedTokens())
                .put("cache_creation_input_tokens", 0).put("cache_read_input_tokens", u.cachedTokens())
                .put("output_tokens", u.completionTokens());
    }

    @Override
    public String done(EngineEvent.Done d) {
        StringBuilder out = new StringBuilder();
        stopOpen(out);
        ObjectNode md = Json.object().put("type", "message_delta");
        ObjectNode delta = md.putObject("delta").put("stop_reason", stopReason(d));
        if (d.stopString() != null) delta.put("stop_sequence", d.stopString()); else delta.putNull("stop_sequence");
        md.set("usage", usage(d.usage()));
        out.append(event("message_delta", md));
        out.append(event("message_stop", Json.object().put("type", "message_stop")));
        return out.toString();
    }

    /** Anthropic's {@code error} event, with the body an error answered before the stream would have had. */
    @Override
    public String failed(ApiException e) {
        return errorEvent(e);
    }

    /** Anthropic's {@code error} event for e. */
    static String errorEvent(ApiException e) {
        return event("error", AnthropicApi.errorBody(e));
    }

    @Override
    public ObjectNode full(EngineEvent.Done d) {
        ArrayNode content = Json.array();
        for (Block b : blocks) {
            ObjectNode o = content.addObject().put("type", b.type);
            switch (b.type) {
                case "text" -> o.put("text", b.text.toString());
                case "thinking" -> o.put("thinking", b.text.toString()).put("signature", "");
                default -> {
                    o.put("id", b.callId).put("name", b.name);
                    o.set("input", input(b.text.toString()));
                }
            }
        }
        return message(content, stopReason(d), d.stopString(), usage(d.usage()));
    }

    /**
     * A call's arguments as the {@code input} object. Arguments cut short by max_tokens or a stop string are no
     * complete JSON object: the input is then empty (the stream sent the text as far as it got).
     */
    private static JsonNode input(String args) {
        if (args.isBlank()) return Json.object();
        try {
            JsonNode n = Json.MAPPER.readTree(args);
            return n != null && n.isObject() ? n : Json.object();
        } catch (java.io.IOException cut) {
            return Json.object();
        }
    }
}
