package io.ds4j.bench;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * Writes {@link VerifyPathBench} results as a Markdown table, a JSON document and an SVG bar chart (decode tokens/s,
 * verify step time and prefill tokens/s per input length, one bar per verify attention path).
 *
 * @param setup free-form description lines (machine, model, draft, q, command) printed above the table and stored in
 *              the JSON under "setup"
 */
public record BenchReport(Map<String, String> setup, List<VerifyPathBench.Row> rows) {

    /** The Markdown table (with the setup as a bullet list above it). */
    public String markdown() {
        StringBuilder b = new StringBuilder();
        for (var e : setup.entrySet()) b.append("- ").append(e.getKey()).append(": ").append(e.getValue()).append('\n');
        b.append('\n');
        b.append("| input tokens | context | sequence state MiB | draft | verify attention | prefill tok/s | decode tok/s | verify step ms"
                + " | verify step ms, in alternation | control's conversion ms/step | acceptance rate | verifier agreement (rounds / rows) |\n");
        b.append("|---:|---|---:|---|---|---:|---:|---:|---:|---:|---:|---|\n");
        for (VerifyPathBench.Row r : rows) {
            b.append(String.format(Locale.ROOT, "| %,d | %s | %s | %s | %s | %s | %.1f | %s | %s | %s | %s | %s |%n", r.length(),
                    r.synthetic() ? "synthetic" : "prefilled",
                    // an older run's file may lack the sequence state; a replay that made no step has no verify step
                    Double.isNaN(r.stateMiB()) ? "–" : String.format(Locale.ROOT, "%,.0f", r.stateMiB()), r.draft(), r.path(),
                    Double.isNaN(r.prefillTokS()) ? "–" : String.format(Locale.ROOT, "%,.0f", r.prefillTokS()),
                    r.decodeTokS(), Double.isNaN(r.verifyMs()) ? "–" : String.format(Locale.ROOT, "%.2f", r.verifyMs()),
                    Double.isNaN(r.pairedVerifyMs()) ? "–" : String.format(Locale.ROOT, "%.2f", r.pairedVerifyMs()),
                    conversionCell(r),
                    Double.isNaN(r.acceptance()) ? "–" : String.format(Locale.ROOT, "%.3f", r.acceptance()),
                    Double.isNaN(r.agreement()) ? "–" : String.format(Locale.ROOT, "%.2f %% / %.2f %% (%d rounds)",
                            100 * r.agreement(), 100 * r.rowAgreement(), r.agreementRounds())));
        }
        if (rows.stream().anyMatch(VerifyPathBench.Row::synthetic))
            b.append("\nSynthetic: the context was given as random cache rows (no prefill); decode and verify run on it for real.\n");
        if (rows.stream().anyMatch(r -> !Double.isNaN(r.pairedVerifyMs())))
            b.append("\nIn alternation: the median verify step of each path over the agreement rounds, where the two paths"
                    + " verify the same rows one after the other, taking turns at going first (a drift of the machine between"
                    + " the paths' own runs does not enter their difference); figures of a length, which its replay rows repeat."
                    + " The summary's difference in alternation is the median of the rounds' own differences, with the"
                    + " interval that holds the true median with at least 95 % probability whatever their distribution"
                    + " (between the k-th smallest and the k-th largest difference, k from the binomial distribution).\n");
        if (rows.stream().anyMatch(r -> !Double.isNaN(r.conversionGraphMs()))) {
            // runs that name what their graph held (setup "conversion_graph", written since the graph holds the grouped
            // copies of the control's own step) say it; earlier runs' JSON keeps its note as it was rendered then
            String held = setup.get("conversion_graph");
            b.append("\nControl's conversion: the F16 cache to F32 copies of one verify step (every layer's window ring,"
                    + " compressed entries and indexer keys), timed alone with the host launching each copy, and replayed from"
                    + (held == null ? " a captured graph, without the host's launches, as in the control's graph-replayed verify steps"
                    : " a captured graph without the host's launches, the graph holding " + held)
                    + "; a share of the conversion is of the graph figure where there is one.\n");
        }
        if (rows.stream().anyMatch(r -> r.draft().equals(VerifyPathBench.REPLAY)))
            b.append("\nDrafts: copy = a copy of the target (its q draft steps are timed with the verify steps); replay = the"
                    + " target's own greedy output of the copy run replayed as a predicted output (near free: the row times the"
                    + " verify steps alone; same prefill as the copy row).\n");
        // relative change of the second path against the first, per length
        List<String> gains = new ArrayList<>();
        for (int i = 0; i + 1 < rows.size(); i++) {
            var a = rows.get(i);
            var c = rows.get(i + 1);
            if (a.length() == c.length() && a.draft().equals(c.draft()) && !a.path().equals(c.path()))
                gains.add(String.format(Locale.ROOT, "%,d tokens, %s draft: decode %+.1f %% (x%.2f), verify step %+.1f %% (%+.2f ms)%s%s", a.length(),
                        a.draft(), 100 * (c.decodeTokS() / a.decodeTokS() - 1), c.decodeTokS() / a.decodeTokS(),
                        100 * (c.verifyMs() / a.verifyMs() - 1), c.verifyMs() - a.verifyMs(), paired(a, c),
                        a.synthetic() || !a.draft().equals(VerifyPathBench.COPY) ? "" : String.format(Locale.ROOT, ", prefill %+.1f %%", 100 * (c.prefillTokS() / a.prefillTokS() - 1))));
        }
        if (!gains.isEmpty()) b.append("\n").append(rows.get(1).path()).append(" against ").append(rows.get(0).path())
                .append(": ").append(String.join("; ", gains)).append(".\n");
        return b.toString();
    }

    /**
     * ", in alternation %+.2f ms" (c's paired verify step against a's), with its share of a's conversion where a has
     * one: of the conversion replayed from a graph where it was timed so (what a's steps pay), and then of the one timed
     * alone as well (the only figure of earlier runs). Empty where the rows have no paired figures, and for the replay
     * draft, whose rows carry the length's figures from the copy draft's agreement rounds (said once, with the copy draft).
     */
    private static String paired(VerifyPathBench.Row a, VerifyPathBench.Row c) {
        if (Double.isNaN(a.pairedVerifyMs()) || Double.isNaN(c.pairedVerifyMs()) || !a.draft().equals(VerifyPathBench.COPY))
            return "";
        double conv = a.stepConversionMs();
        boolean has = conv > 0, graph = conv == a.conversionGraphMs();
        String which = graph ? String.format(Locale.ROOT, " in a graph (%.3f ms)", conv) : "";
        Stats.Interval i = c.pairedDiff();
        // a run kept from before the rounds' own differences: the medians' difference
        double d = Double.isNaN(i.median()) ? c.pairedVerifyMs() - a.pairedVerifyMs() : i.median();
        // where both were timed, the share of the conversion timed alone too (the only figure of earlier runs)
        String alone = !graph || !(a.conversionMs() > 0) ? ""
                : String.format(Locale.ROOT, "; %.0f %% of it timed alone (%.3f ms)", 100 * -d / a.conversionMs(), a.conversionMs());
        if (Double.isNaN(i.median()))
            return String.format(Locale.ROOT, ", in alternation %+.2f ms", d)
                    + (has ? String.format(Locale.ROOT, " (%.0f %% of the control's conversion%s%s)", 100 * -d / conv, which, alone) : "");
        return String.format(Locale.ROOT, ", in alternation %+.2f ms (95 %% interval %s", i.median(), interval(i))
                + (has ? String.format(Locale.ROOT, "; %.0f %% of the control's conversion%s, %s", 100 * -i.median() / conv, which,
                        Double.isNaN(i.lo()) ? "no interval" : String.format(Locale.ROOT, "%.0f to %.0f %%",
                                100 * -i.hi() / conv, 100 * -i.lo() / conv)) + alone : "") + ")";
    }

    /** The conversion cell: the figure timed alone, and the one in a graph beside it where there is one ("–" for none). */
    private static String conversionCell(VerifyPathBench.Row r) {
        String alone = Double.isNaN(r.conversionMs()) ? "–" : String.format(Locale.ROOT, "%.3f", r.conversionMs());
        return Double.isNaN(r.conversionGraphMs()) ? alone
                : String.format(Locale.ROOT, "%s alone, %.3f in a graph", alone, r.conversionGraphMs());
    }

    /** "LO to HI ms" of an interval, or "none (too few rounds)" where it has no ends. */
    static String interval(Stats.Interval i) {
        return Double.isNaN(i.lo()) ? "none (too few rounds)" : String.format(Locale.ROOT, "%+.2f to %+.2f ms", i.lo(), i.hi());
    }

    /** The JSON document: {"setup": {...}, "rows": [...]} (NaN written as null). */
    public String json() {
        ObjectMapper m = new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT);
        ObjectNode root = m.createObjectNode();
        ObjectNode s = root.putObject("setup");
        setup.forEach(s::put);
        ArrayNode a = root.putArray("rows");
        for (VerifyPathBench.Row r : rows) {
            ObjectNode o = a.addObject();
            o.put("input_tokens", r.length());
            o.put("verify_attention", r.path());
            o.put("draft", r.draft());
            num(o, "prefill_tokens_per_s", r.prefillTokS());
            num(o, "prefill_seconds", r.prefillSeconds());
            num(o, "decode_tokens_per_s", r.decodeTokS());
            o.put("decode_tokens", r.emitted());
            o.put("verify_steps", r.verifySteps());
            num(o, "verify_ms_per_step", r.verifyMs());
            o.put("draft_tokens_offered", r.offered());
            o.put("draft_tokens_accepted", r.accepted());
            num(o, "acceptance_rate", r.acceptance());
            num(o, "verifier_agreement_rounds", r.agreement());
            num(o, "verifier_agreement_rows", r.rowAgreement());
            o.put("agreement_rounds", r.agreementRounds());
            o.put("synthetic_context", r.synthetic());
            num(o, "sequence_state_mib", r.stateMiB());
            num(o, "control_conversion_ms_per_step", r.conversionMs());
            num(o, "control_conversion_ms_per_step_in_graph", r.conversionGraphMs());
            num(o, "verify_ms_per_step_in_alternation", r.pairedVerifyMs());
            num(o, "verify_ms_difference_in_alternation", r.pairedDiff().median());
            num(o, "verify_ms_difference_in_alternation_low", r.pairedDiff().lo());
            num(o, "verify_ms_difference_in_alternation_high", r.pairedDiff().hi());
        }
        try {
            return m.writeValueAsString(root) + "\n";
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    private static void num(ObjectNode o, String k, double v) {
        if (Double.isNaN(v) || Double.isInfinite(v)) o.putNull(k);
        else o.put(k, v);
    }

    /** Three panels (decode tok/s, verify step ms, prefill tok/s), grouped bars per input length, one colour per path. */
    public String svg() {
        Map<Integer, Map<String, VerifyPathBench.Row>> byLen = new LinkedHashMap<>();
        List<String> paths = new ArrayList<>();
        for (VerifyPathBench.Row r : rows) {
            byLen.computeIfAbsent(r.length(), k -> new LinkedHashMap<>()).put(key(r), r);
            if (!paths.contains(key(r))) paths.add(key(r));
        }
        String[] colours = {"#8a8f98", "#2f6fdf", "#d9822b", "#3a9d5d"};
        int panelW = 360, panelH = 260, gap = 50, top = 50, left = 60, panels = 3;
        int width = left + panels * panelW + (panels - 1) * gap + 20, height = top + panelH + 70;
        StringBuilder b = new StringBuilder();
        b.append(String.format(Locale.ROOT, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">%n",
                width, height, width, height));
        b.append("<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
        b.append(String.format(Locale.ROOT, "<text x=\"%d\" y=\"22\" font-size=\"15\" font-weight=\"bold\">%s</text>%n", left,
                esc(setup.getOrDefault("title", "verify attention paths"))));
        for (int i = 0; i < paths.size(); i++)
            b.append(String.format(Locale.ROOT, "<rect x=\"%d\" y=\"30\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%d\" y=\"40\">%s</text>%n",
                    left + 180 * i + 300, colours[i % colours.length], left + 180 * i + 316, esc(paths.get(i))));
        String[] titles = {"decode tokens/s (speculative)", "verify step ms (lower is better)", "prefill tokens/s"};
        java.util.List<java.util.function.ToDoubleFunction<VerifyPathBench.Row>> value = java.util.List.of(
                VerifyPathBench.Row::decodeTokS, VerifyPathBench.Row::verifyMs, VerifyPathBench.Row::prefillTokS);
        for (int p = 0; p < panels; p++) {
            int x0 = left + p * (panelW + gap);
            double max = 0;
            for (VerifyPathBench.Row r : rows) {
                double v = value.get(p).applyAsDouble(r);
                if (!Double.isNaN(v)) max = Math.max(max, v);
            }
            max = niceCeil(max);
            b.append(String.format(Locale.ROOT, "<text x=\"%d\" y=\"%d\" font-weight=\"bold\">%s</text>%n", x0, top + 8, titles[p]));
            int y0 = top + 20, h = panelH - 30;
            for (int t = 0; t <= 4; t++) {
                double v = max * t / 4;
                int y = y0 + h - (int) Math.round(h * t / 4.0);
                b.append(String.format(Locale.ROOT, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#ddd\"/><text x=\"%d\" y=\"%d\" text-anchor=\"end\" fill=\"#555\">%s</text>%n",
                        x0, x0 + panelW, y, y, x0 - 4, y + 4, fmt(v)));
            }
            int groups = byLen.size(), gi = 0;
            double gw = (double) panelW / Math.max(1, groups);
            double bw = Math.min(50, (gw - 20) / Math.max(1, paths.size()));
            for (var e : byLen.entrySet()) {
                double gx = x0 + gi * gw + (gw - bw * paths.size()) / 2;
                for (int i = 0; i < paths.size(); i++) {
                    VerifyPathBench.Row r = e.getValue().get(paths.get(i));
                    if (r == null) continue;
                    double v = value.get(p).applyAsDouble(r);
                    if (Double.isNaN(v)) continue;  // e.g. no prefill figure for a synthetic context
                    int bh = max == 0 ? 0 : (int) Math.round(h * v / max);
                    b.append(String.format(Locale.ROOT, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"><title>%s, %,d tokens: %s</title></rect>%n",
                            gx + i * bw, y0 + h - bh, bw - 2, bh, colours[i % colours.length], esc(key(r)), r.length(), fmt(v)));
                    b.append(String.format(Locale.ROOT, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"10\">%s</text>%n",
                            gx + i * bw + (bw - 2) / 2, y0 + h - bh - 3, fmt(v)));
                }
                b.append(String.format(Locale.ROOT, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%,d tokens</text>%n",
                        x0 + gi * gw + gw / 2, y0 + h + 16, e.getKey()));
                gi++;
            }
            b.append(String.format(Locale.ROOT, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#333\"/>%n", x0, x0 + panelW, y0 + h, y0 + h));
        }
        if (setup.containsKey("model")) {
            // the model line is long: one line per "; "-separated part
            String[] parts = ("model: " + setup.get("model")).split("; ");
            for (int i = 0; i < parts.length; i++)
                b.append(String.format(Locale.ROOT, "<text x=\"%d\" y=\"%d\" fill=\"#555\" font-size=\"11\">%s</text>%n", left,
                        height - 12 - 14 * (parts.length - 1 - i), esc(parts[i])));
        }
        b.append("</svg>\n");
        return b.toString();
    }

    /**
     * This report and another one (a run of other lengths on the same machine and model) as one table: rows ordered
     * by input length (stable: each length keeps its run's order), this report's setup, and the other's command and
     * method appended when they differ.
     * @throws IllegalArgumentException when both have a row of the same length, path and draft
     */
    public BenchReport merge(BenchReport other) {
        Map<String, String> s = new LinkedHashMap<>(setup);
        for (String k : List.of("command", "method", "date")) {
            String a = setup.get(k), b = other.setup().get(k);
            if (b != null && !b.equals(a)) s.put(k, a == null ? b : a + "; and " + b);
        }
        List<VerifyPathBench.Row> all = new ArrayList<>(rows);
        for (VerifyPathBench.Row r : other.rows())
            for (VerifyPathBench.Row q : rows)
                if (q.length() == r.length() && q.path().equals(r.path()) && q.draft().equals(r.draft()))
                    throw new IllegalArgumentException(String.format(Locale.ROOT,
                            "both runs have a row for %,d tokens, %s, %s draft: merge runs of different lengths", r.length(),
                            r.path(), r.draft()));
        all.addAll(other.rows());
        all.sort(java.util.Comparator.comparingInt(VerifyPathBench.Row::length));
        return new BenchReport(s, all);
    }

    /**
     * Reads a report back from its JSON document ({@link #json()}), e.g. to render the table and chart of a run whose
     * Markdown and SVG files did not come back from the GPU machine.
     * @throws IOException when the file cannot be read or is not such a document
     */
    public static BenchReport fromJson(Path file) throws IOException {
        com.fasterxml.jackson.databind.JsonNode root;
        try {
            root = new ObjectMapper().readTree(file.toFile());
        } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
            throw new IOException(file + ": not a ds4j bench JSON document (" + e.getOriginalMessage() + ")");
        }
        if (root == null || !root.has("setup") || !root.has("rows")) throw new IOException(file + ": not a ds4j bench JSON document");
        Map<String, String> setup = new LinkedHashMap<>();
        root.get("setup").properties().forEach(e -> setup.put(e.getKey(), e.getValue().asText()));
        List<VerifyPathBench.Row> rows = new ArrayList<>();
        for (var r : root.get("rows"))
            rows.add(new VerifyPathBench.Row(r.get("input_tokens").asInt(), r.get("verify_attention").asText(),
                    r.has("draft") ? r.get("draft").asText() : VerifyPathBench.COPY,
                    d(r, "prefill_tokens_per_s"), d(r, "prefill_seconds"), d(r, "decode_tokens_per_s"), r.get("decode_tokens").asInt(),
                    r.get("verify_steps").asInt(), d(r, "verify_ms_per_step"), r.get("draft_tokens_offered").asInt(),
                    r.get("draft_tokens_accepted").asInt(), d(r, "acceptance_rate"), d(r, "verifier_agreement_rounds"),
                    d(r, "verifier_agreement_rows"), r.get("agreement_rounds").asInt(),
                    r.has("synthetic_context") && r.get("synthetic_context").asBoolean(), d(r, "sequence_state_mib"),
                    d(r, "control_conversion_ms_per_step"), d(r, "control_conversion_ms_per_step_in_graph"),
                    d(r, "verify_ms_per_step_in_alternation"),
                    new Stats.Interval(d(r, "verify_ms_difference_in_alternation"), d(r, "verify_ms_difference_in_alternation_low"),
                            d(r, "verify_ms_difference_in_alternation_high"))));
        return new BenchReport(setup, rows);
    }

    private static double d(com.fasterxml.jackson.databind.JsonNode r, String k) {
        var v = r.get(k);
        return v == null || v.isNull() ? Double.NaN : v.asDouble();
    }

    /** Writes NAME.md, NAME.json and NAME.svg into dir (replacing earlier ones); returns the three paths. */
    public List<Path> write(Path dir, String name) throws IOException {
        Files.createDirectories(dir);
        List<Path> files = files(dir, name);
        Files.writeString(files.get(0), markdown());
        Files.writeString(files.get(1), json());
        Files.writeString(files.get(2), svg());
        return files;
    }

    /** The files {@link #write} writes: NAME.md, NAME.json and NAME.svg in dir. */
    public static List<Path> files(Path dir, String name) {
        return List.of(dir.resolve(name + ".md"), dir.resolve(name + ".json"), dir.resolve(name + ".svg"));
    }

    /** A bar's series: the path, and the draft where it is not the copy of the target. */
    private static String key(VerifyPathBench.Row r) {
        return r.draft().equals(VerifyPathBench.COPY) ? r.path() : r.path() + ", " + r.draft();
    }

    private static double niceCeil(double v) {
        if (v <= 0) return 1;
        double p = Math.pow(10, Math.floor(Math.log10(v)));
        for (double m : new double[]{1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10}) if (m * p >= v) return m * p;
        return 10 * p;
    }

    private static String fmt(double v) {
        return v >= 100 ? String.format(Locale.ROOT, "%,.0f", v) : String.format(Locale.ROOT, "%.1f", v);
    }

    private static String esc(String s) {
        return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\"", "&quot;");
    }
}
