package io.ds4j.text;

import ai.djl.huggingface.tokenizers.HuggingFaceTokenizer;
import ai.djl.huggingface.tokenizers.jni.TokenizersLibrary;
import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.ref.Reference;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.FutureTask;
import java.util.OptionalInt;

/**
 * A Hugging Face {@code tokenizer.json} (byte-level BPE, as used by DeepSeek) run by DJL's native
 * {@code tokenizers} library, with truncation, padding and post-processor special tokens off.
 *
 * <p>Encoding and decoding call the native tokenizer directly, so the result is that of the Rust
 * {@code tokenizers} crate ({@code encode(text, add_special_tokens=False)}, {@code decode(ids,
 * skip_special_tokens=False)}) with no Java-side pre/post-processing (DJL's {@code add_prefix_space},
 * lower-casing and {@code clean_up_tokenization_spaces} handling are not applied). Per-token bytes for
 * streaming come from the vocabulary, read from the same file. Thread-safe; instances live as long as the JVM.
 *
 * <p>A chat prompt's supplied text ({@link #encode(PromptText)}) is tokenised by a second native tokenizer made from
 * the same file without its added tokens, which is what the {@code tokenizers} crate does to text in which special
 * tokens are not to be parsed; it is made the first time such text holds a control-token string.
 */
public final class HfTokenizer implements Tokenizer {
    static {
        Tokenizers.init(); // DJL offline flags before any DJL class initialises
    }

    private static final ObjectMapper MAPPER = new ObjectMapper();
    /** Reads tokenizer files: 128k distinct field names, whose canonicalising (interning) would cost seconds. */
    private static final JsonFactory FILE_JSON =
            JsonFactory.builder().configure(JsonFactory.Feature.CANONICALIZE_FIELD_NAMES, false).build();
    private static final String BOS_TEXT = "<｜begin▁of▁sentence｜>";
    private static final String EOS_TEXT = "<｜end▁of▁sentence｜>";
    /** What the native tokenizers are made with: no post-processor tokens, no truncation, no padding. */
    private static final Map<String, String> NATIVE_OPTIONS =
            Map.of("addSpecialTokens", "false", "truncation", "false", "padding", "false");

    private final HuggingFaceTokenizer hf;
    private final long handle;
    private final byte[][] bytes;
    private final Map<String, Integer> byText;
    /** Ids of the added tokens (chat markers, BOS/EOS, think tags): see {@link #isControl}. */
    private final java.util.BitSet control;
    private final int bos, eos;
    private final String source;
    /** The added tokens' texts by their first character, longest first: the template's markers are found with it. */
    private final Map<Character, String[]> controlTexts;
    /** The tokenizer file's bytes, until {@link #plain} is made from them. */
    private byte[] file;
    private volatile HuggingFaceTokenizer plain;

    private HfTokenizer(HuggingFaceTokenizer hf, byte[][] bytes, Map<String, Integer> byText, java.util.BitSet control,
                        Collection<String> controlTexts, byte[] file, int bos, int eos, String source) {
        this.hf = hf;
        this.control = control;
        this.controlTexts = byFirstChar(controlTexts);
        this.file = file;
        this.handle = hf.getHandle();
        this.bytes = bytes;
        this.byText = byText;
        this.bos = bos;
        this.eos = eos;
        this.source = source;
    }

    /**
     * Loads {@code tokenizerJson}; BOS/EOS come from {@code tokenizer_config.json} in the same folder when present
     * ({@code bos_token}/{@code eos_token}), else from the DeepSeek token names.
     * @param source what {@link #source()} reports
     * @throws IllegalArgumentException when the file is missing or unreadable, is not a byte-level BPE tokenizer,
     *         or BOS/EOS cannot be determined; the message names the file
     */
    public static HfTokenizer load(Path tokenizerJson, String source) {
        if (!Files.isRegularFile(tokenizerJson)) {
            throw new IllegalArgumentException("tokenizer file not found: " + tokenizerJson.toAbsolutePath());
        }
        String where = tokenizerJson.toAbsolutePath().toString();
        // the native load and the vocabulary parse both take a while: run them side by side
        FutureTask<HuggingFaceTokenizer> nativeLoad = new FutureTask<>(() -> HuggingFaceTokenizer.builder()
                .optTokenizerPath(tokenizerJson)
                .optTruncation(false)
                .optPadding(false)
                .optAddSpecialTokens(false)
                .build());
        Thread.ofPlatform().name("ds4j-tokenizer-load").daemon().start(nativeLoad);
        Parsed parsed;
        byte[] file;
        try {
            file = Files.readAllBytes(tokenizerJson);
            parsed = Parsed.read(file);
        } catch (IOException | RuntimeException e) {
            closeWhenLoaded(nativeLoad);
            throw new IllegalArgumentException("cannot read tokenizer " + where + ": " + e.getMessage(), e);
        }
        HuggingFaceTokenizer hf;
        try {
            hf = nativeLoad.get();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while loading tokenizer " + where, e);
        } catch (ExecutionException e) {
            Throwable c = e.getCause();
            throw new IllegalArgumentException("cannot load tokenizer " + where + ": " + c.getMessage(), c);
        }
        try {
            Vocab v = Vocab.build(parsed, content -> nativeEncode(hf, content), where);
            Path configFile = tokenizerJson.resolveSibling("tokenizer_config.json");
            int bos = specialId(v, configFile, "bos_token", BOS_TEXT, tokenizerJson);
            int eos = specialId(v, configFile, "eos_token", EOS_TEXT, tokenizerJson);
            return new HfTokenizer(hf, v.bytes, v.byText, v.added, parsed.added().keySet(), file, bos, eos, source);
        } catch (RuntimeException e) {
            hf.close();
            throw e;
        }
    }

    private static void closeWhenLoaded(FutureTask<HuggingFaceTokenizer> load) {
        try {
            load.get().close();
        } catch (Exception ignored) {
            // the caller reports its own error
        }
    }

    private static long[] nativeEncode(HuggingFaceTokenizer hf, String text) {
        long enc = TokenizersLibrary.LIB.encode(hf.getHandle(), text, false);
        try {
            return TokenizersLibrary.LIB.getTokenIds(enc);
        } finally {
            TokenizersLibrary.LIB.deleteEncoding(enc);
        }
    }

    @Override
    public int[] encode(String text) {
        Objects.requireNonNull(text, "text");
        return encode(hf, text);
    }

    /**
     * The template's markers are found here (leftmost, longest, as the native tokenizer finds added tokens) in its own
     * pieces only; the text between two of them, template and supplied alike, is tokenised in one piece, so that the
     * ids are those of the whole text wherever nothing supplied holds a control-token string. Where the native
     * tokenizer does find one in such a run, it was supplied (or spans a supplied piece's edge), and the run is
     * tokenised again without added tokens.
     */
    @Override
    public int[] encode(PromptText prompt) {
        Objects.requireNonNull(prompt, "prompt");
        List<int[]> parts = new ArrayList<>();
        StringBuilder run = new StringBuilder();
        for (PromptText.Piece p : prompt.pieces()) {
            String s = p.text();
            if (!p.template()) {
                run.append(s);
                continue;
            }
            int from = 0;
            for (int i = 0; i < s.length(); ) {
                String marker = controlAt(s, i);
                if (marker == null) {
                    i++;
                    continue;
                }
                run.append(s, from, i);
                encodeRun(run, parts);
                parts.add(new int[] {byText.get(marker)});
                i += marker.length();
                from = i;
            }
            run.append(s, from, s.length());
        }
        encodeRun(run, parts);
        int n = 0;
        for (int[] part : parts) n += part.length;
        int[] out = new int[n];
        int at = 0;
        for (int[] part : parts) {
            System.arraycopy(part, 0, out, at, part.length);
            at += part.length;
        }
        return out;
    }

    /** Tokenises the run between two markers (then empties it): as text, or without added tokens where it holds one. */
    private void encodeRun(StringBuilder run, List<int[]> parts) {
        if (run.isEmpty()) return;
        String text = run.toString();
        run.setLength(0);
        int[] ids = encode(hf, text);
        for (int id : ids) {
            if (isControl(id)) {
                ids = encode(plain(), text);
                break;
            }
        }
        parts.add(ids);
    }

    /** The longest added token's text that starts at s[i], or null. */
    private String controlAt(String s, int i) {
        String[] candidates = controlTexts.get(s.charAt(i));
        if (candidates == null) return null;
        for (String c : candidates) if (s.startsWith(c, i)) return c;
        return null;
    }

    private static Map<Character, String[]> byFirstChar(Collection<String> texts) {
        Map<Character, List<String>> lists = new HashMap<>();
        for (String t : texts) if (!t.isEmpty()) lists.computeIfAbsent(t.charAt(0), c -> new ArrayList<>()).add(t);
        Map<Character, String[]> out = new HashMap<>();
        lists.forEach((c, l) -> {
            l.sort(Comparator.comparingInt(String::length).reversed());
            out.put(c, l.toArray(String[]::new));
        });
        return out;
    }

    /** The native tokenizer without added tokens, made on first use (about a second for DeepSeek's). */
    private HuggingFaceTokenizer plain() {
        HuggingFaceTokenizer p = plain;
        if (p != null) return p;
        synchronized (this) {
            if (plain == null) {
                try {
                    plain = HuggingFaceTokenizer.newInstance(new ByteArrayInputStream(Parsed.withoutAddedTokens(file)),
                            NATIVE_OPTIONS);
                } catch (IOException e) {
                    throw new UncheckedIOException("cannot make the tokenizer " + source + " without its added tokens: "
                            + e.getMessage(), e);
                }
                file = null;
            }
            return plain;
        }
    }

    private static int[] encode(HuggingFaceTokenizer with, String text) {
        if (text.isEmpty()) return new int[0];
        long enc = TokenizersLibrary.LIB.encode(with.getHandle(), replaceLoneSurrogates(text), false);
        long[] ids;
        try {
            ids = TokenizersLibrary.LIB.getTokenIds(enc);
        } finally {
            TokenizersLibrary.LIB.deleteEncoding(enc);
            Reference.reachabilityFence(with); // DJL frees the native tokenizer when it is finalised
        }
        int[] out = new int[ids.length];
        for (int i = 0; i < ids.length; i++) out[i] = (int) ids[i];
        return out;
    }

    @Override
    public String decode(int[] ids) {
        long[] l = new long[ids.length];
        for (int i = 0; i < ids.length; i++) {
            check(ids[i]);
            l[i] = ids[i];
        }
        if (l.length == 0) return "";
        try {
            return TokenizersLibrary.LIB.decode(handle, l, false);
        } finally {
            Reference.reachabilityFence(hf);
        }
    }

    @Override
    public byte[] tokenBytes(int id) {
        return check(id).clone();
    }

    @Override
    public boolean isControl(int id) {
        return id >= 0 && control.get(id);
    }

    @Override
    public int vocabSize() {
        return bytes.length;
    }

    @Override
    public OptionalInt id(String tokenText) {
        Integer id = byText.get(tokenText);
        return id == null ? OptionalInt.empty() : OptionalInt.of(id);
    }

    @Override
    public int bosId() {
        return bos;
    }

    @Override
    public int eosId() {
        return eos;
    }

    @Override
    public String source() {
        return source;
    }

    @Override
    public String toString() {
        return "HfTokenizer[" + source + ", " + bytes.length + " ids]";
    }

    private byte[] check(int id) {
        byte[] b = id >= 0 && id < bytes.length ? bytes[id] : null;
        if (b == null) throw new IllegalArgumentException("token id " + id + " is not in the tokenizer (" + bytes.length + " ids)");
        return b;
    }

    /** Unpaired UTF-16 surrogates cannot cross into the native library; they become U+FFFD, as UTF-8 encoding would. */
    static String replaceLoneSurrogates(String s) {
        int n = s.length();
        StringBuilder sb = null;
        for (int i = 0; i < n; i++) {
            char c = s.charAt(i);
            if (!Character.isSurrogate(c)) {
                if (sb != null) sb.append(c);
                continue;
            }
            boolean paired = Character.isHighSurrogate(c) && i + 1 < n && Character.isLowSurrogate(s.charAt(i + 1));
            if (paired) {
                if (sb != null) sb.append(c).append(s.charAt(i + 1));
                i++;
            } else {
                if (sb == null) sb = new StringBuilder(n).append(s, 0, i);
                sb.append('\uFFFD');
            }
        }
        return sb == null ? s : sb.toString();
    }

    private static int specialId(Vocab v, Path configFile, String field, String fallback, Path tokenizerJson) {
        String text = null;
        if (Files.isRegularFile(configFile)) {
            try {
                JsonNode n = MAPPER.readTree(configFile.toFile()).path(field);
                if (n.isTextual()) text = n.asText();
                else if (n.isObject() && n.path("content").isTextual()) text = n.path("content").asText();
            } catch (IOException e) {
                throw new IllegalArgumentException("cannot read " + configFile.toAbsolutePath() + ": " + e.getMessage(), e);
            }
        }
        String used = text != null ? text : fallback;
        Integer id = v.byText.get(used);
        if (id == null) {
            throw new IllegalArgumentException("tokenizer " + tokenizerJson.toAbsolutePath() + " has no token " + used + " for "
                    + field + (text != null ? " (named in " + configFile.toAbsolutePath() + ")" : " (no tokenizer_config.json names one)"));
        }
        return id;
    }

    /** What ds4j reads from a tokenizer.json itself: the model vocabulary and the added tokens with their declared ids. */
    private record Parsed(Map<String, Integer> vocab, Map<String, Integer> added) {
        static Parsed read(byte[] file) throws IOException {
            Map<String, Integer> vocab = null;
            Map<String, Integer> added = new LinkedHashMap<>();
            String modelType = null;
            JsonNode decoder = null;
            try (JsonParser p = FILE_JSON.createParser(file)) {
                if (p.nextToken() != JsonToken.START_OBJECT) throw new IOException("not a JSON object");
                while (p.nextToken() == JsonToken.FIELD_NAME) {
                    String name = p.currentName();
                    p.nextToken();
                    switch (name) {
                        case "added_tokens" -> {
                            if (p.currentToken() != JsonToken.START_ARRAY) throw new IOException("added_tokens is not an array");
                            while (p.nextToken() == JsonToken.START_OBJECT) {
                                JsonNode t = MAPPER.readTree(p);
                                if (!t.path("id").isInt() || !t.path("content").isTextual()) throw new IOException("bad added token " + t);
                                added.put(t.get("content").asText(), t.get("id").asInt());
                            }

                        }
                        case "decoder" -> decoder = MAPPER.readTree(p);
                        case "model" -> {
                            if (p.currentToken() != JsonToken.START_OBJECT) throw new IOException("model is not an object");
                            while (p.nextToken() == JsonToken.FIELD_NAME) {
                                String f = p.currentName();
                                p.nextToken();
                                if (f.equals("type")) modelType = p.getValueAsString();
                                else if (f.equals("vocab") && p.currentToken() == JsonToken.START_OBJECT) {
                                    vocab = new HashMap<>(1 << 18);
                                    while (p.nextToken() == JsonToken.FIELD_NAME) {
                                        String tok = p.currentName();
                                        p.nextToken();
                                        int id = p.getIntValue();
                                        if (id < 0) throw new IOException("negative id for token " + tok);
                                        vocab.put(tok, id);
                                    }
                                } else p.skipChildren();
                            }
                        }
                        default -> p.skipChildren();
                    }
                }
            }
            if (vocab == null) throw new IOException("no model.vocab object (model type " + modelType + ")");
            if (!"BPE".equals(modelType)) throw new IOException("model type " + modelType + " is not supported (need BPE)");
            if (!Vocab.isByteLevel(decoder)) {
                throw new IOException("decoder " + (decoder == null ? "null" : decoder.path("type").asText())
                        + " is not supported (need a ByteLevel decoder, i.e. a byte-level BPE tokenizer)");
            }
            return new Parsed(vocab, added);
        }

        /** A tokenizer.json (known to be a JSON object) with an empty added_tokens array; everything else as it is. */
        static byte[] withoutAddedTokens(byte[] file) throws IOException {
            java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream(file.length);
            try (JsonParser p = FILE_JSON.createParser(file); JsonGenerator g = FILE_JSON.createGenerator(out)) {
                p.nextToken();
                g.writeStartObject();
                while (p.nextToken() == JsonToken.FIELD_NAME) {
                    String name = p.currentName();
                    p.nextToken();
                    g.writeFieldName(name);
                    if (name.equals("added_tokens")) {
                        p.skipChildren();
                        g.writeStartArray();
                        g.writeEndArray();
                    } else {
                        g.copyCurrentStructure(p);
                    }
                }
                g.writeEndObject();
            }
            return out.toByteArray();
        }
    }

    /** The tables ds4j keeps: bytes per id and id per token text. */
    private record Vocab(byte[][] bytes, Map<String, Integer> byText, java.util.BitSet added) {
        /** GPT-2 byte-level alphabet, reversed: char → byte, or -1. */
        private static final int[] CHAR_TO_BYTE = charToByte();

        /**
         * Builds the tables. Added tokens take the id the native tokenizer really gives them ({@code tokenizers}
         * renumbers added tokens that are not in the model vocabulary to follow it, whatever id the file declares).
         */
        static Vocab build(Parsed parsed, java.util.function.Function<String, long[]> encodeNative, String where) {
            Map<String, Integer> vocab = parsed.vocab();
            Map<String, Integer> addedIds = new LinkedHashMap<>();
            for (String content : parsed.added().keySet()) {
                long[] ids = encodeNative.apply(content);
                if (ids.length != 1) {
                    throw new IllegalArgumentException("tokenizer " + where + ": added token " + content
                            + " does not encode to a single id (got " + ids.length + ")");
                }
                addedIds.put(content, (int) ids[0]);
            }
            int max = -1;
            for (int id : vocab.values()) max = Math.max(max, id);
            for (int id : addedIds.values()) max = Math.max(max, id);
            if (max < 0) throw new IllegalArgumentException("tokenizer " + where + " has an empty vocabulary");
            byte[][] bytes = new byte[max + 1][];
            java.util.BitSet added = new java.util.BitSet(max + 1);
            for (var e : vocab.entrySet()) bytes[e.getValue()] = byteLevelBytes(e.getKey());
            for (var e : addedIds.entrySet()) { // added tokens win, as in the native id_to_token
                bytes[e.getValue()] = byteLevelBytes(e.getKey());
                vocab.put(e.getKey(), e.getValue());
                added.set(e.getValue());
            }
            return new Vocab(bytes, vocab, added); // never modified after this
        }

        static boolean isByteLevel(JsonNode d) {
            if (d == null || d.isNull()) return false;
            String type = d.path("type").asText();
            if (type.equals("ByteLevel")) return true;
            JsonNode list = d.path("decoders");
            return type.equals("Sequence") && list.size() == 1 && isByteLevel(list.get(0));
        }

        /**
         * What the ByteLevel decoder turns one token into: each char mapped back through the byte-level alphabet,
         * or, when any char is outside it (added tokens such as {@code <｜User｜>}), the token's own UTF-8.
         */
        static byte[] byteLevelBytes(String token) {
            byte[] out = new byte[token.length()];
            for (int i = 0; i < token.length(); i++) {
                char c = token.charAt(i);
                int b = c < CHAR_TO_BYTE.length ? CHAR_TO_BYTE[c] : -1;
                if (b < 0) return token.getBytes(StandardCharsets.UTF_8);
                out[i] = (byte) b;
            }
            return out;
        }

        private static int[] charToByte() {
            int[] t = new int[512];
            Arrays.fill(t, -1);
            int next = 256;
            for (int b = 0; b < 256; b++) {
                boolean printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
                t[printable ? b : next++] = b;
            }
            return t;
        }
    }
}
