package io.ds4j.server;

import io.ds4j.text.Tokenizer;

/**
 * The model facts the HTTP side uses (ids, limits, the tokenizer); never the backend or any sequence state.
 *
 * @param maxPositions the model's own context limit (max_position_embeddings)
 * @param draft        the draft source's name ("none", "ngram", "model:DIR")
 */
public record ModelInfo(String id, String path, boolean embedded, String backend, Tokenizer tokenizer, int vocabSize,
                        int maxPositions, int layers, int hidden, int experts, String draft) {}
