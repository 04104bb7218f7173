package io.ds4j.server;

import io.ds4j.server.config.ServerConfig;

import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * What the verticles of one server share by reference: the running configuration (swapped atomically on reload),
 * the restart-pending changes, the model facts once loaded, metrics and engine counters. Every field is safe to read
 * from any thread; only the bootstrap (config) and the engine (model, counters) write.
 */
public final class ServerState {
    private volatile ServerConfig config;
    private volatile List<ServerConfig.Change> pending = List.of();
    private volatile ModelInfo model;
    private volatile String loadError;
    private final ServerMetrics metrics;
    /** Engine steps run so far (all requests). */
    public final AtomicLong engineSteps = new AtomicLong();
    /** The last finished requests, newest last (bounded), for tests and diagnostics. */
    private final ConcurrentLinkedDeque<JobRecord> recent = new ConcurrentLinkedDeque<>();
    private final long startedAtMillis = System.currentTimeMillis();
    private volatile int port;
    private volatile ReloadOutcome lastReload;
    /** Set once the server began shutting down ({@link Ds4jServer#close}): no new generation is accepted. */
    private volatile boolean draining;
    /** Generation exchanges (HTTP) whose response has not ended yet. */
    private final AtomicInteger openExchanges = new AtomicInteger();
    /** Request bodies waiting for a thread of the long-text lane (not yet tokenising), over all HTTP verticles. */
    private final AtomicInteger longTextWaiting = new AtomicInteger();
    private final AtomicInteger longTextRunning = new AtomicInteger();
    /**
     * Generation exchanges submitted or about to be, by request id, each with how to end it from the HTTP side: the
     * shutdown's way to answer requests when the engine's thread cannot (it is stuck inside one step).
     */
    private final Map<String, java.util.function.Consumer<String>> generations = new ConcurrentHashMap<>();
    /**
     * Why a cluster gateway stopped a request this engine node relays, by the relay's id ({@link #RELAY_HEADER}), from
     * the moment the node closes the request's local connection until the API side reads it there: the API sees only
     * a client going away. At most {@link #RELAY_REASONS} kept (one the API never reads, its request done, goes first).
     */
    private final Map<String, String> relayStops = java.util.Collections.synchronizedMap(new java.util.LinkedHashMap<>() {
        @Override
        protected boolean removeEldestEntry(Map.Entry<String, String> eldest) {
            return size() > RELAY_REASONS;
        }
    });
    /** The header an engine node's relayed request carries its relay's id in (set by the node itself). */
    public static final String RELAY_HEADER = "x-ds4j-relay";
    private static final int RELAY_REASONS = 1024;
    /** Requests the engine runs (started, not yet retired); written by the engine only. */
    private final Set<String> running = ConcurrentHashMap.newKeySet();
    /** Set by the engine when it took up the shutdown (refused what waits, began the grace period). */
    private volatile boolean drainTakenUp;

    public ServerState(ServerConfig config, ServerMetrics metrics) {
        this.config = config;
        this.metrics = metrics;
    }

    /** The configuration new requests run under. */
    public ServerConfig config() {
        return config;
    }

    /**
     * A reload that changed something: its configuration, its restart-pending keys and its outcome, published at once,
     * so that a reader ({@link #reloads}) never pairs one reload's configuration or pending keys with another's outcome
     * (/props showed a reload's empty list, or its new values, beside the previous reload's outcome).
     */
    synchronized void reloaded(ServerConfig c, List<ServerConfig.Change> pendingRestart, ReloadOutcome r) {
        this.pending = List.copyOf(pendingRestart);
        this.config = c;
        this.lastReload = r;
    }

    /** Restart-requiring keys whose value in the file differs from the running value (as of the last reload's outcome). */
    public List<ServerConfig.Change> pending() {
        return pending;
    }

    /** The configuration, the restart-pending keys and the last reload's outcome (null before any), read together. */
    public record Reloads(ServerConfig config, List<ServerConfig.Change> pending, ReloadOutcome last) {}

    /** {@link #config()}, {@link #pending()} and {@link #lastReload()} of one moment. */
    public synchronized Reloads reloads() {
        return new Reloads(config, pending, lastReload);
    }

    /** The loaded model, or null while loading (or after a failed load). */
    public ModelInfo model() {
        return model;
    }

    void model(ModelInfo m) {
        this.model = m;
    }

    /** True while the model loads (neither loaded nor failed). */
    public boolean loading() {
        return model == null && loadError == null;
    }

    /** Why loading failed, or null. */
    public String loadError() {
        return loadError;
    }

    void loadError(String e) {
        this.loadError = e;
    }

    /** True once the server is shutting down: generation requests get 503 server_shutting_down, /health 503. */
    public boolean draining() {
        return draining;
    }

    void beginDrain() {
        this.draining = true;
        for (Runnable r : drainListeners) r.run();
    }

    /** What runs once the shutdown begins (an engine node's announcement that it takes no more requests). */
    private final List<Runnable> drainListeners = new java.util.concurrent.CopyOnWriteArrayList<>();

    /** Runs r when the server begins shutting down ({@link #draining}), on the thread that begins it. */
    public void onDrain(Runnable r) {
        drainListeners.add(r);
    }

    /** Requests being tokenised, and generation exchanges whose HTTP response has not ended (streams included). */
    public int openExchanges() {
        return openExchanges.get();
    }

    void exchangeOpened() {
        openExchanges.incrementAndGet();
    }

    void exchangeClosed() {
        openExchanges.decrementAndGet();
    }

    /** A generation exchange opened; end(why) ends it from the HTTP side with 503 server_shutting_down. */
    void generationOpened(String id, java.util.function.Consumer<String> end) {
        generations.put(id, end);
    }

    void generationClosed(String id) {
        generations.remove(id);
    }

    /** Generation exchanges open (submitted to the engine or about to be). */
    public int openGenerations() {
        return generations.size();
    }

    /** The engine started running a request. */
    void started(String id) {
        running.add(id);
    }

    /** The engine is done with a request (finished, failed, cancelled or ended by the shutdown). */
    void retired(String id) {
        running.remove(id);
    }

    /** Whether the engine runs the request (it started and is not retired yet). */
    boolean runs(String id) {
        return running.contains(id);
    }

    void drainTakenUp() {
        drainTakenUp = true;
    }

    /** Whether the engine took up the shutdown. */
    boolean engineTookUpDrain() {
        return drainTakenUp;
    }

    /**
     * Ends open generation exchanges from the HTTP side with 503 server_shutting_down (each on its own event loop).
     * @param runningToo also those the engine runs; else only those it has not started
     * @return how many were ended
     */
    int endGenerations(boolean runningToo, String whyWaiting, String whyRunning) {
        int n = 0;
        for (var e : generations.entrySet()) {
            boolean runs = running.contains(e.getKey());
            if (runs && !runningToo) continue;
            e.getValue().accept(runs ? whyRunning : whyWaiting);
            n++;
        }
        return n;
    }

    /** Request bodies waiting for a thread of the long-text lane ({@link HttpVerticle#LONG_TEXT_BYTES}). */
    public int longTextWaiting() {
        return longTextWaiting.get();
    }

    /** One more body waits for the long-text lane; returns how many wait now. */
    int longTextQueued() {
        return longTextWaiting.incrementAndGet();
    }

    /** A body stopped waiting for the long-text lane (its tokenisation started, or it will not run). */
    void longTextDequeued() {
        longTextWaiting.decrementAndGet();
    }

    /** A tokenisation began on a thread of the long-text lane. */
    void longTextStarted() {
        longTextRunning.incrementAndGet();
    }

    /** A tokenisation on the long-text lane ended. */
    void longTextEnded() {
        longTextRunning.decrementAndGet();
    }

    /** Tokenisations running on the long-text lane's threads now. */
    int longTextRunning() {
        return longTextRunning.get();
    }

    public ServerMetrics metrics() {
        return metrics;
    }

    /** The port HTTP listens on (0 until it does). */
    public int port() {
        return port;
    }

    void port(int p) {
        this.port = p;
    }

    /**
     * The outcome of the latest config file change.
     * @param outcome "applied", "applied, restart pending", "unchanged", "rejected", "file missing" or "file unusable" (not a regular file, or larger than 1 MiB)
     * @param message what was applied, what waits for a restart, or why the file was rejected
     */
    public record ReloadOutcome(java.time.Instant at, String outcome, String message) {}

    /** The latest config file change, or null when there was none. */
    public ReloadOutcome lastReload() {
        return lastReload;
    }

    synchronized void lastReload(ReloadOutcome r) {
        this.lastReload = r;
    }

    private volatile java.util.function.Supplier<com.fasterxml.jackson.databind.JsonNode> clusterView;

    /** This node's part in a cluster for /props (role, node id, members), or null when not clustered. */
    public java.util.function.Supplier<com.fasterxml.jackson.databind.JsonNode> clusterView() {
        return clusterView;
    }

    /** Set once by the cluster composition when this server joined a cluster. */
    public void clusterView(java.util.function.Supplier<com.fasterxml.jackson.databind.JsonNode> view) {
        this.clusterView = view;
    }

    public long startedAtMillis() {
        return startedAtMillis;
    }

    /**
     * That limits.maxContextTokens is above the model's own limit and so capped to it, with both values; null when it is
     * not (or no model is loaded yet): said where the value is set, as /props shows the capped one as n_ctx.
     */
    public String contextCap() {
        return contextCap(config);
    }

    /** {@link #contextCap()} for a configuration not yet applied (a reload's, said before it is published). */
    String contextCap(ServerConfig cfg) {
        ModelInfo m = model;
        int c = cfg.maxContextTokens(), capped = maxContext(cfg);
        if (m == null || capped == c) return null;
        return "limits.maxContextTokens " + c + " is capped to " + capped
                + ", the model's context (its max_position_embeddings): positions past it are not ones the model was built for";
    }

    /** Effective context limit: limits.maxContextTokens capped by the model's own limit. */
    public int maxContext() {
        return maxContext(config);
    }

    private int maxContext(ServerConfig cfg) {
        ModelInfo m = model;
        int c = cfg.maxContextTokens();
        return m == null ? c : io.ds4j.engine.Generation.contextLimit(c, m.maxPositions());
    }

    /**
     * How one request ended.
     * @param outcome "stop", "length", "tool_calls", "cancelled" or "failed"
     * @param promptProcessed prompt tokens prefilled before it ended
     * @param steps engine steps it ran
     */
    public record JobRecord(String id, String outcome, int promptTokens, int promptProcessed, int generated, long steps) {}

    void record(JobRecord r) {
        recent.addLast(r);
        while (recent.size() > 512) recent.pollFirst();
    }

    /** The record of a finished request, or null. */
    public JobRecord finished(String id) {
        for (var it = recent.descendingIterator(); it.hasNext(); ) {
            JobRecord r = it.next();
            if (r.id().equals(id)) return r;
        }
        return null;
    }

    /** The last finished requests, oldest first. */
    public List<JobRecord> recent() {
        return List.copyOf(recent);
    }

    /**
     * An engine node stopped the relayed request {@code relayId} for its gateway, for {@code why}: said before the node
     * closes the request's local connection, so that the API side can say why ({@link #relayStopReason}).
     */
    public void relayStopped(String relayId, String why) {
        relayStops.put(relayId, why);
    }

    /** Why the gateway stopped the relayed request {@code relayId} (taken: asked once), or null where it did not. */
    public String relayStopReason(String relayId) {
        return relayId == null ? null : relayStops.remove(relayId);
    }
}
