package io.ds4j.text.chat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.ds4j.text.chat.ChatMessage.ToolCall;
import io.ds4j.text.chat.OutputParser.ContentDelta;
import io.ds4j.text.chat.OutputParser.Event;
import io.ds4j.text.chat.OutputParser.ReasoningDelta;
import io.ds4j.text.chat.OutputParser.ToolCallArgumentsDelta;
import io.ds4j.text.chat.OutputParser.ToolCallEnd;
import io.ds4j.text.chat.OutputParser.ToolCallStart;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

class OutputParserTest {
    static {
        // the malformed and truncated inputs below warn thousands of times; keep the build log readable
        System.setProperty("org.slf4j.simpleLogger.log.io.ds4j.text.chat.OutputParser", "error");
    }

    private static final ObjectMapper JSON = new ObjectMapper();

    private static final String EOS = "<｜end▁of▁sentence｜>";

    private static final String WEATHER_CALL = "The user wants to know the weather in Beijing. I should use the get_weather tool.</think>\n\n"
            + "<｜DSML｜tool_calls>\n"
            + "<｜DSML｜invoke name=\"get_weather\">\n"
            + "<｜DSML｜parameter name=\"location\" string=\"true\">Beijing</｜DSML｜parameter>\n"
            + "<｜DSML｜parameter name=\"unit\" string=\"true\">celsius</｜DSML｜parameter>\n"
            + "</｜DSML｜invoke>\n"
            + "</｜DSML｜tool_calls><｜end▁of▁sentence｜>";

    /** Content, then two calls with string and non-string parameters, in chat mode. */
    private static final String TWO_CALLS = "Sure, checking both.\n\n"
            + "<｜DSML｜tool_calls>\n"
            + "<｜DSML｜invoke name=\"plan\">\n"
            + "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
            + "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
            + "<｜DSML｜parameter name=\"stops\" string=\"false\">[\"Lyon\", \"Nice\"]</｜DSML｜parameter>\n"
            + "<｜DSML｜parameter name=\"prefs\" string=\"false\">{\"hotel\": \"4★\", \"late\": null}</｜DSML｜parameter>\n"
            + "<｜DSML｜parameter name=\"note\" string=\"true\">say \"hi\"\nbye \\ <b>ok</b> </｜DSML｜para 😀</｜DSML｜parameter>\n"
            + "</｜DSML｜invoke>\n"
            + "<｜DSML｜invoke name=\"now\">\n"
            + "</｜DSML｜invoke>\n"
            + "</｜DSML｜tool_calls><｜end▁of▁sentence｜>";
    private static final String TWO_CALLS_PLAN_ARGS = "{\"city\": \"Paris\", \"days\": 3, \"stops\": [\"Lyon\", \"Nice\"], "
            + "\"prefs\": {\"hotel\": \"4★\", \"late\": null}, \"note\": \"say \\\"hi\\\"\\nbye \\\\ <b>ok</b> </｜DSML｜para 😀\"}";

    private static final String THINKING_WITH_CALL = "Plan: call <tools> then answer.\n\nOk</think>Let me look that up.\n\n"
            + "<｜DSML｜tool_calls>\n"
            + "<｜DSML｜invoke name=\"search\">\n"
            + "<｜DSML｜parameter name=\"query\" string=\"true\">a < b && c</｜DSML｜parameter>\n"
            + "<｜DSML｜parameter name=\"num_results\" string=\"false\">5</｜DSML｜parameter>\n"
            + "</｜DSML｜invoke>\n"
            + "</｜DSML｜tool_calls>";

    private static ParsedOutput parse(String text, boolean thinking) {
        return OutputParser.parse(text, thinking, OutputParser.sequentialIds());
    }

    /** Streams {@code text} in the given pieces and returns all events. */
    private static List<Event> stream(OutputParser parser, List<String> pieces) {
        List<Event> events = new ArrayList<>();
        for (String p : pieces) events.addAll(parser.push(p));
        events.addAll(parser.finish());
        return events;
    }

    private static List<String> randomPieces(String text, Random random) {
        List<String> pieces = new ArrayList<>();
        int i = 0;
        while (i < text.length()) {
            int n = Math.min(text.length() - i, 1 + random.nextInt(random.nextBoolean() ? 3 : 12));
            pieces.add(text.substring(i, i + n));
            i += n;
        }
        return pieces;
    }

    private static List<String> chars(String text) {
        List<String> pieces = new ArrayList<>();
        for (int i = 0; i < text.length(); i++) pieces.add(text.substring(i, i + 1));
        return pieces;
    }

    private static ToolCall call(String id, String name, String arguments) {
        return new ToolCall(id, name, arguments);
    }

    @Test
    void officialVectorTurns() {
        ParsedOutput first = parse(WEATHER_CALL, true);
        assertEquals("The user wants to know the weather in Beijing. I should use the get_weather tool.", first.reasoning());
        assertEquals("", first.content());
        assertEquals(List.of(call("call_0", "get_weather", "{\"location\": \"Beijing\", \"unit\": \"celsius\"}")),
                first.toolCalls());

        ParsedOutput last = parse("Got the weather data. Let me format a nice response.</think>"
                + "The weather in Beijing is currently sunny with a temperature of 22°C and 45% humidity." + EOS, true);
        assertEquals("Got the weather data. Let me format a nice response.", last.reasoning());
        assertEquals("The weather in Beijing is currently sunny with a temperature of 22°C and 45% humidity.", last.content());
        assertEquals(List.of(), last.toolCalls());
    }

    @Test
    void stringAndNonStringParameters() throws Exception {
        ParsedOutput out = parse(TWO_CALLS, false);
        assertEquals("Sure, checking both.", out.content());
        assertEquals("", out.reasoning());
        assertEquals(List.of(call("call_0", "plan", TWO_CALLS_PLAN_ARGS), call("call_1", "now", "{}")), out.toolCalls());
        JsonNode args = JSON.readTree(out.toolCalls().get(0).arguments());
        assertEquals(3, args.get("days").intValue());
        assertEquals("say \"hi\"\nbye \\ <b>ok</b> </｜DSML｜para 😀", args.get("note").textValue());
    }

    @Test
    void eventsOfOneCall() {
        OutputParser parser = new OutputParser(true, OutputParser.sequentialIds());
        List<Event> events = stream(parser, List.of(WEATHER_CALL));
        assertEquals(List.of(
                new ReasoningDelta("The user wants to know the weather in Beijing. I should use the get_weather tool."),
                new ToolCallStart(0, "call_0", "get_weather"),
                new ToolCallArgumentsDelta(0, "{\"location\": \"Beijing\", \"unit\": \"celsius\"}"),
                new ToolCallEnd(0),
                new OutputParser.End(true, true)), events);
        assertEquals(List.of(), parser.warnings());
    }

    @Test
    void encoderOutputParsesBack() {
        List<ToolCall> calls = List.of(call("c1", "plan", TWO_CALLS_PLAN_ARGS), call("c2", "now", "{}"));
        String prompt = ChatEncoder.encode(List.of(ChatMessage.user("Go"),
                ChatMessage.assistant("Sure, checking both.", "Two lookups.", calls)), ChatOptions.defaults().withThinking(true));
        String turn = prompt.substring(prompt.indexOf("<think>") + "<think>".length());
        ParsedOutput out = parse(turn, true);
        assertEquals("Two lookups.", out.reasoning());
        assertEquals("Sure, checking both.", out.content());
        assertEquals(List.of(call("call_0", "plan", TWO_CALLS_PLAN_ARGS), call("call_1", "now", "{}")), out.toolCalls());
    }

    @Test
    void streamingMatchesOneShotForAnySplit() {
        List<String> texts = List.of(WEATHER_CALL, TWO_CALLS, THINKING_WITH_CALL,
                "Plain answer with <tags>, a lone < and \n\n blank lines.\n\n" + EOS,
                "Unclosed reasoning <｜DSML｜tool_ca and more",
                "Thinking </thin then </think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜bad>\n</｜DSML｜invoke>",
                "x\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"false\">oops</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>\n\ntrailing text" + EOS + "ignored",
                "r</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"true\">cut off mid val");
        Random random = new Random(42);
        for (String text : texts) {
            for (boolean thinking : new boolean[] {false, true}) {
                ParsedOutput expected = parse(text, thinking);
                assertEquals(expected, ParsedOutput.fromEvents(
                        stream(new OutputParser(thinking, OutputParser.sequentialIds()), chars(text))), text);
                for (int round = 0; round < 40; round++) {
                    List<String> pieces = randomPieces(text, random);
                    List<Event> events = stream(new OutputParser(thinking, OutputParser.sequentialIds()), pieces);
                    assertEquals(expected, ParsedOutput.fromEvents(events), text + " split " + pieces);
                    assertWellFormed(events);
                }
            }
        }
    }

    /** Every call starts before its arguments, ends once, and its arguments are a JSON object. */
    private static void assertWellFormed(List<Event> events) {
        ParsedOutput out = ParsedOutput.fromEvents(events);
        for (ToolCall c : out.toolCalls()) {
            try {
                assertTrue(JSON.readTree(c.arguments()).isObject(), c.arguments());
            } catch (Exception e) {
                throw new AssertionError("arguments are not JSON: " + c.arguments(), e);
            }
        }
        int started = 0;
        int ended = 0;
        for (Event e : events) {
            switch (e) {
                case ToolCallStart s -> assertEquals(started++, s.index());
                case ToolCallArgumentsDelta a -> assertEquals(started - 1, a.index());
                case ToolCallEnd end -> assertEquals(ended++, end.index());
                case ReasoningDelta r -> assertFalse(r.text().isEmpty());
                case ContentDelta c -> assertFalse(c.text().isEmpty());
                default -> { }
            }
        }
        assertEquals(started, ended);
        assertInstanceOf(OutputParser.End.class, events.getLast());
    }

    @Test
    void noDelimiterLeaksAtAnySplitPosition() {
        String[] texts = {TWO_CALLS, THINKING_WITH_CALL, WEATHER_CALL};
        for (String text : texts) {
            boolean thinking = text.contains("</think>");
            ParsedOutput expected = parse(text, thinking);
            assertFalse(expected.content().contains("｜"));
            assertFalse(expected.reasoning().contains("｜"));
            assertFalse(expected.reasoning().contains("</think>"));
            for (int k = 0; k <= text.length(); k++) {
                for (int j = k; j <= text.length(); j += 53) {
                    OutputParser parser = new OutputParser(thinking, OutputParser.sequentialIds());
                    List<Event> events = stream(parser, List.of(text.substring(0, k), text.substring(k, j), text.substring(j)));
                    for (Event e : events) {
                        if (e instanceof ContentDelta c) assertFalse(c.text().contains("｜") || c.text().endsWith("<"), c.text());
                        if (e instanceof ReasoningDelta r) assertFalse(r.text().contains("</"), r.text());
                    }
                    assertEquals(expected, ParsedOutput.fromEvents(events), "split at " + k + "," + j);
                    assertEquals(List.of(), parser.warnings());
                }
            }
        }
    }

    @Test
    void thinkingExpectations() {
        ParsedOutput out = parse(THINKING_WITH_CALL, true);
        assertEquals("Plan: call <tools> then answer.\n\nOk", out.reasoning());
        assertEquals("Let me look that up.", out.content());
        assertEquals(List.of(call("call_0", "search", "{\"query\": \"a < b && c\", \"num_results\": 5}")), out.toolCalls());
        // a leading <think> (the prompt already opened the block) is dropped
        assertEquals(new ParsedOutput("why", "because", List.of()), parse("<think>why</think>because" + EOS, true));
        // chat mode: </think> is no delimiter, all text is content
        assertEquals(new ParsedOutput("", "a</think>b", List.of()), parse("a</think>b", false));
    }

    @Test
    void missingThinkEndMeansAllReasoning() {
        OutputParser parser = new OutputParser(true);
        ParsedOutput out = ParsedOutput.fromEvents(stream(parser, chars("I am still thinking about <this> and\n\n")));
        assertEquals(new ParsedOutput("I am still thinking about <this> and\n\n", "", List.of()), out);
        assertEquals(1, parser.warnings().size());

        assertEquals(new ParsedOutput("Thinking", "", List.of()), parse("Thinking" + EOS, true));

        // a tool-call block before </think> ends the reasoning
        parser = new OutputParser(true, OutputParser.sequentialIds());
        out = ParsedOutput.fromEvents(stream(parser, List.of("Need data.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
                + "</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + EOS)));
        assertEquals(new ParsedOutput("Need data.", "", List.of(call("call_0", "f", "{}"))), out);
        assertEquals(1, parser.warnings().size());
    }

    @Test
    void malformedMarkupBecomesContent() {
        String text = "Answer.\n\n<｜DSML｜tool_calls>\n<｜DSML｜oops>\n</｜DSML｜tool_calls>";
        OutputParser parser = new OutputParser(false);
        ParsedOutput out = ParsedOutput.fromEvents(stream(parser, chars(text)));
        assertEquals(new ParsedOutput("", text, List.of()), out);
        assertEquals(1, parser.warnings().size());
        assertTrue(parser.warnings().getFirst().startsWith("malformed tool-call markup"), parser.warnings().getFirst());

        // markup breaking after a finished call: the call stays, the rest is content
        parser = new OutputParser(false, OutputParser.sequentialIds());
        out = ParsedOutput.fromEvents(stream(parser, List.of("<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
                + "<｜DSML｜parameter name=\"a\" string=\"true\">x</｜DSML｜parameter>\n</｜DSML｜invoke>\ngarbage" + EOS)));
        assertEquals(new ParsedOutput("", "\ngarbage", List.of(call("call_0", "f", "{\"a\": \"x\"}"))), out);
        assertEquals(1, parser.warnings().size());

        // inside an invoke: the open call is closed with the parameters it has
        parser = new OutputParser(false, OutputParser.sequentialIds());
        out = ParsedOutput.fromEvents(stream(parser, List.of("<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
                + "<｜DSML｜parameter name=\"a\" string=\"false\">1</｜DSML｜parameter>\n<｜DSML｜bogus>\n</｜DSML｜invoke>")));
        assertEquals(new ParsedOutput("", "\n<｜DSML｜bogus>\n</｜DSML｜invoke>", List.of(call("call_0", "f", "{\"a\": 1}"))), out);

        // a duplicate parameter name
        parser = new OutputParser(false, OutputParser.sequentialIds());
        out = ParsedOutput.fromEvents(stream(parser, List.of("<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
                + "<｜DSML｜parameter name=\"a\" string=\"true\">1</｜DSML｜parameter>\n"
                + "<｜DSML｜parameter name=\"a\" string=\"true\">2</｜DSML｜parameter>\n</｜DSML｜invoke>")));
        assertEquals(List.of(call("call_0", "f", "{\"a\": \"1\"}")), out.toolCalls());
        assertTrue(out.content().startsWith("\n<｜DSML｜parameter name=\"a\""), out.content());
    }

    @Test
    void invalidNonStringValueIsPassedAsString() {
        OutputParser parser = new OutputParser(false, OutputParser.sequentialIds());
        ParsedOutput out = ParsedOutput.fromEvents(stream(parser, List.of("<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
                + "<｜DSML｜parameter name=\"n\" string=\"false\">twelve</｜DSML｜parameter>\n"
                + "</｜DSML｜invoke>\n</｜DSML｜tool_calls>")));
        assertEquals(List.of(call("call_0", "f", "{\"n\": \"twelve\"}")), out.toolCalls());
        assertEquals(1, parser.warnings().size());
    }

    @Test
    void truncatedOutputClosesTheCall() {
        OutputParser parser = new OutputParser(false, OutputParser.sequentialIds());
        ParsedOutput out = ParsedOutput.fromEvents(stream(parser, List.of("<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
                + "<｜DSML｜parameter name=\"a\" string=\"true\">partial \"val</｜DSML")));
        assertEquals(List.of(call("call_0", "f", "{\"a\": \"partial \\\"val</｜DSML\"}")), out.toolCalls());
        assertEquals(1, parser.warnings().size());

        // cut inside the invoke tag: no call, the markup is content
        parser = new OutputParser(false, OutputParser.sequentialIds());
        out = ParsedOutput.fromEvents(stream(parser, List.of("Hi\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_wea")));
        assertEquals(new ParsedOutput("", "Hi\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_wea", List.of()), out);
    }

    @Test
    void textAfterEndOfSentenceIsIgnored() {
        OutputParser parser = new OutputParser(false);
        ParsedOutput out = ParsedOutput.fromEvents(stream(parser, List.of("Done." + EOS + "<｜User｜>more")));
        assertEquals(new ParsedOutput("", "Done.", List.of()), out);
        assertEquals(1, parser.warnings().size());
    }

    @Test
    void surrogatePairsAreNeverSplit() {
        String text = "Emoji 😀😀 here\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
                + "<｜DSML｜parameter name=\"e\" string=\"true\">😀x😀</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
        OutputParser parser = new OutputParser(false, OutputParser.sequentialIds());
        List<Event> events = new ArrayList<>();
        for (String piece : chars(text)) {
            for (Event e : parser.push(piece)) {
                String s = switch (e) {
                    case ContentDelta c -> c.text();
                    case ToolCallArgumentsDelta a -> a.fragment();
                    default -> "";
                };
                assertFalse(!s.isEmpty() && Character.isHighSurrogate(s.charAt(s.length() - 1)), s);
                events.add(e);
            }
        }
        events.addAll(parser.finish());
        assertEquals(new ParsedOutput("", "Emoji 😀😀 here", List.of(call("call_0", "f", "{\"e\": \"😀x😀\"}"))),
                ParsedOutput.fromEvents(events));
    }

    @Test
    void randomIds() {
        ParsedOutput out = OutputParser.parse("<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n"
                + "<｜DSML｜invoke name=\"g\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>", false);
        assertEquals(2, out.toolCalls().size());
        for (ToolCall c : out.toolCalls()) assertTrue(c.id().matches("call_[A-Za-z0-9]{24}"), c.id());
        assertFalse(out.toolCalls().get(0).id().equals(out.toolCalls().get(1).id()));
    }

    @Test
    void reasoningCutByTheLengthLimitIsNotAWarning() {
        OutputParser cut = new OutputParser(true);
        cut.push("still thinking about it");
        cut.finish(true);
        assertTrue(cut.warnings().isEmpty(), cut.warnings().toString());
        OutputParser ended = new OutputParser(true).logWarnings(false);
        ended.push("still thinking about it");
        ended.finish(false);
        assertEquals(List.of("no </think> in thinking mode: the whole output is reasoning"), ended.warnings());
    }

    /**
     * Content held to a grammar (a regex, a choice, JSON) is literal: the end-of-sentence text and DSML markup in it are
     * content, at any split; beside tools a block is read only where the content begins, and one cut inside its start
     * is dropped as markup while a complete output of just its blank line is content.
     */
    @Test
    void heldContentIsLiteral() {
        String block = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
        Random random = new Random(7);
        for (String text : List.of("a " + EOS + " b", block, "x" + block, "\n\n", "</think>" + block + EOS)) {
            for (int round = 0; round < 20; round++) {
                List<String> pieces = round == 0 ? List.of(text) : round == 1 ? chars(text) : randomPieces(text, random);
                OutputParser p = new OutputParser(false, OutputParser.sequentialIds()).heldContent(false);
                ParsedOutput out = ParsedOutput.fromEvents(stream(p, pieces));
                assertEquals(text, out.content(), pieces.toString());
                assertTrue(out.toolCalls().isEmpty() && p.warnings().isEmpty(), out + " " + p.warnings());
                // after reasoning, too; the reasoning is read as always
                OutputParser t = new OutputParser(true, OutputParser.sequentialIds()).heldContent(false);
                ParsedOutput after = ParsedOutput.fromEvents(stream(t, List.of("Think.</think>", text)));
                assertEquals("Think.", after.reasoning());
                assertEquals(text, after.content());
            }
        }
        for (boolean split : new boolean[] {false, true}) {
            OutputParser p = new OutputParser(false, OutputParser.sequentialIds()).heldContent(true);
            ParsedOutput call = ParsedOutput.fromEvents(stream(p, split ? chars(block + EOS) : List.of(block + EOS)));
            assertEquals(List.of(call("call_0", "f", "{}")), call.toolCalls(), call.toString());
            assertEquals("", call.content());
            OutputParser q = new OutputParser(false, OutputParser.sequentialIds()).heldContent(true);
            ParsedOutput literal = ParsedOutput.fromEvents(stream(q, split ? chars("x" + block) : List.of("x" + block)));
            assertEquals("x" + block, literal.content());
            assertTrue(literal.toolCalls().isEmpty());
        }
        OutputParser blank = new OutputParser(false).heldContent(true);
        assertEquals("\n\n", ParsedOutput.fromEvents(stream(blank, chars("\n\n"))).content());
        OutputParser cut = new OutputParser(false).heldContent(true);
        List<Event> events = new ArrayList<>(cut.push("\n\n<｜DSML｜to"));
        events.addAll(cut.finish(true));
        ParsedOutput cutOut = ParsedOutput.fromEvents(events);
        assertEquals("", cutOut.content(), cutOut.toString());
        assertTrue(cutOut.toolCalls().isEmpty());
    }

    /**
     * Output cut by the length limit anywhere inside DSML markup: no piece of the markup (its blank line included, once
     * the block has begun) reaches the content, and a call whose invoke tag was complete is sent with exactly the
     * arguments text generated so far: a prefix of the whole call's arguments, never closed or completed before the
     * invoke's closing tag came.
     */
    @Test
    void markupCutShortByTheLengthLimitNeverReachesContent() {
        String text = "Let me check.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
                + "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
                + "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
                + "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
        String whole = "{\"city\": \"Paris\", \"days\": 3}";
        int invokeComplete = text.indexOf("\">\n<｜DSML｜parameter") + 2;
        int invokeClosed = text.indexOf("</｜DSML｜invoke>") + "</｜DSML｜invoke>".length();
        int blank = text.indexOf("\n\n");
        for (boolean forced : new boolean[] {false, true}) {
            // a forced call's output is the markup alone; the unforced one has content before it
            String t = forced ? text.substring(blank) : text;
            int shift = forced ? blank : 0;
            for (int n = 0; n <= t.length(); n++) {
                OutputParser p = new OutputParser(false, OutputParser.sequentialIds()).forcedToolCall(forced);
                List<Event> events = new ArrayList<>(p.push(t.substring(0, n)));
                events.addAll(p.finish(true));
                ParsedOutput out = ParsedOutput.fromEvents(events);
                String cut = "cut at " + n + (forced ? " (forced)" : "") + ": " + out;
                int at = n + shift;
                String content = forced ? "" : at <= blank + 2 ? text.substring(0, at) : "Let me check.";
                assertEquals(content, out.content(), cut);
                assertEquals(at >= invokeComplete ? 1 : 0, out.toolCalls().size(), cut);
                for (ToolCall c : out.toolCalls()) {
                    assertEquals("get_weather", c.name(), cut);
                    assertTrue(whole.startsWith(c.arguments()), cut);
                    assertEquals(at >= invokeClosed, c.arguments().equals(whole), cut);
                }
                assertTrue(p.warnings().isEmpty(), cut + " " + p.warnings());
            }
        }
        // without the length limit, an unfinished block is still malformed output, released as content (unchanged)
        OutputParser p = new OutputParser(false);
        List<Event> events = new ArrayList<>(p.push("Hi <｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f"));
        events.addAll(p.finish(false));
        assertTrue(ParsedOutput.fromEvents(events).content().contains("<｜DSML｜invoke"));
    }
}
