package io.ds4j.model;

import io.ds4j.cpu.TestModelsAccess;
import io.ds4j.model.synth.Presets;
import io.ds4j.model.synth.RandomCheckpoint;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.function.Predicate;

/** Seeded checkpoints with (or without) an MTP layer for the MTP tests, written by make-model's generator. */
public final class MtpCheckpoints {
    private MtpCheckpoints() {}

    /** The in-memory tests' micro shape (vocabulary 97, W 4, CSA 4, HCA 8) as a checkpoint, F32, HF naming. */
    public static Path micro(Path dir, long seed, boolean mtp) throws IOException {
        ModelConfig c = TestModelsAccess.microConfig();
        c.mtpLayers = mtp ? 1 : 0;
        new RandomCheckpoint(c, seed, TensorNames.Scheme.HF, RandomCheckpoint.Storage.F32).write(dir);
        return dir;
    }

    /** The tiny preset as released: FP8 dense projections (e_proj/h_proj included), FP4 experts, original naming. */
    public static Path tinyFp8(Path dir, long seed) throws IOException {
        new RandomCheckpoint(Presets.get("tiny"), seed, TensorNames.Scheme.ORIGINAL, RandomCheckpoint.Storage.FP8).write(dir);
        return dir;
    }

    /**
     * Rewrites a single-file checkpoint's weights without the tensors {@code drop} matches, plus the extra tensors
     * (name → F32 values of shape [len]).
     */
    public static void rewrite(Path dir, Predicate<String> drop, java.util.Map<String, float[]> extra) throws Exception {
        Path src = dir.resolve(Checkpoint.SINGLE), tmp = dir.resolve("rewritten.tmp");
        try (SafetensorsFile f = SafetensorsFile.open(src)) {
            SafetensorsWriter w = new SafetensorsWriter();
            for (String n : f.names()) {
                if (drop.test(n)) continue;
                StoredTensor t = f.tensor(n);
                w.add(n, t.dtype(), t.shape(), t.data());
            }
            extra.forEach((n, v) -> w.add(n, DType.F32, new long[]{v.length}, v));
            w.write(tmp);
        }
        Files.move(tmp, src, java.nio.file.StandardCopyOption.REPLACE_EXISTING);
    }
}
