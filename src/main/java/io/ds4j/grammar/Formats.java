package io.ds4j.grammar;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * The patterns of the {@link Regex} subset values are held to beside JSON's own grammar: integers between bounds
 * ({@link #integers}), and the string {@code format}s a schema may hold a string to, each as a pattern (and, where
 * the format limits it, a longest length). Each pattern admits only values the format's definition accepts, sometimes
 * fewer, so an output is valid whatever validator reads it: the letters {@code T} and {@code Z} upper case only,
 * seconds to 59 (no leap second), at most 9 fraction digits, offsets within ±18:00, at most 9 digits per duration part, an e-mail address of
 * one to three dot-separated atoms (64 characters at most) at a host name whose last label is letters.
 */
final class Formats {
    private Formats() {}

    /** A format's pattern and its longest length in characters (−1: none beyond the pattern's). */
    record Format(Regex re, int maxLength) {}

    private static final String DIGIT = "[0-9]", HEX = "[0-9a-fA-F]";
    /** Days 01 to 28, which every month has. */
    private static final String DAY28 = "(?:0[1-9]|1[0-9]|2[0-8])";
    /** Years divisible by 4 and not by 100, or by 400 (the Gregorian leap years, year 0000 included). */
    private static final String LEAP = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[048]|[2468][048]|[13579][26])00)";
    /** RFC 3339 full-date, the day within its month (29 February in leap years only). */
    static final String DATE = "(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:" + DAY28 + "|29|3[01])|(?:0[469]|11)-(?:" + DAY28
            + "|29|30)|02-" + DAY28 + ")|" + LEAP + "-02-29)";
    private static final String HOUR = "(?:[01][0-9]|2[0-3])", MINUTE = "[0-5][0-9]";
    /**
     * RFC 3339 full-time: a time with its offset from UTC, the offset within ±18:00 (RFC 3339 allows up to 23:59, but
     * java.time and other readers refuse more than 18 hours, and no zone is that far).
     */
    static final String TIME = HOUR + ":" + MINUTE + ":" + MINUTE + "(?:\\.[0-9]{1,9})?(?:Z|[+-](?:(?:0[0-9]|1[0-7]):" + MINUTE + "|18:00))";
    /** RFC 3339 appendix A's duration, each number 1 to 9 digits. */
    static final String DURATION;
    private static final String OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
    static final String IPV4 = OCTET + "(?:\\." + OCTET + "){3}";
    /** RFC 1123 host name labels: letters, digits and hyphens, 1 to 63, no hyphen first or last. */
    private static final String LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
    static final String HOSTNAME = LABEL + "(?:\\." + LABEL + ")*";
    /** RFC 5322's atext, what a dot-atom's atoms are made of. */
    private static final String ATEXT = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]";
    /**
     * A dot-atom local part within RFC 5321's 64 characters: one atom, or two or three dot-separated ones of bounded
     * length (a length over all atoms is no regular expression of a bounded size).
     */
    private static final String LOCAL = "(?:" + ATEXT + "{1,64}|" + ATEXT + "{1,31}\\." + ATEXT + "{1,32}|" + ATEXT + "{1,20}\\."
            + ATEXT + "{1,20}\\." + ATEXT + "{1,20})";
    static final String EMAIL = LOCAL + "@(?:" + LABEL + "\\.)+[A-Za-z]{2,63}";
    static final String UUID = HEX + "{8}-" + HEX + "{4}-" + HEX + "{4}-" + HEX + "{4}-" + HEX + "{12}";
    static final String IPV6;

    static {
        String n = DIGIT + "{1,9}";
        String second = n + "S", minute = n + "M(?:" + second + ")?", hour = n + "H(?:" + minute + ")?";
        String time = "T(?:" + hour + "|" + minute + "|" + second + ")";
        String day = n + "D", month = n + "M(?:" + day + ")?", year = n + "Y(?:" + month + ")?";
        DURATION = "P(?:(?:" + day + "|" + month + "|" + year + ")(?:" + time + ")?|" + time + "|" + n + "W)";

        // eight groups; six and an IPv4 address; or "::" standing for one or more zero groups, with l groups before it
        // and at most 7 − l after it (an IPv4 address counting as two)
        String h = HEX + "{1,4}";
        List<String> forms = new ArrayList<>();
        forms.add(h + "(?::" + h + "){7}");
        forms.add("(?:" + h + ":){6}" + IPV4);
        for (int l = 0; l <= 7; l++) {
            String left = l == 0 ? "" : h + (l > 1 ? "(?::" + h + "){" + (l - 1) + "}" : "");
            int right = 7 - l, beforeV4 = 5 - l;
            String groups = right == 0 ? "" : "(?:" + h + (right > 1 ? "(?::" + h + "){0," + (right - 1) + "}" : "") + ")?";
            String tail = beforeV4 < 0 ? groups
                    : "(?:" + groups + "|" + (beforeV4 > 0 ? "(?:" + h + ":){0," + beforeV4 + "}" : "") + IPV4 + ")";
            forms.add(left + "::" + tail);
        }
        IPV6 = String.join("|", forms);
    }

    /** The supported formats by name: their patterns are compiled on first use and shared by every schema. */
    private static final Map<String, java.util.function.Supplier<Format>> FORMATS = Map.of(
            "date-time", lazy(DATE + "T" + TIME, -1),
            "date", lazy(DATE, -1),
            "time", lazy(TIME, -1),
            "duration", lazy(DURATION, -1),
            "email", lazy(EMAIL, 254),
            "hostname", lazy(HOSTNAME, 253),
            "ipv4", lazy(IPV4, -1),
            "ipv6", lazy(IPV6, -1),
            "uuid", lazy(UUID, -1));

    /** The supported names, for messages. */
    static final String NAMES = "date-time, date, time, duration, email, hostname, ipv4, ipv6, uuid";

    private static java.util.function.Supplier<Format> lazy(String pattern, int maxLength) {
        return new java.util.function.Supplier<>() {
            private volatile Format f;

            @Override
            public Format get() {
                Format x = f;
                if (x == null) f = x = new Format(Regex.compile(pattern), maxLength);
                return x;
            }
        };
    }

    /**
     * A pattern of the integers from lo to hi as JSON writes them: no leading zero, no "-0", no fraction or exponent.
     * Each side of zero is split by digit count, and a run of one count by the first digit where its ends differ, so
     * the pattern grows with the digits, not with the range.
     */
    static String integers(long lo, long hi) {
        List<String> forms = new ArrayList<>();
        if (lo < 0) forms.add("-(?:" + positive(Math.max(1, -Math.min(hi, -1)), -lo) + ")");
        if (lo <= 0 && hi >= 0) forms.add("0");
        if (hi > 0) forms.add(positive(Math.max(1, lo), hi));
        return String.join("|", forms);
    }

    /** The integers from a to b, 1 ≤ a ≤ b, one run per digit count. */
    private static String positive(long a, long b) {
        List<String> runs = new ArrayList<>();
        String x = Long.toString(a), y = Long.toString(b);
        for (int len = x.length(); len <= y.length(); len++)
            runs.add(run(len == x.length() ? x : "1" + "0".repeat(len - 1), len == y.length() ? y : "9".repeat(len)));
        return String.join("|", runs);
    }

    /** The digit strings from x to y, of one length, x ≤ y. */
    private static String run(String x, String y) {
        int i = 0;
        while (i < x.length() && x.charAt(i) == y.charAt(i)) i++;
        if (i == x.length()) return x;
        String prefix = x.substring(0, i), xs = x.substring(i + 1), ys = y.substring(i + 1);
        char dx = x.charAt(i), dy = y.charAt(i);
        int rest = xs.length();
        String any = rest == 0 ? "" : "[0-9]{" + rest + "}";
        // from x's digit up with anything after it where x's rest is all zeros, and down to y's with y's rest all nines
        boolean low = xs.chars().allMatch(c -> c == '0'), high = ys.chars().allMatch(c -> c == '9');
        char from = low ? dx : (char) (dx + 1), to = high ? dy : (char) (dy - 1);
        List<String> parts = new ArrayList<>();
        if (!low) parts.add(dx + run(xs, "9".repeat(rest)));
        if (from <= to) parts.add((from == to ? String.valueOf(from) : "[" + from + "-" + to + "]") + any);
        if (!high) parts.add(dy + run("0".repeat(rest), ys));
        return prefix + (parts.size() == 1 ? parts.getFirst() : "(?:" + String.join("|", parts) + ")");
    }

    /** The format of a name, or null where it is not supported. */
    static Format of(String name) {
        var f = FORMATS.get(name);
        return f == null ? null : f.get();
    }
}
