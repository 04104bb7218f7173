package io.ds4j.server;

import io.ds4j.engine.Backend;
import io.ds4j.engine.EngineStatus;
import io.ds4j.engine.FeatureGate;
import io.ds4j.engine.Generation;
import io.ds4j.engine.RollbackWindow;
import io.ds4j.engine.PrefixCache;
import io.ds4j.engine.ReasoningBudget;
import io.ds4j.engine.Scheduler;
import io.ds4j.engine.Sequence;
import io.ds4j.engine.StopStrings;
import io.ds4j.sampling.Sampler;
import io.ds4j.server.config.ServerConfig;
import io.ds4j.engine.Draft;
import io.ds4j.engine.VerifyWidth;
import io.ds4j.grammar.Grammar;
import io.ds4j.grammar.GrammarLimitException;
import io.ds4j.speculative.PredictionDraft;
import io.ds4j.text.StreamingDetokenizer;
import io.ds4j.text.Tokenizer;
import io.ds4j.text.chat.OutputParser;
import io.ds4j.text.chat.V4Format;
import io.vertx.core.Future;
import io.vertx.core.VerticleBase;
import io.vertx.core.eventbus.DeliveryOptions;
import io.vertx.core.eventbus.Message;
import io.vertx.core.eventbus.MessageConsumer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;

/**
 * The engine: owns the backend, every sequence and the scheduler. Deployed as a worker verticle on its own
 * single-thread pool, so everything here runs on one thread and needs no locks; HTTP verticles talk to it only over
 * the event bus ({@link #SUBMIT}, {@link #CANCEL}; events go back to each request's own address), and the config reload
 * tells it of live changes ({@link #RELOADED}).
 *
 * <p>Scheduling: requests are admitted up to {@code limits.maxActive} running at once, then queued up to
 * {@code limits.maxQueue}; beyond that a submission is refused (429). The running requests are stepped together by
 * the engine's {@link Scheduler}: each tick is one batched backend step holding every decoding request's
 * decode/verify rows (up to {@code scheduler.maxBatchRows}) and prefill chunks of at most
 * {@code scheduler.tokenBudget} tokens, fewer while requests decode ({@code scheduler.maxTickStretch}), so a long
 * prompt never stalls the others for more than its budget. After
 * every tick the engine yields to the verticle's task queue (runOnContext), which lets submissions and
 * cancellations in between ticks; a cancelled request ends at once and its state is released.
 */
public final class EngineVerticle extends VerticleBase {
    /** Address of submissions (request-reply; body {@link EngineRequest}, reply {@link Admission}). */
    public static final String SUBMIT = "ds4j.engine.submit";
    /** Address of cancellations (body: the request id). */
    public static final String CANCEL = "ds4j.engine.cancel";
    /**
     * Address of reload notices (published, no body): a reload applied live keys, and the engine applies at once those
     * it holds itself ({@code prefixCache.budgetMiB}), on its thread, rather than at the next request.
     */
    public static final String RELOADED = "ds4j.engine.reloaded";
    /**
     * Address of the shutdown drain (request-reply; body: the grace period in seconds, an Integer): from then on
     * submissions are refused and queued requests end with 503 server_shutting_down; the running ones go on until they
     * finish or the grace period ends, when they end with that 503 too. The reply (null) comes once none runs.
     */
    public static final String DRAIN = "ds4j.engine.drain";
    /** Error code of a request whose output constraint would keep too many parse states live ({@link GrammarLimitException}). */
    static final String GRAMMAR_TOO_COMPLEX = "grammar_too_complex";
    /** Rollback window of target sequences: the widest verify step (8) with room to spare. */
    static final int MAX_ROLLBACK = RollbackWindow.DEFAULT;
    /** Verify width of a request with a prediction when its width is "auto". */
    static final int PREDICTION_Q = 4;

    private static final Logger LOG = LoggerFactory.getLogger(EngineVerticle.class);
    /**
     * Requests and events never leave the JVM. Local-only also on a clustered event bus: there a plain send first
     * looks the address up in the cluster, and the lookup's answer queues behind this worker's own busy task queue,
     * which held a stream's events back until the engine went idle.
     */
    private static final DeliveryOptions LOCAL = new DeliveryOptions().setCodecName(LocalCodec.NAME).setLocalOnly(true);

    private final ServerState state;
    private final ModelProvider provider;
    private LoadedModel model;
    private Backend backend;
    private Tokenizer tokenizer;
    private int[] eosIds;
    /** The tokenizer's end-of-reasoning token ({@code </think>}), or -1 where it has none (no reasoning budget then). */
    private int thinkEnd = -1;
    /** Null when prefixCache.enabled is false or the backend cannot snapshot. */
    private PrefixCache prefixCache;
    private final ArrayDeque<Job> waiting = new ArrayDeque<>();
    private final ArrayList<Job> active = new ArrayList<>();
    /**
     * Admitted choices of an {@code n} > 1 request that wait for their request's first choice to prefill the prompt
     * they share up to its {@link PrefixCache#sharedPoint}, then start from the snapshot it left there (prefilling only
     * the tokens after it). They hold their slot and reserved tokens meanwhile: running, for admission and the gauges.
     */
    private final ArrayList<Job> held = new ArrayList<>();
    private final Map<String, Job> jobs = new HashMap<>();
    /**
     * Requests this thread ended as cancelled on seeing their flag (at submission, in the queue, at a step boundary)
     * before their cancel message came: the HTTP side sends one for every submitted request it cancels, and it finds
     * nothing left to do and nothing to say.
     */
    private final java.util.Set<String> cancelsToCome = new java.util.HashSet<>();
    /** Plans, runs and commits the running requests' batched steps (created once the model is loaded). */
    private Scheduler<Job> scheduler;
    private boolean tickQueued;
    private long reservedTokens;
    /** Smoothed request duration, for Retry-After. */
    private double meanRequestSeconds = 5;
    private final List<MessageConsumer<?>> consumers = new ArrayList<>();
    /** The drain request to answer once no request runs; null before shutdown. */
    private Message<Object> drain;
    private boolean drainAnswered;
    /** Set by {@link #stop}: no more ticks. */
    private boolean stopped;

    /** @param provider loads the model when the verticle starts (on the engine thread) */
    public EngineVerticle(ServerState state, ModelProvider provider) {
        this.state = state;
        this.provider = provider;
    }

    @Override
    public Future<?> start() {
        try {
            model = provider.load(state.config(), LOG::info);
        } catch (Throwable e) {
            String msg = e.getMessage() != null ? e.getMessage() : e.toString();
            state.loadError(msg);
            LOG.error("model load failed: {}", msg);
            return Future.failedFuture(e);
        }
        backend = model.backend();
        tokenizer = model.tokenizer();
        String unfit = state.config().againstVocabulary(
                io.ds4j.sampling.SamplingParams.topKMax(backend.config().vocabSize, tokenizer.vocabSize()));
        if (unfit != null) {
            state.loadError(unfit);
            LOG.error("model load failed: {}", unfit);
            model.close();
            // a configuration problem, not a load failure: serve says it against the flag or file that set the key
            return Future.failedFuture(new io.ds4j.server.config.ConfigException(unfit));
        }
        try {
            warmUp();
        } catch (Throwable e) {
            String msg = "warm-up step failed: " + (e.getMessage() != null ? e.getMessage() : e.toString());
            state.loadError(msg);
            LOG.error("model load failed: {}", msg, e);
            model.close();
            return Future.failedFuture(e);
        }
        ModelInfo info = model.info();
        reportEngine(info.engine());
        eosIds = Generation.endIds(tokenizer.eosId(), backend.config());
        thinkEnd = tokenizer.id(V4Format.THINK_END).orElse(-1);
        ServerConfig cfg0 = state.config();
        if (cfg0.prefixCacheEnabled() && backend.snapshots()) {
            prefixCache = new PrefixCache(backend, cfg0.prefixCacheBlockTokens(), cfg0.prefixCacheIntervalTokens(),
                    (long) cfg0.prefixCacheBudgetMiB() << 20, MAX_ROLLBACK);
            LOG.info("prefix cache: blocks of {} tokens, a snapshot every {} tokens, budget {} MiB of {} memory",
                    prefixCache.blockTokens(), cfg0.prefixCacheIntervalTokens(), cfg0.prefixCacheBudgetMiB(),
                    backend.name().equals("cpu") ? "host" : "device");
        } else if (cfg0.prefixCacheEnabled()) {
            LOG.info("prefix cache: off (backend {} cannot snapshot sequences)", backend.name());
        }
        publishCacheStats();
        scheduler = new Scheduler<>(backend, limits(cfg0));
        consumers.add(vertx.eventBus().localConsumer(SUBMIT, this::onSubmit));
        consumers.add(vertx.eventBus().localConsumer(CANCEL, this::onCancel));
        consumers.add(vertx.eventBus().localConsumer(DRAIN, this::onDrain));
        consumers.add(vertx.eventBus().localConsumer(RELOADED, msg -> cacheBudget(state.config())));
        return Future.all(consumers.stream().map(MessageConsumer::completion).toList()).onSuccess(v -> {
            cacheBudget(state.config());  // a reload while the model loaded sent its notice before anyone listened
            state.model(info);
            String cap = state.contextCap();
            if (cap != null) LOG.warn("{}", cap);
            for (String capped : cfg0.prefillCaps()) LOG.warn("{}", capped);
            Scheduler.Limits l = scheduler.limits();
            LOG.info("engine ready: backend {}, draft {}, max active {}, max queue {}, batch: max rows {}, prefill token budget {}, "
                            + "prefill beside decoding requests: {}",
                    backend.name(), (model.draft() == null ? "none" : model.draft().name())
                            // said here, since the draft is loaded yet unused by default
                            + (state.config().specQ().equals("0") ? " (speculative.q 0: only requests that give speculative_q speculate)" : ""),
                    state.config().maxActive(),
                    state.config().maxQueue(), l.maxBatchRows(), l.tokenBudget(), l.maxTickStretch() == 0
                            ? "the whole budget (scheduler.maxTickStretch 0)"
                            : "a step at most " + l.maxTickStretch() + "x the step without it, at least " + l.floor() + " tokens"
                            + (!l.layerSlices() ? " (whole chunks: scheduler.layerSlices false)"
                            : backend.layerSlices() ? ", a chunk in layer slices where even that many break the bound"
                            : " (backend " + backend.name() + " runs chunks whole)"));
        });
    }

    /** The scheduler's limits from the configuration: the floor as it takes effect (at most the prefill chunk). */
    static Scheduler.Limits limits(ServerConfig cfg) {
        return new Scheduler.Limits(cfg.maxBatchRows(), cfg.tokenBudget(), cfg.maxTickStretch(), cfg.minPrefillChunkInEffect(),
                cfg.layerSlices());
    }

    /**
     * One decode step of the BOS token on a throw-away sequence, before the server says it is ready: the first
     * request then does not pay for compiling the step's code paths (JIT, lazily created kernels and workspaces).
     * Kept to a single token so the load does not get noticeably longer.
     */
    private void warmUp() {
        long t0 = System.nanoTime();
        Sequence s = backend.newSequence(1);
        try {
            backend.forward(s, new int[]{tokenizer.bosId()}, 0, 1, new int[]{0}, io.ds4j.engine.StepKind.DECODE);
        } finally {
            s.close();
        }
        LOG.info("warm-up: one decode step in {} ms", (System.nanoTime() - t0) / 1_000_000);
    }

    /**
     * Says once, at start-up, what the backend decided and why (placement, verify attention path), warns about any
     * requested feature it could not honour (an option is never dropped silently), and exports the same state
     * to /metrics.
     */
    private void reportEngine(EngineStatus st) {
        var cfg = state.config();
        LOG.info("engine: {}", FeatureGate.explain(cfg.backend(), cfg.backendOptions(), st));
        if (st.diagnostic() != null) LOG.warn("{}", st.diagnostic());
        state.metrics().engine(st);
    }

    @Override
    public Future<?> stop() {
        stopped = true;
        for (Job j : new ArrayList<>(active)) end(j);
        waiting.clear();
        held.clear();
        jobs.clear();
        if (prefixCache != null) prefixCache.close();
        if (model != null) model.close();
        return Future.succeededFuture();
    }

    // ------------------------------------------------------------------------------------------------ admission

    private void onSubmit(Message<Object> msg) {
        if (msg.body() instanceof EngineRequest.Group g) {
            onSubmitChoices(msg, g.choices());
            return;
        }
        EngineRequest r = (EngineRequest) msg.body();
        ServerConfig cfg = state.config();
        if (r.cancelled()) {
            droppedAtSubmission(r);
            msg.reply(Admission.refused(new ApiException(499, "invalid_request_error", "cancelled", null, "cancelled", null)), LOCAL);
            return;
        }
        Admission refused = refusal(r, cfg);
        if (refused != null) {
            msg.reply(refused, LOCAL);
            return;
        }
        Job j = new Job(r, r.reserveTokens());
        if (waiting.isEmpty() && running() < cfg.maxActive() && fits(j.reserved, cfg)) {
            try {
                startAtOnce(j, cfg);
            } catch (RuntimeException e) {
                String m = e.getMessage() != null ? e.getMessage() : e.toString();
                LOG.warn("request {} could not start: {}", r.named(), m);
                msg.reply(Admission.refused(new ApiException(400, "invalid_request_error", null, null, m, null)), LOCAL);
                return;
            }
            msg.reply(Admission.running(j.gen.cachedTokens()), LOCAL);
        } else if (waiting.size() < cfg.maxQueue()) {
            enqueue(j, cfg);
            msg.reply(Admission.queued(waiting.size()), LOCAL);
        } else {
            int retry = retryAfterSeconds(cfg);
            LOG.info("request {} rejected with 429: queue full (running {}/{}, waiting {}/{}{}); Retry-After {} s",
                    r.named(), running(), cfg.maxActive(), waiting.size(), cfg.maxQueue(), running() < cfg.maxActive()
                            ? "; a slot is free, model.cacheTokens holds the next request back: " + reservedTokens + " of "
                            + cfg.cacheTokens() + " tokens reserved" : "", retry);
            msg.reply(Admission.refused(new ApiException(429, "rate_limit_exceeded", "queue_full", null,
                    "the server is busy: " + runningLimits(cfg, r) + " and " + (cfg.maxQueue() == 0 ? "limits.maxQueue is 0, so no request may wait for a slot"
                            : waiting.size() + " waiting (limits.maxQueue " + cfg.maxQueue() + ")") + "; retry after " + retry + " s",
                    retry)), LOCAL);
            return;
        }
        scheduleTick();
    }

    /**
     * The choices of one request ({@code n} > 1): admitted together, each as one request against limits.maxActive and
     * limits.maxQueue (those that find a slot start at once, the rest queue in index order), or refused together with
     * the refusal a single request would get; a 429 when they do not all fit. Each is then a request of its own: it is
     * stepped, counted, logged, cancelled and retired as any other.
     */
    private void onSubmitChoices(Message<Object> msg, List<EngineRequest> choices) {
        ServerConfig cfg = state.config();
        EngineRequest first = choices.getFirst();
        if (choices.stream().anyMatch(EngineRequest::cancelled)) {
            // the HTTP side cancels every choice of a request at once (its client went away): none reached the queue
            for (EngineRequest r : choices) droppedAtSubmission(r);
            msg.reply(Admission.refused(new ApiException(499, "invalid_request_error", "cancelled", null, "cancelled", null)), LOCAL);
            return;
        }
        // the choices share their prompt and settings: what refuses one refuses all, said once
        Admission refused = refusal(first, cfg);
        if (refused != null) {
            msg.reply(refused, LOCAL);
            return;
        }
        int n = choices.size(), need = first.reserveTokens();
        // the most that could ever run at once on an idle server (the cache holds so many choices' state), plus the
        // queue: past it no retry could ever admit them together, so it is a 400 for n, not a 429
        int runnable = cfg.cacheTokens() > 0 ? Math.min(cfg.maxActive(), cfg.cacheTokens() / need) : cfg.maxActive();
        if (n > runnable + cfg.maxQueue()) {
            String mt = first.maxTokensField != null ? first.maxTokensField : "max_tokens";
            LOG.info("request {} rejected: its {} choices need {} tokens of sequence state each; model.cacheTokens {} holds {} at"
                    + " once and limits.maxQueue is {}", first.named(), n, need, cfg.cacheTokens(), runnable, cfg.maxQueue());
            msg.reply(Admission.refused(ApiException.badField("n", "the request's " + n + " choices are admitted together and"
                    + " can never all fit: each needs " + need + " tokens of sequence state (the prompt's " + first.prompt.length
                    + " + " + mt + " " + first.params.maxTokens() + (first.maxTokensField == null
                    ? ", the server's default cut to what the cache leaves" : "") + "), so the server's cache (model.cacheTokens "
                    + cfg.cacheTokens() + ") runs at most " + runnable + " at once and limits.maxQueue lets " + cfg.maxQueue()
                    + " more wait; lower n or " + mt)), LOCAL);
            return;
        }
        // how many start at once (only when nothing waits: first come, first served) and how many would wait
        int now = 0;
        long reserved = reservedTokens;
        while (waiting.isEmpty() && now < n && running() + now < cfg.maxActive()
                && (cfg.cacheTokens() <= 0 || reserved + need <= cfg.cacheTokens())) {
            now++;
            reserved += need;
        }
        if (waiting.size() + n - now > cfg.maxQueue()) {
            int retry = retryAfterSeconds(cfg), fit = now + Math.max(0, cfg.maxQueue() - waiting.size());
            LOG.info("request {} rejected with 429: its {} choices are admitted together and {} fit (running {}/{}, waiting {}/{});"
                    + " Retry-After {} s", first.named(), n, fit, running(), cfg.maxActive(), waiting.size(), cfg.maxQueue(), retry);
            msg.reply(Admission.refused(new ApiException(429, "rate_limit_exceeded", "queue_full", null,
                    "the server is busy: the request's n = " + n + " choices are admitted together, each as one request, and"
                            + " only " + fit + " fit now: " + runningLimits(cfg, first) + " and " + waiting.size() + " waiting (limits.maxQueue " + cfg.maxQueue()
                            + "); retry after " + retry + " s", retry)), LOCAL);
            return;
        }
        List<Job> started = new ArrayList<>(), siblings = new ArrayList<>();
        for (EngineRequest c : choices) siblings.add(new Job(c, need, siblings));
        for (int i = 0; i < now; i++) {
            Job j = siblings.get(i);
            Job leader = leaderFor(j);
            if (leader != null) {
                // the first choice prefills the prompt they share; this one then resumes its snapshot
                hold(j, leader);
                started.add(j);
                continue;
            }
            try {
                startAtOnce(j, cfg);
            } catch (RuntimeException e) {
                // the choices that started are withdrawn: the request is refused as a whole
                for (Job s : started) {
                    if (held.remove(s)) reservedTokens -= s.reserved;
                    else end(s);
                    forget(s);
                }
                updateGauges();
                String m = e.getMessage() != null ? e.getMessage() : e.toString();
                LOG.warn("request {} could not start: {}{}", j.req.named(), m, started.isEmpty() ? ""
                        : "; " + plural(started.size(), "other choice") + " of its request withdrawn");
                msg.reply(Admission.refused(new ApiException(400, "invalid_request_error", null, null, m, null)), LOCAL);
                return;
            }
            started.add(j);
        }
        for (int i = now; i < n; i++) enqueue(siblings.get(i), cfg);
        msg.reply(now > 0 ? Admission.running(started.getFirst().gen.cachedTokens()) : Admission.queued(waiting.size() - n + 1), LOCAL);
        scheduleTick();
    }

    /**
     * The choice of j's request whose prefill j should wait for, or null to start j now: a sibling choice that runs and
     * has not yet prefilled their shared prompt up to its {@link PrefixCache#sharedPoint}, the snapshot j can then
     * resume. Null where the prefix cache cannot keep it (off, no budget, the request's {@code cache_prompt: false}), the
     * prompt is too short to leave one, or no sibling is prefilling towards it (j then prefills, and its siblings may
     * wait for it in turn).
     */
    private Job leaderFor(Job j) {
        if (j.siblings == null || !cacheKeepsSnapshots() || !j.req.cachePrompt) return null;
        int p = prefixCache.sharedPoint(j.req.prompt.length);
        if (p == 0) return null;
        for (Job s : j.siblings)
            if (s != j && active.contains(s) && s.gen.prefilledTokens() < p) return s;
        return null;
    }

    /** Whether the prefix cache is on and may keep snapshots (a budget above 0: a reload may set it to 0). */
    private boolean cacheKeepsSnapshots() {
        return prefixCache != null && prefixCache.stats().budgetBytes() > 0;
    }

    /**
     * Admits a choice (at its request's admission or from the queue) that waits for a sibling's prefill ({@link
     * #leaderFor}): it takes its slot and reserved tokens now, and its queue time ends here.
     */
    private void hold(Job j, Job leader) {
        j.leader = leader;
        j.sharedPoint = prefixCache.sharedPoint(j.req.prompt.length);
        j.activatedNanos = System.nanoTime();
        held.add(j);
        jobs.put(j.req.id, j);
        reservedTokens += j.reserved;
        state.started(j.req.id);
        updateGauges();
        ServerConfig cfg = state.config();
        LOG.info("request {} admitted: {} prompt tokens, max_tokens {}{}; it waits for request {} to prefill the {} prompt tokens"
                        + " they share (the prefix cache's last block boundary of the prompt), then prefills the {} after them;"
                        + " running {}/{}, waiting {}/{}", j.req.named(), j.req.prompt.length, j.req.params.maxTokens(),
                maxTokensNote(j.req, cfg), leader.req.id,
                j.sharedPoint, j.req.prompt.length - j.sharedPoint, running(), cfg.maxActive(), waiting.size(), cfg.maxQueue());
    }

    /**
     * Starts the held choices whose first choice has prefilled their shared prompt prefix (its snapshot is in the
     * prefix cache unless evicted: then they prefill the whole prompt, with the same answer), or has ended (failed,
     * cancelled, finished early): they do not wait for what will not come.
     */
    private void release() {
        if (held.isEmpty()) return;
        ServerConfig cfg = state.config();
        for (Job j : new ArrayList<>(held)) {
            Job first = j.leader;
            // a reload that leaves the cache no budget ends the wait: no snapshot would be kept to resume
            if (active.contains(first) && first.gen.prefilledTokens() < j.sharedPoint && !j.req.cancelled()
                    && cacheKeepsSnapshots()) continue;
            held.remove(j);
            reservedTokens -= j.reserved;
            if (j.req.cancelled()) {
                retireCancelledHeld(j);
                continue;
            }
            try {
                activate(j, cfg);
                LOG.info("request {} started: {} of its {} prompt tokens resumed from the prefix cache after request {}'s prefill",
                        j.req.named(), j.gen.cachedTokens(), j.req.prompt.length, first.req.id);
            } catch (RuntimeException e) {
                // activate reserves its tokens only once nothing can fail any more
                jobs.remove(j.req.id);
                state.retired(j.req.id);
                String m = e.getMessage() != null ? e.getMessage() : e.toString();
                LOG.warn("request {} could not start: {}", j.req.named(), m);
                send(j, new EngineEvent.Failed(400, m));
            }
        }
        updateGauges();
    }

    /** Ends a held choice whose client went away (its reservation already given back): nothing was computed for it. */
    private void retireCancelledHeld(Job j) {
        state.retired(j.req.id);
        retireCancelledInQueue(j, "while it waited for request " + j.leader.req.id + " to prefill the prompt they share");
    }

    /**
     * The running requests as a 429 names them, against limits.maxActive; where a slot is free, also what holds the
     * request at the head of the line back (the oldest waiting one, else the refused one needing {@code need} tokens):
     * model.cacheTokens, which the running requests' reservations (prompt plus max_tokens each) have used up.
     */
    private String runningLimits(ServerConfig cfg, EngineRequest refused) {
        String s = plural(running(), "request") + " running (limits.maxActive " + cfg.maxActive();
        EngineRequest head = waiting.isEmpty() ? refused : waiting.peekFirst().req;
        int need = head.reserveTokens();
        if (running() < cfg.maxActive() && !fits(need, cfg))
            s += "; a slot is free, but they reserve " + reservedTokens + " of the " + cfg.cacheTokens() + " tokens of"
                    + " model.cacheTokens and the next request needs " + need + ": its prompt plus max_tokens"
                    // a client that sent none gets the server's default, cut only to what the whole cache holds
                    + (head.maxTokensField == null ? " (" + head.params.maxTokens() + ", the server's default cut to the cache;"
                    + " a smaller max_tokens may fit)" : "");
        return s + ")";
    }

    /** Requests admitted and not yet finished: those stepped and those {@link #held} for their first choice's prefill. */
    private int running() {
        return active.size() + held.size();
    }

    /**
     * Says and counts a request whose client went away while its submission waited for this thread (behind a long
     * step): nobody else would say what became of it, or count it.
     */
    private void droppedAtSubmission(EngineRequest r) {
        state.metrics().cancelled();
        state.record(new ServerState.JobRecord(r.id, "cancelled", r.prompt.length, 0, 0, 0));
        cancelsToCome.add(r.id);
        LOG.info("request {} cancelled ({}) while its submission waited: dropped before it reached the engine's queue,"
                + " nothing computed", r.named(), r.cancelReason());
    }

    /**
     * The refusal of a request before any slot or queue place is looked at: the server shuts down, or the request
     * needs more sequence state than model.cacheTokens holds. Null when neither.
     */
    private Admission refusal(EngineRequest r, ServerConfig cfg) {
        if (drain != null || stopped) {
            LOG.info("request {} refused with 503: the server is shutting down", r.named());
            return Admission.refused(HttpVerticle.shuttingDown());
        }
        int need = r.reserveTokens();
        if (cfg.cacheTokens() > 0 && need > cfg.cacheTokens()) {
            // the field to blame: the client's max_tokens where it sent one; else the prompt (the server's default
            // max_tokens was cut to the cache's room, so only a prompt that leaves none gets here)
            String mt = r.maxTokensField, field = mt != null ? mt : r.chat ? "messages" : "prompt";
            String why = mt != null
                    ? mt + ": the prompt (" + r.prompt.length + " tokens) plus " + mt + " (" + r.params.maxTokens()
                    + ") exceeds the server's cache of " + cfg.cacheTokens() + " tokens (model.cacheTokens); lower " + mt
                    + " or shorten the prompt"
                    : field + ": the prompt (" + r.prompt.length + " tokens) leaves no room for output in the server's cache of "
                    + cfg.cacheTokens() + " tokens (model.cacheTokens); shorten the prompt";
            LOG.info("request {} rejected: needs {} tokens of sequence state (prompt {} + max_tokens {}{}), model.cacheTokens is {}",
                    r.named(), need, r.prompt.length, r.params.maxTokens(), mt != null ? " as sent" : ", the default cut to the cache",
                    cfg.cacheTokens());
            return Admission.refused(ApiException.bad(field, "context_length_exceeded", why));
        }
        return null;
    }

    /** Starts a request that found a slot: activated and in the table (throws, leaving neither, when it cannot start). */
    private void startAtOnce(Job j, ServerConfig cfg) {
        EngineRequest r = j.req;
        activate(j, cfg);
        jobs.put(r.id, j);
        LOG.info("request {} admitted: {} prompt tokens, max_tokens {}{}{}, spec q {}; running {}/{}, waiting {}/{}",
                r.named(), r.prompt.length, r.params.maxTokens(), maxTokensNote(r, cfg), reasoningNote(r), j.specName(), running(),
                cfg.maxActive(), waiting.size(), cfg.maxQueue());
    }

    /**
     * What the admission line says of a max_tokens the client did not send: the server's default, and whether it was
     * cut to the room after the prompt (a client's own max_tokens is never cut: one past the room is refused).
     */
    private static String maxTokensNote(EngineRequest r, ServerConfig cfg) {
        if (r.maxTokensField != null) return "";
        return r.params.maxTokens() < cfg.maxTokensDefault()
                ? " (the server's default " + cfg.maxTokensDefault() + ", cut to the room after the prompt)"
                : " (the server's default)";
    }

    /** What the admission line says of a request's reasoning: whether it starts inside it, and its budget. */
    private String reasoningNote(EngineRequest r) {
        if (!r.thinking) return "";
        return r.reasoningBudget < 0 ? ", thinking" : thinkEnd >= 0
                ? ", thinking with a reasoning budget of " + r.reasoningBudget + " tokens"
                : ", thinking (the reasoning budget is not applied: the tokenizer has no " + V4Format.THINK_END + " token)";
    }

    /** Puts a request at the end of the queue (the caller checked there is room). */
    private void enqueue(Job j, ServerConfig cfg) {
        EngineRequest r = j.req;
        waiting.addLast(j);
        jobs.put(r.id, j);
        updateGauges();
        LOG.info("request {} queued at position {}: {} prompt tokens; running {}/{} ({})",
                r.named(), waiting.size(), r.prompt.length, running(), cfg.maxActive(), queueReason(j, cfg));
    }

    static String plural(int n, String noun) {
        return n + " " + noun + (n == 1 ? "" : "s");
    }

    /**
     * Why a request that just arrived waits (each reason that holds): every slot runs a request, the running requests'
     * reserved tokens leave too little of model.cacheTokens, or others wait before it (first come, first served).
     */
    private String queueReason(Job j, ServerConfig cfg) {
        List<String> why = new ArrayList<>();
        if (running() >= cfg.maxActive()) why.add("all slots busy");
        if (!fits(j.reserved, cfg))
            why.add("model.cacheTokens: the running requests reserve " + reservedTokens + " of " + cfg.cacheTokens()
                    + " tokens, this one needs " + j.reserved);
        // the request is already at the end of the queue: the others are those before it
        if (waiting.size() > 1) why.add(plural(waiting.size() - 1, "request") + " waiting before it");
        return String.join("; ", why);
    }

    private boolean fits(int need, ServerConfig cfg) {
        return cfg.cacheTokens() <= 0 || reservedTokens + need <= cfg.cacheTokens();
    }

    private int retryAfterSeconds(ServerConfig cfg) {
        double s = meanRequestSeconds * (waiting.size() + 1) / Math.max(1, cfg.maxActive());
        return (int) Math.max(1, Math.min(60, Math.ceil(s)));
    }

    /** Creates the request's sequence, sampler, draft and generation, and puts it in the running set. */
    private void activate(Job j, ServerConfig cfg) {
        EngineRequest r = j.req;
        int V = backend.config().vocabSize;
        // ids the tokenizer cannot decode are never sampled (the embedding may have more rows than the tokenizer)
        Sampler sampler = new Sampler(r.params, V, r.prompt, Math.min(V, tokenizer.vocabSize()));
        Draft draft = null;
        VerifyWidth width = null;
        PredictionDraft prediction = null;
        // a prediction speculates even on a server without a draft; speculative_q 0 turns both off
        if ((model.draft() != null || r.prediction != null) && !r.specQ.equals("0")) {
            long seed = r.params.seed() != null ? r.params.seed() ^ 0x5DEECE66DL : new SplittableRandom().nextLong();
            // the adaptive width shrinks to 1 on an edited span and regrows slowly: a prediction verifies a fixed width
            width = r.prediction != null && r.specQ.equals("auto") ? VerifyWidth.fixed(PREDICTION_Q) : VerifyWidth.parse(r.specQ);
            draft = model.draft() == null ? null : model.draft().open(r.prompt, r.params, seed);
            if (r.prediction != null) draft = prediction = new PredictionDraft(r.prediction, r.prompt.length, draft);
        }
        boolean cached = prefixCache != null && r.cachePrompt;
        Sequence seq = null;
        if (cached) {
            try {
                PrefixCache.Start st = prefixCache.start(r.prompt);
                seq = st.seq();
            } catch (RuntimeException e) {
                // the cache is an optimisation: without memory to resume, prefill the whole prompt
                LOG.warn("request {}: prefix cache lookup failed, prefilling the whole prompt: {}", r.named(), e.getMessage());
            }
        }
        if (seq == null) seq = backend.newSequence(MAX_ROLLBACK);
        try {
            // the chunk fits the scheduler's token budget, so the prompt's cuts do not depend on what else runs
            j.gen = new Generation(backend, seq, r.prompt, sampler, draft, width,
                    new Generation.Options(Scheduler.prefillChunk(cfg.prefillChunk(), limits(cfg)), r.maxContext, eosIds,
                            MAX_ROLLBACK), j::onToken,
                    r.grammar == null ? null : r.grammar.constraint(tokenizer, r.params.ignoreEos(), r.id));
            j.gen.minTokens(r.minTokens, r.stopTokenIds);
            // the prompt's last block boundary always ends a chunk, cached or not, so the tail after it is one step
            // of the same size either way (bit-identical answers on backends whose rounding depends on step size)
            int block = prefixCache != null ? prefixCache.blockTokens()
                    : PrefixCache.alignedBlock(backend.config(), cfg.prefixCacheBlockTokens());
            int tail = r.prompt.length / block * block;
            if (cached) j.gen.snapshotAt(prefixCache.snapshotPoints(r.prompt, seq.length()), s -> {
                prefixCache.offer(r.prompt, s);
                publishCacheStats();
            });
            else if (tail > 0) j.gen.snapshotAt(new int[]{tail}, s -> { });
            publishCacheStats();
        } catch (RuntimeException e) {
            seq.close();
            if (draft != null) draft.close();
            throw e;
        }
        if (r.promptLogprobs >= 0) j.gen.scorePrompt(r.promptLogprobs);
        if (r.reasoningBudget >= 0 && r.thinking && thinkEnd >= 0)
            j.gen.limitReasoning(new ReasoningBudget(thinkEnd, r.reasoningBudget, tokenizer::tokenBytes));
        j.width = width;
        j.prediction = prediction;
        j.detok = tokenizer.streamer();
        j.stops = new StopStrings(r.params.stop(), r.includeStopStr);
        j.parser = r.chat ? Grammar.parser(r.grammar, r.thinking) : null;
        // a held choice's queue time ended when it was admitted to its slot, not when its wait for a sibling's prefill did
        if (j.activatedNanos == 0) j.activatedNanos = System.nanoTime();
        j.promptDone = j.gen.prefilledTokens(); // a resumed prefix is not counted as prefilled
        reservedTokens += j.reserved;
        active.add(j);
        scheduler.add(j, j.gen);
        state.started(r.id);
        state.metrics().queueTime(j.activatedNanos - r.arrivalNanos);
        updateGauges();
    }

    /**
     * Applies prefixCache.budgetMiB to the prefix cache when it changed (the one place that does: a reload's notice
     * calls it), evicting the least recently used snapshots over the new budget at once and saying what that freed.
     */
    private void cacheBudget(ServerConfig cfg) {
        if (prefixCache == null) return;
        long budget = (long) cfg.prefixCacheBudgetMiB() << 20;
        PrefixCache.Stats before = prefixCache.stats();
        if (budget == before.budgetBytes()) return;
        prefixCache.budgetBytes(budget);
        PrefixCache.Stats after = prefixCache.stats();
        publishCacheStats();
        LOG.info("prefix cache: budget now {} MiB (prefixCache.budgetMiB): {}; {} held in {} bytes", cfg.prefixCacheBudgetMiB(),
                after.evictions() == before.evictions() ? "nothing to evict"
                        : "evicted " + plural((int) (after.evictions() - before.evictions()), "snapshot") + ", freeing "
                        + (before.bytes() - after.bytes()) + " bytes",
                plural(after.snapshots(), "snapshot"), after.bytes());
    }

    private void publishCacheStats() {
        state.metrics().prefixCache(prefixCache == null ? null : prefixCache.stats());
    }

    private void promote() {
        ServerConfig cfg = state.config();
        while (!waiting.isEmpty() && running() < cfg.maxActive() && fits(waiting.peekFirst().reserved, cfg)) {
            Job j = waiting.pollFirst();
            if (j.req.cancelled()) {
                retireCancelledInQueue(j, "while queued");
                continue;
            }
            Job leader = leaderFor(j);
            if (leader != null) {
                hold(j, leader);
                continue;
            }
            try {
                activate(j, cfg);
                LOG.info("request {} started after waiting {} ms; running {}/{}, waiting {}", j.req.named(),
                        (j.activatedNanos - j.req.arrivalNanos) / 1_000_000, running(), cfg.maxActive(), waiting.size());
            } catch (RuntimeException e) {
                jobs.remove(j.req.id);
                String m = e.getMessage() != null ? e.getMessage() : e.toString();
                LOG.warn("request {} could not start: {}", j.req.named(), m);
                send(j, new EngineEvent.Failed(400, m));
            }
        }
        updateGauges();
    }

    private void onCancel(Message<Object> msg) {
        String id = (String) msg.body();
        Job j = jobs.get(id);
        if (j == null) {
            // a cancel comes after its request's submission (both from one event loop, handled in order here), so the
            // request has already ended here and its end was logged; unless the end was that very cancellation, this
            // says why the disconnect changed nothing
            if (!cancelsToCome.remove(id))
                LOG.info("request {}: nothing to stop, it had already ended in the engine when its client went away", id);
            return;
        }
        j.req.cancel();
        if (waiting.remove(j)) {
            retireCancelledInQueue(j, "while queued");
            updateGauges();
        } else if (held.remove(j)) {
            reservedTokens -= j.reserved;
            retireCancelledHeld(j);
            promote();
            updateGauges();
        } else if (active.contains(j)) {
            // the step boundary is now (ticks run on this thread): end it without another forward and release its
            // state at once, mid-prefill too
            end(j);
            retire(j, null);
            release();
            promote();
            drained();
        }
        cancelsToCome.remove(id);  // this was the message
    }

    /**
     * Shutdown ({@link #DRAIN}): refuses what waits, lets what runs finish within the grace period, then ends the rest;
     * answers once nothing runs.
     */
    private void onDrain(Message<Object> msg) {
        if (drain != null) {
            msg.reply(null, LOCAL);
            return;
        }
        drain = msg;
        state.drainTakenUp();
        int grace = (Integer) msg.body();
        int queued = waiting.size();
        for (Job j : new ArrayList<>(waiting)) retireShutdown(j, whyQueued(j));
        waiting.clear();
        updateGauges();
        LOG.info("shutting down: {} refused with 503, {} may finish within {} s (server.shutdownGraceSeconds)",
                plural(queued, "queued request"), plural(running(), "running request"), grace);
        if (grace == 0) endRunning(grace);
        else vertx.setTimer(grace * 1000L, id -> endRunning(grace));
        drained();
    }

    /**
     * Why the shutdown ends a queued request, for its client: "it was queued", unless it is a choice of a request ({@code
     * n} > 1) some of whose choices had started: that request was running, and it ends because a choice of it never
     * will (its choices are answered together; the HTTP side stops the running ones), which the client is told. Called
     * while the queue still holds every queued request.
     */
    private String whyQueued(Job j) {
        if (j.siblings == null) return "it was queued";
        int n = j.siblings.size();
        List<Integer> q = new ArrayList<>();
        for (int i = 0; i < n; i++) if (waiting.contains(j.siblings.get(i))) q.add(i);
        if (q.size() >= n) return "it was queued";
        String which = q.size() == 1 ? "choice " + q.getFirst() + " of the request's " + n + " was"
                : "choices " + q.stream().map(String::valueOf).collect(java.util.stream.Collectors.joining(", ")) + " of the request's " + n + " were";
        return which + " still queued, not started; a request's choices are answered together, so it ends here unfinished"
                + " and its running choices are stopped";
    }

    /** The end of the shutdown grace period: every request still running ends with 503. */
    private void endRunning(int grace) {
        if (running() == 0) return;
        LOG.info("shutting down: the grace period of {} s is over; ending {} with 503", grace, plural(running(), "running request"));
        for (Job j : new ArrayList<>(held)) {
            held.remove(j);
            reservedTokens -= j.reserved;
            retireShutdown(j, "it ran past the shutdown grace period (server.shutdownGraceSeconds " + grace + ") while it waited for"
                    + " another choice of its request to prefill the prompt they share");
        }
        for (Job j : new ArrayList<>(active)) {
            end(j);
            retireShutdown(j, "it ran past the shutdown grace period (server.shutdownGraceSeconds " + grace + ") after "
                    + plural(j.gen.generatedTokens(), "generated token"));
        }
        updateGauges();
        drained();
    }

    /** Ends a running request between steps: its generation (and sequence) released, out of the scheduler and the running set. */
    private void end(Job j) {
        j.gen.abandon();
        scheduler.remove(j);
        active.remove(j);
    }

    /** Answers the drain request once no request runs (after a tick, a cancellation or the grace period). */
    private void drained() {
        if (drain == null || drainAnswered || running() > 0) return;
        drainAnswered = true;
        drain.reply(null, LOCAL);
        LOG.info("shutting down: no request runs any more");
    }

    /** Drops a request from the table, and its reserved tokens when it ran (a queued one reserved none yet). */
    private void forget(Job j) {
        jobs.remove(j.req.id);
        state.retired(j.req.id);
        if (j.gen != null) reservedTokens -= j.reserved;
    }

    /** Ends a queued or running request because the server shuts down: a 503 to its client (an error event mid-stream). */
    private void retireShutdown(Job j, String why) {
        forget(j);
        int generated = j.gen != null ? j.gen.generatedTokens() : 0;
        if (j.gen != null) j.flush(); // what was generated before this point reaches the client first
        // a queued request counts as refused; a running one as aborted (vLLM's finish reason "abort")
        if (j.gen == null) state.metrics().rejected(HttpVerticle.SHUTTING_DOWN);
        else state.metrics().success("abort");
        state.record(new ServerState.JobRecord(j.req.id, "shutdown", j.req.prompt.length, j.promptDone, generated, j.steps));
        LOG.info("request {} ended with 503: the server is shutting down and {}", j.req.named(), why);
        send(j, new EngineEvent.Failed(503, "the server is shutting down and " + why + "; retry on another instance or once it is back",
                HttpVerticle.SHUTTING_DOWN, HttpVerticle.SHUTDOWN_RETRY_SECONDS));
    }

    private void retireCancelledInQueue(Job j, String where) {
        jobs.remove(j.req.id);
        cancelsToCome.add(j.req.id);
        state.metrics().cancelled();
        state.record(new ServerState.JobRecord(j.req.id, "cancelled", j.req.prompt.length, 0, 0, 0));
        LOG.info("request {} cancelled {} ({})", j.req.named(), where, j.req.cancelReason());
    }

    // ------------------------------------------------------------------------------------------------ scheduling

    private void scheduleTick() {
        if (tickQueued || stopped) return;
        tickQueued = true;
        try {
            context.runOnContext(v -> tick());
        } catch (java.util.concurrent.RejectedExecutionException e) {
            // the engine's thread pool is closing (the server stops): no further steps
            tickQueued = false;
            LOG.debug("no further engine steps: the engine is stopping");
        }
    }

    /** One batched step of the running requests, then yield. */
    private void tick() {
        tickQueued = false;
        if (stopped) return;
        try {
            release();
            promote();
            if (active.isEmpty()) return;
            scheduler.limits(limits(state.config()));
            for (Job j : active) if (j.req.cancelled()) j.gen.cancel();
            Scheduler.Tick<Job> t = scheduler.tick();
            if (t.entries() > 0) {
                state.engineSteps.incrementAndGet();
                state.metrics().batch(t.entries(), t.decodeRows() + t.prefillShare(), t.prefillShare(), t.decodeRows());
            }
            if (t.budget() != null) state.metrics().prefillBudget(t.budget());
            if (LOG.isDebugEnabled() && t.entries() > 0) logStep(t);
            for (int n : t.mtpSteps()) state.metrics().mtpStep(n);
            if (t.isolated()) LOG.warn("a batched step failed; its {} entries were stepped one at a time to find the culprit", t.entries());
            for (Job j : t.stepped()) {
                j.steps++;
                Throwable failure = account(j);
                if (failure != null) {
                    if (!j.gen.done()) j.gen.abandon();
                    scheduler.remove(j);
                    active.remove(j);
                    retire(j, failure);
                } else if (j.gen.done()) {
                    active.remove(j);
                    retire(j, null);
                }
            }
            for (var f : t.failed().entrySet()) {
                Job j = f.getKey();
                j.steps++;
                if (active.remove(j)) retire(j, f.getValue());
            }
            for (Job j : t.ended()) if (active.remove(j)) retire(j, null);
            release();
            promote();
        } catch (Throwable t) {
            // a bug here must not stall the scheduler for everyone else
            LOG.error("engine scheduler error", t);
        } finally {
            if (!active.isEmpty()) scheduleTick();
            else drained();
        }
    }

    /**
     * A step at debug: its entries, decode rows and prefill tokens (a chunk in a layer slice counted whole, with the
     * share of the layers it ran as tokens' work), its duration, and where a prompt waited the scheduler's prefill
     * decision (the limit, why, the costs it predicted and the per-pass cost line; "not measured" before the first
     * measurement).
     */
    private void logStep(Scheduler.Tick<Job> t) {
        StringBuilder b = new StringBuilder(String.format("step: %d entries, %d decode rows, %d prefill tokens", t.entries(),
                t.decodeRows(), t.prefillTokens()));
        if (t.slicedTokens() > 0)
            b.append(String.format(" (%d of them a chunk in a layer slice; %.1f tokens' work in all)", t.slicedTokens(), t.prefillShare()));
        var d = t.budget();
        if (d != null)
            b.append(String.format(" (limit %d: %s; predicted %s without prefill, %s a prefill token, %s with; a pass %s + %s a token)",
                    d.tokens(), d.reason().label(), ms(d.decodeMs()), ms(d.msPerToken()), ms(d.predictedMs(t.prefillShare())),
                    ms(d.passMs()), ms(d.tokenMs())));
        if (t.oneOff()) b.append(" (one-off work in the backend: not learned from)");
        LOG.debug("{}, took {}", b, ms(t.nanos() / 1e6));
    }

    private static String ms(double v) {
        return Double.isNaN(v) ? "not measured" : String.format(v < 1 ? "%.3f ms" : "%.1f ms", v);
    }

    /**
     * After a request's step: metrics, prompt scores, the text's end, and the step's events to its client.
     * @return the exception if that failed (the caller ends the request then)
     */
    private Throwable account(Job j) {
        try {
            int pre1 = j.gen.prefilledTokens();
            int pre0 = j.promptDone;
            j.promptDone = pre1;
            if (j.req.promptLogprobs >= 0 && pre0 < pre1 && pre1 == j.gen.promptTokens()) j.sendPromptScores();
            state.metrics().promptTokens(pre1 - pre0);
            int g1 = j.gen.generatedTokens();
            state.metrics().generationTokens(g1 - j.generatedSeen);
            j.generatedSeen = g1;
            Generation.SpecStats s1 = j.gen.specStats(), s0 = j.specSeen;
            long off = s1.offered() - s0.offered();
            state.metrics().spec(off, s1.accepted() - s0.accepted(), off > 0 ? 1 : 0);
            j.specSeen = s1;
            if (j.gen.done() && j.gen.finish() != Generation.Finish.CANCELLED) j.finishText();
            j.flush();
            return null;
        } catch (Throwable t) {
            return t;
        }
    }

    /** Removes a finished, cancelled or failed request and tells its client. */
    private void retire(Job j, Throwable failure) {
        forget(j);
        long now = System.nanoTime();
        int generated = j.gen.generatedTokens();
        if (grammarLimit(failure) instanceof GrammarLimitException g) {
            // the request's own schema is at fault: a client error for it alone, and nothing for the server's error log
            LOG.warn("request {} ended with 400 grammar_too_complex after {} generated tokens: its output constraint ({}) "
                    + "reached a limit that bounds the constraint's work per token: {}; other requests continue", j.req.named(), generated,
                    j.req.grammar, g.getMessage());
            state.metrics().rejected(GRAMMAR_TOO_COMPLEX);
            state.record(new ServerState.JobRecord(j.req.id, "failed", j.req.prompt.length, j.promptDone, generated, j.steps));
            send(j, new EngineEvent.Failed(400, g.getMessage(), GRAMMAR_TOO_COMPLEX, null));
        } else if (failure != null) {
            String m = failure.getMessage() != null ? failure.getMessage() : failure.toString();
            LOG.error("request {} failed in the engine after {} steps (other requests continue): {}", j.req.id, j.steps, m, failure);
            state.metrics().failed();
            state.record(new ServerState.JobRecord(j.req.id, "failed", j.req.prompt.length, j.promptDone, generated, j.steps));
            send(j, new EngineEvent.Failed(500, "internal error while generating: " + m));
        } else if (j.gen.finish() == Generation.Finish.CANCELLED) {
            cancelsToCome.add(j.req.id);
            state.metrics().cancelled();
            state.record(new ServerState.JobRecord(j.req.id, "cancelled", j.req.prompt.length, j.promptDone, generated, j.steps));
            LOG.info("request {} cancelled ({}) at a step boundary: prefill {}/{} tokens, {} generated; state released",
                    j.req.named(), j.req.cancelReason(), j.promptDone, j.req.prompt.length, generated);
        } else {
            Generation.SpecStats s = j.gen.specStats();
            // a stop string or stop token ends the answer where it matched, inside a call too: such a call is cut, so
            // "stop" (with the stop as stop_reason), as a cut by max_tokens is "length"; "tool_calls" only for calls the
            // model finished
            boolean stopped = j.stops.stopped() || j.stopToken != null;
            String reason = j.gen.finish() == Generation.Finish.LENGTH ? "length" : j.toolCalls && !stopped ? "tool_calls" : "stop";
            Usage u = new Usage(j.req.prompt.length, generated,
                    (j.activatedNanos - j.req.arrivalNanos) / 1e6,
                    j.firstTokenNanos == 0 ? Double.NaN : (j.firstTokenNanos - j.req.arrivalNanos) / 1e6,
                    j.gen.prefillSeconds() * 1e3, j.gen.prefillTokensPerSecond(),
                    j.gen.decodeSeconds() * 1e3, j.gen.decodeTokensPerSecond(), s.offered(), s.accepted(), s.steps(),
                    j.gen.cachedTokens(), j.reasoningTokens,
                    j.prediction == null ? 0 : j.prediction.acceptedTokens(), j.prediction == null ? 0 : j.prediction.rejectedTokens());
            // a stop string that the kept text of a stop token completed is the reason, as vLLM reports it
            send(j, new EngineEvent.Done(reason, j.stops.matched(), j.stops.matched() == null ? j.stopToken : null, u));
            state.metrics().success(reason);
            state.metrics().finished(j.req.prompt.length, generated, j.req.params.maxTokens(), j.gen.prefillSeconds(), j.gen.decodeSeconds());
            state.metrics().e2e(now - j.req.arrivalNanos);
            meanRequestSeconds = 0.8 * meanRequestSeconds + 0.2 * ((now - j.req.arrivalNanos) / 1e9);
            state.record(new ServerState.JobRecord(j.req.id, reason, j.req.prompt.length, j.promptDone, generated, j.steps));
            LOG.info("request {} finished ({}): {} prompt ({} cached) + {} generated tokens, TTFT {} ms, decode {}, drafts {}/{} accepted",
                    j.req.named(), reason, j.req.prompt.length, j.gen.cachedTokens(), generated, Math.round(u.ttftMs()),
                    Double.isFinite(u.decodeTps()) ? Math.round(u.decodeTps()) + " tok/s" : "n/a (one token)",
                    s.accepted(), s.offered());
        }
        updateGauges();
    }

    /** The grammar limit behind a failure, or null when it is something else. */
    private static GrammarLimitException grammarLimit(Throwable t) {
        for (int i = 0; t != null && i < 8; t = t.getCause(), i++) if (t instanceof GrammarLimitException g) return g;
        return null;
    }

    private void updateGauges() {
        state.metrics().running.set(running());
        state.metrics().waiting.set(waiting.size());
        long held = 0;
        for (Job j : active) held += j.gen.heldTokens();
        state.metrics().kvCache(held, kvCapacity(state.config()));
    }

    /**
     * The most tokens of sequence state the engine holds at once, the KV-cache gauge's whole: a context's worth per slot
     * of limits.maxActive (or per running request where a reload lowered it below them), a running request's slot at
     * the context it was admitted with (a reload that lowers limits.maxContextTokens leaves those requests theirs),
     * at most model.cacheTokens where that is set. The per-sequence state here is no shared pool of blocks; this is the
     * pool those sequences make up.
     */
    private long kvCapacity(ServerConfig cfg) {
        long slots = (long) Math.max(cfg.maxActive() - running(), 0) * state.maxContext();
        for (Job j : active) slots += j.req.maxContext;
        for (Job j : held) slots += j.req.maxContext;  // admitted choices waiting for a sibling's prefill hold a slot too
        return cfg.cacheTokens() > 0 ? Math.min(slots, cfg.cacheTokens()) : slots;
    }

    private void send(Job j, EngineEvent e) {
        // a client that went away has unregistered its address: an event sent there would only be logged as discarded
        if (j.req.cancelled()) return;
        vertx.eventBus().send(j.req.address, e, LOCAL);
    }

    // ------------------------------------------------------------------------------------------------ per request

    /**
     * A token's logprob waiting for its text: the text's span among the characters given to the stop filter, the text
     * itself, and the bytes of earlier tokens the detokenizer held back and gave out with it (a character split across
     * tokens, or bytes that made none).
     */
    private record HeldLogprob(EngineEvent.TokenLogprob lp, int start, int end, String piece, byte[] carried) {}

    /** One request's engine-side state. Touched by the engine thread only. */
    private final class Job {
        final EngineRequest req;
        final int reserved;
        Generation gen;
        /** The choices of this one's request (all of them, this one too), or null for a request with n = 1. */
        final List<Job> siblings;
        /** A held choice's sibling whose prefill it waits for, and the prompt length that prefill must reach ({@link #held}). */
        Job leader;
        int sharedPoint;
        VerifyWidth width;
        /** The request's prediction draft (for its accepted / rejected counts), or null. */
        PredictionDraft prediction;
        StreamingDetokenizer detok;
        StopStrings stops;
        OutputParser parser;
        int promptDone;
        /** Generated tokens and speculative figures already counted in the metrics. */
        int generatedSeen;
        Generation.SpecStats specSeen = new Generation.SpecStats(0, 0, 0);
        long steps;
        long activatedNanos, firstTokenNanos, lastEmitNanos;
        boolean toolCalls;
        List<OutputParser.Event> events = new ArrayList<>();
        List<EngineEvent.TokenLogprob> logprobs = new ArrayList<>();
        /** Tokens emitted since the last flush (one flush per step). */
        int emitted;
        /** Generated tokens that went to the reasoning (counted while the parser was still inside it). */
        int reasoningTokens;
        /** The id of {@code stop_token_ids} that ended the generation, or null. */
        Integer stopToken;
        /** Logprobs of tokens whose text the stop filter still holds back, with where that text lies. */
        final ArrayDeque<HeldLogprob> heldLogprobs = new ArrayDeque<>();
        /** Characters of token text given to the stop filter, and released by it, so far. */
        int pushedChars, releasedChars;
        /**
         * Released text of a token whose logprob still waits (its text runs on into what the stop filter holds): it goes
         * out with the logprob, so a chunk's text and its tokens' logprobs stay together.
         */
        final StringBuilder unpaired = new StringBuilder();

        Job(EngineRequest req, int reserved) {
            this(req, reserved, null);
        }

        /** @param siblings every choice of an n > 1 request, this one included (shared list), or null */
        Job(EngineRequest req, int reserved, List<Job> siblings) {
            this.req = req;
            this.reserved = reserved;
            this.siblings = siblings;
        }

        String specName() {
            return width == null ? "off" : width.toString();
        }

        /** Generation.Listener: detokenize, apply stop strings, parse. */
        boolean onToken(int token, Sampler.TokenLogprobs lp) {
            long now = System.nanoTime();
            if (firstTokenNanos == 0) {
                firstTokenNanos = now;
                state.metrics().ttft(now - req.arrivalNanos);
            }
            emitted++;
            if (parser != null && parser.inReasoning()) reasoningTokens++;
            boolean eos = false;
            for (int e : eosIds) if (e == token) eos = true; // the end of the turn; its text is not output
            // an end-of-sentence token that ignore_eos passes over (Generation ends the turn on any other)
            boolean passed = eos && req.params.ignoreEos() && req.grammar == null;
            // a stop token (stop_token_ids) ends the answer here; the end of the turn comes first (no stop_reason then), as in vLLM
            // (not before min_tokens, where only a grammar can have forced it: as vLLM, which checks none there)
            boolean stopHere = (!eos || passed) && isStopToken(token) && stopsArmed();
            // the earlier tokens' bytes this token's text begins with: only a logprob's cut needs them (no copy otherwise)
            byte[] carried = lp != null ? detok.heldBytes() : null;
            // a stop token's text is output only where the request keeps it (include_stop_str_in_output)
            String piece = eos || stopHere && !req.includeStopStr ? "" : piece(token);
            if (lp != null) {
                // a token whose text is never output is listed without text, so the listed tokens join to the content:
                // an end-of-sentence token that does not end the turn (ignore_eos), a stop token whose text is not
                // kept; the end-of-sentence token that ends the turn is listed as the token it is (skip_special_tokens false)
                boolean hidden = passed && !stopHere || stopHere && !req.includeStopStr
                        || req.skipSpecialTokens && tokenizer.isControl(token);
                heldLogprobs.add(new HeldLogprob(logprob(lp, hidden), pushedChars, pushedChars + piece.length(), piece, carried));
            }
            pushedChars += piece.length();
            if (stopHere) {
                stopToken = token;
                text(piece);
                return false;
            }
            if (eos) return true;
            return text(piece);
        }

        /**
         * Whether a stop string or stop token may end the answer now: past vLLM's min_tokens (the tokens generated, this
         * one counted).
         */
        private boolean stopsArmed() {
            return req.minTokens == 0 || gen.generatedTokens() > req.minTokens;
        }

        /** Whether the request lists this id in its stop_token_ids (at most {@link Requests#MAX_STOP_TOKEN_IDS} of them). */
        private boolean isStopToken(int token) {
            for (int id : req.stopTokenIds) if (id == token) return true;
            return false;
        }

        /**
         * The text of a token; ids the tokenizer does not know (the model's vocabulary can be larger) have none, and
         * neither have control tokens unless the request keeps them or the output parser reads them as markup.
         */
        private String piece(int token) {
            if (token < 0 || token >= tokenizer.vocabSize()) return "";
            if (req.skipSpecialTokens && tokenizer.isControl(token)
                    && !(parser != null && parser.takesMarker(tokenText(token)))) return "";
            return detok.push(token);
        }

        private boolean text(String piece) {
            String out = stops.push(piece, stopsArmed());
            releasedChars += out.length();
            unpaired.append(out);
            releaseLogprobs(false);
            pushPaired();
            return !stops.stopped();
        }

        /**
         * Passes on the released text up to where the first token whose logprob is still held begins (all of it once
         * nothing is held): without logprobs nothing is ever held, and the text goes on as the stop filter releases it.
         */
        private void pushPaired() {
            int upTo = heldLogprobs.isEmpty() ? releasedChars : Math.min(releasedChars, heldLogprobs.peekFirst().start());
            int n = unpaired.length() - (releasedChars - upTo);
            if (n <= 0) return;
            push(unpaired.substring(0, n));
            unpaired.delete(0, n);
        }

        /**
         * Moves the logprobs of tokens whose text the stop filter has released to the outgoing list, so logprobs
         * never run ahead of the text. Once a stop string matched, a token whose text runs into it is listed with the
         * part before it, and tokens wholly inside it (or after it) are left out: the tokens' text joins to the content.
         * @param all release everything (generation ended without a stop string)
         */
        private void releaseLogprobs(boolean all) {
            boolean stopped = stops.stopped();
            while (!heldLogprobs.isEmpty()) {
                HeldLogprob h = heldLogprobs.peekFirst();
                if (all || h.end() <= releasedChars) {
                    logprobs.add(h.lp());
                } else if (stopped && h.start() < releasedChars) {
                    // the token's own bytes that went into the released part: the most of them that, after the earlier
                    // tokens' bytes its text began with (theirs, listed with them already), decode to no more than it
                    int chars = releasedChars - h.start();
                    EngineEvent.TokenLogprob t = h.lp();
                    byte[] with = java.util.Arrays.copyOf(h.carried(), h.carried().length + t.bytes().length);
                    System.arraycopy(t.bytes(), 0, with, h.carried().length, t.bytes().length);
                    int own = t.bytes().length;
                    while (own > 0 && StreamingDetokenizer.decodedLength(java.util.Arrays.copyOf(with, h.carried().length + own)) > chars)
                        own--;
                    byte[] mine = java.util.Arrays.copyOf(t.bytes(), own);
                    logprobs.add(new EngineEvent.TokenLogprob(new String(mine, StandardCharsets.UTF_8), mine, t.logprob(), t.top(),
                            t.listed()));
                } else if (!stopped) {
                    return;
                }
                heldLogprobs.pollFirst();
            }
        }

        private void push(String s) {
            if (s.isEmpty()) return;
            if (parser != null) {
                for (OutputParser.Event e : parser.push(s)) add(e);
            } else {
                add(new OutputParser.ContentDelta(s));
            }
        }

        private void add(OutputParser.Event e) {
            if (e instanceof OutputParser.ToolCallStart) toolCalls = true;
            if (!events.isEmpty()) {
                OutputParser.Event last = events.getLast();
                if (last instanceof OutputParser.ContentDelta a && e instanceof OutputParser.ContentDelta b) {
                    events.set(events.size() - 1, new OutputParser.ContentDelta(a.text() + b.text()));
                    return;
                }
                if (last instanceof OutputParser.ReasoningDelta a && e instanceof OutputParser.ReasoningDelta b) {
                    events.set(events.size() - 1, new OutputParser.ReasoningDelta(a.text() + b.text()));
                    return;
                }
                if (last instanceof OutputParser.ToolCallArgumentsDelta a && e instanceof OutputParser.ToolCallArgumentsDelta b
                        && a.index() == b.index()) {
                    events.set(events.size() - 1, new OutputParser.ToolCallArgumentsDelta(a.index(), a.fragment() + b.fragment()));
                    return;
                }
            }
            events.add(e);
        }

        /** After the last token: release held-back text and close the parser. */
        void finishText() {
            // a stop string or stop token cuts the text wherever it matches, as the length limit does: inside a
            // character (its first bytes are no text) and inside markup too (not content)
            boolean cut = gen.finish() == Generation.Finish.LENGTH || stops.stopped() || stopToken != null;
            if (!stops.stopped()) {
                String out = stops.push(detok.flush(cut), stopsArmed());
                releasedChars += out.length();
                unpaired.append(out);
                if (!stops.stopped()) unpaired.append(stops.flush());
                releaseLogprobs(!stops.stopped());
            }
            push(unpaired.toString());
            unpaired.setLength(0);
            if (parser != null) for (OutputParser.Event e : parser.finish(cut)) add(e);
        }

        /** Sends the prompt's scores (before this step's output, which they precede in the answer). */
        void sendPromptScores() {
            Sampler.TokenLogprobs[] sc = gen.promptScores();
            List<EngineEvent.TokenLogprob> out = new ArrayList<>(sc.length);
            for (int i = 0; i < sc.length; i++) {
                String text = tokenText(req.prompt[i]);
                byte[] b = tokenBytes(req.prompt[i]);
                if (sc[i] == null) {
                    out.add(new EngineEvent.TokenLogprob(text, b, Float.NaN, List.of(), false));
                } else {
                    EngineEvent.TokenLogprob s = logprob(sc[i], false);
                    out.add(new EngineEvent.TokenLogprob(text, b, sc[i].logprob(), s.top(), s.listed()));
                }
            }
            send(this, new EngineEvent.PromptLogprobs(out));
        }

        /** Sends what this step decided, if anything. */
        void flush() {
            long now = System.nanoTime();
            if (emitted > 0) {
                if (lastEmitNanos != 0) state.metrics().interToken(now - lastEmitNanos);
                lastEmitNanos = now;
                emitted = 0;
            }
            events.removeIf(e -> e instanceof OutputParser.End || e instanceof OutputParser.ToolCallEnd);
            if (events.isEmpty() && logprobs.isEmpty()) return;
            send(this, new EngineEvent.Delta(events, logprobs, now, gen.generatedTokens()));
            events = new ArrayList<>();
            logprobs = new ArrayList<>();
        }

        /** @param hidden a control token left out of the text: listed with empty text, as it appears in the content */
        private EngineEvent.TokenLogprob logprob(Sampler.TokenLogprobs lp, boolean hidden) {
            List<EngineEvent.TopLogprob> top = new ArrayList<>(lp.topIds().length);
            boolean listed = false;
            for (int i = 0; i < lp.topIds().length; i++) {
                top.add(new EngineEvent.TopLogprob(tokenText(lp.topIds()[i]), tokenBytes(lp.topIds()[i]), lp.topLogprobs()[i]));
                listed |= lp.topIds()[i] == lp.token();
            }
            return hidden ? new EngineEvent.TokenLogprob("", new byte[0], lp.logprob(), top, listed)
                    : new EngineEvent.TokenLogprob(tokenText(lp.token()), tokenBytes(lp.token()), lp.logprob(), top, listed);
        }

        private byte[] tokenBytes(int id) {
            return id >= 0 && id < tokenizer.vocabSize() ? tokenizer.tokenBytes(id) : new byte[0];
        }

        private String tokenText(int id) {
            return new String(tokenBytes(id), StandardCharsets.UTF_8);
        }
    }
}
