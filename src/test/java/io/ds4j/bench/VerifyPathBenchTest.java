package io.ds4j.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.ds4j.cli.GenerateCommandTest;
import io.ds4j.cpu.CpuBackend;
import io.ds4j.cpu.TestModelsAccess;
import io.ds4j.model.ModelConfig;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import javax.xml.parsers.DocumentBuilderFactory;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The verify-path benchmark's machinery on the CPU backend (one path there): the copy-of-the-target draft must have
 * every draft token accepted, because the CPU engine is batch-invariant (decode with S = 1 and verification with
 * S = q + 1 give bit-identical logits); the report files are well-formed; the command writes them.
 */
class VerifyPathBenchTest {

    @Test
    void copyOfTheTargetIsAlwaysAcceptedAndTheReportIsWellFormed(@TempDir Path dir) throws Exception {
        ModelConfig c = TestModelsAccess.microConfig();
        try (CpuBackend be = new CpuBackend(TestModelsAccess.random(c, 5))) {
            var o = new VerifyPathBench.Options(List.of(23, 61), 4, 17, 0, 16, 3);
            ByteArrayOutputStream log = new ByteArrayOutputStream();
            List<VerifyPathBench.Row> rows = VerifyPathBench.run(be, o, new PrintStream(log, true));
            assertEquals(2, rows.size(), log.toString());
            for (VerifyPathBench.Row r : rows) {
                assertEquals("cpu", r.path());
                assertTrue(r.emitted() >= 17, "emitted " + r.emitted());
                assertTrue(r.offered() > 0);
                assertEquals(r.offered(), r.accepted(), "every draft token of a copy of the target is accepted: " + r);
                assertEquals(1.0, r.acceptance());
                assertEquals(r.verifySteps() * 5, r.emitted(), "q + 1 tokens per verify step at acceptance 1");
                assertTrue(r.prefillTokS() > 0 && r.decodeTokS() > 0 && r.verifyMs() > 0);
            }
            BenchReport rep = new BenchReport(Map.of("model", "micro <test>"), rows);
            List<Path> files = rep.write(dir, "t");
            JsonNode j = new ObjectMapper().readTree(files.get(1).toFile());
            assertEquals(2, j.get("rows").size());
            assertEquals(61, j.get("rows").get(1).get("input_tokens").asInt());
            assertTrue(j.get("rows").get(0).get("verifier_agreement_rounds").isNull(), "no agreement measured: null");
            var doc = DocumentBuilderFactory.newInstance().newDocumentBuilder().parse(files.get(2).toFile());
            assertEquals("svg", doc.getDocumentElement().getNodeName());
            assertEquals(2 * 3 + 2 /* bars in three panels + background + legend */, doc.getElementsByTagName("rect").getLength());
            BenchReport back = BenchReport.fromJson(files.get(1));
            assertEquals(rep.markdown(), back.markdown(), "the JSON holds everything the table shows");
            assertEquals(rep.svg(), back.svg());
            String md = Files.readString(files.get(0));
            assertTrue(md.contains("| 23 | prefilled |") && md.contains("| 61 | prefilled |"), md);
            for (VerifyPathBench.Row r : rows) {
                assertFalse(r.synthetic());
                assertEquals(be.stateBytes(r.length(), 16) / 1048576.0, r.stateMiB(), 1e-9);
                assertTrue(Double.isNaN(r.conversionMs()) && Double.isNaN(r.conversionGraphMs()), "the CPU backend has no conversion to time");
            }
            assertTrue(md.contains("micro &lt;test&gt;") || md.contains("micro <test>"), md);
        }
    }

    /**
     * The replay draft (the target's own greedy output of the copy run, replayed as a predicted output from the
     * prefilled state) must have every token accepted too, with no draft steps: the row's verify steps are all it runs.
     */
    @Test
    void theReplayedOutputIsAcceptedInFull(@TempDir Path dir) throws Exception {
        ModelConfig c = TestModelsAccess.microConfig();
        try (CpuBackend be = new CpuBackend(TestModelsAccess.random(c, 5))) {
            var o = new VerifyPathBench.Options(List.of(31), 4, 17, 0, 16, 3, VerifyPathBench.Options.DEFAULT_SYNTHETIC_ABOVE,
                    VerifyPathBench.Options.DRAFTS);
            ByteArrayOutputStream log = new ByteArrayOutputStream();
            List<VerifyPathBench.Row> rows = VerifyPathBench.run(be, o, new PrintStream(log, true));
            assertEquals(2, rows.size(), log.toString());
            VerifyPathBench.Row copy = rows.get(0), replay = rows.get(1);
            assertEquals(VerifyPathBench.COPY, copy.draft());
            assertEquals(VerifyPathBench.REPLAY, replay.draft());
            assertTrue(replay.emitted() >= 17, "emitted " + replay.emitted() + "\n" + log);
            assertEquals(replay.offered(), replay.accepted(), "the replayed greedy output is the target's own: " + replay);
            assertEquals(replay.verifySteps() * 5, replay.emitted(), "q + 1 tokens per verify step");
            assertEquals(copy.prefillTokS(), replay.prefillTokS(), "the replay starts from the copy row's prefill");
            String md = new BenchReport(Map.of(), rows).markdown();
            assertTrue(md.contains("| replay | cpu |") && md.contains("| copy | cpu |"), md);
            BenchReport rep = new BenchReport(Map.of(), rows);
            assertEquals(md, BenchReport.fromJson(rep.write(dir, "r").get(1)).markdown(), "the draft column survives the JSON");
        }
        var e = assertThrows(IllegalArgumentException.class, () -> new VerifyPathBench.Options(List.of(31), 4, 17, 0, 16, 3, 40,
                List.of("replay")));
        assertTrue(e.getMessage().contains("must include copy"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> new VerifyPathBench.Options(List.of(31), 4, 17, 0, 16, 3, 40,
                List.of("copy", "ngram")));
        assertTrue(e.getMessage().contains("unknown draft 'ngram'"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> new VerifyPathBench.Options(List.of(31), 4, 17, 0, 16, 3, 40,
                List.of("foo")));
        assertTrue(e.getMessage().contains("unknown draft 'foo'"), "the name is checked first: " + e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> new VerifyPathBench.Options(List.of(31), 4, 17, 0, 16, 3, 40,
                List.of("copy", "copy")));
        assertTrue(e.getMessage().contains("named twice"), e.getMessage());
    }

    @Test
    void lengthsThatCannotRunAreRefusedBeforeAnyWork() {
        ModelConfig c = TestModelsAccess.microConfig();
        try (CpuBackend be = new CpuBackend(TestModelsAccess.random(c, 5))) {
            ByteArrayOutputStream log = new ByteArrayOutputStream();
            var past = new VerifyPathBench.Options(List.of(23, c.maxPositionEmbeddings), 4, 17, 0, 16, 3);
            var e = assertThrows(IllegalArgumentException.class, () -> VerifyPathBench.run(be, past, new PrintStream(log, true)));
            assertTrue(e.getMessage().contains("max_position_embeddings"), e.getMessage());
            // the parts add up to the positions named: the input, 17 decode tokens, 2 x (q + 1) and 8 spare
            int L = c.maxPositionEmbeddings;
            assertTrue(e.getMessage().contains(String.format(java.util.Locale.ROOT, "input length %,d needs %,d positions", L, L + 17 + 10 + 8))
                    && e.getMessage().contains(String.format(java.util.Locale.ROOT, "%,d input + 17 decode tokens (--decode-tokens) + 10 for"
                    + " the untimed warm-up step and the last step's overrun (2 x (--q 4 + 1)) + 8 spare;", L))
                    && e.getMessage().contains(String.format(java.util.Locale.ROOT, "the longest input that fits is %,d", L - 35)),
                    e.getMessage());
            var synth = new VerifyPathBench.Options(List.of(23, 61), 4, 17, 0, 16, 3, 40);
            e = assertThrows(IllegalArgumentException.class, () -> VerifyPathBench.run(be, synth, new PrintStream(log, true)));
            assertTrue(e.getMessage().contains("cannot fill a context synthetically"), e.getMessage());
            assertEquals("", log.toString(), "nothing ran before the refusal");
        }
    }

    /** With both paths the agreement rounds take positions too: they are counted and named, and the numbers add up. */
    @Test
    void theAgreementRoundsAreCountedWhereBothPathsRun() {
        var o = new VerifyPathBench.Options(List.of(1000), 4, 17, 200, 16, 3);
        VerifyPathBench.checkContext(1035, o, false);
        var e = assertThrows(IllegalArgumentException.class, () -> VerifyPathBench.checkContext(2000, o, true));
        assertTrue(e.getMessage().startsWith("input length 1,000 needs 2,035 positions, past the model's context of 2,000")
                && e.getMessage().contains(" + 8 spare + 1,000 for 200 agreement rounds (--agreement-steps) of up to --q 4 + 1 tokens;"
                + " the longest input that fits is 965"), e.getMessage());
    }

    /** On a backend of one verify path, the report's method says that no agreement rounds or conversion ran. */
    @Test
    void aBackendOfOnePathDescribesNoAgreementRounds(@TempDir Path dir) throws Exception {
        GenerateCommandTest.Run r = GenerateCommandTest.run("bench", "--backend", "cpu", "--preset", "tiny", "--lengths", "40",
                "--decode-tokens", "8", "--agreement-steps", "2", "--out", dir.toString());
        assertEquals(0, r.code(), r.err());
        String md = Files.readString(dir.resolve("verify-f16kv.md"));
        assertTrue(md.contains("one verify attention path (no agreement rounds, no conversion)"), md);
        assertFalse(md.contains("taking turns") || md.contains("median of 5"), md);
    }

    /** A length past the preset's context is refused before its model is made: no 'creating model', no folder. */
    @Test
    void benchRefusesALengthPastTheContextBeforeMakingAModel() throws Exception {
        // a preset variant no other test makes: were it made, its folder would name it
        GenerateCommandTest.Run r = GenerateCommandTest.run("bench", "--backend", "cpu", "--preset", "tiny", "--layers", "2",
                "--experts", "3", "--lengths", "2000000");
        assertNotEquals(0, r.code(), r.err());
        assertTrue(r.err().contains("input length 2,000,000 needs 2,000,274 positions, past the model's context of 1,048,576"),
                r.err());
        assertFalse(r.err().contains("creating model"), r.err());
        try (var s = Files.list(io.ds4j.model.synth.ModelStore.root()).filter(p ->
                p.getFileName().toString().startsWith("tiny-L2-E3-"))) {
            assertEquals(0, s.count(), "no model was made");
        } catch (java.nio.file.NoSuchFileException none) {
            // no store at all: nothing was made
        }
    }

    /**
     * On the CPU without --preset, bench takes the small preset and says so (the default flash-shaped is 18 GB);
     * --preset flash-shaped there is said up front with its size and the presets that suit the CPU.
     */
    @Test
    void benchOnTheCpuTakesTheSmallPresetAndSaysWhatFlashShapedWouldBe() throws Exception {
        GenerateCommandTest.Run r = GenerateCommandTest.run("bench", "--backend", "cpu", "--lengths", "2000000");
        assertNotEquals(0, r.code(), r.err());
        assertTrue(r.err().contains("bench: --backend cpu without --preset: using the small preset"), r.err());
        assertFalse(r.err().contains("creating model"), r.err());
        String w = io.ds4j.cli.BenchCommand.cpuWarning(io.ds4j.model.synth.Presets.get("flash-shaped", null, null),
                io.ds4j.model.synth.RandomCheckpoint.Storage.FP8, 1);
        assertTrue(w.matches("bench: --preset flash-shaped on --backend cpu: a GPU benchmark's model of 43 layers, [0-9.]+ GB on disk .*"
                + "--preset tiny or --preset small suit the CPU"), w);
    }

    @Test
    void benchCommandWritesTheTableJsonAndChart(@TempDir Path dir) throws Exception {
        GenerateCommandTest.Run r = GenerateCommandTest.run("bench", "--backend", "cpu", "--model",
                "src/test/resources/fixtures/tiny-hf-bf16", "--lengths", "20,40", "--decode-tokens", "8",
                "--agreement-steps", "0", "--chunk", "16", "--out", dir.toString(), "--name", "b");
        assertEquals(0, r.code(), r.err() + r.out());
        for (String ext : new String[]{"md", "json", "svg"}) assertTrue(Files.size(dir.resolve("b." + ext)) > 100, ext);
        assertTrue(r.out().contains("| 40 | prefilled |") && r.out().contains("| copy | cpu |") && r.out().contains("| replay | cpu |"), r.out());
    }

    @Test
    void twoRunsRenderAsOneTableOrderedByLength(@TempDir Path dir) throws Exception {
        for (String[] run : new String[][]{{"40", "b"}, {"20", "a"}}) {
            GenerateCommandTest.Run r = GenerateCommandTest.run("bench", "--backend", "cpu", "--model",
                    "src/test/resources/fixtures/tiny-hf-bf16", "--lengths", run[0], "--decode-tokens", "6", "--drafts", "copy",
                    "--agreement-steps", "0", "--chunk", "16", "--out", dir.toString(), "--name", run[1]);
            assertEquals(0, r.code(), r.err() + r.out());
        }
        GenerateCommandTest.Run r = GenerateCommandTest.run("bench", "--render", dir.resolve("b.json") + "," + dir.resolve("a.json"),
                "--out", dir.toString(), "--name", "ab");
        assertEquals(0, r.code(), r.err() + r.out());
        String md = Files.readString(dir.resolve("ab.md"));
        assertTrue(md.indexOf("| 20 | prefilled |") < md.indexOf("| 40 | prefilled |") && md.contains("| 20 | prefilled |"), md);
        assertTrue(md.contains("--lengths 40") && md.contains("; and ds4j bench") && md.contains("--lengths 20"), "both commands: " + md);
        assertEquals(2, new ObjectMapper().readTree(dir.resolve("ab.json").toFile()).get("rows").size());
        // the same length in two runs, one file given twice, a file that is not JSON, an empty name: one clear line each
        Path copy = Files.copy(dir.resolve("a.json"), dir.resolve("a2.json"));
        r = GenerateCommandTest.run("bench", "--render", dir.resolve("a.json") + "," + copy, "--out", dir.toString());
        assertNotEquals(0, r.code());
        assertTrue(r.err().contains("both runs have a row for 20 tokens"), r.err());
        r = GenerateCommandTest.run("bench", "--render", dir.resolve("a.json") + "," + dir.resolve("a.json"), "--out", dir.toString());
        assertEquals(2, r.code(), r.err());
        assertEquals("error: --render: " + dir.resolve("a.json") + " is given twice", r.err().strip());
        Path junk = Files.writeString(dir.resolve("junk.json"), "hello");
        r = GenerateCommandTest.run("bench", "--render", junk.toString(), "--out", dir.toString());
        assertNotEquals(0, r.code());
        assertTrue(r.err().contains("junk.json: not a ds4j bench JSON document"), r.err());
        // an input that is one of the files the result replaces is refused, written another way too, and left as it was
        Path input = Files.copy(Path.of("docs/bench/verify-f16kv.json"), dir.resolve("verify-f16kv.json"));
        String before = Files.readString(input);
        for (String as : new String[]{input.toString(), dir.resolve(".").resolve("verify-f16kv.json").toString()}) {
            r = GenerateCommandTest.run("bench", "--render", as, "--out", dir.toString());
            assertEquals(2, r.code(), r.err());
            String which = as.equals(dir.resolve("verify-f16kv.json").toString()) ? "" : " is " + dir.resolve("verify-f16kv.json") + ", which";
            assertEquals("error: --render: " + as + which + " the rendered result replaces; give another --out or --name",
                    r.err().strip());
        }
        assertEquals(before, Files.readString(input), "the input is not replaced");
        r = GenerateCommandTest.run("bench", "--render", "", "--out", dir.toString());
        assertNotEquals(0, r.code());
        assertTrue(r.err().contains("empty file name"), r.err());
    }

    /**
     * The runs kept in docs/bench render again: a file from before the rounds in alternation gets that column as "–",
     * a later one its figures, and the summary's difference of the rounds with its interval, as its run printed it; a
     * figure a file does not hold (the oldest has no sequence state) is "–" too, not "NaN".
     */
    @Test
    void theKeptRunsRenderWithoutNaN() throws Exception {
        int withAlternation = 0;
        try (var files = Files.list(Path.of("docs/bench"))) {
            for (Path f : files.filter(p -> p.toString().endsWith(".json")).sorted().toList()) {
                String md = BenchReport.fromJson(f).markdown();
                assertFalse(md.contains("NaN"), f + ":\n" + md);
                assertTrue(md.contains("| verify step ms, in alternation |"), f + ":\n" + md);
                boolean paired = new ObjectMapper().readTree(f.toFile()).get("rows").get(0)
                        .path("verify_ms_per_step_in_alternation").isNumber();
                if (paired) withAlternation++;
                for (String line : md.split("\n"))
                    if (line.startsWith("| ") && Character.isDigit(line.charAt(2))) {
                        String cell = line.split(" \\| ")[8];
                        if (paired) assertTrue(cell.matches("\\d+\\.\\d\\d"), f + ": " + line);
                        else assertEquals("–", cell, f + ": " + line);
                    }
                if (paired) {
                    assertTrue(md.contains(", in alternation ") && md.contains("95 % interval"), f + ":\n" + md);
                    // the file's Markdown, written by the run, is what its JSON renders to
                    Path kept = Path.of(f.toString().replaceAll("\\.json$", ".md"));
                    assertEquals(Files.readString(kept), md, kept.toString());
                }
            }
        }
        assertTrue(withAlternation > 0, "a kept run with the rounds in alternation");
    }

    /** Each option out of range is refused in one line naming the flag as the user typed it, before any work. */
    @Test
    void badOptionsAreNamed() {
        String[][] cases = {{"--q", "0", "--q must be in 1..16, got 0"}, {"--q", "17", "--q must be in 1..16, got 17"},
                {"--lengths", "64,0", "--lengths: each input length must be >= 2, got 0"},
                {"--lengths", "32,64,32", "--lengths: each input length may be given once, but 32 is repeated"},
                {"--decode-tokens", "0", "--decode-tokens must be >= 1, got 0"}, {"--chunk", "0", "--chunk must be >= 1, got 0"},
                {"--agreement-steps", "-1", "--agreement-steps must be >= 0, got -1"},
                {"--synthetic-above", "0", "--synthetic-above must be >= 1, got 0"},
                {"--drafts", "copy,ngram", "--drafts: unknown draft 'ngram': one of [copy, replay]"},
                {"--drafts", "replay", "--drafts must include copy (the replay replays its output), got [replay]"}};
        for (String[] c : cases) {
            GenerateCommandTest.Run r = GenerateCommandTest.run("bench", "--backend", "cpu", c[0], c[1],
                    "--model", "src/test/resources/fixtures/tiny-hf-bf16");
            assertEquals(2, r.code(), c[0] + " " + c[1] + ": " + r.err());
            assertEquals("error: " + c[2], r.err().strip(), c[0] + " " + c[1]);
        }
    }

    /**
     * With two verify paths, the agreement rounds verify the same rows on both, the paths taking turns at going first,
     * and each row gets its path's median verify step in alternation (the CPU backend behind a wrapper that offers two
     * paths: the numbers are the same on both, so every round agrees).
     */
    @Test
    void theAgreementRoundsTimeBothPathsInAlternation(@TempDir Path dir) throws Exception {
        ModelConfig c = TestModelsAccess.microConfig();
        try (CpuBackend cpu = new CpuBackend(TestModelsAccess.random(c, 5))) {
            var be = new io.ds4j.engine.TrackingBackend(cpu);
            be.offeredPaths = java.util.Set.of(io.ds4j.engine.VerifyAttention.F32_CONVERT, io.ds4j.engine.VerifyAttention.F16);
            int rounds = 6;
            var o = new VerifyPathBench.Options(List.of(23), 4, 9, rounds, 16, 3);
            ByteArrayOutputStream log = new ByteArrayOutputStream();
            List<VerifyPathBench.Row> rows = VerifyPathBench.run(be, o, new PrintStream(log, true));
            assertEquals(List.of("f32-convert", "f16"), rows.stream().map(VerifyPathBench.Row::path).toList(), log.toString());
            // the agreement rounds are the last 2 * rounds verify steps: in each the two paths, the first one alternating
            var v = be.verifyPaths;
            var last = v.subList(v.size() - 2 * rounds, v.size());
            for (int r = 0; r < rounds; r++) {
                var first = r % 2 == 0 ? io.ds4j.engine.VerifyAttention.F32_CONVERT : io.ds4j.engine.VerifyAttention.F16;
                assertEquals(first, last.get(2 * r), "round " + r + ": " + last);
                assertNotEquals(first, last.get(2 * r + 1), "round " + r + ": " + last);
            }
            for (VerifyPathBench.Row r : rows) {
                assertEquals(1.0, r.agreement(), r.toString());
                assertEquals(rounds, r.agreementRounds());
                assertTrue(r.pairedVerifyMs() > 0, r.toString());
            }
            // the second path's row carries the median of the rounds' own differences with its interval (6 rounds: the
            // smallest and the largest difference), the first path's none
            Stats.Interval d = rows.get(1).pairedDiff();
            assertTrue(!Double.isNaN(d.median()) && d.lo() <= d.median() && d.median() <= d.hi(), d.toString());
            assertTrue(Double.isNaN(rows.get(0).pairedDiff().median()), rows.get(0).toString());
            assertTrue(log.toString().contains("verify step in alternation (median)")
                    && log.toString().contains("f16 less f32-convert in the same round: median "), log.toString());
            BenchReport rep = new BenchReport(Map.of("model", "micro"), rows);
            String md = rep.markdown();
            assertTrue(md.contains("| verify step ms, in alternation |") && md.contains("f16 against f32-convert")
                    && md.contains(", in alternation "), md);
            JsonNode j = new ObjectMapper().readTree(rep.json());
            assertEquals(rows.get(1).pairedVerifyMs(), j.get("rows").get(1).get("verify_ms_per_step_in_alternation").asDouble());
            assertEquals(d.lo(), j.get("rows").get(1).get("verify_ms_difference_in_alternation_low").asDouble());
            assertTrue(md.contains(String.format(java.util.Locale.ROOT, ", in alternation %+.2f ms (95 %% interval %+.2f to %+.2f ms",
                    d.median(), d.lo(), d.hi())), md);
            BenchReport back = BenchReport.fromJson(rep.write(dir, "p").get(1));
            assertEquals(md, back.markdown(), "the JSON holds the figures in alternation too");
        }
    }

    /**
     * The control's conversion timed two ways: the table shows both figures, the summary's share of the conversion is of
     * the graph-replayed figure (what a control step replayed from a kept graph pays) and then of the one timed alone,
     * and the JSON keeps both; a row with the figure timed alone only renders as before.
     */
    @Test
    void theConversionShareIsOfTheGraphFigureWithTheOneTimedAloneBeside(@TempDir Path dir) throws Exception {
        var none = VerifyPathBench.Row.NO_DIFF;
        var control = new VerifyPathBench.Row(59933, "f32-convert", VerifyPathBench.COPY, 3450, 17.4, 40, 64, 16, 21.3, 64, 64, 1.0,
                1.0, 1.0, 40, false, 1024, 0.800, 0.400, 21.20, none);
        var f16 = new VerifyPathBench.Row(59933, "f16", VerifyPathBench.COPY, 3450, 17.4, 41, 64, 16, 20.7, 64, 64, 1.0,
                1.0, 1.0, 40, false, 1024, Double.NaN, Double.NaN, 20.72, new Stats.Interval(-0.48, -0.52, -0.44));
        assertEquals(0.400, control.stepConversionMs());
        BenchReport rep = new BenchReport(Map.of("model", "made-up figures"), List.of(control, f16));
        String md = rep.markdown();
        assertTrue(md.contains("| 0.800 alone, 0.400 in a graph |"), md);
        assertTrue(md.contains("in alternation -0.48 ms (95 % interval -0.52 to -0.44 ms; 120 % of the control's conversion in a"
                + " graph (0.400 ms), 110 to 130 %; 60 % of it timed alone (0.800 ms))"), md);
        assertTrue(md.contains("replayed from a captured graph"), md);
        assertEquals(0.400, new ObjectMapper().readTree(rep.json()).get("rows").get(0).get("control_conversion_ms_per_step_in_graph").asDouble());
        assertEquals(md, BenchReport.fromJson(rep.write(dir, "g").get(1)).markdown(), "the JSON keeps both figures");
        // a run that names what its graph held says it in the note
        String held = new BenchReport(Map.of("conversion_graph", "the grouped copies of a 5-row step"), List.of(control, f16)).markdown();
        assertTrue(held.contains("replayed from a captured graph without the host's launches, the graph holding the grouped copies"
                + " of a 5-row step; a share"), held);
        assertFalse(md.contains("the graph holding"), md);
        // timed alone only (no graphs, or a run kept from before): the share is of that figure, as earlier runs printed it
        var aloneOnly = new VerifyPathBench.Row(59933, "f32-convert", VerifyPathBench.COPY, 3450, 17.4, 40, 64, 16, 21.3, 64, 64,
                1.0, 1.0, 1.0, 40, false, 1024, 0.800, Double.NaN, 21.20, none);
        assertEquals(0.800, aloneOnly.stepConversionMs());
        String md2 = new BenchReport(Map.of(), List.of(aloneOnly, f16)).markdown();
        assertTrue(md2.contains("| 0.800 |") && md2.contains("; 60 % of the control's conversion, 55 to 65 %)"), md2);
        assertFalse(md2.contains("in a graph"), md2);
        // a graph figure without the one timed alone (a hand-edited file) is shown, as the summary uses it
        var graphOnly = new VerifyPathBench.Row(59933, "f32-convert", VerifyPathBench.COPY, 3450, 17.4, 40, 64, 16, 21.3, 64, 64,
                1.0, 1.0, 1.0, 40, false, 1024, Double.NaN, 0.400, 21.20, none);
        String md3 = new BenchReport(Map.of(), List.of(graphOnly, f16)).markdown();
        assertTrue(md3.contains("| – alone, 0.400 in a graph |") && md3.contains("120 % of the control's conversion in a graph"), md3);
    }
}
