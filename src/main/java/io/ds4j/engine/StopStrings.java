package io.ds4j.engine;

import java.util.List;

/**
 * Streaming stop-string filter. Text goes in piece by piece, in whatever pieces the tokens produce; text comes out
 * as soon as it can no longer be the start of a stop string. A stop string never appears in the output: when one
 * completes, the text before it is released and {@link #stopped()} turns true.
 */
public final class StopStrings {
    private final List<String> stops;
    private final StringBuilder held = new StringBuilder();
    private boolean stopped;
    private String matched;

    /** @param stops the stop strings (none empty); an empty list passes everything through */
    public StopStrings(List<String> stops) {
        this.stops = stops == null ? List.of() : stops;
    }

    /**
     * Feeds a piece of generated text.
     * @return the text that is now certain to be output (possibly empty)
     */
    public String push(String piece) {
        if (stopped) return "";
        if (stops.isEmpty()) return piece;
        held.append(piece);
        int first = -1;
        for (String s : stops) {
            int i = held.indexOf(s);
            if (i >= 0 && (first < 0 || i < first)) {
                first = i;
                matched = s;
            }
        }
        if (first >= 0) {
            stopped = true;
            String out = held.substring(0, first);
            held.setLength(0);
            return out;
        }
        int keep = 0; // longest suffix of held that is a proper prefix of some stop string
        String h = held.toString();
        for (String s : stops) {
            for (int k = Math.min(s.length() - 1, h.length()); k > keep; k--) {
                if (h.regionMatches(h.length() - k, s, 0, k)) {
                    keep = k;
                    break;
                }
            }
        }
        String out = held.substring(0, held.length() - keep);
        held.delete(0, held.length() - keep);
        return out;
    }

    /** Text still held back at the end of generation (it matched no stop string), to be output. */
    public String flush() {
        String out = stopped ? "" : held.toString();
        held.setLength(0);
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
