package io.ds4j.text;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.*;

class TokenizersTest {

    static void writeTinyTokenizer(Path dir, String decoderType) throws Exception {
        writeTinyTokenizer(dir, decoderType, 257);
    }

    /**
     * A byte-level BPE tokenizer: ids 0..255 are the bytes (GPT-2 byte-level alphabet), 256 is the merge "hi",
     * 257/258 are BOS/EOS (the file declares bosDeclared/bosDeclared+1 for them).
     */
    static void writeTinyTokenizer(Path dir, String decoderType, int bosDeclared) throws Exception {
        Map<String, Integer> vocab = new LinkedHashMap<>();
        int next = 256;
        for (int b = 0; b < 256; b++) {
            boolean printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            vocab.put(String.valueOf((char) (printable ? b : next++)), b);
        }
        vocab.put("hi", 256);
        Map<String, Object> model = new LinkedHashMap<>();
        model.put("type", "BPE");
        model.put("dropout", null);
        model.put("unk_token", null);
        model.put("continuing_subword_prefix", null);
        model.put("end_of_word_suffix", null);
        model.put("fuse_unk", false);
        model.put("byte_fallback", false);
        model.put("vocab", vocab);
        model.put("merges", List.of("h i"));
        Map<String, Object> json = new LinkedHashMap<>();
        json.put("version", "1.0");
        json.put("truncation", null);
        json.put("padding", null);
        json.put("added_tokens", List.of(added(bosDeclared, "<s>"), added(bosDeclared + 1, "</s>")));
        json.put("normalizer", null);
        json.put("pre_tokenizer", Map.of("type", "ByteLevel", "add_prefix_space", false, "trim_offsets", true, "use_regex", true));
        json.put("post_processor", null);
        json.put("decoder", decoderType.equals("ByteLevel")
                ? Map.of("type", "ByteLevel", "add_prefix_space", true, "trim_offsets", true, "use_regex", true)
                : Map.of("type", decoderType, "replacement", "▁", "prepend_scheme", "always", "split", true));
        json.put("model", model);
        ObjectMapper m = new ObjectMapper();
        m.writeValue(dir.resolve("tokenizer.json").toFile(), json);
        m.writeValue(dir.resolve("tokenizer_config.json").toFile(), Map.of("bos_token", "<s>", "eos_token", Map.of("content", "</s>")));
    }

    private static Map<String, Object> added(int id, String content) {
        Map<String, Object> t = new LinkedHashMap<>();
        t.put("id", id);
        t.put("content", content);
        t.put("single_word", false);
        t.put("lstrip", false);
        t.put("rstrip", false);
        t.put("normalized", false);
        t.put("special", true);
        return t;
    }

    @Test
    void checkpointTokenizerIsPreferredOverTheVendoredOne(@TempDir Path dir) throws Exception {
        writeTinyTokenizer(dir, "ByteLevel");
        Tokenizer t = Tokenizers.forModel(dir);
        assertNotSame(Tokenizers.vendored(), t);
        assertEquals(dir.resolve("tokenizer.json").toAbsolutePath().toString(), t.source());
        assertEquals(259, t.vocabSize());
        assertEquals(257, t.bosId());
        assertEquals(258, t.eosId());
        assertArrayEquals(new int[] {256}, t.encode("hi"));
        assertArrayEquals(new int[] {257, 256, 32, 195, 169, 258}, t.encode("<s>hi é</s>"));
        assertEquals("<s>hi é</s>", t.decode(t.encode("<s>hi é</s>")));
        assertArrayEquals(new byte[] {(byte) 0xC3}, t.tokenBytes(195));
        StreamingDetokenizer d = t.streamer();
        assertEquals("", d.push(195), "half of é is held back");
        assertEquals("é", d.push(169));
        assertEquals("", d.flush());
    }

    /** tokenizers renumbers added tokens to follow the model vocabulary; ds4j follows the ids it really uses. */
    @Test
    void addedTokenIdsFollowTheNativeTokenizer(@TempDir Path dir) throws Exception {
        writeTinyTokenizer(dir, "ByteLevel", 300);
        Tokenizer t = Tokenizers.forModel(dir);
        int[] ids = t.encode("<s>hi</s>");
        assertArrayEquals(new int[] {t.bosId(), 256, t.eosId()}, ids);
        assertArrayEquals("<s>".getBytes(StandardCharsets.UTF_8), t.tokenBytes(t.bosId()));
        assertEquals("<s>hi</s>", t.decode(ids));
        assertEquals(t.decode(ids), StreamingDetokenizerTest.streamWith(t, ids));
    }

    @Test
    void folderWithoutTokenizerUsesTheVendoredOne(@TempDir Path dir) throws Exception {
        Files.writeString(dir.resolve("config.json"), "{}");
        assertSame(Tokenizers.vendored(), Tokenizers.forModel(dir));
    }

    @Test
    void errorsNameTheFile(@TempDir Path dir) throws Exception {
        var e = assertThrows(IllegalArgumentException.class, () -> Tokenizers.forModel(dir.resolve("nope")));
        assertTrue(e.getMessage().contains("nope"), e.getMessage());

        Files.writeString(dir.resolve("tokenizer.json"), "{\"model\": [1, 2");
        e = assertThrows(IllegalArgumentException.class, () -> Tokenizers.forModel(dir));
        assertTrue(e.getMessage().contains(dir.resolve("tokenizer.json").toString()), e.getMessage());

        e = assertThrows(IllegalArgumentException.class, () -> Tokenizers.load(dir.resolve("missing.json")));
        assertTrue(e.getMessage().contains("missing.json"), e.getMessage());
    }

    @Test
    void nonByteLevelTokenizerIsRejected(@TempDir Path dir) throws Exception {
        writeTinyTokenizer(dir, "Metaspace");
        var e = assertThrows(IllegalArgumentException.class, () -> Tokenizers.forModel(dir));
        assertTrue(e.getMessage().contains("tokenizer.json") && e.getMessage().contains("Metaspace"), e.getMessage());
    }

    @Test
    void vendoredExtractionIsVerifiedAtomicAndDoneOnce(@TempDir Path root) throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(2);
        List<Future<Path>> results = new ArrayList<>();
        try {
            Callable<Path> job = () -> VendoredTokenizer.extract(root);
            results.add(pool.submit(job));
            results.add(pool.submit(job));
            Path a = results.get(0).get(), b = results.get(1).get();
            assertEquals(a, b);
            assertEquals(VendoredTokenizer.folder(root).resolve("tokenizer.json"), a);
        } finally {
            pool.shutdownNow();
        }
        Path json = VendoredTokenizer.folder(root).resolve("tokenizer.json");
        long modified = Files.getLastModifiedTime(json).toMillis();
        assertEquals(json, VendoredTokenizer.extract(root));
        assertEquals(modified, Files.getLastModifiedTime(json).toMillis(), "second call reuses the extracted file");
        try (Stream<Path> s = Files.list(root)) {
            assertEquals(List.of(VendoredTokenizer.folder(root)), s.toList(), "no temporary folders left");
        }
        String text = Files.readString(json, StandardCharsets.UTF_8);
        assertTrue(text.contains("\"content\": \"<think>\""));
        assertFalse(text.contains("place▁holder▁no▁798"));
        assertEquals(VendoredTokenizer.sha256(VendoredTokenizer.readResource("tokenizer_config.json", false)),
                VendoredTokenizer.sha256(Files.readAllBytes(json.resolveSibling("tokenizer_config.json"))));
        // the vendored resource itself is the untouched original
        assertEquals(VendoredTokenizer.SHA256, VendoredTokenizer.sha256(VendoredTokenizer.readResource("tokenizer.json.gz", true)));
    }

    @Test
    void djlRunsOffline() {
        Tokenizers.vendored(); // DJL classes are loaded by now
        assertEquals("true", System.getProperty("ai.djl.offline"));
        assertEquals("true", System.getProperty("OPT_OUT_TRACKING"));
        assertTrue(ai.djl.util.Utils.isOfflineMode());
        String env = System.getenv("DJL_CACHE_DIR");
        if (env == null || env.isBlank()) {
            assertEquals(Tokenizers.home().resolve("djl"), ai.djl.util.Utils.getCacheDir());
        }
    }
}
