package io.ds4j.model;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

/**
 * A model directory: {@code config.json} plus safetensors weights, memory-mapped.
 *
 * <p>Weights are found, in order of preference, in {@code model.safetensors.index.json} (its {@code weight_map}
 * names each tensor's shard), {@code model.safetensors}, or every {@code *.safetensors} file in the directory.
 * Tensor names from all files form one namespace; {@code mtp.*} tensors (spec 2.6) are kept apart
 * ({@link #mtpNames}) and do not count for the scheme. The naming scheme
 * (HF or original DeepSeek, spec 2.4) is detected from the names, and canonical HF names are resolved through
 * {@link TensorNames}. Closing the checkpoint unmaps every file.
 */
public final class Checkpoint implements AutoCloseable {
    /** Name of the sharded-checkpoint index file. */
    public static final String INDEX = "model.safetensors.index.json";
    /** Name of the single-file checkpoint. */
    public static final String SINGLE = "model.safetensors";

    private static final ObjectMapper JSON = new ObjectMapper();

    private final Path dir;
    private final Path source;
    private final ModelConfig config;
    private final List<SafetensorsFile> files;
    private final Map<String, StoredTensor> tensors;
    /** {@code mtp.*} tensors (spec 2.6), kept apart from the main model's. */
    private final Map<String, StoredTensor> mtp;
    private final TensorNames.Scheme scheme;

    private Checkpoint(Path dir, Path source, ModelConfig config, List<SafetensorsFile> files,
                       Map<String, StoredTensor> tensors, Map<String, StoredTensor> mtp, TensorNames.Scheme scheme) {
        this.dir = dir;
        this.source = source;
        this.config = config;
        this.files = files;
        this.tensors = tensors;
        this.mtp = mtp;
        this.scheme = scheme;
    }

    /**
     * Opens a model directory: reads the config and maps every weight file.
     * @throws CheckpointException when the directory, config.json, a listed shard or any tensor file is missing or
     *         invalid, a tensor appears twice, or no known tensor names are present
     */
    public static Checkpoint open(Path dir) throws CheckpointException {
        Found w = find(dir);
        ModelConfig config = w.config();
        Path source = w.source();
        List<Path> paths = w.paths();
        Map<String, String> weightMap = w.weightMap();

        List<SafetensorsFile> files = new ArrayList<>();
        try {
            Map<String, StoredTensor> all = new LinkedHashMap<>();
            Map<String, StoredTensor> mtp = new LinkedHashMap<>();
            Map<Path, SafetensorsFile> byPath = new HashMap<>();
            for (Path p : paths) {
                SafetensorsFile f = SafetensorsFile.open(p);
                files.add(f);
                byPath.put(p.toAbsolutePath().normalize(), f);
                for (String name : f.names()) {
                    StoredTensor t = f.tensor(name);
                    StoredTensor prev = (isMtp(name) ? mtp : all).putIfAbsent(name, t);
                    if (prev != null)
                        throw new CheckpointException(p, name, "tensor also present in " + prev.file());
                }
            }
            if (weightMap != null) {
                for (Map.Entry<String, String> e : weightMap.entrySet()) {
                    SafetensorsFile f = byPath.get(dir.resolve(e.getValue()).toAbsolutePath().normalize());
                    if (f != null && !f.contains(e.getKey()))
                        throw new CheckpointException(f.path(), e.getKey(), "listed in " + INDEX + " but not present in this shard");
                }
            }
            TensorNames.Scheme scheme = detectScheme(source, all.keySet());
            Checkpoint c = new Checkpoint(dir, source, config, List.copyOf(files), Collections.unmodifiableMap(all),
                    Collections.unmodifiableMap(mtp), scheme);
            files = null;
            return c;
        } finally {
            if (files != null) for (SafetensorsFile f : files) f.close();
        }
    }

    /**
     * Checks a model directory without mapping any weight: reads {@code config.json} and finds the weight files as
     * {@link #open} would (the index's shards must exist); their contents are read only by {@link #open}.
     * @return the parsed {@code config.json}
     * @throws CheckpointException when the directory or config.json is missing or invalid, a shard listed in the index
     *         is missing, or there are no weight files
     */
    public static ModelConfig inspect(Path dir) throws CheckpointException {
        return find(dir).config();
    }

    /** A directory's config and where its weights are: the file named as their source, the files to map, the index's map or null. */
    private record Found(ModelConfig config, Path source, List<Path> paths, Map<String, String> weightMap) {}

    // the one place that decides whether a directory is a model with weights, for open and inspect alike
    private static Found find(Path dir) throws CheckpointException {
        if (!Files.isDirectory(dir)) throw new CheckpointException(dir, null, "model directory not found");
        ModelConfig config = ModelConfig.read(dir.resolve("config.json"));
        List<Path> paths = new ArrayList<>();
        Path index = dir.resolve(INDEX);
        if (Files.isRegularFile(index)) {
            Map<String, String> weightMap = readIndex(index);
            for (String s : new TreeSet<>(weightMap.values())) {
                Path p = dir.resolve(s);
                if (!Files.isRegularFile(p))
                    throw new CheckpointException(p, null, "shard file listed in " + INDEX + " is missing");
                paths.add(p);
            }
            if (paths.isEmpty()) throw new CheckpointException(index, null, "no weights found: the index lists no shard files");
            return checked(new Found(config, index, paths, weightMap));
        }
        if (Files.isRegularFile(dir.resolve(SINGLE)))
            return checked(new Found(config, dir.resolve(SINGLE), List.of(dir.resolve(SINGLE)), null));
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir, "*.safetensors")) {
            for (Path p : ds) if (Files.isRegularFile(p)) paths.add(p);
        } catch (IOException e) {
            throw new CheckpointException(dir, null, "cannot list directory: " + e.getMessage());
        }
        Collections.sort(paths);
        if (paths.isEmpty())
            throw new CheckpointException(dir, null, "no weights found (expected " + SINGLE + ", " + INDEX + " or *.safetensors files)");
        return checked(new Found(config, dir, paths, null));
    }

    /** f, once each weight file is long enough to be safetensors (SafetensorsFile#checkLength). */
    private static Found checked(Found f) throws CheckpointException {
        for (Path p : f.paths()) {
            try {
                SafetensorsFile.checkLength(p, Files.size(p));
            } catch (IOException e) {
                throw new CheckpointException(p, null, "cannot read file: " + e.getMessage());
            }
        }
        return f;
    }

    private static boolean isMtp(String name) {
        return name.startsWith("mtp.") || name.startsWith("model.mtp.");
    }

    private static Map<String, String> readIndex(Path index) throws CheckpointException {
        JsonNode root;
        try {
            root = JSON.readTree(index.toFile());
        } catch (IOException e) {
            throw new CheckpointException(index, null, "not valid JSON: " + e.getMessage());
        }
        JsonNode wm = root == null ? null : root.get("weight_map");
        if (wm == null || !wm.isObject()) throw new CheckpointException(index, null, "missing 'weight_map' object");
        Map<String, String> m = new LinkedHashMap<>();
        for (Map.Entry<String, JsonNode> e : wm.properties()) {
            if (!e.getValue().isTextual())
                throw new CheckpointException(index, e.getKey(), "weight_map value is not a file name");
            m.put(e.getKey(), e.getValue().asText());
        }
        return m;
    }

    private static TensorNames.Scheme detectScheme(Path source, Set<String> names) throws CheckpointException {
        int hf = 0, orig = 0;
        for (String n : names) {
            if (n.startsWith("model.") || n.startsWith("lm_head.")) hf++;
            else if (n.startsWith("layers.") || n.startsWith("embed.") || n.startsWith("head.") || n.startsWith("norm.")
                    || n.startsWith("hc_head_")) orig++;
        }
        if (hf == 0 && orig == 0)
            throw new CheckpointException(source, null, "no DeepSeek-V4 tensors found (neither Hugging Face names like "
                    + "'model.embed_tokens.weight' nor original names like 'embed.weight')");
        return hf >= orig ? TensorNames.Scheme.HF : TensorNames.Scheme.ORIGINAL;
    }

    /** The model directory. */
    public Path dir() {
        return dir;
    }

    /** The parsed {@code config.json}. */
    public ModelConfig config() {
        return config;
    }

    /** The detected naming scheme. */
    public TensorNames.Scheme scheme() {
        return scheme;
    }

    /** The opened weight files. */
    public List<SafetensorsFile> files() {
        return files;
    }

    /** All stored tensor names (as written in the files, {@code mtp.*} excluded). */
    public Set<String> names() {
        return tensors.keySet();
    }

    /** The stored names of the {@code mtp.*} tensors (the multi-token-prediction block, spec 2.6), in file order. */
    public Set<String> mtpNames() {
        return mtp.keySet();
    }

    /** A tensor by its stored name ({@code mtp.*} included), or null. */
    public StoredTensor stored(String storedName) {
        StoredTensor t = tensors.get(storedName);
        return t != null ? t : mtp.get(storedName);
    }

    /** The stored name of a canonical HF name in this checkpoint's scheme (null when it has none). */
    public String storedName(String canonical) {
        return TensorNames.inScheme(scheme, canonical);
    }

    /** A tensor by canonical HF name, or null when absent. */
    public StoredTensor find(String canonical) {
        String s = storedName(canonical);
        return s == null ? null : tensors.get(s);
    }

    /**
     * A tensor by canonical HF name.
     * @throws CheckpointException naming the weights source and the stored name when the tensor is absent
     */
    public StoredTensor get(String canonical) throws CheckpointException {
        StoredTensor t = find(canonical);
        if (t == null) throw missing(canonical);
        return t;
    }

    /** The "tensor not found" error for a canonical name. */
    CheckpointException missing(String canonical) {
        String s = storedName(canonical);
        return missingStored(s != null ? s : canonical, s != null && !s.equals(canonical) ? canonical : null);
    }

    /** The "tensor not found" error for a stored name (with an optional canonical name for context). */
    CheckpointException missingStored(String storedName, String canonical) {
        return new CheckpointException(source, storedName, "not found in checkpoint"
                + (canonical != null ? " (canonical name '" + canonical + "')" : "")
                + " [" + scheme + " naming, " + files.size() + " file(s)]");
    }

    /** Unmaps all files. Idempotent. */
    @Override
    public void close() {
        for (SafetensorsFile f : files) f.close();
    }

    @Override
    public String toString() {
        return "Checkpoint[" + dir + ", " + scheme + ", " + files.size() + " files, " + tensors.size() + " tensors]";
    }
}
