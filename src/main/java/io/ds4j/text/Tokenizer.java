package io.ds4j.text;

import java.util.OptionalInt;

/**
 * A text tokenizer: text to token ids and back. Implementations are thread-safe.
 *
 * <p>Special-token strings written inside the text (for example {@code <｜User｜>}, {@code <｜Assistant｜>},
 * {@code <think>}) encode to their single ids, and {@link #decode} keeps special tokens as their text, so a
 * rendered chat prompt survives a round trip and a chat parser can see the markers in generated text. A prompt a chat
 * template wrote is encoded with {@link #encode(PromptText)}, which gives those ids to the template's own markers
 * only: text a client supplied is plain text there.
 */
public interface Tokenizer {

    /**
     * Encodes text to token ids. No BOS (or any other token) is added: put {@code <｜begin▁of▁sentence｜>} in
     * the text, or prepend {@link #bosId()} yourself.
     * @throws NullPointerException when text is null
     */
    int[] encode(String text);

    /**
     * Encodes a prompt a chat template wrote: control-token strings in its template pieces encode to their ids, as in
     * {@link #encode(String)}, while its supplied pieces are plain text, so they never give a control token (a
     * supplied {@code <｜end▁of▁sentence｜>} is the tokens of those characters, as for a tokenizer without added
     * tokens). Where no control-token string lies in or across the supplied pieces, the ids are those of
     * {@code encode(prompt.toString())}: the text between two template markers is tokenised in one piece.
     * @throws NullPointerException when prompt is null
     */
    int[] encode(PromptText prompt);

    /**
     * Decodes token ids to text, special tokens included as their text. Bytes that do not form valid UTF-8
     * become U+FFFD, as in Hugging Face {@code decode(ids, skip_special_tokens=False)}.
     * @throws IllegalArgumentException when an id is not a token of this tokenizer
     */
    String decode(int[] ids);

    /**
     * The exact bytes a token contributes to decoded text (UTF-8, possibly only part of a character); a fresh
     * array the caller may keep.
     * @throws IllegalArgumentException when id is not a token of this tokenizer
     */
    byte[] tokenBytes(int id);

    /**
     * Whether a token is a control token: one of the tokenizer's added tokens (BOS/EOS, chat role markers, think tags,
     * tool-call and fill-in-the-middle markers), which shape the format rather than carry text. Servers leave them out
     * of generated text unless asked to keep them (vLLM's {@code skip_special_tokens}). False for ids out of range.
     */
    default boolean isControl(int id) {
        return false;
    }

    /** Number of token ids, i.e. the largest id plus one (the model's embedding table may be larger). */
    int vocabSize();

    /**
     * The id of a token given its text: an added/special token by its content ({@code "<｜User｜>"}), a vocabulary
     * token by its vocabulary string (byte-level form, e.g. {@code "Ġworld"} for " world"). Empty when there is none.
     */
    OptionalInt id(String tokenText);

    /** Id of the beginning-of-sequence token ({@code <｜begin▁of▁sentence｜>} for DeepSeek). */
    int bosId();

    /** Id of the end-of-sequence token ({@code <｜end▁of▁sentence｜>} for DeepSeek). */
    int eosId();

    /** Where this tokenizer was loaded from (a file path, and for the vendored one the package it came from). */
    String source();

    /** A new streaming detokenizer over this tokenizer. */
    default StreamingDetokenizer streamer() {
        return new StreamingDetokenizer(this);
    }
}
