package io.ds4j.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.ds4j.engine.Backend;
import io.ds4j.engine.BatchEntry;
import io.ds4j.engine.Generation;
import io.ds4j.engine.Scheduler;
import io.ds4j.engine.Sequence;
import io.ds4j.engine.StepOutput;
import io.ds4j.model.ModelConfig;
import io.ds4j.sampling.Sampler;
import io.ds4j.sampling.SamplingParams;
import io.ds4j.server.Ds4jServer;
import io.ds4j.server.LoadedModel;
import io.ds4j.server.config.ServerConfig;
import io.ds4j.text.Tokenizer;
import io.ds4j.text.Tokenizers;

import java.io.PrintStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.stream.Stream;

/**
 * HOST-OVERHEAD HARNESS: the engine's and the server's own cost per step, with no model math. A {@link NoMathBackend}
 * answers every step at once with pseudo-random logits over the model's whole vocabulary (deterministic: a row depends
 * only on its sequence's tokens), so what a step costs here is what the host spends around the device's work: planning
 * the batch, handling and sampling the logits, committing the tokens, and (through the server) detokenizing, the event
 * bus and the SSE streams. Not a test and not a model benchmark: it prints figures and asserts nothing.
 *
 * <p>Two parts: the engine loop (the real {@link Scheduler} and {@link Generation}s, ticked in a loop, as the server's
 * engine thread does) with the tick split into planning, the backend's step (here only the copy of the logits rows into
 * the arrays a device backend also allocates and fills) and commit; and the real server ({@link Ds4jServer}, HTTP, SSE)
 * with streaming clients, where the time between the starts of successive steps is the whole loop's period.
 */
public final class HostOverheadBench {
    private HostOverheadBench() {}

    /**
     * A backend without model math (host-overhead harness only): every step returns, for each wanted row, one of a
     * fixed pool of pseudo-random logits rows of length V, chosen by a hash of the row's token and position. The rows
     * are peaked as a language model's are (a few ids far above a Gaussian floor), so top-p keeps few candidates.
     * With {@code deviceArgmax}, argmax-only entries ({@link BatchEntry#argmaxOnly()}) get their ids from a table made
     * at start (as a device argmax would give them: nothing of the logits crosses to the host); without it they go
     * through the interface's default (the logits, then the argmax on the host).
     */
    public static final class NoMathBackend implements Backend {
        private final ModelConfig c;
        private final float[][] pool;
        private final boolean deviceArgmax;
        /** Argmax of each pool row below a limit, per limit (computed once per limit). */
        private final Map<Integer, int[]> argmaxByLimit = new ConcurrentHashMap<>();
        /** Nanoseconds spent inside {@link #step} and steps run, for the report. */
        long stepNanos, steps;
        /** Start times (ns) and entry counts of the steps, when recording. */
        final List<long[]> trace = Collections.synchronizedList(new ArrayList<>());
        volatile boolean recording;

        /**
         * @param c            the model's configuration (only vocabSize and the context limit are used)
         * @param poolRows     distinct logits rows (at least 1)
         * @param deviceArgmax whether argmax-only entries are answered from the precomputed table
         */
        public NoMathBackend(ModelConfig c, int poolRows, boolean deviceArgmax) {
            this.c = c;
            this.deviceArgmax = deviceArgmax;
            int V = c.vocabSize;
            pool = new float[poolRows][V];
            SplittableRandom rnd = new SplittableRandom(20240611L);
            for (float[] row : pool) {
                for (int v = 0; v < V; v++) row[v] = (float) (rnd.nextGaussian() * 2.0);
                // a handful of likely tokens (below the tokenizer's 128,815 ids), as a trained model's logits have
                for (int k = 0; k < 12; k++) row[rnd.nextInt(Math.min(V, 128_000))] = (float) (18 + rnd.nextDouble() * 6);
            }
        }

        @Override
        public String name() {
            return "no-math";
        }

        @Override
        public ModelConfig config() {
            return c;
        }

        @Override
        public Sequence newSequence(int maxRollback) {
            return new NoMathSequence(maxRollback);
        }

        private int poolRow(int token, int position) {
            long h = (token * 0x9E3779B97F4A7C15L) ^ (position * 0xC2B2AE3D27D4EB4FL);
            h ^= h >>> 31;
            return (int) Math.floorMod(h, (long) pool.length);
        }

        @Override
        public float[] forward(Sequence seq, int[] tokens, int off, int count, int[] logitRows) {
            Backend.checkStep(c, tokens, off, count, logitRows);
            NoMathSequence s = (NoMathSequence) seq;
            int V = c.vocabSize;
            float[] out = new float[logitRows.length * V];
            for (int i = 0; i < logitRows.length; i++)
                System.arraycopy(pool[poolRow(tokens[off + logitRows[i]], s.len + logitRows[i])], 0, out, i * V, V);
            s.advance(count);
            return out;
        }

        /** Accounts one step that started at t0 (nanoTime) with the given entries. */
        private void stepDone(long t0, int entries) {
            long dt = System.nanoTime() - t0;
            if (recording) trace.add(new long[]{t0, entries, dt});
            stepNanos += dt;
            steps++;
        }

        @Override
        public float[][] step(List<BatchEntry> batch) {
            long t0 = System.nanoTime();
            try {
                return Backend.super.step(batch);
            } finally {
                stepDone(t0, batch.size());
            }
        }

        @Override
        public StepOutput stepArgmax(List<BatchEntry> batch) {
            if (!deviceArgmax) return Backend.super.stepArgmax(batch);
            long t0 = System.nanoTime();
            try {
                Backend.checkBatch(c, batch);
                Backend.checkArgmax(c, batch);
                float[][] lg = new float[batch.size()][];
                int[][] ids = new int[batch.size()][];
                for (int i = 0; i < batch.size(); i++) {
                    BatchEntry e = batch.get(i);
                    if (!e.argmaxOnly()) {
                        lg[i] = forward(e.seq(), e.tokens(), 0, e.count(), e.logitRows());
                        continue;
                    }
                    int[] table = argmaxByLimit.computeIfAbsent(e.argmaxBelow(), n -> {
                        int[] t = new int[pool.length];
                        for (int p = 0; p < t.length; p++) t[p] = Sampler.argmax(pool[p], 0, n);
                        return t;
                    });
                    NoMathSequence s = (NoMathSequence) e.seq();
                    int[] out = new int[e.logitRows().length];
                    for (int r = 0; r < out.length; r++) out[r] = table[poolRow(e.tokens()[e.logitRows()[r]], s.len + e.logitRows()[r])];
                    s.advance(e.count());
                    ids[i] = out;
                }
                return new StepOutput(lg, ids);
            } finally {
                stepDone(t0, batch.size());
            }
        }

        @Override
        public long stateBytes(int contextTokens, int maxRollback) {
            return 0;
        }

        @Override
        public void close() {}
    }

    /** A sequence of the {@link NoMathBackend}: its length and rollback window only. */
    static final class NoMathSequence implements Sequence {
        private final int window;
        int len, rollbackable;

        NoMathSequence(int window) {
            this.window = window;
        }

        void advance(int n) {
            len += n;
            rollbackable = Math.min(window, rollbackable + n);
        }

        @Override
        public int length() {
            return len;
        }

        @Override
        public void rollback(int k) {
            if (k < 0 || k > rollbackable) throw new IllegalArgumentException("cannot roll back " + k + " tokens");
            len -= k;
            rollbackable -= k;
        }

        @Override
        public int rollbackable() {
            return rollbackable;
        }

        @Override
        public long stateBytes() {
            return 0;
        }

        @Override
        public void close() {}
    }

    /** The sampling settings of a run: greedy, or seeded sampling (temperature 0.8, top-p 0.95). */
    public enum Mode {
        GREEDY, SEEDED;

        SamplingParams params(int maxTokens, long seed) {
            return this == GREEDY
                    ? new SamplingParams(0, 0, 1, 0, null, 0, 0, 1, Map.of(), maxTokens, List.of(), false, 0, true)
                    : new SamplingParams(0.8, 0, 0.95, 0, seed, 0, 0, 1, Map.of(), maxTokens, List.of(), false, 0, true);
        }
    }

    /** Per-step means of one engine-loop run (ms). */
    public record EngineFigures(int streams, Mode mode, long steps, double planMs, double backendMs, double commitMs,
                                double tickMs) {
        /** The host's part of a tick: all of it but the backend's step. */
        double hostMs() {
            return planMs + commitMs;
        }
    }

    /**
     * The engine loop: {@code streams} greedy or seeded generations (prompt of promptTokens random ids, ignore_eos)
     * in one {@link Scheduler}, ticked until all finish; the figures are means over the ticks where every stream
     * decodes (prefill ticks left out). Run twice per setting, the first as the JIT's warm-up.
     */
    public static EngineFigures engineLoop(NoMathBackend be, int tokenLimit, int streams, Mode mode, int promptTokens,
                                           int steps) {
        EngineFigures f = null;
        for (int round = 0; round < 2; round++) f = engineRound(be, tokenLimit, streams, mode, promptTokens, steps);
        return f;
    }

    private static EngineFigures engineRound(NoMathBackend be, int tokenLimit, int streams, Mode mode, int promptTokens,
                                             int steps) {
        Scheduler<Integer> sch = new Scheduler<>(be, new Scheduler.Limits(256, 512));
        SplittableRandom rnd = new SplittableRandom(7);
        int[] eos = {1};
        for (int i = 0; i < streams; i++) {
            int[] prompt = new int[promptTokens];
            for (int t = 0; t < promptTokens; t++) prompt[t] = 2 + rnd.nextInt(tokenLimit - 2);
            SamplingParams p = mode.params(steps + 1, 1000 + i);
            Generation g = new Generation(be, be.newSequence(16), prompt, new Sampler(p, be.config().vocabSize, prompt, tokenLimit),
                    null, null, new Generation.Options(512, 1 << 20, eos, 16), (tok, lp) -> true);
            sch.add(i, g);
        }
        long plan = 0, back = 0, commit = 0, total = 0, n = 0;
        while (!sch.isEmpty()) {
            Scheduler.Tick<Integer> t = sch.tick();
            if (t.prefillTokens() > 0 || t.decodeRows() != streams) continue;
            plan += t.planNanos();
            back += t.stepNanos();
            commit += t.commitNanos();
            total += t.nanos();
            n++;
        }
        double d = Math.max(1, n) * 1e6;
        return new EngineFigures(streams, mode, n, plan / d, back / d, commit / d, total / d);
    }

    /** Per-level figures through the server. */
    public record ServerFigures(int streams, Mode mode, double periodP50Ms, double periodMeanMs, double backendMs,
                                double itlP50Ms, double itlP99Ms, double aggregateTps, long steadySteps) {}

    /**
     * Through the real server: a {@link Ds4jServer} on 127.0.0.1 serving the no-math backend with the vendored
     * tokenizer, {@code streams} concurrent SSE clients each sending {@code perClient} chat requests of maxTokens
     * tokens. The step period is the time between the starts of successive steps that hold every stream (the engine
     * thread's whole loop: scheduler, server accounting, events), pooled over the run.
     */
    public static List<ServerFigures> serverLevels(NoMathBackend be, List<Integer> levels, List<Mode> modes, int maxTokens,
                                                   int perClient, PrintStream out) throws Exception {
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        int maxClients = levels.stream().mapToInt(Integer::intValue).max().orElse(1);
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("server.host", "127.0.0.1");
        o.put("server.port", 0);
        o.put("speculative.draft", "none");
        o.put("limits.maxActive", maxClients);
        o.put("limits.maxQueue", Math.max(64, maxClients));
        o.put("prefixCache.enabled", false);
        o.put("log.level", "warn");
        ServerConfig cfg = ServerConfig.parse(null, "host-overhead-bench", o);
        Tokenizer tok = Tokenizers.vendored();
        Ds4jServer server = Ds4jServer.start(new Ds4jServer.Options(cfg, null, o, (config, log) ->
                new LoadedModel("no-math", "(no model: host-overhead harness)", false, be, tok, null))).await();
        List<ServerFigures> res = new ArrayList<>();
        try {
            server.ready().await();
            Client client = new Client("http://127.0.0.1:" + server.port());
            // warm-up (JIT) of every path at the largest level
            for (Mode m : modes) client.round(be, maxClients, m, maxTokens, 1);
            for (Mode m : modes)
                for (int c : levels) {
                    ServerFigures f = client.round(be, c, m, maxTokens, perClient);
                    res.add(f);
                    String period = f.steadySteps() == 0
                            ? String.format(java.util.Locale.ROOT, "no two successive steps held all %d streams (raise --max-tokens"
                            + " or --requests-per-client for a step period)", c)
                            : String.format(java.util.Locale.ROOT, "step period p50 %7.3f ms (mean %7.3f, backend %6.3f) over %5d steps",
                            f.periodP50Ms(), f.periodMeanMs(), f.backendMs(), f.steadySteps());
                    out.printf("  server %-6s %3d streams: %s; ITL p50 %7.3f ms p99 %7.3f ms; aggregate %9.0f tok/s%n",
                            m.name().toLowerCase(), c, period, f.itlP50Ms(), f.itlP99Ms(), f.aggregateTps());
                }
        } finally {
            server.close().await();
        }
        return res;
    }

    /** SSE clients of the chat endpoint. */
    private static final class Client {
        private final String base;
        private final HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
                .connectTimeout(Duration.ofSeconds(10)).build();
        private final ObjectMapper json = new ObjectMapper();

        Client(String base) {
            this.base = base;
        }

        ServerFigures round(NoMathBackend be, int c, Mode mode, int maxTokens, int perClient) throws Exception {
            List<Double> gaps = Collections.synchronizedList(new ArrayList<>());
            long[] tokens = new long[1];
            be.trace.clear();
            be.recording = true;
            long t0 = System.nanoTime();
            try (ExecutorService ex = Executors.newVirtualThreadPerTaskExecutor()) {
                List<Future<Long>> fs = new ArrayList<>();
                for (int k = 0; k < c; k++) {
                    int client = k;
                    fs.add(ex.submit(() -> {
                        long n = 0;
                        for (int r = 0; r < perClient; r++) n += stream(mode, maxTokens, 1000L * client + r, gaps);
                        return n;
                    }));
                }
                for (Future<Long> f : fs) tokens[0] += f.get();
            }
            double secs = (System.nanoTime() - t0) / 1e9;
            be.recording = false;
            // periods between successive steps that both held every stream, and those steps' backend time, so that the
            // backend figure is a part of the period it is printed beside
            List<long[]> tr = new ArrayList<>(be.trace);
            tr.sort(java.util.Comparator.comparingLong(x -> x[0]));
            List<Double> periods = new ArrayList<>();
            long backNanos = 0;
            for (int i = 1; i < tr.size(); i++)
                if (tr.get(i - 1)[1] == c && tr.get(i)[1] == c) {
                    periods.add((tr.get(i)[0] - tr.get(i - 1)[0]) / 1e6);
                    backNanos += tr.get(i - 1)[2];
                }
            double backendMs = periods.isEmpty() ? Double.NaN : backNanos / 1e6 / periods.size();
            double[] p = periods.stream().mapToDouble(Double::doubleValue).sorted().toArray();
            double[] g = gaps.stream().mapToDouble(Double::doubleValue).sorted().toArray();
            return new ServerFigures(c, mode, pct(p, 50), Arrays.stream(p).average().orElse(Double.NaN), backendMs,
                    pct(g, 50), pct(g, 99), tokens[0] / secs, p.length);
        }

        /** One streamed chat request; adds its inter-chunk gaps (ms); returns its generated tokens. */
        long stream(Mode mode, int maxTokens, long seed, List<Double> gapsOut) throws Exception {
            ObjectNode b = json.createObjectNode();
            b.putArray("messages").addObject().put("role", "user").put("content", "tell me a long story about rivers and stones");
            b.put("stream", true).put("max_tokens", maxTokens).put("ignore_eos", true);
            if (mode == Mode.GREEDY) b.put("temperature", 0);
            else b.put("temperature", 0.8).put("top_p", 0.95).put("seed", seed);
            b.putObject("stream_options").put("include_usage", true);
            HttpRequest req = HttpRequest.newBuilder(URI.create(base + "/v1/chat/completions"))
                    .header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString(b.toString())).build();
            HttpResponse<Stream<String>> r = http.send(req, HttpResponse.BodyHandlers.ofLines());
            if (r.statusCode() != 200) throw new IllegalStateException("HTTP " + r.statusCode());
            long last = 0, tokens = 0;
            List<Double> gaps = new ArrayList<>();
            for (JsonNode j : SseEvents.of(r.body(), json)) {
                if (j.has("usage") && !j.get("usage").isNull()) {
                    tokens = j.get("usage").get("completion_tokens").asLong();
                    continue;
                }
                JsonNode d = j.path("choices").path(0).path("delta");
                if (d.path("content").asText("").isEmpty() && d.path("reasoning_content").asText("").isEmpty()) continue;
                long now = System.nanoTime();
                if (last != 0) gaps.add((now - last) / 1e6);
                last = now;
            }
            gapsOut.addAll(gaps);
            return tokens;
        }
    }

    /** Nearest-rank percentile of sorted values. */
    static double pct(double[] sorted, double p) {
        if (sorted.length == 0) return Double.NaN;
        int i = (int) Math.ceil(p / 100 * sorted.length) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, i))];
    }
}
