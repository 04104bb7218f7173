package io.ds4j.app;

import io.ds4j.engine.Backend;
import io.ds4j.engine.BackendOptions;
import io.ds4j.model.synth.ModelStore;
import io.ds4j.server.LoadedModel;
import io.ds4j.server.ModelProvider;
import io.ds4j.server.config.ConfigException;
import io.ds4j.server.config.ServerConfig;
import io.ds4j.speculative.DraftSource;
import io.ds4j.speculative.ModelDraftSource;
import io.ds4j.speculative.MtpDraftSource;
import io.ds4j.speculative.NgramDraft;
import io.ds4j.text.Tokenizer;
import io.ds4j.text.Tokenizers;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;

/**
 * Loads {@code model.path} (or, when it is null, the embedded default: preset {@code tiny}, seed 1, created on first
 * use by {@link ModelStore} — random weights, meaningless text) on the configured backend with the options of
 * {@link ServerConfig#backendOptions()} (GPU devices, expert placement, memory budget, verify attention), its tokenizer (the
 * folder's own {@code tokenizer.json}, else the vendored DeepSeek one), and the draft source.
 */
public final class DefaultModelProvider implements ModelProvider {
    /** Preset and seed of the embedded default model. */
    public static final String EMBEDDED_PRESET = "tiny";
    public static final long EMBEDDED_SEED = 1;
    /** Rollback window of draft-model sequences (at least the widest verify step). */
    static final int DRAFT_ROLLBACK = io.ds4j.engine.RollbackWindow.DEFAULT;

    @Override
    public void check(ServerConfig cfg) throws ConfigException {
        check(cfg, true);
    }

    @Override
    public void checkNextStart(ServerConfig cfg) throws ConfigException {
        check(cfg, false);
    }

    /**
     * The start's checks, every one of them (a bad folder does not hide an unavailable backend): the model and draft
     * folders, and the backend ({@link Backends#checkAvailable(String, boolean)}).
     * @param openDevice whether the backend's probe may open the device (the start), or only ask the runtime (a reload)
     */
    private static void check(ServerConfig cfg, boolean openDevice) throws ConfigException {
        List<String> problems = new ArrayList<>();
        if (cfg.modelPath() != null) problem(problems, () -> checkModelFolder("model.path", "", Path.of(cfg.modelPath())));
        String d = cfg.draft();
        if (!d.equals("none") && !d.equals("ngram") && !d.equals("mtp"))
            problem(problems, () -> checkModelFolder("speculative.draft", "must be \"none\", \"ngram\", \"mtp\" or a model folder; ", Path.of(d)));
        problem(problems, () -> checkBackend(cfg.backend(), openDevice));
        if (!problems.isEmpty()) throw new ConfigException(problems);
    }

    /** Runs one check, adding its refusal (an IllegalArgumentException naming the key) to problems. */
    private static void problem(List<String> problems, Runnable check) {
        try {
            check.run();
        } catch (IllegalArgumentException e) {
            problems.add(e.getMessage());
        }
    }

    /**
     * The tokenizer's vocabulary, which requests (and sampling.top_k) are checked against: the folder's own
     * tokenizer.json, else the vendored one (the embedded default model has none of its own), as {@link #load} reads
     * it. Null when the folder or its tokenizer cannot be read: the start's check or the load says why.
     */
    @Override
    public Integer vocabulary(String modelPath) {
        try {
            return (modelPath == null ? Tokenizers.vendored() : Tokenizers.forModel(Path.of(modelPath))).vocabSize();
        } catch (RuntimeException | LinkageError e) {
            return null;
        }
    }

    /**
     * Checks a model folder named by a flag or key as a load would, without reading any weight: the folder,
     * config.json and the weight files. The one place that words a missing or unusable model folder, for serve's
     * configuration and the commands' {@code --model} alike.
     * @param key the flag or key that named the folder ({@code --model}, {@code model.path})
     * @return the folder's config.json
     * @throws IllegalArgumentException naming the key, the folder and what is wrong
     */
    public static io.ds4j.model.ModelConfig checkModelFolder(String key, Path dir) {
        return checkModelFolder(key, "", dir);
    }

    // what would certainly fail the load, found before the port is bound: config.json and the weight files (not
    // their contents, which only the load reads); what: the key's accepted values, before a missing folder is named
    private static io.ds4j.model.ModelConfig checkModelFolder(String key, String what, Path dir) {
        if (!Files.isDirectory(dir))
            throw new IllegalArgumentException(key + ": " + what + (Files.exists(dir) ? "not a folder: " : "folder not found: ")
                    + dir.toAbsolutePath());
        try {
            return io.ds4j.model.Checkpoint.inspect(dir);
        } catch (Exception e) {
            throw new IllegalArgumentException(key + ": " + dir.toAbsolutePath() + " is not a model folder: "
                    + (e.getMessage() != null ? e.getMessage() : e), e);
        }
    }

    /** A backend that needs hardware is probed once, so a machine without it fails before binding. */
    private static void checkBackend(String backend, boolean openDevice) {
        try {
            Backends.checkAvailable(backend, openDevice);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("model.backend: " + e.getMessage(), e);
        }
    }

    /** {@code model.name}, else the model folder's name (the embedded model's folder in the model store). */
    @Override
    public String servedId(ServerConfig cfg) {
        if (cfg.modelName() != null) return cfg.modelName();
        Path dir = cfg.modelPath() == null ? ModelStore.folder(EMBEDDED_PRESET, EMBEDDED_SEED) : Path.of(cfg.modelPath());
        Path name = dir.toAbsolutePath().normalize().getFileName();
        // a model folder at the file system's root has no name of its own
        return name != null ? name.toString() : dir.toAbsolutePath().normalize().toString();
    }

    @Override
    public LoadedModel load(ServerConfig cfg, Consumer<String> log) throws Exception {
        boolean embedded = cfg.modelPath() == null;
        Path dir;
        if (embedded) {
            dir = ModelStore.ensure(EMBEDDED_PRESET, EMBEDDED_SEED, log);
            log.accept("no model.path given: serving the embedded default model " + dir
                    + " (random weights: its text is meaningless)");
        } else {
            dir = Path.of(cfg.modelPath());
            if (!Files.isDirectory(dir)) throw new IllegalArgumentException("model.path: folder not found: " + dir.toAbsolutePath());
        }
        long t0 = System.nanoTime();
        Backend backend;
        try {
            backend = open(cfg.backend(), dir, cfg.backendOptions());
        } catch (io.ds4j.model.CheckpointException | java.io.IOException | java.io.UncheckedIOException e) {
            if (!embedded) throw e;
            // the store made these files: a failure to read them means they were damaged after (a full disk, a copy)
            throw new java.io.IOException("the embedded default model in " + dir + " cannot be read (" + e.getMessage()
                    + "); delete that folder and it is made again at the next start", e);
        }
        DraftSource draft = null;
        try {
            Tokenizer tok = Tokenizers.forModel(dir);
            if (tok.vocabSize() > backend.config().vocabSize)
                throw new IllegalArgumentException("tokenizer " + tok.source() + " has " + tok.vocabSize()
                        + " tokens, more than the model's vocabulary of " + backend.config().vocabSize);
            draft = openDraft(cfg, backend, dir, log);
            String id = servedId(cfg);
            log.accept(String.format("loaded model '%s' from %s on %s in %.1f s (%d layers, hidden %d, vocab %d); tokenizer %s; draft %s",
                    id, dir, backend.name(), (System.nanoTime() - t0) / 1e9, backend.config().numLayers,
                    backend.config().hidden, backend.config().vocabSize, tok.source(), draft == null ? "none" : draft.name()));
            return new LoadedModel(id, dir.toAbsolutePath().toString(), embedded, backend, tok, draft);
        } catch (Exception | Error e) {
            if (draft != null) draft.close();
            backend.close();
            throw e;
        }
    }

    /** The tokenizer a folder uses: a hash of its own tokenizer.json, or "vendored". */
    private static String tokenizerIdentity(Path dir) throws java.io.IOException {
        Path own = dir.resolve("tokenizer.json");
        if (!Files.isRegularFile(own)) return "vendored";
        try {
            var md = java.security.MessageDigest.getInstance("SHA-256");
            return "sha256:" + java.util.HexFormat.of().formatHex(md.digest(Files.readAllBytes(own)));
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    private static Backend open(String backend, Path dir, BackendOptions options) throws Exception {
        try {
            return Backends.open(backend, dir, options);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("model.backend: " + e.getMessage(), e);
        }
    }

    private static DraftSource openDraft(ServerConfig cfg, Backend target, Path targetDir, Consumer<String> log) throws Exception {
        String d = cfg.draft();
        if (d.equals("none")) return null;
        if (d.equals("ngram")) return NgramDraft.source();
        if (d.equals("mtp")) {
            try {
                MtpDraftSource src = new MtpDraftSource(target, DRAFT_ROLLBACK);
                log.accept("draft: the checkpoint's MTP layer, " + src.head().describe());
                return src;
            } catch (IllegalStateException | UnsupportedOperationException e) {
                throw new IllegalArgumentException("speculative.draft: \"mtp\" needs the checkpoint's MTP layer, but " + e.getMessage(), e);
            }
        }
        Path dir = Path.of(d);
        if (!Files.isDirectory(dir))
            throw new IllegalArgumentException("speculative.draft: must be \"none\", \"ngram\", \"mtp\" or a model folder; folder not found: "
                    + dir.toAbsolutePath());
        // the draft never runs verify steps, so the F16-KV verifier does not apply to it
        Backend draft = open(cfg.backend(), dir, cfg.backendOptions().withF16KvVerify(false));
        try {
            ModelDraftSource.checkCompatible(target, draft, tokenizerIdentity(targetDir),
                    tokenizerIdentity(dir));
        } catch (RuntimeException e) {
            draft.close();
            throw new IllegalArgumentException("speculative.draft: " + e.getMessage(), e);
        }
        log.accept("draft model " + dir + ": " + draft.config().numLayers + " layers, hidden " + draft.config().hidden);
        int inUse = Math.min(cfg.maxContextTokens(), target.config().maxPositionEmbeddings);
        if (draft.config().maxPositionEmbeddings < inUse)
            log.accept("draft model's context limit (max_position_embeddings " + draft.config().maxPositionEmbeddings
                    + ") is below the context in use (" + inUse + "): requests draft only while their context plus the "
                    + "draft tokens fits in it, then decode without drafts");
        return new ModelDraftSource(draft, "model:" + dir.toAbsolutePath(), DRAFT_ROLLBACK);
    }
}
