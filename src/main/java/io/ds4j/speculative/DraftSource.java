package io.ds4j.speculative;

import io.ds4j.engine.Draft;
import io.ds4j.sampling.SamplingParams;

/** Creates per-request {@link Draft}s: a draft model, or n-gram prompt lookup. */
public interface DraftSource extends AutoCloseable {
    /** Short description for logs and /props ("ngram", "model:/path"). */
    String name();

    /**
     * A draft for one request.
     * @param prompt the request's prompt tokens
     * @param params the request's sampling settings (a model draft samples its proposals with them)
     * @param seed seed for the draft's own random stream
     */
    Draft open(int[] prompt, SamplingParams params, long seed);

    /**
     * The longest context (tokens) the draft can hold: a draft model's {@code max_position_embeddings}. Beyond it a
     * generation decodes without drafts. Unlimited by default (n-gram lookup needs no positions).
     */
    default int maxContext() {
        return Integer.MAX_VALUE;
    }

    @Override
    default void close() {}
}
