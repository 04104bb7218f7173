package io.ds4j.cli;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.*;

/** {@code ds4j generate}: streams text for a real checkpoint; bad input gives a clear error and a non-zero exit. */
public class GenerateCommandTest {
    static final String FIXTURE = "src/test/resources/fixtures/tiny-hf-bf16";

    public record Run(int code, String out, String err) {}

    public static Run run(String... args) {
        PrintStream oldOut = System.out, oldErr = System.err;
        ByteArrayOutputStream out = new ByteArrayOutputStream(), err = new ByteArrayOutputStream();
        System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
        System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
        try {
            CommandLine cl = Main.commandLine(); // picocli binds its writers to System.out/err when built
            int code = cl.execute(args);
            cl.getErr().flush();
            return new Run(code, out.toString(StandardCharsets.UTF_8), err.toString(StandardCharsets.UTF_8));
        } finally {
            System.setOut(oldOut);
            System.setErr(oldErr);
        }
    }

    /** The prefill progress line (carriage returns, an erase sequence) is for a terminal: none in a captured stderr. */
    @Test
    void noProgressLineWhenStderrIsNoTerminal() {
        Run r = run("generate", "--model", FIXTURE, "--prompt", "a b c d a b c d", "-n", "2",
                "--prefill-chunk", "1");
        assertEquals(0, r.code(), r.err());
        assertFalse(r.err().contains("\r") || r.err().contains("\033[K"), r.err());
        assertFalse(r.err().contains("prefill 1/"), r.err());
    }

    @Test
    void generatesAndSummarises() {
        // the fixture has a 1024-token vocabulary and no tokenizer of its own, so raw prompt ids beyond 1024 would
        // not fit: use a prompt of plain ASCII letters whose vendored-tokenizer ids are small
        Run r = run("generate", "--model", FIXTURE, "--prompt", "a b c d", "-n", "12", "--draft", "ngram", "--spec-q", "2");
        assertEquals(0, r.code(), r.err());
        assertTrue(r.err().contains("generated 12 tokens"), r.err());
        assertTrue(r.err().contains("draft ngram q=2"), r.err());
        assertFalse(r.out().isBlank());
    }

    /**
     * The constraint line's share of the decode steps counts their own masks: the first token's mask, computed in the
     * prefill's step, was counted too, so a short answer showed masks over 100 % of the step ("a" then the end: two
     * masks over one decode step).
     */
    @Test
    void theMaskShareOfTheDecodeStepsLeavesThePrefillsMaskOut(@TempDir Path dir) throws Exception {
        Path one = dir.resolve("a.gbnf");
        java.nio.file.Files.writeString(one, "root ::= \"a\"\n");
        // the embedded tiny model (the server tests' model): the fixture's 1024-id vocabulary is below its tokenizer's
        Run r = run("generate", "--preset", "tiny", "--prompt", "x", "-n", "8", "--grammar", one.toString());
        assertEquals(0, r.code(), r.err());
        assertTrue(r.err().contains("constraint: 2 masks"), r.err());
        assertTrue(r.err().contains("over 1 steps, of which masks"), r.err());
        assertTrue(r.err().contains("(1 mask; the first token's came with the prefill)"), r.err());
    }

    /**
     * A constraint on a model whose vocabulary is below its tokenizer's (the fixture: 1024 ids, the vendored tokenizer's
     * 128815) is refused naming both, not at the first step with "an argmax mask of 2013 words is longer than the
     * vocabulary's 16".
     */
    @Test
    void aConstraintOnAVocabularyBelowTheTokenizersIsRefused(@TempDir Path dir) throws Exception {
        Path one = dir.resolve("a.gbnf");
        java.nio.file.Files.writeString(one, "root ::= \"a\"\n");
        Run r = run("generate", "--model", FIXTURE, "--prompt", "x", "-n", "4", "--grammar", one.toString());
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("--grammar: constrained decoding needs the model's vocabulary to hold the tokenizer's ids,"
                + " but the tokenizer has 128815 tokens, more than the model's vocabulary of 1024"), r.err());
    }

    /**
     * The output constraint's flags and file, and a --draft that is no draft, are refused before the model is made or
     * loaded: the refusal is the only line (they came after 'model: preset ...' and the load).
     */
    @Test
    void constraintAndDraftFlagsAreRefusedBeforeTheModel(@TempDir Path dir) throws Exception {
        Path pattern = dir.resolve("pattern.json");
        java.nio.file.Files.writeString(pattern, "{\"type\": \"string\", \"contentEncoding\": \"base64\"}");
        Path noModel = java.nio.file.Files.createDirectory(dir.resolve("empty"));
        Path leftRecursive = dir.resolve("left.gbnf");
        java.nio.file.Files.writeString(leftRecursive, "root ::= root \"a\" | \"a\"\n");
        String[][] cases = {
                {"--json-schema", "/nonexistent.json"}, {"--json-object", "--json-schema", pattern.toString()},
                {"--json-schema", pattern.toString()}, {"--draft", "bogus"}, {"--draft", noModel.toString()},
                {"--grammar", leftRecursive.toString()}, {"--grammar", "/nonexistent.gbnf"}, {"--json-object", "--grammar", leftRecursive.toString()}};
        String[] said = {"--json-schema: file not found: /nonexistent.json", "--json-schema and --json-object exclude each other",
                "--json-schema: " + pattern + ": JSON Schema keyword 'contentEncoding' (at '/contentEncoding') is not supported", "--draft: must be \"ngram\", \"mtp\" or a model folder; folder not found: " + Path.of("bogus").toAbsolutePath(),
                "--draft: ", "--grammar: " + leftRecursive + ": left recursion is not supported: rule 'root' begins with 'root'",
                "--grammar: file not found: /nonexistent.gbnf", "--grammar excludes --json-schema and --json-object"};
        for (int i = 0; i < cases.length; i++) {
            String[] args = new String[cases[i].length + 5];
            System.arraycopy(new String[]{"generate", "--prompt", "x", "-n", "2"}, 0, args, 0, 5);
            System.arraycopy(cases[i], 0, args, 5, cases[i].length);
            Run r = run(args);
            assertEquals(2, r.code(), String.join(" ", cases[i]) + ": " + r.err());
            assertTrue(r.err().contains("error: " + said[i]), String.join(" ", cases[i]) + ": " + r.err());
            assertFalse(r.err().contains("model: preset") || r.err().contains("creating model"), String.join(" ", cases[i]) + ": " + r.err());
        }
    }

    /**
     * A whole request body given as --json-schema is said to be one, naming where its schema is (the compiler said
     * "JSON Schema keyword 'model' (at '/model') is not supported"), before the model is made.
     */
    @Test
    void aRequestBodyGivenAsTheSchemaIsSaidToBeOne(@TempDir Path dir) throws Exception {
        Path body = dir.resolve("request.json");
        java.nio.file.Files.writeString(body, "{\"model\": \"ds4j\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}],"
                + " \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\", \"schema\": {\"type\": \"object\"}}}}");
        Run r = run("generate", "--prompt", "x", "-n", "2", "--json-schema", body.toString());
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("error: --json-schema: " + body + " looks like a request body (top-level \"messages\", "
                + "\"response_format\", \"model\"), not a JSON Schema: the schema inside it is at /response_format/json_schema/schema"), r.err());
        assertFalse(r.err().contains("creating model") || r.err().contains("keyword"), r.err());
        // one without a schema inside says so; a schema with a property named "model" is a schema
        java.nio.file.Files.writeString(body, "{\"messages\": []}");
        Run none = run("generate", "--prompt", "x", "-n", "2", "--json-schema", body.toString());
        assertTrue(none.err().contains("looks like a request body (top-level \"messages\"), not a JSON Schema: it holds no schema"), none.err());
        assertNull(SchemaFiles.requestBodyProblem(new com.fasterxml.jackson.databind.ObjectMapper().readTree(
                "{\"type\": \"object\", \"properties\": {\"model\": {\"type\": \"string\"}}}"), body));
    }

    /**
     * Control tokens are left out of the printed text by default, as the API's skip_special_tokens; the default
     * preset's random weights greedily write some (placeholders) after "Hello world".
     */
    @Test
    void controlTokensAreLeftOutUnlessKept() {
        Run kept = run("generate", "--prompt", "Hello world", "-n", "8", "--skip-special-tokens", "false");
        assertEquals(0, kept.code(), kept.err());
        assertTrue(kept.out().contains("<｜"), "the greedy text has control tokens: " + kept.out());
        Run r = run("generate", "--prompt", "Hello world", "-n", "8");
        assertEquals(0, r.code(), r.err());
        assertFalse(r.out().contains("<｜"), r.out());
        assertTrue(r.err().contains("generated 8 tokens"), r.err());
    }

    @Test
    void mtpDraftRunsOnAPresetAndIsRefusedWithoutAnMtpLayer() {
        Run plain = run("generate", "--preset", "tiny", "--prompt", "a b c d", "-n", "12");
        Run r = run("generate", "--preset", "tiny", "--prompt", "a b c d", "-n", "12", "--draft", "mtp", "--spec-q", "3");
        assertEquals(0, r.code(), r.err());
        assertTrue(r.err().contains("draft mtp q=3"), r.err());
        assertEquals(plain.out(), r.out(), "greedy text with the MTP draft equals plain greedy text");
        // the reference fixture was written without an MTP layer
        Run no = run("generate", "--model", FIXTURE, "--prompt", "a b", "-n", "4", "--draft", "mtp");
        assertNotEquals(0, no.code());
        assertTrue(no.err().contains("--draft mtp: no usable MTP layer") && no.err().contains("no mtp.* tensors"), no.err());
    }

    @Test
    void sameSeedSameText() {
        Run a = run("generate", "--model", FIXTURE, "--prompt", "a b", "-n", "10", "--temperature", "0.9", "--seed", "5");
        Run b = run("generate", "--model", FIXTURE, "--prompt", "a b", "-n", "10", "--temperature", "0.9", "--seed", "5");
        assertEquals(0, a.code(), a.err());
        assertEquals(a.out(), b.out());
    }

    @Test
    void missingModelIsAClearError(@TempDir Path tmp) {
        Run r = run("generate", "--model", tmp.resolve("nope").toString(), "--prompt", "x");
        assertNotEquals(0, r.code());
        assertTrue(r.err().contains("--model: folder not found"), r.err());
    }

    @Test
    void badFlagValuesAreClearErrors() {
        Run r = run("generate", "--model", FIXTURE, "--prompt", "x", "--temperature", "5");
        assertNotEquals(0, r.code());
        assertTrue(r.err().contains("--temperature: must be in [0, 2], got 5"), r.err());
        r = run("generate", "--model", FIXTURE, "--prompt", "x", "--spec-q", "9", "--draft", "ngram");
        assertNotEquals(0, r.code());
        assertTrue(r.err().contains("1..8"), r.err());
        // -n past what the context leaves is said before the text, not found in a short output
        Run capped = run("generate", "--model", FIXTURE, "--prompt", "a b c", "-n", "100", "--max-context", "16");
        assertEquals(0, capped.code(), capped.err());
        assertTrue(capped.err().contains("note: -n 100 is more than the context leaves"), capped.err());
        // a prompt that does not fit is refused, with no note promising tokens
        Run tooLong = run("generate", "--preset", "tiny", "--prompt", "a b c d e f g h i j k l m n o p q r s t", "-n", "100", "--max-context", "16");
        assertNotEquals(0, tooLong.code());
        assertTrue(tooLong.err().contains("leaves no room in the context") && !tooLong.err().contains("note: -n"), tooLong.err());
        r = run("generate", "--model", FIXTURE, "--prompt", "");
        assertNotEquals(0, r.code());
        // the whole sentence: it ended "the user message, which may be", its last word missing
        assertEquals("error: --prompt must not be empty without --chat (as the API's prompt); with --chat it is the user"
                + " message, which may be empty", r.err().strip());
        r = run("generate", "--model", FIXTURE, "--prompt", "x", "--backend", "tpu");
        assertNotEquals(0, r.code());
        assertTrue(r.err().contains("unknown backend 'tpu'"), r.err());
        r = run("generate", "--model", FIXTURE, "--prompt", "x", "-n", "abc");
        assertNotEquals(0, r.code());
        assertTrue(r.err().contains("abc"), r.err());
        r = run("generate", "--model", FIXTURE, "--prompt", "x", "-n", "-3");
        assertNotEquals(0, r.code());
        assertTrue(r.err().contains("-n / --max-tokens must be >= 1 (as the API's max_tokens), got -3"), r.err());
        // as the server refuses max_tokens 0 for chat (and for completions without echo, which generate has not)
        r = run("generate", "--model", FIXTURE, "--prompt", "x", "-n", "0");
        assertNotEquals(0, r.code(), r.err());
        assertTrue(r.err().contains("-n / --max-tokens must be >= 1 (as the API's max_tokens), got 0"), r.err());
    }

    /**
     * --top-k -1 is off, as top_k -1 is for the API (the same text as 0); a bad sampling flag fails before the model
     * loads (a model directory that does not exist is never reached), naming the flag; the sampling flags have help.
     */
    @Test
    void topKMinusOneIsOffAndBadSamplingFlagsFailBeforeTheModelLoads(@TempDir Path tmp) {
        Run off = run("generate", "--model", FIXTURE, "--prompt", "a b", "-n", "6", "--temperature", "0.9", "--seed", "3", "--top-k", "0");
        Run minusOne = run("generate", "--model", FIXTURE, "--prompt", "a b", "-n", "6", "--temperature", "0.9", "--seed", "3", "--top-k", "-1");
        assertEquals(0, minusOne.code(), minusOne.err());
        assertEquals(off.out(), minusOne.out(), "-1 is off, as 0 is");
        String missing = tmp.resolve("nope").toString();
        for (String[] c : new String[][]{{"--top-k", "-2", "--top-k must be >= -1 (0 or -1 = off), got -2"},
                {"--temperature", "3", "--temperature: must be in [0, 2], got 3"}, {"--top-p", "0", "--top-p: must be in (0, 1], got 0"},
                {"--top-p", "1.5", "--top-p: must be in (0, 1], got 1.5"}, {"--min-p", "-0.1", "--min-p: must be in [0, 1], got -0.1"},
                {"--presence-penalty", "3", "--presence-penalty: must be in [-2, 2], got 3"},
                {"--frequency-penalty", "-3", "--frequency-penalty: must be in [-2, 2], got -3"},
                {"--repetition-penalty", "0", "--repetition-penalty: must be in (0, 10], got 0"},
                {"--max-context", "0", "--max-context must be >= 16 (as serve's limits.maxContextTokens), got 0"},
                {"--max-context", "15", "--max-context must be >= 16 (as serve's limits.maxContextTokens), got 15"}}) {
            Run r = run("generate", "--model", missing, "--prompt", "x", c[0], c[1]);
            assertNotEquals(0, r.code(), c[0] + " " + c[1]);
            assertTrue(r.err().contains(c[2]) && !r.err().contains("folder not found"), c[0] + " " + c[1] + ": " + r.err());
        }
        // past the vocabulary is refused too, in the API's range text (the fixture has 1,024 tokens)
        Run big = run("generate", "--model", FIXTURE, "--prompt", "x", "--top-k", "5000");
        assertEquals(2, big.code(), big.err());
        assertTrue(big.err().contains("--top-k must be in [-1, 1024] (0 or -1 = off; 1024 is the tokenizer's vocabulary), got 5000"), big.err());
        // on the embedded preset the refusal is the only line: the model line comes once the flags hold
        Run preset = run("generate", "--prompt", "x", "--top-k", "999999");
        assertEquals(2, preset.code(), preset.err());
        assertTrue(preset.err().contains("--top-k must be in [-1, "), preset.err());
        assertFalse(preset.err().contains("model: preset"), preset.err());
        String help = run("generate", "--help").out();
        var spec = Main.commandLine().getSubcommands().get("generate").getCommandSpec();
        for (String flag : java.util.List.of("--top-p", "--top-k", "--min-p", "--presence-penalty", "--frequency-penalty", "--repetition-penalty")) {
            String[] d = spec.findOption(flag).description();
            assertTrue(d.length > 0 && d[0].length() > 10, "help for " + flag + ": " + java.util.Arrays.toString(d));
        }
        assertTrue(help.contains("0 or -1 = off"), help);
    }

    /**
     * The checks that need the model's config.json but not its weights come before the weights are read: a folder
     * whose weight file is not safetensors fails at the load, yet --top-k past the vocabulary and an unknown
     * --reasoning-effort are refused first, naming the flag.
     */
    @Test
    void topKPastTheVocabularyAndAnUnknownEffortFailBeforeTheWeightsAreRead(@TempDir Path tmp) throws Exception {
        Path dir = java.nio.file.Files.createDirectories(tmp.resolve("model"));
        java.nio.file.Files.copy(Path.of(FIXTURE, "config.json"), dir.resolve("config.json"));
        java.nio.file.Files.writeString(dir.resolve("model.safetensors"), "not safetensors");
        // the premise: this folder fails once its weights are read
        Run load = run("generate", "--model", dir.toString(), "--prompt", "x", "--chat", "--reasoning-effort", "max");
        assertEquals(2, load.code(), load.err());
        assertTrue(load.err().contains("model.safetensors"), load.err());
        Run big = run("generate", "--model", dir.toString(), "--prompt", "x", "--top-k", "999999");
        assertEquals(2, big.code(), big.err());
        assertTrue(big.err().contains("--top-k must be in [-1, 1024] (0 or -1 = off; 1024 is the tokenizer's vocabulary), got 999999"), big.err());
        assertFalse(big.err().contains("model.safetensors"), "refused before the weights are read: " + big.err());
        Run effort = run("generate", "--model", dir.toString(), "--prompt", "x", "--chat", "--reasoning-effort", "ultra");
        assertEquals(2, effort.code(), effort.err());
        assertTrue(effort.err().contains("--reasoning-effort must be none, minimal, low, medium, high, xhigh or max (as the API's "
                        + "reasoning_effort), got 'ultra'"), effort.err());
        assertFalse(effort.err().contains("model.safetensors"), "refused before the weights are read: " + effort.err());
        // an effort in any case, as the API reads one: it passes the check and the load is reached
        Run upper = run("generate", "--model", dir.toString(), "--prompt", "x", "--chat", "--reasoning-effort", "MAX");
        assertTrue(upper.err().contains("model.safetensors") && !upper.err().contains("--reasoning-effort"), upper.err());
        // the largest top-k the model takes still passes the check, and the load is reached
        Run edge = run("generate", "--model", dir.toString(), "--prompt", "x", "--top-k", "1024");
        assertTrue(edge.err().contains("model.safetensors") && !edge.err().contains("--top-k"), edge.err());
    }

    /**
     * The context is capped at the model's max_position_embeddings, as serve caps it; a draft model with a smaller
     * limit drafts only within it (said once), and the output is the same.
     */
    @Test
    void contextIsCappedAtTheModelsLimitAndADraftDraftsWithinItsOwn(@TempDir Path tmp) throws Exception {
        Path small = tmp.resolve("small-context");
        java.nio.file.Files.createDirectories(small);
        try (var files = java.nio.file.Files.list(Path.of(FIXTURE))) {
            for (Path f : files.toList()) java.nio.file.Files.copy(f, small.resolve(f.getFileName()));
        }
        Path cfg = small.resolve("config.json");
        java.nio.file.Files.writeString(cfg, java.nio.file.Files.readString(cfg)
                .replace("\"max_position_embeddings\": 512", "\"max_position_embeddings\": 24"));
        Run r = run("generate", "--model", small.toString(), "--prompt", "a b c d", "-n", "100", "--max-context", "4096");
        assertEquals(0, r.code(), r.err());
        assertTrue(r.err().contains("context: 24 tokens (the model's max_position_embeddings; --max-context 4096 is capped)"), r.err());
        // BOS + 7 prompt tokens ("a b c d"), so 24 - 8 = 16 generated
        int promptTokens = Integer.parseInt(r.err().replaceAll("(?s).*prompt (\\d+) tokens.*", "$1"));
        assertTrue(r.err().contains("generated " + (24 - promptTokens) + " tokens") && r.err().contains("finish length"), r.err());
        Run plain = run("generate", "--model", FIXTURE, "--prompt", "a b c d", "-n", "40");
        Run drafted = run("generate", "--model", FIXTURE, "--prompt", "a b c d", "-n", "40", "--draft", small.toString(), "--spec-q", "4");
        assertEquals(0, drafted.code(), drafted.err());
        assertTrue(drafted.err().contains("draft: its context limit (24 tokens) is below the context in use (512)"), drafted.err());
        assertEquals(plain.out(), drafted.out(), "greedy output does not depend on the draft");
        String offered = drafted.err().replaceAll("(?s).*offered (\\d+),.*", "$1");
        assertTrue(Integer.parseInt(offered) <= 24 - promptTokens, "drafts only within the draft's 24 tokens: " + drafted.err());
        assertTrue(Integer.parseInt(offered) > 0, drafted.err());
    }

    /** In thinking mode the reasoning streams to stderr; the summary line still starts a line of its own. */
    @Test
    void thinkingReasoningEndsItsLineBeforeTheSummary() {
        // the embedded tiny model (the fixture's 1024-token vocabulary has no chat markers)
        Run r = run("generate", "--preset", "tiny", "--prompt", "a b", "-n", "6", "--chat", "--thinking");
        assertEquals(0, r.code(), r.err());
        int at = r.err().indexOf("prompt ");
        assertTrue(at > 0, r.err());
        assertEquals('\n', r.err().charAt(at - 1), "the summary starts its own line: " + r.err());
        // the lines before the summary: the model line, then the reasoning (random text, no </think> in 6 tokens)
        String reasoning = r.err().substring(r.err().indexOf('\n') + 1, at);
        assertFalse(reasoning.isBlank(), "some reasoning was printed: " + r.err());
    }

    /** --reasoning-budget ends the reasoning after that many tokens, and the answer follows on stdout. */
    @Test
    void aReasoningBudgetLetsTheAnswerFollow() {
        Run free = run("generate", "--preset", "tiny", "--prompt", "a b", "-n", "8", "--chat", "--thinking");
        assertEquals(0, free.code(), free.err());
        assertTrue(free.out().isBlank(), "8 tokens of reasoning leave no answer: " + free.out());
        Run cut = run("generate", "--preset", "tiny", "--prompt", "a b", "-n", "8", "--chat", "--thinking", "--reasoning-budget", "2");
        assertEquals(0, cut.code(), cut.err());
        assertFalse(cut.out().isBlank(), "the answer after the cut: " + cut.err());
        Run alone = run("generate", "--preset", "tiny", "--prompt", "a b", "--chat", "--reasoning-budget", "2");
        assertEquals(2, alone.code(), alone.err());
        assertTrue(alone.err().contains("--reasoning-budget needs thinking (--chat with --thinking or --reasoning-effort)"), alone.err());
        // an effort asks for thinking, as the API's reasoning_effort does: the reasoning goes to stderr, not stdout
        Run effort = run("generate", "--preset", "tiny", "--prompt", "a b", "-n", "8", "--chat", "--reasoning-effort", "max");
        assertEquals(0, effort.code(), effort.err());
        assertTrue(effort.out().isBlank(), "8 tokens of reasoning, on stderr: " + effort.out());
    }

    /**
     * --reasoning-effort takes every value the API's reasoning_effort takes, read as the API reads it: none is no
     * thinking (--thinking still wins over it), minimal to high are Think High (as --thinking alone), xhigh and max
     * Think Max; the same generation as each of those, in any case.
     */
    @Test
    void reasoningEffortTakesTheApiValuesWithTheApiMapping() {
        String[] base = {"generate", "--preset", "tiny", "--prompt", "a b", "-n", "6", "--chat"};
        String plain = generated(run(base)), high = generated(run(with(base, "--thinking"))),
                max = generated(run(with(base, "--reasoning-effort", "max")));
        assertNotEquals(plain, high, "the premise: thinking changes the generation");
        assertNotEquals(high, max, "the premise: Think Max changes the generation");
        String[][] cases = {{"none", plain}, {"minimal", high}, {"low", high}, {"medium", high}, {" Medium ", high},
                {"high", high}, {"xhigh", max}, {"x-high", max}, {"MAX", max}};
        for (String[] c : cases) assertEquals(c[1], generated(run(with(base, "--reasoning-effort", c[0]))), c[0]);
        assertEquals(high, generated(run(with(base, "--thinking", "--reasoning-effort", "none"))), "--thinking wins over none");
        Run budget = run(with(base, "--reasoning-effort", "none", "--reasoning-budget", "2"));
        assertEquals(2, budget.code(), budget.err());
        assertTrue(budget.err().contains("--reasoning-budget needs thinking, which --reasoning-effort none turns off"), budget.err());
        // without --chat the refusal names the flags given, not every chat flag
        String[] plainText = {"generate", "--preset", "tiny", "--prompt", "a b", "-n", "6"};
        Run noChat = run(with(plainText, "--reasoning-effort", "none"));
        assertEquals(2, noChat.code(), noChat.err());
        assertTrue(noChat.err().contains("error: --reasoning-effort needs --chat (the chat template"), noChat.err());
        Run two = run(with(plainText, "--system", "s", "--thinking"));
        assertTrue(two.err().contains("error: --system and --thinking need --chat"), two.err());
        // a budget is a chat flag too: named with the others, before what it needs beyond --chat
        Run budgetNoChat = run(with(plainText, "--reasoning-effort", "none", "--reasoning-budget", "3"));
        assertEquals(2, budgetNoChat.code(), budgetNoChat.err());
        assertTrue(budgetNoChat.err().contains("error: --reasoning-effort and --reasoning-budget need --chat"), budgetNoChat.err());
        Run three = run(with(plainText, "--system", "s", "--thinking", "--reasoning-budget", "3"));
        assertTrue(three.err().contains("error: --system, --thinking and --reasoning-budget need --chat"), three.err());
    }

    private static String[] with(String[] base, String... more) {
        String[] a = java.util.Arrays.copyOf(base, base.length + more.length);
        System.arraycopy(more, 0, a, base.length, more.length);
        return a;
    }

    /** A generation's text and its summary's token counts (its rates vary from run to run). */
    private static String generated(Run r) {
        assertEquals(0, r.code(), r.err());
        return r.out() + "\n" + r.err().replaceAll("[0-9.]+ tokens/s( \\([^)]*\\))?", "R tokens/s");
    }

    /** The summary says when its prefill rate includes the JIT's warm-up: on the process's first generation only. */
    @Test
    void theFirstGenerationOfAProcessSaysItsPrefillIncludesWarmUp() {
        GenerateCommand.FIRST_IN_PROCESS.set(true); // as in a fresh process; other tests here may have generated
        String note = "includes JIT warm-up";
        Run first = run("generate", "--model", FIXTURE, "--prompt", "a b", "-n", "2");
        Run second = run("generate", "--model", FIXTURE, "--prompt", "a b", "-n", "2");
        assertEquals(0, first.code(), first.err());
        assertTrue(first.err().matches("(?s).*prefill [0-9.]+ tokens/s \\(first generation of this process: includes JIT warm-up\\);.*"),
                first.err());
        assertFalse(second.err().contains(note), second.err());
    }
}
