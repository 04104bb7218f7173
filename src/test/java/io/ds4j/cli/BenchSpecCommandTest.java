package io.ds4j.cli;

import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import io.ds4j.model.synth.RandomCheckpoint;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@code ds4j bench-spec}: the prediction and replay sources on the tiny fixture. */
class BenchSpecCommandTest {
    /** A row's figures: tokens/s, acceptance, tokens/step, speed-up, draft cost per step. */
    static Matcher row(String out, String label) {
        Matcher m = Pattern.compile(Pattern.quote(label) + "\\s+([\\d.]+)\\s+(\\S+)\\s+([\\d.]+)\\s+([\\d.]+)x\\s+(\\S+)").matcher(out);
        assertTrue(m.find(), "a row for " + label + ": " + out);
        return m;
    }

    @Test
    void replayIsAcceptedWholeAndThePredictionRowsPrint() {
        GenerateCommandTest.Run r = GenerateCommandTest.run("bench-spec", "--model", GenerateCommandTest.FIXTURE,
                "--sources", "none,ngram,prediction,replay", "--prompt-tokens", "12", "--decode-tokens", "21", "--prompts", "1",
                "--spec-q", "4");
        assertEquals(0, r.code(), r.err());
        Matcher replay = row(r.out(), "replay (own output)");
        assertEquals("1.000", replay.group(2), "the target's own greedy output is accepted whole: " + r.out());
        // 20 tokens after the first, 5 per step (4 drafts + the target's own)
        assertEquals("5.00", replay.group(3), r.out());
        Matcher edited = row(r.out(), "prediction (edited)");
        double acc = Double.parseDouble(edited.group(2));
        assertTrue(acc > 0 && acc < 1, "an edited prediction is partly rejected: " + r.out());
        row(r.out(), "none (plain decode)");
        row(r.out(), "none (again, for drift)");
        assertTrue(r.out().contains("draft cost/step"), r.out());
    }

    @Test
    void aBadWidthNamesItsFlag() {
        for (String q : new String[]{"99", "0"}) {
            GenerateCommandTest.Run r = GenerateCommandTest.run("bench-spec", "--model", GenerateCommandTest.FIXTURE, "--spec-q", q);
            assertTrue(r.code() != 0 && r.err().contains("--spec-q: speculative width q must be in 1..8"), r.err());
        }
    }

    @Test
    void anUnknownSourceIsRefused() {
        GenerateCommandTest.Run r = GenerateCommandTest.run("bench-spec", "--model", GenerateCommandTest.FIXTURE, "--sources", "none,mtpx");
        assertTrue(r.code() != 0, r.out());
        assertTrue(r.err().contains("--sources: unknown source 'mtpx'"), r.err());
    }

    @Test
    void anUnknownSourceNamesTheOptionAsTyped() {
        // --drafts and --sources are one option: the message names the one the user wrote
        GenerateCommandTest.Run r = GenerateCommandTest.run("bench-spec", "--drafts", "bogus", "--preset", "tiny");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("--drafts: unknown source 'bogus'"), r.err());
        r = GenerateCommandTest.run("bench-spec", "--preset", "tiny", "--sources", "none", "--drafts=ngram,bogus");
        assertTrue(r.err().contains("--drafts: unknown source 'bogus'"), r.err());
        r = GenerateCommandTest.run("bench-spec", "--preset", "tiny", "--drafts", "none", "--sources=ngram,bogus");
        assertTrue(r.err().contains("--sources: unknown source 'bogus'"), r.err());
    }

    @Test
    void anEmptySourceIsRefusedAsTyped() {
        // picocli drops a split list's empty entries: ",," ran plain decoding alone (rc 0), while "--drafts=" was refused
        for (String[] args : new String[][]{{"--drafts", ",,"}, {"--drafts=,"}, {"--drafts", "none,,ngram"}, {"--drafts="}}) {
            // a short run on the fixture, should the list be taken
            List<String> line = new java.util.ArrayList<>(List.of("bench-spec", "--model", GenerateCommandTest.FIXTURE,
                    "--prompt-tokens", "8", "--decode-tokens", "2", "--prompts", "1", "--warmup", "0"));
            line.addAll(List.of(args));
            GenerateCommandTest.Run r = GenerateCommandTest.run(line.toArray(String[]::new));
            assertEquals(2, r.code(), String.join(" ", args) + ": " + r.err());
            assertTrue(r.err().contains("--drafts: unknown source ''"), r.err());
        }
        GenerateCommandTest.Run r = GenerateCommandTest.run("bench-spec", "--model", GenerateCommandTest.FIXTURE,
                "--prompt-tokens", "8", "--decode-tokens", "2", "--prompts", "1", "--warmup", "0", "--sources", ",");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("--sources: unknown source ''"), r.err());
    }

    @Test
    void anUnknownDtypeIsRefusedWithTheOtherProblems() {
        // --prompts 0 keeps the run short whatever happens to --dtype: without the check it was never read (no --preset)
        GenerateCommandTest.Run r = GenerateCommandTest.run("bench-spec", "--dtype", "fp16", "--prompts", "0");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("--dtype: unknown dtype 'fp16'") && r.err().contains("--prompts must be at least 1"), r.err());
    }

    @Test
    void variantOptionsBesideModelAreRefused() {
        GenerateCommandTest.Run r = GenerateCommandTest.run("bench-spec", "--model", GenerateCommandTest.FIXTURE,
                "--layers", "3", "--dtype", "bf16", "--prompts", "0");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("--layers, --dtype make a preset variant as the model and do not apply beside --model DIR"), r.err());
    }

    @Test
    void aDtypeAloneMakesTheSmallVariant() {
        assertTrue(BenchSpecCommand.plainSmall(null, null, null, null), "the default: the small preset");
        assertTrue(BenchSpecCommand.plainSmall(null, null, null, RandomCheckpoint.Storage.BF16), "the small preset is BF16");
        assertFalse(BenchSpecCommand.plainSmall(null, null, null, RandomCheckpoint.Storage.FP8), "--dtype fp8 was ignored");
        assertFalse(BenchSpecCommand.plainSmall("small", null, null, null), "--preset: a variant, fp8 by default");
    }
}
