package io.ds4j.text;

import java.util.ArrayList;
import java.util.List;

/**
 * A prompt as a chat template writes it, in pieces of two kinds: the template's own text, whose control-token strings
 * ({@code <｜User｜>}, {@code <｜end▁of▁sentence｜>}, {@code </think>}, ...) are control tokens, and text a client
 * supplied (message contents, names, tool definitions), which {@link Tokenizer#encode(PromptText)} tokenises as plain
 * text whatever it holds. So a message that quotes a role marker gives the model those characters, never a turn of
 * its own. Not thread-safe while being built.
 */
public final class PromptText {
    /**
     * One run of text of one kind.
     * @param text     its characters
     * @param template whether the template wrote it (its control-token strings are control tokens)
     */
    public record Piece(String text, boolean template) {}

    private final List<Piece> pieces = new ArrayList<>();
    private final StringBuilder open = new StringBuilder();
    private boolean openTemplate;
    private int length;

    /** Appends text of the template's own. */
    public PromptText template(String text) {
        return add(text, true);
    }

    /** Appends text a client supplied: plain text to the tokenizer. */
    public PromptText supplied(String text) {
        return add(text, false);
    }

    private PromptText add(String text, boolean template) {
        if (text.isEmpty()) return this;
        if (!open.isEmpty() && openTemplate != template) close();
        openTemplate = template;
        open.append(text);
        length += text.length();
        return this;
    }

    private void close() {
        pieces.add(new Piece(open.toString(), openTemplate));
        open.setLength(0);
    }

    /** The pieces in order, adjacent pieces of one kind merged; none is empty. */
    public List<Piece> pieces() {
        List<Piece> all = new ArrayList<>(pieces);
        if (!open.isEmpty()) all.add(new Piece(open.toString(), openTemplate));
        return all;
    }

    /** The whole text, both kinds together, as the template renders it. */
    @Override
    public String toString() {
        StringBuilder b = new StringBuilder(length);
        for (Piece p : pieces) b.append(p.text());
        return b.append(open).toString();
    }
}
