package io.ds4j.bench;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.ByteArrayOutputStream;
import java.io.UncheckedIOException;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.Flow;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.function.LongSupplier;
import java.util.stream.Stream;
import java.util.stream.StreamSupport;

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

    /** A line of a response with the clock at the read that completed it. */
    public record TimedLine(String text, long nanos) {}

    /** An event of a stream with the clock at the read that completed its line ({@link #timedLines}). */
    public record Arrival(JsonNode event, long nanos) {}

    /**
     * A body handler that gives the response's lines as they arrive, each with the clock at the network read that
     * completed it: lines that came in one read share one time, so a client can tell events sent together (or
     * coalesced on the way) from events that arrived apart. Reading them one by one off a line stream instead times
     * each by its parsing, a few microseconds apart within one read.
     */
    public static HttpResponse.BodyHandler<Stream<TimedLine>> timedLines(LongSupplier clock) {
        return info -> new TimedLineSubscriber(clock);
    }

    /** The events of timed lines, as {@link #of} parses them, each with its line's time. */
    public static Iterable<Arrival> ofTimed(Stream<TimedLine> body, ObjectMapper json) {
        return () -> body.filter(l -> l.text().startsWith("data: ") && !l.text().equals("data: [DONE]")).map(l -> {
            JsonNode j;
            try {
                j = json.readTree(l.text().substring(6));
            } catch (JsonProcessingException e) {
                throw new UncheckedIOException(e);
            }
            if (j.has("error")) throw new IllegalStateException(j.toString());
            return new Arrival(j, l.nanos());
        }).iterator();
    }

    /** Splits the body's bytes into lines at '\n' (never inside a UTF-8 character), timed per read; blocking reader side. */
    private static final class TimedLineSubscriber implements HttpResponse.BodySubscriber<Stream<TimedLine>> {
        private static final TimedLine END = new TimedLine(null, 0);
        private final LongSupplier clock;
        private final LinkedBlockingQueue<Object> lines = new LinkedBlockingQueue<>();
        private final ByteArrayOutputStream partial = new ByteArrayOutputStream();

        TimedLineSubscriber(LongSupplier clock) {
            this.clock = clock;
        }

        @Override
        public void onSubscribe(Flow.Subscription s) {
            s.request(Long.MAX_VALUE); // the reader takes lines as they come; a stream's body is small
        }

        @Override
        public void onNext(List<ByteBuffer> items) {
            long now = clock.getAsLong();
            for (ByteBuffer b : items) {
                while (b.hasRemaining()) {
                    byte c = b.get();
                    if (c == '\n') {
                        String line = partial.toString(StandardCharsets.UTF_8);
                        lines.add(new TimedLine(line.endsWith("\r") ? line.substring(0, line.length() - 1) : line, now));
                        partial.reset();
                    } else {
                        partial.write(c);
                    }
                }
            }
        }

        @Override
        public void onError(Throwable t) {
            lines.add(t);
        }

        @Override
        public void onComplete() {
            if (partial.size() > 0) lines.add(new TimedLine(partial.toString(StandardCharsets.UTF_8), clock.getAsLong()));
            lines.add(END);
        }

        @Override
        public CompletionStage<Stream<TimedLine>> getBody() {
            java.util.Iterator<TimedLine> it = new java.util.Iterator<>() {
                private TimedLine next;

                @Override
                public boolean hasNext() {
                    if (next == null) {
                        Object o;
                        try {
                            o = lines.take();
                        } catch (InterruptedException e) {
                            Thread.currentThread().interrupt();
                            throw new IllegalStateException("interrupted while reading the stream", e);
                        }
                        if (o instanceof Throwable t) throw new UncheckedIOException(t instanceof java.io.IOException io ? io
                                : new java.io.IOException(t));
                        next = (TimedLine) o;
                        if (next == END) lines.add(END); // later calls end too
                    }
                    return next != END;
                }

                @Override
                public TimedLine next() {
                    if (!hasNext()) throw new java.util.NoSuchElementException();
                    TimedLine l = next;
                    next = null;
                    return l;
                }
            };
            return CompletableFuture.completedFuture(StreamSupport.stream(
                    java.util.Spliterators.spliteratorUnknownSize(it, java.util.Spliterator.ORDERED), false));
        }
    }
}
