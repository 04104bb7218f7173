package io.ds4j.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.ds4j.bench.SseEvents;
import io.ds4j.model.synth.ModelStore;
import io.ds4j.model.synth.RandomCheckpoint;
import io.ds4j.app.Backends;
import io.ds4j.app.DefaultModelProvider;
import io.ds4j.server.Ds4jServer;
import io.ds4j.server.config.ServerConfig;
import io.ds4j.text.Tokenizer;
import io.ds4j.text.Tokenizers;
import picocli.CommandLine;
import picocli.CommandLine.ArgGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.stream.Stream;

/**
 * {@code ds4j bench-prefix}: the prefix cache through the server, cold against cached, with the figures a client
 * sees (TTFT: request sent → first streamed delta; wall time: request sent → end of stream) and the server's
 * {@code cached_tokens}. Two workloads:
 * <ul>
 *   <li><b>agent</b>: a tool conversation of six requests that grow turn by turn (a system prompt and a ten-tool
 *       schema, then per turn an assistant tool call and its result); the first request is cold, the next five can
 *       resume the previous prompt;</li>
 *   <li><b>doc</b>: a document of {@code --doc-tokens} tokens followed by five different questions, each its own
 *       request (system + document + question); the first is cold, the others can resume the document;</li>
 *   <li><b>choices</b>: one request with {@code n = --choices} on a document of {@code --doc-tokens} tokens: cold, every
 *       choice prefills the prompt; with the cache, the first choice prefills it and the others resume its snapshot
 *       (the prompt tokens the server prefilled, from {@code vllm:prompt_tokens_total}, are printed for both).</li>
 * </ul>
 * Each request runs twice on one server, first with {@code cache_prompt: false} (cold, leaving no snapshot), then
 * with the cache (the first request of a workload fills it); the pairs run in order. Greedy, {@code ignore_eos}, {@code --max-tokens} tokens per request.
 * A benchmark, not a test: it prints figures and asserts nothing.
 */
@Command(name = "bench-prefix", mixinStandardHelpOptions = true, sortOptions = false,
        description = "Prefix cache: TTFT and wall time cold vs cached for an agent conversation, a document with questions, and n choices of one prompt.")
public final class BenchPrefixCommand implements Callable<Integer> {
    @ArgGroup(exclusive = true, multiplicity = "0..1") BenchServerCommand.Source source = new BenchServerCommand.Source();
    @Spec CommandLine.Model.CommandSpec spec;
    @Option(names = "--layers", description = "preset variant: layers (default: the preset's)") Integer layers;
    @Option(names = "--experts", description = "preset variant: routed experts (default: the preset's)") Integer experts;
    @Option(names = "--dtype", defaultValue = "bf16", description = "preset variant storage: bf16 or fp8 (default ${DEFAULT-VALUE})") String dtype;
    @Option(names = "--backend", defaultValue = "cpu", description = "model.backend: cpu or hip (default ${DEFAULT-VALUE})") String backend;
    @Option(names = "--workloads", defaultValue = "agent,doc,choices", split = ",", description = "agent, doc, choices (default ${DEFAULT-VALUE})") List<String> workloads;
    @Option(names = "--doc-tokens", defaultValue = "4096", description = "document length in tokens (default ${DEFAULT-VALUE})") int docTokens;
    @Option(names = "--tool-result-tokens", defaultValue = "300", description = "tokens of each tool result in the agent conversation (default ${DEFAULT-VALUE})") int toolTokens;
    @Option(names = "--choices", defaultValue = "4", description = "n of the choices workload, 2 to 16 (default ${DEFAULT-VALUE})") int choices;
    @Option(names = "--max-tokens", defaultValue = "16", description = "tokens generated per request (default ${DEFAULT-VALUE})") int maxTokens;
    @Option(names = "--prefill-chunk", defaultValue = "512", description = "limits.prefillChunk (default ${DEFAULT-VALUE})") int prefillChunk;
    @Option(names = "--budget-mib", defaultValue = "2048", description = "prefixCache.budgetMiB (default ${DEFAULT-VALUE})") int budgetMiB;

    private final ObjectMapper json = new ObjectMapper();
    private HttpClient http;
    private int port;
    private Tokenizer tok;

    private static final String[] WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge "
            + "boxing matches under a pale moon and the river keeps running toward the distant sea past old mills and "
            + "silent harbours where ships wait for the morning tide").split(" ");

    @Override
    public Integer call() throws Exception {
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        for (String w : workloads)
            if (!w.equals("agent") && !w.equals("doc") && !w.equals("choices"))
                throw new IllegalArgumentException("--workloads: unknown workload '" + w + "' (agent, doc or choices)");
        String bad = badLengths();
        String besideModel = Main.variantOptionsBesideModel(spec == null ? null : spec.commandLine().getParseResult());
        if (besideModel != null) bad = bad == null ? besideModel : besideModel + "; " + bad;
        if (bad != null) throw new IllegalArgumentException(bad);
        Backends.checkAvailable(backend);  // the server's backend, before a model is made for it
        String preset = source.preset != null ? source.preset : DefaultModelProvider.EMBEDDED_PRESET;
        Path dir = source.model != null ? Main.modelFolder("--model", source.model)
                : layers == null && experts == null && dtype.equals("bf16") ? ModelStore.ensure(preset, 1, System.err::println)
                : ModelStore.ensureVariant(preset, layers, experts, RandomCheckpoint.Storage.parse(dtype), 1, System.err::println);
        tok = Tokenizers.forModel(dir);
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("server.host", "127.0.0.1");
        o.put("server.port", 0);
        o.put("model.path", dir.toAbsolutePath().toString());
        o.put("model.backend", backend);
        o.put("speculative.draft", "none");
        o.put("limits.prefillChunk", prefillChunk);
        o.put("limits.maxContextTokens", Math.max(32768, docTokens + 4096));
        o.put("prefixCache.budgetMiB", budgetMiB);
        o.put("log.level", "warn");
        ServerConfig cfg = ServerConfig.parse(null, "bench", o);
        System.out.printf("bench-prefix: model %s, backend %s, %d generated tokens per request (greedy, ignore_eos), "
                        + "prefill chunk %d, prefixCache.blockTokens %d, intervalTokens %d, budget %d MiB%n",
                dir, backend, maxTokens, prefillChunk, cfg.prefixCacheBlockTokens(), cfg.prefixCacheIntervalTokens(), budgetMiB);
        System.out.printf("machine: %s, %d cores, JDK %s%n", BenchServerCommand.cpuName(), Runtime.getRuntime().availableProcessors(),
                System.getProperty("java.version"));
        Ds4jServer server = Ds4jServer.start(new Ds4jServer.Options(cfg, null, o, new DefaultModelProvider())).await();
        try {
            server.ready().await();
            port = server.port();
            http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).connectTimeout(Duration.ofSeconds(10)).build();
            // warm-up (JIT, first allocations) on a short unrelated prompt, uncached
            for (int i = 0; i < 3; i++) send(messages(List.of(msg("user", words(64, 99 + i)))), null, false, 1);
            if (workloads.contains("agent")) agent();
            if (workloads.contains("doc")) doc();
            if (workloads.contains("choices")) choices();
        } finally {
            server.close().await();
        }
        return 0;
    }

    /**
     * --choices, the lengths and the keys the flags set, checked before the model is made or a server started (as
     * bench-server checks its own): every problem in one line, or null. A negative length failed inside the workload that used it,
     * once the others had run, with Java's bare "-5"; --max-tokens 0 started a server to print its 400; the keys were
     * named without their flag, after the model was made.
     */
    private String badLengths() {
        List<String> bad = new ArrayList<>();
        if (choices < 2 || choices > 16) bad.add("--choices: must be in [2, 16] (the API's n), got " + choices);
        if (docTokens < 1) bad.add("--doc-tokens must be >= 1, got " + docTokens);
        if (toolTokens < 0) bad.add("--tool-result-tokens must be >= 0, got " + toolTokens);
        if (maxTokens < 1) bad.add("--max-tokens must be >= 1 (the API's max_tokens), got " + maxTokens);
        String[][] keyed = {{"--prefill-chunk", "limits.prefillChunk"}, {"--budget-mib", "prefixCache.budgetMiB"}};
        int[] values = {prefillChunk, budgetMiB};
        for (int i = 0; i < keyed.length; i++) {
            String out = Main.outOfKeyRange(keyed[i][0], keyed[i][1], values[i], String.valueOf(values[i]));
            if (out != null) bad.add(out);
        }
        return bad.isEmpty() ? null : String.join("; ", bad);
    }

    // ------------------------------------------------------------------------------------------------ workloads

    private void agent() throws Exception {
        ArrayNode tools = tools();
        List<ObjectNode> history = new ArrayList<>();
        history.add(msg("system", "You are a coding agent. Use the tools to inspect and change the repository. " + words(120, 1)));
        history.add(msg("user", "Find why the build fails on the release branch and fix it. " + words(60, 2)));
        List<ArrayNode> requests = new ArrayList<>();
        for (int turn = 0; turn < 6; turn++) {
            requests.add(messages(history));
            String id = "call_" + turn;
            ObjectNode call = msg("assistant", "");
            ObjectNode tc = call.putArray("tool_calls").addObject();
            tc.put("id", id).put("type", "function");
            tc.putObject("function").put("name", tools.get(turn % tools.size()).at("/function/name").asText())
                    .put("arguments", "{\"path\":\"src/module" + turn + "/Main.java\",\"line\":" + (10 * turn + 3) + "}");
            history.add(call);
            ObjectNode result = msg("tool", words(toolTokens, 100 + turn));
            result.put("tool_call_id", id);
            history.add(result);
        }
        System.out.printf("%nagent: six growing requests with a ten-tool schema (tool results of ~%d tokens)%n", toolTokens);
        run(requests, tools);
    }

    private void doc() throws Exception {
        String document = words(docTokens, 7);
        String[] questions = {"Summarise the document in three sentences.", "Which ships are mentioned, and where?",
                "List every animal that appears.", "What happens at the river?", "Give the document a title."};
        List<ArrayNode> requests = new ArrayList<>();
        for (String q : questions)
            requests.add(messages(List.of(msg("system", "Answer questions about the document."),
                    msg("user", "Document:\n" + document + "\n\nQuestion: " + q))));
        System.out.printf("%ndoc: a document of %d tokens, then five questions (one request each)%n", tok.encode(document).length);
        run(requests, null);
    }

    /**
     * One request of n choices on a document, cold (cache_prompt false: each choice prefills the prompt) then with the
     * cache (the first choice prefills it, the others resume its snapshot); TTFT is the first choice's first text.
     */
    private void choices() throws Exception {
        String document = words(docTokens, 11);
        ArrayNode m = messages(List.of(msg("system", "Answer questions about the document."),
                msg("user", "Document:\n" + document + "\n\nQuestion: Give the document a title.")));
        System.out.printf("%nchoices: one request with n = %d on a document of %d tokens%n", choices, tok.encode(document).length);
        double p0 = promptTokensTotal();
        Sample cold = send(m, null, false, choices);
        double p1 = promptTokensTotal();
        Sample hot = send(m, null, true, choices);
        double p2 = promptTokensTotal();
        System.out.printf("%-8s %8s %10s %10s %16s%n", "", "prompt", "TTFT ms", "wall ms", "prefilled tokens");
        System.out.printf("%-8s %8d %10.1f %10.1f %16.0f%n", "cold", cold.prompt, cold.ttftMs, cold.wallMs, p1 - p0);
        System.out.printf("%-8s %8d %10.1f %10.1f %16.0f%n", "shared", hot.prompt, hot.ttftMs, hot.wallMs, p2 - p1);
        System.out.printf("n = %d: wall %.1f -> %.1f ms (%.2fx), prefilled tokens %.0f -> %.0f%n", choices, cold.wallMs, hot.wallMs,
                cold.wallMs / hot.wallMs, p1 - p0, p2 - p1);
    }

    /** The server's {@code vllm:prompt_tokens_total}: prompt tokens prefilled so far. */
    private double promptTokensTotal() throws Exception {
        HttpRequest req = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/metrics")).GET().build();
        for (String l : http.send(req, HttpResponse.BodyHandlers.ofString()).body().split("\n"))
            // with or without labels (vLLM's and this server's carry model_name)
            if (l.startsWith("vllm:prompt_tokens_total ") || l.startsWith("vllm:prompt_tokens_total{"))
                return Double.parseDouble(l.substring(l.lastIndexOf(' ') + 1));
        throw new IllegalStateException("/metrics has no vllm:prompt_tokens_total");
    }

    /** Runs the requests cold (cache_prompt false), then cached, and prints one line per request and a summary. */
    private void run(List<ArrayNode> requests, ArrayNode tools) throws Exception {
        List<Sample> cold = new ArrayList<>(), hot = new ArrayList<>();
        // interleaved (cold i, cached i) so that drifting machine load affects both alike; a cold request leaves no
        // snapshot, so the cached requests see only each other
        for (ArrayNode m : requests) {
            cold.add(send(m, tools, false, 1));
            hot.add(send(m, tools, true, 1));
        }
        System.out.printf("%-4s %8s %8s | %12s %12s | %13s %13s %8s | %s%n", "req", "prompt", "cached", "cold TTFT ms", "cold wall ms",
                "cache TTFT ms", "cache wall ms", "TTFT %", "server TTFT ms cold/cache");
        double coldTtft = 0, coldWall = 0, hotTtft = 0, hotWall = 0;
        for (int i = 0; i < requests.size(); i++) {
            Sample c = cold.get(i), h = hot.get(i);
            System.out.printf("%-4d %8d %8d | %12.1f %12.1f | %13.1f %13.1f %7.1f%% | %.1f / %.1f%n", i + 1, h.prompt, h.cached,
                    c.ttftMs, c.wallMs, h.ttftMs, h.wallMs, 100 * h.ttftMs / c.ttftMs, c.serverTtftMs, h.serverTtftMs);
            if (i > 0) {
                coldTtft += c.ttftMs;
                coldWall += c.wallMs;
                hotTtft += h.ttftMs;
                hotWall += h.wallMs;
            }
        }
        double coldAll = cold.stream().mapToDouble(s -> s.wallMs).sum(), hotAll = hot.stream().mapToDouble(s -> s.wallMs).sum();
        System.out.printf("requests 2-%d: TTFT %.1f -> %.1f ms in total (%.1f %%), wall %.1f -> %.1f ms (%.1f %%); "
                        + "all %d requests' client wall time %.1f -> %.1f ms (%.2fx)%n",
                requests.size(), coldTtft, hotTtft, 100 * hotTtft / coldTtft, coldWall, hotWall, 100 * hotWall / coldWall,
                requests.size(), coldAll, hotAll, coldAll / hotAll);
        long hits = hot.stream().skip(1).filter(s -> s.cached > 0).count();
        System.out.printf("hits: %d of %d follow-up requests; cached tokens of the follow-ups %d of %d prompt tokens%n", hits,
                requests.size() - 1, hot.stream().skip(1).mapToInt(s -> s.cached).sum(),
                hot.stream().skip(1).mapToInt(s -> s.prompt).sum());
    }

    // ------------------------------------------------------------------------------------------------ requests

    /**
     * One request as the client saw it.
     * @param ttftMs       request sent → first streamed text or tool call (client clock)
     * @param wallMs       request sent → end of the stream
     * @param serverTtftMs the server's own TTFT from the usage chunk (arrival → first token)
     */
    record Sample(double ttftMs, double wallMs, int prompt, int cached, double serverTtftMs) {}

    private Sample send(ArrayNode messages, ArrayNode tools, boolean cache, int n) throws Exception {
        ObjectNode b = json.createObjectNode();
        b.set("messages", messages);
        if (n > 1) b.put("n", n);
        if (tools != null) b.set("tools", tools);
        b.put("stream", true).put("max_tokens", maxTokens).put("temperature", 0).put("ignore_eos", true).put("cache_prompt", cache);
        b.putObject("stream_options").put("include_usage", true);
        HttpRequest req = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/v1/chat/completions"))
                .header("Content-Type", "application/json").timeout(Duration.ofMinutes(30))
                .POST(HttpRequest.BodyPublishers.ofString(b.toString())).build();
        long t0 = System.nanoTime();
        HttpResponse<Stream<String>> r = http.send(req, HttpResponse.BodyHandlers.ofLines());
        if (r.statusCode() != 200)
            throw new IllegalStateException("HTTP " + r.statusCode() + ": " + String.join("\n", r.body().toList()));
        long first = 0;
        int prompt = 0, cached = 0;
        double serverTtft = Double.NaN;
        for (JsonNode j : SseEvents.of(r.body(), json)) {
            if (j.has("usage") && !j.get("usage").isNull()) {
                prompt = j.get("usage").get("prompt_tokens").asInt();
                cached = j.get("usage").at("/prompt_tokens_details/cached_tokens").asInt();
                serverTtft = j.get("usage").at("/timings/ttft_ms").asDouble();
                continue;
            }
            JsonNode d = j.path("choices").path(0).path("delta");
            // the first chunk only announces the role: the first token shows as non-empty text or a tool call
            if (first == 0 && (!d.path("content").asText("").isEmpty() || !d.path("reasoning_content").asText("").isEmpty()
                    || d.has("tool_calls"))) first = System.nanoTime();
        }
        long end = System.nanoTime();
        return new Sample(((first != 0 ? first : end) - t0) / 1e6, (end - t0) / 1e6, prompt, cached, serverTtft);
    }

    private ArrayNode messages(List<ObjectNode> ms) {
        ArrayNode a = json.createArrayNode();
        for (ObjectNode m : ms) a.add(m.deepCopy());
        return a;
    }

    private ObjectNode msg(String role, String content) {
        ObjectNode m = json.createObjectNode();
        m.put("role", role).put("content", content);
        return m;
    }

    /** Ten tool definitions in the OpenAI format, each with a few typed parameters. */
    private ArrayNode tools() {
        String[][] defs = {{"read_file", "Read a file of the repository"}, {"write_file", "Replace a file's content"},
                {"list_dir", "List a directory"}, {"grep", "Search files for a pattern"}, {"run_tests", "Run the test suite"},
                {"git_log", "Show recent commits"}, {"git_diff", "Show the working tree's changes"},
                {"build", "Build the project"}, {"open_issue", "Read an issue of the tracker"}, {"http_get", "Fetch a URL"}};
        ArrayNode a = json.createArrayNode();
        for (String[] d : defs) {
            ObjectNode f = a.addObject().put("type", "function").putObject("function");
            f.put("name", d[0]).put("description", d[1] + ". " + words(24, d[0].hashCode()));
            ObjectNode p = f.putObject("parameters").put("type", "object");
            ObjectNode props = p.putObject("properties");
            props.putObject("path").put("type", "string").put("description", "path relative to the repository root");
            props.putObject("line").put("type", "integer").put("description", "line to start at");
            props.putObject("recursive").put("type", "boolean").put("description", "whether to descend into folders");
            p.putArray("required").add("path");
        }
        return a;
    }

    /** Text of about n tokens once encoded (words in a seeded order). */
    private String words(int n, long seed) {
        java.util.SplittableRandom r = new java.util.SplittableRandom(seed);
        StringBuilder s = new StringBuilder();
        int est = 0;
        while (true) {
            for (int i = 0; i < 64; i++) s.append(WORDS[r.nextInt(WORDS.length)]).append(i % 16 == 15 ? ".\n" : " ");
            est += 64;
            if (est >= n * 3 / 4 && tok.encode(s.toString()).length >= n) break;
        }
        // trim to n tokens
        int[] ids = tok.encode(s.toString());
        return tok.decode(java.util.Arrays.copyOf(ids, n));
    }
}
