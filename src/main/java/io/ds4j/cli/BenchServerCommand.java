package io.ds4j.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.ds4j.cpu.CpuBackend;
import io.ds4j.engine.Generation;
import io.ds4j.model.WeightLoader;
import io.ds4j.model.synth.ModelStore;
import io.ds4j.sampling.Sampler;
import io.ds4j.sampling.SamplingParams;
import io.ds4j.app.DefaultModelProvider;
import io.ds4j.server.Ds4jServer;
import io.ds4j.server.config.ServerConfig;
import io.ds4j.speculative.NgramDraft;
import io.ds4j.engine.VerifyWidth;
import io.ds4j.text.Tokenizer;
import io.ds4j.text.Tokenizers;
import io.ds4j.text.chat.ChatEncoder;
import io.ds4j.text.chat.ChatMessage;
import io.ds4j.text.chat.ChatOptions;
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

/**
 * {@code ds4j bench-server}: the server's own cost. Runs the same greedy generation on the engine alone (a
 * {@link Generation} stepped in a loop) and through the HTTP server as an SSE stream, and prints tokens/s of both;
 * then TTFT p50/p99 (measured by the clients: request sent → first content chunk) and aggregate tokens/s at several
 * numbers of concurrent streaming clients. A benchmark, not a test: it prints figures and asserts nothing.
 */
@Command(name = "bench-server", mixinStandardHelpOptions = true, sortOptions = false,
        description = "Measure server overhead: tokens/s through SSE vs the engine alone, TTFT p50/p99 at 1, 8, 64 clients.")
public final class BenchServerCommand implements Callable<Integer> {
    static final class Source {
        @Option(names = "--model", paramLabel = "DIR", description = "model directory") Path model;
        @Option(names = "--preset", paramLabel = "NAME", description = "preset model (default tiny, the embedded default), created on first use") String preset;
    }

    @ArgGroup(exclusive = true, multiplicity = "0..1") Source source = new Source();
    @Option(names = "--prompt-tokens", defaultValue = "64", description = "approximate prompt length (default ${DEFAULT-VALUE})") int promptTokens;
    @Option(names = "--max-tokens", defaultValue = "32", description = "tokens generated per request (default ${DEFAULT-VALUE})") int maxTokens;
    @Option(names = "--clients", defaultValue = "1,8,64", split = ",", description = "concurrency levels (default ${DEFAULT-VALUE})") List<Integer> clients;
    @Option(names = "--requests", defaultValue = "32", description = "requests per level, at least one per client (default ${DEFAULT-VALUE})") int requests;
    @Option(names = "--repeats", defaultValue = "10", description = "single-stream runs for the overhead figure (default ${DEFAULT-VALUE})") int repeats;
    @Option(names = "--draft", defaultValue = "none", description = "speculative.draft for both sides: none or ngram (default ${DEFAULT-VALUE})") String draft;
    @Option(names = "--max-active", defaultValue = "8", description = "limits.maxActive of the server (default ${DEFAULT-VALUE}, the server default)") int maxActive;

    @Option(names = "--url", paramLabel = "URL", description = "measure a server already running at URL (e.g. a cluster gateway, "
            + "http://127.0.0.1:8080) instead of starting one: single-stream and concurrent figures with per-token latency, "
            + "no engine-alone comparison") String url;
    @Option(names = "--api-key", paramLabel = "KEY", description = "Bearer key for --url") String apiKey;

    private final ObjectMapper json = new ObjectMapper();
    private String base;
    private HttpClient http;
    private int port;

    @Override
    public Integer call() throws Exception {
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        if (!draft.equals("none") && !draft.equals("ngram")) throw new IllegalArgumentException("--draft must be none or ngram");
        Path dir = source.model != null ? source.model
                : ModelStore.ensure(source.preset != null ? source.preset : DefaultModelProvider.EMBEDDED_PRESET, 1, System.err::println);
        Tokenizer tok = Tokenizers.forModel(dir);
        String user = userText(tok);
        int[] prompt = tok.encode(ChatEncoder.encode(List.of(ChatMessage.user(user)), ChatOptions.defaults()));
        int maxClients = clients.stream().mapToInt(Integer::intValue).max().orElse(1);

        System.out.printf("bench-server: model %s, prompt %d tokens, %d generated tokens per request (greedy, ignore_eos), draft %s%n",
                dir, prompt.length, maxTokens, draft);
        System.out.printf("machine: %s, %d cores, JDK %s%n", cpuName(), Runtime.getRuntime().availableProcessors(),
                System.getProperty("java.version"));

        if (url != null) return remote(user, maxClients);
        // --- the server (loads its own copy of the model; weights are memory-mapped, so this costs little)
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("server.host", "127.0.0.1");
        o.put("server.port", 0);
        o.put("model.path", dir.toAbsolutePath().toString());
        o.put("speculative.draft", draft);
        o.put("limits.maxActive", maxActive);
        o.put("limits.maxQueue", Math.max(64, maxClients));
        o.put("log.level", "warn");
        ServerConfig cfg = ServerConfig.parse(null, "bench", o);
        Ds4jServer server = Ds4jServer.start(new Ds4jServer.Options(cfg, null, o, new DefaultModelProvider())).await();
        try (CpuBackend be = new CpuBackend(WeightLoader.load(dir))) {
            server.ready().await();
            port = server.port();
            base = "http://127.0.0.1:" + port;
            http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).connectTimeout(Duration.ofSeconds(10)).build();
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
            System.out.printf("%-24s %14.1f %16.1f %12.1f%n", "engine alone", engDecode, engE2e, engTtft);
            System.out.printf("%-24s %14.1f %16.1f %12.1f%n", "through SSE (1 client)", sseDecode, sseE2e, sseTtft);
            System.out.printf("overhead: decode %.1f %% (%.2f ms/token), end-to-end %.1f %%, TTFT +%.1f ms (medians of %d runs each)%n",
                    100 * (1 - sseDecode / engDecode), 1000 / sseDecode - 1000 / engDecode, 100 * (1 - sseE2e / engE2e),
                    sseTtft - engTtft, 2 * repeats);

            System.out.println();
            System.out.printf("%-8s %9s %13s %13s %17s%n", "clients", "requests", "TTFT p50 ms", "TTFT p99 ms", "aggregate tok/s");
            for (int c : clients) {
                Round rd = round(c, user);
                List<Sample> samples = rd.samples();
                double secs = rd.seconds();
                double[] ttft = samples.stream().mapToDouble(Sample::ttftMs).sorted().toArray();
                long toks = samples.stream().mapToLong(Sample::tokens).sum();
                System.out.printf("%-8d %9d %13.1f %13.1f %17.1f%n", c, samples.size(), pct(ttft, 50), pct(ttft, 99), toks / secs);
            }
            System.out.printf("%nserver: limits.maxActive %d (more clients wait in the queue), one engine thread, %d HTTP verticles%n",
                    maxActive, cfg.httpInstances());
        } finally {
            server.close().await();
        }
        return 0;
    }

    /**
     * --url: the server at the URL as clients see it. Per-token latency is the time between successive content chunks
     * of one stream (a speculative step may deliver several tokens in one chunk).
     */
    private int remote(String user, int maxClients) throws Exception {
        base = url.replaceAll("/+$", "");
        http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).connectTimeout(Duration.ofSeconds(10)).build();
        System.out.printf("server: %s (running already; its own limits apply)%n", base);
        for (int i = 0; i < 10; i++) stream(user);
        List<Sample> single = new ArrayList<>();
        for (int i = 0; i < 2 * repeats; i++) single.add(stream(user));
        double[] gaps = single.stream().flatMapToDouble(x -> Arrays.stream(x.gapsMs())).sorted().toArray();
        System.out.println();
        System.out.printf("%-24s %14s %16s %12s %14s %14s%n", "single stream", "decode tok/s", "end-to-end tok/s", "TTFT ms",
                "per-token p50", "per-token p99");
        System.out.printf("%-24s %14.1f %16.1f %12.1f %11.2f ms %11.2f ms%n", "1 client, " + single.size() + " runs",
                median(single.stream().mapToDouble(Sample::decodeTps).toArray()),
                median(single.stream().mapToDouble(Sample::e2eTps).toArray()),
                median(single.stream().mapToDouble(Sample::ttftMs).toArray()), pct(gaps, 50), pct(gaps, 99));
        System.out.println();
        System.out.printf("%-8s %9s %13s %13s %17s %14s %14s%n", "clients", "requests", "TTFT p50 ms", "TTFT p99 ms", "aggregate tok/s",
                "per-token p50", "per-token p99");
        for (int c : clients) {
            Round rd = round(c, user);
            List<Sample> samples = rd.samples();
            double secs = rd.seconds();
            double[] ttft = samples.stream().mapToDouble(Sample::ttftMs).sorted().toArray();
            double[] g = samples.stream().flatMapToDouble(x -> Arrays.stream(x.gapsMs())).sorted().toArray();
            long toks = samples.stream().mapToLong(Sample::tokens).sum();
            System.out.printf("%-8d %9d %13.1f %13.1f %17.1f %11.2f ms %11.2f ms%n", c, samples.size(), pct(ttft, 50), pct(ttft, 99),
                    toks / secs, pct(g, 50), pct(g, 99));
        }
        return 0;
    }

    /** A user message of roughly --prompt-tokens tokens once encoded. */
    private String userText(Tokenizer tok) {
        String[] words = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches "
                + "under a pale moon and the river keeps running toward the distant sea").split(" ");
        StringBuilder s = new StringBuilder();
        for (int i = 0; ; i++) {
            s.append(words[i % words.length]).append(' ');
            if (i % 8 == 7 && tok.encode(s.toString()).length + 5 >= promptTokens) return s.toString().trim();
        }
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

    /** One request as the client sees it. */
    record Sample(double ttftMs, double decodeTps, double e2eTps, long tokens, double[] gapsMs) {}

    /** The streamed requests of one concurrency level and the seconds they took together. */
    record Round(List<Sample> samples, double seconds) {}

    /** {@code requests} streamed requests (rounded up to a multiple of c) from c concurrent clients. */
    private Round round(int c, String user) throws Exception {
        int perClient = Math.max(1, (requests + c - 1) / c);
        List<Sample> samples = Collections.synchronizedList(new ArrayList<>());
        long t0 = System.nanoTime();
        try (ExecutorService ex = Executors.newVirtualThreadPerTaskExecutor()) {
            List<Future<?>> fs = new ArrayList<>();
            for (int k = 0; k < c; k++) fs.add(ex.submit(() -> {
                for (int r = 0; r < perClient; r++) samples.add(stream(user));
                return null;
            }));
            for (Future<?> f : fs) f.get();
        }
        return new Round(samples, (System.nanoTime() - t0) / 1e9);
    }

    private Sample stream(String user) throws Exception {
        ObjectNode b = json.createObjectNode();
        b.putArray("messages").addObject().put("role", "user").put("content", user);
        b.put("stream", true).put("max_tokens", maxTokens).put("temperature", 0).put("ignore_eos", true);
        b.putObject("stream_options").put("include_usage", true);
        HttpRequest.Builder rb = HttpRequest.newBuilder(URI.create(base + "/v1/chat/completions"))
                .header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString(b.toString()));
        if (apiKey != null) rb.header("Authorization", "Bearer " + apiKey);
        HttpRequest req = rb.build();
        List<Double> gaps = new ArrayList<>();
        long t0 = System.nanoTime();
        HttpResponse<Stream<String>> r = http.send(req, HttpResponse.BodyHandlers.ofLines());
        if (r.statusCode() != 200) throw new IllegalStateException("HTTP " + r.statusCode());
        long first = 0, last = 0;
        int tokens = 0;
        for (String line : (Iterable<String>) r.body()::iterator) {
            if (!line.startsWith("data: ") || line.equals("data: [DONE]")) continue;
            JsonNode j = json.readTree(line.substring(6));
            if (j.has("error")) throw new IllegalStateException(j.toString());
            if (j.has("usage") && !j.get("usage").isNull()) {
                tokens = j.get("usage").get("completion_tokens").asInt();
                continue;
            }
            JsonNode c = j.path("choices").path(0);
            long now = System.nanoTime();
            if (!c.path("delta").path("content").asText("").isEmpty()) {
                if (first == 0) first = now;
                else gaps.add((now - last) / 1e6);
                last = now;
            }
            if (!c.path("finish_reason").isNull() && !c.path("finish_reason").isMissingNode()) last = now;
        }
        long end = System.nanoTime();
        double decode = last > first && tokens > 1 ? (tokens - 1) / ((last - first) / 1e9) : 0;
        return new Sample((first - t0) / 1e6, decode, tokens / ((end - t0) / 1e9), tokens,
                gaps.stream().mapToDouble(Double::doubleValue).toArray());
    }

    private static double median(double[] v) {
        double[] s = v.clone();
        Arrays.sort(s);
        return s.length == 0 ? Double.NaN : s.length % 2 == 1 ? s[s.length / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
    }

    /** Nearest-rank percentile of sorted values. */
    private static double pct(double[] sorted, double p) {
        if (sorted.length == 0) return Double.NaN;
        int i = (int) Math.ceil(p / 100 * sorted.length) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, i))];
    }

    private static String cpuName() {
        try {
            for (String l : Files.readAllLines(Path.of("/proc/cpuinfo")))
                if (l.startsWith("model name")) return l.substring(l.indexOf(':') + 1).trim();
        } catch (Exception ignored) {
            // not Linux
        }
        return System.getProperty("os.arch");
    }
}
