package io.ds4j.text.chat;

import io.ds4j.text.chat.ChatMessage.ToolCall;
import java.util.ArrayList;
import java.util.List;

/**
 * A finished assistant turn split into its parts.
 *
 * @param reasoning the reasoning text (empty in chat mode or when there was none)
 * @param content the visible answer text (empty when there was none)
 * @param toolCalls the tool calls in output order, arguments as JSON object text; never null
 */
public record ParsedOutput(String reasoning, String content, List<ToolCall> toolCalls) {

    /** Replaces nulls by empty values and copies the list. */
    public ParsedOutput {
        reasoning = reasoning == null ? "" : reasoning;
        content = content == null ? "" : content;
        toolCalls = toolCalls == null ? List.of() : List.copyOf(toolCalls);
    }

    /** Assembles the events of one {@link OutputParser} run (deltas concatenated, calls by index). */
    public static ParsedOutput fromEvents(List<OutputParser.Event> events) {
        StringBuilder reasoning = new StringBuilder();
        StringBuilder content = new StringBuilder();
        List<String> ids = new ArrayList<>();
        List<String> names = new ArrayList<>();
        List<StringBuilder> args = new ArrayList<>();
        for (OutputParser.Event e : events) {
            switch (e) {
                case OutputParser.ReasoningDelta r -> reasoning.append(r.text());
                case OutputParser.ContentDelta c -> content.append(c.text());
                case OutputParser.ToolCallStart s -> {
                    while (ids.size() <= s.index()) {
                        ids.add(null);
                        names.add(null);
                        args.add(new StringBuilder());
                    }
                    ids.set(s.index(), s.id());
                    names.set(s.index(), s.name());
                }
                case OutputParser.ToolCallArgumentsDelta a -> args.get(a.index()).append(a.fragment());
                case OutputParser.ToolCallEnd ignored -> { }
                case OutputParser.End ignored -> { }
            }
        }
        List<ToolCall> calls = new ArrayList<>(ids.size());
        for (int i = 0; i < ids.size(); i++) calls.add(new ToolCall(ids.get(i), names.get(i), args.get(i).toString()));
        return new ParsedOutput(reasoning.toString(), content.toString(), calls);
    }
}
