package io.ds4j.server;

import io.ds4j.server.config.ConfigException;
import io.ds4j.server.config.ServerConfig;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import io.vertx.config.ConfigRetriever;
import io.vertx.config.ConfigRetrieverOptions;
import io.vertx.config.ConfigStoreOptions;
import io.vertx.core.json.JsonObject;
import io.vertx.core.DeploymentOptions;
import io.vertx.core.Future;
import io.vertx.core.Promise;
import io.vertx.core.ThreadingModel;
import io.vertx.core.Vertx;
import io.vertx.core.VertxOptions;
import io.vertx.core.eventbus.EventBusOptions;
import io.vertx.core.spi.cluster.ClusterManager;
import io.vertx.micrometer.MetricsDomain;
import io.vertx.micrometer.MicrometerMetricsFactory;
import io.vertx.micrometer.MicrometerMetricsOptions;
import io.vertx.micrometer.VertxPrometheusOptions;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.nio.file.Files;
import java.io.IOException;
import java.nio.file.Path;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

/**
 * Starts and stops one ds4j server: a Vert.x instance with Micrometer/Prometheus metrics, several {@link HttpVerticle}s
 * on the event loops, one {@link EngineVerticle} on its own single-thread worker pool, and a watcher on
 * the configuration file (vertx-config, scanned every server.configScanMs) that applies live changes atomically and reports restart-requiring ones.
 */
public final class Ds4jServer {
    private static final Logger LOG = LoggerFactory.getLogger(Ds4jServer.class);

    /**
     * How to start.
     * @param config     the validated startup configuration (file + overrides)
     * @param configFile the file to watch for changes, or null for none
     * @param overrides  CLI overrides (dotted key → value), re-applied on every reload so flags keep winning
     * @param provider   loads the model (the engine calls it on its thread)
     */
    public record Options(ServerConfig config, Path configFile, Map<String, Object> overrides, ModelProvider provider,
                          ClusterManager cluster) {
        /**
         * @param cluster the cluster manager to join a Vert.x cluster with (the event bus then binds to
         *                {@code cluster.host}:{@code cluster.eventBusPort}), or null for a local event bus
         */
        public Options {
            // not Map.copyOf: a key overridden to null (--set model.name=null) is an override too
            overrides = overrides == null ? Map.of() : java.util.Collections.unmodifiableMap(new java.util.LinkedHashMap<>(overrides));
        }

        /** A server on a local (not clustered) event bus. */
        public Options(ServerConfig config, Path configFile, Map<String, Object> overrides, ModelProvider provider) {
            this(config, configFile, overrides, provider, null);
        }
    }

    private final Options opt;
    private final Vertx vertx;
    private final ServerState state;
    private final PrometheusMeterRegistry registry;
    private final Promise<Void> ready = Promise.promise();
    private long scanTimer = -1;
    private ConfigRetriever retriever;
    /**
     * Why the config file was last seen unusable — missing, not a regular file, too large, unreadable
     * ({@link ConfigFileStore#unusable}) — or null while it is usable: said once when it becomes so (and again when the
     * reason changes), once when it is back.
     */
    private final java.util.concurrent.atomic.AtomicReference<String> unusable = new java.util.concurrent.atomic.AtomicReference<>();
    /** The file's content as last handed to onConfigText: what vertx-config compares its next scan with. */
    private volatile byte[] lastContent;

    private Ds4jServer(Options opt, PrometheusMeterRegistry registry, Vertx vertx) {
        this.opt = opt;
        this.registry = registry;
        this.vertx = vertx;
        this.state = new ServerState(opt.config(), new ServerMetrics(registry, opt.provider().servedId(opt.config())));
        vertx.eventBus().registerCodec(new LocalCodec());
    }

    /** A Prometheus registry with the ds4j naming convention (metric names with colons kept as written). */
    public static PrometheusMeterRegistry newRegistry() {
        PrometheusMeterRegistry registry = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
        registry.config().namingConvention(new ColonNamingConvention());
        // Vert.x's in-flight request gauge is decremented twice for a request the client aborts, so it drifts below
        // zero; it is left out rather than served wrong (vllm:num_requests_running counts what runs)
        registry.config().meterFilter(io.micrometer.core.instrument.config.MeterFilter.deny(
                id -> id.getName().equals("vertx.http.server.active.requests")));
        return registry;
    }

    /**
     * A Vert.x builder reporting to the registry; with a cluster manager, the event bus binds to
     * {@code cluster.host}:{@code cluster.eventBusPort} and is built with {@code buildClustered()}.
     */
    public static io.vertx.core.VertxBuilder vertxBuilder(PrometheusMeterRegistry registry, ServerConfig cfg, ClusterManager cluster) {
        MicrometerMetricsOptions mo = new MicrometerMetricsOptions().setEnabled(true).setJvmMetricsEnabled(true)
                // one registry per server: several servers may run in one JVM (tests, bench-server)
                .setRegistryName("ds4j-" + UUID.randomUUID())
                .setPrometheusOptions(new VertxPrometheusOptions().setEnabled(true))
                // per-request reply addresses would make one event-bus series per request
                .addDisabledMetricsCategory(MetricsDomain.EVENT_BUS);
        VertxOptions vo = new VertxOptions().setMetricsOptions(mo);
        if (cluster != null) {
            ServerConfig.Cluster c = cfg.cluster();
            vo.setEventBusOptions(new EventBusOptions().setHost(c.host()).setPort(c.eventBusPort()).setClusterPublicHost(c.host()));
        }
        io.vertx.core.VertxBuilder b = Vertx.builder().with(vo).withMetrics(new MicrometerMetricsFactory(registry));
        return cluster != null ? b.withClusterManager(cluster) : b;
    }

    /**
     * Starts the server. First the model provider checks what it can before anything binds (the model folder, the
     * backend, the draft); then HTTP binds and listens; then the engine loads the model. The returned future completes
     * once HTTP is listening; the model may still be loading (see {@link #ready()}; /health answers "loading" until
     * then). It fails, after everything started is closed again, when the check fails or the port cannot be bound;
     * the failure's message says so in one line (e.g. "cannot listen on 127.0.0.1:8080: address already in use").
     */
    public static Future<Ds4jServer> start(Options opt) {
        // before anything a client sends can be logged
        LogEscaping.install();
        LogLevels.apply(opt.config().logLevel());
        PrometheusMeterRegistry registry = newRegistry();
        io.vertx.core.VertxBuilder builder = vertxBuilder(registry, opt.config(), opt.cluster());
        if (opt.cluster() == null) return start(new Ds4jServer(opt, registry, builder.build()));
        ServerConfig.Cluster c = opt.config().cluster();
        Promise<Ds4jServer> joined = Promise.promise();
        builder.buildClustered().onComplete(ar -> {
            if (ar.succeeded()) {
                start(new Ds4jServer(opt, registry, ar.result())).onComplete(joined);
            } else {
                registry.close();
                joined.fail(new StartException("cannot join cluster '" + c.name() + "' on " + c.host() + ":" + c.port() + ": "
                        + bindReason(ar.cause()), ar.cause()));
            }
        });
        return joined.future();
    }

    private static Future<Ds4jServer> start(Ds4jServer s) {
        // a promise with no Vert.x context: its listeners run on the thread that completes it
        Promise<Ds4jServer> result = Promise.promise();
        s.boot().onComplete(ar -> {
            if (ar.succeeded()) {
                result.complete(s);
                return;
            }
            // Close from a thread outside Vert.x: a listener registered on this instance's own event loop would
            // never run once close() has stopped that loop, and the caller would wait forever.
            Thread.ofPlatform().name("ds4j-start-failed").daemon().start(() -> {
                try {
                    s.close().toCompletionStage().toCompletableFuture().get(30, TimeUnit.SECONDS);
                } catch (Exception ignored) {
                    // the start failure is what matters
                }
                result.fail(ar.cause());
            });
        });
        return result.future();
    }

    /** Why the server could not start, in one line. */
    public static final class StartException extends RuntimeException {
        public StartException(String message, Throwable cause) {
            super(message, cause);
        }
    }

    private Future<Void> boot() {
        ServerConfig cfg = opt.config();
        String webroot = resolveWebroot(cfg.webroot());
        int instances = cfg.httpInstances();
        return vertx.<Void>executeBlocking(() -> {
            try {
                opt.provider().check(cfg);
            } catch (Exception e) {
                throw new StartException(e.getMessage() != null ? e.getMessage() : e.toString(), e);
            }
            return null;
        }, false).compose(v -> vertx.deployVerticle(() -> new HttpVerticle(state, registry, webroot), new DeploymentOptions().setInstances(instances))
                .recover(e -> Future.failedFuture(new StartException("cannot listen on " + cfg.host() + ":" + cfg.port() + ": "
                        + bindReason(e), e))))
                .compose(id -> {
                    int port = state.port();
                    LOG.info("listening on http://{}:{} ({} HTTP verticle instance(s)); static files from {}", cfg.host(), port,
                            instances, webroot);
                    String noWebroot = webrootProblem(webroot);
                    if (noWebroot != null) LOG.warn("{}", noWebroot);
                    String repeated = cfg.repeatedApiKeys();
                    if (repeated != null) LOG.warn("{}", repeated);
                    DeploymentOptions engine = new DeploymentOptions().setThreadingModel(ThreadingModel.WORKER)
                            .setWorkerPoolName("ds4j-engine").setWorkerPoolSize(1)
                            // a model load or a big prefill chunk may legitimately hold the engine thread for long
                            .setMaxWorkerExecuteTime(1).setMaxWorkerExecuteTimeUnit(TimeUnit.DAYS);
                    vertx.deployVerticle(new EngineVerticle(state, opt.provider()), engine).onComplete(ar -> {
                        if (ar.succeeded()) {
                            LOG.info("ready: model '{}' serving on http://{}:{}", state.model().id(), cfg.host(), state.port());
                            ready.tryComplete();
                        } else {
                            ready.tryFail(ar.cause());
                        }
                    });
                    return watchConfig();
                });
    }

    /** A bind failure in plain words: "address already in use", "unknown host 256.1.1.1", ... */
    static String bindReason(Throwable e) {
        Throwable t = e;
        while (t.getCause() != null && t.getCause() != t && (t.getMessage() == null || !(t instanceof java.io.IOException))) t = t.getCause();
        String m = t.getMessage() != null ? t.getMessage() : t.toString();
        if (t instanceof java.net.BindException || m.toLowerCase(java.util.Locale.ROOT).contains("address already in use")) {
            String l = m.toLowerCase(java.util.Locale.ROOT);
            if (l.contains("already in use")) return "address already in use";
            if (l.contains("cannot assign")) return "the address is not one of this machine's (cannot assign requested address)";
            if (l.contains("permission")) return "permission denied (ports below 1024 need privileges)";
        }
        if (t instanceof java.net.UnknownHostException || t instanceof java.nio.channels.UnresolvedAddressException
                || m.toLowerCase(java.util.Locale.ROOT).contains("unresolved"))
            return "unknown host or invalid address";
        if (t instanceof java.net.SocketException && m.toLowerCase(java.util.Locale.ROOT).contains("permission"))
            return "permission denied (ports below 1024 need privileges)";
        m = m.replaceFirst("^(bind\\(\\.\\.\\.\\) failed: |[a-zA-Z.]+Exception: )", "");
        return m.isEmpty() ? t.getClass().getSimpleName() : Character.toLowerCase(m.charAt(0)) + m.substring(1);
    }

    /** Relative to the working folder, else to the application folder (the parent of target/ds4j.jar). */
    public static String resolveWebroot(String w) {
        Path p = appRelative(w);
        return (p != null ? p : Path.of(w)).toAbsolutePath().normalize().toString();
    }

    /**
     * What is wrong with server.webroot as resolved ({@link #resolveWebroot}), or null when it is a folder: a missing
     * folder is no reason to refuse the API, but the playground at / then answers 404 and the log says why.
     */
    public static String webrootProblem(String resolved) {
        Path p = Path.of(resolved);
        if (Files.isDirectory(p)) return null;
        return "server.webroot: " + (Files.exists(p) ? "not a folder: " : "folder not found: ") + resolved
                + " (the playground at / answers 404 until it is there)";
    }

    /**
     * A path as given when it is absolute or exists relative to the working folder; else the same relative path in
     * the application folder (the folder holding pom.xml above the running code, e.g. the checkout for
     * target/ds4j.jar) when it exists there; else null.
     */
    public static Path appRelative(String rel) {
        Path p = Path.of(rel);
        if (p.isAbsolute()) return Files.exists(p) ? p : null;
        if (Files.exists(p)) return p.toAbsolutePath().normalize();
        try {
            Path code = Path.of(Ds4jServer.class.getProtectionDomain().getCodeSource().getLocation().toURI());
            for (Path dir = code.getParent(); dir != null; dir = dir.getParent()) {
                if (Files.exists(dir.resolve(rel))) return dir.resolve(rel).toAbsolutePath().normalize();
                if (Files.exists(dir.resolve("pom.xml"))) break;
            }
        } catch (Exception ignored) {
            // no application folder to look in
        }
        return null;
    }

    /**
     * Watches the configuration file with vertx-config (the file read raw through {@link ConfigFileStore}, which reads
     * only a readable regular file of at most 1 MiB, scanned every {@code server.configScanMs}); each changed version is
     * validated and applied (or rejected) by {@link #onConfigText}. vertx-config reports a failed scan only as an error
     * line at every scan (silenced in simplelogger.properties), so a separate check of the path says once when the file
     * goes missing or becomes unusable (a FIFO, a device, a folder, too large, unreadable: never opened) and once when
     * it is back
     * (put back as it was, it gets no change from vertx-config, so the check records that outcome itself); the running
     * configuration stays.
     */
    private Future<Void> watchConfig() {
        Path file = opt.configFile();
        if (file == null) return Future.succeededFuture();
        long scanMs = opt.config().configScanMs();
        // the file's bytes, not a string: decoding here would turn bytes that are not UTF-8 into U+FFFD unseen
        ConfigStoreOptions store = new ConfigStoreOptions().setType(ConfigFileStore.TYPE).setFormat("raw")
                .setConfig(new JsonObject().put("path", file.toAbsolutePath().toString()).put("raw.key", "bytes")
                        .put("raw.type", "binary"));
        retriever = ConfigRetriever.create(vertx, new ConfigRetrieverOptions().addStore(store).setScanPeriod(scanMs));
        return retriever.getConfig().transform(ar -> {
            // the file may have changed between the caller's read and the watcher's baseline
            byte[] first = ar.succeeded() ? ar.result().getBinary("bytes") : null;
            if (first != null) onConfigText(first, false);
            else vertx.executeBlocking(() -> ConfigFileStore.unusable(file), true)
                    .onSuccess(why -> configUnusable(file, why == null ? "cannot be read" : why));
            retriever.listen(change -> {
                byte[] bytes = change.getNewConfiguration().getBinary("bytes");
                // off the event loop, one change after the other in their order: a reload may read model folders and
                // ask the GPU runtime about its devices for the next start (checkNextStart), which can take a while
                if (bytes != null) vertx.executeBlocking(() -> {
                    onConfigText(bytes, true);
                    return null;
                }, true).onFailure(e -> LOG.error("config reload of {} failed: {}", file, e.toString(), e));
            });
            scanTimer = vertx.setPeriodic(scanMs, id -> checkPresence(file));
            LOG.info("watching {} for changes (every {} ms)", file, scanMs);
            return Future.<Void>succeededFuture();
        });
    }

    private void checkPresence(Path file) {
        // the attributes only, and the file read only where it is a regular file of bounded size: a FIFO at the path
        // would hold the reading thread, /dev/zero would read without end
        vertx.executeBlocking(() -> ConfigFileStore.unusable(file), true).onSuccess(why -> {
            if (why != null) configUnusable(file, why);
            else if (unusable.get() != null) vertx.executeBlocking(() -> ConfigFileStore.read(file), true).onComplete(read -> {
                // onConfigText may have said it first, when the watcher's scan came before this check
                if (unusable.getAndSet(null) == null) return;
                if (read.succeeded() && java.util.Arrays.equals(read.result(), lastContent)) {
                    // vertx-config reports no change for a file back as it was, so nothing else would replace "missing"
                    String msg = "config file " + file + " is back, unchanged; the configuration stays as it is";
                    state.lastReload(new ServerState.ReloadOutcome(Instant.now(), "unchanged", msg));
                    LOG.info(msg);
                } else {
                    // with other content: the watcher's next scan reads it, and onConfigText says what it decided
                    LOG.info("config file {} is back", file);
                }
            });
        });
    }

    /** Says once that the file became unusable for reason why (a clause: "is missing"), and again if the reason changes. */
    private void configUnusable(Path file, String why) {
        if (why.equals(unusable.getAndSet(why))) return;
        String msg = "config file " + file + " " + why + "; keeping the current configuration";
        state.lastReload(new ServerState.ReloadOutcome(Instant.now(), why.equals("is missing") ? "file missing" : "file unusable", msg));
        LOG.warn(msg);
    }

    /** The keys a change of which can cap, or stop capping, the prefill chunk or the floor ({@link ServerConfig#prefillCaps}). */
    private static final java.util.Set<String> BUDGET_KEYS = java.util.Set.of("limits.prefillChunk",
            "scheduler.minPrefillChunk", "scheduler.tokenBudget");

    /** The restart keys {@link ModelProvider#checkNextStart} judges: a reload that changes one runs it. */
    private static final java.util.Set<String> NEXT_START_KEYS = java.util.Set.of("model.path", "speculative.draft",
            "model.backend");

    /** The file's values a flag overrides, as last read (onConfigText): each is warned about once. */
    private List<String> warnedOverrides = List.of();

    /**
     * How long an empty file is given before it is read again (ms): an editor that truncates the file and then writes it
     * (a shell's {@code cat new > server.json}) shows the watcher an empty file for a moment, which was rejected with an
     * error though nobody meant to write an empty file.
     */
    static final long EMPTY_SETTLE_MS = 200;

    /** Whether a configuration file's bytes hold nothing but white space. */
    private static boolean blank(byte[] content) {
        for (byte b : content) if (b != ' ' && b != '\t' && b != '\n' && b != '\r') return false;
        return true;
    }

    /** The file's bytes after {@link #EMPTY_SETTLE_MS} where it was seen empty; the empty bytes where it still is. */
    private byte[] settled(Path file, byte[] empty) {
        try {
            Thread.sleep(EMPTY_SETTLE_MS);
            byte[] again = ConfigFileStore.read(file);
            if (!blank(again)) {
                LOG.debug("config file {} was empty for a moment (being written); read again", file);
                return again;
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (IOException e) {
            // unreadable now: the empty bytes are judged as they were seen, and the presence check reports the file
        }
        return empty;
    }

    /**
     * Validates a new version of the file as a whole and applies it atomically, or keeps the old one. A change whose
     * bytes are those judged last is none: the watcher hands over bytes this server has judged already (the same
     * rejected file again, or the file read again after an empty moment, which the watcher, whose last view was the
     * empty file, sees as a change), and judging them again said the rejection twice or a false "no effective change".
     * A file coming back after it was unusable is judged, and said to be back.
     */
    void onConfigText(byte[] content, boolean changed) {
        Path file = opt.configFile();
        if (changed && blank(content)) content = settled(file, content);
        if (changed && unusable.get() == null && java.util.Arrays.equals(content, lastContent)) {
            LOG.debug("config file {}: the same content as judged last; nothing to do", file);
            return;
        }
        lastContent = content;
        if (unusable.getAndSet(null) != null) LOG.info("config file {} is back", file);
        ServerConfig proposed;
        // sampling.top_k is live: it is checked against the running model's vocabulary (whatever model.path the file
        // names for the next start), with the other checks, so that one rejection names every problem
        ModelInfo loaded = state.model();
        ServerConfig.Vocabulary vocabulary = loaded == null ? ServerConfig.Vocabulary.UNKNOWN
                : modelPath -> io.ds4j.sampling.SamplingParams.topKMax(loaded.vocabSize(), loaded.tokenizer().vocabSize());
        try {
            proposed = ServerConfig.parseFile(content, file.toString(), opt.overrides(), vocabulary);
        } catch (ConfigException e) {
            state.lastReload(new ServerState.ReloadOutcome(Instant.now(), "rejected", e.getMessage()));
            LOG.error("config reload rejected, the previous configuration stays in effect: {}", e.getMessage());
            return;
        }
        ServerConfig running = state.config();
        // a model.path naming the folder the running model was loaded from (the embedded default's own folder, or the
        // running path written another way) is no change: a restart would load the same model, so no restart is pending
        if (loaded != null && proposed.modelPath() != null && !proposed.modelPath().equals(running.modelPath())
                && sameFolder(proposed.modelPath(), loaded.path())) {
            try {
                proposed = proposed.with("model.path", running.modelPath());
            } catch (ConfigException e) {
                throw new IllegalStateException("the running model.path is valid", e);
            }
        }
        ServerConfig.Reload r = ServerConfig.reload(running, proposed);
        // keys the file sets that a command-line flag keeps at the flag's value: said at start (the watcher's first
        // reading) and at a reload, so a value in the file that does nothing, or an edit that changes nothing, is not a
        // mystery
        List<String> overridden = ServerConfig.overridden(content, opt.overrides(), true);
        // said once per file value: a later edit of another key does not repeat it; a file value that is the key's
        // default is no choice the flag undoes (the shipped file spells out every default), so it is not warned of
        List<String> chosen = ServerConfig.overridden(content, opt.overrides(), false);
        List<String> newly = chosen.stream().filter(o -> !warnedOverrides.contains(o)).toList();
        warnedOverrides = chosen;
        if (!newly.isEmpty()) LOG.warn("config file {}: command-line flags win over the file: {}", file, newly);
        List<ServerConfig.Change> wasPending = state.pending();
        // the outcome's message: its parts joined, so that it never starts or ends with a separator
        List<String> parts = new java.util.ArrayList<>();
        if (r.live().isEmpty() && r.pending().equals(wasPending)) {
            if (changed) {
                parts.add("no effective change");
                if (!overridden.isEmpty()) parts.add("overridden by flags " + overridden);
                state.lastReload(new ServerState.ReloadOutcome(Instant.now(), "unchanged", String.join("; ", parts)));
                LOG.info("config file {} changed; no effective change", file);
            }
            return;
        }
        // the reload's own lines are written under whichever of the old and the new level shows more: a level that
        // shows more takes effect before them, one that shows less after them (a reload to "warn" applied first
        // silenced its own INFO line, and the operator never saw it take effect)
        String level = r.live().stream().anyMatch(c -> c.key().equals("log.level")) ? r.applied().logLevel() : null;
        boolean quieter = level != null && LogLevels.rank(level) > LogLevels.rank(running.logLevel());
        if (level != null && !quieter) LogLevels.apply(level);
        ServerState.ReloadOutcome outcome = null;
        try {
            outcome = saidReload(file, running, proposed, r, wasPending, overridden, parts);
        } finally {
            if (quieter) LogLevels.apply(level);
            // the configuration, its restart-pending keys and the outcome at once, after the lines that say them (a
            // failure while saying them still applies the configuration, beside the previous outcome)
            state.reloaded(r.applied(), r.pending(), outcome != null ? outcome : state.lastReload());
            // the live keys the engine holds itself apply now, on its thread (none without an engine: a gateway)
            if (!r.live().isEmpty())
                vertx.eventBus().publish(EngineVerticle.RELOADED, null, new io.vertx.core.eventbus.DeliveryOptions().setLocalOnly(true));
        }
    }

    /**
     * Whether two folder paths name one folder: the same file where both exist (a link, a relative path), else the same
     * absolute path once normalised ({@code /m/x/} is {@code /m/x}).
     */
    static boolean sameFolder(String a, String b) {
        if (b == null) return false;
        try {
            Path pa = Path.of(a), pb = Path.of(b);
            if (java.nio.file.Files.exists(pa) && java.nio.file.Files.exists(pb)) return java.nio.file.Files.isSameFile(pa, pb);
            return pa.toAbsolutePath().normalize().equals(pb.toAbsolutePath().normalize());
        } catch (java.nio.file.InvalidPathException | java.io.IOException e) {
            return false;
        }
    }

    /**
     * Logs what a reload that changed something applies, what waits for a restart and what no longer does, and returns
     * its outcome (the caller publishes it with the configuration).
     */
    private ServerState.ReloadOutcome saidReload(Path file, ServerConfig running, ServerConfig proposed, ServerConfig.Reload r,
                            List<ServerConfig.Change> wasPending, List<String> overridden, List<String> parts) {
        if (!r.live().isEmpty()) {
            parts.add("applied " + r.live());
            LOG.info("config reloaded from {}: applied from now on (new requests; the scheduler's limits from its next step): {}", file, r.live());
            String cap = r.live().stream().anyMatch(c -> c.key().equals("limits.maxContextTokens")) ? state.contextCap(r.applied()) : null;
            if (cap != null) {
                parts.add(cap);
                LOG.warn("config {}: {}", file, cap);
            }
            String repeated = r.live().stream().anyMatch(c -> c.key().equals("server.apiKeys")) ? r.applied().repeatedApiKeys() : null;
            if (repeated != null) {
                parts.add(repeated);
                LOG.warn("config {}: {}", file, repeated);
            }
            if (r.live().stream().anyMatch(c -> BUDGET_KEYS.contains(c.key()))) {
                for (String capped : r.applied().prefillCaps()) {
                    parts.add(capped);
                    LOG.warn("config {}: {}", file, capped);
                }
                // a cap said before is said to be gone too, with the value that now takes effect
                for (String lifted : r.applied().prefillCapLifts(running)) {
                    parts.add(lifted);
                    LOG.info("config {}: {}", file, lifted);
                }
            }
        }
        if (!r.pending().isEmpty()) {
            parts.add("pending restart " + r.pending());
            // each pending change is warned of once, by the reload that made it: a later reload of other keys says the
            // ones still waiting at INFO (they repeated as a WARN at every reload)
            List<ServerConfig.Change> newly = r.pending().stream().filter(c -> !wasPending.contains(c)).toList();
            List<ServerConfig.Change> still = r.pending().stream().filter(wasPending::contains).toList();
            if (!newly.isEmpty())
                LOG.warn("config {}: these keys need a restart and keep their running values until then: {}", file, newly);
            if (!still.isEmpty()) LOG.info("config {}: still pending a restart: {}", file, still);
            // a playground folder the next start would not find is said now, as the start would say it
            // what follows from the pending keys is in every reload's outcome, and a WARN only where a pending change
            // it depends on is new (the same verdict again is INFO, as the keys still pending are)
            if (r.pending().stream().anyMatch(c -> c.key().equals("server.webroot"))) {
                String noWebroot = webrootProblem(resolveWebroot(proposed.webroot()));
                if (noWebroot != null) {
                    parts.add("at the next start: " + noWebroot);
                    if (newly.stream().anyMatch(c -> c.key().equals("server.webroot")))
                        LOG.warn("config {}: at the next start: {}", file, noWebroot);
                    else LOG.info("config {}: still, at the next start: {}", file, noWebroot);
                }
            }
            // what the next start's check would refuse (a folder, a backend this machine cannot run) is said now, by
            // that check, as far as it can be made without opening a device
            if (r.pending().stream().anyMatch(c -> NEXT_START_KEYS.contains(c.key()))) {
                try {
                    opt.provider().checkNextStart(proposed);
                } catch (Exception e) {
                    parts.add("the next start would fail: " + e.getMessage());
                    if (newly.stream().anyMatch(c -> NEXT_START_KEYS.contains(c.key())))
                        LOG.warn("config {}: the next start would fail: {}", file, e.getMessage());
                    else LOG.info("config {}: still, the next start would fail: {}", file, e.getMessage());
                }
            }
        }
        // keys that waited for a restart and now no longer do (the file is back to the running value): a decision too,
        // said as such, or the pending list would empty without a word
        java.util.Set<String> stillPending = new java.util.HashSet<>();
        for (ServerConfig.Change c : r.pending()) stillPending.add(c.key());
        List<String> cleared = wasPending.stream().map(ServerConfig.Change::key).filter(k -> !stillPending.contains(k)).toList();
        if (!cleared.isEmpty()) {
            parts.add("no restart pending any more for " + cleared + " (back to the running value)");
            LOG.info("config {}: back to the running value, no restart pending any more for: {}", file, cleared);
        }
        if (!overridden.isEmpty()) parts.add("overridden by flags " + overridden);
        return new ServerState.ReloadOutcome(Instant.now(), r.pending().isEmpty() ? "applied" : "applied, restart pending",
                String.join("; ", parts));
    }

    /** Completes when the model is loaded and the engine runs; fails when loading failed. */
    public Future<Void> ready() {
        return ready.future();
    }

    /** The port HTTP listens on. */
    public int port() {
        return state.port();
    }

    public ServerState state() {
        return state;
    }

    public Vertx vertx() {
        return vertx;
    }

    public PrometheusMeterRegistry registry() {
        return registry;
    }

    /** Longest wait, after the engine drained, for the last responses to go out before the connections close (ms). */
    static final long FLUSH_WAIT_MS = 5_000;
    /**
     * How long the engine may take to take up the shutdown (ms): it does so between two steps, so only a thread stuck
     * inside one step takes longer; then the requests it has not started get their 503 from the HTTP side.
     */
    static final long ENGINE_ANSWER_MS = 5_000;
    /**
     * How long after the grace period the engine may take to end what still runs (ms): a step in progress finishes
     * first. Past it the HTTP side ends every open request with 503.
     */
    static final long ENGINE_MARGIN_MS = 10_000;
    /**
     * Longest wait for Vert.x to close (ms): undeploying the engine runs on the engine's thread, which a step that never
     * ends holds forever; the server is closed without it then, and the process can exit.
     */
    static final long CLOSE_WAIT_MS = 5_000;

    /**
     * Shuts down gracefully, then stops everything: new generation requests get 503 server_shutting_down (and
     * /health 503) at once, queued ones too; running requests finish within {@code server.shutdownGraceSeconds}, or
     * end with that 503 (an error event on a stream) when it is over; once their responses have gone out (at most
     * {@link #FLUSH_WAIT_MS} more), the engine releases every sequence and the model and the server closes. Bounded even
     * when the engine's thread is stuck inside one step: the HTTP side then answers the requests the engine has not
     * started after {@link #ENGINE_ANSWER_MS}, the rest {@link #ENGINE_MARGIN_MS} after the grace period, and the close
     * stops waiting for the engine after {@link #CLOSE_WAIT_MS}.
     */
    public Future<Void> close() {
        if (scanTimer != -1) vertx.cancelTimer(scanTimer);
        if (retriever != null) retriever.close();
        state.beginDrain();
        int grace = state.config().shutdownGraceSeconds();
        Promise<Void> drained = Promise.promise();
        long answer = vertx.setTimer(ENGINE_ANSWER_MS, id -> {
            if (state.engineTookUpDrain()) return;
            int n = state.endGenerations(false, "the engine did not take its request up before the shutdown", null);
            LOG.warn("shutting down: the engine has not taken up the shutdown after {} ms (its thread is busy inside one step);"
                    + " answering {} it has not started with 503 here", ENGINE_ANSWER_MS, EngineVerticle.plural(n, "request"));
        });
        // no engine to answer (still loading, or failed): nothing runs, so close at once
        vertx.eventBus().<Object>request(EngineVerticle.DRAIN, grace,
                        new io.vertx.core.eventbus.DeliveryOptions().setLocalOnly(true).setSendTimeout(grace * 1000L + ENGINE_MARGIN_MS))
                .onComplete(ar -> {
                    vertx.cancelTimer(answer);
                    if (ar.failed() && !(ar.cause() instanceof io.vertx.core.eventbus.ReplyException re
                            && re.failureType() == io.vertx.core.eventbus.ReplyFailure.NO_HANDLERS)) {
                        int n = state.endGenerations(true, "the engine did not take its request up before the shutdown",
                                "the engine did not end it within the grace period (server.shutdownGraceSeconds " + grace + ")");
                        LOG.warn("shutting down: the engine did not drain within {} s ({}); ending {} here with 503 and"
                                + " closing anyway", grace + ENGINE_MARGIN_MS / 1000, ar.cause().getMessage(),
                                EngineVerticle.plural(n, "open request"));
                    }
                    waitForResponses(System.nanoTime() + FLUSH_WAIT_MS * 1_000_000, drained);
                });
        Promise<Void> closed = Promise.promise();
        drained.future().onComplete(v -> {
            vertx.close().onComplete(ar -> closed.tryComplete());
            java.util.concurrent.CompletableFuture.delayedExecutor(CLOSE_WAIT_MS, TimeUnit.MILLISECONDS).execute(() -> {
                if (closed.tryComplete())
                    LOG.warn("shutting down: Vert.x has not closed after {} ms (the engine's thread is still inside one step);"
                            + " closing without it", CLOSE_WAIT_MS);
            });
        });
        return closed.future().onComplete(ar -> registry.close());
    }

    /** Completes done once no generation response is open, or at the deadline (System.nanoTime). */
    private void waitForResponses(long deadline, Promise<Void> done) {
        int open = state.openExchanges();
        if (open <= 0 || System.nanoTime() >= deadline) {
            if (open > 0) LOG.warn("shutting down: {} responses still open after {} ms; closing their connections", open, FLUSH_WAIT_MS);
            done.tryComplete();
            return;
        }
        vertx.setTimer(20, id -> waitForResponses(deadline, done));
    }
}
