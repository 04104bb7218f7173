package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.grammar.Grammar;
import io.ds4j.grammar.GrammarLimitException;
import io.ds4j.grammar.SchemaCompiler;
import io.ds4j.grammar.UnsupportedGrammarException;
import io.ds4j.grammar.UnsupportedRegexException;
import io.ds4j.grammar.UnsupportedSchemaException;
import io.ds4j.json.Json;
import io.ds4j.sampling.SamplingParams;
import io.ds4j.server.config.ServerConfig;
import io.ds4j.text.chat.ChatEncoder;
import io.ds4j.text.chat.ChatFormatException;
import io.ds4j.text.chat.ChatMessage;
import io.ds4j.text.chat.ChatOptions;
import io.ds4j.text.chat.ReasoningEffort;
import io.ds4j.text.chat.V4Format;

import java.text.Normalizer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Reads and checks the body of {@code /v1/chat/completions} and {@code /v1/completions}. Every mistake becomes an
 * {@link ApiException} (400) naming the field. A field read nowhere here is one the endpoint ignores: the body's
 * objects record what was read, and {@link RequestFields} reports the rest. Nothing here blocks or touches the model.
 */
final class Requests {
    private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(Requests.class);

    private Requests() {}

    /**
     * A checked generation request.
     *
     * @param chat          chat completion (else legacy completion)
     * @param stream        answer as Server-Sent Events
     * @param includeUsage  stream_options.include_usage
     * @param continuousUsage stream_options.continuous_usage_stats (vLLM's extension) with include_usage: every streamed
     *                      chunk carries the usage so far, so a client can tell how many tokens each chunk stands for
     * @param messages      chat messages (chat only)
     * @param options       chat encoding options (chat only)
     * @param promptText    completion prompt text, or null when promptIds is given
     * @param promptIds     completion prompt as token ids, or null
     * @param echo          completions: prepend the prompt to the output
     * @param params        sampling settings; maxTokens is the request's value or the configured default
     * @param maxTokensParam the field max_tokens came from (for messages), or null where the client gave none and the
     *                       server's default (limits.maxTokensDefault) applies
     * @param specQ         "0", "auto" or "1".."8" (request override or configured)
     * @param logprobs      return log-probabilities
     * @param topLogprobs   alternatives per token
     * @param skipSpecialTokens leave control tokens out of the output text (default true)
     * @param grammar       what constrained decoding enforces on the output (forced tool call, JSON schema,
     *                      JSON object, vLLM's regex or choice), or null for free output
     * @param reasoningBudget chat: the most tokens the answer may spend reasoning before its reasoning is ended for it
     *                      ({@code thinking_token_budget}), or null for no cap
     * @param n             choices to generate for the prompt (1..{@link #MAX_N}), each its own engine request
     * @param stopTokenIds  vLLM's {@code stop_token_ids}: generating one of these ids ends the answer (empty: none)
     * @param includeStopStr vLLM's {@code include_stop_str_in_output}: the stop string or stop token's text that ended
     *                      the answer is kept at its end
     * @param minTokens     vLLM's {@code min_tokens}: tokens generated before the answer may end (0: none)
     * @param notes         what reading the body found worth an INFO line (a schema not enforced), for
     *                      the caller to log once the request has its id
     */
    record Gen(boolean chat, boolean stream, boolean includeUsage, boolean continuousUsage, List<ChatMessage> messages, ChatOptions options,
               String promptText, int[] promptIds, boolean echo, SamplingParams params, String maxTokensParam,
               String specQ, boolean logprobs, int topLogprobs, boolean skipSpecialTokens, Grammar grammar,
               Integer reasoningBudget, int n, int[] stopTokenIds, boolean includeStopStr, int minTokens, List<String> notes) {}

    /**
     * Logs what reading a request found worth a line ({@link Gen#notes}, in the words of the client's API), naming the
     * request as the server's other per-request lines do (its id, the client's X-Request-Id beside it).
     */
    static void logNotes(List<String> notes, String id) {
        for (String note : notes) LOG.info("request {}: {}", id, note);
    }

    /** Longest {@link HttpVerticle#NOTES_HEADER} value, in characters: notes quote the client's keywords, which may be long. */
    static final int MAX_NOTES_HEADER = 1024;

    /**
     * The {@link HttpVerticle#NOTES_HEADER} value of a request: its notes ({@link Gen#notes}, in the words of the
     * client's API) joined by "; ", each character outside printable ASCII as '?' (a header holds no other), cut at
     * {@link #MAX_NOTES_HEADER} characters with "..."; null for none.
     */
    static String notesHeader(List<String> notes) {
        if (notes.isEmpty()) return null;
        StringBuilder b = new StringBuilder();
        for (char c : String.join("; ", notes).toCharArray()) b.append(c < 0x20 || c > 0x7e ? '?' : c);
        return b.length() <= MAX_NOTES_HEADER ? b.toString() : b.substring(0, MAX_NOTES_HEADER - 3) + "...";
    }

    /** The most ids {@code stop_token_ids} may list: each generated token is looked up in them. */
    static final int MAX_STOP_TOKEN_IDS = 64;

    /**
     * The most choices one request may ask for ({@code n}): each choice is a sequence of its own in the engine, so a
     * bound keeps one request from taking every slot and the memory behind them; 16 covers sampling several candidates
     * to pick from, which is what n is for.
     */
    static final int MAX_N = 16;

    /** What the range of max_tokens notes of its 0 on /v1/completions, the one endpoint with echo. */
    static final String ECHO_NOTE = " (0 with echo on /v1/completions)";

    /** Parses a chat or completion body. */
    static Gen parse(JsonNode body, boolean chat, ModelInfo model, ServerConfig cfg) {
        if (body == null || !body.isObject()) throw ApiException.bodyNotAnObject(body);
        checkModel(body, model);
        platformFields(body);
        int n = choices(body, chat, cfg);
        boolean stream = bool(body, "stream", false);
        boolean includeUsage = false, continuousUsage = false;
        JsonNode so = body.get("stream_options");
        if (so != null && !so.isNull()) {
            if (!so.isObject()) throw ApiException.badField("stream_options", "must be an object");
            includeUsage = bool(so, "include_usage", "stream_options.include_usage", false);
            // as vLLM: the per-chunk usage comes with include_usage only (alone it is accepted and has no effect)
            continuousUsage = bool(so, "continuous_usage_stats", "stream_options.continuous_usage_stats", false) && includeUsage;
            // as OpenAI and vLLM: options of a stream on an answer that is not one are the client's mistake
            if (!stream) throw ApiException.badField("stream_options", "is allowed only with \"stream\": true");
        }

        // max tokens: max_completion_tokens (OpenAI's current name) or max_tokens (its legacy one)
        // 0 only where it means something: a completion that echoes (and may score) its prompt
        int minTokens = !chat && bool(body, "echo", false) ? 0 : 1;
        // the note on echo only where echo is: on chat it would point at a field the endpoint does not have
        String mtRange = !chat && minTokens == 1 ? ECHO_NOTE : "";
        // both fields are checked whenever sent: each is the client's mistake when it is bad
        Integer legacy = integer(body, "max_tokens", minTokens, Integer.MAX_VALUE, mtRange);
        Integer current = integer(body, "max_completion_tokens", minTokens, Integer.MAX_VALUE, mtRange);
        // two names of one limit that disagree: which one the client meant is unclear, so neither silently wins
        if (legacy != null && current != null && !legacy.equals(current))
            throw ApiException.badField("max_tokens", "is " + shown(body.get("max_tokens")) + " while max_completion_tokens is "
                    + shown(body.get("max_completion_tokens")) + " (two names of one limit: give one of them, or the same value)");
        Integer maxTokens = current != null ? current : legacy;
        String mtName = current != null ? "max_completion_tokens" : legacy != null ? "max_tokens" : null;
        if (maxTokens == null) maxTokens = cfg.maxTokensDefault();

        boolean logprobs;
        int topLogprobs;
        if (chat) {
            logprobs = bool(body, "logprobs", false);
            Integer t = integer(body, "top_logprobs", 0, 20, "");
            topLogprobs = t == null ? 0 : t;
            if (t != null && t > 0 && !logprobs) throw ApiException.badField("top_logprobs", "needs logprobs: true");
        } else {
            Integer lp = integer(body, "logprobs", 0, 20, "");
            logprobs = lp != null;
            topLogprobs = lp == null ? 0 : lp;
        }

        SamplingParams params = sampling(body, cfg, model, maxTokens, logprobs, topLogprobs);
        boolean skipSpecial = bool(body, "skip_special_tokens", true);
        int[] stopTokenIds = stopTokenIds(body, model);
        boolean includeStopStr = bool(body, "include_stop_str_in_output", false);
        // one range names both limits: a negative min_tokens was told [0, 2147483647], which is not the upper limit
        Integer minOut = integer(body, "min_tokens", 0, maxTokens, " (at most " + (mtName != null ? mtName
                : "the server's default max_tokens") + ")");
        String specQ = specQ(body, cfg);

        if (chat) {
            JsonNode msgs = body.get("messages");
            if (msgs == null || msgs.isNull())
                throw ApiException.badField("messages", body.has("prompt")
                        ? "is required; 'prompt' belongs to /v1/completions"
                                + " (chat takes \"messages\": [{\"role\": \"user\", \"content\": \"...\"}])"
                        : "is required");
            List<ChatMessage> messages;
            String continued; // the field asking for the last message to be continued, or null
            try {
                messages = ChatMessage.listFromOpenAi(msgs);
                if (messages.isEmpty()) throw ApiException.badField("messages", "must contain at least one message");
                continued = continuation(body, msgs, messages.getLast());
                if (continued != null) ChatEncoder.checkContinuable(messages);
            } catch (ChatFormatException e) {
                throw chatError(e);
            }
            textOutputOnly(body);
            ChatOptions opts = chatOptions(body).withContinueFinal(continued != null);
            List<String> notes = new ArrayList<>(1);
            Grammar grammar = grammar(body, opts, messages, continued, notes);
            Integer budget = reasoningBudget(body);
            // accepted, as clients send one budget with every effort, but said: it caps nothing without thinking
            if (budget != null && !opts.thinking()) notes.add("its reasoning budget (" + budget + " tokens) is not used: thinking is off");
            return new Gen(true, stream, includeUsage, continuousUsage, messages, opts, null, null, false, params, mtName, specQ, logprobs, topLogprobs,
                    skipSpecial, grammar, budget, n, stopTokenIds, includeStopStr, minOut == null ? 0 : minOut, List.copyOf(notes));
        }
        JsonNode p = body.get("prompt");
        String text = null;
        int[] ids = null;
        if (p == null || p.isNull())
            throw ApiException.badField("prompt", body.has("messages")
                    ? "is required; 'messages' belongs to /v1/chat/completions" : "is required");
        String where = "prompt";
        if (p.isArray() && p.size() == 1 && (p.get(0).isTextual() || p.get(0).isArray())) {
            // a batch of one (["text"] or [[ids]]): OpenAI accepts it, and it is one prompt
            p = p.get(0);
            where = "prompt[0]";
        } else if (p.isArray() && p.size() > 1 && (p.get(0).isTextual() || p.get(0).isArray())) {
            throw ApiException.badField("prompt", "only one prompt per request is supported, got " + p.size());
        }
        if (p.isTextual()) {
            text = p.textValue();
        } else if (p.isArray()) {
            if (p.isEmpty()) throw ApiException.badField(where, "must not be empty");
            ids = tokenIds(p, where, model);
        } else {
            throw ApiException.badField("prompt", "must be a string, an array of token ids, or a one-element array of either");
        }
        boolean echo = bool(body, "echo", false);
        String suffix = optString(body, "suffix", "suffix");
        if (suffix != null) {
            if (text == null)
                throw ApiException.badField("suffix", "needs a text prompt (the text before the insertion); the prompt is token ids");
            if (echo) throw ApiException.badField("suffix", "cannot be combined with echo (the prompt is the text around the insertion)");
            if (model.tokenizer().id(V4Format.FIM_BEGIN).isEmpty() || model.tokenizer().id(V4Format.FIM_HOLE).isEmpty()
                    || model.tokenizer().id(V4Format.FIM_END).isEmpty())
                throw ApiException.badField("suffix", "this model's tokenizer has no fill-in-the-middle tokens ("
                        + V4Format.FIM_BEGIN + ", " + V4Format.FIM_HOLE + ", " + V4Format.FIM_END + ")");
            // an insertion at the start of a text has an empty prefix
            text = V4Format.fillInTheMiddle(text, suffix);
        }
        if (text != null && text.isEmpty()) throw ApiException.badField(where, "must not be empty");
        // the generated text alone is held to the constraint (an echoed prompt is not part of it); a response_format
        // is checked as chat checks it, and only held to: the prompt is the client's own, so nothing renders it there
        JsonNode rf = body.get("response_format");
        try {
            ChatOptions.checkResponseFormat(rf);
        } catch (ChatFormatException e) {
            throw chatError(e);
        }
        List<String> notes = new ArrayList<>(1);
        Grammar grammar = content(body, rf == null || rf.isNull() ? null : rf, null, false, notes).grammar();
        return new Gen(false, stream, includeUsage, continuousUsage, null, null, text, ids, echo, params, mtName, specQ, logprobs, topLogprobs,
                skipSpecial, grammar, null, n, stopTokenIds, includeStopStr, minOut == null ? 0 : minOut, List.copyOf(notes));
    }

    /**
     * Refuses a chat request that asks for audio output: {@code modalities} listing {@code "audio"}, or an
     * {@code audio} object (its voice and format); an {@code audio} that is no object is refused as such. The model writes text only, and an answer without the audio asked
     * for would read as a success. {@code modalities: ["text"]}, the default, is accepted.
     * @throws ApiException 400 naming the field
     */
    private static void textOutputOnly(JsonNode body) {
        JsonNode m = body.get("modalities");
        if (m != null && !m.isNull()) {
            if (!m.isArray()) throw ApiException.badField("modalities", "must be an array of output types, [\"text\"], got " + describe(m));
            for (int i = 0; i < m.size(); i++) {
                JsonNode x = m.get(i);
                String where = "modalities[" + i + "]";
                if (!x.isTextual()) throw ApiException.badField(where, "must be a string, got " + describe(x));
                if (x.textValue().equals("audio"))
                    throw ApiException.badField(where, "audio output is not supported: this server writes text only"
                            + " (give [\"text\"] or leave modalities out)");
                if (!x.textValue().equals("text"))
                    throw ApiException.badField(where, "must be \"text\", the one output type this server writes, got '" + x.textValue() + "'");
            }
        }
        JsonNode audio = body.get("audio");
        // OpenAI types audio as an object: false is no way of asking for nothing (null or absent is), and is refused as
        // any other object field given a boolean is (stream_options, chat_template_kwargs), not as a request for audio
        if (audio != null && !audio.isNull() && !audio.isObject())
            throw ApiException.badField("audio", "must be an object (the voice and format of audio output, which this server"
                    + " does not write: leave audio out), got " + describe(audio));
        if (audio != null && !audio.isNull())
            throw ApiException.badField("audio", "audio output is not supported: this server writes text only (leave audio out)");
    }

    /**
     * The predicted output's text (OpenAI's Predicted Outputs), or null without one. Chat takes
     * {@code {"type": "content", "content": string | [{"type": "text", "text": string}, ...]}}; completions take that
     * object or a plain string. Text parts are joined without separators, as OpenAI joins text content parts.
     * @throws ApiException 400 naming the offending field ({@code prediction}, {@code prediction.type},
     *         {@code prediction.content[1].type}, ...)
     */
    static String prediction(JsonNode body, boolean chat) {
        JsonNode p = body.get("prediction");
        if (p == null || p.isNull()) return null;
        if (!chat && p.isTextual()) return p.textValue();
        String shape = "{\"type\": \"content\", \"content\": string or an array of text parts}";
        if (!p.isObject())
            throw ApiException.badField("prediction", "must be " + (chat ? "" : "a string or ") + "an object " + shape + ", got " + describe(p));
        JsonNode type = p.get("type");
        if (type == null || type.isNull()) throw ApiException.badField("prediction.type", "is required (\"content\")");
        if (!type.isTextual() || !type.textValue().equals("content"))
            throw ApiException.badField("prediction.type", "must be \"content\", got " + (type.isTextual() ? "'" + type.textValue() + "'" : describe(type)));
        JsonNode c = p.get("content");
        if (c == null || c.isNull()) throw ApiException.badField("prediction.content", "is required");
        if (c.isTextual()) return c.textValue();
        if (!c.isArray()) throw ApiException.badField("prediction.content", "must be a string or an array of text parts, got " + describe(c));
        StringBuilder text = new StringBuilder();
        for (int i = 0; i < c.size(); i++) {
            JsonNode part = c.get(i);
            String where = "prediction.content[" + i + "]";
            if (!part.isObject()) throw ApiException.badField(where, "must be a text part {\"type\": \"text\", \"text\": string}, got " + describe(part));
            JsonNode pt = part.get("type");
            if (pt == null || pt.isNull()) throw ApiException.badField(where + ".type", "is required (\"text\")");
            if (!pt.isTextual() || !pt.textValue().equals("text"))
                throw ApiException.badField(where + ".type", "must be \"text\" (a prediction holds text only), got "
                        + (pt.isTextual() ? "'" + pt.textValue() + "'" : describe(pt)));
            JsonNode t = part.get("text");
            if (t == null || t.isNull()) throw ApiException.badField(where + ".text", "is required");
            if (!t.isTextual()) throw ApiException.badField(where + ".text", "must be a string, got " + describe(t));
            text.append(t.textValue());
        }
        return text.toString();
    }

    /**
     * The 404 model_not_found for a model name that is not the served one (names are compared exactly, as OpenAI's
     * are), saying why where the two look alike: letter case, blanks around the name or the Unicode form of its
     * characters (e.g. an é as one code point or as e and a combining accent), each that tells them apart where only
     * those do.
     */
    static ApiException modelNotFound(String asked, String served) {
        String nfc = Normalizer.normalize(asked, Normalizer.Form.NFC), stripped = nfc.strip();
        String servedNfc = Normalizer.normalize(served, Normalizer.Form.NFC);
        String why = "";
        if (stripped.equalsIgnoreCase(servedNfc)) {
            List<String> hints = new ArrayList<>();
            if (!asked.strip().equalsIgnoreCase(served))
                hints.add(stripped.equals(servedNfc) && nfc.equals(stripped)
                        ? "the two differ only in the Unicode form of their characters: send the name as /v1/models lists it"
                        : "the Unicode form of its characters differs: send the name as /v1/models lists it");
            if (!nfc.equals(stripped)) hints.add("mind the blanks around the name");
            if (!stripped.equals(servedNfc)) hints.add("model names are case-sensitive");
            why = " (" + String.join("; ", hints) + ")";
        }
        return new ApiException(404, "invalid_request_error", "model_not_found", "model",
                "model: '" + asked + "' does not exist; this server serves '" + served + "'" + why, null);
    }

    /** 404 for a model name the server does not serve (absent means the served model). */
    static void checkModel(JsonNode body, ModelInfo model) {
        JsonNode m = body.get("model");
        if (m == null || m.isNull()) return;
        if (!m.isTextual()) throw ApiException.badField("model", "must be a string");
        if (!m.textValue().equals(model.id())) throw modelNotFound(m.textValue(), model.id());
    }

    static ApiException chatError(ChatFormatException e) {
        return new ApiException(400, "invalid_request_error", null, e.field(), e.getMessage(), null);
    }

    /** Sampling settings: request fields over configured defaults, checked against their ranges. */
    private static SamplingParams sampling(JsonNode b, ServerConfig cfg, ModelInfo model, int maxTokens, boolean logprobs, int top) {
        ServerConfig.SamplingDefaults d = cfg.sampling();
        double temperature = orDefault(number(b, "temperature"), d.temperature());
        double topP = orDefault(number(b, "top_p"), d.topP());
        int topKMax = SamplingParams.topKMax(model.vocabSize(), model.tokenizer().vocabSize());
        // llama.cpp and vLLM use -1 for "off"
        Integer topKv = integer(b, "top_k", -1, topKMax, SamplingParams.topKNote(topKMax));
        int topK = topKv == null ? d.topK() : SamplingParams.topKGiven(topKv);
        double minP = orDefault(number(b, "min_p"), d.minP());
        double presence = orDefault(number(b, "presence_penalty"), d.presencePenalty());
        double frequency = orDefault(number(b, "frequency_penalty"), d.frequencyPenalty());
        double repetition = orDefault(number(b, "repetition_penalty"), d.repetitionPenalty());
        Long seed = d.seed();
        JsonNode s = b.get("seed");
        if (s != null && !s.isNull()) seed = seed(s);
        // the values validate decides on and shows, as the client wrote them (SamplingParams.validate's names)
        Map<String, JsonNode> given = new HashMap<>();
        for (String f : List.of("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"))
            if (present(b, f)) given.put(f, b.get(f));
        Map<Integer, Float> bias = logitBias(b, model, given);
        List<String> stop = stop(b);
        boolean ignoreEos = bool(b, "ignore_eos", false);
        SamplingParams p = new SamplingParams(temperature, topK, topP, minP, seed, presence, frequency, repetition, bias,
                maxTokens, stop, logprobs, top, ignoreEos);
        try {
            // one limit for token ids everywhere: the ids the tokenizer can decode (the model's embedding may be larger)
            p.validate(model.tokenizer().vocabSize(), name -> given.containsKey(name) ? shown(given.get(name)) : null);
        } catch (IllegalArgumentException e) {
            String msg = e.getMessage();
            Matcher m = Pattern.compile("^([a-z_]+)").matcher(msg);
            String param = m.find() ? m.group(1) : null;
            throw new ApiException(400, "invalid_request_error", null, param, msg, null);
        }
        return p;
    }

    private static final java.math.BigDecimal LONG_MIN = java.math.BigDecimal.valueOf(Long.MIN_VALUE);
    private static final java.math.BigDecimal LONG_MAX = java.math.BigDecimal.valueOf(Long.MAX_VALUE);

    /**
     * seed: an integer in the long range, decided on the number as written, as every integer field is: a double
     * holds neither 2^63 - 1 nor -2^63 - 1 (both round to a power of two, one out of range, one in), so
     * {@code 9223372036854775807.0} is accepted as 2^63 - 1 and {@code -9223372036854775809.0} is refused, not
     * rounded to -2^63.
     */
    private static long seed(JsonNode s) {
        boolean overflowed = beyondDouble(s);
        if (!overflowed && !Json.isIntegral(s)) throw ApiException.badField("seed", "must be an integer, got " + describe(s));
        java.math.BigDecimal x = overflowed ? null : Json.exact(s);
        if (x == null || x.compareTo(LONG_MIN) < 0 || x.compareTo(LONG_MAX) > 0)
            throw ApiException.badField("seed", "is out of range: give an integer in [-2^63, 2^63), got " + shown(s));
        return x.longValueExact();
    }

    /**
     * logit_bias: token id (a key) to bias. A key is read as an integer ({@link #biasKey}), so "05", "+5" and " 5"
     * name token 5 as "5" does. Clients write the keys from token ids ("5"); a hand-written other form is accepted
     * rather than refused, since a server that reads the keys as integers accepts it and a client moving here expects
     * the same request to work. Two keys that name one token are refused with both named: they give two biases for one token, and which
     * one the client meant is unclear (as for a key given twice in one JSON object, also refused); letting the last
     * one win would silently drop the other.
     */
    private static Map<Integer, Float> logitBias(JsonNode b, ModelInfo model, Map<String, JsonNode> given) {
        JsonNode lb = b.get("logit_bias");
        if (lb == null || lb.isNull()) return Map.of();
        if (!lb.isObject()) throw ApiException.badField("logit_bias", "must be an object mapping token ids to biases");
        Map<Integer, Float> out = new HashMap<>();
        Map<Integer, String> keys = new HashMap<>();
        int limit = model.tokenizer().vocabSize();
        for (var e : lb.properties()) {
            int id = biasKey(e.getKey(), limit);
            String before = keys.putIfAbsent(id, e.getKey());
            if (before != null)
                throw ApiException.badField("logit_bias", "keys '" + before + "' and '" + e.getKey() + "' both name token " + id
                        + "; give each token once");
            if (!e.getValue().isNumber()) throw ApiException.badField("logit_bias", "bias for token " + id + " must be a number");
            out.put(id, e.getValue().floatValue());
            given.put("logit_bias[" + id + "]", e.getValue());
        }
        return out;
    }

    /**
     * "; it holds U+00A0" for the first character of a key that is neither printable ASCII nor a tab (a no-break space
     * or a newline looks like the space a key may have), else "".
     */
    private static String oddCharacter(String key) {
        var odd = key.codePoints().filter(c -> c != '\t' && (c < 0x20 || c > 0x7E)).findFirst();
        return odd.isPresent() ? "; it holds " + HttpVerticle.codePoint(odd.getAsInt()) : "";
    }

    /** Spaces and tabs around a logit_bias key, which a key may have (control characters it may not). */
    private static final java.util.regex.Pattern SPACES_AROUND = java.util.regex.Pattern.compile("^[ \\t]+|[ \\t]+$");

    /**
     * A logit_bias key's token id: ASCII digits, optionally signed, optionally with spaces or tabs around them
     * (Integer.parseInt alone would also read the digits of other scripts, such as Arabic-Indic ones, which no client
     * writes a token id in; String.trim would also drop control characters such as NUL). Its range is checked here,
     * where the key as written is at hand for the message: "+129280" is shown so, not as 129280.
     */
    private static int biasKey(String key, int limit) {
        String t = SPACES_AROUND.matcher(key).replaceAll("");
        int digits = t.startsWith("+") || t.startsWith("-") ? 1 : 0;
        if (t.length() == digits || !t.substring(digits).chars().allMatch(c -> c >= '0' && c <= '9'))
            throw ApiException.badField("logit_bias", "key '" + key + "' is not a token id (ASCII digits 0-9, optionally signed,"
                    + " optionally with spaces or tabs around them)" + oddCharacter(key));
        int id;
        try {
            id = Integer.parseInt(t);
        } catch (NumberFormatException beyondInt) {
            id = -1;
        }
        if (id < 0 || id >= limit)
            throw ApiException.badField("logit_bias", "key '" + key + "' is outside the token ids [0, " + limit + ")");
        return id;
    }

    private static List<String> stop(JsonNode b) {
        JsonNode s = b.get("stop");
        if (s == null || s.isNull()) return List.of();
        if (s.isTextual()) {
            if (s.textValue().isEmpty()) throw ApiException.badField("stop", "stop strings must not be empty");
            return List.of(s.textValue());
        }
        if (!s.isArray()) throw ApiException.badField("stop", "must be a string or an array of strings");
        List<String> out = new ArrayList<>();
        for (int i = 0; i < s.size(); i++) {
            if (!s.get(i).isTextual()) throw ApiException.badField("stop[" + i + "]", "must be a string");
            out.add(s.get(i).textValue());
        }
        return out;
    }

    /**
     * stop_token_ids (vLLM's): an array of at most {@link #MAX_STOP_TOKEN_IDS} token ids, each in the tokenizer's range
     * (as a prompt's ids and logit_bias keys are). Empty when absent.
     */
    private static int[] stopTokenIds(JsonNode b, ModelInfo model) {
        JsonNode s = b.get("stop_token_ids");
        if (s == null || s.isNull()) return new int[0];
        if (!s.isArray()) throw ApiException.badField("stop_token_ids", "must be an array of token ids, got " + describe(s));
        if (s.size() > MAX_STOP_TOKEN_IDS)
            throw ApiException.badField("stop_token_ids", "at most " + MAX_STOP_TOKEN_IDS + " token ids, got " + s.size());
        return tokenIds(s, "stop_token_ids", model);
    }

    /**
     * The token ids of a JSON array, each an integer in the tokenizer's range.
     * @throws ApiException 400 naming the element ({@code where[i]}) that is not
     */
    private static int[] tokenIds(JsonNode arr, String where, ModelInfo model) {
        int limit = model.tokenizer().vocabSize();
        int[] ids = new int[arr.size()];
        for (int i = 0; i < arr.size(); i++) {
            Integer id = intValue(arr.get(i));
            if (id == null || id < 0 || id >= limit)
                throw ApiException.badField(where + "[" + i + "]", "must be a token id in [0, " + limit + "), got " + shown(arr.get(i)));
            ids[i] = id;
        }
        return ids;
    }

    /** speculative_q: 0 (off), 1..8 or "auto"; absent means the configured speculative.q. */
    private static String specQ(JsonNode b, ServerConfig cfg) {
        JsonNode q = b.get("speculative_q");
        if (q == null || q.isNull()) return cfg.specQ();
        // read as the configuration's speculative.q is: a string other than "auto" is refused, even "5"
        String w = io.ds4j.server.config.ConfigKey.width(q);
        if (w != null) return w;
        throw ApiException.badField("speculative_q", "must be " + io.ds4j.server.config.ConfigKey.WIDTHS + ", got " + shown(q));
    }

    /**
     * Thinking mode and effort from {@code reasoning_effort}, {@code chat_template_kwargs.thinking} /
     * {@code enable_thinking} / {@code reasoning_effort}, and DeepSeek's {@code thinking: {"type": "enabled"}};
     * tools, tool_choice and response_format.
     */
    private static ChatOptions chatOptions(JsonNode b) {
        Boolean thinking = null;
        String effort = null;
        JsonNode kw = b.get("chat_template_kwargs");
        if (kw != null && !kw.isNull()) {
            if (!kw.isObject()) throw ApiException.badField("chat_template_kwargs", "must be an object");
            Boolean t1 = optBool(kw, "thinking", "chat_template_kwargs.thinking");
            Boolean t2 = optBool(kw, "enable_thinking", "chat_template_kwargs.enable_thinking");
            if (t1 != null && t2 != null && !t1.equals(t2))
                throw ApiException.badField("chat_template_kwargs.thinking", "contradicts chat_template_kwargs.enable_thinking");
            thinking = t1 != null ? t1 : t2;
            String e = optString(kw, "reasoning_effort", "chat_template_kwargs.reasoning_effort");
            if (e != null) effort = e;
        }
        JsonNode th = b.get("thinking");
        if (th != null && !th.isNull()) {
            String type = th.isObject() ? th.path("type").asText(null) : th.isBoolean() ? (th.booleanValue() ? "enabled" : "disabled") : null;
            // adaptive (Anthropic's name): the model decides how long to think, as V4 does in thinking mode
            if ("adaptive".equals(type)) type = "enabled";
            if (!"enabled".equals(type) && !"disabled".equals(type))
                throw ApiException.badField("thinking", "must be {\"type\": \"enabled\"}, {\"type\": \"adaptive\"} or {\"type\": \"disabled\"}");
            if (thinking == null) thinking = type.equals("enabled");
        }
        String re = optString(b, "reasoning_effort", "reasoning_effort");
        if (re != null) effort = re;
        String v4Effort = null;
        if (effort != null) {
            ReasoningEffort mode = ReasoningEffort.parse(effort);
            if (mode == null) throw ApiException.badField(re != null ? "reasoning_effort" : "chat_template_kwargs.reasoning_effort",
                    "unsupported value '" + effort + "' (use " + ReasoningEffort.ACCEPTED + ")");
            // an explicit thinking switch wins over the effort
            if (thinking == null) thinking = mode.thinking();
            v4Effort = mode.v4Effort();
        }
        boolean on = thinking != null && thinking;
        // vLLM's switch: false leaves the opening of the assistant turn off a prompt that ends with a user turn (a
        // continued message needs none: it is the open turn)
        ChatOptions o = ChatOptions.defaults().withThinking(on)
                .withAddGenerationPrompt(bool(b, "add_generation_prompt", true));
        try {
            if (on && v4Effort != null) o = o.withReasoningEffort(v4Effort);
            JsonNode tools = b.get("tools");
            JsonNode choice = b.get("tool_choice");
            boolean useTools = true;
            if (choice != null && !choice.isNull()) {
                if (choice.isTextual()) {
                    switch (choice.textValue()) {
                        case "auto" -> { }
                        case "none" -> useTools = false;
                        case "required" -> {
                            if (tools == null || !tools.isArray() || tools.isEmpty())
                                throw ApiException.badField("tool_choice", "'required' needs at least one tool in 'tools'");
                        }
                        default -> throw ApiException.badField("tool_choice", "must be \"auto\", \"none\", \"required\" or a function, got '" + choice.textValue() + "'");
                    }
                } else if (choice.isObject()) {
                    String name = forcedName(choice);
                    if (toolIndex(tools, name) < 0)
                        throw ApiException.badField("tool_choice", "names function '" + name + "', which is not in 'tools'");
                } else {
                    throw ApiException.badField("tool_choice", "must be a string (\"auto\", \"none\" or \"required\") or {\"type\": \"function\", \"function\": {\"name\": ...}}, got " + describe(choice));
                }
            }
            if (tools != null && !tools.isNull()) {
                // checked whatever tool_choice is: "none" only leaves them out of the prompt
                ChatOptions offered = o.withTools(tools);
                if (useTools) o = offered;
                // the chat template renders each tool's function object whole into the prompt (ChatEncoder.appendTools)
                for (JsonNode t : tools) RequestFields.usedWhole(t.get("function"));
                checkToolSchemas(tools);
            }
            JsonNode rf = b.get("response_format");
            if (rf != null && !rf.isNull()) {
                o = o.withResponseFormat(rf);
                // rendered whole into the prompt unless it asks for plain text (ChatOptions.hasResponseFormat)
                if (!"text".equals(rf.path("type").asText())) RequestFields.usedWhole(rf);
            }
        } catch (ChatFormatException e) {
            throw chatError(e);
        }
        return o;
    }

    /**
     * The function name of a {@code {"type": "function", "function": {"name": ...}}} tool_choice (a flat
     * {@code {"type": "function", "name": ...}}, the Responses API's shape, is taken too).
     * @throws ApiException 400 naming the part that is missing or wrong
     */
    private static String forcedName(JsonNode choice) {
        JsonNode type = choice.get("type");
        // the type says what the object is, so it is named first: {} or {"type": null} lacks it, and pointing at a
        // missing function would send the client to the wrong field
        if (type == null || type.isNull())
            throw ApiException.badField("tool_choice.type", "is missing: a tool_choice object is"
                    + " {\"type\": \"function\", \"function\": {\"name\": ...}}");
        if (!"function".equals(type.textValue()))
            throw ApiException.badField("tool_choice.type", "must be \"function\", got " + (type.isTextual() ? type : describe(type)));
        JsonNode fn = choice.get("function");
        JsonNode name;
        String where;
        if (fn != null && !fn.isNull()) {
            if (!fn.isObject())
                throw ApiException.badField("tool_choice.function", "must be an object with the function's name, {\"name\": ...}, got " + describe(fn));
            name = fn.get("name");
            where = "tool_choice.function.name";
        } else if (present(choice, "name")) {
            name = choice.get("name");
            where = "tool_choice.name";
        } else {
            // said as missing: "function.name must be a non-empty string" pointed inside an object that is not there
            throw ApiException.badField("tool_choice.function", "is missing: a tool_choice object names the function to call,"
                    + " {\"type\": \"function\", \"function\": {\"name\": ...}}");
        }
        if (name == null || !name.isTextual() || name.textValue().isEmpty())
            throw ApiException.badField(where, "must be a non-empty string");
        return name.textValue();
    }

    private static int toolIndex(JsonNode tools, String name) {
        if (tools == null || !tools.isArray()) return -1;
        for (int i = 0; i < tools.size(); i++)
            if (name.equals(tools.get(i).path("function").path("name").asText(null))) return i;
        return -1;
    }

    /**
     * What constrained decoding enforces: tool_choice "required" or a named function → one DSML tool call with
     * valid arguments; response_format json_schema → JSON valid for the schema (without {@code strict} true only where
     * it is the request's one constraint and its keywords are supported, else described in the prompt: {@link #softSchema});
     * json_object → a JSON object. With tools offered in auto mode, a tool-call block the model begins is held to the
     * listed tools (a {@code strict} function's arguments to its schema, one invoke when {@code parallel_tool_calls}
     * is false) where a function is strict, parallel calls are off or the content is constrained (which must leave
     * the calls open); otherwise the calls are free, as the template describes them. vLLM's structured_outputs (regex,
     * choice, json, json_object) and guided_regex / guided_choice constrain the content as a response_format does (at
     * most one constraint per request; none beside a forced call). In thinking mode the constraint starts after the reasoning.
     */
    private static Grammar grammar(JsonNode b, ChatOptions opts, List<ChatMessage> messages, String continued, List<String> notes) {
        JsonNode choice = b.get("tool_choice");
        JsonNode tools = opts.tools();
        boolean parallel = bool(b, "parallel_tool_calls", true);
        boolean forced = choice != null && tools != null && (choice.isObject() || "required".equals(choice.asText()));
        // the functions a call may name (a named tool_choice's alone), their parameters and strict flags
        String only = forced && choice.isObject() ? forcedName(choice) : null;
        List<String> names = new ArrayList<>();
        List<JsonNode> params = new ArrayList<>();
        List<Boolean> strict = new ArrayList<>();
        if (tools != null) {
            for (JsonNode t : tools) {
                JsonNode fn = t.get("function");
                String name = fn.get("name").textValue();
                if (only != null && !name.equals(only)) continue;
                names.add(name);
                params.add(fn.get("parameters"));
                strict.add(fn.path("strict").asBoolean(false));
            }
        }
        Content held = content(b, opts.responseFormat(), !forced ? null
                : "tool_choice " + (choice.isObject() ? "naming a function" : "\"required\""), true, notes);
        Grammar content = held.grammar();
        String schemaField = held.schemaField();
        Grammar g = content;
        try {
            if (forced) g = Grammar.toolCall(names, params);
            else if (!names.isEmpty() && (content != null || !parallel || strict.contains(true)))
                g = Grammar.optionalToolCalls(names, params, strict, parallel, content);
        } catch (UnsupportedSchemaException e) {
            // a problem in no function's schema beside a content schema is the content's (too many states beside the calls)
            if (e.tool() < 0 && content != null && schemaField != null) throw schemaError(schemaField, e);
            throw schemaError(toolField(tools, e.tool() >= 0 ? toolIndex(tools, names.get(e.tool())) : -1), e);
        }
        if (g == null) return null;
        if (continued == null) return opts.thinking() ? g.afterThinking() : g;
        if (forced)
            throw ApiException.badField(continued, "a forced tool call (tool_choice) is the whole answer: it cannot continue"
                    + " an assistant message");
        // the constraint goes on from where the message stops: its reasoning, or its content once it has some
        boolean inReasoning = ChatEncoder.answerStartsInReasoning(messages, opts);
        ChatMessage last = messages.getLast();
        String start = inReasoning ? last.reasoningContent() : last.content();
        Grammar after;
        try {
            after = (inReasoning ? g.afterThinking() : g).after(start == null ? "" : start);
        } catch (GrammarLimitException e) {
            throw ApiException.badField(continued, "the message to continue opens too many alternatives of " + g + ": "
                    + e.getMessage());
        }
        if (after == null)
            throw ApiException.badField(continued, "the message's " + (inReasoning ? "reasoning" : "content")
                    + " cannot begin an output of " + g + ", which this request's output is held to"
                    + (start != null && !start.isEmpty() && Character.isWhitespace(start.charAt(0))
                    ? " (the output starts with its first character: no space or line break before it)" : ""));
        return after;
    }

    /**
     * The reasoning budget: {@code thinking_token_budget} (vLLM's name), or the {@code budget_tokens} of a
     * {@code thinking} object (Anthropic's shape, which chat takes too); null for none.
     * @throws ApiException 400 for a budget out of range, or two that differ
     */
    private static Integer reasoningBudget(JsonNode body) {
        Integer budget = integer(body, "thinking_token_budget", 0, Integer.MAX_VALUE, "");
        JsonNode th = body.get("thinking");
        if (th == null || !th.isObject() || "disabled".equals(th.path("type").asText())) return budget;
        Integer inThinking = integer(th, "budget_tokens", "thinking.budget_tokens", 0, Integer.MAX_VALUE, "");
        if (budget != null && inThinking != null && !budget.equals(inThinking))
            throw ApiException.badField("thinking.budget_tokens", "is " + inThinking + " while thinking_token_budget is " + budget);
        return budget != null ? budget : inThinking;
    }

    /**
     * Refuses a chat generation whose conversation ends with a finished assistant turn: the V4 template renders it
     * closed with its end of sentence and opens no new turn after it, so the model would write past the end of a
     * conversation instead of answering. ({@code /tokenize} renders such a conversation, to count a finished one.)
     *
     * @param prefixHint say chat's other way out, {@code "prefix": true} (not for a body translated from another API)
     * @throws ApiException 400 naming the last message, with the ways out
     */
    static void checkAnswerable(Gen g, boolean prefixHint) {
        List<ChatMessage> m = g.messages();
        if (g.options().continueFinal() || m.getLast().role() != ChatMessage.Role.ASSISTANT) return;
        throw ApiException.badField("messages[" + (m.size() - 1) + "]", "the last message is the assistant's, so there is"
                + " nothing to answer: end with a user message" + (prefixHint ? " (or a tool message), or set \"prefix\": true"
                + " on it to have the answer continue it" : ""));
    }

    /**
     * Whether the answer continues the last message (DeepSeek's chat prefix completion: {@code "prefix": true} on it;
     * vLLM's {@code continue_final_message: true}) and the field that asked for it, else null. Only the last message
     * may be a prefix; which messages can be continued is the encoder's ({@code ChatEncoder.render}).
     *
     * @throws ApiException 400 for a {@code prefix} that is not a boolean or is true on an earlier message, for the two
     *         fields contradicting each other, or for a message to continue that holds tool-call markup
     */
    private static String continuation(JsonNode body, JsonNode msgs, ChatMessage lastMessage) {
        String asked = null;
        for (int i = 0; i < msgs.size(); i++) {
            String path = "messages[" + i + "].prefix";
            if (!bool(msgs.get(i), "prefix", path, false)) continue;
            if (i < msgs.size() - 1)
                throw ApiException.badField(path, "only the last message, an assistant's answer to continue, may be a prefix");
            asked = path;
        }
        Boolean flag = optBool(body, "continue_final_message", "continue_final_message");
        if (flag != null && !flag && asked != null)
            throw ApiException.badField("continue_final_message", "is false while " + asked + " is true");
        int last = msgs.size() - 1;
        if (Boolean.TRUE.equals(flag) && msgs.get(last).path("prefix").isBoolean() && !msgs.get(last).get("prefix").booleanValue())
            throw ApiException.badField("messages[" + last + "].prefix", "is false while continue_final_message is true");
        String field = asked != null ? asked : Boolean.TRUE.equals(flag) ? "continue_final_message" : null;
        // vLLM refuses the pair too: a new assistant turn cannot open after a message the answer continues
        if (field != null && Boolean.TRUE.equals(optBool(body, "add_generation_prompt", "add_generation_prompt")))
            throw ApiException.badField("add_generation_prompt", "cannot be true while " + field + " continues the last"
                    + " message: the continued message is the open turn");
        // the output parser reads the answer from where the message stops: a tool call begun in the message would reach
        // the client as markup, its start never parsed
        if (field != null)
            for (String text : new String[]{lastMessage.content(), lastMessage.reasoningContent()})
                if (text != null && text.contains(V4Format.DSML))
                    throw ApiException.badField(field, "the message to continue holds tool-call markup (" + V4Format.DSML
                            + "): a tool call is made in the answer itself, not continued from a prefix");
        return field;
    }

    /**
     * Checks every tool's parameters schema as JSON Schema, whatever tool_choice is: one that is wrong as JSON Schema (a
     * keyword's value of the wrong kind, a {@code $ref} that does not resolve, a type that is none of JSON Schema's, a
     * schema no value satisfies) is refused as a forced call refuses it, naming the tool's field, since the model is
     * shown it as the function's contract either way. A valid schema that constrained decoding merely does not support
     * is accepted here: only a forced call and a strict function hold arguments to their schema, and they refuse it
     * where they compile it ({@link #grammar}).
     * @throws ApiException 400 {@code invalid_schema} naming {@code tools[i].function.parameters} and the node at fault
     */
    private static void checkToolSchemas(JsonNode tools) {
        for (int i = 0; i < tools.size(); i++) {
            JsonNode p = tools.get(i).path("function").get("parameters");
            if (p == null || p.isNull()) continue;
            try {
                SchemaCompiler.compile(p);
            } catch (UnsupportedSchemaException e) {
                if (e.invalid()) throw schemaError(toolField(tools, i), e);
            }
        }
    }

    /** The request field of tool i's parameters ({@code tools} where the tool is not known). */
    private static String toolField(JsonNode tools, int i) {
        return (i >= 0 ? "tools[" + i + "]" : "tools") + ".function.parameters";
    }

    /**
     * What the content is held to: its grammar (null for free content) and the field a problem of its schema is named by
     * (null where there is no schema).
     */
    private record Content(Grammar grammar, String schemaField) {}

    /**
     * What the content is held to, decided here for chat and /v1/completions alike: vLLM's constraint fields
     * ({@link #outputConstraints}) or a response_format json_object / json_schema, at most one of them (two are a 400
     * naming both), and none beside a forced tool call (a 400: the call is the whole answer). A json_schema without
     * strict true is held to where this server can, as vLLM holds it: as the one constraint, with keywords constrained
     * decoding supports ({@link #softSchema}); otherwise it is not enforced, as OpenAI reads strict false, and the log
     * says so. Its schema is checked all the same (missing, or satisfied by no value: a 400).
     * @param b        the request body
     * @param rf       the request's response_format, its shape checked ({@link ChatOptions#checkResponseFormat}), or null
     * @param forced   the forced tool call as a refusal names it ({@code tool_choice "required"}), or null for none
     * @param rendered whether the chat template also writes the response_format into the prompt (chat): where it does
     *                 not (/v1/completions, whose prompt is the client's own) an unenforced schema reaches nothing
     * @param notes    gets what is worth an INFO line (an unenforced schema), which the caller logs with the request's id
     */
    private static Content content(JsonNode b, JsonNode rf, String forced, boolean rendered, List<String> notes) {
        // vLLM's constraint fields: checked, and held to one constraint per request, before anything is compiled
        Asking asking = outputConstraints(b, rf, notes);
        List<Asked> asked = asking.asked();
        boolean compact = asking.compact();
        boolean schema = rf != null && "json_schema".equals(rf.path("type").asText());
        boolean soft = schema && !bool(rf.get("json_schema"), "strict", "response_format.json_schema.strict", false);
        // checked wherever it is sent (a schema missing or no value satisfies is a 400), held to only as the one constraint
        Grammar softContent = soft ? softSchema(rf, rendered, compact, notes) : null;
        String other = forced != null ? "a forced tool call (" + forced + ")" : !asked.isEmpty() ? asked.getFirst().field() : null;
        if (softContent != null && other != null) {
            notes.add("response_format json_schema without strict true is not enforced beside " + other + ", which holds the"
                    + " output" + unenforced(rendered) + " (with strict true the two are refused)");
            softContent = null;
        }
        boolean rfEnforced = rf != null && constrains(rf) && (!soft || softContent != null);
        oneConstraint(asked, rfEnforced ? "response_format (" + rf.path("type").asText() + ")" : null);
        // an enforced response_format as vLLM's fields: the answer cannot be both the call and content held to a format
        String enforced = !asked.isEmpty() ? asked.getFirst().field() : rfEnforced ? "response_format" : null;
        if (forced != null && enforced != null)
            throw ApiException.badField(enforced, "cannot be combined with a forced tool call (" + forced + "), which is"
                    + " the whole answer; with tool_choice \"auto\" the content is held to it and the model may still call a tool");
        Grammar content = forced != null ? null : !asked.isEmpty() ? compile(asked.getFirst(), compact) : !rfEnforced ? null
                : softContent != null ? softContent : contentGrammar(rf, compact);
        return new Content(content, !asked.isEmpty() ? asked.getFirst().field() : schema ? "response_format.json_schema.schema" : null);
    }

    /** Where an unenforced response_format still reaches the model, for the log: the prompt, or nowhere. */
    private static String unenforced(boolean rendered) {
        return rendered ? "; it is only described in the prompt" : "; /v1/completions writes no response_format into its prompt";
    }

    /**
     * The grammar of a response_format that constrains the content (json_object, json_schema), else null; a schema this
     * server cannot enforce is refused, naming the keyword (a json_schema without strict true takes {@link #softSchema}
     * first, which describes such a schema in the prompt instead).
     */
    private static Grammar contentGrammar(JsonNode rf, boolean compact) {
        switch (rf.path("type").asText()) {
            case "json_object" -> {
                return Grammar.jsonObject(compact);
            }
            case "json_schema" -> {
                JsonNode js = rf.get("json_schema");
                // checked as a boolean wherever it is sent, though it changes nothing here
                bool(js, "strict", "response_format.json_schema.strict", false);
                JsonNode schema = js.get("schema");
                if (schema == null || schema.isNull())
                    throw ApiException.badField("response_format.json_schema.schema", "is required: the answer is held to it"
                            + " (a JSON Schema object; {\"type\": \"json_object\"} asks for any JSON object)");
                try {
                    return Grammar.jsonSchema(schema, compact);
                } catch (UnsupportedSchemaException e) {
                    throw schemaError("response_format.json_schema.schema", e);
                }
            }
            default -> {
                return null;
            }
        }
    }

    /**
     * The grammar of a json_schema response_format without strict true, or null where its schema uses a keyword that
     * constrained decoding does not support: then the schema is not enforced, as OpenAI reads strict false, and a note
     * says so (strict true refuses it with a 400 naming the keyword). A schema no value satisfies, or none at all, is
     * refused as with strict true.
     * @param rendered whether the response_format is written into the prompt (chat), for the note
     * @param notes    gets the note's text, which the caller logs with the request's id (not known yet here)
     */
    private static Grammar softSchema(JsonNode rf, boolean rendered, boolean compact, List<String> notes) {
        JsonNode schema = rf.get("json_schema").get("schema");
        if (schema == null || schema.isNull()) return contentGrammar(rf, compact); // refused there, naming the field
        try {
            return Grammar.jsonSchema(schema, compact);
        } catch (UnsupportedSchemaException e) {
            if (e.invalid()) throw schemaError("response_format.json_schema.schema", e);
            // worded so that it is not read as "a schema without strict true is never enforced": one of supported
            // keywords is (the README's structured outputs)
            notes.add("response_format json_schema is not enforced: its schema uses what constrained decoding does not"
                    + " support, so strict false leaves it unenforced" + unenforced(rendered) + ": response_format.json_schema.schema"
                    + dotted(e.path()) + ": " + e.problem() + " (a schema of supported keywords is enforced without strict"
                    + " true too; with strict true this one is refused)");
            return null;
        }
    }

    /** Whether a response_format constrains the content (json_object or json_schema; text does not). */
    private static boolean constrains(JsonNode rf) {
        String type = rf.path("type").asText();
        return type.equals("json_object") || type.equals("json_schema");
    }

    /**
     * One of vLLM's output constraints as the request gives it: the field's path as the client wrote it, what it asks
     * for ({@code regex}, {@code choice}, {@code json}, {@code json_object}, {@code grammar}) and its value, type-checked.
     */
    private record Asked(String field, String kind, JsonNode value) {}

    /** The keys of {@code structured_outputs} that constrain the output. */
    private static final List<String> CONSTRAINT_KEYS = List.of("regex", "choice", "json", "json_object", "grammar");

    /**
     * vLLM's output constraints, checked, in the order given: {@code structured_outputs} ({@code regex}, {@code choice},
     * {@code json}, {@code json_object}: true, {@code grammar}), the older top-level {@code guided_regex},
     * {@code guided_choice}, {@code guided_grammar} and {@code guided_json}, and llama.cpp's top-level {@code grammar}.
     * Every key of structured_outputs is judged here (a null one is not given): vLLM's tuning flags that this server
     * satisfies anyway are accepted, its other constraint kinds and unknown keys are a 400 naming them, since a
     * constraint silently not enforced would let through an output the client means to exclude.
     * @param rf    the request's response_format (null for none), which may constrain the output instead
     * @param notes gets a note where structured_outputs is given but asks for no constraint ({@code {}}, or
     *              {@code json_object: false} alone) and no other field constrains the output, which the caller logs:
     *              the output is then free
     * @throws ApiException 400 naming the field for a wrong type or a key this server does not take
     */
    private static Asking outputConstraints(JsonNode body, JsonNode rf, List<String> notes) {
        List<Asked> out = new ArrayList<>();
        boolean compact = false;
        JsonNode so = body.get("structured_outputs");
        if (so != null && !so.isNull()) {
            if (!so.isObject())
                throw ApiException.badField("structured_outputs", "must be an object such as {\"regex\": \"...\"} or"
                        + " {\"choice\": [\"...\", ...]}, got " + describe(so));
            for (var e : so.properties()) {
                String key = e.getKey(), path = "structured_outputs." + key;
                JsonNode v = e.getValue();
                if (v.isNull()) continue;
                switch (key) {
                    case "regex", "choice", "grammar" -> out.add(new Asked(path, key, checked(key, path, v)));
                    case "json" -> out.add(new Asked(path, key, checked(key, path, v)));
                    case "json_object" -> {
                        if (bool(so, key, path, false)) out.add(new Asked(path, key, v));
                    }
                    // a backend choice (this server has one engine and nothing to fall back to), and a flag its JSON
                    // output keeps anyway (only a schema's declared properties are produced)
                    case "disable_fallback", "disable_additional_properties" -> bool(so, key, path, false);
                    // JSON's whitespace only: a regex, choice or grammar decides its own
                    case "disable_any_whitespace" -> compact = bool(so, key, path, false);
                    case "structural_tag", "whitespace_pattern" -> throw ApiException.badField(path,
                            "is not supported by this server; structured_outputs takes regex, choice, json, json_object or grammar");
                    default -> {
                        String near = key.length() > 64 ? null : io.ds4j.server.config.ServerConfig.closest(key, CONSTRAINT_KEYS);
                        throw ApiException.badField(path, "is not a structured_outputs field" + (near != null
                                ? " (did you mean structured_outputs." + near + "?)" : "") + "; it takes regex, choice, json, json_object or grammar");
                    }
                }
            }
        }
        for (String kind : List.of("regex", "choice", "grammar")) {
            String field = "guided_" + kind;
            JsonNode v = body.get(field);
            if (v != null && !v.isNull()) out.add(new Asked(field, kind, checked(kind, field, v)));
        }
        // llama.cpp's name for the same EBNF (GBNF) grammar
        JsonNode gbnf = body.get("grammar");
        if (gbnf != null && !gbnf.isNull()) out.add(new Asked("grammar", "grammar", checked("grammar", "grammar", gbnf)));
        // vLLM's older guided_json is structured_outputs.json; its other guided_ kinds this server cannot enforce, and a
        // constraint silently dropped would let through what the client means to exclude
        JsonNode gj = body.get("guided_json");
        if (gj != null && !gj.isNull()) out.add(new Asked("guided_json", "json", checked("json", "guided_json", gj)));
        // a structured_outputs that asks for nothing, in a request that no other field constrains either (guided_*,
        // grammar, a JSON response_format, whose JSON disable_any_whitespace alone still makes compact)
        if (so != null && so.isObject() && out.isEmpty() && (rf == null || !constrains(rf)))
            notes.add("structured_outputs " + (so.isEmpty() ? "is empty" : "asks for no constraint") + ": the output is"
                    + " not constrained");
        JsonNode gw = body.get("guided_whitespace_pattern");
        if (gw != null && !gw.isNull())
            throw ApiException.badField("guided_whitespace_pattern", "is not supported by this server; it takes guided_regex,"
                    + " guided_choice, guided_json, guided_grammar or structured_outputs");
        return new Asking(out, compact);
    }

    /**
     * The output constraints a request asks for with vLLM's fields, in the order given, and whether its JSON output is
     * to have no whitespace between its tokens ({@code structured_outputs.disable_any_whitespace}), whichever field asks
     * for the JSON (these or response_format).
     */
    private record Asking(List<Asked> asked, boolean compact) {}

    /**
     * A regex or an EBNF grammar (a string), a choice (a non-empty array of strings, empty strings included: the output may be one) or a
     * JSON schema (an object, or true / false) as the field gives it.
     * @throws ApiException 400 naming the field, or the element of a choice, that has the wrong type
     */
    private static JsonNode checked(String kind, String path, JsonNode v) {
        if (kind.equals("json")) {
            if (!v.isObject() && !v.isBoolean()) throw ApiException.badField(path, "must be a JSON schema (an object), got " + describe(v));
            return v;
        }
        if (kind.equals("regex")) {
            if (!v.isTextual()) throw ApiException.badField(path, "must be a string (a regular expression), got " + describe(v));
            return v;
        }
        if (kind.equals("grammar")) {
            if (!v.isTextual()) throw ApiException.badField(path, "must be a string (an EBNF grammar with a rule root ::= ...), got " + describe(v));
            return v;
        }
        if (!v.isArray() || v.isEmpty())
            throw ApiException.badField(path, "must be a non-empty array of strings, got " + (v.isArray() ? "an empty array" : describe(v)));
        for (int i = 0; i < v.size(); i++)
            if (!v.get(i).isTextual()) throw ApiException.badField(path + "[" + i + "]", "must be a string, got " + describe(v.get(i)));
        return v;
    }

    /**
     * Refuses more than one output constraint: two of vLLM's fields (its two spellings of one included), or one beside
     * {@code other} (a constraining response_format, described so; null for none). Each holds the whole output, so
     * two can only disagree.
     * @throws ApiException 400 naming both fields
     */
    private static void oneConstraint(List<Asked> asked, String other) {
        if (asked.isEmpty()) return;
        String first = other != null ? other : asked.getFirst().field();
        Asked second = other != null ? asked.getFirst() : asked.size() > 1 ? asked.get(1) : null;
        if (second != null)
            throw ApiException.badField(second.field(), "cannot be combined with " + first + ": a request takes one output"
                    + " constraint, and each holds the whole output");
    }

    /**
     * The grammar of one of vLLM's constraints.
     * @throws ApiException 400 naming the field for a pattern or schema the constraint engine cannot enforce
     */
    private static Grammar compile(Asked a, boolean compact) {
        switch (a.kind()) {
            case "regex" -> {
                try {
                    return Grammar.regex(a.value().textValue());
                } catch (UnsupportedRegexException e) {
                    throw ApiException.badField(a.field(), e.getMessage());
                }
            }
            case "grammar" -> {
                try {
                    return Grammar.ebnf(a.value().textValue());
                } catch (UnsupportedGrammarException e) {
                    throw ApiException.badField(a.field(), e.getMessage());
                }
            }
            case "choice" -> {
                List<String> options = new ArrayList<>(a.value().size());
                for (JsonNode o : a.value()) options.add(o.textValue());
                return Grammar.choice(options);
            }
            case "json" -> {
                try {
                    return Grammar.jsonSchema(a.value(), compact);
                } catch (UnsupportedSchemaException e) {
                    throw schemaError(a.field(), e);
                }
            }
            default -> {
                return Grammar.jsonObject(compact);
            }
        }
    }

    /**
     * The 400 for a schema the engine cannot enforce: code {@code invalid_schema} where the schema itself is wrong (a
     * dangling {@code $ref}, a keyword's value of the wrong kind, no value satisfies it), else
     * {@code unsupported_schema_keyword} (outside the supported subset). {@code param} is the schema's field extended to
     * the node that holds the keyword, written as every other error's param is
     * ({@code tools[0].function.parameters.properties.x}), and the message says the location once, in that form, and
     * names the keyword.
     */
    static ApiException schemaError(String field, UnsupportedSchemaException e) {
        String param = field + dotted(e.path());
        return new ApiException(400, "invalid_request_error", e.invalid() ? "invalid_schema" : "unsupported_schema_keyword",
                param, param + ": " + e.problem(), null);
    }

    /** The schema keywords that hold a list of schemas: an index after one is written in brackets ({@link #dotted}). */
    private static final java.util.Set<String> INDEXED = java.util.Set.of("anyOf", "oneOf", "allOf", "prefixItems", "items");

    /** A JSON pointer inside a schema as a field path: {@code /properties/x/anyOf/0} → {@code .properties.x.anyOf[0]}. */
    static String dotted(String pointer) {
        String p = pointer.startsWith("#") ? pointer.substring(1) : pointer;
        if (p.startsWith("/")) p = p.substring(1);
        if (p.isEmpty()) return "";
        StringBuilder out = new StringBuilder();
        String previous = "";
        for (String raw : p.split("/", -1)) {
            String seg = raw.replace("~1", "/").replace("~0", "~");
            if (seg.matches("\\d+") && INDEXED.contains(previous))
                out.append('[').append(seg).append(']');
            else if (seg.matches("[A-Za-z0-9_$-]+")) out.append('.').append(seg);
            else out.append('[').append(Json.write(com.fasterxml.jackson.databind.node.TextNode.valueOf(seg))).append(']');
            previous = seg;
        }
        return out.toString();
    }

    // ------------------------------------------------------------------------------------------------ field readers

    static boolean present(JsonNode b, String f) {
        JsonNode v = b.get(f);
        return v != null && !v.isNull();
    }

    /**
     * An integer field in [lo, hi], or null when absent: a JSON number with an integral value however written (1000,
     * 1e3, 1000.0). The field's range is decided here alone: a value outside it, beyond the int range or beyond the
     * double range (which JSON's 1e400 is) included, is refused with one message giving the range.
     * @param note said after the range, such as " (0 or -1 = off)"; "" for nothing
     */
    static Integer integer(JsonNode b, String f, int lo, int hi, String note) {
        return integer(b, f, f, lo, hi, note);
    }

    /** {@link #integer(JsonNode, String, int, int, String)} of a nested field, named by its path in errors. */
    static Integer integer(JsonNode b, String f, String path, int lo, int hi, String note) {
        JsonNode v = b.get(f);
        if (v == null || v.isNull()) return null;
        boolean overflowed = beyondDouble(v);
        if (!overflowed && !Json.isIntegral(v)) throw ApiException.badField(path, "must be an integer, got " + describe(v));
        if (overflowed || !v.canConvertToInt() || v.intValue() < lo || v.intValue() > hi)
            throw ApiException.badField(path, "is out of range: give an integer in [" + lo + ", " + hi + "]" + note + ", got " + shown(v));
        return v.intValue();
    }

    /** A JSON number past the double range (1e400 parses to an infinity): an integer too large, not a fraction. */
    static boolean beyondDouble(JsonNode v) {
        return v.isNumber() && !Double.isFinite(v.doubleValue());
    }

    /**
     * The OpenAI platform fields this server accepts and does not use ({@code RequestFields.ACCEPTED}) still have
     * OpenAI's types: a client sending a number as {@code user} has a bug that OpenAI's API would report, and so does
     * this one.
     * @throws ApiException 400 naming the field
     */
    private static void platformFields(JsonNode body) {
        for (String f : List.of("user", "safety_identifier", "service_tier", "prompt_cache_key")) optString(body, f, f);
        optBool(body, "store", "store");
        JsonNode metadata = body.get("metadata");
        if (metadata == null || metadata.isNull()) return;
        if (!metadata.isObject())
            throw ApiException.badField("metadata", "must be an object of string values, got " + describe(metadata));
        for (var e : metadata.properties())
            if (!e.getValue().isTextual())
                throw ApiException.badField("metadata." + e.getKey(), "must be a string, got " + describe(e.getValue()));
    }

    /**
     * {@code n}, the choices to generate (default 1), within [1, {@link #MAX_N}] and within what the server can admit at
     * once: the choices are admitted together, each as one request against limits.maxActive and limits.maxQueue, so
     * more than both hold together could never be admitted and would get a 429 forever; that is the client's request,
     * a 400. Completions' {@code best_of} is accepted only equal to n: this server returns every choice it generates and
     * ranks none, so a best_of larger than n would pay for choices nobody sees.
     * @throws ApiException 400 naming {@code n} or {@code best_of}
     */
    private static int choices(JsonNode body, boolean chat, ServerConfig cfg) {
        Integer given = integer(body, "n", 1, MAX_N, "");
        int n = given == null ? 1 : given;
        int most = cfg.maxActive() + cfg.maxQueue();
        if (n > most)
            throw ApiException.badField("n", "this server admits at most " + most + (most == 1 ? " request" : " requests") + " at once (limits.maxActive "
                    + cfg.maxActive() + " running, limits.maxQueue " + cfg.maxQueue() + " waiting) and the " + n
                    + " choices are admitted together, each as one request; ask for at most " + most + ", got " + shown(body.get("n")));
        if (!chat) {
            Integer bestOf = integer(body, "best_of", 1, MAX_N, "");
            if (bestOf != null && bestOf != n)
                throw ApiException.badField("best_of", "must equal n (" + n + "): this server returns every choice it"
                        + " generates and does not rank them, got " + shown(body.get("best_of")));
        }
        return n;
    }

    /** The int value of an integral JSON number in int range, else null. */
    static Integer intValue(JsonNode v) {
        return v != null && Json.isIntegral(v) && v.canConvertToInt() ? v.intValue() : null;
    }

    static Double number(JsonNode b, String f) {
        JsonNode v = b.get(f);
        if (v == null || v.isNull()) return null;
        if (!v.isNumber()) throw ApiException.badField(f, "must be a number, got " + describe(v));
        return v.doubleValue();
    }

    static boolean bool(JsonNode b, String f, boolean def) {
        return bool(b, f, f, def);
    }

    static boolean bool(JsonNode b, String f, String path, boolean def) {
        Boolean v = optBool(b, f, path);
        return v == null ? def : v;
    }

    static Boolean optBool(JsonNode b, String f, String path) {
        JsonNode v = b.get(f);
        if (v == null || v.isNull()) return null;
        if (!v.isBoolean()) throw ApiException.badField(path, "must be true or false, got " + describe(v));
        return v.booleanValue();
    }

    static String optString(JsonNode b, String f, String path) {
        JsonNode v = b.get(f);
        if (v == null || v.isNull()) return null;
        if (!v.isTextual()) throw ApiException.badField(path, "must be a string, got " + describe(v));
        return v.textValue();
    }

    private static double orDefault(Double v, double d) {
        return v == null ? d : v;
    }

    /** {@link #describe}, and "nothing" for a field not given (absent or null), as the translated APIs word it. */
    static String what(JsonNode v) {
        return v == null || v.isNull() ? "nothing" : describe(v);
    }

    /**
     * What a value is, for a message about a wrong type: "a string" ("an empty string" for "", which a message asking
     * for a non-empty string would otherwise contradict), ..., or a number itself ({@link #shown}).
     */
    static String describe(JsonNode v) {
        if (v.isTextual()) return v.textValue().isEmpty() ? "an empty string" : "a string";
        if (v.isArray()) return "an array";
        if (v.isObject()) return "an object";
        if (v.isBoolean()) return "a boolean";
        return shown(v);
    }

    /**
     * A value as a message shows it: a number as the client wrote it ({@code 1E10}, {@code 0.50}, {@code -0},
     * {@code 1e-400}; not as Java or a double would, {@code 1.0E10} or {@code 0}, see {@link Json#written}), anything
     * else as JSON.
     */
    static String shown(JsonNode v) {
        String w = Json.written(v);
        if (w != null) return w;
        if (v.isIntegralNumber()) return v.bigIntegerValue().toString();
        if (v.isNumber()) return io.ds4j.sampling.SamplingParams.plain(v.doubleValue());
        return v.toString();
    }
}
