package io.ds4j.gpu;

import io.ds4j.engine.BackendOptions;
import io.ds4j.engine.Sequence;
import io.ds4j.engine.StepKind;
import io.ds4j.engine.VerifyAttention;
import io.ds4j.model.WeightLoader;
import io.ds4j.model.synth.ModelStore;
import io.ds4j.model.synth.RandomCheckpoint;
import io.ds4j.sampling.Sampler;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

/**
 * A diagnostic for how far rounding-level differences carry through the full-depth model: teacher-forced verify steps
 * (seeded random tokens, every row committed, so the inputs never depend on the outputs) on a synthetic context,
 * writing the argmax of every row to a file, one per line. Two runs that differ only in arithmetic (the verify
 * attention path, or an environment switch such as {@code DS4J_INDEXER_TC=0}) are then compared row by row
 * ({@code --compare A B}): the fraction of rows with the same argmax. A measurement tool: it asserts nothing.
 *
 * <pre>
 * java ... io.ds4j.gpu.ArgmaxTrace --layers 43 --experts 16 --context 59933 --steps 1000 --path f32-convert|f16 --out FILE
 * java ... io.ds4j.gpu.ArgmaxTrace --compare FILE_A FILE_B
 * </pre>
 */
public final class ArgmaxTrace {
    private ArgmaxTrace() {}

    public static void main(String[] args) throws Exception {
        int layers = 43, experts = 16, context = 59_933, steps = 1000, S = 5;
        String path = "f32-convert";
        Path out = null;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--layers" -> layers = Integer.parseInt(args[++i]);
                case "--experts" -> experts = Integer.parseInt(args[++i]);
                case "--context" -> context = Integer.parseInt(args[++i]);
                case "--steps" -> steps = Integer.parseInt(args[++i]);
                case "--path" -> path = args[++i];
                case "--out" -> out = Path.of(args[++i]);
                case "--compare" -> {
                    compare(Path.of(args[i + 1]), Path.of(args[i + 2]));
                    return;
                }
                default -> throw new IllegalArgumentException("unknown option " + args[i]
                        + " (expected --layers, --experts, --context, --steps, --path, --out, --compare A B)");
            }
        }
        if (out == null) throw new IllegalArgumentException("--out FILE is needed");
        final String key = path;
        VerifyAttention va = java.util.Arrays.stream(VerifyAttention.values()).filter(v -> v.key().equals(key)).findFirst()
                .orElseThrow(() -> new IllegalArgumentException("--path: f32-convert or f16, got " + key));
        Path dir = ModelStore.ensureVariant("flash-shaped", layers, experts, RandomCheckpoint.Storage.FP8, 1, System.out::println);
        try (HipBackend be = new HipBackend(WeightLoader.load(dir), BackendOptions.DEFAULTS.withF16KvVerify(true));
             Sequence seq = be.newSequence(16)) {
            int V = be.config().vocabSize;
            be.setVerifyAttention(va);
            be.fillSynthetic(seq, context, context);
            SplittableRandom r = new SplittableRandom(7);
            int[] all = new int[S];
            for (int i = 0; i < S; i++) all[i] = i;
            List<String> lines = new ArrayList<>();
            long t0 = System.nanoTime();
            for (int step = 0; step < steps; step++) {
                int[] toks = r.ints(S, 0, V).toArray();
                float[] lg = be.forward(seq, toks, 0, S, all, StepKind.VERIFY);
                for (int row = 0; row < S; row++) lines.add(Integer.toString(Sampler.argmax(lg, row * V, V)));
            }
            Files.write(out, lines);
            System.out.printf("%s at %,d..%,d tokens, %d layers: %d rows in %.1f s -> %s%n", path, context, seq.length(), layers,
                    lines.size(), (System.nanoTime() - t0) / 1e9, out);
        }
    }

    static void compare(Path a, Path b) throws IOException {
        List<String> x = Files.readAllLines(a), y = Files.readAllLines(b);
        int n = Math.min(x.size(), y.size()), same = 0, first = -1;
        for (int i = 0; i < n; i++) {
            if (x.get(i).equals(y.get(i))) same++;
            else if (first < 0) first = i;
        }
        System.out.printf("%s vs %s: %d of %d rows (%.4f %%) with the same argmax; first difference at row %d%n",
                a.getFileName(), b.getFileName(), same, n, 100.0 * same / n, first);
    }
}
