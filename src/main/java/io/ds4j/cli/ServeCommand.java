package io.ds4j.cli;

import io.ds4j.app.DefaultModelProvider;
import io.ds4j.json.Json;
import io.ds4j.server.ConfigFileStore;
import io.ds4j.server.Ds4jServer;
import io.ds4j.server.cluster.ClusterNode;
import io.ds4j.server.config.ConfigException;
import io.ds4j.server.config.ServerConfig;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;

/**
 * {@code ds4j serve}: the OpenAI-compatible server. Configuration comes from {@code conf/server.json} (or
 * {@code --config FILE}), watched for changes; every flag overrides one key of it, also across reloads.
 */
@Command(name = "serve", mixinStandardHelpOptions = true, sortOptions = false,
        description = {"Run the OpenAI-compatible HTTP server (chat and completions over SSE, /metrics, playground at /).",
                "Without a model it serves an embedded default: a random 'tiny' DeepSeek-V4 model created on first use "
                        + "(its text is meaningless).",
                "Flags override keys of the configuration file; see the README for every key."})
public final class ServeCommand implements Callable<Integer> {
    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Option(names = "--config", paramLabel = "FILE",
            description = "Configuration file, watched for changes (default: conf/server.json when it exists).")
    Path config;

    @Option(names = "--host", paramLabel = "ADDR", description = "server.host: address to listen on.")
    String host;

    @Option(names = "--port", paramLabel = "N", description = "server.port (0 = a free port).")
    Integer port;

    @Option(names = "--model", paramLabel = "DIR", description = "model.path: model folder (default: the embedded model).")
    String model;

    @Option(names = "--model-name", paramLabel = "NAME", description = "model.name: the model id clients use.")
    String modelName;

    @Option(names = "--backend", paramLabel = "NAME", description = "model.backend: cpu or hip (GPU).")
    String backend;

    @Option(names = "--gpu-devices", paramLabel = "N", description = "gpu.devices: GPUs of backend hip (it runs on one).")
    Integer gpuDevices;

    @Option(names = "--expert-placement", paramLabel = "auto|monolithic|hybrid",
            description = "gpu.expertPlacement: where routed experts live on backend hip.")
    String expertPlacement;

    @Option(names = "--gpu-memory-budget-mib", paramLabel = "MIB",
            description = "gpu.memoryBudgetMiB: device memory the weights may use (0 = all free).")
    Integer gpuMemoryBudgetMiB;

    @Option(names = "--fused-verify-f16-kv",
            description = "verify.f16Kv = true: the F16-KV verifier (backend hip on a single device only).")
    boolean fusedVerifyF16Kv;

    @Option(names = "--draft", paramLabel = "none|ngram|mtp|DIR", description = "speculative.draft.")
    String draft;

    @Option(names = "--spec-q", paramLabel = "auto|0..8",
            description = "speculative.q: draft tokens verified per step (0 = none for requests that give no speculative_q).")
    String specQ;

    @Option(names = "--max-context", paramLabel = "N", description = "limits.maxContextTokens.")
    Integer maxContext;

    @Option(names = "--max-active", paramLabel = "N", description = "limits.maxActive: requests generating at once.")
    Integer maxActive;

    @Option(names = "--max-queue", paramLabel = "N", description = "limits.maxQueue: requests allowed to wait.")
    Integer maxQueue;

    @Option(names = "--max-tokens-default", paramLabel = "N", description = "limits.maxTokensDefault.")
    Integer maxTokensDefault;

    @Option(names = "--prefill-chunk", paramLabel = "N", description = "limits.prefillChunk.")
    Integer prefillChunk;

    @Option(names = "--api-key", paramLabel = "KEY", description = "server.apiKeys (repeatable).")
    List<String> apiKeys;

    @Option(names = "--cors-origin", paramLabel = "ORIGIN", description = "server.cors.allowedOrigins (repeatable; * = any).")
    List<String> corsOrigins;

    @Option(names = "--log-level", paramLabel = "LEVEL", description = "log.level: trace, debug, info, warn, error, off.")
    String logLevel;

    @Option(names = "--cluster", description = "cluster.enabled = true: join a Vert.x cluster (see --role, --member; README 'Cluster').")
    boolean cluster;

    @Option(names = "--role", paramLabel = "gateway|engine|both", description = "cluster.role.")
    String role;

    @Option(names = "--cluster-host", paramLabel = "ADDR", description = "cluster.host: address the cluster traffic binds to.")
    String clusterHost;

    @Option(names = "--cluster-port", paramLabel = "N", description = "cluster.port: Hazelcast member port.")
    Integer clusterPort;

    @Option(names = "--member", paramLabel = "HOST:PORT", description = "cluster.members (repeatable): members to join by TCP/IP.")
    List<String> members;

    @Option(names = "--set", paramLabel = "KEY=VALUE",
            description = "Any configuration key, e.g. --set sampling.temperature=0.6 (VALUE is JSON, or else a string).")
    List<String> sets;

    /** Which flag set each overridden key ("--port", "--set limits.maxActive=..."), for error messages. */
    private final Map<String, String> flagOf = new LinkedHashMap<>();

    /**
     * The flags as dotted-key overrides of the configuration file. A key given twice with different values (a flag
     * and a --set of its key, or two --sets) is refused, naming both ({@link CommandLineOverrides}).
     */
    Map<String, Object> overrides() {
        CommandLineOverrides o = new CommandLineOverrides();
        flagOf.clear();
        try {
            put(o, "server.host", "--host", host);
            put(o, "server.port", "--port", port);
            put(o, "model.path", "--model", model);
            put(o, "model.name", "--model-name", modelName);
            put(o, "model.backend", "--backend", backend);
            put(o, "gpu.devices", "--gpu-devices", gpuDevices);
            put(o, "gpu.expertPlacement", "--expert-placement", expertPlacement);
            put(o, "gpu.memoryBudgetMiB", "--gpu-memory-budget-mib", gpuMemoryBudgetMiB);
            put(o, "verify.f16Kv", "--fused-verify-f16-kv", fusedVerifyF16Kv ? Boolean.TRUE : null);
            put(o, "speculative.draft", "--draft", draft);
            // a width is a number in the file ("4" is refused there): --spec-q 4 gives the number, --spec-q auto the text
            put(o, "speculative.q", "--spec-q", specQ == null ? null : jsonOrText(specQ));
            put(o, "limits.maxContextTokens", "--max-context", maxContext);
            put(o, "limits.maxActive", "--max-active", maxActive);
            put(o, "limits.maxQueue", "--max-queue", maxQueue);
            put(o, "limits.maxTokensDefault", "--max-tokens-default", maxTokensDefault);
            put(o, "limits.prefillChunk", "--prefill-chunk", prefillChunk);
            put(o, "server.apiKeys", "--api-key", apiKeys == null ? null : new ArrayList<>(apiKeys));
            put(o, "server.cors.allowedOrigins", "--cors-origin", corsOrigins == null ? null : new ArrayList<>(corsOrigins));
            put(o, "log.level", "--log-level", logLevel);
            put(o, "cluster.enabled", "--cluster", cluster ? Boolean.TRUE : null);
            put(o, "cluster.role", "--role", role);
            put(o, "cluster.host", "--cluster-host", clusterHost);
            put(o, "cluster.port", "--cluster-port", clusterPort);
            put(o, "cluster.members", "--member", members == null ? null : new ArrayList<>(members));
            if (sets != null) {
                for (String s : sets) {
                    int eq = s.indexOf('=');
                    if (eq <= 0) throw new CommandLine.ParameterException(spec.commandLine(), "--set needs KEY=VALUE, got '" + s + "'");
                    String k = s.substring(0, eq).trim(), v = s.substring(eq + 1);
                    if (ServerConfig.keyOf(k) == null)
                        throw new CommandLine.ParameterException(spec.commandLine(), "--set: unknown configuration key '" + k + "'"
                                + ServerConfig.suggestion(k));
                    o.put(k, "--set " + s, "--set " + s, jsonOrText(v));
                }
            }
        } catch (CommandLineOverrides.Conflict e) {
            throw new CommandLine.ParameterException(spec.commandLine(), e.getMessage());
        }
        flagOf.putAll(o.flags());
        return new LinkedHashMap<>(o.values());
    }

    /**
     * A value given as text on the command line, as the configuration file would hold it: JSON where it reads as JSON
     * (a number, true, null, a quoted string, ...), else the text itself.
     */
    private static Object jsonOrText(String v) {
        try {
            // read as the API reads JSON: "4,5" is not the number 4 followed by something ignored; a number written
            // with a fraction or exponent stays a node that keeps its text (Json#written), so that its checks decide on
            // it as written (2.0000000000000001 is no integer), as in a file
            var node = Json.read(v.getBytes(java.nio.charset.StandardCharsets.UTF_8), "a command-line value");
            if (node != null)
                return Json.written(node) != null ? node : Json.MAPPER.treeToValue(node, Object.class);
        } catch (Json.Unreadable | IOException e) {
            // not JSON: the text itself
        }
        return v;  // not JSON, or empty
    }

    /** A dedicated flag's key; the flag as written is the flag and its value (each value of a repeatable one). */
    private static void put(CommandLineOverrides o, String k, String flag, Object v) {
        if (v == null) return;
        String written = v instanceof Boolean ? flag
                : v instanceof List<?> l ? String.join(" ", l.stream().map(x -> flag + " " + x).toList())
                : flag + " " + v;
        o.put(k, flag, written, v);
    }

    /**
     * Says configuration problems, each against its source ({@link #blame}): one on the error line, several listed
     * under it; returns the usage error's exit code, 2.
     */
    private int usageError(List<String> problems, Path file) {
        var err = spec.commandLine().getErr();
        if (problems.size() == 1) {
            err.println("error: " + blame(problems.getFirst(), file));
        } else {
            err.println("error: the configuration is not valid:");
            for (String p : problems) err.println("  " + blame(p, file));
        }
        return 2;
    }

    /**
     * A configuration problem ("key: what is wrong") said against its source: the flag that set the key, else the
     * file.
     */
    String blame(String problem, Path file) {
        int colon = problem.indexOf(':');
        String key = colon > 0 ? problem.substring(0, colon) : null;
        if (key != null && flagOf.containsKey(key)) return "flag " + CommandLineOverrides.shown(key, flagOf.get(key)) + ": " + problem;
        if (file != null && problem.startsWith(file.toString())) return problem;
        return (file != null ? file.toString() : "configuration") + ": " + problem;
    }

    @Override
    public Integer call() throws Exception {
        // slf4j-simple reads this once, when the first logger is created. Vert.x registers one HTTP connection gauge
        // per server instance and Micrometer warns about the duplicates, which are harmless.
        System.setProperty("org.slf4j.simpleLogger.log.io.micrometer.core.instrument.MeterRegistry", "error");
        System.setProperty("vertx.disableDnsResolver", "true");

        Path file = config;
        // a FIFO or a device is never opened (reading one would block or never end), as the reload's watcher does
        String unusable = file == null ? null : ConfigFileStore.unusable(file);
        if (unusable != null)
            throw new CommandLine.ParameterException(spec.commandLine(), unusable.equals("is missing")
                    ? "--config: file not found: " + file.toAbsolutePath() : "--config: " + file.toAbsolutePath() + " " + unusable);
        if (file == null) file = Ds4jServer.appRelative("conf/server.json");
        Map<String, Object> ov = overrides();
        DefaultModelProvider provider = new DefaultModelProvider();
        ServerConfig cfg;
        try {
            // sampling.top_k is checked against the named model's vocabulary (its tokenizer, read for it) with the other
            // keys, before listening: a file with other problems too is refused once, naming them all
            cfg = ServerConfig.parseFile(file != null ? ConfigFileStore.read(file) : null,
                    file != null ? file.toString() : "defaults", ov, provider::vocabulary);
        } catch (java.io.IOException e) {
            // a file that is not a regular one (a FIFO, a device) or larger than 1 MiB: ConfigFileStore.read says which
            // (an AccessDeniedException's message is the path alone: its kind says why)
            spec.commandLine().getErr().println("error: " + (e instanceof java.nio.file.FileSystemException f
                    ? "config file " + f.getFile() + " cannot be read (" + e.getClass().getSimpleName() + ")" : e.getMessage()));
            return 2;
        } catch (ConfigException e) {
            if (!e.fileUnread()) return usageError(e.problems(), file);
            List<String> problems = new ArrayList<>(e.problems());
            for (String p : flagsStartProblems(ov, provider)) if (!problems.contains(p)) problems.add(p);
            return usageError(problems, file);
        }
        if (!cfg.cluster().enabled()) {
            // a cluster flag without a cluster would be dropped silently: serve --role gateway forgetting --cluster
            // loaded the model and served it alone, as an engine and gateway in one, with no word of the role
            List<String> unused = new ArrayList<>();
            // where the command line itself turned the cluster off, "give --cluster" would conflict with it
            String fix = ov.containsKey("cluster.enabled") ? "leave the flag out" : "give --cluster too, or leave the flag out";
            for (String k : ov.keySet())
                if (k.startsWith("cluster.") && !k.equals("cluster.enabled"))
                    unused.add(k + ": has no effect without a cluster (cluster.enabled is false): " + fix);
            if (!unused.isEmpty()) return usageError(unused, file);
        }
        if (cfg.cluster().enabled()) return cluster(cfg, file, ov, provider);
        Ds4jServer server;
        try {
            server = Ds4jServer.start(new Ds4jServer.Options(cfg, file, ov, provider)).await();
        } catch (Exception e) {
            Throwable t = e;
            while (!(t instanceof Ds4jServer.StartException) && t.getCause() != null && t.getCause() != t) t = t.getCause();
            if (!(t instanceof Ds4jServer.StartException)) t = e;
            String msg = t.getMessage() != null ? t.getMessage() : t.toString();
            // the pre-start check refused what the user asked for (a model or draft folder, a backend this machine
            // cannot run): a usage error, each refusal said against the flag or file that set its key
            if (t.getCause() instanceof ConfigException c) return usageError(c.problems(), file);
            if (t.getCause() instanceof IllegalArgumentException) {
                // a provider whose check names one problem alone
                spec.commandLine().getErr().println("error: " + blame(msg, file));
                return 2;
            }
            spec.commandLine().getErr().println("error: " + msg);
            return 1;
        }
        portChosen(cfg, server.state().port());
        // why the server goes away: a signal (SIGTERM / Ctrl-C), unless the model failed to load first
        java.util.concurrent.atomic.AtomicReference<String> why = new java.util.concurrent.atomic.AtomicReference<>("signal received");
        Signals.install(org.slf4j.LoggerFactory.getLogger(ServeCommand.class), sig -> why.set(sig + " received"));
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            var log = org.slf4j.LoggerFactory.getLogger(ServeCommand.class);
            if (server.state().loading()) {
                // the model is still loading: nothing runs yet, and the load cannot be interrupted (undeploying the
                // engine mid-start trips Vert.x), so the process ends without waiting for it
                log.info("shutting down ({}) while the model loads: exiting without waiting for the load", why.get());
                return;
            }
            // say why, then stop accepting, let running requests finish within the grace period, release the model
            log.info("shutting down ({}): stopping the server", why.get());
            server.close().await();
            log.info("stopped");
        }, "ds4j-shutdown"));
        try {
            server.ready().await();
        } catch (Exception e) {
            why.set("the model did not load");
            // a key only the loaded model could check (sampling.top_k against its vocabulary, where its tokenizer could
            // not be read before the load): a usage error, said against the flag or file that set it, as the checks
            // before listening are
            for (Throwable t = e; t != null; t = t.getCause() == t ? null : t.getCause()) {
                if (t instanceof ConfigException c) {
                    for (String p : c.problems()) spec.commandLine().getErr().println("error: " + blame(p, file));
                    return 2;
                }
            }
            spec.commandLine().getErr().println("error: " + (e.getMessage() != null ? e.getMessage() : e));
            return 1;
        }
        new CountDownLatch(1).await();
        return 0;
    }

    /** The keys whose folders and backend the start's check judges ({@code ModelProvider.check}). */
    private static final List<String> START_CHECKED_KEYS = List.of("model.path", "speculative.draft", "model.backend");

    /**
     * The start's check of the model and draft folders and the backend that the flags name, for a file that cannot be
     * read: the flags win over the file, so what they name is what the start would use whatever the file holds (a key
     * no flag sets is the file's, and is not judged).
     */
    private static List<String> flagsStartProblems(Map<String, Object> ov, DefaultModelProvider provider) {
        Map<String, Object> named = new LinkedHashMap<>();
        for (String k : START_CHECKED_KEYS) if (ov.containsKey(k)) named.put(k, ov.get(k));
        if (named.isEmpty()) return List.of();
        ServerConfig flags;
        try {
            flags = ServerConfig.parseFile(null, "flags", named);
        } catch (ConfigException e) {
            // a value refused on its own (an empty folder name, an unknown backend): said, and not probed further
            return e.problems();
        }
        try {
            provider.check(flags);
            return List.of();
        } catch (ConfigException e) {
            return e.problems();
        } catch (RuntimeException e) {
            return List.of(e.getMessage() != null ? e.getMessage() : e.toString());
        }
    }

    /** {@code serve --cluster}: one node of a cluster, as cluster.role says. */
    private int cluster(ServerConfig cfg, Path file, Map<String, Object> ov, DefaultModelProvider provider) throws InterruptedException {
        ClusterNode node;
        try {
            node = ClusterNode.start(cfg, file, ov, provider).await();
        } catch (Exception e) {
            Throwable t = e;
            while (!(t instanceof Ds4jServer.StartException) && t.getCause() != null && t.getCause() != t) t = t.getCause();
            if (!(t instanceof Ds4jServer.StartException)) t = e;
            spec.commandLine().getErr().println("error: " + (t.getMessage() != null ? t.getMessage() : t));
            return 1;
        }
        java.util.concurrent.atomic.AtomicReference<String> why = new java.util.concurrent.atomic.AtomicReference<>("signal received");
        Signals.install(org.slf4j.LoggerFactory.getLogger(ServeCommand.class), sig -> why.set(sig + " received"));
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            org.slf4j.LoggerFactory.getLogger(ServeCommand.class).info("shutting down ({}): leaving the cluster", why.get());
            node.close().await();
            org.slf4j.LoggerFactory.getLogger(ServeCommand.class).info("stopped");
        }, "ds4j-shutdown"));
        try {
            node.ready().await();
        } catch (Exception e) {
            spec.commandLine().getErr().println("error: " + (e.getMessage() != null ? e.getMessage() : e));
            return 1;
        }
        org.slf4j.LoggerFactory.getLogger(ServeCommand.class).info("cluster node ready: {} on port {}", cfg.cluster().role(), node.port());
        portChosen(cfg, node.port());
        new CountDownLatch(1).await();
        return 0;
    }

    /**
     * A port the system chose (server.port 0) is said on stderr where the log level hides the "listening on" line:
     * without it the server cannot be reached.
     */
    private void portChosen(ServerConfig cfg, int port) {
        if (cfg.port() == 0 && !org.slf4j.LoggerFactory.getLogger(ServeCommand.class).isInfoEnabled())
            spec.commandLine().getErr().println("ds4j: server.port 0: the system chose port " + port + " (http://" + cfg.host() + ":" + port + ")");
    }
}
