package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import io.ds4j.json.Json;
import io.ds4j.json.TrackedObject;
import io.ds4j.server.config.ServerConfig;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The fields of a request body that its endpoint did not read: misspellings ({@code max_token}) and fields of other
 * APIs, which would otherwise be dropped without a word while the request runs on defaults.
 *
 * <p>There is no list of known fields to keep up to date: every JSON object of a body is a {@link TrackedObject} node
 * ({@link Json#read} builds them), which records the names the parser asks it for, and a field is unread when the
 * parser never asked for its name. The names asked for are also what a misspelling is compared with for its "did you
 * mean". Only objects the parser looked into are judged: one it never opened (the {@code tools} of a request with
 * {@code tool_choice: "none"}) was skipped as a whole, knowingly. A field whose value is null is never reported: null
 * means "not given" throughout the API, so it asks for nothing that is then withheld. A few fields are read only to
 * check their type and change nothing ({@link #READ_UNUSED}), or ask for something this server does not do when true
 * ({@link #IGNORED_WHEN_TRUE}): they are reported as unread ones are.
 */
final class RequestFields {
    private RequestFields() {}

    /** The response header that lists the fields a request's endpoint ignored. */
    static final String HEADER = "x-ds4j-ignored-fields";

    /** At most this many fields are named in the header, the log line and the refusal (then "and N more"). */
    static final int MAX_LISTED = 8;

    /** A field name longer than this gets no suggestion: the edit distance costs its length times each name's. */
    private static final int MAX_NAME = 64;

    /**
     * Fields of OpenAI's API that are accepted and deliberately ignored, by path ({@code []} for any array index): they
     * concern OpenAI's platform or bookkeeping, not the answer, and common clients send them unasked, so a warning
     * about them would only be noise. A field that would change the answer (audio, web search) is not here:
     * ignoring it is worth a warning.
     */
    static final Set<String> ACCEPTED = Set.of(
            // the end user, for OpenAI's abuse monitoring (safety_identifier is its newer name)
            "user", "safety_identifier",
            // OpenAI's stored completions and their tags: this server stores nothing (a store that is true is named
            // all the same: IGNORED_WHEN_TRUE)
            "store", "metadata",
            // OpenAI's processing tier: this server has one
            "service_tier",
            // a routing hint for OpenAI's prompt cache: this server's prefix cache finds prefixes by their tokens
            "prompt_cache_key",
            // citations OpenAI returns on an assistant message, which SDKs send back with the history; output only
            "messages[].annotations");

    /**
     * Fields the parser reads, to check them as OpenAI types them, that change nothing, by path pattern, with why:
     * named as ignored all the same, since the answer does not depend on them, as on a field the endpoint never reads.
     */
    static final Map<String, String> READ_UNUSED = Map.of(
            // OpenAI's participant name: DeepSeek-V4's encoding renders a message's role and content, nothing else of it
            "messages[].name", "not rendered: DeepSeek-V4's chat format has no place for a message's name");

    /**
     * Boolean fields of OpenAI's API whose {@code true} asks for something this server does not do, by path pattern,
     * with why. False asks for nothing and is accepted silently, as an {@link #ACCEPTED} field is; true is named as an
     * ignored field is, since the client expects something of it that never happens.
     */
    static final Map<String, String> IGNORED_WHEN_TRUE = Map.of(
            // OpenAI's stored completions (and stored responses), which a client could fetch later
            "store", "this server stores nothing");

    /**
     * Hints for sampling fields of vLLM's API that chat and completions do not take, by name: said instead of a "did you
     * mean" of a name that only looks alike ({@code min_tokens} is no misspelt {@code max_tokens}).
     */
    static final Map<String, String> VLLM_UNSUPPORTED = Map.of(
            "bad_words", "vLLM's bad_words is not supported (logit_bias can ban token ids)",
            "prompt_logprobs", "vLLM's prompt_logprobs is not supported (echo with logprobs on /v1/completions scores the prompt)",
            "truncate_prompt_tokens", "vLLM's truncate_prompt_tokens is not supported: a prompt over the context is a 400",
            "use_beam_search", "beam search is not supported",
            "length_penalty", "beam search is not supported",
            "spaces_between_special_tokens", "not supported: special tokens are skipped or shown as written (skip_special_tokens)");

    /**
     * A field the endpoint did not read.
     *
     * @param path where it is, as error messages name fields ({@code stream_options.include_usge},
     *             {@code messages[0].nmae})
     * @param hint what it most likely meant ({@code did you mean messages[0].name?}), or what the endpoint has instead
     *             of it, or null
     */
    record Ignored(String path, String hint) {
        /** {@code max_token (did you mean max_tokens?)}, printable ASCII only (it goes into a header). */
        String text() {
            return shown(path) + (hint != null ? " (" + shown(hint) + ")" : "");
        }
    }

    /**
     * The fields of a body its endpoint did not read, in document order: the first {@link #MAX_LISTED} of them, and
     * how many there are.
     */
    record Report(List<Ignored> fields, int total) {
        boolean isEmpty() {
            return total == 0;
        }
    }

    /**
     * A node still to look at, with its path and its path's pattern ({@code []} for indexes, as {@link #ACCEPTED}'s);
     * or, with an {@code owner}, a field of it to report, named {@code name}.
     */
    private record Pending(JsonNode node, String path, String pattern, TrackedObject owner, String name) {}

    /**
     * What a body's endpoint did not read; call it after the endpoint's last read of the body. Empty for a body that
     * is not an object.
     */
    static Report report(JsonNode body) {
        return report(body, java.util.Map.of());
    }

    /**
     * {@link #report(JsonNode)}, with the endpoint's own hints for fields it knows it has not: by the field's path
     * pattern ({@code []} for any index), the hint said instead of a "did you mean" (another API's name for one of its
     * fields: {@code max_tokens} on the Responses API, whose field is {@code max_output_tokens}, a name no edit distance
     * would find).
     */
    static Report report(JsonNode body, Map<String, String> hints) {
        return report(body, hints, ACCEPTED, IGNORED_WHEN_TRUE);
    }

    /**
     * {@link #report(JsonNode, Map)} of an API whose fields accepted silently and fields named only when true are its own
     * ({@link TranslatedRequest#acceptedFields}): another API's body, which may not have OpenAI's platform fields.
     * @param accepted        the fields accepted and deliberately ignored, as {@link #ACCEPTED}
     * @param ignoredWhenTrue the boolean fields named when true, with why, as {@link #IGNORED_WHEN_TRUE}
     */
    static Report report(JsonNode body, Map<String, String> hints, Set<String> accepted, Map<String, String> ignoredWhenTrue) {
        List<Ignored> out = new ArrayList<>();
        int total = 0;
        // depth first in document order, iteratively like the tree's reader: a deeply nested body costs no stack
        Deque<Pending> todo = new ArrayDeque<>();
        todo.push(new Pending(body, "", "", null, null));
        while (!todo.isEmpty()) {
            Pending t = todo.pop();
            if (t.owner() != null) {
                if (++total <= MAX_LISTED) {
                    String hint = READ_UNUSED.getOrDefault(t.pattern(), ignoredWhenTrue.getOrDefault(t.pattern(), hints.get(t.pattern())));
                    if (hint == null) {
                        String meant = suggestion(t.path(), t.name(), t.owner());
                        hint = meant == null ? null : "did you mean " + meant + "?";
                    }
                    out.add(new Ignored(t.path(), hint));
                }
            } else if (t.node() instanceof TrackedObject o) {
                if (o.usedWhole() || o.askedNone()) continue;
                List<Pending> next = new ArrayList<>();
                for (Map.Entry<String, JsonNode> e : o.children()) {
                    String name = e.getKey();
                    // an empty name is shown as "" (the header, the log and the 400 would otherwise name nothing)
                    String seg = name.isEmpty() ? "\"\"" : name;
                    String path = t.path().isEmpty() ? seg : t.path() + "." + seg;
                    String pattern = t.pattern().isEmpty() ? name : t.pattern() + "." + name;
                    JsonNode v = e.getValue();
                    boolean unused = !v.isNull() && READ_UNUSED.containsKey(pattern)
                            || v.isBoolean() && v.booleanValue() && ignoredWhenTrue.containsKey(pattern);
                    if (o.wasAsked(name) && !unused) next.add(new Pending(e.getValue(), path, pattern, null, null));
                    else if (unused || !e.getValue().isNull() && !accepted.contains(pattern)) next.add(new Pending(null, path, pattern, o, seg));
                }
                for (int i = next.size() - 1; i >= 0; i--) todo.push(next.get(i));
            } else if (t.node() instanceof ArrayNode a) {
                // only objects hold fields: a prompt's 100,000 token ids are passed over
                for (int i = a.size() - 1; i >= 0; i--)
                    if (a.get(i).isContainerNode()) todo.push(new Pending(a.get(i), t.path() + "[" + i + "]", t.pattern() + "[]", null, null));
            }
        }
        return new Report(List.copyOf(out), total);
    }

    /**
     * The path of the name among those the parser asked {@code owner} for that the field at {@code path} (named
     * {@code name}) most likely meant, or null.
     */
    private static String suggestion(String path, String name, TrackedObject owner) {
        if (name.length() > MAX_NAME) return null;
        String best = ServerConfig.closest(name, owner.askedNames());
        return best == null ? null : path.substring(0, path.length() - name.length()) + best;
    }

    /**
     * The fields as the header and the log line list them: {@code max_token (did you mean max_tokens?), temprature
     * (did you mean temperature?)}, the first {@link #MAX_LISTED}, then {@code and N more}.
     */
    static String list(Report r) {
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < r.fields().size(); i++) {
            if (i > 0) b.append(", ");
            b.append(r.fields().get(i).text());
        }
        if (r.total() > MAX_LISTED) b.append(", and ").append(r.total() - MAX_LISTED).append(" more");
        return b.toString();
    }

    /**
     * The refusal under server.rejectUnknownFields, worded as OpenAI's ({@code Unrecognized request argument
     * supplied: max_token}) with the suggestion; param names the first field.
     */
    static ApiException refusal(Report r) {
        String what = r.total() == 1 ? "Unrecognized request argument supplied: " : "Unrecognized request arguments supplied: ";
        return new ApiException(400, "invalid_request_error", null, r.fields().getFirst().path(), what + list(r), null);
    }

    /**
     * Marks a part of a body as used whole: the parser passes it on as it is (the chat template renders a tool's
     * function object and a response format into the prompt, where every field of theirs reaches the model), so no
     * field of it is unread, though the parser asked for a few names only.
     */
    static void usedWhole(JsonNode n) {
        if (n instanceof TrackedObject o) o.useWhole();
    }

    /** A path shown longer than this is cut: the header stays small whatever names a body has. */
    private static final int MAX_SHOWN = 128;

    /** A path as the header shows it: printable ASCII, other characters as {@code \}{@code uXXXX}, cut when long. */
    private static String shown(String path) {
        String s = path.length() > MAX_SHOWN ? path.substring(0, MAX_SHOWN) : path;
        StringBuilder b = new StringBuilder(s.length());
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c >= 0x20 && c < 0x7f) b.append(c);
            else b.append(String.format("\\u%04x", (int) c));
        }
        return path.length() > MAX_SHOWN ? b + "..." : b.toString();
    }
}
