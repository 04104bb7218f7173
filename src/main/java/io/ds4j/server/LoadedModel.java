package io.ds4j.server;

import io.ds4j.engine.Backend;
import io.ds4j.speculative.DraftSource;
import io.ds4j.text.Tokenizer;

/**
 * A model ready to serve: the backend the engine owns, the tokenizer (thread-safe, shared with the HTTP side) and
 * the draft source for speculative decoding.
 *
 * @param id       model id clients use ({@code /v1/models}, the request's {@code model})
 * @param path     the model folder
 * @param embedded true for the embedded default (a random preset model)
 * @param backend  owned by the engine thread
 * @param tokenizer thread-safe
 * @param draft    null when speculative decoding is off ("none")
 */
public record LoadedModel(String id, String path, boolean embedded, Backend backend, Tokenizer tokenizer,
                          DraftSource draft) implements AutoCloseable {

    /** What the HTTP side may see of the model (no backend; its status is an immutable snapshot). */
    public ModelInfo info() {
        var c = backend.config();
        return new ModelInfo(id, path, embedded, backend.name(), tokenizer, c.vocabSize, c.maxPositionEmbeddings,
                c.numLayers, c.hidden, c.numExperts, draft == null ? "none" : draft.name(), backend.status());
    }

    @Override
    public void close() {
        try {
            if (draft != null) draft.close();
        } catch (Exception ignored) {
            // closing at shutdown; nothing to do about it
        }
        backend.close();
    }
}
