package io.ds4j.server;

import io.ds4j.sampling.SamplingParams;

/**
 * One generation request as the HTTP side hands it to the engine over the event bus (by reference, see
 * {@link LocalCodec}). Immutable except for the cancel flag, which the HTTP side sets when the client goes away and
 * the engine reads at every step boundary.
 *
 * @param id          request id (also the chunk id clients see)
 * @param chat        true for chat (output goes through the DeepSeek-V4 output parser), false for plain completions
 * @param thinking    the output starts inside the reasoning (thinking mode, unless it continues a message with content)
 * @param prompt      prompt token ids
 * @param params      validated sampling settings (max_tokens already fits the context)
 * @param specQ       "0" (no speculation), "auto" or "1".."8"
 * @param maxContext  context limit this request was admitted under (prompt + generated)
 * @param arrivalNanos {@code System.nanoTime()} when the HTTP request arrived (TTFT and queue time start here)
 * @param address     event-bus address the engine sends this request's {@link EngineEvent}s to
 * @param skipSpecialTokens leave control tokens out of the text (the default; vLLM's {@code skip_special_tokens})
 * @param promptLogprobs score the prompt: -1 = no, else the alternatives to list per prompt token (0..20)
 */
public final class EngineRequest {
    final String id;
    final boolean chat;
    final boolean thinking;
    final int[] prompt;
    final SamplingParams params;
    final String specQ;
    final int maxContext;
    final long arrivalNanos;
    final String address;
    final boolean skipSpecialTokens;
    final int promptLogprobs;
    private volatile boolean cancelled;
    private volatile String cancelReason = "the client went away";
    /** Whether the prompt may resume from, and feed, the prefix cache (request field {@code cache_prompt}). */
    boolean cachePrompt = true;
    /** Constrained decoding's grammar, or null (set before submission). */
    io.ds4j.grammar.Grammar grammar;
    /** The tokenised predicted output (request field {@code prediction}), or null. */
    int[] prediction;
    /** Reasoning tokens allowed before the reasoning is ended for the answer (request field {@code thinking_token_budget}); -1 = no cap. */
    int reasoningBudget = -1;
    /** Token ids whose generation ends the answer (request field {@code stop_token_ids}); empty for none. */
    int[] stopTokenIds = new int[0];
    /** Keep the text of the stop string or stop token that ended the answer (request field {@code include_stop_str_in_output}). */
    boolean includeStopStr;
    /** Tokens generated before the answer may end (vLLM's {@code min_tokens}); 0 = none. */
    int minTokens;
    /**
     * The field the client gave max_tokens in ({@code max_tokens} or {@code max_completion_tokens}), or null where the
     * server's default applies: a refusal names what the client sent, never a value it did not.
     */
    String maxTokensField;
    /**
     * The client's own id for the request (its {@code X-Request-Id} header), or null where it sent none: the engine's
     * log lines name it beside {@link #id}, so that a client's id finds the request's lines.
     */
    String clientId;

    public EngineRequest(String id, boolean chat, boolean thinking, int[] prompt, SamplingParams params, String specQ,
                         int maxContext, long arrivalNanos, String address) {
        this(id, chat, thinking, prompt, params, specQ, maxContext, arrivalNanos, address, true, -1);
    }

    public EngineRequest(String id, boolean chat, boolean thinking, int[] prompt, SamplingParams params, String specQ,
                         int maxContext, long arrivalNanos, String address, boolean skipSpecialTokens, int promptLogprobs) {
        this.skipSpecialTokens = skipSpecialTokens;
        this.promptLogprobs = promptLogprobs;
        this.id = id;
        this.chat = chat;
        this.thinking = thinking;
        this.prompt = prompt;
        this.params = params;
        this.specQ = specQ;
        this.maxContext = maxContext;
        this.arrivalNanos = arrivalNanos;
        this.address = address;
    }

    /**
     * Sets {@code cache_prompt}: false makes the request prefill its whole prompt and leave no snapshot behind.
     * @return this
     */
    public EngineRequest cachePrompt(boolean on) {
        cachePrompt = on;
        return this;
    }

    /**
     * Names the field the client gave max_tokens in; null (the default) for the server's default.
     * @return this
     */
    public EngineRequest maxTokensField(String field) {
        maxTokensField = field;
        return this;
    }

    /**
     * Names the client's own id for the request ({@code X-Request-Id}), or null for none.
     * @return this
     */
    public EngineRequest clientId(String id) {
        clientId = id;
        return this;
    }

    /**
     * The request as the engine's log lines name it: its id, and the client's {@code X-Request-Id} after it where the
     * client sent one ({@code chatcmpl-... (X-Request-Id job-7)}).
     */
    String named() {
        return named(id, clientId);
    }

    /**
     * A generation as log lines name it, the engine's and the HTTP front's alike (so that grepping either id finds
     * every line): {@code id}, and the client's {@code X-Request-Id} after it where one was sent
     * ({@code chatcmpl-... (X-Request-Id job-7)}).
     * @param clientId the client's own id, or null for none
     */
    static String named(String id, String clientId) {
        return clientId == null || clientId.equals(id) ? id : id + " (X-Request-Id " + clientId + ")";
    }

    /** Constrains the output to a grammar (call before submitting). */
    public EngineRequest constrain(io.ds4j.grammar.Grammar g) {
        this.grammar = g;
        return this;
    }

    /**
     * Gives the request a predicted output (its tokens, plain text), proposed as drafts; null for none.
     * @return this
     */
    public EngineRequest predict(int[] tokens) {
        this.prediction = tokens;
        return this;
    }

    /**
     * Ends the answer with finish reason "stop" when it generates one of these token ids (null for none), and says
     * whether the text of what ended it, a stop string or such a token, is kept at the end of the output.
     * @return this
     */
    public EngineRequest stopTokens(int[] ids, boolean includeStopStr) {
        this.stopTokenIds = ids == null ? new int[0] : ids;
        this.includeStopStr = includeStopStr;
        return this;
    }

    /**
     * Holds the end back until n tokens are generated (vLLM's {@code min_tokens}): the end-of-sentence token and the
     * stop token ids cannot be generated before, and no stop string ends the answer in the text of those n tokens.
     * @return this
     */
    public EngineRequest minTokens(int n) {
        this.minTokens = n;
        return this;
    }

    /**
     * Caps the answer's reasoning at that many tokens (null for no cap); it applies where the output starts inside the
     * reasoning ({@link #thinking}).
     * @return this
     */
    public EngineRequest limitReasoning(Integer tokens) {
        this.reasoningBudget = tokens == null ? -1 : tokens;
        return this;
    }

    /**
     * Choice {@code index} of a request asking for several ({@code n}): this request's prompt and settings under its
     * own id (and so its own event-bus address), with the seed {@code seed + index} where a seed was given (so choice 0
     * samples as the request with n = 1 does, and a seeded request is reproducible choice by choice; the sum wraps
     * past 2^63 - 1), else a random one of its own.
     * @param id the choice's request id
     */
    EngineRequest choice(int index, String id) {
        Long seed = params.seed() == null ? null : params.seed() + index;
        EngineRequest c = new EngineRequest(id, chat, thinking, prompt, params.withSeed(seed), specQ, maxContext, arrivalNanos,
                "ds4j.out." + id, skipSpecialTokens, promptLogprobs);
        c.cachePrompt = cachePrompt;
        c.grammar = grammar;
        c.prediction = prediction;
        c.reasoningBudget = reasoningBudget;
        c.stopTokenIds = stopTokenIds;
        c.includeStopStr = includeStopStr;
        c.minTokens = minTokens;
        c.maxTokensField = maxTokensField;
        c.clientId = clientId;
        return c;
    }

    /**
     * The choices of one request asking for several ({@code n} > 1), submitted to the engine as one message: it admits
     * them all (running or queued) or refuses them all, so a client never gets part of its choices.
     * @param choices the choices in index order, at least two
     */
    record Group(java.util.List<EngineRequest> choices) {}

    /** Asks the engine to stop this request at its next step boundary (thread-safe). */
    public void cancel() {
        cancelled = true;
    }

    /**
     * {@link #cancel()}, saying why for the engine's log line (e.g. "the client stopped reading its stream").
     * @param reason a short clause, lower case
     */
    public void cancel(String reason) {
        cancelReason = reason;
        cancelled = true;
    }

    /** Why the request was cancelled ({@link #cancel(String)}; "the client went away" by default). */
    public String cancelReason() {
        return cancelReason;
    }

    public boolean cancelled() {
        return cancelled;
    }

    public String id() {
        return id;
    }

    /** Tokens of sequence state this request may need: prompt plus everything it may generate. */
    int reserveTokens() {
        return (int) Math.min(maxContext, (long) prompt.length + params.maxTokens());
    }
}
