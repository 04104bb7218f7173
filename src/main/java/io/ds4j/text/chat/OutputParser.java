package io.ds4j.text.chat;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Supplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Incremental parser of one generated DeepSeek-V4 assistant turn: splits reasoning from content and turns DSML
 * tool-call blocks into OpenAI-style tool calls, while the text streams in.
 *
 * <p>Feed the generated text in any pieces with {@link #push(String)} and end with {@link #finish()}. The events
 * depend only on the text, never on how it was cut: text that could still be the start of a delimiter
 * ({@code </think>}, {@code <｜DSML｜tool_calls>}, the EOS text, the DSML tags inside a block) is held back until
 * it is decided, so no delimiter or piece of one reaches reasoning or content. Rules:
 * <ul>
 *   <li>Thinking mode: everything up to {@code </think>} is reasoning (a leading {@code <think>} is dropped). If
 *       {@code </think>} never comes, all text is reasoning. A tool-call block met before {@code </think>} ends the
 *       reasoning (with a warning), as the reference parser's stop list does.</li>
 *   <li>Content runs up to a tool-call block or the EOS text; the blank line ({@code \n\n}) the format puts before
 *       {@code <｜DSML｜tool_calls>} is not content. Text after the EOS text is ignored (with a warning); whitespace
 *       right after a block is dropped and any further text is content again.</li>
 *   <li>Arguments stream as JSON text: {@code {"name": } then the value, then {@code , } or {@code }}, in the
 *       exact form of the reference's {@code decode_dsml_to_arguments}. {@code string="true"} values are JSON-escaped
 *       as they arrive; {@code string="false"} values are released when their tag closes, and one that is not valid
 *       JSON is sent as a JSON string instead (with a warning), so the fragments of a finished call always join to a
 *       valid object.</li>
 *   <li>Content held to a grammar ({@link #heldContent}: a regex, a choice, JSON) is literal after the reasoning: the
 *       EOS text and DSML markup in it are content; beside tools a block is read only where the content begins.</li>
 *   <li>Malformed markup never throws: the tool call being parsed (if one was started) is closed, the markup text
 *       that was not turned into events and everything after it becomes plain content, and a warning is logged.
 *       Output that ends inside a block is treated the same way, except inside a parameter value, where the call
 *       is closed with what it has.</li>
 *   <li>Output cut short ({@link #finish(boolean)} with {@code truncated}) is not closed: a call whose invoke tag
 *       was complete keeps exactly the arguments text generated so far (often not valid JSON: a string
 *       value as far as it got, no closing brace), as a truncated call is reported with finish reason
 *       {@code length}; unfinished tags and the blank line before a block that had begun are dropped.</li>
 * </ul>
 * Not thread-safe; one instance per generated turn.
 */
public final class OutputParser {
    private static final Logger LOG = LoggerFactory.getLogger(OutputParser.class);

    /** Longest DSML tag (from {@code <} to {@code >}) accepted before it counts as malformed. */
    private static final int TAG_LIMIT = 4096;

    private static final Pattern INVOKE_TAG = Pattern.compile(
            Pattern.quote(V4Format.INVOKE_OPEN) + "\\s+name=\"([^\"<>\\n]+)\"\\s*>");
    private static final Pattern PARAMETER_TAG = Pattern.compile(
            Pattern.quote(V4Format.PARAMETER_OPEN) + "\\s+name=\"([^\"<>\\n]*)\"\\s+string=\"(true|false)\"\\s*>");

    private static final String[] REASONING_STOPS = {V4Format.THINK_END, V4Format.TOOL_CALLS_OPEN, V4Format.EOS};
    private static final String[] CONTENT_STOPS = {V4Format.TOOL_CALLS_OPEN, V4Format.EOS};
    private static final String[] PLAIN_STOPS = {V4Format.EOS};
    private static final String[] VALUE_STOPS = {V4Format.PARAMETER_CLOSE};

    /** Something the parser found in the text. */
    public sealed interface Event permits ReasoningDelta, ContentDelta, ToolCallStart, ToolCallArgumentsDelta,
            ToolCallEnd, End {}

    /** More reasoning text. */
    public record ReasoningDelta(String text) implements Event {}

    /** More content text. */
    public record ContentDelta(String text) implements Event {}

    /** A tool call begins; {@code index} counts calls of this turn from 0. */
    public record ToolCallStart(int index, String id, String name) implements Event {}

    /** More of a call's arguments; a call's fragments join to one JSON object text. */
    public record ToolCallArgumentsDelta(int index, String fragment) implements Event {}

    /** A tool call's arguments are complete. */
    public record ToolCallEnd(int index) implements Event {}

    /**
     * The turn is over (from {@link #finish()}).
     *
     * @param toolCalls whether any tool call was emitted
     * @param eos whether the EOS text was seen in the output
     */
    public record End(boolean toolCalls, boolean eos) implements Event {}

    private enum State { THINK_OPEN, REASONING, CONTENT, BLOCK, INVOKE, STRING_VALUE, RAW_VALUE, AFTER_BLOCK, PLAIN, HELD, DONE }

    private final boolean thinking;
    private final Supplier<String> ids;
    private final StringBuilder buf = new StringBuilder();
    /** Markup consumed inside a block that has not yet produced an event; becomes content if the block breaks. */
    private final StringBuilder pendingMarkup = new StringBuilder();
    private final Set<String> paramNames = new HashSet<>();
    private final List<String> warnings = new ArrayList<>();
    private State state;
    private List<Event> out = new ArrayList<>();
    private int calls;
    private int params;
    /** Where the search for the end of a {@code string="false"} value resumes (the value is held whole). */
    private int rawScanFrom;
    private boolean sawEos;
    private boolean warnedAfterEos;
    private boolean finished;
    /** The output was cut short (length limit or stop string): an unfinished delimiter or tag at the end is dropped, not content. */
    private boolean cutShort;
    private boolean logWarnings = true;
    /** Constrained decoding allows only one tool call after the reasoning: held newlines there are markup. */
    private boolean forcedToolCall;
    /** The content is held to a grammar ({@link #heldContent}): markup is read only at its start, where blockMayOpen. */
    private boolean held, blockMayOpen;

    /** A parser with random tool-call ids ({@code call_} and 24 letters or digits). */
    public OutputParser(boolean thinking) {
        this(thinking, OutputParser::randomId);
    }

    /**
     * @param thinking whether the prompt was encoded in thinking mode (output starts inside the reasoning)
     * @param idGenerator supplies the id of each tool call
     */
    public OutputParser(boolean thinking, Supplier<String> idGenerator) {
        this.thinking = thinking;
        this.ids = idGenerator;
        this.state = thinking ? State.THINK_OPEN : State.CONTENT;
    }

    /** Ids {@code call_0}, {@code call_1}, ... (for tests and reproducible output). */
    public static Supplier<String> sequentialIds() {
        AtomicLong next = new AtomicLong();
        return () -> "call_" + next.getAndIncrement();
    }

    /** Parses a whole generated turn at once (random tool-call ids). */
    public static ParsedOutput parse(String fullText, boolean thinking) {
        return parse(fullText, thinking, OutputParser::randomId);
    }

    /** Parses a whole generated turn at once with the given tool-call ids. */
    public static ParsedOutput parse(String fullText, boolean thinking, Supplier<String> idGenerator) {
        OutputParser p = new OutputParser(thinking, idGenerator);
        List<Event> events = new ArrayList<>(p.push(fullText));
        events.addAll(p.finish());
        return ParsedOutput.fromEvents(events);
    }

    /**
     * Feeds the next piece of generated text.
     *
     * @return the events this piece decided (possibly none)
     * @throws IllegalStateException after {@link #finish()}
     */
    public List<Event> push(String textDelta) {
        if (finished) throw new IllegalStateException("push after finish");
        buf.append(textDelta);
        run(false);
        return drain();
    }

    /**
     * Ends the turn: releases held-back text, closes an unfinished tool call and ends with an {@link End} event.
     *
     * @throws IllegalStateException when called twice
     */
    public List<Event> finish() {
        return finish(false);
    }

    /**
     * Ends the turn, as {@link #finish()}.
     *
     * @param truncated the generation was cut short (its length limit, or a stop string that matched): ending inside
     *                  the reasoning or a tool call is then expected, unfinished markup is dropped rather than sent as
     *                  content, an open call keeps the arguments text it has (not closed), and it is logged at debug
     *                  level instead of being a warning
     * @throws IllegalStateException when called twice
     */
    public List<Event> finish(boolean truncated) {
        if (finished) throw new IllegalStateException("finish called twice");
        finished = true;
        cutShort = truncated;
        run(true);
        if (truncated) {
            switch (state) {
                case BLOCK -> { // between calls, or inside an unfinished invoke tag: nothing more to send
                    LOG.debug("DeepSeek-V4 output: cut by the length limit inside a tool-call block; unfinished markup dropped");
                    buf.setLength(0);
                    pendingMarkup.setLength(0);
                    state = State.DONE;
                }
                // the call's name is known: it ends with the arguments text generated so far, never closed or
                // completed, so a client cannot mistake values the model never wrote for its answer
                case INVOKE, STRING_VALUE -> {
                    buf.setLength(0);
                    pendingMarkup.setLength(0);
                    out.add(new ToolCallEnd(calls - 1));
                    state = State.DONE;
                }
                case RAW_VALUE -> {
                    emitArguments(buf.substring(0, buf.length() - heldPrefix(VALUE_STOPS)));
                    buf.setLength(0);
                    out.add(new ToolCallEnd(calls - 1));
                    state = State.DONE;
                }
                default -> { }
            }
        }
        switch (state) {
            case BLOCK, INVOKE -> {
                malformed("the output ends inside a tool-call block");
                run(true);
            }
            case STRING_VALUE -> {
                warn("the output ends inside a string parameter; the tool call is closed with what it has");
                emitArguments("\"}");
                out.add(new ToolCallEnd(calls - 1));
            }
            case RAW_VALUE -> {
                warn("the output ends inside a parameter; the tool call is closed with what it has");
                emitArguments(rawValue(buf.toString()) + "}");
                buf.setLength(0);
                out.add(new ToolCallEnd(calls - 1));
            }
            case REASONING, THINK_OPEN -> {
                if (truncated) LOG.debug("DeepSeek-V4 output: cut by the length limit inside the reasoning (no </think>)");
                else warn("no </think> in thinking mode: the whole output is reasoning");
            }
            default -> { }
        }
        out.add(new End(calls > 0, sawEos));
        return drain();
    }

    /**
     * Whether a control token's text (an added token of the tokenizer) is markup this parser reads at this point: the
     * reasoning's {@code </think>} (and a leading {@code <think>}) in thinking mode, or DSML tool-call markup. Other
     * control tokens carry no content and are left out of the text given to {@link #push}.
     */
    public boolean takesMarker(String tokenText) {
        if (tokenText.contains(V4Format.DSML)) return true;
        return switch (state) {
            case THINK_OPEN -> tokenText.equals(V4Format.THINK_START) || tokenText.equals(V4Format.THINK_END);
            case REASONING -> tokenText.equals(V4Format.THINK_END);
            default -> false;
        };
    }

    /** Whether the text pushed so far leaves the parser inside the reasoning (thinking mode, before {@code </think>}). */
    public boolean inReasoning() {
        return state == State.THINK_OPEN || state == State.REASONING;
    }

        /** Warnings about malformed or unexpected output seen so far (also logged). */
    public List<String> warnings() {
        return List.copyOf(warnings);
    }

    private List<Event> drain() {
        List<Event> result = out;
        out = new ArrayList<>();
        return result;
    }

    private void run(boolean eof) {
        while (step(eof)) {
            // keep going while something was decided
        }
    }

    private boolean step(boolean eof) {
        return switch (state) {
            case THINK_OPEN -> thinkOpen(eof);
            case REASONING -> text(REASONING_STOPS, true, eof);
            case CONTENT -> held ? heldStart(eof) : text(CONTENT_STOPS, false, eof);
            case PLAIN -> text(PLAIN_STOPS, false, eof);
            case HELD -> literal();
            case BLOCK -> block(eof);
            case INVOKE -> invoke(eof);
            case STRING_VALUE -> stringValue(eof);
            case RAW_VALUE -> rawValue();
            case AFTER_BLOCK -> afterBlock();
            case DONE -> done();
        };
    }

    private boolean thinkOpen(boolean eof) {
        String open = V4Format.THINK_START;
        if (startsWith(buf, open)) {
            buf.delete(0, open.length());
        } else if (!eof && buf.length() < open.length() && open.startsWith(buf.toString())) {
            return false;
        }
        state = State.REASONING;
        return true;
    }

    /** Reasoning, content or plain text up to the first of {@code stops}. */
    private boolean text(String[] stops, boolean reasoning, boolean eof) {
        if (buf.isEmpty()) return false;
        int at = -1;
        String stop = null;
        for (String s : stops) {
            int i = buf.indexOf(s);
            if (i >= 0 && (at < 0 || i < at)) {
                at = i;
                stop = s;
            }
        }
        if (stop != null) {
            boolean blockAhead = stop.equals(V4Format.TOOL_CALLS_OPEN);
            int end = at;
            if (blockAhead && at >= 2 && buf.charAt(at - 1) == '\n' && buf.charAt(at - 2) == '\n') end = at - 2;
            emitText(reasoning, buf.substring(0, end));
            String separator = buf.substring(end, at);
            buf.delete(0, at + stop.length());
            if (stop.equals(V4Format.THINK_END)) {
                state = State.CONTENT;
            } else if (blockAhead) {
                if (reasoning) warn("a tool-call block started before </think>; the reasoning ends there");
                pendingMarkup.setLength(0);
                pendingMarkup.append(separator).append(stop);
                state = State.BLOCK;
            } else {
                if (reasoning) warn("no </think> before the end-of-sentence token: the whole output is reasoning");
                sawEos = true;
                state = State.DONE;
            }
            return true;
        }
        int keep = eof && !cutShort ? buf.length() : releasable(stops, !eof && stops != PLAIN_STOPS);
        if (eof && cutShort && stops == CONTENT_STOPS
                && (forcedToolCall || heldPrefix(new String[] {V4Format.TOOL_CALLS_OPEN}) > 0)) {
            // cut inside the start of a block (or where only a block may follow): its blank line is markup too
            keep = releasable(stops, true);
        }
        if (keep > 0) {
            emitText(reasoning, buf.substring(0, keep));
            buf.delete(0, keep);
        }
        return false;
    }

    /**
     * The start of held content: a tool-call block where one may open there (then read as any block), else the whole
     * content is literal text. Waits while the text could still become the block's start, unless the output ended.
     */
    private boolean heldStart(boolean eof) {
        if (buf.isEmpty()) return false;
        held = false; // decided once: a block is parsed as usual, and literal content never returns here
        if (blockMayOpen && startsWith(buf, V4Format.BLOCK_START)) return true;
        if (blockMayOpen && V4Format.BLOCK_START.startsWith(buf.toString()) && (!eof || cutShort)) {
            held = true;
            // cut inside the block's start: its markup is dropped as an unconstrained output's would be
            return eof && text(CONTENT_STOPS, false, true);
        }
        state = State.HELD;
        return true;
    }

    /** Held content: every character is text, nothing in it is a delimiter. */
    private boolean literal() {
        if (buf.isEmpty()) return false;
        emitText(false, buf.toString());
        buf.setLength(0);
        return false;
    }

    /** Between tool calls: an invoke tag, the end of the block, or whitespace. */
    private boolean block(boolean eof) {
        skipWhitespace(pendingMarkup);
        if (buf.isEmpty()) return false;
        if (startsWith(buf, V4Format.TOOL_CALLS_CLOSE)) {
            buf.delete(0, V4Format.TOOL_CALLS_CLOSE.length());
            pendingMarkup.setLength(0);
            state = State.AFTER_BLOCK;
            return true;
        }
        if (startsWith(buf, V4Format.INVOKE_OPEN)) {
            Matcher m = tag(INVOKE_TAG, eof);
            if (m == null) return state != State.BLOCK;
            String name = m.group(1);
            buf.delete(0, m.end());
            pendingMarkup.setLength(0);
            int index = calls++;
            params = 0;
            paramNames.clear();
            out.add(new ToolCallStart(index, ids.get(), name));
            state = State.INVOKE;
            return true;
        }
        if ((!eof || cutShort) && isProperPrefix(buf, V4Format.TOOL_CALLS_CLOSE, V4Format.INVOKE_OPEN)) return false;
        malformed("expected " + V4Format.INVOKE_OPEN + " or " + V4Format.TOOL_CALLS_CLOSE);
        return true;
    }

    /** Inside an invoke: a parameter tag, the end of the invoke, or whitespace. */
    private boolean invoke(boolean eof) {
        skipWhitespace(pendingMarkup);
        if (buf.isEmpty()) return false;
        if (startsWith(buf, V4Format.INVOKE_CLOSE)) {
            buf.delete(0, V4Format.INVOKE_CLOSE.length());
            pendingMarkup.setLength(0);
            emitArguments(params == 0 ? "{}" : "}");
            out.add(new ToolCallEnd(calls - 1));
            state = State.BLOCK;
            return true;
        }
        if (startsWith(buf, V4Format.PARAMETER_OPEN)) {
            Matcher m = tag(PARAMETER_TAG, eof);
            if (m == null) return state != State.INVOKE;
            String name = m.group(1);
            if (!paramNames.add(name)) {
                malformed("duplicate parameter '" + name + "'");
                return true;
            }
            boolean isString = m.group(2).equals("true");
            buf.delete(0, m.end());
            pendingMarkup.setLength(0);
            emitArguments((params++ == 0 ? "{" : ", ") + PythonJson.quote(name) + ": " + (isString ? "\"" : ""));
            state = isString ? State.STRING_VALUE : State.RAW_VALUE;
            rawScanFrom = 0;
            return true;
        }
        if ((!eof || cutShort) && isProperPrefix(buf, V4Format.INVOKE_CLOSE, V4Format.PARAMETER_OPEN)) return false;
        malformed("expected " + V4Format.PARAMETER_OPEN + " or " + V4Format.INVOKE_CLOSE);
        return true;
    }

    /**
     * Matches a complete tag at the start of the buffer. Returns null when the tag is not complete yet (state
     * unchanged) or is malformed (state changed to plain content).
     */
    private Matcher tag(Pattern pattern, boolean eof) {
        int close = buf.indexOf(">");
        if (close < 0 || close >= TAG_LIMIT) {
            if (close < 0 && (!eof || cutShort) && buf.length() < TAG_LIMIT) return null;
            malformed(close < 0 && eof ? "unterminated tag" : "tag too long");
            return null;
        }
        Matcher m = pattern.matcher(buf.subSequence(0, close + 1));
        if (!m.matches()) {
            malformed("bad tag " + buf.substring(0, close + 1));
            return null;
        }
        return m;
    }

    /** A {@code string="true"} value: escaped and released as it arrives. */
    private boolean stringValue(boolean eof) {
        int at = buf.indexOf(V4Format.PARAMETER_CLOSE);
        if (at >= 0) {
            StringBuilder frag = new StringBuilder();
            PythonJson.escapeInto(buf, 0, at, frag);
            emitArguments(frag.append('"').toString());
            buf.delete(0, at + V4Format.PARAMETER_CLOSE.length());
            state = State.INVOKE;
            return true;
        }
        int keep = eof && !cutShort ? buf.length() : releasable(VALUE_STOPS, false);
        if (keep > 0) {
            StringBuilder frag = new StringBuilder();
            PythonJson.escapeInto(buf, 0, keep, frag);
            emitArguments(frag.toString());
            buf.delete(0, keep);
        }
        return false;
    }

    /** A {@code string="false"} value: released whole when its closing tag arrives. */
    private boolean rawValue() {
        int at = buf.indexOf(V4Format.PARAMETER_CLOSE, rawScanFrom);
        if (at < 0) {
            rawScanFrom = Math.max(0, buf.length() - V4Format.PARAMETER_CLOSE.length() + 1);
            return false;
        }
        rawScanFrom = 0;
        String raw = buf.substring(0, at);
        buf.delete(0, at + V4Format.PARAMETER_CLOSE.length());
        emitArguments(rawValue(raw));
        state = State.INVOKE;
        return true;
    }

    private String rawValue(String raw) {
        if (PythonJson.parseOrNull(raw) != null) return raw;
        warn("a string=\"false\" parameter is not valid JSON; it is passed as a string: " + abbreviate(raw));
        return PythonJson.quote(raw);
    }

    private boolean afterBlock() {
        skipWhitespace(null);
        if (buf.isEmpty()) return false;
        state = State.CONTENT;
        return true;
    }

    private boolean done() {
        if (!warnedAfterEos && !buf.toString().isBlank()) {
            warnedAfterEos = true;
            warn("text after the end-of-sentence token is ignored: " + abbreviate(buf.toString()));
        }
        buf.setLength(0);
        return false;
    }

    /**
     * Switches to plain content: closes the open tool call, if any, and releases the unconsumed markup as content.
     */
    private void malformed(String reason) {
        warn("malformed tool-call markup (" + reason + "); the rest of the output is plain content");
        if (state == State.INVOKE) {
            emitArguments(params == 0 ? "{}" : "}");
            out.add(new ToolCallEnd(calls - 1));
        }
        if (!pendingMarkup.isEmpty()) emitText(false, pendingMarkup.toString());
        pendingMarkup.setLength(0);
        state = State.PLAIN;
    }

    /**
     * How much of the buffer can be released: everything before the longest tail that is a proper prefix of a stop
     * (and, before a possible tool-call block, before up to two newlines), never splitting a surrogate pair.
     */
    private int releasable(String[] stops, boolean holdNewlines) {
        int len = buf.length();
        int keep = len;
        int longest = 0;
        for (String s : stops) longest = Math.max(longest, s.length());
        for (int i = Math.max(0, len - longest + 1); i < len && keep == len; i++) {
            for (String s : stops) {
                if (len - i < s.length() && regionEquals(buf, i, s, len - i)) {
                    keep = i;
                    break;
                }
            }
        }
        if (holdNewlines) {
            for (int n = 0; n < 2 && keep > 0 && buf.charAt(keep - 1) == '\n'; n++) keep--;
        }
        if (keep > 0 && Character.isHighSurrogate(buf.charAt(keep - 1))) keep--;
        return keep;
    }

    /** Length of the longest tail of the buffer that is a proper prefix of one of {@code stops}. */
    private int heldPrefix(String[] stops) {
        int len = buf.length();
        for (int i = Math.max(0, len - 64); i < len; i++)
            for (String s : stops) if (len - i < s.length() && regionEquals(buf, i, s, len - i)) return len - i;
        return 0;
    }

    private void skipWhitespace(StringBuilder into) {
        int n = 0;
        while (n < buf.length() && Character.isWhitespace(buf.charAt(n))) n++;
        if (n == 0) return;
        if (into != null) into.append(buf, 0, n);
        buf.delete(0, n);
    }

    private void emitText(boolean reasoning, String text) {
        if (text.isEmpty()) return;
        Event last = out.isEmpty() ? null : out.getLast();
        if (reasoning) {
            if (last instanceof ReasoningDelta r) out.set(out.size() - 1, new ReasoningDelta(r.text() + text));
            else out.add(new ReasoningDelta(text));
        } else {
            if (last instanceof ContentDelta c) out.set(out.size() - 1, new ContentDelta(c.text() + text));
            else out.add(new ContentDelta(text));
        }
    }

    private void emitArguments(String fragment) {
        if (fragment.isEmpty()) return;
        int index = calls - 1;
        Event last = out.isEmpty() ? null : out.getLast();
        if (last instanceof ToolCallArgumentsDelta a && a.index() == index) {
            out.set(out.size() - 1, new ToolCallArgumentsDelta(index, a.fragment() + fragment));
        } else {
            out.add(new ToolCallArgumentsDelta(index, fragment));
        }
    }

    private void warn(String message) {
        warnings.add(message);
        if (logWarnings) LOG.warn("DeepSeek-V4 output: {}", message);
    }

    /**
     * Says that constrained decoding lets the output hold only one tool call after any reasoning (a forced
     * {@code tool_choice}), so that newlines cut off before its block are dropped as its markup, not sent as content.
     */
    public OutputParser forcedToolCall(boolean on) {
        this.forcedToolCall = on;
        return this;
    }

    /**
     * Says that constrained decoding holds the content to a grammar (a regex, a choice, JSON): after any reasoning the
     * content is literal text, in which the end-of-sentence text or DSML markup is content the grammar allowed, not a
     * delimiter; only where {@code blockMayOpen} (tools offered beside the grammar) a tool-call block may take the
     * content's place, and only right where the content begins ({@code \n\n<｜DSML｜tool_calls>}).
     */
    public OutputParser heldContent(boolean blockMayOpen) {
        this.held = true;
        this.blockMayOpen = blockMayOpen;
        return this;
    }

    /**
     * Whether warnings are logged as they happen (default true). A caller that streams text to a terminal turns this
     * off and prints {@link #warnings()} itself once its output line is complete.
     */
    public OutputParser logWarnings(boolean on) {
        this.logWarnings = on;
        return this;
    }

    private static boolean startsWith(CharSequence s, String prefix) {
        return s.length() >= prefix.length() && regionEquals(s, 0, prefix, prefix.length());
    }

    private static boolean isProperPrefix(CharSequence s, String... candidates) {
        for (String c : candidates) if (s.length() < c.length() && regionEquals(s, 0, c, s.length())) return true;
        return false;
    }

    /** {@code s[from, from+n) == prefix[0, n)}. */
    private static boolean regionEquals(CharSequence s, int from, String prefix, int n) {
        for (int i = 0; i < n; i++) if (s.charAt(from + i) != prefix.charAt(i)) return false;
        return true;
    }

    private static String abbreviate(String s) {
        return s.length() <= 80 ? s : s.substring(0, 77) + "...";
    }

    private static String randomId() {
        String alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        ThreadLocalRandom r = ThreadLocalRandom.current();
        StringBuilder id = new StringBuilder("call_");
        for (int i = 0; i < 24; i++) id.append(alphabet.charAt(r.nextInt(alphabet.length())));
        return id.toString();
    }
}
