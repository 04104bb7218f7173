package io.ds4j.text;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.*;

class StreamingDetokenizerTest {
    static Tokenizer tok;

    @BeforeAll
    static void load() {
        tok = Tokenizers.vendored();
    }

    /** Result of streaming one id sequence. */
    record Streamed(List<String> pieces, int heldBack) {
        String joined() {
            return String.join("", pieces);
        }
    }

    static Streamed stream(int[] ids) {
        StreamingDetokenizer d = new StreamingDetokenizer(tok);
        List<String> pieces = new ArrayList<>();
        int held = 0;
        for (int id : ids) {
            pieces.add(d.push(id));
            assertTrue(d.pendingBytes() <= 3, "at most 3 bytes of one character are held");
            if (d.pendingBytes() > 0) held++;
        }
        pieces.add(d.flush());
        assertEquals(0, d.pendingBytes());
        return new Streamed(pieces, held);
    }

    /** All pieces of streaming ids through t, joined. */
    static String streamWith(Tokenizer t, int[] ids) {
        StreamingDetokenizer d = t.streamer();
        StringBuilder sb = new StringBuilder();
        for (int id : ids) sb.append(d.push(id));
        return sb.append(d.flush()).toString();
    }

    /** A piece is well formed when it has no unpaired surrogate, i.e. it is exactly representable as UTF-8. */
    static boolean wellFormed(String s) {
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (Character.isHighSurrogate(c)) {
                if (i + 1 >= s.length() || !Character.isLowSurrogate(s.charAt(i + 1))) return false;
                i++;
            } else if (Character.isLowSurrogate(c)) return false;
        }
        return true;
    }

    @Test
    void corpusPiecesConcatenateToTheFullDecode() {
        int wideLines = 0, wideHeld = 0;
        for (String line : Corpus.lines()) {
            int[] ids = tok.encode(line);
            Streamed s = stream(ids);
            assertEquals(tok.decode(ids), s.joined(), line);
            assertEquals(line, s.joined(), line);
            for (String p : s.pieces()) {
                assertTrue(wellFormed(p), "piece of " + line);
                assertFalse(p.contains("\uFFFD"), "no replacement char in a piece of valid text: " + line);
            }
            if (line.codePoints().anyMatch(cp -> cp >= 0x10000)) {
                assertTrue(s.heldBack() > 0, "a supplementary character is split across tokens in: " + line);
            }
            if (Corpus.hasWideChars(line)) {
                wideLines++;
                wideHeld += s.heldBack();
            }
        }
        assertTrue(wideLines >= 10, "corpus has " + wideLines + " CJK/emoji lines");
        assertTrue(wideHeld >= 50, "only " + wideHeld + " held-back tokens over the CJK/emoji lines");
        String all = Corpus.raw();
        assertEquals(all, stream(tok.encode(all)).joined());
    }

    @Test
    void splitCharacterIsHeldUntilComplete() {
        String text = "🧑🏽‍💻";
        int[] ids = tok.encode(text);
        assertTrue(ids.length > 1, "the emoji takes several byte-level tokens");
        StreamingDetokenizer d = tok.streamer();
        StringBuilder sb = new StringBuilder();
        boolean sawEmptyPiece = false;
        for (int id : ids) {
            String p = d.push(id);
            sawEmptyPiece |= p.isEmpty();
            assertTrue(wellFormed(p), p);
            sb.append(p);
            // whatever has come out so far is a prefix of whole code points of the text
            assertTrue(text.startsWith(sb.toString()), sb.toString());
        }
        sb.append(d.flush());
        assertTrue(sawEmptyPiece, "some token completed no character");
        assertEquals(text, sb.toString());
    }

    /** Random byte-level tokens make invalid and truncated UTF-8; streaming must replace it exactly like decode. */
    @Test
    void invalidSequencesMatchTheFullDecode() {
        List<Integer> pool = new ArrayList<>();
        for (int id = 0; id < tok.vocabSize(); id++) {
            byte[] b = tok.tokenBytes(id);
            if (b.length <= 2 && (b[0] & 0x80) != 0) pool.add(id); // lone lead/continuation bytes and pairs
        }
        assertTrue(pool.size() > 100, "pool " + pool.size());
        int[] extra = tok.encode("a 你好 😀 é");
        Random r = new Random(7);
        for (int round = 0; round < 400; round++) {
            int[] ids = new int[1 + r.nextInt(30)];
            for (int i = 0; i < ids.length; i++) {
                ids[i] = r.nextInt(4) == 0 ? extra[r.nextInt(extra.length)] : pool.get(r.nextInt(pool.size()));
            }
            Streamed s = stream(ids);
            assertEquals(tok.decode(ids), s.joined(), () -> "ids " + java.util.Arrays.toString(ids));
            for (String p : s.pieces()) assertTrue(wellFormed(p));
        }
    }

    @Test
    void wholeVocabularyStreamsLikeDecode() {
        int[] ids = new int[tok.vocabSize()];
        for (int i = 0; i < ids.length; i++) ids[i] = i;
        assertEquals(tok.decode(ids), stream(ids).joined());
    }

    @Test
    void truncatedCharacterAtTheEndIsReplacedByFlush() {
        int[] ids = tok.encode("ok 😀");
        int[] cut = java.util.Arrays.copyOf(ids, ids.length - 1);
        StreamingDetokenizer d = tok.streamer();
        StringBuilder sb = new StringBuilder();
        for (int id : cut) sb.append(d.push(id));
        assertTrue(d.pendingBytes() > 0);
        String tail = d.flush();
        assertEquals(tok.decode(cut), sb + tail);
        assertTrue(tail.contains("\uFFFD"));
    }

    /**
     * At a cut the start of a character whose rest was never generated is no text: dropped, not a U+FFFD, and the
     * detokenizer is reset as by flush. Bytes that can never be a character stay U+FFFD, cut or not.
     */
    @Test
    void aCutDropsTheIncompleteCharacterAtTheEnd() {
        int[] ids = tok.encode("ok 😀");
        int[] cut = java.util.Arrays.copyOf(ids, ids.length - 1);
        StreamingDetokenizer d = tok.streamer();
        StringBuilder sb = new StringBuilder();
        for (int id : cut) sb.append(d.push(id));
        assertTrue(d.pendingBytes() > 0, "the case this test is about: a character's first bytes are held");
        assertEquals("", d.flush(true));
        assertEquals("ok ", sb.toString());
        assertEquals(0, d.pendingBytes());
        assertEquals(0, d.tokenCount());
        // reused after the cut: nothing of the dropped bytes is left to join the next sequence's text
        StringBuilder next = new StringBuilder();
        for (int id : ids) next.append(d.push(id));
        assertEquals("ok 😀", next.append(d.flush(true)).toString());
        // a byte no character begins with is malformed, not cut: U+FFFD as decode gives it
        int lone = -1;
        for (int id = 0; id < tok.vocabSize() && lone < 0; id++) {
            byte[] b = tok.tokenBytes(id);
            if (b.length == 1 && (b[0] & 0xC0) == 0x80) lone = id;
        }
        assertTrue(lone >= 0, "a token of one continuation byte");
        assertEquals(tok.decode(new int[]{lone}), d.push(lone) + d.flush(true));
        assertEquals("\uFFFD", tok.decode(new int[]{lone}));
    }

    @Test
    void flushResetsForReuseAndBadIdsLeaveStateAlone() {
        StreamingDetokenizer d = tok.streamer();
        int[] ids = tok.encode("第一 😀");
        int[] prefix = java.util.Arrays.copyOf(ids, ids.length - 1);
        StringBuilder sb = new StringBuilder();
        for (int id : prefix) sb.append(d.push(id));
        int pending = d.pendingBytes();
        assertThrows(IllegalArgumentException.class, () -> d.push(-3));
        assertEquals(pending, d.pendingBytes());
        sb.append(d.push(ids[ids.length - 1])).append(d.flush());
        assertEquals("第一 😀", sb.toString());
        assertEquals(0, d.tokenCount());
        StringBuilder again = new StringBuilder();
        for (int id : tok.encode("再见")) again.append(d.push(id));
        assertEquals("再见", again.append(d.flush()).toString());
    }

    @Test
    void manyTokensStreamQuickly() {
        int[] ids = tok.encode(Corpus.raw());
        StreamingDetokenizer d = tok.streamer();
        long chars = 0;
        long t0 = System.nanoTime();
        for (int rep = 0; rep < 200; rep++) {
            for (int id : ids) chars += d.push(id).length();
        }
        chars += d.flush().length();
        double ms = (System.nanoTime() - t0) / 1e6;
        assertEquals(200L * Corpus.raw().length(), chars);
        assertTrue(ms < 20_000, ids.length * 200 + " tokens took " + ms + " ms");
    }
}
