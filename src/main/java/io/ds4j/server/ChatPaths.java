package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.TextNode;
import io.ds4j.json.Json;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.function.Function;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Renames the chat paths in an error message for an API translated into chat (the Anthropic Messages API, OpenAI's
 * Responses API), leaving what the client wrote as it is: a model name, a call id or a schema's property name that
 * reads as a chat path is quoted in the message, and the client must recognise its own value.
 */
final class ChatPaths {
    private ChatPaths() {}

    /**
     * The client's strings (values and object keys of a translated chat body, which holds them as sent) in which
     * {@code chatPath} finds a chat path, each as sent and as a message shows it JSON-escaped.
     *
     * @param chat     the chat body the client's body was translated into
     * @param chatPath the chat paths the caller renames
     * @return the strings whose occurrences in a message are never renamed
     */
    static List<String> clientStrings(JsonNode chat, Pattern chatPath) {
        return clientStrings(chat, chatPath, java.util.Set.of());
    }

    /**
     * As {@link #clientStrings(JsonNode, Pattern)}, but for the object keys the translation wrote itself that the
     * pattern matches (chat's {@code messages}, {@code max_tokens}): a value of the client's that reads so is still the
     * client's.
     *
     * @param translationKeys the chat field names the translation writes that {@code chatPath} finds a path in
     */
    static List<String> clientStrings(JsonNode chat, Pattern chatPath, java.util.Set<String> translationKeys) {
        List<String> out = new ArrayList<>();
        ArrayDeque<JsonNode> todo = new ArrayDeque<>();
        todo.add(chat);
        while (!todo.isEmpty()) {
            JsonNode n = todo.pop();
            if (n.isTextual()) own(n.textValue(), chatPath, out);
            else if (n.isObject()) n.properties().forEach(f -> {
                if (!translationKeys.contains(f.getKey())) own(f.getKey(), chatPath, out);
                todo.push(f.getValue());
            });
            else if (n.isArray()) n.forEach(todo::push);
        }
        return out;
    }

    private static void own(String s, Pattern chatPath, List<String> out) {
        if (!chatPath.matcher(s).find()) return;
        out.add(s);
        String json = Json.write(TextNode.valueOf(s));
        out.add(json.substring(1, json.length() - 1));
    }

    /**
     * A message with every chat path renamed but those inside the client's own strings.
     *
     * @param s        the message
     * @param own      the client's strings ({@link #clientStrings})
     * @param chatPath the chat paths to rename
     * @param one      the client's name of one matched chat path
     * @return the message as the client's API words it
     */
    static String replace(String s, List<String> own, Pattern chatPath, Function<Matcher, String> one) {
        // the spans of s that are the client's own text
        boolean[] kept = new boolean[s.length()];
        for (String o : own)
            for (int i = s.indexOf(o); i >= 0; i = s.indexOf(o, i + 1))
                Arrays.fill(kept, i, i + o.length(), true);
        Matcher m = chatPath.matcher(s);
        StringBuilder out = new StringBuilder();
        while (m.find()) {
            boolean client = false;
            for (int i = m.start(); i < m.end() && !client; i++) client = kept[i];
            m.appendReplacement(out, Matcher.quoteReplacement(client ? m.group() : one.apply(m)));
        }
        m.appendTail(out);
        return out.toString();
    }

    /**
     * Chat's words for its pairing of tool calls and tool messages (ChatMessage's refusals of a tool message that answers
     * no call, a call answered twice, an id used twice), which an API translated into chat words in its own terms: a
     * Messages client sent tool_use and tool_result blocks, a Responses client function_call and function_call_output
     * items. Group 1 is the path of the message whose calls are meant, already renamed.
     */
    static final Pattern CALL_WORDS = Pattern.compile(
            "answers no tool call: a tool message follows the assistant message with the tool_calls it answers \\(or"
                    + " another tool message after it\\)|is not the id of a tool call of |\\(its tool calls: "
                    + "|each tool call of (\\S+) is answered by one tool message|is also the id of |each tool call has an id of its own");

    /**
     * Chat's wording of the unanswered tool calls as a translated API states them (ChatMessage's refusal, whose fixed
     * start and end are replaced, the ids and where in between kept). Only the server's fixed text is replaced, where it
     * stands (after the field, at the end), never what the client's values could hold.
     *
     * @param msg         the message, its field already renamed
     * @param param       the field it is about, renamed
     * @param unanswered  from the part between the refusal's fixed start and end ({@code " 'a' before messages[3]..."},
     *                    {@code "s 'a', 'b' ..."}) to the API's sentence, after "field: "
     */
    static String worded(String msg, String param, Function<String, String> unanswered) {
        if (param == null || !msg.startsWith(param + ":")) return msg;
        String rest = msg.substring(param.length()), head = ": " + io.ds4j.text.chat.ChatMessage.UNANSWERED,
                rule = io.ds4j.text.chat.ChatMessage.UNANSWERED_RULE;
        if (rest.startsWith(head) && rest.endsWith(rule))
            return param + ": " + unanswered.apply(rest.substring(head.length(), rest.length() - rule.length()));
        return msg;
    }
}
