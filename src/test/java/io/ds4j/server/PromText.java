package io.ds4j.server;

import java.util.HashMap;
import java.util.Map;

/** Reads values out of Prometheus text (what /metrics serves), for tests. */
public final class PromText {
    private PromText() {}

    /**
     * The value of the first series of a metric whose labels include the given ones, or NaN when there is none.
     * @param text   Prometheus text
     * @param series a metric name, optionally with labels to match: {@code name} or {@code name{a="x",b="y"}}
     */
    public static double value(String text, String series) {
        int brace = series.indexOf('{');
        String name = brace < 0 ? series : series.substring(0, brace);
        Map<String, String> want = brace < 0 ? Map.of() : labels(series.substring(brace + 1, series.lastIndexOf('}')));
        for (String line : text.split("\n")) {
            if (!line.startsWith(name)) continue;
            String rest = line.substring(name.length());
            Map<String, String> have;
            if (rest.startsWith(" ")) {
                have = Map.of();
            } else if (rest.startsWith("{")) {
                int end = rest.lastIndexOf('}');
                have = labels(rest.substring(1, end));
                rest = rest.substring(end + 1);
            } else {
                continue;
            }
            if (have.entrySet().containsAll(want.entrySet())) return Double.parseDouble(rest.trim());
        }
        return Double.NaN;
    }

    /** The labels of a series: {@code a="x",b="y"} (values without escaped quotes, as the tests' are). */
    private static Map<String, String> labels(String s) {
        Map<String, String> m = new HashMap<>();
        int i = 0;
        while (i < s.length()) {
            int eq = s.indexOf('=', i);
            int close = s.indexOf('"', eq + 2);
            m.put(s.substring(i, eq).trim(), s.substring(eq + 2, close));
            i = close + 1;
            if (i < s.length() && s.charAt(i) == ',') i++;
        }
        return m;
    }
}
