package io.ds4j.server.config;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.ds4j.engine.BackendOptions;
import io.ds4j.engine.BackendOptions.ExpertPlacement;
import io.ds4j.engine.FeatureGate;
import io.ds4j.json.Json;
import io.ds4j.sampling.SamplingParams;
import io.ds4j.server.ApiKeys;
import io.ds4j.server.config.ConfigKey.Range;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;

/**
 * The server's configuration ({@code conf/server.json}): an immutable, validated set of values for the keys in
 * {@link #KEYS}. Built from JSON with {@link #parseFile}, which checks the whole file at once (unknown keys, wrong types,
 * out-of-range values) and reports every problem by key; CLI flags are applied as overrides of single keys before
 * that check. {@link #reload} splits a new configuration into what applies live and what waits for a restart.
 */
public final class ServerConfig {
    /** Every key, in documentation order. */
    public static final List<ConfigKey> KEYS = List.of(
            key("server.host", ConfigKey.Type.STRING, "127.0.0.1", false, "address to listen on (use 0.0.0.0 for all interfaces)"),
            key("server.port", ConfigKey.Type.INT, 8080, false, Range.of(0, 65535), "TCP port; 0 picks a free one (logged)"),
            key("server.httpInstances", ConfigKey.Type.INT, 0, false, Range.of(0, 64),
                    "HTTP verticle instances on the event loops; 0 = min(4, cores)"),
            key("server.apiKeys", ConfigKey.Type.STRING_LIST, List.of(), true,
                    "accepted Bearer keys; empty = no authentication. /health and the playground stay public. A key "
                            + "that is empty or starts or ends with a space, tab or control character is refused (no client can send it)"),
            key("server.cors.allowedOrigins", ConfigKey.Type.STRING_LIST, List.of(), true,
                    "origins allowed by CORS (\"*\" = any), each scheme://host[:port] as a browser sends it, or \"null\" (the origin"
                            + " of file:// pages and sandboxed frames: any of them); empty = no CORS headers"),
            key("server.maxBodyBytes", ConfigKey.Type.INT, 4 << 20, true, Range.of(1024, 1 << 30),
                    "largest accepted request body; larger gets 413"),
            key("server.webroot", ConfigKey.Type.STRING, "webroot", false, "folder of the playground's static files served at /"),
            key("server.configScanMs", ConfigKey.Type.INT, 1000, false, Range.of(50, 3_600_000),
                    "how often the config file is checked for changes (ms)"),
            key("server.shutdownGraceSeconds", ConfigKey.Type.INT, 20, true,
                    Range.of(0, 3600),
                    "on SIGTERM / Ctrl-C, how long running requests may go on to finish (s); meanwhile new and "
                            + "queued requests get 503 server_shutting_down; those still running then end with that 503 "
                            + "(an error event on a stream); a second signal ends the process at once"),
            key("server.rejectUnknownFields", ConfigKey.Type.BOOL, false, true,
                    "a request body field the endpoint does not read (a misspelling such as max_token) is refused with 400 "
                            + "instead of ignored with a warning and the x-ds4j-ignored-fields response header"),
            key("model.path", ConfigKey.Type.NULLABLE_STRING, null, false,
                    "model folder (config.json + safetensors); null = the embedded default (random 'tiny' model)"),
            key("model.name", ConfigKey.Type.NULLABLE_STRING, null, false,
                    "model id shown by /v1/models and accepted in requests; null = the folder's name"),
            key("model.backend", ConfigKey.Type.STRING, "cpu", false, "compute backend: cpu, or hip (the GPU backend, see README 'GPU')"),
            key("model.cacheTokens", ConfigKey.Type.INT, 0, false,
                    Range.atLeast(0),
                    "token budget of sequence state over all active requests (prompt + max_tokens each); 0 = no limit"),
            key("gpu.devices", ConfigKey.Type.INT, 1, false,
                    Range.atLeast(1),
                    "GPUs the hip backend uses; it runs on one device, so more is refused (ignored by backend cpu)"),
            key("gpu.expertPlacement", ConfigKey.Type.STRING, "auto", false,
                    "where routed experts live on backend hip: auto (monolithic when the model fits, else hybrid; "
                            + "monolithic is asked for with verify.f16Kv on), monolithic (all on the device) or hybrid "
                            + "(experts beyond the budget in host memory)"),
            key("gpu.memoryBudgetMiB", ConfigKey.Type.INT, 0, false,
                    Range.atLeast(0),
                    "device memory the weights may use on backend hip (MiB); 0 = all free device memory"),
            key("speculative.draft", ConfigKey.Type.STRING, "ngram", false,
                    "draft for speculative decoding: \"none\", \"ngram\" (prompt lookup), \"mtp\" (the checkpoint's MTP layer) or a draft model folder"),
            key("speculative.q", ConfigKey.Type.WIDTH, "auto", true,
                    "draft tokens verified per step: 1..8, or \"auto\" (adaptive, up to 8), for requests that give no "
                            + "speculative_q; 0 = those requests do not speculate (neither with the draft nor with a "
                            + "prediction), as with speculative_q 0, while a request's speculative_q still asks for it "
                            + "(speculative.draft \"none\" loads no draft at all)"),
            key("verify.f16Kv", ConfigKey.Type.BOOL, false, false,
                    "F16-KV verifier: verify attention reads the F16 cache directly instead of converting it to F32 (the same "
                            + "logits); "
                            + "only with backend hip on a single device, and off (with a warning) under hybrid expert placement"),
            key("verify.f32ShortContextRows", ConfigKey.Type.INT, 512, false,
                    Range.of(BackendOptions.MIN_SHORT_ROWS, BackendOptions.MAX_SHORT_ROWS),
                    "backend hip: a query attending to at most this many rows keeps Q·Kᵀ and P·V in plain F32, above it they "
                            + "run on tensor cores at F32 accuracy (decode and verify steps, both verify paths)"),
            key("limits.maxContextTokens", ConfigKey.Type.INT, 32768, true,
                    Range.atLeast(io.ds4j.model.ModelConfig.MIN_CONTEXT_TOKENS),
                    "context limit per request (prompt + generated); capped by the model's own limit (max_position_embeddings; /props limits shows the one in effect), with a warning at start and at the reload that sets it"),
            key("limits.maxQueue", ConfigKey.Type.INT, 64, true, Range.of(0, 1 << 20), "requests that may wait for a slot; beyond that 429 "
                    + "(bodies of 32 KiB or more waiting to be tokenised on their lane count too)"),
            key("limits.maxActive", ConfigKey.Type.INT, 8, true, Range.of(1, 4096), "requests generating at the same time"),
            key("limits.maxTokensDefault", ConfigKey.Type.INT, 4096, true, Range.atLeast(1), "max_tokens of requests that give none"),
            key("limits.prefillChunk", ConfigKey.Type.INT, 512, true, Range.of(1, 1 << 16),
                    "prompt tokens per prefill step (smaller = fairer interleaving)"),
            key("limits.bodyReadTimeoutMs", ConfigKey.Type.INT, 30_000, true,
                    Range.of(100, 3_600_000),
                    "how long a request's body may take to arrive once its headers have (ms); a body still incomplete "
                            + "then gets 408 and the connection is closed (a request already answered without its body "
                            + "only has its connection closed)"),
            key("limits.headerReadTimeoutMs", ConfigKey.Type.INT, 30_000, true,
                    Range.of(100, 3_600_000),
                    "how long a connection may go without a complete request head (ms), after it opens and after its "
                            + "last request and answer are done; a connection still without one is closed (within 1.5 "
                            + "times this): a client stalled in its headers, or an idle keep-alive connection"),
            key("limits.streamBufferBytes", ConfigKey.Type.INT, 8 << 20, true,
                    Range.of(1024, 1 << 30),
                    "most bytes of a stream that may wait unsent for a client that does not read them; beyond that its "
                            + "request is cancelled (its engine slot freed) and the connection closed"),
            key("scheduler.maxBatchRows", ConfigKey.Type.INT, 256, true,
                    Range.of(1, 1 << 16),
                    "most decode/verify token rows in one batched step (a verify step of q drafts has q + 1); "
                            + "requests beyond it wait for the next step"),
            key("scheduler.tokenBudget", ConfigKey.Type.INT, 512, true,
                    Range.of(1, 1 << 20),
                    "most prefill tokens in one batched step: a long prompt is split across steps, so it delays the running "
                            + "requests' next tokens by at most this much prefill; prefill chunks are at most this long"),
            key("scheduler.maxTickStretch", ConfigKey.Type.NUMBER, 1.6, true,
                    Range.offOr(0, 1, 100),
                    "while requests decode, a step with prefill may take at most this many times the predicted step "
                            + "without it (learned online), which bounds their inter-token latency beside a long prompt; "
                            + "0 = off (prefill gets the whole token budget)"),
            key("scheduler.minPrefillChunk", ConfigKey.Type.INT, 64, true,
                    Range.of(1, 1 << 20),
                    "the fewest prefill tokens a step gives a waiting prompt under scheduler.maxTickStretch, so it "
                            + "always progresses in efficient chunks (at most the prefill chunk in effect is used: "
                            + "limits.prefillChunk, itself at most scheduler.tokenBudget)"),
            key("scheduler.layerSlices", ConfigKey.Type.BOOL, true, true,
                    "where scheduler.maxTickStretch limits a step's prefill, run a prompt's whole chunk a few layers per "
                            + "step (on backends that can; same numbers) instead of cutting it, so the decoding requests' "
                            + "steps stay within the bound; false = the chunk is cut to what fits, and runs whole at "
                            + "scheduler.minPrefillChunk where even that breaks the bound"),
            key("prefixCache.enabled", ConfigKey.Type.BOOL, true, false,
                    "reuse prompt prefixes across requests (snapshots of sequence state at block boundaries); "
                            + "requests opt out with cache_prompt: false"),
            key("prefixCache.budgetMiB", ConfigKey.Type.INT, 2048, true,
                    Range.atLeast(0),
                    "memory the prefix cache's snapshots may hold (MiB): host memory on backend cpu, device memory on "
                            + "backend hip; least recently used snapshots are evicted beyond it"),
            key("prefixCache.blockTokens", ConfigKey.Type.INT, 128, false,
                    Range.of(1, 1 << 20),
                    "granularity of cached prefixes (tokens); rounded up to a multiple of every compression ratio"),
            key("prefixCache.intervalTokens", ConfigKey.Type.INT, 2048, false,
                    Range.atLeast(0),
                    "a long prompt also leaves a snapshot every this many tokens (0 = only at its end and branch points)"),
            key("sampling.temperature", ConfigKey.Type.NUMBER, 1.0, true, Range.of(0, 2), "default temperature (0 = greedy)"),
            key("sampling.top_p", ConfigKey.Type.NUMBER, 1.0, true, Range.aboveUpTo(0, 1), "default nucleus mass (1 = off)"),
            key("sampling.top_k", ConfigKey.Type.INT, 0, true, Range.atLeast(-1), "default top-k (0 or -1 = off); at most the tokenizer's vocabulary, checked with the other keys: at start before listening (the model's tokenizer is read for it) and at every reload (refused)"),
            key("sampling.min_p", ConfigKey.Type.NUMBER, 0.0, true, Range.of(0, 1), "default min-p (0 = off)"),
            key("sampling.presence_penalty", ConfigKey.Type.NUMBER, 0.0, true, Range.of(-2, 2), "default presence penalty"),
            key("sampling.frequency_penalty", ConfigKey.Type.NUMBER, 0.0, true, Range.of(-2, 2), "default frequency penalty"),
            key("sampling.repetition_penalty", ConfigKey.Type.NUMBER, 1.0, true, Range.aboveUpTo(0, 10),
                    "default repetition penalty (1 = off)"),
            key("sampling.seed", ConfigKey.Type.NULLABLE_LONG, null, true, "default seed; null = a random seed per request"),
            key("log.level", ConfigKey.Type.LEVEL, "info", true, "log level: trace, debug, info, warn, error or off"),
            key("cluster.enabled", ConfigKey.Type.BOOL, false, false,
                    "join a Vert.x cluster (Hazelcast) as cluster.role; false = one process with a local event bus (--cluster)"),
            key("cluster.role", ConfigKey.Type.STRING, "both", false,
                    "gateway (HTTP routing only, no model), engine (the model; takes requests routed by gateways) or both"),
            key("cluster.name", ConfigKey.Type.STRING, "ds4j", false, "cluster name; only members with the same name join"),
            key("cluster.host", ConfigKey.Type.STRING, "127.0.0.1", false,
                    "address the cluster traffic (Hazelcast membership and the event bus) binds to and announces"),
            key("cluster.port", ConfigKey.Type.INT, 5701, false, Range.of(0, 65535),
                    "Hazelcast member port on cluster.host (0 = a free port)"),
            key("cluster.eventBusPort", ConfigKey.Type.INT, 0, false, Range.of(0, 65535),
                    "event-bus TCP port on cluster.host (0 = a free port)"),
            key("cluster.members", ConfigKey.Type.STRING_LIST, List.of(), false,
                    "members to join by TCP/IP, \"host:port\" each (multicast is never used); empty = start alone and wait to be joined"),
            key("cluster.announceMs", ConfigKey.Type.INT, 500, false, Range.of(50, 60_000),
                    "how often an engine node announces its model, capacity and health (ms)"),
            key("cluster.engineTimeoutMs", ConfigKey.Type.INT, 4000, false,
                    Range.of(200, 600_000),
                    "a gateway drops an engine node silent this long (or reported gone by the cluster) and ends its requests with an error"));

    private static final Map<String, ConfigKey> BY_NAME;

    static {
        Map<String, ConfigKey> m = new LinkedHashMap<>();
        for (ConfigKey k : KEYS) m.put(k.name(), k);
        BY_NAME = Collections.unmodifiableMap(m);
    }

    private static ConfigKey key(String name, ConfigKey.Type t, Object def, boolean live, String doc) {
        return new ConfigKey(name, t, def, live, null, doc);
    }

    private static ConfigKey key(String name, ConfigKey.Type t, Object def, boolean live, Range range, String doc) {
        return new ConfigKey(name, t, def, live, range, doc);
    }

    /** The key of a dotted name, or null. */
    public static ConfigKey keyOf(String name) {
        return BY_NAME.get(name);
    }

    private final Map<String, Object> values;

    private ServerConfig(Map<String, Object> values) {
        this.values = Collections.unmodifiableMap(values);
    }

    /** All defaults. */
    public static ServerConfig defaults() {
        Map<String, Object> v = new LinkedHashMap<>();
        for (ConfigKey k : KEYS) v.put(k.name(), k.def());
        return new ServerConfig(v);
    }

    /**
     * Parses a configuration's text and applies overrides ({@link #parseFile} of its UTF-8 bytes).
     * @param text the JSON text, or null for every default
     */
    public static ServerConfig parse(String text, String source, Map<String, Object> overrides) throws ConfigException {
        return parseFile(text == null ? null : text.getBytes(java.nio.charset.StandardCharsets.UTF_8), source, overrides);
    }

    /**
     * Parses a configuration file's bytes and applies overrides. The file is read as the API reads a request body
     * ({@link Json#read}): bytes that are not UTF-8, a key given twice and content after the object are refused.
     * @param bytes     the file's content (a JSON object); null (no file) means every default. An empty or blank file is
     *                  refused: a file truncated by a failed write must not silently reset every setting (write
     *                  {@code {}} for all defaults)
     * @param source    where the text came from, for messages
     * @param overrides dotted key → value (String, Number, Boolean, List, null, or a JSON number node that keeps its
     *                  text, {@link Json#written}) that replace the file's values
     * @throws ConfigException listing every problem, each naming its key (or the file's syntax error with line and
     *                         column, the byte offset of bytes that are not UTF-8, the key given twice); a problem of
     *                         the file on its own that the overrides hide (a bad value a flag replaces) is named too,
     *                         after the file's name
     */
    public static ServerConfig parseFile(byte[] bytes, String source, Map<String, Object> overrides) throws ConfigException {
        return parseFile(bytes, source, overrides, Vocabulary.UNKNOWN);
    }

    /**
     * {@link #parseFile(byte[], String, Map)} that also checks {@code sampling.top_k} against the model's vocabulary,
     * with the other checks, so that one refusal names every problem (it was a second pass, and a file with other
     * problems was refused without it, then again for it once those were fixed); the file on its own is checked against
     * it too.
     * @param vocabulary the vocabulary of the model a configuration names, where it can be told
     */
    public static ServerConfig parseFile(byte[] bytes, String source, Map<String, Object> overrides, Vocabulary vocabulary)
            throws ConfigException {
        ObjectNode tree;
        if (bytes == null) {
            tree = JsonNodeFactory.instance.objectNode();
        } else {
            List<String> unread = new ArrayList<>();
            JsonNode n = null;
            try {
                n = Json.read(bytes, "a file");
                if (n == null) unread.add(source + ": the file is empty; write {} to use every default");
                else if (!n.isObject()) unread.add(source + ": must be a JSON object, got " + ConfigKey.Type.describe(n));
            } catch (Json.Unreadable e) {
                // the file is named first: a key given twice is the file's fault even where a flag sets that key too
                unread.add(source + ": " + e.getMessage());
                // the refusal of the text hides every check of what it holds: said, so that a fixed syntax error that
                // then meets a bad value is no surprise
                unread.add(source + ": " + NOT_CHECKED);
            }
            if (!unread.isEmpty()) {
                // the flags' values are known without the file: what is wrong with each on its own is said now too
                unread.addAll(ownValueProblems(overrides));
                throw new ConfigException(unread, true);
            }
            tree = (ObjectNode) n;
        }
        // the file is judged on its own too: a value a flag overrides, or a combination the flags' values make hold, is
        // still the file's, and a start without those flags would refuse it
        List<String> alone = List.of();
        if (bytes != null && overrides != null && !overrides.isEmpty()) {
            try {
                fromTree(tree.deepCopy(), vocabulary);
            } catch (ConfigException e) {
                alone = e.problems();
            }
        }
        if (overrides != null) for (var e : overrides.entrySet()) put(tree, e.getKey(), Json.tree(e.getValue()));
        List<String> problems = new ArrayList<>();
        ServerConfig c = null;
        try {
            c = fromTree(tree, vocabulary);
        } catch (ConfigException e) {
            problems.addAll(e.problems());
        }
        for (String p : alone)
            if (!problems.contains(p))
                problems.add(source + ": " + p + " (the file on its own: the command line's values hide it now, and a start"
                        + " without them would refuse the file)");
        if (!problems.isEmpty()) throw new ConfigException(problems);
        return c;
    }

    /**
     * What a refusal of a file that cannot be read says of the checks it did not make (after the file's name): the
     * values of its keys, and the start's checks of the model and draft folders and the backend it names.
     */
    public static final String NOT_CHECKED = "the rest of the file is not checked until it can be read: its keys' values,"
            + " and the model and draft folders and the backend it names";

    /**
     * The problems of each override's own value, judged without the file (its type, its key's range, an unknown key):
     * what a file that cannot be read leaves to say of the command line. A problem that depends on other keys (the
     * backend's options together, cluster timings, top-k against the model) is left out: the file may set those.
     */
    private static List<String> ownValueProblems(Map<String, Object> overrides) {
        if (overrides == null || overrides.isEmpty()) return List.of();
        ObjectNode flags = JsonNodeFactory.instance.objectNode();
        List<String> p = new ArrayList<>();
        for (var e : overrides.entrySet()) {
            try {
                put(flags, e.getKey(), Json.tree(e.getValue()));
            } catch (ConfigException x) {
                p.addAll(x.problems());
            }
        }
        Map<String, Object> v = new LinkedHashMap<>();
        for (ConfigKey k : KEYS) v.put(k.name(), k.def());
        Map<String, String> written = new LinkedHashMap<>();
        walk(flags, "", v, p, written);
        for (String key : new java.util.TreeSet<>(overrides.keySet())) {
            ConfigKey k = BY_NAME.get(key);
            if (k != null && k.range() != null) inRange(v, p, k, written.get(key));
        }
        return p;
    }

    /**
     * The keys a configuration file sets to another value than a command-line override, which wins over it (so a
     * reload of that key changes nothing), as "key: file value, flag value" lines in key order. A file that
     * {@link #parseFile} refuses gives none (parseFile reports it).
     * @param bytes     the file's content
     * @param overrides dotted key → value, as given to {@link #parseFile}
     * @param defaults  whether to list keys the file sets to their default too (a file that spells out every default,
     *                  as the shipped one does, states no choice the flag undoes: the start-up warning leaves them out)
     */
    public static List<String> overridden(byte[] bytes, Map<String, Object> overrides, boolean defaults) {
        if (bytes == null || overrides == null || overrides.isEmpty()) return List.of();
        JsonNode tree;
        try {
            tree = Json.read(bytes);
        } catch (Json.Unreadable e) {
            return List.of();
        }
        if (tree == null || !tree.isObject()) return List.of();
        List<String> out = new ArrayList<>();
        for (var e : new java.util.TreeMap<>(overrides).entrySet()) {
            JsonNode inFile = tree.at("/" + e.getKey().replace('.', '/')), flag = Json.tree(e.getValue());
            if (inFile.isMissingNode()) continue;
            ConfigKey k = BY_NAME.get(e.getKey());
            // one value however written (8080 and 8.08e3, 1 and 1.0 of a double key, INFO and info): the key's reading
            if (k == null ? inFile.equals(flag) : k.sameValue(inFile, flag)) continue;
            if (!defaults && k != null && k.sameValue(inFile, k.def())) continue;
            out.add(e.getKey() + ": the file's " + shown(e.getKey(), inFile) + " is overridden by the command line's "
                    + shown(e.getKey(), flag));
        }
        return out;
    }

    /**
     * A key's JSON value as logs and messages show it: a number as the file wrote it ({@link Json#written}: 1e3, not
     * the 1000.0 of its double), a secret key's values as "***" each ({@link #secret}).
     */
    private static String shown(String key, JsonNode v) {
        if (!secret(key)) return Json.asWritten(v);
        if (!v.isArray()) return JsonNodeFactory.instance.textNode("***").toString();
        var masked = JsonNodeFactory.instance.arrayNode();
        for (int i = 0; i < v.size(); i++) masked.add("***");
        return masked.toString();
    }

    /** Sets a dotted key in a JSON tree, creating the objects on its path. */
    private static void put(ObjectNode tree, String dotted, JsonNode value) throws ConfigException {
        String[] parts = dotted.split("\\.");
        ObjectNode at = tree;
        for (int i = 0; i < parts.length - 1; i++) {
            JsonNode child = at.get(parts[i]);
            if (child == null || !child.isObject()) {
                child = JsonNodeFactory.instance.objectNode();
                at.set(parts[i], child);
            }
            at = (ObjectNode) child;
        }
        at.set(parts[parts.length - 1], value);
    }

    /**
     * Reads and validates a JSON tree. Keys starting with "_" are comments and are ignored.
     * @throws ConfigException listing every problem by key
     */
    public static ServerConfig fromTree(ObjectNode tree) throws ConfigException {
        return fromTree(tree, Vocabulary.UNKNOWN);
    }

    /** {@link #fromTree(ObjectNode)}, with {@code sampling.top_k} checked against the vocabulary too. */
    private static ServerConfig fromTree(ObjectNode tree, Vocabulary vocabulary) throws ConfigException {
        List<String> problems = new ArrayList<>();
        Map<String, Object> v = new LinkedHashMap<>();
        for (ConfigKey k : KEYS) v.put(k.name(), k.def());
        Map<String, String> written = new LinkedHashMap<>();
        walk(tree, "", v, problems, written);
        // keys with a type problem still hold their (valid) default here, so range checks only report the others
        check(v, problems, written, vocabulary);
        if (!problems.isEmpty()) throw new ConfigException(problems);
        return new ServerConfig(v);
    }

    /**
     * The largest top-k of the model a configuration names ({@link SamplingParams#topKMax}), that a default
     * {@code sampling.top_k} must not exceed: at a reload the loaded model's, at start the named model's tokenizer's
     * vocabulary, read before the model loads.
     */
    @FunctionalInterface
    public interface Vocabulary {
        /** Nothing known: sampling.top_k is checked against its range only. */
        Vocabulary UNKNOWN = modelPath -> null;

        /**
         * @param modelPath the configuration's model.path (null = the embedded default model)
         * @return its vocabulary size, or null when it cannot be told (a folder the start's check refuses says so itself)
         */
        Integer of(String modelPath);
    }

    /** Reads the tree's keys into v; written collects the text of numbers as the file wrote them ({@link Json#written}). */
    private static void walk(JsonNode node, String prefix, Map<String, Object> v, List<String> problems,
                             Map<String, String> written) {
        for (var e : node.properties()) {
            String name = e.getKey();
            if (name.startsWith("_")) continue;
            String path = prefix.isEmpty() ? name : prefix + "." + name;
            ConfigKey k = BY_NAME.get(path);
            if (k != null) {
                Object r = k.read(e.getValue());
                if (r instanceof ConfigKey.Problem p) problems.add(path + ": " + p.text());
                else v.put(path, r);
                String text = Json.written(e.getValue());
                if (text != null) written.put(path, text);
            } else if (isSection(path)) {
                if (e.getValue().isObject()) walk(e.getValue(), path, v, problems, written);
                else problems.add(path + ": must be an object, got " + ConfigKey.Type.describe(e.getValue()));
            } else {
                problems.add(path + ": unknown key" + suggestion(path));
            }
        }
    }

    /** The groups the keys are in, nested ones too ({@code server}, {@code server.cors}), in documentation order. */
    private static List<String> groups() {
        var groups = new java.util.LinkedHashSet<String>();
        for (ConfigKey k : KEYS)
            for (int dot = k.name().indexOf('.'); dot > 0; dot = k.name().indexOf('.', dot + 1)) groups.add(k.name().substring(0, dot));
        return List.copyOf(groups);
    }

    private static boolean isSection(String path) {
        for (ConfigKey k : KEYS) if (k.name().startsWith(path + ".")) return true;
        return false;
    }

    /**
     * " (did you mean KEY?)" for an unknown key, or "" when nothing is close: the one rule for the file's unknown keys
     * and {@code serve --set}'s. A key whose last part is a key's own name in another group, or given without its group
     * ({@code server.maxActive}, {@code maxActive}: {@code limits.maxActive}), or written in the other case or as
     * snake_case against camelCase ({@code limits.max_queue}, {@code sampling.topK}), names that key (every such key,
     * where the name is in several groups); else the key within a few typos of the whole path ({@link #closest}), or
     * the group ({@code limit}: {@code limits}).
     */
    public static String suggestion(String path) {
        List<String> names = KEYS.stream().map(ConfigKey::name).toList();
        // the whole path but for its case and underscores is that key alone ("Server.port" is server.port, not also
        // cluster.port)
        String whole = squashedPath(path);
        List<String> same = names.stream().filter(n -> !n.equals(path) && squashedPath(n).equals(whole)).toList();
        if (same.size() == 1) return " (did you mean " + same.getFirst() + "?)";
        // a name that exists as written (or but for its case and underscores) says more than a near spelling of the whole
        // path: "server.maxActive" is one typo from no key, yet it is limits.maxActive put in the wrong group
        String last = squashed(path.substring(path.lastIndexOf('.') + 1));
        List<String> moved = names.stream().filter(n -> !n.equals(path))
                .filter(n -> squashed(n.substring(n.lastIndexOf('.') + 1)).equals(last)).toList();
        if (!moved.isEmpty()) return " (did you mean " + String.join(" or ", moved) + "?)";
        String best = closest(path, names);
        if (best != null) return " (did you mean " + best + "?)";
        // a group's name mistyped ({"limit": {...}}) is near no key's whole path, but near the group's
        String near = closest(path, groups());
        if (near != null) return " (did you mean " + near + "?)";
        // a name cut short within its group ("limits.maxContext"): the one key of the group that it begins
        int dot = path.lastIndexOf('.');
        if (dot > 0 && path.length() - dot > 3) {
            String group = squashedPath(path.substring(0, dot));
            List<String> longer = names.stream().filter(n -> n.lastIndexOf('.') == dot
                    && squashedPath(n.substring(0, dot)).equals(group) && squashed(n.substring(dot + 1)).startsWith(last)).toList();
            if (longer.size() == 1) return " (did you mean " + longer.getFirst() + "?)";
        }
        return "";
    }

    /** A dotted key path with each part {@link #squashed}: {@code Server.Port} and {@code server.port} compare equal. */
    private static String squashedPath(String path) {
        return java.util.Arrays.stream(path.split("\\.", -1)).map(ServerConfig::squashed)
                .collect(java.util.stream.Collectors.joining("."));
    }

    /** A key name without its case and underscores, so that {@code max_body_bytes} and {@code MaxBodyBytes} match {@code maxBodyBytes}. */
    private static String squashed(String name) {
        return name.replace("_", "").replace("-", "").toLowerCase(Locale.ROOT);
    }

    /**
     * The name among {@code names} that a mistyped {@code name} most likely meant, ignoring letter case, or null when
     * none is within max(1, a quarter of its length) typos ({@link #typoDistance}: a letter added, dropped, changed, or
     * two neighbours swapped), or when the nearest would replace every character of it (a guess that shares nothing
     * is no guess). A short name is one typo from what it meant or meant something else: two edits turn
     * {@code stop} into {@code store}. The one rule for every "did you mean": configuration keys and request body
     * fields. The first of equally near names wins.
     */
    public static String closest(String name, Iterable<String> names) {
        String lower = name.toLowerCase(Locale.ROOT), best = null;
        int bestD = Integer.MAX_VALUE;
        for (String n : names) {
            int d = typoDistance(lower, n.toLowerCase(Locale.ROOT));
            if (d < bestD) {
                bestD = d;
                best = n;
            }
        }
        return best != null && bestD <= Math.max(1, name.length() / 4) && bestD < name.length() ? best : null;
    }

    /**
     * {@link #editDistance} that counts two neighbouring characters swapped as one edit ({@code nmae} is one typo from
     * {@code name}, not two), each character edited at most once (the optimal string alignment distance).
     */
    static int typoDistance(String a, String b) {
        // three rows of the table (a swap looks two rows back): memory in b's length, as editDistance's
        int[] back = new int[b.length() + 1], prev = new int[b.length() + 1], cur = new int[b.length() + 1];
        for (int j = 0; j <= b.length(); j++) prev[j] = j;
        for (int i = 1; i <= a.length(); i++) {
            cur[0] = i;
            for (int j = 1; j <= b.length(); j++) {
                int cost = a.charAt(i - 1) == b.charAt(j - 1) ? 0 : 1;
                cur[j] = Math.min(Math.min(cur[j - 1], prev[j]) + 1, prev[j - 1] + cost);
                if (i > 1 && j > 1 && a.charAt(i - 1) == b.charAt(j - 2) && a.charAt(i - 2) == b.charAt(j - 1))
                    cur[j] = Math.min(cur[j], back[j - 2] + 1);
            }
            int[] t = back; back = prev; prev = cur; cur = t;
        }
        return prev[b.length()];
    }

    /**
     * Levenshtein distance between two strings (insertions, deletions and substitutions of one character), for the
     * "did you mean" of a mistyped configuration key or request path; O(|a| |b|) time, so callers bound the lengths.
     */
    public static int editDistance(String a, String b) {
        int[] prev = new int[b.length() + 1], cur = new int[b.length() + 1];
        for (int j = 0; j <= b.length(); j++) prev[j] = j;
        for (int i = 1; i <= a.length(); i++) {
            cur[0] = i;
            for (int j = 1; j <= b.length(); j++)
                cur[j] = Math.min(Math.min(cur[j - 1], prev[j]) + 1, prev[j - 1] + (a.charAt(i - 1) == b.charAt(j - 1) ? 0 : 1));
            int[] t = prev; prev = cur; cur = t;
        }
        return prev[b.length()];
    }

    /** Each numeric key's declared {@link Range}, then the other and cross-key checks. */
    private static void check(Map<String, Object> v, List<String> p, Map<String, String> written, Vocabulary vocabulary) {
        for (ConfigKey k : KEYS) if (k.range() != null) inRange(v, p, k, written.get(k.name()));
        String host = (String) v.get("server.host");
        if (host.isBlank()) p.add("server.host: must not be empty");
        String backend = (String) v.get("model.backend");
        String unknown = FeatureGate.unknownBackend(backend);
        if (unknown != null) p.add("model.backend: " + unknown);
        boolean placementOk = true;
        try {
            v.put("gpu.expertPlacement", ExpertPlacement.parse((String) v.get("gpu.expertPlacement")).key());
        } catch (IllegalArgumentException e) {
            p.add("gpu.expertPlacement: " + e.getMessage());
            placementOk = false;
        }
        // the feature gate judges the backend options together; values already refused above are not judged again
        if (placementOk && FeatureGate.BACKENDS.contains(backend) && noneAbout(p, BACKEND_OPTION_KEYS))
            p.addAll(FeatureGate.check(backend, backendOptions(v)));
        String draft = (String) v.get("speculative.draft");
        if (draft.isBlank()) p.add("speculative.draft: must be \"none\", \"ngram\", \"mtp\" or a model folder, got an empty string");
        String mp = (String) v.get("model.path");
        if (mp != null && mp.isBlank()) p.add("model.path: must be a folder or null, got an empty string");
        // a blank name would be served as the model id "" (and no request could name it)
        String mn = (String) v.get("model.name");
        if (mn != null && mn.codePoints().allMatch(c -> Character.isWhitespace(c) || Character.isSpaceChar(c)))
            p.add("model.name: must be a name or null (the model folder's name), got " + (mn.isEmpty() ? "an empty string" : "\"" + mn + "\""));
        if (!List.of("gateway", "engine", "both").contains(v.get("cluster.role")))
            p.add("cluster.role: must be gateway, engine or both, got \"" + v.get("cluster.role") + "\"");
        if (((String) v.get("cluster.name")).isBlank()) p.add("cluster.name: must not be empty");
        if (((String) v.get("cluster.host")).isBlank()) p.add("cluster.host: must not be empty");
        @SuppressWarnings("unchecked") List<String> members = (List<String>) v.get("cluster.members");
        for (String m : members) {
            if (!m.matches("[^\\s:]+(:\\d{1,5})?|\\[[0-9a-fA-F:.]+\\](:\\d{1,5})?"))
                p.add("cluster.members: \"" + m + "\" is not host or host:port");
            else if (m.matches(".*:\\d{1,5}") && !m.endsWith("]")) {
                // five digits pass the pattern, but Hazelcast's join throws on a port past 65535 (a stack trace in
                // the log, the member never tried), and no member listens on port 0
                int port = Integer.parseInt(m.substring(m.lastIndexOf(':') + 1));
                if (port < 1 || port > 65535)
                    p.add("cluster.members: \"" + m + "\" has port " + port + ", outside [1, 65535]");
            }
        }
        if ((Integer) v.get("cluster.announceMs") * 2 > (Integer) v.get("cluster.engineTimeoutMs")
                && noneAbout(p, List.of("cluster.announceMs", "cluster.engineTimeoutMs")))
            p.add("cluster.engineTimeoutMs: must be at least twice cluster.announceMs (" + v.get("cluster.announceMs") + ")");
        // an entry no browser's Origin header can equal would leave CORS off for the page it was meant for, silently
        @SuppressWarnings("unchecked") List<String> origins = (List<String>) v.get("server.cors.allowedOrigins");
        for (String o : origins) {
            String why = originProblem(o);
            if (why != null) p.add("server.cors.allowedOrigins: \"" + o + "\" " + why);
        }
        // an entry listed twice, or beside "*" (which allows any), changes nothing: most likely another was meant
        java.util.Set<String> seen = new java.util.HashSet<>();
        for (String o : origins)
            if (!seen.add(o)) p.add("server.cors.allowedOrigins: \"" + o + "\" is listed more than once");
        if (origins.contains("*") && seen.size() > 1)
            p.add("server.cors.allowedOrigins: \"*\" allows any origin, so the other entries change nothing: give \"*\""
                    + " alone, or the origins alone");
        @SuppressWarnings("unchecked") List<String> keys = (List<String>) v.get("server.apiKeys");
        // named by index: a key is a secret, and this message reaches the log and /props
        for (int i = 0; i < keys.size(); i++) {
            String why = ApiKeys.unsendable(keys.get(i));
            if (why != null) p.add("server.apiKeys: the key at index " + i + " " + why);
        }
        // last, once model.path is judged; the vocabulary only bounds a top-k that is on, so it is asked for only then
        // (at start that reads the named model's tokenizer)
        int topK = (Integer) v.get("sampling.top_k");
        if (topK > 0 && noneAbout(p, List.of("sampling.top_k", "model.path"))) {
            Integer vocab = vocabulary.of((String) v.get("model.path"));
            String past = vocab == null ? null : topKPast(topK, vocab);
            if (past != null) p.add(past);
        }
    }

    /**
     * Why an entry of server.cors.allowedOrigins can never equal a browser's Origin header, or null where it can: an
     * origin is {@code scheme://host[:port]} as a browser sends it (scheme and host in lower case, no default port, no
     * path, not even "/"), or {@code *} for any. The server compares the header with the entries as written.
     */
    static String originProblem(String o) {
        // "null" is the origin browsers send for file:// pages and sandboxed frames: allowing it is the operator's choice
        if (o.equals("*") || o.equals(NULL_ORIGIN)) return null;
        if (o.equalsIgnoreCase(NULL_ORIGIN))
            return "never matches: a browser sends that origin as \"" + NULL_ORIGIN + "\" (in lower case)";
        String what = " (an origin is scheme://host[:port] as a browser sends it, such as \"http://localhost:3000\", \"*\" for any, or"
                + " \"null\" for file:// pages and sandboxed frames)";
        java.net.URI u;
        try {
            u = new java.net.URI(o);
        } catch (java.net.URISyntaxException e) {
            return "is not an origin" + what;
        }
        if (u.getScheme() != null && u.getHost() == null && !u.isOpaque() && u.getRawAuthority() != null) {
            // an international host name: java.net.URI reads no host in it, and browsers send its punycode form
            String ascii = asciiOrigin(u.getScheme(), u.getRawAuthority());
            if (ascii != null && originProblem(ascii) == null)
                return "never matches: a browser sends that origin as \"" + ascii + "\" (an international host name in its"
                        + " ASCII form)";
        }
        if (u.getScheme() == null || u.getHost() == null || u.isOpaque()) return "is not an origin" + what;
        String scheme = u.getScheme().toLowerCase(Locale.ROOT);
        int port = u.getPort();
        if (port == 0 || port > 65535) return "has no valid port: " + port + " is not in 1..65535";
        boolean defaultPort = port == 80 && scheme.equals("http") || port == 443 && scheme.equals("https");
        String origin = scheme + "://" + u.getHost().toLowerCase(Locale.ROOT) + (port >= 0 && !defaultPort ? ":" + port : "");
        if (origin.equals(o)) return null;
        return "never matches: a browser sends that origin as \"" + origin + "\" (scheme and host in lower case, no default"
                + " port, no path or trailing slash)";
    }

    /** The Origin header's value for a page of no origin a server can name (file://, a sandboxed frame). */
    private static final String NULL_ORIGIN = "null";

    /** scheme://authority with the authority's host in its IDNA ASCII form (punycode), or null where it has none. */
    private static String asciiOrigin(String scheme, String authority) {
        int colon = authority.lastIndexOf(':');
        String host = colon >= 0 ? authority.substring(0, colon) : authority;
        try {
            return scheme + "://" + java.net.IDN.toASCII(host, java.net.IDN.ALLOW_UNASSIGNED).toLowerCase(Locale.ROOT)
                    + (colon >= 0 ? authority.substring(colon) : "");
        } catch (IllegalArgumentException e) {
            return null;
        }
    }

    /** The keys {@link #backendOptions()} reads. */
    private static final List<String> BACKEND_OPTION_KEYS = List.of("gpu.devices", "gpu.expertPlacement",
            "gpu.memoryBudgetMiB", "verify.f16Kv", "verify.f32ShortContextRows");

    private static boolean noneAbout(List<String> problems, List<String> keys) {
        for (String pr : problems) for (String k : keys) if (pr.startsWith(k + ":")) return false;
        return true;
    }

    /** Options from already range-checked values. */
    private static BackendOptions backendOptions(Map<String, Object> v) {
        return new BackendOptions((Integer) v.get("gpu.devices"), ExpertPlacement.parse((String) v.get("gpu.expertPlacement")),
                BackendOptions.mib((Integer) v.get("gpu.memoryBudgetMiB")), (Boolean) v.get("verify.f16Kv"),
                (Integer) v.get("verify.f32ShortContextRows"));
    }

    /**
     * Reports a numeric key's value outside its {@link Range}, decided on the value and on the number as the file or
     * flag wrote it (2.0000000000000000001 is above 2, though its double is 2; as a request's numbers are), shown as
     * written where its value would not show it ({@code 1e20}, {@code 2.50}), else as an integer where it is whole;
     * where only the double misses the range, with what the double holds, as a request's error says it
     * ({@code 1e-400 (0 in double precision)}).
     * @param written the value's text in the file, or null
     */
    private static void inRange(Map<String, Object> v, List<String> p, ConfigKey k, String written) {
        // a value its type refused (the default stands in for it) is reported once, by that refusal
        if (!noneAbout(p, List.of(k.name()))) return;
        double x = ((Number) v.get(k.name())).doubleValue();
        java.math.BigDecimal exact = written == null ? null : io.ds4j.json.JsonNumbers.exact(written);
        if (k.range().accepts(x) && (exact == null || k.range().accepts(exact))) return;
        String shown = written == null ? Range.num(x)
                : exact != null && k.range().accepts(exact) ? written + " (" + Range.num(x) + " in double precision)" : written;
        p.add(k.name() + ": " + k.mustBe() + ", got " + shown);
    }

    // ------------------------------------------------------------------------------------------------ accessors

    /** The value of a key (see {@link #KEYS} for its Java type). */
    public Object get(String key) {
        if (!values.containsKey(key)) throw new IllegalArgumentException("unknown config key " + key);
        return values.get(key);
    }

    private int i(String k) {
        return (Integer) values.get(k);
    }

    private double d(String k) {
        return (Double) values.get(k);
    }

    /** {@code server.host}. */
    public String host() { return (String) values.get("server.host"); }

    /** {@code server.port}. */
    public int port() { return i("server.port"); }

    /** HTTP verticle instances (0 in the file means min(4, cores)). */
    public int httpInstances() {
        int n = i("server.httpInstances");
        return n > 0 ? n : Math.max(1, Math.min(4, Runtime.getRuntime().availableProcessors()));
    }

    /** {@code server.apiKeys}. */
    @SuppressWarnings("unchecked")
    public List<String> apiKeys() { return (List<String>) values.get("server.apiKeys"); }

    /**
     * That server.apiKeys lists a key more than once, naming the places (never the key), or null: the repeat lets no
     * one more in, and may be a key pasted twice where another was meant. Warned of at start and at a reload.
     */
    public String repeatedApiKeys() {
        List<String> keys = apiKeys(), repeats = new ArrayList<>();
        for (int i = 0; i < keys.size(); i++) {
            int first = keys.indexOf(keys.get(i));
            if (first < i) repeats.add("index " + i + " repeats index " + first);
        }
        return repeats.isEmpty() ? null : "server.apiKeys lists the same key more than once (" + String.join(", ", repeats)
                + "); a repeat changes nothing: remove it, or put the key that was meant in its place";
    }

    /** {@code server.cors.allowedOrigins}. */
    @SuppressWarnings("unchecked")
    public List<String> corsOrigins() { return (List<String>) values.get("server.cors.allowedOrigins"); }

    /** {@code server.maxBodyBytes}. */
    public int maxBodyBytes() { return i("server.maxBodyBytes"); }

    /** {@code server.webroot}. */
    public String webroot() { return (String) values.get("server.webroot"); }

    /** {@code server.configScanMs}. */
    public int configScanMs() { return i("server.configScanMs"); }

    /** {@code server.shutdownGraceSeconds}. */
    public int shutdownGraceSeconds() { return i("server.shutdownGraceSeconds"); }

    /** {@code server.rejectUnknownFields}. */
    public boolean rejectUnknownFields() { return (Boolean) values.get("server.rejectUnknownFields"); }

    /** The model folder, or null for the embedded default. */
    public String modelPath() { return (String) values.get("model.path"); }

    /** {@code model.name}. */
    public String modelName() { return (String) values.get("model.name"); }

    /** {@code model.backend}. */
    public String backend() { return (String) values.get("model.backend"); }

    /** {@code model.cacheTokens}. */
    public int cacheTokens() { return i("model.cacheTokens"); }

    /** {@code speculative.draft}. */
    public String draft() { return (String) values.get("speculative.draft"); }

    /** "auto" or "0".."8" (0: requests that give no speculative_q do not speculate). */
    public String specQ() { return (String) values.get("speculative.q"); }

    /** speculative.q as the file writes it: the number 4, or "auto" ({@link #specQ} is its canonical text). */
    public Object specQWritten() { return asWritten(keyOf("speculative.q"), specQ()); }

    /** {@code verify.f16Kv}. */
    public boolean verifyF16Kv() { return (Boolean) values.get("verify.f16Kv"); }

    /** {@code verify.f32ShortContextRows}. */
    public int verifyF32ShortContextRows() { return i("verify.f32ShortContextRows"); }

    /** {@code gpu.devices}. */
    public int gpuDevices() { return i("gpu.devices"); }

    /** {@code gpu.expertPlacement}, in its lower-case spelling. */
    public String expertPlacement() { return (String) values.get("gpu.expertPlacement"); }

    /** {@code gpu.memoryBudgetMiB}; 0 = all free device memory. */
    public int memoryBudgetMiB() { return i("gpu.memoryBudgetMiB"); }

    /**
     * The options the backend is opened with, from {@code gpu.*} and {@code verify.*}: the one place the server
     * turns its configuration into {@link BackendOptions}. A parsed configuration has already passed
     * {@link FeatureGate#check} for its {@code model.backend}.
     */
    public BackendOptions backendOptions() {
        return backendOptions(values);
    }

    /** {@code limits.maxContextTokens}. */
    public int maxContextTokens() { return i("limits.maxContextTokens"); }

    /** {@code limits.maxQueue}. */
    public int maxQueue() { return i("limits.maxQueue"); }

    /** {@code limits.maxActive}. */
    public int maxActive() { return i("limits.maxActive"); }

    /** {@code limits.maxTokensDefault}. */
    public int maxTokensDefault() { return i("limits.maxTokensDefault"); }

    /** {@code prefixCache.enabled}. */
    public boolean prefixCacheEnabled() { return (Boolean) values.get("prefixCache.enabled"); }

    /** {@code prefixCache.budgetMiB}. */
    public int prefixCacheBudgetMiB() { return i("prefixCache.budgetMiB"); }

    /** {@code prefixCache.blockTokens}. */
    public int prefixCacheBlockTokens() { return i("prefixCache.blockTokens"); }

    /** {@code prefixCache.intervalTokens}. */
    public int prefixCacheIntervalTokens() { return i("prefixCache.intervalTokens"); }

    /** {@code limits.prefillChunk}. */
    public int prefillChunk() { return i("limits.prefillChunk"); }

    /** {@code limits.bodyReadTimeoutMs}. */
    public int bodyReadTimeoutMs() { return i("limits.bodyReadTimeoutMs"); }

    /** {@code limits.headerReadTimeoutMs}. */
    public int headerReadTimeoutMs() { return i("limits.headerReadTimeoutMs"); }

    /** {@code limits.streamBufferBytes}. */
    public int streamBufferBytes() { return i("limits.streamBufferBytes"); }

    /** {@code scheduler.maxBatchRows}. */
    public int maxBatchRows() { return i("scheduler.maxBatchRows"); }

    /** {@code scheduler.tokenBudget}. */
    public int tokenBudget() { return i("scheduler.tokenBudget"); }

    /** {@code scheduler.maxTickStretch}: 0 (off) or at least 1. */
    public double maxTickStretch() { return d("scheduler.maxTickStretch"); }

    /** {@code scheduler.minPrefillChunk} as configured ({@link #minPrefillChunkInEffect} is what the scheduler gets). */
    public int minPrefillChunk() { return i("scheduler.minPrefillChunk"); }

    /** The prefill chunk in effect: limits.prefillChunk, at most scheduler.tokenBudget. */
    private int prefillChunkInEffect() {
        return Math.min(prefillChunk(), tokenBudget());
    }

    /** The floor the scheduler gets ({@link #minPrefillChunkInEffect(int, int, int)} of this configuration's values). */
    public int minPrefillChunkInEffect() {
        return minPrefillChunkInEffect(minPrefillChunk(), prefillChunk(), tokenBudget());
    }

    /**
     * The fewest prefill tokens a step gives a waiting prompt under the latency bound, as the scheduler takes it:
     * scheduler.minPrefillChunk, at most the prefill chunk (limits.prefillChunk, itself at most scheduler.tokenBudget).
     * A step gives a prompt at most one chunk, so a floor above the chunk was never given: the start said "at least 512
     * tokens" while a lone prompt's steps had 100. The one place this rule is decided (the server, /props, the bench).
     */
    public static int minPrefillChunkInEffect(int minPrefillChunk, int prefillChunk, int tokenBudget) {
        return Math.min(minPrefillChunk, Math.min(prefillChunk, tokenBudget));
    }

    /**
     * That limits.prefillChunk is above scheduler.tokenBudget, or scheduler.minPrefillChunk above the prefill chunk in
     * effect, and so capped, one line each with the values; empty when neither is. Said where the values are set: /props
     * shows the capped ones under {@code scheduler}, and a reload's "512 -> 4096" alone read as if the larger one took
     * effect.
     */
    public List<String> prefillCaps() {
        List<String> caps = new ArrayList<>();
        int budget = tokenBudget(), chunk = prefillChunkInEffect(), min = minPrefillChunk();
        String byBudget = ", scheduler.tokenBudget: no prefill step takes more tokens";
        if (prefillChunk() > budget) caps.add("limits.prefillChunk " + prefillChunk() + " is capped to " + budget + byBudget);
        if (min > chunk)
            caps.add("scheduler.minPrefillChunk " + min + " is capped to " + chunk + (chunk < budget
                    ? ", limits.prefillChunk: a step gives a prompt at most one chunk" : byBudget));
        return caps;
    }

    /**
     * That limits.prefillChunk or scheduler.minPrefillChunk, capped in before ({@link #prefillCaps}), is not capped in
     * this configuration, one line each with the value now in effect (a larger budget or chunk, or a smaller value,
     * lifted the cap: the cap was warned of, so its end is said too); empty when neither is.
     */
    public List<String> prefillCapLifts(ServerConfig before) {
        List<String> lifts = new ArrayList<>();
        if (before.prefillChunk() > before.tokenBudget() && prefillChunk() <= tokenBudget())
            lifts.add("limits.prefillChunk is no longer capped to " + before.tokenBudget() + ": " + prefillChunk()
                    + " in effect (scheduler.tokenBudget " + tokenBudget() + ")");
        if (before.minPrefillChunk() > before.prefillChunkInEffect() && minPrefillChunk() <= prefillChunkInEffect())
            lifts.add("scheduler.minPrefillChunk is no longer capped to " + before.prefillChunkInEffect() + ": " + minPrefillChunk()
                    + " in effect (limits.prefillChunk " + prefillChunk() + ", scheduler.tokenBudget " + tokenBudget() + ")");
        return lifts;
    }

    /** {@code scheduler.layerSlices}. */
    public boolean layerSlices() { return (Boolean) values.get("scheduler.layerSlices"); }

    /** The {@code cluster.*} settings. */
    @SuppressWarnings("unchecked")
    public Cluster cluster() {
        return new Cluster((Boolean) values.get("cluster.enabled"), (String) values.get("cluster.role"),
                (String) values.get("cluster.name"), (String) values.get("cluster.host"), i("cluster.port"),
                i("cluster.eventBusPort"), (List<String>) values.get("cluster.members"), i("cluster.announceMs"),
                i("cluster.engineTimeoutMs"));
    }

    /**
     * How this process takes part in a cluster.
     * @param role      "gateway", "engine" or "both"
     * @param host      bind and announce address of Hazelcast and the event bus
     * @param port      Hazelcast member port (0 = free)
     * @param members   "host[:port]" entries joined by TCP/IP
     * @param announceMs      engine announcement period
     * @param engineTimeoutMs silence after which a gateway drops an engine
     */
    public record Cluster(boolean enabled, String role, String name, String host, int port, int eventBusPort,
                          List<String> members, int announceMs, int engineTimeoutMs) {
        /** True when this process serves the HTTP API as a router. */
        public boolean gateway() {
            return !role.equals("engine");
        }

        /** True when this process loads the model. */
        public boolean engine() {
            return !role.equals("gateway");
        }
    }

    /** {@code log.level}. */
    public String logLevel() { return (String) values.get("log.level"); }

    /** Default sampling settings. */
    public SamplingDefaults sampling() {
        return new SamplingDefaults(d("sampling.temperature"), d("sampling.top_p"), SamplingParams.topKGiven(i("sampling.top_k")),
                d("sampling.min_p"),
                d("sampling.presence_penalty"), d("sampling.frequency_penalty"), d("sampling.repetition_penalty"),
                (Long) values.get("sampling.seed"));
    }

    /** The sampling defaults requests fall back to. */
    public record SamplingDefaults(double temperature, double topP, int topK, double minP, double presencePenalty,
                                   double frequencyPenalty, double repetitionPenalty, Long seed) {}

    /**
     * What this configuration asks that a model of {@code vocab} token ids cannot give, or null: a default top-k above
     * the vocabulary would make every request that gives none a 400 naming a top_k it never sent. Checked against the
     * vocabulary requests are checked against (the tokenizer's) by the parse where it is known ({@link Vocabulary}: at
     * start and at every reload), and by this once the model has loaded, for a start that could not tell it before.
     */
    public String againstVocabulary(int vocab) {
        return topKPast((Integer) values.get("sampling.top_k"), vocab);
    }

    /** That a default top-k k is past a vocabulary of vocab token ids, or null: the one wording of this check. */
    private static String topKPast(int k, int vocab) {
        return k > vocab ? "sampling.top_k: must be in [-1, " + vocab + "]" + SamplingParams.topKNote(vocab) + ", got " + k : null;
    }

    /** Whether a key's values are secrets (the API keys), never shown in logs, /props or messages. */
    public static boolean secret(String key) {
        return key.equals("server.apiKeys");
    }

    /**
     * The configuration as nested JSON (the file's shape).
     * @param redactSecrets replace API keys by "***"
     */
    public ObjectNode toJson(boolean redactSecrets) {
        ObjectNode root = JsonNodeFactory.instance.objectNode();
        for (ConfigKey k : KEYS) {
            Object val = asWritten(k, values.get(k.name()));
            if (redactSecrets && secret(k.name()))
                val = apiKeys().stream().map(x -> "***").toList();
            try {
                put(root, k.name(), Json.MAPPER.valueToTree(val));
            } catch (ConfigException e) {
                throw new IllegalStateException(e);
            }
        }
        return root;
    }

    /** A copy with one key changed (the value must already be valid; used by tests and the bench command). */
    public ServerConfig with(String key, Object value) throws ConfigException {
        ObjectNode tree = toJson(false);
        put(tree, key, Json.MAPPER.valueToTree(value));
        return fromTree(tree);
    }

    // ------------------------------------------------------------------------------------------------ reload

    /** One key whose value differs between two configurations. */
    public record Change(String key, Object running, Object proposed) {
        @Override
        public String toString() {
            return key + ": " + show(running) + " -> " + show(proposed);
        }

        private static String show(Object o) {
            return o instanceof String s ? "\"" + s + "\"" : String.valueOf(o);
        }
    }

    /**
     * The outcome of comparing a new configuration with the running one.
     * @param applied the configuration to run from now on: the new values of live keys, the running values of the others
     * @param live    live keys that changed (applied now)
     * @param pending restart keys whose new value differs from the running one (not applied until a restart)
     */
    public record Reload(ServerConfig applied, List<Change> live, List<Change> pending) {}

    /** Splits a validated new configuration into live changes (applied) and restart-pending ones (kept as running). */
    public static Reload reload(ServerConfig running, ServerConfig proposed) {
        Map<String, Object> v = new LinkedHashMap<>();
        List<Change> live = new ArrayList<>(), pending = new ArrayList<>();
        for (ConfigKey k : KEYS) {
            Object r = running.values.get(k.name()), n = proposed.values.get(k.name());
            boolean same = Objects.equals(r, n);
            if (k.live()) {
                v.put(k.name(), n);
                if (!same) live.add(new Change(k.name(), redact(k, r), redactChange(k, r, n)));
            } else {
                v.put(k.name(), r);
                if (!same) pending.add(new Change(k.name(), redact(k, r), redactChange(k, r, n)));
            }
        }
        return new Reload(new ServerConfig(v), List.copyOf(live), List.copyOf(pending));
    }

    /**
     * The new value of a changed key as {@link #redact} shows it; for a secret list, with how many distinct keys were
     * added and removed, since its count alone can be the same on both sides ("1 key(s)" -> "1 key(s)" for a replaced
     * key); a list that only repeats or reorders its keys says so.
     */
    private static Object redactChange(ConfigKey k, Object running, Object proposed) {
        if (!(secret(k.name()) && running instanceof List<?> r && proposed instanceof List<?> n)) return redact(k, proposed);
        java.util.Set<?> was = new java.util.HashSet<>(r), now = new java.util.HashSet<>(n);
        long added = now.stream().filter(x -> !was.contains(x)).count(), removed = was.stream().filter(x -> !now.contains(x)).count();
        return redact(k, proposed) + " (" + added + " added, " + removed + " removed"
                + (added + removed == 0 ? ", repeated or reordered" : "") + ")";
    }

    /** A value as /props and the log show it: a secret list as its count of distinct keys, anything else as written. */
    private static Object redact(ConfigKey k, Object o) {
        if (secret(k.name()) && o instanceof List<?> l) return new java.util.HashSet<>(l).size() + " key(s)";
        return asWritten(k, o);
    }

    /**
     * A value as a file writes it: a speculative width held as its canonical text ("4") is the number 4, so that what
     * /props and the reload log show can be written back into the file (which refuses the text "4").
     */
    private static Object asWritten(ConfigKey k, Object o) {
        if (k.type() == ConfigKey.Type.WIDTH && o instanceof String w && !w.isEmpty() && w.chars().allMatch(Character::isDigit))
            return Integer.parseInt(w);
        return o;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof ServerConfig c && c.values.equals(values);
    }

    @Override
    public int hashCode() {
        return values.hashCode();
    }

    @Override
    public String toString() {
        return toJson(true).toString();
    }
}
