package io.ds4j.cli;

import io.ds4j.server.config.ServerConfig;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.file.AccessDeniedException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static io.ds4j.cli.GenerateCommandTest.run;
import static org.junit.jupiter.api.Assertions.*;

/**
 * Commands that cannot do what they were asked end at once with one clear line and a non-zero exit: serve when it
 * cannot bind or its model/backend check fails (before it logs "listening"), bad flags blamed on the flag, an empty
 * configuration file, bench-engine lengths beyond the context, generate's --spec-q without --draft, no command.
 */
class CliErrorsTest {

    /** Runs a command that must finish on its own (a hang fails the test instead of blocking the build). */
    static GenerateCommandTest.Run runBounded(String... args) throws Exception {
        return CompletableFuture.supplyAsync(() -> run(args)).get(60, TimeUnit.SECONDS);
    }

    /** Skips the calling test on a machine with a usable GPU: it checks what a machine without one is told. */
    static void assumeNoGpu() {
        boolean gpu;
        try {
            io.ds4j.gpu.Gpu.open(0).close();
            gpu = true;
        } catch (Throwable e) {
            gpu = false;
        }
        org.junit.jupiter.api.Assumptions.assumeFalse(gpu, "this machine has a usable GPU");
    }

    static Path config(Path dir, String text) throws Exception {
        Path f = dir.resolve("server.json");
        Files.writeString(f, text);
        return f;
    }

    /** bench-host checks every option before any work: no NaN figures, no late failure, the valid modes named. */
    @Test
    void benchHostRefusesImpossibleOptionsBeforeAnyWork() {
        String[][] bad = {
                {"--streams", "0"}, {"--streams", "1,-3"}, {"--steps", "0"}, {"--pool", "0"}, {"--prompt-tokens", "0"},
                {"--server", "--max-tokens", "0"}, {"--requests-per-client", "0"}, {"--modes", "foo"}};
        String[] expect = {"--streams", "--streams", "--steps", "--pool", "--prompt-tokens", "--max-tokens",
                "--requests-per-client", "unknown mode 'foo', expected greedy or seeded"};
        for (int i = 0; i < bad.length; i++) {
            String[] args = new String[bad[i].length + 1];
            args[0] = "bench-host";
            System.arraycopy(bad[i], 0, args, 1, bad[i].length);
            GenerateCommandTest.Run r = GenerateCommandTest.run(args);
            assertNotEquals(0, r.code(), String.join(" ", args) + ": " + r.out());
            assertTrue(r.err().contains(expect[i]), String.join(" ", args) + ": " + r.err());
            assertFalse(r.out().contains("engine loop"), "refused before any work: " + r.out());
        }
    }

    /**
     * An option of one value given more than once is refused naming it as it was written, with each use (picocli named
     * it by its longest name: "option '--max-tokens' (<maxTokens>) should be specified only once" for -n 3 -n 20).
     */
    @Test
    void aRepeatedOptionIsNamedAsWritten() throws Exception {
        String[][] cases = {
                {"option -n is given twice (-n 3, -n 20); it takes one value: give it once", "generate", "-n", "3", "-n", "20"},
                {"option -n / --max-tokens is given twice (-n 3, --max-tokens=20); it takes one value: give it once",
                        "generate", "-n", "3", "--max-tokens=20"},
                {"option -n is given 3 times (-n3, -n 3, -n 4); it takes one value: give it once", "generate", "-n3", "-n", "3", "-n", "4"},
                {"option --port is given twice (--port 1, --port 2); it takes one value: give it once", "serve", "--port", "1", "--port", "2"}};
        for (String[] c : cases) {
            String[] args = java.util.Arrays.copyOfRange(c, 1, c.length);
            GenerateCommandTest.Run r = runBounded(args);
            assertEquals(2, r.code(), String.join(" ", args) + ": " + r.err());
            assertTrue(r.err().startsWith("error: " + c[0] + "\n"), String.join(" ", args) + ": " + r.err());
        }
    }

    /**
     * A value that is no number for an option that takes one is refused in one line naming the option as written and
     * the value, with exit code 2 (picocli said "Invalid value for option '--max-tokens': 'abc' is not an int" for
     * -n abc, and called an integer too large for its type no int).
     */
    @Test
    void aValueThatIsNoNumberIsNamedWithItsOption() throws Exception {
        String[][] cases = {
                {"option --port takes an integer, got 'abc'", "serve", "--port", "abc"},
                {"option --max-active takes an integer, got '2.5'", "serve", "--max-active=2.5"},
                {"option --port takes an integer of at most 2147483647, got '99999999999'", "serve", "--port", "99999999999"},
                {"option -n takes an integer, got 'abc'", "generate", "-n", "abc"},
                {"option -n takes an integer, got 'x'", "generate", "-nx"},
                // spaces around digits: no integer, not one too large
                {"option -n takes an integer, got ' 5'", "generate", "-n", " 5"},
                {"option --temperature takes a number, got 'warm'", "generate", "--temperature", "warm"},
                {"option --seed takes an integer of at least -9223372036854775808, got '-99999999999999999999'",
                        "bench-engine", "--seed", "-99999999999999999999"},
                {"option --streams takes integers separated by ',', got 'x' (in '1,x')", "bench-host", "--streams", "1,x"}};
        for (String[] c : cases) {
            String[] args = java.util.Arrays.copyOfRange(c, 1, c.length);
            GenerateCommandTest.Run r = runBounded(args);
            assertEquals(2, r.code(), String.join(" ", args) + ": " + r.err());
            assertEquals("error: " + c[0] + "\nrun 'ds4j " + args[0] + " --help' for the options", r.err().strip(), String.join(" ", args));
        }
    }

    @Test
    void serveOnAPortInUseSaysSoAndExits(@TempDir Path dir) throws Exception {
        try (ServerSocket taken = new ServerSocket(0, 50, InetAddress.getLoopbackAddress())) {
            int port = taken.getLocalPort();
            GenerateCommandTest.Run r = runBounded("serve", "--config", config(dir, "{}").toString(), "--port", Integer.toString(port),
                    "--draft", "none");
            assertEquals(1, r.code(), r.err());
            assertTrue(r.err().contains("error: cannot listen on 127.0.0.1:" + port + ": address already in use"), r.err());
            assertFalse(r.err().contains("listening on"), "no 'listening' before the failure: " + r.err());
        }
    }

    /**
     * A cluster flag without --cluster (serve --role gateway, the --cluster forgotten) is refused, naming the flag: it
     * was dropped silently and the server loaded its model and served alone. The missing model folder makes a start
     * without that check end at once too, with another message.
     */
    @Test
    void serveRefusesClusterFlagsWithoutACluster(@TempDir Path dir) throws Exception {
        GenerateCommandTest.Run r = runBounded("serve", "--config", config(dir, "{}").toString(), "--port", "0",
                "--role", "gateway", "--member", "127.0.0.1:5702", "--model", dir.resolve("absent").toString());
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("flag --role: cluster.role: has no effect without a cluster"), r.err());
        assertTrue(r.err().contains("flag --member: cluster.members: has no effect without a cluster"), r.err());
        assertTrue(r.err().contains("give --cluster too"), r.err());
        // where the command line turns the cluster off itself, giving --cluster would conflict with it: not advised
        r = runBounded("serve", "--config", config(dir, "{}").toString(), "--port", "0", "--set", "cluster.enabled=false",
                "--role", "engine", "--model", dir.resolve("absent").toString());
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("cluster.role: has no effect without a cluster (cluster.enabled is false): leave the flag out"), r.err());
        assertFalse(r.err().contains("give --cluster"), r.err());
    }

    @Test
    void serveWithAnInvalidHostSaysSoAndExits(@TempDir Path dir) throws Exception {
        GenerateCommandTest.Run r = runBounded("serve", "--config", config(dir, "{}").toString(), "--port", "0",
                "--host", "256.1.1.1", "--draft", "none");
        assertEquals(1, r.code(), r.err());
        assertTrue(r.err().contains("error: cannot listen on 256.1.1.1:0: "), r.err());
    }

    @Test
    void serveChecksTheModelAndBackendBeforeListening(@TempDir Path dir) throws Exception {
        GenerateCommandTest.Run r = runBounded("serve", "--config", config(dir, "{}").toString(), "--port", "0",
                "--model", dir.resolve("nonexistent").toString());
        // a usage error (exit 2), blamed on the flag the user typed
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("error: flag --model: model.path: folder not found"), r.err());
        assertFalse(r.err().contains("listening on"), r.err());
        Files.createDirectories(dir.resolve("empty"));
        r = runBounded("serve", "--config", config(dir, "{}").toString(), "--port", "0", "--model", dir.resolve("empty").toString());
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("error: flag --model: model.path: ") && r.err().contains("is not a model folder"), r.err());
        assertFalse(r.err().contains("listening on"), r.err());
        r = runBounded("serve", "--config", config(dir, "{}").toString(), "--port", "0", "--draft", dir.resolve("empty").toString());
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("error: flag --draft: speculative.draft: "), r.err());
        // a file's key is blamed on the file
        Path f = config(dir, "{\"model\": {\"path\": \"" + dir.resolve("nope") + "\"}}");
        r = runBounded("serve", "--config", f.toString(), "--port", "0");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("error: " + f + ": model.path: folder not found"), r.err());
        r = runBounded("generate", "--model", dir.resolve("empty").toString(), "--prompt", "x");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("error: --model: "), r.err());
    }

    /**
     * A default top-k past the model's vocabulary (its tokenizer's, read for it before the model loads) fails the start
     * as a usage error (exit 2), blamed on the flag that set it, before listening, as the other checks do.
     */
    @Test
    void serveBlamesATopKPastTheVocabularyOnItsFlag(@TempDir Path dir) throws Exception {
        GenerateCommandTest.Run r = runBounded("serve", "--config", config(dir, "{}").toString(), "--port", "0",
                "--draft", "none", "--set", "sampling.top_k=200000");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("error: flag --set sampling.top_k=200000: sampling.top_k: must be in [-1, "), r.err());
        assertFalse(r.err().contains("listening on"), r.err());
    }

    /**
     * A file with several problems is refused at start naming every one, a default top-k past the model's vocabulary
     * with the others, before listening: the model's tokenizer is read for it (the first start named the other two
     * only, and the next one, with those fixed, loaded the model to refuse top_k).
     */
    @Test
    void serveNamesATopKPastTheVocabularyWithTheOtherProblems(@TempDir Path dir) throws Exception {
        Path f = config(dir, "{\"limits\": {\"maxActiv\": 4, \"maxQueue\": -1}, \"sampling\": {\"top_k\": 999999}}");
        GenerateCommandTest.Run r = runBounded("serve", "--config", f.toString(), "--port", "0", "--draft", "none");
        assertEquals(2, r.code(), r.err());
        int vocab = io.ds4j.text.Tokenizers.vendored().vocabSize();
        assertTrue(r.err().contains("  " + f + ": limits.maxActiv: unknown key (did you mean limits.maxActive?)\n")
                && r.err().contains("  " + f + ": limits.maxQueue: must be an integer in [0, 1048576], got -1\n")
                && r.err().contains("  " + f + ": sampling.top_k: must be in [-1, " + vocab + "] (0 or -1 = off; " + vocab
                + " is the tokenizer's vocabulary), got 999999\n"), r.err());
        assertFalse(r.err().contains("listening on"), r.err());
    }

    /**
     * A default top-k past the vocabulary in the file is refused at start though a flag overrides the key, named after
     * the file (a start without the flag would refuse it); it was hidden by the flag's value, and the server started.
     */
    @Test
    void serveRefusesAFileTopKPastTheVocabularyThatAFlagOverrides(@TempDir Path dir) throws Exception {
        Path f = config(dir, "{\"sampling\": {\"top_k\": 999999}}");
        // a port in use: a start that let the file pass ends there (exit 1) rather than serving on
        try (ServerSocket taken = new ServerSocket(0, 50, InetAddress.getLoopbackAddress())) {
            GenerateCommandTest.Run r = runBounded("serve", "--config", f.toString(), "--port",
                    Integer.toString(taken.getLocalPort()), "--draft", "none", "--set", "sampling.top_k=5");
            assertEquals(2, r.code(), r.err());
            assertTrue(r.err().contains("error: " + f + ": sampling.top_k: must be in [-1, ")
                    && r.err().contains("got 999999 (the file on its own"), r.err());
            assertFalse(r.err().contains("flag --set"), r.err());
        }
    }

    /** A model folder with a config.json but no weight files is refused as one without config.json is: before listening. */
    @Test
    void serveRefusesAModelFolderWithoutWeightsBeforeListening(@TempDir Path dir) throws Exception {
        Path m = Files.createDirectories(dir.resolve("m"));
        Files.copy(Path.of(GenerateCommandTest.FIXTURE, "config.json"), m.resolve("config.json"));
        GenerateCommandTest.Run r = runBounded("serve", "--config", config(dir, "{}").toString(), "--port", "0", "--model", m.toString());
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("error: flag --model: model.path: " + m.toAbsolutePath() + " is not a model folder: ")
                && r.err().contains("no weights found"), r.err());
        assertFalse(r.err().contains("listening on"), r.err());
        // the same for a draft folder
        r = runBounded("serve", "--config", config(dir, "{}").toString(), "--port", "0", "--draft", m.toString());
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("error: flag --draft: speculative.draft: ") && r.err().contains("no weights found"), r.err());
        assertFalse(r.err().contains("listening on"), r.err());
        // an index that lists no shard, and a weight file too short to be safetensors: refused before listening too
        Files.writeString(m.resolve("model.safetensors.index.json"), "{\"weight_map\": {}}");
        r = runBounded("serve", "--config", config(dir, "{}").toString(), "--port", "0", "--model", m.toString());
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("the index lists no shard files"), r.err());
        assertFalse(r.err().contains("listening on"), r.err());
        Files.delete(m.resolve("model.safetensors.index.json"));
        Files.write(m.resolve("model.safetensors"), new byte[0]);
        r = runBounded("serve", "--config", config(dir, "{}").toString(), "--port", "0", "--model", m.toString());
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("truncated: file has 0 bytes"), r.err());
        assertFalse(r.err().contains("listening on"), r.err());
    }

    @Test
    void serveWithBackendHipWithoutAGpuIsAUsageError(@TempDir Path dir) throws Exception {
        assumeNoGpu();
        GenerateCommandTest.Run r = runBounded("serve", "--config", config(dir, "{}").toString(), "--port", "0",
                "--backend", "hip", "--draft", "none");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("error: flag --backend: model.backend: backend 'hip' is not available on this machine"), r.err());
        assertFalse(r.err().contains("listening on"), r.err());
    }

    /** A bad model folder does not hide a backend this machine cannot run: the start's check names both. */
    @Test
    void serveNamesAMissingModelFolderAndAnUnavailableBackendAtOnce(@TempDir Path dir) throws Exception {
        assumeNoGpu();
        Path f = config(dir, "{\"model\": {\"backend\": \"hip\"}}");
        GenerateCommandTest.Run r = runBounded("serve", "--config", f.toString(), "--port", "0", "--draft", "none",
                "--model", dir.resolve("nope").toString());
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("error: the configuration is not valid:\n  flag --model: model.path: folder not found: " + dir.resolve("nope").toAbsolutePath() + "\n  " + f
                + ": model.backend: backend 'hip' is not available on this machine: "), r.err());
        assertFalse(r.err().contains("listening on"), r.err());
    }

    /**
     * The commands that make a model for a backend probe it first: without a GPU, bench (default backend hip, a 43-layer
     * preset of ~18 GB), bench-spec, bench-server and bench-prefix with --backend hip fail before any model is created.
     */
    @Test
    void benchesOnBackendHipWithoutAGpuFailBeforeMakingAModel() throws Exception {
        assumeNoGpu();
        // a preset variant no other test makes: were it made, its folder would name it
        String[][] commands = {
                {"bench", "--preset", "tiny", "--layers", "3", "--experts", "4", "--lengths", "64"},
                {"bench-spec", "--backend", "hip", "--preset", "tiny", "--layers", "3", "--experts", "4", "--prompts", "1"},
                {"bench-server", "--backend", "hip", "--preset", "tiny", "--layers", "3", "--experts", "4", "--clients", "1"},
                {"bench-prefix", "--backend", "hip", "--preset", "tiny", "--layers", "3", "--experts", "4"}};
        for (String[] c : commands) {
            GenerateCommandTest.Run r = runBounded(c);
            assertNotEquals(0, r.code(), String.join(" ", c) + ": " + r.err());
            assertTrue(r.err().contains("backend 'hip' is not available on this machine"), String.join(" ", c) + ": " + r.err());
            assertFalse(r.err().contains("creating model"), String.join(" ", c) + ": " + r.err());
        }
    }

    /**
     * serve refuses a file whose bad values the flags override, naming the file and each value (it started with a
     * warning that the flags win; the next start without them would have refused it), not blaming the flags.
     */
    @Test
    void aBadValueAFlagOverridesIsRefusedAtStart(@TempDir Path dir) throws Exception {
        Path f = config(dir, "{\"server\":{\"port\":\"abc\"},\"limits\":{\"maxActive\":99999}}");
        GenerateCommandTest.Run r = runBounded("serve", "--config", f.toString(), "--port", "0", "--max-active", "3");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("  " + f + ": server.port: must be an integer, got \"abc\" (the file on its own")
                && r.err().contains("  " + f + ": limits.maxActive: "), r.err());
        assertFalse(r.err().contains("flag --"), r.err());
    }

    /** A FIFO given as --config is refused as what it is (it used to read "file not found"), never opened. */
    @Test
    void aFifoAsTheConfigFileIsRefusedAsNotARegularFile(@TempDir Path dir) throws Exception {
        Path fifo = dir.resolve("server.json");
        assertEquals(0, new ProcessBuilder("mkfifo", fifo.toString()).inheritIO().start().waitFor(), "mkfifo");
        GenerateCommandTest.Run r = runBounded("serve", "--config", fifo.toString(), "--port", "0");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("--config: " + fifo.toAbsolutePath() + " is not a regular file (a FIFO, a socket or a device)"),
                r.err());
    }

    /**
     * bench checks where its results go before any work (it ran the whole benchmark and only then failed to write
     * them): a file where the --out folder would be, a folder that cannot be created or written into, a result name
     * taken by a folder and a --name with a folder in it are refused at once, naming --out and why.
     */
    @Test
    void benchChecksWhereItsResultsGoBeforeAnyWork(@TempDir Path dir) throws Exception {
        Path file = Files.writeString(dir.resolve("good.json"), "{}");
        Path taken = Files.createDirectories(dir.resolve("taken").resolve("verify-f16kv.json")).getParent();
        String files = " (bench writes verify-f16kv.md, verify-f16kv.json and verify-f16kv.svg into the folder --out names)";
        Path brokenOut = Files.createSymbolicLink(dir.resolve("gone"), Path.of("/nonexistent-ds4j"));
        Path linked = Files.createDirectories(dir.resolve("linked"));
        Files.createSymbolicLink(linked.resolve("verify-f16kv.json"), Path.of("/nonexistent-ds4j"));
        String[][] cases = {
                {brokenOut.toString(), "--out " + brokenOut + ": a broken link (to /nonexistent-ds4j, which does not exist); give a folder"},
                {linked.toString(), "--out " + linked + ": verify-f16kv.json is a broken link (to /nonexistent-ds4j, which does not exist);"
                        + " remove it, or give another --out or --name"},
                {file.toString(), "--out " + file + ": it exists and is not a folder" + files},
                {file.resolve("sub").toString(), "--out " + file.resolve("sub") + ": cannot create the folder: not a directory"},
                {"/proc/ds4j-bench-out", "--out /proc/ds4j-bench-out: cannot create the folder: no such file or directory"},
                {"/proc", "--out /proc: cannot write into the folder: "},
                {taken.toString(), "--out " + taken + ": verify-f16kv.json exists and is not a file" + files}};
        for (String[] c : cases) {
            for (String[] mode : new String[][]{{"--backend", "cpu", "--preset", "tiny", "--lengths", "64", "--decode-tokens", "4",
                    "--agreement-steps", "1"}, {"--render", "docs/bench/verify-f16kv.json"}}) {
                java.util.List<String> args = new java.util.ArrayList<>(java.util.List.of("bench"));
                args.addAll(java.util.List.of(mode));
                args.addAll(java.util.List.of("--out", c[0]));
                GenerateCommandTest.Run r = runBounded(args.toArray(String[]::new));
                assertEquals(2, r.code(), args + ": " + r.err());
                assertTrue(r.err().startsWith("error: " + c[1]) && r.err().strip().lines().count() == 1, args + ": " + r.err());
                assertEquals("", r.out(), "refused before any work: " + args);
            }
        }
        assertFalse(Files.exists(dir.resolve("taken").resolve("verify-f16kv.md")), "nothing written");
        GenerateCommandTest.Run r = runBounded("bench", "--render", "docs/bench/verify-f16kv.json", "--out", dir.toString(), "--name", "a/b");
        assertEquals(2, r.code(), r.err());
        assertEquals("error: --name must be a file name without a folder (NAME.md, NAME.json and NAME.svg are written into --out), "
                + "got 'a/b'", r.err().strip());
    }

    /**
     * A render's inputs are checked before --out is made: a file given twice is named so (it was refused later as two
     * runs of the same lengths), an input the result would replace is named once, an input that is no bench document is
     * refused naming --render, an option of a run given beside it is named, and none of these leaves an --out folder
     * behind.
     */
    @Test
    void aRendersInputsAreCheckedFirst(@TempDir Path dir) throws Exception {
        Path run = Files.copy(Path.of("docs/bench/verify-f16kv.json"), dir.resolve("run.json"));
        Path out = dir.resolve("out");
        GenerateCommandTest.Run twice = runBounded("bench", "--render", run + "," + run, "--out", out.toString());
        assertEquals("error: --render: " + run + " is given twice", twice.err().strip());
        Path kept = Files.createDirectories(dir.resolve("kept"));
        Path inPlace = Files.copy(run, kept.resolve("verify-f16kv.json"));
        GenerateCommandTest.Run replaced = runBounded("bench", "--render", inPlace.toString(), "--out", kept.toString());
        assertEquals("error: --render: " + inPlace + " the rendered result replaces; give another --out or --name",
                replaced.err().strip());
        Path text = Files.writeString(dir.resolve("notes.json"), "- not json");
        GenerateCommandTest.Run bad = runBounded("bench", "--render", text.toString(), "--out", out.toString());
        assertEquals(2, bad.code(), bad.err());
        assertTrue(bad.err().startsWith("error: --render: " + text + ": not a ds4j bench JSON document"), bad.err());
        assertFalse(Files.exists(out.resolve("verify-f16kv.md")), "nothing rendered");
        for (GenerateCommandTest.Run r : java.util.List.of(twice, replaced)) assertEquals(2, r.code(), r.err());
        GenerateCommandTest.Run missing = runBounded("bench", "--render", dir.resolve("none.json").toString(), "--out",
                dir.resolve("fresh").toString());
        assertEquals(2, missing.code(), missing.err());
        assertFalse(Files.exists(dir.resolve("fresh")), "a refused render leaves no --out folder");
        // an option of a run beside --render is named, not silently unused (the render took the files' figures as they are)
        GenerateCommandTest.Run lengths = runBounded("bench", "--render", run.toString(), "--lengths", "100", "--out",
                dir.resolve("fresh").toString());
        assertEquals(2, lengths.code(), lengths.err());
        assertTrue(lengths.err().startsWith("error: --lengths does not apply beside --render, which only renders the runs in"
                + " its files again"), lengths.err());
        assertFalse(Files.exists(dir.resolve("fresh")), "a refused render leaves no --out folder");
    }

    /**
     * A missing model folder is worded alike by every command that takes one, and a missing, unusable or broken
     * --json-schema / --grammar file alike by generate and bench-server: bench said "/nope/config.json: config.json not
     * found" where generate said "--model: folder not found", and bench-server "cannot read /nope: /nope (No such file
     * or directory)" where generate said "file not found".
     */
    @Test
    void everyCommandWordsAMissingModelFolderAndAConstraintFileAlike(@TempDir Path dir) throws Exception {
        String nope = dir.resolve("nope").toString();
        String missing = "error: --model: folder not found: " + dir.resolve("nope").toAbsolutePath();
        String[][] commands = {{"generate", "--prompt", "x", "--model", nope}, {"bench", "--backend", "cpu", "--model", nope},
                {"bench-engine", "--model", nope}, {"bench-spec", "--model", nope}, {"bench-server", "--model", nope},
                {"bench-prefix", "--model", nope}};
        for (String[] c : commands) {
            GenerateCommandTest.Run r = runBounded(c);
            assertEquals(2, r.code(), String.join(" ", c) + ": " + r.err());
            assertEquals(missing, r.err().strip(), String.join(" ", c));
        }
        GenerateCommandTest.Run draft = runBounded("bench-spec", "--sources", "none,model", "--draft-model", nope);
        assertEquals(2, draft.code(), draft.err());
        assertEquals("error: --draft-model: folder not found: " + dir.resolve("nope").toAbsolutePath(), draft.err().strip());
        // generate's --draft in serve's words for speculative.draft (it said "'nope' is neither 'ngram', 'mtp' nor a model
        // directory")
        GenerateCommandTest.Run gd = runBounded("generate", "--prompt", "x", "--draft", nope);
        assertEquals(2, gd.code(), gd.err());
        assertEquals("error: --draft: must be \"ngram\", \"mtp\" or a model folder; folder not found: "
                + dir.resolve("nope").toAbsolutePath(), gd.err().strip());
        Path broken = Files.writeString(dir.resolve("broken.json"), "{\"type\":\n");
        Path latin1 = Files.write(dir.resolve("latin1"), new byte[]{'r', 'o', 'o', 't', ' ', (byte) 0xE9});
        String[][] files = {
                // one wording of a malformed byte, with its place, for both files
                {"--json-schema", latin1.toString(), "--json-schema: " + latin1 + ": not valid UTF-8: a malformed byte sequence at byte offset 5"},
                {"--grammar", latin1.toString(), "--grammar: " + latin1 + ": not valid UTF-8: a malformed byte sequence at byte offset 5"},
                {"--json-schema", nope, "--json-schema: file not found: " + nope},
                {"--json-schema", dir.toString(), "--json-schema: " + dir + " is not a regular file"},
                {"--json-schema", broken.toString(), "--json-schema: " + broken + ": malformed JSON at line 2, column 1: "},
                {"--grammar", nope, "--grammar: file not found: " + nope},
                {"--grammar", dir.toString(), "--grammar: " + dir + " is not a regular file"}};
        for (String[] f : files) {
            for (String[] c : new String[][]{{"generate", "--prompt", "x"}, {"bench-server", "--clients", "1"}}) {
                String[] args = java.util.stream.Stream.concat(java.util.Arrays.stream(c), java.util.Arrays.stream(f, 0, 2)).toArray(String[]::new);
                GenerateCommandTest.Run r = runBounded(args);
                assertEquals(2, r.code(), String.join(" ", args) + ": " + r.err());
                assertTrue(r.err().startsWith("error: " + f[2]), String.join(" ", args) + ": " + r.err());
            }
        }
    }

    /**
     * A schema or grammar written inline where its file's path is expected (as the API takes it in the request) is told
     * the option takes a file, by generate and bench-server alike: it was "file not found: {"type":"object"}", as if a
     * file of that name were missing.
     */
    @Test
    void aSchemaOrGrammarGivenInlineIsToldTheOptionTakesAFile() throws Exception {
        String[][] files = {{"--json-schema", "{\"type\":\"object\"}", "a JSON Schema"},
                {"--json-schema", " {\"type\": \"string\"}", "a JSON Schema"},
                {"--grammar", "root ::= \"yes\" | \"no\"", "an EBNF grammar"}};
        for (String[] f : files) {
            for (String[] c : new String[][]{{"generate", "--prompt", "x"}, {"bench-server", "--clients", "1"}}) {
                String[] args = java.util.stream.Stream.concat(java.util.Arrays.stream(c), java.util.Arrays.stream(f, 0, 2)).toArray(String[]::new);
                GenerateCommandTest.Run r = runBounded(args);
                assertEquals(2, r.code(), String.join(" ", args) + ": " + r.err());
                assertTrue(r.err().startsWith("error: " + f[0] + ": file not found: " + f[1] + " (" + f[0] + " takes the path of"
                        + " a file holding " + f[2] + ", not " + f[2] + " itself: write it into a file and give its path)"),
                        String.join(" ", args) + ": " + r.err());
            }
        }
    }

    /**
     * A constraint file too large to read in reasonable time and memory is refused by its size before it is read, a
     * schema with more properties than a mask can test in time before any model work, and JSON past a reading limit is
     * said to be too large, not malformed (it may be well-formed).
     */
    @Test
    void aConstraintFileTooLargeOrTooComplexIsRefusedAtOnce(@TempDir Path dir) throws Exception {
        Path big = dir.resolve("big.json");
        try (var f = new java.io.RandomAccessFile(big.toFile(), "rw")) {
            f.setLength((16L << 20) + 1);  // sparse: no 16 MiB written
        }
        StringBuilder many = new StringBuilder("{\"type\":\"object\",\"properties\":{");
        for (int i = 0; i < 10_001; i++) many.append(i == 0 ? "" : ",").append("\"p").append(i).append("\":{\"type\":\"integer\"}");
        Path wide = Files.writeString(dir.resolve("wide.json"), many.append("}}"));
        Path longNumber = Files.writeString(dir.resolve("long.json"), "{\"maximum\": " + "1".repeat(1001) + "}");
        String[][] files = {
                {"--json-schema", big.toString(), "--json-schema: " + big + " is too large: 16,777,217 bytes, more than the 16 MiB a"
                        + " schema or grammar file may hold"},
                {"--grammar", big.toString(), "--grammar: " + big + " is too large: 16,777,217 bytes, more than the 16 MiB a"
                        + " schema or grammar file may hold"},
                {"--json-schema", wide.toString(), "--json-schema: " + wide + ": the schema declares more than 10,000 properties in"
                        + " all (10,001 at '/properties'), more than constrained decoding takes: each token's mask is tested against"
                        + " the property names"},
                {"--json-schema", longNumber.toString(), "--json-schema: " + longNumber + ": the JSON holds a number too long to read:"
                        + " more than 1000 characters (the most this server reads)"}};
        for (String[] f : files) {
            GenerateCommandTest.Run r = runBounded("generate", "--prompt", "x", f[0], f[1]);
            assertEquals(2, r.code(), r.err());
            assertEquals("error: " + f[2], r.err().strip());
        }
    }

    /**
     * A preset variant's options beside --model were silently unused (the folder is the model): bench-server and
     * bench-prefix ran --model's model whatever --layers or --dtype said, bench-spec also whatever --preset said.
     * --max-tokens 0 / --prompts 0 keep each run short should the check be missing.
     */
    @Test
    void variantOptionsBesideModelAreRefused() {
        String[][] runs = {{"bench-server", "--model", GenerateCommandTest.FIXTURE, "--dtype", "fp8", "--max-tokens", "0"},
                {"bench-prefix", "--model", GenerateCommandTest.FIXTURE, "--layers", "3", "--dtype", "fp8", "--max-tokens", "0"},
                {"bench-spec", "--model", GenerateCommandTest.FIXTURE, "--preset", "tiny", "--prompts", "0"}};
        String[] expect = {"--dtype makes a preset variant as the model and does not apply beside --model DIR",
                "--layers, --dtype make a preset variant as the model and do not apply beside --model DIR",
                "--preset makes a preset variant as the model and does not apply beside --model DIR"};
        for (int i = 0; i < runs.length; i++) {
            GenerateCommandTest.Run r = run(runs[i]);
            assertEquals(2, r.code(), String.join(" ", runs[i]) + ": " + r.err());
            assertTrue(r.err().contains(expect[i]), String.join(" ", runs[i]) + ": " + r.err());
        }
    }

    /** bench's --render names a missing file (it was Java's own message), bench-prefix's --workloads the valid ones. */
    @Test
    void renderAndWorkloadsNameWhatIsWrong() {
        GenerateCommandTest.Run r = run("bench", "--render", "/nonexistent-run.json");
        assertEquals(2, r.code(), r.err());
        assertEquals("error: --render: file not found: /nonexistent-run.json", r.err().strip());
        r = run("bench-prefix", "--workloads", "agent,bogus");
        assertEquals(2, r.code(), r.err());
        assertEquals("error: --workloads: unknown workload 'bogus' (agent, doc or choices)", r.err().strip());
    }

    /**
     * bench-prefix checks its lengths and the keys its flags set before any work: --doc-tokens -5 ran the agent workload
     * (half a minute on two cores) and then ended with "error: -5"; --tool-result-tokens -1 said "error: -1" once its
     * server was up; --max-tokens 0 started a server to print its HTTP 400; --prefill-chunk 0 and --budget-mib -1 were
     * named by their configuration keys alone, after the model was made.
     */
    @Test
    void benchPrefixRefusesImpossibleOptionsBeforeAnyWork() {
        String[][] bad = {{"--doc-tokens", "-5"}, {"--doc-tokens", "0"}, {"--tool-result-tokens", "-1"}, {"--max-tokens", "0"},
                {"--prefill-chunk", "0"}, {"--budget-mib", "-1"}};
        String[] expect = {"error: --doc-tokens must be >= 1, got -5", "error: --doc-tokens must be >= 1, got 0",
                "error: --tool-result-tokens must be >= 0, got -1",
                "error: --max-tokens must be >= 1 (the API's max_tokens), got 0",
                "error: --prefill-chunk: must be an integer in [1, 65536] (limits.prefillChunk), got 0",
                "error: --budget-mib: must be an integer in [0, \u221e] (prefixCache.budgetMiB), got -1"};
        for (int i = 0; i < bad.length; i++) {
            String[] args = {"bench-prefix", "--workloads", "doc", bad[i][0], bad[i][1]};
            GenerateCommandTest.Run r = run(args);
            assertEquals(2, r.code(), String.join(" ", args) + ": " + r.out() + r.err());
            assertEquals(expect[i], r.err().strip(), String.join(" ", args));
            assertFalse(r.out().contains("bench-prefix: model"), "refused before any work: " + r.out());
        }
        // every problem at once
        GenerateCommandTest.Run r = run("bench-prefix", "--doc-tokens", "-5", "--max-tokens", "0");
        assertEquals(2, r.code(), r.err());
        assertEquals("error: --doc-tokens must be >= 1, got -5; --max-tokens must be >= 1 (the API's max_tokens), got 0",
                r.err().strip());
    }

    @Test
    void benchSpecNamesEachOptionOutOfRange() {
        GenerateCommandTest.Run r = run("bench-spec", "--preset", "tiny", "--warmup", "-1", "--decode-tokens", "1");
        assertEquals(2, r.code(), r.err());
        assertEquals("error: --decode-tokens must be at least 2, got 1; --warmup must be at least 0 (the untimed passes before"
                + " the timed ones), got -1", r.err().strip());
        // an unknown backend among them is named with them; --warmup 0 is no problem (bench-engine takes it too)
        r = run("bench-spec", "--backend", "nope", "--warmup", "0");
        assertEquals(2, r.code(), r.err());
        assertEquals("error: --backend: unknown backend 'nope' (expected one of [cpu, hip])", r.err().strip());
    }

    @Test
    void flagErrorsNameTheFlagAndFileErrorsTheFile(@TempDir Path dir) throws Exception {
        Path f = config(dir, "{}");
        GenerateCommandTest.Run r = runBounded("serve", "--config", f.toString(), "--port", "70000");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("flag --port: server.port: must be an integer in [0, 65535], got 70000"), r.err());
        assertFalse(r.err().contains(f.toString()), "the file is not blamed: " + r.err());
        r = runBounded("serve", "--config", f.toString(), "--set", "limits.maxActive=0");
        assertTrue(r.err().contains("flag --set limits.maxActive=0: limits.maxActive"), r.err());
        // a flag's number is judged as written, as the file's and a request's are
        r = runBounded("serve", "--config", f.toString(), "--set", "limits.maxActive=2.0000000000000001");
        assertTrue(r.err().contains("limits.maxActive: must be an integer, got 2.0000000000000001"), r.err());
        r = runBounded("serve", "--config", f.toString(), "--set", "sampling.temperature=2.0000000000000000001");
        assertTrue(r.err().contains("sampling.temperature: must be in [0, 2], got 2.0000000000000000001"), r.err());
        // a conflict of two spellings that a double reads alike but that differ as written hides neither
        r = runBounded("serve", "--config", f.toString(), "--set", "sampling.temperature=2", "--set",
                "sampling.temperature=2.0000000000000000001");
        assertEquals(2, r.code(), r.err());
        // a refused API key is named by its kind and its flag shows no key
        r = runBounded("serve", "--config", f.toString(), "--set", "server.apiKeys=sk-SECRET2");
        assertEquals(2, r.code(), r.err());
        assertFalse(r.err().contains("sk-SECRET2"), r.err());
        r = runBounded("serve", "--config", f.toString(), "--set", "server.apiKeys=[\" sk-SECRET4\"]");
        assertEquals(2, r.code(), r.err());
        assertFalse(r.err().contains("sk-SECRET4"), r.err());
        r = runBounded("serve", "--config", f.toString(), "--set", "limits.maxActiv=3");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("unknown configuration key 'limits.maxActiv' (did you mean limits.maxActive?)"), r.err());
        r = runBounded("serve", "--config", f.toString(), "--set", "shutdownGraceSeconds=3");
        assertTrue(r.err().contains("unknown configuration key 'shutdownGraceSeconds' (did you mean server.shutdownGraceSeconds?)"), r.err());
        // a key in the wrong group is told the group it is in, as in the file
        r = runBounded("serve", "--config", f.toString(), "--set", "limits.maxBodyBytes=1024");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("unknown configuration key 'limits.maxBodyBytes' (did you mean server.maxBodyBytes?)"), r.err());
        Path bad = config(dir, "{\"limits\": {\"maxActive\": 0}}");
        r = runBounded("serve", "--config", bad.toString());
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains(bad + ": limits.maxActive"), r.err());
    }

    static final String F16_GATE = "verify.f16Kv: the F16-KV verifier (--fused-verify-f16-kv) requires backend hip on a single device; current: ";

    @Test
    void serveRefusesTheF16KvVerifierOutsideSingleDeviceHipInOneLine(@TempDir Path dir) throws Exception {
        Path f = config(dir, "{}");
        GenerateCommandTest.Run r = runBounded("serve", "--config", f.toString(), "--port", "0", "--fused-verify-f16-kv");
        assertEquals(2, r.code(), r.err());
        assertEquals("error: flag --fused-verify-f16-kv: " + F16_GATE + "backend cpu on 1 device", r.err().strip(),
                "one line, no stack trace");
        // set in the file: blamed on the file, every refusal listed
        Path two = config(dir, "{\"model\": {\"backend\": \"hip\"}, \"gpu\": {\"devices\": 2}, \"verify\": {\"f16Kv\": true}}");
        r = runBounded("serve", "--config", two.toString(), "--port", "0");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains(two + ": " + F16_GATE + "backend hip on 2 devices"), r.err());
        assertTrue(r.err().contains(two + ": gpu.devices: backend hip runs on a single device"), r.err());
        assertFalse(r.err().contains("\tat ") || r.err().contains("Exception"), r.err());
        // a flag that makes that file's combination hold does not hide it: a start without the flag would refuse the file
        r = runBounded("serve", "--config", two.toString(), "--port", "0", "--gpu-devices", "1");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains(two + ": gpu.devices: backend hip runs on a single device") && r.err().contains(
                "(the file on its own: the command line's values hide it now, and a start without them would refuse the file)"), r.err());
        // a flag overrides a valid file and goes through the same gate: one device passes it (the missing model folder
        // then stops the start, before anything binds, so this test never needs a GPU)
        Path one = config(dir, "{\"model\": {\"backend\": \"hip\"}, \"verify\": {\"f16Kv\": true}}");
        r = runBounded("serve", "--config", one.toString(), "--port", "0", "--gpu-devices", "1",
                "--model", dir.resolve("nonexistent").toString());
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("flag --model: model.path: folder not found"), r.err());
        assertFalse(r.err().contains("verify.f16Kv"), r.err());
        f = config(dir, "{}");
        r = runBounded("serve", "--config", f.toString(), "--port", "0", "--backend", "hip", "--gpu-devices", "3");
        assertEquals(2, r.code(), r.err());
        assertEquals("error: flag --gpu-devices: gpu.devices: backend hip runs on a single device (no multi-device split);"
                + " current: backend hip on 3 devices", r.err().strip());
    }

    @Test
    void serveChecksTheGpuFlags(@TempDir Path dir) throws Exception {
        Path f = config(dir, "{}");
        GenerateCommandTest.Run r = runBounded("serve", "--config", f.toString(), "--expert-placement", "sideways");
        assertEquals(2, r.code(), r.err());
        assertEquals("error: flag --expert-placement: gpu.expertPlacement: must be one of auto, monolithic, hybrid, got \"sideways\"",
                r.err().strip());
        r = runBounded("serve", "--config", f.toString(), "--gpu-memory-budget-mib", "-1");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("flag --gpu-memory-budget-mib: gpu.memoryBudgetMiB: must be an integer in [0, ∞], got -1"), r.err());
        r = runBounded("serve", "--config", f.toString(), "--set", "verify.f32ShortContextRows=5000");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("verify.f32ShortContextRows: must be an integer in [1, 4096], got 5000"), r.err());
    }

    @Test
    void generateGatesTheGpuOptions() throws Exception {
        GenerateCommandTest.Run r = runBounded("generate", "--model", GenerateCommandTest.FIXTURE, "--prompt", "x", "--fused-verify-f16-kv");
        assertEquals(2, r.code(), r.err());
        assertEquals("error: " + F16_GATE + "backend cpu on 1 device", r.err().strip());
        r = runBounded("generate", "--model", GenerateCommandTest.FIXTURE, "--prompt", "x", "--backend", "hip", "--gpu-devices", "2");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("gpu.devices: backend hip runs on a single device"), r.err());
        r = runBounded("generate", "--model", GenerateCommandTest.FIXTURE, "--prompt", "x", "--expert-placement", "x");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("--expert-placement: must be one of auto, monolithic, hybrid, got \"x\""), r.err());
        // the GPU options do not apply to backend cpu and leave it working
        r = runBounded("generate", "--model", GenerateCommandTest.FIXTURE, "--prompt", "a b", "-n", "2", "--expert-placement", "hybrid");
        assertEquals(0, r.code(), r.err());
    }

    @Test
    void anEmptyConfigFileIsRefused(@TempDir Path dir) throws Exception {
        for (String text : new String[]{"", "  \n\t"}) {
            GenerateCommandTest.Run r = runBounded("serve", "--config", config(dir, text).toString(), "--port", "0");
            assertEquals(2, r.code(), r.err());
            assertTrue(r.err().contains("the file is empty; write {} to use every default"), r.err());
        }
    }

    /**
     * A key given twice or bytes that are not UTF-8 refuse the file at start, naming the key or the byte offset (not
     * read as the last value, or as U+FFFD), as the API refuses such a body.
     */
    @Test
    void aConfigFileWithAKeyTwiceOrBadUtf8IsRefused(@TempDir Path dir) throws Exception {
        Path f = config(dir, "{\"limits\":{\"maxActive\":4,\"maxActive\":5}}");
        // the flag sets the same key: the file is still the one blamed
        GenerateCommandTest.Run r = runBounded("serve", "--config", f.toString(), "--port", "0", "--max-active", "3");
        assertEquals(2, r.code(), r.err());
        assertEquals("error: the configuration is not valid:\n  " + f + ": limits.maxActive: is given twice in one JSON object"
                + " (the second time at line 1, column 37); give each key once\n  " + f + ": " + ServerConfig.NOT_CHECKED,
                r.err().strip());
        Files.write(f, "{\"model\":{\"name\":\"a\u00ffb\"}}".getBytes(java.nio.charset.StandardCharsets.ISO_8859_1));
        r = runBounded("serve", "--config", f.toString(), "--port", "0");
        assertEquals(2, r.code(), r.err());
        assertEquals("error: the configuration is not valid:\n  " + f + ": not valid UTF-8: a malformed byte sequence at byte"
                + " offset 19\n  " + f + ": " + ServerConfig.NOT_CHECKED, r.err().strip());
        // a --set value is read as JSON in the same way: "4,5" is not 4 with the rest ignored
        r = runBounded("serve", "--config", config(dir, "{}").toString(), "--port", "0", "--set", "limits.maxActive=4,5");
        assertEquals(2, r.code(), r.err());
        assertEquals("error: flag --set limits.maxActive=4,5: limits.maxActive: must be an integer, got \"4,5\"", r.err().strip());
    }

    /**
     * A config file with a syntax error does not hide the rest: the refusal says the file's keys were not checked, and
     * the flags' values are judged without it, the model folder a flag names included (the start's check).
     */
    @Test
    void aConfigFileWithASyntaxErrorStillHasTheFlagsChecked(@TempDir Path dir) throws Exception {
        Path f = config(dir, "{\"limits\": {\"maxActive\": 4,}");
        GenerateCommandTest.Run r = runBounded("serve", "--config", f.toString(), "--port", "0", "--max-active", "0",
                "--model", dir.resolve("nonexistent").toString());
        assertEquals(2, r.code(), r.err());
        assertEquals("error: the configuration is not valid:\n  " + f + ": malformed JSON at line 1, column 28: unexpected"
                + " character '}': expected a field name in double quotes\n  " + f + ": " + ServerConfig.NOT_CHECKED
                + "\n  flag --max-active: limits.maxActive: must be an integer in [1, 4096], got 0"
                + "\n  flag --model: model.path: folder not found: " + dir.resolve("nonexistent").toAbsolutePath(), r.err().strip());
    }

    /** An API key given by the flag that no client could send is blamed on the flag, without showing the key. */
    @Test
    void anApiKeyWithSpacesAtItsEndsIsRefused(@TempDir Path dir) throws Exception {
        GenerateCommandTest.Run r = runBounded("serve", "--config", config(dir, "{}").toString(), "--port", "0", "--api-key", " k ");
        assertEquals(2, r.code(), r.err());
        assertEquals("error: flag --api-key: server.apiKeys: the key at index 0 starts or ends with a space, tab or control"
                + " character, which no client can send (it is stripped from the Authorization header before the key is"
                + " compared); remove it from the key", r.err().strip());
    }

    @Test
    void benchEngineChecksTheLengthsAgainstTheContext() throws Exception {
        GenerateCommandTest.Run r = runBounded("bench-engine", "--preset", "tiny", "--prompt-tokens", "2000000");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("--prompt-tokens (2000000) + --decode-tokens (64) = 2000064 exceeds --max-context 65536"), r.err());
        r = runBounded("bench-engine", "--model", GenerateCommandTest.FIXTURE, "--prompt-tokens", "2000000", "--max-context", "3000000");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("exceeds the model's context of"), r.err());
        String[][] bad = {{"--decode-tokens", "0", "--decode-tokens must be >= 1, got 0"}, {"--repeats", "-1", "--repeats must be >= 1, got -1"},
                {"--warmup", "-2", "--warmup must be >= 0, got -2"}, {"--chunk", "0", "--chunk must be >= 1, got 0"}};
        for (String[] b : bad) {
            r = runBounded("bench-engine", "--model", GenerateCommandTest.FIXTURE, b[0], b[1]);
            assertEquals(2, r.code(), r.err());
            assertTrue(r.err().contains("error: " + b[2]), r.err());
        }
    }

    @Test
    void generateChecksSpecQWithoutADraft() throws Exception {
        for (String q : new String[]{"abc", "9", "-1"}) {
            GenerateCommandTest.Run r = runBounded("generate", "--model", GenerateCommandTest.FIXTURE, "--prompt", "x", "--spec-q", q);
            assertEquals(2, r.code(), r.err());
            assertTrue(r.err().contains("--spec-q: must be 1..8, auto or 0 (no speculation), got '" + q + "'"), r.err());
        }
    }

    /** --spec-q 0 is no speculation, as serve's speculative.q 0: a draft beside it is said to be unused, not loaded. */
    @Test
    void generateTakesSpecQZeroAsNoSpeculation() throws Exception {
        GenerateCommandTest.Run r = runBounded("generate", "--model", GenerateCommandTest.FIXTURE, "--prompt", "x", "-n", "3",
                "--spec-q", "0", "--draft", "ngram");
        assertEquals(0, r.code(), r.err());
        assertTrue(r.err().contains("draft: not used (--spec-q 0 turns speculation off)"), r.err());
        assertFalse(r.err().contains("acceptance"), "no draft figures: " + r.err());
    }

    /**
     * A word that is no command is called an unknown command, with a close name where there is one and the commands
     * (picocli said "Unmatched argument at index 0: 'nosuch'"); an option given last without its value is named as
     * written (picocli named -n by its longest name, "Missing required parameter for option '--max-tokens'").
     */
    @Test
    void anUnknownCommandAndAnOptionWithoutItsValueAreNamed() throws Exception {
        String commands = "; the commands: help, make-model, generate, bench-engine, bench-spec, bench, serve, bench-server, "
                + "bench-prefix, bench-host";
        String[][] cases = {
                {"unknown command 'nosuch'" + commands, "ds4j", "nosuch"},
                {"unknown command 'generat' (did you mean generate?)" + commands, "ds4j", "generat"},
                // never "(did you mean serve?)" for what reads as serve itself
                {"'--' ends the options: nothing after it is read as a command, so 'serve' is not one (leave the '--' out: ds4j"
                        + " serve)" + commands, "ds4j", "--", "serve"},
                {"unknown command ' serve' (it has spaces around the name: did you mean serve?)" + commands, "ds4j", " serve"},
                // help for a command that does not exist (picocli: "Unknown subcommand 'nosuch'.")
                {"unknown command 'nosuch'" + commands, "ds4j", "help", "nosuch"},
                {"unknown command 'generat' (did you mean generate?)" + commands, "ds4j", "help", "generat"},
                // a word given to a command of options only (picocli: "Unmatched argument at index 1: 'extra'")
                {"'extra' is not an option: ds4j serve takes options only (each value after its option's name)", "ds4j serve",
                        "serve", "extra"},
                {"'world' is not an option: ds4j generate takes options only (each value after its option's name)",
                        "ds4j generate", "generate", "--prompt", "hello", "world"},
                {"option -n needs a value", "ds4j generate", "generate", "--prompt", "hi", "-n"},
                {"option --max-tokens needs a value", "ds4j generate", "generate", "--prompt", "hi", "--max-tokens"},
                {"option --port needs a value", "ds4j serve", "serve", "--port"},
                // followed by another option rather than its value (picocli: "Expected parameter for option '--max-tokens'
                // but found '--temperature'")
                {"option -n needs a value, got the option --temperature", "ds4j generate", "generate", "--prompt", "hi", "-n",
                        "--temperature", "1"},
                {"option --max-tokens needs a value, got the option --seed", "ds4j generate", "generate", "--prompt", "hi",
                        "--max-tokens", "--seed=3"}};
        for (String[] c : cases) {
            String[] args = java.util.Arrays.copyOfRange(c, 2, c.length);
            GenerateCommandTest.Run r = runBounded(args);
            assertEquals(2, r.code(), String.join(" ", args) + ": " + r.err());
            assertEquals("error: " + c[0] + "\nrun '" + c[1] + " --help' for the options", r.err().strip(), String.join(" ", args));
        }
        // a required option not given at all keeps picocli's words, which name it
        GenerateCommandTest.Run none = runBounded("generate");
        assertEquals(2, none.code(), none.err());
        assertTrue(none.err().startsWith("error: Missing required option: '--prompt=<prompt>'"), none.err());
    }

    @Test
    void noCommandPrintsUsageAndFails() throws Exception {
        GenerateCommandTest.Run r = runBounded();
        assertNotEquals(0, r.code());
        assertTrue(r.err().contains("Usage: ds4j"), r.err());
        assertEquals(0, runBounded("--help").code());
    }

    @Test
    void fileSystemErrorsSayWhatFailed() {
        assertEquals("cannot access /proc/nope: no such file or directory", Main.describe(new NoSuchFileException("/proc/nope")));
        assertEquals("cannot access /x: permission denied", Main.describe(new AccessDeniedException("/x")));
        assertEquals("n/a", GenerateCommand.fmt(Double.NaN, "%.3f"));
        assertEquals("0.500", GenerateCommand.fmt(0.5, "%.3f"));
    }
    /** serve's flags as parsed: the overrides they give, or the refusal's message. */
    static Object serveOverrides(String... args) {
        ServeCommand cmd = new ServeCommand();
        new picocli.CommandLine(cmd).parseArgs(args);
        try {
            return cmd.overrides();
        } catch (picocli.CommandLine.ParameterException e) {
            return e.getMessage();
        }
    }

    /**
     * One key given twice on the command line with different values is refused, naming both: a dedicated flag used to
     * beat a --set of its key silently, and of two --sets the last won.
     */
    @Test
    void aKeyGivenTwiceWithDifferentValuesIsRefused(@TempDir Path dir) throws Exception {
        assertEquals("--set limits.maxQueue=30 conflicts with --max-queue 20: give the key once",
                serveOverrides("--max-queue", "20", "--set", "limits.maxQueue=30"));
        assertEquals("--set limits.maxQueue=30 conflicts with --max-queue 20: give the key once",
                serveOverrides("--set", "limits.maxQueue=30", "--max-queue", "20"), "whatever the order");
        assertEquals("--set limits.maxQueue=30 conflicts with --set limits.maxQueue=20: give the key once",
                serveOverrides("--set", "limits.maxQueue=20", "--set", "limits.maxQueue=30"));
        // API keys are secrets: the message names the flags, not the keys
        assertEquals("--set server.apiKeys=*** conflicts with --api-key ***: give the key once",
                serveOverrides("--api-key", "sekrit1", "--api-key", "b", "--set", "server.apiKeys=[\"sekrit1\"]"));
        assertEquals("--set verify.f16Kv=false conflicts with --fused-verify-f16-kv: give the key once",
                serveOverrides("--fused-verify-f16-kv", "--set", "verify.f16Kv=false"));
        // the same value twice is one value
        assertEquals(java.util.Map.of("limits.maxQueue", 20), serveOverrides("--max-queue", "20", "--set", "limits.maxQueue=20",
                "--set", "limits.maxQueue=20.0"));
        assertEquals(java.util.Map.of("model.path", "m"), serveOverrides("--model", "m", "--set", "model.path=m"));
        // through the command line: a usage error, before anything starts
        GenerateCommandTest.Run r = runBounded("serve", "--config", config(dir, "{}").toString(), "--max-queue", "20",
                "--set", "limits.maxQueue=30");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("error: --set limits.maxQueue=30 conflicts with --max-queue 20: give the key once"), r.err());
        assertFalse(r.err().contains("listening on"), r.err());
    }

    /**
     * One value written two ways is one value as its key reads it (the widths auto and "AUTO"), and null is a value:
     * --set model.name=null used to be dropped (the file's name stayed, and --model-name x beside it was no conflict).
     * --spec-q gives its width as the number a file holds (a file's "4" is refused), and 0 as a number too.
     */
    @Test
    void aValueIsComparedAsItsKeyReadsItAndNullIsAValue() throws Exception {
        assertEquals(java.util.Map.of("speculative.q", 4), serveOverrides("--spec-q", "4", "--set", "speculative.q=4"));
        assertEquals(java.util.Map.of("speculative.q", 0), serveOverrides("--spec-q", "0"));
        assertEquals("0", io.ds4j.server.config.ServerConfig.parse("{}", "f", java.util.Map.of("speculative.q", 0)).specQ());
        // a log level in any case is that level (the configuration lower-cases it)
        assertEquals(java.util.Map.of("log.level", "DEBUG"), serveOverrides("--log-level", "DEBUG", "--set", "log.level=debug"));
        assertEquals(java.util.Map.of("speculative.q", "auto"), serveOverrides("--spec-q", "auto", "--set", "speculative.q=\"AUTO\""));
        assertEquals("--set speculative.q=5 conflicts with --spec-q 4: give the key once",
                serveOverrides("--spec-q", "4", "--set", "speculative.q=5"));
        assertEquals("--set model.name=null conflicts with --model-name other: give the key once",
                serveOverrides("--model-name", "other", "--set", "model.name=null"));
        Object o = serveOverrides("--set", "sampling.seed=null");
        assertTrue(o instanceof java.util.Map<?, ?> m && m.containsKey("sampling.seed") && m.get("sampling.seed") == null, String.valueOf(o));
        @SuppressWarnings("unchecked") java.util.Map<String, Object> ov = (java.util.Map<String, Object>) o;
        io.ds4j.server.config.ServerConfig cfg = io.ds4j.server.config.ServerConfig.parse("{\"sampling\": {\"seed\": 42}}", "f", ov);
        assertNull(cfg.get("sampling.seed"), "the command line's null wins over the file's 42");
        // the server keeps the override for its reloads
        assertTrue(new io.ds4j.server.Ds4jServer.Options(cfg, null, ov, null).overrides().containsKey("sampling.seed"));
    }

    @Test
    void makeModelSaysItCannotCreateTheFolderBeforeAnyWork(@TempDir Path dir) throws Exception {
        // a folder under a plain file cannot be made: the error says so, before the model's summary is printed
        Path file = Files.writeString(dir.resolve("plain-file"), "x");
        var r = run("make-model", "--preset", "tiny", "--seed", "1", "--out", file.resolve("model").toString());
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("--out " + file.resolve("model") + ": cannot create the folder"), r.err());
        assertFalse(r.out().contains("make-model: preset"), r.out());
    }

    @Test
    void makeModelSaysItCannotWriteIntoAnExistingFolderBeforeAnyWork() throws Exception {
        // an existing folder that cannot be written into (here /proc, with --force for a non-empty one): the error says
        // so before the model's summary, as for a folder that cannot be made (it came after the summary, from the write)
        var r = run("make-model", "--preset", "tiny", "--seed", "1", "--out", "/proc", "--force");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("--out /proc: cannot write into the folder: "), r.err());
        assertFalse(r.out().contains("make-model: preset"), r.out());
    }

    @Test
    void makeModelNamesABrokenLinkAsOut(@TempDir Path dir) throws Exception {
        // a link to nothing read "cannot create the folder: ... it already exists"
        Path link = Files.createSymbolicLink(dir.resolve("link"), dir.resolve("nowhere"));
        var r = run("make-model", "--preset", "tiny", "--seed", "1", "--out", link.toString());
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("--out " + link + ": a broken link (to " + dir.resolve("nowhere") + ", which does not exist)"),
                r.err());
        assertFalse(r.out().contains("make-model: preset"), r.out());
    }
}
