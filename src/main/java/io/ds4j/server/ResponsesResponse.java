package io.ds4j.server;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.ds4j.json.Json;
import io.ds4j.text.chat.OutputParser;

import java.util.ArrayList;
import java.util.List;

/**
 * Turns one request's engine events into the shapes of OpenAI's Responses API: one {@code response} object, or the
 * stream of named events, each with its {@code sequence_number} ({@code response.created}, {@code response.in_progress};
 * per output item {@code response.output_item.added}, its parts and deltas, {@code response.output_item.done}; then
 * {@code response.completed} or {@code response.incomplete} with the whole response).
 *
 * <p>The output parser's events become output items in the order they come: reasoning a {@code reasoning} item (its
 * text one {@code reasoning_text} part of its {@code content}, its {@code summary} empty: no summary is written),
 * content a {@code message} item (one {@code output_text} part), each tool call a {@code function_call} item; an item
 * ends where output of another kind begins. Streamed and not, the items are cut by this one rule, so a stream's deltas
 * join to the output of the same answer unstreamed.
 */
final class ResponsesResponse implements AnswerWriter {
    private final String id, model;
    private final long created;
    private final boolean stream;
    /** The request's settings the response echoes (see {@link ResponsesApi.Translation#settings}). */
    private final ObjectNode settings;
    private final double temperature, topP;
    private final int maxOutputTokens;
    private final List<Item> items = new ArrayList<>();
    /** Streaming: the item started and not yet done, or null. */
    private Item open;
    /** The next event's sequence number. */
    private int sequence;

    /** One output item: its type ("reasoning", "message", "function_call") and text (a call's: its arguments). */
    private static final class Item {
        final int index;
        final String type, id;
        final StringBuilder text = new StringBuilder();
        /** A call's call_id, name and index among the parser's calls; else null and -1. */
        String callId, name;
        int call = -1;

        Item(int index, String type, String id) {
            this.index = index;
            this.type = type;
            this.id = id;
        }
    }

    /**
     * @param id          the response's id ({@code resp_...})
     * @param created     its arrival, in seconds since the epoch
     * @param settings    the request's settings the response echoes
     * @param temperature the temperature the sampling applies (the request's or the server's default)
     * @param topP        the top_p the sampling applies
     * @param maxOutputTokens the most output tokens the generation applies (the request's, or the server's default cut
     *                    to the room after the prompt)
     */
    ResponsesResponse(String id, long created, String model, boolean stream, ObjectNode settings, double temperature, double topP,
                      int maxOutputTokens) {
        this.maxOutputTokens = maxOutputTokens;
        this.id = id;
        this.created = created;
        this.model = model;
        this.stream = stream;
        this.settings = settings;
        this.temperature = temperature;
        this.topP = topP;
    }

    /** One event: its name, and its data whose type is the name, numbered in the order sent. */
    private String event(String name, ObjectNode data) {
        ObjectNode o = Json.object().put("type", name);
        o.setAll(data);
        o.put("sequence_number", sequence++);
        return "event: " + name + "\ndata: " + Json.write(o) + "\n\n";
    }

    /**
     * A message's or reasoning's item id: the prefix ({@code msg_}, {@code rs_}) and a random part of its own. (A
     * call's item id is {@code fc_} and its call id's random part, so the two are told together.)
     */
    private static String itemId(String prefix) {
        return prefix + HttpVerticle.randomId();
    }

    /**
     * The response object, as OpenAI's Responses API writes it: its status, the output so far, the echoed settings,
     * the usage (null until done).
     */
    private ObjectNode response(String status, ObjectNode incomplete, ArrayNode output, ObjectNode usage) {
        ObjectNode r = Json.object().put("id", id).put("object", "response").put("created_at", created).put("status", status);
        r.put("background", false).putNull("error");
        r.set("incomplete_details", incomplete);
        r.set("instructions", settings.get("instructions"));
        // the limit applied, as temperature and top_p are: a request that gave none ran under the server's default, and
        // an answer cut there says incomplete_details.reason "max_output_tokens", which a null here left unexplained
        r.put("max_output_tokens", maxOutputTokens);
        r.put("model", model);
        r.set("output", output);
        r.set("parallel_tool_calls", settings.get("parallel_tool_calls"));
        r.putNull("previous_response_id");
        r.set("reasoning", settings.get("reasoning"));
        r.set("store", settings.get("store"));
        r.put("temperature", temperature);
        r.set("text", settings.get("text"));
        r.set("tool_choice", settings.get("tool_choice"));
        r.set("tools", settings.get("tools"));
        r.put("top_p", topP);
        r.set("truncation", settings.get("truncation"));
        r.set("usage", usage);
        r.set("user", settings.get("user"));
        r.set("metadata", settings.get("metadata"));
        return r;
    }

    @Override
    public String start(String echo, List<EngineEvent.TokenLogprob> promptTokens) {
        if (!stream) return "";
        ObjectNode snapshot = response("in_progress", null, Json.array(), null);
        return event("response.created", Json.object().set("response", snapshot))
                + event("response.in_progress", Json.object().set("response", snapshot));
    }

    @Override
    public String delta(EngineEvent.Delta d) {
        StringBuilder out = new StringBuilder();
        for (OutputParser.Event e : d.events()) add(e, out);
        return stream ? out.toString() : "";
    }

    /** Adds one parser event to the items; streaming, its events to out. */
    private void add(OutputParser.Event e, StringBuilder out) {
        switch (e) {
            case OutputParser.ContentDelta c -> append("message", c.text(), out);
            case OutputParser.ReasoningDelta r -> append("reasoning", r.text(), out);
            case OutputParser.ToolCallStart s -> {
                Item it = begin("function_call", "fc_" + (s.id().startsWith("call_") ? s.id().substring(5) : HttpVerticle.randomId()), out);
                it.callId = s.id();
                it.name = s.name();
                it.call = s.index();
                if (stream) out.append(event("response.output_item.added", added(it)));
            }
            case OutputParser.ToolCallArgumentsDelta a -> {
                Item it = call(a.index());
                if (it == null || a.fragment().isEmpty()) return;
                it.text.append(a.fragment());
                if (stream) out.append(event("response.function_call_arguments.delta", Json.object().put("item_id", it.id)
                        .put("output_index", it.index).put("delta", a.fragment())));
            }
            default -> { }
        }
    }

    /** Text of a kind: into the last item when it is of that kind (and still open), else into a new one. */
    private void append(String type, String text, StringBuilder out) {
        if (text.isEmpty()) return;
        Item last = items.isEmpty() ? null : items.getLast();
        Item it = last != null && last.type.equals(type) && (!stream || open == last) ? last : null;
        if (it == null) {
            it = begin(type, itemId(type.equals("message") ? "msg_" : "rs_"), out);
            if (stream) {
                out.append(event("response.output_item.added", added(it)));
                out.append(event("response.content_part.added", part(it).set("part", part(it.type, ""))));
            }
        }
        it.text.append(text);
        if (stream) {
            ObjectNode delta = part(it).put("delta", text);
            if (type.equals("message")) {
                delta.putArray("logprobs");
                out.append(event("response.output_text.delta", delta));
            } else out.append(event("response.reasoning_text.delta", delta));
        }
    }

    /** A new item, the open one done first. */
    private Item begin(String type, String itemId, StringBuilder out) {
        done(out, "completed");
        Item it = new Item(items.size(), type, itemId);
        items.add(it);
        if (stream) open = it;
        return it;
    }

    private Item call(int index) {
        for (int i = items.size() - 1; i >= 0; i--) if (items.get(i).call == index) return items.get(i);
        return null;
    }

    /** {@code response.output_item.added}'s data: the item as it begins, empty and in progress. */
    private static ObjectNode added(Item it) {
        return Json.object().put("output_index", it.index).set("item", item(it, "in_progress", true));
    }

    /** The fields that place a content event: the item's id, its index in the output, the part's index (0). */
    private static ObjectNode part(Item it) {
        return Json.object().put("item_id", it.id).put("output_index", it.index).put("content_index", 0);
    }

    /** A content part: {@code output_text} for a message, {@code reasoning_text} for reasoning. */
    private static ObjectNode part(String itemType, String text) {
        if (itemType.equals("message"))
            return Json.object().put("type", "output_text").put("text", text).<ObjectNode>set("annotations", Json.array())
                    .set("logprobs", Json.array());
        return Json.object().put("type", "reasoning_text").put("text", text);
    }

    /**
     * An output item as the answer writes it.
     * @param empty as it begins: no text, no parts (a stream adds them with their own events)
     */
    private static ObjectNode item(Item it, String status, boolean empty) {
        ObjectNode o = Json.object();
        switch (it.type) {
            case "reasoning" -> {
                o.put("id", it.id).put("type", "reasoning").putArray("summary");
                ArrayNode content = o.putArray("content");
                if (!empty) content.add(part("reasoning", it.text.toString()));
                o.put("status", status);
            }
            case "message" -> {
                o.put("id", it.id).put("type", "message").put("status", status).put("role", "assistant");
                ArrayNode content = o.putArray("content");
                if (!empty) content.add(part("message", it.text.toString()));
            }
            default -> o.put("id", it.id).put("type", "function_call").put("status", status).put("call_id", it.callId)
                    .put("name", it.name).put("arguments", empty ? "" : it.text.toString());
        }
        return o;
    }

    /** Streaming: the open item's closing events, the item with the given status. */
    private void done(StringBuilder out, String status) {
        if (open == null) return;
        Item it = open;
        open = null;
        String text = it.text.toString();
        switch (it.type) {
            case "message" -> {
                out.append(event("response.output_text.done", part(it).put("text", text).set("logprobs", Json.array())));
                out.append(event("response.content_part.done", part(it).set("part", part(it.type, text))));
            }
            case "reasoning" -> {
                out.append(event("response.reasoning_text.done", part(it).put("text", text)));
                out.append(event("response.content_part.done", part(it).set("part", part(it.type, text))));
            }
            default -> out.append(event("response.function_call_arguments.done", Json.object().put("item_id", it.id)
                    .put("output_index", it.index).put("name", it.name).put("arguments", text)));
        }
        out.append(event("response.output_item.done", Json.object().put("output_index", it.index)
                .set("item", item(it, status, false))));
    }

    /**
     * Whether the answer is complete: one cut by the length limit is {@code incomplete}, for {@code max_output_tokens}
     * (a stop string cannot be asked for on this API).
     */
    private static boolean cut(EngineEvent.Done d) {
        return d.finishReason().equals("length");
    }

    /**
     * The Responses usage: {@code input_tokens} is the whole prompt, {@code input_tokens_details.cached_tokens} the
     * part resumed from the prefix cache, {@code output_tokens} all generated tokens, the reasoning's among them.
     */
    private static ObjectNode usage(Usage u) {
        ObjectNode o = Json.object().put("input_tokens", u.promptTokens());
        o.putObject("input_tokens_details").put("cached_tokens", u.cachedTokens());
        o.put("output_tokens", u.completionTokens());
        o.putObject("output_tokens_details").put("reasoning_tokens", u.reasoningTokens());
        o.put("total_tokens", u.promptTokens() + u.completionTokens());
        return o;
    }

    @Override
    public String done(EngineEvent.Done d) {
        StringBuilder out = new StringBuilder();
        // the item the limit cut is incomplete, as the response is
        done(out, cut(d) ? "incomplete" : "completed");
        ObjectNode r = full(d);
        out.append(event(cut(d) ? "response.incomplete" : "response.completed", Json.object().set("response", r)));
        return out.toString();
    }

    @Override
    public ObjectNode full(EngineEvent.Done d) {
        ArrayNode output = Json.array();
        for (Item it : items)
            output.add(item(it, cut(d) && it == items.getLast() ? "incomplete" : "completed", false));
        ObjectNode incomplete = cut(d) ? Json.object().put("reason", "max_output_tokens") : null;
        return response(cut(d) ? "incomplete" : "completed", incomplete, output, usage(d.usage()));
    }

    /**
     * The Responses API's {@code error} event ({@code code}, {@code message}, {@code param}), numbered after the
     * events before it: no {@code response.completed} follows.
     */
    @Override
    public String failed(ApiException e) {
        return errorEvent(e, sequence++);
    }

    /** The Responses API's {@code error} event for e, numbered {@code sequence} (the events before it). */
    static String errorEvent(ApiException e, int sequence) {
        ObjectNode body = e.body();
        ObjectNode o = Json.object().put("type", "error");
        o.set("code", body.at("/error/code"));
        o.put("message", e.getMessage());
        o.set("param", body.at("/error/param"));
        o.put("sequence_number", sequence);
        return "event: error\ndata: " + Json.write(o) + "\n\n";
    }
}
