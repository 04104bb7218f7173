package io.ds4j.engine;

import java.util.List;

/**
 * Streaming stop-string filter. Text goes in piece by piece, in whatever pieces the tokens produce; text comes out
 * as soon as it can no longer be the start of a stop string. By default a stop string never appears in the output:
 * when one completes, the text before it is released and {@link #stopped()} turns true. With the stop string kept
 * (vLLM's {@code include_stop_str_in_output}) the output ends right after it instead, and nothing is held back: text
 * that may begin a stop string is output whether or not the stop string completes.
 */
public final class StopStrings {
    private final List<String> stops;
    /** Keep the matched stop string at the end of the output. */
    private final boolean keep;
    /**
     * Text a stop string may still complete: the current piece and, before it, the longest suffix of earlier text that
     * begins a stop string. Its first {@link #released} characters have been output already (only when {@link #keep}).
     */
    private final StringBuilder held = new StringBuilder();
    private int released;
    private boolean stopped;
    private String matched;

    /** @param stops the stop strings (none empty); an empty list passes everything through */
    public StopStrings(List<String> stops) {
        this(stops, false);
    }

    /**
     * @param stops the stop strings (none empty); an empty list passes everything through
     * @param keep  the matched stop string ends the output (it is left out by default)
     */
    public StopStrings(List<String> stops, boolean keep) {
        this.stops = stops == null ? List.of() : stops;
        this.keep = keep;
    }

    /**
     * Feeds a piece of generated text.
     * @return the text that is now certain to be output (possibly empty)
     */
    public String push(String piece) {
        return push(piece, true);
    }

    /**
     * Feeds a piece of generated text; unless {@code armed}, no stop string completes in it (vLLM's min_tokens: stop
     * strings are looked for only in text generated after that many tokens), though one may begin in it and complete
     * in a later, armed piece.
     * @return the text that is now certain to be output (possibly empty)
     */
    public String push(String piece, boolean armed) {
        if (stopped) return "";
        if (stops.isEmpty()) return piece;
        int before = held.length();
        held.append(piece);
        int first = -1, end = -1;
        if (armed) for (String s : stops) {
            // only a match that completes in this piece: the text held from an unarmed piece may hold a whole stop
            // string (inside the start of a longer one), which completed where no stop string may end the output
            int i = held.indexOf(s, Math.max(0, before - s.length() + 1));
            if (i < 0) continue;
            int e = i + s.length();
            // left out, the earliest one to begin cuts the most; kept, the output ends where the first one completes,
            // whatever the pieces (a later-ending match that began earlier would end it in one split and not another)
            if (first < 0 || (keep ? e < end || e == end && i < first : i < first)) {
                first = i;
                end = e;
                matched = s;
            }
        }
        if (first >= 0) {
            stopped = true;
            // the match ends in the piece, past what was released already
            String out = held.substring(released, keep ? end : first);
            held.setLength(0);
            released = 0;
            return out;
        }
        int hold = 0; // longest suffix of held that is a proper prefix of some stop string
        String h = held.toString();
        for (String s : stops) {
            for (int k = Math.min(s.length() - 1, h.length()); k > hold; k--) {
                if (h.regionMatches(h.length() - k, s, 0, k)) {
                    hold = k;
                    break;
                }
            }
        }
        // kept stop strings are output either way: all of it goes out, the suffix stays only to be matched against
        String out = keep ? h.substring(released) : h.substring(0, h.length() - hold);
        held.delete(0, held.length() - hold);
        released = keep ? hold : 0;
        return out;
    }

    /** Text still held back at the end of generation (it matched no stop string), to be output. */
    public String flush() {
        String out = stopped ? "" : held.substring(released);
        held.setLength(0);
        released = 0;
        return out;
    }

    /** True once a stop string has been seen. */
    public boolean stopped() {
        return stopped;
    }

    /** The stop string that ended generation, or null. */
    public String matched() {
        return matched;
    }
}
