package io.ds4j.grammar;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.junit.jupiter.api.Test;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The length steering's distance is a lower bound: for every state of a string held to a pattern, a format or a length
 * that the bytes of some output reach, dist() is at most the bytes of the shortest real completion. The states are
 * explored byte by byte (every byte of each state, deduplicated) and the completions found over them by a backward
 * search; a completion found is a real one, so dist() above it is an over-estimate even where the search is cut.
 */
class StrOfDistBoundTest {
    static final ObjectMapper M = new ObjectMapper();

    static ObjectNode str(String pattern, String format, int min, int max) {
        ObjectNode n = M.createObjectNode().put("type", "string");
        if (pattern != null) n.put("pattern", pattern);
        if (format != null) n.put("format", format);
        if (min >= 0) n.put("minLength", min);
        if (max >= 0) n.put("maxLength", max);
        return n;
    }

    static List<ObjectNode> schemas() {
        List<ObjectNode> l = new ArrayList<>();
        for (String p : List.of("^ab$", "^a\"b$", "^\"$", "^\\\\$", "^\\n$", "^[\\x00-\\x1f]$", "^\\u2028$", "^\\u2028x\\u2029$",
                "^\\u0085$", "^/$", "^\\t?x$", "^\uD83D\uDE00$", "^[\uD83D\uDE00a]{2}$", "^(?:red|green|blue)$", "^[0-9]+$",
                "^[^\"\\\\]{2}$", "^(?:a|\"|\\\\)+$", "^\\u00e9\\u0001$", "^[\\x00-\\x7f]{0,2}z$", "^(?:\\\\n|x)$", "^[\\u0100-\\uffff]$",
                "^.$", "^[\\s\\S]$", "^[\\u0800-\\uffff]\"$", "^(?:\\u0000|\\u007f)\\u0600$"))
            l.add(str(p, null, -1, -1));
        l.add(str("^(?:a|\"|\\\\)+$", null, 3, 5));
        l.add(str("^.*$", null, 2, 4));
        l.add(str("^[\"\\\\\\n]*$", null, 2, 3));
        l.add(str("^[\uD83D\uDE00\\u00e9a]*$", null, 1, 3));
        l.add(str(null, null, 2, 4));
        l.add(str(null, null, 3, -1));
        l.add(str(null, null, 0, 2));
        for (String f : List.of("date", "time", "uuid", "ipv4"))
            l.add(str(null, f, -1, -1));
        l.add(str(null, "email", -1, 8));
        l.add(str(null, "date-time", -1, -1));
        return l;
    }

    @Test
    void distIsALowerBoundOnTheBytesOfTheShortestCompletion() throws Exception {
        int limit = 20_000;
        List<String> bad = new ArrayList<>();
        for (ObjectNode schema : schemas()) {
            Grammar g = Grammar.jsonSchema(schema);
            GState start = g.startState();
            Map<GState, Integer> id = new HashMap<>();
            List<GState> states = new ArrayList<>();
            List<int[]> edges = new ArrayList<>();
            List<List<Integer>> preds = new ArrayList<>();
            id.put(start, 0);
            states.add(start);
            preds.add(new ArrayList<>());
            ArrayDeque<Integer> q = new ArrayDeque<>(List.of(0));
            while (!q.isEmpty()) {
                int u = q.poll();
                GState s = states.get(u);
                for (int b = 0; b < 256; b++) {
                    GState t = s.next(b);
                    if (t == null) continue;
                    Integer v = id.get(t);
                    if (v == null) {
                        if (states.size() >= limit) continue;
                        v = states.size();
                        id.put(t, v);
                        states.add(t);
                        preds.add(new ArrayList<>());
                        q.add(v);
                    }
                    preds.get(v).add(u);
                }
            }
            int n = states.size();
            int[] d = new int[n];
            java.util.Arrays.fill(d, Integer.MAX_VALUE);
            ArrayDeque<Integer> back = new ArrayDeque<>();
            for (int i = 0; i < n; i++) if (states.get(i).accepting()) { d[i] = 0; back.add(i); }
            while (!back.isEmpty()) {
                int v = back.poll();
                for (int u : preds.get(v)) if (d[u] == Integer.MAX_VALUE) { d[u] = d[v] + 1; back.add(u); }
            }
            // where every character the pattern takes is written in its fewest bytes unescaped and no length is held,
            // the distance is exact, inside an escape too (which counted one byte for the escape before)
            String pat = schema.path("pattern").asText(null);
            boolean exact = !schema.has("minLength") && !schema.has("maxLength") && (schema.has("format")
                    || pat.chars().allMatch(ch -> ch >= 0x20 && ch != '"' && ch != '\\' && ch != '.'));
            int checked = 0, over = 0, under = 0;
            for (int i = 0; i < n; i++) {
                if (d[i] == Integer.MAX_VALUE) continue;
                checked++;
                int dist = states.get(i).dist();
                if (dist > d[i]) {
                    over++;
                    if (over <= 3) bad.add(schema + ": " + states.get(i) + " dist " + dist + " > " + d[i]);
                } else if (exact && dist < d[i]) {
                    under++;
                    if (under <= 3) bad.add(schema + ": " + states.get(i) + " dist " + dist + " < " + d[i] + " (exact expected)");
                }
            }
        }
        assertTrue(bad.isEmpty(), String.join("\n", bad));
    }

    /** The bytes of the shortest complete output from start, by a breadth-first search over bytes. */
    static int shortest(GState start) {
        Map<GState, Integer> d = new HashMap<>();
        ArrayDeque<GState> q = new ArrayDeque<>(List.of(start));
        d.put(start, 0);
        while (!q.isEmpty()) {
            GState s = q.poll();
            if (s.accepting()) return d.get(s);
            for (int b = 0; b < 256; b++) {
                GState t = s.next(b);
                if (t != null && !d.containsKey(t)) { d.put(t, d.get(s) + 1); q.add(t); }
            }
        }
        return -1;
    }

    /**
     * Patterns whose characters must be escaped (a quote, a backslash, controls) count them as one byte each, fewer
     * than they take: a lower bound still, and such strings still complete where their real shortest form fits.
     */
    @Test
    void patternsOfEscapedCharactersCompleteWhereTheShortestFits() throws Exception {
        List<String> bad = new ArrayList<>();
        for (String p : List.of("^\"$", "^\"\"\"$", "^(?:\"{3}|abcd)$", "^\\\\{3}$", "^\n\n\n$", "^[\\x00-\\x1f]{3}$",
                "^(?:\\x01{2}|abcdefgh)$", "^a\"b$", "^(?:[\\x01-\\x07]{2}|abcdefghijkl)$", "^(?:\\n{4}|abcdefgh)$",
                "^(?:\\x01|abcdef)$", "^(?:\\x01\\x02\\x03|[a-z]{18})$")) {
            ObjectNode schema = str(p, null, -1, -1);
            Grammar g = Grammar.jsonSchema(schema);
            int real = shortest(g.startState());
            for (int extra = 0; extra < 3; extra++)
                for (long seed = 0; seed < 24; seed++) {
                    int budget = real + 1 + extra;
                    GrammarPropertyTest.Out o = GrammarPropertyTest.run(g, budget, seed, 1.0);
                    if (!o.eos()) bad.add(schema + " minBytes " + g.minBytes() + " shortest " + real + " in " + budget + " tokens, seed " + seed + ": " + o.text());
                }
        }
        assertTrue(bad.isEmpty(), bad.size() + " cut:\n" + String.join("\n", bad));
    }
}
