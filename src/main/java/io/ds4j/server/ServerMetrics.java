package io.ds4j.server;

import io.ds4j.engine.EngineStatus;
import io.ds4j.engine.PrefixCache;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.DistributionSummary;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.Timer;

import java.time.Duration;
import java.util.Arrays;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.ToDoubleFunction;

/**
 * The server's own Prometheus metrics (Vert.x adds its HTTP and event-bus metrics to the same registry). Names are
 * vLLM's, so existing vLLM Grafana dashboards work, plus llama.cpp's names for the counters and gauges llama.cpp
 * users chart; ds4j-only figures use the {@code ds4j:} prefix. As vLLM's, every {@code vllm:} series carries the
 * label {@code model_name} (the served model's id) where the id is known at the start (vLLM's dashboards select
 * their series by it).
 *
 * <ul>
 *   <li>{@code vllm:time_to_first_token_seconds} histogram: arrival → first generated token;</li>
 *   <li>{@code vllm:inter_token_latency_seconds} histogram: one observation per decode step that produced tokens
 *       (time since the request's previous tokens; a speculative step can commit several);</li>
 *   <li>{@code vllm:time_per_output_token_seconds}: the inter-token latency under vLLM's older name (the same
 *       observations), which vLLM's example dashboard charts;</li>
 *   <li>{@code vllm:e2e_request_latency_seconds}, {@code vllm:request_queue_time_seconds} histograms;</li>
 *   <li>per finished request (stop or length; a choice of n is one): {@code vllm:request_prompt_tokens}, {@code vllm:request_generation_tokens},
 *       {@code vllm:request_max_num_generation_tokens} histograms (token counts, vLLM's 1-2-5 buckets), and
 *       {@code vllm:request_prefill_time_seconds} (first step to first token), {@code vllm:request_decode_time_seconds}
 *       (first token to last);</li>
 *   <li>{@code ds4j:stream_delivery_seconds} histogram: a streamed output's engine send → its chunk's completed write
 *       (what the clients' gaps gain beyond the engine's);</li>
 *   <li>{@code vllm:prompt_tokens_total} (counted as prefill processes them), {@code vllm:generation_tokens_total},
 *       {@code vllm:request_success_total{finished_reason}};</li>
 *   <li>{@code vllm:num_requests_running}, {@code vllm:num_requests_waiting} gauges (queue depth);</li>
 *   <li>{@code vllm:kv_cache_usage_perc} and its older name {@code vllm:gpu_cache_usage_perc} gauges: the share (0 to 1)
 *       of the engine's sequence-state capacity that the running requests' sequences hold ({@link #kvCacheUsage});</li>
 *   <li>the engine's batched steps: {@code ds4j:batch_size} histogram (requests per step),
 *       {@code ds4j:batch_tokens} histogram (token rows per step: prefill tokens plus decode/verify rows),
 *       {@code vllm:iteration_tokens} (vLLM's tokens-per-step histogram {@code vllm:iteration_tokens_total}, same
 *       observations as {@code ds4j:batch_tokens}; the Prometheus client reserves the {@code _total} suffix for
 *       counters, so the series are {@code vllm:iteration_tokens_bucket}, {@code _count} and {@code _sum}), {@code ds4j:batch_prefill_tokens_total} and
 *       {@code ds4j:batch_decode_rows_total} counters, and {@code ds4j:engine_steps_total};</li>
 *   <li>the scheduler's prefill limit, in steps where a prompt waited for prefill: {@code ds4j:step_prefill_limit}
 *       histogram (the most prefill tokens the step could take: the token budget, or less while requests decode;
 *       0 in a step that measured the decode rows alone) and {@code ds4j:step_prefill_limit_reason_total{reason}}
 *       (why: no_decodes, off, probe, no_data, floor, stretch, ceiling, layers);</li>
 *   <li>the MTP draft's batched forwards: {@code ds4j:mtp_batch_size} histogram (requests' MTP drafts per batched MTP
 *       step; one step per draft position per engine step);</li>
 *   <li>{@code vllm:spec_decode_num_drafts_total} (verify steps that carried draft tokens),
 *       {@code vllm:spec_decode_num_draft_tokens_total} (offered), {@code vllm:spec_decode_num_accepted_tokens_total};</li>
 *   <li>llama.cpp: {@code llamacpp:prompt_tokens_total}, {@code llamacpp:tokens_predicted_total},
 *       {@code llamacpp:requests_processing}, {@code llamacpp:requests_deferred};</li>
 *   <li>{@code ds4j:requests_rejected_total{reason}}, {@code ds4j:requests_cancelled_total},
 *       {@code ds4j:requests_failed_total};</li>
 *   <li>the backend's effective state once the model is loaded ({@link #engine}): {@code ds4j:engine_state} (1, with
 *       labels {@code backend}, {@code expert_placement}, {@code verify_attention}),
 *       {@code ds4j:verify_f16_kv_requested} and {@code ds4j:verify_f16_kv_active} (0 or 1),
 *       {@code ds4j:verify_f32_short_context_rows}, {@code ds4j:host_experts}, and {@code ds4j:engine_diagnostic}
 *       (1, with the text in label {@code message}) for each requested feature the backend could not honour;</li>
 *   <li>the prefix cache: {@code ds4j:prefix_cache_hits_total} and {@code ds4j:prefix_cache_misses_total} (lookups),
 *       {@code ds4j:prefix_cache_hit_tokens_total} (prompt tokens not prefilled), {@code ds4j:prefix_cache_evictions_total},
 *       {@code ds4j:prefix_cache_snapshots_total} (taken), and gauges {@code ds4j:prefix_cache_bytes},
 *       {@code ds4j:prefix_cache_budget_bytes}, {@code ds4j:prefix_cache_entries} (snapshots held); all 0 when the
 *       cache is off.</li>
 * </ul>
 */
public final class ServerMetrics {
    private static final double[] TTFT_BUCKETS = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
            2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0};
    private static final double[] ITL_BUCKETS = {0.001, 0.005, 0.01, 0.02, 0.025, 0.03, 0.035, 0.04, 0.05, 0.06, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
            0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
    private static final double[] E2E_BUCKETS = {0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
            30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0};

    private final MeterRegistry registry;
    private static final double[] DELIVERY_BUCKETS = {0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0};
    private final Timer ttft, itl, tpot, e2e, queueTime, delivery, requestPrefill, requestDecode;
    private final DistributionSummary requestPrompt, requestGeneration, requestMaxGeneration;
    private final Counter promptTokens, generationTokens, promptTokensLcpp, predictedLcpp;
    private final Counter drafts, draftTokens, acceptedTokens, cancelled, failed;
    private final DistributionSummary batchSize, batchTokens, iterationTokens, mtpBatchSize, prefillLimit;
    private final Counter batchPrefill, batchDecode, engineSteps;
    /** Requests running and waiting, updated by the engine thread. */
    public final AtomicInteger running = new AtomicInteger(), waiting = new AtomicInteger();
    /** The KV-cache usage (0 to 1) the engine thread last published. */
    private volatile double kvCacheUsage;
    /**
     * The KV-cache usage as the scrape of /metrics in progress reports it under both its names ({@link #scrapeStarting}):
     * read once, so that the engine thread's updates between the two gauges' reads cannot give them two values.
     */
    private volatile double kvCacheUsageScraped;
    /** The prefix cache's figures as the engine thread last published them (null: off). */
    private final AtomicReference<PrefixCache.Stats> prefixCache = new AtomicReference<>();

    /** The {@code model_name} label of the {@code vllm:} series (empty: no label). */
    private final Tags model;

    /**
     * @param registry  where the meters are registered
     * @param modelName the served model's id, the {@code model_name} label of the {@code vllm:} series; null: none
     */
    public ServerMetrics(MeterRegistry registry, String modelName) {
        this.registry = registry;
        this.model = modelName == null ? Tags.empty() : Tags.of("model_name", modelName);
        ttft = timer("vllm:time_to_first_token", "Time to first token: request arrival to the first generated token", TTFT_BUCKETS);
        itl = timer("vllm:inter_token_latency", "Time between successive outputs of a request (one per decode step)", ITL_BUCKETS);
        tpot = timer("vllm:time_per_output_token", "The inter-token latency under vLLM's older name (the same observations)", ITL_BUCKETS);
        requestPrefill = timer("vllm:request_prefill_time", "A finished request's first step to its first generated token", E2E_BUCKETS);
        requestDecode = timer("vllm:request_decode_time", "A finished request's first generated token to its last", E2E_BUCKETS);
        requestPrompt = summary("vllm:request_prompt_tokens", "Prompt tokens of a finished request", null, REQUEST_TOKEN_BUCKETS);
        requestGeneration = summary("vllm:request_generation_tokens", "Generated tokens of a finished request", null, REQUEST_TOKEN_BUCKETS);
        requestMaxGeneration = summary("vllm:request_max_num_generation_tokens", "The most tokens a finished request could "
                + "generate (its max_tokens, else the default, at most the context's room)", null, REQUEST_TOKEN_BUCKETS);
        e2e = timer("vllm:e2e_request_latency", "Request arrival to its last token", E2E_BUCKETS);
        queueTime = timer("vllm:request_queue_time", "Request arrival to its first engine step", E2E_BUCKETS);
        delivery = timer("ds4j:stream_delivery", "A streamed output's way from the engine's step to the socket: the engine's "
                + "send to the completed write of its chunk", DELIVERY_BUCKETS);
        promptTokens = counter("vllm:prompt_tokens", "Prompt tokens processed by prefill");
        generationTokens = counter("vllm:generation_tokens", "Generated tokens");
        promptTokensLcpp = counter("llamacpp:prompt_tokens", "Prompt tokens processed (llama.cpp name)");
        predictedLcpp = counter("llamacpp:tokens_predicted", "Generated tokens (llama.cpp name)");
        drafts = counter("vllm:spec_decode_num_drafts", "Verify steps that carried draft tokens");
        draftTokens = counter("vllm:spec_decode_num_draft_tokens", "Draft tokens offered for verification");
        acceptedTokens = counter("vllm:spec_decode_num_accepted_tokens", "Draft tokens accepted");
        cancelled = counter("ds4j:requests_cancelled", "Requests stopped because the client went away");
        failed = counter("ds4j:requests_failed", "Requests that failed inside the engine");
        batchSize = summary("ds4j:batch_size", "Requests (batch entries) per engine step", null, BATCH_BUCKETS);
        batchTokens = summary("ds4j:batch_tokens", "Token rows per engine step (prefill tokens + decode/verify rows)", null, TOKEN_BUCKETS);
        iterationTokens = summary("vllm:iteration_tokens", "Tokens per engine step (vLLM name)", null, TOKEN_BUCKETS);
        batchPrefill = counter("ds4j:batch_prefill_tokens", "Prefill tokens run in engine steps");
        batchDecode = counter("ds4j:batch_decode_rows", "Decode/verify rows run in engine steps");
        engineSteps = counter("ds4j:engine_steps", "Batched engine steps run");
        prefillLimit = summary("ds4j:step_prefill_limit", "Most prefill tokens the scheduler let a step take, in steps "
                + "where a prompt waited (0: a step that measured the decode rows alone)", null, LIMIT_BUCKETS);
        mtpBatchSize = summary("ds4j:mtp_batch_size", "Requests' MTP drafts per batched MTP step (one per draft position)", null, BATCH_BUCKETS);
        Gauge.builder("vllm:num_requests_running", running, AtomicInteger::get).description("Requests generating")
                .tags(labels("vllm:num_requests_running")).register(registry);
        Gauge.builder("vllm:num_requests_waiting", waiting, AtomicInteger::get).description("Requests waiting for a slot (queue depth)")
                .tags(labels("vllm:num_requests_waiting")).register(registry);
        // vLLM renamed the gauge and its dashboards followed at different times: both names, one value
        for (String name : new String[]{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"})
            Gauge.builder(name, this, m -> m.kvCacheUsageScraped).description("KV-cache usage: the share (0 to 1) of the "
                    + "sequence state the engine can hold that the running requests hold").tags(labels(name)).register(registry);
        Gauge.builder("llamacpp:requests_processing", running, AtomicInteger::get).description("Requests generating (llama.cpp name)").register(registry);
        Gauge.builder("llamacpp:requests_deferred", waiting, AtomicInteger::get).description("Requests waiting (llama.cpp name)").register(registry);
        cacheCounter("ds4j:prefix_cache_hits", "Prompts that resumed from a cached prefix", PrefixCache.Stats::hits);
        cacheCounter("ds4j:prefix_cache_misses", "Prompts that found no cached prefix", PrefixCache.Stats::misses);
        cacheCounter("ds4j:prefix_cache_hit_tokens", "Prompt tokens resumed from the prefix cache instead of prefilled", PrefixCache.Stats::hitTokens);
        cacheCounter("ds4j:prefix_cache_evictions", "Snapshots evicted to stay within prefixCache.budgetMiB", PrefixCache.Stats::evictions);
        cacheCounter("ds4j:prefix_cache_snapshots", "Snapshots taken", PrefixCache.Stats::inserted);
        cacheGauge("ds4j:prefix_cache_bytes", "Bytes the prefix cache's snapshots hold", PrefixCache.Stats::bytes);
        cacheGauge("ds4j:prefix_cache_budget_bytes", "The prefix cache's memory budget", PrefixCache.Stats::budgetBytes);
        cacheGauge("ds4j:prefix_cache_entries", "Snapshots the prefix cache holds", PrefixCache.Stats::snapshots);
    }

    private void cacheCounter(String name, String help, ToDoubleFunction<PrefixCache.Stats> f) {
        FunctionCounter.builder(name, prefixCache, r -> r.get() == null ? 0 : f.applyAsDouble(r.get())).description(help).register(registry);
    }

    private void cacheGauge(String name, String help, ToDoubleFunction<PrefixCache.Stats> f) {
        Gauge.builder(name, prefixCache, r -> r.get() == null ? 0 : f.applyAsDouble(r.get())).description(help).register(registry);
    }

    /**
     * Publishes the KV-cache usage (engine thread): the tokens of state the running requests' sequences hold over the
     * tokens the engine can hold at once. A capacity of 0 or less reads as no usage.
     * @param heldTokens     tokens held by the running requests' sequences
     * @param capacityTokens the most tokens of sequence state the engine holds at once
     */
    void kvCache(long heldTokens, long capacityTokens) {
        kvCacheUsage = capacityTokens <= 0 ? 0 : Math.min(1.0, (double) heldTokens / capacityTokens);
    }

    /** The KV-cache usage last published, 0 to 1 ({@code vllm:kv_cache_usage_perc}). */
    public double kvCacheUsage() {
        return kvCacheUsage;
    }

    /** Called as a scrape of the registry begins: the values that gauges under several names share are read now. */
    public void scrapeStarting() {
        kvCacheUsageScraped = kvCacheUsage;
    }

    /** Publishes the prefix cache's figures (engine thread; null when it is off). */
    void prefixCache(PrefixCache.Stats s) {
        prefixCache.set(s);
    }

    /** The prefix cache's figures last published, or null when it is off. */
    public PrefixCache.Stats prefixCache() {
        return prefixCache.get();
    }

    private Timer timer(String name, String help, double[] buckets) {
        Duration[] slo = Arrays.stream(buckets).mapToObj(s -> Duration.ofNanos((long) (s * 1e9))).toArray(Duration[]::new);
        return Timer.builder(name).description(help).serviceLevelObjectives(slo).tags(labels(name))
                .minimumExpectedValue(slo[0]).maximumExpectedValue(slo[slo.length - 1]).register(registry);
    }

    /** The labels every series of this name carries: {@code model_name} on vLLM's names. */
    private Tags labels(String name) {
        return name.startsWith("vllm:") ? model : Tags.empty();
    }

    private static final double[] BATCH_BUCKETS = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
    private static final double[] LIMIT_BUCKETS = {1, 16, 32, 64, 96, 128, 192, 256, 384, 512, 1024, 2048, 4096};
    /** vLLM's 1-2-5 buckets of per-request token counts, up to V4's context (1,048,576). */
    private static final double[] REQUEST_TOKEN_BUCKETS = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000,
            20000, 50000, 100000, 200000, 500000, 1000000};
    private static final double[] TOKEN_BUCKETS = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};

    private DistributionSummary summary(String name, String help, String unit, double[] buckets) {
        DistributionSummary.Builder b = DistributionSummary.builder(name).description(help).serviceLevelObjectives(buckets)
                .minimumExpectedValue(buckets[0]).maximumExpectedValue(buckets[buckets.length - 1]).tags(labels(name));
        if (unit != null) b.baseUnit(unit);
        return b.register(registry);
    }

    /**
     * One batched engine step ran.
     * @param entries requests in the step
     * @param rows          token rows of the step (prefill tokens + decode/verify rows)
     * @param prefillTokens the step's prefill tokens, a chunk in a layer slice counting as its share of the layers (its
     *                      slices add up to its tokens, so the prefill token counter counts each token once)
     */
    void batch(int entries, double rows, double prefillTokens, int decodeRows) {
        batchSize.record(entries);
        batchTokens.record(rows);
        iterationTokens.record(rows);
        if (prefillTokens > 0) batchPrefill.increment(prefillTokens);
        if (decodeRows > 0) batchDecode.increment(decodeRows);
        engineSteps.increment();
    }

    /** The scheduler's prefill decision of a step where a prompt waited. */
    void prefillBudget(io.ds4j.engine.PrefillBudget.Decision d) {
        prefillLimit.record(d.tokens());
        Counter.builder("ds4j:step_prefill_limit_reason").description("Steps where a prompt waited for prefill, by why "
                        + "the scheduler set its prefill limit").tag("reason", d.reason().label())
                .register(registry).increment();
    }

    /** One batched MTP step of the drafts ran, for this many requests. */
    void mtpStep(int drafts) {
        mtpBatchSize.record(drafts);
    }

    private Counter counter(String name, String help) {
        return Counter.builder(name).description(help).tags(labels(name)).register(registry);
    }

    public MeterRegistry registry() {
        return registry;
    }

    void ttft(long nanos) {
        ttft.record(nanos, TimeUnit.NANOSECONDS);
    }

    void interToken(long nanos) {
        itl.record(nanos, TimeUnit.NANOSECONDS);
        tpot.record(nanos, TimeUnit.NANOSECONDS);
    }

    /**
     * A request finished (stop or length): its per-request histograms, as vLLM's.
     * @param prefillSeconds its first step to its first generated token
     * @param decodeSeconds  its first generated token to its last
     */
    void finished(int promptTokens, int generated, int maxTokens, double prefillSeconds, double decodeSeconds) {
        requestPrompt.record(promptTokens);
        requestGeneration.record(generated);
        requestMaxGeneration.record(maxTokens);
        requestPrefill.record((long) (prefillSeconds * 1e9), TimeUnit.NANOSECONDS);
        requestDecode.record((long) (decodeSeconds * 1e9), TimeUnit.NANOSECONDS);
    }

    void delivery(long nanos) {
        delivery.record(nanos, TimeUnit.NANOSECONDS);
    }

    void e2e(long nanos) {
        e2e.record(nanos, TimeUnit.NANOSECONDS);
    }

    void queueTime(long nanos) {
        queueTime.record(nanos, TimeUnit.NANOSECONDS);
    }

    void promptTokens(int n) {
        if (n <= 0) return;
        promptTokens.increment(n);
        promptTokensLcpp.increment(n);
    }

    void generationTokens(int n) {
        if (n <= 0) return;
        generationTokens.increment(n);
        predictedLcpp.increment(n);
    }

    void spec(long offered, long accepted, long draftSteps) {
        if (draftSteps > 0) drafts.increment(draftSteps);
        if (offered > 0) draftTokens.increment(offered);
        if (accepted > 0) acceptedTokens.increment(accepted);
    }

    /**
     * Exports the backend's effective state (what /props reports), once, when the model has loaded. The values are fixed
     * for the server's lifetime (restart-only keys), so they are registered as constant gauges.
     */
    void engine(EngineStatus s) {
        Gauge.builder("ds4j:engine_state", () -> 1).description("The backend's effective state, in the labels")
                .tag("backend", s.backend()).tag("expert_placement", s.expertPlacement())
                .tag("verify_attention", s.verifyAttention()).register(registry);
        constant("ds4j:verify_f16_kv_requested", "1 when the F16-KV verifier was asked for (verify.f16Kv)", s.f16KvRequested() ? 1 : 0);
        constant("ds4j:verify_f16_kv_active", "1 when verify steps read the F16 cache directly", s.f16KvActive() ? 1 : 0);
        constant("ds4j:verify_f32_short_context_rows",
                "Attended rows per query up to which the GPU's decode and verify attention stays in plain F32, on tensor cores"
                        + " at F32 accuracy above (0: a backend without that rule)", s.f32ShortContextRows());
        constant("ds4j:host_experts", "Routed experts kept in host memory (hybrid expert placement)", s.hostExperts());
        if (s.diagnostic() != null)
            Gauge.builder("ds4j:engine_diagnostic", () -> 1).description("A requested feature the backend could not honour, and why")
                    .tag("message", s.diagnostic()).register(registry);
    }

    private void constant(String name, String help, double value) {
        Gauge.builder(name, () -> value).description(help).register(registry);
    }

    void success(String finishReason) {
        Counter.builder("vllm:request_success").description("Finished requests by finish reason").tags(labels("vllm:request_success"))
                .tag("finished_reason", finishReason).register(registry).increment();
    }

    void rejected(String reason) {
        Counter.builder("ds4j:requests_rejected").description("Requests refused before generating, by error code")
                .tag("reason", reason).register(registry).increment();
    }

    void cancelled() {
        cancelled.increment();
    }

    void failed() {
        failed.increment();
    }
}
