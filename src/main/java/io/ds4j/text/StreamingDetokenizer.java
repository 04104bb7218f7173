package io.ds4j.text;

import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharsetDecoder;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;

/**
 * Turns generated token ids into text one token at a time. Each {@link #push} returns only text that is
 * complete: bytes of a UTF-8 character split across tokens (CJK, emoji, ...) are held back until the character
 * is whole. Bytes that can never become valid UTF-8 are emitted as U+FFFD at once, exactly as decoding the whole
 * sequence would, so the concatenation of all pieces and {@link #flush()} equals {@code tokenizer.decode(allIds)}
 * ({@link #flush(boolean)} at a cut leaves out the incomplete character at the end).
 * No piece ever ends in the middle of a character or a surrogate pair.
 *
 * <p>O(1) amortised per token (an incremental UTF-8 decoder over each token's bytes). Not thread-safe: one
 * instance per generated sequence.
 */
public final class StreamingDetokenizer {
    private final Tokenizer tokenizer;
    private final CharsetDecoder decoder = StandardCharsets.UTF_8.newDecoder()
            .onMalformedInput(CodingErrorAction.REPLACE)
            .onUnmappableCharacter(CodingErrorAction.REPLACE)
            .replaceWith("\uFFFD");
    /** Bytes not yet decoded (an incomplete character), kept in write mode: [0, position). */
    private ByteBuffer pending = ByteBuffer.allocate(64);
    private CharBuffer chars = CharBuffer.allocate(64);
    private long tokens;

    /** A detokenizer for ids of the given tokenizer. */
    public StreamingDetokenizer(Tokenizer tokenizer) {
        this.tokenizer = java.util.Objects.requireNonNull(tokenizer, "tokenizer");
    }

    /**
     * Adds one token and returns the text it completes (possibly empty, possibly including held-back bytes of
     * earlier tokens).
     * @throws IllegalArgumentException when id is not a token of the tokenizer (the state is unchanged)
     */
    public String push(int id) {
        byte[] b = tokenizer.tokenBytes(id);
        tokens++;
        return decode(b, false);
    }

    /**
     * Ends the sequence: returns whatever is still held back (an incomplete character becomes U+FFFD) and resets
     * the detokenizer so it can be used for a new sequence.
     */
    public String flush() {
        return flush(false);
    }

    /**
     * Ends the sequence, as {@link #flush()}, but where the output was cut (a length limit, a stop) the bytes held back
     * are dropped instead: they are the start of a character whose rest was never generated, so they are no text (a
     * U+FFFD would be a character the model did not write). The pieces then join to the decoded ids without that
     * incomplete character.
     *
     * @param cut the sequence was cut short rather than ended by the model
     */
    public String flush(boolean cut) {
        if (cut) pending.clear();
        String s = decode(new byte[0], true);
        decoder.reset();
        pending.clear();
        tokens = 0;
        return s;
    }

    /** Number of bytes held back, waiting for the rest of a character (0 to 3). */
    public int pendingBytes() {
        return pending.position();
    }

    /** The bytes held back, waiting for the rest of a character (a copy, 0 to 3 bytes). */
    public byte[] heldBytes() {
        byte[] out = new byte[pending.position()];
        pending.duplicate().flip().get(out);
        return out;
    }

    /**
     * How many chars a fresh detokenizer gives for these bytes pushed together and flushed: malformed sequences as one
     * U+FFFD each, and so an incomplete character at the end (so only bytes that end on a character's end decode to
     * exactly the chars of a text they begin).
     */
    public static int decodedLength(byte[] bytes) {
        CharsetDecoder d = StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPLACE)
                .onUnmappableCharacter(CodingErrorAction.REPLACE).replaceWith("\uFFFD");
        CharBuffer out = CharBuffer.allocate(bytes.length * 2 + 2);
        d.decode(ByteBuffer.wrap(bytes), out, true);
        d.flush(out);
        return out.position();
    }

    /** Number of tokens pushed since creation or the last {@link #flush()}. */
    public long tokenCount() {
        return tokens;
    }

    private String decode(byte[] b, boolean end) {
        if (pending.remaining() < b.length) {
            ByteBuffer bigger = ByteBuffer.allocate(Math.max(pending.capacity() * 2, pending.position() + b.length));
            pending.flip();
            bigger.put(pending);
            pending = bigger;
        }
        pending.put(b);
        pending.flip();
        // every byte yields at most one char (a 4-byte sequence yields two), so this many chars always suffice
        if (chars.capacity() < pending.remaining()) chars = CharBuffer.allocate(Math.max(chars.capacity() * 2, pending.remaining()));
        chars.clear();
        while (decoder.decode(pending, chars, end).isOverflow()) chars = grow(chars);
        if (end) while (decoder.flush(chars).isOverflow()) chars = grow(chars);
        pending.compact();
        chars.flip();
        return chars.length() == 0 ? "" : chars.toString();
    }

    private static CharBuffer grow(CharBuffer c) {
        CharBuffer bigger = CharBuffer.allocate(c.capacity() * 2);
        c.flip();
        return bigger.put(c);
    }
}
