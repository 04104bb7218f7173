package io.ds4j.bench;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.UncheckedIOException;
import java.util.stream.Stream;

/**
 * The JSON events of a streamed chat or completion response (server-sent events, OpenAI's framing): every
 * {@code data: {...}} line up to {@code data: [DONE]}, parsed, for the benchmark clients that read them.
 */
public final class SseEvents {
    private SseEvents() {}

    /**
     * The events of body (the response's lines), parsed lazily as the caller iterates, so that a caller timing each
     * event sees it when its line arrives. Other lines (blank separators, comments) are skipped.
     * @throws IllegalStateException (while iterating) for an event that carries an error, with its JSON as the message
     * @throws UncheckedIOException (while iterating) for a data line that is not JSON
     */
    public static Iterable<JsonNode> of(Stream<String> body, ObjectMapper json) {
        return () -> body.filter(l -> l.startsWith("data: ") && !l.equals("data: [DONE]")).map(l -> {
            JsonNode j;
            try {
                j = json.readTree(l.substring(6));
            } catch (JsonProcessingException e) {
                throw new UncheckedIOException(e);
            }
            if (j.has("error")) throw new IllegalStateException(j.toString());
            return j;
        }).iterator();
    }
}
