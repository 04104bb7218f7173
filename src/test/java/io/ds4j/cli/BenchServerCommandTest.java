package io.ds4j.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;
import picocli.CommandLine;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@code ds4j bench-server}: its closing line shows the prefill chunk the engine uses, not only the configured one, and the latency bound on prefill. */
class BenchServerCommandTest {
    /** Under 100 requests a level's TTFT p99 is its slowest request, and the table says so; at 100 and more it does not. */
    @Test
    void aLevelOfFewRequestsIsSaidToRestOnThem() {
        assertEquals("(TTFT p99 of a level with 2 requests is its slowest; with few requests one slow request moves that "
                + "level's TTFT and aggregate: more --requests give steadier figures)", BenchServerCommand.fewSamplesNote(2));
        assertTrue(BenchServerCommand.fewSamplesNote(1).contains("with 1 request is"), BenchServerCommand.fewSamplesNote(1));
        assertTrue(BenchServerCommand.fewSamplesNote(99).contains("with 99 requests"));
        assertNull(BenchServerCommand.fewSamplesNote(100));
    }

    @Test
    void theServerBaseTakesAClientLibrarysBaseUrlToo() {
        assertEquals("http://h:8080", BenchServerCommand.serverBase("http://h:8080/v1"));
        assertEquals("http://h:8080", BenchServerCommand.serverBase("http://h:8080/v1/"));
        assertEquals("http://h:8080", BenchServerCommand.serverBase("http://h:8080//"));
        assertEquals("http://h:8080/gw", BenchServerCommand.serverBase("http://h:8080/gw"));
        assertEquals("http://h:8080/v10", BenchServerCommand.serverBase("http://h:8080/v10"), "only a whole /v1 segment");
    }

    @Test
    void theServerLineShowsTheEffectivePrefillChunk() {
        String cut = BenchServerCommand.serverLine(16, 16, 256, 48, 512, 2, 1.6, 64);
        assertTrue(cut.contains("prefill chunk 48 (limits.prefillChunk 512, cut to the token budget)"), cut);
        assertTrue(cut.contains("scheduler.tokenBudget 48"), cut);
        String kept = BenchServerCommand.serverLine(16, 17, 256, 1024, 512, 2, 0, 64);
        assertTrue(kept.contains("prefill chunk 512,"), kept);
        assertFalse(kept.contains("cut to"), kept);
        // the floor in effect: at most the chunk in effect
        assertTrue(cut.contains("scheduler.maxTickStretch 1.6 with scheduler.minPrefillChunk 48 (64 configured, cut to the prefill chunk)"), cut);
        assertTrue(kept.contains("scheduler.maxTickStretch 0 (off"), kept);
        String floor = BenchServerCommand.serverLine(16, 16, 256, 512, 100, 2, 1.6, 512);
        assertTrue(floor.contains("prefill chunk 100, "), floor);
        assertTrue(floor.contains("with scheduler.minPrefillChunk 100 (512 configured, cut to the prefill chunk)"), floor);
        String within = BenchServerCommand.serverLine(16, 16, 256, 512, 512, 2, 1.6, 64);
        assertTrue(within.contains("with scheduler.minPrefillChunk 64,"), within);
    }

    /** The queue is mentioned only where the largest level (plus the long prompt) is more than limits.maxActive. */
    @Test
    void theQueueIsMentionedOnlyWhenSomeoneWaits() {
        String fits = BenchServerCommand.serverLine(3, 3, 256, 512, 512, 2, 1.6, 64);
        assertTrue(fits.startsWith("server: limits.maxActive 3, "), fits);
        assertFalse(fits.contains("queue"), fits);
        String waits = BenchServerCommand.serverLine(3, 5, 256, 512, 512, 2, 1.6, 64);
        assertTrue(waits.startsWith("server: limits.maxActive 3 (2 of the 5 requests at once at the largest level wait in the queue), "), waits);
        String one = BenchServerCommand.serverLine(3, 4, 256, 512, 512, 2, 1.6, 64);
        assertTrue(one.startsWith("server: limits.maxActive 3 (1 of the 4 requests at once at the largest level waits in the queue), "), one);
    }

    /** Parses the events; the clock reads 0 at the request and then each event's arrival (ms), one per event. */
    static BenchServerCommand.Sample sample(long[] ms, String... events) throws Exception {
        ObjectMapper m = new ObjectMapper();
        List<io.ds4j.bench.SseEvents.Arrival> ev = new ArrayList<>();
        for (int i = 0; i < events.length; i++)
            ev.add(new io.ds4j.bench.SseEvents.Arrival(m.readTree(events[i]), ms[Math.min(i, ms.length - 1)] * 1_000_000L));
        return BenchServerCommand.sample(ev, 0, () -> ms[ms.length - 1] * 1_000_000L);
    }

    /**
     * The stream's end is read once its events are read: they are read lazily, while iterated, so an end taken before
     * (as the client's send returns, with the headers) gave an end-to-end rate above the decode rate.
     */
    @Test
    void theEndIsReadAfterTheEvents() throws Exception {
        ObjectMapper m = new ObjectMapper();
        java.util.concurrent.atomic.AtomicLong clock = new java.util.concurrent.atomic.AtomicLong(1_000_000L);
        List<String> events = List.of(chunk("a", null, 1), chunk("b", null, 2), chunk("c", null, 3), chunk(null, "length", 3));
        // each event arrives 10 ms after the one before, as the reader's clock says when it is read
        Iterable<io.ds4j.bench.SseEvents.Arrival> lazy = () -> events.stream().map(e -> {
            try {
                return new io.ds4j.bench.SseEvents.Arrival(m.readTree(e), clock.addAndGet(10_000_000L));
            } catch (Exception x) {
                throw new IllegalStateException(x);
            }
        }).iterator();
        BenchServerCommand.Sample s = BenchServerCommand.sample(lazy, 0, clock::get);
        // 3 tokens over the 41 ms from the request to the last event's read
        assertEquals(3 / 0.041, s.e2eTps(), 1e-6);
    }

    static String chunk(String content, String finish, Integer tokens) {
        return "{\"choices\":[{\"index\":0,\"delta\":" + (content == null ? "{}" : "{\"content\":\"" + content + "\"}")
                + ",\"finish_reason\":" + (finish == null ? "null" : "\"" + finish + "\"") + "}]"
                + (tokens == null ? "" : ",\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":" + tokens + "}") + "}";
    }

    /** With the running usage on every chunk, a chunk of k tokens after a gap g counts k gaps of g / k. */
    @Test
    void aChunkOfSeveralTokensCountsAGapForEach() throws Exception {
        BenchServerCommand.Sample s = sample(new long[]{1, 10, 20, 30, 31},
                chunk("", null, 0), chunk("a", null, 1), chunk("bc", null, 3), chunk("d", null, 4), chunk(null, "length", 4),
                "{\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":4}}");
        assertEquals(4, s.tokens());
        assertArrayEquals(new double[]{10, 10}, s.gapsMs(), 1e-9);
        assertArrayEquals(new double[]{5, 5, 10}, s.tokenGapsMs(), 1e-9);
        assertEquals(1, s.shared());
    }

    /** --requests below the clients (or no multiple of them) is said to be rounded up, once for all levels. */
    @Test
    void requestsRoundedUpToTheClientsAreSaid() {
        assertEquals("--requests 1 is rounded up to 2 at 2 clients (every client runs the same number of requests, at least one)",
                BenchServerCommand.roundedLine(1, List.of(1, 2)));
        assertEquals("--requests 5 is rounded up to 6 at 2 clients, 8 at 4 clients (every client runs the same number of requests, at least one)",
                BenchServerCommand.roundedLine(5, List.of(1, 2, 4)));
        assertNull(BenchServerCommand.roundedLine(4, List.of(1, 2, 4)));
    }

    /**
     * Events that arrived in one read (the same time) are one chunk: its tokens share the gap before it, and no gap of
     * zero (of the microseconds between parsing them) is counted between them.
     */
    @Test
    void eventsOfOneReadAreOneChunk() throws Exception {
        BenchServerCommand.Sample s = sample(new long[]{10, 30, 30, 30, 50, 51},
                chunk("a", null, 1), chunk("b", null, 2), chunk("c", null, 3), chunk("d", null, 4), chunk("e", null, 5),
                chunk(null, "length", 5));
        assertArrayEquals(new double[]{20, 20}, s.gapsMs(), 1e-9);
        assertArrayEquals(new double[]{20 / 3.0, 20 / 3.0, 20 / 3.0, 20}, s.tokenGapsMs(), 1e-9);
        assertEquals(2, s.shared());
    }

    /**
     * The body handler's lines carry the time of the read that brought them: two events in one read share it.
     */
    @Test
    void linesOfOneReadShareItsTime() throws Exception {
        long[] now = {100};
        var sub = io.ds4j.bench.SseEvents.timedLines(() -> now[0]).apply(null);
        sub.onSubscribe(new java.util.concurrent.Flow.Subscription() {
            public void request(long n) { }
            public void cancel() { }
        });
        sub.onNext(List.of(java.nio.ByteBuffer.wrap("data: {\"a\":1}\n\ndata: {\"b\"".getBytes())));
        now[0] = 200;
        sub.onNext(List.of(java.nio.ByteBuffer.wrap(":2}\n\ndata: [DONE]\n".getBytes())));
        sub.onComplete();
        List<io.ds4j.bench.SseEvents.Arrival> ev = new ArrayList<>();
        for (var a : io.ds4j.bench.SseEvents.ofTimed(sub.getBody().toCompletableFuture().get(), new ObjectMapper())) ev.add(a);
        assertEquals(2, ev.size());
        assertEquals(100, ev.get(0).nanos());
        assertEquals(200, ev.get(1).nanos(), "a line is timed by the read that completed it");
        assertEquals(2, ev.get(1).event().get("b").asInt());
    }

    /**
     * --url against a server that puts the usage on its last chunk beside the finish reason (no chunk with empty
     * choices after it, as llama.cpp's server did): the tokens are still read from it.
     */
    @Test
    void theUsageIsReadAlsoFromAChunkWithChoices() throws Exception {
        BenchServerCommand.Sample s = sample(new long[]{10, 20, 30, 31},
                chunk("a", null, null), chunk("b", null, null), chunk("c", null, null), chunk(null, "length", 3));
        assertEquals(3, s.tokens(), "the usage on the finish chunk");
        assertArrayEquals(new double[]{10, 10}, s.tokenGapsMs(), 1e-9);
        assertTrue(s.decodeTps() > 0, "decode tok/s " + s.decodeTps());
    }

    /** The option check of the given flags (null: every value is fine). */
    static String badOption(String... args) {
        BenchServerCommand cmd = new BenchServerCommand();
        new CommandLine(cmd).parseArgs(args);
        return cmd.badOption();
    }

    /** A --json-schema file that is no JSON is one line naming the file, the place and what is wrong, before anything loads. */
    @Test
    void aBrokenSchemaFileIsOneClearLine(@org.junit.jupiter.api.io.TempDir java.nio.file.Path tmp) throws Exception {
        java.nio.file.Path f = tmp.resolve("trunc.json");
        java.nio.file.Files.writeString(f, "{\"type\":\n");
        GenerateCommandTest.Run r = GenerateCommandTest.run("bench-server", "--clients", "1", "--requests", "1", "--json-schema", f.toString());
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("--json-schema: " + f + ": malformed JSON at line 2, column 1: the JSON ends before an object opened at line 1, "
                + "column 1 is closed (a '}' is missing)"), r.err());
        assertFalse(r.err().contains("REDACTED") || r.err().contains("StreamReadFeature"), r.err());
        // a schema the constraint engine cannot enforce is refused here too, before a model loads
        java.nio.file.Files.writeString(f, "{\"type\":\"string\",\"contentEncoding\":\"base64\"}");
        GenerateCommandTest.Run p = GenerateCommandTest.run("bench-server", "--clients", "1", "--requests", "1", "--json-schema", f.toString());
        assertEquals(2, p.code(), p.err());
        assertTrue(p.err().contains("--json-schema: " + f + ": ") && p.err().contains("contentEncoding"), p.err());
        assertFalse(p.out().contains("bench-server: model"), "nothing loaded: " + p.out());
    }

    /** A --grammar the engine cannot enforce is one line naming the file, line and column, before anything loads. */
    @Test
    void aBrokenGrammarFileIsOneClearLine(@org.junit.jupiter.api.io.TempDir java.nio.file.Path tmp) throws Exception {
        java.nio.file.Path f = tmp.resolve("bad.gbnf");
        java.nio.file.Files.writeString(f, "root ::= item\nitem ::= \"x\" thing\n");
        GenerateCommandTest.Run r = GenerateCommandTest.run("bench-server", "--clients", "1", "--requests", "1", "--grammar", f.toString());
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("--grammar: " + f + ": rule 'thing' is used but never defined (at line 2, column 14)"), r.err());
        assertFalse(r.out().contains("bench-server: model"), "nothing loaded: " + r.out());
        GenerateCommandTest.Run both = GenerateCommandTest.run("bench-server", "--grammar", f.toString(), "--json-schema", f.toString());
        assertEquals(2, both.code(), both.err());
        assertTrue(both.err().contains("--json-schema and --grammar each hold the whole output"), both.err());
        // the grammar the benchmark names compiles
        org.junit.jupiter.api.Assertions.assertNotNull(io.ds4j.grammar.Grammar.ebnf(java.nio.file.Files.readString(java.nio.file.Path.of("tools/grammars/bench-person.gbnf"))));
    }

    /** Values out of range are refused with the option's name and its range, not run with a quiet replacement. */
    @Test
    void badOptionValuesAreNamedWithTheirRange() {
        assertNull(badOption());
        assertNull(badOption("--long-prompt", "0", "--max-active", "0"));
        assertNull(badOption("--long-prompt", "0", "--url", "http://127.0.0.1:8080"));
        String[][] cases = { // option, value, the message's start, its end
                {"--max-tokens", "0", "--max-tokens must be >= 1", "got 0"},
                {"--repeats", "0", "--repeats must be >= 1", "got 0"},
                {"--requests", "0", "--requests must be >= 1", "got 0"},
                {"--requests", "-3", "--requests must be >= 1", "got -3"},
                {"--long-prompt", "-5", "--long-prompt must be >= 0 (0 = off)", "got -5"},
                {"--prompt-tokens", "0", "--prompt-tokens must be >= 1", "got 0"},
                {"--clients", "1,0", "--clients: each level must be >= 1", "got 0"},
                {"--max-active", "-1", "--max-active must be >= 0", "got -1"},
                {"--draft", "mtp", "--draft must be none or ngram", "got 'mtp'"},
                {"--url", "localhost:8080", "--url must be an http:// or https:// URL", "got 'localhost:8080'"},
        };
        for (String[] c : cases) {
            String m = badOption(c[0], c[1]);
            assertTrue(m != null && m.startsWith(c[2]) && m.endsWith(c[3]), c[0] + " " + c[1] + ": " + m);
        }
    }

    /**
     * A level given twice is refused before anything loads: the figures are kept per level, so the second round stood
     * for both (with --clients 1,2,1 the aggregate relative to one stream was taken from the last level-1 round).
     */
    @Test
    void aRepeatedLevelIsRefused() {
        assertEquals("--clients: each level may be given once, but 1 is repeated (--clients 1,2,1)", badOption("--clients", "1,2,1"));
        assertEquals("--clients: each level may be given once, but 4 is repeated (--clients 4,16,4,4)",
                badOption("--clients", "4,16,4,4"));
        assertNull(badOption("--clients", "2,1,4"));
        String[] r = run("bench-server", "--clients", "1,2,1", "--model", "/nonexistent/model");
        assertEquals("2", r[0], r[1]);
        assertTrue(r[1].contains("error: --clients: each level may be given once, but 1 is repeated"), r[1]);
    }

    /**
     * An empty --clients level is refused wherever it is (a trailing comma used to pass, "1," running as 1, and one
     * elsewhere got picocli's "'' is not an int"), and a level is named as written: a repeat of 1 written 01, a value
     * that is not a number.
     */
    @Test
    void clientsLevelsAreReadAsWritten() {
        for (String bad : new String[]{"1,", ",1", "1,,2", ","})
            assertEquals("--clients: an empty level in '" + bad + "' (levels are whole numbers separated by commas, e.g. --clients 1,4,16)",
                    badOption("--clients", bad), bad);
        assertEquals("--clients: each level may be given once, but 1 is repeated (as 01 and 1) (--clients 01,1)",
                badOption("--clients", "01,1"));
        assertEquals("--clients: 'x' is not a whole number in the digits 0-9 (--clients 1,x)", badOption("--clients", "1,x"));
        assertEquals("--clients: each level must be >= 1, got -0", badOption("--clients", "4,-0"));
        assertEquals("--clients: each level must be >= 1, got 0", badOption("--clients", "4,0"));
        // ASCII digits as written: no sign, no other script's digits (Integer.parseInt takes both)
        assertEquals("--clients: '+1' is not a whole number in the digits 0-9 (--clients +1)", badOption("--clients", "+1"));
        assertEquals("--clients: '\u0661\u0666' is not a whole number in the digits 0-9 (--clients \u0661\u0666)", badOption("--clients", "\u0661\u0666"));
        assertEquals("--clients: 99999999999 is too large (at most 2147483647) (--clients 1,99999999999)",
                badOption("--clients", "1,99999999999"));
        assertEquals("--clients: each level may be given once, but 4 is repeated (--clients 4 --clients 1,4)",
                badOption("--clients", "4", "--clients", "1,4"));
        BenchServerCommand cmd = new BenchServerCommand();
        new CommandLine(cmd).parseArgs("--clients", "16", "--clients", "1,4");
        assertNull(cmd.badOption());
        assertEquals(List.of(16, 1, 4), cmd.clients, "each occurrence's levels, in order");
        cmd = new BenchServerCommand();
        new CommandLine(cmd).parseArgs();
        assertNull(cmd.badOption());
        assertEquals(List.of(1, 4, 16, 64), cmd.clients, "the default");
        String[] r = run("bench-server", "--clients", "1,", "--model", "/nonexistent/model");
        assertEquals("2", r[0], r[1]);
        assertTrue(r[1].contains("error: --clients: an empty level in '1,'"), r[1]);
    }

    /** A value out of its range is named as written: 1e400 is not "Infinity", 0.50 not 0.5. */
    @Test
    void anOutOfRangeValueIsNamedAsWritten() {
        assertEquals("--max-tick-stretch: must be 0 (off) or in [1, 100] (scheduler.maxTickStretch), got 1e400",
                badOption("--max-tick-stretch", "1e400"));
        assertEquals("--max-tick-stretch: must be 0 (off) or in [1, 100] (scheduler.maxTickStretch), got 0.50",
                badOption("--max-tick-stretch=0.50"));
        assertEquals("--token-budget: must be an integer in [1, 1048576] (scheduler.tokenBudget), got 00",
                badOption("--token-budget", "00"));
        assertEquals("--max-tokens must be >= 1 (the API's max_tokens), got -00", badOption("--max-tokens", "-00"));
    }

    /**
     * With --url, a flag that configures only the server bench-server starts itself is refused when given, even at its
     * default value (--token-budget 100 passed, then the header showed that server's own 512); without one, --url runs.
     */
    @Test
    void localServerFlagsAreRefusedWithUrl() {
        String url = "http://127.0.0.1:8080";
        assertEquals("--token-budget configures the local server bench-server starts without --url, not the one at --url "
                + "(that one runs with its own settings): leave it out with --url", badOption("--url", url, "--token-budget", "100"));
        assertEquals("--token-budget, --max-tick-stretch configure the local server bench-server starts without --url, not "
                        + "the one at --url (that one runs with its own settings): leave them out with --url",
                badOption("--max-tick-stretch", "1.6", "--url", url, "--token-budget", "512"), "given explicitly, at the default too");
        for (String o : BenchServerCommand.LOCAL_SERVER_OPTIONS) {
            String v = switch (o) {
                case "--backend" -> "cpu";
                case "--draft" -> "none";
                case "--layer-slices" -> "true";
                case "--log-level" -> "warn";
                case "--max-tick-stretch" -> "2";
                default -> "8";
            };
            String m = badOption("--url", url, o, v);
            assertTrue(m != null && m.startsWith(o + " configures the local server"), o + ": " + m);
            assertNull(badOption(o, v), o + " without --url");
        }
        // named for being pointless with --url before its value is judged
        assertTrue(badOption("--url", url, "--token-budget", "0").startsWith("--token-budget configures the local server"));
        assertEquals("--api-key is the key for the server at --url; without --url it would have no effect: give --url or "
                + "leave it out", badOption("--api-key", "k"));
        // what applies with --url too: the prompts (sized by the local model), the rounds, the key
        assertNull(badOption("--url", url, "--clients", "1,4", "--requests", "8", "--repeats", "2", "--max-tokens", "4",
                "--prompt-tokens", "16", "--long-prompt", "64", "--preset", "tiny", "--skip-engine-alone", "--api-key", "k"));
        String[] r = run("bench-server", "--url", url, "--token-budget", "100", "--model", "/nonexistent/model");
        assertEquals("2", r[0], r[1]);
        assertTrue(r[1].contains("error: --token-budget configures the local server"), r[1]);
    }

    /**
     * A flag that sets a scheduler or limits key is checked against that key's range before anything loads, and the
     * message names the flag (the server refused it after the model's header, naming only the key).
     */
    @Test
    void aSchedulerFlagOutOfItsKeysRangeIsNamedByTheFlag() {
        assertEquals("--token-budget: must be an integer in [1, 1048576] (scheduler.tokenBudget), got 0",
                badOption("--token-budget", "0"));
        assertEquals("--max-tick-stretch: must be 0 (off) or in [1, 100] (scheduler.maxTickStretch), got 0.5",
                badOption("--max-tick-stretch", "0.5"));
        assertEquals("--max-batch-rows: must be an integer in [1, 65536] (scheduler.maxBatchRows), got 0",
                badOption("--max-batch-rows", "0"));
        assertEquals("--min-prefill-chunk: must be an integer in [1, 1048576] (scheduler.minPrefillChunk), got 0",
                badOption("--min-prefill-chunk", "0"));
        assertEquals("--prefill-chunk: must be an integer in [1, 65536] (limits.prefillChunk), got 0",
                badOption("--prefill-chunk", "0"));
        assertEquals("--max-batch-rows: must be an integer in [1, 65536] (scheduler.maxBatchRows), got 65537",
                badOption("--max-batch-rows", "65537"));
        assertNull(badOption("--max-tick-stretch", "0", "--token-budget", "1048576", "--max-batch-rows", "65536",
                "--min-prefill-chunk", "1", "--prefill-chunk", "65536"));
        String[] r = run("bench-server", "--token-budget", "0", "--model", "/nonexistent/model");
        assertEquals("2", r[0], r[1]);
        assertTrue(r[1].contains("error: --token-budget: must be an integer in [1, 1048576] (scheduler.tokenBudget), got 0"), r[1]);
    }

    /** Runs ds4j with the given arguments: {exit code, stderr}. */
    static String[] run(String... args) {
        StringWriter err = new StringWriter();
        CommandLine cl = Main.commandLine();
        cl.setErr(new PrintWriter(err, true));
        cl.setOut(new PrintWriter(new StringWriter(), true));
        int rc = cl.execute(args);
        return new String[]{String.valueOf(rc), err.toString()};
    }

    /** A bad value is refused before the model loads or the server starts (it used to end in "error: HTTP 400"). */
    @Test
    void aBadValueIsRefusedBeforeAnythingLoads() {
        String[] r = run("bench-server", "--max-tokens", "0", "--model", "/nonexistent/model");
        assertEquals("2", r[0], r[1]);
        assertTrue(r[1].contains("error: --max-tokens must be >= 1"), r[1]);
        assertTrue(r[1].contains("bench-server --help"), r[1]);
    }

    /** --url at a port nobody listens on: the URL and why, before the local model is made or loaded. */
    @Test
    void anUnreachableServerIsNamedWithTheReason() throws Exception {
        int port;
        try (java.net.ServerSocket ss = new java.net.ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            port = ss.getLocalPort();
        }
        String url = "http://127.0.0.1:" + port;
        String[] r = run("bench-server", "--url", url, "--model", "/nonexistent/model");
        assertEquals("2", r[0], r[1]);
        assertTrue(r[1].contains("error: the server at " + url + " could not be reached: the connection was refused"), r[1]);
        String unknown = BenchServerCommand.unreachable("http://nohost.invalid:8080",
                new java.net.ConnectException().initCause(new java.nio.channels.UnresolvedAddressException()));
        assertEquals("the server at http://nohost.invalid:8080 could not be reached: unknown host nohost.invalid", unknown);
    }

    /** A refused request says where, the status and the server's message. */
    @Test
    void anHttpErrorCarriesTheServersMessage() {
        assertEquals("HTTP 401 from http://h:1/v1/chat/completions: invalid API key",
                BenchServerCommand.httpError("http://h:1/v1/chat/completions", 401, "{\"error\":{\"message\":\"invalid API key\",\"type\":\"x\"}}"));
        assertEquals("HTTP 502 from u: Bad Gateway", BenchServerCommand.httpError("u", 502, "Bad Gateway\n"));
        assertEquals("HTTP 500 from u", BenchServerCommand.httpError("u", 500, ""));
    }

    /** The long prompt's size is the one sent (chat template included) in both places, not --long-prompt in one. */
    @Test
    void theLongPromptHasOneSize() {
        String header = BenchServerCommand.longPromptLine(324, 300);
        assertTrue(header.startsWith("long prompt beside the streams: 324 tokens in the chat template (--long-prompt 300)"), header);
        String title = BenchServerCommand.longTitle(324, 8, 6);
        assertTrue(title.startsWith("beside a 324-token prompt being prefilled"), title);
        assertTrue(title.contains("8 prefills started, 6 finished during the rounds"), title);
    }

    /** The long prompt's size takes the article it is read with: an 11-token prompt, not "a 11-token" one. */
    @Test
    void theLongPromptsSizeTakesItsArticle() {
        assertTrue(BenchServerCommand.longTitle(11, 1, 1).startsWith("beside an 11-token prompt being prefilled"));
        assertTrue(BenchServerCommand.longTitle(32780, 1, 1).startsWith("beside a 32780-token prompt being prefilled"));
        for (long n : new long[]{8, 11, 18, 80, 86, 89, 800, 899, 8000, 8192, 11000, 18500, 80000, 800000, 8_000_000, 11_000_000})
            assertEquals("an", BenchServerCommand.article(n), String.valueOf(n));
        for (long n : new long[]{0, 1, 7, 10, 12, 17, 19, 28, 79, 90, 100, 108, 111, 118, 180, 1100, 1800, 12000, 32768, 1_000_000})
            assertEquals("a", BenchServerCommand.article(n), String.valueOf(n));
    }

    /** A long prompt no longer than the streams' own prompt gets a warning line (--long-prompt 5 made 11 tokens beside 62). */
    @Test
    void aLongPromptNoLongerThanTheStreamsIsWarnedOf() {
        String w = BenchServerCommand.longPromptWarning(11, 62);
        assertTrue(w != null && w.startsWith("warning: the long prompt (11 tokens) is not longer than the streams' own prompt "
                + "(62 tokens)"), w);
        assertTrue(BenchServerCommand.longPromptWarning(62, 62) != null, "as long is not longer");
        assertNull(BenchServerCommand.longPromptWarning(324, 62));
    }

    /** A prompt longer than --prompt-tokens asked, because even the shortest is longer, is said so in the header. */
    @Test
    void aPromptLongerThanAskedIsSaidSo() {
        assertEquals("more than --prompt-tokens 3: the shortest prompt is 8 words in the chat template",
                BenchServerCommand.promptNote(12, 3, true));
        assertNull(BenchServerCommand.promptNote(12, 12, true), "as asked");
        assertNull(BenchServerCommand.promptNote(66, 64, false), "about as asked: the prompt grows by 8 words");
    }

    /** --url: the header tells what the server's /props says, not the local model's path or the local --draft. */
    @Test
    void theRemoteServerIsDescribedByItsProps() throws Exception {
        ObjectMapper m = new ObjectMapper();
        String ds4j = BenchServerCommand.remoteLine("http://h:8080", m.readTree("{\"model\":{\"id\":\"flash\",\"path\":\"/m/flash\"},"
                + "\"backend\":\"hip\",\"speculative\":{\"draft\":\"mtp\",\"q\":4},\"limits\":{\"maxActive\":16},"
                + "\"scheduler\":{\"tokenBudget\":512,\"prefillChunk\":512,\"maxTickStretch\":1.6}}"));
        assertEquals("server at http://h:8080 (running already; its own settings apply): model flash (/m/flash), backend hip, "
                + "draft mtp, limits.maxActive 16, scheduler.tokenBudget 512, prefill chunk 512, scheduler.maxTickStretch 1.6", ds4j);
        String llama = BenchServerCommand.remoteLine("http://h:8080", m.readTree("{\"model_path\":\"/m/x.gguf\",\"total_slots\":4}"));
        assertTrue(llama.endsWith(": model /m/x.gguf, total_slots 4"), llama);
        String none = BenchServerCommand.remoteLine("http://h:8080", null);
        assertTrue(none.contains("its /props could not be read"), none);
        assertFalse(none.contains("draft"), none);
    }

    /** The scheduler line counts the rounds (two readings' difference), not the server's whole lifetime. */
    @Test
    void theSchedulerLineCountsOnlyTheRounds() {
        var before = BenchServerCommand.SchedulerReading.parse("""
                ds4j:step_prefill_limit_count 100
                ds4j:step_prefill_limit_sum 10000
                ds4j:step_prefill_limit_reason_total{reason="layers"} 60
                """);
        var after = BenchServerCommand.SchedulerReading.parse("""
                ds4j:step_prefill_limit_count 110
                ds4j:step_prefill_limit_sum 12000
                ds4j:step_prefill_limit_reason_total{reason="layers"} 64
                ds4j:step_prefill_limit_reason_total{reason="no_decodes"} 6
                """);
        String local = BenchServerCommand.schedulerLine(before, after, false);
        assertTrue(local.startsWith("scheduler during the rounds above (/metrics before and after them): 10 steps with a prompt "
                + "waiting for prefill, mean prefill limit 200 tokens; why: layers 4 no_decodes 6"), local);
        String remote = BenchServerCommand.schedulerLine(before, after, true);
        assertTrue(remote.contains("other clients' requests to that server in that time"), remote);
        String missing = BenchServerCommand.schedulerLine(BenchServerCommand.SchedulerReading.parse(null),
                BenchServerCommand.SchedulerReading.parse("other_metric 1\n"), true);
        assertTrue(missing.contains("had no ds4j:step_prefill_limit counters"), missing);
    }

    /**
     * --url's single-stream table: the per-token columns hold the per-token gaps (a chunk of two tokens after 20 ms
     * counts two gaps of 10 ms), and the gaps between chunks are labelled as such.
     */
    @Test
    void theSingleStreamTableShowsPerTokenGapsAsPerToken() throws Exception {
        List<BenchServerCommand.Sample> runs = new ArrayList<>();
        for (int i = 0; i < 3; i++)
            runs.add(sample(new long[]{10, 30, 50, 51},
                    chunk("a", null, 1), chunk("bc", null, 3), chunk("de", null, 5), chunk(null, "length", 5)));
        String t = BenchServerCommand.singleStreamTable(runs);
        String[] lines = t.split("\n");
        assertTrue(lines[0].contains("ITL p50 / p99 between chunks") && lines[0].contains("ITL p50 / p99 per token"), t);
        assertTrue(lines[1].contains("20.00 / 20.00 ms") && lines[1].contains("10.00 / 10.00 ms"), t);
        assertTrue(lines[1].indexOf("20.00 / 20.00 ms") < lines[1].indexOf("10.00 / 10.00 ms"), t);
        assertTrue(lines[2].contains("50.0% of the tokens came in a chunk with the one before"), t);
        // each label ends where its values end
        assertEquals(lines[0].indexOf("between chunks") + "between chunks".length(),
                lines[1].indexOf("20.00 / 20.00 ms") + "20.00 / 20.00 ms".length(), t);
        assertEquals(lines[0].length(), lines[1].length(), t);
    }

    /** The long-prompt comparison's labels stand apart, each ending where its column's values end. */
    @Test
    void theLongPromptColumnsReadApart() {
        String h = BenchServerCommand.longHeader();
        String r = BenchServerCommand.longRow(16, 12.5, 14.25, 20, 30.5, "between chunks");
        assertFalse(h.contains("without/with p99"), h);
        String[] labels = {"ITL p50 without / with", "ITL p99 without / with", "p99 with / p50 without"};
        String[] values = {"12.50 /   14.25 ms", "20.00 /   30.50 ms", "2.44"};
        for (int i = 0; i < labels.length; i++) {
            int end = h.indexOf(labels[i]) + labels[i].length();
            assertEquals(end, r.indexOf(values[i]) + values[i].length(), h + "\n" + r);
            assertTrue(h.indexOf(labels[i]) >= 3 && h.substring(h.indexOf(labels[i]) - 3, h.indexOf(labels[i])).isBlank(),
                    "at least three spaces before " + labels[i] + ":\n" + h);
        }
        assertTrue(r.endsWith("   between chunks"), r);
    }

    /** A fake server on a free port: each path's status and body (non-streamed), the chat route as the handler given. */
    static com.sun.net.httpserver.HttpServer fake(com.sun.net.httpserver.HttpHandler chat, int propsStatus, String propsBody) throws Exception {
        var hs = com.sun.net.httpserver.HttpServer.create(new java.net.InetSocketAddress(java.net.InetAddress.getLoopbackAddress(), 0), 0);
        hs.createContext("/props", x -> {
            byte[] b = propsBody.getBytes(java.nio.charset.StandardCharsets.UTF_8);
            x.sendResponseHeaders(propsStatus, b.length);
            x.getResponseBody().write(b);
            x.close();
        });
        hs.createContext("/v1/chat/completions", chat);
        hs.setExecutor(java.util.concurrent.Executors.newVirtualThreadPerTaskExecutor());
        hs.start();
        return hs;
    }

    /** --url against a server that wants a key: its 401 on /props ends the run at once, with the server's message. */
    @Test
    void aRefusedPropsRequestEndsTheRunWithTheReason() throws Exception {
        var hs = fake(x -> {
            x.sendResponseHeaders(500, -1);
            x.close();
        }, 401, "{\"error\":{\"message\":\"invalid API key\",\"type\":\"invalid_request_error\"}}");
        try {
            String url = "http://127.0.0.1:" + hs.getAddress().getPort();
            String[] r = run("bench-server", "--url", url, "--api-key", "wrong", "--model", "/nonexistent/model");
            assertEquals("2", r[0], r[1]);
            assertTrue(r[1].contains("error: HTTP 401 from " + url + "/props: invalid API key"), r[1]);
        } finally {
            hs.stop(0);
        }
    }

    /**
     * --url with --long-prompt against a server that refuses the long prompt (longer than its context): the run says
     * so, instead of counting each refusal as a finished prefill and printing the figures as beside a prompt being
     * prefilled.
     */
    @Test
    void aRefusedLongPromptIsAnError() throws Exception {
        String sse = "data: " + chunk("a", null, 1) + "\n\ndata: " + chunk("b", null, 2) + "\n\ndata: " + chunk(null, "length", 2)
                + "\n\ndata: [DONE]\n\n";
        var hs = fake(x -> {
            String body = new String(x.getRequestBody().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
            byte[] b = (body.contains("\"stream\":true") ? sse
                    : "{\"error\":{\"message\":\"the prompt is too long for this server's context\"}}").getBytes();
            x.sendResponseHeaders(body.contains("\"stream\":true") ? 200 : 400, b.length);
            x.getResponseBody().write(b);
            x.close();
        }, 200, "{}");
        try {
            String url = "http://127.0.0.1:" + hs.getAddress().getPort();
            String[] r = run("bench-server", "--url", url, "--clients", "1", "--requests", "4", "--repeats", "1",
                    "--max-tokens", "2", "--long-prompt", "40");
            assertEquals("2", r[0], r[1]);
            assertTrue(r[1].contains("the long prompt") && r[1].contains("HTTP 400 from " + url
                    + "/v1/chat/completions: the prompt is too long for this server's context"), r[1]);
        } finally {
            hs.stop(0);
        }
    }

    /**
     * A whole --url run at one client beside a short long prompt, its printout read: a level of one client is "1
     * client" (it was "1 clients"), the long prompt no longer than the streams' gets its warning and its article, and
     * the prompt longer than --prompt-tokens asked is said so.
     */
    @Test
    void aRunAtOneClientReadsRight() throws Exception {
        String sse = "data: " + chunk("a", null, 1) + "\n\ndata: " + chunk("b", null, 2) + "\n\ndata: " + chunk(null, "length", 2)
                + "\n\ndata: [DONE]\n\n";
        var hs = fake(x -> {
            String body = new String(x.getRequestBody().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
            byte[] b = (body.contains("\"stream\":true") ? sse : "{\"choices\":[]}").getBytes();
            x.sendResponseHeaders(200, b.length);
            x.getResponseBody().write(b);
            x.close();
        }, 200, "{}");
        java.io.PrintStream old = System.out;
        java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
        String[] r;
        try {
            System.setOut(new java.io.PrintStream(out, true, java.nio.charset.StandardCharsets.UTF_8));
            r = run("bench-server", "--url", "http://127.0.0.1:" + hs.getAddress().getPort(), "--clients", "1", "--requests", "2",
                    "--repeats", "1", "--max-tokens", "2", "--long-prompt", "5", "--prompt-tokens", "3");
        } finally {
            System.setOut(old);
            hs.stop(0);
        }
        String o = out.toString(java.nio.charset.StandardCharsets.UTF_8);
        assertEquals("0", r[0], r[1] + o);
        assertTrue(o.contains("the server's may count differently; more than --prompt-tokens 3: the shortest prompt is 8 words"), o);
        assertTrue(o.contains("\nwarning: the long prompt (11 tokens) is not longer than the streams' own prompt (12 tokens)"), o);
        assertTrue(o.contains("\nbeside an 11-token prompt being prefilled"), o);
        assertTrue(o.contains("\n1 client, share of the gaps between chunks"), o);
        assertTrue(o.contains("\n1 client, share of the server's deliveries"), o);
        assertTrue(o.contains("\n1 client, ITL between chunks without / with"), o);
        assertFalse(o.contains("1 clients"), o);
    }

    /** A server that sends no usage (stream_options not supported): one token a content chunk, not none. */
    @Test
    void withoutUsageEachChunkCountsOneToken() throws Exception {
        BenchServerCommand.Sample s = sample(new long[]{10, 20, 30, 31},
                chunk("a", null, null), chunk("b", null, null), chunk("c", null, null), chunk(null, "length", null));
        assertEquals(3, s.tokens(), "tokens");
        assertTrue(s.decodeTps() > 0 && s.e2eTps() > 0, s.toString());
    }

    /** A reasoning model's tokens (delta.reasoning_content) are output too: TTFT is the first of them, not unset. */
    @Test
    void reasoningChunksAreOutput() throws Exception {
        BenchServerCommand.Sample s = sample(new long[]{10, 20, 30, 31},
                "{\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"a\"},\"finish_reason\":null}],\"usage\":{\"completion_tokens\":1}}",
                "{\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"b\"},\"finish_reason\":null}],\"usage\":{\"completion_tokens\":2}}",
                "{\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"c\"},\"finish_reason\":null}],\"usage\":{\"completion_tokens\":3}}",
                chunk(null, "length", 3));
        assertEquals(10, s.ttftMs(), 1e-9);
        assertArrayEquals(new double[]{10, 10}, s.gapsMs(), 1e-9);
    }

    /** --max-tokens 1 (no gap between tokens): the tables show "-" where there is nothing to measure, not NaN. */
    @Test
    void nothingToMeasureIsADashNotNaN() throws Exception {
        List<BenchServerCommand.Sample> runs = new ArrayList<>();
        for (int i = 0; i < 2; i++) runs.add(sample(new long[]{10, 11}, chunk("a", null, 1), chunk(null, "length", 1)));
        assertTrue(Double.isNaN(runs.get(0).decodeTps()), "no decode to time, as the engine alone's: " + runs.get(0));
        String t = BenchServerCommand.singleStreamTable(runs);
        assertFalse(t.contains("NaN"), t);
        String[] lines = t.split("\n");
        assertEquals(lines[0].length(), lines[1].length(), t);
        String r = BenchServerCommand.longRow(4, Double.NaN, Double.NaN, Double.NaN, Double.NaN, "between chunks");
        assertFalse(r.contains("NaN"), r);
        assertEquals(BenchServerCommand.longHeader().length(), r.indexOf("   between chunks"), r);
        String lv = BenchServerCommand.levelRow("2", new BenchServerCommand.Round(runs, 1));
        assertFalse(lv.contains("NaN"), lv);
    }

    /** A large ITL with the long prompt (10 s and more) still ends where its label ends. */
    @Test
    void largeValuesStayInTheirColumns() {
        String h = BenchServerCommand.longHeader();
        String r = BenchServerCommand.longRow(16, 12.5, 12345.67, 20, 23456.78, "between chunks");
        assertEquals(h.length(), r.indexOf("   between chunks"), h + "\n" + r);
    }

    /** Counters that went down between the readings (the server restarted): no negative step counts. */
    @Test
    void aRestartedServersCountersAreNotSubtracted() {
        var before = BenchServerCommand.SchedulerReading.parse("ds4j:step_prefill_limit_count 100\nds4j:step_prefill_limit_sum 10000\n");
        var after = BenchServerCommand.SchedulerReading.parse("ds4j:step_prefill_limit_count 10\nds4j:step_prefill_limit_sum 900\n");
        String l = BenchServerCommand.schedulerLine(before, after, true);
        assertFalse(l.contains("-90"), l);
        assertTrue(l.contains("restarted"), l);
    }

    /** --requests near the int range: rounded up to a multiple of the clients without overflowing to one each. */
    @Test
    void hugeRequestCountsDoNotOverflow() {
        assertEquals(Integer.MAX_VALUE / 4 + 1, BenchServerCommand.perClient(Integer.MAX_VALUE, 4));
        assertEquals(3, BenchServerCommand.perClient(10, 4));
        assertEquals(1, BenchServerCommand.perClient(2, 4));
    }
}
