package io.ds4j.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.ds4j.bench.SseEvents;
import io.ds4j.cpu.CpuBackend;
import io.ds4j.engine.Scheduler;
import io.ds4j.engine.Generation;
import io.ds4j.model.WeightLoader;
import io.ds4j.model.synth.ModelStore;
import io.ds4j.model.synth.RandomCheckpoint;
import io.ds4j.sampling.Sampler;
import io.ds4j.sampling.SamplingParams;
import io.ds4j.app.Backends;
import io.ds4j.app.DefaultModelProvider;
import io.ds4j.server.Ds4jServer;
import io.ds4j.server.config.ConfigKey;
import io.ds4j.server.config.ServerConfig;
import io.ds4j.speculative.NgramDraft;
import io.ds4j.engine.VerifyWidth;
import io.ds4j.text.Tokenizer;
import io.ds4j.text.Tokenizers;
import io.ds4j.text.chat.ChatEncoder;
import io.ds4j.text.chat.ChatMessage;
import io.ds4j.text.chat.ChatOptions;
import picocli.CommandLine;
import picocli.CommandLine.ArgGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.stream.Stream;

import static io.ds4j.bench.Stats.median;

/**
 * {@code ds4j bench-server}: the server as its clients see it. On backend cpu it first runs the same greedy generation
 * on the engine alone (a {@link Generation} stepped in a loop) and through the HTTP server as an SSE stream, and prints
 * tokens/s of both (the server's own cost); then, at each number of concurrent streaming clients, aggregate generated
 * tokens/s, TTFT p50/p99 (request sent → first content chunk) and per-stream inter-token latency p50/p99 (time
 * between successive content chunks of one stream; a speculative step may deliver several tokens in one chunk).
 * With {@code --long-prompt N}, each level runs a second time with an N-token prompt being prefilled beside the
 * streams (sent again whenever one finishes), and the streams' figures with it are printed next to those without.
 * A benchmark, not a test: it prints figures and asserts nothing.
 */
@Command(name = "bench-server", mixinStandardHelpOptions = true, sortOptions = false,
        description = "Through the server: aggregate tokens/s, TTFT and inter-token latency p50/p99 at 1, 4, 16, 64 streams; "
                + "optionally beside a long prompt being prefilled.")
public final class BenchServerCommand implements Callable<Integer> {
    static final class Source {
        @Option(names = "--model", paramLabel = "DIR", description = "model directory") Path model;
        @Option(names = "--preset", paramLabel = "NAME", description = "preset model (default tiny, the embedded default), created on first use") String preset;
    }

    @ArgGroup(exclusive = true, multiplicity = "0..1") Source source = new Source();
    @Option(names = "--layers", description = "preset variant: layers (default: the preset's)") Integer layers;
    @Option(names = "--experts", description = "preset variant: routed experts (default: the preset's)") Integer experts;
    @Option(names = "--dtype", defaultValue = "bf16", description = "preset variant storage: bf16 or fp8 (default ${DEFAULT-VALUE})") String dtype;
    @Option(names = "--backend", defaultValue = "cpu", description = "model.backend: cpu or hip (default ${DEFAULT-VALUE}); "
            + "the engine-alone comparison runs on cpu only") String backend;
    @Option(names = "--prompt-tokens", defaultValue = "64", description = "approximate prompt length, the chat template "
            + "included: at least 1, and the prompt has at least " + PROMPT_WORDS + " words (the header says where that "
            + "is more than asked; default ${DEFAULT-VALUE})") int promptTokens;
    @Option(names = "--max-tokens", defaultValue = "32", description = "tokens generated per request (default ${DEFAULT-VALUE})") int maxTokens;
    @Option(names = "--clients", defaultValue = "1,4,16,64", paramLabel = "N[,N...]", description = "concurrency levels, "
            + "each once (default ${DEFAULT-VALUE})") List<String> clientsGiven;
    /** The --clients levels, read from them as written by {@link #badOption}. */
    List<Integer> clients;
    @Option(names = "--requests", defaultValue = "32", description = "requests per level, at least one per client (default ${DEFAULT-VALUE})") int requests;
    @Option(names = "--repeats", defaultValue = "10", description = "single-stream runs per block for the overhead figure, in two blocks (medians of twice this many; "
            + "with --url, twice this many single-stream runs; default ${DEFAULT-VALUE})") int repeats;
    @Option(names = "--draft", defaultValue = "none", description = "speculative.draft for both sides: none or ngram (default ${DEFAULT-VALUE})") String draft;
    @Option(names = "--max-active", defaultValue = "0", description = "limits.maxActive of the server; 0 (default) = the "
            + "largest concurrency level (plus one for --long-prompt), so every stream runs at once") int maxActive;
    @Option(names = "--max-batch-rows", defaultValue = "256", description = "scheduler.maxBatchRows (default ${DEFAULT-VALUE})") int maxBatchRows;
    @Option(names = "--token-budget", defaultValue = "512", description = "scheduler.tokenBudget: prefill tokens per step (default ${DEFAULT-VALUE})") int tokenBudget;
    @Option(names = "--max-tick-stretch", defaultValue = "1.6", description = "scheduler.maxTickStretch: while streams "
            + "decode, a step with prefill takes at most this many times the step without it; 0 = off (default ${DEFAULT-VALUE})") double maxTickStretch;
    @Option(names = "--min-prefill-chunk", defaultValue = "64", description = "scheduler.minPrefillChunk: the fewest prefill "
            + "tokens a step gives a waiting prompt under that bound (default ${DEFAULT-VALUE})") int minPrefillChunk;
    @Option(names = "--log-level", defaultValue = "warn", paramLabel = "LEVEL", description = "the server's log.level during "
            + "the run (default ${DEFAULT-VALUE}; debug logs every step's prefill decision and duration)") String logLevel;
    @Option(names = "--layer-slices", defaultValue = "true", arity = "1", paramLabel = "true|false", description =
            "scheduler.layerSlices: a chunk that would break that bound even at the floor runs a few layers a step "
                    + "(default ${DEFAULT-VALUE})") boolean layerSlices;
    @Option(names = "--prefill-chunk", defaultValue = "512", description = "limits.prefillChunk (default ${DEFAULT-VALUE})") int prefillChunk;
    @Option(names = "--long-prompt", defaultValue = "0", paramLabel = "N", description = "also run each level beside an "
            + "N-token prompt being prefilled (e.g. 32768); 0 = off (default)") int longPrompt;
    @Option(names = "--skip-engine-alone", description = "leave out the single-stream engine-alone comparison") boolean skipEngineAlone;
    @Option(names = "--json-schema", paramLabel = "FILE", description = "hold every request's output to this JSON schema "
            + "(response_format json_schema, strict), to measure constrained decoding; the engine-alone comparison, "
            + "which has no constraint, is then left out") Path jsonSchema;
    /** The response_format every request carries (--json-schema), or null. */
    private ObjectNode responseFormat;
    @Option(names = "--grammar", paramLabel = "FILE", description = "hold every request's output to this EBNF grammar "
            + "(structured_outputs.grammar, rule root), to measure constrained decoding; not with --json-schema") Path grammar;
    /** The grammar every request carries (--grammar), or null. */
    private String grammarText;

    @Option(names = "--url", paramLabel = "URL", description = "measure a server already running at URL (e.g. a cluster gateway, "
            + "http://127.0.0.1:8080) instead of starting one: single-stream and concurrent figures with per-token latency, "
            + "no engine-alone comparison; the flags that configure the local server are refused with it") String url;
    @Option(names = "--api-key", paramLabel = "KEY", description = "Bearer key for --url") String apiKey;

    @CommandLine.Spec CommandLine.Model.CommandSpec spec;

    private final ObjectMapper json = new ObjectMapper();
    private String base;
    private HttpClient http;
    private int port;

    @Override
    public Integer call() throws Exception {
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        String bad = badOption();
        if (bad != null) throw new CommandLine.ParameterException(spec.commandLine(), bad);
        if (url != null) {
            // the server is reached first, before the local model (its tokenizer sizes the prompts) is made or loaded
            base = serverBase(url);
            http = newClient();
            serverProps = remoteProps();
        }
        if (jsonSchema != null) responseFormat = responseFormat(jsonSchema);
        if (grammar != null) grammarText = grammarText(grammar);
        if (url == null) Backends.checkAvailable(backend);  // the server's backend, before a model is made for it
        String preset = source.preset != null ? source.preset : DefaultModelProvider.EMBEDDED_PRESET;
        Path dir = source.model != null ? Main.modelFolder("--model", source.model)
                : layers == null && experts == null && dtype.equals("bf16") ? ModelStore.ensure(preset, 1, System.err::println)
                : ModelStore.ensureVariant(preset, layers, experts, RandomCheckpoint.Storage.parse(dtype), 1, System.err::println);
        Tokenizer tok = Tokenizers.forModel(dir);
        String user = userText(tok);
        int[] prompt = tok.encode(ChatEncoder.render(List.of(ChatMessage.user(user)), ChatOptions.defaults()));
        String longer = promptNote(prompt.length, promptTokens, user.split(" ").length == PROMPT_WORDS);
        int maxClients = clients.stream().mapToInt(Integer::intValue).max().orElse(1);
        longUser = longPrompt > 0 ? textOfTokens(tok, longPrompt) : null;

        if (responseFormat != null)
            System.out.printf("every request's output held to the JSON schema %s (strict)%n", jsonSchema);
        if (grammarText != null)
            System.out.printf("every request's output held to the EBNF grammar %s (structured_outputs.grammar)%n", grammar);
        if (url != null) {
            // the local model only sizes the prompts: what the server runs is what its /props says
            System.out.printf("bench-server: %s%n", remoteLine(base, serverProps));
            System.out.printf("requests: prompt %d tokens by the local tokenizer (%s; the server's may count differently%s), "
                    + "%d generated tokens per request (greedy, ignore_eos)%n", prompt.length, dir, longer == null ? "" : "; " + longer, maxTokens);
        } else {
            System.out.printf("bench-server: model %s, backend %s, prompt %d tokens%s, %d generated tokens per request (greedy, ignore_eos), draft %s%n",
                    dir, backend, prompt.length, longer == null ? "" : " (" + longer + ")", maxTokens, draft);
        }
        longTokens = longUser == null ? 0 : tok.encode(ChatEncoder.render(List.of(ChatMessage.user(longUser)), ChatOptions.defaults())).length;
        if (longUser != null) {
            System.out.println(longPromptLine(longTokens, longPrompt));
            String small = longPromptWarning(longTokens, prompt.length);
            if (small != null) System.out.println(small);
        }
        System.out.printf("%s: %s, %d cores, JDK %s%n", url != null ? "client machine" : "machine", cpuName(), Runtime.getRuntime().availableProcessors(),
                System.getProperty("java.version"));

        if (url != null) return remote(user, maxClients);
        // --- the server (loads its own copy of the model; weights are memory-mapped, so this costs little)
        int active = maxActive > 0 ? maxActive : maxClients + (longUser != null ? 1 : 0);
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("server.host", "127.0.0.1");
        o.put("server.port", 0);
        o.put("model.path", dir.toAbsolutePath().toString());
        o.put("model.backend", backend);
        o.put("speculative.draft", draft);
        o.put("limits.maxActive", active);
        o.put("limits.maxQueue", Math.max(64, maxClients));
        o.put("limits.prefillChunk", prefillChunk);
        o.put("limits.maxContextTokens", Math.max(32768, longTokens + 4096));
        o.put("scheduler.maxBatchRows", maxBatchRows);
        o.put("scheduler.tokenBudget", tokenBudget);
        o.put("scheduler.maxTickStretch", maxTickStretch);
        o.put("scheduler.minPrefillChunk", minPrefillChunk);
        o.put("scheduler.layerSlices", layerSlices);
        o.put("log.level", logLevel);
        ServerConfig cfg = ServerConfig.parse(null, "bench", o);
        Ds4jServer server = Ds4jServer.start(new Ds4jServer.Options(cfg, null, o, new DefaultModelProvider())).await();
        try {
            server.ready().await();
            port = server.port();
            base = "http://127.0.0.1:" + port;
            http = newClient();
            if (backend.equals("cpu") && !skipEngineAlone && responseFormat == null && grammarText == null) engineAlone(dir, prompt, tok, user);
            else for (int i = 0; i < 5; i++) stream(user); // warm-up
            if (longUser != null) {
                // the long prompt's chunk-sized prefill steps are compiled (JIT) before they are measured
                String warm = textOfTokens(tok, Math.min(longPrompt, 4 * Math.min(tokenBudget, prefillChunk)));
                for (int i = 0; i < 3; i++) http.send(chatRequest(warm, 1, false), HttpResponse.BodyHandlers.discarding());
            }
            System.out.println();
            levels(user);
            System.out.printf("%n%s%n", serverLine(active, maxClients + (longUser != null ? 1 : 0), maxBatchRows, tokenBudget, prefillChunk, cfg.httpInstances(),
                    maxTickStretch, minPrefillChunk) + (maxTickStretch == 0 ? "" : ", scheduler.layerSlices " + layerSlices));
        } finally {
            server.close().await();
        }
        return 0;
    }

    /**
     * The server's root from --url: trailing slashes and an OpenAI-style {@code /v1} base path dropped (the bench adds
     * {@code /v1/chat/completions}, {@code /props} and {@code /metrics} itself), so the base URL a client library takes
     * works too.
     */
    static String serverBase(String url) {
        return url.replaceAll("/+$", "").replaceAll("/v1$", "");
    }

    /** The header of the comparison without and with the long prompt; its labels end where {@link #longRow}'s values end. */
    static String longHeader() {
        return String.format("%-8s   %23s   %23s   %22s", "clients", "ITL p50 without / with", "ITL p99 without / with",
                "p99 with / p50 without");
    }

    /** One row of that comparison: ITL p50 and p99 without and with the long prompt (ms), their ratio, and what was timed. */
    static String longRow(int clients, double p50Without, double p50With, double p99Without, double p99With, String what) {
        return String.format("%-8d   %23s   %23s   %22s   %s", clients, pair(p50Without, p50With, 7), pair(p99Without, p99With, 7),
                num(p99With / p50Without, 2), what);
    }

    /** A value with the given decimals, or "-" where there is none (NaN: nothing to measure, e.g. no gap in a round). */
    static String num(double v, int decimals) {
        return Double.isFinite(v) ? String.format("%." + decimals + "f", v) : "-";
    }

    /** Two latencies as "a / b ms" (b right-aligned in bWidth places), or "-" where neither was measured. */
    static String pair(double a, double b, int bWidth) {
        return Double.isNaN(a) && Double.isNaN(b) ? "-" : String.format("%s / %" + bWidth + "s ms", num(a, 2), num(b, 2));
    }

    /** The header's line on the long prompt: its size as sent (the chat template included), and what was asked. */
    static String longPromptLine(int tokens, int asked) {
        return String.format("long prompt beside the streams: %d tokens in the chat template (--long-prompt %d), max_tokens 1, "
                + "sent again whenever it finishes", tokens, asked);
    }

    /**
     * The title of the comparison with and without the long prompt: its size as sent (as {@link #longPromptLine}), and
     * how many times it was sent and prefilled to the end during the rounds beside it (each round's last one is
     * abandoned when its streams are done).
     */
    static String longTitle(int tokens, int started, int finished) {
        return String.format("beside %s %d-token prompt being prefilled (sent again whenever it finished: %d prefills started, "
                + "%d finished during the rounds):", article(tokens), tokens, started, finished);
    }

    /**
     * "a" or "an" before a number as it is read aloud in English: "an" where the reading starts with a vowel sound
     * (eight, eleven, eighteen, eighty-…, eight hundred …), by its leading group of three digits (8,000 is "eight
     * thousand", 11,500 "eleven thousand …"), so an 8-, an 11-, an 18-, an 80-, an 800-, an 8,192-token prompt.
     */
    static String article(long n) {
        long g = Math.abs(n);
        while (g >= 1000) g /= 1000;
        long said = g >= 100 ? g / 100 : g; // the first word: the hundreds' digit, else the whole group
        return said == 8 || said == 11 || said == 18 || (said >= 80 && said <= 89) ? "an" : "a";
    }

    /**
     * A warning when the long prompt is not longer than the streams' own prompt (both as sent, in the chat template):
     * the rounds beside it then measure no long prefill. Null when it is longer.
     */
    static String longPromptWarning(int longTokens, int streamTokens) {
        return longTokens > streamTokens ? null : String.format("warning: the long prompt (%d tokens) is not longer than the "
                + "streams' own prompt (%d tokens), so the rounds beside it show no long prefill; give --long-prompt well "
                + "above --prompt-tokens", longTokens, streamTokens);
    }

    /**
     * The first option value out of its range, as a message naming the option and its allowed range; null when every
     * value is fine. Checked before anything loads: a bad value would otherwise load the model and start the server
     * before failing (--max-tokens 0: HTTP 400), or be quietly replaced (--requests 0 ran one request a client).
     */
    String badOption() {
        String besideModel = Main.variantOptionsBesideModel(spec == null ? null : spec.commandLine().getParseResult());
        if (besideModel != null) return besideModel;
        if (jsonSchema != null && grammar != null)
            return "--json-schema and --grammar each hold the whole output: give one of them";
        // --url first: a flag that --url makes pointless is named as such, not for its value
        if (url == null && apiKey != null)
            return "--api-key is the key for the server at --url; without --url it would have no effect: give --url or leave it out";
        if (url != null) {
            URI u;
            try {
                u = new URI(url);
            } catch (java.net.URISyntaxException e) {
                u = null;
            }
            if (u == null || u.getHost() == null || !("http".equalsIgnoreCase(u.getScheme()) || "https".equalsIgnoreCase(u.getScheme())))
                return "--url must be an http:// or https:// URL with a host (e.g. http://127.0.0.1:8080), got '" + url + "'";
            // given explicitly (a default is not a choice): the server at --url runs with its own settings, so these
            // were silently ignored (--token-budget 100 passed, then the header showed that server's 512)
            CommandLine.ParseResult pr = spec == null ? null : spec.commandLine().getParseResult();
            List<String> local = pr == null ? List.of() : LOCAL_SERVER_OPTIONS.stream().filter(pr::hasMatchedOption).toList();
            if (!local.isEmpty())
                return String.join(", ", local) + (local.size() == 1 ? " configures" : " configure") + " the local server "
                        + "bench-server starts without --url, not the one at --url (that one runs with its own settings): "
                        + "leave " + (local.size() == 1 ? "it" : "them") + " out with --url";
        }
        if (!draft.equals("none") && !draft.equals("ngram")) return "--draft must be none or ngram, got '" + draft + "'";
        if (promptTokens < 1) return "--prompt-tokens must be >= 1, got " + written("--prompt-tokens", promptTokens);
        if (maxTokens < 1) return "--max-tokens must be >= 1 (the API's max_tokens), got " + written("--max-tokens", maxTokens);
        String levels = badClients();
        if (levels != null) return levels;
        if (requests < 1) return "--requests must be >= 1 (rounded up to one per client), got " + written("--requests", requests);
        if (repeats < 1) return "--repeats must be >= 1, got " + written("--repeats", repeats);
        if (longPrompt < 0) return "--long-prompt must be >= 0 (0 = off), got " + written("--long-prompt", longPrompt);
        if (maxActive < 0) return "--max-active must be >= 0 (0 = every stream at once), got " + written("--max-active", maxActive);
        // the flags that set one configuration key each: that key's range, as the server would check it after the
        // model's header (and name the key, not the flag)
        String[][] keyed = {{"--max-batch-rows", "scheduler.maxBatchRows"}, {"--token-budget", "scheduler.tokenBudget"},
                {"--max-tick-stretch", "scheduler.maxTickStretch"}, {"--min-prefill-chunk", "scheduler.minPrefillChunk"},
                {"--prefill-chunk", "limits.prefillChunk"}};
        double[] values = {maxBatchRows, tokenBudget, maxTickStretch, minPrefillChunk, prefillChunk};
        for (int i = 0; i < keyed.length; i++) {
            String bad = Main.outOfKeyRange(keyed[i][0], keyed[i][1], values[i], written(keyed[i][0], values[i]));
            if (bad != null) return bad;
        }
        return null;
    }

    /**
     * The options that configure only the server bench-server starts itself (and the engine-alone comparison beside
     * it): with --url they would have no effect.
     */
    static final List<String> LOCAL_SERVER_OPTIONS = List.of("--backend", "--draft", "--max-active", "--max-batch-rows",
            "--token-budget", "--max-tick-stretch", "--min-prefill-chunk", "--layer-slices", "--prefill-chunk", "--log-level");

    /**
     * Reads --clients as written into {@link #clients}: the message on the first level that is empty, not a whole
     * number, below 1 or given twice, each named as written (null when all are fine). Picocli's own split let a
     * trailing comma pass ("1," ran as 1) but refused an empty level elsewhere as "'' is not an int".
     */
    private String badClients() {
        String written = "--clients " + String.join(" --clients ", clientsGiven);
        List<Integer> read = new ArrayList<>();
        List<String> as = new ArrayList<>();
        for (String given : clientsGiven) {
            for (String piece : given.split(",", -1)) {
                String t = piece.strip();
                if (t.isEmpty())
                    return "--clients: an empty level in '" + given + "' (levels are whole numbers separated by commas, "
                            + "e.g. --clients 1,4,16)";
                // ASCII digits only, as written (Integer.parseInt also takes a sign and other scripts' digits)
                if (t.matches("-[0-9]+")) return "--clients: each level must be >= 1, got " + t;
                if (!t.matches("[0-9]+")) return "--clients: '" + t + "' is not a whole number in the digits 0-9 (" + written + ")";
                int c;
                try {
                    c = Integer.parseInt(t);
                } catch (NumberFormatException e) {
                    return "--clients: " + t + " is too large (at most " + Integer.MAX_VALUE + ") (" + written + ")";
                }
                if (c < 1) return "--clients: each level must be >= 1, got " + t;
                // each level's figures are kept by its number of clients: a level given twice would have its second
                // round stand for both (the aggregate relative to one stream was taken from the last level-1 round)
                int first = read.indexOf(c);
                if (first >= 0)
                    return "--clients: each level may be given once, but " + c + " is repeated"
                            + (as.get(first).equals(t) ? "" : " (as " + as.get(first) + " and " + t + ")") + " (" + written + ")";
                read.add(c);
                as.add(t);
            }
        }
        clients = read;
        return null;
    }

    /** An option's value as it was written on the command line (its last occurrence), else the given one (a default). */
    private String written(String option, Object value) {
        CommandLine.ParseResult pr = spec == null ? null : spec.commandLine().getParseResult();
        CommandLine.Model.OptionSpec o = pr == null ? null : pr.matchedOption(option);
        if (o == null || o.originalStringValues().isEmpty()) return value instanceof Double d ? ConfigKey.Range.num(d) : String.valueOf(value);
        return o.originalStringValues().getLast();
    }

    /**
     * The closing line on the server's settings. The prefill chunk shown is the one the engine uses: the configured
     * limits.prefillChunk, at most scheduler.tokenBudget ({@link Scheduler#prefillChunk}); so is the floor, at most that
     * chunk ({@link ServerConfig#minPrefillChunkInEffect(int, int, int)}).
     * @param wanted the most requests at once: the largest level's clients, plus one for the long prompt; those above
     *               limits.maxActive wait in the queue (said only where some do)
     */
    static String serverLine(int active, int wanted, int maxBatchRows, int tokenBudget, int configuredChunk, int httpInstances,
                             double maxTickStretch, int minPrefillChunk) {
        int chunk = Scheduler.prefillChunk(configuredChunk, new Scheduler.Limits(maxBatchRows, tokenBudget));
        int floor = ServerConfig.minPrefillChunkInEffect(minPrefillChunk, configuredChunk, tokenBudget);
        return String.format("server: limits.maxActive %d%s, scheduler.maxBatchRows %d, "
                        + "scheduler.tokenBudget %d, prefill chunk %d%s, %s, one engine thread, %d HTTP verticles",
                active, wanted > active ? String.format(" (%d of the %d requests at once at the largest level %s in the queue)",
                        wanted - active, wanted, wanted - active == 1 ? "waits" : "wait") : "", maxBatchRows, tokenBudget, chunk,
                chunk == configuredChunk ? "" : " (limits.prefillChunk " + configuredChunk + ", cut to the token budget)",
                maxTickStretch == 0 ? "scheduler.maxTickStretch 0 (off: prefill gets the whole budget beside decoding streams)"
                        : "scheduler.maxTickStretch " + maxTickStretch + " with scheduler.minPrefillChunk " + floor
                        + (floor == minPrefillChunk ? "" : " (" + minPrefillChunk + " configured, cut to the prefill chunk)"),
                httpInstances);
    }

    /** The single-stream comparison of the engine alone and one SSE client (backend cpu). */
    private void engineAlone(Path dir, int[] prompt, Tokenizer tok, String user) throws Exception {
        try (CpuBackend be = new CpuBackend(WeightLoader.load(dir))) {
            // warm-up (JIT) of both paths, then blocks A B A B so drift affects both alike; a collection between
            // blocks so one side's garbage is not collected during the other's runs
            for (int i = 0; i < 10; i++) {
                engineRun(be, prompt, tok);
                stream(user);
            }
            List<double[]> engine = new ArrayList<>();
            List<Sample> single = new ArrayList<>();
            for (int block = 0; block < 2; block++) {
                System.gc();
                for (int i = 0; i < repeats; i++) engine.add(engineRun(be, prompt, tok));
                System.gc();
                for (int i = 0; i < repeats; i++) single.add(stream(user));
            }
            double engDecode = median(engine.stream().mapToDouble(x -> x[0]).toArray());
            double engE2e = median(engine.stream().mapToDouble(x -> x[1]).toArray());
            double engTtft = median(engine.stream().mapToDouble(x -> x[2]).toArray());
            double sseDecode = median(single.stream().mapToDouble(Sample::decodeTps).toArray());
            double sseE2e = median(single.stream().mapToDouble(Sample::e2eTps).toArray());
            double sseTtft = median(single.stream().mapToDouble(Sample::ttftMs).toArray());
            System.out.println();
            System.out.printf("%-24s %14s %16s %12s%n", "single stream", "decode tok/s", "end-to-end tok/s", "TTFT ms");
            System.out.printf("%-24s %14s %16s %12s%n", "engine alone", num(engDecode, 1), num(engE2e, 1), num(engTtft, 1));
            System.out.printf("%-24s %14s %16s %12s%n", "through SSE (1 client)", num(sseDecode, 1), num(sseE2e, 1), num(sseTtft, 1));
            // with one generated token there is no decode to compare ("-")
            boolean decodes = engDecode > 0 && sseDecode > 0;
            System.out.printf("overhead: decode %s %% (%s ms/token), end-to-end %s %%, TTFT +%s ms (medians of %d runs each)%n",
                    decodes ? num(100 * (1 - sseDecode / engDecode), 1) : "-", decodes ? num(1000 / sseDecode - 1000 / engDecode, 2) : "-",
                    num(100 * (1 - sseE2e / engE2e), 1), num(sseTtft - engTtft, 1), 2 * repeats);
        }
    }

    /**
     * The concurrency table: per level aggregate tokens/s, TTFT and inter-token latency p50/p99, and with
     * --long-prompt the same beside a long prompt being prefilled; then each level's aggregate relative to one stream.
     */
    private void levels(String user) throws Exception {
        String rounded = roundedLine(requests, clients);
        if (rounded != null) System.out.println(rounded);
        System.out.printf("%-8s %9s %13s %13s %17s %14s %14s%n", "clients", "requests", "TTFT p50 ms", "TTFT p99 ms",
                "aggregate tok/s", "ITL p50", "ITL p99");
        Map<Integer, Double> aggregate = new LinkedHashMap<>();
        int fewest = Integer.MAX_VALUE;
        Map<Integer, Round> withLong = new LinkedHashMap<>();
        SchedulerReading schedBefore = longUser != null ? SchedulerReading.parse(metrics()) : null;
        for (int c : clients) {
            if (longUser != null) serverGaps.put(c, new ArrayList<>(List.of(serverReading())));
            Round rd = round(c, user, false);
            if (longUser != null) serverGaps.get(c).add(serverReading());
            aggregate.put(c, rd.aggregate());
            fewest = Math.min(fewest, rd.samples().size());
            printRow(String.valueOf(c), rd);
            if (longUser != null) {
                Round lr = round(c, user, true);
                serverGaps.get(c).add(serverReading());
                withLong.put(c, lr);
                printRow(c + "+long", lr);
            }
        }
        Double one = aggregate.get(1);
        if (one != null && one > 0) {
            StringBuilder sb = new StringBuilder("aggregate relative to one stream:");
            aggregate.forEach((c, a) -> sb.append(String.format(" %d: %.2fx", c, a / one)));
            System.out.println(sb);
        }
        String few = fewSamplesNote(fewest);
        if (few != null) System.out.println(few);
        if (!withLong.isEmpty()) {
            System.out.printf("%n%s%n", longTitle(longTokens, longStarted.get(), longFinished.get()));
            System.out.println(longHeader());
        }
        for (var e : withLong.entrySet()) {
            Round without = lastPlain.get(e.getKey()), with = e.getValue();
            System.out.println(longRow(e.getKey(), without.itl(50), with.itl(50), without.itl(99), with.itl(99), "between chunks"));
            System.out.println(longRow(e.getKey(), without.itlPerToken(50), with.itlPerToken(50), without.itlPerToken(99),
                    with.itlPerToken(99), String.format("per token (tokens that came in a chunk with the one before: "
                            + "%s%% without / %s%% with)", num(without.sharedPercent(), 1), num(with.sharedPercent(), 1))));
        }
        // where the tail comes from: the server's own gaps between a request's outputs (the engine's flushes, from
        // /metrics) against the gaps the clients saw, as the share above 40 and 50 ms
        for (var e : withLong.entrySet()) {
            int c = e.getKey();
            System.out.printf("%s, share of the gaps between chunks (at the server: between a request's outputs) above "
                            + "40 / 50 ms: without the long prompt clients %s, server %s; "
                            + "with it clients %s, server %s%n", clientCount(c), above(lastPlain.get(c)),
                    serverAbove(serverGaps.get(c), 0), above(e.getValue()), serverAbove(serverGaps.get(c), 1));
            System.out.printf("%s, share of the server's deliveries (the engine's send to the written chunk) above 5 / 20 ms:"
                    + " without the long prompt %s; with it %s%n", clientCount(c), deliveryAbove(serverGaps.get(c), 0), deliveryAbove(serverGaps.get(c), 1));
        }
        // the tails in more detail: where the p99 sits relative to the bulk of the gaps
        for (var e : withLong.entrySet())
            System.out.printf("%s, ITL between chunks without / with, ms: p90 %.2f / %.2f, p95 %.2f / %.2f, p99.9 %.2f / %.2f, max %.2f / %.2f%n",
                    clientCount(e.getKey()), lastPlain.get(e.getKey()).itl(90), e.getValue().itl(90), lastPlain.get(e.getKey()).itl(95),
                    e.getValue().itl(95), lastPlain.get(e.getKey()).itl(99.9), e.getValue().itl(99.9),
                    lastPlain.get(e.getKey()).itl(100), e.getValue().itl(100));
        if (!withLong.isEmpty()) System.out.println(schedulerLine(schedBefore, SchedulerReading.parse(metrics()), url != null));
    }

    /** "1 client", "4 clients": a level's lines after the table. */
    static String clientCount(int c) {
        return c + (c == 1 ? " client" : " clients");
    }

    /** The server's /metrics text now, or null when it cannot be read. */
    private String metrics() {
        try {
            HttpRequest.Builder rb = HttpRequest.newBuilder(URI.create(base + "/metrics")).GET();
            if (apiKey != null) rb.header("Authorization", "Bearer " + apiKey);
            HttpResponse<String> r = http.send(rb.build(), HttpResponse.BodyHandlers.ofString());
            return r.statusCode() == 200 ? r.body() : null;
        } catch (Exception e) {
            return null;
        }
    }

    /**
     * The scheduler's prefill decisions so far, from /metrics: steps where a prompt waited for prefill
     * (ds4j:step_prefill_limit), the sum of their prefill limits, and why the limits were set (counts per reason).
     * @param present whether /metrics had those counters (a server other than a ds4j engine has none)
     */
    record SchedulerReading(boolean present, double count, double sum, Map<String, Double> reasons) {
        static SchedulerReading parse(String metrics) {
            double count = 0, sum = 0;
            boolean present = false;
            Map<String, Double> reasons = new LinkedHashMap<>();
            for (String l : metrics == null ? new String[0] : metrics.split("\n")) {
                if (l.startsWith("ds4j:step_prefill_limit_count ")) {
                    count = Double.parseDouble(l.substring(l.indexOf(' ') + 1).trim());
                    present = true;
                } else if (l.startsWith("ds4j:step_prefill_limit_sum ")) {
                    sum = Double.parseDouble(l.substring(l.indexOf(' ') + 1).trim());
                } else if (l.startsWith("ds4j:step_prefill_limit_reason_total{")) {
                    int a = l.indexOf("reason=\"") + 8;
                    reasons.put(l.substring(a, l.indexOf('"', a)), Double.parseDouble(l.substring(l.lastIndexOf(' ') + 1)));
                }
            }
            return new SchedulerReading(present, count, sum, reasons);
        }
    }

    /**
     * The scheduler's prefill decisions during the rounds: the difference of two /metrics readings, before the first
     * round and after the last (a running server's counters start at its own start, not at this run's).
     * @param remote a server running already (--url): its other clients' requests in that time count too
     */
    static String schedulerLine(SchedulerReading before, SchedulerReading after, boolean remote) {
        if (before == null || !before.present() || !after.present())
            return "scheduler: /metrics had no ds4j:step_prefill_limit counters before and after the rounds (not a ds4j engine?)";
        double count = after.count() - before.count(), sum = after.sum() - before.sum();
        if (count < 0 || sum < 0 || after.reasons().entrySet().stream().anyMatch(e -> e.getValue() < before.reasons().getOrDefault(e.getKey(), 0.0)))
            return "scheduler: /metrics' counters went down during the rounds (the server restarted?), so its prefill decisions in them are not known";
        StringBuilder reasons = new StringBuilder();
        after.reasons().forEach((k, v) -> {
            long d = Math.round(v - before.reasons().getOrDefault(k, 0.0));
            if (d != 0) reasons.append(' ').append(k).append(' ').append(d);
        });
        return String.format("scheduler during the rounds above (/metrics before and after them%s): %d steps with a prompt "
                        + "waiting for prefill, mean prefill limit %.0f tokens; why:%s",
                remote ? ", with any other clients' requests to that server in that time" : "", Math.round(count),
                count > 0 ? sum / count : 0, reasons.length() == 0 ? " -" : reasons);
    }

    /**
     * --url: the server as its /props describes it (a ds4j engine's or cluster gateway's, or llama.cpp's fields);
     * nothing of the local model, which only sizes the prompts.
     */
    static String remoteLine(String base, JsonNode props) {
        String head = "server at " + base + " (running already; its own settings apply)";
        if (props == null) return head + ": its /props could not be read, so its model and settings are not known here";
        List<String> facts = new ArrayList<>();
        JsonNode cluster = props.path("cluster");
        if (cluster.path("role").asText("").equals("gateway"))
            facts.add("a ds4j cluster gateway, " + cluster.path("engines_ready").asInt() + " of "
                    + cluster.path("engines_known").asInt() + " engines ready");
        JsonNode model = props.path("model");
        String id = model.path("id").asText(props.path("model_alias").asText(""));
        String path = model.path("path").asText(props.path("model_path").asText(""));
        List<String> about = new ArrayList<>();
        if (!id.isEmpty() && !path.isEmpty() && !path.equals(id)) about.add(path);
        if (model.path("embedded").asBoolean(false)) about.add("the embedded random tiny model");
        if (!id.isEmpty() || !path.isEmpty())
            facts.add("model " + (id.isEmpty() ? path : id) + (about.isEmpty() ? "" : " (" + String.join("; ", about) + ")"));
        if (props.path("backend").isTextual()) facts.add("backend " + props.path("backend").asText());
        if (props.path("speculative").path("draft").isTextual()) facts.add("draft " + props.path("speculative").path("draft").asText());
        if (props.path("limits").path("maxActive").isNumber()) facts.add("limits.maxActive " + props.path("limits").path("maxActive").asInt());
        else if (props.path("total_slots").isNumber()) facts.add("total_slots " + props.path("total_slots").asInt());
        JsonNode sch = props.path("scheduler");
        if (sch.path("tokenBudget").isNumber())
            facts.add("scheduler.tokenBudget " + sch.path("tokenBudget").asInt() + ", prefill chunk " + sch.path("prefillChunk").asInt()
                    + ", scheduler.maxTickStretch " + sch.path("maxTickStretch").asDouble());
        return head + ": " + (facts.isEmpty() ? "its /props names no model or settings" : String.join(", ", facts));
    }

    private void printRow(String label, Round rd) {
        System.out.println(levelRow(label, rd));
    }

    /**
     * A note under the concurrency table where a level's TTFT p99 rests on fewer than 100 requests (it is then the
     * slowest of them, and with a handful a single slow one, such as the first prompt on a JIT-cold path, sets it and
     * the level's aggregate); null at 100 or more.
     * @param fewest the fewest requests of a level in the table
     */
    static String fewSamplesNote(int fewest) {
        if (fewest >= 100) return null;
        return String.format("(TTFT p99 of a level with %d request%s is its slowest; with few requests one slow request moves "
                + "that level's TTFT and aggregate: more --requests give steadier figures)", fewest, fewest == 1 ? "" : "s");
    }

    /** One row of the concurrency table. */
    static String levelRow(String label, Round rd) {
        return String.format("%-8s %9d %13s %13s %17s %14s %14s", label, rd.samples().size(), num(rd.ttft(50), 1),
                num(rd.ttft(99), 1), num(rd.aggregate(), 1), ms(rd.itl(50)), ms(rd.itl(99)));
    }

    private static String ms(double v) {
        return Double.isFinite(v) ? num(v, 2) + " ms" : "-";
    }

    /**
     * --url: the server at the URL as clients see it: the single-stream table ({@link #singleStreamTable}), then the
     * concurrency levels.
     */
    private int remote(String user, int maxClients) throws Exception {
        for (int i = 0; i < 10; i++) stream(user);
        List<Sample> single = new ArrayList<>();
        for (int i = 0; i < 2 * repeats; i++) single.add(stream(user));
        System.out.println();
        System.out.print(singleStreamTable(single));
        System.out.println();
        levels(user);
        return 0;
    }

    /** --url: the server's /props (null where it answers with something else, e.g. another server's 404). */
    private JsonNode serverProps;

    /**
     * --url: the server's GET /props, the first request sent to it.
     * @return its JSON, or null when the answer is not 200 with a JSON body
     * @throws IllegalStateException when the server cannot be reached ({@link #unreachable}), or refuses the key
     *                               (401 or 403: every request would be refused)
     */
    private JsonNode remoteProps() throws InterruptedException {
        HttpRequest.Builder rb = HttpRequest.newBuilder(URI.create(base + "/props")).GET().timeout(Duration.ofSeconds(30));
        if (apiKey != null) rb.header("Authorization", "Bearer " + apiKey);
        HttpResponse<String> r;
        try {
            r = http.send(rb.build(), HttpResponse.BodyHandlers.ofString());
        } catch (java.io.IOException e) {
            throw new IllegalStateException(unreachable(base, e), e);
        }
        // a key refused there is refused on every request: said now, before the local model is made or loaded
        if (r.statusCode() == 401 || r.statusCode() == 403)
            throw new IllegalStateException(httpError(base + "/props", r.statusCode(), r.body()));
        try {
            return r.statusCode() == 200 ? json.readTree(r.body()) : null;
        } catch (Exception e) {
            return null;
        }
    }

    /**
     * The message for a server that could not be reached: the URL and why. The HTTP client's own exceptions often
     * carry no message ("java.net.ConnectException"), so the reason is told by their kind where it has none.
     */
    static String unreachable(String base, Throwable e) {
        String why = null;
        for (Throwable t = e; t != null && why == null; t = t.getCause()) {
            if (t instanceof java.nio.channels.UnresolvedAddressException || t instanceof java.net.UnknownHostException)
                why = "unknown host " + URI.create(base).getHost();
            else if (t instanceof java.net.http.HttpConnectTimeoutException || t instanceof java.net.http.HttpTimeoutException)
                why = "no answer in time (" + t.getMessage() + ")";
        }
        for (Throwable t = e; t != null && why == null; t = t.getCause())
            if (t.getMessage() != null && !t.getMessage().isBlank()) why = t.getMessage();
        if (why == null)
            why = e instanceof java.net.ConnectException ? "the connection was refused (is a server listening there?)"
                    : e.getClass().getName();
        return "the server at " + base + " could not be reached: " + why;
    }

    /**
     * An answer other than 200: where, the status and the server's own error message (an OpenAI-style
     * {"error":{"message":...}} body), else the start of the body.
     */
    static String httpError(String where, int status, String body) {
        String msg = body == null ? "" : body.strip();
        try {
            JsonNode j = new ObjectMapper().readTree(msg);
            JsonNode m = j.path("error").isTextual() ? j.path("error") : j.path("error").path("message");
            if (m.isTextual()) msg = m.asText();
        } catch (Exception ignored) {
            // not JSON: the text as it is
        }
        if (msg.length() > 300) msg = msg.substring(0, 300) + " ...";
        return "HTTP " + status + " from " + where + (msg.isEmpty() ? "" : ": " + msg);
    }

    /**
     * --url: the single-stream table. Inter-token latency twice: between content chunks, and per token (a chunk of k
     * tokens after a gap g counts k gaps of g / k, {@link Sample#tokenGapsMs}), with the share of tokens that came
     * in a chunk with the one before (where the two differ).
     */
    static String singleStreamTable(List<Sample> single) {
        Round rd = new Round(single, 1);
        return String.format("%-24s %14s %16s %12s   %28s   %28s%n", "single stream", "decode tok/s", "end-to-end tok/s",
                "TTFT ms", "ITL p50 / p99 between chunks", "ITL p50 / p99 per token")
                + String.format("%-24s %14s %16s %12s   %28s   %28s%n", "1 client, " + single.size() + " runs",
                num(median(single.stream().mapToDouble(Sample::decodeTps).toArray()), 1),
                num(median(single.stream().mapToDouble(Sample::e2eTps).toArray()), 1),
                num(median(single.stream().mapToDouble(Sample::ttftMs).toArray()), 1),
                pair(rd.itl(50), rd.itl(99), 1), pair(rd.itlPerToken(50), rd.itlPerToken(99), 1))
                + "per token: a chunk of k tokens after a gap g counts k gaps of g / k; " + (Double.isNaN(rd.sharedPercent())
                ? "no run had a second chunk, so there is no gap to time (--max-tokens 1?)"
                : String.format("%.1f%% of the tokens came in a chunk with the one before", rd.sharedPercent())) + "\n";
    }

    /** The streams' prompt grows by this many words, and has at least this many. */
    static final int PROMPT_WORDS = 8;

    /** A user message of roughly --prompt-tokens tokens once encoded (whole steps of {@link #PROMPT_WORDS} words). */
    private String userText(Tokenizer tok) {
        String[] words = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches "
                + "under a pale moon and the river keeps running toward the distant sea").split(" ");
        StringBuilder s = new StringBuilder();
        for (int i = 0; ; i++) {
            s.append(words[i % words.length]).append(' ');
            if (i % PROMPT_WORDS == PROMPT_WORDS - 1 && tok.encode(s.toString()).length + 5 >= promptTokens) return s.toString().trim();
        }
    }

    /**
     * What the header says beside the streams' prompt size where the shortest prompt ({@link #PROMPT_WORDS} words) is
     * already longer than --prompt-tokens asked: that it is; else null.
     * @param tokens   the prompt's tokens as sent (chat template included)
     * @param shortest whether the prompt is the shortest one
     */
    static String promptNote(int tokens, int asked, boolean shortest) {
        return shortest && tokens > asked ? String.format("more than --prompt-tokens %d: the shortest prompt is %d words in "
                + "the chat template", asked, PROMPT_WORDS) : null;
    }

    /** One generation on the engine alone: {decode tok/s, end-to-end tok/s, prefill (TTFT) ms}. */
    private double[] engineRun(CpuBackend be, int[] prompt, Tokenizer tok) {
        SamplingParams p = new SamplingParams(0, 0, 1, 0, null, 0, 0, 1, Map.of(), maxTokens, List.of(), false, 0, true);
        boolean spec = draft.equals("ngram");
        long t0 = System.nanoTime();
        Generation g = new Generation(be, be.newSequence(16), prompt, new Sampler(p, be.config().vocabSize, prompt),
                spec ? new NgramDraft(NgramDraft.MAX_N) : null, spec ? VerifyWidth.parse("auto") : null,
                new Generation.Options(512, 1 << 20, new int[]{tok.eosId()}, 16), (t, lp) -> true);
        while (g.step()) {
            // run to the end
        }
        double secs = (System.nanoTime() - t0) / 1e9;
        return new double[]{g.decodeTokensPerSecond(), g.generatedTokens() / secs, g.prefillSeconds() * 1000};
    }

    /**
     * One request as the client sees it.
     * @param ttftMs      request sent to the first output chunk (content, or a reasoning model's reasoning_content);
     *                    NaN where none came
     * @param decodeTps   tokens after the first over the time to the last; NaN where there is none to time
     * @param tokens      the last usage's completion_tokens; one a chunk from a server that sends no usage
     * @param gapsMs      gaps between successive output chunks (ms)
     * @param tokenGapsMs per token after the first chunk: a chunk of k tokens after a gap g gives k gaps of g / k (ms)
     * @param shared      tokens after the first chunk that came in a chunk with the token before them (k − 1 a chunk)
     */
    record Sample(double ttftMs, double decodeTps, double e2eTps, long tokens, double[] gapsMs, double[] tokenGapsMs, int shared) {}

    /** The streamed requests of one concurrency level and the seconds they took together. */
    record Round(List<Sample> samples, double seconds) {
        /** Generated tokens per second over all streams. */
        double aggregate() {
            return samples.stream().mapToLong(Sample::tokens).sum() / seconds;
        }

        double ttft(double p) {
            // a stream without output has no TTFT (NaN), left out
            return pct(samples.stream().mapToDouble(Sample::ttftMs).filter(x -> !Double.isNaN(x)).sorted().toArray(), p);
        }

        /** Percentile of the gaps between successive content chunks, pooled over the streams. */
        double itl(double p) {
            return pct(samples.stream().flatMapToDouble(x -> Arrays.stream(x.gapsMs())).sorted().toArray(), p);
        }

        /** Percentile of the per-token gaps ({@link Sample#tokenGapsMs}), pooled over the streams. */
        double itlPerToken(double p) {
            return pct(samples.stream().flatMapToDouble(x -> Arrays.stream(x.tokenGapsMs())).sorted().toArray(), p);
        }

        /** Share of the tokens after the first chunks that came in a chunk with the one before them (%). */
        double sharedPercent() {
            long n = samples.stream().mapToLong(x -> x.tokenGapsMs().length).sum();
            return n == 0 ? Double.NaN : 100.0 * samples.stream().mapToLong(Sample::shared).sum() / n;
        }
    }

    /**
     * Per level, the server's histograms ({@link ServerReading}) read before its plain round, after it and after its
     * round beside the long prompt.
     */
    private final Map<Integer, List<ServerReading>> serverGaps = new LinkedHashMap<>();

    /**
     * Cumulative bucket counts (upper bound in seconds → count) of two server histograms at one moment.
     * @param itl      vllm:inter_token_latency_seconds: the gaps between a request's outputs at the engine
     * @param delivery ds4j:stream_delivery_seconds: the engine's send of an output to its chunk's completed write
     */
    private record ServerReading(Map<Double, Double> itl, Map<Double, Double> delivery) {}

    /** The server's ITL and delivery histograms now (empty maps when /metrics cannot be read). */
    private ServerReading serverReading() {
        ServerReading r = new ServerReading(new LinkedHashMap<>(), new LinkedHashMap<>());
        String text = metrics();
        if (text == null) return r;
        try {
            for (String l : text.split("\n")) {
                Map<Double, Double> m = l.startsWith("vllm:inter_token_latency_seconds_bucket{") ? r.itl()
                        : l.startsWith("ds4j:stream_delivery_seconds_bucket{") ? r.delivery() : null;
                if (m == null) continue;
                int a = l.indexOf("le=\"") + 4;
                String le = l.substring(a, l.indexOf('"', a));
                m.put(le.equals("+Inf") ? Double.POSITIVE_INFINITY : Double.parseDouble(le),
                        Double.parseDouble(l.substring(l.lastIndexOf(' ') + 1)));
            }
        } catch (Exception e) {
            r.itl().clear();
            r.delivery().clear();
        }
        return r;
    }

    /**
     * Share of the server's gaps in a level's round above 40 and 50 ms ("?" where the buckets are missing).
     * @param readings the level's readings ({@link #serverGaps})
     * @param round    0: the plain round, 1: the round beside the long prompt
     */
    private static String serverAbove(List<ServerReading> readings, int round) {
        return sharesAbove(readings, round, ServerReading::itl, 0.04, 0.05);
    }

    /** Share of the server's deliveries in a level's round above 5 and 20 ms ({@link #serverAbove}'s arguments). */
    private static String deliveryAbove(List<ServerReading> readings, int round) {
        return sharesAbove(readings, round, ServerReading::delivery, 0.005, 0.02);
    }

    /** Share of one histogram's observations in a round above two of its bucket bounds (seconds; "?" if missing). */
    private static String sharesAbove(List<ServerReading> readings, int round,
                                      java.util.function.Function<ServerReading, Map<Double, Double>> which, double lo, double hi) {
        if (readings == null || readings.size() <= round + 1) return "?";
        Map<Double, Double> before = which.apply(readings.get(round)), after = which.apply(readings.get(round + 1));
        double all = after.getOrDefault(Double.POSITIVE_INFINITY, Double.NaN) - before.getOrDefault(Double.POSITIVE_INFINITY, Double.NaN);
        double leLo = after.getOrDefault(lo, Double.NaN) - before.getOrDefault(lo, Double.NaN);
        double leHi = after.getOrDefault(hi, Double.NaN) - before.getOrDefault(hi, Double.NaN);
        // counters that went down: the server restarted between the readings
        if (!(all > 0) || !(leLo >= 0) || !(leHi >= 0)) return "?";
        return String.format("%.1f%% / %.1f%%", 100 * (all - leLo) / all, 100 * (all - leHi) / all);
    }

    /** Share of a round's client-side gaps above 40 and 50 ms. */
    private static String above(Round rd) {
        double[] g = rd.samples().stream().flatMapToDouble(x -> Arrays.stream(x.gapsMs())).toArray();
        long a40 = Arrays.stream(g).filter(x -> x > 40).count(), a50 = Arrays.stream(g).filter(x -> x > 50).count();
        return g.length == 0 ? "?" : String.format("%.1f%% / %.1f%%", 100.0 * a40 / g.length, 100.0 * a50 / g.length);
    }

    /** The last plain round per level (the "without" side of the long-prompt comparison). */
    private final Map<Integer, Round> lastPlain = new LinkedHashMap<>();
    private String longUser;
    /** The long prompt's tokens as sent: its text of about --long-prompt tokens in the chat template. */
    private int longTokens;
    private final java.util.concurrent.atomic.AtomicInteger longStarted = new java.util.concurrent.atomic.AtomicInteger(),
            longFinished = new java.util.concurrent.atomic.AtomicInteger();

    /**
     * {@code requests} streamed requests (rounded up to a multiple of c) from c concurrent clients; with withLong, a
     * long-prompt request (max_tokens 1) is kept in flight beside them the whole time and abandoned at the end.
     */
    private Round round(int c, String user, boolean withLong) throws Exception {
        int perClient = perClient(requests, c);
        List<Sample> samples = Collections.synchronizedList(new ArrayList<>());
        java.util.concurrent.atomic.AtomicBoolean over = new java.util.concurrent.atomic.AtomicBoolean();
        java.util.concurrent.atomic.AtomicReference<java.util.concurrent.CompletableFuture<?>> inFlight = new java.util.concurrent.atomic.AtomicReference<>();
        // the long prompt refused (e.g. longer than the server's context): nothing was prefilled beside the streams
        java.util.concurrent.atomic.AtomicReference<String> longRefused = new java.util.concurrent.atomic.AtomicReference<>();
        Thread longClient = null;
        if (withLong) {
            longClient = Thread.ofVirtual().start(() -> {
                while (!over.get()) {
                    HttpRequest req = chatRequest(longUser, 1, false);
                    var f = http.sendAsync(req, HttpResponse.BodyHandlers.ofString());
                    inFlight.set(f);
                    longStarted.incrementAndGet();
                    try {
                        HttpResponse<String> resp = f.get();
                        if (resp.statusCode() != 200) {
                            longRefused.set(httpError(req.uri().toString(), resp.statusCode(), resp.body()));
                            return;
                        }
                        if (!over.get()) longFinished.incrementAndGet();
                    } catch (Exception e) {
                        return; // abandoned at the end of the round
                    }
                }
            });
            Thread.sleep(50); // let the long prompt be admitted first, so the streams run beside its prefill
        }
        long t0 = System.nanoTime();
        try (ExecutorService ex = Executors.newVirtualThreadPerTaskExecutor()) {
            List<Future<?>> fs = new ArrayList<>();
            // each client its own HttpClient (its own connection and selector thread), as separate users have: one
            // shared client reads every stream on one thread, which can hold a token back behind the others
            for (int k = 0; k < c; k++) fs.add(ex.submit(() -> {
                try (HttpClient own = newClient()) {
                    for (int r = 0; r < perClient; r++) samples.add(stream(own, user));
                }
                return null;
            }));
            for (Future<?> f : fs) f.get();
        }
        Round rd = new Round(samples, (System.nanoTime() - t0) / 1e9);
        if (longClient != null) {
            over.set(true);
            var f = inFlight.get();
            if (f != null) f.cancel(true); // the client goes away: the server cancels the prefill at its next step
            longClient.join();
            if (longRefused.get() != null)
                throw new IllegalStateException("the long prompt (--long-prompt, " + longTokens + " tokens) was refused: " + longRefused.get());
        } else {
            lastPlain.put(c, rd);
        }
        return rd;
    }

    /**
     * The line that says --requests was rounded up to the same number for every client at some level (null where every
     * level runs it as given): "--requests 1 is rounded up to 2 at 2 clients (every client runs the same number of requests, at least one)".
     */
    static String roundedLine(int requests, List<Integer> levels) {
        List<String> at = new ArrayList<>();
        for (int c : levels) {
            long n = (long) perClient(requests, c) * c;
            if (n != requests) at.add(n + " at " + c + " client" + (c == 1 ? "" : "s"));
        }
        return at.isEmpty() ? null : "--requests " + requests + " is rounded up to " + String.join(", ", at)
                + " (every client runs the same number of requests, at least one)";
    }

    /** Requests per client: --requests rounded up to a multiple of the clients, at least one each. */
    static int perClient(int requests, int c) {
        return (int) Math.max(1, ((long) requests + c - 1) / c);
    }

    /** A user message of about n tokens once encoded (numbered words, so n-gram lookup finds little to draft). */
    private static String textOfTokens(Tokenizer tok, int n) {
        String[] words = ("alpha river stone cloud maple orbit lantern copper meadow signal harbor velvet canyon ember "
                + "quartz willow").split(" ");
        StringBuilder s = new StringBuilder();
        int i = 0;
        while (true) {
            int before = s.length();
            for (int k = 0; k < 256; k++, i++) s.append(words[i % words.length]).append(' ').append(i).append(' ');
            int have = tok.encode(s.toString()).length;
            if (have >= n) {
                // trim back to about n tokens: cut the last block proportionally
                int over = have - n;
                int cut = (int) ((long) (s.length() - before) * over / Math.max(1, have - tok.encode(s.substring(0, before)).length));
                s.setLength(Math.max(before, s.length() - cut));
                return s.toString().trim();
            }
        }
    }

    /**
     * The response_format of --json-schema: the file's schema, strict.
     * @throws CommandLine.ParameterException when the file cannot be read or holds no JSON object
     */
    private ObjectNode responseFormat(Path file) {
        JsonNode schema;
        try {
            // what the server would refuse with a 400, said before a model is made or loaded
            schema = SchemaFiles.jsonSchema(file).json();
        } catch (IllegalArgumentException e) {
            throw new CommandLine.ParameterException(spec.commandLine(), e.getMessage());
        }
        ObjectNode rf = json.createObjectNode().put("type", "json_schema");
        rf.putObject("json_schema").put("name", "bench").put("strict", true).set("schema", schema);
        return rf;
    }

    /**
     * The grammar of --grammar: the file's text, compiled once here so that one the server would refuse is said before a
     * model is made or loaded.
     * @throws CommandLine.ParameterException when the file cannot be read or holds a grammar the engine cannot enforce
     */
    private String grammarText(Path file) {
        try {
            return SchemaFiles.grammar(file).text();
        } catch (IllegalArgumentException e) {
            throw new CommandLine.ParameterException(spec.commandLine(), e.getMessage());
        }
    }

    private HttpRequest chatRequest(String content, int maxTok, boolean streamIt) {
        ObjectNode b = json.createObjectNode();
        b.putArray("messages").addObject().put("role", "user").put("content", content);
        b.put("stream", streamIt).put("max_tokens", maxTok).put("temperature", 0).put("ignore_eos", true);
        if (responseFormat != null) b.set("response_format", responseFormat);
        if (grammarText != null) b.putObject("structured_outputs").put("grammar", grammarText);
        // the running usage on every chunk: how many tokens each one stands for (ITL per token)
        if (streamIt) b.putObject("stream_options").put("include_usage", true).put("continuous_usage_stats", true);
        // the long prompt is prefilled in full every time: a prefix-cache hit would skip the work it stands for
        else b.put("cache_prompt", false);
        HttpRequest.Builder rb = HttpRequest.newBuilder(URI.create(base + "/v1/chat/completions"))
                .header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString(b.toString()));
        if (apiKey != null) rb.header("Authorization", "Bearer " + apiKey);
        return rb.build();
    }

    private Sample stream(String user) throws Exception {
        return stream(http, user);
    }

    private static HttpClient newClient() {
        return HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).connectTimeout(Duration.ofSeconds(10)).build();
    }

    /**
     * One streamed request on the given client, as that client sees it. Each chunk's running usage
     * (stream_options.continuous_usage_stats) says how many tokens it stands for: a chunk of k tokens after a gap g
     * gives k per-token gaps of g / k (a token whose text waited for the next one, such as half of a character, arrives
     * with it; a server without that usage counts one token a chunk). Events are timed by the network read that
     * brought them ({@link SseEvents#timedLines}): events that arrive in one read are one chunk.
     */
    private Sample stream(HttpClient client, String user) throws Exception {
        HttpRequest req = chatRequest(user, maxTokens, true);
        long t0 = System.nanoTime();
        HttpResponse<Stream<SseEvents.TimedLine>> r = client.send(req, SseEvents.timedLines(System::nanoTime));
        if (r.statusCode() != 200) {
            String body;
            try (Stream<SseEvents.TimedLine> lines = r.body()) {
                body = String.join("\n", lines.limit(50).map(SseEvents.TimedLine::text).toList());
            }
            throw new IllegalStateException(httpError(req.uri().toString(), r.statusCode(), body));
        }
        return sample(SseEvents.ofTimed(r.body(), json), t0, System::nanoTime);
    }

    /**
     * A stream's events as its client sees them ({@link #stream}), each timed by the read that brought it. Content
     * events that arrived in one read (the same time) are one chunk: its tokens add up, and the gap before it counts
     * once; timed one by one they gave gaps of microseconds between events sent in one step (several tokens of a
     * speculative step) or coalesced on the way, which are no inter-token latency a reader sees.
     * @param t0  the clock when the request was sent
     * @param end the clock, read once the events are read to their end (the stream is read lazily, while they are
     *            iterated: read before, it gave the time the headers came, and an end-to-end rate above the decode's)
     */
    static Sample sample(Iterable<SseEvents.Arrival> events, long t0, java.util.function.LongSupplier end) {
        List<Double> gaps = new ArrayList<>(), tokenGaps = new ArrayList<>();
        long first = 0, last = 0;
        int tokens = 0, shared = 0, seen = 0; // seen: completion tokens up to the last content chunk
        long chunkAt = 0; // the arrival of the chunk being gathered (0: none yet), its gap and tokens
        double chunkGap = Double.NaN;
        int chunkTokens = 0;
        for (SseEvents.Arrival a : events) {
            JsonNode j = a.event();
            // the last usage seen: the closing chunk's, or that of a server that puts it beside the finish reason
            if (j.hasNonNull("usage")) tokens = j.get("usage").path("completion_tokens").asInt(tokens);
            JsonNode c = j.path("choices").path(0);
            if (c.isMissingNode()) continue; // the closing usage chunk
            long now = a.nanos();
            // a reasoning model's tokens come as reasoning_content (or reasoning) before the content: output too
            JsonNode d = c.path("delta");
            if (!d.path("content").asText("").isEmpty() || !d.path("reasoning_content").asText("").isEmpty()
                    || !d.path("reasoning").asText("").isEmpty()) {
                int upTo = j.path("usage").path("completion_tokens").asInt(seen + 1);
                int k = Math.max(1, upTo - seen);
                seen = upTo;
                if (first == 0) first = now;
                if (chunkAt != 0 && now == chunkAt) {
                    chunkTokens += k; // the same read: part of the chunk being gathered
                } else {
                    shared += addChunk(gaps, tokenGaps, chunkGap, chunkTokens);
                    chunkGap = chunkAt == 0 ? Double.NaN : (now - last) / 1e6;
                    chunkAt = now;
                    chunkTokens = k;
                }
                last = now;
            }
            if (!c.path("finish_reason").isNull() && !c.path("finish_reason").isMissingNode()) last = now;
        }
        shared += addChunk(gaps, tokenGaps, chunkGap, chunkTokens);
        long ended = end.getAsLong();
        tokens = Math.max(tokens, seen); // a server that sends no usage: one token a chunk
        // NaN where there is no decode to time (one token, or all in one chunk), as the engine alone's figure
        double decode = last > first && tokens > 1 ? (tokens - 1) / ((last - first) / 1e9) : Double.NaN;
        return new Sample(first == 0 ? Double.NaN : (first - t0) / 1e6, decode, tokens / ((ended - t0) / 1e9), tokens,
                gaps.stream().mapToDouble(Double::doubleValue).toArray(), tokenGaps.stream().mapToDouble(Double::doubleValue).toArray(), shared);
    }

    /** Adds a chunk of k tokens after gap g (NaN: the first chunk, no gap): one gap, k per-token gaps; the tokens shared. */
    private static int addChunk(List<Double> gaps, List<Double> tokenGaps, double g, int k) {
        if (Double.isNaN(g) || k == 0) return 0;
        gaps.add(g);
        for (int i = 0; i < k; i++) tokenGaps.add(g / k);
        return k - 1;
    }


    /** Nearest-rank percentile of sorted values. */
    private static double pct(double[] sorted, double p) {
        if (sorted.length == 0) return Double.NaN;
        int i = (int) Math.ceil(p / 100 * sorted.length) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, i))];
    }

    /** The CPU's model name (Linux), else the architecture: the machine line of the bench commands. */
    static String cpuName() {
        try {
            for (String l : Files.readAllLines(Path.of("/proc/cpuinfo")))
                if (l.startsWith("model name")) return l.substring(l.indexOf(':') + 1).trim();
        } catch (Exception ignored) {
            // not Linux
        }
        return System.getProperty("os.arch");
    }
}
