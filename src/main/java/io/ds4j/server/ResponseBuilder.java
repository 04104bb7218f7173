package io.ds4j.server;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.ds4j.json.Json;
import io.ds4j.text.chat.OutputParser;

import java.util.ArrayList;
import java.util.List;

/**
 * Turns one request's engine events into the exact OpenAI wire shapes: {@code chat.completion.chunk} /
 * {@code text_completion} SSE frames when streaming, one {@code chat.completion} / {@code text_completion} object
 * otherwise.
 *
 * <p>Streamed chat: a first chunk with {@code delta.role = "assistant"}; then content deltas, reasoning deltas (sent
 * as both {@code reasoning_content} and {@code reasoning}, the two names clients read), tool-call deltas (the first
 * fragment of a call carries index, id, type and name with empty arguments, later ones only argument text); then a
 * chunk with an empty delta, the finish reason and the {@code stop_reason} (null unless a stop string or stop token
 * ended it); then, when {@code stream_options.include_usage} was set, a chunk
 * with {@code choices: []} and the usage (the chunks before it then carry {@code "usage": null}, as OpenAI's); then
 * {@code data: [DONE]}. With {@code stream_options.continuous_usage_stats}
 * as well (vLLM's extension), every chunk also carries {@code usage} with the prompt tokens and the tokens generated so
 * far: a chunk that stands for several tokens (the text of one held back for the next, or accepted drafts) says so.
 */
final class ResponseBuilder implements AnswerWriter {
    private final String id;
    private final long created;
    private final String model;
    private final boolean chat, stream, includeUsage, continuousUsage;
    private final int promptTokens;
    // non-streaming accumulators
    private final StringBuilder content = new StringBuilder(), reasoning = new StringBuilder();
    private final List<String[]> calls = new ArrayList<>(); // id, name
    private final List<StringBuilder> args = new ArrayList<>();
    private final List<EngineEvent.TokenLogprob> allLogprobs = new ArrayList<>();
    private boolean anyLogprobs;
    /** The request asked for logprobs: a whole response lists them, empty where no token's text was kept. */
    private boolean logprobsAsked;
    /** Completions with echo and logprobs: the prompt's tokens (logprob null), listed before the generated ones. */
    private List<EngineEvent.TokenLogprob> promptLogprobs = List.of();
    /** Length of the echoed prompt text: the text_offset of the first generated token. */
    private int echoLength;
    private int textOffset;
    /** The request forced a tool call: its message's content is null even when the call was cut before it began. */
    private boolean forcedToolCall;
    /** The index of the choice this builder writes (a request with {@code n} > 1 has one builder per choice). */
    private int index;

    /**
     * @param continuousUsage every streamed chunk carries the usage so far (stream_options.continuous_usage_stats)
     * @param promptTokens    the prompt's tokens, for that usage
     */
    ResponseBuilder(String id, long created, String model, boolean chat, boolean stream, boolean includeUsage,
                    boolean continuousUsage, int promptTokens) {
        this.id = id;
        this.created = created;
        this.model = model;
        this.chat = chat;
        this.stream = stream;
        this.includeUsage = includeUsage;
        this.continuousUsage = continuousUsage;
        this.promptTokens = promptTokens;
    }

    /**
     * Marks the response as one to a forced tool call (constrained decoding allows no content).
     * @return this
     */
    ResponseBuilder forcedToolCall(boolean on) {
        forcedToolCall = on;
        return this;
    }

    /**
     * Says the request asked for logprobs: the whole response then lists them ({@code {"content": []}} where no
     * token's text was kept, a stop string in the first token for one), never null, as OpenAI's and vLLM's do.
     * @return this
     */
    ResponseBuilder logprobsAsked(boolean on) {
        logprobsAsked = on;
        return this;
    }

    /**
     * Makes this the builder of choice {@code i} of a request asking for several: its chunks and its choice carry that
     * index.
     * @return this
     */
    ResponseBuilder choice(int i) {
        index = i;
        return this;
    }

    private static String frame(ObjectNode o) {
        return "data: " + Json.write(o) + "\n\n";
    }

    /**
     * A content frame; with continuous usage it carries the counts after {@code completionTokens} generated tokens, with
     * include_usage alone {@code "usage": null} (the closing chunk has the usage), as OpenAI sends every chunk before it.
     */
    private String frame(ObjectNode o, int completionTokens) {
        if (continuousUsage)
            o.putObject("usage").put("prompt_tokens", promptTokens).put("completion_tokens", completionTokens)
                    .put("total_tokens", promptTokens + completionTokens);
        else if (includeUsage) o.putNull("usage");
        return frame(o);
    }

    private ObjectNode base() {
        ObjectNode o = Json.object();
        o.put("id", id).put("object", chat ? (stream ? "chat.completion.chunk" : "chat.completion") : "text_completion")
                .put("created", created).put("model", model).put("system_fingerprint", HttpVerticle.FINGERPRINT);
        return o;
    }

    /**
     * A streamed chunk with one choice. A completions chunk always carries {@code stop_reason} (null until the finish
     * chunk sets it), a chat chunk only when it is the finish chunk: vLLM writes its completion chunks with every field
     * and its chat chunks with the fields it set, and clients of either read the key where vLLM sends it.
     */
    private ObjectNode chunk(ObjectNode deltaOrNull, String text, String finish, ObjectNode logprobs) {
        ObjectNode o = base();
        ObjectNode c = o.putArray("choices").addObject();
        c.put("index", index);
        if (chat) c.set("delta", deltaOrNull == null ? Json.object() : deltaOrNull);
        else c.put("text", text == null ? "" : text);
        if (logprobs == null) c.putNull("logprobs"); else c.set("logprobs", logprobs);
        if (finish == null) c.putNull("finish_reason"); else c.put("finish_reason", finish);
        if (!chat) c.putNull("stop_reason");
        return o;
    }

    /** What goes out when the request is admitted: the role chunk (chat) or the echoed prompt (completions). */
    String start(String echo) {
        return start(echo, null);
    }

    /**
     * As {@link #start(String)}; with echo and logprobs, the prompt's tokens are listed in the logprobs first (as
     * OpenAI does) with their text, offsets and scores (a NaN logprob is sent as null: the sequence's first token), and
     * the generated tokens' text_offset starts after the echoed text.
     * @param promptTokens the echoed prompt tokens with their scores, or null
     */
    @Override
    public String start(String echo, List<EngineEvent.TokenLogprob> promptTokens) {
        echoLength = echo == null ? 0 : echo.length();
        if (echo != null && promptTokens != null && !promptTokens.isEmpty()) {
            promptLogprobs = new ArrayList<>(promptTokens);
            anyLogprobs = true;
        }
        if (!stream) {
            if (echo != null) content.append(echo);
            return "";
        }
        if (chat) {
            ObjectNode d = Json.object().put("role", "assistant").put("content", "");
            return frame(chunk(d, null, null, null), 0);
        }
        if (echo == null || echo.isEmpty()) return "";
        ObjectNode lp = promptLogprobs.isEmpty() ? null : logprobs(List.of());
        return frame(chunk(null, echo, null, lp), 0);
    }

    /** The frames of one engine step (streaming), or nothing after accumulating it (non-streaming). */
    @Override
    public String delta(EngineEvent.Delta d) {
        if (!d.logprobs().isEmpty()) anyLogprobs = true;
        if (!stream) {
            for (OutputParser.Event e : d.events()) accumulate(e);
            allLogprobs.addAll(d.logprobs());
            return "";
        }
        StringBuilder out = new StringBuilder();
        ObjectNode lp = d.logprobs().isEmpty() ? null : logprobs(d.logprobs());
        for (OutputParser.Event e : d.events()) {
            ObjectNode f = chat ? chatChunk(e, lp) : textChunk(e, lp);
            if (f == null) continue;
            out.append(frame(f, d.completionTokens()));
            lp = null; // logprobs of this step ride on its first chunk
        }
        if (lp != null) out.append(frame(chunk(null, "", null, lp), d.completionTokens()));
        return out.toString();
    }

    private ObjectNode chatChunk(OutputParser.Event e, ObjectNode lp) {
        ObjectNode d = Json.object();
        switch (e) {
            case OutputParser.ContentDelta c -> d.put("content", c.text());
            case OutputParser.ReasoningDelta r -> d.put("reasoning_content", r.text()).put("reasoning", r.text());
            case OutputParser.ToolCallStart s -> {
                ObjectNode t = d.putArray("tool_calls").addObject();
                t.put("index", s.index()).put("id", s.id()).put("type", "function");
                t.putObject("function").put("name", s.name()).put("arguments", "");
            }
            case OutputParser.ToolCallArgumentsDelta a ->
                    d.putArray("tool_calls").addObject().put("index", a.index()).putObject("function").put("arguments", a.fragment());
            default -> {
                return null;
            }
        }
        return chunk(d, null, null, lp);
    }

    private ObjectNode textChunk(OutputParser.Event e, ObjectNode lp) {
        if (e instanceof OutputParser.ContentDelta c) return chunk(null, c.text(), null, lp);
        return null;
    }

    private void accumulate(OutputParser.Event e) {
        switch (e) {
            case OutputParser.ContentDelta c -> content.append(c.text());
            case OutputParser.ReasoningDelta r -> reasoning.append(r.text());
            case OutputParser.ToolCallStart s -> {
                while (calls.size() <= s.index()) {
                    calls.add(new String[2]);
                    args.add(new StringBuilder());
                }
                calls.set(s.index(), new String[]{s.id(), s.name()});
            }
            case OutputParser.ToolCallArgumentsDelta a -> args.get(a.index()).append(a.fragment());
            default -> { }
        }
    }

    /** The closing frames: finish chunk, usage chunk (when asked for) and [DONE]. */
    @Override
    public String done(EngineEvent.Done d) {
        return finish(d) + end(d.usage());
    }

    /**
     * The finish chunk of this builder's choice, with its stop_reason: the stop string or stop token that ended it, null
     * when neither did (the end of the turn, max_tokens), as vLLM's finish chunk has it.
     */
    String finish(EngineEvent.Done d) {
        ObjectNode fin = chunk(chat ? Json.object() : null, "", d.finishReason(), null);
        ObjectNode choice = (ObjectNode) fin.get("choices").get(0);
        stopReason(choice, d);
        return frame(fin, d.usage().completionTokens());
    }

    /**
     * Puts a choice's {@code stop_reason}: the stop string that ended it (a string), or the stop token's id (an integer,
     * as vLLM gives it); without either, null.
     */
    private static void stopReason(ObjectNode choice, EngineEvent.Done d) {
        if (d.stopString() != null) choice.put("stop_reason", d.stopString());
        else if (d.stopToken() != null) choice.put("stop_reason", d.stopToken().intValue());
        else choice.putNull("stop_reason");
    }

    /**
     * The end of a stream, after the finish chunk of its last choice: the usage chunk (when asked for) and [DONE].
     * @param usage the whole answer's usage (all its choices')
     */
    String end(Usage usage) {
        StringBuilder out = new StringBuilder();
        if (includeUsage) {
            ObjectNode u = base();
            u.putArray("choices");
            u.set("usage", usage.toJson());
            out.append(frame(u));
        }
        out.append("data: [DONE]\n\n");
        return out.toString();
    }

    /** The whole non-streaming response. */
    @Override
    public ObjectNode full(EngineEvent.Done d) {
        ObjectNode o = base();
        ObjectNode c = o.putArray("choices").addObject();
        c.put("index", index);
        if (chat) {
            ObjectNode m = c.putObject("message");
            m.put("role", "assistant");
            if (content.isEmpty() && (!calls.isEmpty() || forcedToolCall)) m.putNull("content"); else m.put("content", content.toString());
            if (!reasoning.isEmpty()) m.put("reasoning_content", reasoning.toString()).put("reasoning", reasoning.toString());
            if (!calls.isEmpty()) {
                ArrayNode tc = m.putArray("tool_calls");
                for (int i = 0; i < calls.size(); i++) {
                    ObjectNode t = tc.addObject();
                    t.put("id", calls.get(i)[0]).put("type", "function");
                    t.putObject("function").put("name", calls.get(i)[1]).put("arguments", args.get(i).toString());
                }
            }
        } else {
            c.put("text", content.toString());
        }
        if (anyLogprobs || logprobsAsked) c.set("logprobs", logprobs(allLogprobs)); else c.putNull("logprobs");
        c.put("finish_reason", d.finishReason());
        stopReason(c, d);
        o.set("usage", d.usage().toJson());
        return o;
    }

    /**
     * The whole non-streaming response of a request with several choices: the base fields once, the choices in index
     * order (each from its own builder, which gathered its choice), and the usage of all of them.
     * @param builders one per choice, in index order, each {@link #choice(int) of its index}
     * @param dones    each choice's end, in the same order
     */
    static ObjectNode full(List<ResponseBuilder> builders, List<EngineEvent.Done> dones) {
        // full() lists a builder's logprobs once (the echoed prompt's go with the first listing): one call per builder
        ObjectNode o = builders.getFirst().full(dones.getFirst());
        ArrayNode choices = (ArrayNode) o.get("choices");
        List<Usage> usages = new ArrayList<>(dones.size());
        usages.add(dones.getFirst().usage());
        for (int i = 1; i < builders.size(); i++) {
            choices.add(builders.get(i).full(dones.get(i)).get("choices").get(0));
            usages.add(dones.get(i).usage());
        }
        o.set("usage", Usage.ofChoices(usages).toJson());
        return o;
    }

    /** Chat: {@code {"content": [{token, logprob, bytes, top_logprobs}]}}; completions: the legacy arrays. */
    private ObjectNode logprobs(List<EngineEvent.TokenLogprob> lps) {
        ObjectNode o = Json.object();
        if (chat) {
            ArrayNode content = o.putArray("content");
            for (EngineEvent.TokenLogprob t : lps) {
                ObjectNode e = content.addObject();
                e.put("token", t.token()).put("logprob", t.logprob());
                bytes(e.putArray("bytes"), t.bytes());
                ArrayNode top = e.putArray("top_logprobs");
                for (EngineEvent.TopLogprob a : t.top()) {
                    ObjectNode x = top.addObject().put("token", a.token()).put("logprob", a.logprob());
                    bytes(x.putArray("bytes"), a.bytes());
                }
            }
            return o;
        }
        ArrayNode tokens = o.putArray("tokens"), tlp = o.putArray("token_logprobs"), top = o.putArray("top_logprobs"),
                off = o.putArray("text_offset");
        // the prompt's tokens come first, once (the echo frame when streaming, the whole answer otherwise)
        if (!promptLogprobs.isEmpty()) {
            int at = 0;
            for (EngineEvent.TokenLogprob t : promptLogprobs) {
                tokens.add(t.token());
                if (Float.isNaN(t.logprob())) {
                    tlp.addNull();
                    top.addNull();
                } else {
                    tlp.add(t.logprob());
                    legacyTop(top.addObject(), t);
                }
                off.add(Math.min(at, echoLength));
                at += t.token().length();
            }
            promptLogprobs = List.of();
        }
        if (textOffset < echoLength) textOffset = echoLength;
        for (EngineEvent.TokenLogprob t : lps) {
            tokens.add(t.token());
            tlp.add(t.logprob());
            legacyTop(top.addObject(), t);
            off.add(textOffset);
            textOffset += t.token().length();
        }
        return o;
    }

    /**
     * A token's {@code top_logprobs} entry on /v1/completions: its N most likely alternatives, then the token itself
     * with its logprob where they do not list it (so up to logprobs + 1 entries, as OpenAI's legacy API documents and
     * vLLM answers; with logprobs 0 the token alone, rather than an empty object that says nothing). Whether they list
     * it is decided by token id, not text: a control token left out of the text, or one cut where a stop string matched
     * inside it, is listed there under its own text.
     */
    private static void legacyTop(ObjectNode alt, EngineEvent.TokenLogprob t) {
        for (EngineEvent.TopLogprob a : t.top()) alt.put(a.token(), a.logprob());
        if (!t.listed()) alt.put(t.token(), t.logprob());
    }

    private static void bytes(ArrayNode a, byte[] b) {
        for (byte x : b) a.add(x & 0xff);
    }
}
