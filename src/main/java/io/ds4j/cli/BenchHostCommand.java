package io.ds4j.cli;

import io.ds4j.bench.HostOverheadBench;
import io.ds4j.bench.HostOverheadBench.EngineFigures;
import io.ds4j.bench.HostOverheadBench.Mode;
import io.ds4j.bench.HostOverheadBench.NoMathBackend;
import io.ds4j.model.ModelConfig;
import io.ds4j.model.synth.Presets;
import io.ds4j.text.Tokenizers;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.util.List;
import java.util.concurrent.Callable;

/**
 * {@code ds4j bench-host}: the host-overhead harness ({@link HostOverheadBench}). The engine loop and the server run
 * over a backend with no model math (pseudo-random logits of the preset's whole vocabulary, returned at once), so the
 * figures are the host's own cost per step at each number of streams. A benchmark: it prints figures, asserts nothing.
 */
@Command(name = "bench-host", mixinStandardHelpOptions = true, sortOptions = false,
        description = "Host-overhead harness: the engine's and the server's own cost per step (planning, logits "
                + "handling and sampling, commit, server/SSE) at 1, 16, 64 streams, over a backend with no model math.")
public final class BenchHostCommand implements Callable<Integer> {
    @Option(names = "--preset", defaultValue = "flash-shaped", description = "preset whose vocabulary the logits have (default ${DEFAULT-VALUE})") String preset;
    @Option(names = "--streams", defaultValue = "1,16,64", split = ",", description = "concurrent streams (default ${DEFAULT-VALUE})") List<Integer> streams;
    @Option(names = "--modes", defaultValue = "greedy,seeded", split = ",", description = "greedy and/or seeded "
            + "(temperature 0.8, top-p 0.95, a seed per request) (default ${DEFAULT-VALUE})") List<String> modes;
    @Option(names = "--steps", defaultValue = "64", description = "decode steps per stream in the engine loop (default ${DEFAULT-VALUE})") int steps;
    @Option(names = "--prompt-tokens", defaultValue = "64", description = "prompt length in the engine loop (default ${DEFAULT-VALUE})") int promptTokens;
    @Option(names = "--server", description = "also through the server (HTTP + SSE clients on 127.0.0.1)") boolean server;
    @Option(names = "--max-tokens", defaultValue = "64", description = "tokens per request through the server (default ${DEFAULT-VALUE})") int maxTokens;
    @Option(names = "--requests-per-client", defaultValue = "2", description = "requests per client per level through the server (default ${DEFAULT-VALUE})") int perClient;
    @Option(names = "--device-argmax", description = "the backend answers greedy-only entries with token ids itself, "
            + "as the GPU backend's device argmax does (default: from the logits, on the host)") boolean deviceArgmax;
    @Option(names = "--pool", defaultValue = "64", description = "distinct pseudo-random logits rows (default ${DEFAULT-VALUE})") int pool;

    @Override
    public Integer call() throws Exception {
        // every option is checked before any work, so a bad one never shows up as NaN figures or a late failure
        for (int s : streams) if (s < 1) throw new IllegalArgumentException("--streams: each level must be >= 1, got " + s);
        if (steps < 1) throw new IllegalArgumentException("--steps must be >= 1, got " + steps);
        if (promptTokens < 1) throw new IllegalArgumentException("--prompt-tokens must be >= 1, got " + promptTokens);
        if (pool < 1) throw new IllegalArgumentException("--pool must be >= 1, got " + pool);
        if (maxTokens < 1) throw new IllegalArgumentException("--max-tokens must be >= 1, got " + maxTokens);
        if (perClient < 1) throw new IllegalArgumentException("--requests-per-client must be >= 1, got " + perClient);
        List<Mode> ms = new java.util.ArrayList<>();
        for (String m : modes) {
            Mode mode = java.util.Arrays.stream(Mode.values()).filter(x -> x.name().equalsIgnoreCase(m.trim())).findFirst()
                    .orElseThrow(() -> new IllegalArgumentException("--modes: unknown mode '" + m.trim() + "', expected greedy or seeded"));
            if (!ms.contains(mode)) ms.add(mode);
        }
        ModelConfig c = Presets.get(preset);
        int tokenLimit = Math.min(c.vocabSize, Tokenizers.vendored().vocabSize());
        System.out.printf("bench-host: HOST-OVERHEAD HARNESS (no model math): logits of %d ids (tokens below %d), "
                        + "argmax-only entries %s; %d cores, JDK %s%n", c.vocabSize, tokenLimit,
                deviceArgmax ? "answered by the backend (as a device argmax)" : "from the logits on the host",
                Runtime.getRuntime().availableProcessors(), System.getProperty("java.version"));
        try (NoMathBackend be = new NoMathBackend(c, pool, deviceArgmax)) {
            System.out.printf("engine loop (Scheduler + Generation, %d decode steps per stream; ms per step, means):%n", steps);
            System.out.printf("  %-7s %7s %9s %11s %9s %9s %9s %14s%n", "mode", "streams", "plan", "backend*", "commit",
                    "host", "tick", "host tok/s");
            for (Mode m : ms)
                for (int s : streams) {
                    EngineFigures f = HostOverheadBench.engineLoop(be, tokenLimit, s, m, promptTokens, steps);
                    System.out.printf("  %-7s %7d %9.3f %11.3f %9.3f %9.3f %9.3f %14.0f%n", m.name().toLowerCase(), s,
                            f.planMs(), f.backendMs(), f.commitMs(), f.planMs() + f.commitMs(), f.tickMs(),
                            s * 1000 / f.tickMs());
                }
            System.out.println("  * backend: the no-math step (copying the pool's logits rows into new arrays, as a device "
                    + "backend fills its downloaded rows; with --device-argmax only the rows that need logits)");
            if (server) {
                System.out.printf("through the server (%d requests per client, %d tokens each, chat SSE):%n", perClient, maxTokens);
                HostOverheadBench.serverLevels(be, streams, ms, maxTokens, perClient, System.out);
            }
        }
        return 0;
    }
}
