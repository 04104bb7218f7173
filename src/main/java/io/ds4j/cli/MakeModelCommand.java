package io.ds4j.cli;

import io.ds4j.model.ModelConfig;
import io.ds4j.model.TensorNames;
import io.ds4j.model.synth.Presets;
import io.ds4j.model.synth.RandomCheckpoint;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;
import java.util.concurrent.Callable;

/**
 * {@code ds4j make-model}: writes a seeded random DeepSeek-V4 checkpoint ({@code config.json} + safetensors) in the
 * real on-disk format, for tests and benchmarks. See {@link Presets} and {@link RandomCheckpoint}.
 */
@Command(name = "make-model", mixinStandardHelpOptions = true,
        description = "Write a seeded random DeepSeek-V4 checkpoint (config.json + safetensors) for tests and benchmarks.")
public final class MakeModelCommand implements Callable<Integer> {
    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Option(names = "--preset", required = true, paramLabel = "NAME",
            description = "Model shape: tiny, small or flash-shaped.")
    String preset;

    @Option(names = "--seed", required = true, paramLabel = "N", description = "Random seed (same seed, same bytes).")
    long seed;

    @Option(names = "--out", required = true, paramLabel = "DIR", description = "Output directory.")
    Path out;

    @Option(names = "--naming", paramLabel = "hf|original",
            description = "Tensor naming scheme (default: original for fp8, else hf).")
    String naming;

    @Option(names = "--dtype", paramLabel = "bf16|f32|fp8",
            description = "Storage: bf16, f32, or fp8 = as released (FP8 dense, FP4 experts; original naming). "
                    + "Default: fp8 for flash-shaped, else bf16.")
    String dtype;

    @Option(names = "--layers", paramLabel = "L", description = "Number of decoder layers (default: the preset's).")
    Integer layers;

    @Option(names = "--experts", paramLabel = "E", description = "Routed experts per layer (default: the preset's).")
    Integer experts;

    @Option(names = "--no-mtp", negatable = false,
            description = "Leave out the MTP layer (mtp.0.*, one decoder layer plus its input projections and head), "
                    + "which is written by default.")
    boolean noMtp;

    @Option(names = "--force", description = "Write into a non-empty DIR, replacing its config.json and *.safetensors files.")
    boolean force;

    @Override
    public Integer call() throws IOException {
        PrintWriter o = spec.commandLine().getOut();
        ModelConfig cfg;
        RandomCheckpoint.Storage storage;
        TensorNames.Scheme scheme;
        RandomCheckpoint ck;
        try {
            cfg = Presets.get(preset, layers, experts);
            cfg.mtpLayers = noMtp ? 0 : 1;
            storage = RandomCheckpoint.Storage.parse(dtype != null ? dtype
                    : preset.startsWith("flash") ? "fp8" : "bf16");
            scheme = naming == null ? (storage == RandomCheckpoint.Storage.FP8 ? TensorNames.Scheme.ORIGINAL : TensorNames.Scheme.HF)
                    : switch (naming.toLowerCase(Locale.ROOT)) {
                        case "hf" -> TensorNames.Scheme.HF;
                        case "original" -> TensorNames.Scheme.ORIGINAL;
                        default -> throw new IllegalArgumentException("--naming must be hf or original, got '" + naming + "'");
                    };
            ck = new RandomCheckpoint(cfg, seed, scheme, storage);
        } catch (IllegalArgumentException e) {
            throw new CommandLine.ParameterException(spec.commandLine(), e.getMessage(), e);
        }
        prepareDir();
        ck.metadata(java.util.Map.of("ds4j.preset", preset));

        String dt = storage.name().toLowerCase(Locale.ROOT), nm = scheme.name().toLowerCase(Locale.ROOT);
        o.printf("make-model: preset %s, seed %d, %s, %s naming -> %s%n", preset, seed, dt, nm, out);
        o.printf("  %s, %s%n", cfg, cfg.mtpLayers > 0 ? "with an MTP layer (mtp.0.*)" : "no MTP layer");
        o.printf("  %d tensors, %s of weights%n", ck.tensors().size(), human(ck.totalBytes()));
        o.flush();
        PrintWriter err = spec.commandLine().getErr();
        long[] last = {System.nanoTime()};
        RandomCheckpoint.Result r = ck.write(out, RandomCheckpoint.DEFAULT_MAX_SHARD, (done, total, name) -> {
            long now = System.nanoTime();
            if (now - last[0] > 5_000_000_000L) {
                last[0] = now;
                err.printf("  ... %.0f%% (%s / %s)%n", 100.0 * done / total, human(done), human(total));
                err.flush();
            }
        });
        for (Path f : r.files()) o.printf("  wrote %s (%s)%n", f, human(Files.size(f)));
        o.printf("done: %d tensors, %d bytes (%s) in %d file(s), %.1f s%n", r.tensors(), r.bytes(), human(r.bytes()),
                r.files().size(), r.seconds());
        o.flush();
        return 0;
    }

    /**
     * Makes the output folder where it is missing and checks that it can be written into (a probe file); refuses a
     * non-empty one without --force, and with it removes files that would make the result inconsistent. All before
     * any work is printed, so that a folder that cannot be made or written is the error it is.
     */
    private void prepareDir() throws IOException {
        // a link to nothing: creating the folder would fail with "it already exists"
        if (Files.isSymbolicLink(out) && !Files.exists(out))
            throw new CommandLine.ParameterException(spec.commandLine(), "--out " + out + ": a broken link (to "
                    + Files.readSymbolicLink(out) + ", which does not exist); give a folder");
        if (Files.exists(out) && !Files.isDirectory(out))
            throw new CommandLine.ParameterException(spec.commandLine(), "--out " + out + " exists and is not a directory");
        if (!Files.isDirectory(out)) {
            try {
                Files.createDirectories(out);
            } catch (IOException e) {
                throw new CommandLine.ParameterException(spec.commandLine(), "--out " + out + ": cannot create the folder: "
                        + Main.describe(e));
            }
            checkWritable();
            return;
        }
        boolean empty;
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(out)) {
            empty = !ds.iterator().hasNext();
        }
        if (!empty && !force)
            throw new CommandLine.ParameterException(spec.commandLine(), "output directory " + out
                    + " is not empty (use --force to overwrite its checkpoint files)");
        // an existing folder that cannot be written into (read-only, immutable, a pseudo file system) failed only at
        // the write, after the summary; with --force, before its files are removed
        checkWritable();
        if (empty) return;
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(out, "{*.safetensors,model.safetensors.index.json,config.json}")) {
            for (Path p : ds) if (Files.isRegularFile(p)) Files.delete(p);
        }
    }

    /** Writes and removes a probe file in --out; refuses a folder that cannot be written into. */
    private void checkWritable() {
        try {
            Files.delete(Files.createTempFile(out, ".make-model-", ".probe"));
        } catch (IOException e) {
            throw new CommandLine.ParameterException(spec.commandLine(), "--out " + out + ": cannot write into the folder: "
                    + (e instanceof java.nio.file.FileSystemException f ? Main.reason(f) : String.valueOf(e.getMessage())));
        }
    }

    private static String human(long b) {
        if (b >= 1L << 30) return String.format("%.2f GiB", b / (double) (1L << 30));
        if (b >= 1L << 20) return String.format("%.1f MiB", b / (double) (1L << 20));
        if (b >= 1L << 10) return String.format("%.1f KiB", b / 1024.0);
        return b + " B";
    }
}
