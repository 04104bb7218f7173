package io.ds4j.text;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/** The multilingual test corpus: one case per line, markers ␤ ␍ ␉ for "\n" "\r" "\t". */
final class Corpus {
    private Corpus() {}

    static final String RESOURCE = "/io/ds4j/text/multilingual-corpus.txt";

    /** The raw file text. */
    static String raw() {
        try (InputStream in = Corpus.class.getResourceAsStream(RESOURCE)) {
            if (in == null) throw new IllegalStateException("missing " + RESOURCE);
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The cases, markers expanded; lines are split on "\n" only, so a real CR stays part of its line. */
    static List<String> lines() {
        List<String> out = new ArrayList<>();
        for (String line : raw().split("\n", -1)) {
            if (line.isEmpty() || line.startsWith("# ")) continue;
            out.add(line.replace('␤', '\n').replace('␍', '\r').replace('␉', '\t'));
        }
        return out;
    }

    /** True when the text has CJK, kana, hangul or a supplementary-plane character (emoji etc.). */
    static boolean hasWideChars(String s) {
        return s.codePoints().anyMatch(cp -> cp >= 0x10000 || (cp >= 0x2E80 && cp <= 0x9FFF) || (cp >= 0xAC00 && cp <= 0xD7AF));
    }
}
