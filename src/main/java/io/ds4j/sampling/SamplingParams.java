package io.ds4j.sampling;

import io.ds4j.json.JsonNumbers;

import java.util.List;
import java.util.Map;

/**
 * Per-request sampling settings (OpenAI / llama.cpp semantics). {@link #validate} rejects values outside their
 * range with a message naming the parameter and the valid range.
 *
 * @param temperature  0 = greedy; valid [0, 2]
 * @param topK         keep the k most likely tokens; 0 = off; valid [0, V]
 * @param topP         nucleus mass; 1 = off; valid (0, 1]
 * @param minP         drop tokens below minP · p_max; 0 = off; valid [0, 1]
 * @param seed         RNG seed; null = a random seed per request
 * @param presencePenalty  subtracted once from every token already generated; valid [-2, 2]
 * @param frequencyPenalty subtracted per occurrence in the generated tokens; valid [-2, 2]
 * @param repetitionPenalty HF-style: positive logits of tokens in prompt or output divided by it, negative ones
 *                         multiplied; 1 = off; valid (0, 10]
 * @param logitBias    token id → bias added to its logit; each bias in [-100, 100]
 * @param maxTokens    generated-token limit; valid ≥ 0 (0: prefill only, e.g. to score a prompt)
 * @param stop         stop strings (at most 16, none empty); never part of the output
 * @param logprobs     return the chosen token's log-probability
 * @param topLogprobs  also return that many alternatives; valid [0, 20]
 * @param ignoreEos    keep generating after the end-of-sequence token
 */
public record SamplingParams(double temperature, int topK, double topP, double minP, Long seed,
                             double presencePenalty, double frequencyPenalty, double repetitionPenalty,
                             Map<Integer, Float> logitBias, int maxTokens, List<String> stop,
                             boolean logprobs, int topLogprobs, boolean ignoreEos) {

    /** Greedy decoding, no penalties, at most maxTokens tokens. */
    public static SamplingParams greedy(int maxTokens) {
        return new SamplingParams(0, 0, 1, 0, null, 0, 0, 1, Map.of(), maxTokens, List.of(), false, 0, false);
    }

    /** Temperature sampling with a fixed seed. */
    public static SamplingParams sampled(double temperature, int topK, double topP, double minP, long seed, int maxTokens) {
        return new SamplingParams(temperature, topK, topP, minP, seed, 0, 0, 1, Map.of(), maxTokens, List.of(), false, 0, false);
    }

    /** A copy with different penalties. */
    public SamplingParams withPenalties(double presence, double frequency, double repetition) {
        return new SamplingParams(temperature, topK, topP, minP, seed, presence, frequency, repetition, logitBias, maxTokens,
                stop, logprobs, topLogprobs, ignoreEos);
    }

    /** A copy with a different token limit. */
    public SamplingParams withMaxTokens(int n) {
        return new SamplingParams(temperature, topK, topP, minP, seed, presencePenalty, frequencyPenalty, repetitionPenalty,
                logitBias, n, stop, logprobs, topLogprobs, ignoreEos);
    }

    /** A copy with a different seed (null: a random seed per request). */
    public SamplingParams withSeed(Long s) {
        return new SamplingParams(temperature, topK, topP, minP, s, presencePenalty, frequencyPenalty, repetitionPenalty,
                logitBias, maxTokens, stop, logprobs, topLogprobs, ignoreEos);
    }

    /** A copy with stop strings. */
    public SamplingParams withStop(List<String> s) {
        return new SamplingParams(temperature, topK, topP, minP, seed, presencePenalty, frequencyPenalty, repetitionPenalty,
                logitBias, maxTokens, s, logprobs, topLogprobs, ignoreEos);
    }

    /** A copy with logit biases. */
    public SamplingParams withLogitBias(Map<Integer, Float> b) {
        return new SamplingParams(temperature, topK, topP, minP, seed, presencePenalty, frequencyPenalty, repetitionPenalty,
                b, maxTokens, stop, logprobs, topLogprobs, ignoreEos);
    }

    /** A copy with logprobs settings. */
    public SamplingParams withLogprobs(boolean on, int top) {
        return new SamplingParams(temperature, topK, topP, minP, seed, presencePenalty, frequencyPenalty, repetitionPenalty,
                logitBias, maxTokens, stop, on, top, ignoreEos);
    }

    /** True when decoding is deterministic argmax (temperature 0). */
    public boolean isGreedy() {
        return temperature == 0;
    }

    /** True when logits need processing beyond temperature (penalties or biases). */
    public boolean hasPenalties() {
        return presencePenalty != 0 || frequencyPenalty != 0 || repetitionPenalty != 1 || (logitBias != null && !logitBias.isEmpty());
    }

    /**
     * Checks every value against its range.
     * @param vocabSize V, for top_k and logit_bias ids
     * @throws IllegalArgumentException naming the parameter, its value and the valid range
     */
    public void validate(int vocabSize) {
        validate(vocabSize, name -> null);
    }

    /**
     * The largest top_k a model takes: the token ids of its tokenizer, the only ids ever sampled. A checkpoint's
     * embedding can have more rows (DeepSeek-V4's 129,280, /props' {@code n_vocab}) than its tokenizer has tokens
     * (128,815); the rows past the tokenizer are never drawn, so a top_k counting them would keep nothing more. The one
     * rule for the API, the configuration's {@code sampling.top_k} and the CLI's {@code --top-k}.
     * @param modelRows     the checkpoint's vocabulary (its embedding's rows)
     * @param tokenizerIds  the tokenizer's vocabulary
     */
    public static int topKMax(int modelRows, int tokenizerIds) {
        return Math.min(modelRows, tokenizerIds);
    }

    /**
     * What a refusal of a top_k says after its range {@code [-1, max]}: {@code " (0 or -1 = off; 128815 is the
     * tokenizer's vocabulary)"}, so that the bound is not read as the model's 129,280 rows that /props shows.
     * @param max {@link #topKMax}
     */
    public static String topKNote(int max) {
        return " (0 or -1 = off; " + max + " is the tokenizer's vocabulary)";
    }

    /**
     * top_k as users give it (the API, the configuration, the CLI): -1 means off, as 0 does (llama.cpp's and vLLM's
     * convention); any other value as is, for {@link #validate} to check.
     */
    public static int topKGiven(int k) {
        return k == -1 ? 0 : k;
    }

    /**
     * Checks every value against its range as the caller says it was written, a request's number as its client wrote
     * it: a range is decided on that number as well as on the double it is held in, so a number past a bound by less
     * than a double can tell ({@code 2.0000000000000000001}, {@code -1e-400}) is refused, and so is one whose double is
     * out of range though the number is not ({@code 1e-400} where 0 is out: the message says so). Messages show the
     * number as written ({@code -0}, {@code 1E10}).
     * @param vocabSize V, for top_k and logit_bias ids
     * @param written   a value's text by its parameter's name ({@code temperature}, ...; {@code logit_bias[ID]} for a
     *                  bias): a JSON number, or null where there is none (the value is then decided and shown by its
     *                  double, {@link #plain}); text that is no JSON number is only shown
     * @throws IllegalArgumentException naming the parameter, its value and the valid range
     */
    public void validate(int vocabSize, java.util.function.Function<String, String> written) {
        range("temperature", temperature, 0, false, 2, written);
        if (topK < 0 || topK > vocabSize) throw bad("top_k", plain(topK), "[0, " + vocabSize + "] (0 = off)");
        range("top_p", topP, 0, true, 1, written);
        range("min_p", minP, 0, false, 1, written);
        range("presence_penalty", presencePenalty, -2, false, 2, written);
        range("frequency_penalty", frequencyPenalty, -2, false, 2, written);
        range("repetition_penalty", repetitionPenalty, 0, true, 10, written);
        if (maxTokens < 0) throw new IllegalArgumentException("max_tokens: must be >= 0, got " + maxTokens);
        if (topLogprobs < 0 || topLogprobs > 20) throw bad("top_logprobs", plain(topLogprobs), "[0, 20]");
        if (logitBias != null) for (var e : logitBias.entrySet()) {
            if (e.getKey() < 0 || e.getKey() >= vocabSize)
                throw new IllegalArgumentException("logit_bias: token id " + e.getKey() + " is outside [0, " + vocabSize + ")");
            String w = written.apply("logit_bias[" + e.getKey() + "]");
            if (!within(e.getValue(), -100, false, 100, w))
                throw new IllegalArgumentException("logit_bias: bias " + shown(e.getValue(), w, -100, false, 100)
                        + " for token " + e.getKey() + " is outside [-100, 100]");
        }
        if (stop != null) {
            if (stop.size() > 16) throw new IllegalArgumentException("stop: at most 16 stop strings, got " + stop.size());
            for (String s : stop) if (s == null || s.isEmpty()) throw new IllegalArgumentException("stop: stop strings must not be empty");
        }
    }

    /** Refuses a value outside [lo, hi], or (lo, hi] where loOpen, by its double and as written. */
    private static void range(String name, double v, double lo, boolean loOpen, double hi,
                              java.util.function.Function<String, String> written) {
        String w = written.apply(name);
        if (!within(v, lo, loOpen, hi, w))
            throw bad(name, shown(v, w, lo, loOpen, hi), (loOpen ? "(" : "[") + plain(lo) + ", " + plain(hi) + "]");
    }

    /** Whether the double and, where given, the number as written are both in range. */
    private static boolean within(double v, double lo, boolean loOpen, double hi, String written) {
        boolean in = (loOpen ? v > lo : v >= lo) && v <= hi;
        java.math.BigDecimal x = written == null ? null : JsonNumbers.exact(written);
        return in && (x == null || exactlyWithin(x, lo, loOpen, hi));
    }

    private static boolean exactlyWithin(java.math.BigDecimal x, double lo, boolean loOpen, double hi) {
        int c = x.compareTo(new java.math.BigDecimal(lo));
        return (loOpen ? c > 0 : c >= 0) && x.compareTo(new java.math.BigDecimal(hi)) <= 0;
    }

    /**
     * A refused value as written, else {@link #plain}; where only its double is out of range, what the double holds
     * too ({@code 1e-400 (0 in double precision)}), as the number itself would pass.
     */
    private static String shown(double v, String written, double lo, boolean loOpen, double hi) {
        if (written == null) return plain(v);
        java.math.BigDecimal x = JsonNumbers.exact(written);
        return x != null && exactlyWithin(x, lo, loOpen, hi) ? written + " (" + plain(v) + " in double precision)" : written;
    }

    /** "name: must be in RANGE, got VALUE", as every field's message starts with its name. */
    private static IllegalArgumentException bad(String name, String v, String range) {
        return new IllegalArgumentException(name + ": must be in " + range + ", got " + v);
    }

    /**
     * A number as a message shows it, close to how a client writes it: an integral value in plain digits ({@code 5},
     * {@code 10000000000}), another in its shortest decimal form with a lower-case exponent where it needs one
     * ({@code 0.5}, {@code 1e-7}, {@code 1e30}) — not Java's {@code 5.0} or {@code 1.0E10}. A number past the double
     * range (a JSON literal like 1e400 parses to an infinity) is said to be so. A negative zero is {@code -0}.
     */
    public static String plain(double v) {
        if (Double.isNaN(v)) return "NaN";
        if (v == 0 && Double.doubleToRawLongBits(v) != 0) return "-0";
        if (Double.isInfinite(v)) return "a number beyond " + (v > 0 ? "" : "-") + "1.8e308 (the largest double)";
        if (v == Math.rint(v) && Math.abs(v) < 1e21) return new java.math.BigDecimal(v).toBigInteger().toString();
        String s = Double.toString(v);
        int e = s.indexOf('E');
        if (e < 0) return s;
        String mantissa = s.substring(0, e);
        if (mantissa.endsWith(".0")) mantissa = mantissa.substring(0, mantissa.length() - 2);
        return mantissa + "e" + s.substring(e + 1);
    }
}
